// outdated.go: a security release, noticed through the runners GitHub refuses. GitHub's downloads
// endpoints and releases carry no "security" flag, but a critical security release makes GitHub
// refuse older runners at once, and since actions/runner 2.333.0 the runner then exits with its own
// code, 7 (actions/runner#4285; internal/agent outdated.go), which the agent reports as
// UD_RUNNER_OUTDATED. On enough evidence the current release is marked Security, so Due makes it
// due at once for every older idle instance (refresh retires them; launches already install the
// current release).
//
// The report is the agent's, so it is evidence, not a fact (DESIGN.md "Authority"): a job that
// reached the instance role can write the signal item, and a root job can also sign with the agent's
// key. What suffices:
//   - the report is signed by the key the control plane pinned for the instance (a user or docker
//     job cannot read it), and names the run the record says the instance serves;
//   - the record (the control plane's, not the report) says the instance launched a runner older
//     than the current release the reconciler read from GitHub: a report can only bring forward a
//     release GitHub really published, never invent one or stop work (instances holding a run are
//     never retired);
//   - such reports come from instances of at least MinRuns different runs: one forged report, or
//     any number from one workflow run, never marks the release.
//
// Below that, each reporting instance still answers for itself: its agent never restarts the runner
// and reports its release failed, so it is never pooled again.
package runnerrelease

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// MinRuns is how many different runs must have instances reporting their runner outdated before
// the current release is treated as a security release.
const MinRuns = 2

// Outdated returns the instances among live whose report (reports, by instance id) counts as
// evidence that GitHub refuses runners older than cur (see the file comment), and whether they
// suffice to treat cur as a security release.
func Outdated(live []store.Instance, reports map[string]store.Report, cur runnerversion.Release) (ids []string, enough bool) {
	cv, err := runnerversion.Parse(cur.Version)
	if err != nil {
		return nil, false
	}
	runs := map[string]bool{}
	for _, rec := range live {
		rep, ok := reports[rec.ID]
		if !ok || rep.SignalErr != nil || rec.RunID == "" || rec.AgentKey == "" {
			continue
		}
		sig := rep.Signal
		if sig.Signal != store.SignalRunnerOutdated || sig.RunID != rec.RunID || !sig.SignedBy(rec.ID, rec.AgentKey) {
			continue
		}
		if v, err := runnerversion.Parse(rec.RunnerVersion); err != nil || !v.Less(cv) {
			continue
		}
		ids = append(ids, rec.ID)
		runs[rec.RunID] = true
	}
	slices.Sort(ids)
	return ids, len(runs) >= MinRuns
}

// Reporter reads the agents' last signals in batches; *store.Store satisfies it.
type Reporter interface {
	Reports(ctx context.Context, kind store.CredentialKind, qs []store.ReportQuery) (map[string]store.Report, error)
}

// CheckOutdated reads the reports of the live instances that hold a run and, when they suffice,
// marks the current release a security release in the table (every replica then sees it). It
// returns the instances whose reports count.
func (c *Cache) CheckOutdated(ctx context.Context, rp Reporter, live []store.Instance) ([]string, error) {
	cur, ok := c.Current()
	if !ok || cur.Security {
		return nil, nil
	}
	var qs []store.ReportQuery
	var serving []store.Instance
	for _, rec := range live {
		if rec.RunID != "" && (rec.State == store.StateRunning || rec.State == store.StateClaimed) {
			qs = append(qs, store.ReportQuery{ID: rec.ID})
			serving = append(serving, rec)
		}
	}
	if len(qs) == 0 {
		return nil, nil
	}
	reports, err := rp.Reports(ctx, store.CredentialRegistration, qs)
	if err != nil {
		return nil, fmt.Errorf("reading the agents' reports: %w", err)
	}
	ids, enough := Outdated(serving, reports, cur)
	if !enough {
		if len(ids) > 0 {
			c.o.Logger.WarnContext(ctx, "runner release: agents report GitHub refusing their runner, not yet enough to act for the fleet",
				"instances", strings.Join(ids, ","), "current", cur.Version, "want_runs", MinRuns)
		}
		return ids, nil
	}
	return ids, c.markSecurity(ctx, cur, ids)
}

// markSecurity keeps the current release as a security release.
func (c *Cache) markSecurity(ctx context.Context, cur runnerversion.Release, ids []string) error {
	rr := c.Known()
	if rr.Release.Version != cur.Version {
		return nil // a newer release arrived meanwhile: the reports were about the one before
	}
	rr.Release.Security = true
	rr.FetchedAt = c.o.Now()
	if err := c.table.PutRunnerRelease(ctx, rr); err != nil {
		return fmt.Errorf("keeping %s as a security release: %w", cur.Version, err)
	}
	c.set(rr)
	c.o.Logger.WarnContext(ctx, "runner release: GitHub refuses older runners; the current release is due at once for every older instance",
		"version", cur.Version, "instances", strings.Join(ids, ","))
	return nil
}
