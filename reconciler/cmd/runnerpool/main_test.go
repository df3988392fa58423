package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"version", []string{"version"}, 0, "runnerpool dev", ""},
		{"version flag", []string{"--version"}, 0, "runnerpool dev", ""},
		{"help", []string{"--help"}, 0, "provision", ""},
		{"no args", nil, 2, "", "Usage: runnerpool"},
		{"unknown", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

// TestServeRefusesJobQueueWithoutSecret: with a pool job queue (warm pools, webhook routing) and no
// webhook secret, `runnerpool serve` does not start: it exits 1 saying why, before touching AWS.
// It sets the process environment, so it does not run in parallel.
func TestServeRefusesJobQueueWithoutSecret(t *testing.T) {
	for k, v := range map[string]string{
		"RUNNERPOOL_TABLE": "state", "RUNNERPOOL_DEPLOYMENT_ID": "prod", "RUNNERPOOL_OIDC_AUDIENCE": "https://runnerpool.example.com",
		"RUNNERPOOL_ALLOWED_REPOSITORIES": "acme", "RUNNERPOOL_GITHUB_TOKEN": "ghp_x", "RUNNERPOOL_LISTEN": "127.0.0.1:0",
		"RUNNERPOOL_POOL_JOB_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/runnerpool-jobs",
		"RUNNERPOOL_WEBHOOK_SECRET":     "", "RUNNERPOOL_WEBHOOK_SECRET_FILE": "", "RUNNERPOOL_RUNNER_CLASSES_FILE": "",
	} {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"serve"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "needs the webhook secret (RUNNERPOOL_WEBHOOK_SECRET or --webhook-secret-file)") {
		t.Errorf("serve with a job queue and no secret: exit %d, stderr %q; want 1 and the reason", code, stderr.String())
	}
}

// TestSimulateCommittedWeek runs `runnerpool simulate` on the committed weeks as docs/autoscale.md
// shows them (its tables are this output: the first week, whose jobs carry no runs, and the week
// whose jobs carry their runs) and on a GitHub jobs export: the policies, and a PNG chart.
func TestSimulateCommittedWeek(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/autoscale.md")
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(t.TempDir(), "week.png")
	data := "../../../internal/jobtrace/testdata/"
	for _, tt := range []struct {
		week, before string
		want         []string
	}{
		{"week.csv.gz", "week-before.csv.gz", []string{"18167 jobs"}},
		{"week-runs.csv.gz", "week-runs-before.csv.gz", []string{"17006 jobs", "autoscaler, runs ignored", "the same, runs ignored"}},
		{"week-asia.csv.gz", "week-asia-before.csv.gz", []string{"21424 jobs"}}, // a held-out week
	} {
		var stdout, stderr bytes.Buffer
		args := []string{"simulate", "-label", "pool=ci", "-history", data + tt.before, "-chart", chart, data + tt.week}
		if code := run(t.Context(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("runnerpool simulate %s: exit %d\n%s", tt.week, code, stderr.String())
		}
		for _, want := range append(tt.want, "cold only", "fixed schedule", "autoscaler", "idle instance-hours / fixed schedule's", "the history's fixed schedule's") {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", tt.week, want, stdout.String())
			}
		}
		_, table, _ := strings.Cut(stdout.String(), "\n\n")
		if !strings.Contains(string(doc), table) {
			t.Errorf("docs/autoscale.md does not show the output on %s:\n%s", tt.week, table)
		}
	}
	var stdout, stderr bytes.Buffer
	png, err := os.ReadFile(chart)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("chart: %v, %d bytes, want a PNG", err, len(png))
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"simulate", "../../../internal/jobtrace/testdata/run-jobs.json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("runnerpool simulate on a GitHub export: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "2 jobs") {
		t.Errorf("GitHub export: %s", stdout.String())
	}
	if code := run(t.Context(), []string{"simulate", "-label", "gpu", "../../../internal/jobtrace/testdata/run-jobs.json"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no finished job carries the labels") {
		t.Errorf("an unmatched label: exit %d, %s", code, stderr.String())
	}
}
