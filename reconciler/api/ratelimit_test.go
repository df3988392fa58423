package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// TestProvisionAnswersGitHubLimits: a provision that failed because GitHub's primary or secondary
// rate limit refused a call is answered 503, retryable, with the wait GitHub asked for in
// Retry-After; never 500, even when the provision was dumped.
func TestProvisionAnswersGitHubLimits(t *testing.T) {
	t.Parallel()
	ninety := 90 * time.Second
	primary := &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: time.Now().Add(10 * time.Minute)}}, Message: "API rate limit exceeded"}
	secondary := &github.AbuseRateLimitError{RetryAfter: &ninety, Message: "You have exceeded a secondary rate limit"}
	failed := provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusFailed, Outcome: "unsuccessful"}
	dumped := failed
	dumped.Outcome = "dump"
	tests := []struct {
		name       string
		res        provision.Result
		err        error
		code       string
		minS, maxS int
	}{
		{"primary, unsuccessful", failed, fmt.Errorf("%w: issuing registrations: %w", provision.ErrFailed, primary), apiv1.CodeUnsuccessful, 590, 601},
		{"secondary, dumped", dumped, fmt.Errorf("%w: %w", provision.ErrFailed, secondary), apiv1.CodeUnsuccessful, 90, 90},
		{"secondary, outside the provision", provision.Result{}, fmt.Errorf("recording run: %w", secondary), apiv1.CodeUnavailable, 90, 90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) { return tt.res, tt.err }
			code, hdr, b := f.call(t, http.MethodPost, "/v1/provision", "run-7", body)
			if code != http.StatusServiceUnavailable {
				t.Fatalf("status %d %s, want 503", code, b)
			}
			var e apiv1.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Code != tt.code || !e.Retryable {
				t.Errorf("error %+v, want code %s, retryable", e, tt.code)
			}
			s, err := strconv.Atoi(hdr.Get("Retry-After"))
			if err != nil || s < tt.minS || s > tt.maxS {
				t.Errorf("Retry-After %q, want %d to %d seconds", hdr.Get("Retry-After"), tt.minS, tt.maxS)
			}
		})
	}
}
