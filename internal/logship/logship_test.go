package logship

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/google/go-cmp/cmp"
)

// fakeLogs is CloudWatch Logs' JSON 1.1 API for CreateLogStream and PutLogEvents, with the rules the API
// reference publishes (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html,
// API_CreateLogStream.html): a put to a stream that does not exist is ResourceNotFoundException; creating
// one that exists is ResourceAlreadyExistsException; a batch is at most 10,000 events and 1,048,576
// bytes (messages plus 26 bytes each), in chronological order, spanning at most 24 hours, with no
// empty message.
type fakeLogs struct {
	mu      sync.Mutex
	group   string
	streams map[string][]string
	puts    int
}

func newFakeLogs(t *testing.T, group string) (*fakeLogs, *cloudwatchlogs.Client) {
	t.Helper()
	f := &fakeLogs{group: group, streams: map[string][]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := cloudwatchlogs.New(cloudwatchlogs.Options{Region: "eu-central-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}})
	return f, client
}

func (f *fakeLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		LogGroupName, LogStreamName string
		LogEvents                   []struct {
			Timestamp int64
			Message   string
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, "SerializationException", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.LogGroupName != f.group {
		fail(w, "ResourceNotFoundException", "The specified log group does not exist.")
		return
	}
	_, exists := f.streams[in.LogStreamName]
	switch r.Header.Get("X-Amz-Target") {
	case "Logs_20140328.CreateLogStream":
		if exists {
			fail(w, "ResourceAlreadyExistsException", "The specified log stream already exists")
			return
		}
		f.streams[in.LogStreamName] = []string{}
		fmt.Fprint(w, "{}")
	case "Logs_20140328.PutLogEvents":
		if !exists {
			fail(w, "ResourceNotFoundException", "The specified log stream does not exist.")
			return
		}
		size := 0
		for i, e := range in.LogEvents {
			size += len(e.Message) + 26
			switch {
			case e.Message == "":
				fail(w, "InvalidParameterException", "1 validation error detected: message must have length greater than or equal to 1")
				return
			case i > 0 && e.Timestamp < in.LogEvents[i-1].Timestamp:
				fail(w, "InvalidParameterException", "Log events in a single PutLogEvents request must be in chronological order.")
				return
			case e.Timestamp-in.LogEvents[0].Timestamp > 24*3600*1000:
				fail(w, "InvalidParameterException", "The batch of log events in a single PutLogEvents request cannot span more than 24 hours.")
				return
			}
		}
		if len(in.LogEvents) > 10_000 || size > 1_048_576 || len(in.LogEvents) == 0 {
			fail(w, "InvalidParameterException", fmt.Sprintf("batch of %d events, %d bytes", len(in.LogEvents), size))
			return
		}
		for _, e := range in.LogEvents {
			f.streams[in.LogStreamName] = append(f.streams[in.LogStreamName], e.Message)
		}
		f.puts++
		fmt.Fprint(w, `{"nextSequenceToken":"1"}`)
	default:
		fail(w, "UnknownOperationException", r.Header.Get("X-Amz-Target"))
	}
}

func fail(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}

func (f *fakeLogs) stream(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.streams[name]...)
}

// fakeJournalctl speaks journalctl's JSON export from entries.jsonl: all of it, or what follows the
// entry of --after-cursor; then it waits, as --follow does.
const fakeJournalctl = `#!/bin/bash
dir=$(dirname "$0")
cursor=""
for a in "$@"; do case "$a" in --after-cursor=*) cursor=${a#--after-cursor=} ;; esac; done
if [ -z "$cursor" ]; then cat "$dir/entries.jsonl"; else
  awk -v c="\"__CURSOR\":\"$cursor\"" 'found { print } index($0, c) { found = 1 }' "$dir/entries.jsonl"
fi
exec sleep 600
`

func journalLine(cursor string, uid *int, unit, msg string, us int64) string {
	e := map[string]any{"__CURSOR": cursor, "__REALTIME_TIMESTAMP": fmt.Sprint(us), "MESSAGE": msg}
	if uid != nil {
		e["_UID"] = fmt.Sprint(*uid)
	}
	if unit != "" {
		e["_SYSTEMD_UNIT"] = unit
	}
	b, _ := json.Marshal(e)
	return string(b) + "\n"
}

// shipUntil runs the shipper until every stream holds at least the wanted number of messages.
func shipUntil(t *testing.T, f *fakeLogs, o Options, want map[string]int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for stream, n := range want {
			if len(f.stream(stream)) < n {
				ok = false
			}
		}
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

// TestShipsBootstrapLogAndJournal: the bootstrap log and the journal reach their streams in order, the
// streams created on first use; what the runner user wrote to the journal is not shipped; a restart
// ships what came since, nothing twice.
func TestShipsBootstrapLogAndJournal(t *testing.T) {
	t.Parallel()
	f, client := newFakeLogs(t, "/runnerpool/prod/instances")
	dir := t.TempDir()
	bootLog := filepath.Join(dir, "runnerpool-bootstrap.log")
	journalctl := filepath.Join(dir, "journalctl")
	must(t, os.WriteFile(bootLog, []byte("runnerpool: boot (x64, runner 2.336.0)\nrunnerpool: bootstrapping i-1\npartial"), 0o644))
	must(t, os.WriteFile(journalctl, []byte(fakeJournalctl), 0o755))
	root, runner := 0, 1001
	entries := journalLine("c1", &root, "runnerpool-agent.service", "agent started", 1_700_000_000_000_000) +
		journalLine("c2", &runner, "", "job says: ship me", 1_700_000_001_000_000) +
		journalLine("c3", nil, "", "kernel: oom", 1_700_000_002_000_000)
	must(t, os.WriteFile(filepath.Join(dir, "entries.jsonl"), []byte(entries), 0o644))
	o := Options{API: client, Group: "/runnerpool/prod/instances", InstanceID: "i-1", StateDir: filepath.Join(dir, "state"),
		BootstrapLog: bootLog, Journalctl: journalctl, Flush: 20 * time.Millisecond}
	boot, journal := Streams("i-1")

	shipUntil(t, f, o, map[string]int{boot: 2, journal: 2})
	if diff := cmp.Diff([]string{"runnerpool: boot (x64, runner 2.336.0)", "runnerpool: bootstrapping i-1"}, f.stream(boot)); diff != "" {
		t.Errorf("bootstrap stream (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"runnerpool-agent.service: agent started", "kernel: oom"}, f.stream(journal)); diff != "" {
		t.Errorf("journal stream (-want +got):\n%s", diff)
	}

	// More of both, then a restart: only the new lines are shipped.
	fh, err := os.OpenFile(bootLog, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = fh.WriteString(" line\nrunnerpool: agent started on i-1\n")
	must(t, err)
	must(t, fh.Close())
	must(t, os.WriteFile(filepath.Join(dir, "entries.jsonl"), []byte(entries+journalLine("c4", &root, "", "sshd: accepted", 1_700_000_003_000_000)), 0o644))
	shipUntil(t, f, o, map[string]int{boot: 4, journal: 3})
	if diff := cmp.Diff([]string{"runnerpool: boot (x64, runner 2.336.0)", "runnerpool: bootstrapping i-1", "partial line", "runnerpool: agent started on i-1"}, f.stream(boot)); diff != "" {
		t.Errorf("bootstrap stream after a restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"runnerpool-agent.service: agent started", "kernel: oom", "sshd: accepted"}, f.stream(journal)); diff != "" {
		t.Errorf("journal stream after a restart (-want +got):\n%s", diff)
	}
}

// TestBatchesKeepPutLogEventsQuotas: whatever the events, every batch is one the API accepts.
func TestBatchesKeepPutLogEventsQuotas(t *testing.T) {
	t.Parallel()
	f, client := newFakeLogs(t, "g")
	s := &Shipper{API: client, Group: "g", Stream: "i-1/journal", StateFile: filepath.Join(t.TempDir(), "pos")}
	t0 := time.Unix(1_700_000_000, 0)
	var events []Event
	for i := range 10_001 { // over the count limit
		events = append(events, Event{Time: t0, Message: "x", Position: fmt.Sprint(i)})
	}
	for i := range 6 { // 6 × 256 KB: over the byte limit
		events = append(events, Event{Time: t0, Message: strings.Repeat("é", 200*1024), Position: fmt.Sprint("big", i)})
	}
	events = append(events,
		Event{Time: t0.Add(-time.Minute), Message: "", Position: "earlier, empty"},
		Event{Time: t0.Add(25 * time.Hour), Message: "a day later", Position: "last"})
	if err := s.ship(t.Context(), events); err != nil {
		t.Fatalf("shipping: %v", err)
	}
	got := f.stream("i-1/journal")
	if len(got) != len(events) {
		t.Errorf("%d events shipped, want %d", len(got), len(events))
	}
	if f.puts < 4 {
		t.Errorf("%d batches, want at least 4 (count, bytes, span)", f.puts)
	}
	for _, m := range got {
		if len(m) > maxMessageBytes || !utf8.ValidString(m) {
			t.Errorf("a message of %d bytes was not cut to the event limit at a character boundary", len(m))
		}
	}
	if pos, _ := s.position(); pos != "last" {
		t.Errorf("saved position %q, want that of the last event", pos)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
