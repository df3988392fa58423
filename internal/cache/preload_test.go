// preload_test.go: the preload points node actions at the server only while it serves; requests
// the server does not own, and cache requests it cannot serve, go to the results service the job was
// given (GitHub's), so artifacts keep working and the job falls back to GitHub's cache.
package cache_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

// resultsURLSeen runs a node "action" with the preload and returns the ACTIONS_RESULTS_URL it sees.
func resultsURLSeen(t *testing.T, preload, ready string) string {
	t.Helper()
	cmd := exec.Command("node", "-e", "process.stdout.write(process.env.ACTIONS_RESULTS_URL)")
	cmd.Env = append(os.Environ(), "NODE_OPTIONS=--require "+preload, "RUNNERPOOL_CACHE_READY="+ready,
		"ACTIONS_RESULTS_URL=https://results-receiver.actions.githubusercontent.com/", "ACTIONS_CACHE_SERVICE_V2=True")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node with the preload: %v\n%s", err, out)
	}
	return string(out)
}

func TestPreloadPointsActionsAtTheServerOnlyWhileItServes(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	dir := t.TempDir()
	preload := filepath.Join(dir, "preload.cjs")
	if err := os.WriteFile(preload, cache.Preload, 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "run", "cache.json")
	srv, err := cache.New(cache.Config{Dir: t.TempDir(), ReadyFile: ready,
		Scope: func(context.Context) (cache.Scope, error) { return mainRun, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx, ln) })
	// Serve writes the ready file before it accepts; wait for the listener to answer.
	for {
		if resp, err := http.Get("http://" + ln.Addr().String() + "/download/none"); err == nil {
			resp.Body.Close()
			break
		}
	}
	if got, want := resultsURLSeen(t, preload, ready), "http://"+ln.Addr().String()+"/"; got != want {
		t.Fatalf("while the server serves, the action sees %q, want %q", got, want)
	}
	cancel()
	wg.Wait()
	if got := resultsURLSeen(t, preload, ready); got != "https://results-receiver.actions.githubusercontent.com/" {
		t.Fatalf("with the server stopped, the action sees %q, want GitHub's URL", got)
	}
}

func TestUpstreamServesWhatTheServerDoesNot(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	github := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":false}`)
	}))
	defer github.Close()
	up, _ := url.Parse(github.URL + "/")
	noScope := func(context.Context) (cache.Scope, error) { return cache.Scope{}, context.DeadlineExceeded }
	srv, err := cache.New(cache.Config{Dir: t.TempDir(), Upstream: up, Scope: noScope})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(srv.Handler())
	defer front.Close()
	for _, path := range []string{
		"/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact",
		"/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL",
	} {
		req, _ := http.NewRequest(http.MethodPost, front.URL+path, strings.NewReader(`{"key":"k","version":"0a"}`))
		req.Header.Set("Authorization", "Bearer runtime-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !strings.Contains(seen[1], "CacheService/GetCacheEntryDownloadURL Bearer runtime-token {\"key\":\"k\"") {
		t.Fatalf("the results service saw %q", seen)
	}
}
