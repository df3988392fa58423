// Quotas across replicas: the per-repository limit holds with two replicas deciding at once, a
// refusal is a 429 naming the limit, and a release gives the repository's runners back.
package service_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// heldPeak samples, until stop is closed, how many live instances serve a run at once (every run
// is the environment's repository's) and returns the most seen.
func heldPeak(st *store.Store, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		peak := 0
		for {
			if recs, err := st.Live(context.Background()); err == nil {
				// Live lists state by state: an instance that changed state in between is listed
				// twice, so instances are counted by id.
				held := map[string]bool{}
				for _, r := range recs {
					if r.RunID != "" && strings.HasPrefix(r.RunID, servicetest.RepositoryID+":") {
						held[r.ID] = true
					}
				}
				peak = max(peak, len(held))
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// TestQuotaEnforcedUnderRace: two replicas, 40 concurrent provisions of one runner each from
// one repository limited to 10 runners (4 pooled, the rest created): exactly 10 are served, 30 are
// refused with 429 quota_exceeded naming the limit and the repository's own count, and the
// repository never holds more than 10 runners (the figure quota_enforced_under_race). Releasing
// five runs gives five back: the next provisions fit again.
func TestQuotaEnforcedUnderRace(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	env.Fill(t, 4)
	limits := map[string]string{"RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY": "10", "RUNNERPOOL_DASHBOARD_LISTEN": "127.0.0.1:0"}
	replicas := []*servicetest.Replica{env.Start(t, "a", limits), env.Start(t, "b", limits)}

	stop := make(chan struct{})
	peak := heldPeak(env.Store, stop)
	const runs = 40
	var served, refused atomic.Int32
	var mu sync.Mutex
	var servedRuns []string
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			run := fmt.Sprint(5001 + i)
			code, body := servicetest.Call(t, http.MethodPost, replicas[i%2].URL+apiv1.PathProvision, env.Token(t, run, nil), provisionBody(1))
			switch code {
			case http.StatusOK:
				served.Add(1)
				mu.Lock()
				servedRuns = append(servedRuns, run)
				mu.Unlock()
			case http.StatusTooManyRequests:
				refused.Add(1)
				e := servicetest.Decode[apiv1.Error](t, body)
				if e.Code != apiv1.CodeQuotaExceeded || !e.Retryable || e.Quota == nil || e.Quota.Limit != quota.LimitRepository ||
					e.Quota.Max != 10 || e.Quota.Current == nil || *e.Quota.Current > 10 || e.Quota.Asked != 1 {
					t.Errorf("run %s: 429 body %s", run, body)
				}
			default:
				t.Errorf("run %s: %d %s", run, code, body)
			}
		})
	}
	wg.Wait()
	close(stop)
	most := <-peak
	live := 0
	for _, rec := range env.Audit(t) {
		if rec.RunID != "" {
			live++
		}
	}
	most = max(most, live)
	t.Logf("quota_enforced_under_race=%d (2 replicas, %d provisions of 1 against a limit of 10: %d served, %d refused)", most, runs, served.Load(), refused.Load())
	if most > 10 || served.Load() != 10 || refused.Load() != runs-10 {
		t.Fatalf("held at most %d, served %d, refused %d; want <= 10, 10 and %d", most, served.Load(), refused.Load(), runs-10)
	}
	if got := metricValue(t, replicas[0].URL+apiv1.PathMetrics, `runnerpool_quota_refusals_total{limit="repository_runners"`) +
		metricValue(t, replicas[1].URL+apiv1.PathMetrics, `runnerpool_quota_refusals_total{limit="repository_runners"`); got != runs-10 {
		t.Errorf("refusals counted %v, want %d", got, runs-10)
	}

	// The operator's dashboard shows the repository's count and its refusals (the API never does).
	code, page := servicetest.Call(t, http.MethodGet, replicas[1].Service.DashboardURL()+"/quotas", "", nil)
	if code != http.StatusOK || !strings.Contains(string(page), servicetest.Repository) || !strings.Contains(string(page), fmt.Sprintf("%d refused in all", runs-10)) {
		t.Errorf("dashboard /quotas: %d\n%s", code, page)
	}

	for _, run := range servedRuns[:5] {
		code, body := servicetest.Call(t, http.MethodPost, replicas[0].URL+apiv1.PathRelease, env.Token(t, run, nil), nil)
		if code != http.StatusOK {
			t.Fatalf("release of run %s: %d %s", run, code, body)
		}
	}
	for i := range 6 {
		run := fmt.Sprint(6001 + i)
		code, body := servicetest.Call(t, http.MethodPost, replicas[1].URL+apiv1.PathProvision, env.Token(t, run, nil), provisionBody(1))
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if code != want {
			t.Errorf("provision %d after five releases: %d %s, want %d", i, code, body, want)
		}
	}
}

// metricValue reads one sample of a counter from a /metrics page (0 when absent).
func metricValue(t *testing.T, url, prefix string) float64 {
	t.Helper()
	code, body := servicetest.Call(t, http.MethodGet, url, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", url, code)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				return v
			}
		}
	}
	return 0
}

// TestInstanceCapRefusesCreation: with --max-instances 2, a provision that would create a third
// instance is refused with 429 deployment_instances (the deployment's count is not disclosed); one
// that reused two pooled instances and had to create a third is refused whole, its two claims back
// in the pool; reuse within the cap is served.
func TestInstanceCapRefusesCreation(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_MAX_INSTANCES": "2"})
	provision := func(run string, count int) (int, []byte) {
		return servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, run, nil), provisionBody(count))
	}
	refusedByCap := func(what string, code int, body []byte, asked int) {
		t.Helper()
		e := servicetest.Decode[apiv1.Error](t, body)
		if code != http.StatusTooManyRequests || e.Code != apiv1.CodeQuotaExceeded || e.Quota == nil ||
			e.Quota.Limit != quota.LimitDeployment || e.Quota.Max != 2 || e.Quota.Current != nil || e.Quota.Asked != asked {
			t.Fatalf("%s: %d %s, want 429 deployment_instances asking %d, without a count", what, code, body, asked)
		}
	}
	if code, body := provision("7001", 2); code != http.StatusOK {
		t.Fatalf("first provision: %d %s", code, body)
	}
	code, body := provision("7002", 1)
	refusedByCap("a third instance", code, body, 1)

	if code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, env.Token(t, "7001", nil), nil); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	code, body = provision("7003", 3)
	refusedByCap("two reused and one to create", code, body, 1)
	idle := 0
	for _, rec := range env.Audit(t) {
		if rec.State == store.StateIdle && rec.RunID == "" {
			idle++
		}
	}
	if idle != 2 {
		t.Errorf("%d idle instances after the refused provision, want its 2 claims back in the pool", idle)
	}
	code, body = provision("7004", 2)
	if code != http.StatusOK {
		t.Fatalf("reuse within the cap: %d %s", code, body)
	}
	for _, rn := range servicetest.Decode[apiv1.ProvisionResponse](t, body).Runners {
		if rn.Source != apiv1.SourceReused {
			t.Errorf("runner %s %s, want reused", rn.InstanceID, rn.Source)
		}
	}
}

// TestCapsBelowWarmPoolsRefusedAtStart: a deployment cap, or a runner class's, below what the warm
// pools in the table keep stops the start with the reason; a cap that holds them starts.
func TestCapsBelowWarmPoolsRefusedAtStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	rc.MaxInstances = 5
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	for _, wp := range []declared.WarmPool{
		{Name: "warm-a", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1, Stopped: 2}}},
		{Name: "warm-b", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1}, {Name: "peak", Hot: 3,
			Match: &schedule.Match{Days: []string{"monday"}}}}},
	} {
		if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
			t.Fatalf("PutWarmPool: %v", err)
		}
	}
	awsCfg := env.AWSConfig()
	for _, tc := range []struct {
		maxInstances string
		want         []string
	}{
		{"5", []string{"keep up to 6 instances, more than the deployment's cap of 5", "runner class " + rc.Name + " keep up to 6 instances, more than its max_instances 5"}},
		{"10", []string{"runner class " + rc.Name + " keep up to 6 instances, more than its max_instances 5"}},
	} {
		cfg := env.Config(t, "a", map[string]string{"RUNNERPOOL_MAX_INSTANCES": tc.maxInstances})
		_, err := service.New(ctx, cfg, service.Options{AWS: &awsCfg, Logger: env.Log})
		if err == nil {
			t.Fatalf("max-instances %s: started with warm pools keeping 6", tc.maxInstances)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("max-instances %s: %v\ndoes not say %q", tc.maxInstances, err, w)
			}
		}
	}
	rc.MaxInstances = 6
	if _, err := repo.PutRunnerClass(ctx, rc, 1); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	env.Start(t, "a", map[string]string{"RUNNERPOOL_MAX_INSTANCES": "6"})
}
