package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
)

// LostAnswer sends an AWS request to its server, lets the server apply it, and drops the answer:
// the client gets the 500 the service sends for an internal error (DynamoDB InternalServerError,
// SQS InternalFailure, EC2 InternalError) instead. This is what real AWS does now and then (a
// write applied and answered 500, a connection dropped before the answer arrived: "the request
// may or may not have succeeded"), and the SDK retries the same request. A conditional write's
// retry then fails its condition against its own first attempt.
//
// Only first attempts lose their answer (the SDK's amz-sdk-request header says which attempt a
// request is), so every retry is answered and the SDK's attempts are never exhausted by this fault
// alone. GitHub requests (no AWS signature) pass.
type LostAnswer struct {
	// Conditional loses the answer of the first attempt of every conditional write: a request
	// whose context names a conditional write (internal/condwrite), or any other DynamoDB request
	// with a ConditionExpression (counted as an unnamed write: a write condwrite does not list).
	Conditional bool
	// Share is the part of the other first attempts of DynamoDB, SQS and EC2 requests whose answer
	// is lost, drawn with Rand.
	Share float64
	// Rand draws the requests that lose their answer (nil: math/rand/v2's global source).
	Rand *rand.Rand
	// Hang, when set, holds a lost answer that long, or until the request's context ends (the
	// client's deadline, which then fails the attempt), instead of answering 500 at once: the
	// "slow" fault, an answer that hangs past every deadline.
	Hang time.Duration
	Base http.RoundTripper

	mu     sync.Mutex
	lost   map[string]int // request name -> answers lost
	writes map[string]int // conditional write -> answers lost
}

// RoundTrip sends the request and, when it is drawn, drops the answer.
func (l *LostAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	base := l.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") || !firstAttempt(r) {
		return base.RoundTrip(r)
	}
	var raw []byte
	if r.Body != nil {
		var err error
		if raw, err = io.ReadAll(r.Body); err != nil {
			return nil, fmt.Errorf("lost answer: reading the request: %w", err)
		}
		_ = r.Body.Close()
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	}
	name, write := requestName(r, raw)
	if !l.draw(write != "") {
		return base.RoundTrip(r)
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		return nil, err // not applied as far as anyone can tell: nothing to lose
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	l.record(name, write)
	if l.Hang > 0 {
		t := time.NewTimer(l.Hang)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return internalError(r, name), nil
}

func (l *LostAnswer) draw(conditional bool) bool {
	if conditional && l.Conditional {
		return true
	}
	if l.Share <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Rand != nil {
		return l.Rand.Float64() < l.Share
	}
	return rand.Float64() < l.Share
}

func (l *LostAnswer) record(name, write string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost, l.writes = map[string]int{}, map[string]int{}
	}
	l.lost[name]++
	if write != "" {
		l.writes[write]++
	}
}

// Lost is how many answers were dropped, by request name ("DynamoDB_20120810.UpdateItem",
// "AmazonSQS.SendMessage", "EC2.CreateFleet").
func (l *LostAnswer) Lost() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.lost))
	for k, v := range l.lost {
		out[k] = v
	}
	return out
}

// Writes is how many answers of each distinct conditional write were dropped, a write named by
// its condwrite name, or, for a conditional request that carries none, "unnamed " followed by its
// operation, the kind of item (the partition key's prefix) and its condition.
func (l *LostAnswer) Writes() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.writes))
	for k, v := range l.writes {
		out[k] = v
	}
	return out
}

// firstAttempt: the SDK numbers its attempts in the amz-sdk-request header ("attempt=1; max=3").
func firstAttempt(r *http.Request) bool {
	h := r.Header.Get("Amz-Sdk-Request")
	return h == "" || strings.HasPrefix(h, "attempt=1;") || h == "attempt=1"
}

var placeholder = regexp.MustCompile(`:[A-Za-z]+[0-9]*`)

// requestName names an AWS request and, for a conditional DynamoDB write, the write: the name its
// context carries (condwrite), else "unnamed" with the operation, item kind, and condition with its
// value placeholders blanked.
func requestName(r *http.Request, body []byte) (name, write string) {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		if !strings.HasPrefix(t, "DynamoDB_") {
			return t, ""
		}
		if n, ok := condwrite.From(r.Context()); ok {
			return t, string(n)
		}
		var in struct {
			ConditionExpression string
			Key, Item           map[string]json.RawMessage
		}
		if json.Unmarshal(body, &in) != nil || in.ConditionExpression == "" {
			return t, ""
		}
		var pk struct{ S string }
		if json.Unmarshal(in.Key["pk"], &pk) != nil || pk.S == "" {
			_ = json.Unmarshal(in.Item["pk"], &pk)
		}
		kind, _, _ := strings.Cut(pk.S, "#")
		op := t[strings.IndexByte(t, '.')+1:]
		return t, fmt.Sprintf("unnamed %s %s %s", op, kind, placeholder.ReplaceAllString(in.ConditionExpression, ":v"))
	}
	for part := range strings.SplitSeq(string(body), "&") {
		if a, ok := strings.CutPrefix(part, "Action="); ok {
			return "EC2." + a, ""
		}
	}
	return r.Method + " " + r.URL.Path, ""
}

// internalError is the 500 each service answers for an internal error, in its protocol.
func internalError(r *http.Request, name string) *http.Response {
	status := http.StatusInternalServerError
	header := http.Header{"X-Amzn-Requestid": {"lost-answer"}}
	var body string
	switch {
	case strings.HasPrefix(name, "EC2."):
		header.Set("Content-Type", "text/xml;charset=UTF-8")
		body = `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>InternalError</Code>` +
			`<Message>An internal error has occurred (answer lost by the fault matrix)</Message></Error></Errors>` +
			`<RequestID>lost-answer</RequestID></Response>`
	default:
		code := "InternalServerError"
		if strings.HasPrefix(name, "AmazonSQS.") {
			code = "InternalFailure"
		}
		header.Set("Content-Type", "application/x-amz-json-1.0")
		header.Set("X-Amzn-Errortype", code)
		body = fmt.Sprintf(`{"__type":"com.amazonaws.%s#%s","message":"answer lost by the fault matrix"}`, service(name), code)
	}
	return &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: header,
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}
