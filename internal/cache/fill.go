// fill.go: the local copy of what a job restored from S3, made off the job's path. A lookup that
// only S3 answers hands the job S3's presigned URL (server.go, answer), so the job reads the bytes
// straight from S3 and this server never sees them. The server remembers each URL it handed out, and
// when no job runs (Idle; the agent says so between runs) it reads them into its local store, one at
// a time, with the very URL the job got: no new presign, and nothing the run could not read. The
// next job of the repository on this instance then finds the entry on the disk (local first).
//
// A fill is never the job's business: it runs only while the instance is idle, stops as soon as a
// job starts (Busy), and keeps nothing of an entry it did not read whole. An expired URL or a failed
// read is skipped and logged; an interrupted one is tried again in the next idle gap while its URL
// lasts. The store's limits and eviction apply to a filled entry as to any commit.
package cache

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// maxFills bounds the URLs remembered for the next idle gap; the oldest go first.
const maxFills = 1000

// fills are the entries handed out as S3 URLs and not yet on the disk, and the fill that runs.
type fills struct {
	mu      sync.Mutex
	pending map[string]pendingFill // by object key
	seq     uint64
	stop    context.CancelFunc // set from Idle to Busy
	done    chan struct{}      // closed when the fill started by Idle has returned
}

type pendingFill struct {
	url     string
	expires time.Time
	seq     uint64 // the order handed out: filled first come, first served
}

// remember keeps url, handed out for object at now, for the next idle gap.
func (f *fills) remember(object, rawURL string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[string]pendingFill{}
	}
	if len(f.pending) >= maxFills {
		oldest, first := "", uint64(0)
		for o, p := range f.pending {
			if oldest == "" || p.seq < first {
				oldest, first = o, p.seq
			}
		}
		delete(f.pending, oldest)
	}
	f.seq++
	f.pending[object] = pendingFill{url: rawURL, expires: urlExpiry(rawURL, now), seq: f.seq}
}

// next takes the first entry handed out.
func (f *fills) next() (string, pendingFill, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	object, first := "", pendingFill{}
	for o, p := range f.pending {
		if object == "" || p.seq < first.seq {
			object, first = o, p
		}
	}
	if object == "" {
		return "", pendingFill{}, false
	}
	delete(f.pending, object)
	return object, first, true
}

// putBack returns an interrupted fill for the next idle gap, unless a newer URL came meanwhile.
func (f *fills) putBack(object string, p pendingFill) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pending[object]; !ok {
		f.pending[object] = p
	}
}

// urlExpiry is when a SigV4 presigned URL stops working: X-Amz-Date plus X-Amz-Expires
// (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html). A URL that does
// not say is given an hour from now; a read past its real end fails and is skipped.
func urlExpiry(rawURL string, now time.Time) time.Time {
	u, err := url.Parse(rawURL)
	if err != nil {
		return now
	}
	q := u.Query()
	at, err1 := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	secs, err2 := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err1 != nil || err2 != nil {
		return now.Add(time.Hour)
	}
	return at.Add(time.Duration(secs) * time.Second)
}

// Idle tells the server that no job runs: it fills its store with the entries it handed out as S3
// URLs. The channel is closed when that fill has returned (all filled or skipped, or stopped by
// Busy). Idle while a fill runs changes nothing.
func (s *Server) Idle() <-chan struct{} {
	f := &s.fills
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done != nil {
		select {
		case <-f.done:
		default:
			return f.done // running
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.stop, f.done = cancel, done
	go func() {
		defer close(done)
		s.fill(ctx)
	}()
	return done
}

// Busy tells the server that a job starts: a fill that runs stops, and Busy returns once it has,
// having kept nothing of the entry it was reading.
func (s *Server) Busy() {
	f := &s.fills
	f.mu.Lock()
	stop, done := f.stop, f.done
	f.stop, f.done = nil, nil
	f.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// fill reads the remembered entries into the store until none is left or ctx ends.
func (s *Server) fill(ctx context.Context) {
	for ctx.Err() == nil {
		object, p, ok := s.fills.next()
		if !ok {
			return
		}
		if s.local.has(object) {
			continue
		}
		if !s.cfg.Now().Before(p.expires) {
			s.log.Info("cache: not filled: its URL expired", "object", object, "expired", p.expires)
			continue
		}
		err := s.fillOne(ctx, object, p.url)
		switch {
		case err == nil:
			s.log.Debug("cache: filled", "object", object)
		case ctx.Err() != nil:
			s.fills.putBack(object, p) // a job started: tried again in the next idle gap
			return
		default:
			s.log.Warn("cache: not filled", "object", object, "err", err)
		}
	}
}

// fillOne reads object from S3 at rawURL into the store, whole or not at all.
func (s *Server) fillOne(ctx context.Context, object, rawURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("getting from S3: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength < 0 {
		return fmt.Errorf("getting from S3: %s (length %d)", resp.Status, resp.ContentLength)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), "fill-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the commit's rename, nothing is left to remove
	n, err := io.Copy(tmp, resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil || n != resp.ContentLength {
		return fmt.Errorf("getting from S3: %d of %d bytes: %v", n, resp.ContentLength, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	created := s.cfg.Now()
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		created = t
	}
	return s.local.commit(object, tmp.Name(), n, created)
}
