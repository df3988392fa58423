package agentcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(Options) bool
	}{
		{"defaults", []string{"-table", "t1"}, "", func(o Options) bool {
			return o.Notice == "imds-tags" && o.Runner == "actions" && o.WorkDir == "/opt/actions-runner/_work" &&
				o.RunnerUser == "runner" && o.Heartbeat == 5*time.Minute && o.Grace == 2*time.Minute && o.InstanceKeys == KeysARN &&
				o.RunnerManifest == "/var/lib/runnerpool/runner.sha256" && o.TempDirs == "/tmp,/var/tmp,/dev/shm,/run/lock,/var/crash,/dev/mqueue"
		}},
		{"runner manifest", []string{"-table", "t1", "-runner-manifest", "/etc/runnerpool/runner.sha256"}, "", func(o Options) bool {
			return o.RunnerManifest == "/etc/runnerpool/runner.sha256"
		}},
		{"id keys", []string{"-table", "t1", "-instance-keys", "id"}, "", func(o Options) bool { return o.InstanceKeys == KeysID }},
		{"bad instance keys", []string{"-table", "t", "-instance-keys", "name"}, "-instance-keys", nil},
		{"user data flags", []string{"-table", "t1", "-region", "eu-central-1", "-notice", "poll", "-runner", "actions",
			"-runner-dir", "/opt/actions-runner", "-runner-user", "runner", "-state-dir", "/var/lib/runnerpool",
			"-pre-runner-script", "/opt/runnerpool/pre-runner.sh"}, "", func(o Options) bool {
			return o.Notice == "poll" && o.Region == "eu-central-1" && o.PreRunnerScript == "/opt/runnerpool/pre-runner.sh"
		}},
		{"job access", []string{"-table", "t1", "-job-access", "root"}, "", func(o Options) bool { return o.JobAccess == "root" }},
		{"job access default", []string{"-table", "t1"}, "", func(o Options) bool { return o.JobAccess == "user" }},
		{"bad job access", []string{"-table", "t1", "-job-access", "admin"}, "-job-access", nil},
		{"no table", nil, "-table", nil},
		{"bad notice", []string{"-table", "t", "-notice", "sqs"}, "notice", nil},
		{"bad runner", []string{"-table", "t", "-runner", "docker"}, "-runner", nil},
		{"fake without url", []string{"-table", "t", "-runner", "fake"}, "fake-github-url", nil},
		{"fake", []string{"-table", "t", "-runner", "fake", "-fake-github-url", "http://127.0.0.1:1"}, "", func(o Options) bool { return o.Runner == "fake" }},
		{"relative runner dir", []string{"-table", "t", "-runner-dir", "runner"}, "absolute", nil},
		{"extra args", []string{"-table", "t", "now"}, "unexpected", nil},
		{"bad log level", []string{"-table", "t", "-log-level", "loud"}, "log-level", nil},
		{"unknown flag", []string{"-frobnicate"}, "usage", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			o, err := Parse(tt.args, &stderr, testFakeDriver())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v (%s)", err, stderr.String())
				}
				if !tt.check(o) {
					t.Errorf("options = %+v", o)
				}
				return
			}
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error()+stderr.String(), tt.wantErr) {
				t.Errorf("err = %v, stderr %q; want a usage error mentioning %q", err, stderr.String(), tt.wantErr)
			}
		})
	}
	if _, err := Parse([]string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v, want flag.ErrHelp", err)
	}
	// Without the driver (the runnerpool binary), -runner fake and its flags do not exist.
	for _, args := range [][]string{{"-table", "t", "-runner", "fake"}, {"-table", "t", "-fake-github-url", "http://x"}} {
		if _, err := Parse(args, &bytes.Buffer{}); !errors.Is(err, ErrUsage) {
			t.Errorf("Parse(%q) without drivers: err = %v, want a usage error", args, err)
		}
	}
}

// testFakeDriver is the demo binary's -runner fake (test/cmd/runnerpool-demo): the fake runner
// is test code, so only the binaries that may link it offer it.
func testFakeDriver() Driver {
	var url string
	var job time.Duration
	return Driver{
		Name: "fake",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&url, "fake-github-url", "", "fake runner: the GitHub fake's URL")
			fs.DurationVar(&job, "fake-job-duration", time.Second, "fake runner: how long each job takes")
			return func() error {
				if url == "" {
					return errors.New("needs -fake-github-url")
				}
				return nil
			}
		},
		Configure: func(cfg *agent.Config, o Options, log *slog.Logger) {
			cfg.RunnerUser, cfg.TempDirs, cfg.CleanHome, cfg.Docker = "", nil, false, ""
			cfg.NewRunner = func(string) (runner.Runner, error) {
				return fakerunner.New(fakerunner.Options{BaseURL: url, Dir: o.RunnerDir, WorkDir: o.WorkDir, JobDuration: job, Logger: log})
			}
		},
	}
}

// TestRunFakeRunner runs the command as the demo would: real SDK clients configured from the
// environment (endpoints, credentials), the IMDS endpoint from the environment, and the fake runner,
// with both key modes. With arn keys (the default) the agent finds its record only under the
// instance's ARN, built from the identity document's region and account (the EC2 server's
// us-east-1 and 123456789012). It changes the process environment, so it does not run in parallel.
func TestRunFakeRunner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		prefix string
	}{
		{"arn keys by default", nil, "arn:aws:ec2:us-east-1:123456789012:instance/"},
		{"id keys", []string{"-instance-keys", "id"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { runFakeRunner(t, tc.args, tc.prefix) })
	}
}

func runFakeRunner(t *testing.T, extraArgs []string, prefix string) {
	st := stacktest.Shared(t)
	table := stacktest.UniqueName(t, "agentcmd")
	if err := store.CreateTable(t.Context(), st.DynamoDB(), table); err != nil {
		t.Fatal(err)
	}
	s := store.New(st.DynamoDB(), table, store.WithInstanceKeyPrefix(prefix))
	gh := githubfake.New(githubfake.Options{})
	ghs := httptest.NewServer(gh)
	defer ghs.Close()
	ecs := ec2server.New(ec2server.Options{PendingDelay: 10 * time.Millisecond,
		Runtime: func(ctx context.Context, _ ec2server.RuntimeInstance) { <-ctx.Done() }})
	ecsrv := httptest.NewServer(ecs)
	defer func() { ecs.Close(); ecsrv.Close() }()
	client := ec2.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")},
		func(o *ec2.Options) { o.BaseEndpoint = aws.String(ecsrv.URL) })
	out, err := client.RunInstances(t.Context(), &ec2.RunInstancesInput{ImageId: aws.String("ami-1"),
		InstanceType: ec2types.InstanceTypeM6iLarge, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		MetadataOptions: &ec2types.InstanceMetadataOptionsRequest{InstanceMetadataTags: ec2types.InstanceMetadataTagsStateEnabled}})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	var endpoint string
	for deadline := time.Now().Add(10 * time.Second); endpoint == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		v, _ := ecs.Instance(id)
		endpoint = v.IMDSEndpoint
	}

	// The control plane's part: a created record for a run and its registration credential.
	req, _ := http.NewRequest(http.MethodPost, ghs.URL+"/repos/acme/api/actions/runners/registration-token", nil)
	req.Header.Set("Authorization", "token "+gh.PAT())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err := s.PutCredential(t.Context(), id, store.Credential{Kind: store.CredentialRegistration, RunID: "77",
		URL: "https://github.example/acme/api", Token: tok.Token, Labels: []string{"77"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(t.Context(), store.Instance{ID: id, State: store.StateCreated, RunID: "77", Threshold: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", st.Endpoints.DynamoDB)
	t.Setenv("AWS_ENDPOINT_URL_EC2", ecsrv.URL)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("RUNNERPOOL_TABLE", table)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, append([]string{"-runner", "fake", "-fake-github-url", ghs.URL, "-runner-dir", dir + "/runner",
			"-state-dir", dir + "/state", "-heartbeat", "200ms"}, extraArgs...), &bytes.Buffer{}, &syncWriter{b: &bytes.Buffer{}}, testFakeDriver())
	}()
	var last store.SignalRecord
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if last, err = s.LastSignal(t.Context(), id); err == nil && last.Signal == store.SignalRegistered {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if last.Signal != store.SignalRegistered || last.RunID != "77" {
		t.Fatalf("last signal %+v, want UD_REG_OK for 77", last)
	}
	rs := gh.Runners("acme", "api")
	if len(rs) != 1 || rs[0].Name != "runnerpool-"+id {
		t.Errorf("runners = %+v, want runnerpool-%s", rs, id)
	}
}

// syncWriter guards a buffer written by the agent's goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// fakeDocument is an IMDS identity document source.
type fakeDocument struct {
	doc imds.InstanceIdentityDocument
}

func (f fakeDocument) GetInstanceIdentityDocument(context.Context, *imds.GetInstanceIdentityDocumentInput, ...func(*imds.Options)) (*imds.GetInstanceIdentityDocumentOutput, error) {
	return &imds.GetInstanceIdentityDocumentOutput{InstanceIdentityDocument: f.doc}, nil
}

func TestInstanceKeyPrefix(t *testing.T) {
	t.Parallel()
	doc := imds.InstanceIdentityDocument{Region: "eu-central-1", AccountID: "111122223333", InstanceID: "i-0abc"}
	tests := []struct {
		name, mode string
		doc        imds.InstanceIdentityDocument
		want, err  string
	}{
		{"arn", KeysARN, doc, "arn:aws:ec2:eu-central-1:111122223333:instance/", ""},
		{"gov cloud", KeysARN, imds.InstanceIdentityDocument{Region: "us-gov-west-1", AccountID: "111122223333"}, "arn:aws-us-gov:ec2:us-gov-west-1:111122223333:instance/", ""},
		{"id", KeysID, doc, "", ""},
		{"no account", KeysARN, imds.InstanceIdentityDocument{Region: "eu-central-1"}, "", "without region or account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := InstanceKeyPrefix(t.Context(), fakeDocument{tt.doc}, tt.mode)
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("error = %v, want one mentioning %q", err, tt.err)
			case tt.err == "" && (err != nil || got != tt.want):
				t.Errorf("prefix = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestConfigRunnerIntegrity: the actions runner's installation is always verified against its manifest;
// the fake runner, which has none, explicitly verifies nothing and kills no user's processes.
func TestConfigRunnerIntegrity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args                  []string
		wantDir, wantManifest string
		wantUser              string
	}{
		{[]string{"-table", "t1", "-instance-keys", "id"}, "/opt/actions-runner", "/var/lib/runnerpool/runner.sha256", "runner"},
		{[]string{"-table", "t1", "-instance-keys", "id", "-runner", "fake", "-fake-github-url", "http://127.0.0.1:1"}, "", "", ""},
	} {
		fake := testFakeDriver()
		o, err := Parse(tc.args, io.Discard, fake)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Config(t.Context(), o, io.Discard, fake)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.RunnerDir != tc.wantDir || cfg.RunnerManifest != tc.wantManifest || cfg.RunnerUser != tc.wantUser {
			t.Errorf("%v: runner dir %q, manifest %q, user %q; want %q, %q, %q", tc.args, cfg.RunnerDir, cfg.RunnerManifest,
				cfg.RunnerUser, tc.wantDir, tc.wantManifest, tc.wantUser)
		}
	}
}
