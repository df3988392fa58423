// The "refresh 20000" phase: steady-state refresh passes over RefreshRecords warm records, each
// with its instance running in an EC2 server of its own, in a table of their own.
package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

const refreshDeployment = "bench-refresh"

// phaseRefresh20000 measures refresh_pass_ms_20000_instances.
func phaseRefresh20000(ctx context.Context, h *harness, res *Result) error {
	err := h.refreshPass(ctx, res, h.o.RefreshRecords)
	if err != nil {
		res.add(Figure{Name: "refresh_pass_ms_20000_instances", Missing: err.Error(), Unit: "ms"})
	}
	return err
}

// refreshPass launches records instances tagged with its own deployment in an EC2 server of its
// own, writes a current warm record for each (two fifths ready, the rest stopped, in four pools)
// in a table of its own, and times steady refresh passes over them: expiry finds nothing, the
// orphan sweep lists every tagged instance and every live record and finds no orphan. No GitHub
// scope and no pool queue: those phases cost per scope and per message, not per record.
func (h *harness) refreshPass(ctx context.Context, res *Result, records int) error {
	const pools = 4
	table := "runnerpool-bench-refresh"
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
	srv := ec2server.New(ec2server.Options{MaxLiveInstances: records,
		// Delays of 400 ms make the server's lifecycle tick, a walk over every instance, every
		// 100 ms; instant transitions made it every 5 ms, which took a core from the pass measured.
		PendingDelay: 400 * time.Millisecond, StoppingDelay: 400 * time.Millisecond, ShuttingDownDelay: 400 * time.Millisecond})
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	cfg, err := h.sb.Stack.AWSConfig(ctx)
	if err != nil {
		return err
	}
	ec2c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) })
	var ids []string
	for len(ids) < records {
		n := int32(min(1000, records-len(ids)))
		out, err := ec2c.RunInstances(ctx, &ec2.RunInstancesInput{
			ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large", MinCount: aws.Int32(n), MaxCount: aws.Int32(n),
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
				Tags: []ec2types.Tag{{Key: aws.String(tags.Deployment), Value: aws.String(refreshDeployment)}}}},
		})
		if err != nil {
			return fmt.Errorf("launching the refresh pass's instances: %w", err)
		}
		for _, in := range out.Instances {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
	}
	per := records / pools
	h.say("  writing %d warm records (%d pools of %d) for %d running instances", pools*per, pools, per, len(ids))
	now := time.Now()
	for p := range pools {
		spec := warmpool.PoolSpec{
			Name: fmt.Sprintf("bench-%d", p), Scope: "acme", SpecHash: "bench-v1",
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: "default", LaunchTemplateID: "lt-0123456789abcdef0"}},
		}
		if err := writeWarmRecords(ctx, st, spec, ids[p*per:(p+1)*per], per*2/5, now); err != nil {
			return err
		}
	}

	counter := awslimit.NewCounter()
	cfg.APIOptions = append(cfg.APIOptions, counter.AddMiddleware)
	cec2 := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) })
	cst := store.New(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), table)
	cp, err := h.wired(controlplane.Clients{Store: cst, EC2: cec2}, controlplane.Options{
		DeploymentID: refreshDeployment,
		Classes:      func(controlplane.NewProvisioner) (pool.Resolver, error) { return pool.StaticResolver{}, nil },
	})
	if err != nil {
		return err
	}
	r := cp.Refresher
	const passes = 5
	var took []float64
	var first time.Duration
	var firstCalls map[string]int
	var last refresh.Report
	stopProfile := sync.OnceFunc(h.profile("refresh"))
	defer stopProfile()
	for i := range passes + 1 {
		if i == 1 {
			firstCalls = counter.Counts()
			counter.Reset()
		}
		t := time.Now()
		rep, err := r.Run(ctx)
		d := time.Since(t)
		if err != nil {
			return fmt.Errorf("refresh pass: %w", err)
		}
		if rep.Changed() || rep.Orphans.Tagged != pools*per || len(rep.Orphans.Young) != 0 {
			return fmt.Errorf("refresh pass not steady: changed %v, %d tagged, %d young", rep.Changed(), rep.Orphans.Tagged, len(rep.Orphans.Young))
		}
		last = rep
		if i == 0 { // the first pass also sweeps agent items (a Scan, every AgentSweepInterval)
			first = d
			continue
		}
		took = append(took, ms(d))
	}
	calls := counter.Counts()
	res.Calls["refresh 20000"] = calls
	slices.Sort(took)
	perPass := formatValue(float64(total(calls)) / float64(passes))
	res.add(Figure{Name: "refresh_pass_ms_20000_instances", Value: Percentile(took, 50), Unit: "ms",
		How: fmt.Sprintf("median of %d steady refresh passes (refresh.Refresher.Run) over %d warm records in a table of their own, each instance running and tagged in an EC2 server of its own, no GitHub scope, no pool queue; %s requests per pass (%s); the first pass, which also sweeps agent items with a Scan, took %s with %d requests (%s)",
			passes, pools*per, perPass, perPassCalls(calls, passes), first.Round(time.Millisecond), total(firstCalls), perPassCalls(firstCalls, 1))})
	h.say("  refresh pass over %d records: median %.0f ms, %s requests per pass (%s); first pass %s", pools*per, Percentile(took, 50), perPass, perPassCalls(calls, passes), first.Round(time.Millisecond))
	stopProfile()
	cdb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	if err := h.quotaRepair(ctx, res, cdb, cst, table, ids[:pools*per], last, counter); err != nil {
		res.add(Figure{Name: "quota_repair_ms_20000_instances", Missing: err.Error(), Unit: "ms"})
		h.say("  quota repair not measured: %v", err)
	}
	return nil
}
