// The cancelled assignments of a scale set, kept in the table next to the session record: a new
// session holder (after a crash or a takeover) reads them at session open and withdraws the runner
// of a job whose assignment is not made again, instead of leaving it to the instance's deadline.

package scalesets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// cancelledJob is an assignment the service cancelled because no runner took it in time: the
// runner brought up for it waits for the job's reassignment.
type cancelledJob struct {
	At  time.Time    `json:"at"`
	Job warmpool.Job `json:"job"`
}

func (l *listener) cancelledKey() string { return "scaleset-cancelled:" + l.key }

// loadCancelled reads the cancelled assignments a previous holder (or this one) recorded.
func (p *poller) loadCancelled(ctx context.Context) error {
	r, err := p.l.m.cfg.Store.GetRun(ctx, p.l.cancelledKey())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("reading the scale set's cancelled assignments: %w", err)
	}
	got := map[string]cancelledJob{}
	if err := json.Unmarshal(r.Result, &got); err != nil {
		// Only a holder writes it; unreadable, it is dropped (those runners end at their deadline).
		p.l.log.Warn("scale set's cancelled assignments unreadable: dropped", "err", err)
		return nil
	}
	p.cancelled, p.saved = got, maps.Clone(got)
	return nil
}

// saveCancelled records the cancelled assignments when they changed, before the message that
// changed them is deleted.
func (p *poller) saveCancelled(ctx context.Context) error {
	if maps.EqualFunc(p.cancelled, p.saved, func(a, b cancelledJob) bool { return a.At.Equal(b.At) }) {
		return nil
	}
	body, _ := json.Marshal(p.cancelled)
	if err := p.l.putRun(ctx, p.l.cancelledKey(), "cancelled", body); err != nil {
		return fmt.Errorf("recording the scale set's cancelled assignments: %w", err)
	}
	p.saved = maps.Clone(p.cancelled)
	return nil
}
