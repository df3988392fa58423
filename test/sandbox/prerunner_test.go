package sandbox_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// TestPreRunnerScriptFromUserData: the pre-runner script a runner class's launch template version
// carries in its user data runs on the instance before it is declared ready (so before any
// registration); an instance whose script fails is terminated and never enters the pool.
func TestPreRunnerScriptFromUserData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sb := start(t, sandbox.Options{})
	marker := filepath.Join(t.TempDir(), "ran")
	version := func(script string) string {
		ud, err := userdata.Render(userdata.Params{Table: sb.Table, Region: "us-east-1", Arch: userdata.ArchX64, PreRunnerScript: script,
			AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := sb.EC2.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
			LaunchTemplateId: aws.String(sb.LaunchTemplate), SourceVersion: aws.String("1"),
			LaunchTemplateData: &ec2types.RequestLaunchTemplateData{UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(ud)))},
		})
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(aws.ToInt64(out.LaunchTemplateVersion.VersionNumber), 10)
	}
	subnets := slices.Sorted(func(yield func(string) bool) {
		for s := range sandbox.Subnets {
			if !yield(s) {
				return
			}
		}
	})
	spec := func(name, v string) warmpool.PoolSpec {
		return warmpool.PoolSpec{
			Name: name, Schedule: "test", Hot: 2, SpecHash: name + "-v1", Scope: sandbox.Scope,
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: sandbox.RunnerClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: subnets, InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: v, Queue: sb.Queue},
		}
	}
	good := spec("good", version("#!/bin/sh\necho \"$(date +%s%N)\" >> '"+marker+"'\n"))
	bad := spec("bad", version("#!/bin/sh\necho 'no such package' >&2\nexit 3\n"))
	conv, err := poolsize.NewConverger(sb.Store, sb.EC2, fleet.New(sb.EC2, fleet.Options{}), warmpool.StaticTargets(good, bad),
		poolsize.Options{DeploymentID: sandbox.DeploymentID, Logger: sb.Log})
	if err != nil {
		t.Fatal(err)
	}
	var errored []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		rep, err := conv.Pass(ctx)
		if err != nil {
			t.Logf("pass: %v", err)
		}
		g, _ := rep.Pool(good.Name)
		b, _ := rep.Pool(bad.Name)
		errored = append(errored, b.Errored...)
		if g.Ready == 2 && len(errored) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: good pool %+v, bad pool %+v", g, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	raw, err := os.ReadFile(marker)
	if err != nil || len(strings.Fields(string(raw))) < 2 {
		t.Errorf("the good script's marker: %q, %v; want a line per ready instance", raw, err)
	}
	ready, err := sb.Store.ByState(ctx, store.StateReady, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ready {
		if in.Pool == bad.Name {
			t.Errorf("instance %s of the failing script is ready", in.ID)
		}
	}
	for _, id := range errored {
		if v, ok := sb.Stack.EC2.Instance(id); ok && v.State != "shutting-down" && v.State != "terminated" {
			t.Errorf("instance %s of the failing script is %s, want terminated", id, v.State)
		}
	}
}
