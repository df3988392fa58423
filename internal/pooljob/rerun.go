// Re-run jobs on the job queue (Job.Rerun): the queue makes the webhook's request durable, and
// WorkerConfig.Rerun (provision.ServeRerun) serves it; the run record it provisions again is its
// ledger, so a repeated message provisions nothing twice.
package pooljob

import (
	"context"
	"fmt"
)

// serveRerun hands one re-run job to WorkerConfig.Rerun: served, its message is deleted; failed, it
// is tried again after RetryDelay (the batch's lease holds it meanwhile).
func (w *Worker) serveRerun(ctx context.Context, m message, o *outcomes) {
	var err error
	if w.cfg.Rerun == nil {
		w.log.Warn("re-run job dropped: this worker serves no re-runs", "job", m.job.JobID, "run", m.job.RunID)
	} else {
		err = w.cfg.Rerun(ctx, m.job)
	}
	o.lock(func() {
		if err != nil {
			o.errors = append(o.errors, fmt.Errorf("re-run job %d of run %d: %w", m.job.JobID, m.job.RunID, err))
			o.retry = append(o.retry, m)
			o.rep.Requeued = append(o.rep.Requeued, m.job.JobID)
			return
		}
		o.del = append(o.del, m)
	})
}
