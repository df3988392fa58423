// boot.go: how long a runner class's instances may take to boot and register, the one rule every
// path that waits for a booting instance follows (a provision's fleet validation and its created
// threshold, the provision API's time limit, a pool job's cold start, a warm pool's warm-up).
//
// The user data installs what the image lacks (internal/userdata). On an image prepared for the
// class (`bake`, images/packer) it installs nothing and the boot is EC2's boot plus the agent's
// registration: the reconciler's --registration-wait (180 s) covers it. On a stock image it runs
// apt, which waits for the package locks that unattended-upgrades holds for minutes on a fresh
// Ubuntu (up to AptLockWait in all), then installs the packages and downloads the runner:
// InstallAllowance more. `make userdata-os-test` boots the user data on Debian with apt's locks
// held and checks that the wait covers what it measures.
package declared

import (
	"fmt"
	"time"
)

const (
	// DefaultRegistrationWait is the reconciler's --registration-wait: a boot that installs nothing.
	DefaultRegistrationWait = 180 * time.Second
	// AptLockWait is the longest the user data waits, in all its apt calls, for apt's package
	// locks (and retries a failed mirror) before its boot fails. userdata renders it.
	AptLockWait = 10 * time.Minute
	// InstallAllowance is what a boot that installs takes beyond a boot that does not, the lock
	// wait aside: the package step and the downloads of the agent and the runner.
	InstallAllowance = 3 * time.Minute
	// MinRegistrationWait and MaxRegistrationWait bound a class's own registration_wait.
	MinRegistrationWait = 30 * time.Second
	MaxRegistrationWait = time.Hour
)

// Image tags a prepared image carries (images/packer sets them): the job access it was prepared
// for and the runner release it holds. A boot on it installs nothing when both fit the class.
const (
	ImageTagJobAccess     = "runnerpool:job-access"
	ImageTagRunnerVersion = "runnerpool:runner-version"
)

// BootInstalls reports whether a boot of the class's image installs packages: false only when the
// image's tags say it was prepared for the class's job access (or root's or docker's image for a
// user class, which needs nothing more) and holds runnerVersion, the release the class's launch
// template version installs. Anything unknown (no tags, no runner version) counts as installing:
// a wait too long only delays noticing a failed boot, one too short discards a healthy instance.
func BootInstalls(imageTags map[string]string, jobAccess, runnerVersion string) bool {
	prepared, ok := imageTags[ImageTagJobAccess]
	if !ok || runnerVersion == "" || imageTags[ImageTagRunnerVersion] != runnerVersion {
		return true
	}
	want := NormalJobAccess(jobAccess)
	return prepared != want && want != JobAccessUser
}

// BootWait is how long the class's created (or started) instances have to register: the
// class's own registration_wait when set; else base (the reconciler's --registration-wait, a boot
// that installs nothing) when installs is false, and base + AptLockWait + InstallAllowance when the
// boot installs packages.
func (rc RunnerClass) BootWait(base time.Duration, installs bool) time.Duration {
	switch {
	case rc.RegistrationWait > 0:
		return rc.RegistrationWait.Std()
	case installs:
		return base + AptLockWait + InstallAllowance
	}
	return base
}

// BootExtra is how much longer than base a class's boot may take (negative when the class's own
// registration_wait is shorter): every deadline that contains a boot (the created threshold, the
// provision time limit, the warm-up) grows by it.
func BootExtra(wait, base time.Duration) time.Duration { return wait - base }

// validateRegistrationWait checks a class's own registration_wait (zero: none).
func validateRegistrationWait(d Duration) error {
	if d == 0 {
		return nil
	}
	if err := ValidateDuration("registration wait", d.Std(), MinRegistrationWait, MaxRegistrationWait); err != nil {
		return fmt.Errorf("%w (absent: from the image, see docs/guides/images.md)", err)
	}
	return nil
}
