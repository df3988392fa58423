package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// TestReports reads the reports of more instances than one BatchGetItem takes (keys of 120
// signals and 60 acknowledgements) and gets, for each, what LastSignal and LastAck return: the
// signal and acknowledgement written, ErrNotFound for none, ErrInvalid for a forged item.
func TestReports(t *testing.T) {
	t.Parallel()
	st, db, table := newStore(t)
	ctx := t.Context()
	var qs []store.ReportQuery
	for i := range 120 {
		id := fmt.Sprintf("i-%04d", i)
		qs = append(qs, store.ReportQuery{ID: id, Ack: i%2 == 0})
		if i%3 == 0 {
			if err := st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: "run-" + id}); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 0 {
			if err := st.PutAck(ctx, id, store.Ack{Kind: store.CredentialRegistration, RunID: "run-" + id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A job holding the instance role writes its agent partition: a signal that is not one.
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "AGENT#i-0001"}, "sk": &types.AttributeValueMemberS{Value: "SIGNAL"},
		"signal": &types.AttributeValueMemberN{Value: "1"},
	}}); err != nil {
		t.Fatal(err)
	}
	qs = append(qs, store.ReportQuery{ID: "bad#id"})

	got, err := st.Reports(ctx, store.CredentialRegistration, qs)
	if err != nil {
		t.Fatalf("Reports: %v", err)
	}
	if len(got) != len(qs) {
		t.Fatalf("%d reports, want %d", len(got), len(qs))
	}
	for i, q := range qs[:120] {
		r := got[q.ID]
		switch {
		case i == 1:
			if !errors.Is(r.SignalErr, store.ErrInvalid) {
				t.Errorf("%s: forged signal read as %+v, %v; want ErrInvalid", q.ID, r.Signal, r.SignalErr)
			}
		case i%3 == 0:
			if r.SignalErr != nil || r.Signal.Signal != store.SignalRegistered || r.Signal.RunID != "run-"+q.ID {
				t.Errorf("%s: signal %+v, %v", q.ID, r.Signal, r.SignalErr)
			}
		default:
			if !errors.Is(r.SignalErr, store.ErrNotFound) {
				t.Errorf("%s: signal error %v, want ErrNotFound", q.ID, r.SignalErr)
			}
		}
		switch {
		case !q.Ack:
			if r.AckErr != nil || r.Ack.RunID != "" {
				t.Errorf("%s: acknowledgement read unasked: %+v, %v", q.ID, r.Ack, r.AckErr)
			}
		case i%4 == 0:
			if r.AckErr != nil || r.Ack.RunID != "run-"+q.ID {
				t.Errorf("%s: acknowledgement %+v, %v", q.ID, r.Ack, r.AckErr)
			}
		default:
			if !errors.Is(r.AckErr, store.ErrNotFound) {
				t.Errorf("%s: acknowledgement error %v, want ErrNotFound", q.ID, r.AckErr)
			}
		}
	}
	if r := got["bad#id"]; !errors.Is(r.SignalErr, store.ErrInvalid) {
		t.Errorf("invalid id: %v, want ErrInvalid", r.SignalErr)
	}
}

// TestFitting lists through the by_fit index exactly the live records of one runner class and
// scope in one state; a release's new scope moves the record to its new key, and a terminated
// record leaves the index.
func TestFitting(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	mk := func(id, class, scope string) {
		t.Helper()
		_, err := st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: "seed", RunnerClass: class, Scope: scope, Threshold: st.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	mk("i-app1", "linux", "acme/app")
	mk("i-app2", "linux", "Acme/App")
	mk("i-org", "linux", "acme")
	mk("i-other", "linux", "acme/other")
	mk("i-gpu", "gpu", "acme/app")
	// A release narrows i-org to acme/other: it leaves acme's key for acme/other's.
	empty := ""
	if _, err := st.Transition(ctx, "i-org", store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "seed", SetRunID: &empty,
		SetScope: "acme/other", RunnerClass: "linux"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Transition(ctx, "i-app2", store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminated}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Transition(ctx, "i-app1", store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, SetScope: "acme/app"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a new scope without the runner class: %v, want ErrInvalid", err)
	}
	ids := func(state store.State, class, scope string) []string {
		t.Helper()
		recs, err := st.Fitting(ctx, state, class, scope)
		if err != nil {
			t.Fatalf("Fitting(%s, %s, %s): %v", state, class, scope, err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		state        store.State
		class, scope string
		want         []string
	}{
		{store.StateRunning, "linux", "ACME/app", []string{"i-app1"}},
		{store.StateRunning, "gpu", "acme/app", []string{"i-gpu"}},
		{store.StateIdle, "linux", "acme/other", []string{"i-org"}},
		{store.StateRunning, "linux", "acme/other", []string{"i-other"}},
		{store.StateRunning, "linux", "acme", nil},
		{store.StateIdle, "linux", "acme/app", nil},
	} {
		if got := ids(c.state, c.class, c.scope); !slices.Equal(got, c.want) {
			t.Errorf("Fitting(%s, %s, %s) = %v, want %v", c.state, c.class, c.scope, got, c.want)
		}
	}
	if _, err := st.Fitting(ctx, store.StateIdle, "", "acme/app"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Fitting without a class: %v, want ErrInvalid", err)
	}
}
