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
