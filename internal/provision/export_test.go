package provision

import "github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"

// InstanceTypesOf exposes Request.instanceTypes to the external tests.
func InstanceTypesOf(r Request, rc runnerclass.Resolved) (types, outside []string) {
	return r.instanceTypes(rc)
}
