// Quotas (internal/quota) in the reconciler: the per-repository limit around the API's provisions
// and releases (decorators, as the history's), the instance caps handed to provisions and warm-pool
// convergence, and the repair that follows every refresh.
//
// What a repository's runners are: the runners its runs hold, from the provision that took them
// to the release that gives them back. A provision reserves its count on the repository's counter
// before it selects anything (a refusal is a 429 with nothing done), settles the reservation on the
// runners it got, and gives it back whole when it fails. A release recounts the reservation: a
// runner released to the pool (idle, no run) is no longer the repository's, only the deployment's.
// Refresh recounts every reservation from the instance records, so a crash between any two of these
// steps holds capacity for one refresh interval at most (a pending reservation: until its deadline,
// the provision timeout plus the rollback timeout, when it is settled on the run's live records).
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// quotas is a replica's view of the limits.
type quotas struct {
	ledger *quota.Ledger
	cfg    config.Quotas
	caps   *quota.Caps
	st     *store.Store
	// pending is the deadline of a repository reservation not yet settled: no provision runs longer.
	pending time.Duration
	// provisionTimeout is the deployment's --provision-timeout, and timeout a runner class's
	// (classSource.ProvisionTimeout; nil: the deployment's): pending grows with the class's.
	provisionTimeout time.Duration
	timeout          func(ctx context.Context, base time.Duration, runnerClass string) time.Duration
	log              *slog.Logger
	now              func() time.Time
}

// runReservation is the id of a run's reservation of its repository's runners.
func runReservation(runKey string) string { return "run#" + runKey }

// repositoryLimit is the limit of a repository; ok is false when it is not limited (not counted).
func (q *quotas) repositoryLimit(req provision.Request) (quota.Limit, bool) {
	if q == nil || !q.cfg.RepositoryLimits() {
		return quota.Limit{}, false
	}
	max := q.cfg.RepositoryLimit(req.Repository)
	return quota.Limit{Kind: quota.LimitRepository, Counter: quota.RepositoryCounter(req.RepositoryID), Max: max, Label: req.Repository}, true
}

// quotaProvisioner reserves a provision's runners on its repository's counter around the
// provision.
type quotaProvisioner struct {
	next api.Provisioner
	q    *quotas
}

func (p quotaProvisioner) Provision(ctx context.Context, req provision.Request) (provision.Result, error) {
	lim, ok := p.q.repositoryLimit(req)
	if !ok || req.Count <= 0 {
		return p.next.Provision(ctx, req)
	}
	key := store.RunKey(req.RepositoryID, req.RunID, req.Attempt)
	// A run whose provision finished is answered from its record: it takes no new runners.
	if run, err := p.q.st.GetRun(ctx, key); err == nil && (run.Status == provision.StatusSucceeded || run.Status == provision.StatusFailed) {
		return p.next.Provision(ctx, req)
	}
	id := runReservation(key)
	err := p.q.ledger.Reserve(ctx, quota.Reservation{ID: id, Run: key, Amount: req.Count, Deadline: p.q.now().Add(p.q.pendingFor(ctx, req.RunnerClass))}, []quota.Limit{lim})
	var refused *quota.RefusedError
	if errors.As(err, &refused) {
		p.q.log.InfoContext(ctx, "provision refused by a quota", "run", key, "repository", req.Repository, "limit", refused.Kind, "max", refused.Max, "current", refused.Current, "asked", refused.Asked)
		return provision.Result{RunKey: key, Label: req.Label(), Status: provision.StatusFailed, Error: refused.Public()}, err
	}
	if err != nil {
		return provision.Result{}, fmt.Errorf("reserving the runners of run %s: %w", key, err)
	}
	res, perr := p.next.Provision(ctx, req)
	// Settled or given back whatever happens to the request: the reservation must follow the
	// provision's outcome.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var qerr error
	switch {
	case perr == nil:
		ids := make([]string, len(res.Runners))
		for i, rn := range res.Runners {
			ids[i] = rn.InstanceID
		}
		qerr = p.q.ledger.Settle(dctx, id, ids)
	case errors.Is(perr, provision.ErrInProgress):
		// Another request of the run holds the reservation and settles it.
	default:
		qerr = p.q.ledger.Release(dctx, id)
	}
	if qerr != nil && !errors.Is(qerr, quota.ErrNotFound) {
		// Refresh's repair settles the account (the reservation's deadline, or its recount).
		p.q.log.WarnContext(ctx, "run's quota reservation not updated", "run", key, "err", qerr)
	}
	return res, perr
}

// quotaReleaser recounts the run's reservation after a release: what went back to the pool (or was
// terminated) no longer counts for the repository.
type quotaReleaser struct {
	next api.Releaser
	q    *quotas
}

func (r quotaReleaser) Release(ctx context.Context, runKey string, idleTime time.Duration) (release.Report, error) {
	rep, err := r.next.Release(ctx, runKey, idleTime)
	if r.q == nil || !r.q.cfg.RepositoryLimits() {
		return rep, err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, qerr := r.q.ledger.Recount(dctx, r.q.st, runReservation(runKey)); qerr != nil {
		r.q.log.WarnContext(ctx, "run's quota reservation not recounted after its release; refresh will", "run", runKey, "err", qerr)
	}
	return rep, err
}

// repair runs after every refresh pass (leader only): every reservation recounted from the pass's
// brief listing, reading (in parallel) only the instances it does not show holding their unit or
// that the pass terminated. Instances are adopted at the instance caps' own pending deadline, so a
// fleet's instances are never uncounted between its reservation's deadline and their adoption.
func (q *quotas) repair(ctx context.Context, pass refresh.Report) error {
	if q == nil {
		return nil
	}
	o := quota.RepairOptions{AdoptAfter: q.caps.PendingDeadline(), Adopt: q.caps.Adopt, Live: pass.Listing,
		Changed: slices.Concat(pass.Expiry.Terminated, pass.Expiry.AlreadyGone)}
	if o.Live == nil {
		// The pass could not list the table: list it here (adoption needs every live record).
		live, err := q.st.LiveBrief(ctx)
		if err != nil {
			return fmt.Errorf("quota repair: listing live instances: %w", err)
		}
		o.Live = live
	}
	rep, err := q.ledger.Repair(ctx, q.st, o)
	if rep.Freed+rep.Adopted+rep.Reset > 0 || err != nil {
		q.log.Info("quota repair", "reservations", rep.Reservations, "freed", rep.Freed, "adopted", rep.Adopted, "reset", rep.Reset, "errors", rep.Errors, "err", err)
	}
	if err != nil {
		return fmt.Errorf("quota repair: %w", err)
	}
	return nil
}

// newQuotas builds the ledger over the state table and the instance caps (the deployment's, and
// each runner class's from classMax).
func newQuotas(cfg config.Config, db quota.DynamoDBAPI, st *store.Store, classMax func(string) int, now func() time.Time, log *slog.Logger) *quotas {
	ledger := quota.New(db, cfg.Table, quota.Options{Now: now})
	return &quotas{
		ledger: ledger, cfg: cfg.Quotas, st: st, log: log.With("component", "quota"), now: now,
		caps:    &quota.Caps{Ledger: ledger, MaxInstances: cfg.Quotas.MaxInstances, ClassMax: classMax},
		pending: cfg.ProvisionTimeout + cfg.RollbackTimeout + time.Minute, provisionTimeout: cfg.ProvisionTimeout,
	}
}

// pendingFor is the deadline of a reservation of a provision of runnerClass: pending, longer for a
// class whose provision may run longer.
func (q *quotas) pendingFor(ctx context.Context, runnerClass string) time.Duration {
	if q.timeout == nil {
		return q.pending
	}
	return q.pending + max(q.timeout(ctx, q.provisionTimeout, runnerClass)-q.provisionTimeout, 0)
}

// checkWarmPools refuses to start when the instance caps are below what the warm pools keep: such
// pools could never converge, and every provision would be refused. A table that cannot be read now
// is not fatal (convergence reports the cap it meets).
func (q *quotas) checkWarmPools(ctx context.Context, st *store.Store, warmPools bool) error {
	if !warmPools || (q.cfg.MaxInstances == 0 && q.caps.ClassMax == nil) {
		return nil
	}
	snap, err := declared.NewRepository(st).Load(ctx)
	if err != nil {
		q.log.Warn("warm pools not read at start-up; their targets are not checked against the instance caps", "err", err)
		return nil
	}
	classes := maps.Clone(snap.RunnerClasses)
	for name, rc := range classes {
		if rc.MaxInstances == 0 {
			// A runner classes file's cap (the table's classes carry their own).
			rc.MaxInstances = q.caps.ClassMax(name)
			classes[name] = rc
		}
	}
	if errs := declared.CheckCaps(q.cfg.MaxInstances, classes, snap.Pools()); len(errs) > 0 {
		return fmt.Errorf("instance caps: %w", errors.Join(errs...))
	}
	return nil
}

// rows are the quotas page's lines: every counter with its limit, and the limits nothing was
// counted against yet.
func (q *quotas) rows(ctx context.Context) ([]dashboard.QuotaRow, error) {
	counters, err := q.ledger.Counters(ctx)
	if err != nil {
		return nil, err
	}
	var rows []dashboard.QuotaRow
	seen := map[string]bool{}
	for _, c := range counters {
		kind, scope, ok := quota.ParseCounter(c.Name)
		if !ok {
			continue
		}
		row := dashboard.QuotaRow{Limit: kind, Scope: scope, Held: c.Held, Refused: c.Refused, RefusedAt: c.RefusedAt}
		switch kind {
		case quota.LimitDeployment:
			row.Scope, row.Max = "deployment", q.cfg.MaxInstances
		case quota.LimitRunnerClass:
			row.Max = q.caps.ClassMax(scope)
		case quota.LimitRepository:
			if c.Label != "" {
				row.Scope = c.Label
			}
			row.Max = q.cfg.RepositoryLimit(row.Scope)
		}
		seen[row.Limit+"/"+strings.ToLower(row.Scope)] = true
		rows = append(rows, row)
	}
	if q.cfg.MaxInstances > 0 && !seen[quota.LimitDeployment+"/deployment"] {
		rows = append(rows, dashboard.QuotaRow{Limit: quota.LimitDeployment, Scope: "deployment", Max: q.cfg.MaxInstances})
	}
	for repo, max := range q.cfg.RepositoryOverrides {
		if !seen[quota.LimitRepository+"/"+repo] {
			rows = append(rows, dashboard.QuotaRow{Limit: quota.LimitRepository, Scope: repo, Max: max})
		}
	}
	return rows, nil
}
