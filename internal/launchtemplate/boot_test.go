package launchtemplate_test

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
)

// TestBootExtraFollowsTheImage: a class on a stock image boots with apt (the lock wait and the
// install on top of the deployment's wait); the same class once its image carries the tags of an
// image prepared for it (images/packer: its job access, the runner its version installs) keeps the
// deployment's wait, and again installs once a newer runner release makes its version install
// another runner; the class's own registration_wait wins over the image. The image's tags are read
// again after a while, not on every read of the classes.
func TestBootExtraFollowsTheImage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, baseUserData(t))
	src := &releaseSource{}
	src.set("2.340.0")
	const base = 2 * time.Minute
	v := launchtemplate.New(e.c, launchtemplate.Options{Now: e.clock, Logger: slog.New(slog.DiscardHandler), Release: src.get, RegistrationWait: base})
	rc := e.class()
	rc.JobAccess = declared.JobAccessDocker
	extra := func() time.Duration {
		t.Helper()
		n, err := v.For(ctx, rc)
		if err != nil {
			t.Fatal(err)
		}
		return v.BootExtra(ctx, rc, n)
	}
	installs := declared.AptLockWait + declared.InstallAllowance

	if got := extra(); got != installs {
		t.Errorf("stock image: BootExtra = %s, want %s (the boot installs packages)", got, installs)
	}
	e.srv.SetImageTags(rc.Image, map[string]string{declared.ImageTagJobAccess: "docker", declared.ImageTagRunnerVersion: "2.340.0"})
	e.srv.ResetCalls()
	if got := extra(); got != installs {
		t.Errorf("tags added a moment ago: BootExtra = %s, want the cached %s", got, installs)
	}
	if n := e.srv.Calls()["DescribeImages"]; n != 0 {
		t.Errorf("%d DescribeImages within the cache's time", n)
	}
	e.advance(11 * time.Minute)
	if got := extra(); got != 0 {
		t.Errorf("image prepared for the class: BootExtra = %s, want 0", got)
	}
	src.set("2.341.0")
	if got := extra(); got != installs {
		t.Errorf("a newer runner than the image's: BootExtra = %s, want %s (the boot installs the runner's dependencies)", got, installs)
	}
	rc.RegistrationWait = declared.Duration(30 * time.Minute)
	if got := extra(); got != 30*time.Minute-base {
		t.Errorf("the class's own registration_wait: BootExtra = %s, want %s", got, 30*time.Minute-base)
	}
}

// TestImagesGuideBootFigures: the figures the images guide gives of a boot's wait are the ones the
// reconciler applies.
func TestImagesGuideBootFigures(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../../templates/guides/images.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(guide)), " ")
	for _, want := range []string{
		fmt.Sprintf("gets `--registration-wait` (%d s)", int(declared.DefaultRegistrationWait.Seconds())),
		fmt.Sprintf("it gets %d minutes more (the %d minutes of the lock wait and %d for the install)",
			int((declared.AptLockWait + declared.InstallAllowance).Minutes()), int(declared.AptLockWait.Minutes()), int(declared.InstallAllowance.Minutes())),
		fmt.Sprintf("(up to %d minutes in all, over every apt call of the boot)", int(declared.AptLockWait.Minutes())),
		fmt.Sprintf("again every %d minutes", int(launchtemplate.ImageTTL.Minutes())),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the images guide does not say %q", want)
		}
	}
}
