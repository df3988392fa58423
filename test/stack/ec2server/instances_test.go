// instances_test.go: RunInstances, DescribeInstances (filters, paging, errors), the
// start/stop/terminate state machine through the SDK waiters, and tags.
package ec2server

import (
	"encoding/base64"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
)

func instanceTags(t ...string) []types.TagSpecification {
	var tags []types.Tag
	for i := 0; i+1 < len(t); i += 2 {
		tags = append(tags, types.Tag{Key: aws.String(t[i]), Value: aws.String(t[i+1])})
	}
	return []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}
}

func tagMap(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func TestInstanceLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	s.SetSubnet("subnet-0aaa", "us-east-1b")

	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeM6iLarge,
		MinCount: aws.Int32(2), MaxCount: aws.Int32(2), SubnetId: aws.String("subnet-0aaa"),
		UserData:          aws.String(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho hi\n"))),
		TagSpecifications: instanceTags("Name", "runner", "runnerpool:deployment", "d1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Instances) != 2 || aws.ToString(out.ReservationId) == "" || aws.ToString(out.OwnerId) != accountID {
		t.Fatalf("RunInstances output = %+v", out)
	}
	var ids []string
	for _, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
		if in.State.Name != types.InstanceStateNamePending || aws.ToInt32(in.State.Code) != 0 {
			t.Errorf("state after launch = %v/%d, want pending/0", in.State.Name, aws.ToInt32(in.State.Code))
		}
	}
	waitRunning(t, ctx, c, ids...)

	desc, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Reservations) != 1 || len(desc.Reservations[0].Instances) != 2 {
		t.Fatalf("DescribeInstances reservations = %+v", desc.Reservations)
	}
	got := desc.Reservations[0].Instances[0]
	want := map[string]string{"Name": "runner", "runnerpool:deployment": "d1"}
	if diff := cmp.Diff(want, tagMap(got.Tags)); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	if got.InstanceType != types.InstanceTypeM6iLarge || aws.ToString(got.Placement.AvailabilityZone) != "us-east-1b" ||
		aws.ToString(got.SubnetId) != "subnet-0aaa" || aws.ToString(got.PrivateIpAddress) == "" ||
		got.LaunchTime == nil || got.InstanceLifecycle != "" || aws.ToInt32(got.State.Code) != 16 ||
		got.Architecture != types.ArchitectureValuesX8664 {
		t.Errorf("described instance = %+v", got)
	}
	if v, _ := s.Instance(ids[0]); v.UserData != "#!/bin/sh\necho hi\n" || v.Lifecycle != "on-demand" {
		t.Errorf("view = %+v", v)
	}

	// Stop -> stopped, start -> running, through the SDK waiters.
	stop, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if sc := stop.StoppingInstances[0]; sc.PreviousState.Name != types.InstanceStateNameRunning || sc.CurrentState.Name != types.InstanceStateNameStopping {
		t.Errorf("StopInstances change = %v -> %v", sc.PreviousState.Name, sc.CurrentState.Name)
	}
	stopped := ec2.NewInstanceStoppedWaiter(c, func(o *ec2.InstanceStoppedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 50*time.Millisecond
	})
	if err := stopped.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids[:1]}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if sc := start.StartingInstances[0]; sc.PreviousState.Name != types.InstanceStateNameStopped || sc.CurrentState.Name != types.InstanceStateNamePending {
		t.Errorf("StartInstances change = %v -> %v", sc.PreviousState.Name, sc.CurrentState.Name)
	}
	waitRunning(t, ctx, c, ids[0])

	// Terminate both, idempotently.
	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range term.TerminatingInstances {
		if sc.CurrentState.Name != types.InstanceStateNameShuttingDown {
			t.Errorf("terminate current state = %v, want shutting-down", sc.CurrentState.Name)
		}
	}
	terminated := ec2.NewInstanceTerminatedWaiter(c, func(o *ec2.InstanceTerminatedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 50*time.Millisecond
	})
	if err := terminated.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	again, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatalf("terminating a terminated instance: %v", err)
	}
	if sc := again.TerminatingInstances[0]; sc.PreviousState.Name != types.InstanceStateNameTerminated || sc.CurrentState.Name != types.InstanceStateNameTerminated {
		t.Errorf("re-terminate change = %v -> %v, want terminated -> terminated", sc.PreviousState.Name, sc.CurrentState.Name)
	}
	for _, call := range []func() error{
		func() error {
			_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids[:1]})
			return err
		},
		func() error {
			_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids[:1]})
			return err
		},
	} {
		if err := call(); apiCode(err) != "IncorrectInstanceState" {
			t.Errorf("stop/start of a terminated instance: err = %v, want IncorrectInstanceState", err)
		}
	}
}

func TestRunInstancesFromTemplate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	lt, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner-x86"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0aaaaaaaaaaaaaaaa"), InstanceType: types.InstanceTypeC6iLarge,
			UserData:         aws.String(base64.StdEncoding.EncodeToString([]byte("boot"))),
			SecurityGroupIds: []string{"sg-12345678"},
			TagSpecifications: []types.LaunchTemplateTagSpecificationRequest{{ResourceType: types.ResourceTypeInstance,
				Tags: []types.Tag{{Key: aws.String("from"), Value: aws.String("template")}, {Key: aws.String("k"), Value: aws.String("template")}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ltID := aws.ToString(lt.LaunchTemplate.LaunchTemplateId)
	inst := runOne(t, ctx, c, &ec2.RunInstancesInput{
		LaunchTemplate:    &types.LaunchTemplateSpecification{LaunchTemplateId: aws.String(ltID), Version: aws.String("$Latest")},
		TagSpecifications: instanceTags("k", "request"),
	})
	v, _ := s.Instance(aws.ToString(inst.InstanceId))
	want := map[string]string{"from": "template", "k": "request", "aws:ec2launchtemplate:id": ltID, "aws:ec2launchtemplate:version": "1"}
	if diff := cmp.Diff(want, v.Tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	if v.ImageID != "ami-0aaaaaaaaaaaaaaaa" || v.InstanceType != "c6i.large" || v.UserData != "boot" || v.LaunchTemplateID != ltID {
		t.Errorf("instance did not inherit the template: %+v", v)
	}
	if len(inst.SecurityGroups) != 1 || aws.ToString(inst.SecurityGroups[0].GroupId) != "sg-12345678" {
		t.Errorf("security groups = %+v", inst.SecurityGroups)
	}
}

func TestRunInstancesValidationAndCapacity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	s.SetCapacity("t3.small", "us-east-1a", 2)
	s.SetImage("ami-0arm64000000000", "arm64")
	base := func(mod func(*ec2.RunInstancesInput)) *ec2.RunInstancesInput {
		in := &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeT3Small,
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1), Placement: &types.Placement{AvailabilityZone: aws.String("us-east-1a")}}
		mod(in)
		return in
	}
	tests := []struct {
		name     string
		in       *ec2.RunInstancesInput
		wantCode string
		wantN    int
	}{
		{"min above capacity", base(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(3), aws.Int32(3) }), "InsufficientInstanceCapacity", 0},
		{"max trimmed to capacity", base(func(in *ec2.RunInstancesInput) { in.MaxCount = aws.Int32(5) }), "", 2},
		{"capacity now exhausted", base(func(*ec2.RunInstancesInput) {}), "InsufficientInstanceCapacity", 0},
		{"other zone unaffected", base(func(in *ec2.RunInstancesInput) { in.Placement.AvailabilityZone = aws.String("us-east-1c") }), "", 1},
		{"missing image", base(func(in *ec2.RunInstancesInput) { in.ImageId = nil }), "MissingParameter", 0},
		{"unknown type", base(func(in *ec2.RunInstancesInput) { in.InstanceType = "z9.huge" }), "InvalidParameterValue", 0},
		{"min above max", base(func(in *ec2.RunInstancesInput) { in.MinCount = aws.Int32(2) }), "InvalidParameterValue", 0},
		{"bad user data", base(func(in *ec2.RunInstancesInput) { in.UserData = aws.String("!!not base64") }), "InvalidUserData.Malformed", 0},
		{"architecture mismatch", base(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0arm64000000000") }), "InvalidParameterValue", 0},
		{"unknown template", base(func(in *ec2.RunInstancesInput) {
			in.LaunchTemplate = &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("nope")}
		}), "InvalidLaunchTemplateName.NotFoundException", 0},
		{"spot", base(func(in *ec2.RunInstancesInput) {
			in.InstanceType = types.InstanceTypeT4gSmall
			in.ImageId = aws.String("ami-0arm64000000000")
			in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot}
		}), "", 1},
	}
	for _, tt := range tests { // sequential: capacity is shared state
		t.Run(tt.name, func(t *testing.T) {
			out, err := c.RunInstances(ctx, tt.in)
			if apiCode(err) != tt.wantCode {
				t.Fatalf("err = %v, want code %q", err, tt.wantCode)
			}
			if err == nil && len(out.Instances) != tt.wantN {
				t.Errorf("launched %d, want %d", len(out.Instances), tt.wantN)
			}
			if tt.name == "spot" && err == nil {
				if out.Instances[0].InstanceLifecycle != types.InstanceLifecycleTypeSpot {
					t.Errorf("lifecycle = %q, want spot", out.Instances[0].InstanceLifecycle)
				}
				_, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{*out.Instances[0].InstanceId}})
				if apiCode(err) != "UnsupportedOperation" {
					t.Errorf("stopping a one-time spot instance: err = %v, want UnsupportedOperation", err)
				}
			}
		})
	}
}

func TestStartHonoursCapacity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{PendingDelay: -1, StoppingDelay: -1})
	id := aws.ToString(runOne(t, ctx, c, nil).InstanceId)
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	s.SetCapacity("t3.micro", "", 0)
	_, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	if apiCode(err) != "InsufficientInstanceCapacity" {
		t.Fatalf("start without capacity: err = %v", err)
	}
	s.SetCapacity("t3.micro", "", -1)
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
}

func TestDescribeInstancesFilters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newTestServer(t, Options{PendingDelay: -1, StoppingDelay: -1})
	a := runOne(t, ctx, c, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeT3Micro,
		TagSpecifications: instanceTags("pool", "linux", "env", "ci")})
	b := runOne(t, ctx, c, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeC6iLarge,
		TagSpecifications: instanceTags("pool", "windows")})
	cc := runOne(t, ctx, c, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeC6iXlarge})
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{*cc.InstanceId}}); err != nil {
		t.Fatal(err)
	}
	idA, idB, idC := *a.InstanceId, *b.InstanceId, *cc.InstanceId

	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	tests := []struct {
		name    string
		filters []types.Filter
		want    []string
	}{
		{"tag value", []types.Filter{f("tag:pool", "linux")}, []string{idA}},
		{"tag values are ORed", []types.Filter{f("tag:pool", "linux", "windows")}, []string{idA, idB}},
		{"tag wildcard", []types.Filter{f("tag:pool", "win*")}, []string{idB}},
		{"tag-key", []types.Filter{f("tag-key", "env")}, []string{idA}},
		{"state", []types.Filter{f("instance-state-name", "stopped")}, []string{idC}},
		{"state code", []types.Filter{f("instance-state-code", "16")}, []string{idA, idB}},
		{"type wildcard", []types.Filter{f("instance-type", "c6i.*")}, []string{idB, idC}},
		{"filters are ANDed", []types.Filter{f("instance-type", "c6i.*"), f("instance-state-name", "running")}, []string{idB}},
		{"instance-id", []types.Filter{f("instance-id", idC)}, []string{idC}},
		{"no match", []types.Filter{f("tag:pool", "mac")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: tt.filters})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range out.Reservations {
				for _, in := range r.Instances {
					got = append(got, *in.InstanceId)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDescribeInstancesPagingAndErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newTestServer(t, Options{})
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeT3Nano,
		MinCount: aws.Int32(12), MaxCount: aws.Int32(12)})
	if err != nil {
		t.Fatal(err)
	}
	id := *out.Instances[0].InstanceId

	pages, seen := 0, map[string]bool{}
	pg := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				seen[*in.InstanceId] = true
			}
		}
	}
	if pages != 3 || len(seen) != 12 {
		t.Errorf("paging: %d pages, %d distinct instances; want 3 and 12", pages, len(seen))
	}

	tests := []struct {
		name string
		in   *ec2.DescribeInstancesInput
		want string
	}{
		{"unknown id", &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, "InvalidInstanceID.NotFound"},
		{"some unknown", &ec2.DescribeInstancesInput{InstanceIds: []string{id, "i-0123456789abcdef0"}}, "InvalidInstanceID.NotFound"},
		{"malformed id", &ec2.DescribeInstancesInput{InstanceIds: []string{"instance-1"}}, "InvalidInstanceID.Malformed"},
		{"MaxResults too small", &ec2.DescribeInstancesInput{MaxResults: aws.Int32(4)}, "InvalidParameterValue"},
		{"MaxResults too large", &ec2.DescribeInstancesInput{MaxResults: aws.Int32(1001)}, "InvalidParameterValue"},
		{"MaxResults with ids", &ec2.DescribeInstancesInput{InstanceIds: []string{id}, MaxResults: aws.Int32(5)}, "InvalidParameterCombination"},
		{"unknown filter", &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("colour"), Values: []string{"red"}}}}, "InvalidParameterValue"},
		{"bad token", &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: aws.String("garbage!")}, "InvalidPaginationToken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := c.DescribeInstances(ctx, tt.in); apiCode(err) != tt.want {
				t.Errorf("err = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestTags(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	id := aws.ToString(runOne(t, ctx, c, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"),
		InstanceType: types.InstanceTypeT3Micro, TagSpecifications: instanceTags("a", "1", "b", "2", "c", "3")}).InstanceId)
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }

	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("a", "10"), tag("d", "")}}); err != nil {
		t.Fatal(err)
	}
	// DeleteTags removes a tag when no value is given, or when the value matches.
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String("b")}, tag("c", "not-3"), tag("d", "")}}); err != nil {
		t.Fatal(err)
	}
	v, _ := s.Instance(id)
	if diff := cmp.Diff(map[string]string{"a": "10", "c": "3"}, v.Tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"reserved prefix", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("aws:x", "1")}})
			return err
		}, "InvalidParameterValue"},
		{"unknown instance", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"i-0123456789abcdef0"}, Tags: []types.Tag{tag("x", "1")}})
			return err
		}, "InvalidInstanceID.NotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.call(); apiCode(err) != tt.want {
				t.Errorf("err = %v, want %s", err, tt.want)
			}
		})
	}
}
