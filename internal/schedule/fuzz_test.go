// Fuzz target of schedule specs; the seed corpus is in testdata/fuzz/FuzzSpec.
package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzSpec feeds arbitrary JSON specs and instants through validation and evaluation. The seed
// corpus is in testdata/fuzz/FuzzSpec. Invariants: validation never panics and every problem has a
// path; a valid spec evaluates to one of its own schedules (or to nothing, as the default) with that
// schedule's counts; NextChange moves forward and is where the target really changes; a valid spec
// survives a JSON round trip.
func FuzzSpec(f *testing.F) {
	f.Add([]byte(`{"timezone":"Europe/Paris","schedules":[{"name":"default","hot":1,"stopped":2},{"name":"nights","match":{"days":["monday"],"times":[{"start":"22:00","end":"06:00"}]},"stopped":2}]}`), int64(1743296400))
	f.Add([]byte(`{"timezone":"Local","schedules":[{"name":"x","hot":-1}]}`), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, unix int64) {
		var spec Spec
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return
		}
		cal, err := spec.Compile()
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Compile error %v is not a non-empty Errors", err)
			}
			for _, e := range errs {
				if e.Path() == "" || e.Err == nil {
					t.Fatalf("problem without a path or cause: %#v", e)
				}
			}
			return
		}
		// Any instant between years 1900 and 2200.
		at := time.Unix(-2208988800+int64(uint64(unix)%(300*365*24*3600)), 0)
		got := cal.At(at)
		if got.Schedule == "" {
			if !got.Default || got.Hot != 0 || got.Stopped != 0 {
				t.Fatalf("At(%v) = %+v: no schedule but non-zero counts", at, got)
			}
		} else {
			found := false
			for _, s := range spec.Schedules {
				if s.Name == got.Schedule {
					found = true
					if s.Hot != got.Hot || s.Stopped != got.Stopped || s.IsDefault() != got.Default {
						t.Fatalf("At(%v) = %+v, but schedule is %+v", at, got, s)
					}
				}
			}
			if !found {
				t.Fatalf("At(%v) = %+v: not a schedule of the spec", at, got)
			}
		}
		next, target := cal.NextChange(at)
		if !next.IsZero() {
			if !next.After(at) || target != cal.At(next) || target == got || cal.At(next.Add(-time.Minute)) != got && next.Add(-time.Minute).After(at) {
				t.Fatalf("NextChange(%v) = %v %+v inconsistent with At (now %+v)", at, next, target, got)
			}
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var again Spec
		if err := json.Unmarshal(raw, &again); err != nil {
			t.Fatal(err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("valid spec invalid after a JSON round trip: %v\n%s", err, raw)
		}
	})
}
