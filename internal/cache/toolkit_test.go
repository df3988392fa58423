// toolkit_test.go: the published @actions/cache toolkit (npm, installed in test/stack/node by
// make deps) saves and restores through the agent's server, against the local stack's S3 (gofakes3)
// with URLs presigned by the control plane's Authority for the scope of each "instance"'s run.
package cache_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/test/cachetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// world is one deployment: an S3 bucket and the control plane's presigner.
type world struct {
	s3         *httptest.Server
	s3Requests atomic.Int64
	mu         sync.Mutex
	s3Seen     []s3Request
	auth       cache.Authority
	tk         *cachetest.Toolkit
}

func newWorld(t *testing.T) *world {
	t.Helper()
	tk := cachetest.New(t)
	h, err := stack.NewS3()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{tk: tk}
	w.s3 = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.s3Requests.Add(1)
		w.mu.Lock()
		w.s3Seen = append(w.s3Seen, s3Request{method: r.Method, path: r.URL.Path, agent: r.UserAgent(),
			signed: r.URL.Query().Get("X-Amz-Signature") != ""})
		w.mu.Unlock()
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(w.s3.Close)
	w.auth = cache.Authority{Bucket: stack.CacheBucket, Region: stack.Region, Endpoint: w.s3.URL,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")}
	return w
}

// s3Request is what the bucket saw of one request.
type s3Request struct {
	method, path, agent string
	signed              bool
}

func (w *world) seen() []s3Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.s3Seen)
}

// instance is one runner instance: its agent's cache server, serving the run the control plane
// recorded for it (scope).
type instance struct {
	srv   *cache.Server
	url   string
	scope atomic.Pointer[cache.Scope]
	now   atomic.Pointer[time.Time]
	stop  context.CancelFunc
	dir   string
}

func (w *world) instance(t *testing.T, scope cache.Scope, tweak ...func(*cache.Config)) *instance {
	t.Helper()
	in := &instance{}
	in.scope.Store(&scope)
	start := time.Now()
	in.now.Store(&start)
	in.dir = t.TempDir()
	cfg := cache.Config{
		Dir:   in.dir,
		Scope: func(context.Context) (cache.Scope, error) { return *in.scope.Load(), nil },
		Presign: func(ctx context.Context, req cache.Request) (string, error) {
			return w.auth.Presign(ctx, *in.scope.Load(), req)
		},
		Now: func() time.Time { return *in.now.Load() },
	}
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := cache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	in.stop = func() { cancel(); <-done }
	t.Cleanup(in.stop)
	in.srv, in.url = srv, "http://"+ln.Addr().String()
	return in
}

func (in *instance) advance(d time.Duration) {
	next := in.now.Load().Add(d)
	in.now.Store(&next)
}

// run runs the toolkit script in workspace against the instance's server, as a node action step
// would with the runner's environment pointed at it. It returns the script's result and its output.
func (w *world) run(t *testing.T, in *instance, workspace string, args ...string) (string, string) {
	t.Helper()
	return w.tk.Run(t, in.url, workspace, nil, args...)
}

func (w *world) command(t *testing.T, base, workspace string, args ...string) *exec.Cmd {
	t.Helper()
	return w.tk.Command(t, base, workspace, nil, args...)
}

var (
	result    = cachetest.Result
	workspace = cachetest.Workspace
)

func (w *world) save(t *testing.T, in *instance, key string, size int) []byte {
	t.Helper()
	ws, b := workspace(t, size)
	if res, out := w.run(t, in, ws, "save", key, "data"); res == "-1" || res == "" {
		t.Fatalf("save %s: result %q\n%s", key, res, out)
	}
	return b
}

// restore restores in a fresh workspace and returns the matched key ("" on a miss) and the bytes.
func (w *world) restore(t *testing.T, in *instance, key string, restoreKeys ...string) (string, []byte, string) {
	t.Helper()
	ws := t.TempDir()
	res, out := w.run(t, in, ws, append([]string{"restore", "data", key}, restoreKeys...)...)
	b, _ := os.ReadFile(filepath.Join(ws, "data", "blob"))
	return res, b, out
}

var (
	mainRun = cache.Scope{Repository: "acme/app", Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Trusted: true}
	prRun   = cache.Scope{Repository: "acme/app", Ref: "refs/pull/7/merge", BaseRef: "refs/heads/release",
		DefaultBranch: "refs/heads/main", Trusted: false}
	otherRepo = cache.Scope{Repository: "acme/other", Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Trusted: true}
)

func TestToolkitExactKeyAndRestoreKeys(t *testing.T) {
	w := newWorld(t)
	a := w.instance(t, mainRun)
	want := w.save(t, a, "deps-linux-abc", 64<<10)

	b := w.instance(t, mainRun) // another instance: its disk is empty, S3 has the entry
	got, data, out := w.restore(t, b, "deps-linux-abc")
	if got != "deps-linux-abc" || !bytes.Equal(data, want) {
		t.Fatalf("exact restore on another instance: key %q, %d bytes (want %d)\n%s", got, len(data), len(want), out)
	}
	if st := b.srv.Stats(); st.RemoteHits != 1 {
		t.Errorf("stats %+v: want one hit from S3", st)
	}

	got, data, out = w.restore(t, b, "deps-linux-zzz", "deps-linux-", "deps-")
	if got != "deps-linux-abc" || !bytes.Equal(data, want) {
		t.Fatalf("restore-key prefix match: key %q\n%s", got, out)
	}
	if got, _, _ := w.restore(t, b, "nothing-like-it", "other-"); got != "" {
		t.Fatalf("unmatched keys restored %q", got)
	}
}

func TestToolkitLocalHitNeverTouchesS3(t *testing.T) {
	w := newWorld(t)
	a := w.instance(t, mainRun)
	want := w.save(t, a, "build-1", 32<<10)
	before := w.s3Requests.Load()
	got, data, out := w.restore(t, a, "build-1")
	if got != "build-1" || !bytes.Equal(data, want) {
		t.Fatalf("local restore: %q\n%s", got, out)
	}
	if n := w.s3Requests.Load() - before; n != 0 {
		t.Fatalf("a restore served from the instance's disk made %d S3 requests", n)
	}
	if st := a.srv.Stats(); st.LocalHits != 1 || st.RemoteHits != 0 {
		t.Fatalf("stats %+v: want one local hit", st)
	}
}

// TestToolkitMissReadsS3DirectlyThenFillsWhenIdle: an entry only S3 holds is answered with S3's
// presigned URL for that one object of the run's scope, which the toolkit restores byte for byte;
// the server keeps no copy on the job's path. Once it is idle (no job runs), it fills its disk with
// that URL, and the next restore is a local hit that makes no S3 request. Fails on the code before:
// the lookup answered with the server's own URL and the server proxied S3's bytes.
func TestToolkitMissReadsS3DirectlyThenFillsWhenIdle(t *testing.T) {
	w := newWorld(t)
	want := w.save(t, w.instance(t, mainRun), "deps-direct", 512<<10)
	b := w.instance(t, mainRun) // a fresh instance: its disk is empty

	from := len(w.seen())
	got, data, out := w.restore(t, b, "deps-direct")
	if got != "deps-direct" || !bytes.Equal(data, want) {
		t.Fatalf("restore from S3's URL: %q, %d bytes (want %d)\n%s", got, len(data), len(want), out)
	}
	// The toolkit itself (its http-client's user agent) read the object from S3 with a URL the
	// control plane presigned for the run's scope.
	var direct []string
	for _, r := range w.seen()[from:] {
		if r.method == http.MethodGet && r.agent == "actions/cache" {
			direct = append(direct, r.path)
			if !r.signed || !strings.HasPrefix(r.path, "/"+stack.CacheBucket+"/"+mainRun.WritePrefix()) {
				t.Errorf("the toolkit's S3 GET %s: signed %v, want a presigned GET under %s", r.path, r.signed, mainRun.WritePrefix())
			}
		}
	}
	if len(direct) != 1 {
		t.Fatalf("the toolkit's own GETs of S3: %q, want the entry's one", direct)
	}
	if st := b.srv.Stats(); st.RemoteHits != 1 || st.LocalHits != 0 || st.BytesServed == 0 {
		t.Fatalf("stats %+v: want one hit from S3", st)
	}
	if n := len(dirFiles(t, b)); n != 0 {
		t.Fatalf("the server kept %d files on the job's path", n)
	}

	<-b.srv.Idle() // no job runs: the server fills its disk
	b.srv.Busy()   // the next job
	before := w.s3Requests.Load()
	got, data, out = w.restore(t, b, "deps-direct")
	if got != "deps-direct" || !bytes.Equal(data, want) {
		t.Fatalf("restore after the idle fill: %q, %d bytes\n%s", got, len(data), out)
	}
	if n := w.s3Requests.Load() - before; n != 0 {
		t.Fatalf("the restore after the idle fill made %d S3 requests", n)
	}
	if st := b.srv.Stats(); st.LocalHits != 1 || st.RemoteHits != 1 {
		t.Fatalf("stats %+v: want the restore after the fill from the disk", st)
	}
}

// dirFiles lists the entries kept in in's store.
func dirFiles(t *testing.T, in *instance) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(in.dir, "objects", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestToolkitScopes(t *testing.T) {
	w := newWorld(t)
	mainInst := w.instance(t, mainRun)
	mainData := w.save(t, mainInst, "deps-main", 16<<10)
	release := w.instance(t, cache.Scope{Repository: "acme/app", Ref: "refs/heads/release", DefaultBranch: "refs/heads/main", Trusted: true})
	releaseData := w.save(t, release, "deps-release", 16<<10)

	pr := w.instance(t, prRun)
	if got, data, out := w.restore(t, pr, "deps-main"); got != "deps-main" || !bytes.Equal(data, mainData) {
		t.Errorf("a pull request does not read the default branch: %q\n%s", got, out)
	}
	if got, data, out := w.restore(t, pr, "deps-release"); got != "deps-release" || !bytes.Equal(data, releaseData) {
		t.Errorf("a pull request does not read its base branch: %q\n%s", got, out)
	}
	w.save(t, pr, "deps-pr", 16<<10)
	if got, _, _ := w.restore(t, pr, "deps-pr"); got != "deps-pr" {
		t.Errorf("a pull request does not read its own save")
	}
	for _, in := range []*instance{w.instance(t, mainRun), w.instance(t, *release.scope.Load())} {
		if got, _, out := w.restore(t, in, "deps-pr", "deps-"); got == "deps-pr" {
			t.Errorf("a base branch's run read the pull request's save\n%s", out)
		}
	}
	// A trusted run of the pull request's own ref (a pull_request_target, say) does not read what
	// the untrusted run wrote there either.
	trustedPR := prRun
	trustedPR.Trusted = true
	if got, _, _ := w.restore(t, w.instance(t, trustedPR), "deps-pr"); got != "" {
		t.Errorf("a trusted run read an untrusted run's save on the same ref: %q", got)
	}
	// A sibling branch never reads another branch's saves (only its own and the default branch's).
	sibling := w.instance(t, cache.Scope{Repository: "acme/app", Ref: "refs/heads/feature", DefaultBranch: "refs/heads/main", Trusted: true})
	if got, _, _ := w.restore(t, sibling, "deps-release"); got != "" {
		t.Errorf("a sibling branch read release's save: %q", got)
	}
	// Any branch reads the default branch's saves; the default branch never reads a branch's.
	feature := w.instance(t, cache.Scope{Repository: "acme/app", Ref: "refs/heads/feature", DefaultBranch: "refs/heads/main", Trusted: true})
	if got, data, out := w.restore(t, feature, "deps-main"); got != "deps-main" || !bytes.Equal(data, mainData) {
		t.Errorf("a branch does not read the default branch: %q\n%s", got, out)
	}
	w.save(t, feature, "deps-feature", 16<<10)
	if got, _, _ := w.restore(t, w.instance(t, mainRun), "deps-feature", "deps-f"); got != "" {
		t.Errorf("the default branch read a branch's save: %q", got)
	}
	// A run whose event nobody vouched for (a webhook's pool job: head_branch, no event) on
	// "main" reads main's trusted saves, but what it saves only its own run reads: a fork's pull
	// request from its own "main" poisons no other run of main.
	unvouched := cache.Scope{Repository: "acme/app", Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Run: "9001"}
	u1 := w.instance(t, unvouched)
	if got, _, out := w.restore(t, u1, "deps-main"); got != "deps-main" {
		t.Errorf("an unvouched run of main does not read main's trusted save: %q\n%s", got, out)
	}
	w.save(t, u1, "deps-unvouched", 16<<10)
	if got, _, _ := w.restore(t, w.instance(t, unvouched), "deps-unvouched"); got != "deps-unvouched" {
		t.Errorf("the unvouched run does not read its own save on another instance: %q", got)
	}
	otherRun := unvouched
	otherRun.Run = "9002"
	for _, sc := range []cache.Scope{otherRun, mainRun} {
		if got, _, _ := w.restore(t, w.instance(t, sc), "deps-unvouched", "deps-u"); got != "" {
			t.Errorf("run %q (trusted %v) read an unvouched run's save: %q", sc.Run, sc.Trusted, got)
		}
	}
	// Another repository reads nothing of acme/app, even with the exact key.
	other := w.instance(t, otherRepo)
	if got, _, _ := w.restore(t, other, "deps-main", "deps-"); got != "" {
		t.Errorf("another repository read acme/app's cache: %q", got)
	}
}

// TestToolkitLocalStoreKeepsTheClassLimit: the agent's own disk keeps to the limits of the run's
// class, which come with the scope from the control plane: with a 100 KiB repository limit, a
// second 64 KiB save evicts the first from the disk (its next restore comes from S3), and the
// second is still served from the disk. Fails on the code before: the disk kept 10 GiB whatever
// the class said, and both restores were local.
func TestToolkitLocalStoreKeepsTheClassLimit(t *testing.T) {
	w := newWorld(t)
	small := mainRun
	small.RepositoryLimit = 100 << 10
	in := w.instance(t, small)
	first := w.save(t, in, "deps-1", 64<<10)
	w.save(t, in, "deps-2", 64<<10)
	before := in.srv.Stats()
	if got, _, _ := w.restore(t, in, "deps-2"); got != "deps-2" {
		t.Fatalf("restore of the kept entry: %q", got)
	}
	if st := in.srv.Stats(); st.LocalHits-before.LocalHits != 1 {
		t.Fatalf("stats %+v (before %+v): want the kept entry from the disk", st, before)
	}
	before = in.srv.Stats()
	if got, data, out := w.restore(t, in, "deps-1"); got != "deps-1" || !bytes.Equal(data, first) {
		t.Fatalf("restore of the evicted entry: %q\n%s", got, out)
	}
	if st := in.srv.Stats(); st.RemoteHits-before.RemoteHits != 1 || st.LocalHits != before.LocalHits {
		t.Fatalf("stats %+v (before %+v): want the evicted entry from S3", st, before)
	}
}

func TestToolkitConcurrentSavesOfOneKey(t *testing.T) {
	w := newWorld(t)
	a := w.instance(t, mainRun)
	var wg sync.WaitGroup
	blobs := make([][]byte, 3)
	for i := range blobs {
		ws, b := workspace(t, 256<<10)
		blobs[i] = b
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := w.command(t, a.url, ws, "save", "same-key", "data").CombinedOutput()
			if err != nil {
				t.Errorf("concurrent save %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	got, data, out := w.restore(t, w.instance(t, mainRun), "same-key")
	if got != "same-key" {
		t.Fatalf("no entry after concurrent saves\n%s", out)
	}
	matches := 0
	for _, b := range blobs {
		if bytes.Equal(b, data) {
			matches++
		}
	}
	if matches != 1 {
		t.Fatalf("the restored entry is none of the saved ones whole (%d bytes)", len(data))
	}
}

func TestToolkitOversizeUploadRefused(t *testing.T) {
	w := newWorld(t)
	a := w.instance(t, mainRun, func(c *cache.Config) { c.MaxEntry = 256 << 10 })
	ws, _ := workspace(t, 1<<20) // random: the archive stays above 1 MiB
	res, out := w.run(t, a, ws, "save", "too-big", "data")
	if res != "-1" || !strings.Contains(out, "::warning::") {
		t.Fatalf("an oversize save: result %q, want -1 with a warning\n%s", res, out)
	}
	if got, _, _ := w.restore(t, w.instance(t, mainRun), "too-big"); got != "" {
		t.Fatalf("an oversize save was stored")
	}
}

func TestToolkitLargeEntryInBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("a 150 MiB entry")
	}
	w := newWorld(t)
	a := w.instance(t, mainRun)
	// Above the toolkit's 128 MiB single-shot size, so the Azure SDK stages 64 MiB blocks and
	// commits a block list.
	want := w.save(t, a, "large", 150<<20)
	got, data, out := w.restore(t, w.instance(t, mainRun), "large")
	if got != "large" || !bytes.Equal(data, want) {
		t.Fatalf("large entry: %q, %d bytes\n%s", got, len(data), out)
	}
}

func TestToolkitKilledUpload(t *testing.T) {
	w := newWorld(t)
	put, killed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := w.instance(t, mainRun)
	// A proxy in front of the instance's server that holds the first upload request, so the test can
	// kill the toolkit while it uploads.
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			once.Do(func() { close(put) })
			select {
			case <-r.Context().Done():
			case <-killed:
			}
			return
		}
		target, _ := url.Parse(a.url)
		r.URL.Scheme, r.URL.Host, r.RequestURI = target.Scheme, target.Host, ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		// The upload URL names the instance's server; send the upload through the proxy too.
		fixed := bytes.ReplaceAll(body.Bytes(), []byte(a.url), []byte("http://"+r.Host))
		rw.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		rw.WriteHeader(resp.StatusCode)
		_, _ = rw.Write(fixed)
	}))
	defer proxy.Close()
	ws, _ := workspace(t, 1<<20)
	cmd := w.command(t, proxy.URL, ws, "save", "killed", "data")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	<-put
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	close(killed)
	if got, _, _ := w.restore(t, w.instance(t, mainRun), "killed"); got != "" {
		t.Fatalf("a killed upload left an entry")
	}
	// The reservation outlives the killed job only until it expires; then the key saves again.
	a.advance(11 * time.Minute)
	want := w.save(t, a, "killed", 8<<10)
	if got, data, _ := w.restore(t, w.instance(t, mainRun), "killed"); got != "killed" || !bytes.Equal(data, want) {
		t.Fatalf("the key does not save after a killed upload: %q", got)
	}
}

func TestToolkitServiceStoppedWarnsNeverFails(t *testing.T) {
	w := newWorld(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there: the agent's server is stopped
	ws, _ := workspace(t, 4<<10)
	// The toolkit reports a failed reservation as a notice ("Failed to save: Unable to reserve
	// cache", cache.ts saveCacheV2) and a failed lookup as a warning; neither fails the step.
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"save", "k", "data"}, "Failed to save"},
		{[]string{"restore", "data", "k"}, "::warning::Failed to restore"},
	} {
		out, err := w.command(t, base, ws, tt.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v with the service stopped failed the step: %v\n%s", tt.args[0], err, out)
		}
		if !strings.Contains(string(out), tt.says) || result(t, out) == "k" {
			t.Fatalf("%v with the service stopped: want %q\n%s", tt.args[0], tt.says, out)
		}
	}
}

func TestAuthorityRefusesOutsideScope(t *testing.T) {
	auth := cache.Authority{Bucket: "b", Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("a", "s", "")}
	mainObject, err := cache.ObjectKey(mainRun.WritePrefix(), "k", "0a1b")
	if err != nil {
		t.Fatal(err)
	}
	prObject, _ := cache.ObjectKey(prRun.WritePrefix(), "k", "0a1b")
	limited := mainRun
	limited.RepositoryLimit = 1 << 30 // a class with repository_limit_gib = 1
	tests := []struct {
		name  string
		scope cache.Scope
		req   cache.Request
		ok    bool
	}{
		{"own write", mainRun, cache.Request{Op: cache.OpPut, Object: mainObject, Size: 10}, true},
		{"own read", mainRun, cache.Request{Op: cache.OpGet, Object: mainObject}, true},
		{"pull request reads default branch", prRun, cache.Request{Op: cache.OpGet, Object: mainObject}, true},
		{"pull request writes default branch", prRun, cache.Request{Op: cache.OpPut, Object: mainObject, Size: 10}, false},
		{"default branch reads pull request", mainRun, cache.Request{Op: cache.OpGet, Object: prObject}, false},
		{"another repository reads", otherRepo, cache.Request{Op: cache.OpGet, Object: mainObject}, false},
		{"another repository lists", otherRepo, cache.Request{Op: cache.OpList, Object: "v1/"}, false},
		{"forged scope: a prefix with ..", mainRun, cache.Request{Op: cache.OpGet, Object: mainRun.WritePrefix() + "../../acme~2Fother/x"}, false},
		{"oversize put", mainRun, cache.Request{Op: cache.OpPut, Object: mainObject, Size: 11 << 30}, false},
		{"a put within the class's repository limit", limited, cache.Request{Op: cache.OpPut, Object: mainObject, Size: 1 << 30}, true},
		{"a put alone over the class's repository limit", limited, cache.Request{Op: cache.OpPut, Object: mainObject, Size: 1<<30 + 1}, false},
		{"empty scope", cache.Scope{}, cache.Request{Op: cache.OpGet, Object: mainObject}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.Presign(t.Context(), tt.scope, tt.req)
			if tt.ok != (err == nil) {
				t.Fatalf("presign: %v, want ok %v", err, tt.ok)
			}
			if !tt.ok && !errors.Is(err, cache.ErrDenied) {
				t.Fatalf("presign refused with %v, want ErrDenied", err)
			}
		})
	}
}

func TestObjectKeyConfinesTraversal(t *testing.T) {
	for _, key := range []string{"../../etc/passwd", "a/../../b", "..", "%2e%2e/x", "k\x00y"} {
		obj, err := cache.ObjectKey(mainRun.WritePrefix(), key, "0a1b")
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if !strings.HasPrefix(obj, mainRun.WritePrefix()) || strings.Contains(obj, "..") ||
			strings.Count(obj, "/") != strings.Count(mainRun.WritePrefix(), "/")+1 {
			t.Fatalf("%q: object %q leaves its prefix", key, obj)
		}
		if back, ok := cache.KeyOf(obj); !ok || back != key {
			t.Fatalf("%q: decodes to %q", key, back)
		}
	}
}

func TestToolkitPathTraversalKey(t *testing.T) {
	w := newWorld(t)
	a := w.instance(t, mainRun)
	want := w.save(t, a, "../../../acme/other/x", 8<<10)
	if got, data, _ := w.restore(t, w.instance(t, mainRun), "../../../acme/other/x"); got == "" || !bytes.Equal(data, want) {
		t.Fatalf("a key with .. does not round-trip in its own scope: %q", got)
	}
	if got, _, _ := w.restore(t, w.instance(t, otherRepo), "x", "../", "x"); got != "" {
		t.Fatalf("another repository read the traversal key: %q", got)
	}
}

func TestLocalEvictionLeastRecentlyUsedAndAge(t *testing.T) {
	w := newWorld(t)
	// Local only (no presigner): what the disk keeps is all a restore can find.
	a := w.instance(t, mainRun, func(c *cache.Config) { c.Presign, c.RepoLimit, c.MaxAge = nil, 200<<10, 48*time.Hour })
	w.save(t, a, "one", 80<<10)
	a.advance(time.Minute)
	w.save(t, a, "two", 80<<10)
	a.advance(time.Minute)
	if got, _, _ := w.restore(t, a, "one"); got != "one" { // "one" is now the most recently used
		t.Fatalf("before the limit: %q", got)
	}
	a.advance(time.Minute)
	w.save(t, a, "three", 80<<10) // 240 KiB > 200 KiB: the least recently used ("two") goes
	for key, kept := range map[string]bool{"one": true, "two": false, "three": true} {
		if got, _, _ := w.restore(t, a, key); (got == key) != kept {
			t.Errorf("after the limit, %s restored %q, want kept %v", key, got, kept)
		}
	}
	a.advance(72 * time.Hour)
	w.save(t, a, "four", 8<<10) // a commit evicts what went unused past MaxAge
	for key, kept := range map[string]bool{"one": false, "three": false, "four": true} {
		if got, _, _ := w.restore(t, a, key); (got == key) != kept {
			t.Errorf("after MaxAge, %s restored %q, want kept %v", key, got, kept)
		}
	}
}

// TestAuthorityGetLastsAnHour: a GET's URL lasts an hour, long enough for the agent's server to fill
// its disk with it once the job is done (fill.go); puts and listings keep 5 minutes.
func TestAuthorityGetLastsAnHour(t *testing.T) {
	auth := cache.Authority{Bucket: "b", Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("a", "s", "")}
	object, _ := cache.ObjectKey(mainRun.WritePrefix(), "k", "0a1b")
	for _, tc := range []struct {
		req  cache.Request
		want string
	}{
		{cache.Request{Op: cache.OpGet, Object: object}, "3600"},
		{cache.Request{Op: cache.OpPut, Object: object, Size: 1}, "300"},
		{cache.Request{Op: cache.OpList, Object: mainRun.WritePrefix()}, "300"},
	} {
		raw, err := auth.Presign(t.Context(), mainRun, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(raw)
		if got := u.Query().Get("X-Amz-Expires"); got != tc.want {
			t.Errorf("%s: X-Amz-Expires %s, want %s", tc.req.Op, got, tc.want)
		}
	}
}
