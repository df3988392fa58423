// local.go: the instance's own copy of the caches it restored or saved. A reused instance serves its
// repository's next job from here without touching S3. Files are named by the hash of their object key
// (never by anything a job wrote), in a directory only root reads; the index is kept beside them so an
// agent restart keeps them. Eviction: least recently used first while a repository holds more than its
// limit, and whatever was not used within the maximum age.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

type entry struct {
	Object  string    `json:"object"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	Used    time.Time `json:"used"`
	// Seq orders the uses (the store's counter, kept across restarts): least recently used is
	// lowest, whatever the clock's resolution or steps. Used is for the maximum age.
	Seq uint64 `json:"seq"`
}

type local struct {
	dir       string
	repoLimit int64
	maxAge    time.Duration
	now       func() time.Time

	mu      sync.Mutex
	entries map[string]*entry // by object key
	seq     uint64            // the last use's sequence number
}

func openLocal(dir string, repoLimit int64, maxAge time.Duration, now func() time.Time) (*local, error) {
	// tmp holds only reads in flight (fill.go): what a stopped agent left there is no entry.
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, fmt.Errorf("cache: local store: %w", err)
	}
	for _, d := range []string{"objects", "uploads", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("cache: local store: %w", err)
		}
	}
	l := &local{dir: dir, repoLimit: repoLimit, maxAge: maxAge, now: now, entries: map[string]*entry{}}
	if b, err := os.ReadFile(filepath.Join(dir, "index.json")); err == nil {
		var list []*entry
		if json.Unmarshal(b, &list) == nil {
			for _, e := range list {
				if st, err := os.Stat(l.path(e.Object)); err == nil && st.Size() == e.Size {
					l.entries[e.Object] = e
					l.seq = max(l.seq, e.Seq)
				}
			}
		}
	}
	return l, nil
}

func (l *local) path(object string) string {
	h := sha256.Sum256([]byte(object))
	return filepath.Join(l.dir, "objects", hex.EncodeToString(h[:]))
}

// get returns the entry of object, marking it used.
func (l *local) get(object string) (entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[object]
	if !ok {
		return entry{}, false
	}
	l.touchLocked(e)
	return *e, true
}

// has reports whether object is on the disk, without marking it used.
func (l *local) has(object string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.entries[object]
	return ok
}

// list returns the entries whose object key starts with prefix.
func (l *local) list(prefix string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []entry
	for k, e := range l.entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, *e)
		}
	}
	return out
}

// commit moves the finished file src into the store as object, then evicts.
func (l *local) commit(object, src string, size int64, created time.Time) error {
	if err := os.Rename(src, l.path(object)); err != nil {
		return fmt.Errorf("cache: keeping %s: %w", object, err)
	}
	l.mu.Lock()
	e := &entry{Object: object, Size: size, Created: created}
	l.touchLocked(e)
	l.entries[object] = e
	l.evictLocked(repoOf(object))
	err := l.saveLocked()
	l.mu.Unlock()
	return err
}

// repoOf is the repository segment of an object key ("v1/<repo>/...").
func repoOf(object string) string {
	parts := strings.SplitN(object, "/", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[1]
}

func (l *local) touchLocked(e *entry) {
	l.seq++
	e.Used, e.Seq = l.now(), l.seq
}

// evictLocked drops what is past the maximum age, then the repository's least recently used
// entries (lowest Seq) while it holds more than its limit. The last one used goes last: an entry
// just saved is never dropped for an older one, whatever the clock's resolution.
func (l *local) evictLocked(repo string) {
	now := l.now()
	var mine []*entry
	var total int64
	for k, e := range l.entries {
		if l.maxAge > 0 && now.Sub(e.Used) > l.maxAge {
			l.removeLocked(k)
			continue
		}
		if repoOf(k) == repo {
			mine = append(mine, e)
			total += e.Size
		}
	}
	if l.repoLimit <= 0 || total <= l.repoLimit {
		return
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Seq < mine[j].Seq })
	for _, e := range mine {
		if total <= l.repoLimit {
			break
		}
		total -= e.Size
		l.removeLocked(e.Object)
	}
}

// limit sets the store's limits to the run's class's (the scope's; 0 keeps the configured ones).
func (l *local) limit(repoLimit int64, maxAge time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if repoLimit > 0 {
		l.repoLimit = repoLimit
	}
	if maxAge > 0 {
		l.maxAge = maxAge
	}
}

func (l *local) removeLocked(object string) {
	delete(l.entries, object)
	_ = os.Remove(l.path(object))
}

func (l *local) saveLocked() error {
	list := make([]*entry, 0, len(l.entries))
	for _, e := range l.entries {
		list = append(list, e)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.dir, "index.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("cache: index: %w", err)
	}
	return os.Rename(tmp, filepath.Join(l.dir, "index.json"))
}

// bytes is what the store holds, for a repository segment ("" for all).
func (l *local) bytes(repo string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for k, e := range l.entries {
		if repo == "" || repoOf(k) == repo {
			n += e.Size
		}
	}
	return n
}
