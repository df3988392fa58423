// Package runnerversion is what runnerpool knows about GitHub Actions runner releases: version numbers
// and their order, GitHub's published version policy (the registration floor and the 30-day window a
// runner has to install a new release), the release an instance installs (version and SHA-256 per
// architecture) and the lag an operator allows before an idle instance is upgraded or retired.
//
// GitHub's policy, enforced on github.com since 2026-09-25 (GHE.com with data residency since
// 2026-07-31), https://github.com/orgs/community/discussions/194762: a runner must be 2.329.0 or later
// to be configured or (re)registered, and must install each new release within 30 days of its
// publication to keep receiving jobs; a critical security release can stop assignment to older
// runners at once. Instances run the runner with --disableupdate, so keeping up is runnerpool's job.
package runnerversion

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Floor is the oldest runner GitHub lets configure or register (community discussion 194762 above).
const Floor = "2.329.0"

// AssignmentWindow is how long after a release's publication GitHub keeps assigning jobs to runners
// older than it (community discussion 194762 above).
const AssignmentWindow = 30 * 24 * time.Hour

// DefaultLag is how long after a release's publication runnerpool upgrades or retires idle instances
// running an older runner, unless the operator sets another; MaxLag is the most it accepts, which
// leaves at least two days of GitHub's 30-day window for the upgrades to land.
const (
	DefaultLag = 7 * 24 * time.Hour
	MaxLag     = 28 * 24 * time.Hour
)

// Version is a runner version, MAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

var versionRe = regexp.MustCompile(`^v?([0-9]{1,6})\.([0-9]{1,6})\.([0-9]{1,6})$`)

// Parse reads "2.336.0" (a leading "v", as in release tags, is accepted).
func Parse(s string) (Version, error) {
	m := versionRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Version{}, fmt.Errorf("runner version %q: want MAJOR.MINOR.PATCH such as %s", s, Floor)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	return Version{n(1), n(2), n(3)}, nil
}

// MustParse is Parse for constants.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or 1 as v is older than, the same as or newer than w.
func (v Version) Compare(w Version) int {
	for _, d := range [...]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	return 0
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool { return v.Compare(w) < 0 }

// RefusedDetail starts the detail of the agent's registration-failed signal when GitHub refused the
// runner for its version, so the control plane can say so (and count it) instead of a bare failure.
const RefusedDetail = "runner version refused by GitHub"

// OutdatedDetail starts the detail of the agent's runner-outdated signal and of its release failure
// when a registered runner exited because GitHub called it outdated (exit code 7, actions/runner#4285).
const OutdatedDetail = "runner exited: GitHub calls its version outdated"

// ErrBelowFloor is the error of a runner version GitHub refuses to configure or register.
var ErrBelowFloor = errors.New("below GitHub's minimum runner version " + Floor)

// CheckFloor parses s and refuses a version below Floor.
func CheckFloor(s string) (Version, error) {
	v, err := Parse(s)
	if err != nil {
		return v, err
	}
	if v.Less(MustParse(Floor)) {
		return v, fmt.Errorf("runner version %s: %w (github.com refuses to configure or register it since 2026-09-25)", v, ErrBelowFloor)
	}
	return v, nil
}

// CheckLag refuses an operator's upgrade lag that is negative or above MaxLag; zero means DefaultLag.
func CheckLag(lag time.Duration) (time.Duration, error) {
	switch {
	case lag == 0:
		return DefaultLag, nil
	case lag < 0 || lag > MaxLag:
		return 0, fmt.Errorf("runner upgrade lag %s: want between 0 and %s (GitHub stops assigning jobs to a runner 30 days after a newer release)", lag, MaxLag)
	}
	return lag, nil
}
