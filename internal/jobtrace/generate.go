// The generator of a realistic week of jobs, for the simulator and the bench: no public job-level
// history of a busy project (created, started and completed times per job) was found for this
// work, so the week is generated. Every parameter is in GenParams and documented in
// docs/autoscale.md.
package jobtrace

import (
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
	g := &gen{p: p, rng: rng}
	end := p.Start.AddDate(0, 0, p.Days)
	repo := 0
	for _, z := range p.Zones {
		for range z.Repos {
			g.repoRuns(z.Location, end)
			if repo < p.NightlyRepos {
				for d := range p.Days {
					g.run(p.Start.AddDate(0, 0, d).Add(p.NightlyAt).Add(time.Duration(repo)*time.Minute), p.NightlyJobs)
				}
			}
			repo++
		}
	}
	slices.SortStableFunc(g.jobs, func(a, b Job) int { return a.Created.Compare(b.Created) })
	return g.jobs
}

type gen struct {
	p    GenParams
	rng  *rand.Rand
	jobs []Job
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

// runJobs is the size of a run: a matrix fan-out or 1 + geometric.
func (g *gen) runJobs() int {
	p := g.p
	if g.rng.Float64() < p.MatrixShare {
		lo, hi := math.Log(float64(p.MatrixMin)), math.Log(float64(p.MatrixMax))
		return int(math.Round(math.Exp(lo + g.rng.Float64()*(hi-lo))))
	}
	n := 1
	for g.rng.Float64() > 1/p.JobsPerRun {
		n++
	}
	return n
}

// run adds the n jobs of a run created at t (all at once: GitHub creates a run's jobs, matrix
// included, when the run starts).
func (g *gen) run(t time.Time, n int) {
	p := g.p
	t = t.Truncate(time.Second)
	for range n {
		d := time.Duration(float64(p.DurationMedian) * math.Exp(p.DurationSigma*g.rng.NormFloat64()))
		d = min(max(d, 10*time.Second), p.DurationMax).Truncate(time.Second)
		started := t.Add(time.Duration(g.rng.Float64() * float64(p.Queue))).Truncate(time.Second)
		g.jobs = append(g.jobs, Job{Created: t, Started: started, Completed: started.Add(d), Labels: p.Labels})
	}
}
