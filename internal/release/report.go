// The report of one release: what happened to each instance of the run and why. A release never
// stops at the first problem (seed 004): every instance gets an outcome, and the problems are
// collected and returned together.

package release

import (
	"errors"
	"fmt"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Outcome is what a release did with one instance.
type Outcome string

const (
	// Pooled: the agent confirmed deregistration and cleanup, and the instance's message is in its
	// runner class's pool queue.
	Pooled Outcome = "pooled"
	// Expired: the instance was released but could not be pooled (no confirmation from the agent in
	// time, a failed deregistration, or a pool that could not take it); its threshold was moved to
	// now, so refresh and the instance itself terminate it. Never pooled.
	Expired Outcome = "expired"
	// AlreadyReleased: another release of the same run won the running -> idle transition; that
	// release pools it. Nothing was done here.
	AlreadyReleased Outcome = "already-released"
	// SkippedUnexpectedState: the instance bears the run id but is not running (for example still
	// created or claimed because a release raced the provision, or being terminated). Left untouched.
	SkippedUnexpectedState Outcome = "skipped-unexpected-state"
	// Failed: a control-plane call failed before the instance could be pooled or expired. Reason says
	// in which state the instance was left; a failure before the transition leaves it running for the
	// run, so a retried release picks it up again.
	Failed Outcome = "failed"
)

// NothingToRelease is the report message of a release that found no running instance of the run:
// a repeated release, or a run whose instances are all gone.
const NothingToRelease = "nothing to release: already released"

// InstanceResult is the outcome for one instance.
type InstanceResult struct {
	ID string `json:"id"`
	// State is the state the release found the record in; on a lost race, the state that won.
	State   store.State `json:"state"`
	Outcome Outcome     `json:"outcome"`
	Reason  string      `json:"reason,omitempty"`
	// Err is the control-plane error behind a Failed outcome, or behind an Expired one when a call
	// failed (for example the pool queue); nil when the instance itself was the cause.
	Err error `json:"-"`
}

// Report says what a release did.
type Report struct {
	RunID     string           `json:"runId"`
	Instances []InstanceResult `json:"instances"` // ordered by instance id
	// Message summarises the release; NothingToRelease when no instance of the run was running.
	Message string `json:"message"`
}

// Count returns how many instances had the outcome.
func (r Report) Count(o Outcome) int {
	n := 0
	for _, in := range r.Instances {
		if in.Outcome == o {
			n++
		}
	}
	return n
}

// Unexpected lists the instances found in a state a release does not act on.
func (r Report) Unexpected() []InstanceResult {
	var out []InstanceResult
	for _, in := range r.Instances {
		if in.Outcome == SkippedUnexpectedState {
			out = append(out, in)
		}
	}
	return out
}

// Err joins the errors of every instance (nil when there were none).
func (r Report) Err() error {
	var errs []error
	for _, in := range r.Instances {
		if in.Err != nil {
			errs = append(errs, in.Err)
		}
	}
	return errors.Join(errs...)
}

// summarise sets Message from the outcomes.
func (r *Report) summarise() {
	acted := r.Count(Pooled) + r.Count(Expired) + r.Count(Failed)
	if acted == 0 && len(r.Unexpected()) == 0 {
		r.Message = NothingToRelease
		return
	}
	var parts []string
	for _, o := range []Outcome{Pooled, Expired, Failed, AlreadyReleased, SkippedUnexpectedState} {
		if n := r.Count(o); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
	}
	if acted == 0 {
		r.Message = "nothing released: " + strings.Join(parts, ", ")
		return
	}
	r.Message = "released run " + r.RunID + ": " + strings.Join(parts, ", ")
	var reclaimed []string
	for _, in := range r.Instances {
		if in.Outcome == Expired && strings.Contains(in.Reason, Reclaimed) {
			reclaimed = append(reclaimed, in.ID)
		}
	}
	if len(reclaimed) > 0 {
		r.Message += "; " + Reclaimed + ": " + strings.Join(reclaimed, ", ")
	}
}
