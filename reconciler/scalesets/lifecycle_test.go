package scalesets_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
)

// configured is a scale set configuration a test changes while the replicas run.
type configured struct {
	mu     sync.Mutex
	sets   []declared.ScaleSet
	broken []string // names of stored sets whose configuration cannot be read
}

func (c *configured) setBroken(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = names
}

func (c *configured) brokenNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

func (c *configured) set(sets ...declared.ScaleSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sets = sets
}

func (c *configured) get(context.Context) ([]declared.ScaleSet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]declared.ScaleSet(nil), c.sets...), nil
}

// replicaOf starts a replica whose configured scale sets come from cfg.
func (e *env) replicaOf(t *testing.T, holder string, cfg *configured) *replica {
	t.Helper()
	return e.start(t, holder, func(c *scalesets.Config) { c.ScaleSets, c.Broken = cfg.get, cfg.brokenNames })
}

// TestRunnerGroupChangeMovesTheScaleSet: changing runner_group moves the scale set this deployment
// made to the new group (its id, and so its queued jobs, stay), rather than leaving it behind and
// making a second one.
func TestRunnerGroupChangeMovesTheScaleSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gh := github.NewClient(nil).WithAuthToken(e.gh.PAT())
	gh.BaseURL, _ = url.Parse(e.ghURL + "/")
	g, _, err := gh.Actions.CreateOrganizationRunnerGroup(t.Context(), org, github.CreateRunnerGroupRequest{Name: github.String("pools"), Visibility: github.String("all")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &configured{}
	cfg.set(e.set)
	e.replicaOf(t, "a", cfg)
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	before, _ := e.gh.ScaleSet(org, setName)

	moved := e.set
	moved.RunnerGroup = "pools"
	cfg.set(moved)
	eventually(t, "the scale set in group pools", func() bool {
		st, _ := e.gh.ScaleSet(org, setName)
		return st.GroupID == g.GetID() && st.Session != nil
	})
	after, _ := e.gh.ScaleSet(org, setName)
	if after.ID != before.ID {
		t.Errorf("scale set id %d after the move, want %d (moved, not made again)", after.ID, before.ID)
	}
	if n := e.gh.ScaleSetCount(org); n != 1 {
		t.Errorf("%d scale sets at GitHub, want 1", n)
	}
}

// TestRemovedScaleSetIsDeletedAtGitHub: a scale set whose configuration is removed is deleted at
// GitHub, once no instance of this deployment runs one of its jobs, even when the replica that held
// its session is gone.
func TestRemovedScaleSetIsDeletedAtGitHub(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfgA, cfgB := &configured{}, &configured{}
	cfgA.set(e.set)
	cfgB.set(e.set)
	a := e.replicaOf(t, "a", cfgA)
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	st, _ := e.gh.ScaleSet(org, setName)

	// An instance serves a job of the set: the set must outlive it.
	busy := e.warm(t, store.StateReady, 1)[0]
	job := warmpool.Job{JobID: 5, ScaleSet: setName, ScaleSetID: st.ID, ScaleSetScope: org}
	if _, err := e.st.Claim(t.Context(), busy.ID, job.RunKey(), time.Now().Add(time.Hour), store.StateReady); err != nil {
		t.Fatal(err)
	}
	a.kill() // the holder dies; then the configuration goes
	cfgB.set()
	b := e.replicaOf(t, "b", cfgB)
	time.Sleep(time.Second) // several resyncs of b
	if _, ok := e.gh.ScaleSet(org, setName); !ok {
		t.Fatal("scale set deleted while an instance still runs one of its jobs")
	}
	if _, err := e.st.Transition(t.Context(), busy.ID, store.Change{From: []store.State{store.StateClaimed}, To: store.StateTerminated, Reason: "job done"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scale set deleted at GitHub", func() bool { _, ok := e.gh.ScaleSet(org, setName); return !ok })
	if n := b.m.Metrics().Sessions(setName, "deleted"); n != 1 {
		t.Errorf("deleted events = %d, want 1", n)
	}
}

// TestBrokenScaleSetIsNotDeleted: a scale set whose stored configuration cannot be read (left out
// of the configured sets) is not taken for removed: it stays at GitHub until the item is fixed or
// deleted.
func TestBrokenScaleSetIsNotDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := &configured{}
	cfg.set(e.set)
	r := e.replicaOf(t, "a", cfg)
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	cfg.setBroken(setName)
	cfg.set()
	eventually(t, "the listener stopped", func() bool { return e.sessionOwner() == "" })
	time.Sleep(time.Second) // several resyncs
	if _, ok := e.gh.ScaleSet(org, setName); !ok {
		t.Fatal("the scale set of a broken configuration item was deleted at GitHub")
	}
	cfg.setBroken()
	eventually(t, "the scale set deleted once the item is gone", func() bool { _, ok := e.gh.ScaleSet(org, setName); return !ok })
	if n := r.m.Metrics().Sessions(setName, "deleted"); n != 1 {
		t.Errorf("deleted events = %d, want 1", n)
	}
}

// TestCapacityHonoursInstanceCaps: with an instance cap leaving room for 2 more instances and 1
// hot instance in the pool, the capacity announced to GitHub is 3, not max_runners (10).
func TestCapacityHonoursInstanceCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.warm(t, store.StateReady, 1)
	e.start(t, "a", func(c *scalesets.Config) {
		c.Room = func(_ context.Context, pool string) (int, bool, error) {
			if pool != poolName {
				t.Errorf("room asked for pool %q", pool)
			}
			return 2, true, nil
		}
	})
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	eventually(t, "capacity 3 announced", func() bool { st, _ := e.gh.ScaleSet(org, setName); return st.MaxCapacity == 3 })
}
