package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGuideBlocksRun: every shell block of docs/guides/local-build.md is either run by a step of the
// rehearsal (guideRun, read through guideBlock) or marked as not run with its reason, and every block
// a step runs is in the guide. The guide is what CI runs.
func TestGuideBlocksRun(t *testing.T) {
	t.Parallel()
	blocks, shell, err := guideBlocks("../..")
	if err != nil {
		t.Fatal(err)
	}
	for name := range blocks {
		if !strings.HasPrefix(name, "not run:") && !slices.Contains(guideRun, name) {
			t.Errorf("%s: block %q is run by no step (guideRun)", guidePath, name)
		}
	}
	for _, name := range guideRun {
		if _, ok := blocks[name]; !ok {
			t.Errorf("%s has no block %q, which the rehearsal runs", guidePath, name)
		}
	}
	b, err := os.ReadFile(filepath.Join("../..", guidePath))
	if err != nil {
		t.Fatal(err)
	}
	if marked := len(blockMark.FindAllString(string(b), -1)); marked != shell {
		t.Errorf("%s: %d shell blocks, %d marked <!-- rehearsal: … -->: mark each as run by a step or not run", guidePath, shell, marked)
	}
}
