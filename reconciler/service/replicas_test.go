// Several replicas on one table: no double claim under concurrent provisions, lease failover, and
// graceful shutdown with provisions in flight.
package service_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// TestTwoReplicasNoDoubleClaim: concurrent provisions of different runs split over two replicas
// with their own clients, racing for one pool: every instance serves at most one run, every run's
// records are exactly the runners it was given, and no instance is lost.
func TestTwoReplicasNoDoubleClaim(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 6)
	replicas := []*servicetest.Replica{env.Start(t, "a", nil), env.Start(t, "b", nil)}

	const runs, each = 8, 2
	results := make([]apiv1.ProvisionResponse, runs)
	codes := make([]int, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			run := fmt.Sprint(3001 + i)
			code, body := servicetest.Call(t, http.MethodPost, replicas[i%2].URL+apiv1.PathProvision, env.Token(t, run, nil), provisionBody(each))
			codes[i] = code
			if code == http.StatusOK {
				results[i] = servicetest.Decode[apiv1.ProvisionResponse](t, body)
			} else {
				t.Errorf("provision of run %s: %d %s", run, code, body)
			}
		})
	}
	wg.Wait()

	owner := map[string]string{}
	reused := 0
	for i, res := range results {
		if codes[i] != http.StatusOK {
			continue
		}
		if len(res.Runners) != each {
			t.Errorf("run %s got %d runners, want %d", res.RunKey, len(res.Runners), each)
		}
		for _, rn := range res.Runners {
			if prev, dup := owner[rn.InstanceID]; dup {
				t.Errorf("instance %s given to two runs: %s and %s", rn.InstanceID, prev, res.RunKey)
			}
			owner[rn.InstanceID] = res.RunKey
			if rn.Source == apiv1.SourceReused {
				reused++
				if !slices.Contains(pooled, rn.InstanceID) {
					t.Errorf("instance %s reported reused but was never in the pool", rn.InstanceID)
				}
			}
		}
		recs, err := env.Store.ByRun(context.Background(), res.RunKey)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, rec := range recs {
			got = append(got, rec.ID)
			if rec.State != store.StateRunning {
				t.Errorf("run %s: record %s", res.RunKey, servicetest.Describe(rec))
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(res.InstanceIDs()))
		if !slices.Equal(got, want) {
			t.Errorf("run %s: records %v, answer %v", res.RunKey, got, want)
		}
	}
	live := env.Audit(t)
	for id, rec := range live {
		if owner[id] != rec.RunID && rec.State != store.StateIdle {
			t.Errorf("live instance %s is not accounted for: %s", id, servicetest.Describe(rec))
		}
	}
	t.Logf("%d runs x %d runners over 2 replicas: %d reused of %d pooled, %d created", runs, each, reused, len(pooled), runs*each-reused)
}

// TestLeaseFailover: the lease holder dies without releasing its lease; the other replica takes the
// lease over once it expires and runs refresh at once.
func TestLeaseFailover(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	var mu sync.Mutex
	refreshed := map[string][]time.Time{}
	onJob := func(replica string) func(*service.Options) {
		return func(o *service.Options) {
			o.OnJob = func(job string, err error) {
				if err != nil {
					t.Errorf("replica %s: %s failed: %v", replica, job, err)
				}
				if job == service.JobRefresh {
					mu.Lock()
					refreshed[replica] = append(refreshed[replica], time.Now())
					mu.Unlock()
				}
			}
		}
	}
	ttl := 2 * time.Second
	a := env.Start(t, "a", nil, onJob("a"))
	waitFor(t, 5*time.Second, "replica a leads", a.Service.Leading)
	b := env.Start(t, "b", nil, onJob("b"))
	// b follows while a renews, for more than one lease period.
	time.Sleep(ttl + ttl/2)
	if b.Service.Leading() || !a.Service.Leading() {
		t.Fatalf("leading: a %v, b %v; want a alone", a.Service.Leading(), b.Service.Leading())
	}
	mu.Lock()
	if len(refreshed["b"]) != 0 || len(refreshed["a"]) == 0 {
		t.Errorf("refresh runs before the failover: a %d, b %d; want a's only", len(refreshed["a"]), len(refreshed["b"]))
	}
	mu.Unlock()

	killed := time.Now()
	if err := a.Kill(); err != nil {
		t.Fatalf("kill a: %v", err)
	}
	if l, err := env.Store.CurrentLease(context.Background(), "cron"); err != nil || l.Holder != "a" {
		t.Fatalf("lease after the kill: %+v %v; want still a's (a crashed holder releases nothing)", l, err)
	}
	waitFor(t, 4*ttl, "replica b refreshes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refreshed["b"]) > 0
	})
	mu.Lock()
	took := refreshed["b"][0].Sub(killed)
	mu.Unlock()
	l, err := env.Store.CurrentLease(context.Background(), "cron")
	if err != nil || l.Holder != "b" || !b.Service.Leading() {
		t.Errorf("lease after the failover: %+v %v, b leading %v; want b's", l, err, b.Service.Leading())
	}
	t.Logf("lease TTL %s: b refreshed %s after a was killed", ttl, took.Round(10*time.Millisecond))

	// A graceful stop releases the lease at once.
	if err := b.Stop(); err != nil {
		t.Fatalf("stop b: %v", err)
	}
	if l, err := env.Store.CurrentLease(context.Background(), "cron"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("lease after b stopped: %+v %v; want released", l, err)
	}
}

// TestShutdownRollsBackProvision: SIGTERM while a provision waits for created instances to
// register. After the drain timeout the provision is cancelled and rolls back through the
// unsuccessful path: the reused instance goes back to the pool, the created ones are terminated,
// the caller is told what was undone, and no instance is left without a record.
func TestShutdownRollsBackProvision(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 1)
	env.SetAgent(claimtest.Behaviour{NeverRegister: true}) // created instances never register
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_DRAIN_TIMEOUT": "500ms", "RUNNERPOOL_REGISTRATION_WAIT": "60s"})

	key := servicetest.RepositoryID + ":4001:1"
	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "4001", nil), provisionBody(3))
		done <- answer{code, body}
	}()
	// Wait until the provision holds the pooled instance and has recorded the 2 created ones.
	waitFor(t, 10*time.Second, "the provision to reach fleet validation", func() bool {
		recs, err := env.Store.ByRun(context.Background(), key)
		return err == nil && len(recs) == 3
	})
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	ans := <-done
	e := servicetest.Decode[apiv1.Error](t, ans.body)
	if ans.code != http.StatusServiceUnavailable || e.Code != apiv1.CodeUnsuccessful || e.Provision == nil || !e.Retryable {
		t.Fatalf("answer to the interrupted provision: %d %s; want 503 unsuccessful, retryable", ans.code, ans.body)
	}
	actions := map[string]string{}
	for _, u := range e.Provision.Undone {
		actions[u.InstanceID] = u.Action
	}
	if actions[pooled[0]] != "returned-to-pool" || len(actions) != 3 {
		t.Errorf("undone %v: want the pooled %s returned and 2 created terminated", actions, pooled[0])
	}
	live := env.Audit(t)
	if len(live) != 1 || live[pooled[0]].State != store.StateIdle {
		t.Errorf("live instances after the rollback: %v; want only %s, idle", live, pooled[0])
	}
	for id, action := range actions {
		if action != "terminated" {
			continue
		}
		if v, ok := env.EC2.Instance(id); !ok || (v.State != "terminated" && v.State != "shutting-down") {
			t.Errorf("created instance %s: %+v, want terminated", id, v)
		}
	}
	if _, err := env.Store.CurrentLease(context.Background(), "cron"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("lease after shutdown: %v; want released", err)
	}

	// The same run attempt asked again of another replica: provisioned anew, it succeeds (the
	// pooled instance reused again, the rest created by a new fleet).
	env.SetAgent(claimtest.Behaviour{})
	b := env.Start(t, "b", nil)
	code, body := servicetest.Call(t, http.MethodPost, b.URL+apiv1.PathProvision, env.Token(t, "4001", nil), provisionBody(3))
	if code != http.StatusOK {
		t.Fatalf("retry of the rolled-back run: %d %s", code, body)
	}
	if res := servicetest.Decode[apiv1.ProvisionResponse](t, body); res.RunKey != key || len(res.Runners) != 3 {
		t.Errorf("retry: %+v, want 3 runners for %s", res, key)
	}
	env.Audit(t)
}

// TestShutdownLetsProvisionFinish: SIGTERM during a provision that finishes within the drain
// timeout: it completes and its caller gets the runners; new provisions are refused meanwhile.
func TestShutdownLetsProvisionFinish(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	env.SetAgent(claimtest.Behaviour{Delay: 1500 * time.Millisecond}) // registration takes 1.5 s
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_DRAIN_TIMEOUT": "30s"})
	key := servicetest.RepositoryID + ":5001:1"
	done := make(chan []byte, 1)
	go func() {
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "5001", nil), provisionBody(1))
		if code != http.StatusOK {
			t.Errorf("provision: %d %s", code, body)
		}
		done <- body
	}()
	waitFor(t, 10*time.Second, "the created record", func() bool {
		recs, err := env.Store.ByRun(context.Background(), key)
		return err == nil && len(recs) == 1
	})
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop() }()
	waitFor(t, 5*time.Second, "readiness to drop", func() bool {
		code, _ := callNoFail(r.URL + apiv1.PathReady)
		return code == http.StatusServiceUnavailable || code == 0
	})
	res := servicetest.Decode[apiv1.ProvisionResponse](t, <-done)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if len(res.Runners) != 1 || res.Runners[0].Source != apiv1.SourceCreated {
		t.Errorf("provision finished with %+v, want 1 created runner", res)
	}
	if live := env.Audit(t); len(live) != 1 || live[res.Runners[0].InstanceID].State != store.StateRunning {
		t.Errorf("live after shutdown: %v", live)
	}
}

func callNoFail(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitFor polls cond until it holds or the deadline passes (then the test fails).
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
