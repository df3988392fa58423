// Runner classes of step-driven provisions, and where they come from: a runner classes file (read
// once, at start-up) or the configuration items the Terraform provider writes to the state table
// (internal/declared), re-read when the cached copy is older than --config-cache-ttl or when a
// provision names a runner class the copy does not know, so a `terraform apply` is picked up without
// a restart. A provision.Provisioner's configuration is fixed; classSource builds a new one from each
// copy (cheap: the claimer, registrar and fleet are shared) and hands every provision to the one
// built from the copy in force.
//
// classSource also answers release's and refresh's question "which pool queue belongs to this
// runner class" (pool.Resolver, and refresh's QueueLister) from the same copy.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// ConfigLoader reads runner classes and warm pools; *config.Repository satisfies it.
type ConfigLoader interface {
	Load(ctx context.Context) (declared.Snapshot, error)
}

// classSet is the runner classes at one moment and the provisioner built on them.
type classSet struct {
	prov    *provision.Provisioner
	classes map[string]runnerclass.Resolved
	// unusable are runner classes of the table that step-driven provisions cannot use, and why.
	unusable map[string]string
	queues   []*pool.Queue // by runner class name
	at       time.Time     // when the table was read (zero: a file)
	// caps are the runner classes' own instance caps (max_instances), of every class read, usable
	// by step-driven provisions or not (a warm pool's class may be launched from its spec alone).
	caps map[string]int
	// reuse are the runner classes' reuse rules (config.Reuse*), of every class read that sets
	// one; a class without one (a runner classes file's) reuses as before.
	reuse map[string]string
	// postures are the table classes' declared postures (the dashboard's pools page).
	postures map[string]dashboard.Posture
}

// classSource keeps the current classSet.
type classSource struct {
	load ConfigLoader // nil: static (a runner classes file)
	// versions gives each table class the launch template version that launches what it declares.
	versions runnerclass.Versions
	newSet   func(classes map[string]runnerclass.Resolved) *provision.Provisioner
	queue    func(url string) *pool.Queue
	def      string // default runner class
	ttl      time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex // held while the table is read: one read at a time
	cur     *classSet
	queueOf map[string]*pool.Queue // by URL: one *pool.Queue per queue across reloads
}

// newProvisioner builds a provisioner over runner classes, resource classes and a default class.
type newProvisioner func(classes map[string]runnerclass.Resolved, resources map[string]provision.ResourceClass, def string) *provision.Provisioner

// setupClasses builds s.classes: from the runner classes file when one is configured (checked now:
// a bad file stops the start), else over the state table's configuration items (read now if the
// table answers; an empty or unreadable table is not fatal, provisions read it again).
func (s *Service) setupClasses(ctx context.Context, cfg config.Config, queue func(url string) *pool.Queue, newProv newProvisioner) error {
	if cfg.ClassesFile != "" {
		classes := map[string]runnerclass.Resolved{}
		for name, e := range cfg.Classes.RunnerClasses {
			classes[name] = runnerclass.Resolved{RunnerClass: e.Class(name), Queue: queue(e.QueueURL), TemplateVersion: e.TemplateVersion()}
		}
		resources := resourceClasses(cfg.Classes.ResourceClasses)
		def := cfg.Classes.DefaultRunnerClass
		pcfg := provision.Config{ResourceClasses: resources, RunnerClasses: classes, DefaultRunnerClass: def, DeploymentID: cfg.DeploymentID}
		if err := pcfg.Validate(); err != nil {
			return err
		}
		set := newClassSet(newProv(classes, resources, def), classes, nil, time.Time{})
		set.caps = map[string]int{}
		for name, rc := range classes {
			if rc.MaxInstances > 0 {
				set.caps[name] = rc.MaxInstances
			}
		}
		s.classes = &classSource{def: def, cur: set}
		return nil
	}
	resources := resourceClasses(cfg.ResourceClasses)
	s.classes = &classSource{
		load: declared.NewRepository(s.store), versions: s.versions, queue: queue, def: cfg.DefaultRunnerClass, ttl: cfg.ConfigCacheTTL, now: s.o.Now, log: s.log,
		newSet: func(classes map[string]runnerclass.Resolved) *provision.Provisioner {
			return newProv(classes, resources, cfg.DefaultRunnerClass)
		},
	}
	if _, err := s.classes.get(ctx, ""); err != nil {
		s.log.Warn("runner classes not read from the state table at start-up; provisions will read them", "err", err)
	}
	return nil
}

func resourceClasses(in map[string]config.ResourceClass) map[string]provision.ResourceClass {
	out := make(map[string]provision.ResourceClass, len(in))
	for name, r := range in {
		out[name] = provision.ResourceClass{CPU: r.CPU, MemoryMiB: r.MemoryMiB}
	}
	return out
}

func newClassSet(prov *provision.Provisioner, classes map[string]runnerclass.Resolved, unusable map[string]string, at time.Time) *classSet {
	set := &classSet{prov: prov, classes: classes, unusable: unusable, at: at}
	for _, name := range slices.Sorted(maps.Keys(classes)) {
		set.queues = append(set.queues, classes[name].Queue)
	}
	return set
}

// get returns the current set. It reads the table when the cached set is older than the TTL, or
// when want (a runner class name; "" for none) is unknown to it and it was read before this call
// began: a class written by a `terraform apply` is found by the next provision that names it, and a
// burst of provisions naming it costs one read. A failed read is logged and the cached set kept;
// without one it is the error.
func (c *classSource) get(ctx context.Context, want string) (*classSet, error) {
	if c.load == nil {
		return c.cached(), nil
	}
	asked := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.cur; cur != nil {
		_, known := cur.classes[want]
		_, bad := cur.unusable[want]
		age := asked.Sub(cur.at)
		fresh := age >= 0 && age < c.ttl
		if (fresh && (want == "" || known || bad)) || !cur.at.Before(asked) {
			return cur, nil
		}
	}
	set, err := c.read(ctx, c.now())
	if err != nil {
		if c.cur != nil {
			c.log.Warn("runner classes not re-read from the state table; using the copy read before", "read_at", c.cur.at, "err", err)
			return c.cur, nil
		}
		return nil, err
	}
	if c.cur == nil || !sameClasses(c.cur, set) {
		c.log.Info("runner classes read from the state table", "runner_classes", slices.Sorted(maps.Keys(set.classes)), "unusable", set.unusable)
	}
	c.cur = set
	return set, nil
}

// cached returns the current set without reading (nil before the first read).
func (c *classSource) cached() *classSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *classSource) read(ctx context.Context, now time.Time) (*classSet, error) {
	snap, err := c.load.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading runner classes from the state table: %w", err)
	}
	classes := map[string]runnerclass.Resolved{}
	unusable := map[string]string{}
	for name, rc := range snap.RunnerClasses {
		if rc.LaunchTemplateID != "" && rc.QueueURL == "" {
			unusable[name] = "it has no queue_url"
			continue
		}
		// A class EC2 refuses, or this version cannot launch, is unusable, with the reason.
		r, err := runnerclass.Resolve(ctx, rc, c.versions, c.queueFor)
		if err != nil {
			unusable[name] = err.Error()
			continue
		}
		classes[name] = r
	}
	for _, p := range snap.Problems {
		if p.Kind == store.ConfigRunnerClass {
			unusable[p.Name] = p.Error()
		}
	}
	set := newClassSet(c.newSet(classes), classes, unusable, now)
	set.caps, set.reuse, set.postures = map[string]int{}, map[string]string{}, map[string]dashboard.Posture{}
	for name, rc := range snap.RunnerClasses {
		set.postures[name] = dashboard.Posture{JobAccess: rc.JobAccess, Reuse: rc.Reuse}
		if rc.MaxInstances > 0 {
			set.caps[name] = rc.MaxInstances
		}
		if rc.Reuse != "" {
			set.reuse[name] = rc.Reuse
		}
	}
	return set, nil
}

// classMax is a runner class's own instance cap in the cached set (0: none, or not read yet).
func (c *classSource) classMax(runnerClass string) int {
	if set := c.cached(); set != nil {
		return set.caps[runnerClass]
	}
	return 0
}

func (c *classSource) queueFor(url string) *pool.Queue {
	if q, ok := c.queueOf[url]; ok {
		return q
	}
	if c.queueOf == nil {
		c.queueOf = map[string]*pool.Queue{}
	}
	q := c.queue(url)
	c.queueOf[url] = q
	return q
}

// poolQueues hands out one *pool.Queue per class queue URL, with a queue per scope (pool/scope.go),
// to the runner classes (provisions, releases, refresh) and the warm pools alike: the replica
// creates and remembers each scope queue once.
type poolQueues struct {
	sqs   *sqs.Client
	opts  pool.ScopeOptions
	mu    sync.Mutex
	byURL map[string]*pool.Queue
}

func (p *poolQueues) get(url string) *pool.Queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.byURL[url]; ok {
		return q
	}
	if p.byURL == nil {
		p.byURL = map[string]*pool.Queue{}
	}
	q := pool.NewScopedQueue(p.sqs, url, p.opts)
	p.byURL[url] = q
	return q
}

func sameClasses(a, b *classSet) bool {
	return maps.EqualFunc(a.classes, b.classes, func(x, y runnerclass.Resolved) bool {
		return x.Queue == y.Queue && x.TemplateVersion == y.TemplateVersion && x.RunnerVersion == y.RunnerVersion && x.BootExtra == y.BootExtra && reflect.DeepEqual(x.RunnerClass, y.RunnerClass)
	}) && maps.Equal(a.unusable, b.unusable) && maps.Equal(a.caps, b.caps) && maps.Equal(a.reuse, b.reuse) && maps.Equal(a.postures, b.postures)
}

// Provision hands the request to the provisioner of the runner classes in force (api.Provisioner).
func (c *classSource) Provision(ctx context.Context, req provision.Request) (provision.Result, error) {
	name := req.RunnerClass
	if name == "" {
		name = c.def
	}
	set, err := c.get(ctx, name)
	if err != nil {
		return provision.Result{}, err
	}
	if why, ok := set.unusable[name]; ok {
		return provision.Result{}, fmt.Errorf("%w: runner class %q cannot serve step-driven provisions: %s", provision.ErrInvalid, name, why)
	}
	return set.prov.Provision(ctx, req)
}

// ProvisionTimeout is the time limit of a provision of runnerClass ("" the default; "*" whichever,
// the longest) when base is the deployment's (--provision-timeout): longer for a class whose boot
// takes longer (provision.Config.ProvisionTimeout). A class not read yet gets base.
func (c *classSource) ProvisionTimeout(ctx context.Context, base time.Duration, runnerClass string) time.Duration {
	if runnerClass == "" {
		runnerClass = c.def
	}
	set, err := c.get(ctx, runnerClass)
	if err != nil {
		return base
	}
	if runnerClass == "*" {
		return set.prov.Config().MaxProvisionTimeout(base)
	}
	return set.prov.Config().ProvisionTimeout(base, runnerClass)
}

// TakeOverAbandoned hands refresh's question about a run to the provisioner of the runner classes
// in force (refresh.Options.TakeOver): a provision abandoned past its deadline is taken over.
func (c *classSource) TakeOverAbandoned(ctx context.Context, key string) (settled bool, err error) {
	set, err := c.get(ctx, "")
	if err != nil {
		return false, err
	}
	return set.prov.TakeOverAbandoned(ctx, key)
}

// Settled waits for a run's provision to settle before a release (api.Runs), with the provisioner
// of the runner classes in force: a provision past its deadline is taken over, as refresh would.
func (c *classSource) Settled(ctx context.Context, key string) (store.Run, error) {
	set, err := c.get(ctx, "")
	if err != nil {
		return store.Run{}, err
	}
	return set.prov.Settled(ctx, key)
}

// Queue returns a runner class's pool queue (pool.Resolver). A class the cached set does not know
// makes the table be read (bounded), since release has no deadline of its own to pass.
func (c *classSource) Queue(runnerClass string) (*pool.Queue, error) {
	set := c.cached()
	if set == nil || !hasClass(set, runnerClass) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := c.get(ctx, runnerClass)
		cancel()
		if err != nil {
			return nil, err
		}
		set = s
	}
	rc, ok := set.classes[runnerClass]
	if !ok {
		return nil, fmt.Errorf("no pool queue for runner class %q", runnerClass)
	}
	return rc.Queue, nil
}

// Reuse is a runner class's reuse rule (release.Options.Reuse), from the set Queue read for the
// same release.
func (c *classSource) Reuse(runnerClass string) (string, error) {
	set := c.cached()
	if set == nil {
		return "", fmt.Errorf("runner class %q: no runner classes read yet", runnerClass)
	}
	return set.reuse[runnerClass], nil
}

// JobAccess is a runner class's job_access in the cached set (ok false: no set read yet, or no
// such class): refresh.Options.JobAccess.
func (c *classSource) JobAccess(runnerClass string) (string, bool) {
	set := c.cached()
	if set == nil {
		return "", false
	}
	p, ok := set.postures[runnerClass]
	return p.JobAccess, ok
}

// postures are the runner classes' postures of the cached set (dashboard.Options.Postures).
func (c *classSource) postures(context.Context) (map[string]dashboard.Posture, error) {
	if set := c.cached(); set != nil {
		return set.postures, nil
	}
	return nil, nil
}

func hasClass(set *classSet, name string) bool { _, ok := set.classes[name]; return ok }

// Queues lists the pool queues of the cached set (refresh's QueueLister; the refresh job re-reads
// the set first).
func (c *classSource) Queues() []*pool.Queue {
	if set := c.cached(); set != nil {
		return slices.Clone(set.queues)
	}
	return nil
}

// cacheLimits are a runner class's cache limits (its cache block's; 0: unknown class or no cache).
func (c *classSource) cacheLimits(runnerClass string) (int64, time.Duration) {
	if set := c.cached(); set != nil {
		if rc, ok := set.classes[runnerClass]; ok && rc.Cache.On() {
			return rc.Cache.RepositoryLimit(), rc.Cache.Age()
		}
	}
	return 0, 0
}

// idleTime is a runner class's idle time (0: unknown or none).
func (c *classSource) idleTime(runnerClass string) time.Duration {
	if set := c.cached(); set != nil {
		return set.classes[runnerClass].IdleTime.Std()
	}
	return 0
}

// refresh re-reads the table if the cached set is stale (before each refresh pass).
func (c *classSource) refresh(ctx context.Context) error {
	_, err := c.get(ctx, "")
	return err
}

var _ interface {
	Queue(string) (*pool.Queue, error)
	Queues() []*pool.Queue
} = (*classSource)(nil)
