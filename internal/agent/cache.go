// cache.go: the runner cache on the instance (docs/cache.md). When the runner class enables it,
// the agent serves GitHub's cache protocol on the loopback (package cache) for the run its runner
// serves, asks the control plane for the run's scope and for presigned S3 URLs (signed with the
// agent's key, which the control plane pinned), installs the node preload that points the
// runner's node actions at the server while it serves, and reports the server's counters for each
// run in its signed release signal (cache.Report). The runner's environment carries the preload
// (CacheEnv): NODE_OPTIONS, which a workflow cannot change (the runner blocks it in GITHUB_ENV).
//
// Whatever fails here fails open to GitHub's cache, never the job: a server that cannot start
// writes no ready file, so the preload leaves GitHub's URL; a control plane that does not answer
// within seconds makes the server forward the request to GitHub's results service.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

// Where the cache's files are on an instance.
const (
	// DefaultPreloadPath is the node preload the runner's NODE_OPTIONS names: root-owned,
	// readable by the runner user.
	DefaultPreloadPath = "/opt/runnerpool/cache-preload.cjs"
	// DefaultResultsURL is GitHub's results service on github.com (ACTIONS_RESULTS_URL): where the
	// server forwards what it does not serve (artifacts; a run without a scope). It is the agent's
	// configuration, never a URL a job gives: the agent (root) reaches the instance metadata
	// service, and must not forward a job's request wherever the job says.
	DefaultResultsURL = "https://results-receiver.actions.githubusercontent.com/"
)

// CacheOptions turn on the runner cache.
type CacheOptions struct {
	// ControlPlane is the reconciler's base URL, where the server asks for scopes and presigned
	// URLs (cache.PathPresign). Required.
	ControlPlane string
	// Dir is the local store; StateDir/cache (root-only) when empty.
	Dir string
	// ReadyFile is the file the preload reads; cache.DefaultReadyFile when empty.
	ReadyFile string
	// PreloadPath is where the preload is installed; DefaultPreloadPath when empty.
	PreloadPath string
	// Upstream is GitHub's results service; DefaultResultsURL when empty.
	Upstream string
	// Listen is the server's loopback address; 127.0.0.1:0 (any free port) when empty.
	Listen string
	// HTTP is the client for the control plane and S3; default a client whose control-plane
	// calls time out after 5 s (cache.Control).
	HTTP *http.Client
}

// CacheEnv is what the runner's environment needs for the preload: NODE_OPTIONS naming it and
// the ready file's path. agentcmd adds it to the runner driver's environment.
func CacheEnv(o CacheOptions) []string {
	o = o.withDefaults("")
	return []string{"NODE_OPTIONS=--require " + o.PreloadPath, "RUNNERPOOL_CACHE_READY=" + o.ReadyFile}
}

func (o CacheOptions) withDefaults(stateDir string) CacheOptions {
	if o.Dir == "" && stateDir != "" {
		o.Dir = filepath.Join(stateDir, "cache")
	}
	if o.ReadyFile == "" {
		o.ReadyFile = cache.DefaultReadyFile
	}
	if o.PreloadPath == "" {
		o.PreloadPath = DefaultPreloadPath
	}
	if o.Upstream == "" {
		o.Upstream = DefaultResultsURL
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	return o
}

// runCache is the agent's cache server and what it needs from the main loop.
type runCache struct {
	srv     *cache.Server
	control cache.Control
	run     atomic.Value // string: the run the runner serves now ("" between runs)
	filling atomic.Bool  // handed back: the fill of this gap was started (handedBack)

	mu     sync.Mutex
	scopes map[string]cache.Scope // by run: asked once per run
	// reported is the server's counters at the last release report (touched by the main loop only).
	reported cache.Stats
}

// startCache installs the preload and starts the server; on any failure it logs and returns nil:
// the runner then uses GitHub's cache (no ready file).
func (a *agent) startCache(ctx context.Context) *runCache {
	o := a.cfg.Cache.withDefaults(a.cfg.StateDir)
	rc, err := a.newCache(o)
	if err != nil {
		a.log.Warn("agent: cache server not started; jobs use GitHub's cache", "err", err)
		return nil
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		a.log.Warn("agent: cache server not started; jobs use GitHub's cache", "err", err)
		return nil
	}
	go func() {
		if err := rc.srv.Serve(ctx, ln); err != nil {
			a.log.Warn("agent: cache server stopped; jobs use GitHub's cache", "err", err)
		}
	}()
	a.log.Info("agent: cache server started", "addr", ln.Addr().String(), "control_plane", o.ControlPlane)
	return rc
}

func (a *agent) newCache(o CacheOptions) (*runCache, error) {
	if o.ControlPlane == "" {
		return nil, errors.New("no control plane URL")
	}
	up, err := url.Parse(o.Upstream)
	if err != nil || (up.Scheme != "https" && up.Scheme != "http") || up.Host == "" {
		return nil, fmt.Errorf("upstream %q: want an http(s) URL", o.Upstream)
	}
	if err := os.MkdirAll(filepath.Dir(o.PreloadPath), 0o755); err != nil {
		return nil, fmt.Errorf("installing the preload: %w", err)
	}
	tmp := o.PreloadPath + ".tmp"
	if err := os.WriteFile(tmp, cache.Preload, 0o644); err != nil {
		return nil, fmt.Errorf("installing the preload: %w", err)
	}
	if err := os.Rename(tmp, o.PreloadPath); err != nil {
		return nil, fmt.Errorf("installing the preload: %w", err)
	}
	rc := &runCache{control: cache.Control{URL: o.ControlPlane, Instance: a.id, Key: a.key, Now: a.cfg.Now}, scopes: map[string]cache.Scope{}}
	rc.run.Store("")
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{}
		rc.control.HTTP = &http.Client{Timeout: 5 * time.Second}
	} else {
		rc.control.HTTP = hc
	}
	srv, err := cache.New(cache.Config{
		Dir: o.Dir, ReadyFile: o.ReadyFile, Upstream: up, HTTP: hc, Logger: a.log, Now: a.cfg.Now,
		Scope: rc.scope,
		Presign: func(ctx context.Context, req cache.Request) (string, error) {
			return rc.control.Presign(ctx, rc.run.Load().(string), req)
		},
	})
	if err != nil {
		return nil, err
	}
	rc.srv = srv
	return rc, nil
}

// scope is the current run's scope, asked of the control plane once per run.
func (rc *runCache) scope(ctx context.Context) (cache.Scope, error) {
	run := rc.run.Load().(string)
	if run == "" {
		return cache.Scope{}, errors.New("the runner serves no run")
	}
	rc.mu.Lock()
	s, ok := rc.scopes[run]
	rc.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := rc.control.Scope(ctx, run)
	if err != nil {
		return cache.Scope{}, err
	}
	rc.mu.Lock()
	rc.scopes = map[string]cache.Scope{run: s} // only the current run's
	rc.mu.Unlock()
	return s, nil
}

// serving tells the server which run the runner serves ("" none). A new run stops a fill that
// runs before its first request (Busy waits for it), so the job never shares the instance with one.
func (rc *runCache) serving(run string) {
	if rc == nil {
		return
	}
	if run != "" {
		rc.srv.Busy()
		rc.filling.Store(false)
	}
	rc.run.Store(run)
}

// handedBack tells the server that the instance is back in its pool, waiting for its next run: it
// fills its disk with the entries its jobs read straight from S3 (cache.Server.Idle), for the next
// job of the repository here. Not before: an instance whose record ends it after its job (not
// reused, or terminating) never fills, which would only read S3 again for a disk about to go. Once
// per hand-back; the next run's serving stops it.
func (rc *runCache) handedBack() {
	if rc == nil {
		return
	}
	if run, _ := rc.run.Load().(string); run != "" || !rc.filling.CompareAndSwap(false, true) {
		return
	}
	rc.srv.Idle()
}

// report is the release signal's detail: the server's counters since the last report.
func (rc *runCache) report() string {
	if rc == nil {
		return ""
	}
	now := rc.srv.Stats()
	d := now.Sub(rc.reported)
	rc.reported = now
	return d.Report()
}
