// release.go: a runner release (what the "list runner applications" endpoints describe), the release
// compiled in as the default, and the policy decisions made from releases: may GitHub assign jobs to a
// runner (the fake enforces it), is an idle instance's runner due for an upgrade (the reconciler and
// agent act on it).
package runnerversion

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Arch is a CPU architecture in the runner's naming (its release file names and the downloads
// endpoints' "architecture").
type Arch string

const (
	ArchX64   Arch = "x64"
	ArchARM64 Arch = "arm64"
)

// Arches are the Linux architectures runnerpool launches.
var Arches = []Arch{ArchX64, ArchARM64}

// Download is one release file: GitHub's runnerApplication (download_url, filename, sha256_checksum).
type Download struct {
	URL      string `json:"url"`
	Filename string `json:"filename"`
	SHA256   string `json:"sha256"`
}

// Release is a runner release: its version, when GitHub published it (zero when unknown), whether it
// is a critical security release, and its Linux downloads per architecture.
type Release struct {
	Version   string            `json:"version"`
	Published time.Time         `json:"published,omitzero"`
	Security  bool              `json:"security,omitempty"`
	Linux     map[Arch]Download `json:"linux"`
}

// BaseURL is where GitHub publishes runner releases.
const BaseURL = "https://github.com/actions/runner/releases/download"

// Default is the release compiled in: what instances install until the reconciler has read the
// current one from GitHub, and what runnerpool_user_data renders when no version is pinned.
// actions/runner tag v2.336.0 (commit 98aabcd429c4e8402406c56ce2d26387fed3b9ce, 2026-07-20); the
// checksums are those GitHub's release notes and "New self-hosted runner" page publish for it.
var Default = Release{
	Version:   "2.336.0",
	Published: time.Date(2026, 7, 20, 17, 42, 20, 0, time.UTC),
	Linux: map[Arch]Download{
		ArchX64:   FileOf("2.336.0", ArchX64, "04cf0be1aff4c3ec3554466c39124ca250e3effd8873bb7e8d68535aa9505d5d"),
		ArchARM64: FileOf("2.336.0", ArchARM64, "58b758e420b87093fbd4bfddd368074960053e2f1388f01848c82624b90f27d1"),
	},
}

// FileOf is the download of version for arch on github.com, with its checksum.
func FileOf(version string, arch Arch, sha256 string) Download {
	name := fmt.Sprintf("actions-runner-linux-%s-%s.tar.gz", arch, version)
	return Download{URL: fmt.Sprintf("%s/v%s/%s", BaseURL, version, name), Filename: name, SHA256: sha256}
}

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks a release's version (at or above Floor) and that each architecture has a download
// with a URL and a lower-case hexadecimal SHA-256.
func (r Release) Validate() error {
	var errs []error
	if _, err := CheckFloor(r.Version); err != nil {
		errs = append(errs, err)
	}
	for _, a := range Arches {
		d, ok := r.Linux[a]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("runner %s: no linux-%s download", r.Version, a))
		case d.URL == "":
			errs = append(errs, fmt.Errorf("runner %s linux-%s: no download URL", r.Version, a))
		case !sha256Re.MatchString(d.SHA256):
			errs = append(errs, fmt.Errorf("runner %s linux-%s: SHA-256 %q is not 64 lower-case hexadecimal digits", r.Version, a, d.SHA256))
		}
	}
	return errors.Join(errs...)
}

// ErrTooOld is the error of a runner GitHub no longer assigns jobs to.
var ErrTooOld = errors.New("runner version is deprecated")

// Assignable reports whether GitHub assigns jobs to a runner of version installed at now, given every
// release it published (any order): not below Floor, and no newer release published more than
// AssignmentWindow ago, or a security release (community discussion 194762, package comment).
func Assignable(installed string, releases []Release, now time.Time) error {
	v, err := CheckFloor(installed)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTooOld, err)
	}
	for _, r := range releases {
		rv, err := Parse(r.Version)
		if err != nil || !v.Less(rv) || r.Published.After(now) {
			continue
		}
		if r.Security {
			return fmt.Errorf("%w: runner %s is older than security release %s", ErrTooOld, v, rv)
		}
		if now.Sub(r.Published) > AssignmentWindow {
			return fmt.Errorf("%w: runner %s is older than %s, published %s, more than 30 days ago", ErrTooOld, v, rv, r.Published.Format(time.DateOnly))
		}
	}
	return nil
}

// Due reports whether an idle instance running installed must be upgraded (or retired) now, given the
// current release and the operator's lag: it runs an older version than current and current was
// published more than lag ago, or is a security release. A version that does not parse is due.
func Due(installed string, current Release, lag time.Duration, now time.Time) bool {
	v, err := Parse(installed)
	if err != nil {
		return true
	}
	cv, err := Parse(current.Version)
	if err != nil || !v.Less(cv) {
		return false
	}
	if v.Less(MustParse(Floor)) || current.Security {
		return true
	}
	return current.Published.IsZero() || now.Sub(current.Published) > lag
}

// Deadline is when GitHub stops assigning jobs to a runner of version installed, given the releases
// published (any order, with their publication times): 30 days after the earliest-published newer
// release, or that release's publication when it is a security release; next is the release that
// sets it. ok is false when no newer release with a known publication time is among them.
func Deadline(installed string, releases []Release) (deadline time.Time, next Release, ok bool) {
	v, err := Parse(installed)
	if err != nil {
		return time.Time{}, Release{}, false
	}
	for _, r := range releases {
		rv, err := Parse(r.Version)
		if err != nil || !v.Less(rv) || r.Published.IsZero() {
			continue
		}
		d := r.Published.Add(AssignmentWindow)
		if r.Security {
			d = r.Published
		}
		if !ok || d.Before(deadline) {
			deadline, next, ok = d, r, true
		}
	}
	return deadline, next, ok
}
