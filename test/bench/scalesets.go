// The scale-set phase: a hot warm pool filled by the real convergence loop, two listener replicas
// (reconciler/scalesets) and a pool worker in process, each replica built through the composition
// root (internal/controlplane) as `runnerpool serve` builds one, and the sandbox's agents running
// the jobs with the scale set's JIT configurations. Jobs are queued at the GitHub fake's Actions
// service one after the other; each is timed from its queue time to a runner taking it: first in
// github.com's shape of the service (jobs assigned to the scale set, JobAssigned), then, the pool
// filled again, in the shape of GHES versions that need acquisition (JobAvailable, acquirejobs).
// Then the replica holding the session is killed and the other's takeover is timed; then that
// holder is killed too, its session expires at the service, and a third replica's takeover is timed
// (deleting the recorded session answers 400, which the listener forgives).
package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const (
	ssClass = "ss"
	ssPool  = "bench-scale-set"
	ssName  = "bench-warm"
	ssJobs  = 10
)

// phaseScaleSets measures scale_set_job_start_p99_ms (github.com's shape),
// scale_set_job_start_p99_ms_acquire (GHES's), scale_set_takeover_s and
// scale_set_takeover_s_expired_session.
func phaseScaleSets(ctx context.Context, h *harness, res *Result) error {
	err := h.scaleSets(ctx, res)
	if err != nil {
		for _, name := range []string{"scale_set_job_start_p99_ms", "scale_set_job_start_p99_ms_acquire", "scale_set_takeover_s", "scale_set_takeover_s_expired_session"} {
			if !slices.ContainsFunc(res.Figures, func(f Figure) bool { return f.Name == name }) {
				res.add(Figure{Name: name, Missing: err.Error()})
			}
		}
	}
	return err
}

// ssParts are the in-process pieces of the phase: the clients, and the control plane wired over
// them by the composition root (convergence, the job queue, the pool worker).
type ssParts struct {
	st      *store.Store
	ec2     *ec2.Client
	sqs     *sqs.Client
	gh      *ghaccess.Client
	jobsURL string
	jobs    *pooljob.JobQueue
	spec    warmpool.PoolSpec
	cp      *controlplane.Components // the first replica's
	stopA   func(bool)               // stops the first replica's listeners
}

func (h *harness) scaleSetParts(ctx context.Context) (ssParts, error) {
	sb := h.sb
	cfg, err := sb.Stack.AWSConfig(ctx)
	if err != nil {
		return ssParts{}, err
	}
	p := ssParts{
		ec2: ec2.NewFromConfig(cfg, awslimit.WithEC2Limits(awslimit.Default())),
		st:  store.New(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), sb.Table),
	}
	p.sqs = sqs.NewFromConfig(cfg)
	qo, err := p.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-ss-jobs")})
	if err != nil {
		return ssParts{}, fmt.Errorf("creating the job queue: %w", err)
	}
	p.jobsURL = aws.ToString(qo.QueueUrl)
	p.gh, err = ghaccess.New(ghaccess.Config{APIURL: sb.Stack.Endpoints.GitHubAPI, Token: sb.Stack.GitHub.PAT(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: h.gh}, Logger: h.o.Logger})
	if err != nil {
		return ssParts{}, err
	}
	p.spec = warmpool.PoolSpec{
		Name: ssPool, Schedule: "bench", Hot: ssJobs, SpecHash: "bench-ss-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: ssClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)), InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Latest"},
	}
	return p, nil
}

// wire builds the phase's first replica, bench-ss-a, and starts its listeners (replica): its
// control plane's convergence fills the pool and its pool worker mints the scale set runners.
func (h *harness) wire(ctx context.Context, p *ssParts) error {
	cp, stop, err := h.replica(ctx, *p, "bench-ss-a")
	if err != nil {
		return err
	}
	p.cp, p.stopA = cp, stop
	return nil
}

// fillHot runs convergence passes until the pool holds its hot instances.
func (h *harness) fillHot(ctx context.Context, p ssParts) error {
	conv := p.cp.Converger
	for deadline := time.Now().Add(3 * time.Minute); ; {
		rep, err := conv.Pass(ctx)
		if err != nil {
			return fmt.Errorf("convergence pass: %w", err)
		}
		pr, _ := rep.Pool(ssPool)
		if pr.Err != nil {
			return fmt.Errorf("convergence of %s: %w", ssPool, pr.Err)
		}
		if pr.Ready >= ssJobs && pr.Warming == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hot pool not filled in 3 minutes: %d ready, %d warming", pr.Ready, pr.Warming)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// replica builds a listener replica named holder through the composition root, as
// `runnerpool serve` builds one (the pool's convergence, the job queue, the pool worker and the
// scale set listeners over the same clients), and runs its listeners until the returned stop, which
// stops them as a crash does when kill is set (no lease released, no session deleted).
func (h *harness) replica(ctx context.Context, p ssParts, holder string) (*controlplane.Components, func(kill bool), error) {
	set := declared.ScaleSet{Name: ssName, WarmPool: ssPool, Scope: sandbox.Scope, MaxRunners: ssJobs}
	var m *scalesets.Manager
	cp, err := controlplane.New(controlplane.Clients{Store: p.st, EC2: p.ec2, SQS: p.sqs, GitHub: p.gh}, controlplane.Options{
		DeploymentID: sandbox.DeploymentID, Logger: h.o.Logger,
		Classes: func(controlplane.NewProvisioner) (pool.Resolver, error) { return pool.StaticResolver{}, nil },
		Warm: &controlplane.Warm{
			JobQueueURL: p.jobsURL, Targets: warmpool.StaticTargets(p.spec), CatalogTTL: time.Minute,
			ScaleSets: scalesets.Listeners(scalesets.Config{
				Store: p.st, Holder: holder, LeaseTTL: 5 * time.Second, Resync: time.Second, Logger: h.o.Logger,
				GitHub: p.gh, APIURL: h.sb.Stack.Endpoints.GitHubAPI,
				ScaleSets: func(context.Context) ([]declared.ScaleSet, error) { return []declared.ScaleSet{set}, nil },
			}, func(made *scalesets.Manager) { m = made }),
		},
	})
	if err != nil {
		return nil, nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(lctx) }()
	var once sync.Once
	return cp, func(kill bool) {
		once.Do(func() {
			if kill {
				m.Kill()
			}
			cancel()
			<-done
		})
	}, nil
}

func (h *harness) scaleSets(ctx context.Context, res *Result) error {
	p, err := h.scaleSetParts(ctx)
	if err != nil {
		return err
	}
	if err := h.wire(ctx, &p); err != nil {
		return err
	}
	stopA := p.stopA
	defer stopA(false)
	h.say("  filling a hot warm pool of %d with the convergence loop", ssJobs)
	if err := h.fillHot(ctx, p); err != nil {
		return err
	}
	_, stopB, err := h.replica(ctx, p, "bench-ss-b")
	if err != nil {
		return err
	}
	defer stopB(false)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go func() { _ = p.cp.Worker.Run(wctx) }()

	fake := h.sb.Stack.GitHub
	holder := func() string {
		st, ok := fake.ScaleSet(sandbox.Scope, ssName)
		if !ok || st.Session == nil {
			return ""
		}
		return st.Session.Owner
	}
	if err := waitUntil(ctx, time.Minute, func() bool { return holder() != "" }); err != nil {
		return fmt.Errorf("no listener opened the scale set's session: %w", err)
	}
	for _, round := range []struct {
		shape       githubfake.ScaleSetShape
		figure, how string
		first       int64
	}{
		{githubfake.ShapeAssigned, "scale_set_job_start_p99_ms", "github.com's shape: the service assigns each job to the scale set (JobAssigned)", 95000},
		{githubfake.ShapeAvailable, "scale_set_job_start_p99_ms_acquire", "the shape of GHES versions that need acquisition (JobAvailable, acquirejobs, JobAssigned)", 95100},
	} {
		fake.SetScaleSetShapeOf(sandbox.Scope, ssName, round.shape)
		if round.shape == githubfake.ShapeAvailable {
			h.say("  filling the hot warm pool again for the acquisition shape")
			if err := h.fillHot(ctx, p); err != nil {
				return err
			}
		}
		lat, err := h.jobStarts(ctx, round.first)
		if err != nil {
			return err
		}
		res.add(Figure{Name: round.figure, Value: Percentile(lat, 99), Unit: "ms",
			How: fmt.Sprintf("%d jobs queued one after the other for a scale set fed by a hot warm pool, %s: from the job's queue time to the sandbox agent's runner taking it with the scale set's JIT config (registration %s simulated); p50 %.0f ms",
				ssJobs, round.how, h.o.scaled(AnchorRegistration), Percentile(lat, 50))})
		h.say("  scale set jobs started (%s): p50 %.0f ms, p99 %.0f ms", round.shape, Percentile(lat, 50), Percentile(lat, 99))
	}

	dead := holder()
	killed := time.Now()
	if dead == "bench-ss-a" {
		stopA(true)
	} else {
		stopB(true)
	}
	if err := waitUntil(ctx, 2*time.Minute, func() bool { o := holder(); return o != "" && o != dead }); err != nil {
		return fmt.Errorf("no takeover after %s died: %w", dead, err)
	}
	took := time.Since(killed)
	res.add(Figure{Name: "scale_set_takeover_s", Value: took.Seconds(), Unit: "s",
		How: "from the killed session holder's death (no lease released, no session deleted) until the other listener replica holds the scale set's session, lease TTL 5 s"})
	h.say("  scale set session taken over in %s", took.Round(time.Millisecond))

	stopC, err := h.expiredTakeover(ctx, p, holder, map[string]func(bool){"bench-ss-a": stopA, "bench-ss-b": stopB}, res)
	if err != nil {
		return err
	}
	defer stopC(false)

	// The jobs' instances end with their jobs: wait, so the audit finds them terminated. The last
	// job can end after its holder was killed, so its completion waits at the service for the next
	// session: the third replica, kept listening until then, delivers it to the pool worker.
	if err := waitUntil(ctx, 2*time.Minute, func() bool {
		recs, err := p.st.ByPool(ctx, ssPool)
		return err == nil && len(recs) == 0
	}); err != nil {
		recs, _ := p.st.ByPool(ctx, ssPool)
		var left []string
		for _, in := range recs {
			left = append(left, fmt.Sprintf("%s (%s, run %s)", in.ID, in.State, in.RunID))
		}
		return fmt.Errorf("the scale set jobs' instances did not end: %s left: %w", strings.Join(left, ", "), err)
	}
	return nil
}

// jobStarts queues ssJobs jobs one after the other and returns, in milliseconds and sorted, how long
// each waited from its queue time until a runner took it.
func (h *harness) jobStarts(ctx context.Context, first int64) ([]float64, error) {
	fake := h.sb.Stack.GitHub
	owner, repo, _ := strings.Cut(sandbox.Scope, "/")
	var lat []float64
	for i := range ssJobs {
		id := fake.QueueScaleSetJob(owner, repo, first+int64(i), ssName)
		var j = struct{ queued, started time.Time }{}
		if err := waitUntil(ctx, 2*time.Minute, func() bool {
			job, _ := fake.Job(id)
			j.queued, j.started = job.QueuedAt, job.StartedAt
			return !job.StartedAt.IsZero()
		}); err != nil {
			return nil, fmt.Errorf("scale set job %d not taken by a runner: %w", id, err)
		}
		lat = append(lat, float64(j.started.Sub(j.queued).Microseconds())/1000)
	}
	slices.Sort(lat)
	return lat, nil
}

// expiredTakeover kills the session holder while a third replica waits; the service expires the
// dead holder's session (idle 2 s, shorter than the 5 s lease) before the lease lapses, so the
// third replica's delete of the recorded session answers 400. Timed from the kill to the third
// replica's session. It returns the third replica's stop, which the caller calls once it needs no
// listener any more (the third replica is then the only one).
func (h *harness) expiredTakeover(ctx context.Context, p ssParts, holder func() string, stops map[string]func(bool), res *Result) (stopC func(bool), err error) {
	fake := h.sb.Stack.GitHub
	fake.SetScaleSetTiming(githubfake.ScaleSetTiming{SessionIdle: 2 * time.Second})
	defer fake.SetScaleSetTiming(githubfake.ScaleSetTiming{})
	_, stopC, err = h.replica(ctx, p, "bench-ss-c")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			stopC(false)
		}
	}()
	dead := holder()
	stop, ok := stops[dead]
	if !ok {
		return nil, fmt.Errorf("session holder %q is not a replica of the phase", dead)
	}
	killed := time.Now()
	stop(true)
	expired := false
	if err := waitUntil(ctx, 2*time.Minute, func() bool {
		o := holder()
		expired = expired || o == ""
		return o == "bench-ss-c"
	}); err != nil {
		return nil, fmt.Errorf("no takeover after %s died with its session expired: %w", dead, err)
	}
	if !expired {
		return nil, fmt.Errorf("the dead holder's session never showed expired: the figure would not measure that takeover")
	}
	took := time.Since(killed)
	res.add(Figure{Name: "scale_set_takeover_s_expired_session", Value: took.Seconds(), Unit: "s",
		How: "from the killed session holder's death until a third listener replica holds a new session, the dead holder's session expired at the service meanwhile (deleting it answers 400 RunnerScaleSetSessionExpiredException), lease TTL 5 s"})
	h.say("  scale set session taken over after the old one expired in %s", took.Round(time.Millisecond))
	return stopC, nil
}

// waitUntil polls cond every 20 ms until it holds, ctx ends or d passes.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
