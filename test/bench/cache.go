// cache.go: the runner cache phase (internal/cache, docs/cache.md). The agent's cache server runs
// in-process against the local stack's S3 (gofakes3), as deployed: each instance's server asks a
// reconciler replica (started with --cache-bucket) for its run's scope and for every presigned URL
// (POST /v1/cache/presign, signed with the instance's key pinned in its record, the scope read from
// the run record), exactly as the agent does (agent/cache.go); the phase speaks the toolkit's protocol (Twirp lookup, signed download GET, Put Blob) and
// measures: a 1 GiB entry restored from S3 as the job sees it (the lookup through the server, then
// the GET of the S3 URL it answers) beside the emulator's own read of the same object, and the
// server's idle fill of it; 1 MiB restores' p99 beside the emulator's own p99; and the local hit
// ratio of a reuse workload (a repository's jobs following each other on the instance that ran its
// last one, the server idle between jobs).
package bench

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

const cacheVersion = "0b1c2d3e4f"

// cacheWorld is one bucket and the presigner, and the instances' servers made in it.
type cacheWorld struct {
	s3   *httptest.Server
	auth cache.Authority // the emulator's raw reads, and the objects put straight into the bucket
	dirs []string
	stop []func()

	st      *store.Store // the deployment's table: the instances' records and their runs
	control string       // the reconciler replica's URL
	n       int
}

func newCacheWorld(ctx context.Context, h *harness) (*cacheWorld, error) {
	s3h, err := stack.NewS3()
	if err != nil {
		return nil, err
	}
	w := &cacheWorld{s3: httptest.NewServer(s3h), st: h.sb.Store}
	w.auth = cache.Authority{Bucket: stack.CacheBucket, Region: stack.Region, Endpoint: w.s3.URL,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")}
	// A replica of its own with the cache on: its presigner reaches S3 where the SDK would
	// (AWS_ENDPOINT_URL_S3), this bucket.
	if err := os.Setenv("AWS_ENDPOINT_URL_S3", w.s3.URL); err != nil {
		return nil, err
	}
	if h.env == nil {
		h.env = map[string]string{}
	}
	h.env["RUNNERPOOL_CACHE_BUCKET"] = stack.CacheBucket
	svc, stop, err := h.startReplica(ctx, "bench-cache", false)
	delete(h.env, "RUNNERPOOL_CACHE_BUCKET")
	if err != nil {
		w.s3.Close()
		return nil, err
	}
	w.stop = append(w.stop, stop)
	w.control = svc.URL()
	return w, nil
}

func (w *cacheWorld) close() {
	for _, f := range w.stop {
		f()
	}
	w.s3.Close()
	for _, d := range w.dirs {
		_ = os.RemoveAll(d)
	}
}

// cacheInstance is one instance's server for a run of scope.
type cacheInstance struct {
	srv  *cache.Server
	base string
}

// instance is a new instance serving a new push run of scope's repository and ref: its record
// (with its agent's key pinned) and its run's record in the table, as a provision leaves them, and
// its server asking the replica as the agent's does.
func (w *cacheWorld) instance(scope cache.Scope) (*cacheInstance, error) {
	dir, err := os.MkdirTemp("", "bench-cache-")
	if err != nil {
		return nil, err
	}
	w.dirs = append(w.dirs, dir)
	ctx := context.Background()
	w.n++
	id, runKey := fmt.Sprintf("i-cache%012x", w.n), store.RunKey("4242", fmt.Sprintf("%d", 880000+w.n), 1)
	if _, _, err := w.st.CreateRun(ctx, store.Run{Key: runKey, RepositoryID: "4242", Repository: scope.Repository,
		RunID: fmt.Sprintf("%d", 880000+w.n), Attempt: 1, Event: "push", Ref: scope.Ref, DefaultBranch: scope.DefaultBranch, Status: "provisioned"}); err != nil {
		return nil, err
	}
	if _, err := w.st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: runKey,
		Threshold: time.Now().Add(time.Hour), RunnerClass: sandbox.RunnerClass, Scope: scope.Repository}); err != nil {
		return nil, err
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	if err := w.st.PinAgentKey(ctx, id, base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))); err != nil {
		return nil, err
	}
	control := cache.Control{URL: w.control, Instance: id, Key: key}
	var asked *cache.Scope // the agent asks once per run (agent/cache.go)
	srv, err := cache.New(cache.Config{Dir: dir,
		Scope: func(ctx context.Context) (cache.Scope, error) {
			if asked != nil {
				return *asked, nil
			}
			s, err := control.Scope(ctx, runKey)
			if err == nil {
				asked = &s
			}
			return s, err
		},
		Presign: func(ctx context.Context, r cache.Request) (string, error) {
			return control.Presign(ctx, runKey, r)
		}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	w.stop = append(w.stop, func() { cancel(); <-done })
	return &cacheInstance{srv: srv, base: "http://" + ln.Addr().String()}, nil
}

func (in *cacheInstance) twirp(ctx context.Context, method string, req, resp any) error {
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, in.base+"/twirp/github.actions.results.api.v1.CacheService/"+method, bytes.NewReader(b))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(hr)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", method, r.Status)
	}
	return json.NewDecoder(r.Body).Decode(resp)
}

// save saves body under key the way the toolkit does for an entry up to 128 MiB (one Put Blob).
func (in *cacheInstance) save(ctx context.Context, key string, body []byte) error {
	var created struct {
		OK  bool   `json:"ok"`
		URL string `json:"signed_upload_url"`
	}
	if err := in.twirp(ctx, "CreateCacheEntry", map[string]any{"key": key, "version": cacheVersion}, &created); err != nil || !created.OK {
		return fmt.Errorf("reserving %s: %v", key, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, created.URL, bytes.NewReader(body))
	req.Header.Set("x-ms-blob-type", "BlockBlob")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	r.Body.Close()
	var fin struct {
		OK bool `json:"ok"`
	}
	if err := in.twirp(ctx, "FinalizeCacheEntryUpload", map[string]any{"key": key, "version": cacheVersion, "size_bytes": fmt.Sprint(len(body))}, &fin); err != nil || !fin.OK {
		return fmt.Errorf("finalizing %s: %v", key, err)
	}
	return nil
}

// restore looks key up and reads the entry; it returns the bytes read (0 on a miss).
func (in *cacheInstance) restore(ctx context.Context, key string, restoreKeys ...string) (int64, error) {
	n, _, err := in.restoreMatched(ctx, key, restoreKeys...)
	return n, err
}

// restoreMatched is restore that also returns the key matched.
func (in *cacheInstance) restoreMatched(ctx context.Context, key string, restoreKeys ...string) (int64, string, error) {
	url, matched, err := in.lookup(ctx, key, restoreKeys...)
	if err != nil || url == "" {
		return 0, "", err
	}
	n, err := getAll(ctx, url)
	return n, matched, err
}

// lookup asks for key's download URL ("" on a miss) and the key matched.
func (in *cacheInstance) lookup(ctx context.Context, key string, restoreKeys ...string) (string, string, error) {
	var got struct {
		OK      bool   `json:"ok"`
		URL     string `json:"signed_download_url"`
		Matched string `json:"matched_key"`
	}
	if err := in.twirp(ctx, "GetCacheEntryDownloadURL", map[string]any{"key": key, "restore_keys": restoreKeys, "version": cacheVersion}, &got); err != nil || !got.OK {
		return "", "", err
	}
	return got.URL, got.Matched, nil
}

// restoreTimed is restore that also returns how long the lookup took (the rest is the download).
func (in *cacheInstance) restoreTimed(ctx context.Context, key string) (int64, time.Duration, error) {
	began := time.Now()
	url, _, err := in.lookup(ctx, key)
	if err != nil || url == "" {
		return 0, 0, fmt.Errorf("lookup of %s: %q, %v", key, url, err)
	}
	lookup := time.Since(began)
	n, err := getAll(ctx, url)
	return n, lookup, err
}

func getAll(ctx context.Context, url string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET: %s", r.Status)
	}
	return io.Copy(io.Discard, r.Body)
}

// putDirect writes object into the bucket through a presigned put (what an instance's save does).
func (w *cacheWorld) putDirect(ctx context.Context, scope cache.Scope, object string, body io.Reader, size int64) error {
	url, err := w.auth.Presign(ctx, scope, cache.Request{Op: cache.OpPut, Object: object, Size: size})
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, body)
	req.ContentLength = size
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	r.Body.Close()
	if r.StatusCode/100 != 2 {
		return fmt.Errorf("put: %s", r.Status)
	}
	return nil
}

var benchCacheScope = cache.Scope{Repository: "acme/app", Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Trusted: true}

func phaseCache(ctx context.Context, h *harness, res *Result) error {
	w, err := newCacheWorld(ctx, h)
	if err != nil {
		return err
	}
	defer w.close()
	if err := cacheLarge(ctx, h, res, w); err != nil {
		return err
	}
	if err := cacheSmall(ctx, res, w); err != nil {
		return err
	}
	return cacheReuse(ctx, h, res, w)
}

// cacheLarge: one 1 GiB entry, read straight from the emulator, then restored through a fresh
// instance's server (an empty disk: the lookup answers S3's URL and the client reads S3), then
// filled into that server's disk while it is idle.
func cacheLarge(ctx context.Context, h *harness, res *Result, w *cacheWorld) error {
	const size = 1 << 30
	object, _ := cache.ObjectKey(benchCacheScope.WritePrefix(), "large", cacheVersion)
	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	body := io.LimitReader(repeatReader(chunk), size)
	if err := w.putDirect(ctx, benchCacheScope, object, body, size); err != nil {
		return fmt.Errorf("cache: putting 1 GiB: %w", err)
	}
	url, err := w.auth.Presign(ctx, benchCacheScope, cache.Request{Op: cache.OpGet, Object: object})
	if err != nil {
		return err
	}
	// Each read's CPU (the whole process: emulator, servers and client are all in it) beside its
	// MB/s: on a machine shared with other work, MB/s follows the load, CPU per GiB much less. The
	// emulator's read and the restore alternate, three of each (each restore on a fresh instance),
	// and each figure is the median of its three: one read of a GiB takes under a second here, so
	// a single pair is at the mercy of whatever else the machine does in that second.
	const rounds = 3
	var raws, rawCPUs, throughs, throughCPUs, lookups []float64
	var in *cacheInstance
	for range rounds {
		began, cpu := time.Now(), processCPU()
		n, err := getAll(ctx, url)
		if err != nil || n != size {
			return fmt.Errorf("cache: raw read: %d bytes: %v", n, err)
		}
		raws = append(raws, float64(size)/(1<<20)/time.Since(began).Seconds())
		rawCPUs = append(rawCPUs, (processCPU() - cpu).Seconds())
		if in, err = w.instance(benchCacheScope); err != nil {
			return err
		}
		began, cpu = time.Now(), processCPU()
		n, lookup, err := in.restoreTimed(ctx, "large")
		if err != nil || n != size {
			return fmt.Errorf("cache: restore through the server: %d bytes: %v", n, err)
		}
		throughs = append(throughs, float64(size)/(1<<20)/time.Since(began).Seconds())
		throughCPUs = append(throughCPUs, (processCPU() - cpu).Seconds())
		lookups = append(lookups, ms(lookup))
	}
	raw, rawCPU, through, throughCPU := mid(raws), mid(rawCPUs), mid(throughs), mid(throughCPUs)
	h.say("  1 GiB, %d rounds: emulator %.0f MB/s, restored as the job sees it (lookup, then the GET straight from S3) %.0f MB/s, lookups %.0f ms",
		rounds, raws, throughs, lookups)
	// The job is done: the agent says no run is served and the server fills its disk with the URL
	// it handed out (internal/cache/fill.go).
	began, cpu := time.Now(), processCPU()
	<-in.srv.Idle()
	fill, fillCPU := float64(size)/(1<<20)/time.Since(began).Seconds(), (processCPU() - cpu).Seconds()
	in.srv.Busy() // the next job
	if url, _, err := in.lookup(ctx, "large"); err != nil || !strings.HasPrefix(url, in.base+"/download/") {
		return fmt.Errorf("cache: after the idle fill the 1 GiB entry is not on the disk: %q, %v", url, err)
	}
	h.say("  1 GiB: emulator %.0f MB/s (CPU %.2f s), restored as the job sees it %.0f MB/s (CPU %.2f s); ratio %.2f; the idle fill %.0f MB/s (CPU %.2f s)",
		raw, rawCPU, through, throughCPU, through/raw, fill, fillCPU)
	res.add(Figure{Name: "cache_s3_emulator_read_mb_s_1gib", Value: raw, Unit: "MiB/s",
		How: "one GET of a 1 GiB object from the local stack's S3 (gofakes3, in memory) with a presigned URL, read to the end; the median of 3, alternating with cache_restore_mb_s_1gib's"})
	res.add(Figure{Name: "cache_restore_mb_s_1gib", Value: through, Unit: "MiB/s",
		How: "the same 1 GiB entry restored as the job sees it on a fresh instance: the Twirp lookup through the agent's cache server (an S3 listing and the GET presigned by the replica), then the GET of the URL it answers, S3's own presigned URL (the bytes come straight from S3; the server's local copy is made when the instance is idle, cache_fill_mb_s_1gib); the median of 3, each on a fresh instance; goal ≥ 0.8 × cache_s3_emulator_read_mb_s_1gib"})
	res.add(Figure{Name: "cache_fill_mb_s_1gib", Value: fill, Unit: "MiB/s",
		How: "the same server, once the job is done (Idle, as the agent says between runs), reading that 1 GiB entry into its local store with the URL it handed out; after it the entry's lookup is a local hit"})
	res.add(Figure{Name: "cache_s3_emulator_cpu_s_1gib", Value: rawCPU, Unit: "s",
		How: "CPU (user + system, the whole bench process: emulator and client) of cache_s3_emulator_read_mb_s_1gib's read; robust to the machine's load where MB/s is not"})
	res.add(Figure{Name: "cache_restore_cpu_s_1gib", Value: throughCPU, Unit: "s",
		How: "CPU of cache_restore_mb_s_1gib's restore (emulator, the lookup through the agent's server and the replica, client)"})
	res.add(Figure{Name: "cache_fill_cpu_s_1gib", Value: fillCPU, Unit: "s",
		How: "CPU of cache_fill_mb_s_1gib's fill (emulator, the server writing its local copy), spent while no job runs"})
	return nil
}

func repeatReader(chunk []byte) io.Reader {
	return readerFunc(func(p []byte) (int, error) { return copy(p, chunk), nil })
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// cacheSmall: 100 entries of 1 MiB, each restored once through a fresh disk (from S3), beside the
// emulator's own GETs of the same objects.
func cacheSmall(ctx context.Context, res *Result, w *cacheWorld) error {
	const n, size = 100, 1 << 20
	body := make([]byte, size)
	_, _ = rand.Read(body)
	for i := range n {
		object, _ := cache.ObjectKey(benchCacheScope.WritePrefix(), fmt.Sprintf("small-%03d", i), cacheVersion)
		if err := w.putDirect(ctx, benchCacheScope, object, bytes.NewReader(body), size); err != nil {
			return err
		}
	}
	var raw, through []float64
	in, err := w.instance(benchCacheScope)
	if err != nil {
		return err
	}
	for i := range n {
		key := fmt.Sprintf("small-%03d", i)
		object, _ := cache.ObjectKey(benchCacheScope.WritePrefix(), key, cacheVersion)
		url, err := w.auth.Presign(ctx, benchCacheScope, cache.Request{Op: cache.OpGet, Object: object})
		if err != nil {
			return err
		}
		began := time.Now()
		if _, err := getAll(ctx, url); err != nil {
			return err
		}
		raw = append(raw, ms(time.Since(began)))
		began = time.Now()
		if got, err := in.restore(ctx, key); err != nil || got != size {
			return fmt.Errorf("cache: small restore %s: %d bytes: %v", key, got, err)
		}
		through = append(through, ms(time.Since(began)))
	}
	slices.Sort(raw)
	slices.Sort(through)
	res.add(Figure{Name: "cache_s3_emulator_p99_ms_small", Value: Percentile(raw, 99), Unit: "ms",
		How: fmt.Sprintf("%d presigned GETs of 1 MiB objects from the local stack's S3, 99th percentile", n)})
	res.add(Figure{Name: "cache_restore_p99_ms_small", Value: Percentile(through, 99), Unit: "ms",
		How: fmt.Sprintf("%d restores of distinct 1 MiB entries through one instance's cache server, none on its disk (the lookup with an S3 listing and the GET presigned, then the download straight from S3), 99th percentile; goal ≤ cache_s3_emulator_p99_ms_small + 50", n)})
	return nil
}

// reuseGap is the idle time modelled between one job's end and the next job's start on a reused
// instance: 2 s, shorter than any real one. runnerpool simulate's model gives a hot instance 2 s
// from its claim to a ready runner (bench/report.md, autoscale rows), and before the claim the
// previous job's release (the runner stopped and removed, the signed release signal) runs too.
// A fill not done by then is stopped as the agent stops it when the next job starts.
const reuseGap = 2 * time.Second

// cacheReuse: 6 repositories on 4 instances; each repository runs bursts of 5 consecutive jobs
// (the order reuse serves: its next job goes to the instance that ran its last one, if idle); each job
// restores its dependency key with a restore-key prefix and saves when it missed the exact key; the
// lock file changes every 12th job of a repository. The ratio is the restores answered from the
// instance's disk over all restores that hit.
func cacheReuse(ctx context.Context, h *harness, res *Result, w *cacheWorld) error {
	const repos, instances, bursts, burst = 6, 4, 24, 5
	rng := mrand.New(mrand.NewPCG(35, 1))
	type inst struct {
		last string
		used int
		srv  map[string]*cacheInstance // one server per instance and repository run scope
		dir  string
	}
	// An instance's disk is modelled as one server directory per repository it served: the local
	// store keeps each repository's entries under its own prefix, so nothing is shared between them.
	pool := make([]*inst, instances)
	for i := range pool {
		pool[i] = &inst{srv: map[string]*cacheInstance{}}
	}
	jobs := map[string]int{}
	var local, hits, misses, cut int64
	for b := range bursts {
		repo := fmt.Sprintf("acme/repo-%d", rng.IntN(repos))
		// Reuse: the instance that ran this repository last, else the least recently used one.
		pick := slices.IndexFunc(pool, func(p *inst) bool { return p.last == repo })
		if pick < 0 {
			pick = 0
			for i, p := range pool {
				if p.used < pool[pick].used {
					pick = i
				}
			}
		}
		p := pool[pick]
		p.last, p.used = repo, b+1
		scope := cache.Scope{Repository: repo, Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Trusted: true}
		in := p.srv[repo]
		if in == nil {
			var err error
			if in, err = w.instance(scope); err != nil {
				return err
			}
			p.srv[repo] = in
		}
		for range burst {
			jobs[repo]++
			key := fmt.Sprintf("deps-%d", jobs[repo]/12)
			before := in.srv.Stats()
			n, matched, err := in.restoreMatched(ctx, key, "deps-")
			if err != nil {
				return err
			}
			if n > 0 {
				hits++
				local += in.srv.Stats().LocalHits - before.LocalHits
			} else {
				misses++
			}
			if matched != key {
				// Missed the exact key (a miss, or a restore key's fallback): the job saves its own.
				if err := in.save(ctx, key, bytes.Repeat([]byte{byte(jobs[repo])}, 64<<10)); err != nil {
					return err
				}
			}
			// The job is done: the agent says no run is served (serving("")), and the server
			// fills its disk with what the job read from S3 until the next job starts (Busy).
			done := in.srv.Idle()
			select {
			case <-done:
			case <-time.After(reuseGap):
				cut++
			}
			in.srv.Busy()
		}
	}
	ratio := float64(local) / math.Max(float64(hits), 1)
	h.say("  reuse: %d of %d hits from the disk, %d misses; idle fills cut short by the next job after %s: %d", local, hits, misses, reuseGap, cut)
	res.add(Figure{Name: "cache_local_hit_ratio", Value: ratio, Unit: "ratio",
		How: fmt.Sprintf("%d bursts of %d jobs over %d repositories on %d instances, each repository's next burst on the instance that ran its last when idle (reuse), else the least recently used; between two jobs the instance's server is idle for at most %s and fills its disk with what the job read from S3 (fills cut short by the next job: %d): restores answered from the instance's disk over restores that hit (%d of %d; %d misses); goal ≥ 0.9", bursts, burst, repos, instances, reuseGap, cut, local, hits, misses)})
	return nil
}

// mid is the median of xs.
func mid(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Percentile(s, 50)
}
