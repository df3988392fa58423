// The claim notice: how an idle agent learns that its record changed (a claim set a run id, a release
// cleared it) without reading DynamoDB all the time.
//
// The seeds' design polls the record every 250 ms: 14,400 strongly consistent GetItem calls per idle
// instance-hour, and a claim is seen 125 ms late on average. runnerpool's design (imds-tags): after
// every claim and release the control plane sets the instance tag runnerpool:wake to the record's new
// version (package wake, one CreateTags per hand-over, not per idle hour). With instance metadata tags
// enabled on the launch template, the tag shows at /latest/meta-data/tags/instance/runnerpool:wake in
// IMDS, which the agent polls every 50 ms: a link-local HTTP call that costs nothing, needs no IAM
// permission and does not count against any AWS API rate limit. The agent reads its record only when
// the value changes, plus a fallback read every 30 s (and one at start), which bounds the delay if a
// notify is lost or tags are not visible. The tag carries no authority: the record stays the only
// source of truth, so a forged or stale tag costs one extra read and nothing else.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
)

// Notice tells the agent when to re-read its record.
type Notice interface {
	// Wait blocks until the record may have changed (or a fallback period passed) and returns nil,
	// or returns ctx's error once ctx is done.
	Wait(ctx context.Context) error
}

// NewNotice returns the notice of a mode: NewTagNotice or NewPollNotice.
func NewNotice(mode NoticeMode, api MetadataAPI, interval, fallback time.Duration, log *slog.Logger) (Notice, error) {
	switch mode {
	case NoticeIMDSTags:
		return NewTagNotice(api, interval, fallback, log), nil
	case NoticePoll:
		return NewPollNotice(interval), nil
	}
	_, err := ParseNoticeMode(string(mode))
	return nil, err
}

// PollNotice is the seeds' design: it wakes the agent every interval, and every wake is a GetItem.
type PollNotice struct {
	every time.Duration
	tick  *time.Ticker // a steady cadence, whatever each read takes
}

// NewPollNotice returns a notice that fires every interval.
func NewPollNotice(every time.Duration) *PollNotice { return &PollNotice{every: every} }

// Wait returns at the next tick.
func (p *PollNotice) Wait(ctx context.Context) error {
	if p.tick == nil {
		p.tick = time.NewTicker(p.every)
	}
	select {
	case <-ctx.Done():
		p.tick.Stop()
		return ctx.Err()
	case <-p.tick.C:
		return nil
	}
}

// TagNotice watches the runnerpool:wake instance tag through IMDS.
type TagNotice struct {
	api      MetadataAPI
	every    time.Duration
	fallback time.Duration
	log      *slog.Logger

	seen     bool   // a first value was observed
	last     string // the tag's last value ("" when not set)
	lastWake time.Time
	warned   bool
}

// NewTagNotice returns a notice that polls the wake tag every interval and fires when its value changes,
// or when fallback passed without a change. Its first Wait fires at the first observation (so a tag set
// between the agent's first record read and the notice's first look is never missed).
func NewTagNotice(api MetadataAPI, every, fallback time.Duration, log *slog.Logger) *TagNotice {
	if log == nil {
		log = slog.Default()
	}
	return &TagNotice{api: api, every: every, fallback: fallback, log: log}
}

// TagPath is the wake tag's IMDS path (below /latest/meta-data/).
const TagPath = "tags/instance/" + wake.TagKey

// Wait polls the tag until it changes or the fallback period passes.
func (n *TagNotice) Wait(ctx context.Context) error {
	if n.lastWake.IsZero() {
		n.lastWake = time.Now()
	}
	t := time.NewTicker(n.every)
	defer t.Stop()
	for {
		v, err := getMetadata(ctx, n.api, TagPath)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errNoMetadata):
			v, err = "", nil // no claim or release has tagged this instance yet
		case err != nil && !n.warned:
			// Not fatal: the fallback read still bounds the delay.
			n.log.Warn("agent: reading the wake tag from instance metadata", "err", err)
			n.warned = true
		}
		if err == nil {
			if !n.seen || v != n.last {
				n.seen, n.last, n.lastWake = true, v, time.Now()
				return nil
			}
		}
		if time.Since(n.lastWake) >= n.fallback {
			n.lastWake = time.Now()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
