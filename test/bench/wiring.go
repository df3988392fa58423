// The bench builds every control plane it measures through the composition root
// (internal/controlplane), as the replicas (reconciler/service) and the sandbox do: nothing measured
// is wired by hand.
package bench

import (
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// wired builds a control plane through the composition root: over the sandbox's table, EC2 and
// SQS clients unless cl names others (GitHub only as given), for the sandbox's deployment and its
// runner classes' queues (h.resolver) unless o says otherwise.
func (h *harness) wired(cl controlplane.Clients, o controlplane.Options) (*controlplane.Components, error) {
	if cl.Store == nil {
		cl.Store = h.sb.Store
	}
	if cl.EC2 == nil {
		cl.EC2 = h.sb.EC2
	}
	if cl.SQS == nil {
		cl.SQS = h.sb.Stack.SQS()
	}
	if o.DeploymentID == "" {
		o.DeploymentID = sandbox.DeploymentID
	}
	if o.Logger == nil {
		o.Logger = h.o.Logger
	}
	if o.Classes == nil {
		resolver := h.resolver()
		o.Classes = func(controlplane.NewProvisioner) (pool.Resolver, error) { return resolver, nil }
	}
	return controlplane.New(cl, o)
}
