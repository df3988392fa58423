package pooljob_test

import (
	"errors"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
)

// TestRunnerDecisions: what the pool worker and the backstop decide from a runner listing's word
// and the read of the runner by its id. The worker keeps an instance (or refuses a completion for
// now) unless the listing says not busy and the read confirms it or had no id to read; the
// backstop hands a completion on only when the read finds no runner, or had no id to read.
func TestRunnerDecisions(t *testing.T) {
	t.Parallel()
	failed := errors.New("502 Bad Gateway")
	tests := []struct {
		name       string
		listedBusy bool
		read       pooljob.RunnerState
		readErr    error
		mayBeBusy  bool
	}{
		{"listed busy: not read", true, pooljob.RunnerNotRead, nil, true},
		{"not listed busy, read busy (a skipped runner)", false, pooljob.RunnerBusy, nil, true},
		{"not listed busy, read idle", false, pooljob.RunnerIdle, nil, false},
		{"not listed busy, read gone (404)", false, pooljob.RunnerGone, nil, false},
		{"not listed busy, no recorded id: the listing decides", false, pooljob.RunnerNotRead, nil, false},
		{"not listed busy, read failed", false, pooljob.RunnerNotRead, failed, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := pooljob.MayBeBusy(tc.listedBusy, tc.read, tc.readErr); got != tc.mayBeBusy {
				t.Errorf("MayBeBusy(%v, %s, %v) = %v, want %v", tc.listedBusy, tc.read, tc.readErr, got, tc.mayBeBusy)
			}
		})
	}
	gone := map[pooljob.RunnerState]bool{pooljob.RunnerNotRead: true, pooljob.RunnerGone: true, pooljob.RunnerIdle: false, pooljob.RunnerBusy: false}
	for read, want := range gone {
		if got := pooljob.Gone(read); got != want {
			t.Errorf("Gone(%s) = %v, want %v", read, got, want)
		}
	}
}
