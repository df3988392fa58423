package pooljob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// running is the record of an instance running the pool job of run key run.
func running(id, run string) store.Instance {
	return store.Instance{ID: id, State: store.StateRunning, RunID: run}
}

// TestFinished is the backstop's decision, records and listings to completions: only a running
// pool job's instance whose runner two listings of its scope in a row did not show is done; a
// listed runner (busy or idle) never is; a scope not listed this time keeps its marks.
func TestFinished(t *testing.T) {
	t.Parallel()
	const (
		repo = "acme/app"
		org  = "acme"
	)
	listed := func(ids ...string) map[string]bool {
		out := map[string]bool{}
		for _, id := range ids {
			out[strings.ToLower(warmpool.RunnerName(id))] = true
		}
		return out
	}
	scopeOf := map[string]string{"job:1": repo, "job:2": repo, "job:ss7-a": org}
	tests := []struct {
		name     string
		running  []store.Instance
		listed   map[string]map[string]bool
		missed   map[string]bool
		wantDone []string
		wantNext []string
	}{
		{"listed: kept", []store.Instance{running("i-1", "job:1")}, map[string]map[string]bool{repo: listed("i-1")}, nil, nil, nil},
		{"listed after a miss: kept, the mark cleared", []store.Instance{running("i-1", "job:1")}, map[string]map[string]bool{repo: listed("i-1")}, map[string]bool{"i-1": true}, nil, nil},
		{"missed once: looked at again", []store.Instance{running("i-1", "job:1")}, map[string]map[string]bool{repo: listed()}, nil, nil, []string{"i-1"}},
		{"missed twice: done", []store.Instance{running("i-1", "job:1")}, map[string]map[string]bool{repo: listed()}, map[string]bool{"i-1": true}, []string{"i-1"}, nil},
		{"scope not listed now: the mark waits", []store.Instance{running("i-1", "job:1")}, map[string]map[string]bool{}, map[string]bool{"i-1": true}, nil, []string{"i-1"}},
		{"no ledger job: left alone", []store.Instance{running("i-9", "job:9")}, map[string]map[string]bool{repo: listed()}, map[string]bool{"i-9": true}, nil, nil},
		{"listed in another scope only: done in its own", []store.Instance{running("i-3", "job:ss7-a")},
			map[string]map[string]bool{repo: listed("i-3"), org: listed()}, map[string]bool{"i-3": true}, []string{"i-3"}, nil},
		{"both sources in one check", []store.Instance{running("i-1", "job:1"), running("i-2", "job:2"), running("i-3", "job:ss7-a")},
			map[string]map[string]bool{repo: listed("i-2"), org: listed()}, map[string]bool{"i-1": true, "i-2": true, "i-3": true}, []string{"i-1", "i-3"}, nil},
		{"runner names ignore case", []store.Instance{running("i-ABC", "job:1")}, map[string]map[string]bool{repo: {"runnerpool-i-abc": true}}, map[string]bool{"i-ABC": true}, nil, nil},
		{"a mark of an instance no longer running is dropped", nil, map[string]map[string]bool{repo: listed()}, map[string]bool{"i-1": true}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			done, next := pooljob.Finished(tc.running, scopeOf, tc.listed, tc.missed)
			var gotDone []string
			for _, in := range done {
				gotDone = append(gotDone, in.ID)
			}
			if diff := cmp.Diff(tc.wantDone, gotDone); diff != "" {
				t.Errorf("done (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNext, slices.Sorted(maps.Keys(next))); diff != "" {
				t.Errorf("next (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunningJobs: only records running a pool job are the backstop's; a step-driven run's
// instance, a warm one and one still claimed or created for a job (no runner registered yet) are not.
func TestRunningJobs(t *testing.T) {
	t.Parallel()
	recs := []store.Instance{
		running("i-1", "job:1"),
		running("i-2", "run-42"),
		{ID: "i-3", State: store.StateClaimed, RunID: "job:3"},
		{ID: "i-4", State: store.StateCreated, RunID: "job:4"},
		{ID: "i-5", State: store.StateReady},
		{ID: "i-6", State: store.StateTerminating, RunID: "job:6"},
		running("i-7", "job:ss7-a"),
	}
	var got []string
	for _, in := range pooljob.RunningJobs(recs) {
		got = append(got, in.ID)
	}
	if diff := cmp.Diff([]string{"i-1", "i-7"}, got); diff != "" {
		t.Errorf("running pool jobs (-want +got):\n%s", diff)
	}
}

// ledger is the job ledger in memory: what the job's source recorded.
type ledger map[string]store.Run

func (l ledger) GetRun(_ context.Context, key string) (store.Run, error) {
	r, ok := l[key]
	if !ok {
		return store.Run{}, store.ErrNotFound
	}
	return r, nil
}

func (l ledger) add(t *testing.T, j warmpool.Job) {
	t.Helper()
	body, err := warmpool.EncodeJob(j)
	if err != nil {
		t.Fatal(err)
	}
	l[j.LedgerKey()] = store.Run{Key: j.LedgerKey(), Status: warmpool.JobServed, Request: []byte(body)}
}

// handedOn records the completions the backstop hands to the pool worker.
type handedOn struct {
	mu   sync.Mutex
	jobs []warmpool.Job
}

func (h *handedOn) Enqueue(_ context.Context, j warmpool.Job) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, j)
	return pooljob.Enqueued, nil
}

func (h *handedOn) got() []warmpool.Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.jobs)
}

// flaky lists and reads runners through gh, or fails to list while fail is set.
type flaky struct {
	gh    pooljob.BackstopGitHub
	fail  bool
	calls map[string]int
}

func (f *flaky) GetRunner(ctx context.Context, scope string, id int64) (ghaccess.Runner, error) {
	return f.gh.GetRunner(ctx, scope, id)
}

func (f *flaky) ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error) {
	f.calls[scope]++
	if f.fail {
		return nil, errors.New("502 Bad Gateway")
	}
	return f.gh.ListRunners(ctx, scope)
}

// servedOnTheFake is a webhook pool job served by a running instance whose just-in-time runner the
// GitHub fake made, with its ledger record naming the instance and the runner's id as the pool
// worker writes it, and the control plane's GitHub client over HTTP.
func servedOnTheFake(t *testing.T) (*githubfake.Server, *ghaccess.Client, ledger, warmpool.Job, store.Instance, ghaccess.JITConfig) {
	t.Helper()
	fake := githubfake.New(githubfake.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	gh, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	job := warmpool.Job{
		Action: warmpool.ActionQueued, JobID: 7, RunID: 70, Repository: "acme/app", RepositoryID: 1,
		Labels: []string{"self-hosted", "pool=warm"}, Pool: "warm", Event: "push", DeliveryID: "d-7",
	}
	in := running("i-0123456789abcdef0", job.RunKey())
	jit, err := gh.GenerateJITConfig(t.Context(), job.Repository, warmpool.RunnerName(in.ID), []string{"pool=warm"}, ghaccess.DefaultRunnerGroup)
	if err != nil {
		t.Fatal(err)
	}
	led := ledger{}
	led.served(t, job, in.ID, jit.RunnerID)
	return fake, gh, led, job, in, jit
}

// TestListedRunnerKeepsItsInstance: the backstop ends nothing whose runner GitHub still lists (a
// job still running, however long a hostile job keeps it so: GitHub's job timeout ends that), a
// listing error ends nothing and forgets nothing, and it takes the record and the ledger, never the
// instance's word, for what the instance serves. Once GitHub no longer lists the runner in two
// listings in a row and GitHub answers 404 for it by its id, the job's completion, as the ledger
// recorded the job, goes to the pool worker. The runner is a just-in-time runner of the GitHub fake,
// listed and read over HTTP by the control plane's client.
func TestListedRunnerKeepsItsInstance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, gh, led, job, in, jit := servedOnTheFake(t)
	lister := &flaky{gh: gh, calls: map[string]int{}}
	done := &handedOn{}
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: lister, Jobs: done})
	if err != nil {
		t.Fatal(err)
	}
	check := func() []string {
		t.Helper()
		ended, err := bs.Check(ctx, []store.Instance{in})
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		return ended
	}
	for range 5 {
		if ended := check(); len(ended) != 0 {
			t.Fatalf("ended %v while GitHub still lists the job's runner", ended)
		}
	}

	if err := gh.DeleteRunner(ctx, job.Repository, jit.RunnerID); err != nil { // GitHub removes the ephemeral runner after its job
		t.Fatal(err)
	}
	if ended := check(); len(ended) != 0 {
		t.Fatalf("ended %v after one listing without the runner: it may be a listing behind", ended)
	}
	lister.fail = true
	if ended, err := bs.Check(ctx, []store.Instance{in}); err == nil || len(ended) != 0 || len(done.got()) != 0 {
		t.Fatalf("check with a failing listing: ended %v, err %v, handed on %v; want an error and nothing ended", ended, err, done.got())
	}
	lister.fail = false
	if ended := check(); !slices.Equal(ended, []string{in.ID}) {
		t.Fatalf("ended %v after the second listing without the runner, want %s", ended, in.ID)
	}
	got := done.got()
	want := job
	want.Action, want.RunnerName, want.Conclusion, want.DeliveryID = warmpool.ActionCompleted, warmpool.RunnerName(in.ID), pooljob.ConclusionRunnerGone, ""
	if len(got) != 1 {
		t.Fatalf("completions handed on: %+v, want one", got)
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("completion (-want +got):\n%s", diff)
	}
	if n := bs.Inferred(pooljob.SourceWebhook, "warm"); n != 1 {
		t.Errorf("%d completions inferred for pool warm, want 1", n)
	}
	if n := lister.calls["acme/app"]; n != 8 {
		t.Errorf("%d listings of acme/app, want 8: one per check", n)
	}
}

// TestBackstopListsEachScopeOnce: one check lists each scope of the running jobs once, webhook
// jobs' repositories and scale set jobs' scopes alike, and at most MaxScopes of them, the least
// recently listed first, so GitHub's rate limit bounds nothing else: a scope left out is listed
// at the next check and its instances' marks wait for it. Nothing is listed without running jobs.
func TestBackstopListsEachScopeOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	led := ledger{}
	var recs []store.Instance
	for i, repo := range []string{"acme/a", "acme/b", "acme/a"} {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(i + 1), RunID: 9, Repository: repo, RepositoryID: 1, Labels: []string{"pool=warm"}, Pool: "warm"}
		led.add(t, j)
		recs = append(recs, running("i-"+string(rune('a'+i)), j.RunKey()))
	}
	ss := warmpool.Job{Action: warmpool.ActionQueued, JobID: 4, RunID: 9, Repository: "acme/c", RepositoryID: 1, Labels: []string{"set"}, Pool: "warm",
		ScaleSet: "set", ScaleSetID: 7, ScaleSetScope: "acme", ScaleSetJob: "j-4"}
	led.add(t, ss)
	// i-e is not running a job; i-f's job has no ledger record: neither is listed for or ended.
	recs = append(recs, running("i-d", ss.RunKey()), store.Instance{ID: "i-e", State: store.StateReady}, running("i-f", "job:999"))
	lister := &flaky{gh: noRunners{}, calls: map[string]int{}}
	done := &handedOn{}
	hooked := map[string]int{}
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: lister, Jobs: done, MaxScopes: 2,
		OnInferred: func(source, name string) { hooked[source+"/"+name]++ }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Check(ctx, nil); err != nil || len(lister.calls) != 0 {
		t.Fatalf("check without running jobs: %v, listings %v", err, lister.calls)
	}
	var ended []string
	for range 4 {
		got, err := bs.Check(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		ended = append(ended, got...)
	}
	// Three scopes, two a check, the least recently listed first: every instance is ended after
	// its scope's second listing, a scope whose instances are all ended is listed no more, and a
	// completion is handed on once while its record still says running.
	if diff := cmp.Diff(map[string]int{"acme": 2, "acme/a": 2, "acme/b": 2}, lister.calls); diff != "" {
		t.Errorf("listings by scope (-want +got):\n%s", diff)
	}
	slices.Sort(ended)
	if diff := cmp.Diff([]string{"i-a", "i-b", "i-c", "i-d"}, ended); diff != "" {
		t.Errorf("ended (-want +got):\n%s", diff)
	}
	if bs.Inferred(pooljob.SourceWebhook, "warm") != 3 || bs.Inferred(pooljob.SourceScaleSet, "set") != 1 {
		t.Errorf("inferred: %d webhook, %d scale set; want 3, 1", bs.Inferred(pooljob.SourceWebhook, "warm"), bs.Inferred(pooljob.SourceScaleSet, "set"))
	}
	if diff := cmp.Diff(map[string]int{"webhook/warm": 3, "scale_set/set": 1}, hooked); diff != "" {
		t.Errorf("OnInferred calls (-want +got):\n%s", diff)
	}
}

// noRunners is a GitHub whose scopes have no runners.
type noRunners struct{}

func (noRunners) ListRunners(context.Context, string) ([]ghaccess.Runner, error) { return nil, nil }

func (noRunners) GetRunner(context.Context, string, int64) (ghaccess.Runner, error) {
	return ghaccess.Runner{}, ghaccess.ErrRunnerNotFound
}

// served records in the ledger that job j is served by instance with runner runnerID, as the pool
// worker does (worker.go registerOne).
func (l ledger) served(t *testing.T, j warmpool.Job, instance string, runnerID int64) {
	t.Helper()
	l.add(t, j)
	r := l[j.LedgerKey()]
	res, err := json.Marshal(warmpool.JobResult{InstanceID: instance, Source: warmpool.SourceHot, RunnerID: runnerID})
	if err != nil {
		t.Fatal(err)
	}
	r.Result = res
	l[j.LedgerKey()] = r
}

// unlisted is a GitHub whose listings show no runner (every one skipped), and whose read of a runner
// by id answers from get, recording each id asked.
type unlisted struct {
	mu   sync.Mutex
	get  func(id int64) (ghaccess.Runner, error)
	asks []int64
}

func (u *unlisted) ListRunners(context.Context, string) ([]ghaccess.Runner, error) { return nil, nil }

func (u *unlisted) GetRunner(_ context.Context, _ string, id int64) (ghaccess.Runner, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asks = append(u.asks, id)
	return u.get(id)
}

func (u *unlisted) asked() []int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.asks)
}

// TestBackstopConfirmsByRunnerID: two listings in a row that miss a runner are not enough when the
// ledger records the runner's id: the backstop reads that runner at GitHub, and hands on the job's
// completion only on GitHub's 404. A runner GitHub still has (busy, idle or offline) keeps its
// instance and clears its mark (the next completion needs two more misses); an error ends nothing
// and keeps the mark (the next answer decides). The id read is the one the ledger records when the
// backstop confirms, also after Bind moved the instance and its runner to another scale set job. A
// job without a recorded runner id is decided by the two listings alone.
func TestBackstopConfirmsByRunnerID(t *testing.T) {
	t.Parallel()
	const runner = 501
	webhook := warmpool.Job{Action: warmpool.ActionQueued, JobID: 1, RunID: 9, Repository: "acme/app", RepositoryID: 1, Labels: []string{"pool=warm"}, Pool: "warm"}
	setJob := func(id int64) warmpool.Job {
		return warmpool.Job{Action: warmpool.ActionQueued, JobID: id, RunID: 9, Repository: "acme/app", RepositoryID: 1, Labels: []string{"set"}, Pool: "warm",
			ScaleSet: "set", ScaleSetID: 7, ScaleSetScope: "acme", ScaleSetJob: fmt.Sprint("j-", id)}
	}
	x, y := setJob(2), setJob(3)
	found := func(busy bool, status string) func(int64) (ghaccess.Runner, error) {
		return func(id int64) (ghaccess.Runner, error) {
			return ghaccess.Runner{ID: id, Name: "runnerpool-i-a", Status: status, Busy: busy}, nil
		}
	}
	gone := func(int64) (ghaccess.Runner, error) { return ghaccess.Runner{}, ghaccess.ErrRunnerNotFound }
	broken := func(int64) (ghaccess.Runner, error) {
		return ghaccess.Runner{}, errors.New("github get runner: 502 Bad Gateway")
	}
	tests := []struct {
		name string
		// setup fills the ledger and returns the running records; i-a is the instance watched.
		setup func(t *testing.T, l ledger) []store.Instance
		get   func(int64) (ghaccess.Runner, error)
		// wantEnded: i-a's completion handed on at the second check; wantAsked: the ids read.
		wantEnded bool
		wantAsked []int64
		wantErr   bool
		// wantNext: with GitHub answering 404 from the third check on, the check that ends i-a: 3 if
		// its mark stayed, 4 if it was cleared (two more misses), 0 when it was ended already.
		wantNext int
	}{
		{"found busy: kept, mark cleared", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", runner)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, found(true, "online"), false, []int64{runner}, false, 4},
		{"found idle: kept", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", runner)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, found(false, "online"), false, []int64{runner}, false, 4},
		{"found offline: kept", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", runner)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, found(false, "offline"), false, []int64{runner}, false, 4},
		{"404: completion handed on", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", runner)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, gone, true, []int64{runner}, false, 0},
		{"error: nothing ended, mark kept", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", runner)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, broken, false, []int64{runner}, true, 3},
		{"no recorded runner id: the listings decide", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, webhook, "i-a", 0)
			return []store.Instance{running("i-a", webhook.RunKey())}
		}, found(true, "online"), true, nil, false, 0},
		{"rebound by Bind: the id its current job's ledger records", func(t *testing.T, l ledger) []store.Instance {
			// i-a was brought up for x, i-b for y; x started on i-b's runner (602), so x's ledger
			// names i-b and y's names i-a with i-a's runner (601).
			l.served(t, x, "i-b", 602)
			l.served(t, y, "i-a", 601)
			return []store.Instance{running("i-a", x.RunKey()), running("i-b", y.RunKey())}
		}, func(id int64) (ghaccess.Runner, error) {
			if id == 601 {
				return ghaccess.Runner{ID: id, Busy: true, Status: "online"}, nil
			}
			return ghaccess.Runner{}, ghaccess.ErrRunnerNotFound
		}, false, []int64{601, 602}, false, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			led := ledger{}
			recs := tc.setup(t, led)
			gh := &unlisted{get: tc.get}
			done := &handedOn{}
			bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: gh, Jobs: done})
			if err != nil {
				t.Fatal(err)
			}
			endedA := func(ended []string) bool { return slices.Contains(ended, "i-a") }
			if ended, err := bs.Check(ctx, recs); err != nil || endedA(ended) || len(gh.asked()) != 0 {
				t.Fatalf("first check: ended %v, err %v, asked %v; want nothing ended or asked after one miss", ended, err, gh.asked())
			}
			ended, err := bs.Check(ctx, recs)
			if (err != nil) != tc.wantErr {
				t.Errorf("second check: err %v, want an error: %v", err, tc.wantErr)
			}
			if endedA(ended) != tc.wantEnded {
				t.Errorf("second check ended %v; want i-a ended: %v", ended, tc.wantEnded)
			}
			handed := slices.ContainsFunc(done.got(), func(j warmpool.Job) bool { return j.RunnerName == warmpool.RunnerName("i-a") })
			if handed != tc.wantEnded {
				t.Errorf("completion of i-a's job handed on: %v, want %v (%+v)", handed, tc.wantEnded, done.got())
			}
			asked := gh.asked()
			slices.Sort(asked)
			if diff := cmp.Diff(tc.wantAsked, asked); diff != "" {
				t.Errorf("runner ids read at GitHub (-want +got):\n%s", diff)
			}
			if tc.wantNext == 0 {
				return
			}
			gh.mu.Lock()
			gh.get = gone
			gh.mu.Unlock()
			for n := 3; n <= 4; n++ {
				ended, err := bs.Check(ctx, recs)
				if err != nil {
					t.Fatalf("check %d: %v", n, err)
				}
				if endedA(ended) != (n == tc.wantNext) {
					t.Errorf("check %d ended %v; i-a wanted ended at check %d", n, ended, tc.wantNext)
				}
			}
		})
	}
}

// TestSkippedRunnerKeepsItsInstance: a running job's runner that the runner listings leave out (a
// paginated listing skips a runner at a page boundary when runners are removed between two page
// requests) while GitHub still has it keeps its instance however many listings miss it: the backstop
// reads the runner by the id the ledger recorded and finds it. Once GitHub removes the runner, the
// read is GitHub's 404 and the job's completion is handed on. The runner is a just-in-time runner of
// the GitHub fake, listed and read over HTTP by the control plane's client.
func TestSkippedRunnerKeepsItsInstance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fake, gh, led, job, in, jit := servedOnTheFake(t)
	fake.SkipInListings(func(r githubfake.Runner) bool { return r.ID == jit.RunnerID })
	done := &handedOn{}
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: gh, Jobs: done})
	if err != nil {
		t.Fatal(err)
	}
	for n := range 6 {
		ended, err := bs.Check(ctx, []store.Instance{in})
		if err != nil || len(ended) != 0 {
			t.Fatalf("check %d: ended %v, err %v while GitHub still has the job's runner", n+1, ended, err)
		}
	}
	if got := done.got(); len(got) != 0 {
		t.Fatalf("completions handed on while the runner exists: %+v", got)
	}
	if n := fake.Calls()["GET /repos/{owner}/{repo}/actions/runners/{runner_id}"]; n != 3 {
		t.Errorf("%d reads of the runner, want 3: one per two missed listings", n)
	}

	if err := gh.DeleteRunner(ctx, job.Repository, jit.RunnerID); err != nil { // GitHub removes the ephemeral runner after its job
		t.Fatal(err)
	}
	var ended []string
	for range 2 {
		got, err := bs.Check(ctx, []store.Instance{in})
		if err != nil {
			t.Fatal(err)
		}
		ended = append(ended, got...)
	}
	if !slices.Equal(ended, []string{in.ID}) || len(done.got()) != 1 {
		t.Fatalf("after the runner's removal: ended %v, handed on %+v; want %s's job completed once", ended, done.got(), in.ID)
	}
}

// refusing is a GitHub with no runners anywhere, whose listing of one scope always fails (an
// installation removed from that repository).
type refusing struct{ scope string }

func (r refusing) ListRunners(_ context.Context, scope string) ([]ghaccess.Runner, error) {
	if scope == r.scope {
		return nil, errors.New("403 Resource not accessible by integration")
	}
	return nil, nil
}

func (refusing) GetRunner(context.Context, string, int64) (ghaccess.Runner, error) {
	return ghaccess.Runner{}, ghaccess.ErrRunnerNotFound
}

// TestOneFailingScopeStopsNoOther: a scope whose listing always fails holds back only its own jobs;
// a lost completion in another scope is still handed on, and the check reports the failing scope.
// Failed before: the first failing listing returned from the check, for every scope, every pass.
func TestOneFailingScopeStopsNoOther(t *testing.T) {
	t.Parallel()
	led := ledger{}
	var recs []store.Instance
	for i, repo := range []string{"acme/gone", "acme/app"} {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(i + 1), RunID: 9, Repository: repo, RepositoryID: 1, Labels: []string{"pool=warm"}, Pool: "warm"}
		led.add(t, j)
		recs = append(recs, running([]string{"i-gone", "i-app"}[i], j.RunKey()))
	}
	done := &handedOn{}
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: refusing{scope: "acme/gone"}, Jobs: done})
	if err != nil {
		t.Fatal(err)
	}
	var ended []string
	for range 3 {
		got, err := bs.Check(t.Context(), recs)
		if err == nil || !strings.Contains(err.Error(), "acme/gone") {
			t.Fatalf("check: %v, want the failing scope's listing named", err)
		}
		ended = append(ended, got...)
	}
	if !slices.Equal(ended, []string{"i-app"}) || len(done.got()) != 1 || done.got()[0].Repository != "acme/app" {
		t.Fatalf("ended %v, handed on %+v: want only acme/app's instance", ended, done.got())
	}
}

// TestBackstopCompletesTheJobItServes: the completion handed on for an instance whose runner is gone
// is that of the job whose ledger names the instance now (Bind moved i-a, brought up for x, to y,
// which started on its runner, and i-b to x), and, when no ledger names it, that of the job it was
// brought up for. On the code before, the swapped case handed on x's completion while x ran on i-b.
func TestBackstopCompletesTheJobItServes(t *testing.T) {
	t.Parallel()
	setJob := func(id int64) warmpool.Job {
		return warmpool.Job{Action: warmpool.ActionQueued, JobID: id, RunID: 9, Repository: "acme/app", RepositoryID: 1, Labels: []string{"set"}, Pool: "warm",
			ScaleSet: "set", ScaleSetID: 7, ScaleSetScope: "acme", ScaleSetJob: fmt.Sprint("j-", id)}
	}
	x, y := setJob(2), setJob(3)
	tests := []struct {
		name    string
		setup   func(t *testing.T, l ledger) []store.Instance
		wantJob int64
	}{
		{"swapped by Bind: the job whose ledger names it", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, x, "i-b", 602)
			l.served(t, y, "i-a", 601)
			return []store.Instance{running("i-a", x.RunKey()), running("i-b", y.RunKey())}
		}, y.JobID},
		{"no ledger names it: the job it was brought up for", func(t *testing.T, l ledger) []store.Instance {
			l.served(t, x, "i-z", 602)
			return []store.Instance{running("i-a", x.RunKey())}
		}, x.JobID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			led := ledger{}
			recs := tc.setup(t, led)
			gh := &unlisted{get: func(id int64) (ghaccess.Runner, error) {
				if id == 601 {
					return ghaccess.Runner{}, ghaccess.ErrRunnerNotFound
				}
				return ghaccess.Runner{ID: id, Busy: true, Status: "online"}, nil
			}}
			done := &handedOn{}
			bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: led, GitHub: gh, Jobs: done})
			if err != nil {
				t.Fatal(err)
			}
			var ended []string
			for range 2 {
				got, err := bs.Check(t.Context(), recs)
				if err != nil {
					t.Fatal(err)
				}
				ended = append(ended, got...)
			}
			got := done.got()
			if !slices.Equal(ended, []string{"i-a"}) || len(got) != 1 {
				t.Fatalf("ended %v, handed on %+v; want i-a's completion alone", ended, got)
			}
			if got[0].JobID != tc.wantJob || got[0].RunnerName != warmpool.RunnerName("i-a") {
				t.Errorf("handed on job %d on %s, want job %d on %s", got[0].JobID, got[0].RunnerName, tc.wantJob, warmpool.RunnerName("i-a"))
			}
		})
	}
}
