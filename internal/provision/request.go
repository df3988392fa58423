// The provision request, its validation and the configuration it is checked against.
package provision

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// MaxCount is the most runners one provision asks for.
const MaxCount = 50

// Defaults of Config.
const (
	DefaultCreatedTimeout   = 5 * time.Minute
	DefaultRegistrationWait = declared.DefaultRegistrationWait
	DefaultMaxRuntime       = 6 * time.Hour
)

// ErrInvalid marks a request (or configuration) that was refused before anything was read or
// written.
var ErrInvalid = errors.New("invalid provision request")

// ResourceClass is a named size: the vCPUs and memory a runner of that class has at least.
type ResourceClass struct {
	CPU       int
	MemoryMiB int
}

// Config is a deployment's provisioning configuration.
type Config struct {
	ResourceClasses    map[string]ResourceClass
	RunnerClasses      map[string]runnerclass.Resolved
	DefaultRunnerClass string
	// DeploymentID is tagged on every instance launched, so destructive sweeps only touch ours.
	DeploymentID string
	// CreatedTimeout is the threshold of the created state (default 5 min).
	CreatedTimeout time.Duration
	// RegistrationWait bounds fleet validation: how long created instances have to register
	// (default 180 s).
	RegistrationWait time.Duration
	// RunningThreshold is the running deadline; zero: the runner class's MaxRuntime.
	RunningThreshold time.Duration
	// InProgressWait bounds how long a repeated request waits for the first provision of the same
	// run to finish (default CreatedTimeout + RegistrationWait + 1 min), plus the longest BootExtra
	// of the runner classes.
	InProgressWait time.Duration
}

// registrationWait is how long rc's started and created instances have to register.
func (c Config) registrationWait(rc runnerclass.Resolved) time.Duration {
	return c.RegistrationWait + rc.BootExtra
}

// createdTimeout is the threshold of rc's created (and started) instances.
func (c Config) createdTimeout(rc runnerclass.Resolved) time.Duration {
	return c.CreatedTimeout + rc.BootExtra
}

// maxBootExtra is the longest BootExtra of the runner classes (none shorter than zero).
func (c Config) maxBootExtra() time.Duration {
	var m time.Duration
	for _, rc := range c.RunnerClasses {
		m = max(m, rc.BootExtra)
	}
	return m
}

// ProvisionTimeout is the time limit of a provision of runnerClass ("" the default class) when
// base is the deployment's (the reconciler's --provision-timeout): it grows by the class's
// BootExtra, so a class whose boot installs packages is not cut at the time a prepared image's
// boot fits in. An unknown class gets base (the provision refuses it at once).
func (c Config) ProvisionTimeout(base time.Duration, runnerClass string) time.Duration {
	if runnerClass == "" {
		runnerClass = c.DefaultRunnerClass
	}
	return base + max(c.RunnerClasses[runnerClass].BootExtra, 0)
}

// MaxProvisionTimeout is the longest ProvisionTimeout of the runner classes: the time limit of a
// provision whose class is not known before it starts (a re-run's).
func (c Config) MaxProvisionTimeout(base time.Duration) time.Duration { return base + c.maxBootExtra() }

func (c Config) withDefaults() Config {
	if c.CreatedTimeout <= 0 {
		c.CreatedTimeout = DefaultCreatedTimeout
	}
	if c.RegistrationWait <= 0 {
		c.RegistrationWait = DefaultRegistrationWait
	}
	if c.InProgressWait <= 0 {
		c.InProgressWait = c.CreatedTimeout + c.RegistrationWait + time.Minute
	}
	return c
}

// Validate reports what is wrong with a configuration.
func (c Config) Validate() error {
	var errs []error
	if c.DeploymentID == "" {
		errs = append(errs, errors.New("deployment id is empty"))
	}
	if len(c.RunnerClasses) == 0 {
		errs = append(errs, errors.New("no runner classes"))
	}
	for name, rc := range c.RunnerClasses {
		switch {
		case rc.Queue == nil:
			errs = append(errs, fmt.Errorf("runner class %q has no pool queue", name))
		case rc.LaunchTemplateID == "" || len(rc.Subnets) == 0:
			errs = append(errs, fmt.Errorf("runner class %q needs a launch template and at least one subnet", name))
		}
		if rc.UsageClass != "" && rc.UsageClass != fleet.Spot && rc.UsageClass != fleet.OnDemand {
			errs = append(errs, fmt.Errorf("runner class %q: usage class %q: must be %q or %q", name, rc.UsageClass, fleet.Spot, fleet.OnDemand))
		}
		for _, p := range rc.InstanceTypes {
			if err := instancetype.ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("runner class %q: %w", name, err))
			}
		}
		for _, l := range rc.Labels {
			if err := checkLabel(l); err != nil {
				errs = append(errs, fmt.Errorf("runner class %q: %w", name, err))
			}
		}
	}
	if c.DefaultRunnerClass != "" {
		if _, ok := c.RunnerClasses[c.DefaultRunnerClass]; !ok {
			errs = append(errs, fmt.Errorf("default runner class %q is not configured", c.DefaultRunnerClass))
		}
	}
	for name, r := range c.ResourceClasses {
		if r.CPU < 0 || r.MemoryMiB < 0 {
			errs = append(errs, fmt.Errorf("resource class %q has negative cpu or memory", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("provision configuration: %w", err)
	}
	return nil
}

// Request is one workflow run's provision.
type Request struct {
	RepositoryID string // GitHub's numeric repository id (from the OIDC token)
	Repository   string // owner/name: the scope the runners register for
	RunID        string // GitHub's run id
	Attempt      int    // the run attempt, from 1 (the OIDC token's run_attempt); with RunID, the runners' label (Label)
	// Event is the event that started the run (the OIDC token's event_name; "" when it has none):
	// with the runner class's job access it decides the pool scope the run claims released
	// instances from (pool.RunScope), and the run record keeps it for the release.
	Event string `json:",omitempty"`
	// Ref and BaseRef are the OIDC token's ref and base_ref claims ("" when it has none): the run
	// record keeps them for the run's cache scope (cache.ScopeOf).
	Ref     string `json:",omitempty"`
	BaseRef string `json:",omitempty"`
	Count   int    // runners wanted, 1 to MaxCount
	// UsageClass is "spot" or "on-demand"; empty: the runner class's, else on-demand. It must not
	// differ from the runner class's.
	UsageClass string
	// InstanceTypes are allowed-instance-types patterns such as "c*" or "m6i.large": at least one
	// when the runner class has none. With the class's patterns, the runners' types are those both
	// allow (Validate).
	InstanceTypes []string
	// ResourceClass names a configured size; or give CPU and MemoryMiB (minimums), not both.
	ResourceClass      string
	CPU, MemoryMiB     int
	RunnerClass        string // empty: the configured default
	AllowBurstable     bool
	FallbackToOnDemand bool // a spot request may launch on-demand when spot capacity is short
	// ServesRerun is set by ServeRerun for a re-run's own attempt: the run record is created marked
	// as that re-run's (store.Run.ServedAttempt), so the re-run's release ends its runners even when
	// a job ran on them and the release came before ServeRerun returned. Never stored.
	ServesRerun bool `json:"-"`
}

// maxIDLen bounds the identifiers of a request; GitHub's ids are far shorter.
const maxIDLen = 64

// maxLabelLen is the longest runner label (declared.ValidateLabel's bound).
const maxLabelLen = 100

// checkLabel says what is wrong with a runner label. The runner's configuration splits its
// --labels option on commas and trims spaces (actions/runner, docs/adrs/0397-runner-registration-labels.md),
// so a label has neither; GitHub compares labels case-insensitively.
func checkLabel(l string) error {
	if l == "" || len(l) > maxLabelLen || strings.ContainsFunc(l, func(c rune) bool { return c <= ' ' || c == 0x7f || c == ',' }) {
		return fmt.Errorf("label %q: want 1-%d printable characters without spaces or commas", l, maxLabelLen)
	}
	return nil
}

// Label is the runners' unique label: "<run id>-<attempt>", what a job names with
// `runs-on: ${{ github.run_id }}-${{ github.run_attempt }}`. Each attempt of a run has its own, so a
// re-run's jobs never land on runners an earlier attempt still holds (its release never ran, or
// runs late). Empty without a run id (a stored request that could not be read).
func (r Request) Label() string {
	if r.RunID == "" {
		return ""
	}
	return store.RunLabel(r.RunID, r.Attempt)
}

// Validate reports every problem of the request, each in words a workflow author can act on.
func (r Request) Validate(cfg Config) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	ident := func(name, v string) {
		switch {
		case v == "":
			bad("%s is required", name)
		case len(v) > maxIDLen || strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' || c == 0x7f || c == ':' }):
			bad("%s %q: want at most %d printable characters without spaces or ':'", name, v, maxIDLen)
		}
	}
	ident("repository id", r.RepositoryID)
	ident("run id", r.RunID)
	if r.RunID != "" {
		if err := checkLabel(r.Label()); err != nil {
			bad("run id %q and attempt %d do not make a runner label: %v", r.RunID, r.Attempt, err)
		}
	}
	if owner, name, ok := strings.Cut(r.Repository, "/"); !ok || owner == "" || name == "" || strings.Contains(name, "/") ||
		strings.ContainsFunc(r.Repository, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		bad("repository %q: want owner/name", r.Repository)
	}
	if r.Attempt < 1 {
		bad("attempt %d: must be at least 1", r.Attempt)
	}
	if r.Count < 1 || r.Count > MaxCount {
		bad("instance count %d: must be between 1 and %d", r.Count, MaxCount)
	}
	if r.UsageClass != "" && r.UsageClass != fleet.Spot && r.UsageClass != fleet.OnDemand {
		bad("usage class %q: must be %q or %q", r.UsageClass, fleet.Spot, fleet.OnDemand)
	}
	rc, rcKnown := cfg.RunnerClasses[r.runnerClass(cfg)]
	switch {
	case len(r.InstanceTypes) == 0 && rcKnown && len(rc.InstanceTypes) > 0:
		// the runner class's patterns
	default:
		if err := instancetype.ValidatePatterns(r.InstanceTypes); err != nil {
			errs = append(errs, err)
		} else if rcKnown {
			_, outside := r.instanceTypes(rc)
			for _, p := range outside {
				bad("instance type pattern %q is outside runner class %q's instance types (%s): give patterns within them, or none to use the class's",
					p, rc.Name, strings.Join(rc.InstanceTypes, ", "))
			}
		}
	}
	if rcKnown && rc.UsageClass != "" && r.UsageClass != "" && r.UsageClass != rc.UsageClass {
		bad("usage class %q conflicts with runner class %q, whose runners are %s: omit the usage class or ask for %q",
			r.UsageClass, rc.Name, rc.UsageClass, rc.UsageClass)
	}
	if r.CPU < 0 {
		bad("cpu %d: must not be negative", r.CPU)
	}
	if r.MemoryMiB < 0 {
		bad("memory %d MiB: must not be negative", r.MemoryMiB)
	}
	if r.ResourceClass != "" {
		if _, ok := cfg.ResourceClasses[r.ResourceClass]; !ok {
			bad("resource class %q is not configured (known: %s)", r.ResourceClass, names(cfg.ResourceClasses))
		}
		if r.CPU != 0 || r.MemoryMiB != 0 {
			bad("give a resource class or cpu and memory, not both")
		}
	}
	if rc := r.runnerClass(cfg); rc == "" {
		bad("runner class: none given and no default configured")
	} else if _, ok := cfg.RunnerClasses[rc]; !ok {
		bad("runner class %q is not configured (known: %s)", rc, names(cfg.RunnerClasses))
	}
	if r.FallbackToOnDemand && r.usageClass(rc) != fleet.Spot {
		bad("fallback to on-demand only applies to usage class spot")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (r Request) runnerClass(cfg Config) string {
	if r.RunnerClass != "" {
		return r.RunnerClass
	}
	return cfg.DefaultRunnerClass
}

// usageClass is the usage class the runners get: the request's, else the runner class's, else
// on-demand (Validate refuses a request's that differs from the class's).
func (r Request) usageClass(rc runnerclass.Resolved) string {
	switch {
	case r.UsageClass != "":
		return r.UsageClass
	case rc.UsageClass != "":
		return rc.UsageClass
	}
	return fleet.OnDemand
}

// reuseUsageClass is the usage class of the pool instances the provision may take: the request's
// when it names one; else any when the runner class is spot, since an idle or warm on-demand
// instance of the class (warm pools launch on-demand: EC2 cannot stop a one-time spot instance) is
// already paid for and is never interrupted; else on-demand.
func (r Request) reuseUsageClass(rc runnerclass.Resolved) string {
	if r.UsageClass == "" && rc.UsageClass == fleet.Spot {
		return ""
	}
	return r.usageClass(rc)
}

// instanceTypes is the allowed-instance-types patterns the runners get: those of the request and
// of the runner class that both allow. Without the request's, the class's; without the class's,
// the request's. Otherwise, for each pair of a request pattern and a class pattern, the narrower
// of the two when one lies within the other (a request's "c*" with a class's "c7i.*" gives
// "c7i.*"; a request's "c7i.large" with it gives "c7i.large"). outside lists the request's
// patterns that lie within none of the class's patterns and cover none of them (Validate refuses
// those: their overlap with the class, if any, is not a pattern).
func (r Request) instanceTypes(rc runnerclass.Resolved) (types, outside []string) {
	if len(rc.InstanceTypes) == 0 {
		return slices.Clone(r.InstanceTypes), nil
	}
	if len(r.InstanceTypes) == 0 {
		return slices.Clone(rc.InstanceTypes), nil
	}
	for _, p := range r.InstanceTypes {
		found := false
		for _, c := range rc.InstanceTypes {
			switch {
			case instancetype.Covers(c, p):
				types, found = append(types, p), true
			case instancetype.Covers(p, c):
				types, found = append(types, c), true
			}
		}
		if !found {
			outside = append(outside, p)
		}
	}
	slices.Sort(types)
	return slices.Compact(types), outside
}

// labels are the runner labels of a provision: the run attempt's label (Label), RunnerLabel, then
// the runner class's labels (without repeats).
func (r Request) labels(rc runnerclass.Resolved) []string {
	out := []string{r.Label(), RunnerLabel}
	for _, l := range rc.Labels {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// size is the minimum vCPUs and memory the request asks for.
func (r Request) size(cfg Config) (cpu, mem int) {
	if r.ResourceClass != "" {
		rc := cfg.ResourceClasses[r.ResourceClass]
		return rc.CPU, rc.MemoryMiB
	}
	return r.CPU, r.MemoryMiB
}

func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
