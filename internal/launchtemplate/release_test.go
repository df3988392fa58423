package launchtemplate_test

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// releaseSource is a current release tests can change.
type releaseSource struct {
	mu  sync.Mutex
	rel runnerversion.Release
}

func (s *releaseSource) get() (runnerversion.Release, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rel, s.rel.Version != ""
}

func (s *releaseSource) set(version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rel = runnerversion.Release{Version: version, Linux: map[runnerversion.Arch]runnerversion.Download{
		runnerversion.ArchX64:   runnerversion.FileOf(version, runnerversion.ArchX64, strings.Repeat("7e", 32)),
		runnerversion.ArchARM64: runnerversion.FileOf(version, runnerversion.ArchARM64, strings.Repeat("8f", 32)),
	}}
}

// The current release reaches the class's launch template version: its user data installs it, and a
// new release makes a new version. A template that pins its runner keeps its pin.
func TestClassVersionInstallsTheCurrentRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	src := &releaseSource{}
	installed := func(e *env, v *launchtemplate.Versions) (string, string) {
		t.Helper()
		n, err := v.For(ctx, e.class())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(e.version(t, n).UserData))
		if err != nil {
			t.Fatal(err)
		}
		pin, ok := userdata.RunnerOf(string(raw))
		if !ok {
			t.Fatalf("version %s: user data is not runnerpool's", n)
		}
		if r := v.Runner(e.class(), n); r != pin.Version {
			t.Errorf("Runner(%s) = %q, but its user data installs %s", n, r, pin.Version)
		}
		return n, pin.Version
	}
	e := newEnv(t, baseUserData(t))
	v := launchtemplate.New(e.c, launchtemplate.Options{Now: e.clock, Logger: slog.New(slog.DiscardHandler), Release: src.get})
	src.set("2.340.0")
	first, got := installed(e, v)
	if got != "2.340.0" {
		t.Fatalf("class version installs %s, want the current release 2.340.0", got)
	}
	src.set("2.341.0")
	second, got := installed(e, v)
	if got != "2.341.0" || second == first {
		t.Fatalf("after a new release: version %s installs %s; want a new version installing 2.341.0", second, got)
	}

	pinnedUD, err := userdata.WithRunner(baseUserData(t), userdata.RunnerPin{Version: "2.339.0", SHA256X64: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	pinned := newEnv(t, pinnedUD)
	pv := launchtemplate.New(pinned.c, launchtemplate.Options{Now: pinned.clock, Logger: slog.New(slog.DiscardHandler), Release: src.get})
	if _, got := installed(pinned, pv); got != "2.339.0" {
		t.Errorf("a pinned template's class installs %s, want its pin 2.339.0", got)
	}
}

// User data that installs a runner GitHub refuses (cc50e7d's 2.319.0) is never launched: the class
// is in error until a current release replaces it.
func TestClassBelowTheRunnerFloorIsNotLaunched(t *testing.T) {
	t.Parallel()
	old := strings.Replace(baseUserData(t), "readonly RUNNER_VERSION='"+userdata.RunnerVersion+"'", "readonly RUNNER_VERSION='2.319.0'", 1)
	e := newEnv(t, old)
	src := &releaseSource{}
	v := launchtemplate.New(e.c, launchtemplate.Options{Now: e.clock, Logger: slog.New(slog.DiscardHandler), Release: src.get})
	_, err := v.For(t.Context(), e.class())
	var ce *launchtemplate.ClassError
	if !errors.As(err, &ce) || ce.Attribute != "runner version" || !errors.Is(err, runnerversion.ErrBelowFloor) {
		t.Fatalf("For = %v, want a runner version ClassError below the floor", err)
	}
	src.set("2.340.0")
	if _, err := v.For(t.Context(), e.class()); err != nil {
		t.Fatalf("with a current release: %v", err)
	}
}
