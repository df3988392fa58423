// Quotas: the deployment's instance cap and the per-repository limit on concurrent runners (package
// internal/quota enforces them). A limit that is set must be positive; an override must name an
// allowed repository. A runner class's own share is its max_instances (runner classes file, or the
// Terraform provider's runnerpool_runner_class).
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Quotas are the limits of `runnerpool serve`. Zero means no limit.
type Quotas struct {
	// MaxInstances caps the deployment's instances: warm, idle, running, being created.
	MaxInstances int
	// MaxRunnersPerRepository bounds the runners one repository's runs hold at once.
	MaxRunnersPerRepository int
	// RepositoryOverrides replace MaxRunnersPerRepository for some repositories (owner/repo,
	// lower-cased).
	RepositoryOverrides map[string]int
}

// RepositoryLimit is the limit on a repository's concurrent runners (0: none).
func (q Quotas) RepositoryLimit(repository string) int {
	if n, ok := q.RepositoryOverrides[strings.ToLower(repository)]; ok {
		return n
	}
	return q.MaxRunnersPerRepository
}

// RepositoryLimits reports whether any repository is limited.
func (q Quotas) RepositoryLimits() bool {
	return q.MaxRunnersPerRepository > 0 || len(q.RepositoryOverrides) > 0
}

var quotaSettings = []setting{
	{flag: "max-instances", env: "RUNNERPOOL_MAX_INSTANCES",
		doc: "Cap on the deployment's instances (warm, idle, running and being created). A provision that would create past it is refused (429 `quota_exceeded`), and warm-pool convergence creates no further. Must be at least the sum of the warm pools' largest targets. Empty: no cap. Each runner class may also cap its own share (`max_instances`).",
		set: func(c *Config, v string) error {
			n, err := positive(v)
			c.Quotas.MaxInstances = n
			return err
		}},
	{flag: "max-runners-per-repository", env: "RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY",
		doc: "Limit on the runners one repository's runs hold at once (from provision to release; a runner released to the pool no longer counts). A provision past it is refused (429 `quota_exceeded`) and nothing is provisioned. Empty: no limit.",
		set: func(c *Config, v string) error {
			n, err := positive(v)
			c.Quotas.MaxRunnersPerRepository = n
			return err
		}},
	{flag: "max-runners-per-repository-overrides", env: "RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY_OVERRIDES",
		doc: "Per-repository limits replacing `--max-runners-per-repository`: comma-separated `owner/repo=N`, e.g. `acme/monorepo=40,acme/docs=2`. Each repository must be allowed (`--allowed-repositories`, itself or its owner).",
		set: func(c *Config, v string) error {
			o, err := parseOverrides(v)
			c.Quotas.RepositoryOverrides = o
			return err
		}},
}

// positive parses an optional limit: empty is 0 (none); otherwise a positive integer.
func positive(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive number (leave it empty for no limit)", v)
	}
	return n, nil
}

func parseOverrides(v string) (map[string]int, error) {
	var out map[string]int
	var errs []error
	for _, e := range splitList(v) {
		repo, limit, ok := strings.Cut(e, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%q: want owner/repo=N", e))
			continue
		}
		if err := checkScope(repo); err != nil || !strings.Contains(repo, "/") {
			errs = append(errs, fmt.Errorf("%q: want a repository, owner/repo", repo))
			continue
		}
		n, err := positive(limit)
		if err == nil && n == 0 {
			err = fmt.Errorf("%q: want a positive number", limit)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", repo, err))
			continue
		}
		repo = strings.ToLower(repo)
		if _, dup := out[repo]; dup {
			errs = append(errs, fmt.Errorf("%s: given twice", repo))
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[repo] = n
	}
	return out, errors.Join(errs...)
}

// validateQuotas checks the quotas against the rest: an override must name a repository the
// deployment allows (an unknown one is a typo that would leave the intended repository unlimited),
// and a runner class's cap may not exceed the deployment's.
func (c Config) validateQuotas() error {
	var errs []error
	for repo := range c.Quotas.RepositoryOverrides {
		if !c.allows(repo) {
			errs = append(errs, fmt.Errorf("max-runners-per-repository-overrides: %s is not an allowed repository (--allowed-repositories)", repo))
		}
	}
	for name, rc := range c.Classes.RunnerClasses {
		if rc.MaxInstances != nil && c.Quotas.MaxInstances > 0 && *rc.MaxInstances > c.Quotas.MaxInstances {
			errs = append(errs, fmt.Errorf("runner class %s: max_instances %d exceeds max-instances %d", name, *rc.MaxInstances, c.Quotas.MaxInstances))
		}
	}
	return errors.Join(errs...)
}

// allows reports whether a repository (owner/repo, lower-case) is in the allow-list, itself or
// through its owner.
func (c Config) allows(repo string) bool {
	owner, _, _ := strings.Cut(repo, "/")
	for _, a := range c.Allowed {
		if a == repo || a == owner {
			return true
		}
	}
	return false
}
