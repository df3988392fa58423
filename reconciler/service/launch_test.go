// launch_test.go: a runner class launches what it declares on every path (a provision, a webhook
// cold start, a warm pool's hot and stopped instances), read back from EC2; changing its image rolls
// a warm pool; an image, security group or instance profile EC2 refuses fails cleanly, naming the
// class and the attribute, with nothing left running.
package service_test

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// bootstrapTemplate creates a launch template as examples/complete does: runnerpool's user data,
// IMDSv2 with instance metadata tags, and an image, root volume, security group and profile of its
// own that every runner class field below differs from.
func bootstrapTemplate(t *testing.T, env *servicetest.Env, name string) string {
	t.Helper()
	ud, err := userdata.Render(userdata.Params{Table: "runnerpool-test", Region: "us-east-1", Arch: userdata.ArchX64,
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := env.EC2Client().CreateLaunchTemplate(t.Context(), &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(name),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String(servicetest.Image), UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(ud))),
			SecurityGroupIds:   []string{"sg-0777777777777777a"},
			IamInstanceProfile: &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String("template-profile")},
			BlockDeviceMappings: []ec2types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String("/dev/xvda"),
				Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{VolumeType: ec2types.VolumeTypeGp3, VolumeSize: aws.Int32(8), Encrypted: aws.Bool(true)}}},
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	return aws.ToString(lt.LaunchTemplate.LaunchTemplateId)
}

// fieldsClass is a class whose every launch field differs from its launch template's.
func fieldsClass(env *servicetest.Env, name, lt string) declared.RunnerClass {
	rc := env.TableRunnerClass(name)
	rc.LaunchTemplateID, rc.Image = lt, "ami-0c1a55000000000f1"
	rc.Volume = declared.Volume{Type: declared.VolumeGP3, SizeGiB: 40, IOPS: 4000, ThroughputMiBps: 250}
	rc.SecurityGroups = []string{"sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"}
	rc.InstanceProfile = "fields-profile"
	rc.PreRunnerScript = "#!/bin/sh\necho warming the caches of " + name + "\n"
	rc.Tags = map[string]string{"team": "ci", "cost-centre": "42"}
	return rc
}

// checkFields reads each instance back from EC2 and compares it with the class.
func checkFields(t *testing.T, env *servicetest.Env, path string, ids []string, rc declared.RunnerClass) {
	t.Helper()
	for _, id := range ids {
		fields, err := launchtemplate.Check(t.Context(), env.EC2Client(), id, rc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(fields) != 9 {
			t.Errorf("%s: %d fields compared, want 9", path, len(fields))
		}
		for _, f := range fields {
			if !f.Honoured() {
				t.Errorf("%s: instance %s: %s is %q, the class declares %q", path, id, f.Name, f.Got, f.Want)
			}
		}
	}
}

// poolInstances lists the live instances EC2 has of a pool (by its tag).
func poolInstances(env *servicetest.Env, pool string) []string {
	var ids []string
	for _, v := range env.EC2.Instances() {
		if v.Tags[tags.Pool] == pool && v.State != "terminated" && v.State != "shutting-down" {
			ids = append(ids, v.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestRunnerClassLaunchFieldsOnEveryPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	lt := bootstrapTemplate(t, env, "fields")
	rc := fieldsClass(env, "fields", lt)
	repo := declared.NewRepository(env.Store)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	warm := declared.WarmPool{Name: "fields-warm", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1, Stopped: 1}}}
	cold := declared.WarmPool{Name: "fields-cold", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName}}}
	for _, wp := range []declared.WarmPool{warm, cold} {
		if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
			t.Fatalf("PutWarmPool %s: %v", wp.Name, err)
		}
	}
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096", "RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s"})

	// A provision.
	req := provisionBody(1)
	req.RunnerClass = rc.Name
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "5101", nil), req)
	if code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
	if len(prov.Runners) != 1 || prov.Runners[0].Source != "created" {
		t.Fatalf("runners %+v, want one created", prov.Runners)
	}
	checkFields(t, env, "provision", []string{prov.Runners[0].InstanceID}, rc)

	// A webhook cold start (a pool with nothing warm).
	if code, resp := deliver(t, r.URL, hook{delivery: "d-5102", event: "workflow_job", body: queuedJob(5102, 6102, "self-hosted", "pool=fields-cold")}); code != http.StatusOK {
		t.Fatalf("queued job: %d %+v", code, resp)
	}
	waitFor(t, 30*time.Second, "a cold start for the job", func() bool { return len(poolInstances(env, cold.Name)) == 1 })
	checkFields(t, env, "webhook cold start", poolInstances(env, cold.Name), rc)

	// A warm pool's hot and stopped instances.
	waitFor(t, 30*time.Second, "the warm pool's two instances", func() bool { return len(poolInstances(env, warm.Name)) == 2 })
	checkFields(t, env, "warm pool", poolInstances(env, warm.Name), rc)

	// Changing the image rolls the warm pool onto instances of the new image.
	rc2 := rc
	rc2.Image = "ami-0c1a55000000000f2"
	if _, err := repo.PutRunnerClass(ctx, rc2, 1); err != nil {
		t.Fatalf("PutRunnerClass (new image): %v", err)
	}
	// The template's user data is runnerpool's: the hash names the runner it installs (the GitHub
	// fake's current release, the compiled-in one).
	newHash := declared.SpecHashWithRunner(declared.SpecHash(rc2, warm), runnerversion.Default.Version)
	waitFor(t, 60*time.Second, "the warm pool rolled onto the new image", func() bool {
		ids := poolInstances(env, warm.Name)
		if len(ids) == 0 {
			return false
		}
		for _, id := range ids {
			if v, _ := env.EC2.Instance(id); v.Tags[tags.SpecHash] != newHash {
				return false
			}
		}
		return true
	})
	checkFields(t, env, "warm pool after the image change", poolInstances(env, warm.Name), rc2)
}

// TestRunnerClassRefusedByEC2: an image, security group or instance profile EC2 does not know fails
// the provision with an error naming the class and the attribute, and nothing is left running.
func TestRunnerClassRefusedByEC2(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{})
	lt := bootstrapTemplate(t, env, "refused")
	env.EC2.SetMissing("ami-0dead000000000000", "sg-0dead000000000000", "no-such-profile")
	repo := declared.NewRepository(env.Store)
	classes := map[string]func(*declared.RunnerClass){
		"bad-image":   func(rc *declared.RunnerClass) { rc.Image = "ami-0dead000000000000" },
		"bad-sg":      func(rc *declared.RunnerClass) { rc.SecurityGroups = []string{"sg-0dead000000000000"} },
		"bad-profile": func(rc *declared.RunnerClass) { rc.InstanceProfile = "no-such-profile" },
	}
	for name, mod := range classes {
		rc := fieldsClass(env, name, lt)
		mod(&rc)
		if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
			t.Fatalf("PutRunnerClass %s: %v", name, err)
		}
	}
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096"})
	want := map[string]string{
		"bad-image":   `runner class \"bad-image\": image:`,
		"bad-sg":      `runner class \"bad-sg\": security_groups refused by EC2`,
		"bad-profile": `runner class \"bad-profile\": instance_profile refused by EC2`,
	}
	for i, name := range []string{"bad-image", "bad-sg", "bad-profile"} {
		req := provisionBody(2)
		req.RunnerClass = name
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "52"+string(rune('0'+i)), nil), req)
		if code == http.StatusOK || !strings.Contains(string(body), want[name]) {
			t.Errorf("%s: %d %s, want a failure containing %s", name, code, body, want[name])
		}
	}
	for _, v := range env.EC2.Instances() {
		if v.State != "terminated" && v.State != "shutting-down" {
			t.Errorf("instance %s left %s after refused launches", v.ID, v.State)
		}
	}
}
