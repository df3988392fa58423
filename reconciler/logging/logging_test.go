package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestNew(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := New(&buf, slog.LevelInfo)
	ctx := With(context.Background(), slog.String(KeyRequestID, "r1"), slog.String(KeyRunID, "old"))
	ctx = With(ctx, slog.String(KeyRunID, "4242:1:1"))
	log.InfoContext(ctx, "claimed", "instance", "i-1")
	log.With("run", "4242:2:1").InfoContext(ctx, "domain line")
	log.DebugContext(ctx, "hidden")

	dec := json.NewDecoder(&buf)
	var lines []map[string]any
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (debug filtered): %v", len(lines), lines)
	}
	if l := lines[0]; l["instance_id"] != "i-1" || l["run_id"] != "4242:1:1" || l["request_id"] != "r1" || l["instance"] != nil {
		t.Errorf("first line %v: want instance renamed and the context's attributes, latest run id", l)
	}
	if l := lines[1]; l["run_id"] != "4242:2:1" || l["run"] != nil {
		t.Errorf("second line %v: want the domain's run renamed to run_id", l)
	}
}
