// Tests of fleet creation through the real SDK client against our EC2 server.
package fleet

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

var subnets = map[string]string{"subnet-a": "us-east-1a", "subnet-b": "us-east-1b", "subnet-c": "us-east-1c"}

type env struct {
	srv    *ec2server.Server
	client *ec2.Client
	rec    *recorder
	spec   LaunchSpec
	clock  *clock
}

// recorder wraps the client: it keeps every CreateFleet input and can replace the answer of spot
// fleets (our EC2 server's capacity limits do not tell spot from on-demand).
type recorder struct {
	EC2API
	mu         sync.Mutex
	inputs     []*ec2.CreateFleetInput
	noSpot     bool
	terminates atomic.Int32
}

func (r *recorder) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, opts ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	r.mu.Lock()
	r.inputs = append(r.inputs, in)
	noSpot := r.noSpot
	r.mu.Unlock()
	if noSpot && in.TargetCapacitySpecification.DefaultTargetCapacityType == types.DefaultTargetCapacityTypeSpot {
		return &ec2.CreateFleetOutput{FleetId: aws.String("fleet-nospot"), Errors: []types.CreateFleetError{{
			ErrorCode: aws.String("InsufficientInstanceCapacity"), ErrorMessage: aws.String("no spot capacity"),
			Lifecycle: types.InstanceLifecycleSpot,
			LaunchTemplateAndOverrides: &types.LaunchTemplateAndOverridesResponse{Overrides: &types.FleetLaunchTemplateOverrides{
				InstanceType: "c6i.large", SubnetId: aws.String("subnet-a"), AvailabilityZone: aws.String("us-east-1a")}},
		}}}, nil
	}
	return r.EC2API.CreateFleet(ctx, in, opts...)
}

func (r *recorder) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	r.terminates.Add(1)
	return r.EC2API.TerminateInstances(ctx, in, opts...)
}

func (r *recorder) fleetInputs() []*ec2.CreateFleetInput {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.inputs)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, ShuttingDownDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	for s, z := range subnets {
		srv.SetSubnet(s, z)
	}
	client := ec2.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")},
		func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) },
		awslimit.WithEC2LimitsRetry(awslimit.Default(), awslimit.RetryOptions{MaxBackoff: 10 * time.Millisecond}))
	lt, err := client.CreateLaunchTemplate(t.Context(), &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-0123456789abcdef0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		srv: srv, client: client, rec: &recorder{EC2API: client},
		clock: &clock{t: time.Date(2025, 5, 31, 12, 0, 0, 0, time.UTC)},
		spec: LaunchSpec{
			LaunchTemplateID:      aws.ToString(lt.LaunchTemplate.LaunchTemplateId),
			LaunchTemplateVersion: "1",
			Subnets:               []string{"subnet-a", "subnet-b", "subnet-c"},
			Tags:                  map[string]string{tags.Deployment: "dep-1", tags.RunID: "run-1", tags.RunnerClass: "default"},
		},
	}
}

func (e *env) fleet() *Fleet {
	return New(e.rec, Options{Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)})
}

// running lists the instances the server has not terminated (or begun terminating).
func (e *env) running() []ec2server.InstanceView {
	var out []ec2server.InstanceView
	for _, v := range e.srv.Instances() {
		if v.State == "pending" || v.State == "running" {
			out = append(out, v)
		}
	}
	return out
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := Request{Count: 2, UsageClass: OnDemand, InstanceTypes: []string{"c*"}, MinCPU: 2, MinMemoryMiB: 4096,
		Spec: LaunchSpec{LaunchTemplateID: "lt-1", LaunchTemplateVersion: "$Default", Subnets: []string{"subnet-a"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good request: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Request)
		want   string
	}{
		{"zero count", func(r *Request) { r.Count = 0 }, "count 0"},
		{"too many", func(r *Request) { r.Count = MaxCount + 1 }, "between 1 and"},
		{"usage class", func(r *Request) { r.UsageClass = "reserved" }, `usage class "reserved"`},
		{"bad pattern", func(r *Request) { r.InstanceTypes = []string{"C6I.LARGE"} }, "instance type pattern"},
		{"negative cpu", func(r *Request) { r.MinCPU = -1 }, "negative"},
		{"max below min", func(r *Request) { r.MaxMemoryMiB = 1024 }, "below its minimum"},
		{"no template", func(r *Request) { r.Spec.LaunchTemplateID = "" }, "launch template"},
		{"no template version", func(r *Request) { r.Spec.LaunchTemplateVersion = "" }, "launch template version is required"},
		{"bad template version", func(r *Request) { r.Spec.LaunchTemplateVersion = "latest" }, `launch template version "latest"`},
		{"no subnet", func(r *Request) { r.Spec.Subnets = nil }, "subnet"},
		{"long token", func(r *Request) { r.ClientToken = strings.Repeat("x", 65) }, "client token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := good
			tc.mutate(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCreateFills(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.fleet()
	got, err := f.Create(t.Context(), Request{Count: 4, UsageClass: OnDemand, InstanceTypes: []string{"c*", "m*"},
		MinCPU: 2, MinMemoryMiB: 4096, Spec: e.spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("launched %d, want 4", len(got))
	}
	if n := e.srv.Calls()["CreateFleet"]; n != 1 {
		t.Errorf("%d CreateFleet calls, want 1", n)
	}
	in := e.rec.fleetInputs()[0]
	if in.Type != types.FleetTypeInstant || len(in.LaunchTemplateConfigs[0].Overrides) != 3 {
		t.Errorf("fleet type %s with %d overrides, want instant with one per subnet", in.Type, len(in.LaunchTemplateConfigs[0].Overrides))
	}
	zones := map[string]bool{}
	for _, l := range got {
		v, ok := e.srv.Instance(l.ID)
		if !ok {
			t.Fatalf("instance %s unknown to the server", l.ID)
		}
		if l.UsageClass != OnDemand || v.Lifecycle != OnDemand {
			t.Errorf("%s: usage class %q, server lifecycle %q", l.ID, l.UsageClass, v.Lifecycle)
		}
		if l.Zone != v.AvailabilityZone || l.SubnetID != v.SubnetID || subnets[l.SubnetID] != l.Zone {
			t.Errorf("%s: launched in %s/%s, server says %s/%s", l.ID, l.SubnetID, l.Zone, v.SubnetID, v.AvailabilityZone)
		}
		if l.InstanceType != v.InstanceType || !instancetype.MatchAny([]string{"c*", "m*"}, l.InstanceType) {
			t.Errorf("%s: type %q (server %q) not allowed", l.ID, l.InstanceType, v.InstanceType)
		}
		for k, want := range e.spec.Tags {
			if v.Tags[k] != want {
				t.Errorf("%s: tag %s = %q, want %q (tagged at launch)", l.ID, k, v.Tags[k], want)
			}
		}
		zones[l.Zone] = true
	}
	if len(zones) < 2 {
		t.Errorf("4 instances all in %v: the fleet should spread across the subnets", zones)
	}
}

func TestBurstableOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.fleet()
	req := Request{Count: 1, UsageClass: OnDemand, InstanceTypes: []string{"t3.*", "c6i.*"}, MinCPU: 2, MinMemoryMiB: 1024, Spec: e.spec}
	got, err := f.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(got[0].InstanceType, "t3.") {
		t.Errorf("launched burstable %s without AllowBurstable", got[0].InstanceType)
	}
	req.AllowBurstable = true
	got, err = f.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got[0].InstanceType, "t3.") {
		t.Errorf("launched %s: with burstable allowed the cheaper t3 should win", got[0].InstanceType)
	}
}

// A fleet EC2 fills only partly is terminated whole: nothing of it keeps running.
func TestPartialFleetTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.SetCapacity("", "", 2)
	f := e.fleet()
	_, err := f.Create(t.Context(), Request{Count: 5, UsageClass: OnDemand, InstanceTypes: []string{"c6i.large"}, MinCPU: 2, Spec: e.spec})
	if !IsInsufficientCapacity(err) {
		t.Fatalf("Create = %v, want insufficient capacity", err)
	}
	var ice *InsufficientCapacityError
	_ = errorsAs(err, &ice)
	if ice.Launched != 2 || len(ice.Terminated) != 2 || len(ice.Unterminated) != 0 {
		t.Errorf("error %+v: want 2 launched and 2 terminated", ice)
	}
	if len(ice.Errors) == 0 || ice.Errors[0].Code != "InsufficientInstanceCapacity" {
		t.Errorf("errors %+v: want the fleet's InsufficientInstanceCapacity", ice.Errors)
	}
	if r := e.running(); len(r) != 0 {
		t.Errorf("%d instances still running after a partial fleet: %+v", len(r), r)
	}
}

// When the termination of a partial fleet fails, the error names the instances so the caller can
// record them: nothing is forgotten.
func TestPartialFleetTerminateFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.SetCapacity("", "", 1)
	e.srv.SetFailNext("TerminateInstances", "UnauthorizedOperation", 403)
	_, err := e.fleet().Create(t.Context(), Request{Count: 3, UsageClass: OnDemand, InstanceTypes: []string{"c6i.large"}, Spec: e.spec})
	var ice *InsufficientCapacityError
	if !errorsAs(err, &ice) {
		t.Fatalf("Create = %v, want insufficient capacity", err)
	}
	if len(ice.Unterminated) != 1 || ice.TerminateErr == nil || !strings.Contains(err.Error(), "could not be terminated") {
		t.Fatalf("error %v (%+v): want the one launched instance reported as unterminated", err, ice)
	}
	if r := e.running(); len(r) != 1 || r[0].ID != ice.Unterminated[0].ID {
		t.Errorf("running %+v, want exactly the unterminated %s", r, ice.Unterminated[0].ID)
	}
}

// Exhausted offerings are skipped on the next request: per zone, by listing the remaining types
// explicitly; a request with nothing left is not sent; entries expire after the TTL.
func TestOfferingsCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.fleet()
	ctx := t.Context()
	// c5.large (the cheapest match, tried first) has no capacity in us-east-1a.
	e.srv.SetCapacity("c5.large", "us-east-1a", 0)
	req := Request{Count: 3, UsageClass: OnDemand, InstanceTypes: []string{"c5.*", "c6i.*"}, MinCPU: 2, MinMemoryMiB: 4096, Spec: e.spec}
	if _, err := f.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	var cached []string
	for _, u := range f.Unavailable() {
		cached = append(cached, u.UsageClass+"/"+u.InstanceType+"/"+u.Zone)
	}
	want := []string{"on-demand/c5.large/us-east-1a"}
	if !slices.Equal(cached, want) {
		t.Fatalf("cache %v, want %v", cached, want)
	}

	if _, err := f.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	in := e.rec.fleetInputs()[1]
	for _, o := range in.LaunchTemplateConfigs[0].Overrides {
		allowed := o.InstanceRequirements.AllowedInstanceTypes
		if aws.ToString(o.SubnetId) == "subnet-a" {
			if slices.Contains(allowed, "c5.large") || !slices.Contains(allowed, "c6i.large") || !slices.Contains(allowed, "c5.xlarge") {
				t.Errorf("subnet-a allowed %v: want the pattern expanded without the exhausted types", allowed)
			}
		} else if !slices.Equal(allowed, req.InstanceTypes) {
			t.Errorf("%s allowed %v, want the request's patterns unchanged", aws.ToString(o.SubnetId), allowed)
		}
	}
	if n := e.srv.Calls()["DescribeInstanceTypes"]; n == 0 {
		t.Error("no DescribeInstanceTypes: the patterns cannot have been expanded")
	}

	// Only c6i.large allowed, and it is gone everywhere: the first request finds out (and
	// terminates nothing, it launched nothing), the second is not sent at all.
	for z := range 3 {
		e.srv.SetCapacity("c6i.large", "us-east-1"+string(rune('a'+z)), 0)
	}
	narrow := req
	narrow.InstanceTypes = []string{"c6i.large"}
	if _, err := f.Create(ctx, narrow); !IsInsufficientCapacity(err) {
		t.Fatalf("Create with no capacity = %v, want insufficient capacity", err)
	}
	before := e.srv.Calls()["CreateFleet"]
	_, err := f.Create(ctx, narrow)
	var ice *InsufficientCapacityError
	if !errorsAs(err, &ice) || !ice.Skipped {
		t.Fatalf("Create with every offering cached = %v, want a skipped insufficient capacity", err)
	}
	if after := e.srv.Calls()["CreateFleet"]; after != before {
		t.Errorf("a CreateFleet was sent (%d -> %d) although every offering is cached unavailable", before, after)
	}

	// After the TTL the offerings are asked for again.
	e.clock.Advance(3*time.Minute + time.Second)
	if len(f.Unavailable()) != 0 {
		t.Errorf("cache after TTL: %v", f.Unavailable())
	}
	_, _ = f.Create(ctx, narrow)
	if after := e.srv.Calls()["CreateFleet"]; after != before+1 {
		t.Errorf("after the TTL, %d CreateFleet calls, want %d", after, before+1)
	}
}

func TestSpotFallbackToOnDemand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rec.noSpot = true
	f := e.fleet()
	req := Request{Count: 2, UsageClass: Spot, InstanceTypes: []string{"c6i.*"}, MinCPU: 2, Spec: e.spec, ClientToken: "run-1-create"}

	if _, err := f.Create(t.Context(), req); !IsInsufficientCapacity(err) {
		t.Fatalf("spot without fallback = %v, want insufficient capacity", err)
	}
	req.FallbackToOnDemand = true
	got, err := f.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("spot with fallback: %v", err)
	}
	for _, l := range got {
		if l.UsageClass != OnDemand {
			t.Errorf("%s launched as %s, want on-demand", l.ID, l.UsageClass)
		}
	}
	ins := e.rec.fleetInputs()
	last := ins[len(ins)-1]
	if last.TargetCapacitySpecification.DefaultTargetCapacityType != types.DefaultTargetCapacityTypeOnDemand ||
		aws.ToString(last.ClientToken) == aws.ToString(ins[len(ins)-2].ClientToken) {
		t.Errorf("fallback fleet: capacity type %s, token %q: want on-demand with its own token",
			last.TargetCapacitySpecification.DefaultTargetCapacityType, aws.ToString(last.ClientToken))
	}
	if !slices.ContainsFunc(f.Unavailable(), func(u UnavailableOffering) bool { return u.UsageClass == Spot }) {
		t.Error("the spot shortage did not reach the offerings cache")
	}

	// A fallback that fails reports both shortages. (A new token: the old one would replay the
	// successful fleet, as EC2 does.)
	e.srv.SetCapacity("", "", 0)
	req.ClientToken = "run-2-create"
	_, err = f.Create(t.Context(), req)
	var ice *InsufficientCapacityError
	if !errorsAs(err, &ice) || ice.UsageClass != OnDemand || ice.Fallback == nil || ice.Fallback.UsageClass != Spot {
		t.Fatalf("failed fallback = %v, want an on-demand shortage carrying the spot one", err)
	}
}

// A fleet that fails for a reason other than capacity (a bad launch template) is an error of the
// call, not a shortage, and never falls back.
func TestCreateConfigError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec
	spec.LaunchTemplateID = "lt-0123456789abcdef0"
	_, err := e.fleet().Create(t.Context(), Request{Count: 1, UsageClass: Spot, FallbackToOnDemand: true, MinCPU: 2, Spec: spec})
	if err == nil || IsInsufficientCapacity(err) {
		t.Fatalf("Create with an unknown template = %v, want a plain error", err)
	}
	if n := e.srv.Calls()["CreateFleet"]; n != 1 {
		t.Errorf("%d CreateFleet calls, want 1", n)
	}
}

func errorsAs(err error, target **InsufficientCapacityError) bool { return errors.As(err, target) }

// Narrowing by the offerings cache is an optimisation: when the instance type catalogue cannot be
// read, the fleet is still sent, with the request's patterns.
func TestOfferingsCacheWithoutCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.fleet()
	f.SetSubnetZone("subnet-a", "us-east-1a")
	f.MarkUnavailable(Offering{UsageClass: OnDemand, InstanceType: "c6i.large", Zone: "us-east-1a"}, "InsufficientInstanceCapacity")
	e.srv.SetFailNext("DescribeInstanceTypes", "UnauthorizedOperation", 403)
	req := Request{Count: 1, UsageClass: OnDemand, InstanceTypes: []string{"c6i.*"}, MinCPU: 2, Spec: e.spec}
	if _, err := f.Create(t.Context(), req); err != nil {
		t.Fatalf("Create without the catalogue: %v", err)
	}
	for _, o := range e.rec.fleetInputs()[0].LaunchTemplateConfigs[0].Overrides {
		if got := o.InstanceRequirements.AllowedInstanceTypes; !slices.Equal(got, req.InstanceTypes) {
			t.Errorf("%s allowed %v, want the patterns %v", aws.ToString(o.SubnetId), got, req.InstanceTypes)
		}
	}
}
