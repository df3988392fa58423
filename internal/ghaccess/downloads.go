// downloads.go: the current Actions runner release, from GitHub's "list runner applications"
// endpoints (GET /orgs/{org}/actions/runners/downloads, GET /repos/{owner}/{repo}/actions/runners/
// downloads): per os and architecture the release file's download_url, filename and sha256_checksum.
// GitHub answers for the scope asked about, so a release rolled out progressively is the one that
// scope's runners must run.
package ghaccess

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// runnerFileRe is the Linux release file name, actions-runner-linux-<arch>-<version>.tar.gz.
var runnerFileRe = regexp.MustCompile(`^actions-runner-linux-(x64|arm64)-([0-9]+\.[0-9]+\.[0-9]+)\.tar\.gz$`)

// RunnerRelease reads the current runner release for scope ("owner" or "owner/repo"): its version and
// its Linux x64 and arm64 downloads. Its Published time is left zero: the endpoints do not say.
func (c *Client) RunnerRelease(ctx context.Context, scope string) (runnerversion.Release, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return runnerversion.Release{}, err
	}
	return c.downloads(ctx, owner, repo, scope, func(gc *github.Client) ([]*github.RunnerApplicationDownload, *github.Response, error) {
		if repo == "" {
			return gc.Actions.ListOrganizationRunnerApplicationDownloads(ctx, owner)
		}
		return gc.Actions.ListRunnerApplicationDownloads(ctx, owner, repo)
	})
}

// ErrClassicPATOnly says a call needs a classic PAT: the configured credential (a GitHub App) cannot
// make it.
var ErrClassicPATOnly = errors.New("only a classic personal access token can call it: GitHub App installation tokens and fine-grained tokens cannot")

// EnterpriseRunnerRelease reads the current runner release from the downloads endpoint of
// enterprise (its slug): GET /enterprises/{enterprise}/actions/runners/downloads, which a classic
// PAT with manage_runners:enterprise may read and nothing else (ErrClassicPATOnly, without a call,
// for a GitHub App).
func (c *Client) EnterpriseRunnerRelease(ctx context.Context, enterprise string) (runnerversion.Release, error) {
	what := "enterprise " + enterprise
	if c.apps != nil {
		return runnerversion.Release{}, fmt.Errorf("runner applications of %s: %w", what, ErrClassicPATOnly)
	}
	return c.downloads(ctx, "", "", what, func(gc *github.Client) ([]*github.RunnerApplicationDownload, *github.Response, error) {
		return gc.Enterprise.ListRunnerApplicationDownloads(ctx, enterprise)
	})
}

// downloads reads one downloads endpoint (list) with owner's credential and the release it answers.
func (c *Client) downloads(ctx context.Context, owner, repo, what string, list func(*github.Client) ([]*github.RunnerApplicationDownload, *github.Response, error)) (runnerversion.Release, error) {
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return runnerversion.Release{}, err
	}
	var apps []*github.RunnerApplicationDownload
	err = c.call(ctx, owner, "list runner applications of "+what, func() (*github.Response, error) {
		var resp *github.Response
		var err error
		apps, resp, err = list(gc)
		return resp, err
	})
	if err != nil {
		return runnerversion.Release{}, err
	}
	rel, err := releaseOf(apps)
	if err != nil {
		return runnerversion.Release{}, fmt.Errorf("runner applications of %s: %w", what, err)
	}
	return rel, nil
}

// releaseOf reads a release from the Linux entries of a downloads answer, which is input from outside:
// each file must be named as GitHub names them, of one version, with an https URL and a SHA-256.
func releaseOf(apps []*github.RunnerApplicationDownload) (runnerversion.Release, error) {
	rel := runnerversion.Release{Linux: map[runnerversion.Arch]runnerversion.Download{}}
	for _, a := range apps {
		if a.GetOS() != "linux" {
			continue
		}
		m := runnerFileRe.FindStringSubmatch(a.GetFilename())
		if m == nil {
			continue // linux/arm (32-bit) and anything else runnerpool does not launch
		}
		arch, version := runnerversion.Arch(m[1]), m[2]
		if rel.Version != "" && rel.Version != version {
			return rel, fmt.Errorf("two versions in one answer: %s and %s", rel.Version, version)
		}
		if u, err := url.Parse(a.GetDownloadURL()); err != nil || u.Scheme != "https" || u.Host == "" {
			return rel, fmt.Errorf("%s: download_url %q is not an https URL", a.GetFilename(), a.GetDownloadURL())
		}
		rel.Version = version
		rel.Linux[arch] = runnerversion.Download{URL: a.GetDownloadURL(), Filename: a.GetFilename(), SHA256: strings.ToLower(a.GetSHA256Checksum())}
	}
	if err := rel.Validate(); err != nil {
		return rel, err
	}
	return rel, nil
}
