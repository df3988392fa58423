// Package jobtrace reads and writes job histories: when each GitHub Actions job was created,
// started and completed, and its labels. It reads what GitHub's REST API returns for a workflow
// run's jobs ("List jobs for a workflow run", concatenated documents or arrays of jobs) and CSV
// with the columns created_at, started_at, completed_at, labels (labels separated by ';') and,
// optionally, run_id and workflow_name.
package jobtrace

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is one job of the history.
type Job struct {
	Created, Started, Completed time.Time
	Labels                      []string
	// RunID and Workflow name the job's workflow run (0 and "" when the history lacks them).
	RunID    int64
	Workflow string
}

// Duration is how long the job ran.
func (j Job) Duration() time.Duration { return j.Completed.Sub(j.Started) }

// Stats counts what Read skipped, so a caller can say so.
type Stats struct {
	Jobs int
	// Unfinished jobs (no started_at or completed_at: queued, in progress, or cancelled before a
	// runner took them) are skipped; so are jobs completed before they started.
	Unfinished, Inconsistent int
}

// apiJob is the part of GitHub's job object the history needs
// (https://docs.github.com/en/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run).
type apiJob struct {
	CreatedAt   *time.Time `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
	Labels      []string   `json:"labels"`
	RunID       int64      `json:"run_id"`
	Workflow    string     `json:"workflow_name"`
}

// Read reads a history, JSON or CSV (told apart by the first non-space byte), sorted by creation.
func Read(r io.Reader) ([]Job, Stats, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, Stats{}, errors.New("the job history is empty")
			}
			return nil, Stats{}, fmt.Errorf("reading the job history: %w", err)
		}
		if !bytes.ContainsAny(b, " \t\r\n") {
			break
		}
		_, _ = br.ReadByte()
	}
	first, _ := br.Peek(1)
	var jobs []Job
	var st Stats
	var err error
	if first[0] == '{' || first[0] == '[' {
		jobs, st, err = readJSON(br)
	} else {
		jobs, st, err = readCSV(br)
	}
	if err != nil {
		return nil, st, err
	}
	if len(jobs) == 0 {
		return nil, st, fmt.Errorf("the job history has no finished job (%d unfinished, %d inconsistent)", st.Unfinished, st.Inconsistent)
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return a.Created.Compare(b.Created) })
	return jobs, st, nil
}

func (st *Stats) add(jobs *[]Job, created, started, completed *time.Time, run Job) {
	switch {
	case created == nil || started == nil || completed == nil || created.IsZero() || started.IsZero() || completed.IsZero():
		st.Unfinished++
	case completed.Before(*started) || started.Before(created.Add(-time.Minute)):
		st.Inconsistent++
	default:
		st.Jobs++
		run.Created, run.Started, run.Completed = *created, *started, *completed
		*jobs = append(*jobs, run)
	}
}

func readJSON(r io.Reader) ([]Job, Stats, error) {
	dec := json.NewDecoder(r)
	var jobs []Job
	var st Stats
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return jobs, st, nil
		} else if err != nil {
			return nil, st, fmt.Errorf("job history document %d: %w", doc, err)
		}
		var list []apiJob
		if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, st, fmt.Errorf("job history document %d (an array of jobs): %w", doc, err)
			}
		} else {
			var page struct {
				Jobs *[]apiJob `json:"jobs"`
			}
			if err := json.Unmarshal(raw, &page); err != nil {
				return nil, st, fmt.Errorf("job history document %d: %w", doc, err)
			}
			if page.Jobs == nil {
				return nil, st, fmt.Errorf("job history document %d has no \"jobs\" array: is it the answer of GET /repos/OWNER/REPO/actions/runs/RUN_ID/jobs?", doc)
			}
			list = *page.Jobs
		}
		for _, j := range list {
			st.add(&jobs, j.CreatedAt, j.StartedAt, j.CompletedAt, Job{Labels: j.Labels, RunID: j.RunID, Workflow: j.Workflow})
		}
	}
}

// columns of the CSV form; the last two are optional.
var columns = []string{"created_at", "started_at", "completed_at", "labels", "run_id", "workflow_name"}

func readCSV(r io.Reader) ([]Job, Stats, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, Stats{}, fmt.Errorf("reading the CSV header: %w", err)
	}
	at := map[string]int{}
	for i, h := range head {
		at[strings.TrimSpace(strings.ToLower(h))] = i
	}
	for _, c := range columns[:3] {
		if _, ok := at[c]; !ok {
			return nil, Stats{}, fmt.Errorf("the CSV header %q lacks the column %s (need %s; optional: %s)", strings.Join(head, ","), c, strings.Join(columns[:4], ", "), strings.Join(columns[4:], ", "))
		}
	}
	var jobs []Job
	var st Stats
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return jobs, st, nil
		}
		if err != nil {
			return nil, st, fmt.Errorf("CSV line %d: %w", line, err)
		}
		var ts [3]*time.Time
		for k, c := range columns[:3] {
			v := field(rec, at[c])
			if v == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, st, fmt.Errorf("CSV line %d, %s: %w", line, c, err)
			}
			ts[k] = &t
		}
		var run Job
		if i, ok := at["labels"]; ok && field(rec, i) != "" {
			run.Labels = strings.Split(field(rec, i), ";")
		}
		if i, ok := at["run_id"]; ok && field(rec, i) != "" {
			if run.RunID, err = strconv.ParseInt(field(rec, i), 10, 64); err != nil || run.RunID <= 0 {
				return nil, st, fmt.Errorf("CSV line %d, run_id %q: want a positive integer", line, field(rec, i))
			}
		}
		if i, ok := at["workflow_name"]; ok {
			run.Workflow = field(rec, i)
		}
		st.add(&jobs, ts[0], ts[1], ts[2], run)
	}
}

func field(rec []string, i int) string {
	if i < len(rec) {
		return strings.TrimSpace(rec[i])
	}
	return ""
}

// WriteCSV writes jobs in the CSV form Read reads: with the run columns when a job has a run.
func WriteCSV(w io.Writer, jobs []Job) error {
	cw := csv.NewWriter(w)
	runs := slices.ContainsFunc(jobs, func(j Job) bool { return j.RunID != 0 || j.Workflow != "" })
	cols := columns[:4]
	if runs {
		cols = columns
	}
	if err := cw.Write(cols); err != nil {
		return err
	}
	for _, j := range jobs {
		rec := []string{j.Created.UTC().Format(time.RFC3339), j.Started.UTC().Format(time.RFC3339), j.Completed.UTC().Format(time.RFC3339), strings.Join(j.Labels, ";")}
		if runs {
			rec = append(rec, strconv.FormatInt(j.RunID, 10), j.Workflow)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WithLabel keeps the jobs that carry every one of labels (all jobs when none is given).
func WithLabel(jobs []Job, labels ...string) []Job {
	if len(labels) == 0 {
		return jobs
	}
	var out []Job
	for _, j := range jobs {
		if !slices.ContainsFunc(labels, func(l string) bool { return !slices.Contains(j.Labels, l) }) {
			out = append(out, j)
		}
	}
	return out
}
