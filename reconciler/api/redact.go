// What leaves the API as text. Callers are workflows of allowed repositories, not operators: an
// answer carries a stable code, the request id and a message about their request, never the
// deployment's internals. The domain's messages (a provision's cause, a release's reasons, what
// was undone) are built for operators and may quote AWS error text (operation, request id), queue
// URLs (which hold the account id), ARNs or addresses; redact removes those, and the whole text
// goes to the log with the request id instead.
package api

import (
	"regexp"
	"strings"
)

const redacted = "[redacted]"

// maxPublicText bounds one message in an answer.
const maxPublicText = 1024

var (
	// The AWS SDK's errors: "operation error SQS: SendMessage, https response error StatusCode:
	// 400, RequestID: ..., api error AccessDenied: ...", up to the end of that error's text (the
	// domain joins further text with "; ").
	awsErrorRE = regexp.MustCompile(`(?:operation error|https response error|api error|exceeded maximum number of attempts)[^;]*`)
	urlRE      = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>;,()]+`)
	arnRE      = regexp.MustCompile(`\barn:[A-Za-z0-9-]+:[^\s"'<>;,()]*`)
	requestRE  = regexp.MustCompile(`(?i)\b(?:x-amzn-)?request[ _-]?id\s*[:=]\s*[A-Za-z0-9-]+`)
	ipv4RE     = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b`)
	// A 12-digit number standing alone is taken for an account id. Run keys ("4242:123:1") and
	// instance ids keep their digits.
	accountRE = regexp.MustCompile(`(^|[^A-Za-z0-9:_.-])\d{12}($|[^A-Za-z0-9:_.-])`)
)

// redact returns s without AWS error text, URLs, ARNs, request ids, IP addresses and account ids,
// bounded in length.
func redact(s string) string {
	if s == "" {
		return s
	}
	s = awsErrorRE.ReplaceAllString(s, "an AWS request failed")
	s = urlRE.ReplaceAllString(s, redacted)
	s = arnRE.ReplaceAllString(s, redacted)
	s = requestRE.ReplaceAllString(s, redacted)
	s = ipv4RE.ReplaceAllString(s, redacted)
	for range 2 { // adjacent matches share a separator: a second pass takes the other
		s = accountRE.ReplaceAllString(s, "${1}"+redacted+"${2}")
	}
	if len(s) > maxPublicText {
		s = strings.ToValidUTF8(s[:maxPublicText], "") + "..."
	}
	return s
}
