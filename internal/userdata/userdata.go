// Package userdata renders the user data of runnerpool's instances: a bash script, run once by
// cloud-init at first boot, that installs the runnerpool agent and the pinned GitHub Actions runner
// (both downloads checked against a SHA-256), creates the unprivileged runner user, and runs
// `runnerpool agent` as a systemd service. The agent then does everything else (pre-runner script,
// registration, heartbeats, release, self-termination).
//
// IMDSv2 only: the launch template sets MetadataOptions HttpTokens=required (and InstanceMetadataTags=
// enabled, for the agent's claim notice), so every metadata call in the script first PUTs for a session
// token. The script itself never calls `aws ec2 modify-instance-metadata-options`: the launch template
// already enforces it, before any code runs on the instance.
//
// A job on a runner is hostile code. By default the script blocks the runner user and containers from
// the instance metadata service (and so from the instance role's credentials); Params.AllowJobMetadata
// opts out. It installs the runner root-owned and writes the sha256 manifest the agent verifies the
// installation against before every registration and release (internal/agent, integrity.go).
//
// Every value from Params is validated and single-quoted; the pre-runner script travels base64-encoded.
package userdata

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strings"
	"text/template"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// RunnerVersion is the GitHub Actions runner version instances install unless Params.Runner pins
// another: the release compiled in (runnerversion.Default). The runner is started with
// --disableupdate, so the reconciler renders the current release it reads from GitHub into each
// class's launch template version (WithRunner), and idle instances left behind are upgraded or retired.
var RunnerVersion = runnerversion.Default.Version

// DefaultRunnerBaseURL is where runner releases are downloaded from.
const DefaultRunnerBaseURL = "https://github.com/actions/runner/releases/download"

// Fixed paths on the instance (the agent's flags in the unit name them).
const (
	AgentPath       = "/usr/local/bin/runnerpool"
	RunnerDir       = "/opt/actions-runner"
	RunnerUser      = "runner"
	StateDir        = "/var/lib/runnerpool"
	PreRunnerPath   = "/opt/runnerpool/pre-runner.sh"
	ManifestPath    = StateDir + "/runner.sha256"
	ServiceName     = "runnerpool-agent.service"
	maxUserDataSize = 16 * 1024 // EC2's limit on user data, before base64
)

// Instance key modes (Params.InstanceKeys).
const (
	KeysARN = "arn"
	KeysID  = "id"
)

// Arch is a CPU architecture in the runner's naming.
type Arch string

const (
	// ArchAny renders a script for both architectures, choosing at boot by `uname -m`.
	ArchAny   Arch = ""
	ArchX64   Arch = "x64"
	ArchARM64 Arch = "arm64"
)

// Artifact is a download checked against its SHA-256.
type Artifact struct {
	URL    string
	SHA256 string // lower-case hex
}

// Params are the inputs of a rendered script.
type Params struct {
	// Table is the state table the agent uses. Required.
	Table string
	// Region is the AWS region of the table. Required.
	Region string
	// Notice is the agent's claim notice: "imds-tags" (default) or "poll".
	Notice string
	// InstanceKeys is how the table keys the instance's items, the reconciler's --instance-keys:
	// "arn" (default; the agent builds the instance ARN from its identity document, and the instance
	// role can be confined to INSTANCE#${ec2:SourceInstanceARN}) or "id".
	InstanceKeys string
	// Arch restricts the script to one architecture; ArchAny supports both.
	Arch Arch
	// AgentX64 and AgentARM64 are the runnerpool binaries; the one(s) Arch needs are required.
	AgentX64, AgentARM64 Artifact
	// PreRunnerScript is the content of the user's pre-runner script; none when empty.
	PreRunnerScript string
	// RunnerBaseURL overrides DefaultRunnerBaseURL (a mirror holding the same release files).
	RunnerBaseURL string
	// AllowJobMetadata leaves the instance metadata service (169.254.169.254, fd00:ec2::254) reachable
	// by jobs: by the runner user and by containers. By default both are blocked (iptables), since
	// whatever reaches it gets the instance role's credentials; jobs that need AWS credentials should
	// assume a role with GitHub's OIDC token instead. The agent, as root, reaches it either way.
	AllowJobMetadata bool
	// JobAccess is the runner class's job_access (declared.JobAccess*; empty is user): the user data
	// installs what the grant needs and passes it to the agent (-job-access), which applies it at its
	// first start. The reconciler sets it in the class's launch template version (WithClass).
	JobAccess string `json:",omitempty"` // omitted when empty: user data rendered before it existed re-renders the same
	// LogGroup is a CloudWatch Logs group the instance ships its bootstrap log and journal to (root's
	// and the kernel's entries), in streams <instance-id>/bootstrap and <instance-id>/journal, by a
	// unit running `runnerpool logs`; none when empty. The instance role needs logs:CreateLogStream
	// and logs:PutLogEvents on the group.
	LogGroup string `json:",omitempty"`
	// CacheURL is the reconciler's URL as the instances reach it, where a class whose runner cache
	// is on asks for presigned URLs (docs/cache.md); Cache is the class's switch (WithClass). The
	// agent serves the cache (-cache-control-plane) only when both are set.
	CacheURL string `json:",omitempty"`
	Cache    bool   `json:",omitempty"`
	// Runner pins the Actions runner release to install (version and SHA-256 per architecture); the
	// compiled-in runnerversion.Default when nil. A version below runnerversion.Floor is refused.
	Runner *RunnerPin `json:",omitempty"`
}

// RunnerPin is a runner release the user data installs: its version and the SHA-256 of
// actions-runner-linux-<arch>-<version>.tar.gz for each architecture the script supports.
type RunnerPin struct {
	Version     string
	SHA256X64   string `json:",omitempty"`
	SHA256ARM64 string `json:",omitempty"`
}

// PinOf is the pin of a release.
func PinOf(r runnerversion.Release) RunnerPin {
	return RunnerPin{Version: r.Version, SHA256X64: r.Linux[runnerversion.ArchX64].SHA256, SHA256ARM64: r.Linux[runnerversion.ArchARM64].SHA256}
}

// runner is the pin the script installs.
func (p Params) runner() RunnerPin {
	if p.Runner != nil {
		return *p.Runner
	}
	return PinOf(runnerversion.Default)
}

//go:embed userdata.sh.tmpl
var tmplText string

var tmpl = template.Must(template.New("userdata").Funcs(template.FuncMap{"sh": shellQuote, "dir": path.Dir}).Parse(tmplText))

// archData is what the template needs per architecture.
type archData struct {
	Name         Arch
	Machine      string // uname -m patterns
	AgentURL     string
	AgentSHA256  string
	RunnerSHA256 string
}

type data struct {
	Params
	RunnerVersion                                                          string
	Arches                                                                 []archData
	PreRunnerB64                                                           string
	AgentArgs                                                              string
	Accesses                                                               []accessPackages // what each job access but user needs
	ParamsLine                                                             string           // base64 JSON of Params without the pre-runner script
	BlockJobMetadata                                                       bool
	AptLockWait                                                            int // seconds, declared.AptLockWait
	AgentPath, RunnerDir, RunnerUser, StateDir, PreRunnerPath, ServiceName string
}

// Render validates p and renders the user data script.
func Render(p Params) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	if p.Notice == "" {
		p.Notice = "imds-tags"
	}
	if p.InstanceKeys == "" {
		p.InstanceKeys = KeysARN
	}
	if p.RunnerBaseURL == "" {
		p.RunnerBaseURL = DefaultRunnerBaseURL
	}
	p.RunnerBaseURL = strings.TrimRight(p.RunnerBaseURL, "/")
	d := data{
		Params: p, RunnerVersion: p.runner().Version,
		AgentPath: AgentPath, RunnerDir: RunnerDir, RunnerUser: RunnerUser, StateDir: StateDir,
		PreRunnerPath: PreRunnerPath, ServiceName: ServiceName, BlockJobMetadata: !p.AllowJobMetadata,
		Accesses: jobAccessPackages, AptLockWait: int(declared.AptLockWait.Seconds()),
	}
	if p.Arch != ArchARM64 {
		d.Arches = append(d.Arches, archData{ArchX64, "x86_64|amd64", p.AgentX64.URL, strings.ToLower(p.AgentX64.SHA256), strings.ToLower(p.runner().SHA256X64)})
	}
	if p.Arch != ArchX64 {
		d.Arches = append(d.Arches, archData{ArchARM64, "aarch64|arm64", p.AgentARM64.URL, strings.ToLower(p.AgentARM64.SHA256), strings.ToLower(p.runner().SHA256ARM64)})
	}
	if p.PreRunnerScript != "" {
		d.PreRunnerB64 = declared.PackPreRunnerScript(p.PreRunnerScript)
	}
	bare := p
	bare.PreRunnerScript = ""
	js, err := json.Marshal(bare)
	if err != nil {
		return "", fmt.Errorf("rendering user data: %w", err)
	}
	d.ParamsLine = base64.StdEncoding.EncodeToString(js)
	args := []string{"agent", "-table", p.Table, "-region", p.Region, "-notice", p.Notice,
		"-runner", "actions", "-runner-dir", RunnerDir, "-runner-user", RunnerUser, "-state-dir", StateDir,
		"-instance-keys", p.InstanceKeys, "-runner-manifest", ManifestPath}
	if p.PreRunnerScript != "" {
		args = append(args, "-pre-runner-script", PreRunnerPath)
	}
	if p.JobAccess != "" && p.JobAccess != declared.JobAccessUser {
		args = append(args, "-job-access", p.JobAccess)
	}
	if p.Cache && p.CacheURL != "" {
		args = append(args, "-cache-control-plane", p.CacheURL) // checkURL: no spaces or quotes
	}
	d.AgentArgs = strings.Join(args, " ") // every element is from a validated, space-free character set

	var b strings.Builder
	if err := tmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("rendering user data: %w", err)
	}
	if b.Len() > maxUserDataSize {
		return "", fmt.Errorf("rendered user data is %d bytes, over EC2's limit of %d: shorten the pre-runner script (or have it download the rest)", b.Len(), maxUserDataSize)
	}
	return b.String(), nil
}

const paramsMarker = "# runnerpool:params "

// preRunnerRe finds the pre-runner script in rendered user data (the template writes it base64,
// single-quoted, to PreRunnerPath).
var preRunnerRe = regexp.MustCompile(`(?m)^printf '%s' '([A-Za-z0-9+/=]*)' \| base64 -d (\| gunzip )?> '` + regexp.QuoteMeta(PreRunnerPath) + `'$`)

// accessPackages are the Debian/Ubuntu and Fedora/Amazon Linux packages a job access needs, and the
// commands that show them installed (a prepared image has them all, and the user data then installs
// nothing): rootful Docker and sudo for root; for docker, Docker with rootlesskit, slirp4netns and
// newuidmap (the rootless daemon the agent runs as the runner user). Every script carries them all, so
// that `bake ACCESS` can prepare an image for any class.
type accessPackages struct{ Name, Cmds, Apt, DNF string }

var jobAccessPackages = []accessPackages{
	{declared.JobAccessRoot, "dockerd sudo", "docker.io sudo", "docker sudo"},
	{declared.JobAccessDocker, "dockerd rootlesskit slirp4netns newuidmap", "docker.io rootlesskit slirp4netns uidmap", "docker rootlesskit slirp4netns shadow-utils"},
}

// Class is what a runner class adds to the user data it launches with.
type Class struct {
	PreRunnerScript string
	JobAccess       string
	Cache           bool // the runner cache is on (with Params.CacheURL)
}

// WithClass re-renders user data that Render produced with the class's pre-runner script and job
// access (each none when empty), every other parameter as it was rendered. It is how a runner
// class's pre_runner_script and job_access reach its instances: the reconciler puts the result in
// the class's launch template version.
func WithClass(userData string, c Class) (string, error) {
	p, err := paramsOf(userData)
	if err != nil {
		return "", err
	}
	p.PreRunnerScript, p.JobAccess, p.Cache = c.PreRunnerScript, c.JobAccess, c.Cache
	return Render(p)
}

// BlockScriptOf returns the metadata block script rendered into user data (the script its systemd
// unit runs at every boot), "" when the user data has none (AllowJobMetadata).
func BlockScriptOf(userData string) string {
	start := strings.Index(userData, "<<'BLOCK'\n")
	end := strings.Index(userData, "\nBLOCK\n")
	if start < 0 || end < start {
		return ""
	}
	return userData[start+len("<<'BLOCK'\n") : end+1]
}

// JobAccessOf returns the job access rendered into user data ("" when none, or not runnerpool's).
func JobAccessOf(userData string) string {
	p, err := paramsOf(userData)
	if err != nil {
		return ""
	}
	return p.JobAccess
}

// WithPreRunnerScript re-renders user data that Render produced, with script as its pre-runner
// script (none when empty) and every other parameter as it was rendered. It is how a runner
// class's pre_runner_script reaches its instances: the reconciler puts the result in the class's
// launch template version. User data that Render did not produce is an error.
func WithPreRunnerScript(userData, script string) (string, error) {
	p, err := paramsOf(userData)
	if err != nil {
		return "", err
	}
	p.PreRunnerScript = script
	return Render(p)
}

func paramsOf(userData string) (Params, error) {
	var line string
	for l := range strings.Lines(userData) {
		if rest, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), paramsMarker); ok {
			line = rest
			break
		}
	}
	if line == "" {
		return Params{}, errors.New("the user data was not rendered by runnerpool (runnerpool_user_data): it has no runnerpool:params line to re-render it from")
	}
	js, err := base64.StdEncoding.DecodeString(line)
	if err != nil {
		return Params{}, fmt.Errorf("the user data's runnerpool:params line: %w", err)
	}
	var p Params
	if err := json.Unmarshal(js, &p); err != nil {
		return Params{}, fmt.Errorf("the user data's runnerpool:params line: %w", err)
	}
	return p, nil
}

// PreRunnerScriptOf returns the pre-runner script rendered into user data ("" when none).
func PreRunnerScriptOf(userData string) (string, error) {
	m := preRunnerRe.FindStringSubmatch(userData)
	if m == nil {
		return "", nil
	}
	b, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		return "", fmt.Errorf("the user data's pre-runner script: %w", err)
	}
	if m[2] == "" { // rendered before the script was compressed
		return string(b), nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("the user data's pre-runner script: %w", err)
	}
	script, err := io.ReadAll(io.LimitReader(zr, declared.MaxPreRunnerScript+1))
	if err != nil {
		return "", fmt.Errorf("the user data's pre-runner script: %w", err)
	}
	return string(script), nil
}

var (
	// tableRe is DynamoDB's table name syntax.
	tableRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)
	// regionRe matches AWS region names (us-east-1, eu-central-2, us-gov-west-1, ap-southeast-5).
	regionRe = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`)
	sha256Re = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	// logGroupRe is CloudWatch Logs' log group name syntax.
	logGroupRe = regexp.MustCompile(`^[A-Za-z0-9_/.#-]{1,512}$`)
)

// Validate reports every problem with p.
func (p Params) Validate() error {
	var errs []error
	if !tableRe.MatchString(p.Table) {
		errs = append(errs, fmt.Errorf("table %q: want 3-255 characters of A-Z a-z 0-9 _ . -", p.Table))
	}
	if !regionRe.MatchString(p.Region) {
		errs = append(errs, fmt.Errorf("region %q: want an AWS region name such as us-east-1", p.Region))
	}
	switch p.Notice {
	case "", "imds-tags", "poll":
	default:
		errs = append(errs, fmt.Errorf("notice %q: want imds-tags or poll", p.Notice))
	}
	switch p.InstanceKeys {
	case "", KeysARN, KeysID:
	default:
		errs = append(errs, fmt.Errorf("instance keys %q: want %s or %s", p.InstanceKeys, KeysARN, KeysID))
	}
	switch p.Arch {
	case ArchAny, ArchX64, ArchARM64:
	default:
		errs = append(errs, fmt.Errorf("arch %q: want x64, arm64 or empty for both", p.Arch))
	}
	if p.Arch != ArchARM64 {
		errs = append(errs, checkArtifact("agent (x64)", p.AgentX64)...)
	}
	if p.Arch != ArchX64 {
		errs = append(errs, checkArtifact("agent (arm64)", p.AgentARM64)...)
	}
	if p.RunnerBaseURL != "" {
		if err := checkURL(p.RunnerBaseURL); err != nil {
			errs = append(errs, fmt.Errorf("runner base URL: %w", err))
		}
	}
	if err := declared.ValidateJobAccess(p.JobAccess); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, p.checkRunner()...)
	if p.CacheURL != "" {
		if err := checkURL(p.CacheURL); err != nil {
			errs = append(errs, fmt.Errorf("cache URL: %w", err))
		}
	}
	if p.LogGroup != "" {
		if err := ValidateLogGroup(p.LogGroup); err != nil {
			errs = append(errs, err)
		}
	}
	if strings.ContainsRune(p.PreRunnerScript, 0) {
		errs = append(errs, errors.New("pre-runner script contains a NUL byte"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("user data parameters: %w", errors.Join(errs...))
	}
	return nil
}

// checkRunner checks the pinned runner: a version GitHub registers, and a checksum for each
// architecture the script supports.
func (p Params) checkRunner() []error {
	if p.Runner == nil {
		return nil
	}
	var errs []error
	if _, err := runnerversion.CheckFloor(p.Runner.Version); err != nil {
		errs = append(errs, err)
	}
	for _, c := range []struct {
		arch Arch
		sum  string
	}{{ArchX64, p.Runner.SHA256X64}, {ArchARM64, p.Runner.SHA256ARM64}} {
		if (p.Arch == ArchAny || p.Arch == c.arch) && !sha256Re.MatchString(c.sum) {
			errs = append(errs, fmt.Errorf("runner %s SHA-256 (%s) %q: want 64 hexadecimal digits", p.Runner.Version, c.arch, c.sum))
		}
	}
	return errs
}

// WithRunner re-renders user data that Render produced with the runner release pin, every other
// parameter as it was rendered. It is how the current release the reconciler reads from GitHub reaches
// a class's instances: the result goes into the class's launch template version.
func WithRunner(userData string, pin RunnerPin) (string, error) {
	p, err := paramsOf(userData)
	if err != nil {
		return "", err
	}
	if p.PreRunnerScript, err = PreRunnerScriptOf(userData); err != nil {
		return "", err
	}
	p.Runner = &pin
	return Render(p)
}

// PinnedRunner returns the runner release user data pins explicitly (runnerpool_user_data's
// runner_version), ok false when it installs the default or is not runnerpool's: a pin the operator
// chose is kept; the default is replaced by the current release.
func PinnedRunner(userData string) (RunnerPin, bool) {
	p, err := paramsOf(userData)
	if err != nil || p.Runner == nil {
		return RunnerPin{}, false
	}
	return *p.Runner, true
}

// RunnerOf returns the runner release rendered into user data (ok false when not runnerpool's).
// The version is the script's own RUNNER_VERSION line: user data rendered before Params.Runner existed
// installs the version compiled into the provider that rendered it, not today's default.
func RunnerOf(userData string) (pin RunnerPin, ok bool) {
	p, err := paramsOf(userData)
	if err != nil {
		return RunnerPin{}, false
	}
	pin = p.runner()
	if m := runnerVersionRe.FindStringSubmatch(userData); m != nil && m[1] != pin.Version {
		pin = RunnerPin{Version: m[1]} // not the params' release: its checksums are unknown here
	}
	return pin, true
}

// runnerVersionRe finds the version the script installs.
var runnerVersionRe = regexp.MustCompile(`(?m)^readonly RUNNER_VERSION='([0-9A-Za-z.]+)'$`)

// ValidateLogGroup checks a CloudWatch Logs group name (1-512 characters of A-Z a-z 0-9 _ - / . #).
func ValidateLogGroup(name string) error {
	if !logGroupRe.MatchString(name) {
		return fmt.Errorf("log group %q: want 1-512 characters of A-Z a-z 0-9 _ - / . #", name)
	}
	return nil
}

func checkArtifact(what string, a Artifact) []error {
	var errs []error
	if err := checkURL(a.URL); err != nil {
		errs = append(errs, fmt.Errorf("%s URL: %w", what, err))
	}
	if !sha256Re.MatchString(a.SHA256) {
		errs = append(errs, fmt.Errorf("%s SHA-256 %q: want 64 hexadecimal digits", what, a.SHA256))
	}
	return errs
}

// checkURL accepts absolute https URLs made of printable characters that need no escaping in a shell
// word or a URL (no quotes, spaces, backslashes, backticks, dollar signs or control characters).
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	for _, r := range raw {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune("'\"`$\\<>{}|^", r) {
			return fmt.Errorf("%q contains %q", raw, r)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an https:// URL", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%q: credentials in URLs end up in logs; use a pre-signed or public URL", raw)
	}
	return nil
}

// shellQuote quotes s as one POSIX shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
