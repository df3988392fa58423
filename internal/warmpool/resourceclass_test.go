// Warm instances carry their resource class: convergence driven by the table's configuration writes
// it on every record it creates (and so on the pool messages of hot instances), so a step-driven
// provision naming that resource class can take them.
package warmpool_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func TestResourceClassOf(t *testing.T) {
	t.Parallel()
	classes := map[string]warmpool.Size{
		"small": {CPU: 2, MemoryMiB: 4096}, "small-mem": {CPU: 2, MemoryMiB: 8192},
		"medium": {CPU: 4, MemoryMiB: 8192}, "large": {CPU: 8, MemoryMiB: 16384},
	}
	for _, tc := range []struct {
		cpu, mem int
		want     string
	}{
		{2, 4096, "small"},      // exactly
		{4, 8192, "medium"},     // exactly, though small and small-mem fit too
		{4, 16384, "medium"},    // the largest that fits: most vCPUs first
		{2, 16384, "small-mem"}, // then most memory
		{16, 65536, "large"},    // bigger than every class
		{1, 2048, ""},           // smaller than every class
		{8, 4096, "small"},      // memory rules out the rest
	} {
		if got := warmpool.ResourceClassOf(classes, tc.cpu, tc.mem); got != tc.want {
			t.Errorf("ResourceClassOf(%d vCPUs, %d MiB) = %q, want %q", tc.cpu, tc.mem, got, tc.want)
		}
	}
	if got := warmpool.ResourceClassOf(nil, 2, 4096); got != "" {
		t.Errorf("without resource classes: %q, want none", got)
	}
}

func TestConvergeRecordsCarryResourceClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	repo := declared.NewRepository(e.st)
	if _, err := repo.PutRunnerClass(ctx, e.runnerClass(), 0); err != nil { // 2 vCPUs, 4096 MiB
		t.Fatalf("PutRunnerClass: %v", err)
	}
	wp := declared.WarmPool{Name: "small-x64", RunnerClass: runnerClass, Schedules: []schedule.Schedule{{Name: "default", Hot: 1, Stopped: 1}}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	targets := warmpool.ConfigTargets(declared.NewRepository(e.st), warmpool.ConfigOptions{
		Queue: func(url string) *pool.Queue { return pool.NewQueue(e.sqs, url) }, Scope: "acme",
		ResourceClasses: map[string]warmpool.Size{"small": {CPU: 2, MemoryMiB: 4096}, "large": {CPU: 8, MemoryMiB: 16384}},
		Versions:        launchtemplate.New(e.ec2, launchtemplate.Options{}),
	})
	c := e.converger(t, targets, poolsize.Options{})

	pr := poolReport(t, pass(t, c), wp.Name)
	if len(pr.Created) != 2 {
		t.Fatalf("pass 1: %+v; want 2 created", pr)
	}
	e.warmUp(t, wp.Name, nil, nil)
	pr = poolReport(t, pass(t, c), wp.Name)
	if pr.Ready != 1 || pr.Stopped != 1 {
		t.Fatalf("pass 2: %+v; want 1 hot and 1 stopped", pr)
	}
	for state, recs := range e.records(t, wp.Name) {
		for _, r := range recs {
			if r.ResourceClass != "small" || r.CPU != 2 || r.MemoryMiB != 4096 {
				t.Errorf("%s record %s: resource class %q (%d vCPUs, %d MiB), want small", state, r.ID, r.ResourceClass, r.CPU, r.MemoryMiB)
			}
		}
	}
	// The hot instance's pool message says it too: a provision naming small fits it, one naming
	// large does not.
	out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("pool messages: %v %v, want the hot instance's", out, err)
	}
	msg, err := pool.Decode(aws.ToString(out.Messages[0].Body))
	if err != nil || msg.InstanceID != pr.Readied[0] || msg.ResourceClass != "small" {
		t.Fatalf("pool message %+v %v: want %s with resource class small", msg, err, pr.Readied[0])
	}
	small := pool.Filter{ResourceClass: "small", MinCPU: 2, MinMemoryMiB: 4096, Scope: "acme/api"}
	large := pool.Filter{ResourceClass: "large", MinCPU: 8, MinMemoryMiB: 16384, Scope: "acme/api"}
	if !small.Matches(msg) || large.Matches(msg) {
		t.Errorf("message %+v: small fits %v (want true), large fits %v (want false)", msg, small.Matches(msg), large.Matches(msg))
	}
	if n := len(e.records(t, wp.Name)[store.StateStopped]); n != 1 {
		t.Errorf("%d stopped, want 1", n)
	}
}
