// The repository's default branch, which the runner cache's scope needs (docs/cache.md): a run on
// any branch restores the default branch's caches (GitHub's "Restrictions for accessing a cache",
// https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/caching-dependencies-to-speed-up-workflows#restrictions-for-accessing-a-cache),
// and the OIDC token the provision verifies carries no claim for it. GET /repos/{owner}/{repo}
// answers it as default_branch ("Get a repository",
// https://docs.github.com/en/rest/repos/repos#get-a-repository; "Metadata" read, which every App
// installation has). Answers are kept for DefaultBranchTTL, so a repository costs one call per TTL
// however many cache requests its runs make, and a renamed default branch is seen within it.
package ghaccess

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
)

type branchEntry struct {
	branch  string
	expires time.Time
}

// DefaultBranch returns the default branch ("main") of repository ("owner/name"), from GitHub or
// from an answer younger than Config.DefaultBranchTTL.
func (c *Client) DefaultBranch(ctx context.Context, repository string) (string, error) {
	owner, repo, err := ParseScope(repository)
	if err != nil {
		return "", err
	}
	if repo == "" {
		return "", fmt.Errorf("default branch: %q is not a repository", repository)
	}
	key := strings.ToLower(repository)
	c.mu.Lock()
	e, ok := c.branches[key]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return e.branch, nil
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return "", err
	}
	var branch string
	err = c.call(ctx, owner, "get repository "+repository, func() (*github.Response, error) {
		r, resp, err := gc.Repositories.Get(ctx, owner, repo)
		branch = r.GetDefaultBranch()
		return resp, err
	})
	if err != nil {
		return "", err
	}
	if branch == "" {
		return "", fmt.Errorf("github get repository %s: no default_branch in the answer", repository)
	}
	c.mu.Lock()
	if len(c.branches) >= maxBranchEntries {
		clear(c.branches) // bounded: a deployment has far fewer repositories; start over rather than grow
	}
	c.branches[key] = branchEntry{branch: branch, expires: c.now().Add(c.cfg.DefaultBranchTTL)}
	c.mu.Unlock()
	return branch, nil
}

// maxBranchEntries bounds the default branch cache.
const maxBranchEntries = 10000
