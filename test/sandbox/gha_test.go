// gha_test.go: Buildx's `gha` cache type through the agent. No Docker engine runs here, but
// BuildKit's gha backend (cache/remotecache/gha) is a Go library, tonistiigi/go-actions-cache: with
// ACTIONS_CACHE_SERVICE_V2 set it speaks cache v2 to ACTIONS_RESULTS_URL (TryEnv, cache.go), the
// Twirp API the agent's server serves, and uploads and downloads with the Azure SDK's block blob
// client (cache_v2.go), which the server answers as the toolkit's uploads are answered. This test
// drives that very client (in test/, so it is never linked into the product) against a real
// agent's server: a blob saved through one instance is in the bucket under the run's scope and
// loads on another instance, whose disk is empty, from S3.
package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	actionscache "github.com/tonistiigi/go-actions-cache"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// runtimeToken is a stand-in ACTIONS_RUNTIME_TOKEN: the client reads its claims (ac, exp, nbf)
// without verifying it (New parses it unverified); the agent's server does not read it.
func runtimeToken(t *testing.T) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now()
	return enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." +
		enc(map[string]any{"ac": `[{"Scope":"refs/heads/main","Permission":3}]`, "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(-time.Minute).Unix()}) +
		"." + base64.RawURLEncoding.EncodeToString([]byte("unverified"))
}

// serverURL is the agent's cache server as its ready file names it (what the preload gives jobs).
func serverURL(t *testing.T, root, id string) string {
	t.Helper()
	ready, _ := agenttest.CachePaths(root, id)
	b, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ URL string }
	if err := json.Unmarshal(b, &v); err != nil || !strings.HasPrefix(v.URL, "http://127.0.0.1:") {
		t.Fatalf("ready file %s: %q, %v", ready, b, err)
	}
	return v.URL
}

func TestBuildxGHACacheThroughTheAgent(t *testing.T) {
	t.Parallel()
	w := newCacheWorld(t)
	ctx := t.Context()
	_, first := w.provision(t, "refs/heads/main")
	_, second := w.provision(t, "refs/heads/main")
	if first == second {
		t.Fatal("both runs on one instance")
	}
	blob := make([]byte, 3<<20+12345) // more than one of the client's blocks, not a multiple of any
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("buildkit-blob-1-sha256:%x", blob[:16])
	client := func(id string) *actionscache.Cache {
		c, err := actionscache.New(runtimeToken(t), serverURL(t, w.root, id), true, actionscache.Opt{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	if err := client(first).Save(ctx, key, actionscache.NewBlob(blob)); err != nil {
		t.Fatalf("save through the agent: %v", err)
	}
	scope := cache.ScopeOf(sandbox.Scope, "push", "refs/heads/main", "", "")
	if objs := w.objects(t, scope.WritePrefix()); len(objs) != 1 {
		t.Fatalf("bucket under the run's write prefix: %q, want the one entry", objs)
	}
	for _, id := range []string{first, second} { // from the disk, then from S3 (an empty disk)
		e, err := client(id).Load(ctx, key)
		if err != nil || e == nil || e.Key != key {
			t.Fatalf("load on %s: %+v, %v", id, e, err)
		}
		var got bytes.Buffer
		if err := e.WriteTo(ctx, &got); err != nil {
			t.Fatalf("download on %s: %v", id, err)
		}
		if !bytes.Equal(got.Bytes(), blob) {
			t.Fatalf("download on %s: %d bytes, not the %d saved", id, got.Len(), len(blob))
		}
	}
	// The second instance's disk was empty: its download was a GET the control plane presigned.
	if n := w.counter(t, "runnerpool_cache_presign_requests_total", map[string]string{"kind": "get", "outcome": "ok"}); n != 1 {
		t.Errorf("presigned gets = %v, want the second instance's one", n)
	}
	if e, err := client(second).Load(ctx, "buildkit-blob-1-sha256:none"); err != nil || e != nil {
		t.Fatalf("a key nobody saved: %+v, %v", e, err)
	}
	if n := w.upstream.Load(); n != 0 {
		t.Errorf("GitHub's results service got %d requests", n)
	}
}
