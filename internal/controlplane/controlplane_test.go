package controlplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// clients are real SDK clients that are never called: New only wires.
func clients(t *testing.T) controlplane.Clients {
	t.Helper()
	cfg := aws.Config{Region: "us-east-1"}
	gh, err := ghaccess.New(ghaccess.Config{APIURL: "http://127.0.0.1:1/", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.Clients{
		Store: store.New(dynamodb.NewFromConfig(cfg), "state"), EC2: ec2.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), GitHub: gh,
	}
}

func static(controlplane.NewProvisioner) (pool.Resolver, error) { return pool.StaticResolver{}, nil }

// runners is a scale set runner source that is never asked.
type runners struct{}

func (runners) GenerateJITConfig(context.Context, string, int64, string) (ghaccess.JITConfig, error) {
	return ghaccess.JITConfig{}, nil
}

// TestNewWiresWhatIsAskedFor: without warm pools there is no starter, job queue, converger or
// worker; warm pools without a job queue converge but serve no pool jobs; with a job queue the
// scale set listeners are made over the very queue the worker serves, the worker mints scale set
// runners through them, and convergence gets the backstop for lost completions.
func TestNewWiresWhatIsAskedFor(t *testing.T) {
	t.Parallel()
	targets := warmpool.StaticTargets()
	for _, tc := range []struct {
		name                             string
		warm                             *controlplane.Warm
		starter, converger, jobs, worker bool
	}{
		{name: "no warm pools"},
		{name: "convergence only", warm: &controlplane.Warm{Targets: targets}, starter: true, converger: true},
		{name: "pool jobs", warm: &controlplane.Warm{Targets: targets, JobQueueURL: "http://127.0.0.1:1/000000000000/jobs"}, starter: true, converger: true, jobs: true, worker: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var madeOver *pooljob.JobQueue
			if tc.warm != nil {
				tc.warm.ScaleSets = func(q *pooljob.JobQueue) (pooljob.ScaleSetRunners, error) { madeOver = q; return runners{}, nil }
			}
			var prov *provision.Provisioner
			c, err := controlplane.New(clients(t), controlplane.Options{
				DeploymentID: "dep", Now: time.Now, Warm: tc.warm,
				Classes: func(np controlplane.NewProvisioner) (pool.Resolver, error) {
					prov = np(provision.Config{})
					return pool.StaticResolver{}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if c.Registrar == nil || c.Claimer == nil || c.Fleet == nil || c.Releaser == nil || c.Refresher == nil || prov == nil {
				t.Fatalf("components %+v, provisioner %v: want the step-driven control plane", c, prov)
			}
			got := []bool{c.Starter != nil, c.Converger != nil, c.Jobs != nil, c.Worker != nil, c.Backstop != nil}
			want := []bool{tc.starter, tc.converger, tc.jobs, tc.worker, tc.jobs}
			for i, what := range []string{"starter", "converger", "job queue", "worker", "backstop"} {
				if got[i] != want[i] {
					t.Errorf("%s wired: %v, want %v", what, got[i], want[i])
				}
			}
			if tc.jobs && (madeOver != c.Jobs || c.ScaleSets == nil) {
				t.Errorf("scale set listeners made over %p, the worker serves %p (runners %v)", madeOver, c.Jobs, c.ScaleSets)
			}
			if !tc.jobs && madeOver != nil {
				t.Error("scale set listeners made without a pool job queue")
			}
		})
	}
}

// TestNewRefusesWhatCannotWork: the runner classes and, with warm pools, their targets are
// required; a pool job queue needs an SQS client.
func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	noSQS := clients(t)
	noSQS.SQS = nil
	for _, tc := range []struct {
		name string
		cl   controlplane.Clients
		o    controlplane.Options
		want string
	}{
		{"no classes", clients(t), controlplane.Options{DeploymentID: "dep"}, "Classes is required"},
		{"no store", controlplane.Clients{}, controlplane.Options{DeploymentID: "dep", Classes: static}, "store and an EC2 client"},
		{"no targets", clients(t), controlplane.Options{DeploymentID: "dep", Classes: static, Warm: &controlplane.Warm{}}, "targets"},
		{"no SQS", noSQS, controlplane.Options{DeploymentID: "dep", Classes: static, Warm: &controlplane.Warm{Targets: warmpool.StaticTargets(), JobQueueURL: "u"}}, "SQS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := controlplane.New(tc.cl, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error about %q", err, tc.want)
			}
		})
	}
}
