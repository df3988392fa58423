// Package claimtest simulates the instance side of a claim for tests: a small agent per instance
// that watches its own record through the store, takes the registration credential issued for its
// run, reports registration and keeps a heartbeat, with scripted misbehaviour; when its record goes
// back to idle it takes the removal credential and reports the runner deregistered and clean. It
// talks only to the store, as the real agent does.
package claimtest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Store is the part of *store.Store the simulated agent uses. Give an agent a store with a clock in
// the past (store.WithClock) to make its heartbeats old.
type Store interface {
	Get(ctx context.Context, id string) (store.Instance, error)
	ReadCredential(ctx context.Context, id string, kind store.CredentialKind, runID string) (store.Credential, error)
	PutAck(ctx context.Context, id string, a store.Ack) error
	PutSignal(ctx context.Context, id string, sig store.SignalRecord) error
	PutHeartbeat(ctx context.Context, id string) error
}

// Behaviour scripts the agent. The zero value is a healthy agent.
type Behaviour struct {
	Dead             bool          // does nothing at all: no heartbeat, no acknowledgement, no signal
	NeverRegister    bool          // takes the credential but never signals
	StaleHeartbeat   bool          // never writes a heartbeat (its heartbeat process is dead)
	FailRegistration bool          // signals UD_REG_FAILED for the run
	NeverRelease     bool          // never confirms deregistration when its record goes idle
	Delay            time.Duration // between taking the credential and signalling (GitHub registration time)
	Poll             time.Duration // how often it reads its record; default 50 ms
	HeartbeatEvery   time.Duration // default 1 s
}

// Agent is one simulated instance agent.
type Agent struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	registered []string
	creds      []store.Credential
	current    string // the run whose credential was taken and not yet released
}

// Simulate starts an agent for instanceID. It registers for every run that claims the instance (or
// created it) once a credential for that run is present, until ctx ends, Stop is called, or the
// record is terminated. Call Stop (t.Cleanup) before the test ends.
func Simulate(ctx context.Context, st Store, instanceID string, b Behaviour) *Agent {
	if b.Poll <= 0 {
		b.Poll = 50 * time.Millisecond
	}
	if b.HeartbeatEvery <= 0 {
		b.HeartbeatEvery = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &Agent{cancel: cancel, done: make(chan struct{})}
	go a.run(ctx, st, instanceID, b)
	return a
}

// Key is the signing key of instance id's simulated agent: the same for every agent simulated on
// the instance, as the real agent keeps its key across restarts.
func Key(id string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("claimtest agent key\n" + id))
	return ed25519.NewKeyFromSeed(seed[:])
}

// Signed is sig signed by instance id's simulated agent (Key), now.
func Signed(id string, sig store.SignalRecord) store.SignalRecord {
	sig.Sign(id, Key(id), time.Now())
	return sig
}

// Stop stops the agent and waits for it.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}

// Registered lists the runs the agent registered for, in order.
func (a *Agent) Registered() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.registered...)
}

// Credentials lists the credentials the agent took, in order.
func (a *Agent) Credentials() []store.Credential {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]store.Credential(nil), a.creds...)
}

func (a *Agent) run(ctx context.Context, st Store, id string, b Behaviour) {
	defer close(a.done)
	if b.Dead {
		<-ctx.Done()
		return
	}
	if !b.StaleHeartbeat {
		_ = st.PutHeartbeat(ctx, id)
	}
	poll := time.NewTicker(b.Poll)
	defer poll.Stop()
	beat := time.NewTicker(b.HeartbeatEvery)
	defer beat.Stop()
	handled := map[string]bool{} // runs whose credential was taken
	pending := ""                // run still to be signalled (a failed write is retried)
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if !b.StaleHeartbeat {
				_ = st.PutHeartbeat(ctx, id)
			}
		case <-poll.C:
			if pending == "" {
				run, gone := a.take(ctx, st, id, handled, b)
				if gone {
					return // the instance was terminated
				}
				pending = run
				if pending == "" || b.NeverRegister {
					pending = ""
					continue
				}
				if b.Delay > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(b.Delay):
					}
				}
			}
			sig := store.SignalRegistered
			if b.FailRegistration {
				sig = store.SignalRegistrationFailed
			}
			if err := st.PutSignal(ctx, id, Signed(id, store.SignalRecord{Signal: sig, RunID: pending, Detail: "simulated"})); err != nil {
				continue
			}
			if sig == store.SignalRegistered {
				a.mu.Lock()
				a.registered = append(a.registered, pending)
				a.mu.Unlock()
			}
			pending = ""
		}
	}
}

// take reads the record and, when it is claimed (or created) for a run not handled yet and that
// run's credential is there, takes the credential and returns the run. gone: the record is
// terminated.
func (a *Agent) take(ctx context.Context, st Store, id string, handled map[string]bool, b Behaviour) (run string, gone bool) {
	in, err := st.Get(ctx, id)
	if err == nil && in.RunID == "" && in.State == store.StateIdle && a.current != "" && !b.NeverRelease {
		// Released: deregister (the removal credential, if the control plane issued one) and clean.
		_ = st.PutAck(ctx, id, store.Ack{Kind: store.CredentialRemoval, RunID: a.current})
		if cred, cerr := st.ReadCredential(ctx, id, store.CredentialRemoval, a.current); cerr == nil {
			a.mu.Lock()
			a.creds = append(a.creds, cred)
			a.mu.Unlock()
		}
		if st.PutSignal(ctx, id, Signed(id, store.SignalRecord{Signal: store.SignalReleased, RunID: a.current, Detail: "simulated"})) == nil {
			a.current = ""
		}
		return "", false
	}
	if err != nil || in.RunID == "" || handled[in.RunID] || (in.State != store.StateClaimed && in.State != store.StateCreated) {
		return "", err == nil && in.State == store.StateTerminated
	}
	// The agent's permissions: acknowledge in its own partition, then read (never delete) the
	// control plane's credential item.
	if err := st.PutAck(ctx, id, store.Ack{Kind: store.CredentialRegistration, RunID: in.RunID}); err != nil {
		return "", false
	}
	cred, err := st.ReadCredential(ctx, id, store.CredentialRegistration, in.RunID)
	if err != nil {
		return "", false // not issued yet
	}
	handled[in.RunID] = true
	a.current = in.RunID
	a.mu.Lock()
	a.creds = append(a.creds, cred)
	a.mu.Unlock()
	return in.RunID, false
}
