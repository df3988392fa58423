package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeS3 serves one object's GET (what a presigned URL reaches); cut, when set, makes it declare the
// whole size, send that many bytes and drop the connection.
type fakeS3 struct {
	body []byte
	mu   sync.Mutex
	cut  int
	gets int
	hold chan struct{} // when set: after the first MiB, wait for it to close before going on
	gone chan struct{} // closed when a GET held by hold saw its client leave
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	cut, hold := f.cut, f.hold
	f.gets++
	f.mu.Unlock()
	w.Header().Set("Content-Length", strconv.Itoa(len(f.body)))
	w.Header().Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
	body := f.body
	if cut > 0 {
		body = body[:cut]
	}
	if hold != nil {
		_, _ = w.Write(body[:1<<20])
		w.(http.Flusher).Flush()
		<-hold
		for {
			if _, err := w.Write(body[1<<20 : 2<<20]); err != nil {
				close(f.gone)
				return
			}
			w.(http.Flusher).Flush()
		}
	}
	_, _ = w.Write(body)
	if cut > 0 {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
}

const testObject = "v1/acme/app/refs/heads/main/key/0b1c"

// restoreServer is a Server whose S3 is f, with a download token for testObject, and a count of
// downloads that finished.
func restoreServer(t testing.TB, f *fakeS3) (*Server, string, *sync.WaitGroup, func() string) {
	t.Helper()
	s3 := httptest.NewServer(f)
	t.Cleanup(s3.Close)
	dir := t.TempDir()
	s, err := New(Config{Dir: dir,
		Scope:   func(context.Context) (Scope, error) { return Scope{}, errors.New("unused") },
		Presign: func(context.Context, Request) (string, error) { return s3.URL + "/object", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer served.Done()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.base.Store(srv.URL)
	token := func() string {
		tok := randomID()
		s.mu.Lock()
		s.tokens[tok] = download{object: testObject, remote: true, expires: time.Now().Add(time.Hour)}
		s.mu.Unlock()
		served.Add(1)
		return srv.URL + "/download/" + tok
	}
	return s, dir, &served, token
}

func tmpLeft(t testing.TB, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "tmp", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestRestoreCutMidStreamKeepsNoEntry: S3's body cut mid-way while the client is being served
// (the client already has part of it from the growing file): the client's read fails, no local
// entry is kept, nothing is left in tmp, and the next restore fetches from S3 again and keeps the
// whole entry.
func TestRestoreCutMidStreamKeepsNoEntry(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("restore!"), (8<<20)/8)
	f := &fakeS3{body: body, cut: 3 << 20}
	s, dir, served, url := restoreServer(t, f)
	resp, err := http.Get(url())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	served.Wait()
	if err == nil || len(got) >= len(body) {
		t.Fatalf("client read %d of %d bytes with no error from a cut restore", len(got), len(body))
	}
	if _, ok := s.local.get(testObject); ok {
		t.Fatal("a restore cut short left a local entry")
	}
	if left := tmpLeft(t, dir); len(left) > 0 {
		t.Fatalf("a restore cut short left %v", left)
	}
	f.mu.Lock()
	f.cut = 0
	f.mu.Unlock()
	resp, err = http.Get(url())
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	served.Wait()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("second restore: %d bytes, %v", len(got), err)
	}
	kept, _ := os.ReadFile(s.local.path(testObject))
	if e, ok := s.local.get(testObject); !ok || e.Size != int64(len(body)) || !bytes.Equal(kept, body) {
		t.Fatalf("the whole restore kept %v (%d bytes on disk), want the entry", ok, len(kept))
	}
	if f.gets != 2 {
		t.Fatalf("S3 was read %d times, want 2", f.gets)
	}
}

// TestRestoreClientGoneKeepsNoEntry: a client that leaves mid-restore ends the server's read of S3
// and leaves no entry and no temporary file.
func TestRestoreClientGoneKeepsNoEntry(t *testing.T) {
	t.Parallel()
	f := &fakeS3{body: make([]byte, 64<<20), hold: make(chan struct{}), gone: make(chan struct{})}
	s, dir, served, url := restoreServer(t, f)
	resp, err := http.Get(url())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client leaves
	close(f.hold)
	served.Wait()
	<-f.gone // S3's side saw the server stop reading
	if _, ok := s.local.get(testObject); ok {
		t.Fatal("a restore whose client left made a local entry")
	}
	if left := tmpLeft(t, dir); len(left) > 0 {
		t.Fatalf("a restore whose client left left %v", left)
	}
}

// TestConcurrentRestoresOfOneKey: restores of one key at once each get the whole entry, and the
// entry kept is whole; the next restore is served from the disk (S3 is gone by then).
func TestConcurrentRestoresOfOneKey(t *testing.T) {
	t.Parallel()
	body := make([]byte, 6<<20+17)
	for i := range body {
		body[i] = byte(i * 7)
	}
	want := sha256.Sum256(body)
	f := &fakeS3{body: body}
	s, _, served, url := restoreServer(t, f)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		u := url()
		wg.Go(func() {
			resp, err := http.Get(u)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			if _, err := io.Copy(h, resp.Body); err != nil {
				errs <- err
				return
			}
			if [32]byte(h.Sum(nil)) != want {
				errs <- errors.New("a concurrent restore got other bytes")
			}
		})
	}
	wg.Wait()
	served.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(s.local.path(testObject))
	if sha256.Sum256(kept) != want {
		t.Fatalf("the entry kept has %d bytes, not the entry", len(kept))
	}
	f.mu.Lock()
	gets := f.gets
	f.mu.Unlock()
	resp, err := http.Get(url())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served.Wait()
	if !bytes.Equal(got, body) || f.gets != gets {
		t.Fatalf("the local hit: %d bytes, S3 read %d more times", len(got), f.gets-gets)
	}
}

// cpuSeconds is the process's user and system CPU so far.
func cpuSeconds(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkRestoreFromS3 restores a 256 MiB entry from a fake S3 through the server to a client on
// loopback (all in this process) and reports the process's CPU per GiB, robust to a loaded machine
// where MB/s is not; BenchmarkRawS3Read is the same client reading the fake S3 directly, so the
// difference is the server's own cost, and BenchmarkProxyS3 splits it into the copy to the client
// and the local copy:
//
//	go test -run '^$' -bench 'RestoreFromS3|ProxyS3|RawS3Read' -benchtime 8x ./internal/cache/
func BenchmarkRestoreFromS3(b *testing.B) {
	body := make([]byte, 256<<20)
	s, _, served, url := restoreServer(b, &fakeS3{body: body})
	benchGets(b, len(body), func() string {
		s.local.mu.Lock()
		s.local.removeLocked(testObject) // a fresh disk: every byte from S3
		s.local.mu.Unlock()
		return url()
	})
	served.Wait()
}

// BenchmarkProxyS3 is the same read through a bare proxy with the server's buffer size and no local
// copy: BenchmarkRestoreFromS3 less this is what the local copy costs.
func BenchmarkProxyS3(b *testing.B) {
	body := make([]byte, 256<<20)
	s3 := httptest.NewServer(&fakeS3{body: body})
	defer s3.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(s3.URL)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Length", resp.Header.Get("Content-Length"))
		_, _ = io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{resp.Body}, make([]byte, 1<<20))
	}))
	defer proxy.Close()
	benchGets(b, len(body), func() string { return proxy.URL })
}

func BenchmarkRawS3Read(b *testing.B) {
	body := make([]byte, 256<<20)
	s3 := httptest.NewServer(&fakeS3{body: body})
	defer s3.Close()
	benchGets(b, len(body), func() string { return s3.URL })
}

func benchGets(b *testing.B, size int, url func() string) {
	b.SetBytes(int64(size))
	cpu := 0.0
	for b.Loop() {
		u := url()
		began := cpuSeconds(b)
		resp, err := http.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d of %d: %v", n, size, err)
		}
		cpu += cpuSeconds(b) - began
	}
	b.ReportMetric(cpu/float64(b.N)/(float64(size)/(1<<30)), "cpu-s/GiB")
}
