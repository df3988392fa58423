package webhook_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// The job's workflow (workflow_job.workflow_name) goes with it to the job queue's ledger, for the
// autoscaler's fan-outs; one that is missing, null or not short printable text is left out and
// never refuses the job.
func TestWorkflowNameGoesWithTheJob(t *testing.T) {
	t.Parallel()
	withName := func(name any) []byte {
		var p map[string]any
		if err := json.Unmarshal(jobPayload("queued", 1, "pool=small"), &p); err != nil {
			t.Fatal(err)
		}
		p["workflow_job"].(map[string]any)["workflow_name"] = name
		b, _ := json.Marshal(p)
		return b
	}
	for _, tt := range []struct {
		name string
		body []byte
		want string
	}{
		{"named", withName("CI"), "CI"},
		{"a path, the workflow without a name", withName(".github/workflows/ci.yml"), ".github/workflows/ci.yml"},
		{"missing", jobPayload("queued", 1, "pool=small"), ""},
		{"null", withName(nil), ""},
		{"a control character", withName("CI\n"), ""},
		{"too long", withName(strings.Repeat("w", 257)), ""},
		{"not a string", withName(7), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			status, _ := post(t, newHandler(t, f), delivery{event: "workflow_job", id: "d1", body: tt.body})
			if status != 200 || len(f.jobs) != 1 || f.jobs[0].Workflow != tt.want {
				t.Fatalf("status %d, jobs %+v; want the job enqueued with workflow %q", status, f.jobs, tt.want)
			}
		})
	}
}

// The run's branch (workflow_job.head_branch) and the repository's default branch
// (repository.default_branch), which GitHub signs, go with the job to its ledger record as full refs:
// the runner cache's scope of a pool job's run (docs/cache.md). One that is missing, null or not a
// printable branch name is left out and never refuses the job.
func TestBranchesGoWithTheJob(t *testing.T) {
	t.Parallel()
	with := func(head, def any) []byte {
		var p map[string]any
		if err := json.Unmarshal(jobPayload("queued", 1, "pool=small"), &p); err != nil {
			t.Fatal(err)
		}
		p["workflow_job"].(map[string]any)["head_branch"] = head
		p["repository"].(map[string]any)["default_branch"] = def
		b, _ := json.Marshal(p)
		return b
	}
	for _, tt := range []struct {
		name             string
		body             []byte
		wantRef, wantDef string
	}{
		{"both", with("feature/x", "trunk"), "refs/heads/feature/x", "refs/heads/trunk"},
		{"null head branch", with(nil, "main"), "", "refs/heads/main"},
		{"a space", with("a b", "main"), "", "refs/heads/main"},
		{"a control character", with("main\n", "main\x00"), "", ""},
		{"too long", with(strings.Repeat("b", 256), "main"), "", "refs/heads/main"},
		{"not strings", with(7, true), "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			status, _ := post(t, newHandler(t, f), delivery{event: "workflow_job", id: "d1", body: tt.body})
			if status != 200 || len(f.jobs) != 1 || f.jobs[0].Ref != tt.wantRef || f.jobs[0].DefaultBranch != tt.wantDef {
				t.Fatalf("status %d, jobs %+v; want the job enqueued with ref %q and default branch %q", status, f.jobs, tt.wantRef, tt.wantDef)
			}
		})
	}
}
