// Package faults holds the fault matrix (the tests, built with -tags faults: `make faults`) and the
// transports it injects faults with. A reconciler replica in the matrix gets its AWS and GitHub
// clients over these transports:
//
//   - Crash counts every HTTP request the replica sends (AWS calls, retries included, and GitHub
//     calls) and, at request N, "kills the process": that request and every later one fail at
//     once, before reaching any server, so nothing the replica does after N has any effect, as
//     if it had disappeared. Its goroutines are abandoned, not rolled back.
//   - Inject answers a share of DynamoDB and SQS requests itself, with the throttling or 5xx
//     errors those services send, to exercise the SDK's retries and the callers' error paths
//     (EC2's are injected by the EC2 server's own fault hooks).
//   - LostAnswer lets DynamoDB, SQS or EC2 apply a request and drops its answer, so the SDK
//     retries a request that was applied (lost.go).
package faults

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrCrashed is what every request of a crashed replica fails with. It says it is a cancellation
// (CanceledError), so the AWS SDK's retryer gives up at once instead of retrying a dead process's
// calls.
var ErrCrashed = &crashedError{}

type crashedError struct{}

func (*crashedError) Error() string       { return "replica crashed (fault injection)" }
func (*crashedError) CanceledError() bool { return true }

// Crash is the kill switch of one replica.
type Crash struct {
	at     int64
	base   http.RoundTripper
	calls  atomic.Int64
	dead   atomic.Bool
	once   sync.Once
	killed chan struct{}
	mu     sync.Mutex
	last   string // the request that was cut
}

// NewCrash returns a kill switch that fires at request at (1-based); 0 never fires on its own
// (Kill still does). base is the real transport (nil: http.DefaultTransport).
func NewCrash(at int, base http.RoundTripper) *Crash {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Crash{at: int64(at), base: base, killed: make(chan struct{})}
}

// RoundTrip sends the request unless the replica is dead or this request kills it.
func (c *Crash) RoundTrip(r *http.Request) (*http.Response, error) {
	n := c.calls.Add(1)
	if c.dead.Load() || (c.at > 0 && n >= c.at) {
		c.kill(describe(r))
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, ErrCrashed
	}
	return c.base.RoundTrip(r)
}

// Kill crashes the replica now.
func (c *Crash) Kill() { c.kill("Kill") }

func (c *Crash) kill(what string) {
	c.once.Do(func() {
		c.mu.Lock()
		c.last = what
		c.mu.Unlock()
		c.dead.Store(true)
		close(c.killed)
	})
}

// Calls is the number of requests the replica tried to send (the one that killed it included).
func (c *Crash) Calls() int { return int(c.calls.Load()) }

// Killed is closed when the replica crashed.
func (c *Crash) Killed() <-chan struct{} { return c.killed }

// Dead reports whether the replica crashed.
func (c *Crash) Dead() bool { return c.dead.Load() }

// Cut names the request the crash cut (e.g. "DynamoDB_20120810.UpdateItem", "EC2.CreateFleet",
// "GitHub POST /repos/acme/app/actions/runners/registration-token").
func (c *Crash) Cut() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// HTTPClient is an HTTP client over the kill switch, for AWS and GitHub clients.
func (c *Crash) HTTPClient() *http.Client { return &http.Client{Transport: c} }

// describe names an AWS or GitHub request for reports. It may consume the body.
func describe(r *http.Request) string {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		return t
	}
	// An EC2 Query API call names its action in the form body. The request is failing anyway: its
	// body can be read.
	if strings.Contains(r.Header.Get("Content-Type"), "x-www-form-urlencoded") && r.Body != nil {
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		for part := range strings.SplitSeq(string(raw), "&") {
			if a, ok := strings.CutPrefix(part, "Action="); ok {
				return "EC2." + a
			}
		}
	}
	return r.Method + " " + r.URL.Path
}

// Inject answers every Every-th DynamoDB and SQS request (JSON protocols: an X-Amz-Target header)
// with an error of Kind instead of sending it. Other requests pass.
type Inject struct {
	// Every is the period: 10 answers one request in ten (10%), spread evenly so runs are
	// reproducible. 0 injects nothing.
	Every int64
	// Kind is KindThrottle or KindServerError.
	Kind string
	Base http.RoundTripper

	n        atomic.Int64
	injected atomic.Int64
}

// Kinds of injected errors.
const (
	// KindThrottle: HTTP 400 ThrottlingException, which the SDK retries with backoff.
	KindThrottle = "throttle"
	// KindServerError: HTTP 500 InternalServerError (DynamoDB) / InternalFailure (SQS).
	KindServerError = "5xx"
)

// RoundTrip injects or sends.
func (in *Inject) RoundTrip(r *http.Request) (*http.Response, error) {
	base := in.Base
	if base == nil {
		base = http.DefaultTransport
	}
	target := r.Header.Get("X-Amz-Target")
	if in.Every <= 0 || target == "" || in.n.Add(1)%in.Every != 0 {
		return base.RoundTrip(r)
	}
	if r.Body != nil {
		_ = r.Body.Close()
	}
	in.injected.Add(1)
	status, code := http.StatusBadRequest, "ThrottlingException"
	if in.Kind == KindServerError {
		status, code = http.StatusInternalServerError, "InternalServerError"
		if strings.HasPrefix(target, "AmazonSQS.") {
			code = "InternalFailure"
		}
	}
	body := fmt.Sprintf(`{"__type":"com.amazonaws.%s#%s","message":"injected by the fault matrix"}`, service(target), code)
	return &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Errortype": {code},
			"X-Amzn-Requestid": {fmt.Sprintf("injected-%d", in.injected.Load())},
		},
		Body: io.NopCloser(bytes.NewReader([]byte(body))), ContentLength: int64(len(body)), Request: r,
	}, nil
}

// Injected is how many requests were answered with an injected error.
func (in *Inject) Injected() int { return int(in.injected.Load()) }

func service(target string) string {
	s, _, _ := strings.Cut(target, ".")
	return strings.ToLower(strings.SplitN(s, "_", 2)[0])
}

// Chain puts the transports in order: crash (when set) sees a request first, then inject (when
// set), then base (nil: http.DefaultTransport) sends it.
func Chain(base http.RoundTripper, crash *Crash, inject *Inject) http.RoundTripper {
	rt := base
	if rt == nil {
		rt = http.DefaultTransport
	}
	if inject != nil {
		inject.Base = rt
		rt = inject
	}
	if crash != nil {
		crash.base = rt
		rt = crash
	}
	return rt
}
