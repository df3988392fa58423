// One scale set's listener: while this replica holds the scale set's lease it makes sure the scale
// set exists as configured, opens the message session (taking over a dead holder's), and polls.

package scalesets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/leader"
)

type listener struct {
	m       *Manager
	set     declared.ScaleSet
	key     string // scope/name
	log     *slog.Logger
	elector *leader.Elector
	changed chan struct{}

	mu      sync.Mutex
	cancel  context.CancelFunc
	killed  bool
	session string
}

func (m *Manager) newListener(s declared.ScaleSet) (*listener, error) {
	l := &listener{m: m, set: s, key: s.Scope + "/" + s.Name, changed: make(chan struct{}, 1)}
	l.log = m.log.With("scale_set", l.key, "holder", m.cfg.Holder)
	e, err := leader.New(m.cfg.Store, leader.Options{
		Name: "scaleset:" + l.key, Holder: m.cfg.Holder, TTL: m.cfg.LeaseTTL - m.cfg.LeaseTTL/TakeoverBudget, Now: m.cfg.Now, Logger: l.log,
		OnChange: func(bool) {
			select {
			case l.changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	l.elector = e
	return l, nil
}

func (l *listener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
}

func (l *listener) kill() {
	l.mu.Lock()
	l.killed = true
	l.mu.Unlock()
	l.elector.Abandon()
	l.stop()
}

func (l *listener) isKilled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.killed
}

func (l *listener) sessionID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.session
}

// run takes part in the scale set's lease and listens while it holds it.
func (l *listener) run(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	l.mu.Lock()
	l.cancel = cancel
	l.mu.Unlock()
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { l.elector.Run(ctx) })
	defer wg.Wait()
	wait := time.Duration(0)
	for ctx.Err() == nil {
		lctx, leading := l.elector.Leading()
		if !leading {
			select {
			case <-ctx.Done():
			case <-l.changed:
			case <-time.After(l.m.cfg.LeaseTTL / 3):
			}
			continue
		}
		both, stopBoth := mergeCancel(lctx, ctx)
		err := l.lead(both)
		stopBoth()
		switch {
		case ctx.Err() != nil || lctx.Err() != nil:
			wait = 0
			continue
		case errors.Is(err, scaleset.ErrSessionConflict):
			l.m.metrics.inc(l.m.metrics.conflicts, "conflicts", l.set.Name)
			l.log.Warn("scale set session held by another process: backing off", "err", err, "retry_in", l.m.cfg.ConflictBackoff)
			wait = l.m.cfg.ConflictBackoff
		case err != nil:
			wait = min(max(2*wait, l.m.cfg.Backoff), l.m.cfg.MaxBackoff)
			l.log.Error("scale set listener interrupted", "err", err, "retry_in", wait)
		default:
			wait = 0
		}
		select {
		case <-ctx.Done():
		case <-lctx.Done():
		case <-time.After(wait):
		}
	}
}

// mergeCancel returns a context that ends when either ends, and its cancel function.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}

// lead makes the scale set as configured, opens the session and polls until ctx ends or something
// fails. Unless the replica was killed, it deletes its session on the way out.
func (l *listener) lead(ctx context.Context) error {
	c, err := l.m.client(l.set.Scope)
	if err != nil {
		return err
	}
	ss, err := l.ensure(ctx, c)
	if err != nil {
		return err
	}
	sess, err := l.open(ctx, c, ss.ID)
	if err != nil {
		return err
	}
	defer func() {
		if l.isKilled() {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := c.DeleteSession(dctx, ss.ID, l.sessionID()); err != nil {
			l.log.Warn("scale set session not deleted: the next holder deletes it", "err", err)
			return
		}
		_ = l.clearRecord(dctx, l.sessionID())
	}()
	// A JobCompleted that never comes is the convergence pass's backstop's to make up for
	// (pooljob/backstop.go), for scale set and webhook jobs alike.
	return newPoller(l, c, ss, sess).run(ctx)
}

// ensure creates the scale set, or updates it when its labels or group differ from the
// configuration.
func (l *listener) ensure(ctx context.Context, c Client) (scaleset.ScaleSet, error) {
	g, err := c.RunnerGroupByName(ctx, l.set.Group())
	if err != nil {
		return scaleset.ScaleSet{}, err
	}
	// disableUpdate: runnerpool upgrades its runners itself, as ARC does (actions/scaleset types.go
	// RunnerSetting); a runner updating itself mid-job would change what was verified.
	want := scaleset.ScaleSet{Name: l.set.Name, RunnerGroupID: g.ID, RunnerSetting: scaleset.Setting{DisableUpdate: true}}
	for _, name := range l.set.ScaleSetLabels() {
		want.Labels = append(want.Labels, scaleset.Label{Name: name})
	}
	got, ok, err := c.GetScaleSet(ctx, g.ID, l.set.Name)
	if err != nil {
		return scaleset.ScaleSet{}, err
	}
	if !ok {
		// Not in the configured group: moved from another one (the runner group changed), or new.
		got, ok, err = l.made(ctx, c)
		if err != nil {
			return scaleset.ScaleSet{}, err
		}
	}
	switch {
	case !ok:
		l.log.Info("creating scale set", "runner_group", g.Name, "labels", l.set.ScaleSetLabels())
		got, err = c.CreateScaleSet(ctx, want)
	case got.RunnerGroupID != g.ID:
		l.log.Info("moving scale set to its runner group", "from", got.RunnerGroupID, "to", g.ID)
		got, err = c.UpdateScaleSet(ctx, got.ID, want)
	case !slices.Equal(got.LabelNames(), l.set.ScaleSetLabels()) || !got.RunnerSetting.DisableUpdate:
		l.log.Info("updating scale set labels and runner setting", "from", got.LabelNames(), "to", l.set.ScaleSetLabels())
		got, err = c.UpdateScaleSet(ctx, got.ID, want)
	}
	if err != nil {
		return scaleset.ScaleSet{}, err
	}
	// Recorded before the session opens: a set whose configuration goes is deleted at GitHub.
	if err := l.m.register(ctx, l.set.Scope, l.set.Name, got.ID); err != nil {
		return scaleset.ScaleSet{}, err
	}
	return got, nil
}

// made returns the scale set this deployment made for the configured set, wherever it is now (the
// registry knows its id), if it still exists at GitHub under the configured name.
func (l *listener) made(ctx context.Context, c Client) (scaleset.ScaleSet, bool, error) {
	entries, _, err := l.m.readRegistry(ctx)
	if err != nil {
		return scaleset.ScaleSet{}, false, err
	}
	e, ok := entries[l.key]
	if !ok || e.ID == 0 {
		return scaleset.ScaleSet{}, false, nil
	}
	got, err := c.GetScaleSetByID(ctx, e.ID)
	switch {
	case scaleset.StatusOf(err) == http.StatusNotFound:
		return scaleset.ScaleSet{}, false, nil
	case err != nil:
		return scaleset.ScaleSet{}, false, err
	}
	return got, strings.EqualFold(got.Name, l.set.Name), nil
}

// sessionRecord is what the holder records of its session, next to the lease.
type sessionRecord struct {
	SessionID  string `json:"sessionId"`
	Holder     string `json:"holder"`
	ScaleSetID int64  `json:"scaleSetId"`
}

func (l *listener) recordKey() string { return "scaleset-session:" + l.key }

// open deletes the session a previous holder recorded (it died, or this replica restarted), then
// creates and records this holder's.
func (l *listener) open(ctx context.Context, c Client, scaleSetID int64) (scaleset.Session, error) {
	r, err := l.m.cfg.Store.GetRun(ctx, l.recordKey())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return scaleset.Session{}, fmt.Errorf("reading the scale set's session record: %w", err)
	}
	var prev sessionRecord
	_ = json.Unmarshal(r.Result, &prev)
	if prev.SessionID != "" && prev.ScaleSetID == scaleSetID {
		// A session the service no longer knows (expired, evicted) answers 400 or 404, which
		// DeleteSession forgives. Any other failure is logged and the session created all the
		// same: a live old session answers that with 409 (backed off), a dead one lets this replica
		// in. Never a loop of deletes.
		if err := c.DeleteSession(ctx, scaleSetID, prev.SessionID); err != nil {
			l.log.Warn("previous holder's scale set session not deleted: opening a session all the same", "session", prev.SessionID, "err", err)
		} else {
			l.m.metrics.inc(l.m.metrics.sessions, "sessions", l.set.Name, "taken_over")
			l.log.Info("previous holder's scale set session deleted", "session", prev.SessionID, "previous_holder", prev.Holder)
		}
	}
	sess, err := c.CreateSession(ctx, scaleSetID, l.m.cfg.Holder)
	if err != nil {
		return scaleset.Session{}, err
	}
	l.mu.Lock()
	l.session = sess.SessionID
	l.mu.Unlock()
	if err := l.record(ctx, sess.SessionID, scaleSetID); err != nil {
		_ = c.DeleteSession(context.WithoutCancel(ctx), scaleSetID, sess.SessionID)
		return scaleset.Session{}, fmt.Errorf("recording the session: %w", err)
	}
	l.m.metrics.inc(l.m.metrics.sessions, "sessions", l.set.Name, "created")
	l.log.Info("scale set session opened", "scale_set_id", scaleSetID, "session", sess.SessionID)
	return sess, nil
}

// record writes (or clears, with an empty id) the session record.
func (l *listener) record(ctx context.Context, sessionID string, scaleSetID ...int64) error {
	rec := sessionRecord{SessionID: sessionID, Holder: l.m.cfg.Holder}
	if len(scaleSetID) > 0 {
		rec.ScaleSetID = scaleSetID[0]
	}
	body, _ := json.Marshal(rec)
	return l.putRun(ctx, l.recordKey(), "session", body)
}

// putRun writes a run record of the scale set holding body, creating it when it is new.
func (l *listener) putRun(ctx context.Context, key, status string, body []byte) error {
	r, err := l.m.cfg.Store.GetRun(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		_, created, err := l.m.cfg.Store.CreateRun(ctx, store.Run{Key: key, Repository: l.set.Scope, RunID: l.set.Name, Status: status, Result: body})
		if err != nil || created {
			return err
		}
		r, err = l.m.cfg.Store.GetRun(ctx, key)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	r.Result = body
	_, err = l.m.cfg.Store.UpdateRun(ctx, r, r.Version)
	return err
}

// clearRecord clears the session record if it still names sessionID (a new holder may have
// recorded its own since; the version-conditional update leaves that one alone).
func (l *listener) clearRecord(ctx context.Context, sessionID string) error {
	r, err := l.m.cfg.Store.GetRun(ctx, l.recordKey())
	if err != nil {
		return err
	}
	var rec sessionRecord
	if json.Unmarshal(r.Result, &rec) != nil || rec.SessionID != sessionID {
		return nil
	}
	r.Result, _ = json.Marshal(sessionRecord{Holder: l.m.cfg.Holder})
	_, err = l.m.cfg.Store.UpdateRun(ctx, r, r.Version)
	return err
}

// capacity is the scale set's room: max_runners minus the instances serving its jobs.
func (l *listener) capacity(ctx context.Context, scaleSetID int64) int {
	recs, err := l.m.cfg.Store.ByPool(ctx, l.set.WarmPool)
	if err != nil {
		l.log.Warn("scale set capacity not counted: announcing none", "err", err)
		return 0
	}
	capacity := max(l.set.MaxRunners-countServing(recs, scaleSetID), 0)
	if l.m.cfg.Room == nil {
		return capacity
	}
	room, capped, err := l.m.cfg.Room(ctx, l.set.WarmPool)
	switch {
	case err != nil:
		// Announcing max_runners at worst lets GitHub assign a job a cap then holds back: it waits
		// in the job queue for an instance, as a webhook job does. Announcing none would stall all.
		l.log.Warn("instance caps not read: capacity from max_runners alone", "err", err)
	case capped:
		// Instances already in the pool need no room; new ones do.
		capacity = min(capacity, countIdle(recs)+room)
	}
	return capacity
}

// countIdle counts the pool's instances a job can take without launching one.
func countIdle(recs []store.Instance) int {
	n := 0
	for _, in := range recs {
		if in.RunID == "" && (in.State == store.StateReady || in.State == store.StateStopped || in.State == store.StateWarming) {
			n++
		}
	}
	return n
}

// countServing counts the live records serving jobs of a scale set.
func countServing(recs []store.Instance, scaleSetID int64) int {
	prefix := fmt.Sprintf("job:ss%d-", scaleSetID)
	n := 0
	for _, in := range recs {
		if in.State.Live() && strings.HasPrefix(in.RunID, prefix) {
			n++
		}
	}
	return n
}
