// From configuration to pool specs: ConfigTargets reads the runner classes and warm pools the
// Terraform provider wrote (internal/declared) and evaluates each pool's schedule; Catalog caches the
// answer briefly for the webhook and the pool workers, which ask on every job.
package warmpool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ConfigLoader reads the configuration; *declared.Repository satisfies it.
type ConfigLoader interface {
	Load(ctx context.Context) (declared.Snapshot, error)
}

// ConfigOptions tell ConfigTargets what the configuration does not hold.
type ConfigOptions struct {
	// Queue returns the pool queue at a runner class's queue URL (for example pool.NewQueue with
	// the SQS client). Nil: hot instances are not announced to step-driven provisions.
	Queue func(url string) *pool.Queue
	// Scope is the GitHub owner (or repository) warm instances may serve: the deployment's
	// organisation. Empty: hot instances serve pool jobs only (a pool message without a scope never
	// matches a scoped provision).
	Scope string
	// Tags are extra tags for every warm instance.
	Tags map[string]string
	// Versions gives each runner class the launch template version that launches what it declares
	// (*launchtemplate.Versions). Required: without it a pool's spec is in error.
	Versions runnerclass.Versions
	// ResourceClasses are the deployment's resource classes (the reconciler's named sizes of
	// step-driven provisions); each pool's instances are given the one ResourceClassOf picks.
	ResourceClasses map[string]Size
}

// Size is a resource class's minimum vCPUs and memory.
type Size struct {
	CPU, MemoryMiB int
}

// ResourceClassOf is the resource class instances of cpu vCPUs and memMiB of memory are: the one
// of exactly that size, else the largest (most vCPUs, then most memory) whose minimums they meet,
// since a provision naming a resource class expects runners of that size, not bigger ones kept for
// bigger requests. Ties go to the first name in order; "" when no resource class fits.
func ResourceClassOf(classes map[string]Size, cpu, memMiB int) string {
	best, bestSize := "", Size{}
	for _, name := range slices.Sorted(maps.Keys(classes)) {
		s := classes[name]
		switch {
		case s.CPU == cpu && s.MemoryMiB == memMiB:
			return name
		case s.CPU > cpu || s.MemoryMiB > memMiB:
			continue
		case best == "" || s.CPU > bestSize.CPU || (s.CPU == bestSize.CPU && s.MemoryMiB > bestSize.MemoryMiB):
			best, bestSize = name, s
		}
	}
	return best
}

// ConfigTargets returns Targets that read the configuration on every call.
//
// A runner class launches from its own version of its launch template (opts.Versions: the class's
// image, volume, security groups, instance profile and pre-runner script on the template's default
// version), in its subnets, with its tags. They are part of the spec hash, so changing any of them
// rolls the pool onto instances launched from the new version.
func ConfigTargets(cfg ConfigLoader, opts ConfigOptions) Targets {
	return func(ctx context.Context, now time.Time) ([]PoolSpec, error) {
		snap, err := cfg.Load(ctx)
		if err != nil {
			return nil, err
		}
		var out []PoolSpec
		for _, p := range snap.Pools() {
			out = append(out, specOf(ctx, snap, p, now, opts))
		}
		// Pools whose item is present but unusable: their instances are left alone.
		for _, pe := range snap.Problems {
			if pe.Kind == store.ConfigWarmPool {
				out = append(out, PoolSpec{Name: pe.Name, Err: pe})
			}
		}
		return out, nil
	}
}

func specOf(ctx context.Context, snap declared.Snapshot, p declared.WarmPool, now time.Time, opts ConfigOptions) PoolSpec {
	rc := snap.RunnerClasses[p.RunnerClass]
	spec := PoolSpec{Name: p.Name, Class: runnerclass.Resolved{RunnerClass: rc}, Scope: opts.Scope}
	spec.Class.JobAccess = declared.NormalJobAccess(rc.JobAccess)
	tgt, err := snap.Target(p.Name, now)
	if err != nil {
		spec.Err = err
		return spec
	}
	hash, _ := snap.SpecHash(p.Name)
	class, err := runnerclass.Resolve(ctx, rc, opts.Versions, opts.Queue)
	if err != nil {
		spec.Err = fmt.Errorf("warm pool %q: runner class %q: %w", p.Name, rc.Name, err)
		return spec
	}
	// The runner version the class's version installs is part of the hash: a new release (or pin)
	// rolls the pool over onto instances that run it.
	hash = declared.SpecHashWithRunner(hash, class.RunnerVersion)
	spec.Schedule, spec.Hot, spec.Stopped, spec.SpecHash = tgt.Schedule, tgt.Hot, tgt.Stopped, hash
	if a := p.Autoscale; a != nil {
		loc, err := time.LoadLocation(p.Timezone) // validated with the schedules ("" is UTC)
		if err != nil {
			spec.Err = fmt.Errorf("warm pool %q: timezone: %w", p.Name, err)
			return spec
		}
		spec.Autoscale = &AutoscaleSpec{Goal: a.QueueTimeP95.Std(), GoalP99: a.QueueTimeP99.Std(), MinHot: a.MinHot, MinStopped: a.MinStopped, Budget: a.BudgetPerHour, Loc: loc}
	}
	// The class's own tags, then the deployment's (opts.Tags), which win on a shared key.
	if class.Tags == nil && len(opts.Tags) > 0 {
		class.Tags = map[string]string{}
	}
	maps.Copy(class.Tags, opts.Tags)
	spec.Class = class
	spec.ResourceClass = ResourceClassOf(opts.ResourceClasses, rc.CPU, rc.MemoryMiB)
	return spec
}

// Catalog answers "which pools exist, and what are they now" from Targets, cached for a short TTL
// so a burst of webhooks costs one configuration read, not one per job.
type Catalog struct {
	targets Targets
	ttl     time.Duration
	now     func() time.Time

	mu     sync.Mutex
	at     time.Time
	byName map[string]PoolSpec
}

// NewCatalog returns a catalog over targets; ttl <= 0 means 5 s. now defaults to time.Now.
func NewCatalog(targets Targets, ttl time.Duration, now func() time.Time) *Catalog {
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Catalog{targets: targets, ttl: ttl, now: now}
}

// Lookup returns the pool's spec in force now. ok is false when the pool is not configured.
func (c *Catalog) Lookup(ctx context.Context, name string) (PoolSpec, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.byName == nil || now.Sub(c.at) >= c.ttl || now.Before(c.at) {
		specs, err := c.targets(ctx, now)
		if err != nil {
			return PoolSpec{}, false, fmt.Errorf("warm pools: %w", err)
		}
		c.byName = make(map[string]PoolSpec, len(specs))
		for _, s := range specs {
			c.byName[s.Name] = s
		}
		c.at = now
	}
	s, ok := c.byName[name]
	return s, ok, nil
}

// Known reports whether a pool is configured (a pool whose configuration is present but unusable
// counts: its jobs wait for it to be fixed rather than fail).
func (c *Catalog) Known(ctx context.Context, name string) (bool, error) {
	_, ok, err := c.Lookup(ctx, name)
	return ok, err
}

// StaticTargets returns Targets that always answer specs (tests, and deployments that configure
// pools without the state table).
func StaticTargets(specs ...PoolSpec) Targets {
	return func(context.Context, time.Time) ([]PoolSpec, error) { return specs, nil }
}
