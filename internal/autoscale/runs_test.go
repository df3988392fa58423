package autoscale

import (
	"strings"
	"testing"
	"time"
)

const lead = 57 * time.Second // a cold start (27 s) and a pass (30 s)

func TestLearnFanouts(t *testing.T) {
	t.Parallel()
	arrivals := func(first int, after time.Duration, later int) []time.Duration {
		var out []time.Duration
		for range first {
			out = append(out, 0)
		}
		for range later {
			out = append(out, after)
		}
		return out
	}
	tests := []struct {
		name string
		runs []RunHistory
		want Fanouts
	}{
		{"a build then a matrix of 40", []RunHistory{{"test", arrivals(1, 3*time.Minute, 40)}},
			Fanouts{"test": {First: 1, Jobs: 40, After: 3 * time.Minute, Within: 3 * time.Minute}}},
		{"runs of a workflow: the most jobs, the earliest and the latest arrival", []RunHistory{
			{"test", arrivals(1, 3*time.Minute, 40)}, {"test", arrivals(2, 2*time.Minute, 30)}, {"test", arrivals(1, 5*time.Minute, 40)}},
			Fanouts{"test": {First: 2, Jobs: 40, After: 2 * time.Minute, Within: 5 * time.Minute}}},
		{"a matrix queued with the first job is not a fan-out to warm for", []RunHistory{{"lint", arrivals(60, 0, 0)}}, Fanouts{}},
		{"a matrix sooner than the lead is not either", []RunHistory{{"quick", arrivals(1, 30*time.Second, 40)}}, Fanouts{}},
		{"a few later jobs are the plan's", []RunHistory{{"deploy", arrivals(1, 5*time.Minute, MinFanout-1)}}, Fanouts{}},
		{"a run without a workflow name is skipped", []RunHistory{{"", arrivals(1, 3*time.Minute, 40)}}, Fanouts{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := LearnFanouts(tt.runs, lead)
			if len(got) != len(tt.want) {
				t.Fatalf("LearnFanouts = %+v, want %+v", got, tt.want)
			}
			for w, f := range tt.want {
				if got[w] != f {
					t.Errorf("%s: %+v, want %+v", w, got[w], f)
				}
			}
		})
	}
}

func TestFanoutsCovers(t *testing.T) {
	t.Parallel()
	f := Fanouts{"test": {First: 1, Jobs: 40, After: 2 * time.Minute, Within: 5 * time.Minute}}
	for _, tt := range []struct {
		workflow string
		after    time.Duration
		want     bool
	}{
		{"test", 0, false}, // the build job: the plan's
		{"test", 2 * time.Minute, true},
		{"test", 4 * time.Minute, true},
		{"lint", 4 * time.Minute, false},
	} {
		if got := f.Covers(tt.workflow, tt.after); got != tt.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", tt.workflow, tt.after, got, tt.want)
		}
	}
}

func TestDecidePrewarmsRuns(t *testing.T) {
	t.Parallel()
	steady := week(2, nil)
	fan := Fanouts{"test": {First: 1, Jobs: 40, After: 3 * time.Minute, Within: 6 * time.Minute}}
	run := func(since time.Duration, jobs int) Input {
		in := base(steady, 0)
		in.Fanouts, in.Live.Runs = fan, []Run{{Workflow: "test", Since: since, Jobs: jobs, Running: 1}}
		return in
	}
	tests := []struct {
		name   string
		in     func() Input
		hot    int
		next   int
		reason string
	}{
		{"the first job queued: warm the matrix", func() Input { return run(0, 1) }, 42, 2, "40 hot for the fan-outs of 1 runs in progress (test)"},
		{"a setup job longer than any seen: still warm", func() Input { return run(20*time.Minute, 1) }, 42, 2, "40 hot"},
		{"part of the matrix arrived: the rest", func() Input { return run(4*time.Minute, 31) }, 12, 2, "10 hot"},
		{"the matrix arrived: nothing more", func() Input { return run(4*time.Minute, 41) }, 2, 2, ""},
		{"its jobs done, past the latest matrix (its build failed): nothing", func() Input {
			in := run(7*time.Minute, 1)
			in.Live.Runs[0].Running = 0
			return in
		}, 2, 2, ""},
		{"its jobs done, its matrix still due: warm", func() Input {
			in := run(5*time.Minute, 1)
			in.Live.Runs[0].Running = 0
			return in
		}, 42, 2, "40 hot"},
		{"an unknown workflow: nothing", func() Input {
			in := run(3*time.Minute, 1)
			in.Live.Runs[0].Workflow = "lint"
			return in
		}, 2, 2, ""},
		{"without fan-outs runs are not looked at", func() Input {
			in := run(3*time.Minute, 1)
			in.Fanouts = nil
			return in
		}, 2, 2, ""},
		{"two runs add up", func() Input {
			in := run(3*time.Minute, 1)
			in.Live.Runs = append(in.Live.Runs, Run{Workflow: "test", Since: 5 * time.Minute, Jobs: 21, Running: 20})
			return in
		}, 62, 2, "60 hot for the fan-outs of 2 runs"},
		{"the pre-warm is not held by the cooldown", func() Input {
			in := run(4*time.Minute, 41)
			in.Prev = State{Hot: 2}
			return in
		}, 2, 2, ""},
		{"the window's max caps a pre-warm, as a conflict", func() Input {
			in := run(3*time.Minute, 1)
			in.Bounds = Bounds{MaxHot: 20}
			return in
		}, 20, 2, "40 hot for the fan-outs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Decide(tt.in())
			if d.Hot != tt.hot || d.Next.Hot != tt.next {
				t.Errorf("hot %d, held %d; want %d, %d (reasons %q)", d.Hot, d.Next.Hot, tt.hot, tt.next, d.Reasons)
			}
			reasons := strings.Join(d.Reasons, "; ")
			if tt.reason != "" && !strings.Contains(reasons, tt.reason) {
				t.Errorf("reasons %q lack %q", reasons, tt.reason)
			}
			if tt.reason == "" && strings.Contains(reasons, "fan-outs") {
				t.Errorf("reasons %q mention a pre-warm", reasons)
			}
			if capped := tt.in().Bounds.MaxHot > 0; capped != strings.Contains(d.Conflict, "max is 20") {
				t.Errorf("conflict %q, want the window's max only when it caps", d.Conflict)
			}
		})
	}
}
