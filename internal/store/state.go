// Package store is runnerpool's single-table DynamoDB store: instance records and their state
// machine, heartbeats, worker signals, configuration items and leader leases. Every state change is
// a conditional write on the current state (and run id where relevant), so two control-plane
// replicas, or a replica and an instance agent, can never both win the same transition.
package store

import (
	"fmt"
	"slices"
	"strings"
)

// State is the lifecycle state of an instance record.
type State string

// The states of the instance state machine (see DESIGN.md). Each live state carries a threshold:
// the deadline for that state, after which refresh terminates the instance and the instance
// terminates itself.
const (
	// StateCreated: launched by a provision for a run; waiting for the agent's registration.
	StateCreated State = "created"
	// StateWarming: launched by a warm pool; running its pre-runner script and warm-up.
	StateWarming State = "warming"
	// StateReady: a hot warm-pool instance, running and waiting for a claim.
	StateReady State = "ready"
	// StateStopped: a warm-pool instance that finished warm-up and was stopped to save cost.
	StateStopped State = "stopped"
	// StateIdle: released by a run, deregistered and clean, in the SQS resource pool.
	StateIdle State = "idle"
	// StateClaimed: taken by a run (run id set); waiting for the agent to register for that run.
	StateClaimed State = "claimed"
	// StateRunning: registered for its run and serving its jobs.
	StateRunning State = "running"
	// StateTerminating: marked for termination; TerminateInstances is (being) called. Still live:
	// refresh retries the termination until EC2 confirms it.
	StateTerminating State = "terminating"
	// StateTerminated: gone in EC2. The record stays for audit until its TTL removes it.
	StateTerminated State = "terminated"
)

// States lists every state, in lifecycle order.
var States = []State{
	StateCreated, StateWarming, StateReady, StateStopped, StateIdle,
	StateClaimed, StateRunning, StateTerminating, StateTerminated,
}

// LiveStates lists the states of an instance that may still exist in EC2.
var LiveStates = []State{
	StateCreated, StateWarming, StateReady, StateStopped, StateIdle,
	StateClaimed, StateRunning, StateTerminating,
}

// ParseState validates a state read from the table or from input. An unknown state is an error,
// never a crash: a record written by a newer or broken writer must not be acted on blindly.
func ParseState(s string) (State, error) {
	st := State(s)
	if slices.Contains(States, st) {
		return st, nil
	}
	return "", fmt.Errorf("unknown instance state %q", s)
}

// Live reports whether an instance in this state may still exist in EC2.
func (s State) Live() bool { return s != StateTerminated && s != "" }

// transitions is the state machine: for each state, the states it may move to. A move to
// terminating or terminated is allowed from every live state (expiry, failed checks, dump, scale-in)
// and is not repeated in each row.
var transitions = map[State][]State{
	StateCreated:     {StateRunning},
	StateWarming:     {StateReady, StateStopped},
	StateReady:       {StateClaimed},
	StateStopped:     {StateClaimed},
	StateIdle:        {StateClaimed},
	StateClaimed:     {StateRunning, StateIdle},
	StateRunning:     {StateIdle},
	StateTerminating: {},
}

// CanTransition reports whether from -> to is a legal transition.
func CanTransition(from, to State) bool {
	if !from.Live() {
		return false
	}
	if to == StateTerminated || (to == StateTerminating && from != StateTerminating) {
		return true
	}
	return slices.Contains(transitions[from], to)
}

// InitialStates are the states a new record may be written in.
var InitialStates = []State{StateCreated, StateWarming}

// Signal is what an instance agent reports to the control plane through its signal item. The
// names follow the systems runnerpool was specified from.
type Signal string

const (
	// SignalPreRunnerOK: the pre-runner script succeeded.
	SignalPreRunnerOK Signal = "UD_OK"
	// SignalPreRunnerFailed: the pre-runner script failed; the instance is unusable.
	SignalPreRunnerFailed Signal = "UD_FAILED"
	// SignalRegistered: a runner is registered for the signal's run id.
	SignalRegistered Signal = "UD_REG_OK"
	// SignalRegistrationFailed: registering for the signal's run id failed.
	SignalRegistrationFailed Signal = "UD_REG_FAILED"
	// SignalReleased: the runner was deregistered and the workspace cleaned; safe to pool.
	SignalReleased Signal = "UD_REMOVE_REG_REMOVE_RUN"
	// SignalReleaseFailed: deregistration or cleanup failed; never pool this instance.
	SignalReleaseFailed Signal = "UD_REMOVE_REG_FAILED"
	// SignalSpotInterrupted: EC2 announced the instance's spot interruption (instance metadata
	// spot/instance-action, two minutes ahead); Detail is the announcement. The instance serves no
	// further run and is never pooled again.
	SignalSpotInterrupted Signal = "UD_SPOT_INTERRUPTED"
	// SignalRunnerOutdated: the registered runner exited because GitHub refused its version
	// (exit code 7 since actions/runner 2.333.0); Detail says so. Evidence for the control plane
	// (internal/runnerrelease outdated.go), never a fact.
	SignalRunnerOutdated Signal = "UD_RUNNER_OUTDATED"
)

// SpotNoticePrefix starts the detail of the release failure an agent signals once EC2 announced
// its instance's spot interruption; the notice follows.
const SpotNoticePrefix = "spot interruption announced: "

// SpotReclaimed reports whether sig is the word of the instance's own agent (signed by the pinned
// key) that EC2 reclaims the instance: the spot interruption signal, or a release failure carrying
// the notice. An unsigned claim is not believed.
func (in Instance) SpotReclaimed(sig SignalRecord) bool {
	spot := sig.Signal == SignalSpotInterrupted ||
		(sig.Signal == SignalReleaseFailed && strings.HasPrefix(sig.Detail, SpotNoticePrefix))
	return spot && in.AgentKey != "" && sig.SignedBy(in.ID, in.AgentKey)
}

var signals = []Signal{
	SignalPreRunnerOK, SignalPreRunnerFailed, SignalRegistered, SignalRegistrationFailed,
	SignalReleased, SignalReleaseFailed, SignalSpotInterrupted, SignalRunnerOutdated,
}

// ParseSignal validates a signal read from the table.
func ParseSignal(s string) (Signal, error) {
	sig := Signal(s)
	if slices.Contains(signals, sig) {
		return sig, nil
	}
	return "", fmt.Errorf("unknown worker signal %q", s)
}
