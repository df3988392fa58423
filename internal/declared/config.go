// Package declared is runnerpool's configuration model, what a deployment is declared to be: runner
// classes (what an instance is; RunnerClass is the one runner class type, which the reconciler's
// runner classes file converts to and runnerclass.Resolved launches from), warm pools (how many of
// them to keep ready, by schedule), quotas and scale sets. The Terraform provider writes them as JSON
// specs in configuration items of the state table; the reconciler reads them all every cycle
// (Repository.Load). Validation lives here so the provider (at plan time) and the reconciler (on every
// read) apply the same rules.
package declared

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

// RunnerClass describes the instances of one kind of runner.
type RunnerClass struct {
	Name string `json:"name"`
	// Image is the AMI id instances boot from.
	Image string `json:"image"`
	// CPU is the number of vCPUs and MemoryMiB the memory: the minimum attribute-based instance
	// selection asks for.
	CPU       int `json:"cpu"`
	MemoryMiB int `json:"memory_mib"`
	// InstanceTypes are allowed-instance-type patterns (internal/instancetype: "c7i.*", "m6a.large");
	// empty allows every type that has the CPU and memory. A family such as t3 is "t3.*".
	InstanceTypes []string `json:"instance_types,omitempty"`
	Volume        Volume   `json:"volume"`
	// UsageClass is "on-demand" or "spot".
	UsageClass      string   `json:"usage_class"`
	Subnets         []string `json:"subnets"`
	SecurityGroups  []string `json:"security_groups,omitempty"`
	InstanceProfile string   `json:"instance_profile,omitempty"`
	// PreRunnerScript runs on the instance before its first registration (and before a warm
	// instance is stopped or declared ready).
	PreRunnerScript string `json:"pre_runner_script,omitempty"`
	// Labels are extra GitHub runner labels.
	Labels []string `json:"labels,omitempty"`
	// MaxRuntime bounds a run on one instance; IdleTime is how long a hot or idle instance waits for
	// a claim before it is recycled.
	MaxRuntime Duration `json:"max_runtime"`
	IdleTime   Duration `json:"idle_time"`
	// LaunchTemplateID, when set, is the launch template instances are created from (user data,
	// metadata options); the fields above override it.
	LaunchTemplateID string `json:"launch_template_id,omitempty"`
	// QueueURL is the SQS queue of idle runners of this class.
	QueueURL string `json:"queue_url"`
	// Tags are extra EC2 tags of the class's instances (ValidateTags: keys instance metadata can carry).
	Tags map[string]string `json:"tags,omitempty"`
	// MaxInstances caps the class's own share of the deployment's instances (warm, idle, running,
	// being created); 0: no cap of its own (quota.go).
	MaxInstances int `json:"max_instances,omitempty"`
	// JobAccess is what a job may do on the instance (JobAccessUser, JobAccessDocker, JobAccessRoot);
	// empty is JobAccessUser. Reuse is across which runs an instance may serve (ReuseAny,
	// ReuseSameRepository, ReuseNever); empty is ReuseAny. See Unsupported for what this version runs.
	JobAccess string `json:"job_access,omitempty"`
	Reuse     string `json:"reuse,omitempty"`
	// Cache, when on, has the class's instances serve GitHub's cache protocol from the
	// deployment's bucket (cache.go); nil (omitted, so older classes keep their spec hash) is off.
	Cache *Cache `json:"cache,omitempty"`
	// RegistrationWait, when set, is how long the class's new instances have to register, instead
	// of what its image says (BootWait, boot.go).
	RegistrationWait Duration `json:"registration_wait,omitzero"`
}

// Volume is the root EBS volume.
type Volume struct {
	Type            string `json:"type"`
	SizeGiB         int    `json:"size_gib"`
	IOPS            int    `json:"iops"`
	ThroughputMiBps int    `json:"throughput_mibps"`
}

// WarmPool keeps instances of a runner class ready, hot (running) or stopped, as its schedules say.
type WarmPool struct {
	Name        string `json:"name"`
	RunnerClass string `json:"runner_class"`
	// Environment, when set, names the runnerpool deployment ("stack") the pool belongs to when
	// several share an organization; jobs may ask for it with an env label.
	Environment string `json:"environment,omitempty"`
	// Timezone is the IANA zone the schedules' days and times are in; empty means UTC.
	Timezone  string              `json:"timezone"`
	Schedules []schedule.Schedule `json:"schedules"`
	// Autoscale, when set, sizes the pool to a queue-time goal within the schedules' counts.
	Autoscale *Autoscale `json:"autoscale,omitempty"`
}

// Limits of the model, chosen to catch typos rather than to mirror every AWS maximum.
const (
	MaxCPU             = 448
	MinMemoryMiB       = 512
	MaxMemoryMiB       = 24 * 1024 * 1024
	MinVolumeGiB       = 1
	MaxVolumeGiB       = 16384
	MinIOPS            = 3000 // gp3 baseline, free
	MaxIOPS            = 16000
	MinThroughput      = 125 // MiB/s, gp3 baseline, free
	MaxThroughput      = 1000
	MaxPreRunnerScript = 64 * 1024 // before compression; what fits is PreRunnerScriptBudget after it
	MinMaxRuntime      = time.Minute
	MaxMaxRuntime      = 5 * 24 * time.Hour // GitHub cancels self-hosted jobs after 5 days
	MinIdleTime        = time.Minute
	MaxIdleTime        = 24 * time.Hour
	MaxLabels          = 32
)

// Usage classes.
const (
	UsageOnDemand = "on-demand"
	UsageSpot     = "spot"
)

// VolumeGP3 is the only volume type: its baseline IOPS and throughput are free, which is what a
// stopped warm instance should cost.
const VolumeGP3 = "gp3"

var (
	nameRE            = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	amiRE             = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)
	subnetRE          = regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`)
	securityGroupRE   = regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`)
	launchTemplateRE  = regexp.MustCompile(`^lt-([0-9a-f]{8}|[0-9a-f]{17})$`)
	profileNameRE     = regexp.MustCompile(`^[\w+=,.@-]{1,128}$`)
	profileARNRE      = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/[\w+=,.@/-]{1,512}$`)
	labelForbiddenSet = ", \t\r\n\"'`"
)

// ValidateName checks a runner class, warm pool or environment name: 1-63 lower-case letters,
// digits, '-' or '_', starting with a letter or digit. Names appear in SQS queue names, EC2 tags and
// GitHub labels (which ignore case), so they are kept to that set.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("name %q: use 1-63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// ValidateImage checks an AMI id.
func ValidateImage(s string) error {
	if !amiRE.MatchString(s) {
		return fmt.Errorf("image %q: want an AMI id such as ami-0123456789abcdef0", s)
	}
	return nil
}

// ValidateSubnet checks a subnet id.
func ValidateSubnet(s string) error {
	if !subnetRE.MatchString(s) {
		return fmt.Errorf("subnet %q: want a subnet id such as subnet-0123456789abcdef0", s)
	}
	return nil
}

// ValidateSecurityGroup checks a security group id.
func ValidateSecurityGroup(s string) error {
	if !securityGroupRE.MatchString(s) {
		return fmt.Errorf("security group %q: want a security group id such as sg-0123456789abcdef0", s)
	}
	return nil
}

// ValidateLaunchTemplate checks a launch template id.
func ValidateLaunchTemplate(s string) error {
	if !launchTemplateRE.MatchString(s) {
		return fmt.Errorf("launch template %q: want a launch template id such as lt-0123456789abcdef0", s)
	}
	return nil
}

// ValidateInstanceProfile checks an instance profile name or ARN.
func ValidateInstanceProfile(s string) error {
	if !profileNameRE.MatchString(s) && !profileARNRE.MatchString(s) {
		return fmt.Errorf("instance profile %q: want an instance profile name or arn:aws:iam::<account>:instance-profile/<name>", s)
	}
	return nil
}

// ValidateUsageClass checks a usage class.
func ValidateUsageClass(s string) error {
	if s != UsageOnDemand && s != UsageSpot {
		return fmt.Errorf("usage class %q: want %q or %q", s, UsageOnDemand, UsageSpot)
	}
	return nil
}

// ValidateLabel checks one GitHub runner label.
func ValidateLabel(s string) error {
	switch {
	case s == "":
		return errors.New("label is empty")
	case len(s) > 100:
		return fmt.Errorf("label %q: at most 100 characters", s)
	case strings.ContainsAny(s, labelForbiddenSet) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Errorf("label %q: no spaces, commas, quotes or control characters", s)
	}
	return nil
}

// Tag limits: EC2 allows 50 tags on a resource; runnerpool puts up to eight of its own on each instance.
const (
	MaxTags        = 40
	MaxTagKeyLen   = 128
	MaxTagValueLen = 256
)

// ReservedTagPrefixes are tag keys the user may not set: AWS's own and runnerpool's (its deployment,
// class, pool, run and wake-up tags, which decide what refresh may terminate).
var ReservedTagPrefixes = []string{"aws:", "runnerpool:"}

// ValidateTagKey checks an instance tag key. Runner instances have instance metadata tags enabled (the
// agent's fast claim notice reads its wake-up tag through IMDS), and with them on EC2 refuses to launch
// or tag an instance with a key that IMDS cannot serve as a path: only letters, digits and + - = . , _ : @,
// no spaces or "/", not ".", ".." or "_info". Checked at plan time so the failure is not a refused CreateFleet.
func ValidateTagKey(k string) error {
	switch {
	case k == "":
		return errors.New("tag key is empty")
	case len(k) > MaxTagKeyLen:
		return fmt.Errorf("tag key %q: at most %d characters", k, MaxTagKeyLen)
	case k == "." || k == ".." || k == "_info":
		return fmt.Errorf("tag key %q: instance metadata tags cannot serve . .. or _info as a key", k)
	case strings.ContainsFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+-=.,_:@", r))
	}):
		return fmt.Errorf("tag key %q: with instance metadata tags on (runnerpool's claim notice needs them) EC2 allows only letters, digits and + - = . , _ : @ in tag keys: no spaces or /", k)
	}
	for _, p := range ReservedTagPrefixes {
		if strings.HasPrefix(strings.ToLower(k), p) {
			return fmt.Errorf("tag key %q: keys starting with %q are reserved", k, p)
		}
	}
	return nil
}

// ValidateTags checks a runner class's tags: count, keys (ValidateTagKey) and value lengths.
func ValidateTags(tags map[string]string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%d tags: at most %d (EC2 allows 50 per instance and runnerpool adds its own)", len(tags), MaxTags)
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if err := ValidateTagKey(k); err != nil {
			errs = append(errs, err)
		} else if v := tags[k]; len(v) > MaxTagValueLen {
			errs = append(errs, fmt.Errorf("tag %q: value of %d characters, at most %d", k, len(v), MaxTagValueLen))
		}
	}
	return errors.Join(errs...)
}

// ValidateQueueURL checks an SQS queue URL of a runner class's pool.
func ValidateQueueURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return fmt.Errorf("queue URL %q: want an SQS queue URL such as https://sqs.eu-west-1.amazonaws.com/123456789012/runners", s)
	}
	return RefuseFIFOPool(s)
}

// RefuseFIFOPool refuses a FIFO queue (its name ends in .fifo) as a runner class's pool. SQS
// requires a MessageGroupId on every send to a FIFO queue and refuses the others
// (MissingParameter), and a group's in-flight message hides the rest of the group from every
// receiver: a pool has no order to keep, and every pickup must see every idle instance. The pool
// sends none, so such a queue would never hold an instance.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
func RefuseFIFOPool(s string) error {
	if strings.HasSuffix(strings.TrimRight(s, "/"), ".fifo") {
		return fmt.Errorf("queue URL %q is a FIFO queue: a runner class's pool must be a standard queue (runnerpool_pool_queue creates one)", s)
	}
	return nil
}

// ValidatePreRunnerScript checks a pre-runner script's size and content.
func ValidatePreRunnerScript(s string) error {
	switch {
	case len(s) > MaxPreRunnerScript:
		return fmt.Errorf("pre-runner script is %d bytes: at most %d (and %d once compressed) fit in EC2 user data next to the bootstrap; have it download the rest", len(s), MaxPreRunnerScript, PreRunnerScriptBudget)
	case len(PackPreRunnerScript(s)) > PreRunnerScriptBudget:
		return fmt.Errorf("pre-runner script is %d bytes once compressed (gzip, base64): at most %d fit in EC2 user data next to the bootstrap; have it download the rest", len(PackPreRunnerScript(s)), PreRunnerScriptBudget)
	case strings.ContainsRune(s, 0):
		return errors.New("pre-runner script contains a NUL byte")
	}
	return nil
}

// ValidateDuration checks a duration against [min, max].
func ValidateDuration(what string, d, min, max time.Duration) error {
	if d < min || d > max {
		return fmt.Errorf("%s %s: must be between %s and %s", what, d, min, max)
	}
	return nil
}

// Problem is one invalid field of a runner class or warm pool. Field is the JSON path.
type Problem struct {
	Field string
	Err   error
}

func (p *Problem) Error() string { return p.Field + ": " + p.Err.Error() }
func (p *Problem) Unwrap() error { return p.Err }

// Problems is every problem of one item; its message names the item.
type Problems struct {
	Kind, Name string
	List       []*Problem
}

func (ps *Problems) Error() string {
	parts := make([]string, len(ps.List))
	for i, p := range ps.List {
		parts[i] = p.Error()
	}
	return fmt.Sprintf("%s %q: %s", ps.Kind, ps.Name, strings.Join(parts, "; "))
}

type collector struct{ list []*Problem }

func (c *collector) add(field string, err error) {
	if err != nil {
		c.list = append(c.list, &Problem{Field: field, Err: err})
	}
}

func (c *collector) each(field string, xs []string, check func(string) error) {
	seen := map[string]bool{}
	for i, x := range xs {
		f := fmt.Sprintf("%s[%d]", field, i)
		c.add(f, check(x))
		if seen[x] {
			c.add(f, fmt.Errorf("%q is listed twice", x))
		}
		seen[x] = true
	}
}

func (c *collector) result(kind, name string) error {
	if len(c.list) == 0 {
		return nil
	}
	return &Problems{Kind: kind, Name: name, List: c.list}
}

// Validate reports every problem of the runner class as a *Problems, or nil.
func (rc RunnerClass) Validate() error {
	var c collector
	c.add("name", ValidateName(rc.Name))
	c.add("image", ValidateImage(rc.Image))
	if rc.CPU < 1 || rc.CPU > MaxCPU {
		c.add("cpu", fmt.Errorf("cpu %d: must be between 1 and %d vCPUs", rc.CPU, MaxCPU))
	}
	if rc.MemoryMiB < MinMemoryMiB || rc.MemoryMiB > MaxMemoryMiB {
		c.add("memory_mib", fmt.Errorf("memory %d MiB: must be between %d and %d", rc.MemoryMiB, MinMemoryMiB, MaxMemoryMiB))
	}
	c.each("instance_types", rc.InstanceTypes, instancetype.ValidatePattern)
	for _, p := range rc.Volume.Problems() {
		c.add("volume."+p.Field, p.Err)
	}
	c.add("usage_class", ValidateUsageClass(rc.UsageClass))
	if len(rc.Subnets) == 0 {
		c.add("subnets", errors.New("at least one subnet is required"))
	}
	c.each("subnets", rc.Subnets, ValidateSubnet)
	c.each("security_groups", rc.SecurityGroups, ValidateSecurityGroup)
	if rc.InstanceProfile != "" {
		c.add("instance_profile", ValidateInstanceProfile(rc.InstanceProfile))
	}
	c.add("pre_runner_script", ValidatePreRunnerScript(rc.PreRunnerScript))
	if len(rc.Labels) > MaxLabels {
		c.add("labels", fmt.Errorf("%d labels: at most %d", len(rc.Labels), MaxLabels))
	}
	c.each("labels", rc.Labels, ValidateLabel)
	c.add("max_runtime", ValidateDuration("max runtime", time.Duration(rc.MaxRuntime), MinMaxRuntime, MaxMaxRuntime))
	c.add("idle_time", ValidateDuration("idle time", time.Duration(rc.IdleTime), MinIdleTime, MaxIdleTime))
	if rc.LaunchTemplateID != "" {
		c.add("launch_template_id", ValidateLaunchTemplate(rc.LaunchTemplateID))
	}
	c.add("queue_url", ValidateQueueURL(rc.QueueURL))
	c.add("job_access", ValidateJobAccess(rc.JobAccess))
	c.add("reuse", ValidateReuse(rc.Reuse))
	if ValidateJobAccess(rc.JobAccess) == nil && ValidateReuse(rc.Reuse) == nil {
		c.add("reuse", CheckPosture(rc.JobAccess, rc.Reuse))
	}
	c.add("registration_wait", validateRegistrationWait(rc.RegistrationWait))
	if rc.MaxInstances < 0 {
		c.add("max_instances", fmt.Errorf("max instances %d: must be positive (absent: no cap)", rc.MaxInstances))
	}
	if rc.Cache != nil {
		rc.Cache.validate(&c)
	}
	return c.result("runner class", rc.Name)
}

// Problems checks the volume; each Field is a JSON field name of Volume. gp3 allows 500 IOPS per
// GiB and 0.25 MiB/s per IOPS.
func (v Volume) Problems() []*Problem {
	var c collector
	if v.Type != VolumeGP3 {
		c.add("type", fmt.Errorf("volume type %q: only %q is supported", v.Type, VolumeGP3))
	}
	if v.SizeGiB < MinVolumeGiB || v.SizeGiB > MaxVolumeGiB {
		c.add("size_gib", fmt.Errorf("volume size %d GiB: must be between %d and %d", v.SizeGiB, MinVolumeGiB, MaxVolumeGiB))
	}
	switch {
	case v.IOPS < MinIOPS || v.IOPS > MaxIOPS:
		c.add("iops", fmt.Errorf("volume IOPS %d: must be between %d and %d", v.IOPS, MinIOPS, MaxIOPS))
	case v.IOPS > MinIOPS && v.IOPS > 500*v.SizeGiB:
		c.add("iops", fmt.Errorf("volume IOPS %d: gp3 allows at most 500 IOPS per GiB (%d for %d GiB)", v.IOPS, 500*v.SizeGiB, v.SizeGiB))
	}
	switch {
	case v.ThroughputMiBps < MinThroughput || v.ThroughputMiBps > MaxThroughput:
		c.add("throughput_mibps", fmt.Errorf("volume throughput %d MiB/s: must be between %d and %d", v.ThroughputMiBps, MinThroughput, MaxThroughput))
	case v.ThroughputMiBps > MinThroughput && v.ThroughputMiBps*4 > v.IOPS:
		c.add("throughput_mibps", fmt.Errorf("volume throughput %d MiB/s: gp3 allows at most 0.25 MiB/s per IOPS (%d for %d IOPS)", v.ThroughputMiBps, v.IOPS/4, v.IOPS))
	}
	return c.list
}

// ScheduleSpec is the pool's schedule configuration.
func (p WarmPool) ScheduleSpec() schedule.Spec {
	return schedule.Spec{Timezone: p.Timezone, Schedules: p.Schedules}
}

// Calendar compiles the pool's schedules.
func (p WarmPool) Calendar() (*schedule.Calendar, error) {
	cal, err := p.ScheduleSpec().Compile()
	if err != nil {
		return nil, fmt.Errorf("warm pool %q: %w", p.Name, err)
	}
	return cal, nil
}

// Validate reports every problem of the warm pool as a *Problems, or nil.
func (p WarmPool) Validate() error {
	var c collector
	c.add("name", ValidateName(p.Name))
	if err := ValidateName(p.RunnerClass); err != nil {
		c.add("runner_class", fmt.Errorf("runner class: %w", err))
	}
	if p.Environment != "" {
		c.add("environment", ValidateName(p.Environment))
	}
	var errs schedule.Errors
	if err := p.ScheduleSpec().Validate(); errors.As(err, &errs) {
		for _, e := range errs {
			c.add(e.Path(), e.Err)
		}
	}
	if p.Autoscale != nil {
		p.Autoscale.validate(&c, p.Schedules)
	}
	return c.result("warm pool", p.Name)
}

// normalized returns the runner class with its set-like lists sorted, so a reordering in
// Terraform does not change the spec hash.
func (rc RunnerClass) normalized() RunnerClass {
	for _, l := range []*[]string{&rc.InstanceTypes, &rc.Subnets, &rc.SecurityGroups, &rc.Labels} {
		*l = slices.Sorted(slices.Values(*l))
	}
	return rc
}

// Job postures: what a job may do on a runner (job_access) and which runs an instance may serve
// next (reuse). docs/security.md says what each hands the job.
const (
	JobAccessUser       = "user"   // the unprivileged runner user: no root, no Docker daemon
	JobAccessDocker     = "docker" // a Docker daemon that gives the job no root on the host
	JobAccessRoot       = "root"   // sudo and rootful Docker: the job owns the machine
	ReuseAny            = "any-repository"
	ReuseSameRepository = "same-repository"
	ReuseNever          = "never"
)

// ValidateJobAccess checks a job_access value ("" is JobAccessUser).
func ValidateJobAccess(s string) error {
	switch s {
	case "", JobAccessUser, JobAccessDocker, JobAccessRoot:
		return nil
	}
	return fmt.Errorf("job access %q: want %q, %q or %q", s, JobAccessUser, JobAccessDocker, JobAccessRoot)
}

// ValidateReuse checks a reuse value ("" is ReuseAny).
func ValidateReuse(s string) error {
	switch s {
	case "", ReuseAny, ReuseSameRepository, ReuseNever:
		return nil
	}
	return fmt.Errorf("reuse %q: want %q, %q or %q", s, ReuseAny, ReuseSameRepository, ReuseNever)
}

// KeepsAcrossRuns reports whether an instance of a class of this job access keeps what a job left
// into its next run: a docker class's daemon keeps its images and build cache (the agent removes
// containers, volumes and networks only), and a root job can change anything on the instance. A
// user class's job can write only what the agent's cleanup empties (workspace, home, temporary
// directories) or checks (the runner's installation), so it keeps nothing. An unknown value keeps.
// Such a class's instances are pooled apart per trust level (pool.RunScope).
func KeepsAcrossRuns(jobAccess string) bool {
	return NormalJobAccess(jobAccess) != JobAccessUser
}

// NormalJobAccess is a job access with its default spelled out (empty is JobAccessUser), so two
// can be compared.
func NormalJobAccess(s string) string {
	if s == "" {
		return JobAccessUser
	}
	return s
}

// CheckPosture refuses a contradiction: a root job can forge whatever the agent reports (that it
// cleaned up, that its runner is intact), so a root instance is never handed to another repository.
func CheckPosture(jobAccess, reuse string) error {
	if jobAccess == JobAccessRoot && (reuse == "" || reuse == ReuseAny) {
		return fmt.Errorf("reuse %q with job access %q: a root job can forge what the agent reports, so its instance is never "+
			"handed to another repository; set reuse to %q or %q", cmp.Or(reuse, ReuseAny), JobAccessRoot, ReuseSameRepository, ReuseNever)
	}
	return nil
}

// Unsupported says why this version cannot launch the class as declared, or nil. Every posture is
// built: the agent grants root (sudo, the docker group) or runs a rootless Docker daemon of the
// runner user, and the release pools a restricted class's instance for its run's repository alone,
// or never. It stays the one place to refuse a posture a version cannot provide, rather than launch
// a class with less isolation than it says.
func (rc RunnerClass) Unsupported() error {
	return nil
}
