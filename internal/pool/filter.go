// The pickup manager's in-memory filter: which pool messages fit a workflow's compute request. It
// reads only the message, never the table or AWS, so filtering costs no round trip.
package pool

import (
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
)

// Filter is a workflow's compute request as the pool sees it. A zero field places no constraint.
type Filter struct {
	// UsageClass is "spot" or "on-demand"; empty accepts both.
	UsageClass string
	// InstanceTypes are allowed-instance-types patterns (internal/instancetype syntax, e.g. "c6i.*");
	// empty accepts every type.
	InstanceTypes []string
	// MinCPU and MinMemoryMiB are lower bounds on the message's vCPUs and memory.
	MinCPU, MinMemoryMiB int
	// ResourceClass, when set, must equal the message's resource class.
	ResourceClass string
	// Scope is the repository ("owner/repo"), its untrusted scope (RunScope) or the owner the
	// runners are for. When set, a message
	// matches if its scope is the same, or is the owner of that repository (an organisation
	// instance may serve its repositories). A message without a scope never matches a scoped
	// request: an instance of unknown provenance must not cross a trust boundary.
	Scope string
}

// Matches reports whether the message fits the request.
func (f Filter) Matches(m Message) bool {
	if f.UsageClass != "" && m.UsageClass != f.UsageClass {
		return false
	}
	if !instancetype.MatchAny(f.InstanceTypes, m.InstanceType) {
		return false
	}
	if m.CPU < f.MinCPU || m.MemoryMiB < f.MinMemoryMiB {
		return false
	}
	if f.ResourceClass != "" && m.ResourceClass != f.ResourceClass {
		return false
	}
	return f.Scope == "" || ScopeCovers(m.Scope, f.Scope)
}

// ScopeCovers reports whether an instance of scope have may serve a request of scope want. GitHub
// owner and repository names are case-insensitive. A repository's scope and its untrusted scope
// (trust.go) are two scopes: neither covers the other. An owner's covers both (its instances are
// hot warm-pool ones, which ran no job).
func ScopeCovers(have, want string) bool {
	if have == "" || want == "" {
		return false
	}
	if strings.EqualFold(have, want) {
		return true
	}
	owner, _, isRepo := strings.Cut(want, "/")
	return isRepo && !strings.ContainsAny(have, "/:") && strings.EqualFold(have, owner)
}

// CoveringScopes are the scopes of the instances that may serve a request of scope want (see
// ScopeCovers): the scope itself and, for a repository (or its untrusted scope), its owner.
func CoveringScopes(want string) []string {
	if want == "" {
		return nil
	}
	if owner, _, isRepo := strings.Cut(want, "/"); isRepo {
		return []string{want, owner}
	}
	return []string{want}
}
