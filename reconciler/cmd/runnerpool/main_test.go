package main

import (
	"bytes"
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
