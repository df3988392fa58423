// The autoscale policy's measured inputs, beside the demand autoscale.go records: the profile's
// half-life, the start times measured from the pool's own jobs and the prices of the pool's
// instance types from the price book (the operator's price file first). Each comes from
// something outside the converger (table items, an agent's report, a price source) and is
// checked: a bad value is left out with a logged reason and the default stands in for it.
package poolsize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// ProfileHalfLife is how often the pool's recorded demand is halved: a week's demand weighs half
// the next week's, so a pool follows a changed rhythm within a few weeks and a season long gone
// no longer sizes it. The time of the last halving is kept in the pool's autoscale item.
const ProfileHalfLife = 7 * 24 * time.Hour

// maxHalvings bounds the halvings one pass applies after a long gap: by then the profile is
// empty anyway.
const maxHalvings = 32

// ageProfile halves prof once per ProfileHalfLife since st.HalvedAt, and reports how many times.
// An item that never aged starts its clock now; one dated after now (a clock gone back) is
// restarted, never aged twice.
func ageProfile(st *store.AutoscaleState, prof *autoscale.Profile, now time.Time) int {
	if st.HalvedAt.IsZero() || st.HalvedAt.After(now) {
		st.HalvedAt = now
		return 0
	}
	n := 0
	for ; now.Sub(st.HalvedAt) >= ProfileHalfLife; n++ {
		if n == maxHalvings {
			st.HalvedAt = now
			break
		}
		prof.Halve()
		st.HalvedAt = st.HalvedAt.Add(ProfileHalfLife)
	}
	return n
}

// PriceFunc is the hourly price of an instance type by usage class and zone, and its source
// (history.Pricer's shape; pricing.Book.PerHour): "unknown" or "" when no source has it.
type PriceFunc func(ctx context.Context, instanceType, usageClass, zone string) (perHour float64, source string)

// maxPerHour bounds a believable instance price (the price file's own bound).
const maxPerHour = 1000.0

// prices is the hourly price of a hot instance of the pool: the median price of the instances it
// holds (what its fleets launched), or, holding none, the cheapest of its runner class's exact
// instance types (a fleet launches the cheapest it can). The stopped price (an instance's volume)
// stays def's: the price book prices instance types, not volumes.
func (o AutoscaleOptions) prices(ctx context.Context, spec warmpool.PoolSpec, recs []store.Instance, log *slog.Logger) (autoscale.Prices, string) {
	p, from := o.Prices, "default"
	if o.Price == nil {
		return p, from
	}
	known := map[string]float64{} // by type and usage class: one lookup each
	price := func(typ, usage, zone string) (float64, bool) {
		k := typ + " " + usage + " " + zone
		if v, ok := known[k]; ok {
			return v, v >= 0
		}
		v, src := o.Price(ctx, typ, usage, zone)
		switch {
		case src == "" || src == "unknown":
			v = -1
		case v <= 0 || v > maxPerHour:
			log.Warn("autoscale: price ignored", "instance_type", typ, "usage_class", usage, "per_hour", v, "source", src, "reason", "not between 0 and 1000 USD an hour")
			v = -1
		}
		known[k] = v
		return v, v >= 0
	}
	var got []float64
	var types []string
	for _, in := range recs {
		if in.InstanceType == "" || in.State == store.StateTerminating {
			continue
		}
		if v, ok := price(in.InstanceType, in.UsageClass, in.Zone); ok {
			got = append(got, v)
			types = append(types, in.InstanceType)
		}
	}
	if len(got) > 0 {
		slices.Sort(types)
		p.HotPerHour = median(got)
		return p, fmt.Sprintf("price book: median of %d instances (%s)", len(got), strings.Join(slices.Compact(types), ", "))
	}
	for _, t := range spec.Class.InstanceTypes {
		if strings.ContainsAny(t, "*?[") {
			continue // a pattern: the types it allows are known only to EC2
		}
		if v, ok := price(t, "", ""); ok && (len(got) == 0 || v < got[0]) {
			got, types = []float64{v}, []string{t}
		}
	}
	if len(got) > 0 {
		p.HotPerHour = got[0]
		return p, "price book: " + types[0] + ", the runner class's cheapest"
	}
	return p, from
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Start time measurement. A pool job's start is measured when convergence promotes its instance:
// from the job's creation at GitHub (the ledger's request; the ledger's own creation when that is
// missing or later) to the registration its agent reported, by where the instance came from (the
// ledger's source). The samples wait in memory for the pool's next autoscale write, which keeps
// the last maxStartSamples of each kind; the median of at least minStartSamples replaces the
// default.
const (
	maxStartSamples = 31
	minStartSamples = 5
	// maxStart bounds a believable start: a job queued an hour before its runner registered waited
	// for something other than an instance.
	maxStart = time.Hour
	// clockSkew is how far an agent's report may be dated outside the reconciler's bounds.
	clockSkew = 5 * time.Second
)

// Kinds of start, as kept in the autoscale item.
const (
	startHot     = "hot"
	startStopped = "stopped"
	startCold    = "cold"
)

var startOfSource = map[string]string{warmpool.SourceHot: startHot, warmpool.SourceStarted: startStopped, warmpool.SourceCreated: startCold}

// measureStart records the start of the pool job in's instance serves, just promoted on sig.
func (c *Converger) measureStart(ctx context.Context, pool string, in store.Instance, sig store.SignalRecord, now time.Time) {
	kind, d, err := c.startOf(ctx, in, sig, now)
	if err != nil {
		c.log.Info("autoscale: start time not measured", "pool", pool, "instance", in.ID, "run", in.RunID, "reason", err)
		return
	}
	c.noteQueueTime(pool, d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts == nil {
		c.starts = map[string]map[string][]int64{}
	}
	if c.starts[pool] == nil {
		c.starts[pool] = map[string][]int64{}
	}
	c.starts[pool][kind] = append(c.starts[pool][kind], d.Milliseconds())
}

// startOf reads the job's ledger and measures its start.
func (c *Converger) startOf(ctx context.Context, in store.Instance, sig store.SignalRecord, now time.Time) (string, time.Duration, error) {
	key, _ := strings.CutPrefix(in.RunID, warmpool.JobRunPrefix)
	r, err := c.st.GetRun(ctx, "pooljob:"+key)
	if err != nil {
		return "", 0, fmt.Errorf("reading the job's ledger: %w", err)
	}
	var s warmpool.JobResult
	if err := json.Unmarshal(r.Result, &s); err != nil || s.InstanceID != in.ID {
		return "", 0, errors.New("the ledger does not say this instance warmpool.JobResult the job")
	}
	kind, ok := startOfSource[s.Source]
	if !ok {
		return "", 0, fmt.Errorf("unknown source %q", s.Source)
	}
	queued := r.CreatedAt
	var j warmpool.Job
	if json.Unmarshal(r.Request, &j) == nil && !j.CreatedAt.IsZero() && j.CreatedAt.Before(queued) {
		queued = j.CreatedAt // GitHub's time: the webhook's delivery is part of the wait
	}
	// The registration cannot precede the job's ledger record (its runner is minted after it),
	// nor follow now. Not the ledger's served time: the worker wakes a hot instance's agent
	// before it writes that, and the agent may register first.
	switch {
	case sig.At.Before(r.CreatedAt.Add(-clockSkew)) || sig.At.After(now.Add(clockSkew)):
		return "", 0, fmt.Errorf("registration reported at %s, outside the job's record at %s and now", sig.At.Format(time.RFC3339Nano), r.CreatedAt.Format(time.RFC3339Nano))
	case sig.At.Sub(queued) <= 0 || sig.At.Sub(queued) > maxStart:
		return "", 0, fmt.Errorf("a start of %s: not between 0 and %s", sig.At.Sub(queued), maxStart)
	}
	return kind, sig.At.Sub(queued), nil
}

// takeStarts adds the samples measured since the pool's last write to st's, keeping the newest.
func (c *Converger) takeStarts(pool string, st *store.AutoscaleState) {
	c.mu.Lock()
	pending := c.starts[pool]
	delete(c.starts, pool)
	c.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	if st.Starts == nil {
		st.Starts = map[string][]int64{}
	}
	for kind, ms := range pending {
		all := append(st.Starts[kind], ms...)
		st.Starts[kind] = all[max(0, len(all)-maxStartSamples):]
	}
}

// starts are the start times the pool's decision uses: per kind, the median of the kept samples
// when there are at least minStartSamples believable ones, else def's. A sample a reconciler
// could not have written (negative, beyond maxStart) is dropped from st and logged.
func starts(st *store.AutoscaleState, def autoscale.Starts, log *slog.Logger) (autoscale.Starts, string) {
	unbelievable := func(ms int64) bool { return ms <= 0 || time.Duration(ms)*time.Millisecond > maxStart }
	out := def
	var from []string
	for _, k := range []struct {
		kind string
		d    *time.Duration
	}{{startHot, &out.Hot}, {startStopped, &out.Stopped}, {startCold, &out.Cold}} {
		all := st.Starts[k.kind]
		kept := slices.DeleteFunc(slices.Clone(all), unbelievable)
		if len(kept) < len(all) {
			log.Warn("autoscale: start samples dropped", "pool", st.Pool, "kind", k.kind, "dropped", len(all)-len(kept), "reason", "not between 0 and "+maxStart.String())
			st.Starts[k.kind] = kept
		}
		if len(kept) < minStartSamples {
			from = append(from, fmt.Sprintf("%s default (%d samples)", k.kind, len(kept)))
			continue
		}
		ms := make([]float64, len(kept))
		for i, v := range kept {
			ms[i] = float64(v)
		}
		*k.d = time.Duration(median(ms)) * time.Millisecond
		from = append(from, fmt.Sprintf("%s median of %d", k.kind, len(kept)))
	}
	return out, strings.Join(from, ", ")
}
