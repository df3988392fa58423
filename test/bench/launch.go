// Phase "launch": a runner class whose every launch field differs from its launch template's,
// launched on every path (a provision, a webhook cold start, a warm pool's hot and stopped
// instances) by a replica reading its classes and pools from the state table; each instance is read
// back from EC2 (launchtemplate.Check) and the share of the class's fields found on it is the figure
// launch_fields_honoured.
package bench

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// launchSubnets are the class's subnets (a table class's must be well-formed ids) and their zones.
var launchSubnets = map[string]string{"subnet-0aaaaaaaaaaaaaaa1": "us-east-1a", "subnet-0bbbbbbbbbbbbbbb2": "us-east-1b"}

const (
	launchClass, launchWarm, launchCold = "bench-fields", "bench-fields-warm", "bench-fields-cold"
	launchSecret                        = "bench-webhook-secret"
)

func phaseLaunch(ctx context.Context, h *harness, res *Result) error {
	rc, err := h.launchClass(ctx)
	if err != nil {
		return err
	}
	repo := declared.NewRepository(h.sb.Store)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		return err
	}
	for _, wp := range []declared.WarmPool{
		{Name: launchWarm, RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1, Stopped: 1}}},
		{Name: launchCold, RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName}}},
	} {
		if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
			return err
		}
	}
	jobs, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-bench-pool-jobs")})
	if err != nil {
		return err
	}
	saved := h.env
	h.env = maps.Clone(saved)
	if h.env == nil {
		h.env = map[string]string{}
	}
	maps.Copy(h.env, map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096", "RUNNERPOOL_DEFAULT_RUNNER_CLASS": rc.Name,
		"RUNNERPOOL_POOL_JOB_QUEUE_URL": aws.ToString(jobs.QueueUrl), "RUNNERPOOL_WEBHOOK_SECRET": launchSecret,
		"RUNNERPOOL_WARM_POOL_SCOPE": "acme",
	})
	// Not the leader (the harness's replica is): it serves the provision and the webhook; the warm
	// pool is converged below by the same code its cron job runs.
	svc, stop, err := h.startReplica(ctx, "bench-launch", false)
	h.env = saved
	if err != nil {
		return err
	}
	defer stop()

	paths := map[string][]string{}
	wf, err := h.newWorkflowAt(svc.URL())
	if err != nil {
		return err
	}
	prov, err := wf.c.Provision(ctx, apiv1.ProvisionRequest{Count: 1, RunnerClass: rc.Name, AllowedInstanceTypes: []string{"c*", "m*"}, ResourceClass: "small"})
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	for _, r := range prov.Runners {
		paths["provision"] = append(paths["provision"], r.InstanceID)
	}
	owner, repoName, _ := strings.Cut(sandbox.Scope, "/")
	hooks := &githubfake.WebhookSender{URL: svc.URL() + apiv1.PathWebhookGitHub, Secret: launchSecret}
	if _, status, err := hooks.SendWorkflowJob(ctx, "queued", githubfake.WorkflowJobEvent{
		ID: 991001, RunID: 991001, Labels: []string{"self-hosted", "pool=" + launchCold}, Owner: owner, Repo: repoName,
	}); err != nil || status != 200 {
		return fmt.Errorf("webhook for the cold pool: %d %v", status, err)
	}
	cp, err := h.wired(controlplane.Clients{}, controlplane.Options{Warm: &controlplane.Warm{
		Targets: warmpool.ConfigTargets(repo, warmpool.ConfigOptions{Scope: "acme", Versions: launchtemplate.New(h.sb.EC2, launchtemplate.Options{Logger: h.o.Logger})}),
	}})
	if err != nil {
		return err
	}
	conv := cp.Converger
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && (len(h.poolInstances(launchCold)) < 1 || len(h.poolInstances(launchWarm)) < 2) {
		if _, err := conv.Pass(ctx); err != nil {
			h.say("launch: convergence pass: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	paths["webhook cold start"], paths["warm pool"] = h.poolInstances(launchCold), h.poolInstances(launchWarm)

	honoured, total := 0, 0
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		if len(paths[path]) == 0 {
			errs = append(errs, fmt.Errorf("no instance launched by %s", path))
		}
		for _, id := range paths[path] {
			fields, err := launchtemplate.Check(ctx, h.sb.EC2, id, rc)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, f := range fields {
				total++
				if f.Honoured() {
					honoured++
				} else {
					res.note("launch: %s instance %s: %s is %q, the class declares %q", path, id, f.Name, f.Got, f.Want)
				}
			}
		}
	}
	h.say("launch: %d of %d runner class launch fields found on %d instances (provision, webhook cold start, warm hot and stopped)",
		honoured, total, len(paths["provision"])+len(paths["webhook cold start"])+len(paths["warm pool"]))
	if total > 0 {
		res.add(Figure{Name: "launch_fields_honoured", Value: float64(honoured) / float64(total), Unit: "share",
			How: "a table runner class whose image, root volume (type, size, IOPS, throughput), security groups, instance profile, " +
				"pre-runner script and tags all differ from its launch template's, launched by a provision, a webhook cold start and a " +
				"warm pool (hot and stopped); each instance read back with DescribeInstances, DescribeVolumes and DescribeInstanceAttribute; goal 1.0"})
	}
	if _, err := wf.c.Release(ctx, apiv1.ReleaseRequest{}); err != nil {
		errs = append(errs, fmt.Errorf("release: %w", err))
	}
	for _, name := range []string{launchWarm, launchCold} {
		if err := repo.DeleteWarmPool(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := conv.Pass(ctx); err != nil { // the removed pools' instances are scaled to zero
		h.say("launch: convergence pass: %v", err)
	}
	return errors.Join(errs...)
}

// launchClass is the measured class, on a launch template of its own that differs in every field.
func (h *harness) launchClass(ctx context.Context) (declared.RunnerClass, error) {
	ud, err := userdata.Render(userdata.Params{Table: h.sb.Table, Region: "us-east-1", Arch: userdata.ArchX64,
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		return declared.RunnerClass{}, err
	}
	lt, err := h.sb.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runnerpool-bench-fields"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0123456789abcdef0"), UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(ud))),
			SecurityGroupIds:   []string{"sg-0777777777777777a"},
			IamInstanceProfile: &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String("template-profile")},
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		return declared.RunnerClass{}, err
	}
	for s, z := range launchSubnets {
		h.sb.Stack.EC2.SetSubnet(s, z)
	}
	q, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + launchClass)})
	if err != nil {
		return declared.RunnerClass{}, err
	}
	h.extraQueues = append(h.extraQueues, aws.ToString(q.QueueUrl))
	return declared.RunnerClass{
		Name: launchClass, Image: "ami-0c1a55000000000b1", CPU: 2, MemoryMiB: 4096, InstanceTypes: []string{"c*", "m*"},
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 40, IOPS: 4000, ThroughputMiBps: 250},
		UsageClass: declared.UsageOnDemand, Subnets: slices.Sorted(maps.Keys(launchSubnets)),
		SecurityGroups: []string{"sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"}, InstanceProfile: "bench-fields-profile",
		PreRunnerScript: "#!/bin/sh\necho bench fields\n", Tags: map[string]string{"team": "ci", "cost-centre": "42"},
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute),
		LaunchTemplateID: aws.ToString(lt.LaunchTemplate.LaunchTemplateId), QueueURL: aws.ToString(q.QueueUrl),
	}, nil
}

// poolInstances lists the live instances of a pool in EC2 (by its tag).
func (h *harness) poolInstances(pool string) []string {
	var ids []string
	for _, v := range h.sb.Stack.EC2.Instances() {
		if v.Tags[tags.Pool] == pool && v.State != "terminated" && v.State != "shutting-down" {
			ids = append(ids, v.ID)
		}
	}
	slices.Sort(ids)
	return ids
}
