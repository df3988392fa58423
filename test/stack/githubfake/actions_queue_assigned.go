// The two shapes of the Actions service's scale set queue: github.com assigns jobs to a scale set
// itself; some GHES versions offer them to be acquired. See actions.go's doc comment for sources.

package githubfake

import "slices"

// ScaleSetShape is how the Actions service hands jobs to a scale set.
type ScaleSetShape string

const (
	// ShapeAssigned is github.com's: the service assigns jobs itself (JobAssigned, then JobStarted
	// and JobCompleted), with runnerRequestId 0, and scale sets scale on
	// statistics.totalAssignedJobs (actions/scaleset README; GitHub's client dropped acquisition in
	// v0.1.0/v0.2.0 and restored it only for GHES in v0.3.0: actions/scaleset#75, #90,
	// actions/actions-runner-controller#4442).
	ShapeAssigned ScaleSetShape = "assigned"
	// ShapeAvailable is that of GHES versions that still need acquisition: JobAvailable, then
	// acquirejobs, then JobAssigned.
	ShapeAvailable ScaleSetShape = "available"
)

// maxReassignments is how often an assignment no runner took is cancelled and made again
// (actions/scaleset README, "Job Reassignment": "up to 3 times").
const maxReassignments = 3

// SetScaleSetShape sets the shape of the scale sets created from now on (default ShapeAssigned).
func (s *Server) SetScaleSetShape(shape ScaleSetShape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actionsLocked().shape = shape
}

// SetScaleSetShapeOf changes the shape of one existing scale set of a scope ("owner" or
// "owner/repo"); it reports whether the scale set exists.
func (s *Server) SetScaleSetShapeOf(scopeName, name string, shape ScaleSetShape) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.namedSetLocked(scopeName, name)
	if set != nil {
		set.shape = shape
	}
	return set != nil
}

// requestID is the runnerRequestId a job's messages carry: 0 on github.com, where jobs are
// identified by jobId (cloudbase/garm#459), the job's request id where it must be acquired.
func (st *actionsState) requestID(j *ssJob, id int64) int64 {
	if j != nil {
		if set := st.sets[j.set]; set != nil && set.shape == ShapeAssigned {
			return 0
		}
	}
	return id
}

// ssReassignLocked cancels an assignment no runner of the scale set took within StartTimeout
// (JobCompleted, result canceled) and assigns the job again (JobAssigned), up to
// maxReassignments times; then the job ends cancelled.
func (s *Server) ssReassignLocked(st *actionsState, set *scaleSetRec, id int64, j *ssJob) {
	if j.state != ssAcquired || s.now().Sub(j.since) <= st.timing.StartTimeout {
		return
	}
	cancel := s.ssJobMessageLocked("JobCompleted", id)
	cancel.Result, cancel.FinishTime = "canceled", s.now().UTC()
	if j.reassigned < maxReassignments {
		j.reassigned++
		j.since = s.now()
		s.ssPushLocked(set, cancel, s.ssJobMessageLocked("JobAssigned", id))
		return
	}
	j.state = ssDone
	s.ssPushLocked(set, cancel)
	rj := s.jobs[id]
	if rj == nil || rj.Status != JobQueued {
		return
	}
	s.queue = slices.DeleteFunc(s.queue, func(q int64) bool { return q == id })
	rj.Status, rj.Conclusion, rj.CompletedAt = JobCompleted, "cancelled", s.now().UTC()
	s.emitLocked(rj, "completed") // the webhook; no second scale set message (ssDone)
}

// ScaleSetJobID is the jobId the messages of the job QueueScaleSetJob returned id for carry.
func ScaleSetJobID(id int64) string { return newUUIDFrom(id) }

// EvictScaleSetSession drops the session of a scope's scale set as the service does when it
// evicts one: its holder's next call answers 404, deleting it 400. It reports whether there was one.
func (s *Server) EvictScaleSetSession(scopeName, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.namedSetLocked(scopeName, name)
	if set == nil || set.session == nil {
		return false
	}
	set.session = nil
	s.broadcastLocked()
	return true
}
