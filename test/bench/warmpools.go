// The warm-pool phase: a stopped pool filled by the real convergence loop (fleet, boot, warm-up,
// StopInstances) and one provision that starts StoppedStarts of its instances; then one
// steady-state convergence pass over ConvergeRecords records.
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"golang.org/x/sync/errgroup"
)

// warmClass is the runner class of the benchmark's warm pool, with a pool queue of its own: its
// provision finds nothing to reuse and starts stopped instances.
const (
	warmClass = "warm"
	warmPool  = "bench-stopped"
)

// phaseWarmPools measures start_calls_per_50_started and convergence_pass_ms_2000_instances.
func phaseWarmPools(ctx context.Context, h *harness, res *Result) error {
	err := h.stoppedStarts(ctx, res)
	// The started runners, released, idle in the warm class's pool: nothing after needs them.
	err = errors.Join(err, h.retireIdle(context.WithoutCancel(ctx), "the warm pools phase is over", warmClass))
	if err != nil {
		res.add(Figure{Name: "start_calls_per_50_started", Missing: err.Error(), Unit: "calls"})
	}
	cerr := h.convergenceFigure(ctx, res, h.o.ConvergeRecords, "convergence_pass_ms_2000_instances", "runnerpool-bench-converge")
	return errors.Join(err, cerr)
}

// phaseConvergence20000 measures convergence_pass_ms_20000_instances: the same steady-state pass
// as the warm pools phase's, over ConvergeRecordsLarge records in a table of its own.
func phaseConvergence20000(ctx context.Context, h *harness, res *Result) error {
	return h.convergenceFigure(ctx, res, h.o.ConvergeRecordsLarge, "convergence_pass_ms_20000_instances", "runnerpool-bench-converge-large")
}

// convergenceFigure adds the figure name of a convergence pass over records, or says why it is missing.
func (h *harness) convergenceFigure(ctx context.Context, res *Result, records int, name, table string) error {
	err := h.convergencePass(ctx, res, records, name, table)
	if err != nil {
		res.add(Figure{Name: name, Missing: err.Error(), Unit: "ms"})
	}
	return err
}

// stoppedStarts fills a stopped warm pool with the convergence loop, then provisions its size.
func (h *harness) stoppedStarts(ctx context.Context, res *Result) error {
	n := h.o.StoppedStarts
	sb := h.sb
	counter := awslimit.NewCounter()
	cfg, err := sb.Stack.AWSConfig(ctx)
	if err != nil {
		return err
	}
	cfg.APIOptions = append(cfg.APIOptions, counter.AddMiddleware)
	ec2c := ec2.NewFromConfig(cfg, awslimit.WithEC2Limits(awslimit.Default()))
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	st := store.New(db, sb.Table)
	sqsc := sqs.NewFromConfig(cfg)
	qo, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + warmClass)})
	if err != nil {
		return fmt.Errorf("creating the warm class's queue: %w", err)
	}
	h.extraQueues = append(h.extraQueues, aws.ToString(qo.QueueUrl))
	q := pool.NewScopedQueue(sqsc, aws.ToString(qo.QueueUrl), pool.ScopeOptions{Logger: h.o.Logger})
	launch := fleet.LaunchSpec{LaunchTemplateID: sb.LaunchTemplate, LaunchTemplateVersion: "$Latest", Subnets: slices.Sorted(maps.Keys(sandbox.Subnets))}
	spec := warmpool.PoolSpec{
		Name: warmPool, Schedule: "bench", Stopped: n, SpecHash: "bench-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: warmClass, LaunchTemplateID: launch.LaunchTemplateID, Subnets: launch.Subnets, InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: launch.LaunchTemplateVersion, Queue: q},
	}
	gh, err := ghaccess.New(ghaccess.Config{APIURL: sb.Stack.Endpoints.GitHubAPI, Token: sb.Stack.GitHub.PAT(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: h.gh}, Logger: h.o.Logger})
	if err != nil {
		return err
	}
	pcfg := provision.Config{
		ResourceClasses: map[string]provision.ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}},
		RunnerClasses: map[string]runnerclass.Resolved{warmClass: {
			RunnerClass: declared.RunnerClass{
				Name: warmClass, LaunchTemplateID: launch.LaunchTemplateID, Subnets: launch.Subnets,
				MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute),
			},
			Queue: q, TemplateVersion: launch.LaunchTemplateVersion,
		}},
		DefaultRunnerClass: warmClass, DeploymentID: sandbox.DeploymentID, RegistrationWait: time.Minute,
	}
	var prov *provision.Provisioner
	cp, err := h.wired(controlplane.Clients{Store: st, EC2: ec2c, SQS: sqsc, GitHub: gh}, controlplane.Options{
		Classes: func(newProvisioner controlplane.NewProvisioner) (pool.Resolver, error) {
			prov = newProvisioner(pcfg)
			return pool.StaticResolver{warmClass: q}, nil
		},
		Warm: &controlplane.Warm{Targets: warmpool.StaticTargets(spec)},
	})
	if err != nil {
		return err
	}
	conv := cp.Converger
	h.say("  filling a stopped warm pool of %d with the convergence loop", n)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		rep, err := conv.Pass(ctx)
		if err != nil {
			return fmt.Errorf("convergence pass: %w", err)
		}
		pr, _ := rep.Pool(warmPool)
		if pr.Err != nil {
			return fmt.Errorf("convergence of %s: %w", warmPool, pr.Err)
		}
		if pr.Stopped >= n && pr.Warming == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm pool not filled in 3 minutes: %d stopped, %d warming", pr.Stopped, pr.Warming)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Stopped in EC2 too (StopInstances takes the stopping delay).
	for time.Now().Before(deadline) {
		stopped := 0
		for _, v := range sb.Stack.EC2.Instances() {
			if v.State == "stopped" && v.Tags["runnerpool:pool"] == warmPool {
				stopped++
			}
		}
		if stopped >= n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	h.mu.Lock()
	h.runSeq++
	run := fmt.Sprint(h.runSeq)
	h.mu.Unlock()
	counter.Reset()
	ghBefore := h.gh.Counts()
	t := time.Now()
	pres, err := prov.Provision(ctx, provision.Request{
		RepositoryID: repositoryID, Repository: repository, RunID: run, Attempt: 1, Count: n,
		// CPU and memory rather than a resource class: warm-pool records carry none, and a request
		// naming one only matches instances of that class.
		UsageClass: "on-demand", InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096,
	})
	took := time.Since(t)
	calls := counter.Counts()
	for k, v := range h.gh.Counts() {
		if d := v - ghBefore[k]; d > 0 {
			calls[k] = d
		}
	}
	res.Calls["started"] = calls
	if err != nil {
		return fmt.Errorf("provision of %d from the stopped pool: %w", n, err)
	}
	started := 0
	for _, r := range pres.Runners {
		if r.Source == provision.SourceStarted {
			started++
		}
	}
	res.Runners["started"] = started
	if started != n {
		res.note("the provision of %d from the stopped pool started %d (the rest reused or created)", n, started)
	}
	res.add(Figure{Name: "start_calls_per_50_started", Value: float64(calls["EC2.StartInstances"]) * 50 / float64(max(started, 1)), Unit: "calls",
		How: fmt.Sprintf("EC2 StartInstances calls of one provision of %d runners served by %d stopped warm-pool instances (filled by the convergence loop), scaled to 50 started; the provision took %s (start %s + registration %s simulated)",
			n, started, took.Round(time.Millisecond), h.o.scaled(AnchorStoppedStart), h.o.scaled(AnchorRegistration))})
	h.say("  %d started in %s with %d StartInstances calls", started, took.Round(time.Millisecond), calls["EC2.StartInstances"])

	if _, err := cp.Releaser.Release(ctx, pres.RunKey, 10*time.Minute); err != nil {
		return fmt.Errorf("releasing the started runners: %w", err)
	}
	return nil
}

// convergencePass times a steady-state pass over records warm records in four pools (two fifths
// hot, three fifths stopped, all current), in table, a table of their own, and against an EC2
// server of their own: a steady pass makes no EC2 call, and none of it may touch the sandbox.
func (h *harness) convergencePass(ctx context.Context, res *Result, records int, name, table string) error {
	const pools = 4
	per := records / pools
	hot := per * 2 / 5
	stopped := per - hot
	db := h.sb.Stack.DynamoDB()
	if err := store.CreateTable(ctx, db, table); err != nil {
		return err
	}
	// Dropped after the phase: DynamoDB Local keeps every table in its heap, and the next phase's
	// figure would pay for this one's 20,000 records.
	defer func() {
		_, _ = db.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()
	st := store.New(db, table)
	srv := ec2server.New(ec2server.Options{})
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	cfg, err := h.sb.Stack.AWSConfig(ctx)
	if err != nil {
		return err
	}
	counter, answered := awslimit.NewCounter(), &responseBytes{}
	cfg.APIOptions = append(cfg.APIOptions, counter.AddMiddleware, answered.AddMiddleware)
	ec2c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) })
	cst := store.New(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), table)

	h.say("  writing %d warm records (%d pools of %d hot and %d stopped)", pools*per, pools, hot, stopped)
	var specs []warmpool.PoolSpec
	now := time.Now()
	for p := range pools {
		spec := warmpool.PoolSpec{
			Name: fmt.Sprintf("bench-%d", p), Schedule: "default", Hot: hot, Stopped: stopped, SpecHash: "bench-v1", Scope: "acme",
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: "default", LaunchTemplateID: "lt-0123456789abcdef0", Subnets: []string{"subnet-0aaa"}, InstanceTypes: []string{"c6i.*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Default"},
		}
		specs = append(specs, spec)
		ids := make([]string, per)
		for i := range ids {
			ids[i] = fmt.Sprintf("i-%x%016x", h.rng.IntN(16), h.rng.Uint64()) // as EC2 names them: 17 hex digits, spread
		}
		if err := writeWarmRecords(ctx, st, spec, ids, hot, now); err != nil {
			return err
		}
	}
	cp, err := h.wired(controlplane.Clients{Store: cst, EC2: ec2c}, controlplane.Options{
		DeploymentID: "bench-converge", Warm: &controlplane.Warm{Targets: warmpool.StaticTargets(specs...)},
	})
	if err != nil {
		return err
	}
	conv := cp.Converger
	const passes = 5
	var took []float64
	var first time.Duration
	var cpu0 burstCPU // after the first pass
	var agents0, replica0 map[string]int
	key := "convergence"
	if records != h.o.ConvergeRecords {
		key = fmt.Sprintf("convergence %d", records)
	}
	counter.Reset()
	defer h.profile(strings.ReplaceAll(key, " ", "-"))()
	for i := range passes + 1 {
		rep, err := conv.Pass(ctx)
		if err != nil {
			return err
		}
		for _, pr := range rep.Pools {
			if pr.Err != nil || pr.Ready != hot || pr.Stopped != stopped || pr.CreateCalls+pr.StopCalls+pr.TerminateCalls != 0 {
				return fmt.Errorf("convergence pass not steady: %+v", pr)
			}
		}
		if i == 0 { // the first pass warms connections up and looks for removed pools
			first = rep.Took
			cpu0 = h.cpuNow()
			answered.n.Store(0)
			agents0, replica0 = h.agent.Counts(), h.cp.Counts()
			continue
		}
		took = append(took, ms(rep.Took))
	}
	calls := counter.Counts()
	res.Calls[key] = calls
	if a, r := diff(agents0, h.agent.Counts()), diff(replica0, h.cp.Counts()); total(a)+total(r) > 0 {
		h.say("  meanwhile, beside the passes: the agents' AWS requests %v, the replica's %v", a, r)
	}
	slices.Sort(took)
	perPass := formatValue(float64(total(calls)) / float64(passes+1))
	cost := passCost(h.cpuNow().since(cpu0), answered.n.Load(), passes)
	res.add(Figure{Name: name, Value: Percentile(took, 50), Unit: "ms",
		How: fmt.Sprintf("median of %d steady-state convergence passes (poolsize.Converger.Pass) over %d warm records in %d pools (%d hot, %d stopped each), in a table of their own; %s DynamoDB requests per pass (%s), no EC2 call; the first pass, which also looks for removed pools (every warmpool.DefaultDiscoverEvery), took %s; %s",
			passes, pools*per, pools, hot, stopped, perPass, perPassCalls(calls, passes+1), first.Round(time.Millisecond), cost)})
	h.say("  convergence pass over %d records: median %.0f ms, %s DynamoDB requests per pass (%s); the first, with the search for removed pools, %s; %s",
		pools*per, Percentile(took, 50), perPass, perPassCalls(calls, passes+1), first.Round(time.Millisecond), cost)
	return nil
}

// passCost says what the steady passes cost beside their time, robust to the machine's load: CPU
// per pass of the bench process (the pass, and whatever else runs in it meanwhile) and of each
// emulator, and the bytes of DynamoDB's answers per pass.
func passCost(cpu burstCPU, answered int64, passes int) string {
	parts := []string{fmt.Sprintf("bench process %.0f ms", ms(cpu.bench)/float64(passes))}
	for _, k := range slices.Sorted(maps.Keys(cpu.children)) {
		if cpu.children[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f ms", k, ms(cpu.children[k])/float64(passes)))
		}
	}
	return fmt.Sprintf("CPU per steady pass: %s; DynamoDB's answers %d bytes per pass", strings.Join(parts, ", "), answered/int64(passes))
}

// perPassCalls renders calls over n passes as "Op x/pass, ...", sorted by operation.
func perPassCalls(calls map[string]int, n int) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(calls)) {
		parts = append(parts, fmt.Sprintf("%s %s", op, formatValue(float64(calls[op])/float64(n))))
	}
	return strings.Join(parts, ", ")
}

// writeWarmRecords writes a current warm record of spec's pool for each of ids, the first hot
// ready and the rest stopped, with a threshold an hour after now, 32 writers at a time.
func writeWarmRecords(ctx context.Context, st *store.Store, spec warmpool.PoolSpec, ids []string, hot int, now time.Time) error {
	var g errgroup.Group // every record is written; the first error is returned
	g.SetLimit(32)
	for i, id := range ids {
		state := store.StateReady
		if i >= hot {
			state = store.StateStopped
		}
		g.Go(func() error {
			_, err := st.Create(ctx, store.Instance{
				ID: id, State: store.StateWarming, Threshold: now.Add(time.Hour), UsageClass: fleet.OnDemand, InstanceType: "c6i.large",
				CPU: 2, MemoryMiB: 4096, RunnerClass: spec.RunnerClass(), Pool: spec.Name, Scope: spec.Scope, SpecHash: spec.SpecHash,
			})
			if err == nil {
				_, err = st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: state, Threshold: now.Add(time.Hour)})
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("writing warm records: %w", err)
	}
	return nil
}
