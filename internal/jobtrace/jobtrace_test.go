package jobtrace

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"slices"
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
	if jobs[1].RunID != 29679449 || jobs[1].Workflow != "CI" {
		t.Errorf("build job's run %d, workflow %q; want the export's run_id 29679449 and workflow_name CI", jobs[1].RunID, jobs[1].Workflow)
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
		{"bad run id", "created_at,started_at,completed_at,run_id\n2026-11-02T09:00:00Z,2026-11-02T09:00:05Z,2026-11-02T09:01:00Z,x7\n", "line 2, run_id \"x7\""},
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

// TestCSVRunColumns: the run columns are optional on read and written only when jobs have runs, so
// a history without them reads and writes as before.
func TestCSVRunColumns(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		jobs []Job
		head string
	}{
		{"without runs", []Job{{Created: at, Started: at, Completed: at.Add(time.Minute), Labels: []string{"a"}}}, "created_at,started_at,completed_at,labels\n"},
		{"with runs", []Job{{Created: at, Started: at, Completed: at.Add(time.Minute), RunID: 7, Workflow: "test, matrix"}}, "created_at,started_at,completed_at,labels,run_id,workflow_name\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := WriteCSV(&buf, tt.jobs); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(buf.String(), tt.head) {
				t.Errorf("header of %q, want %q", buf.String(), tt.head)
			}
			got, _, err := Read(&buf)
			if err != nil || len(got) != 1 || got[0].RunID != tt.jobs[0].RunID || got[0].Workflow != tt.jobs[0].Workflow || !got[0].Completed.Equal(tt.jobs[0].Completed) {
				t.Errorf("read back %+v, %v; want %+v", got, err, tt.jobs)
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

// TestCommittedRunsWeekIsTheGenerators shows testdata/week-runs.csv.gz and week-runs-before.csv.gz
// are the generator's with RunsParams (seeds 1 and 2), and that they have the documented shape:
// every job carries its run, the matrix workflows keep one size and half of them (by the drawn
// share) queue their matrix only when their setup job completed.
func TestCommittedRunsWeekIsTheGenerators(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path  string
		seed  uint64
		weeks int
	}{{"testdata/week-runs.csv.gz", 1, 0}, {"testdata/week-runs-before.csv.gz", 2, 1}} {
		p := RunsParams()
		p.Start = p.Start.AddDate(0, 0, -7*tt.weeks)
		var want bytes.Buffer
		if err := WriteCSV(&want, Generate(p, tt.seed)); err != nil {
			t.Fatal(err)
		}
		got := readGzip(t, tt.path)
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%s differs from the generator's: go run ./internal/jobtrace/cmd/tracegen -runs -seed %d -weeks-before %d -o internal/jobtrace/%s", tt.path, tt.seed, tt.weeks, tt.path)
		}
	}
	jobs, _, err := Read(bytes.NewReader(readGzip(t, "testdata/week-runs.csv.gz")))
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		workflow        string
		first, matrixAt time.Time
		jobs            int
	}
	runs, sizes := map[int64]*run{}, map[string]map[int]bool{}
	for _, j := range jobs {
		if j.RunID == 0 || j.Workflow == "" {
			t.Fatalf("job %+v has no run", j)
		}
		r, ok := runs[j.RunID]
		if !ok {
			r = &run{workflow: j.Workflow, first: j.Created}
			runs[j.RunID] = r
		}
		r.jobs++
		if j.Created.After(r.first) {
			r.matrixAt = j.Created
		}
	}
	setup := map[string]bool{}
	for _, r := range runs {
		w := r.workflow
		if strings.HasSuffix(w, "/ci") {
			continue
		}
		if sizes[w] == nil {
			sizes[w] = map[int]bool{}
		}
		sizes[w][r.jobs] = true
		setup[w] = !r.matrixAt.IsZero()
	}
	withSetup := 0
	for w, s := range sizes {
		if len(s) != 1 {
			t.Errorf("%s fans out to %v jobs: a matrix workflow keeps one size", w, s)
		}
		if setup[w] {
			withSetup++
		}
	}
	if withSetup == 0 || withSetup == len(sizes) {
		t.Errorf("%d of %d matrix workflows run a setup job first, want some and not all (share %.2f)", withSetup, len(sizes), RunsParams().Runs.SetupShare)
	}
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

// TestCommittedHeldOutWeeksAreTheGenerators shows the held-out weeks and their weeks before are
// the generator's (HeldOut, seeds 1 and 2), with the shapes docs/autoscale.md describes: the
// americas week holds three runner classes, each under its own label.
func TestCommittedHeldOutWeeksAreTheGenerators(t *testing.T) {
	t.Parallel()
	for name, classes := range HeldOut() {
		for _, tt := range []struct {
			suffix string
			seed   uint64
			weeks  int
		}{{"", 1, 0}, {"-before", 2, 1}} {
			path := "testdata/week-" + name + tt.suffix + ".csv.gz"
			cs := slices.Clone(classes)
			for i := range cs {
				cs[i].Start = cs[i].Start.AddDate(0, 0, -7*tt.weeks)
			}
			var want bytes.Buffer
			if err := WriteCSV(&want, GenerateClasses(cs, tt.seed)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readGzip(t, path), want.Bytes()) {
				t.Errorf("%s differs from the generator's: go run ./internal/jobtrace/cmd/tracegen -heldout %s -seed %d -weeks-before %d -o internal/jobtrace/%s", path, name, tt.seed, tt.weeks, path)
			}
		}
	}
	jobs, _, err := Read(bytes.NewReader(readGzip(t, "testdata/week-americas.csv.gz")))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"pool=linux", "pool=arm", "pool=gpu"} {
		if n := len(WithLabel(jobs, l)); n < 100 {
			t.Errorf("%s: %d jobs, want a class of its own", l, n)
		}
	}
}
