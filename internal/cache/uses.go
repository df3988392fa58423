// uses.go: a restore served from the instance's disk makes no S3 request (local first), so the
// control plane, which records a restore from the bucket when it presigns its GET (cachebucket.Uses),
// would not see it, and the bucket's eviction would take a hot entry that reused instances serve
// from their disks for an unused one. So a local hit tells the control plane (OpUse: no URL, no S3
// request), off the job's path and at most once per object per useEvery, and the control plane
// records the use as for a restore from the bucket.
package cache

import (
	"context"
	"sync"
	"time"
)

// OpUse asks the control plane to record a restore served from the instance's disk.
const OpUse Op = "use"

// useEvery is the least time between two notes of one object's use: the bucket's record is kept
// at the same grain (cachebucket.Uses), so more would only cost requests.
const useEvery = time.Hour

// useNotes remembers when each object's use was last told.
type useNotes struct {
	mu   sync.Mutex
	told map[string]time.Time
}

// noteUse tells the control plane of a local hit on object, unless it was told within useEvery.
func (s *Server) noteUse(object string) {
	if s.cfg.Presign == nil {
		return
	}
	now := s.cfg.Now()
	n := &s.uses
	n.mu.Lock()
	if t, ok := n.told[object]; ok && now.Sub(t) < useEvery {
		n.mu.Unlock()
		return
	}
	if n.told == nil || len(n.told) >= 100000 {
		n.told = map[string]time.Time{}
	}
	n.told[object] = now
	n.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.cfg.Presign(ctx, Request{Op: OpUse, Object: object}); err != nil {
			s.log.Debug("cache: the control plane did not record a local hit", "err", err)
			n.mu.Lock()
			delete(n.told, object) // told again on the next hit
			n.mu.Unlock()
		}
	}()
}
