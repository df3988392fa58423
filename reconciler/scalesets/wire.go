// How a replica's listeners are wired: the composition root (internal/controlplane, Warm.ScaleSets)
// calls Listeners' constructor over the control plane's pool job queue, so the service, the sandbox
// and the bench build their listeners the one way `runnerpool serve` does. The scale set clients are
// made here from the control plane's GitHub client (its registration tokens are the scale set API's
// credential), not by each caller.
package scalesets

import (
	"cmp"
	"context"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
)

// GitHub is the part of the control plane's GitHub client the listeners use beside the scale set
// API: registration tokens, which the scale set client trades for its admin token, and runner
// listings, which tell the jobs whose completion never came (done.go); *ghaccess.Client satisfies it.
type GitHub interface {
	RegistrationToken(ctx context.Context, scope string) (ghaccess.RunnerToken, error)
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
}

// DefaultAPIURL is GitHub's REST API, where Config.APIURL is empty.
const DefaultAPIURL = "https://api.github.com/"

// Listeners returns the composition root's constructor of a replica's listeners
// (controlplane.Warm.ScaleSets): a Manager of cfg over the control plane's pool job queue (unless
// cfg.Jobs names another: a test's lossy queue), handed to made, whose caller runs it.
func Listeners(cfg Config, made func(*Manager)) func(*pooljob.JobQueue) (pooljob.ScaleSetRunners, error) {
	return func(jobs *pooljob.JobQueue) (pooljob.ScaleSetRunners, error) {
		if cfg.Jobs == nil {
			cfg.Jobs = jobs
		}
		m, err := New(cfg)
		if err != nil {
			return nil, err
		}
		if made != nil {
			made(m)
		}
		return m, nil
	}
}

// clientsOf makes the scale set clients of cfg.GitHub: one per scope, over cfg.APIURL and
// cfg.HTTPClient (default scaleset's, whose timeout outlasts the ~50 s long poll).
func clientsOf(cfg Config) func(scope string) (Client, error) {
	return func(scope string) (Client, error) {
		return scaleset.New(scaleset.Config{
			APIURL: cmp.Or(cfg.APIURL, DefaultAPIURL), HTTPClient: cfg.HTTPClient, Now: cfg.Now, Logger: cfg.Logger.With("scope", scope),
			RegistrationToken: func(ctx context.Context) (string, string, error) {
				rt, err := cfg.GitHub.RegistrationToken(ctx, scope)
				return rt.Token, rt.URL, err
			},
		})
	}
}
