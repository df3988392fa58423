// Package pipeline is the one sequence of stages that gets runners, whatever asked for them: a
// workflow's provision step, a webhook's pool job, or a scale set's job. The stages run in one
// order (the pool's ledger where there is one, hot, stopped, cold, then registration or
// validation); a source differs only in the stages it enables (Stages) and in what each stage's
// step does to answer it. The acquiring stages share the claim loop of package claim and the
// launch mechanism of package launch, so a rule added to a stage holds on every path.
//
// Run is the driver: each acquiring stage gets what is still wanted after the stages before it,
// and the finishing stages (registration, validation) run once over whatever was acquired.
package pipeline

import (
	"context"
	"fmt"
	"slices"
)

// Stage is one step of getting a runner.
type Stage string

// The stages, in the order they run.
const (
	// Ledger takes the jobs in the pool's job ledger: a job served already, or held by another
	// replica, is not served twice (pool jobs only: a workflow's run record plays that part
	// before the pipeline).
	Ledger Stage = "ledger"
	// Hot claims instances that are running and idle: pooled runners, or a warm pool's hot ones.
	Hot Stage = "hot"
	// Stopped claims stopped warm instances and starts them, 50 per StartInstances.
	Stopped Stage = "stopped"
	// Cold launches the rest with one CreateFleet (package launch).
	Cold Stage = "cold"
	// Register binds a just-in-time runner to each pool job's instance, in its repository or its
	// scale set, and records the job as served.
	Register Stage = "register"
	// Validate waits for every started and created instance of a workflow's provision to register:
	// all or nothing.
	Validate Stage = "validate"
)

// order is every stage in the order Run runs them.
var order = []Stage{Ledger, Hot, Stopped, Cold, Register, Validate}

// acquiring reports whether a stage serves part of what is wanted (the others finish what was got).
func acquiring(s Stage) bool { return s == Ledger || s == Hot || s == Stopped || s == Cold }

// Source is what asked for runners.
type Source string

// The sources.
const (
	// Workflow: a workflow's provision step asks for N runners for its run.
	Workflow Source = "workflow"
	// PoolJob: a workflow_job webhook asks for one runner of a warm pool for its job.
	PoolJob Source = "pool-job"
	// ScaleSetJob: a runner scale set's session assigns a job, served like a pool job; its runner
	// is minted from the scale set.
	ScaleSetJob Source = "scale-set-job"
)

// Stages returns the stages a source enables, in the order they run. stopped says whether the
// deployment starts stopped warm instances for it (a workflow's provision only with a starter).
func Stages(src Source, stopped bool) []Stage {
	var out []Stage
	switch src {
	case Workflow:
		out = []Stage{Hot, Stopped, Cold, Validate}
	case PoolJob, ScaleSetJob:
		out = []Stage{Ledger, Hot, Stopped, Cold, Register}
	}
	if !stopped {
		out = slices.DeleteFunc(out, func(s Stage) bool { return s == Stopped })
	}
	return out
}

// Step is one stage's work for a request. An acquiring stage is given how many runners are still
// wanted and returns how many it provided (the ledger: how many are not to be served here at all,
// which the later stages no longer want); a finishing stage is given how many the hot, stopped and
// cold stages provided and returns how many it kept. An
// error ends the pipeline at that stage: the caller's steps decide what counts as one (a
// workflow's provision undoes everything; a pool job's steps hand their jobs back themselves and
// report nil).
type Step func(ctx context.Context, want int) (int, error)

// Report is what a run of the pipeline did, per stage.
type Report struct {
	Source Source
	// Ran lists the stages that ran, in order, with what each took or kept.
	Ran []Ran
	// Left is how many runners no stage provided.
	Left int
}

// Ran is one stage's part of a Report.
type Ran struct {
	Stage Stage
	Want  int
	Got   int
}

// Got returns how many runners the stage took or kept (0 when it did not run).
func (r Report) Got(s Stage) int {
	for _, x := range r.Ran {
		if x.Stage == s {
			return x.Got
		}
	}
	return 0
}

// Run runs the enabled stages, in order, with the steps given for them. An acquiring stage runs
// while runners are still wanted; the finishing stages run once over what was acquired, when
// anything was. What a step does once ctx ended is the step's to decide (a workflow's provision
// stops and undoes; a pool job's claimed instances still get their registration or are discarded).
// A stage enabled without a step is a wiring error.
func Run(ctx context.Context, src Source, enabled []Stage, steps map[Stage]Step, want int) (Report, error) {
	rep := Report{Source: src}
	got := 0
	for _, s := range order {
		if !slices.Contains(enabled, s) {
			continue
		}
		step := steps[s]
		if step == nil {
			return rep, fmt.Errorf("pipeline %s: stage %s enabled without a step", src, s)
		}
		arg := got // a finishing stage works on what was acquired
		if acquiring(s) {
			arg = want - got
		}
		if arg <= 0 {
			continue
		}
		n, err := step(ctx, arg)
		rep.Ran = append(rep.Ran, Ran{Stage: s, Want: arg, Got: n})
		switch {
		case s == Ledger:
			want -= n // not to be served here: served already, held elsewhere, or too old
		case acquiring(s):
			got += n
		}
		if err != nil {
			rep.Left = want - got
			return rep, err
		}
	}
	rep.Left = want - got
	return rep, nil
}
