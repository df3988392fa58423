package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const classesJSON = `{
  "default_runner_class": "linux",
  "resource_classes": {"small": {"cpu": 2, "memory_mib": 4096}},
  "runner_classes": {"linux": {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/pool", "launch_template_id": "lt-1", "subnets": ["subnet-a"], "idle_time": "20m"}}
}`

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func baseEnv(t *testing.T) map[string]string {
	return map[string]string{
		"RUNNERPOOL_TABLE":                "state",
		"RUNNERPOOL_DEPLOYMENT_ID":        "prod",
		"RUNNERPOOL_OIDC_AUDIENCE":        "https://runnerpool.example.com",
		"RUNNERPOOL_ALLOWED_REPOSITORIES": "Acme/API, other-org",
		"RUNNERPOOL_GITHUB_TOKEN":         "ghp_secret",
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  writeFile(t, "classes.json", classesJSON),
	}
}

func load(env map[string]string, args ...string) (Config, error) {
	return Load(args, func(k string) string { return env[k] }, io.Discard)
}

func TestLoadDefaultsAndPrecedence(t *testing.T) {
	t.Parallel()
	env := baseEnv(t)
	env["RUNNERPOOL_LEASE_TTL"] = "45s"
	env["RUNNERPOOL_LISTEN"] = "127.0.0.1:9000"
	c, err := load(env, "--listen", "127.0.0.1:9100", "--refresh-schedule", "*/20 * * * * *")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"flag wins over env", c.Listen, "127.0.0.1:9100"},
		{"env wins over default", c.LeaseTTL, 45 * time.Second},
		{"default", c.ConvergeSchedule, "@every 30s"},
		{"six-field schedule", c.RefreshSchedule, "*/20 * * * * *"},
		{"issuer default", c.OIDCIssuer, "https://token.actions.githubusercontent.com"},
		{"allowed lower-cased", strings.Join(c.Allowed, ","), "acme/api,other-org"},
		{"scopes default to allowed", strings.Join(c.Scopes(), ","), "acme/api,other-org"},
		{"token from env", c.GitHubToken, "ghp_secret"},
		{"classes", c.Classes.RunnerClasses["linux"].IdleTime, Duration(20 * time.Minute)},
		{"max body", c.MaxBodyBytes, int64(65536)},
		{"replica id generated", c.ReplicaID != "", true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if s := c.LogValue().String(); strings.Contains(s, "ghp_secret") {
		t.Errorf("the configuration's log value shows the token: %s", s)
	}
}

func TestLoadListsEveryProblem(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"RUNNERPOOL_LEASE_TTL":            "soon",
		"RUNNERPOOL_REFRESH_SCHEDULE":     "every minute",
		"RUNNERPOOL_ALLOWED_REPOSITORIES": "acme/api,bad_owner!",
		"RUNNERPOOL_MAX_BODY_BYTES":       "12",
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  writeFile(t, "c.json", `{"runner_classes": {"linux": {"queue_url": "x", "subnets": []}}, "typo": 1}`),
	}
	_, err := load(env, "--oidc-issuer", "ftp://x")
	if err == nil {
		t.Fatal("Load accepted a broken configuration")
	}
	for _, want := range []string{
		"table", "deployment-id", "oidc-audience", "oidc-issuer", "lease-ttl (RUNNERPOOL_LEASE_TTL)", "refresh-schedule",
		`"bad_owner!"`, "max-body-bytes", `unknown field "typo"`, "a token", "(--oidc-issuer)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestLoadUsage(t *testing.T) {
	t.Parallel()
	if _, err := load(baseEnv(t), "--nope"); !errors.Is(err, ErrUsage) {
		t.Errorf("unknown flag: %v, want ErrUsage", err)
	}
	if _, err := load(baseEnv(t), "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if _, err := load(baseEnv(t), "extra"); !errors.Is(err, ErrUsage) {
		t.Errorf("positional argument: %v, want ErrUsage", err)
	}
	env := baseEnv(t)
	env["RUNNERPOOL_GITHUB_APP_ID"] = "12"
	if _, err := load(env); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("token and app: %v", err)
	}
}

func TestParseClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, wantErr string
	}{
		{"valid", classesJSON, ""},
		{"unknown field", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "ami": "x"}}}`, `unknown field "ami"`},
		{"bad duration", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "idle_time": "forever"}}}`, "forever"},
		{"no classes", `{"runner_classes": {}}`, "no runner classes"},
		{"default missing", `{"default_runner_class": "gpu", "runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"]}}}`, `"gpu" is not a runner class`},
		{"trailing", classesJSON + `{}`, "trailing data"},
		{"empty resource class", `{"resource_classes": {"x": {}}, "runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"]}}}`, `resource class "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseClasses([]byte(tt.doc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ParseClasses: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ParseClasses: %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// TestDocsTable keeps docs/reconciler.md's settings table identical to the settings.
func TestDocsTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/reconciler.md")
	if err != nil {
		t.Fatalf("reading the documentation: %v", err)
	}
	if !strings.Contains(string(b), Markdown()) {
		t.Errorf("docs/reconciler.md does not contain the current settings table; replace it with:\n\n%s", Markdown())
	}
}
