package condwrite_test

import (
	"context"
	"slices"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
)

var (
	writeA = condwrite.Declare("test a")
	writeB = condwrite.Declare("test b")
)

func TestNamesTravelOnTheContext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want condwrite.Name
		ok   bool
	}{
		{"no write", t.Context(), "", false},
		{"a write", writeA.Context(t.Context()), writeA, true},
		{"the innermost write", writeB.Context(writeA.Context(t.Context())), writeB, true},
	} {
		if got, ok := condwrite.From(tc.ctx); got != tc.want || ok != tc.ok {
			t.Errorf("%s: From = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	all := condwrite.All()
	if !slices.Contains(all, writeA) || !slices.Contains(all, writeB) || !slices.IsSorted(all) {
		t.Errorf("All = %v, want both declared writes, sorted", all)
	}
}

func TestDeclareTwicePanics(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"test a", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Declare(%q) did not panic", name)
				}
			}()
			condwrite.Declare(name)
		}()
	}
}
