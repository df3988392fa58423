// This file holds spot interruptions as EC2 announces them: two minutes ahead, the instance's
// metadata serves spot/instance-action ({"action": "terminate", "time": "..."}, 404 before), then EC2
// terminates the instance with state reason Server.SpotInstanceTermination.

package ec2server

import (
	"encoding/json"
	"fmt"
	"time"
)

// SpotNotice is how far ahead EC2 announces a spot interruption.
const SpotNotice = 2 * time.Minute

// InterruptSpot announces the interruption of a running instance and terminates it notice later
// (SpotNotice scaled by the caller's time factor). EC2 interrupts spot instances only; the double
// accepts any running instance, so that tests need not launch spot capacity.
func (s *Server) InterruptSpot(id string, notice time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || in.state != stateRunning {
		return fmt.Errorf("interrupting %s: not a running instance", id)
	}
	at := s.opts.Now().Add(max(notice, 0))
	b, _ := json.Marshal(map[string]string{"action": "terminate", "time": at.UTC().Format("2006-01-02T15:04:05Z")})
	in.spotAction, in.spotAt = string(b), at
	return nil
}

// spotLocked terminates an announced instance once its time has come.
func (s *Server) spotLocked(in *instance, now time.Time) {
	if in.spotAt.IsZero() || now.Before(in.spotAt) || in.state != stateRunning {
		return
	}
	s.setStateLocked(in, stateShuttingDown, s.opts.ShuttingDownDelay, now)
	in.reason = "Server.SpotInstanceTermination: Spot instance termination"
	in.stateReason = &stateReasonXML{Code: "Server.SpotInstanceTermination", Message: "Server.SpotInstanceTermination: Spot instance termination"}
}
