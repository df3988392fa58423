//go:build faults

// The GitHub steps of the fault matrix: GitHub answering 5xx for a while (github-outage), and its
// documented rate limits (github-rate-limit): the primary limit (403 or 429 with
// x-ratelimit-remaining: 0 until x-ratelimit-reset) and the secondary one (403 or 429 with
// retry-after), as the GitHub fake serves them. Each run is a workflow (provision of two, release)
// on a fresh replica, so that its GitHub client holds no token yet and must mint during the fault.
// Every provision and release must succeed once GitHub answers again, no instance the run used may
// be terminated or expired (all are healthy), no run may be left provisioning, and the whole
// deployment must pass env.verify.
package faults_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// githubOutage is GitHub's 60 s outage scaled by the sandbox's time factor (0.05).
const githubOutage = 3 * time.Second

// githubFault is one run's fault, set just before the workflow. spend: another replica spends the
// primary budget first, so that the run's replica learns of the limit from GitHub's answer (its own
// go-github would otherwise stop itself at x-ratelimit-remaining: 0, which is waited out too).
type githubFault struct {
	name  string
	set   func(gh *githubfake.Server)
	spend bool
}

// An outage refuses every retry of every call made during it (three or four a run): half the crash
// steps' runs give over twenty injections. A rate limit refuses one or two calls a run: as many
// runs as the crash steps.
func githubOutageStep(t *testing.T, e *env) {
	githubStep(t, e, "github-outage", max(2, runsPerStep(t)/2), []githubFault{
		{"503 for the outage", func(gh *githubfake.Server) { gh.SetOutage(githubOutage) }, false},
	})
}

func githubRateLimitStep(t *testing.T, e *env) {
	w := githubOutage
	githubStep(t, e, "github-rate-limit", runsPerStep(t), []githubFault{
		{"primary 403", func(gh *githubfake.Server) { gh.SetLimits(githubfake.Limits{Primary: 2, PrimaryWindow: w}) }, true},
		{"secondary 403", func(gh *githubfake.Server) { gh.SetLimits(githubfake.Limits{Points: 6, PointsWindow: w}) }, false},
		{"primary 429", func(gh *githubfake.Server) {
			gh.SetLimits(githubfake.Limits{Primary: 2, PrimaryWindow: w, Status: http.StatusTooManyRequests})
		}, true},
		{"secondary 429", func(gh *githubfake.Server) {
			gh.SetLimits(githubfake.Limits{Points: 6, PointsWindow: w, Status: http.StatusTooManyRequests})
		}, false},
	})
}

// githubStep runs workflows, each under the next of faults, and reports the step.
func githubStep(t *testing.T, e *env, step string, runs int, faults []githubFault) {
	ctx := t.Context()
	gh := e.sb.Stack.GitHub
	clear := func() { gh.SetOutage(0); gh.SetLimits(githubfake.Limits{}) }
	defer clear()
	before := gh.Usage().Refused
	ok, healthyTerminated, stuck := 0, 0, 0
	for i := range runs {
		f := faults[i%len(faults)]
		err := func() error {
			r := e.replica(replicaOptions{})
			refused := gh.Usage().Refused
			f.set(gh)
			if f.spend {
				other := e.replica(replicaOptions{})
				for range 2 {
					if _, err := other.gh.ListRunners(ctx, sandbox.Scope); err != nil {
						return fmt.Errorf("spending the budget: %w", err)
					}
				}
			}
			w, err := judgedWorkflow(ctx, e, r, i)
			clear()
			if err != nil {
				if errors.Is(err, errStuck) {
					stuck++
				}
				return err
			}
			if gh.Usage().Refused == refused {
				t.Logf("run %d (%s): GitHub refused nothing", i+1, f.name)
			}
			n, err := e.judge(ctx, w)
			healthyTerminated += n
			return err
		}()
		if err != nil {
			t.Errorf("%s run %d (%s): %v", step, i+1, f.name, err)
			continue
		}
		ok++
	}
	injected := gh.Usage().Refused - before
	if injected < runs {
		t.Errorf("%s: %d refusals in %d runs: the fault was hardly injected", step, injected, runs)
	}
	e.report(step, runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d injections=%d", healthyTerminated, stuck, injected))
}
