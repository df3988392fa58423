// pin.go: the agent starts its runner only once it sees its own key pinned in its instance record.
//
// The control plane pins the agent's public key at the first self-signed report it reads
// (store.Attribute): a claim's or provision's registration wait, a warm pool's warm-up, the pool
// worker's watch of a cold start, a convergence pass. The instance role cannot write the record, but
// it can write the agent's partition: a job that ran before the control plane read a report could
// write one signed with a key of its own, have that key pinned, and forge the agent's later reports
// (a release, a spot notice). So the runner, the only way a job reaches the instance, starts only
// after the agent read its record and found its own key there. A record that pins another key, or
// none within PinWait, is a registration that failed (UD_REG_FAILED naming why): the control plane
// discards the instance, and the runner never starts.
package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// KeyNotPinnedDetail starts the detail of a UD_REG_FAILED the agent reports when its key was not
// pinned (none within PinWait, or another one).
const KeyNotPinnedDetail = "the agent's key is not pinned in its instance record"

// maxPinLook caps the back-off between two reads of the record while the agent waits for its pin.
const maxPinLook = time.Second

// publicKey is the agent's public key as the record pins it (base64).
func publicKey(key ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
}

// keyPinned reports whether rec, the record the agent just read, pins the agent's own key. While it
// pins none it sets the next look (back-off from RetryInterval up to maxPinLook) and reports false;
// another key, or none once PinWait has passed since the first look, gives the registration of
// rec's run up.
func (a *agent) keyPinned(ctx context.Context, rec store.Instance) bool {
	var detail string
	switch now := a.cfg.Now(); rec.AgentKey {
	case publicKey(a.key):
		if a.pinSince.IsZero() {
			return true
		}
		a.log.Info("agent: key pinned", "run", rec.RunID, "waited", now.Sub(a.pinSince))
		a.pinSince, a.pinLooks = time.Time{}, 0
		return true
	case "":
		if a.pinSince.IsZero() {
			a.pinSince = now
			a.log.Info("agent: waiting for the control plane to pin the key before starting the runner", "run", rec.RunID)
		}
		if waited := now.Sub(a.pinSince); waited < a.cfg.PinWait {
			a.pinLooks++
			a.retryAt = now.Add(min(a.cfg.RetryInterval<<min(a.pinLooks-1, 6), maxPinLook))
			return false
		}
		detail = fmt.Sprintf("%s: none pinned within %s", KeyNotPinnedDetail, a.cfg.PinWait)
	default:
		detail = fmt.Sprintf("%s: the record pins another key (%s)", KeyNotPinnedDetail, rec.AgentKey)
	}
	a.pinSince, a.pinLooks = time.Time{}, 0
	a.log.Error("agent: not starting the runner", "run", rec.RunID, "reason", detail)
	a.giveUpRegistration(ctx, rec.RunID, detail)
	return false
}
