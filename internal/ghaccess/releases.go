// releases.go: GitHub's public releases of actions/runner, GET /repos/actions/runner/releases
// (https://docs.github.com/en/rest/releases/releases#list-releases: "Information about published
// releases are available to everyone"; it takes installation tokens and fine-grained or classic
// PATs, and "can be used without authentication or the aforementioned permissions if only public
// resources are requested"). Unlike the "list runner applications" endpoints (downloads.go) each
// release carries its real published_at, the start of GitHub's 30-day window. The checksums come
// from each asset's digest ("sha256:<hex>", https://github.blog/changelog/2025-06-03-releases-now-
// expose-digests-for-release-assets/) or, failing that, from the release notes' lines
// "<!-- BEGIN SHA linux-x64 -->HEX<!-- END SHA linux-x64 -->" (actions/runner releaseNote.md).
package ghaccess

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// RunnerReleasesPath is the public list of runner releases, relative to the API base.
const RunnerReleasesPath = "repos/actions/runner/releases"

// releaseJSON is the part of GitHub's "release" schema read here.
type releaseJSON struct {
	TagName     string     `json:"tag_name"`
	Draft       bool       `json:"draft"`
	Prerelease  bool       `json:"prerelease"`
	PublishedAt *time.Time `json:"published_at"`
	Body        string     `json:"body"`
	Assets      []struct {
		Name               string `json:"name"`
		BrowserDownloadURL string `json:"browser_download_url"`
		Digest             string `json:"digest"`
	} `json:"assets"`
}

// PublishedRunnerReleases reads the newest page of actions/runner's public releases with the
// credential of scope (any configured scope: the repository is public) and returns the published,
// non-prerelease ones with their publication time and the Linux downloads their assets and notes
// give (a release whose files or checksums are not all there is returned without them: its date
// still counts).
func (c *Client) PublishedRunnerReleases(ctx context.Context, scope string) ([]runnerversion.Release, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return nil, err
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	var page []releaseJSON
	err = c.call(ctx, owner, "list the releases of actions/runner", func() (*github.Response, error) {
		req, err := gc.NewRequest(http.MethodGet, RunnerReleasesPath+"?per_page=30", nil)
		if err != nil {
			return nil, err
		}
		page = nil
		resp, err := gc.Do(ctx, req, &page)
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			// No actions/runner here (a GitHub Enterprise Server): not the owner's installation
			// gone, which a 404 means to call.
			return nil, err
		}
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	var out []runnerversion.Release
	for _, r := range page {
		if r.Draft || r.Prerelease || r.PublishedAt == nil {
			continue
		}
		v, err := runnerversion.Parse(r.TagName)
		if err != nil {
			continue
		}
		rel := runnerversion.Release{Version: v.String(), Published: r.PublishedAt.UTC(), Linux: map[runnerversion.Arch]runnerversion.Download{}}
		for _, a := range runnerversion.Arches {
			if d, ok := downloadOf(r, rel.Version, a); ok {
				rel.Linux[a] = d
			}
		}
		out = append(out, rel)
	}
	return out, nil
}

var hex64Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// downloadOf is the Linux file of version for arch in a release: its asset's https URL and the
// SHA-256 of its digest, else of the notes' marker.
func downloadOf(r releaseJSON, version string, arch runnerversion.Arch) (runnerversion.Download, bool) {
	name := fmt.Sprintf("actions-runner-linux-%s-%s.tar.gz", arch, version)
	for _, a := range r.Assets {
		if a.Name != name {
			continue
		}
		if u, err := url.Parse(a.BrowserDownloadURL); err != nil || u.Scheme != "https" || u.Host == "" {
			return runnerversion.Download{}, false
		}
		sum := strings.ToLower(strings.TrimPrefix(a.Digest, "sha256:"))
		if !hex64Re.MatchString(sum) {
			sum = noteChecksum(r.Body, arch)
		}
		if sum == "" {
			return runnerversion.Download{}, false
		}
		return runnerversion.Download{URL: a.BrowserDownloadURL, Filename: name, SHA256: sum}, true
	}
	return runnerversion.Download{}, false
}

// noteChecksum reads "<!-- BEGIN SHA linux-ARCH -->HEX<!-- END SHA linux-ARCH -->" from notes.
func noteChecksum(notes string, arch runnerversion.Arch) string {
	begin, end := "<!-- BEGIN SHA linux-"+string(arch)+" -->", "<!-- END SHA linux-"+string(arch)+" -->"
	_, rest, ok := strings.Cut(notes, begin)
	if !ok {
		return ""
	}
	sum, _, ok := strings.Cut(rest, end)
	if sum = strings.ToLower(strings.TrimSpace(sum)); !ok || !hex64Re.MatchString(sum) {
		return ""
	}
	return sum
}
