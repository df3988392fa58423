package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pipeline"
)

// TestStagesOfEachSource runs the pipeline's stages for a workflow request, a webhook pool job and
// a scale-set job: each source's enabled stages run in the one order, every acquiring stage gets
// what the ones before it left, and the finishing stage gets what was acquired.
func TestStagesOfEachSource(t *testing.T) {
	t.Parallel()
	// What each stage can provide: the ledger finds one job served already; the pool has two hot
	// instances and one stopped one; creation launches the rest.
	supply := map[pipeline.Stage]int{pipeline.Ledger: 1, pipeline.Hot: 2, pipeline.Stopped: 1, pipeline.Cold: 100}
	type ran struct {
		stage     pipeline.Stage
		want, got int
	}
	tests := []struct {
		name    string
		src     pipeline.Source
		stopped bool
		want    int
		ran     []ran
	}{
		{"workflow request", pipeline.Workflow, true, 5, []ran{
			{pipeline.Hot, 5, 2}, {pipeline.Stopped, 3, 1}, {pipeline.Cold, 2, 2}, {pipeline.Validate, 5, 5}}},
		{"workflow request without a starter", pipeline.Workflow, false, 5, []ran{
			{pipeline.Hot, 5, 2}, {pipeline.Cold, 3, 3}, {pipeline.Validate, 5, 5}}},
		{"workflow request the pool serves", pipeline.Workflow, true, 2, []ran{
			{pipeline.Hot, 2, 2}, {pipeline.Validate, 2, 2}}},
		{"webhook pool jobs", pipeline.PoolJob, true, 5, []ran{
			{pipeline.Ledger, 5, 1}, {pipeline.Hot, 4, 2}, {pipeline.Stopped, 2, 1}, {pipeline.Cold, 1, 1}, {pipeline.Register, 4, 4}}},
		{"scale-set jobs", pipeline.ScaleSetJob, true, 3, []ran{
			{pipeline.Ledger, 3, 1}, {pipeline.Hot, 2, 2}, {pipeline.Register, 2, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []ran
			steps := map[pipeline.Stage]pipeline.Step{}
			for _, s := range []pipeline.Stage{pipeline.Ledger, pipeline.Hot, pipeline.Stopped, pipeline.Cold, pipeline.Register, pipeline.Validate} {
				steps[s] = func(_ context.Context, n int) (int, error) {
					k := n
					if c, ok := supply[s]; ok {
						k = min(n, c)
					}
					got = append(got, ran{s, n, k})
					return k, nil
				}
			}
			rep, err := pipeline.Run(t.Context(), tc.src, pipeline.Stages(tc.src, tc.stopped), steps, tc.want)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !slices.Equal(got, tc.ran) {
				t.Errorf("stages ran %v, want %v", got, tc.ran)
			}
			if rep.Left != 0 || rep.Source != tc.src {
				t.Errorf("report %+v: want source %s and nothing left", rep, tc.src)
			}
		})
	}
}

// TestStageErrorEndsThePipeline: a stage's error ends the run there; the finishing stages do not
// run over a half-acquired request (the workflow source undoes it instead).
func TestStageErrorEndsThePipeline(t *testing.T) {
	t.Parallel()
	boom := errors.New("no capacity")
	var ran []pipeline.Stage
	step := func(s pipeline.Stage, n int, err error) pipeline.Step {
		return func(context.Context, int) (int, error) { ran = append(ran, s); return n, err }
	}
	rep, err := pipeline.Run(t.Context(), pipeline.Workflow, pipeline.Stages(pipeline.Workflow, true), map[pipeline.Stage]pipeline.Step{
		pipeline.Hot: step(pipeline.Hot, 1, nil), pipeline.Stopped: step(pipeline.Stopped, 0, nil),
		pipeline.Cold: step(pipeline.Cold, 0, boom), pipeline.Validate: step(pipeline.Validate, 1, nil),
	}, 3)
	if !errors.Is(err, boom) || rep.Left != 2 {
		t.Fatalf("Run = %+v, %v; want the cold stage's error with 2 left", rep, err)
	}
	if want := []pipeline.Stage{pipeline.Hot, pipeline.Stopped, pipeline.Cold}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if _, err := pipeline.Run(t.Context(), pipeline.PoolJob, pipeline.Stages(pipeline.PoolJob, true), nil, 1); err == nil {
		t.Error("a stage enabled without a step ran")
	}
}
