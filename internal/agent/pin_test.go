// Tests of the agent's wait for its key's pin (pin.go): the runner starts only once the control plane
// pinned the key of the agent's own reports, and never when the record pins none in time or another.
package agent_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// pinner is the control plane's part the agent tests need: it reads the reports of the instances the
// test launched and pins the key of the first self-signed one (store.Attribute), as a registration
// wait, a warm-up or the pool worker does.
type pinner struct {
	mu  sync.Mutex
	ids []string
}

func startPinner(t testing.TB, st *store.Store) *pinner {
	p := &pinner{}
	ctx := t.Context()
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			p.mu.Lock()
			ids := append([]string(nil), p.ids...)
			p.mu.Unlock()
			for _, id := range ids {
				sig, err := st.LastSignal(ctx, id)
				if err != nil {
					continue
				}
				if rec, err := st.Get(ctx, id); err == nil && rec.AgentKey == "" {
					_, _, _ = st.Attribute(ctx, rec, sig)
				}
			}
		}
	}()
	return p
}

// launchFor launches an instance and writes what the control plane writes for its cold start for
// run: the registration credential and the created record.
func (e *env) launchFor(run string) string {
	e.t.Helper()
	id := e.launch()
	e.putCredential(id, run, store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, run)
	return id
}

// watch has the pinner read the reports of id (nil: nothing pins).
func (p *pinner) watch(id string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
}

// TestRunnerStartsOnlyOnceItsKeyIsPinned: the agent registers and reports, then reads its record until
// it pins the agent's key, and only then starts the runner. The old agent started the runner right
// after its report, before the control plane had read it: a job could then write a report signed with
// a key of its own and have that key pinned instead.
func TestRunnerStartsOnlyOnceItsKeyIsPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manual: true, noPin: true})
	ctx := t.Context()
	id := e.launchFor("run-1")
	rec, stop := e.recordingAgent(t, id)
	defer stop()
	sig := e.waitSignal(id, store.SignalRegistered, "run-1")
	// The agent looks at its record again and again while nothing pins its key.
	after := rec.gets.Load()
	if !eventually(func() bool { return rec.gets.Load() >= after+3 }) {
		t.Fatalf("the agent did not read its record again after its report (%d reads)", rec.gets.Load())
	}
	if rec.started.Load() {
		t.Fatal("the runner started before the control plane pinned the agent's key")
	}
	in, err := e.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, believed, err := e.store.Attribute(ctx, in, sig); err != nil || !believed {
		t.Fatalf("pinning the report's key: believed %v, err %v", believed, err)
	}
	e.waitRunner(id, "run-1")
	if last, err := e.store.LastSignal(ctx, id); err != nil || last.Signal != store.SignalRegistered {
		t.Errorf("last signal %+v (err %v), want the registration still", last, err)
	}
}

// TestRunnerNeverStartsUnpinned: a record that pins no key within PinWait, or another key than the
// agent's, is a failed registration: the agent reports UD_REG_FAILED saying so and never starts the
// runner, so the control plane discards the instance rather than hand it a job it cannot attribute.
func TestRunnerNeverStartsUnpinned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		other      bool // the record pins another key before the agent starts
	}{
		{name: "none in time", want: "none pinned within"},
		{name: "another key", want: "pins another key", other: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{manual: true, noPin: true})
			ctx := t.Context()
			id := e.launchFor("run-1")
			if tc.other {
				pub, _, err := ed25519.GenerateKey(nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.store.PinAgentKey(ctx, id, base64.StdEncoding.EncodeToString(pub)); err != nil {
					t.Fatal(err)
				}
			}
			rec, stop := e.recordingAgentWith(t, id, func(c *agent.Config) { c.PinWait = 500 * time.Millisecond })
			defer stop()
			sig := e.waitSignal(id, store.SignalRegistrationFailed, "run-1")
			if !strings.HasPrefix(sig.Detail, agent.KeyNotPinnedDetail) || !strings.Contains(sig.Detail, tc.want) {
				t.Errorf("UD_REG_FAILED detail %q, want %q ... %q", sig.Detail, agent.KeyNotPinnedDetail, tc.want)
			}
			// It keeps reading its record (the control plane discards it), and still does not start.
			after := rec.gets.Load()
			if !eventually(func() bool { return rec.gets.Load() >= after+2 }) {
				t.Fatalf("the agent stopped reading its record (%d reads)", rec.gets.Load())
			}
			if rec.started.Load() {
				t.Error("the runner started although the record does not pin the agent's key")
			}
		})
	}
}
