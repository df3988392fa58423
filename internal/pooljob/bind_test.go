package pooljob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// bindEnv is a ledger and instance records in DynamoDB Local, and the job queue's Bind over them.
// Each scenario uses a scale set id of its own, so its jobs and instances are its own.
type bindEnv struct {
	st   *store.Store
	sets atomic.Int64
}

func newBindEnv(t *testing.T) *bindEnv {
	t.Helper()
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "bind")
	if err := store.CreateTable(t.Context(), db, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	return &bindEnv{st: store.New(db, table)}
}

// bindSet is one scenario's scale set: jobs named by a letter, each served by the instance brought
// up for it ("i-<set>-<letter>"), whose just-in-time runner's id is runnerOf that instance.
type bindSet struct {
	e  *bindEnv
	id int64
}

func (e *bindEnv) set(t *testing.T, letters ...string) bindSet {
	t.Helper()
	s := bindSet{e: e, id: e.sets.Add(1)}
	for _, l := range letters {
		j, in := s.job(l), s.instance(l)
		if _, err := e.st.Create(t.Context(), store.Instance{ID: in, State: store.StateWarming, Pool: "warm", RunID: j.RunKey()}); err != nil {
			t.Fatal(err)
		}
		body, err := warmpool.EncodeJob(j)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := json.Marshal(warmpool.JobResult{InstanceID: in, Source: warmpool.SourceHot, RunnerID: runnerOf(in)})
		if _, _, err := e.st.CreateRun(t.Context(), store.Run{Key: j.LedgerKey(), Status: warmpool.JobServed, Request: []byte(body), Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s bindSet) job(letter string) warmpool.Job {
	return warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(letter[0]), RunID: 9, Repository: "acme/app", RepositoryID: 1,
		Labels: []string{"set"}, Pool: "warm", ScaleSet: "set", ScaleSetID: s.id, ScaleSetScope: "acme", ScaleSetJob: "j-" + letter}
}

func (s bindSet) instance(letter string) string { return fmt.Sprintf("i-%d-%s", s.id, letter) }

// runnerOf is the id GitHub gave the just-in-time runner of the instance "i-<set>-<letter>".
func runnerOf(instance string) int64 {
	var set int64
	var letter string
	_, _ = fmt.Sscanf(strings.ReplaceAll(instance, "-", " "), "i %d %s", &set, &letter)
	return 1000*set + int64(letter[0])
}

// bound is a ledger's binding: the instance it names, the runner id it records, the one it handed.
type bound struct {
	Instance string
	Runner   int64
	Handed   string
}

func (s bindSet) ledgers(t *testing.T, letters ...string) map[string]bound {
	t.Helper()
	out := map[string]bound{}
	for _, l := range letters {
		r, err := s.e.st.GetRun(t.Context(), s.job(l).LedgerKey())
		if err != nil {
			t.Fatal(err)
		}
		var res warmpool.JobResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		out[l] = bound{res.InstanceID, res.RunnerID, res.Handed}
	}
	return out
}

// consistent fails unless every ledger records the runner id of the instance it names, and, unless
// a binding was cut short between its two writes (shared), no two ledgers name one instance.
func consistent(t *testing.T, when string, got map[string]bound, shared bool) {
	t.Helper()
	named := map[string]string{}
	for l, b := range got {
		if b.Runner != runnerOf(b.Instance) {
			t.Errorf("%s: job %s's ledger names %s with runner %d, want its own runner %d", when, l, b.Instance, b.Runner, runnerOf(b.Instance))
		}
		if o, ok := named[b.Instance]; ok && !shared {
			t.Errorf("%s: jobs %s and %s both name %s", when, o, l, b.Instance)
		}
		named[b.Instance] = l
	}
}

// start is a JobStarted: job ran on the runner of the instance brought up for on.
type start struct{ job, on string }

// failRun fails the first UpdateRun of one ledger record without writing it: the replica died
// between Bind's two writes.
type failRun struct {
	*store.Store
	key    string
	failed atomic.Bool
}

var errDied = errors.New("replica died")

func (f *failRun) UpdateRun(ctx context.Context, r store.Run, v int64) (store.Run, error) {
	if r.Key == f.key && f.failed.CompareAndSwap(false, true) {
		return store.Run{}, errDied
	}
	return f.Store.UpdateRun(ctx, r, v)
}

// TestBindKeepsEachRunnerWithItsInstance: JobStarted says which runner took a scale set job, and
// Bind swaps instances between ledgers so that each job's ledger names the instance that serves
// it. Whatever the chain (X's runner takes Y, Y's takes Z, Z's takes X) and whatever the order in
// which the JobStarted messages come, redelivered or after a replica died between Bind's two
// writes, every ledger names an instance with that instance's own runner id, no two name one
// instance, and each job's ledger ends naming the instance it started on, handing the one brought
// up for it. On the code before, the second and third JobStarted of a chain left a ledger naming an
// instance with another instance's runner id (the job's own) and an instance named by two ledgers.
func TestBindKeepsEachRunnerWithItsInstance(t *testing.T) {
	t.Parallel()
	e := newBindEnv(t)
	chain := []start{{"Y", "X"}, {"Z", "Y"}, {"X", "Z"}}
	type scenario struct {
		name    string
		letters []string
		starts  []start
		// crash: the ledger of this job is not written at its first Bind (an error), as if the
		// replica died after the holder's write; the JobStarted is delivered again.
		crash string
		want  map[string]string // job: the instance (by letter) its ledger ends naming
	}
	scenarios := []scenario{
		{"two jobs swap", []string{"X", "Y"}, []start{{"X", "Y"}}, "", map[string]string{"X": "Y", "Y": "X"}},
		{"each job on its own runner", []string{"X", "Y"}, []start{{"X", "X"}, {"Y", "Y"}}, "", map[string]string{"X": "X", "Y": "Y"}},
		{"two swaps in a row", []string{"X", "Y", "Z"}, []start{{"Y", "X"}, {"Z", "Y"}}, "", map[string]string{"X": "Z", "Y": "X", "Z": "Y"}},
		{"chain of four", []string{"W", "X", "Y", "Z"}, []start{{"X", "W"}, {"Z", "Y"}, {"Y", "X"}, {"W", "Z"}}, "",
			map[string]string{"W": "Z", "X": "W", "Y": "X", "Z": "Y"}},
		{"crash between the writes", []string{"X", "Y", "Z"}, chain, "Z", map[string]string{"X": "Z", "Y": "X", "Z": "Y"}},
	}
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		var starts []start
		var names []string
		for _, i := range order {
			starts = append(starts, chain[i])
			names = append(names, chain[i].job+" on "+chain[i].on)
		}
		scenarios = append(scenarios, scenario{"three-way chain: " + strings.Join(names, ", "), []string{"X", "Y", "Z"}, starts, "",
			map[string]string{"X": "Z", "Y": "X", "Z": "Y"}})
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := e.set(t, sc.letters...)
			fr := &failRun{Store: e.st}
			if sc.crash != "" {
				fr.key = s.job(sc.crash).LedgerKey()
			}
			q := pooljob.NewJobQueue(nil, "", fr)
			bind := func(st start) (bool, error) {
				in := s.instance(st.on)
				return q.Bind(ctx, s.job(st.job), warmpool.RunnerName(in), runnerOf(in))
			}
			// Every JobStarted, then every one again (a redelivery binds nothing more).
			for round := range 2 {
				for _, st := range sc.starts {
					rebound, err := bind(st)
					if errors.Is(err, errDied) {
						consistent(t, fmt.Sprintf("after %s on %s died", st.job, st.on), s.ledgers(t, sc.letters...), true)
						if rebound, err = bind(st); err != nil {
							t.Fatalf("%s on %s delivered again: %v", st.job, st.on, err)
						}
					}
					if err != nil {
						t.Fatalf("%s on %s: %v", st.job, st.on, err)
					}
					if round == 1 && rebound {
						t.Errorf("%s on %s redelivered: rebound, want nothing left to do", st.job, st.on)
					}
					consistent(t, fmt.Sprintf("after %s on %s (round %d)", st.job, st.on, round+1), s.ledgers(t, sc.letters...), false)
				}
			}
			want := map[string]bound{}
			for _, l := range sc.letters {
				on := s.instance(sc.want[l])
				handed := ""
				if sc.want[l] != l {
					handed = s.instance(l)
				}
				want[l] = bound{on, runnerOf(on), handed}
			}
			if diff := cmp.Diff(want, s.ledgers(t, sc.letters...)); diff != "" {
				t.Errorf("ledgers after every JobStarted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBindRecordsGitHubsRunnerID: the runner id j's ledger records for the instance it started on
// is JobStarted's (GitHub's word, not an instance's), also when the ledger names that instance
// already with another id; an id that is not positive is not recorded (the one the ledger naming
// the instance recorded is kept); a runner that is not one of ours changes nothing.
func TestBindRecordsGitHubsRunnerID(t *testing.T) {
	t.Parallel()
	e := newBindEnv(t)
	tests := []struct {
		name     string
		runner   func(s bindSet) string
		id       int64
		job      string
		want     map[string]bound // by letter of the instance named, runner id, handed letter
		rebound  bool
		setupBad bool // X's ledger names i-X with a wrong runner id first
	}{
		{"swap records JobStarted's id", func(s bindSet) string { return warmpool.RunnerName(s.instance("Y")) }, 77, "X",
			map[string]bound{"X": {"Y", 77, "X"}, "Y": {"X", 0, "Y"}}, true, false},
		{"id not positive: the holder's recorded id", func(s bindSet) string { return warmpool.RunnerName(s.instance("Y")) }, -3, "X",
			map[string]bound{"X": {"Y", 0, "X"}, "Y": {"X", 0, "Y"}}, true, false},
		{"bound already: a wrong id corrected", func(s bindSet) string { return warmpool.RunnerName(s.instance("X")) }, 0, "X",
			map[string]bound{"X": {"X", 0, ""}, "Y": {"Y", 0, ""}}, false, true},
		{"not one of ours", func(bindSet) string { return "hosted-runner-7" }, 77, "X",
			map[string]bound{"X": {"X", 0, ""}, "Y": {"Y", 0, ""}}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := e.set(t, "X", "Y")
			if tc.setupBad {
				r, err := e.st.GetRun(ctx, s.job("X").LedgerKey())
				if err != nil {
					t.Fatal(err)
				}
				r.Result, _ = json.Marshal(warmpool.JobResult{InstanceID: s.instance("X"), Source: warmpool.SourceHot, RunnerID: 5})
				if _, err := e.st.UpdateRun(ctx, r, r.Version); err != nil {
					t.Fatal(err)
				}
			}
			id := tc.id
			if id == 0 {
				id = runnerOf(s.instance("X"))
			}
			rebound, err := pooljob.NewJobQueue(nil, "", e.st).Bind(ctx, s.job(tc.job), tc.runner(s), id)
			if err != nil || rebound != tc.rebound {
				t.Fatalf("Bind = %v, %v; want %v, nil", rebound, err, tc.rebound)
			}
			want := map[string]bound{}
			for l, b := range tc.want {
				w := bound{Instance: s.instance(b.Instance), Runner: b.Runner}
				if w.Runner == 0 {
					w.Runner = runnerOf(w.Instance)
				}
				if b.Handed != "" {
					w.Handed = s.instance(b.Handed)
				}
				want[l] = w
			}
			if diff := cmp.Diff(want, s.ledgers(t, "X", "Y")); diff != "" {
				t.Errorf("ledgers (-want +got):\n%s", diff)
			}
		})
	}
}
