// Package releasetest plays the instance agent's half of a release in tests: it watches instance
// records through the real store and, once a record is idle with its run id cleared, takes the
// removal credential the release wrote and signals as the real agent would (or fails, or stays
// silent). It runs against DynamoDB Local like the code under test, so the handshake is exercised
// end to end.
package releasetest

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Behavior is how a simulated agent answers a release.
type Behavior string

const (
	// Deregister takes the removal credential and signals UD_REMOVE_REG_REMOVE_RUN for the run.
	Deregister Behavior = "deregister"
	// Fail takes the removal credential and signals UD_REMOVE_REG_FAILED for the run.
	Fail Behavior = "fail"
	// Silent never signals (a hung or dead agent).
	Silent Behavior = "silent"
)

// PollInterval is how often a simulated agent reads its record.
const PollInterval = 20 * time.Millisecond

// Agent simulates the agents of a set of instances serving one run.
type Agent struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	keys map[string]ed25519.PrivateKey // signing keys by instance (StartSigned)

	mu    sync.Mutex
	creds map[string]store.Credential
	errs  []error
}

// Start starts one simulated agent per instance id. Each one answers the first release of runID it
// sees (record idle, run id cleared) with behavior b, then stops watching. Stop ends them all.
func Start(ctx context.Context, st *store.Store, runID string, ids []string, b Behavior) *Agent {
	return start(ctx, st, runID, ids, b, nil)
}

// StartSigned is Start with agents that sign their signals, as the real agent does, with the key
// of their instance in keys (whose public halves the test pins with store.PinAgentKey).
func StartSigned(ctx context.Context, st *store.Store, runID string, keys map[string]ed25519.PrivateKey, b Behavior) *Agent {
	var ids []string
	for id := range keys {
		ids = append(ids, id)
	}
	return start(ctx, st, runID, ids, b, keys)
}

func start(ctx context.Context, st *store.Store, runID string, ids []string, b Behavior, keys map[string]ed25519.PrivateKey) *Agent {
	ctx, cancel := context.WithCancel(ctx)
	a := &Agent{cancel: cancel, creds: map[string]store.Credential{}, keys: keys}
	for _, id := range ids {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.run(ctx, st, runID, id, b); err != nil && !errors.Is(err, context.Canceled) {
				a.mu.Lock()
				a.errs = append(a.errs, fmt.Errorf("agent of %s: %w", id, err))
				a.mu.Unlock()
			}
		}()
	}
	return a
}

func (a *Agent) run(ctx context.Context, st *store.Store, runID, id string, b Behavior) error {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		rec, err := st.Get(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if rec.State != store.StateIdle || rec.RunID != "" || b == Silent {
			continue
		}
		// Released: the real agent removes its runner with the remove token the release wrote.
		cred, err := st.TakeCredential(ctx, id, store.CredentialRemoval, runID)
		if errors.Is(err, store.ErrNotFound) {
			continue // not written yet, or another release's copy was already taken
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.creds[id] = cred
		a.mu.Unlock()
		sig := store.SignalReleased
		if b == Fail {
			sig = store.SignalReleaseFailed
		}
		out := store.SignalRecord{Signal: sig, RunID: runID, Detail: "simulated " + string(b)}
		if key := a.keys[id]; key != nil {
			out.Sign(id, key, time.Now())
		}
		return st.PutSignal(ctx, id, out)
	}
}

// Credential returns the removal credential the agent of id took, if it took one.
func (a *Agent) Credential(id string) (store.Credential, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.creds[id]
	return c, ok
}

// Stop stops every simulated agent and returns their errors.
func (a *Agent) Stop() error {
	a.cancel()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return errors.Join(a.errs...)
}
