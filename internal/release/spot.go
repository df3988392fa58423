// This file holds the release's reading of a spot interruption: the agent whose instance EC2
// announced to reclaim fails the release with the notice (agent/spot.go), and the release says so
// plainly instead of blaming the deregistration.

package release

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Reclaimed names, in an instance's reason and in the release's message, an instance EC2 reclaims
// (a spot interruption): the dashboard marks the run's timeline by it.
const Reclaimed = "reclaimed by EC2 (spot interruption)"

// SpotReason is the release's answer for an instance EC2 reclaims (and the run's report's line for
// it as soon as its agent reported the notice); detail is the notice, or the release failure that
// carries it. The notice is the instance's claim: its time is quoted only
// when it parses as one.
func SpotReason(id, detail string) string {
	var doc struct {
		Time string `json:"time"`
	}
	at := "an unannounced time"
	if json.Unmarshal([]byte(strings.TrimPrefix(detail, store.SpotNoticePrefix)), &doc) == nil {
		if t, err := time.Parse(time.RFC3339, doc.Time); err == nil {
			at = t.UTC().Format(time.RFC3339)
		}
	}
	return fmt.Sprintf("runner %s was %s at %s", id, Reclaimed, at)
}

// spotInterruption tells Options.OnSpotInterruption of an instance EC2 reclaims.
func (r *Releaser) spotInterruption(id string) {
	if r.opts.OnSpotInterruption != nil {
		r.opts.OnSpotInterruption(id)
	}
}
