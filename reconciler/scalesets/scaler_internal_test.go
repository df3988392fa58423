package scalesets

import (
	"context"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

type recordingQueue struct{ queued, bound []int64 }

func (q *recordingQueue) Enqueue(_ context.Context, j warmpool.Job) (string, error) {
	q.queued = append(q.queued, j.JobID)
	return "queued", nil
}

func (q *recordingQueue) Bind(_ context.Context, j warmpool.Job, _ string, _ int64) (bool, error) {
	q.bound = append(q.bound, j.JobID)
	return false, nil
}

// The pool scaler admits a readable job of an allowed repository only, and serves what it admits
// through the pool job queue: the policy the poller's protocol hands each job to.
func TestPoolScaler(t *testing.T) {
	t.Parallel()
	job := warmpool.Job{Action: warmpool.ActionQueued, JobID: 7, RunID: 9, Repository: "acme/api", Pool: "p",
		Labels: []string{"set"}, ScaleSet: "set", ScaleSetID: 3, ScaleSetScope: "acme"}
	q := &recordingQueue{}
	s := poolScaler{jobs: q, allowed: func(repo string) bool { return repo == "acme/api" }}
	for _, tc := range []struct {
		name  string
		job   func(warmpool.Job) warmpool.Job
		admit bool
	}{
		{"allowed repository", func(j warmpool.Job) warmpool.Job { return j }, true},
		{"repository outside the allow-list", func(j warmpool.Job) warmpool.Job { j.Repository = "other/api"; return j }, false},
		{"unreadable job", func(j warmpool.Job) warmpool.Job { j.Pool = ""; return j }, false},
	} {
		if err := s.Admit(tc.job(job)); (err == nil) != tc.admit {
			t.Errorf("%s: Admit = %v, want admitted %v", tc.name, err, tc.admit)
		}
	}
	if _, err := s.Assigned(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Started(t.Context(), job, "runnerpool-i-1", 11); err != nil {
		t.Fatal(err)
	}
	if len(q.queued) != 1 || len(q.bound) != 1 {
		t.Errorf("queued %v bound %v: want the assigned job queued and the started one bound", q.queued, q.bound)
	}
}
