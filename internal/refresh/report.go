// The report of one refresh pass: what each phase found and changed, and every error met.

package refresh

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Report says what one pass did. Id lists are sorted.
type Report struct {
	At      time.Time    `json:"at"` // the pass's clock reading: thresholds are compared with it
	Expiry  ExpiryReport `json:"expiry"`
	Orphans OrphanReport `json:"orphans"`
	Runners RunnerReport `json:"runners"`
	Pool    PoolReport   `json:"pool"`
	Agents  AgentReport  `json:"agents"`
	Errors  []PhaseError `json:"errors,omitempty"`
	// Listing is the brief listing of the live records the pass read (nil when it could not):
	// what follows the pass (the quota repair) decides from it rather than list the table again.
	// Records the pass terminated are still in it (Expiry.Terminated, Expiry.AlreadyGone).
	Listing []store.Instance `json:"-"`
}

// ExpiryReport covers phases 1 and 2: expired records, their mark and their termination.
type ExpiryReport struct {
	// Expired counts live records past their threshold that were not yet terminating.
	Expired int `json:"expired"`
	// Marked counts those this pass marked terminating.
	Marked int `json:"marked"`
	// Renewed counts those that changed between the read and the mark, and were left alone.
	Renewed int `json:"renewed"`
	// Retried counts records found terminating (an earlier pass, or another component, that did not
	// finish): their termination is retried.
	Retried int `json:"retried"`
	// Terminated lists the records moved to terminated.
	Terminated []string `json:"terminated,omitempty"`
	// AlreadyGone lists the ids EC2 no longer knows (or rejects as malformed); their records are
	// terminated too.
	AlreadyGone []string `json:"alreadyGone,omitempty"`
	// Unseen lists the ids EC2 answered unknown whose records are younger than
	// terminate.ConsistencyWindow: EC2 may not show a new instance yet, so it may be running. Their
	// records stay terminating, and the next pass asks again.
	Unseen []string `json:"unseen,omitempty"`
	// TerminateCalls counts TerminateInstances calls, retries without unknown ids included.
	TerminateCalls int `json:"terminateCalls"`
}

// OrphanReport covers phase 3.
type OrphanReport struct {
	// Tagged counts the instances carrying this deployment's tag that EC2 listed (not terminated).
	Tagged int `json:"tagged"`
	// Young lists orphans spared because they were launched less than OrphanGrace ago.
	Young []string `json:"young,omitempty"`
	// Terminated lists the orphans terminated.
	Terminated []string `json:"terminated,omitempty"`
	// Unseen lists the orphans the sweep listed whose TerminateInstances answered NotFound: EC2's
	// eventual consistency, no proof they are gone. They are not taken for terminated (their
	// runners are left), and the next sweep asks again.
	Unseen []string `json:"unseen,omitempty"`
	// TerminateCalls counts TerminateInstances calls.
	TerminateCalls int `json:"terminateCalls"`
}

// RunnerReport covers phase 4.
type RunnerReport struct {
	// Checked counts the runners named for an instance (runnerpool-<instance id>) across all scopes.
	Checked int `json:"checked"`
	// Deleted lists "scope/runner name" of the runners deleted.
	Deleted []string `json:"deleted,omitempty"`
	// OfPooled lists "scope/runner name" of the runners still registered for a pooled instance
	// (a release believed its agent's signed word that the runner was removed): deleted too.
	OfPooled []string `json:"ofPooled,omitempty"`
}

// PoolReport covers phase 5.
type PoolReport struct {
	Queues  int `json:"queues"`
	Checked int `json:"checked"` // distinct messages received
	Dropped int `json:"dropped"` // deleted: malformed, duplicate, expired, or no longer idle
	Kept    int `json:"kept"`    // live idle instances, made visible again
	// Missed lists the poolable instances a complete walk found without a message, not pooled
	// again yet: no earlier walk more than LongestVisibility before missed it too.
	Missed []string `json:"missed,omitempty"`
	// Repooled lists the poolable instances that had no message in two complete walks and were
	// pooled again.
	Repooled []string `json:"repooled,omitempty"`
	// OtherPosture lists the pooled instances expired because their runner class's job access
	// changed since they were launched.
	OtherPosture []string `json:"otherPosture,omitempty"`
	// Moved counts live messages moved to the scope queue they belong in.
	Moved int `json:"moved,omitempty"`
	// DeletedQueues lists the scope queues deleted for staying empty.
	DeletedQueues []string `json:"deletedQueues,omitempty"`
}

// PhaseError is one error of a phase.
type PhaseError struct {
	Phase string `json:"phase"`
	Err   error  `json:"-"`
}

func (e PhaseError) Error() string { return e.Phase + ": " + e.Err.Error() }

func (e PhaseError) Unwrap() error { return e.Err }

// MarshalJSON renders the error as its message, for status endpoints and logs.
func (e PhaseError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Phase string `json:"phase"`
		Error string `json:"error"`
	}{e.Phase, e.Err.Error()})
}

// Err joins every error of the pass (nil when there were none).
func (r Report) Err() error {
	errs := make([]error, len(r.Errors))
	for i, e := range r.Errors {
		errs[i] = e
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	return nil
}

func (r *Report) sort() {
	for _, l := range [][]string{r.Expiry.Terminated, r.Expiry.AlreadyGone, r.Expiry.Unseen, r.Orphans.Young, r.Orphans.Terminated, r.Orphans.Unseen, r.Runners.Deleted, r.Pool.Repooled, r.Pool.DeletedQueues, r.Agents.Foreign} {
		slices.Sort(l)
	}
}

// Changed reports whether the pass changed anything (a repeated pass over an unchanged world does not).
func (r Report) Changed() bool {
	return r.Expiry.Marked > 0 || len(r.Expiry.Terminated) > 0 || len(r.Orphans.Terminated) > 0 ||
		len(r.Runners.Deleted) > 0 || r.Pool.Dropped > 0 || len(r.Pool.Repooled) > 0 ||
		r.Pool.Moved > 0 || len(r.Pool.DeletedQueues) > 0 || r.Agents.Unowned > 0 || len(r.Agents.Foreign) > 0
}

// pass is the state of one running pass: its clock reading and the report, which phases update
// from parallel workers.
type pass struct {
	now time.Time
	// live is the listing of live records the orphan sweep read (nil when it did not): the pool
	// check trusts it to keep a message, never to drop one.
	live map[string]store.Instance
	// pooled are live's poolable records by the URL of the queue their message belongs in
	// (pool.go, indexPooled).
	pooled map[string][]store.Instance
	mu     sync.Mutex
	rep    Report
}

// fail records an error of a phase.
func (p *pass) fail(phase string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rep.Errors = append(p.rep.Errors, PhaseError{Phase: phase, Err: err})
}

// update changes the report under the lock.
func (p *pass) update(f func(r *Report)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.rep)
}
