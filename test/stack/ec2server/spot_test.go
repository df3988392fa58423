package ec2server

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// TestSpotInterruption: spot/instance-action is a 404 until EC2 announces the interruption, then
// {"action":"terminate","time":...} at the announced time, and the instance is terminated then with
// the spot termination reason.
func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := make(chan string, 1)
	s, c, _ := newTestServer(t, Options{Runtime: func(rctx context.Context, inst RuntimeInstance) {
		endpoint <- inst.IMDSEndpoint
		<-rctx.Done()
	}})
	id := aws.ToString(runOne(t, ctx, c, nil).InstanceId)
	waitRunning(t, ctx, c, id)
	md := imds.New(imds.Options{Endpoint: <-endpoint})
	action := func() (string, error) {
		out, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "spot/instance-action"})
		if err != nil {
			return "", err
		}
		defer out.Content.Close()
		b, err := io.ReadAll(out.Content)
		return string(b), err
	}
	if _, err := action(); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("spot/instance-action before any notice: %v, want a 404", err)
	}
	before := time.Now()
	if err := s.InterruptSpot(id, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	body, err := action()
	if err != nil {
		t.Fatalf("spot/instance-action after the notice: %v", err)
	}
	var doc struct{ Action, Time string }
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Action != "terminate" {
		t.Fatalf("spot/instance-action = %q (%v), want a terminate action", body, err)
	}
	if at, err := time.Parse(time.RFC3339, doc.Time); err != nil || at.Before(before.Truncate(time.Second)) {
		t.Errorf("time %q: want the announced termination time", doc.Time)
	}
	for {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		in := out.Reservations[0].Instances[0]
		if st := string(in.State.Name); st == "shutting-down" || st == "terminated" {
			if in.StateReason == nil || aws.ToString(in.StateReason.Code) != "Server.SpotInstanceTermination" {
				t.Errorf("state reason %+v, want Server.SpotInstanceTermination", in.StateReason)
			}
			return
		}
		if time.Since(before) > 10*time.Second {
			t.Fatalf("still %s 10 s after a 300 ms notice", in.State.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
