package jobtrace

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadGitHubJobsExport(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/run-jobs.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	jobs, st, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || st.Unfinished != 1 {
		t.Fatalf("read %d jobs, %d unfinished; want 2 and 1 (the queued one)", len(jobs), st.Unfinished)
	}
	// Sorted by creation: lint (08:59) before build (09:00).
	if jobs[0].Created.Minute() != 59 || jobs[1].Duration() != 4*time.Minute+19*time.Second {
		t.Errorf("jobs %+v: want lint first, build running 4m19s", jobs)
	}
	if got := WithLabel(jobs, "pool=ci"); len(got) != 1 || got[0].Labels[0] != "self-hosted" {
		t.Errorf("WithLabel(pool=ci) = %+v, want the build job", got)
	}
}

func TestReadCSVAndErrors(t *testing.T) {
	t.Parallel()
	ok := "created_at,started_at,completed_at,labels\n2026-11-02T09:00:00Z,2026-11-02T09:00:05Z,2026-11-02T09:01:00Z,a;b\n"
	jobs, _, err := Read(strings.NewReader(ok))
	if err != nil || len(jobs) != 1 || len(jobs[0].Labels) != 2 {
		t.Fatalf("Read(csv) = %+v, %v", jobs, err)
	}
	for _, tt := range []struct{ name, in, want string }{
		{"empty", "  \n", "empty"},
		{"missing column", "created_at,labels\nx,y\n", "lacks the column started_at"},
		{"bad time", "created_at,started_at,completed_at\nnoon,2026-11-02T09:00:05Z,2026-11-02T09:01:00Z\n", "line 2, created_at"},
		{"not a jobs page", `{"workflow_runs": []}`, `no "jobs" array`},
		{"broken JSON", `{"jobs": [`, "document 1"},
		{"nothing finished", `{"jobs": [{"created_at": "2026-11-02T09:00:00Z"}]}`, "no finished job"},
		{"completed before started", "created_at,started_at,completed_at\n2026-11-02T09:00:00Z,2026-11-02T09:05:00Z,2026-11-02T09:01:00Z\n", "1 inconsistent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := Read(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestCommittedWeekIsTheGenerators shows testdata/week.csv.gz is what the generator writes with
// the documented parameters and seed 1, so the figures built on it can be rebuilt.
func TestCommittedWeekIsTheGenerators(t *testing.T) {
	t.Parallel()
	before := DefaultParams()
	before.Start = before.Start.AddDate(0, 0, -7)
	got := readGzip(t, "testdata/week-before.csv.gz")
	var want bytes.Buffer
	if err := WriteCSV(&want, Generate(before, 2)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("testdata/week-before.csv.gz differs from the generator's: go run ./internal/jobtrace/cmd/tracegen -seed 2 -weeks-before 1 -o internal/jobtrace/testdata/week-before.csv.gz")
	}
	checkWeek(t, readGzip(t, "testdata/week.csv.gz"))
}

func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func checkWeek(t *testing.T, got []byte) {
	t.Helper()
	var want bytes.Buffer
	if err := WriteCSV(&want, Generate(DefaultParams(), 1)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("testdata/week.csv.gz differs from the generator's week: go run ./internal/jobtrace/cmd/tracegen -seed 1 -o internal/jobtrace/testdata/week.csv.gz")
	}
	jobs, _, err := Read(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	var weekend, fanout int
	perMinute := map[time.Time]int{}
	for _, j := range jobs {
		if wd := j.Created.Weekday(); wd == time.Saturday || wd == time.Sunday {
			weekend++
		}
		perMinute[j.Created.Truncate(time.Minute)]++
	}
	for _, n := range perMinute {
		fanout = max(fanout, n)
	}
	// The documented shape: a quiet weekend, fan-outs up to 200 jobs.
	if weekend*10 > len(jobs) || fanout < 100 {
		t.Errorf("%d jobs, %d on the weekend, largest minute %d: not the documented week", len(jobs), weekend, fanout)
	}
}
