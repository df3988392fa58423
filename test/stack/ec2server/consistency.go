// consistency.go: EC2's eventual consistency for a newly launched instance (Options.ConsistencyDelay).
//
// Source: "Eventual consistency in the Amazon EC2 API", Amazon EC2 Developer Guide,
// https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html. After a successful
// RunInstances, "another command using the instance ID that was provided in the response" may
// answer InvalidInstanceID.NotFound, which "does not mean the instance does not exist"; named are
// DescribeInstances and TerminateInstances, and a NotFound from TerminateInstances "does not mean
// the instance was or will be terminated. Your instance could still be running." The SDK's own
// waiters read it the same way: aws-sdk-go-v2's InstanceExists and InstanceRunning waiters retry
// on InvalidInstanceID.NotFound (service/ec2 api_op_DescribeInstances.go).
//
// What the model does while a new instance (RunInstances or CreateFleet) is not yet visible:
//   - every call naming its id (DescribeInstances by InstanceId.N, DescribeInstanceAttribute,
//     Start/Stop/TerminateInstances, CreateTags/DeleteTags) answers InvalidInstanceID.NotFound.
//     The call changes nothing, and a call naming it among ids EC2 does show fails as a whole,
//     naming only the ids it cannot see. That is how EC2 answers a call naming any id it does not
//     know (see lookupInstancesLocked); a caller cannot tell an id not propagated yet from an
//     unknown one, so neither does the model.
//   - listings by filter (DescribeInstances without ids, tag filters included) leave it out, unless
//     a test let them catch up first (ShowInListings).
//   - DescribeTags still lists its tags. The guide does not say which read catches up first; a tag
//     listed before its instance can be described is the harder case for a caller that acts on
//     tags (refresh's orphan sweep), so that is what the model shows.
//
// The guide does not say which calls catch up first either. ShowInListings lets filtered
// DescribeInstances show an instance (state, launch time) while every call naming its id still
// answers NotFound: the harder case for a caller that acts on what a listing showed (the orphan
// sweep terminates the instances it listed, and its TerminateInstances may be the call that has
// not caught up).
//
// The instance itself is not held back: it moves through its states and runs its Runtime as
// usual, which is the point (it is running up a bill while the API denies it). It becomes visible
// when the server's clock (Options.Now) reaches its launch time plus ConsistencyDelay, or at once
// by MakeVisible, so tests drive the window without sleeping.
package ec2server

import "time"

// visibleLocked reports whether the API shows the instance at now.
func (in *instance) visibleLocked(now time.Time) bool {
	return in.visibleAt.IsZero() || !now.Before(in.visibleAt)
}

// listedLocked reports whether filtered listings show the instance at now.
func (in *instance) listedLocked(now time.Time) bool {
	return in.listed || in.visibleLocked(now)
}

// SetConsistencyDelay sets Options.ConsistencyDelay for the instances launched from now on: a test
// turns the model on for a server its environment made. Not for a server tests share: every launch
// after the call is held back, theirs too.
func (s *Server) SetConsistencyDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.ConsistencyDelay = max(d, 0)
}

// MakeVisible ends the consistency window of the given instances (of every instance when none is
// given): the API shows them from the next call on, whatever the clock says.
func (s *Server) MakeVisible(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) == 0 {
		for _, in := range s.instances {
			in.visibleAt = time.Time{}
		}
		return
	}
	for _, id := range ids {
		if in, ok := s.instances[id]; ok {
			in.visibleAt = time.Time{}
		}
	}
}

// ShowInListings lets filtered DescribeInstances listings show the given instances while they are
// hidden otherwise: calls naming their ids still answer InvalidInstanceID.NotFound until their
// window ends (the clock, or MakeVisible).
func (s *Server) ShowInListings(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if in, ok := s.instances[id]; ok {
			in.listed = true
		}
	}
}

// Visible reports whether the API shows the instance now (false for an id the server does not hold).
func (s *Server) Visible(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	return ok && in.visibleLocked(s.opts.Now())
}
