package store_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// TestOwnWriteAfterLostAnswer: every conditional write of the store, its first attempt applied by
// DynamoDB Local and answered 500 (the answer lost), so the SDK retries and the retry fails its
// condition against the first attempt. Each write recognises its own applied write and succeeds
// with the item as it wrote it; a competitor's write is still a conflict.
func TestOwnWriteAfterLostAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, _, table := newStore(t)
	lost := &faults.LostAnswer{Conditional: true}
	cfg, err := stacktest.Shared(t).AWSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Transport: lost}
	st := store.New(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), table)
	hour := st.Now().Add(time.Hour)
	empty := ""
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s after a lost answer: %v", what, err)
		}
	}

	_, err = st.Create(ctx, store.Instance{ID: "i-0lost", State: store.StateCreated, RunID: "r1", Threshold: hour})
	must("Create", err)
	rec, err := st.Transition(ctx, "i-0lost", store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "r1"})
	must("Transition created->running", err)
	if rec.State != store.StateRunning || rec.RunID != "r1" {
		t.Fatalf("Transition returned %s run %q, want running r1", rec.State, rec.RunID)
	}
	_, err = st.Transition(ctx, "i-0lost", store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "r1", SetRunID: &empty, Threshold: hour})
	must("Transition running->idle", err)
	_, err = st.MarkPooled(ctx, "i-0lost")
	must("MarkPooled", err)
	rec, err = st.ClaimPooled(ctx, "i-0lost", "r2", hour)
	must("ClaimPooled", err)
	if rec.State != store.StateClaimed || rec.RunID != "r2" {
		t.Fatalf("ClaimPooled returned %s run %q, want claimed r2", rec.State, rec.RunID)
	}
	_, err = st.Expire(ctx, "i-0lost", "r2", "test")
	must("Expire", err)

	run, created, err := st.CreateRun(ctx, store.Run{Key: "1:2:1", RepositoryID: "1", RunID: "2", Attempt: 1, Status: "provisioning"})
	must("CreateRun", err)
	if !created {
		t.Fatal("CreateRun took its own applied write for an existing run")
	}
	run.Status = "provisioned"
	run, err = st.UpdateRun(ctx, run, run.Version)
	must("UpdateRun", err)
	first, err := st.MarkOnce(ctx, "delivery:1", time.Hour)
	must("MarkOnce", err)
	if !first {
		t.Fatal("MarkOnce took its own applied marker for an earlier delivery's")
	}
	cfgItem, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigRunnerClass, Name: "c", Spec: []byte(`{}`)}, 0)
	must("PutConfig create", err)
	_, err = st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigRunnerClass, Name: "c", Spec: []byte(`{"a":1}`)}, cfgItem.Version)
	must("PutConfig update", err)
	_, err = st.AcquireLease(ctx, "leader", "me", time.Minute)
	must("AcquireLease", err)

	// What others wrote is still theirs.
	if _, err := st.Claim(ctx, "i-0lost", "r3", hour); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a claim of a claimed instance = %v, want ErrConflict", err)
	}
	if _, created, err := st.CreateRun(ctx, store.Run{Key: "1:2:1", RepositoryID: "1", RunID: "2", Attempt: 1}); err != nil || created {
		t.Errorf("CreateRun of an existing run = created %v, %v; want the existing run", created, err)
	}
	if _, err := st.UpdateRun(ctx, run, run.Version-1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("UpdateRun on a stale version = %v, want ErrConflict", err)
	}
	if first, err := st.MarkOnce(ctx, "delivery:1", time.Hour); err != nil || first {
		t.Errorf("MarkOnce of a marked key = %v, %v; want not first", first, err)
	}
	if n := len(lost.Writes()); n < 10 {
		t.Errorf("answers of %d distinct conditional writes lost, want at least 10: %v", n, lost.Writes())
	}
}
