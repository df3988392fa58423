// The start-up check of the GitHub credential: every permission it lacks for the configured scopes is
// logged by name (internal/ghaccess CheckPermissions; docs/guides/github-credentials.md lists what
// each call needs), so a missing one shows at deployment, not as the first refused registration.
package service

import (
	"context"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// permissionChecker is the part of the GitHub client the check uses.
type permissionChecker interface {
	CheckPermissions(ctx context.Context) ([]ghaccess.Missing, error)
}

// checkGitHubPermissions runs the check once, within a minute; it never stops the service (GitHub may
// be briefly unreachable, and what works keeps working).
func (s *Service) checkGitHubPermissions(ctx context.Context, gh permissionChecker) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	missing, err := gh.CheckPermissions(ctx)
	if err != nil {
		s.log.Warn("github: the credential's permissions could not be checked", "error", err)
		return
	}
	for _, m := range missing {
		s.log.Error("github: the credential lacks a permission runnerpool needs", "scope", m.Scope,
			"permission", m.Permission, "want", m.Want, "have", m.Have, "problem", m.String())
	}
	if len(missing) == 0 {
		s.log.Info("github: the credential has every permission the configured scopes need")
	}
}
