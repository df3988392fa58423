// Package scalesets runs the listeners of runner scale sets in `runnerpool serve`: warm pools fed
// by the Actions service's message queue (runs-on: <scale set name>) instead of workflow_job
// webhooks, so no public endpoint is needed and no webhook delay stands between a job and a warm
// instance.
//
// High availability: every replica runs a Manager; one message session per scale set exists across
// all of them, held by the replica that holds the scale set's lease in the state table
// ("scaleset:<scope>/<name>", reconciler/leader's elector). The holder records its session id next
// to the lease, so whoever takes over after a crash deletes the dead holder's session before it
// creates its own: takeover within one lease period. A 409 for a session nobody here recorded
// means another process holds the scale set: the replica backs off (a log line and
// runnerpool_scale_set_session_conflicts_total) rather than fighting for it.
//
// Messages are handled in order and deleted only once their effect is durable: an acquired job is
// in the pool job queue and its ledger (pooljob.JobQueue), a completion is in the queue. A
// message delivered again (the holder died before deleting it) is handled once, because the ledger
// knows the job. Malformed, unknown or out-of-order messages are logged, counted and deleted; they
// never stop the listener. The jobs themselves are served by the pool worker like webhook jobs:
// hot instances, then stopped ones, then cold starts; their runners come from the scale set's
// generatejitconfig (Manager.GenerateJITConfig).
package scalesets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/leader"
)

// Store is the part of *store.Store the listeners use: leases, the session records (run records
// keyed "scaleset-session:..."), and the pool's instances (capacity).
type Store interface {
	leader.Store
	CreateRun(ctx context.Context, r store.Run) (store.Run, bool, error)
	GetRun(ctx context.Context, key string) (store.Run, error)
	UpdateRun(ctx context.Context, r store.Run, expectVersion int64) (store.Run, error)
	ByPool(ctx context.Context, pool string) ([]store.Instance, error)
	Live(ctx context.Context) ([]store.Instance, error)
	// PutScaleSetStats keeps the scale set's latest statistics for its pool's autoscale (stats.go).
	PutScaleSetStats(ctx context.Context, st store.ScaleSetStats) error
}

// Client is the part of *scaleset.Client the listeners use.
type Client interface {
	RunnerGroupByName(ctx context.Context, name string) (scaleset.RunnerGroup, error)
	GetScaleSet(ctx context.Context, runnerGroupID int64, name string) (scaleset.ScaleSet, bool, error)
	CreateScaleSet(ctx context.Context, s scaleset.ScaleSet) (scaleset.ScaleSet, error)
	GetScaleSetByID(ctx context.Context, id int64) (scaleset.ScaleSet, error)
	UpdateScaleSet(ctx context.Context, id int64, s scaleset.ScaleSet) (scaleset.ScaleSet, error)
	DeleteScaleSet(ctx context.Context, id int64) error
	CreateSession(ctx context.Context, scaleSetID int64, owner string) (scaleset.Session, error)
	RefreshSession(ctx context.Context, scaleSetID int64, sessionID string) (scaleset.Session, error)
	DeleteSession(ctx context.Context, scaleSetID int64, sessionID string) error
	GetMessage(ctx context.Context, s scaleset.Session, lastMessageID int64, maxCapacity int) (*scaleset.Message, error)
	DeleteMessage(ctx context.Context, s scaleset.Session, messageID int64) error
	AcquireJobs(ctx context.Context, s scaleset.Session, scaleSetID int64, requestIDs []int64) ([]int64, error)
	GenerateJITConfig(ctx context.Context, scaleSetID int64, name, workFolder string) (scaleset.JITConfig, error)
	RemoveRunner(ctx context.Context, runnerID int64) error
}

// Enqueuer puts jobs on the pool job queue and binds a started job to the runner that took it;
// *pooljob.JobQueue satisfies it.
type Enqueuer interface {
	Enqueue(ctx context.Context, j warmpool.Job) (string, error)
	Bind(ctx context.Context, j warmpool.Job, runnerName string, runnerID int64) (bool, error)
}

// TakeoverBudget divides LeaseTTL: LeaseTTL/TakeoverBudget is left to a new holder to open its
// session, and the lease in the table lasts the rest, so a holder dying right after a renewal is
// replaced, and its session taken over, within one LeaseTTL (opening takes a few round trips:
// tens of milliseconds).
const TakeoverBudget = 10

// Config configures a Manager. Zero durations take the defaults.
type Config struct {
	Store Store
	Jobs  Enqueuer
	// ScaleSets lists the configured scale sets (declared.Repository.ScaleSets).
	ScaleSets func(ctx context.Context) ([]declared.ScaleSet, error)
	// Broken, when set, names the stored scale sets whose configuration cannot be read now (left
	// out of ScaleSets): a scale set of that name is never deleted at GitHub while it is broken, so
	// a damaged item cannot remove a working scale set.
	Broken func() []string
	// GitHub is the control plane's GitHub client (wire.go): its registration tokens make the
	// scale set clients, over APIURL (default DefaultAPIURL) and HTTPClient (default scaleset's).
	GitHub     GitHub
	APIURL     string
	HTTPClient *http.Client
	// Client, when set, returns the scale set client of a scope ("owner" or "owner/repo") instead
	// of those made from GitHub (tests).
	Client func(scope string) (Client, error)
	// Allowed says whether a job of a repository may be served (the deployment's allow-list); nil
	// allows all.
	Allowed func(repository string) bool
	// Room, when set, says how many more instances the instance caps allow the warm pool's runner
	// class now (capped false: none applies): the capacity announced to GitHub never counts
	// instances a cap would refuse.
	Room func(ctx context.Context, warmPool string) (room int, capped bool, err error)
	// Holder names this replica (lease holder, session owner).
	Holder string
	// LeaseTTL is the scale set lease period: a dead holder is replaced, its session taken over,
	// within one LeaseTTL of its death (default 30 s). The lease in the table is taken for
	// LeaseTTL less TakeoverBudget of it, which is the new holder's time to open its session.
	LeaseTTL time.Duration
	// Resync is how often the configured scale sets are read again (default 30 s).
	Resync time.Duration
	// Backoff and MaxBackoff bound the wait after a failure (defaults 1 s, 30 s); ConflictBackoff is
	// the wait after a 409 (default LeaseTTL).
	Backoff, MaxBackoff, ConflictBackoff time.Duration
	// CancelGrace is how long the runner of a job whose assignment the service cancelled (no runner
	// took it in time) waits for the job's reassignment before it is withdrawn (default 1 min).
	CancelGrace time.Duration
	// SessionRefresh is how often the session is refreshed even when its token still works
	// (default 30 min); an expired token is refreshed at once.
	SessionRefresh time.Duration
	Registerer     prometheus.Registerer
	Now            func() time.Time
	Logger         *slog.Logger
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 30*time.Second)
	def(&c.Resync, 30*time.Second)
	def(&c.CancelGrace, time.Minute)
	def(&c.Backoff, time.Second)
	def(&c.MaxBackoff, 30*time.Second)
	def(&c.ConflictBackoff, c.LeaseTTL)
	def(&c.SessionRefresh, 30*time.Minute)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Allowed == nil {
		c.Allowed = func(string) bool { return true }
	}
}

// Manager runs one listener per configured scale set.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	scaler  Scaler // what the jobs of every session do (scaler.go)

	mu        sync.Mutex
	listeners map[string]*listener // by scope/name
	clients   map[string]Client
	killed    bool
}

// New checks the configuration and returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Jobs == nil || cfg.ScaleSets == nil || (cfg.Client == nil && cfg.GitHub == nil) || cfg.Holder == "" {
		return nil, errors.New("scale set listeners: store, job queue, scale sets, GitHub (or a client) and holder are required")
	}
	cfg.defaults()
	if cfg.Client == nil {
		cfg.Client = clientsOf(cfg)
	}
	return &Manager{
		cfg: cfg, log: cfg.Logger, metrics: newMetrics(cfg.Registerer), scaler: poolScaler{jobs: cfg.Jobs, allowed: cfg.Allowed},
		listeners: map[string]*listener{}, clients: map[string]Client{},
	}, nil
}

// Metrics returns the manager's counters (tests read them).
func (m *Manager) Metrics() *Metrics { return m.metrics }

// Run keeps one listener per configured scale set until ctx ends, then stops them: each deletes its
// session and releases its lease, so another replica takes over at once.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m.sync(ctx, &wg)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			for _, l := range m.listeners {
				l.stop()
			}
			m.mu.Unlock()
			return
		case <-time.After(m.cfg.Resync):
		}
	}
}

// Kill stops every listener as a crashed process would: leases are not released and sessions not
// deleted, so another replica must take over. For tests and fault drills; cancel Run's ctx after.
func (m *Manager) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killed = true
	for _, l := range m.listeners {
		l.kill()
	}
}

// sync starts listeners of new scale sets and stops those of removed ones.
func (m *Manager) sync(ctx context.Context, wg *sync.WaitGroup) {
	sets, err := m.cfg.ScaleSets(ctx)
	if err != nil {
		m.log.Error("scale sets not read: listeners left as they are", "err", err)
		return
	}
	want := map[string]declared.ScaleSet{}
	configured := map[string]bool{}
	for _, s := range sets {
		want[s.Scope+"/"+s.Name] = s
		configured[s.Scope+"/"+s.Name] = true
	}
	m.retire(ctx, configured)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed {
		return
	}
	for key, l := range m.listeners {
		if s, ok := want[key]; !ok || !sameSet(s, l.set) {
			l.stop()
			delete(m.listeners, key)
		}
	}
	for key, s := range want {
		if _, ok := m.listeners[key]; ok {
			continue
		}
		l, err := m.newListener(s)
		if err != nil {
			m.log.Error("scale set listener not started", "scale_set", key, "err", err)
			continue
		}
		m.listeners[key] = l
		wg.Go(func() { l.run(ctx) })
	}
}

func sameSet(a, b declared.ScaleSet) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// client returns the scale set client of a scope, made once.
func (m *Manager) client(scope string) (Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[scope]; ok {
		return c, nil
	}
	c, err := m.cfg.Client(scope)
	if err != nil {
		return nil, fmt.Errorf("scale set client of %s: %w", scope, err)
	}
	m.clients[scope] = c
	return c, nil
}

// GenerateJITConfig mints a just-in-time runner of a scale set, for the pool worker
// (pooljob.ScaleSetRunners). Any replica can: it needs no session.
func (m *Manager) GenerateJITConfig(ctx context.Context, scope string, scaleSetID int64, name string) (ghaccess.JITConfig, error) {
	c, err := m.client(scope)
	if err != nil {
		return ghaccess.JITConfig{}, err
	}
	jit, err := c.GenerateJITConfig(ctx, scaleSetID, name, "")
	if err != nil {
		return ghaccess.JITConfig{}, err
	}
	return ghaccess.JITConfig{Encoded: jit.Encoded, RunnerID: jit.RunnerID, RunnerName: jit.RunnerName}, nil
}

// RemoveRunner withdraws a just-in-time runner of a scale set in scope (a runner already gone is
// not an error), for the job queue (pooljob.RunnerWithdrawer). Any replica can: it needs no
// session.
func (m *Manager) RemoveRunner(ctx context.Context, scope string, runnerID int64) error {
	c, err := m.client(scope)
	if err != nil {
		return err
	}
	if err := c.RemoveRunner(ctx, runnerID); err != nil {
		return fmt.Errorf("withdrawing runner %d of a scale set in %s: %w", runnerID, scope, err)
	}
	m.metrics.inc(m.metrics.withdrawn, "withdrawn", scope)
	return nil
}

// Status is what a replica's listener of one scale set is doing.
type Status struct {
	ScaleSet string
	Leading  bool
	Session  string // the session id while it holds one
}

// Status lists the listeners of this replica.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Status
	for key, l := range m.listeners {
		_, leading := l.elector.Leading()
		out = append(out, Status{ScaleSet: key, Leading: leading, Session: l.sessionID()})
	}
	return out
}
