// Phase "runner release": a warm pool of a class whose launch template carries runnerpool's user data
// runs the current Actions runner release; a new release is published in the GitHub fake, and the
// reconciler's release cache, launch template versions and convergence (the code its replicas and
// cron job run) roll the pool over. runner_release_rollout_s is the time from the publication until
// every live instance of the pool was launched with the new release (or is gone);
// jobs_refused_for_runner_version counts what the fake refused for a runner's version during the
// whole bench so far (goal 0).
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

const (
	releaseClass, releasePool = "bench-release", "bench-release-warm"
	releaseNext               = "2.399.0" // a release the fake publishes; nothing else runs it
)

func phaseRunnerRelease(ctx context.Context, h *harness, res *Result) error {
	rc, err := h.releaseClass(ctx)
	if err != nil {
		return err
	}
	repo := declared.NewRepository(h.sb.Store)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		return err
	}
	if _, err := repo.PutWarmPool(ctx, declared.WarmPool{Name: releasePool, RunnerClass: rc.Name,
		Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 2, Stopped: 2}}}, 0); err != nil {
		return err
	}
	defer func() { _ = repo.DeleteWarmPool(context.WithoutCancel(ctx), releasePool) }()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: h.sb.Stack.Endpoints.GitHubAPI, Token: h.sb.Stack.GitHub.PAT(), Logger: h.o.Logger})
	if err != nil {
		return err
	}
	// Every look reads GitHub (Every 1 ns): the hour between reads is not what is measured.
	cache := runnerrelease.New(gh, h.sb.Store, runnerrelease.Options{Scope: "acme", Every: time.Nanosecond, Logger: h.o.Logger})
	versions := launchtemplate.New(h.sb.EC2, launchtemplate.Options{Logger: h.o.Logger, Release: cache.Current})
	cp, err := h.wired(controlplane.Clients{}, controlplane.Options{Warm: &controlplane.Warm{
		Targets: warmpool.ConfigTargets(repo, warmpool.ConfigOptions{Scope: "acme", Versions: versions}),
	}})
	if err != nil {
		return err
	}
	conv := cp.Converger
	before := h.sb.Stack.GitHub.CurrentRunnerRelease().Version
	if _, err := h.converge(ctx, cache, conv, before, 4, 2*time.Minute); err != nil {
		return fmt.Errorf("warming the pool on %s: %w", before, err)
	}
	published := time.Now()
	h.sb.Stack.GitHub.PublishRunnerRelease(runnerversion.Release{Version: releaseNext})
	rollout, err := h.converge(ctx, cache, conv, releaseNext, 4, 3*time.Minute)
	if err != nil {
		res.add(Figure{Name: "runner_release_rollout_s", Missing: err.Error()})
	} else {
		res.add(Figure{Name: "runner_release_rollout_s", Value: rollout.Sub(published).Seconds(), Unit: "s",
			How: "a warm pool of 2 hot and 2 stopped instances whose class's launch template carries runnerpool's user data; a new release " +
				"published in the GitHub fake until the pool is warm again (2 ready, 2 stopped) on it and no live instance of the pool runs another (the release cache read every pass, " +
				"convergence passes back to back, the simulated boot and start times of the bench); wall-clock seconds on this machine"})
	}
	res.add(Figure{Name: "jobs_refused_for_runner_version", Value: float64(h.sb.Stack.GitHub.VersionRefusals()), Unit: "count",
		How: "registrations and job polls the GitHub fake refused for the runner's version (below 2.329.0, 30 days behind, or behind a security release) during the bench until this phase; goal 0"})
	h.say("runner release: %s -> %s rolled over in %s", before, releaseNext, rollout.Sub(published).Round(time.Millisecond))
	if err := repo.DeleteWarmPool(ctx, releasePool); err != nil {
		return errors.Join(err, h.drain(ctx, conv))
	}
	return h.drain(ctx, conv)
}

// converge runs the release cache and convergence until want instances of the pool launched with
// version are warm (ready or stopped) and no live one runs another, and returns when.
func (h *harness) converge(ctx context.Context, cache *runnerrelease.Cache, conv *poolsize.Converger, version string, want int, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := cache.Refresh(ctx); err != nil {
			h.say("runner release: %v", err)
		}
		if _, err := conv.Pass(ctx); err != nil {
			h.say("runner release: convergence pass: %v", err)
		}
		live, err := h.sb.Store.LiveBrief(ctx)
		if err != nil {
			return time.Time{}, err
		}
		n, other := 0, 0
		for _, in := range live {
			if in.Pool != releasePool {
				continue
			}
			switch {
			case in.RunnerVersion != version:
				other++
			case in.State == store.StateReady || in.State == store.StateStopped:
				n++ // warm: booted, registered-ready or stopped, on the release
			}
		}
		if n >= want && other == 0 {
			return time.Now(), nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("the pool did not run %s only within %s", version, limit)
}

// drain scales the deleted pool's instances to zero.
func (h *harness) drain(ctx context.Context, conv *poolsize.Converger) error {
	_, err := conv.Pass(ctx)
	return err
}

// releaseClass is the measured class, on a launch template whose user data runnerpool rendered.
func (h *harness) releaseClass(ctx context.Context) (declared.RunnerClass, error) {
	lt, err := h.sb.ReleaseLaunchTemplate(ctx, "runnerpool-bench-release")
	if err != nil {
		return declared.RunnerClass{}, err
	}
	for sn, z := range launchSubnets {
		h.sb.Stack.EC2.SetSubnet(sn, z)
	}
	q, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + releaseClass)})
	if err != nil {
		return declared.RunnerClass{}, err
	}
	h.extraQueues = append(h.extraQueues, aws.ToString(q.QueueUrl))
	return declared.RunnerClass{
		Name: releaseClass, Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096, InstanceTypes: []string{"c*", "m*"},
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass: declared.UsageOnDemand, Subnets: slices.Sorted(maps.Keys(launchSubnets)), QueueURL: aws.ToString(q.QueueUrl),
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute),
		LaunchTemplateID: lt,
	}, nil
}
