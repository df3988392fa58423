package main

import (
	"os"
	"path/filepath"
	"regexp"
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

// TestReadmeNamesTheSteps: README.md's `make rehearsal` row names every step of the table, in its
// order, and no step the table lacks.
func TestReadmeNamesTheSteps(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `make rehearsal` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("README.md has no `make rehearsal` row")
	}
	var want []string
	for _, s := range steps {
		want = append(want, s.Name)
	}
	var got []string
	for _, m := range regexp.MustCompile("`([a-z]+(?:-[a-z]+)*)`").FindAllStringSubmatch(row, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("README.md's `make rehearsal` row names the steps %v, want the table's %v", got, want)
	}
}
