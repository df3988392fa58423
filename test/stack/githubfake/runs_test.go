// The fake's workflow runs against GitHub's published re-run semantics (runs.go): which jobs each
// kind of re-run runs again, the attempt they carry, and the outputs a job that is not re-run keeps.
package githubfake_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// sampleWorkflow is examples/github-actions/workflow.yml's shape: provision, two jobs on its
// runners, and a release that always runs. test fails in attempt 1.
func sampleWorkflow() []githubfake.WorkflowJob {
	label := "${{ needs.provision.outputs.label }}"
	return []githubfake.WorkflowJob{
		{Name: "provision", RunsOn: []string{"ubuntu-latest"}},
		{Name: "build", Needs: []string{"provision"}, RunsOn: []string{label}},
		{Name: "test", Needs: []string{"provision"}, RunsOn: []string{label}, FailIn: []int64{1}},
		{Name: "release", Needs: []string{"provision", "build", "test"}, RunsOn: []string{"ubuntu-latest"}, Always: true},
	}
}

// play completes every queued job of the run's current attempt until none is left: provision sets
// its label output to "<run>-<attempt>", as runnerpool's provision does.
func play(t *testing.T, fake *githubfake.Server, run int64) map[string]githubfake.Job {
	t.Helper()
	for range 10 {
		attempt, jobs := fake.RunJobs(run)
		progressed := false
		for _, name := range []string{"provision", "build", "test", "release"} {
			j, ok := jobs[name]
			if !ok || j.Status == githubfake.JobCompleted {
				continue
			}
			out := map[string]string(nil)
			if name == "provision" {
				out = map[string]string{"label": fmt.Sprintf("%d-%d", run, attempt)}
			}
			conclusion := "success"
			if name == "test" && attempt == 1 {
				conclusion = "failure" // its steps fail in attempt 1
			}
			if err := fake.CompleteJob(j.ID, conclusion, out); err != nil {
				t.Fatal(err)
			}
			progressed = true
		}
		if !progressed {
			_, jobs := fake.RunJobs(run)
			return jobs
		}
	}
	t.Fatal("the run did not settle")
	return nil
}

func TestReRunSemantics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rerun     func(ctx context.Context, c *github.Client, run int64, jobs map[string]githubfake.Job) error
		wantRerun []string // jobs run again in attempt 2
		wantLabel string   // what build and test of attempt 2 ask for, %d the run id
	}{
		{"all jobs", func(ctx context.Context, c *github.Client, run int64, _ map[string]githubfake.Job) error {
			_, err := c.Actions.RerunWorkflowByID(ctx, "acme", "app", run)
			return err
		}, []string{"build", "provision", "release", "test"}, "%d-2"},
		{"failed jobs", func(ctx context.Context, c *github.Client, run int64, _ map[string]githubfake.Job) error {
			_, err := c.Actions.RerunFailedJobsByID(ctx, "acme", "app", run)
			return err
		}, []string{"release", "test"}, "%d-1"},
		{"a single job", func(ctx context.Context, c *github.Client, run int64, jobs map[string]githubfake.Job) error {
			_, err := c.Actions.RerunJobByID(ctx, "acme", "app", jobs["build"].ID)
			return err
		}, []string{"build", "release"}, "%d-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := githubfake.New(githubfake.Options{})
			srv := httptest.NewServer(fake)
			t.Cleanup(func() { srv.Close(); fake.Close() })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			c := tokenClient(t, srv.URL, fake.PAT())

			run := fake.StartRun("acme", "app", sampleWorkflow())
			if _, jobs := fake.RunJobs(run); len(jobs) != 1 || jobs["provision"].Status != githubfake.JobQueued {
				t.Fatalf("attempt 1 starts with %+v, want provision alone queued", jobs)
			}
			first := play(t, fake, run)
			if first["test"].Conclusion != "failure" || first["release"].Conclusion != "success" || first["build"].Labels[0] != fmt.Sprintf("%d-1", run) {
				t.Fatalf("attempt 1: %+v", first)
			}
			if _, err := c.Actions.RerunWorkflowByID(ctx, "acme", "app", 12345); statusOf(err) != 404 {
				t.Errorf("re-run of an unknown run: %v, want 404", err)
			}
			if err := tt.rerun(ctx, c, run, first); err != nil {
				t.Fatalf("re-run: %v", err)
			}
			attempt, jobs := fake.RunJobs(run)
			if attempt != 2 {
				t.Fatalf("attempt %d after the re-run, want 2", attempt)
			}
			var rerun []string
			for name, j := range jobs {
				if j.ID != first[name].ID {
					rerun = append(rerun, name)
					if j.RunAttempt != 2 {
						t.Errorf("re-run job %s carries attempt %d, want 2", name, j.RunAttempt)
					}
				}
			}
			slices.Sort(rerun)
			settled := play(t, fake, run)
			for name, j := range settled {
				if j.ID != first[name].ID && !slices.Contains(rerun, name) {
					rerun = append(rerun, name)
				}
			}
			slices.Sort(rerun)
			if !slices.Equal(rerun, tt.wantRerun) {
				t.Errorf("re-run jobs %v, want %v", rerun, tt.wantRerun)
			}
			want := fmt.Sprintf(tt.wantLabel, run)
			for _, name := range []string{"build", "test"} {
				if got := settled[name].Labels[0]; got != want {
					t.Errorf("%s of attempt 2 asks for %q, want %q", name, got, want)
				}
			}
			if settled["release"].RunAttempt != 2 || settled["release"].Conclusion != "success" {
				t.Errorf("release of attempt 2: %+v", settled["release"])
			}
			// A run in progress cannot be re-run.
			if _, err := c.Actions.RerunWorkflowByID(ctx, "acme", "app", run); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Actions.RerunWorkflowByID(ctx, "acme", "app", run); statusOf(err) != 403 {
				t.Errorf("re-run of a run in progress: %v, want 403", err)
			}
		})
	}
}
