// Package tags names the EC2 tags runnerpool puts on the instances it launches. Destructive sweeps
// (the orphan sweep, warm-pool scale-in) only ever touch instances carrying this deployment's
// Deployment tag: never anything else in the account.
package tags

const (
	// Deployment identifies the runnerpool deployment that launched the instance.
	Deployment = "runnerpool:deployment"
	// RunnerClass is the runner class the instance was launched for.
	RunnerClass = "runnerpool:runner-class"
	// Pool is the warm pool the instance belongs to, if any.
	Pool = "runnerpool:pool"
	// SpecHash is the hash of runner class, image and pool config the instance was launched with.
	SpecHash = "runnerpool:spec-hash"
	// RunID is the run the instance was created for, if it was created by a provision.
	RunID = "runnerpool:run-id"
	// Name is the usual EC2 Name tag.
	Name = "Name"
)
