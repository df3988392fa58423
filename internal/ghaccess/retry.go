// This file holds the transport every GitHub request goes through: each attempt has its own
// timeout, and the answers GitHub documents as "try again later" (the primary rate limit, the
// secondary one, 5xx) and network errors are retried after the wait GitHub asks for, bounded by the
// caller's deadline. The rules are those of GitHub's "Rate limits for the REST API":
//   - x-ratelimit-remaining: 0 on a 403 or 429 is the primary limit: wait until x-ratelimit-reset;
//   - retry-after on a 403 or 429 is the secondary limit: wait that many seconds;
//   - a secondary limit without either: wait at least a minute.

package ghaccess

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// retryTransport retries what GitHub asks to be retried. It sits under go-github and ghinstallation,
// so that go-github only sees the final answer (and only then records a rate limit it would enforce
// on the client's later calls).
type retryTransport struct {
	base    http.RoundTripper
	attempt time.Duration // timeout of one attempt
	maxWait time.Duration // cap of one wait, and of all waits when the caller has no deadline
	log     *slog.Logger
	now     func() time.Time
}

// backoffBase is the first wait after a 5xx or a network error; it doubles per attempt up to
// backoffMax.
const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 15 * time.Second
	minWait     = 250 * time.Millisecond // a retry-after or reset in the past
)

// RoundTrip implements http.RoundTripper.
func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = t.now().Add(t.maxWait)
	}
	for attempt := 1; ; attempt++ {
		resp, err := t.once(req)
		if ctx.Err() != nil {
			return resp, err
		}
		wait, why := t.classify(resp, err, attempt)
		if why == "" {
			return resp, err
		}
		if wait > t.maxWait {
			t.log.WarnContext(ctx, "github asked for an absurd wait, capped", "method", req.Method, "path", req.URL.Path, "reason", why, "asked", wait, "capped", t.maxWait)
			wait = t.maxWait
			capRetryAfter(resp, wait)
		}
		if t.now().Add(wait).After(deadline) || (attempt > 1 && req.Body != nil && req.GetBody == nil) {
			t.log.WarnContext(ctx, "github still refusing at the caller's deadline, giving up", "method", req.Method, "path", req.URL.Path, "reason", why, "attempt", attempt, "wait", wait.Round(time.Millisecond))
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		t.log.WarnContext(ctx, "github call refused, retrying", "method", req.Method, "path", req.URL.Path, "reason", why, "attempt", attempt, "wait", wait.Round(time.Millisecond))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("waiting to retry %s %s (%s): %w", req.Method, req.URL.Path, why, ctx.Err())
		case <-timer.C:
		}
		if req, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// once makes one attempt under its own timeout; the timeout's context lives until the body is closed.
func (t *retryTransport) once(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), t.attempt)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// rewind returns req ready to be sent again (a fresh body).
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.GetBody == nil {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("rewinding the body of %s %s: %w", req.Method, req.URL.Path, err)
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, nil
}

// classify says whether an answer is to be retried ("" when not), and after how long.
func (t *retryTransport) classify(resp *http.Response, err error, attempt int) (time.Duration, string) {
	if err != nil {
		var ne interface{ Timeout() bool }
		if (errors.As(err, &ne) && ne.Timeout()) || isConnError(err) {
			return backoff(attempt), "network error: " + err.Error()
		}
		return 0, ""
	}
	h := resp.Header
	switch {
	case resp.StatusCode >= 500:
		if d, ok := retryAfter(h); ok {
			return d, fmt.Sprintf("server error %d with retry-after", resp.StatusCode)
		}
		return backoff(attempt), fmt.Sprintf("server error %d", resp.StatusCode)
	case resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests:
		return 0, ""
	case h.Get("X-RateLimit-Remaining") == "0":
		reset, perr := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
		if perr != nil {
			return time.Minute, "primary rate limit (no usable x-ratelimit-reset)"
		}
		return max(time.Unix(reset, 0).Sub(t.now())+time.Second, minWait), "primary rate limit"
	}
	if d, ok := retryAfter(h); ok {
		return d, "secondary rate limit"
	}
	if resp.StatusCode == http.StatusTooManyRequests || secondaryBody(resp) {
		return time.Minute, "secondary rate limit (no retry-after)"
	}
	return 0, "" // a plain 403: permissions, not a limit
}

// retryAfter reads a retry-after header: seconds, or an HTTP date. A value in the past is a short wait.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return max(time.Duration(n)*time.Second, minWait), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), minWait), true
	}
	return time.Minute, true // unreadable: GitHub's advice without one
}

// secondaryBody reports whether a 403's body is GitHub's secondary rate limit message, and leaves
// the body readable.
func secondaryBody(resp *http.Response) bool {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), resp.Body))
	return bytes.Contains(bytes.ToLower(b), []byte("secondary rate limit")) || bytes.Contains(bytes.ToLower(b), []byte("abuse"))
}

// capRetryAfter rewrites an absurd retry-after of an answer handed up, so that go-github does not
// refuse every later call of the client for that long.
func capRetryAfter(resp *http.Response, wait time.Duration) {
	if resp != nil && resp.Header.Get("Retry-After") != "" {
		resp.Header.Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
	}
}

func backoff(attempt int) time.Duration {
	d := min(backoffBase<<min(attempt-1, 10), backoffMax)
	return d/2 + rand.N(d/2+1) // jitter: replicas do not retry in step
}

// isConnError reports a refused or reset connection or a cut answer (an outage of the endpoint).
func isConnError(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
