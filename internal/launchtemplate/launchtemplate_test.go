package launchtemplate_test

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

type env struct {
	srv *ec2server.Server
	c   *ec2.Client
	lt  string
	now time.Time
	mu  sync.Mutex
}

func (e *env) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }
func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
}

// baseUserData is the bootstrap the template carries, as runnerpool_user_data renders it.
func baseUserData(t *testing.T) string {
	t.Helper()
	ud, err := userdata.Render(userdata.Params{Table: "runnerpool-test", Region: "us-east-1", Arch: userdata.ArchX64,
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	return ud
}

func newEnv(t *testing.T, userData string) *env {
	t.Helper()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	c := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	data := &types.RequestLaunchTemplateData{
		ImageId: aws.String("ami-0b0b0b0b0b0b0b0b0"),
		BlockDeviceMappings: []types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String("/dev/xvda"),
			Ebs: &types.LaunchTemplateEbsBlockDeviceRequest{VolumeSize: aws.Int32(20), Encrypted: aws.Bool(true)}}},
	}
	if userData != "" {
		data.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(userData)))
	}
	lt, err := c.CreateLaunchTemplate(t.Context(), &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("runner"), LaunchTemplateData: data})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, c: c, lt: aws.ToString(lt.LaunchTemplate.LaunchTemplateId), now: time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)}
}

func (e *env) versions() *launchtemplate.Versions {
	return launchtemplate.New(e.c, launchtemplate.Options{Now: e.clock, Logger: slog.New(slog.DiscardHandler)})
}

func (e *env) class() declared.RunnerClass {
	return declared.RunnerClass{
		Name: "linux", Image: "ami-0c1a5500000000001", CPU: 2, MemoryMiB: 4096,
		Volume:         declared.Volume{Type: declared.VolumeGP3, SizeGiB: 40, IOPS: 4000, ThroughputMiBps: 250},
		SecurityGroups: []string{"sg-0aaaaaaaaaaaaaaaa"}, InstanceProfile: "runner-profile",
		LaunchTemplateID: e.lt,
	}
}

// version reads one version's launch data back.
func (e *env) version(t *testing.T, n string) *types.ResponseLaunchTemplateData {
	t.Helper()
	out, err := e.c.DescribeLaunchTemplateVersions(t.Context(), &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(e.lt), Versions: []string{n}})
	if err != nil || len(out.LaunchTemplateVersions) != 1 {
		t.Fatalf("DescribeLaunchTemplateVersions %s: %+v %v", n, out, err)
	}
	return out.LaunchTemplateVersions[0].LaunchTemplateData
}

func TestForMakesOneVersionPerSpec(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, "")
	v := e.versions()
	rc := e.class()
	n, err := v.For(ctx, rc)
	if err != nil || n != "2" {
		t.Fatalf("For = %q, %v; want version 2", n, err)
	}
	d := e.version(t, n)
	root := d.BlockDeviceMappings[0]
	if aws.ToString(d.ImageId) != rc.Image || aws.ToString(root.DeviceName) != "/dev/xvda" || root.Ebs.VolumeType != types.VolumeTypeGp3 ||
		aws.ToInt32(root.Ebs.VolumeSize) != 40 || aws.ToInt32(root.Ebs.Iops) != 4000 || aws.ToInt32(root.Ebs.Throughput) != 250 ||
		!aws.ToBool(root.Ebs.Encrypted) || strings.Join(d.SecurityGroupIds, ",") != "sg-0aaaaaaaaaaaaaaaa" ||
		aws.ToString(d.IamInstanceProfile.Name) != "runner-profile" {
		t.Errorf("version data %+v, root %+v: want the class's fields (the template's encryption kept)", d, root.Ebs)
	}

	// The same spec again, from this process or a restarted one: no new version.
	e.srv.ResetCalls()
	for _, vv := range []*launchtemplate.Versions{v, e.versions()} {
		if again, err := vv.For(ctx, rc); err != nil || again != n {
			t.Errorf("For again = %q, %v; want %s", again, err, n)
		}
	}
	if c := e.srv.Calls()["CreateLaunchTemplateVersion"]; c != 0 {
		t.Errorf("%d versions made for an unchanged spec", c)
	}

	// Each change of the spec makes a version; older ones beyond Keep are deleted.
	made := []string{n}
	for i, img := range []string{"ami-0c1a5500000000002", "ami-0c1a5500000000003", "ami-0c1a5500000000004"} {
		rc.Image = img
		got, err := v.For(ctx, rc)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if d := e.version(t, got); aws.ToString(d.ImageId) != img {
			t.Errorf("version %s image %s, want %s", got, aws.ToString(d.ImageId), img)
		}
		made = append(made, got)
	}
	all, err := e.c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(e.lt)})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, lv := range all.LaunchTemplateVersions {
		left = append(left, aws.ToString(lv.VersionDescription))
	}
	if len(all.LaunchTemplateVersions) != 1+1+launchtemplate.Keep {
		t.Errorf("versions left %q: want the template's own, the current and %d previous", left, launchtemplate.Keep)
	}

	// A new default version of the template is the base of the class's next version (after BaseTTL).
	nv, err := e.c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateId: aws.String(e.lt), SourceVersion: aws.String("1"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{KeyName: aws.String("ops")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.ModifyLaunchTemplate(ctx, &ec2.ModifyLaunchTemplateInput{LaunchTemplateId: aws.String(e.lt),
		DefaultVersion: aws.String(strconv.FormatInt(aws.ToInt64(nv.LaunchTemplateVersion.VersionNumber), 10))}); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Minute)
	got, err := v.For(ctx, rc)
	if err != nil || got == made[len(made)-1] || aws.ToString(e.version(t, got).KeyName) != "ops" {
		t.Errorf("after a new default version: %q, %v; want a new version with the base's key name", got, err)
	}
}

func TestForPreRunnerScript(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, baseUserData(t))
	rc := e.class()
	rc.PreRunnerScript = "#!/bin/sh\necho warming caches\n"
	n, err := e.versions().For(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(e.version(t, n).UserData))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := userdata.PreRunnerScriptOf(string(raw)); err != nil || s != rc.PreRunnerScript {
		t.Errorf("pre-runner script in the version's user data: %q, %v", s, err)
	}

	// A template whose user data runnerpool did not render cannot take the script: the class says so.
	e2 := newEnv(t, "#!/bin/bash\necho hand-written\n")
	rc.LaunchTemplateID = e2.lt
	_, err = e2.versions().For(ctx, rc)
	var ce *launchtemplate.ClassError
	if !errors.As(err, &ce) || ce.Class != "linux" || ce.Attribute != "pre_runner_script" {
		t.Errorf("hand-written user data: %v, want a ClassError on pre_runner_script", err)
	}
}

func TestForRefusedImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.srv.SetMissing("ami-0dead000000000000")
	rc := e.class()
	rc.Image = "ami-0dead000000000000"
	_, err := e.versions().For(t.Context(), rc)
	var ce *launchtemplate.ClassError
	if !errors.As(err, &ce) || ce.Class != "linux" || ce.Attribute != "image" || !strings.Contains(err.Error(), `runner class "linux": image:`) {
		t.Errorf("missing AMI: %v, want a ClassError on image", err)
	}
	rc.Image, rc.LaunchTemplateID = "ami-0c1a5500000000001", "lt-0000000000000dead"
	if _, err := e.versions().For(t.Context(), rc); !errors.As(err, &ce) || ce.Attribute != "launch_template_id" {
		t.Errorf("missing template: %v, want a ClassError on launch_template_id", err)
	}
}

// TestForJobAccess: a root class's version carries the job access in its user data (the agent is
// started with -job-access root, and the packages the grant needs are installed), a user class's
// version leaves the template's user data alone, and changing job_access makes a new version.
func TestForJobAccess(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, baseUserData(t))
	v := e.versions()
	user, err := v.For(ctx, e.class())
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := base64.StdEncoding.DecodeString(aws.ToString(e.version(t, user).UserData)); strings.Contains(string(raw), "-job-access") {
		t.Errorf("a user class's version passes a job access to the agent")
	}
	rc := e.class()
	rc.JobAccess, rc.Reuse = declared.JobAccessRoot, declared.ReuseSameRepository
	n, err := v.For(ctx, rc)
	if err != nil || n == user {
		t.Fatalf("root class: version %q (user class's %q), %v; want a version of its own", n, user, err)
	}
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(e.version(t, n).UserData))
	if err != nil {
		t.Fatal(err)
	}
	if got := userdata.JobAccessOf(string(raw)); got != declared.JobAccessRoot {
		t.Errorf("job access in the version's user data = %q, want root", got)
	}
	for _, want := range []string{" -job-access root", "job_access='root'"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the root class's user data lacks %q", want)
		}
	}
}
