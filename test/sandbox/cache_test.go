// cache_test.go: the runner cache end to end (docs/cache.md). Real agents start their cache server
// (the class has the cache on), the published @actions/cache toolkit (npm, test/stack/node) runs as
// a node action would with the runner's environment (agent.CacheEnv: NODE_OPTIONS naming the
// preload), every S3 request is presigned by the reconciler's API (POST /v1/cache/presign) for the
// run the control plane recorded, against the stack's S3 emulator (gofakes3). And the attack rows:
// a job that reached the agent's server or the endpoint cannot reach another repository's cache.
package sandbox_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/cachebucket"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/cachetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// cacheWorld is a deployment with the runner cache: the S3 emulator, the reconciler's API serving
// the presign endpoint over the sandbox's store, GitHub's results service (a fake that counts what
// reaches it and has no cache), and agents with the cache on.
type cacheWorld struct {
	sb        *sandbox.Sandbox
	cp        *sandbox.Components
	root      string
	s3        *httptest.Server
	control   *httptest.Server
	gh        string       // GitHub's results service as the job message names it
	upstream  atomic.Int64 // requests GitHub's results service received
	metrics   *metrics.Metrics
	authority cache.Authority
	tk        *cachetest.Toolkit

	mu       sync.Mutex
	reports  map[string][]string // release signal details by instance
	requests map[string]int      // presigned requests by "repository kind" (api.Options.CacheRequests)
}

func (w *cacheWorld) Count(repository, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.requests[repository+" "+kind]++
}

// noCallers refuses every workflow call: this test speaks only to the cache endpoint.
type noCallers struct{}

func (noCallers) Authenticate(*http.Request) (auth.Identity, error) {
	return auth.Identity{}, &auth.Error{Status: http.StatusUnauthorized, Code: "missing_token", Msg: "no workflow calls in this test"}
}

func newCacheWorld(t *testing.T) *cacheWorld {
	t.Helper()
	w := &cacheWorld{root: t.TempDir(), tk: cachetest.New(t), reports: map[string][]string{}, requests: map[string]int{}}
	h, err := stack.NewS3()
	if err != nil {
		t.Fatal(err)
	}
	w.s3 = httptest.NewServer(h)
	t.Cleanup(w.s3.Close)
	w.authority = cache.Authority{Bucket: stack.CacheBucket, Region: stack.Region, Endpoint: w.s3.URL, MaxEntry: 8 << 20,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")}
	// GitHub's results service as the job was given it: no entry, every save refused, so a job
	// that fell back to it restores nothing and saves nothing, and exits 0.
	gh := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.upstream.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"ok":false}`))
	}))
	t.Cleanup(gh.Close)
	w.gh = gh.URL
	var handler atomic.Value
	w.control = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		handler.Load().(http.Handler).ServeHTTP(rw, r)
	}))
	t.Cleanup(w.control.Close)
	w.sb = start(t, sandbox.Options{Root: w.root, Cache: &agent.CacheOptions{ControlPlane: w.control.URL, Upstream: gh.URL + "/"}})
	w.cp = w.sb.Components(sandbox.ComponentOptions{OnReleased: func(id, detail string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.reports[id] = append(w.reports[id], detail)
	}})
	w.metrics = metrics.New(metrics.Options{})
	a, err := api.New(api.Options{Provisioner: w.cp.Provisioner, Releaser: w.cp.Releaser, Runs: w.cp.Provisioner,
		Store: w.sb.Store, Auth: noCallers{}, Metrics: w.metrics, Cache: &w.authority, CacheRequests: w,
		CacheUses: &cachebucket.Uses{Bucket: stack.CacheBucket, S3: s3.New(s3.Options{Region: stack.Region, BaseEndpoint: aws.String(w.s3.URL),
			UsePathStyle: true, Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")})},
		DefaultBranches: w.sb.GitHub, CacheLimits: func(string) (int64, time.Duration) { return cacheRepositoryLimit, 0 }})
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(a.Handler(false))
	return w
}

// cacheRepositoryLimit is the class's repository_limit_gib in the cache world: below the
// deployment's entry limit (8 MiB), so a put between the two is refused by the class's limit alone.
const cacheRepositoryLimit = 4 << 20

// provision provisions one runner for a push run of repository acme/app on ref, and runs a job on
// it so its agent serves the run (the runner started); it returns the run key and the instance.
func (w *cacheWorld) provision(t *testing.T, ref string) (provision.Result, string) {
	t.Helper()
	req := request(newRun())
	req.Event, req.Ref = "push", ref
	res, err := w.cp.Provisioner.Provision(t.Context(), req)
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	runJob(t, w.sb, res.Label)
	id := res.Runners[0].InstanceID
	ready, _ := agenttest.CachePaths(w.root, id)
	waitFor(t, "the cache server's ready file", 10*time.Second, func() bool { _, err := os.Stat(ready); return err == nil })
	return res, id
}

// toolkit runs @actions/cache in workspace as a node action step on instance id would: with the
// runner's environment (agent.CacheEnv) and GitHub's results URL from the job message.
func (w *cacheWorld) toolkit(t *testing.T, id, workspace string, args ...string) (string, string) {
	t.Helper()
	ready, preload := agenttest.CachePaths(w.root, id)
	return w.tk.Run(t, w.gh, workspace, agent.CacheEnv(agent.CacheOptions{ReadyFile: ready, PreloadPath: preload}), args...)
}

var cacheWorkspace = cachetest.Workspace

// objects lists the bucket's keys under prefix (the emulator does not check signatures), without
// the use markers unless prefix is theirs.
func (w *cacheWorld) objects(t *testing.T, prefix string) []string {
	t.Helper()
	resp, err := http.Get(w.s3.URL + "/" + stack.CacheBucket + "?list-type=2&prefix=" + url.QueryEscape(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		Contents []struct{ Key string } `xml:"Contents"`
	}
	if err := xml.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range res.Contents {
		if strings.HasPrefix(c.Key, cachebucket.UsePrefix) && !strings.HasPrefix(prefix, cachebucket.UsePrefix) {
			continue // a restore's use marker (cachebucket.Uses), not an entry
		}
		out = append(out, c.Key)
	}
	return out
}

func (w *cacheWorld) report(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.reports[id]...)
}

// counter reads a counter of the API's registry.
func (w *cacheWorld) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := w.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestCacheThroughTheAgent: a job's save and restore go through its instance's agent, presigned by
// the control plane for the run it recorded; the agent reports the run's local hits at release;
// and with the control plane stopped the next run's cache steps go to GitHub's cache and pass.
func TestCacheThroughTheAgent(t *testing.T) {
	t.Parallel()
	w := newCacheWorld(t)
	res, id := w.provision(t, "refs/heads/main")
	scope := cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "")

	ws, want := cacheWorkspace(t, 256<<10)
	if got, out := w.toolkit(t, id, ws, "save", "deps-linux-1", "data"); got == "" || got == "-1" {
		t.Fatalf("save through the agent: result %q\n%s", got, out)
	}
	objs := w.objects(t, scope.WritePrefix())
	if len(objs) != 1 {
		t.Fatalf("bucket under the run's write prefix %s: %v, want the one entry", scope.WritePrefix(), objs)
	}
	ws2 := t.TempDir()
	got, out := w.toolkit(t, id, ws2, "restore", "data", "deps-linux-2", "deps-linux-")
	if b, _ := os.ReadFile(filepath.Join(ws2, "data", "blob")); got != "deps-linux-1" || !bytes.Equal(b, want) {
		t.Fatalf("restore through the agent: matched %q, %d bytes\n%s", got, len(b), out)
	}
	// That restore came from the instance's disk, with no S3 request; the agent told the control
	// plane (op use), which recorded it as a use of the entry in the bucket (cachebucket.Uses).
	waitFor(t, "the local restore's use marker", 10*time.Second, func() bool {
		return slices.Equal(w.objects(t, cachebucket.UsePrefix), []string{cachebucket.UseMarker(objs[0])})
	})
	if n := w.upstream.Load(); n != 0 {
		t.Errorf("GitHub's results service got %d requests while the agent's cache served", n)
	}
	if n := w.counter(t, "runnerpool_cache_presign_requests_total", map[string]string{"kind": "put", "outcome": "ok"}); n != 1 {
		t.Errorf("presigned puts = %v, want 1", n)
	}
	w.mu.Lock()
	if n := w.requests[sandbox.Scope+" put"]; n != 1 {
		t.Errorf("puts counted for the cost report = %d, want 1 (%v)", n, w.requests)
	}
	w.mu.Unlock()

	if rep, err := w.cp.Releaser.Release(t.Context(), res.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release: %+v, %v", rep, err)
	}
	reports := w.report(id)
	if len(reports) != 1 {
		t.Fatalf("release reports of %s: %q, want one", id, reports)
	}
	st, ok := cache.ParseReport(reports[0])
	if !ok || st.BytesSaved == 0 || st.LocalHits+st.RemoteHits != 1 {
		t.Fatalf("the agent's report %q (%+v): want the run's save and its one hit", reports[0], st)
	}

	// The control plane stops answering: the next run on the instance gets GitHub's cache.
	w.control.Close()
	_, id2 := w.provision(t, "refs/heads/main")
	if id2 != id {
		t.Logf("the second run got %s, not the reused %s", id2, id)
	}
	ws3 := t.TempDir()
	if got, out := w.toolkit(t, id2, ws3, "restore", "data", "deps-linux-1"); got != "" {
		t.Fatalf("with the control plane stopped: restored %q, want GitHub's cache's miss\n%s", got, out)
	}
	if w.upstream.Load() == 0 {
		t.Fatal("with the control plane stopped, nothing reached GitHub's cache")
	}
}

// TestCacheReadsTheDefaultBranch: a provisioned run's record has no default branch (the OIDC
// token carries none), so the control plane asks GitHub for the repository's (the fake answers
// GET /repos/{owner}/{repo} with default_branch "main", as GitHub does). A feature branch's run
// then restores what the default branch's run saved, and never the reverse. Fails on the code
// before: the feature branch's scope had no default branch and restored nothing.
func TestCacheReadsTheDefaultBranch(t *testing.T) {
	t.Parallel()
	w := newCacheWorld(t)
	_, mainID := w.provision(t, "refs/heads/main")
	_, featureID := w.provision(t, "refs/heads/feature")

	ws, want := cacheWorkspace(t, 64<<10)
	if got, out := w.toolkit(t, mainID, ws, "save", "deps-main", "data"); got == "" || got == "-1" {
		t.Fatalf("save on main: %q\n%s", got, out)
	}
	ws2 := t.TempDir()
	got, out := w.toolkit(t, featureID, ws2, "restore", "data", "deps-main")
	if b, _ := os.ReadFile(filepath.Join(ws2, "data", "blob")); got != "deps-main" || !bytes.Equal(b, want) {
		t.Fatalf("a feature branch's run restored %q (%d bytes), want the default branch's deps-main\n%s", got, len(b), out)
	}
	// That restore came from the bucket: the control plane recorded it as a use of main's entry
	// (cachebucket.Uses), which the eviction pass counts as its last use.
	mainEntries := w.objects(t, cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "").WritePrefix())
	if len(mainEntries) != 1 {
		t.Fatalf("main's entries: %q", mainEntries)
	}
	waitFor(t, "the restore's use marker", 10*time.Second, func() bool {
		return slices.Equal(w.objects(t, cachebucket.UsePrefix), []string{cachebucket.UseMarker(mainEntries[0])})
	})
	ws3, _ := cacheWorkspace(t, 16<<10)
	if got, out := w.toolkit(t, featureID, ws3, "save", "deps-feature", "data"); got == "" || got == "-1" {
		t.Fatalf("save on feature: %q\n%s", got, out)
	}
	if got, out := w.toolkit(t, mainID, t.TempDir(), "restore", "data", "deps-feature", "deps-f"); got != "" {
		t.Fatalf("the default branch's run restored a feature branch's %q\n%s", got, out)
	}
}

// TestCompromisedJobCannotReachAnotherCache: the cache rows of the attack harness. A job that
// reached its instance's agent (or, worse, the agent's key: the rows sign with it) asks the control
// plane for what its run's scope does not cover; every row must be refused, and a job's own request
// without the key is refused too. The positive row shows the refusals are not a broken setup.
func TestCompromisedJobCannotReachAnotherCache(t *testing.T) {
	t.Parallel()
	w := newCacheWorld(t)
	res, id := w.provision(t, "refs/heads/feature")
	seed, err := os.ReadFile(filepath.Join(agenttest.InstanceDirs(w.root, id).State, "signing.key"))
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("the agent's key: %v", err)
	}
	agentKey := ed25519.NewKeyFromSeed(seed)
	_, jobKey, _ := ed25519.GenerateKey(rand.Reader)
	own := cache.ScopeOf(sandbox.Scope, "push", "refs/heads/feature", "", "")
	other := cache.ScopeOf(otherRepo, "push", "refs/heads/main", "", "main")
	ownObject, _ := cache.ObjectKey(own.WritePrefix(), "deps", "abc")
	otherObject, _ := cache.ObjectKey(other.WritePrefix(), "deps", "abc")
	// The repository's default branch (GitHub's answer: main) is readable, not writable; a
	// sibling branch is neither.
	defaultObject, _ := cache.ObjectKey(cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "").WritePrefix(), "deps", "abc")
	siblingObject, _ := cache.ObjectKey(cache.ScopeOf(sandbox.Scope, "push", "refs/heads/release", "", "").WritePrefix(), "deps", "abc")

	for _, row := range []struct {
		name   string
		key    ed25519.PrivateKey
		run    string
		op     cache.Op
		object string
		size   int64
		ok     bool
	}{
		{"own entry (control)", agentKey, res.RunKey, cache.OpPut, ownObject, 1 << 20, true},
		{"the default branch's entry (control)", agentKey, res.RunKey, cache.OpGet, defaultObject, 0, true},
		{"another repository's key", agentKey, res.RunKey, cache.OpGet, otherObject, 0, false},
		{"a write to the default branch", agentKey, res.RunKey, cache.OpPut, defaultObject, 1 << 10, false},
		{"a sibling branch's entry", agentKey, res.RunKey, cache.OpGet, siblingObject, 0, false},
		{"a use of its own entry (control)", agentKey, res.RunKey, cache.OpUse, ownObject, 0, true},
		{"a use of another repository's entry", agentKey, res.RunKey, cache.OpUse, otherObject, 0, false},
		{"another repository's listing", agentKey, res.RunKey, cache.OpList, other.WritePrefix(), 0, false},
		{"another repository's write", agentKey, res.RunKey, cache.OpPut, otherObject, 1 << 10, false},
		{"forged scope: the job's own key", jobKey, res.RunKey, cache.OpGet, ownObject, 0, false},
		{"forged scope: another run", agentKey, "9999:1:1", cache.OpGet, otherObject, 0, false},
		{"path traversal in a key", agentKey, res.RunKey, cache.OpGet, own.WritePrefix() + "abc/k~2E~2E/../../../" + other.WritePrefix() + "abc/kdeps", 0, false},
		{"oversize upload", agentKey, res.RunKey, cache.OpPut, ownObject, w.authority.MaxEntry + 1, false},
		{"an upload alone over the class's repository limit", agentKey, res.RunKey, cache.OpPut, ownObject, cacheRepositoryLimit + 1, false},
	} {
		t.Run(row.name, func(t *testing.T) {
			c := cache.Control{URL: w.control.URL, Instance: id, Key: row.key}
			_, err := c.Presign(t.Context(), row.run, cache.Request{Op: row.op, Object: row.object, Size: row.size})
			switch {
			case row.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !row.ok && !errors.Is(err, cache.ErrDenied):
				t.Fatalf("err = %v, want a refusal", err)
			}
		})
	}

	t.Run("pool jobs", func(t *testing.T) { poolJobRows(t, w) })

	// Through the agent's server, a traversal in a key stays in the run's own prefix.
	ws, _ := cacheWorkspace(t, 4<<10)
	if got, out := w.toolkit(t, id, ws, "save", "../../../"+otherRepo+"/refs/heads/main/x", "data"); got == "" || got == "-1" {
		t.Fatalf("save of a traversing key: %q\n%s", got, out)
	}
	if objs := w.objects(t, "v1/"); len(objs) != 1 || !strings.HasPrefix(objs[0], own.WritePrefix()) {
		t.Fatalf("bucket after a traversing key: %v, want one object under %s", objs, own.WritePrefix())
	}
	// An oversize upload through the agent: the step passes, and the control plane presigns no put
	// over the deployment's entry limit, so the bucket holds nothing of it.
	big, _ := cacheWorkspace(t, int(w.authority.MaxEntry)+(1<<20))
	w.toolkit(t, id, big, "save", "too-big", "data")
	if objs := w.objects(t, "v1/"); len(objs) != 1 {
		t.Fatalf("bucket after an oversize save: %v, want only the earlier object", objs)
	}
	// Another repository's key, restored through the agent: nothing.
	if got, out := w.toolkit(t, id, t.TempDir(), "restore", "data", "deps"); got != "" {
		t.Fatalf("restore of a key no run of the scope saved: %q\n%s", got, out)
	}
}

// poolJobRows: the attack rows of pool jobs' runs. A pool job's instance serves the run
// "job:<key>", whose job's ledger record holds what GitHub said of it: a webhook's head_branch and
// repository.default_branch (no event: untrusted), or a scale set message's event and the ref of its
// jobWorkflowRef. The presign reads that record (warmpool.LedgerKey). The allowed rows fail on the
// code before: it read a run record "job:<key>", which nothing writes, and refused every pool job's
// request (they went to GitHub's cache). The refused rows: an unvouched run's write where its
// branch's runs read, another job's run, a job whose source named no ref.
func poolJobRows(t *testing.T, w *cacheWorld) {
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	instance := func(id, runKey string) {
		t.Helper()
		if _, err := w.sb.Store.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: runKey}); err != nil {
			t.Fatal(err)
		}
		if err := w.sb.Store.PinAgentKey(ctx, id, base64.StdEncoding.EncodeToString(pub)); err != nil {
			t.Fatal(err)
		}
	}
	ledger := func(runKey string, r store.Run) {
		t.Helper()
		k, ok := warmpool.LedgerKey(runKey)
		if !ok {
			t.Fatalf("%s is not a pool job's run", runKey)
		}
		r.Key, r.Repository, r.Status = k, sandbox.Scope, warmpool.JobServed
		if _, _, err := w.sb.Store.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	object := func(s cache.Scope) string { o, _ := cache.ObjectKey(s.WritePrefix(), "deps", "abc"); return o }
	trustedMain := cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "main")
	sharedUntrustedMain := "v1/acme~2Fapp/untrusted/refs~2Fheads~2Fmain/abc/kdeps"

	// A webhook's job: head_branch main, default_branch main, no event.
	instance("i-0aaaaaaaaaaaaaaa1", warmpool.JobRunID(501))
	ledger(warmpool.JobRunID(501), store.Run{RunID: "9001", Attempt: 1, Ref: "refs/heads/main", DefaultBranch: "refs/heads/main"})
	// A scale set's job: event push, ref from jobWorkflowRef, no default branch (looked up).
	instance("i-0aaaaaaaaaaaaaaa2", warmpool.JobRunID(502))
	ledger(warmpool.JobRunID(502), store.Run{RunID: "9002", Attempt: 1, Event: "push", Ref: "refs/heads/feature"})
	// A job whose source said no ref: no scope.
	instance("i-0aaaaaaaaaaaaaaa3", warmpool.JobRunID(503))
	ledger(warmpool.JobRunID(503), store.Run{RunID: "9003", Attempt: 1})

	webhookScope := cache.Scope{Repository: sandbox.Scope, Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Run: "9001", RepositoryLimit: cacheRepositoryLimit}
	for _, row := range []struct {
		name     string
		instance string
		run      string
		op       cache.Op
		object   string
		ok       bool
	}{
		{"webhook job: main's trusted entry", "i-0aaaaaaaaaaaaaaa1", warmpool.JobRunID(501), cache.OpGet, object(trustedMain), true},
		{"webhook job: a save under its own run", "i-0aaaaaaaaaaaaaaa1", warmpool.JobRunID(501), cache.OpPut, object(webhookScope), true},
		{"webhook job: a save where main's runs read", "i-0aaaaaaaaaaaaaaa1", warmpool.JobRunID(501), cache.OpPut, object(trustedMain), false},
		{"webhook job: a save where main's unvouched runs read", "i-0aaaaaaaaaaaaaaa1", warmpool.JobRunID(501), cache.OpPut, sharedUntrustedMain, false},
		{"scale set job: a save on its ref", "i-0aaaaaaaaaaaaaaa2", warmpool.JobRunID(502), cache.OpPut,
			object(cache.ScopeOf(sandbox.Scope, "push", "refs/heads/feature", "", "")), true},
		{"scale set job: the default branch GitHub names", "i-0aaaaaaaaaaaaaaa2", warmpool.JobRunID(502), cache.OpGet, object(trustedMain), true},
		{"scale set job: another job's run", "i-0aaaaaaaaaaaaaaa2", warmpool.JobRunID(501), cache.OpGet, object(trustedMain), false},
		{"a job whose source named no ref", "i-0aaaaaaaaaaaaaaa3", warmpool.JobRunID(503), cache.OpGet, object(trustedMain), false},
	} {
		t.Run(row.name, func(t *testing.T) {
			c := cache.Control{URL: w.control.URL, Instance: row.instance, Key: key}
			_, err := c.Presign(ctx, row.run, cache.Request{Op: row.op, Object: row.object, Size: 1 << 10})
			switch {
			case row.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !row.ok && !errors.Is(err, cache.ErrDenied):
				t.Fatalf("err = %v, want a refusal", err)
			}
		})
	}
	c := cache.Control{URL: w.control.URL, Instance: "i-0aaaaaaaaaaaaaaa1", Key: key}
	if s, err := c.Scope(ctx, warmpool.JobRunID(501)); err != nil || s != webhookScope {
		t.Fatalf("the webhook job's scope: %+v, %v; want %+v", s, err, webhookScope)
	}
}

// TestRestoreFromS3KeptAfterTheHandBack: an entry another instance saved is restored on instance A
// straight from S3 (the job reads the presigned URL; nothing on A's disk while the job runs); once
// A's run is released and its record hands A back to the pool, A's agent fills its disk with the
// entry; the next run on A restores it from the disk. The local-first promise of docs/cache.md
// ("Restores from S3, and the idle fill") on real agents.
func TestRestoreFromS3KeptAfterTheHandBack(t *testing.T) {
	t.Parallel()
	w := newCacheWorld(t)
	resA, a := w.provision(t, "refs/heads/main")
	_, b := w.provision(t, "refs/heads/main")
	if a == b {
		t.Fatalf("two runs at once on one instance %s", a)
	}
	ws, want := cacheWorkspace(t, 256<<10)
	if got, out := w.toolkit(t, b, ws, "save", "deps-s3-1", "data"); got == "" || got == "-1" {
		t.Fatalf("save on %s: result %q\n%s", b, got, out)
	}
	scope := cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "")
	objs := w.objects(t, scope.WritePrefix())
	if len(objs) != 1 {
		t.Fatalf("bucket: %v, want the one entry", objs)
	}
	ws2 := t.TempDir()
	if got, out := w.toolkit(t, a, ws2, "restore", "data", "deps-s3-1"); got != "deps-s3-1" {
		t.Fatalf("restore on %s: %q\n%s", a, got, out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws2, "data", "blob")); !bytes.Equal(b, want) {
		t.Fatalf("restored %d bytes, want %d", len(b), len(want))
	}
	if kept := localIndex(t, w.root, a); strings.Contains(kept, objs[0]) {
		t.Fatalf("A's disk holds the entry while its job runs: %s", kept)
	}
	if rep, err := w.cp.Releaser.Release(t.Context(), resA.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release: %+v, %v", rep, err)
	}
	waitFor(t, "A's disk filled with the entry after its hand-back", 20*time.Second, func() bool {
		return strings.Contains(localIndex(t, w.root, a), objs[0])
	})
	if st, ok := cache.ParseReport(w.report(a)[0]); !ok || st.RemoteHits != 1 || st.LocalHits != 0 {
		t.Fatalf("A's first run: %+v, want its one hit from S3", st)
	}
	resA2, a2 := w.provision(t, "refs/heads/main") // B still runs: the pool's one idle instance is A
	if a2 != a {
		t.Fatalf("the next run got %s, not the handed-back %s", a2, a)
	}
	ws3 := t.TempDir()
	if got, out := w.toolkit(t, a, ws3, "restore", "data", "deps-s3-1"); got != "deps-s3-1" {
		t.Fatalf("restore on %s after the fill: %q\n%s", a, got, out)
	}
	if rep, err := w.cp.Releaser.Release(t.Context(), resA2.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release: %+v, %v", rep, err)
	}
	reports := w.report(a)
	if len(reports) != 2 {
		t.Fatalf("release reports of %s: %q, want two", a, reports)
	}
	if st, ok := cache.ParseReport(reports[1]); !ok || st.LocalHits != 1 || st.RemoteHits != 0 {
		t.Fatalf("A's second run: %+v, want its one hit from the disk", st)
	}
}

// localIndex is the index of the agent's local cache store on instance id ("" when none yet).
func localIndex(t *testing.T, root, id string) string {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(root, id, "*", "cache", "index.json"))
	more, _ := filepath.Glob(filepath.Join(root, id, "cache", "index.json"))
	var out string
	for _, f := range append(found, more...) {
		b, _ := os.ReadFile(f)
		out += string(b)
	}
	return out
}
