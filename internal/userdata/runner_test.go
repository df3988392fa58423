package userdata

import (
	"errors"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// The runner the user data installs by default is one GitHub registers: at cc50e7d it was 2.319.0,
// below the 2.329.0 floor, and every registration was refused.
func TestRenderInstallsARunnerAboveTheFloor(t *testing.T) {
	t.Parallel()
	script, err := Render(validParams())
	if err != nil {
		t.Fatal(err)
	}
	pin, ok := RunnerOf(script)
	if !ok {
		t.Fatal("RunnerOf: not runnerpool's user data")
	}
	if _, err := runnerversion.CheckFloor(pin.Version); err != nil {
		t.Fatal(err)
	}
	if want := "readonly RUNNER_VERSION='" + pin.Version + "'"; !strings.Contains(script, want) {
		t.Errorf("script lacks %q", want)
	}
}

func TestRenderRefusesARunnerPin(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("1f", 32)
	for _, tc := range []struct {
		name string
		pin  RunnerPin
		arch Arch
		want string
	}{
		{"below the floor", RunnerPin{Version: "2.328.0", SHA256X64: sum, SHA256ARM64: sum}, ArchAny, "minimum runner version"},
		{"not a version", RunnerPin{Version: "latest", SHA256X64: sum, SHA256ARM64: sum}, ArchAny, "MAJOR.MINOR.PATCH"},
		{"no arm64 checksum", RunnerPin{Version: "2.337.0", SHA256X64: sum}, ArchAny, "arm64"},
		{"bad x64 checksum", RunnerPin{Version: "2.337.0", SHA256X64: "abc"}, ArchX64, "x64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := validParams()
			p.Arch, p.Runner = tc.arch, &tc.pin
			_, err := Render(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v, want an error naming %q", err, tc.want)
			}
			if tc.name == "below the floor" && !errors.Is(err, runnerversion.ErrBelowFloor) {
				t.Errorf("Render = %v, want ErrBelowFloor", err)
			}
		})
	}
}

// WithRunner is how a release read from GitHub reaches a class's launch template version: the script
// installs exactly that version and checks exactly those checksums, everything else as rendered.
func TestWithRunnerRendersThePinnedRelease(t *testing.T) {
	t.Parallel()
	p := validParams()
	p.PreRunnerScript = preRunner
	base, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	pin := RunnerPin{Version: "2.340.1", SHA256X64: strings.Repeat("a1", 32), SHA256ARM64: strings.Repeat("b2", 32)}
	got, err := WithRunner(base, pin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"readonly RUNNER_VERSION='2.340.1'", pin.SHA256X64, pin.SHA256ARM64} {
		if !strings.Contains(got, want) {
			t.Errorf("re-rendered script lacks %q", want)
		}
	}
	if back, _ := RunnerOf(got); back != pin {
		t.Errorf("RunnerOf = %+v, want %+v", back, pin)
	}
	if s, _ := PreRunnerScriptOf(got); s != preRunner {
		t.Errorf("pre-runner script lost: %q", s)
	}
	if _, err := WithRunner(base, RunnerPin{Version: "2.320.0", SHA256X64: pin.SHA256X64, SHA256ARM64: pin.SHA256ARM64}); !errors.Is(err, runnerversion.ErrBelowFloor) {
		t.Errorf("WithRunner below the floor = %v, want ErrBelowFloor", err)
	}
}

// User data rendered before the runner could be pinned (cc50e7d: 2.319.0 compiled in, no pin in
// its parameters) is read as what it installs, not as today's default.
func TestRunnerOfOldUserData(t *testing.T) {
	t.Parallel()
	script, err := Render(validParams())
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(script, "readonly RUNNER_VERSION='"+RunnerVersion+"'", "readonly RUNNER_VERSION='2.319.0'", 1)
	if pin, ok := RunnerOf(old); !ok || pin.Version != "2.319.0" {
		t.Fatalf("RunnerOf = %+v, %v; want 2.319.0", pin, ok)
	}
}
