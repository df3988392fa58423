//go:build linux

package agent

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkVerifyInstallation measures the check that runs before every registration and release, on a
// synthetic installation of 1,000 files and 64 MiB (the actions runner 2.319 unpacks to a few thousand
// files and roughly 200-250 MB; scale by bytes).
func BenchmarkVerifyInstallation(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "actions-runner")
	const files, size = 1000, 64 << 10
	rnd := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, size)
	for i := range files {
		for j := range buf {
			buf[j] = byte(rnd.Uint32())
		}
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	manifest := filepath.Join(b.TempDir(), "runner.sha256")
	if err := WriteManifest(dir, manifest); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(files * size)
	b.ResetTimer()
	for b.Loop() {
		if err := VerifyInstallation(dir, manifest); err != nil {
			b.Fatal(err)
		}
	}
}
