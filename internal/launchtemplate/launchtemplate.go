// Package launchtemplate makes a runner class launch what it declares. For each class spec it keeps
// one version of the class's launch template: the template's default version with the class's AMI,
// root volume (type, size, IOPS, throughput), security groups, instance profile and pre-runner
// script (re-rendered into the template's runnerpool user data) on top. Every CreateFleet of the
// class names that version's number.
//
// Why a version rather than CreateFleet overrides: an instant fleet's overrides take the AMI, block
// device mappings and instance profile, but not security groups or user data, which only a launch
// template carries. So a version is needed anyway, and one version carries every field: one
// mechanism, made once per spec instead of resent with every launch, and what a class launches can be
// read back with DescribeLaunchTemplateVersions.
//
// A version is found again by its description (the class name and a hash of what it was built
// from, including the base version number, so a new default version of the template is picked up),
// so a restarted or second reconciler reuses it; concurrent replicas creating the same version send
// the same ClientToken, and EC2 answers both with one version. Older versions of a class beyond the
// previous one are deleted (Keep), never the template's default.
package launchtemplate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// EC2API is the part of the EC2 client Versions uses; *ec2.Client satisfies it.
type EC2API interface {
	DescribeLaunchTemplates(ctx context.Context, in *ec2.DescribeLaunchTemplatesInput, opts ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, opts ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error)
	CreateLaunchTemplateVersion(ctx context.Context, in *ec2.CreateLaunchTemplateVersionInput, opts ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error)
	DeleteLaunchTemplateVersions(ctx context.Context, in *ec2.DeleteLaunchTemplateVersionsInput, opts ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateVersionsOutput, error)
	DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, opts ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
}

// Keep is how many versions of a class are kept besides the current one: a replica still launching
// from the previous spec (its configuration copy is up to a cache TTL old) finds its version.
const Keep = 1

// descPrefix starts the description of every version this package makes.
const descPrefix = "runnerpool:"

// ClassError is a runner class attribute EC2 refuses (or that cannot be applied).
type ClassError struct {
	Class, Attribute string
	Err              error
}

func (e *ClassError) Error() string {
	return fmt.Sprintf("runner class %q: %s: %v", e.Class, e.Attribute, e.Err)
}

func (e *ClassError) Unwrap() error { return e.Err }

// Options configure Versions.
type Options struct {
	// Release is the current runner release (runnerrelease.Cache.Current): each class's version
	// installs it, unless the template's user data pins one (runnerpool_user_data's runner_version).
	// Nil, or none known yet: the user data's own.
	Release func() (runnerversion.Release, bool)
	// BaseTTL is how long a template's default version number is trusted before it is read again
	// (default 1 min): a new default version reaches launches within it.
	BaseTTL time.Duration
	// RegistrationWait is the deployment's wait for a boot that installs nothing (the reconciler's
	// --registration-wait; default declared.DefaultRegistrationWait): BootExtra is relative to it.
	RegistrationWait time.Duration
	Now              func() time.Time
	Logger           *slog.Logger
}

// Versions finds or makes the launch template version of each runner class spec. It is safe for
// concurrent use.
type Versions struct {
	api  EC2API
	opts Options

	mu      sync.Mutex // held across a lookup, so one spec is made once per process
	bases   map[string]base
	made    map[string]string // description -> version number
	runners map[string]string // launch template id + ":" + version number -> runner version it installs
	images  map[string]image  // image id -> what DescribeImages said of it
}

// image is what DescribeImages says of a class's image: its root device and its tags.
type image struct {
	root string
	tags map[string]string
	at   time.Time
}

// ImageTTL is how long an image's description is trusted: a tag added to a prepared image is
// picked up within it.
const ImageTTL = 10 * time.Minute

type base struct {
	version int64
	at      time.Time
}

// New returns Versions over api.
func New(api EC2API, opts Options) *Versions {
	if opts.BaseTTL <= 0 {
		opts.BaseTTL = time.Minute
	}
	if opts.RegistrationWait <= 0 {
		opts.RegistrationWait = declared.DefaultRegistrationWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Versions{api: api, opts: opts, bases: map[string]base{}, made: map[string]string{}, runners: map[string]string{}, images: map[string]image{}}
}

// For returns the version number of rc's launch template that launches what rc declares, making it
// when needed. A class attribute EC2 refuses is a *ClassError naming the class and the attribute.
//
// A version whose runner GitHub would refuse to register (below runnerversion.Floor: user data
// pinned to, or rendered with, an older runner, and no current release to replace it) is never
// launched: a *ClassError on "runner version".
func (v *Versions) For(ctx context.Context, rc declared.RunnerClass) (string, error) {
	n, err := v.version(ctx, rc)
	if err != nil {
		return "", err
	}
	if r := v.Runner(rc, n); r != "" {
		if _, err := runnerversion.CheckFloor(r); err != nil {
			return "", &ClassError{rc.Name, "runner version", fmt.Errorf("launch template %s version %s installs it: %w", rc.LaunchTemplateID, n, err)}
		}
	}
	return n, nil
}

// version is For without the runner floor check.
func (v *Versions) version(ctx context.Context, rc declared.RunnerClass) (string, error) {
	if rc.LaunchTemplateID == "" {
		return "", &ClassError{rc.Name, "launch_template_id", errors.New("a launch template is required to launch from")}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	b, err := v.baseVersion(ctx, rc)
	if err != nil {
		return "", err
	}
	pin := v.pin()
	desc := description(rc, b, pin)
	if n, ok := v.made[desc]; ok {
		return n, nil
	}
	versions, err := v.list(ctx, rc.LaunchTemplateID)
	if err != nil {
		return "", fmt.Errorf("runner class %q: listing the versions of launch template %s: %w", rc.Name, rc.LaunchTemplateID, err)
	}
	for _, lv := range versions {
		if aws.ToString(lv.VersionDescription) == desc {
			n := strconv.FormatInt(aws.ToInt64(lv.VersionNumber), 10)
			v.made[desc] = n
			v.runners[rc.LaunchTemplateID+":"+n] = runnerOf(lv.LaunchTemplateData, baseData(versions, b))
			return n, nil
		}
	}
	n, err := v.create(ctx, rc, b, desc, versions, pin)
	if err != nil {
		return "", err
	}
	v.made[desc] = n
	v.prune(ctx, rc, n, versions)
	return n, nil
}

func (v *Versions) baseVersion(ctx context.Context, rc declared.RunnerClass) (int64, error) {
	now := v.opts.Now()
	if b, ok := v.bases[rc.LaunchTemplateID]; ok && now.Sub(b.at) < v.opts.BaseTTL && !now.Before(b.at) {
		return b.version, nil
	}
	out, err := v.api.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{rc.LaunchTemplateID}})
	if err != nil {
		if strings.HasPrefix(apiCode(err), "InvalidLaunchTemplate") {
			return 0, &ClassError{rc.Name, "launch_template_id", err}
		}
		return 0, fmt.Errorf("runner class %q: reading launch template %s: %w", rc.Name, rc.LaunchTemplateID, err)
	}
	if len(out.LaunchTemplates) != 1 {
		return 0, &ClassError{rc.Name, "launch_template_id", fmt.Errorf("launch template %s not found", rc.LaunchTemplateID)}
	}
	b := base{version: aws.ToInt64(out.LaunchTemplates[0].DefaultVersionNumber), at: now}
	v.bases[rc.LaunchTemplateID] = b
	return b.version, nil
}

// pin is the current runner release as user data takes it, nil when none is known.
func (v *Versions) pin() *userdata.RunnerPin {
	if v.opts.Release == nil {
		return nil
	}
	rel, ok := v.opts.Release()
	if !ok {
		return nil
	}
	p := userdata.PinOf(rel)
	return &p
}

// description names the version of rc's spec built on base version b with the runner release pin.
// EC2 allows 255 characters.
func description(rc declared.RunnerClass, b int64, pin *userdata.RunnerPin) string {
	sgs := slices.Sorted(slices.Values(rc.SecurityGroups))
	fields := []any{rc.Image, rc.Volume, sgs, rc.InstanceProfile, rc.PreRunnerScript, b}
	if grantsAccess(rc) {
		fields = append(fields, rc.JobAccess) // only then: the versions of other classes keep their names
	}
	if rc.Cache.On() {
		fields = append(fields, "cache") // likewise
	}
	if pin != nil {
		fields = append(fields, *pin) // a new release is a new version of every class
	}
	js, _ := json.Marshal(fields)
	sum := sha256.Sum256(js)
	return descPrefix + rc.Name + ":" + hex.EncodeToString(sum[:12])
}

func (v *Versions) list(ctx context.Context, id string) ([]types.LaunchTemplateVersion, error) {
	var out []types.LaunchTemplateVersion
	p := ec2.NewDescribeLaunchTemplateVersionsPaginator(v.api, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(id)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.LaunchTemplateVersions...)
	}
	return out, nil
}

// create makes the version: the base version with the class's fields on top.
func (v *Versions) create(ctx context.Context, rc declared.RunnerClass, b int64, desc string, versions []types.LaunchTemplateVersion, pin *userdata.RunnerPin) (string, error) {
	root, err := v.rootDevice(ctx, rc)
	if err != nil {
		return "", err
	}
	data := &types.RequestLaunchTemplateData{ImageId: aws.String(rc.Image), BlockDeviceMappings: devices(baseData(versions, b), root, rc.Volume)}
	if len(rc.SecurityGroups) > 0 {
		data.SecurityGroupIds = slices.Clone(rc.SecurityGroups)
	}
	if p := rc.InstanceProfile; p != "" {
		data.IamInstanceProfile = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String(p)}
		if strings.HasPrefix(p, "arn:") {
			data.IamInstanceProfile = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Arn: aws.String(p)}
		}
	}
	if rc.PreRunnerScript != "" || grantsAccess(rc) {
		ud, err := withClass(versions, b, rc)
		if err != nil {
			attr := "pre_runner_script"
			if rc.PreRunnerScript == "" {
				attr = "job_access"
			}
			return "", &ClassError{rc.Name, attr, err}
		}
		data.UserData = aws.String(ud)
	}
	if err := withRelease(data, baseData(versions, b), pin); err != nil {
		return "", &ClassError{rc.Name, "runner release", err}
	}
	sum := sha256.Sum256([]byte(rc.LaunchTemplateID + desc))
	out, err := v.api.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateId: aws.String(rc.LaunchTemplateID), SourceVersion: aws.String(strconv.FormatInt(b, 10)),
		VersionDescription: aws.String(desc), LaunchTemplateData: data,
		ClientToken: aws.String(hex.EncodeToString(sum[:16])),
	})
	if err != nil {
		return "", explain(rc.Name, fmt.Errorf("creating its launch template version: %w", err))
	}
	n := strconv.FormatInt(aws.ToInt64(out.LaunchTemplateVersion.VersionNumber), 10)
	v.runners[rc.LaunchTemplateID+":"+n] = runnerOf(&types.ResponseLaunchTemplateData{UserData: data.UserData}, baseData(versions, b))
	v.opts.Logger.InfoContext(ctx, "launch template version made for runner class", "runner_class", rc.Name,
		"launch_template", rc.LaunchTemplateID, "version", n, "source_version", b)
	return n, nil
}

func baseData(versions []types.LaunchTemplateVersion, b int64) *types.ResponseLaunchTemplateData {
	i := slices.IndexFunc(versions, func(lv types.LaunchTemplateVersion) bool { return aws.ToInt64(lv.VersionNumber) == b })
	if i < 0 || versions[i].LaunchTemplateData == nil {
		return &types.ResponseLaunchTemplateData{}
	}
	return versions[i].LaunchTemplateData
}

// devices is the base version's block device mappings with the class's root volume: a version's
// mappings replace its source's, so the others are repeated, and the root volume keeps the
// template's encryption settings.
func devices(base *types.ResponseLaunchTemplateData, root string, vol declared.Volume) []types.LaunchTemplateBlockDeviceMappingRequest {
	rootEBS := &types.LaunchTemplateEbsBlockDeviceRequest{
		VolumeType: types.VolumeType(vol.Type), VolumeSize: aws.Int32(int32(vol.SizeGiB)),
		Iops: aws.Int32(int32(vol.IOPS)), Throughput: aws.Int32(int32(vol.ThroughputMiBps)), DeleteOnTermination: aws.Bool(true),
	}
	out := []types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String(root), Ebs: rootEBS}}
	for _, m := range base.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == root {
			if m.Ebs != nil {
				rootEBS.Encrypted, rootEBS.KmsKeyId = m.Ebs.Encrypted, m.Ebs.KmsKeyId
			}
			continue
		}
		r := types.LaunchTemplateBlockDeviceMappingRequest{DeviceName: m.DeviceName, NoDevice: m.NoDevice, VirtualName: m.VirtualName}
		if e := m.Ebs; e != nil {
			r.Ebs = &types.LaunchTemplateEbsBlockDeviceRequest{
				DeleteOnTermination: e.DeleteOnTermination, Encrypted: e.Encrypted, Iops: e.Iops, KmsKeyId: e.KmsKeyId,
				SnapshotId: e.SnapshotId, Throughput: e.Throughput, VolumeSize: e.VolumeSize, VolumeType: e.VolumeType,
			}
		}
		out = append(out, r)
	}
	return out
}

// rootDevice is the image's root device name: where the class's volume settings go.
func (v *Versions) rootDevice(ctx context.Context, rc declared.RunnerClass) (string, error) {
	img, err := v.image(ctx, rc)
	return img.root, err
}

// image describes the class's image (cached for ImageTTL). The caller holds v.mu.
func (v *Versions) image(ctx context.Context, rc declared.RunnerClass) (image, error) {
	now := v.opts.Now()
	if img, ok := v.images[rc.Image]; ok && now.Sub(img.at) < ImageTTL && !now.Before(img.at) {
		return img, nil
	}
	out, err := v.api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{rc.Image}})
	if err != nil {
		return image{}, explain(rc.Name, fmt.Errorf("describing image %s: %w", rc.Image, err))
	}
	if len(out.Images) != 1 || aws.ToString(out.Images[0].RootDeviceName) == "" {
		return image{}, &ClassError{rc.Name, "image", fmt.Errorf("image %s not found (or it has no root device)", rc.Image)}
	}
	img := image{root: aws.ToString(out.Images[0].RootDeviceName), tags: map[string]string{}, at: now}
	for _, tag := range out.Images[0].Tags {
		img.tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	v.images[rc.Image] = img
	return img, nil
}

// BootExtra is how much longer than the deployment's registration wait (Options.RegistrationWait)
// the instances of launch template version n of rc (as For returned it) may take to boot and
// register: config's one rule (RunnerClass.BootWait), from the class's own registration_wait, else
// from whether a boot of its image installs packages (declared.BootInstalls: the image's tags against
// the class's job access and the runner release the version installs). Provisions, pool jobs and
// warm pools all take their class's from here. An image that cannot be described counts as
// installing.
func (v *Versions) BootExtra(ctx context.Context, rc declared.RunnerClass, n string) time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	installs := true
	if rc.RegistrationWait == 0 {
		img, err := v.image(ctx, rc)
		if err != nil {
			v.opts.Logger.WarnContext(ctx, "runner class image not described; its boot is taken to install packages", "runner_class", rc.Name, "image", rc.Image, "err", err)
		}
		installs = err != nil || declared.BootInstalls(img.tags, rc.JobAccess, v.runners[rc.LaunchTemplateID+":"+n])
	}
	base := v.opts.RegistrationWait
	return declared.BootExtra(rc.BootWait(base, installs), base)
}

// grantsAccess reports whether the class's job access is more than the default user's: its user data
// must say so to the agent.
func grantsAccess(rc declared.RunnerClass) bool {
	return rc.JobAccess != "" && rc.JobAccess != declared.JobAccessUser
}

// withClass is the base version's user data re-rendered with the class's pre-runner script and job
// access, base64 as EC2 takes it.
func withClass(versions []types.LaunchTemplateVersion, b int64, rc declared.RunnerClass) (string, error) {
	enc := aws.ToString(baseData(versions, b).UserData)
	if enc == "" {
		return "", fmt.Errorf("the launch template's default version %d has no user data to add the class's script or job access to: render it with runnerpool_user_data", b)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("decoding the launch template's user data: %w", err)
	}
	ud, err := userdata.WithClass(string(raw), userdata.Class{PreRunnerScript: rc.PreRunnerScript, JobAccess: rc.JobAccess, Cache: rc.Cache.On()})
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString([]byte(ud)), nil
}

// Runner returns the Actions runner version the launch template version n of rc (as For returned
// it) installs, "" when its user data is not runnerpool's. Warm pools put it in their spec hash.
func (v *Versions) Runner(rc declared.RunnerClass, n string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.runners[rc.LaunchTemplateID+":"+n]
}

// runnerOf is the runner version a version's user data (its own, else its source's) installs.
func runnerOf(data, base *types.ResponseLaunchTemplateData) string {
	enc := ""
	if data != nil {
		enc = aws.ToString(data.UserData)
	}
	if enc == "" && base != nil {
		enc = aws.ToString(base.UserData)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	pin, _ := userdata.RunnerOf(string(raw))
	return pin.Version
}

// withRelease re-renders the version's user data (the class's, else the base version's) with the
// current runner release. User data runnerpool did not render, or that pins its own runner, is left
// as it is.
func withRelease(data *types.RequestLaunchTemplateData, base *types.ResponseLaunchTemplateData, pin *userdata.RunnerPin) error {
	if pin == nil {
		return nil
	}
	enc := aws.ToString(data.UserData)
	if enc == "" {
		enc = aws.ToString(base.UserData)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("decoding the launch template's user data: %w", err)
	}
	if _, ours := userdata.RunnerOf(string(raw)); !ours {
		return nil
	}
	if _, pinned := userdata.PinnedRunner(string(raw)); pinned {
		return nil
	}
	ud, err := userdata.WithRunner(string(raw), *pin)
	if err != nil {
		return err
	}
	data.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(ud)))
	return nil
}

// prune deletes the class's versions older than the Keep before current (never the default one).
// A failure is logged: the versions are deleted on the next change.
func (v *Versions) prune(ctx context.Context, rc declared.RunnerClass, current string, versions []types.LaunchTemplateVersion) {
	prefix := descPrefix + rc.Name + ":"
	var old []int64
	for _, lv := range versions {
		n := aws.ToInt64(lv.VersionNumber)
		if strings.HasPrefix(aws.ToString(lv.VersionDescription), prefix) && !aws.ToBool(lv.DefaultVersion) && strconv.FormatInt(n, 10) != current {
			old = append(old, n)
		}
	}
	slices.Sort(old)
	if len(old) <= Keep {
		return
	}
	var del []string
	for _, n := range old[:len(old)-Keep] {
		del = append(del, strconv.FormatInt(n, 10))
	}
	out, err := v.api.DeleteLaunchTemplateVersions(ctx, &ec2.DeleteLaunchTemplateVersionsInput{
		LaunchTemplateId: aws.String(rc.LaunchTemplateID), Versions: del,
	})
	if err != nil {
		v.opts.Logger.WarnContext(ctx, "old launch template versions of a runner class not deleted", "runner_class", rc.Name, "versions", del, "err", err)
		return
	}
	for _, u := range out.UnsuccessfullyDeletedLaunchTemplateVersions {
		v.opts.Logger.WarnContext(ctx, "old launch template version not deleted", "runner_class", rc.Name,
			"version", aws.ToInt64(u.VersionNumber), "code", aws.ToString(u.ResponseError.Message))
	}
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// explain makes err a *ClassError when it is about one of the class's attributes.
func explain(class string, err error) error {
	if a := fleet.RefusedAttribute(err); a != "" {
		return &ClassError{class, a, err}
	}
	return fmt.Errorf("runner class %q: %w", class, err)
}
