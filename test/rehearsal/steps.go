// Command rehearsal is `make rehearsal` (CI runs it, .ci/run): a newcomer's path from a clean copy
// of the repository, with nothing fetched from a public release, one line per step, ending
// `rehearsal: ok steps=N`.
//
// To add a step, add one line to the steps table below, in the order it runs:
//
//	{Name: "my-step", Run: myStep},                      // a Go function: func(ctx context.Context, r *R) error
//	{Name: "my-check", Cmd: []string{"go", "test", ...}}, // a command, run in the checkout with r.Env()
//
// A step reads what earlier steps made from R (the copy, the release, its HTTPS host, the stack).
// A step that runs a block of docs/guides/local-build.md names it with guideBlock(NAME); every shell
// block of the guide is run by a step or marked as not run (TestGuideBlocksRun), so the guide is
// what CI runs. `make rehearsal ARGS='-run REGEXP -v'` runs the steps whose names match (and the
// steps they need, marked Needed) with their output.
package main

// steps is the rehearsal, in order.
var steps = []step{
	{Name: "clone", Run: cloneStep, Needed: true},
	{Name: "release", Run: releaseStep, Needed: true},
	{Name: "serve-release", Run: serveReleaseStep, Needed: true},
	{Name: "release-names", Run: releaseNamesStep},
	{Name: "install-action", Run: installActionStep},
	{Name: "provider-mirror", Run: providerMirrorStep},
	{Name: "image-forms", Cmd: []string{"go", "test", "-count=1", "-run", "^TestImageReferenceForms$", "./test/rehearsal/"}},
	// runnerpool serve started from each of those forms (a registry on loopback serves the release's
	// binary as ko's image), with the example's own task environment, on the local stack.
	{Name: "serve-image-forms", Run: releaseTest("^TestServeFromImageForms$", "./test/rehearsal/")},

	// ---- Steps of the other parts of the day-one path go here (one line each) ----
	// runner-release sources, a runner release published mid-run, a security release;
	// "re-run failed jobs", "re-run all jobs", a single re-run; a Dependabot-labelled job.
	{Name: "runner-release-sources", Run: stackTest("^(TestOrgScopeWithoutRunnersPermissionReadsThePublicReleases|TestRepositoryScopeFirstWithPublicationDates|TestStartupCheckNamesThePermission)$", "./internal/runnerrelease/")},
	{Name: "runner-release-mid-run", Run: stackTest("^TestRunnerReleaseCrossesTheThirtyDayRuleMidRun$", "./test/sandbox/")},
	{Name: "security-release", Run: stackTest("^TestSecurityReleaseArrives$", "./test/sandbox/")},
	// The sample workflow's shape with the provision and release actions' own steps, installing from
	// the release host, through the public API, its jobs on real agents; then "re-run failed jobs".
	{Name: "sample-workflow", Run: releaseTest("^TestSampleWorkflowWithTheActions$", "./test/sandbox/")},
	// The rendered user data booted on the OS test's Debian system, downloading from the release host.
	{Name: "userdata-os", Run: userdataOSStep},
	{Name: "rerun-semantics", Cmd: []string{"go", "test", "-count=1", "-run", "^TestReRunSemantics$", "./test/stack/githubfake/"}},
	{Name: "rerun-all-jobs", Run: stackTest("^TestReRunsGetRunners$/^all_jobs$", "./test/sandbox/")},
	{Name: "rerun-failed-jobs", Run: stackTest("^TestReRunsGetRunners$/^failed_jobs", "./test/sandbox/")},
	{Name: "rerun-single-job", Run: stackTest("^TestReRunsGetRunners$/^a_single_job$", "./test/sandbox/")},
	{Name: "dependabot-job", Cmd: []string{"go", "test", "-count=1", "-run", "^(TestLabelsWeDoNotOwnNeverCancel|TestReRunJobsAreQueued)$", "./internal/webhook/"}},
	// ---- end of those steps ----
}
