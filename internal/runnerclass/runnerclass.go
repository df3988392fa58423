// Package runnerclass is a runner class as this deployment launches it: the class as declared
// (declared.RunnerClass, the one runner class type, whether it came from a configuration item the
// Terraform provider wrote or from the reconciler's runner classes file) with what the deployment
// resolved for it: its pool queue, the launch template version that launches what it declares and
// the Actions runner version that version installs. Step-driven provisions and warm pools launch
// from the same Resolved, made by the same Resolve.
package runnerclass

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// Resolved is a runner class ready to launch from.
type Resolved struct {
	declared.RunnerClass
	// Queue is the pool queue at the class's QueueURL (nil: none).
	Queue *pool.Queue
	// TemplateVersion is the version of the class's launch template CreateFleet launches.
	TemplateVersion string
	// RunnerVersion is the Actions runner version TemplateVersion installs ("" when unknown),
	// recorded on every instance created.
	RunnerVersion string
	// BootExtra is how much longer than the deployment's registration wait the class's new
	// instances may take to boot and register (launchtemplate.Versions.BootExtra: an image that
	// installs packages at boot, or the class's own registration_wait). Every deadline that holds a
	// boot grows by it: a provision's registration wait, created threshold and time limit, a pool
	// job's cold start, a warm pool's warm-up.
	BootExtra time.Duration
}

// Launch is where the class's instances are launched: its launch template version, subnets and
// tags (callers add the tags of the instance's purpose with fleet.LaunchSpec.Tagged).
func (r Resolved) Launch() fleet.LaunchSpec {
	return fleet.LaunchSpec{
		LaunchTemplateID: r.LaunchTemplateID, LaunchTemplateVersion: r.TemplateVersion,
		Subnets: slices.Clone(r.Subnets), Tags: maps.Clone(r.Tags),
	}
}

// Versions finds or makes the launch template version of a runner class's spec;
// *launchtemplate.Versions satisfies it. When it also says which runner version a launch template
// version installs (Runner), Resolve records it.
type Versions interface {
	For(ctx context.Context, rc declared.RunnerClass) (string, error)
}

// ErrNoLaunchTemplate marks a class without a launch template: the fleet request carries instance
// requirements and subnets only, so there is nothing to launch from.
var ErrNoLaunchTemplate = errors.New("it has no launch_template_id: instances launch from a launch template")

// Resolve readies a class of the state table: its launch template version (the class's image,
// volume, security groups, instance profile and pre-runner script are in its own version of its
// launch template), the runner version that installs, and its pool queue when queue is given and
// the class has one. Its job access is recorded spelled out ("" is unknown to refresh). A class
// this version cannot launch, or one EC2 refuses, is an error saying why.
func Resolve(ctx context.Context, rc declared.RunnerClass, v Versions, queue func(url string) *pool.Queue) (Resolved, error) {
	if rc.LaunchTemplateID == "" {
		return Resolved{}, ErrNoLaunchTemplate
	}
	if err := rc.Unsupported(); err != nil {
		return Resolved{}, err
	}
	if v == nil {
		return Resolved{}, fmt.Errorf("no launch template versions to launch runner class %q from", rc.Name)
	}
	version, err := v.For(ctx, rc)
	if err != nil {
		return Resolved{}, err
	}
	r := Resolved{RunnerClass: rc, TemplateVersion: version}
	r.Subnets, r.Tags = slices.Clone(rc.Subnets), maps.Clone(rc.Tags)
	r.InstanceTypes, r.Labels = slices.Clone(rc.InstanceTypes), slices.Clone(rc.Labels)
	r.JobAccess = declared.NormalJobAccess(rc.JobAccess)
	if rv, ok := v.(interface {
		Runner(rc declared.RunnerClass, n string) string
	}); ok {
		r.RunnerVersion = rv.Runner(rc, version)
	}
	if be, ok := v.(interface {
		BootExtra(ctx context.Context, rc declared.RunnerClass, n string) time.Duration
	}); ok {
		r.BootExtra = be.BootExtra(ctx, rc, version)
	}
	if queue != nil && rc.QueueURL != "" {
		r.Queue = queue(rc.QueueURL)
	}
	return r, nil
}
