// ratelimit.go: a provision or release that failed because GitHub said "slow down" is answered
// 503 with the wait GitHub asked for in Retry-After, never 500: the workflow's client retries after
// it (ghaccess has already waited as long as the request's deadline allowed).
package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/go-github/v62/github"
)

// githubWait reports whether err says GitHub's primary or secondary rate limit refused a call,
// and how long GitHub asked to wait (at least a second; a minute when it did not say).
func githubWait(err error, now time.Time) (time.Duration, bool) {
	var rl *github.RateLimitError
	if errors.As(err, &rl) {
		return max(rl.Rate.Reset.Sub(now), time.Second), true
	}
	var ab *github.AbuseRateLimitError
	if errors.As(err, &ab) {
		if ab.RetryAfter != nil {
			return max(*ab.RetryAfter, time.Second), true
		}
		return time.Minute, true
	}
	return 0, false
}

// setRetryAfter sets Retry-After in whole seconds, rounded up.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
}

// isGitHubLimit is githubWait for an error answer: it sets Retry-After when err is GitHub's limit.
func isGitHubLimit(w http.ResponseWriter, err error) bool {
	wait, ok := githubWait(err, time.Now())
	if ok {
		setRetryAfter(w, wait)
	}
	return ok
}
