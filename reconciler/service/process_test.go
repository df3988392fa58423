// Replicas as separate processes: the test binary runs itself as a `serve` child (config from
// RUNNERPOOL_* variables, AWS from the SDK's default chain with AWS_ENDPOINT_URL_*), as the real
// binary does. The parent kills the lease holder with SIGKILL and stops the other with SIGTERM.
package service_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// childEnv marks the test binary started as a serve process.
const childEnv = "RUNNERPOOL_SERVICETEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(serveChild())
	}
	stacktest.Main(m)
}

// serveChild is `runnerpool serve` in a child process: it prints "URL <api url>" on stdout once
// listening, and shuts down gracefully on SIGTERM.
func serveChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.Load(nil, os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	svc, err := service.New(ctx, cfg, service.Options{Logger: logging.New(os.Stderr, cfg.LogLevel)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("URL %s\n", svc.URL())
	if err := svc.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type child struct {
	name string
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(t *testing.T, env *servicetest.Env, name string, extra map[string]string) *child {
	t.Helper()
	vars := env.Env(name, extra)
	vars[childEnv] = "1"
	vars[stack.EnvDynamoDB] = env.Stack.Endpoints.DynamoDB
	vars[stack.EnvSQS] = env.Stack.Endpoints.SQS
	vars[stack.EnvEC2] = env.EC2URL
	vars["AWS_REGION"] = stack.Region
	vars["AWS_ACCESS_KEY_ID"] = stack.AccessKeyID
	vars["AWS_SECRET_ACCESS_KEY"] = stack.SecretAccessKey
	vars["AWS_EC2_METADATA_DISABLED"] = "true"
	vars["AWS_CONFIG_FILE"] = os.DevNull
	vars["AWS_SHARED_CREDENTIALS_FILE"] = os.DevNull
	vars["RUNNERPOOL_LOG_LEVEL"] = "info"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	c := &child{name: name, cmd: cmd, logs: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "URL "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, c.logs.String())
		}
	})
	select {
	case c.url = <-urls:
	case err := <-c.done:
		c.done <- err
		t.Fatalf("%s exited before listening: %v\n%s", name, err, c.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start listening\n%s", name, c.logs.String())
	}
	waitFor(t, 10*time.Second, name+" ready", func() bool {
		code, _ := callNoFail(c.url + apiv1.PathReady)
		return code == http.StatusOK
	})
	return c
}

func (c *child) ready(t *testing.T) apiv1.ReadyResponse {
	t.Helper()
	resp, err := http.Get(c.url + apiv1.PathReady)
	if err != nil {
		return apiv1.ReadyResponse{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return servicetest.Decode[apiv1.ReadyResponse](t, b)
}

// metric reads one sample line's value from /metrics ("" when absent).
func (c *child) metric(prefix string) string {
	resp, err := http.Get(c.url + apiv1.PathMetrics)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix+" "); ok {
			return v
		}
	}
	return ""
}

func TestServeProcesses(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 4)
	extra := map[string]string{"RUNNERPOOL_DRAIN_TIMEOUT": "500ms", "RUNNERPOOL_REGISTRATION_WAIT": "60s"}
	a := startChild(t, env, "proc-a", extra)
	b := startChild(t, env, "proc-b", extra)
	children := []*child{a, b}

	// Concurrent provisions of different runs over both processes.
	const runs = 6
	results := make([]apiv1.ProvisionResponse, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			run := fmt.Sprint(7001 + i)
			code, body := servicetest.Call(t, http.MethodPost, children[i%2].url+apiv1.PathProvision, env.Token(t, run, nil), provisionBody(2))
			if code != http.StatusOK {
				t.Errorf("provision of run %s: %d %s", run, code, body)
				return
			}
			results[i] = servicetest.Decode[apiv1.ProvisionResponse](t, body)
		})
	}
	wg.Wait()
	owner := map[string]string{}
	for _, res := range results {
		for _, rn := range res.Runners {
			if prev, dup := owner[rn.InstanceID]; dup {
				t.Errorf("instance %s given to two runs: %s and %s", rn.InstanceID, prev, res.RunKey)
			}
			owner[rn.InstanceID] = res.RunKey
		}
	}
	for _, id := range pooled {
		if owner[id] == "" {
			t.Logf("pooled instance %s was not reused (a pickup missed it; it stays idle)", id)
		}
	}
	env.Audit(t)

	// Kill the lease holder outright; the other takes the lease over and runs refresh.
	holder, other := a, b
	if !a.ready(t).Leader {
		holder, other = b, a
	}
	if !holder.ready(t).Leader || other.ready(t).Leader {
		t.Fatalf("leaders: %s %v, %s %v; want exactly one", a.name, a.ready(t).Leader, b.name, b.ready(t).Leader)
	}
	refreshOK := `runnerpool_cron_runs_total{job="refresh",replica="` + other.name + `",result="ok"}`
	if v := other.metric(refreshOK); v != "" {
		t.Fatalf("the follower ran refresh before the failover: %s", v)
	}
	killed := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, other.name+" to run refresh", func() bool { return other.metric(refreshOK) != "" })
	took := time.Since(killed)
	if r := other.ready(t); !r.Leader || r.Lease.Holder != other.name {
		t.Errorf("%s after the failover: %+v", other.name, r)
	}
	t.Logf("lease TTL 2s: %s ran refresh %s after %s was killed", other.name, took.Round(10*time.Millisecond), holder.name)

	// SIGTERM the survivor while a provision waits for instances that never register: it rolls
	// back, answers what it undid, and the process exits cleanly.
	env.SetAgent(claimtest.Behaviour{NeverRegister: true})
	key := servicetest.RepositoryID + ":7100:1"
	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, body := servicetest.Call(t, http.MethodPost, other.url+apiv1.PathProvision, env.Token(t, "7100", nil), provisionBody(2))
		done <- answer{code, body}
	}()
	waitFor(t, 10*time.Second, "created records", func() bool {
		recs, err := env.Store.ByRun(context.Background(), key)
		return err == nil && len(recs) == 2
	})
	if err := other.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ans := <-done
	if e := servicetest.Decode[apiv1.Error](t, ans.body); ans.code != http.StatusServiceUnavailable || e.Code != apiv1.CodeUnsuccessful || e.Provision == nil ||
		len(e.Provision.Undone) != 2 || !e.Retryable {
		t.Errorf("interrupted provision: %d %s; want 503 unsuccessful, retryable, 2 undone", ans.code, ans.body)
	}
	select {
	case err := <-other.done:
		other.done <- err
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM", other.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM", other.name)
	}
	for id, rec := range env.Audit(t) {
		if rec.RunID == key {
			t.Errorf("instance %s still belongs to the rolled-back run: %s", id, servicetest.Describe(rec))
		}
	}
	if l, err := env.Store.CurrentLease(context.Background(), "cron"); err == nil && l.Holder == other.name {
		t.Errorf("lease still held by %s after its graceful exit: %+v", other.name, l)
	} else if err != nil && !isNotFound(err) {
		t.Errorf("reading the lease: %v", err)
	}

	// The same run attempt asked again, of a new process: the rolled-back provision is
	// provisioned anew and succeeds.
	env.SetAgent(claimtest.Behaviour{})
	c := startChild(t, env, "proc-c", extra)
	code, body := servicetest.Call(t, http.MethodPost, c.url+apiv1.PathProvision, env.Token(t, "7100", nil), provisionBody(2))
	if code != http.StatusOK {
		t.Fatalf("retry of the rolled-back run: %d %s", code, body)
	}
	if res := servicetest.Decode[apiv1.ProvisionResponse](t, body); res.RunKey != key || len(res.Runners) != 2 {
		t.Errorf("retry of the rolled-back run: %+v, want 2 runners for %s", res, key)
	}
	env.Audit(t)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
