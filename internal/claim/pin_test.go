package claim_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// TestRegistrationCountsOnlyWithAPinnedKey: a registration report nobody signed, for an instance
// whose record pins no key (a job's report, or an agent's that would not start its runner), does not
// answer the wait; the agent's signed report does, and pins its key. The old registrar believed any
// report while no key was pinned, and answered the run with an instance whose later reports nothing
// attributes.
func TestRegistrationCountsOnlyWithAPinnedKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, reg := e.claimer(testOptions())
	id := e.idle(t, 1, nil)[0].ID
	const run = "run-7"
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: run}); err != nil {
		t.Fatal(err)
	}
	if err := reg.WaitRegistered(ctx, id, run, time.Second); !errors.Is(err, claim.ErrRegistrationTimeout) {
		t.Fatalf("wait on an unsigned registration with no key pinned: %v, want %v", err, claim.ErrRegistrationTimeout)
	}
	if rec := e.record(t, id); rec.AgentKey != "" {
		t.Fatalf("key %q pinned by an unsigned report", rec.AgentKey)
	}
	if err := e.st.PutSignal(ctx, id, claimtest.Signed(id, store.SignalRecord{Signal: store.SignalRegistered, RunID: run})); err != nil {
		t.Fatal(err)
	}
	if err := reg.WaitRegistered(ctx, id, run, 5*time.Second); err != nil {
		t.Fatalf("wait on the agent's signed registration: %v", err)
	}
	want := base64.StdEncoding.EncodeToString(claimtest.Key(id).Public().(ed25519.PublicKey))
	if rec := e.record(t, id); rec.AgentKey != want {
		t.Errorf("pinned key %q, want the agent's %q", rec.AgentKey, want)
	}
}
