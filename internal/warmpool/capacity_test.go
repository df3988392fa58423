package warmpool_test

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
)

// TestConvergeStopsAtTheCap: a pool of 5 under a deployment cap of 3, with one instance counted
// already, gets 2 created and a report that says the cap held 3 back; the next pass creates
// nothing and says so again. A runner class's own cap holds the same way.
func TestConvergeStopsAtTheCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		caps  func(l *quota.Ledger) *quota.Caps
		limit string
	}{
		{"deployment", func(l *quota.Ledger) *quota.Caps { return &quota.Caps{Ledger: l, MaxInstances: 3} }, quota.LimitDeployment},
		{"runner class", func(l *quota.Ledger) *quota.Caps {
			return &quota.Caps{Ledger: l, ClassMax: func(c string) int {
				if c == runnerClass {
					return 3
				}
				return 0
			}}
		}, quota.LimitRunnerClass},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			caps := tc.caps(quota.New(e.db, e.table, quota.Options{Now: e.clock.Now}))
			if err := caps.Reserve(t.Context(), "elsewhere", runnerClass, 1); err != nil {
				t.Fatal(err)
			}
			var capped []string
			tg := &targets{}
			tg.set(e.spec("small", 2, 3, "v1-a"))
			c := e.converger(t, tg.get, poolsize.Options{Capacity: caps, OnCapped: func(l string) { capped = append(capped, l) }})

			pr := poolReport(t, pass(t, c), "small")
			if len(pr.Created) != 2 || pr.Capped != 3 || pr.CappedBy != tc.limit || pr.Err != nil {
				t.Fatalf("pass 1: %+v; want 2 created, 3 held back by %s", pr, tc.limit)
			}
			pr = poolReport(t, pass(t, c), "small")
			if len(pr.Created) != 0 || pr.CreateCalls != 0 || pr.Capped != 3 || pr.Warming != 2 {
				t.Fatalf("pass 2: %+v; want nothing created, 3 held back", pr)
			}
			if len(capped) != 2 || capped[0] != tc.limit {
				t.Errorf("OnCapped calls %v, want one per pass", capped)
			}
			if n, err := caps.Ledger.Counter(t.Context(), quota.DeploymentCounter); err != nil || n != 3 {
				t.Errorf("deployment counter %d (%v), want 3", n, err)
			}
		})
	}
}
