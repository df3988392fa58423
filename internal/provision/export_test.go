package provision

// InstanceTypesOf exposes Request.instanceTypes to the external tests.
func InstanceTypesOf(r Request, rc RunnerClass) (types, outside []string) { return r.instanceTypes(rc) }
