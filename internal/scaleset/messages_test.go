package scaleset_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
)

func TestParseMessage(t *testing.T) {
	t.Parallel()
	good, err := scaleset.EncodeMessage(7, scaleset.Statistic{TotalAssignedJobs: 1}, []scaleset.JobMessage{
		{Type: scaleset.JobAvailable, RunnerRequestID: 11, QueueTime: time.Unix(100, 0).UTC()},
		{Type: scaleset.JobCompleted, RunnerRequestID: 12, RunnerName: "runnerpool-i-1", Result: "success"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		in               string
		wantID           int64
		wantJobs, probls int
	}{
		{"two job messages", string(good), 7, 2, 0},
		{"not JSON", `{"messageId": 3, garbage`, 0, 0, 1},
		{"unknown envelope type", `{"messageId": 4, "messageType": "RunnerScaleSetSomethingNew", "body": "[]"}`, 4, 0, 1},
		{"body not an array", `{"messageId": 5, "messageType": "RunnerScaleSetJobMessages", "body": "{}"}`, 5, 0, 1},
		{"unknown job message next to a known one", `{"messageId": 6, "messageType": "RunnerScaleSetJobMessages", "body": "[{\"messageType\":\"JobExploded\",\"runnerRequestId\":1},{\"messageType\":\"JobStarted\",\"runnerRequestId\":2}]"}`, 6, 1, 1},
		{"job message without request id", `{"messageId": 8, "messageType": "RunnerScaleSetJobMessages", "body": "[{\"messageType\":\"JobAvailable\"}]"}`, 8, 0, 1},
		{"github.com's runnerRequestId 0 with a jobId", `{"messageId": 11, "messageType": "RunnerScaleSetJobMessages", "body": "[{\"messageType\":\"JobAssigned\",\"runnerRequestId\":0,\"jobId\":\"9c3e\"}]"}`, 11, 1, 0},
		{"JobAvailable without a request id to acquire", `{"messageId": 12, "messageType": "RunnerScaleSetJobMessages", "body": "[{\"messageType\":\"JobAvailable\",\"jobId\":\"9c3e\"}]"}`, 12, 0, 1},
		{"bad field type", `{"messageId": 9, "messageType": "RunnerScaleSetJobMessages", "body": "[{\"messageType\":\"JobAvailable\",\"runnerRequestId\":\"x\"}]"}`, 9, 0, 1},
		{"empty body", `{"messageId": 10, "messageType": "RunnerScaleSetJobMessages"}`, 10, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := scaleset.ParseMessage([]byte(tc.in))
			if m.ID != tc.wantID || len(m.Jobs) != tc.wantJobs || len(m.Problems) != tc.probls {
				t.Errorf("got id %d, %d jobs, problems %v; want id %d, %d jobs, %d problems", m.ID, len(m.Jobs), m.Problems, tc.wantID, tc.wantJobs, tc.probls)
			}
		})
	}
}

// A job's workflow, for the autoscaler's fan-outs: jobWorkflowRef without its ref and repository.
func TestJobMessageWorkflow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ref, want string }{
		{"acme/api/.github/workflows/ci.yml@refs/heads/main", ".github/workflows/ci.yml"},
		{"acme/api/.github/workflows/ci.yml", ".github/workflows/ci.yml"},
		// A reusable workflow of another repository keeps its repository.
		{"acme/shared/.github/workflows/build.yml@v2", "acme/shared/.github/workflows/build.yml"},
		{"", ""},
	} {
		jm := scaleset.JobMessage{OwnerName: "acme", RepositoryName: "api", JobWorkflowRef: tt.ref}
		if got := jm.Workflow(); got != tt.want {
			t.Errorf("Workflow of %q = %q, want %q", tt.ref, got, tt.want)
		}
	}
}
