// consistency_test.go: the eventual-consistency model (consistency.go), driven by the fake clock
// and MakeVisible through the real SDK client.
package ec2server

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// TestConsistencyDelayHidesANewInstance: within ConsistencyDelay a new instance runs, but every
// call naming it answers InvalidInstanceID.NotFound (a call naming it with a visible id as well
// fails whole, naming only it, and changes nothing), listings by filter leave it out, and
// DescribeTags lists its tags. Once the clock passes the delay it is an ordinary instance.
func TestConsistencyDelayHidesANewInstance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, c, _ := newTestServer(t, Options{Now: clock.Now, PendingDelay: time.Second, ShuttingDownDelay: time.Second,
		TerminatedRetention: time.Hour, ConsistencyDelay: time.Minute})
	tagged := func() *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeT3Micro,
			TagSpecifications: instanceTags("pool", "ci")}
	}
	old := *runOne(t, ctx, c, tagged()).InstanceId
	clock.Advance(time.Minute)
	fresh := *runOne(t, ctx, c, tagged()).InstanceId
	clock.Advance(2 * time.Second) // past PendingDelay, within ConsistencyDelay

	if v, _ := s.Instance(fresh); v.State != stateRunning {
		t.Fatalf("hidden instance state = %s, want running (it runs while the API denies it)", v.State)
	}
	if s.Visible(fresh) || !s.Visible(old) {
		t.Fatalf("Visible: fresh %v old %v, want false true", s.Visible(fresh), s.Visible(old))
	}

	notFound := func(name string, err error, want ...string) {
		t.Helper()
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidInstanceID.NotFound" {
			t.Errorf("%s: err = %v, want InvalidInstanceID.NotFound", name, err)
			return
		}
		for _, id := range want {
			if !strings.Contains(ae.ErrorMessage(), id) {
				t.Errorf("%s: message %q does not name %s", name, ae.ErrorMessage(), id)
			}
		}
		if strings.Contains(ae.ErrorMessage(), old) {
			t.Errorf("%s: message %q names the visible %s", name, ae.ErrorMessage(), old)
		}
	}
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{fresh}})
	notFound("DescribeInstances by id", err, fresh)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{old, fresh}})
	notFound("DescribeInstances of a visible and a hidden id", err, fresh)
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{old, fresh}})
	notFound("TerminateInstances of a visible and a hidden id", err, fresh)
	_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{fresh}})
	notFound("StopInstances", err, fresh)
	_, err = c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{fresh}})
	notFound("StartInstances", err, fresh)
	_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{fresh}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
	notFound("CreateTags", err, fresh)
	_, err = c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(fresh), Attribute: types.InstanceAttributeNameUserData})
	notFound("DescribeInstanceAttribute", err, fresh)
	for _, id := range []string{old, fresh} {
		if v, _ := s.Instance(id); v.State != stateRunning || v.Tags["k"] != "" {
			t.Errorf("%s after the refused calls: state %s tags %v, want running and untouched", id, v.State, v.Tags)
		}
	}

	listed := func() []string {
		t.Helper()
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: aws.String("tag:pool"), Values: []string{"ci"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				ids = append(ids, *in.InstanceId)
			}
		}
		return ids
	}
	if got := listed(); !slices.Equal(got, []string{old}) {
		t.Errorf("listing by tag = %v, want only %s", got, old)
	}
	tagsOut, err := c.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []types.Filter{{Name: aws.String("key"), Values: []string{"pool"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var tagged2 []string
	for _, tg := range tagsOut.Tags {
		tagged2 = append(tagged2, *tg.ResourceId)
	}
	if !slices.Contains(tagged2, fresh) {
		t.Errorf("DescribeTags lists %v, want the hidden %s too", tagged2, fresh)
	}

	clock.Advance(time.Minute) // the window ends
	if got := listed(); !slices.Equal(got, []string{old, fresh}) {
		t.Errorf("listing by tag after the window = %v, want %s and %s", got, old, fresh)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{old, fresh}}); err != nil {
		t.Fatalf("TerminateInstances after the window: %v", err)
	}
	for _, id := range []string{old, fresh} {
		if v, _ := s.Instance(id); v.State != stateShuttingDown {
			t.Errorf("%s state = %s, want shutting-down", id, v.State)
		}
	}
}

// TestMakeVisibleEndsTheWindow: MakeVisible shows an instance whatever the clock says, and only
// the instances it names; a server without ConsistencyDelay shows a new instance at once.
func TestMakeVisibleEndsTheWindow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{ConsistencyDelay: time.Hour})
	a, b := *runOne(t, ctx, c, nil).InstanceId, *runOne(t, ctx, c, nil).InstanceId
	s.MakeVisible(a)
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{a}}); err != nil {
		t.Errorf("describe %s after MakeVisible: %v", a, err)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{b}}); apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("describe %s (not made visible): err = %v, want InvalidInstanceID.NotFound", b, err)
	}
	s.MakeVisible()
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{a, b}}); err != nil {
		t.Errorf("describe both after MakeVisible(): %v", err)
	}

	_, c2, _ := newTestServer(t, Options{})
	id := *runOne(t, ctx, c2, nil).InstanceId
	if _, err := c2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Errorf("default server: describe right after launch: %v", err)
	}
}

// TestShowInListingsLeavesCallsByIDNotFound: an instance shown in listings early is in a filtered
// DescribeInstances, while every call naming its id (DescribeInstances by id, TerminateInstances)
// still answers NotFound and changes nothing, until its window ends.
func TestShowInListingsLeavesCallsByIDNotFound(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{ConsistencyDelay: time.Hour})
	id := *runOne(t, ctx, c, nil).InstanceId
	listed := func() bool {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{
			Filters: []types.Filter{{Name: aws.String("instance-id"), Values: []string{id}}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Reservations) == 1
	}
	if listed() {
		t.Fatalf("%s listed before ShowInListings", id)
	}
	s.ShowInListings(id)
	if !listed() {
		t.Fatalf("%s not listed after ShowInListings", id)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("describe by id: err = %v, want InvalidInstanceID.NotFound", err)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("terminate: err = %v, want InvalidInstanceID.NotFound", err)
	}
	if v, _ := s.Instance(id); v.State == stateShuttingDown || v.State == stateTerminated {
		t.Errorf("%s is %s after a refused TerminateInstances", id, v.State)
	}
	s.MakeVisible(id)
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Errorf("terminate after MakeVisible: %v", err)
	}
}
