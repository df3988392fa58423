// What the jobs of a held session do, apart from the protocol that brings them. The poller
// (poller.go) owns the session and message protocol: ordered messages, deletion once handled,
// acquisition of offered jobs, a queue token refreshed when it expired, cancelled assignments kept
// for their reassignment. It hands each job to a Scaler, which decides what serving it means here:
// admission (the deployment's allow-list) and the pool job queue that the pipeline's pool-job
// stages serve. actions/scaleset splits its listener the same way (listener/listener.go: the
// listener owns the session and messages and hands each event to a three-method Scaler).
package scalesets

import (
	"context"
	"fmt"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// Scaler decides what each job of a scale set's messages does.
type Scaler interface {
	// Admit reports why a job may not be served here (nil: it may): a refused job is neither
	// acquired nor queued.
	Admit(j warmpool.Job) error
	// Assigned has a job the scale set was assigned, or acquired, served; res says what became
	// of it (queued, or known already).
	Assigned(ctx context.Context, j warmpool.Job) (res string, err error)
	// Started binds a started job to the runner that took it (its name and id, as JobStarted gives
	// them); rebound reports that the runner was brought up for another job.
	Started(ctx context.Context, j warmpool.Job, runnerName string, runnerID int64) (rebound bool, err error)
	// Completed has the instances of a completed job ended.
	Completed(ctx context.Context, j warmpool.Job) error
}

// poolScaler serves a scale set's jobs as pool jobs: through the pool job queue, to the worker.
type poolScaler struct {
	jobs    Enqueuer
	allowed func(repository string) bool
}

func (s poolScaler) Admit(j warmpool.Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	if !s.allowed(j.Repository) {
		return fmt.Errorf("repository %s is not served by this deployment", j.Repository)
	}
	return nil
}

func (s poolScaler) Assigned(ctx context.Context, j warmpool.Job) (string, error) {
	return s.jobs.Enqueue(ctx, j)
}

func (s poolScaler) Started(ctx context.Context, j warmpool.Job, runnerName string, runnerID int64) (bool, error) {
	return s.jobs.Bind(ctx, j, runnerName, runnerID)
}

func (s poolScaler) Completed(ctx context.Context, j warmpool.Job) error {
	_, err := s.jobs.Enqueue(ctx, j)
	return err
}
