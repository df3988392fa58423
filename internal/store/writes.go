package store

import "github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"

// The store's conditional writes, each named once (internal/condwrite): the request of each
// carries its name on the context, so a fault that loses their answers can tell which it hit.
var (
	writeInstanceCreate      = condwrite.Declare("instance create")
	writeInstanceTransition  = condwrite.Declare("instance transition")
	writeInstanceOfRun       = condwrite.Declare("instance transition of a run")
	writeInstanceNoRun       = condwrite.Declare("instance transition without a run")
	writeInstanceClaim       = condwrite.Declare("instance claim")
	writeInstanceClaimPooled = condwrite.Declare("instance claim pooled")
	writeInstanceMarkExpired = condwrite.Declare("instance terminating past threshold")
	writeInstanceMarkPooled  = condwrite.Declare("instance mark pooled")
	writeInstanceExpire      = condwrite.Declare("instance expire")
	writeAgentKeyPin         = condwrite.Declare("instance pin agent key")
	writeCredentialTake      = condwrite.Declare("credential take")
	writeRunCreate           = condwrite.Declare("run create")
	writeRunUpdate           = condwrite.Declare("run update")
	writeRunRenew            = condwrite.Declare("run renew")
	writeOnce                = condwrite.Declare("once mark")
	writeLeaseAcquire        = condwrite.Declare("lease acquire")
	writeLeaseRelease        = condwrite.Declare("lease release")
	writeConfigCreate        = condwrite.Declare("config create")
	writeConfigUpdate        = condwrite.Declare("config update")
)

// transitionWrite names a transition by the condition it carries.
func transitionWrite(c Change) condwrite.Name {
	claim := c.RequireNoRun && c.SetRunID != nil && *c.SetRunID != ""
	switch {
	case claim && c.RequirePooled:
		return writeInstanceClaimPooled
	case claim:
		return writeInstanceClaim
	case c.RequireNoRun:
		return writeInstanceNoRun
	case !c.ExpiredAt.IsZero():
		return writeInstanceMarkExpired
	case c.RunID != "":
		return writeInstanceOfRun
	}
	return writeInstanceTransition
}
