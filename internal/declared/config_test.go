// Table tests of runner class and warm pool validation, decoding and the spec hash.
package declared

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

func validClass() RunnerClass {
	return RunnerClass{
		Name: "small-x64", Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096,
		InstanceTypes:  []string{"t3.*", "m7i.large"},
		Volume:         Volume{Type: VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass:     UsageOnDemand,
		Subnets:        []string{"subnet-0123456789abcdef0", "subnet-01234567"},
		SecurityGroups: []string{"sg-0123456789abcdef0"}, InstanceProfile: "runnerpool-runner",
		PreRunnerScript: "#!/bin/bash\napt-get install -y jq\n", Labels: []string{"linux", "x64"},
		MaxRuntime: Duration(6 * time.Hour), IdleTime: Duration(10 * time.Minute),
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/runnerpool-small-x64",
	}
}

func validPool() WarmPool {
	return WarmPool{
		Name: "small-x64", RunnerClass: "small-x64", Environment: "dev", Timezone: "Europe/Paris",
		Schedules: []schedule.Schedule{
			{Name: "default", Hot: 1, Stopped: 2},
			{Name: "nights", Match: &schedule.Match{Times: []schedule.TimeRange{{Start: "22:00", End: "06:00"}}}, Stopped: 2},
		},
	}
}

// problems returns "field: message" for every problem of err, which must be a *Problems or nil.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v is not a *Problems", err)
	}
	var out []string
	for _, p := range ps.List {
		out = append(out, p.Error())
	}
	return out
}

func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	got := problems(t, err)
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func TestRunnerClassValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*RunnerClass)
		want []string
	}{
		{"valid", func(*RunnerClass) {}, nil},
		{"valid minimal", func(rc *RunnerClass) {
			rc.InstanceTypes, rc.SecurityGroups, rc.InstanceProfile, rc.PreRunnerScript, rc.Labels = nil, nil, "", "", nil
			rc.UsageClass = UsageSpot
			rc.InstanceProfile = "arn:aws:iam::123456789012:instance-profile/ci/runner"
		}, nil},
		{"bad identity", func(rc *RunnerClass) { rc.Name, rc.Image = "Small X64", "ubuntu24" }, []string{
			`name: name "Small X64": use 1-63 lower-case`, `image: image "ubuntu24": want an AMI id`}},
		{"sizes", func(rc *RunnerClass) { rc.CPU, rc.MemoryMiB = 0, 100 }, []string{
			"cpu: cpu 0: must be between 1 and 448", "memory_mib: memory 100 MiB: must be between 512"}},
		{"empty and bad instance type patterns", func(rc *RunnerClass) { rc.InstanceTypes = []string{"", "C5.*", "t3.*", "t3.*"} }, []string{
			"instance_types[0]: instance type pattern is empty", `instance_types[1]: instance type pattern "C5.*"`,
			`instance_types[3]: "t3.*" is listed twice`}},
		{"volume", func(rc *RunnerClass) { rc.Volume = Volume{Type: "io2", SizeGiB: 0, IOPS: 2000, ThroughputMiBps: 2000} }, []string{
			`volume.type: volume type "io2": only "gp3"`, "volume.size_gib: volume size 0 GiB", "volume.iops: volume IOPS 2000",
			"volume.throughput_mibps: volume throughput 2000 MiB/s: must be between 125 and 1000"}},
		{"volume ratios", func(rc *RunnerClass) {
			rc.Volume = Volume{Type: VolumeGP3, SizeGiB: 8, IOPS: 5000, ThroughputMiBps: 1000}
		}, []string{
			"volume.iops: volume IOPS 5000: gp3 allows at most 500 IOPS per GiB (4000 for 8 GiB)"}},
		{"network", func(rc *RunnerClass) {
			rc.Subnets, rc.SecurityGroups, rc.InstanceProfile = nil, []string{"default"}, "arn:aws:iam::1:role/x"
		}, []string{"subnets: at least one subnet is required", `security_groups[0]: security group "default"`, `instance_profile: instance profile "arn:aws:iam::1:role/x"`}},
		{"usage class", func(rc *RunnerClass) { rc.UsageClass = "spot-first" }, []string{`usage_class: usage class "spot-first"`}},
		{"labels", func(rc *RunnerClass) { rc.Labels = []string{"", "a,b", "ok"} }, []string{"labels[0]: label is empty", `labels[1]: label "a,b": no spaces`}},
		{"durations", func(rc *RunnerClass) { rc.MaxRuntime, rc.IdleTime = 0, Duration(48*time.Hour) }, []string{
			"max_runtime: max runtime 0s: must be between 1m0s and 120h0m0s", "idle_time: idle time 48h0m0s"}},
		{"ids", func(rc *RunnerClass) { rc.LaunchTemplateID, rc.QueueURL = "lt-xyz", "runners" }, []string{
			`launch_template_id: launch template "lt-xyz"`, `queue_url: queue URL "runners"`}},
		// Sends to a FIFO queue need a MessageGroupId, which pool messages do not carry.
		{"fifo pool", func(rc *RunnerClass) { rc.QueueURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/runners.fifo" }, []string{
			`queue_url: queue URL "https://sqs.eu-west-1.amazonaws.com/123456789012/runners.fifo" is a FIFO queue`}},
		{"pre-runner script", func(rc *RunnerClass) { rc.PreRunnerScript = strings.Repeat("x", MaxPreRunnerScript+1) }, []string{
			"pre_runner_script: pre-runner script is 65537 bytes"}},
		{"pre-runner script too big compressed", func(rc *RunnerClass) { rc.PreRunnerScript = IncompressibleText(8 * 1024) }, []string{
			"pre_runner_script: pre-runner script is 8272 bytes once compressed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := validClass()
			tc.mod(&rc)
			checkProblems(t, rc.Validate(), tc.want)
		})
	}
}

func TestVolumeThroughputRatio(t *testing.T) {
	t.Parallel()
	v := Volume{Type: VolumeGP3, SizeGiB: 100, IOPS: 3000, ThroughputMiBps: 800}
	ps := v.Problems()
	if len(ps) != 1 || ps[0].Field != "throughput_mibps" || !strings.Contains(ps[0].Err.Error(), "0.25 MiB/s per IOPS (750 for 3000 IOPS)") {
		t.Fatalf("Problems = %v, want one throughput ratio problem", ps)
	}
}

func TestWarmPoolValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*WarmPool)
		want []string
	}{
		{"valid", func(*WarmPool) {}, nil},
		{"names", func(p *WarmPool) { p.Name, p.RunnerClass, p.Environment = "", "A", "prod env" }, []string{
			`name: name ""`, `runner_class: runner class: name "A"`, `environment: name "prod env"`}},
		{"schedule problems carry their path", func(p *WarmPool) {
			p.Timezone = "Europe/Pariss"
			p.Schedules = append(p.Schedules, schedule.Schedule{Name: "nights", Hot: -2,
				Match: &schedule.Match{Days: []string{"mon"}, Times: []schedule.TimeRange{{Start: "06:00", End: "06:00"}}}})
		}, []string{
			`timezone: timezone "Europe/Pariss" is not a known IANA zone`,
			`schedules[2].name: schedule name "nights" is used by schedules 1 and 2`,
			"schedules[2].hot: count -2",
			`schedules[2].match.days[0]: day "mon" is not a day name (did you mean "monday"?)`,
			"schedules[2].match.times[0].end: time range 06:00-06:00 is empty",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := validPool()
			tc.mod(&p)
			checkProblems(t, p.Validate(), tc.want)
		})
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, kind, item, spec, want string
	}{
		{"required unknown field", "class", "small", `{"name":"small","gpu":1,"requires":["gpu"]}`,
			`runner class "small": decoding its spec: the spec requires fields this reconciler does not know: ["gpu"]`},
		{"required unknown nested field", "pool", "p", `{"name":"p","runner_class":"c","timezone":"UTC","schedules":[{"name":"d","hot":1,"warm":2}],"requires":["schedules.warm","schedules.hot"]}`,
			`warm pool "p": decoding its spec: the spec requires fields this reconciler does not know: ["schedules.warm"]`},
		{"bad requires", "pool", "p", `{"name":"p","runner_class":"c","timezone":"UTC","schedules":[],"requires":"timezone"}`, `warm pool "p": decoding its spec: requires:`},
		{"name mismatch", "pool", "p", `{"name":"q","runner_class":"c","timezone":"UTC","schedules":[]}`, `warm pool "p": its spec names "q"`},
		{"trailing data", "pool", "p", `{"name":"p","runner_class":"c","timezone":"UTC","schedules":[]} {}`, `warm pool "p": decoding its spec: unexpected data`},
		{"bad duration", "class", "small", `{"name":"small","max_runtime":"six hours"}`, `runner class "small": decoding its spec: duration "six hours"`},
		{"invalid content", "pool", "p", `{"name":"p","runner_class":"c","timezone":"Nowhere","schedules":[]}`, `warm pool "p": timezone: timezone "Nowhere"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.kind == "class" {
				_, err = DecodeRunnerClass(tc.item, []byte(tc.spec))
			} else {
				_, err = DecodeWarmPool(tc.item, []byte(tc.spec))
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("decode error = %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestSpecHash(t *testing.T) {
	t.Parallel()
	base := SpecHash(validClass(), validPool())
	// The hash is part of the storage format (instance tags): it must not change by accident.
	if want := "v1-"; !strings.HasPrefix(base, want) || len(base) != len(want)+32 {
		t.Fatalf("SpecHash = %q, want v1- and 32 hex digits", base)
	}
	same := []struct {
		name string
		rc   func(*RunnerClass)
		p    func(*WarmPool)
	}{
		{"reordered sets", func(rc *RunnerClass) {
			rc.InstanceTypes = []string{"m7i.large", "t3.*"}
			rc.Subnets = []string{"subnet-01234567", "subnet-0123456789abcdef0"}
			rc.Labels = []string{"x64", "linux"}
		}, func(*WarmPool) {}},
		{"thresholds and queue", func(rc *RunnerClass) {
			rc.MaxRuntime, rc.IdleTime, rc.QueueURL = Duration(time.Hour), Duration(time.Minute), "https://sqs.example.com/1/other"
		}, func(*WarmPool) {}},
		{"schedules and timezone", func(*RunnerClass) {}, func(p *WarmPool) { p.Timezone, p.Schedules = "UTC", nil }},
	}
	for _, tc := range same {
		rc, p := validClass(), validPool()
		tc.rc(&rc)
		tc.p(&p)
		if got := SpecHash(rc, p); got != base {
			t.Errorf("%s: SpecHash changed to %s", tc.name, got)
		}
	}
	differ := []struct {
		name string
		rc   func(*RunnerClass)
		p    func(*WarmPool)
	}{
		{"image", func(rc *RunnerClass) { rc.Image = "ami-0123456789abcdef1" }, func(*WarmPool) {}},
		{"memory", func(rc *RunnerClass) { rc.MemoryMiB++ }, func(*WarmPool) {}},
		{"volume", func(rc *RunnerClass) { rc.Volume.SizeGiB++ }, func(*WarmPool) {}},
		{"pre-runner", func(rc *RunnerClass) { rc.PreRunnerScript += "\n" }, func(*WarmPool) {}},
		{"environment", func(*RunnerClass) {}, func(p *WarmPool) { p.Environment = "prod" }},
		{"pool name", func(*RunnerClass) {}, func(p *WarmPool) { p.Name = "other" }},
	}
	for _, tc := range differ {
		rc, p := validClass(), validPool()
		tc.rc(&rc)
		tc.p(&p)
		if got := SpecHash(rc, p); got == base {
			t.Errorf("%s: SpecHash did not change", tc.name)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		6 * time.Hour: "6h", 90 * time.Minute: "1h30m", 10 * time.Minute: "10m", 0: "0s",
		time.Hour + 5*time.Second: "1h0m5s", 1500 * time.Millisecond: "1.5s", 100 * time.Hour: "100h",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Errorf("FormatDuration(%v) does not parse back: %v %v", d, back, err)
		}
	}
}

// TestJobPosture: job_access and reuse values, the root contradiction, and what this version refuses
// to launch.
func TestJobPosture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		access, reuse   string
		valid, launches bool
	}{
		{"", "", true, true},
		{JobAccessUser, ReuseAny, true, true},
		{JobAccessUser, ReuseNever, true, true},
		{JobAccessUser, ReuseSameRepository, true, true},
		{JobAccessDocker, "", true, true},
		{JobAccessRoot, "", false, false},
		{JobAccessRoot, ReuseAny, false, false},
		{JobAccessRoot, ReuseSameRepository, true, true},
		{JobAccessRoot, ReuseNever, true, true},
		{"admin", "", false, false},
		{"", "sometimes", false, false},
	} {
		rc := RunnerClass{Name: "x", JobAccess: tc.access, Reuse: tc.reuse}
		err := errors.Join(ValidateJobAccess(tc.access), ValidateReuse(tc.reuse), CheckPosture(tc.access, tc.reuse))
		if (err == nil) != tc.valid {
			t.Errorf("job_access %q reuse %q: %v, want valid %v", tc.access, tc.reuse, err, tc.valid)
		}
		if tc.valid && (rc.Unsupported() == nil) != tc.launches {
			t.Errorf("job_access %q reuse %q: Unsupported() = %v, want launched %v", tc.access, tc.reuse, rc.Unsupported(), tc.launches)
		}
	}
}

func TestWarmPoolAutoscale(t *testing.T) {
	t.Parallel()
	base := func(a *Autoscale) WarmPool {
		return WarmPool{Name: "ci", RunnerClass: "small", Autoscale: a,
			Schedules: []schedule.Schedule{{Name: "default", Hot: 10, Stopped: 5}}}
	}
	for _, tt := range []struct {
		name string
		a    *Autoscale
		want string
	}{
		{"none", nil, ""},
		{"goal and bounds", &Autoscale{QueueTimeP95: Duration(5 * time.Second), MinHot: 2, BudgetPerHour: 3}, ""},
		{"goal too short", &Autoscale{QueueTimeP95: Duration(time.Millisecond)}, "queue_time_p95"},
		{"a tail goal", &Autoscale{QueueTimeP95: Duration(5 * time.Second), QueueTimeP99: Duration(30 * time.Second)}, ""},
		{"a tail goal below the p95 goal", &Autoscale{QueueTimeP95: Duration(5 * time.Second), QueueTimeP99: Duration(2 * time.Second)}, "below queue_time_p95"},
		{"a tail goal too long", &Autoscale{QueueTimeP95: Duration(5 * time.Second), QueueTimeP99: Duration(2 * time.Hour)}, "queue_time_p99"},
		{"negative budget", &Autoscale{QueueTimeP95: Duration(5 * time.Second), BudgetPerHour: -1}, "budget_per_hour"},
		{"min above a window", &Autoscale{QueueTimeP95: Duration(5 * time.Second), MinHot: 11}, `exceed schedule "default"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := base(tt.a).Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
	// Stored and read back: the block round-trips, and a pool without one stores no key.
	for _, p := range []WarmPool{base(nil), base(&Autoscale{QueueTimeP95: Duration(5 * time.Second), MinStopped: 1})} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if p.Autoscale == nil && strings.Contains(string(b), "autoscale") {
			t.Errorf("a pool without autoscale stores %s", b)
		}
		got, err := DecodeWarmPool("ci", b)
		if err != nil || (got.Autoscale == nil) != (p.Autoscale == nil) || (got.Autoscale != nil && *got.Autoscale != *p.Autoscale) {
			t.Errorf("round trip of %s: %+v, %v", b, got.Autoscale, err)
		}
	}
}
