//go:build linux

// Phase "docker": docker_job_overhead_ms, the time a job of a job_access = "docker" class spends
// before its first container starts, on a pooled runner against a fresh one. A sandbox of its own
// runs a real rootless daemon (Debian's docker.io) for each simulated instance, as a throwaway runner
// account. The job's first container needs its image: a fresh runner's daemon has none and loads it
// (`docker import` of a busybox root file system: no registry is reachable here, so this stands in
// for a pull), a pooled runner of the same repository finds the image its last run left. Each
// round provisions a runner for a repository never seen (created) and one for the bench repository
// again (reused), and times, on each, the first `docker run` with whatever it needs first.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// dockerRounds is how many fresh and pooled first containers are timed; dockerImagePad makes the
// image the size of a service image a job uses (postgres:16 is some 150 MB unpacked): busybox and
// that many random bytes.
const (
	dockerRounds   = 3
	dockerImagePad = 150 << 20
)

func phaseDocker(ctx context.Context, h *harness, res *Result) error {
	tools, err := agenttest.FindDockerTools()
	if err != nil {
		res.add(Figure{Name: "docker_job_overhead_ms", Missing: "no rootless Docker here: " + err.Error(), Unit: "ms"})
		return nil
	}
	dir, err := os.MkdirTemp("", "runnerpool-bench-docker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tools.Image = filepath.Join(dir, "busybox.tar")
	if err := agenttest.WriteImage(tools.Image, dockerImagePad); err != nil {
		return err
	}
	uid, err := agenttest.FreeUID()
	if err != nil {
		return err
	}
	acct, removeAcct, err := agenttest.CreateAccount(uid, 0)
	defer removeAcct()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	daemons, removes := map[string]*agent.RootlessDocker{}, []func(){}
	defer func() {
		for _, r := range removes {
			r()
		}
	}()
	sb, err := sandbox.Start(ctx, sandbox.Options{Root: filepath.Join(dir, "instances"), Logger: h.o.Logger, ChildOutput: h.o.ChildOutput,
		RunnerUser: acct.Name, JobAccess: declared.JobAccessDocker,
		RootlessDocker: func(id string) *agent.RootlessDocker {
			mu.Lock()
			defer mu.Unlock()
			if d, ok := daemons[id]; ok {
				return d
			}
			d, remove, err := agenttest.NewRootlessDocker(acct, tools)
			removes = append(removes, remove)
			if err != nil {
				h.say("docker: %v", err)
				return nil
			}
			daemons[id] = d
			return d
		}})
	if err != nil {
		return err
	}
	defer sb.Close()
	cp := sb.Components(sandbox.ComponentOptions{RegistrationWait: time.Minute, ReleaseWait: 90 * time.Second})
	firstContainer := func(repo, repoID string, round int) (time.Duration, string, error) {
		req := provision.Request{RepositoryID: repoID, Repository: repo, RunID: strconv.Itoa(990000 + round), Attempt: 1, Count: 1,
			UsageClass: "on-demand", InstanceTypes: []string{"c*", "m*"}, ResourceClass: "small"}
		p, err := cp.Provisioner.Provision(ctx, req)
		if err != nil || len(p.Runners) != 1 {
			return 0, "", fmt.Errorf("provision for %s: %+v, %w", repo, p, err)
		}
		mu.Lock()
		d := daemons[p.Runners[0].InstanceID]
		mu.Unlock()
		if d == nil {
			return 0, "", fmt.Errorf("instance %s has no docker daemon", p.Runners[0].InstanceID)
		}
		took, err := timeFirstContainer(ctx, d, tools.Image)
		if _, rerr := cp.Releaser.Release(ctx, p.RunKey, 10*time.Minute); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release: %w", rerr))
		}
		return took, p.Runners[0].Source, err
	}
	// The bench repository's first run leaves its image on a pooled runner.
	if _, _, err := firstContainer(sandbox.Scope, "4242", 0); err != nil {
		return err
	}
	var fresh, pooled []time.Duration
	for round := 1; round <= dockerRounds; round++ {
		f, src, err := firstContainer("acme/fresh-"+strconv.Itoa(round), strconv.Itoa(7700+round), round)
		if err != nil || src != "created" {
			return fmt.Errorf("fresh runner (round %d, %s): %w", round, src, err)
		}
		p, src, err := firstContainer(sandbox.Scope, "4242", round)
		if err != nil || src != "reused" {
			return fmt.Errorf("pooled runner (round %d, %s): %w", round, src, err)
		}
		fresh, pooled = append(fresh, f), append(pooled, p)
	}
	mf, mp := median(fresh), median(pooled)
	h.say("docker: first container of a job: pooled runner %v, fresh runner %v (medians of %d)", mp, mf, dockerRounds)
	res.add(Figure{Name: "docker_job_overhead_ms", Value: float64(mp.Milliseconds()), Unit: "ms",
		How: fmt.Sprintf("median time a job of a job_access = \"docker\" class spends before its first container starts on a pooled runner "+
			"of its repository (the image its last run left, on the runner user's rootless daemon, real Debian docker.io), against %d ms on a fresh "+
			"runner of a new repository (the image loaded first: `docker import` of a %s root file system, busybox and random bytes "+
			"the size of postgres:16, stands in for a pull, no registry being reachable: a pull over the network adds its download); %d rounds; the daemon itself is started at the "+
			"registration on both, before the job", mf.Milliseconds(), sizeOf(tools.Image), dockerRounds)})
	res.add(Figure{Name: "docker_job_overhead_fresh_ms", Value: float64(mf.Milliseconds()), Unit: "ms",
		How: "the same on a fresh runner (see docker_job_overhead_ms)"})
	return nil
}

// timeFirstContainer is a job's wait for its first container: the image when the daemon lacks it,
// then a container run to its end (`true`).
func timeFirstContainer(ctx context.Context, d *agent.RootlessDocker, image string) (time.Duration, error) {
	start := time.Now()
	if _, err := d.Run(ctx, "image", "inspect", "busybox:local"); err != nil {
		if out, err := d.Run(ctx, "import", image, "busybox:local"); err != nil {
			return 0, fmt.Errorf("docker import: %w: %s", err, out)
		}
	}
	if out, err := d.Run(ctx, "run", "--rm", "busybox:local", "true"); err != nil {
		return 0, fmt.Errorf("docker run: %w: %s", err, out)
	}
	return time.Since(start), nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func sizeOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MB", float64(fi.Size())/1e6)
}
