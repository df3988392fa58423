// The tags every launched instance carries: written once here, for provisions, warm-pool
// convergence and warm-pool cold starts alike.

package fleet

import (
	"maps"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
)

// LaunchTags are runnerpool's own tags of one launch (see package tags). An empty field puts no
// tag.
type LaunchTags struct {
	Deployment  string
	RunnerClass string
	Pool        string
	SpecHash    string
	RunID       string
	// Name is the EC2 Name tag, put only when the runner class's own tags set none.
	Name string
}

// Tagged returns a copy of spec whose Tags are the runner class's own tags with t's on top: a
// class tag never overrides runnerpool's (the orphan sweep and scale-in trust them), except Name,
// which is the class's to choose. spec's map is not modified.
func (spec LaunchSpec) Tagged(t LaunchTags) LaunchSpec {
	out := spec
	out.Tags = maps.Clone(spec.Tags)
	if out.Tags == nil {
		out.Tags = map[string]string{}
	}
	for k, v := range map[string]string{
		tags.Deployment: t.Deployment, tags.RunnerClass: t.RunnerClass, tags.Pool: t.Pool,
		tags.SpecHash: t.SpecHash, tags.RunID: t.RunID,
	} {
		if v != "" {
			out.Tags[k] = v
		}
	}
	if _, ok := out.Tags[tags.Name]; !ok && t.Name != "" {
		out.Tags[tags.Name] = t.Name
	}
	return out
}
