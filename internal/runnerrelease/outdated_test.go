package runnerrelease_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// serving is a live record of an instance serving run with runner version, its agent key pinned,
// and the agent's private key.
func serving(t *testing.T, id, run, version string) (store.Instance, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return store.Instance{ID: id, State: store.StateRunning, RunID: run, RunnerVersion: version, AgentKey: base64.StdEncoding.EncodeToString(pub)}, priv
}

func outdatedReport(id, run string, key ed25519.PrivateKey) store.Report {
	sig := store.SignalRecord{Signal: store.SignalRunnerOutdated, RunID: run, Detail: runnerversion.OutdatedDetail}
	if key != nil {
		sig.Sign(id, key, t0)
	}
	return store.Report{Signal: sig}
}

// What counts as evidence of a security release: signed outdated reports from instances of two
// runs that the records say run a runner older than the current release. One forged report, any
// number from one run, unsigned or wrongly signed ones, a report about another run, and reports
// from instances already on the current release do not suffice.
func TestOutdatedEvidence(t *testing.T) {
	t.Parallel()
	cur := runnerversion.Release{Version: "2.338.0", Published: t0.Add(-time.Hour)}
	a, ka := serving(t, "i-a", "run-1", "2.337.0")
	b, kb := serving(t, "i-b", "run-1", "2.337.0")
	c, kc := serving(t, "i-c", "run-2", "2.337.0")
	d, kd := serving(t, "i-d", "run-3", "2.338.0")
	_, other := serving(t, "i-x", "", "")
	tests := []struct {
		name    string
		live    []store.Instance
		reports map[string]store.Report
		ids     int
		enough  bool
	}{
		{"two runs", []store.Instance{a, c}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-1", ka), "i-c": outdatedReport("i-c", "run-2", kc)}, 2, true},
		{"one forged report", []store.Instance{a, c}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-1", ka)}, 1, false},
		{"many instances of one run", []store.Instance{a, b}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-1", ka), "i-b": outdatedReport("i-b", "run-1", kb)}, 2, false},
		{"unsigned", []store.Instance{a, c}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-1", nil), "i-c": outdatedReport("i-c", "run-2", nil)}, 0, false},
		{"signed by another key", []store.Instance{a, c}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-1", other), "i-c": outdatedReport("i-c", "run-2", kc)}, 1, false},
		{"another run", []store.Instance{a, c}, map[string]store.Report{"i-a": outdatedReport("i-a", "run-9", ka), "i-c": outdatedReport("i-c", "run-2", kc)}, 1, false},
		{"already current", []store.Instance{c, d}, map[string]store.Report{"i-c": outdatedReport("i-c", "run-2", kc), "i-d": outdatedReport("i-d", "run-3", kd)}, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids, enough := runnerrelease.Outdated(tc.live, tc.reports, cur)
			if len(ids) != tc.ids || enough != tc.enough {
				t.Errorf("Outdated = %v, %v; want %d instances, enough %v", ids, enough, tc.ids, tc.enough)
			}
		})
	}
}

// reporter answers the agents' reports from a map.
type reporter map[string]store.Report

func (r reporter) Reports(_ context.Context, _ store.CredentialKind, qs []store.ReportQuery) (map[string]store.Report, error) {
	out := map[string]store.Report{}
	for _, q := range qs {
		if rep, ok := r[q.ID]; ok {
			out[q.ID] = rep
		} else {
			out[q.ID] = store.Report{SignalErr: store.ErrNotFound}
		}
	}
	return out, nil
}

// Outdated reports from two runs make the current release due at once for every older idle
// instance, on every replica (through the table), though it was published an hour ago, well within
// the upgrade lag; one forged report does not. Fails on the code before, which never read them.
func TestOutdatedReportsMakeTheCurrentReleaseDueAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.338.0", Published: t0.Add(-time.Hour)})
	leader, other := e.cache(), e.cache()
	if _, err := leader.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	idle := store.Instance{ID: "i-idle", State: store.StateIdle, RunnerVersion: "2.337.0"}
	a, ka := serving(t, "i-a", "run-1", "2.337.0")
	c, kc := serving(t, "i-c", "run-2", "2.337.0")
	live := []store.Instance{idle, a, c}

	forged := reporter{"i-a": outdatedReport("i-a", "run-1", ka)}
	if _, err := leader.CheckOutdated(t.Context(), forged, live); err != nil {
		t.Fatal(err)
	}
	if why := leader.Due(idle, runnerversion.DefaultLag, e.clock()); why != "" {
		t.Fatalf("one report retired an idle instance: %s", why)
	}

	both := reporter{"i-a": outdatedReport("i-a", "run-1", ka), "i-c": outdatedReport("i-c", "run-2", kc)}
	ids, err := leader.CheckOutdated(t.Context(), both, live)
	if err != nil || len(ids) != 2 {
		t.Fatalf("CheckOutdated = %v, %v", ids, err)
	}
	if _, err := other.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*runnerrelease.Cache{"leader": leader, "other replica": other} {
		if why := c.Due(idle, runnerversion.DefaultLag, e.clock()); why == "" {
			t.Errorf("%s: an idle 2.337.0 instance is not due after the outdated reports", name)
		}
		if why := c.Due(store.Instance{RunnerVersion: "2.338.0"}, runnerversion.DefaultLag, e.clock()); why != "" {
			t.Errorf("%s: a current instance is due: %s", name, why)
		}
	}
}
