package config

import (
	"errors"
	"flag"
	"io"
	"maps"
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
		{"rollback outlasts the release-signal wait", c.RollbackTimeout >= c.ReleaseSignalWait+30*time.Second, true},
		{"aws call timeout", c.AWSCallTimeout, 30 * time.Second},
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
		"RUNNERPOOL_ROLLBACK_TIMEOUT":     "2m",
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  writeFile(t, "c.json", `{"runner_classes": {"linux": {"queue_url": "x", "subnets": []}}, "typo": 1}`),
	}
	_, err := load(env, "--oidc-issuer", "ftp://x")
	if err == nil {
		t.Fatal("Load accepted a broken configuration")
	}
	for _, want := range []string{
		"table", "deployment-id", "oidc-audience", "oidc-issuer", "lease-ttl (RUNNERPOOL_LEASE_TTL)", "refresh-schedule",
		`"bad_owner!"`, "max-body-bytes", `unknown field "typo"`, "a token", "(--oidc-issuer)",
		"rollback-timeout 2m0s: at least release-signal-wait 2m0s",
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
		{"fifo pool", `{"runner_classes": {"linux": {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/pool.fifo", "launch_template_id": "lt", "subnets": ["s"]}}}`, "is a FIFO queue"},
		{"bad duration", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "idle_time": "forever"}}}`, "forever"},
		{"no classes", `{"runner_classes": {}}`, "no runner classes"},
		{"default missing", `{"default_runner_class": "gpu", "runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"]}}}`, `"gpu" is not a runner class`},
		{"trailing", classesJSON + `{}`, "trailing data"},
		{"tag key with a slash", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "tags": {"team": "ci", "k8s.io/x": "1"}}}}`, `tag key "k8s.io/x"`},
		{"class fields", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "instance_types": ["c7i.*"], "usage_class": "spot", "labels": ["gpu"]}}}`, ""},
		{"bad class fields", `{"runner_classes": {"linux": {"queue_url": "https://q", "launch_template_id": "lt", "subnets": ["s"], "instance_types": ["C7I"], "usage_class": "reserved", "labels": ["a b"]}}}`, `usage class "reserved"`},
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

// TestWarmPoolsAndTableSettings: warm pools are enabled by the pool job queue and then need a
// webhook secret (serve refuses to start without one); runner classes come from the table when no
// file is given; instance keys default to ARNs.
func TestWarmPoolsAndTableSettings(t *testing.T) {
	t.Parallel()
	const queue = "https://sqs.eu-west-1.amazonaws.com/123456789012/runnerpool-jobs"
	secretFile := writeFile(t, "webhook", "  file-s3cret\n")
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr []string // every one must appear; none: the load succeeds
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.WarmPools() || c.InstanceKeys != InstanceKeysARN || c.AWSAccountID != "" || c.ConfigCacheTTL != 5*time.Second {
				t.Errorf("defaults: warm=%v keys=%q account=%q ttl=%s", c.WarmPools(), c.InstanceKeys, c.AWSAccountID, c.ConfigCacheTTL)
			}
		}},
		{name: "job queue without a secret", env: map[string]string{"RUNNERPOOL_POOL_JOB_QUEUE_URL": queue},
			wantErr: []string{"--pool-job-queue-url routes GitHub webhooks to warm pools and needs the webhook secret", EnvWebhookSecret}},
		{name: "secret without a job queue", env: map[string]string{EnvWebhookSecret: "s"},
			wantErr: []string{"no --pool-job-queue-url"}},
		{name: "warm pools from the environment", env: map[string]string{
			"RUNNERPOOL_POOL_JOB_QUEUE_URL": queue, EnvWebhookSecret: " env-s3cret ", "RUNNERPOOL_WARM_POOL_SCOPE": "Acme",
		}, check: func(t *testing.T, c Config) {
			if !c.WarmPools() || c.WebhookSecret != "env-s3cret" || c.WarmPoolScope != "acme" || c.PoolJobQueueURL != queue {
				t.Errorf("warm pools: %v %q %q %q", c.WarmPools(), c.WebhookSecret, c.WarmPoolScope, c.PoolJobQueueURL)
			}
			if s := c.LogValue().String(); strings.Contains(s, "env-s3cret") {
				t.Errorf("the configuration's log value shows the webhook secret: %s", s)
			}
		}},
		{name: "secret from a file", env: map[string]string{"RUNNERPOOL_POOL_JOB_QUEUE_URL": queue},
			args: []string{"--webhook-secret-file", secretFile}, check: func(t *testing.T, c Config) {
				if c.WebhookSecret != "file-s3cret" {
					t.Errorf("secret from file = %q", c.WebhookSecret)
				}
			}},
		{name: "secret twice", env: map[string]string{"RUNNERPOOL_POOL_JOB_QUEUE_URL": queue, EnvWebhookSecret: "s"},
			args: []string{"--webhook-secret-file", secretFile}, wantErr: []string{"both " + EnvWebhookSecret}},
		{name: "bad values", env: map[string]string{
			"RUNNERPOOL_POOL_JOB_QUEUE_URL": "sqs://nope", "RUNNERPOOL_INSTANCE_KEYS": "name", "RUNNERPOOL_AWS_ACCOUNT_ID": "12345",
			"RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096,Big=x", "RUNNERPOOL_WARM_POOL_SCOPE": "bad_owner!", "RUNNERPOOL_DEFAULT_RUNNER_CLASS": "Linux",
		}, wantErr: []string{"pool-job-queue-url", "instance-keys", "12-digit", `"Big=x"`, "warm-pool-scope", "default-runner-class"}},
		{name: "table settings with a file", env: map[string]string{"RUNNERPOOL_DEFAULT_RUNNER_CLASS": "linux", "RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096"},
			wantErr: []string{"set default_runner_class and resource_classes in the file"}},
		{name: "runner classes from the table", env: map[string]string{
			"RUNNERPOOL_RUNNER_CLASSES_FILE": "-", "RUNNERPOOL_DEFAULT_RUNNER_CLASS": "linux",
			"RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096, large=8:16384", "RUNNERPOOL_INSTANCE_KEYS": "id", "RUNNERPOOL_AWS_ACCOUNT_ID": "123456789012",
		}, check: func(t *testing.T, c Config) {
			want := map[string]ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}, "large": {CPU: 8, MemoryMiB: 16384}}
			if c.ClassesFile != "" || c.RunnerClassSource() != "state table" || c.DefaultRunnerClass != "linux" || !maps.Equal(c.ResourceClasses, want) ||
				c.InstanceKeys != InstanceKeysID || c.AWSAccountID != "123456789012" {
				t.Errorf("table settings: %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			maps.Copy(env, tt.env)
			if env["RUNNERPOOL_RUNNER_CLASSES_FILE"] == "-" {
				delete(env, "RUNNERPOOL_RUNNER_CLASSES_FILE")
			}
			c, err := load(env, tt.args...)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				tt.check(t, c)
				return
			}
			if err == nil {
				t.Fatal("Load accepted the configuration")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestAPIHardeningSettings: the key set refetch interval (default 1m, at most 1h) and the trusted
// proxies (addresses or CIDRs; default none).
func TestAPIHardeningSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      map[string]string
		interval time.Duration
		proxies  []string
		wantErr  []string
	}{
		{name: "defaults", interval: time.Minute},
		{name: "set", env: map[string]string{"RUNNERPOOL_OIDC_KEY_REFETCH_INTERVAL": "5m", "RUNNERPOOL_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7,fd00::/8"},
			interval: 5 * time.Minute, proxies: []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/8"}},
		{name: "bad", env: map[string]string{"RUNNERPOOL_OIDC_KEY_REFETCH_INTERVAL": "2h", "RUNNERPOOL_TRUSTED_PROXIES": "10.0.0.0/8,lb.internal"},
			wantErr: []string{"oidc-key-refetch-interval", "at most 1h", "trusted-proxies", `"lb.internal"`}},
		{name: "zero interval", env: map[string]string{"RUNNERPOOL_OIDC_KEY_REFETCH_INTERVAL": "0s"}, wantErr: []string{"oidc-key-refetch-interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			maps.Copy(env, tt.env)
			c, err := load(env)
			if len(tt.wantErr) > 0 {
				for _, want := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("error %v does not mention %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			var got []string
			for _, p := range c.TrustedProxies {
				got = append(got, p.String())
			}
			if c.OIDCKeyRefetchInterval != tt.interval || strings.Join(got, " ") != strings.Join(tt.proxies, " ") {
				t.Errorf("interval %s proxies %v, want %s %v", c.OIDCKeyRefetchInterval, got, tt.interval, tt.proxies)
			}
		})
	}
}
