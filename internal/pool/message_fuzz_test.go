// Fuzz target of the pool message: an SQS body is input from outside the process (anyone who can
// send to the queue). Seed corpus in testdata/fuzz/FuzzDecode.
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 10s ./internal/pool
package pool_test

import (
	"errors"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// FuzzDecode: Decode never panics; what it refuses is ErrBadMessage; what it accepts is valid,
// encodes, and decodes back to the same message; the filter never panics on it.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, body string) {
		m, err := pool.Decode(body)
		if err != nil {
			if !errors.Is(err, pool.ErrBadMessage) {
				t.Fatalf("Decode(%q) error %v is not ErrBadMessage", body, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode(%q) accepted an invalid message: %v", body, err)
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded message: %v", err)
		}
		again, err := pool.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) = %v for %q", err, enc)
		}
		if !again.Threshold.Equal(m.Threshold) {
			t.Fatalf("threshold %v became %v", m.Threshold, again.Threshold)
		}
		again.Threshold = m.Threshold
		if again != m {
			t.Fatalf("round trip changed the message: %+v -> %+v", m, again)
		}
		for _, f := range []pool.Filter{{}, {UsageClass: m.UsageClass, InstanceTypes: []string{"c*", m.InstanceType}, MinCPU: m.CPU, Scope: m.Scope}} {
			_ = f.Matches(m)
		}
	})
}
