// The generator of a realistic week of jobs, for the simulator and the bench: no public job-level
// history of a busy project (created, started and completed times per job) was found for this
// work, so the week is generated. Every parameter is in GenParams and documented in
// docs/autoscale.md.
package jobtrace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Zone is a team's working-hours cycle.
type Zone struct {
	Location *time.Location
	Repos    int
}

// GenParams are the generator's parameters.
type GenParams struct {
	Start time.Time // a Monday 00:00 UTC
	Days  int
	Zones []Zone
	// RunsPerHour is a repository's workflow runs per hour at the working day's peak.
	RunsPerHour float64
	// WeekendShare is the weekend's rate as a share of a weekday's.
	WeekendShare float64
	// JobsPerRun is the mean of a run's jobs (1 + geometric).
	JobsPerRun float64
	// MatrixShare is the share of runs that fan out as a matrix of MatrixMin-MatrixMax jobs
	// (log-uniform).
	MatrixShare          float64
	MatrixMin, MatrixMax int
	// MergeWave is the number of runs each repository starts in the MergeWaveSpan after the
	// MergeWaveAt local time on weekdays (merges after the stand-up).
	MergeWave     int
	MergeWaveAt   time.Duration
	MergeWaveSpan time.Duration
	// NightlyRepos run a nightly matrix of NightlyJobs at NightlyAt UTC, every day.
	NightlyRepos, NightlyJobs int
	NightlyAt                 time.Duration
	// Durations are log-normal: median DurationMedian, shape DurationSigma, at most DurationMax.
	DurationMedian time.Duration
	DurationSigma  float64
	DurationMax    time.Duration
	// Queue is the trace's own queue time (the hosted service's), uniform up to it.
	Queue  time.Duration
	Labels []string
	// Runs, when set, gives every job its run's id and workflow name and makes the fan-outs
	// workflows of their own; nil: the jobs carry no run (the first committed week).
	Runs *RunParams
	// Recurring are bursts at a fixed local time (a release train, a scheduled matrix).
	Recurring []Recurring
	// RandomBursts per week come at uniform times of the weekdays' working hours (08:00-18:00 in
	// the first zone), each of RandomBurstMin-RandomBurstMax jobs (log-uniform): a load test, a
	// dependency bump fanned out to every repository.
	RandomBursts                   int
	RandomBurstMin, RandomBurstMax int
}

// Recurring is a burst of Jobs jobs at At local time in Location, on weekdays (or every day),
// spread over Spread.
type Recurring struct {
	Location   *time.Location
	At, Spread time.Duration
	Jobs       int
	EveryDay   bool
}

// RunParams describe the workflows behind the runs. A matrix is written in its workflow's file,
// so each repository's matrix workflow fans out to the same number of jobs every run (drawn once
// per repository, log-uniform MatrixMin-MatrixMax); a share of the matrix workflows (each
// repository's and the nightly ones) run a setup job first (a build) that the matrix `needs:`,
// so their matrix is queued when it completes. The workflows are the repositories', not the
// week's: they are drawn from RepoSeed, the same for every week.
type RunParams struct {
	RepoSeed uint64
	// SetupShare is the chance a matrix workflow runs a setup job first.
	SetupShare float64
	// Setup jobs run log-normal: median SetupMedian, shape SetupSigma, at least SetupMin.
	SetupMedian time.Duration
	SetupSigma  float64
	SetupMin    time.Duration
}

// RunsParams are DefaultParams with runs (testdata/week-runs.csv.gz): the assumptions are in
// docs/autoscale.md.
func RunsParams() GenParams {
	p := DefaultParams()
	p.Runs = &RunParams{RepoSeed: 1, SetupShare: 0.5, SetupMedian: 3 * time.Minute, SetupSigma: 0.5, SetupMin: 30 * time.Second}
	return p
}

// DefaultParams are the parameters of the committed week (testdata/week.csv.gz).
func DefaultParams() GenParams {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	newYork, _ := time.LoadLocation("America/New_York")
	return GenParams{
		Start: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Days: 7,
		Zones:       []Zone{{Location: berlin, Repos: 12}, {Location: newYork, Repos: 8}},
		RunsPerHour: 3, WeekendShare: 0.05, JobsPerRun: 4,
		MatrixShare: 0.02, MatrixMin: 10, MatrixMax: 200,
		MergeWave: 4, MergeWaveAt: 9 * time.Hour, MergeWaveSpan: 15 * time.Minute,
		NightlyRepos: 5, NightlyJobs: 60, NightlyAt: 2 * time.Hour,
		DurationMedian: 4 * time.Minute, DurationSigma: 1.1, DurationMax: 6 * time.Hour,
		Queue: 20 * time.Second, Labels: []string{"self-hosted", "linux", "pool=ci"},
	}
}

// dayShape is the working day's rate by local hour, as a share of the peak: a morning ramp, the
// lunch dip, the afternoon, a fading evening.
var dayShape = [24]float64{
	0, 0, 0, 0, 0, 0, 0.02, 0.1, 0.45, 0.9, 1, 1, 0.6, 0.8, 1, 0.95, 0.85, 0.6, 0.3, 0.15, 0.08, 0.04, 0.02, 0.01,
}

// Generate is the week of jobs of p, the same for the same seed.
func Generate(p GenParams, seed uint64) []Job {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &gen{p: p, rng: rng, runID: int64(seed) * 10_000_000, seed: seed}
	if p.Runs != nil {
		g.setupRng = rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
		g.workflows = workflows(p)
	}
	end := p.Start.AddDate(0, 0, p.Days)
	repo := 0
	for _, z := range p.Zones {
		for range z.Repos {
			g.repo = repo
			g.repoRuns(z.Location, end)
			if repo < p.NightlyRepos {
				for d := range p.Days {
					g.wf = g.workflow(repo, "nightly")
					g.run(p.Start.AddDate(0, 0, d).Add(p.NightlyAt).Add(time.Duration(repo)*time.Minute), p.NightlyJobs)
				}
			}
			repo++
		}
	}
	g.bursts(end)
	slices.SortStableFunc(g.jobs, func(a, b Job) int { return a.Created.Compare(b.Created) })
	return g.jobs
}

// bursts adds the recurring and random bursts (after everything else, from their own random
// numbers: weeks without them are unchanged).
func (g *gen) bursts(end time.Time) {
	p := g.p
	if len(p.Recurring) == 0 && p.RandomBursts == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(g.seed, g.seed^0x94d049bb133111eb))
	for _, r := range p.Recurring {
		for d := range p.Days + 1 {
			day := p.Start.AddDate(0, 0, d).In(r.Location)
			at := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, r.Location).Add(r.At)
			if wd := at.Weekday(); (!r.EveryDay && (wd == time.Saturday || wd == time.Sunday)) || at.Before(p.Start) || !at.Before(end) {
				continue
			}
			for range r.Jobs {
				g.burstJob(rng, at.Add(time.Duration(rng.Float64()*float64(r.Spread))))
			}
		}
	}
	loc := p.Zones[0].Location
	for range p.RandomBursts {
		var at time.Time
		for {
			at = p.Start.Add(time.Duration(rng.Float64() * float64(end.Sub(p.Start))))
			local := at.In(loc)
			if wd := local.Weekday(); wd != time.Saturday && wd != time.Sunday && local.Hour() >= 8 && local.Hour() < 18 {
				break
			}
		}
		lo, hi := math.Log(float64(p.RandomBurstMin)), math.Log(float64(p.RandomBurstMax))
		n := int(math.Round(math.Exp(lo + rng.Float64()*(hi-lo))))
		for range n {
			g.burstJob(rng, at)
		}
	}
}

func (g *gen) burstJob(rng *rand.Rand, at time.Time) {
	p := g.p
	at = at.Truncate(time.Second)
	d := time.Duration(float64(p.DurationMedian) * math.Exp(p.DurationSigma*rng.NormFloat64()))
	d = min(max(d, 10*time.Second), p.DurationMax).Truncate(time.Second)
	started := at.Add(time.Duration(rng.Float64() * float64(p.Queue))).Truncate(time.Second)
	g.jobs = append(g.jobs, Job{Created: at, Started: started, Completed: started.Add(d), Labels: p.Labels})
}

type gen struct {
	seed uint64
	p    GenParams
	rng  *rand.Rand
	jobs []Job
	// With runs: the repository being generated, the workflow of the next run, the run ids so
	// far, the repositories' workflows, and the setup jobs' own random numbers.
	repo      int
	wf        workflow
	runID     int64
	workflows map[string]workflow
	setupRng  *rand.Rand
}

// workflow is a repository's workflow: its name, its matrix size (0: not a matrix) and whether
// the matrix waits for a setup job.
type workflow struct {
	name   string
	matrix int
	setup  bool
}

// workflows draws every repository's matrix workflow (size, setup) and the nightly ones' (setup).
func workflows(p GenParams) map[string]workflow {
	rng := rand.New(rand.NewPCG(p.Runs.RepoSeed, p.Runs.RepoSeed^0x2545f4914f6cdd1d))
	out := map[string]workflow{}
	repos := 0
	for _, z := range p.Zones {
		repos += z.Repos
	}
	for r := range repos {
		lo, hi := math.Log(float64(p.MatrixMin)), math.Log(float64(p.MatrixMax))
		size := int(math.Round(math.Exp(lo + rng.Float64()*(hi-lo))))
		m := workflow{name: fmt.Sprintf("repo-%02d/matrix", r), matrix: size, setup: rng.Float64() < p.Runs.SetupShare}
		n := workflow{name: fmt.Sprintf("repo-%02d/nightly", r), matrix: p.NightlyJobs, setup: rng.Float64() < p.Runs.SetupShare}
		out[m.name], out[n.name] = m, n
	}
	return out
}

// workflow is repository repo's workflow of kind (matrix, nightly or ci).
func (g *gen) workflow(repo int, kind string) workflow {
	name := fmt.Sprintf("repo-%02d/%s", repo, kind)
	if w, ok := g.workflows[name]; ok {
		return w
	}
	return workflow{name: name}
}

// repoRuns starts one repository's runs: a Poisson process thinned by the day's shape, and the
// merge wave of each weekday.
func (g *gen) repoRuns(loc *time.Location, end time.Time) {
	p := g.p
	for t := p.Start; t.Before(end); {
		t = t.Add(time.Duration(g.rng.ExpFloat64() / p.RunsPerHour * float64(time.Hour)))
		local := t.In(loc)
		rate := dayShape[local.Hour()]
		if wd := local.Weekday(); wd == time.Saturday || wd == time.Sunday {
			rate *= p.WeekendShare
		}
		if t.Before(end) && g.rng.Float64() < rate {
			g.run(t, g.runJobs())
		}
	}
	for d := range p.Days + 1 {
		day := p.Start.AddDate(0, 0, d).In(loc)
		morning := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, loc).Add(p.MergeWaveAt)
		if wd := morning.Weekday(); wd == time.Saturday || wd == time.Sunday || morning.Before(p.Start) || !morning.Before(end) {
			continue
		}
		for range p.MergeWave {
			g.run(morning.Add(time.Duration(g.rng.Float64()*float64(p.MergeWaveSpan))), g.runJobs())
		}
	}
}

// runJobs is the size of a run: a matrix fan-out or 1 + geometric. With runs it also sets the
// run's workflow: a matrix run is its repository's matrix workflow, its size the workflow's.
func (g *gen) runJobs() int {
	p := g.p
	if g.rng.Float64() < p.MatrixShare {
		lo, hi := math.Log(float64(p.MatrixMin)), math.Log(float64(p.MatrixMax))
		n := int(math.Round(math.Exp(lo + g.rng.Float64()*(hi-lo))))
		if g.workflows != nil {
			g.wf = g.workflow(g.repo, "matrix")
			return g.wf.matrix
		}
		return n
	}
	g.wf = g.workflow(g.repo, "ci")
	n := 1
	for g.rng.Float64() > 1/p.JobsPerRun {
		n++
	}
	return n
}

// run adds the n jobs of a run created at t, all at once; with runs, a matrix workflow with a
// setup job adds it first and queues the matrix when it completes (a job that `needs:` another
// is queued once that one completed).
func (g *gen) run(t time.Time, n int) {
	p := g.p
	t = t.Truncate(time.Second)
	job := Job{Labels: p.Labels}
	if g.workflows != nil {
		g.runID++
		job.RunID, job.Workflow = g.runID, g.wf.name
		if g.wf.setup {
			r := p.Runs
			d := time.Duration(float64(r.SetupMedian) * math.Exp(r.SetupSigma*g.setupRng.NormFloat64()))
			d = max(d, r.SetupMin).Truncate(time.Second)
			started := t.Add(time.Duration(g.setupRng.Float64() * float64(p.Queue))).Truncate(time.Second)
			setup := job
			setup.Created, setup.Started, setup.Completed = t, started, started.Add(d)
			g.jobs = append(g.jobs, setup)
			t = setup.Completed
		}
	}
	for range n {
		d := time.Duration(float64(p.DurationMedian) * math.Exp(p.DurationSigma*g.rng.NormFloat64()))
		d = min(max(d, 10*time.Second), p.DurationMax).Truncate(time.Second)
		started := t.Add(time.Duration(g.rng.Float64() * float64(p.Queue))).Truncate(time.Second)
		job.Created, job.Started, job.Completed = t, started, started.Add(d)
		g.jobs = append(g.jobs, job)
	}
}

// BigParams are DefaultParams with nine times the repositories (108 in Europe/Berlin, 72 in
// America/New_York): a week of about 160,000 jobs, the size `runnerpool simulate` is timed on.
func BigParams() GenParams {
	p := DefaultParams()
	p.Zones = slices.Clone(p.Zones)
	for i := range p.Zones {
		p.Zones[i].Repos *= 9
	}
	return p
}

// HeldOut are the weeks the policy is judged on and was not tuned on: other shapes than
// DefaultParams' (docs/autoscale.md, "Held-out weeks"). Each is one or more runner classes, each
// class its own parameters and label; a week is the classes' jobs merged (GenerateClasses).
func HeldOut() map[string][]GenParams {
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	sydney, _ := time.LoadLocation("Australia/Sydney")
	chicago, _ := time.LoadLocation("America/Chicago")
	la, _ := time.LoadLocation("America/Los_Angeles")
	saoPaulo, _ := time.LoadLocation("America/Sao_Paulo")
	london, _ := time.LoadLocation("Europe/London")
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	// asia: teams in Tokyo, Kolkata and Sydney; smaller, more frequent fan-outs, a longer merge
	// wave at 10:00, nightly matrices at 18:00 UTC, a release train of 120 jobs at 16:00 Tokyo
	// every weekday and 12 random bursts of 30-150 jobs a week.
	asia := GenParams{
		Start: start, Days: 7,
		Zones:       []Zone{{Location: tokyo, Repos: 10}, {Location: kolkata, Repos: 6}, {Location: sydney, Repos: 4}},
		RunsPerHour: 4, WeekendShare: 0.1, JobsPerRun: 3,
		MatrixShare: 0.03, MatrixMin: 5, MatrixMax: 120,
		MergeWave: 6, MergeWaveAt: 10 * time.Hour, MergeWaveSpan: 30 * time.Minute,
		NightlyRepos: 8, NightlyJobs: 40, NightlyAt: 18 * time.Hour,
		DurationMedian: 6 * time.Minute, DurationSigma: 0.9, DurationMax: 6 * time.Hour,
		Queue: 20 * time.Second, Labels: []string{"self-hosted", "linux", "pool=ci"},
		Recurring:    []Recurring{{Location: tokyo, At: 16 * time.Hour, Spread: 2 * time.Minute, Jobs: 120}},
		RandomBursts: 12, RandomBurstMin: 30, RandomBurstMax: 150,
	}
	// americas: three runner classes. linux: teams in Chicago, Los Angeles and Sao Paulo, large
	// rare fan-outs (50-400), a merge wave at 09:30, a 200-job scheduled matrix at 06:00 Chicago
	// every day and 5 random bursts of 100-300; arm: a London team's smaller builds; gpu: few,
	// long jobs in fan-outs of 4-32 and a nightly 16-job matrix.
	linux := GenParams{
		Start: start, Days: 7,
		Zones:       []Zone{{Location: chicago, Repos: 12}, {Location: la, Repos: 8}, {Location: saoPaulo, Repos: 5}},
		RunsPerHour: 2.5, WeekendShare: 0.03, JobsPerRun: 5,
		MatrixShare: 0.01, MatrixMin: 50, MatrixMax: 400,
		MergeWave: 3, MergeWaveAt: 9*time.Hour + 30*time.Minute, MergeWaveSpan: 20 * time.Minute,
		DurationMedian: 3 * time.Minute, DurationSigma: 1.2, DurationMax: 6 * time.Hour,
		Queue: 20 * time.Second, Labels: []string{"self-hosted", "linux", "pool=linux"},
		Recurring:    []Recurring{{Location: chicago, At: 6 * time.Hour, Spread: 5 * time.Minute, Jobs: 200, EveryDay: true}},
		RandomBursts: 5, RandomBurstMin: 100, RandomBurstMax: 300,
	}
	arm := GenParams{
		Start: start, Days: 7,
		Zones:       []Zone{{Location: london, Repos: 6}},
		RunsPerHour: 3, WeekendShare: 0.05, JobsPerRun: 2,
		MatrixShare: 0.05, MatrixMin: 8, MatrixMax: 60,
		MergeWave: 2, MergeWaveAt: 9 * time.Hour, MergeWaveSpan: 10 * time.Minute,
		DurationMedian: 5 * time.Minute, DurationSigma: 0.8, DurationMax: 3 * time.Hour,
		Queue: 20 * time.Second, Labels: []string{"self-hosted", "arm64", "pool=arm"},
	}
	gpu := GenParams{
		Start: start, Days: 7,
		Zones:       []Zone{{Location: la, Repos: 3}},
		RunsPerHour: 1, WeekendShare: 0.2, JobsPerRun: 1.5,
		MatrixShare: 0.1, MatrixMin: 4, MatrixMax: 32,
		NightlyRepos: 1, NightlyJobs: 16, NightlyAt: 8 * time.Hour,
		DurationMedian: 40 * time.Minute, DurationSigma: 0.7, DurationMax: 6 * time.Hour,
		Queue: 20 * time.Second, Labels: []string{"self-hosted", "gpu", "pool=gpu"},
	}
	return map[string][]GenParams{"asia": {asia}, "americas": {linux, arm, gpu}}
}

// GenerateClasses is the jobs of every class of a week (each Generate with seed plus its index),
// merged by creation.
func GenerateClasses(classes []GenParams, seed uint64) []Job {
	var out []Job
	for i, p := range classes {
		out = append(out, Generate(p, seed+uint64(i)*1000)...)
	}
	slices.SortStableFunc(out, func(a, b Job) int { return a.Created.Compare(b.Created) })
	return out
}
