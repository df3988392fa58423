// This file holds the agent's watch for spot interruptions. EC2 announces the interruption of a spot
// instance two minutes ahead in instance metadata (spot/instance-action: 404 until then, afterwards
// {"action": "terminate" | "stop" | "hibernate", "time": "..."}). The agent reports the notice, and
// the instance serves no further run and is never pooled again: its job may finish within the two
// minutes, or dies with the instance, and the control plane hears why.

package agent

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// spotPath is the IMDS path of the spot interruption notice (below /latest/meta-data/).
const spotPath = "spot/instance-action"

// watchSpot polls the notice every SpotInterval and hands the first one to the main loop.
func (a *agent) watchSpot(ctx context.Context) {
	t := time.NewTicker(a.cfg.SpotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		doc, ok := a.spotAction(ctx)
		if !ok {
			continue
		}
		a.spot <- doc
		select {
		case a.wake <- struct{}{}:
		default:
		}
		return
	}
}

// spotAction reads the notice; ok is false while there is none (404) or it cannot be read.
func (a *agent) spotAction(ctx context.Context) (string, bool) {
	rctx, cancel := context.WithTimeout(ctx, a.cfg.SpotInterval)
	defer cancel()
	out, err := a.cfg.IMDS.GetMetadata(rctx, &imds.GetMetadataInput{Path: spotPath})
	if err != nil {
		return "", false
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 4096))
	doc := strings.TrimSpace(string(b))
	return doc, err == nil && doc != ""
}

// spotInterrupted records the notice: the instance is tainted (no further run; its release fails,
// so it is never pooled) and the control plane is told, naming the run it serves.
func (a *agent) spotInterrupted(ctx context.Context, doc string) {
	a.spotNotice = doc
	a.log.Warn("agent: spot interruption announced", "notice", doc, "run", a.marker.RunID)
	a.taint("spot interruption announced: " + doc)
	a.signal(ctx, store.SignalRecord{Signal: store.SignalSpotInterrupted, RunID: a.marker.RunID, Detail: lastBytes(doc, 1024)})
}
