//go:build linux

package sandbox_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// dockerWaits give the daemon's start (at every registration) and its clean-up (at every release)
// room on a machine loaded by the whole suite.
var dockerWaits = sandbox.ComponentOptions{RegistrationWait: time.Minute, ReleaseWait: 90 * time.Second}

// dockerSandbox is a sandbox of a job_access = "docker" class whose agents run a real rootless
// daemon as a throwaway runner account; daemon returns an instance's.
func dockerSandbox(t *testing.T) (*sandbox.Sandbox, func(id string) *agent.RootlessDocker, agenttest.DockerTools) {
	t.Helper()
	tools := agenttest.Docker(t)
	acct := agenttest.NewAccount(t, 0)
	var daemons sync.Map
	sb := start(t, sandbox.Options{RunnerUser: acct.Name, JobAccess: declared.JobAccessDocker,
		RootlessDocker: func(id string) *agent.RootlessDocker {
			if d, ok := daemons.Load(id); ok { // a restarted agent keeps its instance's daemon
				return d.(*agent.RootlessDocker)
			}
			d := agenttest.RootlessDocker(t, acct, tools)
			daemons.Store(id, d)
			return d
		}})
	return sb, func(id string) *agent.RootlessDocker {
		d, ok := daemons.Load(id)
		if !ok {
			t.Fatalf("instance %s has no docker daemon", id)
		}
		return d.(*agent.RootlessDocker)
	}, tools
}

// docker runs the docker CLI against d (as a job's would, through DOCKER_HOST) and fails the test on
// an error.
func docker(t *testing.T, d *agent.RootlessDocker, args ...string) string {
	t.Helper()
	out, err := d.Run(t.Context(), args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// dockerJob plays what the actions runner does for a job with `container:` and `services:`: a
// network of the job, a service container with a named volume, reached by its name from the job's
// container. It leaves all of it behind, as a cancelled job does.
func dockerJob(t *testing.T, d *agent.RootlessDocker, run string) {
	t.Helper()
	docker(t, d, "network", "create", "job-"+run)
	docker(t, d, "volume", "create", "svcdata-"+run)
	docker(t, d, "run", "-d", "--name", "svc-"+run, "--network", "job-"+run, "--network-alias", "postgres",
		"-v", "svcdata-"+run+":/data", "busybox:local", "sh", "-c", "echo ready-"+run+" > /data/status && httpd -f -p 5432 -h /data")
	out := ""
	for range 50 { // the service starts
		out, _ = dockerOut(t, d, "run", "--rm", "--network", "job-"+run, "busybox:local", "sh", "-c", "timeout 5 wget -q -O- http://postgres:5432/status || exit 1")
		if out == "ready-"+run {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out != "ready-"+run {
		t.Fatalf("the job's container did not reach its service container: %q", out)
	}
	docker(t, d, "run", "-d", "--name", "left-"+run, "busybox:local", "sleep", "600") // still running at the release
}

func dockerOut(t *testing.T, d *agent.RootlessDocker, args ...string) (string, error) {
	t.Helper()
	out, err := d.Run(t.Context(), args...)
	return strings.TrimSpace(string(out)), err
}

// clean: the daemon lists no container and no volume, and no network but Docker's own.
func clean(t *testing.T, d *agent.RootlessDocker, what string) {
	t.Helper()
	if out := docker(t, d, "ps", "--all", "--format", "{{.Names}}"); out != "" {
		t.Errorf("%s: containers left: %q", what, out)
	}
	if out := docker(t, d, "volume", "ls", "--quiet"); out != "" {
		t.Errorf("%s: volumes left: %q", what, out)
	}
	nets := strings.Fields(docker(t, d, "network", "ls", "--format", "{{.Name}}"))
	if slices.ContainsFunc(nets, func(n string) bool { return n != "bridge" && n != "host" && n != "none" }) {
		t.Errorf("%s: networks left: %q", what, nets)
	}
}

// TestDockerJobsOnAPooledRunner: a "docker" class's instance runs a job with a service container,
// a container job and a named volume on its runner user's rootless daemon. The release pools it with
// no process of the runner user left (the daemon included), and the daemon, started again, lists no
// container, volume or network of that job; the image stays.
// The same repository's next run reuses the instance: it sees none of the last run's containers or
// volumes, and runs its containers from the kept image without importing it again.
func TestDockerJobsOnAPooledRunner(t *testing.T) {
	t.Parallel()
	sb, daemon, tools := dockerSandbox(t)
	cp := sb.Components(dockerWaits)
	ctx := t.Context()

	runA := newRun()
	res, err := cp.Provisioner.Provision(ctx, request(runA))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	x := res.Runners[0].InstanceID
	if g, ok := sb.Grants.Of(x); !ok || !g.RootlessDocker || g.Sudoers != "" || len(g.Groups) != 0 {
		t.Errorf("grant of the docker class's instance = %+v (%v), want the rootless daemon only: no sudo, no group", g, ok)
	}
	d := daemon(x)
	docker(t, d, "import", tools.Image, "busybox:local") // the job's pull: no registry is reachable
	dockerJob(t, d, runA)
	runJob(t, sb, res.Label)
	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	if err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release = %+v, %v; want the instance pooled", rep, err)
	}
	// Pooled with no process of the runner user: the daemon starts again at the next registration.
	// Started here to look at what the next run will find.
	if left := processesOf(t, d.UID); len(left) != 0 {
		t.Errorf("processes of the runner user alive in the pooled instance: %v", left)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clean(t, d, "after the release")
	if out, err := dockerOut(t, d, "image", "inspect", "--format", "{{.Id}}", "busybox:local"); err != nil || out == "" {
		t.Errorf("the image is gone after the release: %q, %v; want it kept for the same repository", out, err)
	}

	runB := newRun()
	resB, err := cp.Provisioner.Provision(ctx, request(runB))
	if err != nil || len(resB.Runners) != 1 || resB.Runners[0].InstanceID != x || resB.Runners[0].Source != "reused" {
		t.Fatalf("provision of the next run = %+v, %v; want %s reused", resB, err, x)
	}
	clean(t, d, "the next run")
	dockerJob(t, d, runB) // from the kept image, nothing imported
	runJob(t, sb, resB.Label)
	if rep, err := cp.Releaser.Release(ctx, resB.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("second release = %+v, %v", rep, err)
	}
}
