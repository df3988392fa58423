package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// TestQuotaRefusalAnswer: a provision refused by a limit is a 429 quota_exceeded, retryable, with
// Retry-After, naming the limit; the repository's own count is given for its own limit, and an
// instance cap's count (every repository's usage) is never given, neither in the body nor in the
// message. A cap met inside the provision (after selection) answers the same.
func TestQuotaRefusalAnswer(t *testing.T) {
	t.Parallel()
	intp := func(n int) *int { return &n }
	repo := &quota.RefusedError{Kind: quota.LimitRepository, Counter: quota.RepositoryCounter("4242"), Max: 10, Current: 9, Asked: 2}
	deployment := &quota.RefusedError{Kind: quota.LimitDeployment, Counter: quota.DeploymentCounter, Max: 100, Current: 99, Asked: 2}
	class := &quota.RefusedError{Kind: quota.LimitRunnerClass, Counter: quota.ClassCounter("linux"), Max: 20, Current: 19, Asked: 2}
	tests := []struct {
		name    string
		err     error
		want    apiv1.Quota
		message string
	}{
		{"repository", repo, apiv1.Quota{Limit: quota.LimitRepository, Max: 10, Current: intp(9), Asked: 2}, "hold 9 of the 10 runners"},
		{"deployment, inside the provision", fmt.Errorf("%w: run 4242:7:1: creation: %w", provision.ErrFailed, deployment),
			apiv1.Quota{Limit: quota.LimitDeployment, Max: 100, Asked: 2}, "deployment's cap of 100 instances"},
		{"runner class", class, apiv1.Quota{Limit: quota.LimitRunnerClass, Max: 20, Asked: 2}, "runner class linux's cap of 20"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusFailed, Retryable: true}, tc.err
			}
			status, hdr, b := f.call(t, http.MethodPost, apiv1.PathProvision, "run-7", body)
			if status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
				t.Fatalf("status %d, Retry-After %q: %s", status, hdr.Get("Retry-After"), b)
			}
			var e apiv1.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Code != apiv1.CodeQuotaExceeded || !e.Retryable || e.Quota == nil {
				t.Fatalf("answer %s", b)
			}
			if diff := cmp.Diff(tc.want, *e.Quota); diff != "" {
				t.Errorf("quota (-want +got):\n%s", diff)
			}
			if !strings.Contains(e.Error, tc.message) {
				t.Errorf("message %q does not say %q", e.Error, tc.message)
			}
			// The count read after the refusal (99, 19) is in neither the message nor the quota.
			if q, _ := json.Marshal(e.Quota); tc.want.Limit != quota.LimitRepository && strings.ContainsAny(e.Error+string(q), "9") {
				t.Errorf("an instance cap's count is disclosed: %s", b)
			}
		})
	}
}
