package poolsize

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
)

// The kept runs decode tolerantly (unknown fields and a newer leader's additions are fine); an
// entry no leader writes is dropped, and an unreadable encoding starts afresh, never stopping the
// pass.
func TestDecodeRunsKeepsWhatALeaderWrites(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	ok := `{"cut":"2026-11-23T09:00:00Z","extra":1,
		"open":{"r1":{"w":"acme/api: CI","f":"2026-11-23T08:59:00Z","s":"2026-11-23T09:00:00Z","a":[0,190000],"new":true},
		        "neg":{"w":"acme/api: CI","f":"2026-11-23T08:59:00Z","a":[-5]},
		        "nofirst":{"w":"acme/api: CI","a":[0]}},
		"fanouts":{"acme/api: CI":{"first":1,"jobs":8,"after_ms":190000,"within_ms":190000,"seen":"2026-11-23T09:00:00Z"},
		           "acme/api: few":{"first":1,"jobs":2,"after_ms":1,"within_ms":1},
		           "acme/api: backwards":{"first":1,"jobs":8,"after_ms":9,"within_ms":1}}}`
	k := decodeRuns(ok, slog.New(slog.DiscardHandler))
	if !k.Cut.Equal(t0) || len(k.Open) != 1 || k.Open["r1"] == nil || len(k.Fanouts) != 1 {
		t.Fatalf("decoded %+v; want the cut, run r1 and CI's fan-out only", k)
	}
	if f := k.fanouts()["acme/api: CI"]; f != (autoscale.Fanout{First: 1, Jobs: 8, After: 190 * time.Second, Within: 190 * time.Second}) {
		t.Errorf("CI's fan-out %+v", f)
	}
	if k := decodeRuns(`{"open":[`, slog.New(slog.DiscardHandler)); len(k.Open) != 0 || len(k.Fanouts) != 0 || !k.Cut.IsZero() {
		t.Errorf("unreadable: %+v; want afresh", k)
	}
}

// The item stays bounded: the oldest runs and the least recently seen fan-outs go first, and a
// fan-out not seen for fanoutMemory is forgotten.
func TestRunsKeptBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	k := decodeRuns("", slog.New(slog.DiscardHandler))
	for i := range maxOpenRuns + 5 {
		k.Open[fmt.Sprint(i)] = &runOpen{Workflow: "w", First: t0.Add(time.Duration(i) * time.Millisecond), Seen: t0}
	}
	for i := range maxFanouts + 5 {
		k.Fanouts[fmt.Sprint(i)] = &fanoutKept{First: 1, Jobs: 8, Seen: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	k.Fanouts["old"] = &fanoutKept{First: 1, Jobs: 8, Seen: t0.Add(-fanoutMemory - time.Minute)}
	k.end(t0.Add(time.Second), time.Minute)
	if len(k.Open) != maxOpenRuns || k.Open["0"] != nil || k.Open[fmt.Sprint(maxOpenRuns+4)] == nil {
		t.Errorf("%d open runs; want the newest %d", len(k.Open), maxOpenRuns)
	}
	if len(k.Fanouts) != maxFanouts || k.Fanouts["old"] != nil || k.Fanouts["0"] != nil {
		t.Errorf("%d fan-outs; want the %d seen last", len(k.Fanouts), maxFanouts)
	}
}
