package cache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalEvictsLeastRecentlyUsedOnAStoppedClock: with every use at one clock reading (a test's
// fixed clock, or a coarse one), eviction still drops the least recently used entry and never the
// one just saved. Failed before on about half the runs: the sort had no order for equal times and
// sometimes dropped the newest entry (CI at d109a15, TestToolkitLocalStoreKeepsTheClassLimit).
func TestLocalEvictsLeastRecentlyUsedOnAStoppedClock(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		steps   []string // "save:<key>" or "use:<key>"
		limit   int64
		kept    []string
		dropped []string
	}{
		{"the older of two goes", []string{"save:a", "save:b"}, 150, []string{"b"}, []string{"a"}},
		{"a use keeps the older", []string{"save:a", "save:b", "use:a", "save:c"}, 250, []string{"a", "c"}, []string{"b"}},
		{"under the limit all stay", []string{"save:a", "save:b", "save:c"}, 300, []string{"a", "b", "c"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 { // map order differs from run to run: repeat
				dir := t.TempDir()
				l, err := openLocal(dir, tc.limit, 0, func() time.Time { return at })
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range tc.steps {
					op, name, _ := strings.Cut(s, ":")
					key := "v1/repo/" + name
					if op == "use" {
						if _, ok := l.get(key); !ok {
							t.Fatalf("%s: not held", key)
						}
						continue
					}
					src := filepath.Join(dir, "tmp", "x")
					if err := os.WriteFile(src, make([]byte, 100), 0o600); err != nil {
						t.Fatal(err)
					}
					if err := l.commit(key, src, 100, at); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range tc.kept {
					if _, ok := l.get("v1/repo/" + k); !ok {
						t.Fatalf("%s dropped, want kept", k)
					}
				}
				for _, k := range tc.dropped {
					if _, ok := l.get("v1/repo/" + k); ok {
						t.Fatalf("%s kept, want dropped", k)
					}
				}
			}
		})
	}
}
