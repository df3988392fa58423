// Tests of the fake runner protocol end to end through RunnerClient, with the REST side seen through
// go-github: registration (token and JIT), sessions, job matching and long polls, completion, removal.

package githubfake_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

func TestRunnerLifecycle(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	ctx := t.Context()

	reg, _, err := gh.Actions.CreateRegistrationToken(ctx, "acme", "app")
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(base, nil)
	r, err := rc.Register(ctx, githubfake.RegisterOptions{
		URL: "https://github.com/acme/app", Token: reg.GetToken(), Name: "i-0abc", Labels: []string{"run-42"},
	})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	status := func() (string, bool) {
		t.Helper()
		gr, _, err := gh.Actions.GetRunner(ctx, "acme", "app", r.RunnerID)
		if err != nil {
			t.Fatalf("GetRunner: %v", err)
		}
		return gr.GetStatus(), gr.GetBusy()
	}
	if s, busy := status(); s != "offline" || busy {
		t.Errorf("after Register: %s busy=%v, want offline idle", s, busy)
	}
	if err := rc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := status(); s != "online" {
		t.Errorf("after Connect: %s, want online", s)
	}

	gpu := fake.QueueJob("acme", "app", 42, []string{"self-hosted", "gpu"}) // the runner lacks gpu
	job := fake.QueueJob("acme", "app", 42, []string{"self-hosted", "run-42"})
	got, err := rc.NextJob(ctx, 5*time.Second)
	if err != nil || got == nil {
		t.Fatalf("NextJob = %v, %v; want job %d", got, err, job)
	}
	if diff := cmp.Diff(&githubfake.AssignedJob{ID: job, RunID: 42, RunAttempt: 1, Owner: "acme", Repo: "app", Name: "job", Labels: []string{"self-hosted", "run-42"}}, got); diff != "" {
		t.Errorf("assigned job (-want +got):\n%s", diff)
	}
	if _, busy := status(); !busy {
		t.Error("runner with a job is not busy")
	}
	if j, _ := fake.Job(job); j.Status != githubfake.JobInProgress || j.RunnerName != "i-0abc" || j.RunnerID != r.RunnerID {
		t.Errorf("Job = %+v, want in_progress on i-0abc", j)
	}
	if _, err := gh.Actions.RemoveRunner(ctx, "acme", "app", r.RunnerID); statusOf(err) != http.StatusUnprocessableEntity {
		t.Errorf("deleting a busy runner: %v, want 422", err)
	}
	if _, err := rc.NextJob(ctx, 0); apiStatus(err) != http.StatusConflict {
		t.Errorf("NextJob while busy: %v, want 409", err)
	}
	if err := rc.Complete(ctx, job, "success"); err != nil {
		t.Fatal(err)
	}
	if j, _ := fake.Job(job); j.Status != githubfake.JobCompleted || j.Conclusion != "success" {
		t.Errorf("Job = %+v, want completed/success", j)
	}
	if s, busy := status(); s != "online" || busy {
		t.Errorf("after Complete: %s busy=%v, want online idle (not ephemeral)", s, busy)
	}
	if next, err := rc.NextJob(ctx, 100*time.Millisecond); next != nil || err != nil {
		t.Errorf("NextJob = %v, %v; want nothing (the gpu job is not for this runner)", next, err)
	}
	if j, _ := fake.Job(gpu); j.Status != githubfake.JobQueued {
		t.Errorf("gpu job = %+v, want still queued", j)
	}
	if err := rc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := status(); s != "offline" {
		t.Errorf("after Disconnect: %s, want offline", s)
	}
	if err := rc.Deregister(ctx, reg.GetToken()); apiStatus(err) != http.StatusUnauthorized {
		t.Errorf("Deregister with a registration token: %v, want 401", err)
	}
	remove, _, err := gh.Actions.CreateRemoveToken(ctx, "acme", "app")
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Deregister(ctx, remove.GetToken()); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if rs := fake.Runners("acme", "app"); len(rs) != 0 {
		t.Errorf("Runners after Deregister = %+v, want none", rs)
	}
	if err := rc.Connect(ctx); !errors.Is(err, githubfake.ErrRunnerRemoved) {
		t.Errorf("Connect after Deregister: %v, want ErrRunnerRemoved", err)
	}
	if err := rc.Deregister(ctx, remove.GetToken()); err != nil {
		t.Errorf("second Deregister: %v, want success (idempotent)", err)
	}
}

func apiStatus(err error) int {
	var e *githubfake.APIError
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

func TestJobMatching(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		runnerRepo string // "" = organization runner of acme
		labels     []string
		os         string
		jobOwner   string
		jobRepo    string
		runsOn     []string
		want       bool
	}{
		{"repo runner, all labels", "app", []string{"run-1"}, "", "acme", "app", []string{"self-hosted", "linux", "x64", "run-1"}, true},
		{"labels are case-insensitive", "app", []string{"Pool=Dependabot"}, "", "acme", "app", []string{"Self-Hosted", "pool=dependabot"}, true},
		{"missing label", "app", []string{"run-1"}, "", "acme", "app", []string{"self-hosted", "run-2"}, false},
		{"os label", "app", nil, "Windows", "acme", "app", []string{"self-hosted", "linux"}, false},
		{"other repository", "app", []string{"run-1"}, "", "acme", "web", []string{"run-1"}, false},
		{"org runner, org repository", "", []string{"run-1"}, "", "ACME", "web", []string{"run-1"}, true},
		{"org runner, other owner", "", []string{"run-1"}, "", "other", "web", []string{"run-1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, base := newFake(t, githubfake.Options{})
			gh := tokenClient(t, base, fake.PAT())
			var tok *github.RegistrationToken
			var err error
			if tt.runnerRepo == "" {
				tok, _, err = gh.Actions.CreateOrganizationRegistrationToken(t.Context(), "acme")
			} else {
				tok, _, err = gh.Actions.CreateRegistrationToken(t.Context(), "acme", tt.runnerRepo)
			}
			if err != nil {
				t.Fatal(err)
			}
			rc := githubfake.NewRunnerClient(base, nil)
			if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{Token: tok.GetToken(), Name: "r", Labels: tt.labels, OS: tt.os}); err != nil {
				t.Fatal(err)
			}
			if err := rc.Connect(t.Context()); err != nil {
				t.Fatal(err)
			}
			id := fake.QueueJob(tt.jobOwner, tt.jobRepo, 1, tt.runsOn)
			wait := 2 * time.Second
			if !tt.want {
				wait = 50 * time.Millisecond
			}
			job, err := rc.NextJob(t.Context(), wait)
			if err != nil {
				t.Fatal(err)
			}
			if got := job != nil && job.ID == id; got != tt.want {
				t.Errorf("runner got the job: %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRegistrationErrors(t *testing.T) {
	t.Parallel()
	var clk clock
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	gh := tokenClient(t, base, fake.PAT())
	reg, _, err := gh.Actions.CreateRegistrationToken(t.Context(), "acme", "app")
	if err != nil {
		t.Fatal(err)
	}
	remove, _, err := gh.Actions.CreateRemoveToken(t.Context(), "acme", "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := githubfake.NewRunnerClient(base, nil).Register(t.Context(), githubfake.RegisterOptions{Token: reg.GetToken(), Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts githubfake.RegisterOptions
		want int // 0: success
	}{
		{"unknown token", githubfake.RegisterOptions{Token: "NOPE", Name: "a"}, http.StatusUnauthorized},
		{"remove token", githubfake.RegisterOptions{Token: remove.GetToken(), Name: "a"}, http.StatusUnauthorized},
		{"url of another repository", githubfake.RegisterOptions{URL: "https://github.com/acme/web", Token: reg.GetToken(), Name: "a"}, http.StatusForbidden},
		{"url of the organization", githubfake.RegisterOptions{URL: "https://github.com/acme", Token: reg.GetToken(), Name: "a"}, http.StatusForbidden},
		{"name taken", githubfake.RegisterOptions{Token: reg.GetToken(), Name: "TAKEN"}, http.StatusConflict},
		{"no name", githubfake.RegisterOptions{Token: reg.GetToken()}, http.StatusUnprocessableEntity},
		{"bad os", githubfake.RegisterOptions{Token: reg.GetToken(), Name: "a", OS: "Plan9"}, http.StatusUnprocessableEntity},
		{"group on a repo runner", githubfake.RegisterOptions{Token: reg.GetToken(), Name: "a", RunnerGroup: "Default"}, http.StatusBadRequest},
		{"token and JIT", githubfake.RegisterOptions{Token: reg.GetToken(), JITConfig: "eA==", Name: "a"}, http.StatusBadRequest},
		{"JIT that is not ours", githubfake.RegisterOptions{JITConfig: "eyJhIjoxfQ=="}, http.StatusBadRequest},
		{"replace", githubfake.RegisterOptions{Token: reg.GetToken(), Name: "taken", Replace: true}, 0},
		{"token reused for another runner", githubfake.RegisterOptions{URL: "https://ghes.example/acme/app", Token: reg.GetToken(), Name: "b"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := githubfake.NewRunnerClient(base, nil).Register(t.Context(), tt.opts)
			if got := apiStatus(err); got != tt.want || (tt.want == 0 && err != nil) {
				t.Errorf("Register: %v (status %d), want status %d", err, got, tt.want)
			}
		})
	}
	t.Run("expired token", func(t *testing.T) {
		// Inline (not parallel): it moves the clock before the parallel cases run.
		clk.Advance(time.Hour)
		defer clk.Advance(-time.Hour)
		_, err := githubfake.NewRunnerClient(base, nil).Register(t.Context(), githubfake.RegisterOptions{Token: reg.GetToken(), Name: "late"})
		if apiStatus(err) != http.StatusUnauthorized {
			t.Errorf("Register with an expired token: %v, want 401", err)
		}
	})
}

func TestJITRunner(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	ctx := t.Context()
	cfg, _, err := gh.Actions.GenerateOrgJITConfig(ctx, "acme", &github.GenerateJITConfigRequest{Name: "jit-1", RunnerGroupID: 1, Labels: []string{"pool=default"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(base, nil)
	reg, err := rc.Register(ctx, githubfake.RegisterOptions{JITConfig: cfg.GetEncodedJITConfig()})
	if err != nil {
		t.Fatalf("Register with JIT config: %v", err)
	}
	if reg.RunnerID != cfg.GetRunner().GetID() || reg.Name != "jit-1" || !reg.Ephemeral || reg.Owner != "acme" || reg.Repo != "" {
		t.Errorf("registration = %+v, want the JIT runner", reg)
	}
	if _, err := githubfake.NewRunnerClient(base, nil).Register(ctx, githubfake.RegisterOptions{JITConfig: cfg.GetEncodedJITConfig()}); apiStatus(err) != http.StatusConflict {
		t.Errorf("JIT config used twice: %v, want 409", err)
	}
	if err := rc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	id := fake.QueueJob("acme", "svc", 9, []string{"self-hosted", "pool=default"})
	job, err := rc.NextJob(ctx, 5*time.Second)
	if err != nil || job == nil || job.ID != id {
		t.Fatalf("NextJob = %v, %v; want %d", job, err, id)
	}
	if err := rc.Complete(ctx, job.ID, "failure"); err != nil {
		t.Fatal(err)
	}
	if j, _ := fake.Job(id); j.Conclusion != "failure" {
		t.Errorf("conclusion = %q, want failure", j.Conclusion)
	}
	if rs := fake.Runners("acme", ""); len(rs) != 0 {
		t.Errorf("ephemeral runner still registered after its job: %+v", rs)
	}
	if _, err := rc.NextJob(ctx, 0); !errors.Is(err, githubfake.ErrRunnerRemoved) {
		t.Errorf("NextJob after the ephemeral job: %v, want ErrRunnerRemoved", err)
	}
	if err := rc.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect of a removed runner: %v, want success", err)
	}
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*githubfake.Server, *github.Client, *githubfake.RunnerClient, githubfake.Registration) {
		fake, base := newFake(t, githubfake.Options{})
		gh := tokenClient(t, base, fake.PAT())
		tok, _, err := gh.Actions.CreateRegistrationToken(t.Context(), "acme", "app")
		if err != nil {
			t.Fatal(err)
		}
		rc := githubfake.NewRunnerClient(base, nil)
		reg, err := rc.Register(t.Context(), githubfake.RegisterOptions{Token: tok.GetToken(), Name: "r", Labels: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Connect(t.Context()); err != nil {
			t.Fatal(err)
		}
		return fake, gh, rc, reg
	}
	tests := []struct {
		name    string
		act     func(t *testing.T, fake *githubfake.Server, gh *github.Client, reg githubfake.Registration)
		wantJob bool
		wantErr error
		wantAPI int
	}{
		{"a job queued while waiting", func(t *testing.T, fake *githubfake.Server, _ *github.Client, _ githubfake.Registration) {
			fake.QueueJob("acme", "app", 1, []string{"x"})
		}, true, nil, 0},
		{"runner deleted while waiting", func(t *testing.T, _ *githubfake.Server, gh *github.Client, reg githubfake.Registration) {
			if _, err := gh.Actions.RemoveRunner(t.Context(), "acme", "app", reg.RunnerID); err != nil {
				t.Error(err)
			}
		}, false, githubfake.ErrRunnerRemoved, 0},
		{"server closed while waiting", func(t *testing.T, fake *githubfake.Server, _ *github.Client, _ githubfake.Registration) {
			fake.Close()
		}, false, nil, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, gh, rc, reg := setup(t)
			type result struct {
				job *githubfake.AssignedJob
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				job, err := rc.NextJob(t.Context(), 20*time.Second)
				done <- result{job, err}
			}()
			time.Sleep(100 * time.Millisecond) // let the poll start waiting
			tt.act(t, fake, gh, reg)
			res := <-done
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("NextJob returned after %v: the change did not wake it", elapsed)
			}
			if (res.job != nil) != tt.wantJob {
				t.Errorf("job = %v, want a job: %v", res.job, tt.wantJob)
			}
			if tt.wantErr != nil && !errors.Is(res.err, tt.wantErr) {
				t.Errorf("err = %v, want %v", res.err, tt.wantErr)
			}
			if tt.wantAPI != 0 && apiStatus(res.err) != tt.wantAPI {
				t.Errorf("err = %v, want status %d", res.err, tt.wantAPI)
			}
		})
	}
}

// TestConcurrentRunners checks that with many runners polling at once every job runs exactly once.
func TestConcurrentRunners(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	tok, _, err := gh.Actions.CreateOrganizationRegistrationToken(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	const runners, jobs = 8, 40
	for i := range jobs {
		fake.QueueJob("acme", "app", int64(1000+i), []string{"pool"})
	}
	var mu sync.Mutex
	ran := map[int64]int{}
	var wg sync.WaitGroup
	for i := range runners {
		wg.Go(func() {
			rc := githubfake.NewRunnerClient(base, nil)
			if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{Token: tok.GetToken(), Name: "r" + string(rune('a'+i)), Labels: []string{"pool"}}); err != nil {
				t.Error(err)
				return
			}
			if err := rc.Connect(t.Context()); err != nil {
				t.Error(err)
				return
			}
			for {
				job, err := rc.NextJob(t.Context(), 200*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if job == nil {
					return
				}
				mu.Lock()
				ran[job.ID]++
				mu.Unlock()
				if err := rc.Complete(t.Context(), job.ID, ""); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(ran) != jobs {
		t.Errorf("%d distinct jobs ran, want %d", len(ran), jobs)
	}
	for id, n := range ran {
		if n != 1 {
			t.Errorf("job %d ran %d times", id, n)
		}
	}
	for _, j := range fake.Jobs() {
		if j.Status != githubfake.JobCompleted || j.Conclusion != "success" {
			t.Errorf("job %d: %s/%s, want completed/success", j.ID, j.Status, j.Conclusion)
		}
	}
}
