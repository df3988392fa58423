// cache_test.go: the agent's cache server hands a job S3's own URL for an entry only S3 holds, and
// fills its disk with it once the runner serves no run: the next run on the instance restores that
// entry from the disk.
package agent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

// TestCacheFillsBetweenRuns: run 1's lookup of an entry only S3 holds answers S3's presigned URL
// and the job reads it there; once the record hands the instance back to its pool (handedBack,
// not the runner's stop alone: an instance about to end never fills), the server fills its disk
// with that URL; run 2's lookup answers the server's own URL, and S3 is not read
// again. Fails on the code before: the lookup answered the server's URL and there was no fill.
func TestCacheFillsBetweenRuns(t *testing.T) {
	scope := cache.Scope{Repository: "acme/app", Ref: "refs/heads/main", DefaultBranch: "refs/heads/main", Trusted: true}
	object, err := cache.ObjectKey(scope.WritePrefix(), "deps", "0b1c")
	if err != nil {
		t.Fatal(err)
	}
	entry := bytes.Repeat([]byte("entry!"), 200<<10)
	var gets, presignedGets atomic.Int64
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") == "2" {
			fmt.Fprintf(w, `<ListBucketResult><Contents><Key>%s</Key><LastModified>2026-11-29T12:00:00Z</LastModified><Size>%d</Size></Contents></ListBucketResult>`, object, len(entry))
			return
		}
		if r.URL.Path != "/bucket/"+object {
			http.NotFound(w, r)
			return
		}
		gets.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(entry)))
		_, _ = w.Write(entry)
	}))
	defer s3.Close()
	// The control plane: the run's scope, and URLs for it (presigned in production; here plain).
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req cache.SignedRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		var a cache.Answer
		switch req.Op {
		case cache.OpScope:
			a.Scope = &scope
		case cache.OpList:
			a.URL = s3.URL + "/bucket/?list-type=2"
		case cache.OpGet:
			presignedGets.Add(1)
			a.URL = s3.URL + "/bucket/" + req.Object + "?X-Amz-Date=" + time.Now().UTC().Format("20060102T150405Z") + "&X-Amz-Expires=3600"
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	defer control.Close()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	a := &agent{id: "i-cache", key: key, log: slog.New(slog.DiscardHandler), cfg: Config{Now: time.Now}}
	rc, err := a.newCache(CacheOptions{ControlPlane: control.URL, Dir: filepath.Join(dir, "cache"),
		ReadyFile: filepath.Join(dir, "ready"), PreloadPath: filepath.Join(dir, "preload.cjs"), HTTP: &http.Client{}}.withDefaults(dir))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = rc.srv.Serve(t.Context(), ln) }()
	base := "http://" + ln.Addr().String()
	lookup := func() string {
		t.Helper()
		resp, err := http.Post(base+"/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL",
			"application/json", strings.NewReader(`{"key":"deps","version":"0b1c"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			OK  bool   `json:"ok"`
			URL string `json:"signed_download_url"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || !got.OK {
			t.Fatalf("lookup: %+v, %v", got, err)
		}
		return got.URL
	}

	rc.serving("run-1")
	u := lookup()
	if !strings.HasPrefix(u, s3.URL+"/bucket/"+object) {
		t.Fatalf("run 1's lookup answered %s, want S3's URL of the entry", u)
	}
	resp, err := http.Get(u) // the job reads S3
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, entry) {
		t.Fatalf("the job read %d bytes", len(b))
	}

	rc.serving("") // the run is over, but the record has not handed the instance back: no fill
	if n := gets.Load(); n != 1 {
		t.Fatalf("S3 served %d GETs before the hand-back, want the job's only", n)
	}
	rc.handedBack() // back in the pool: the server fills its disk
	<-rc.srv.Idle() // (the fill already running: wait for it)
	rc.handedBack() // the next steps of the loop start nothing more
	rc.serving("run-2")
	if u := lookup(); !strings.HasPrefix(u, base+"/download/") {
		t.Fatalf("run 2's lookup answered %s, want the server's own URL (a local hit)", u)
	}
	if n, p := gets.Load(), presignedGets.Load(); n != 2 || p != 1 {
		t.Fatalf("S3 served %d GETs on %d presigns, want the job's and the fill's on one", n, p)
	}
	if st := rc.srv.Stats(); st.LocalHits != 1 || st.RemoteHits != 1 {
		t.Fatalf("stats %+v: want one hit from S3, then one from the disk", st)
	}
}
