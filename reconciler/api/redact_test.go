package api

import "testing"

// TestRedact: what redact removes from the domain's messages, and what it keeps (run keys,
// instance ids, states, the message's own words).
func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"released run 4242:123456789012:1: 2 pooled", "released run 4242:123456789012:1: 2 pooled"},
		{"runner i-0123456789abcdef0 did not register in 3m0s", "runner i-0123456789abcdef0 did not register in 3m0s"},
		{"deregistered by the agent, in pool https://sqs.eu-west-1.amazonaws.com/123456789012/pool-linux",
			"deregistered by the agent, in pool [redacted]"},
		{"sending: operation error SQS: SendMessage, https response error StatusCode: 400, RequestID: 5f1e-aa, api error AccessDenied: User: arn:aws:sts::123456789012:assumed-role/x is not authorized; left running",
			"sending: an AWS request failed; left running"},
		{"role arn:aws:iam::123456789012:role/runnerpool denied", "role [redacted] denied"},
		{"x-amzn-RequestId: 0f0e-11 throttled", "[redacted] throttled"},
		{"dial tcp 10.1.2.3:443: connection refused", "dial tcp [redacted]: connection refused"},
		{"account 123456789012 has no quota", "account [redacted] has no quota"},
		{"accounts 123456789012,210987654321", "accounts [redacted],[redacted]"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	if got := redact(string(long)); len(got) > maxPublicText+3 {
		t.Errorf("a long message is %d bytes after redact", len(got))
	}
}
