package store_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A signed signal survives the table and verifies under the agent's key only; any change to it, a
// signature for another instance, or another key does not verify. The record pins one key for its
// life.
func TestSignedSignalsAndPinnedKey(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	in := idle(t, st, "i-sig")
	if in.AgentKey != "" {
		t.Fatalf("a new record has agent key %q", in.AgentKey)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	sig := store.SignalRecord{Signal: store.SignalReleased, RunID: "4242:1:1", Detail: "clean"}
	sig.Sign("i-sig", key, time.Now())
	if err := st.PutSignal(ctx, "i-sig", sig); err != nil {
		t.Fatal(err)
	}
	got, err := st.LastSignal(ctx, "i-sig")
	if err != nil {
		t.Fatal(err)
	}
	if !got.SelfSigned("i-sig") || !got.SignedBy("i-sig", sig.Key) {
		t.Fatalf("the stored signal %+v does not verify", got)
	}
	forged := got
	forged.RunID = "4242:2:1"
	wrongKey := got
	wrongKey.Sign("i-sig", other, got.At)
	for name, bad := range map[string]bool{
		"another run":         forged.SignedBy("i-sig", sig.Key),
		"another instance":    got.SignedBy("i-other", sig.Key),
		"another key":         wrongKey.SignedBy("i-sig", sig.Key),
		"unsigned":            store.SignalRecord{Signal: store.SignalReleased, RunID: "4242:1:1"}.SignedBy("i-sig", sig.Key),
		"not a key":           got.SignedBy("i-sig", "not base64!"),
		"unsigned self-check": store.SignalRecord{Signal: store.SignalReleased}.SelfSigned("i-sig"),
	} {
		if bad {
			t.Errorf("%s verifies", name)
		}
	}

	if err := st.PinAgentKey(ctx, "i-sig", sig.Key); err != nil {
		t.Fatal(err)
	}
	if err := st.PinAgentKey(ctx, "i-sig", sig.Key); err != nil {
		t.Errorf("pinning the same key again: %v", err)
	}
	if err := st.PinAgentKey(ctx, "i-sig", wrongKey.Key); !errors.Is(err, store.ErrConflict) {
		t.Errorf("pinning another key: %v, want ErrConflict", err)
	}
	if err := st.PinAgentKey(ctx, "i-missing", sig.Key); !errors.Is(err, store.ErrConflict) {
		t.Errorf("pinning the key of a missing record: %v, want ErrConflict", err)
	}
	if rec, err := st.Get(ctx, "i-sig"); err != nil || rec.AgentKey != sig.Key {
		t.Errorf("record agent key %q, %v; want the pinned key", rec.AgentKey, err)
	}
}
