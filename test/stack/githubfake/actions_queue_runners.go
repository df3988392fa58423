// Which runner of a scale set takes an assigned job.

package githubfake

// ssRunnerChosenLocked says whether runner rr of scale set setID may take one of the set's jobs.
// On github.com the service assigns a scale set's job to any idle runner of the set, not to the
// runner brought up for it: a JIT runner is registered to the scale set, never to a job
// (actions/scaleset types.go: the JIT runner setting holds a name and work folder only), and
// JobStarted and JobCompleted name the runner that took the job (types.go: runnerId and
// runnerName). The
// fake makes that visible by giving an assigned job to the set's longest idle runner among those
// polling for a job, which is seldom the one brought up for it. GHES's acquisition shape is left
// to whichever runner asks first.
func (s *Server) ssRunnerChosenLocked(setID int64, rr *runnerRec) bool {
	set := s.actions.sets[setID]
	if set == nil || set.shape != ShapeAssigned {
		return true
	}
	for rid, sid := range s.actions.runnerSet {
		o := s.runners[rid]
		if sid != setID || o == nil || o == rr || !o.online || o.busy || o.polling == 0 {
			continue
		}
		if o.idleSince.Before(rr.idleSince) || (o.idleSince.Equal(rr.idleSince) && o.id < rr.id) {
			return false
		}
	}
	return true
}

// donePolling ends one of a runner's job polls; the runners waiting behind it look again.
func (s *Server) donePolling(rr *runnerRec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rr.polling--
	s.broadcastLocked()
}
