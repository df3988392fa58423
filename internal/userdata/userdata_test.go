package userdata

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// validParams is a complete, valid set of parameters.
func validParams() Params {
	return Params{
		Table: "runnerpool-prod", Region: "eu-central-1",
		AgentX64:   Artifact{URL: "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)},
		AgentARM64: Artifact{URL: "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_arm64", SHA256: strings.Repeat("cd", 32)},
	}
}

const preRunner = "#!/bin/bash\nset -e\n# quotes ' \" $HOME `x` and a heredoc marker\ncat <<'UNIT'\nUNIT\napt-get install -y jq\n"

var goldenCases = []struct {
	name string
	p    func(*Params)
}{
	{"x64", func(p *Params) { p.Arch = ArchX64 }},
	{"arm64", func(p *Params) { p.Arch = ArchARM64 }},
	{"x64-pre-runner", func(p *Params) { p.Arch = ArchX64; p.PreRunnerScript = preRunner }},
	{"arm64-pre-runner-poll", func(p *Params) { p.Arch = ArchARM64; p.PreRunnerScript = preRunner; p.Notice = "poll" }},
	{"any-arch", func(p *Params) {}},
	{"x64-id-keys", func(p *Params) { p.Arch = ArchX64; p.InstanceKeys = KeysID }},
	{"x64-allow-job-metadata", func(p *Params) { p.Arch = ArchX64; p.AllowJobMetadata = true }},
	{"x64-log-group", func(p *Params) { p.Arch = ArchX64; p.LogGroup = "/runnerpool/prod/instances" }},
}

func render(t *testing.T, mod func(*Params)) string {
	t.Helper()
	p := validParams()
	mod(&p)
	out, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := render(t, tc.p)
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("reading golden file (run go test -update): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rendered user data differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestShellcheck runs Debian's shellcheck on every rendered variant. It fails when shellcheck is
// missing: CI installs it (apt-get install shellcheck).
func TestShellcheck(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatalf("shellcheck not found on PATH (Debian: apt-get install shellcheck): %v", err)
	}
	cases := append([]struct {
		name string
		p    func(*Params)
	}{}, goldenCases...)
	// The metadata block script is a heredoc of the user data, which shellcheck does not look into.
	cases = append(cases, struct {
		name string
		p    func(*Params)
	}{"block-job-metadata.sh", nil})
	for _, access := range []string{"docker", "root"} {
		cases = append(cases, struct {
			name string
			p    func(*Params)
		}{"job-access-" + access, func(p *Params) { p.JobAccess = access }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			script := ""
			if tc.p == nil {
				script = blockScript(t, render(t, func(*Params) {}))
			} else {
				script = render(t, tc.p)
			}
			cmd := exec.CommandContext(t.Context(), bin, "--shell=bash", "--severity=style", "-")
			cmd.Stdin = strings.NewReader(script)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Errorf("shellcheck: %v\n%s", err, out.String())
			}
		})
	}
}

// blockScript is the metadata block script the user data writes (its heredoc).
func blockScript(t *testing.T, script string) string {
	t.Helper()
	start := strings.Index(script, "<<'BLOCK'\n")
	end := strings.Index(script, "\nBLOCK\n")
	if start < 0 || end < start {
		t.Fatalf("no block script in the rendered user data")
	}
	return script[start+len("<<'BLOCK'\n") : end+1]
}

// TestRenderContent checks what the script must do, independent of the golden files' wording.
func TestRenderContent(t *testing.T) {
	t.Parallel()
	withPre := render(t, func(p *Params) { p.PreRunnerScript = preRunner })
	without := render(t, func(p *Params) { p.Arch = ArchX64 })
	for _, want := range []string{
		"X-aws-ec2-metadata-token-ttl-seconds", // IMDSv2 token PUT
		"sha256sum --check",
		"actions-runner-linux-${arch}-${RUNNER_VERSION}.tar.gz",
		"readonly RUNNER_VERSION='" + RunnerVersion + "'",
		PinOf(runnerversion.Default).SHA256X64, PinOf(runnerversion.Default).SHA256ARM64,
		"useradd", "systemctl enable " + ServiceName + "\nsystemctl start " + ServiceName,
		"-table runnerpool-prod -region eu-central-1 -notice imds-tags -runner actions",
		"-pre-runner-script " + PreRunnerPath,
		"-state-dir " + StateDir + " -instance-keys arn", // the default: the reconciler's default
		// The runner installation: root's, the top directory sticky, its manifest root-only and
		// named to the agent.
		"--no-same-owner", `chown -R root:root "${RUNNER_DIR}"`, `chmod 1775 "${RUNNER_DIR}"`,
		`sha256sum) > "${STATE_DIR}/runner.sha256"`, `chmod 0600 "${STATE_DIR}/runner.sha256"`,
		"-runner-manifest " + ManifestPath,
	} {
		if !strings.Contains(withPre, want) {
			t.Errorf("rendered script lacks %q", want)
		}
	}
	if strings.Contains(withPre, "apt-get install -y jq") {
		t.Errorf("pre-runner script appears unencoded in the user data")
	}
	if strings.Contains(withPre, `chown -R "${RUNNER_USER}`) {
		t.Errorf("the runner installation is handed to the runner user")
	}
	if idKeys := render(t, func(p *Params) { p.InstanceKeys = KeysID }); !strings.Contains(idKeys, " -instance-keys id") {
		t.Errorf("instance keys id not passed to the agent")
	}
	if strings.Contains(without, "pre-runner") || strings.Contains(without, PinOf(runnerversion.Default).SHA256ARM64) {
		t.Errorf("x64 script without pre-runner mentions a pre-runner or the arm64 runner")
	}
	if strings.Contains(withPre, "169.254.169.254/latest/meta-data") && !strings.Contains(withPre, "X-aws-ec2-metadata-token: ${token}") {
		t.Errorf("metadata read without a token")
	}
}

// TestRenderJobMetadata: by default the runner user and containers are blocked from the instance
// metadata service (IPv4 and IPv6) by rules a boot-time unit applies before docker and the agent, and
// the agent needs that unit; AllowJobMetadata renders none of it.
func TestRenderJobMetadata(t *testing.T) {
	t.Parallel()
	blocked := render(t, func(p *Params) { p.Arch = ArchX64 })
	allowed := render(t, func(p *Params) { p.Arch = ArchX64; p.AllowJobMetadata = true })
	for _, want := range []string{
		`-C OUTPUT -d "${addr}" -m owner --uid-owner ` + RunnerUser + ` -j REJECT`,
		`-I OUTPUT 1 -d "${addr}" -m owner --uid-owner ` + RunnerUser + ` -j REJECT`,
		`-N DOCKER-USER`, `-I DOCKER-USER 1 -d "${addr}" -j REJECT`, `-I FORWARD 1 -j DOCKER-USER`,
		"block iptables 169.254.169.254", "block ip6tables fd00:ec2::254",
		"Before=docker.service " + ServiceName,
		"systemctl enable runnerpool-block-job-metadata.service\nsystemctl start runnerpool-block-job-metadata.service",
		"Requires=runnerpool-block-job-metadata.service",
	} {
		if !strings.Contains(blocked, want) {
			t.Errorf("default script lacks %q", want)
		}
	}
	for _, unwanted := range []string{"iptables", "DOCKER-USER", "block-job-metadata"} {
		if strings.Contains(allowed, unwanted) {
			t.Errorf("script with AllowJobMetadata contains %q", unwanted)
		}
	}
	// The systemd unit must start the block before the agent: the agent's unit orders itself after it.
	if i, j := strings.Index(blocked, "runnerpool-block-job-metadata.service <<"), strings.Index(blocked, "systemctl start "+ServiceName); i < 0 || j < i {
		t.Errorf("the block unit is not installed before the agent starts")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mod     func(*Params)
		wantErr string
	}{
		{"valid", func(*Params) {}, ""},
		{"valid x64 only without arm64 artifact", func(p *Params) { p.Arch = ArchX64; p.AgentARM64 = Artifact{} }, ""},
		{"empty table", func(p *Params) { p.Table = "" }, "table"},
		{"table with space", func(p *Params) { p.Table = "a b c" }, "table"},
		{"table injection", func(p *Params) { p.Table = "t;reboot" }, "table"},
		{"region", func(p *Params) { p.Region = "us-east-1\nreboot" }, "region"},
		{"notice", func(p *Params) { p.Notice = "sqs" }, "notice"},
		{"instance keys", func(p *Params) { p.InstanceKeys = "name" }, "instance keys"},
		{"instance keys injection", func(p *Params) { p.InstanceKeys = "arn\nreboot" }, "instance keys"},
		{"arch", func(p *Params) { p.Arch = "riscv64" }, "arch"},
		{"http url", func(p *Params) { p.AgentX64.URL = "http://example.com/a" }, "https"},
		{"url with quote", func(p *Params) { p.AgentX64.URL = "https://example.com/a'b" }, "contains"},
		{"url with newline", func(p *Params) { p.AgentARM64.URL = "https://example.com/a\nrm -rf /" }, "contains"},
		{"url with dollar", func(p *Params) { p.AgentARM64.URL = "https://example.com/$(id)" }, "contains"},
		{"url with credentials", func(p *Params) { p.AgentX64.URL = "https://u:p@example.com/a" }, "credentials"},
		{"missing arm64 agent", func(p *Params) { p.AgentARM64 = Artifact{} }, "agent (arm64)"},
		{"bad sha", func(p *Params) { p.AgentX64.SHA256 = "xyz" }, "SHA-256"},
		{"runner base url", func(p *Params) { p.RunnerBaseURL = "ftp://mirror" }, "runner base URL"},
		{"log group", func(p *Params) { p.LogGroup = "/a b" }, "log group"},
		{"log group injection", func(p *Params) { p.LogGroup = "g\nExecStartPre=/bin/sh" }, "log group"},
		{"nul in pre-runner", func(p *Params) { p.PreRunnerScript = "a\x00b" }, "NUL"},
		{"pre-runner too big", func(p *Params) { p.PreRunnerScript = declared.IncompressibleText(16 * 1024) }, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := validParams()
			tt.mod(&p)
			_, err := Render(p)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Render: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Render error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	err := Params{}.Validate()
	if err == nil {
		t.Fatal("empty params validated")
	}
	for _, want := range []string{"table", "region", "agent (x64)", "agent (arm64)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Errorf("error is not a joined error")
	}
}

// FuzzRender: whatever the inputs, Render either refuses them or produces a script whose shape (its
// lines outside the quoted values) is that of a known-good render: no input can add a line or a
// command.
func FuzzRender(f *testing.F) {
	f.Add("runnerpool-prod", "eu-central-1", "", "x64", "https://example.com/a", strings.Repeat("a", 64), "")
	f.Add("t", "us-east-1", "poll", "", "https://example.com/a'b", strings.Repeat("a", 64), "echo hi\n")
	f.Add("tbl", "us-east-1", "imds-tags", "arm64", "https://e.com/x\n$(reboot)", "00", "#!/bin/sh\n'\"")
	f.Fuzz(func(t *testing.T, table, region, notice, arch, agentURL, sha, pre string) {
		p := Params{Table: table, Region: region, Notice: notice, Arch: Arch(arch),
			AgentX64: Artifact{URL: agentURL, SHA256: sha}, AgentARM64: Artifact{URL: agentURL, SHA256: sha},
			PreRunnerScript: pre}
		out, err := Render(p)
		if err != nil {
			return
		}
		ref := validParams()
		ref.Arch, ref.Notice = p.Arch, "poll"
		if pre != "" {
			ref.PreRunnerScript = "x"
		}
		want, err := Render(ref)
		if err != nil {
			t.Fatalf("reference render: %v", err)
		}
		if got, w := strings.Count(out, "\n"), strings.Count(want, "\n"); got != w {
			t.Fatalf("script has %d lines, a reference render %d: input changed the script's shape\n%s", got, w, out)
		}
		for _, r := range out {
			if r < ' ' && r != '\n' && r != '\t' {
				t.Fatalf("control character %q in the script", r)
			}
		}
	})
}

// TestWithPreRunnerScript: re-rendering with a script gives exactly what rendering with it gives,
// for every variant, and the script reads back; user data runnerpool did not render is refused.
func TestWithPreRunnerScript(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := render(t, tc.p)
			got, err := WithPreRunnerScript(base, "#!/bin/sh\necho class script\n")
			if err != nil {
				t.Fatal(err)
			}
			want := render(t, func(p *Params) { tc.p(p); p.PreRunnerScript = "#!/bin/sh\necho class script\n" })
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("re-rendered with a script (-want +got):\n%s", diff)
			}
			if s, err := PreRunnerScriptOf(got); err != nil || s != "#!/bin/sh\necho class script\n" {
				t.Errorf("PreRunnerScriptOf = %q, %v", s, err)
			}
			none, err := WithPreRunnerScript(got, "")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(render(t, func(p *Params) { tc.p(p); p.PreRunnerScript = "" }), none); diff != "" {
				t.Errorf("re-rendered without a script (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := WithPreRunnerScript("#!/bin/bash\necho hand-written\n", "x"); err == nil || !strings.Contains(err.Error(), "not rendered by runnerpool") {
		t.Errorf("hand-written user data: err = %v", err)
	}
}

// TestCacheSwitch: the agent serves the runner cache only when the class switches it on (WithClass)
// and the user data names the reconciler's URL; a URL that is not plain https is refused.
func TestCacheSwitch(t *testing.T) {
	t.Parallel()
	p := validParams()
	p.CacheURL = "https://runnerpool.example.com"
	base, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(base, "-cache-control-plane") {
		t.Error("the cache is on without the class's switch")
	}
	on, err := WithClass(base, Class{Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(on, "-cache-control-plane https://runnerpool.example.com") {
		t.Error("the class's switch does not reach the agent's flags")
	}
	p.CacheURL = ""
	noURL, _ := Render(p)
	if off, _ := WithClass(noURL, Class{Cache: true}); strings.Contains(off, "-cache-control-plane") {
		t.Error("the cache is on without the reconciler's URL")
	}
	for _, bad := range []string{"http://runnerpool.example.com", "https://a b", "https://x/'$(id)'"} {
		p.CacheURL = bad
		if _, err := Render(p); err == nil {
			t.Errorf("cache URL %q accepted", bad)
		}
	}
}
