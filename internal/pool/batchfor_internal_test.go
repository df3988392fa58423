package pool

import "testing"

// TestBatchFor: a receive asks for a few more messages than the request still needs, never a whole
// batch of 10 for a request of 1 or 2, and never more than the configured batch.
func TestBatchFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ want, most, got int }{
		{1, 10, 4},
		{2, 10, 4},
		{3, 10, 6},
		{5, 10, 10},
		{40, 10, 10},
		{2, 3, 3},
	} {
		if got := batchFor(tc.want, tc.most); got != tc.got {
			t.Errorf("batchFor(%d, %d) = %d, want %d", tc.want, tc.most, got, tc.got)
		}
	}
}
