package ghaccess

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClassify: which answers are retried and after how long, including the bad input GitHub (or
// a proxy in front of it) may send: no rate-limit headers, a retry-after in the past, unreadable
// values.
func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	rt := &retryTransport{now: func() time.Time { return now }}
	resp := func(status int, body string, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
	}
	reset := strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)
	past := strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)
	tests := []struct {
		name     string
		resp     *http.Response
		err      error
		retry    bool
		min, max time.Duration
	}{
		{"success", resp(200, "{}"), nil, false, 0, 0},
		{"not found", resp(404, `{"message":"Not Found"}`), nil, false, 0, 0},
		{"403 without rate-limit headers is a permission error", resp(403, `{"message":"Resource not accessible by integration"}`), nil, false, 0, 0},
		{"primary until reset", resp(403, "{}", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset), nil, true, 90 * time.Second, 92 * time.Second},
		{"primary 429 until reset", resp(429, "{}", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset), nil, true, 90 * time.Second, 92 * time.Second},
		{"primary reset in the past", resp(403, "{}", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", past), nil, true, minWait, minWait},
		{"primary reset unreadable", resp(403, "{}", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "soon"), nil, true, time.Minute, time.Minute},
		{"secondary retry-after", resp(403, "{}", "Retry-After", "7"), nil, true, 7 * time.Second, 7 * time.Second},
		{"secondary retry-after in the past", resp(429, "{}", "Retry-After", "-30"), nil, true, minWait, minWait},
		{"secondary retry-after unreadable", resp(429, "{}", "Retry-After", "later"), nil, true, time.Minute, time.Minute},
		{"secondary without headers", resp(403, `{"message":"You have exceeded a secondary rate limit"}`), nil, true, time.Minute, time.Minute},
		{"429 without headers", resp(429, "{}"), nil, true, time.Minute, time.Minute},
		{"503", resp(503, "{}"), nil, true, backoffBase / 2, backoffBase},
		{"502 with retry-after", resp(502, "", "Retry-After", "3"), nil, true, 3 * time.Second, 3 * time.Second},
		{"connection refused", nil, &netErr{syscall.ECONNREFUSED}, true, backoffBase / 2, backoffBase},
		{"another error", nil, errors.New("unsupported protocol scheme"), false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wait, why := rt.classify(tt.resp, tt.err, 1)
			if (why != "") != tt.retry {
				t.Fatalf("classify = %v %q, want retry %v", wait, why, tt.retry)
			}
			if tt.retry && (wait < tt.min || wait > tt.max) {
				t.Errorf("wait %v, want within [%v, %v]", wait, tt.min, tt.max)
			}
		})
	}
}

type netErr struct{ err error }

func (e *netErr) Error() string { return "dial tcp: " + e.err.Error() }
func (e *netErr) Unwrap() error { return e.err }
