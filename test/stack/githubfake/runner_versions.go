// This file models GitHub's runner version policy and serves the "list runner applications" endpoints.
//
// GitHub's policy, enforced on github.com since 2026-09-25 (https://github.com/orgs/community/
// discussions/194762): a runner below 2.329.0 cannot be configured or (re)registered (this fake: its
// registration, by token or JIT configuration, is refused); a runner must install each new release
// within 30 days of its publication to keep receiving jobs, and a critical security release can stop
// assignment to older runners at once (this fake: NextJob answers the broker's RunnerVersionTooOld).
// The rules themselves are runnerversion.CheckFloor and runnerversion.Assignable, on the fake's clock.
//
// The refusal is the broker's error: errorKind "RunnerVersionTooOld" (actions/runner
// src/Sdk/RSWebApi/Contracts/BrokerErrorKind.cs), which the runner raises as an AccessDeniedException
// (src/Sdk/WebApi/WebApi/BrokerHttpClient.cs), hence 403, with the message runners print,
// "Runner version v2.296.2 is deprecated and cannot receive messages." (actions/runner#2246).
//
// The release list starts with runnerversion.Default, as published long ago; PublishRunnerRelease adds one, with a
// publication time on the fake's clock. The downloads endpoints answer the newest release published.
//
// Who may read a release (GitHub's REST reference, "Self-hosted runners" and "Releases" pages):
//   - GET /repos/{owner}/{repo}/actions/runners/downloads: "Administration" repository permission
//     (read), classic scope repo; GET /orgs/{org}/actions/runners/downloads: "Self-hosted runners"
//     organization permission (read), classic scope admin:org. An installation lacking it gets 403
//     "Resource not accessible by integration" (permissions.go).
//   - GET /repos/actions/runner/releases (https://docs.github.com/en/rest/releases/releases#list-
//     releases): public, "available to everyone", with any token or none; each release has tag_name,
//     draft, prerelease, published_at, body and assets (name, browser_download_url, digest
//     "sha256:..."). Newest first, 30 a page. SetPublicReleases(false) answers 404, as a GitHub
//     Enterprise Server without actions/runner does.

package githubfake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// ErrorKindRunnerVersionTooOld is the broker's errorKind of a runner GitHub refuses for its version.
const ErrorKindRunnerVersionTooOld = "RunnerVersionTooOld"

func (s *Server) runnerVersionRoutes() {
	s.handle("GET /orgs/{org}/actions/runners/downloads", authToken, s.listRunnerDownloads)
	s.handle("GET /repos/{owner}/{repo}/actions/runners/downloads", authToken, s.listRunnerDownloads)
	s.handle("GET /repos/actions/runner/releases", authPublic, s.listPublicReleases)
}

// SetPublicReleases makes actions/runner's public releases readable (the default) or not (404).
func (s *Server) SetPublicReleases(available bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publicReleasesOff = !available
}

// releaseJSON is the part of GitHub's "release" schema the fake answers.
type releaseJSON struct {
	TagName     string      `json:"tag_name"`
	Name        string      `json:"name"`
	Draft       bool        `json:"draft"`
	Prerelease  bool        `json:"prerelease"`
	PublishedAt time.Time   `json:"published_at"`
	Body        string      `json:"body"`
	Assets      []assetJSON `json:"assets"`
}

type assetJSON struct {
	Name               string `json:"name"`
	BrowserDownloadURL string `json:"browser_download_url"`
	Digest             string `json:"digest"`
}

// longAgo is when the fake says the first release (runnerversion.Default, whatever the fake clock)
// was published.
var longAgo = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// listPublicReleases answers actions/runner's releases published by now, newest first: public, so
// no credential is needed, but one given must be valid (GitHub answers 401 to a bad one).
func (s *Server) listPublicReleases(w http.ResponseWriter, _ *http.Request, _ *caller) {
	s.mu.Lock()
	off, now, rels := s.publicReleasesOff, s.now(), slices.Clone(s.releasesLocked())
	s.mu.Unlock()
	if off {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	out := []releaseJSON{}
	for i := len(rels) - 1; i >= 0 && len(out) < 30; i-- {
		rel := rels[i]
		if rel.Published.After(now) {
			continue
		}
		at := rel.Published
		if at.IsZero() {
			at = longAgo
		}
		rj := releaseJSON{TagName: "v" + rel.Version, Name: "v" + rel.Version, PublishedAt: at.UTC().Truncate(time.Second)}
		rj.Body = "## SHA-256 Checksums\n\nThe SHA-256 checksums for the packages included in this build are shown below:\n\n"
		for _, a := range runnerversion.Arches {
			d := rel.Linux[a]
			rj.Assets = append(rj.Assets, assetJSON{Name: d.Filename, BrowserDownloadURL: d.URL, Digest: "sha256:" + d.SHA256})
			rj.Body += fmt.Sprintf("- %s <!-- BEGIN SHA linux-%s -->%s<!-- END SHA linux-%s -->\n", d.Filename, a, d.SHA256, a)
		}
		out = append(out, rj)
	}
	writeJSON(w, http.StatusOK, out)
}

// FakeRunnerSHA256 is the checksum the fake publishes for a release file it makes up: the SHA-256 of
// FakeRunnerArchive(version, arch).
func FakeRunnerSHA256(version string, arch runnerversion.Arch) string {
	sum := sha256.Sum256(FakeRunnerArchive(version, arch))
	return hex.EncodeToString(sum[:])
}

// FakeRunnerArchive is the content of a release file the fake makes up.
func FakeRunnerArchive(version string, arch runnerversion.Arch) []byte {
	return []byte(fmt.Sprintf("githubfake actions-runner-linux-%s-%s\n", arch, version))
}

// PublishRunnerRelease publishes a runner release: from now on (or from r.Published, when set) it is
// the newest release if its version is, and older runners have 30 days to install it, none if
// r.Security. Downloads not given are made up (FakeRunnerSHA256). A version that does not parse panics.
func (s *Server) PublishRunnerRelease(r runnerversion.Release) runnerversion.Release {
	runnerversion.MustParse(r.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Published.IsZero() {
		r.Published = s.now().UTC()
	}
	linux := map[runnerversion.Arch]runnerversion.Download{}
	for _, a := range runnerversion.Arches {
		linux[a] = runnerversion.FileOf(r.Version, a, FakeRunnerSHA256(r.Version, a))
		if d, ok := r.Linux[a]; ok {
			linux[a] = d
		}
	}
	r.Linux = linux
	s.releases = append(s.releasesLocked(), r)
	s.broadcastLocked()
	return r
}

// RunnerReleases returns the releases published, in publication order.
func (s *Server) RunnerReleases() []runnerversion.Release {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.releasesLocked())
}

// CurrentRunnerRelease is the newest release published by now: what the downloads endpoints answer.
func (s *Server) CurrentRunnerRelease() runnerversion.Release {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.currentReleaseLocked()
}

func (s *Server) releasesLocked() []runnerversion.Release {
	if s.releases == nil {
		// The compiled-in release, published before any fake clock starts (tests start theirs in 2025).
		first := runnerversion.Default
		first.Published = time.Time{}
		s.releases = []runnerversion.Release{first}
	}
	return s.releases
}

func (s *Server) currentReleaseLocked() runnerversion.Release {
	now := s.now()
	var cur runnerversion.Release
	for _, r := range s.releasesLocked() {
		if r.Published.After(now) {
			continue
		}
		if cur.Version == "" || runnerversion.MustParse(cur.Version).Less(runnerversion.MustParse(r.Version)) {
			cur = r
		}
	}
	return cur
}

// runnerApplicationJSON is GitHub's "runner-application" schema.
type runnerApplicationJSON struct {
	OS             string `json:"os"`
	Architecture   string `json:"architecture"`
	DownloadURL    string `json:"download_url"`
	Filename       string `json:"filename"`
	SHA256Checksum string `json:"sha256_checksum,omitempty"`
}

func (s *Server) listRunnerDownloads(w http.ResponseWriter, r *http.Request, c *caller) {
	if c != nil && c.pat && r.PathValue("org") != "" && !s.patHasScope("admin:org", "manage_runners:org") {
		// "OAuth app tokens and personal access tokens (classic) need the admin:org scope to use
		// this endpoint" (List runner applications for an organization).
		w.Header().Set("X-Accepted-OAuth-Scopes", "admin:org, manage_runners:org")
		writeError(w, http.StatusForbidden, "Resource not accessible by personal access token")
		return
	}
	s.mu.Lock()
	s.displayScopeLocked(pathScope(r))
	cur := s.currentReleaseLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, downloadsOf(cur))
}

// downloadsOf is a downloads endpoint's answer for release cur.
func downloadsOf(cur runnerversion.Release) []runnerApplicationJSON {
	out := []runnerApplicationJSON{}
	for _, a := range runnerversion.Arches {
		d := cur.Linux[a]
		out = append(out, runnerApplicationJSON{OS: "linux", Architecture: string(a), DownloadURL: d.URL, Filename: d.Filename, SHA256Checksum: d.SHA256})
	}
	return out
}

// VersionRefusals is how many registrations and job polls the fake refused for the runner's version.
func (s *Server) VersionRefusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versionRefusals
}

// admitVersionLocked refuses the registration of a runner below the floor (answering it) and fills in
// an empty version with the current release's.
func (s *Server) admitVersionLocked(w http.ResponseWriter, req *registerRequest) bool {
	if req.Version == "" {
		req.Version = s.currentReleaseLocked().Version
	}
	if _, err := runnerversion.CheckFloor(req.Version); err != nil {
		s.versionRefusals++
		writeVersionError(w, fmt.Errorf("%w: %w", runnerversion.ErrTooOld, err))
		return false
	}
	return true
}

// assignableLocked is GitHub's decision whether to assign jobs to rr, on the fake's clock.
func (s *Server) assignableLocked(rr *runnerRec) error {
	if rr.version == "" {
		return nil // a runner of the scale-set protocol (actions.go), which carries no version here
	}
	err := runnerversion.Assignable(rr.version, s.releasesLocked(), s.now())
	if err != nil {
		s.versionRefusals++
	}
	return err
}

// writeVersionError answers the broker's RunnerVersionTooOld.
func writeVersionError(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusForbidden, apiError{Message: err.Error(), DocumentationURL: "https://docs.github.com/rest", Status: "403", ErrorKind: ErrorKindRunnerVersionTooOld})
}
