// preload.go: how unchanged workflows reach the server (docs/cache.md "How the runner is pointed at
// it"): the preload file node loads in every action, and the ready file it reads.
package cache

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Preload is the node preload script (preload.cjs) the agent installs for the runner.
//
//go:embed preload.cjs
var Preload []byte

// DefaultReadyFile is where the preload looks for the server's address unless
// RUNNERPOOL_CACHE_READY says otherwise.
const DefaultReadyFile = "/run/runnerpool/cache.json"

// writeReady writes the ready file naming base: readable by the runner user, written atomically.
func writeReady(path, base string) error {
	b, _ := json.Marshal(map[string]string{"url": base + "/"})
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cache: ready file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("cache: ready file: %w", err)
	}
	return os.Rename(tmp, path)
}
