// The backstop for a lost completion, for both sources of pool jobs. A pool job's instance ends
// when the job's completion reaches the pool worker: a `workflow_job completed` webhook, or a scale
// set's JobCompleted. If it never comes (a webhook GitHub failed to deliver, which it never retries;
// every listener replica down while a JobCompleted waited, or one lost in a takeover), nothing else
// ends the instance: its agent leaves the runner whose just-in-time registration is spent stopped and
// waits for its record, which runs out its max runtime, a bill nobody sees.
//
// GitHub's answer ends it instead. Every pool job's runner is a just-in-time runner, and those are
// ephemeral: the service sends one job to it and removes its registration after the job (GitHub's
// changelog of 2021-09-20, "ephemeral runners are automatically unregistered"; actions/runner#660;
// a scale set's runners the same, actions/scaleset README.md: "each runner executes one job and is
// then removed"). So a running instance of ours that serves a pool job, by the control plane's
// records (its record running for the job, which convergence writes only on its agent's registration
// for the job, and the job's ledger record), whose runner GitHub lists in neither of two listings of
// the job's scope in a row, and whose runner GitHub then answers 404 for when asked by its id, is
// done with its job: the backstop hands the job's completion, built from the ledger as the job's
// source recorded it, to the pool worker through the job queue, as the source would have. The job is
// the one whose ledger names the instance now (Bind may have moved it to another scale set job than
// the one it was brought up for, found by the same ledger reads as its runner's id), else the one it
// was brought up for. The
// worker ends the instance (or recycles it) by its usual completion path, after its own check with
// GitHub for a scale set job. Nothing the instance writes counts: its agent's signals are claims,
// the listing and the records are not. A runner GitHub still lists, busy or idle, is never ended by
// the backstop (a runner kept busy by a hostile job stays listed until GitHub's own job timeout ends
// the job and removes the runner), and a scope whose listing fails is skipped: nothing of it is
// ended on a missing answer, and the other scopes go on.
//
// Why the read by id: a listing is paginated (pages of 100) and not a snapshot. When runners are
// removed between the requests of two of its pages (a busy scope removes ephemeral runners every few
// seconds), every later runner moves up one place and the one at the page boundary is in neither
// page. Two listings can skip the same running runner, rarely, and ending its instance fails a job
// that was still running. So two missed listings only make a runner a suspect: the backstop reads it
// by the id the job's ledger records (the just-in-time runner the worker minted; Bind moves it with
// the instance between scale set jobs, so it is read when confirming, never kept). GitHub's 404 hands
// the completion on; found, in any status, the instance is kept and its mark cleared; any other
// answer skips it with its mark kept (confirmGone). A job whose ledger records no runner id for the
// instance is decided by the two listings alone.
//
// Who runs it: the convergence pass (package poolsize, Options.Backstop). It already runs on one
// replica at a time (under the leader lease), on its own pace, and it already reads every pool's
// records, so it hands the backstop the running pool-job records it read: the backstop reads no
// table listing of its own, and needs no timer. One place serves both sources, where the scale set
// listeners each ran a copy for their set while they held its session (reading the live records
// every resync per set). The scope a job's runner lives in is its ledger record's (a webhook job's
// repository, a scale set job's scope), read once per job and kept while the job runs.
package pooljob

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// ConclusionRunnerGone is the conclusion of a completion the backstop inferred.
const ConclusionRunnerGone = "unknown: no completion received, its ephemeral runner is gone at GitHub"

// DefaultBackstopScopes is how many scopes one check lists at most (BackstopConfig.MaxScopes): at
// the default convergence schedule (every 30 s) at most 1,200 listings an hour, about a tenth of
// an installation's largest GitHub App budget (12,500 an hour) and a quarter of the smallest
// (5,000; GitHub Docs, "Rate limits for GitHub Apps").
const DefaultBackstopScopes = 10

// Completer hands a job's completion to the pool worker; *JobQueue satisfies it.
type Completer interface {
	Enqueue(ctx context.Context, j warmpool.Job) (string, error)
}

// BackstopGitHub is the backstop's GitHub: listings of a scope's runners, and reads of one runner
// by its id (ghaccess.ErrRunnerNotFound when the scope does not have it); *ghaccess.Client
// satisfies it.
type BackstopGitHub interface {
	ghaccess.RunnerLister
	RunnerGetter
}

// Ledger reads a job's ledger record; warmpool.Store satisfies it.
type Ledger interface {
	GetRun(ctx context.Context, key string) (store.Run, error)
}

// BackstopConfig configures a Backstop.
type BackstopConfig struct {
	Ledger Ledger
	GitHub BackstopGitHub
	Jobs   Completer
	// MaxScopes bounds the scopes one check lists (default DefaultBackstopScopes), so that many
	// repositories with running webhook jobs cannot spend GitHub's rate limit on the backstop: the
	// scopes listed least recently go first, and the others wait for the next check.
	MaxScopes int
	// OnInferred, when set, is called with each completion handed on: the job's source
	// (SourceWebhook or SourceScaleSet) and its warm pool's or scale set's name (as Inferred).
	OnInferred func(source, name string)
	Logger     *slog.Logger
}

// Backstop infers the completions that never came (see the file comment). One check at a time;
// it remembers, between checks, which instances the last listing of their scope missed.
type Backstop struct {
	cfg BackstopConfig
	log *slog.Logger

	mu     sync.Mutex
	missed map[string]bool           // instance ids the last listing of their scope missed
	jobs   map[string]warmpool.Job   // by run key: the ledger's job of a running instance
	listed map[string]int            // by scope: the check that listed it last
	handed map[string]string         // instance id -> run key: completions handed on already
	checks int                       // checks run
	counts map[string]map[string]int // source -> pool or scale set -> completions inferred
}

// NewBackstop returns a Backstop.
func NewBackstop(cfg BackstopConfig) (*Backstop, error) {
	if cfg.Ledger == nil || cfg.GitHub == nil || cfg.Jobs == nil {
		return nil, errors.New("pool job backstop: ledger, GitHub and job queue are required")
	}
	if cfg.MaxScopes <= 0 {
		cfg.MaxScopes = DefaultBackstopScopes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Backstop{cfg: cfg, log: cfg.Logger, missed: map[string]bool{}, jobs: map[string]warmpool.Job{},
		listed: map[string]int{}, handed: map[string]string{}, counts: map[string]map[string]int{}}, nil
}

// Sources of a pool job, as Inferred counts them.
const (
	SourceWebhook  = "webhook"
	SourceScaleSet = "scale_set"
)

// Inferred returns how many completions the backstop handed on for jobs of source: of the warm
// pool named name for SourceWebhook, of the scale set named name for SourceScaleSet.
func (b *Backstop) Inferred(source, name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts[source][name]
}

// Check looks at the running pool-job instances among recs (records read before it is called, as
// the convergence pass read them), lists their jobs' scopes at GitHub, and hands on the completion
// of each job whose runner neither this listing nor the last one of its scope shows, once GitHub
// confirms, read by the runner's id, that it is gone (confirmGone). It returns the instances whose
// job's completion it handed on. A scope whose listing fails has nothing ended or counted as missed
// (its marks wait for its next listing) and the other scopes go on; a confirmation that gets no
// answer ends nothing and keeps the instance's mark.
func (b *Backstop) Check(ctx context.Context, recs []store.Instance) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks++
	running := b.notHandedOn(RunningJobs(recs))
	scopeOf, ledgerErr := b.ledgerJobs(ctx, running)
	scopes := b.scopesToList(running, scopeOf)
	listed := map[string]map[string]bool{}
	var errs []error
	for _, sc := range scopes {
		b.listed[sc] = b.checks // a scope that fails goes to the back of the queue too
		// Listed after the records were read: a runner of a record read before is listed unless
		// it is gone.
		runners, err := b.cfg.GitHub.ListRunners(ctx, sc)
		if err != nil {
			// Nothing of this scope is ended or marked (Finished: not listed now); the other
			// scopes go on. One scope GitHub refuses (an installation removed from a repository)
			// must not stop the backstop for every other one.
			errs = append(errs, fmt.Errorf("listing the runners of %s: %w", sc, err))
			continue
		}
		names := map[string]bool{}
		for _, r := range runners {
			names[strings.ToLower(r.Name)] = true
		}
		listed[sc] = names
	}
	done, next := Finished(running, scopeOf, listed, b.missed)
	var ended []string
	for _, in := range done {
		gone, run, err := b.confirmGone(ctx, in, scopeOf[in.RunID], running)
		if err != nil {
			next[in.ID] = true // no answer: the mark stays, nothing is ended
			errs = append(errs, fmt.Errorf("confirming that the runner of %s is gone: %w", in.ID, err))
			continue
		}
		if !gone {
			continue // GitHub still has it: kept, its mark cleared
		}
		j, ok := b.served(in, run)
		if !ok {
			next[in.ID] = true // the ledger of the job it serves was not read this check: next time
			errs = append(errs, fmt.Errorf("completing the job of %s: the ledger of %s was not read", in.ID, run))
			continue
		}
		if err := b.complete(ctx, in, j); err != nil {
			next[in.ID] = true // missed twice still: the next check tries again
			errs = append(errs, fmt.Errorf("completing the job of %s: %w", in.ID, err))
			continue
		}
		ended = append(ended, in.ID)
		b.handed[in.ID] = in.RunID
	}
	b.missed = next
	return ended, errors.Join(append(errs, ledgerErr)...)
}

// RunningJobs returns the records of instances running a pool job: promoted to running by
// convergence on their agent's registration for the job, so their just-in-time runner exists at
// GitHub (generatejitconfig made it before the instance was handed the job).
func RunningJobs(recs []store.Instance) []store.Instance {
	var out []store.Instance
	for _, in := range recs {
		if _, ok := warmpool.LedgerKey(in.RunID); ok && in.State == store.StateRunning {
			out = append(out, in)
		}
	}
	return out
}

// notHandedOn returns running less the instances whose job's completion was handed on already:
// the job queue holds it until the worker has ended the instance, whose record may still say
// running at the next check. Instances no longer running are forgotten.
func (b *Backstop) notHandedOn(running []store.Instance) []store.Instance {
	handed := map[string]string{}
	var out []store.Instance
	for _, in := range running {
		if run, ok := b.handed[in.ID]; ok && run == in.RunID {
			handed[in.ID] = run
			continue
		}
		out = append(out, in)
	}
	b.handed = handed
	return out
}

// Finished is the backstop's decision. running are the records of instances running a pool job;
// scopeOf gives the scope of an instance's job (by run key; an instance without one is left
// alone); listed holds, for each scope listed now, the lower-case names of the runners GitHub
// listed; missed are the instances the last listing of their scope did not show. done are the
// instances whose runner neither listing showed; next is missed for the next check: those this
// listing missed for the first time, and those whose scope was not listed now.
func Finished(running []store.Instance, scopeOf map[string]string, listed map[string]map[string]bool, missed map[string]bool) (done []store.Instance, next map[string]bool) {
	next = map[string]bool{}
	for _, in := range running {
		scope, ok := scopeOf[in.RunID]
		if !ok {
			continue
		}
		names, ok := listed[scope]
		switch {
		case !ok:
			if missed[in.ID] {
				next[in.ID] = true // not listed this time: the mark waits for its scope's next listing
			}
		case names[strings.ToLower(warmpool.RunnerName(in.ID))]:
			// Listed, busy or idle: never ended here.
		case missed[in.ID]:
			done = append(done, in)
		default:
			next[in.ID] = true // once may be a listing behind: look again
		}
	}
	return done, next
}

// confirmGone asks GitHub, by the runner's id, whether the runner of in, which two listings of
// scope in a row did not show, is gone (runnerByID, runner.go, which says why a listing is not
// enough and why the id a scale set's JIT configuration gives is the REST API's). A read of the one
// runner answers for it alone (GitHub's REST reference, "Get a self-hosted runner for a repository",
// GET /repos/{owner}/{repo}/actions/runners/{runner_id}, and "... for an organization"): a 404 says
// GitHub has no runner of that id in the scope, so it is gone; found, busy, idle or offline, it is
// kept (Gone). Any other answer is an error: the caller ends nothing. Those pages list only the 200;
// the 404 is GitHub's answer for any resource it does not show the caller, including one that
// exists where the credential may not read it (GitHub Docs, "Troubleshooting the REST API": "404
// Not Found for an existing resource"). That cannot be the case here: the listing of the same scope,
// with the same credential and the same permission (ghaccess.Calls), succeeded in this check just
// before.
//
// The runner's id is the one the ledger records now for the job the instance serves, read from the
// ledgers of the running instances' jobs (Bind may have moved it); without one (a record written
// before runner ids were recorded, or a rebinding the records no longer trace) the two listings
// decide alone, as before this read was added. run is the run key of the job whose ledger names the
// instance, found by the same read ("" when none does): the job whose completion is handed on.
func (b *Backstop) confirmGone(ctx context.Context, in store.Instance, scope string, running []store.Instance) (bool, string, error) {
	runs := make([]string, 0, len(running))
	for _, o := range running {
		runs = append(runs, o.RunID)
	}
	r, err := runnerByID{ledger: b.cfg.Ledger, gh: b.cfg.GitHub}.read(ctx, scope, in, runs)
	if err != nil {
		return false, "", err
	}
	switch {
	case r.State == RunnerNotRead:
		b.log.Info("pool job instance without a recorded runner id: two listings decide", "instance", in.ID, "run", in.RunID)
	case !Gone(r.State):
		b.log.Info("runner missed by two listings is still at GitHub: its instance is kept",
			"instance", in.ID, "runner", r.ID, "scope", scope, "status", r.Runner.Status, "busy", r.Runner.Busy)
	}
	return Gone(r.State), r.Run, nil
}

// ledgerJobs reads the ledger's job of each running instance it does not know yet, keeps those of
// the running ones only, and returns each run key's scope (lower case): a webhook job's runner
// lives in its repository, a scale set job's in the scale set's scope.
func (b *Backstop) ledgerJobs(ctx context.Context, running []store.Instance) (map[string]string, error) {
	keep := map[string]warmpool.Job{}
	var errs []error
	for _, in := range running {
		if j, ok := b.jobs[in.RunID]; ok {
			keep[in.RunID] = j
			continue
		}
		key, _ := warmpool.LedgerKey(in.RunID)
		r, err := b.cfg.Ledger.GetRun(ctx, key)
		if err == nil {
			var j warmpool.Job
			if j, err = warmpool.DecodeJob(string(r.Request)); err == nil {
				keep[in.RunID] = j
				continue
			}
		}
		// Without the ledger's job there is no completion to build: left to its max runtime. A
		// record that is not there is remembered (a zero job), so it is not read every pass; a
		// read that failed is tried again next time.
		if errors.Is(err, store.ErrNotFound) {
			keep[in.RunID] = warmpool.Job{}
			b.log.Warn("pool job instance without a ledger record: the backstop leaves it to its max runtime", "instance", in.ID, "run", in.RunID)
			continue
		}
		errs = append(errs, fmt.Errorf("the ledger record %s of %s: %w", key, in.ID, err))
	}
	b.jobs = keep
	scopeOf := map[string]string{}
	for run, j := range keep {
		if j.JobID != 0 {
			scopeOf[run] = strings.ToLower(cmp.Or(j.ScaleSetScope, j.Repository))
		}
	}
	return scopeOf, errors.Join(errs...)
}

// scopesToList returns the scopes of the running jobs to list now: at most MaxScopes, those
// listed least recently first.
func (b *Backstop) scopesToList(running []store.Instance, scopeOf map[string]string) []string {
	var scopes []string
	for _, in := range running {
		if sc, ok := scopeOf[in.RunID]; ok && !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	slices.SortFunc(scopes, func(a, c string) int { return cmp.Or(cmp.Compare(b.listed[a], b.listed[c]), strings.Compare(a, c)) })
	for sc := range b.listed {
		if !slices.Contains(scopes, sc) {
			delete(b.listed, sc)
		}
	}
	return scopes[:min(len(scopes), b.cfg.MaxScopes)]
}

// served returns the job in serves: the one whose ledger names it (run, as confirmGone found it),
// or, when no ledger names it, the job it was brought up for. On github.com a scale set's job may
// start on any idle runner of the set, and Bind swaps instances between jobs' ledgers: in, brought
// up for X, may serve Y while X runs on the instance brought up for Y. Y's completion is then the
// one to hand on for in; X's would mark X's ledger completed while X runs, and leave Y's served.
// ok is false when the ledger of that job was not read this check.
func (b *Backstop) served(in store.Instance, run string) (warmpool.Job, bool) {
	run = cmp.Or(run, in.RunID)
	j, ok := b.jobs[run]
	return j, ok && j.JobID != 0
}

// complete hands the completion of j, the job in serves, as the ledger recorded it, to the pool
// worker, naming in's runner: the worker ends in and marks j's ledger completed.
func (b *Backstop) complete(ctx context.Context, in store.Instance, j warmpool.Job) error {
	j.Action, j.RunnerName, j.Conclusion, j.DeliveryID = warmpool.ActionCompleted, warmpool.RunnerName(in.ID), ConclusionRunnerGone, ""
	if _, err := b.cfg.Jobs.Enqueue(ctx, j); err != nil {
		return err
	}
	source := SourceWebhook
	if j.ScaleSetID != 0 {
		source = SourceScaleSet
	}
	if b.counts[source] == nil {
		b.counts[source] = map[string]int{}
	}
	name := cmp.Or(j.ScaleSet, j.Pool)
	b.counts[source][name]++
	if b.cfg.OnInferred != nil {
		b.cfg.OnInferred(source, name)
	}
	b.log.Warn("pool job completed for want of its completion: its runner is gone at GitHub",
		"instance", in.ID, "run", j.RunKey(), "brought_up_for", in.RunID, "job", j.JobID, "source", source, "pool", j.Pool, "scale_set", j.ScaleSet)
	return nil
}
