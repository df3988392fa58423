package declared

import (
	"strings"
	"testing"
	"time"
)

// TestBootWait: a class whose image was prepared for it (its job access, the runner release its
// launch template installs) keeps the deployment's wait; any other image installs packages at boot
// and gets the apt lock wait and the install on top; the class's own registration_wait wins.
func TestBootWait(t *testing.T) {
	t.Parallel()
	const base = 180 * time.Second
	cold := base + AptLockWait + InstallAllowance
	prepared := func(access, runner string) map[string]string {
		return map[string]string{ImageTagJobAccess: access, ImageTagRunnerVersion: runner, "runnerpool:base": "ubuntu-24.04"}
	}
	for _, tc := range []struct {
		name      string
		tags      map[string]string
		jobAccess string
		runner    string
		own       time.Duration
		want      time.Duration
	}{
		{"stock image", nil, "", "2.338.0", 0, cold},
		{"prepared for the class", prepared("docker", "2.338.0"), "docker", "2.338.0", 0, base},
		{"prepared, user class is the default access", prepared("user", "2.338.0"), "", "2.338.0", 0, base},
		{"root image serves a user class", prepared("root", "2.338.0"), "user", "2.338.0", 0, base},
		{"root image lacks docker's packages", prepared("root", "2.338.0"), "docker", "2.338.0", 0, cold},
		{"runner released since the image", prepared("docker", "2.337.0"), "docker", "2.338.0", 0, cold},
		{"runner unknown", prepared("docker", "2.338.0"), "docker", "", 0, cold},
		{"no runner tag", map[string]string{ImageTagJobAccess: "docker"}, "docker", "2.338.0", 0, cold},
		{"own wait on a stock image", nil, "", "2.338.0", 25 * time.Minute, 25 * time.Minute},
		{"own wait on a prepared image", prepared("user", "2.338.0"), "user", "2.338.0", 90 * time.Second, 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := RunnerClass{JobAccess: tc.jobAccess, RegistrationWait: Duration(tc.own)}
			got := rc.BootWait(base, BootInstalls(tc.tags, tc.jobAccess, tc.runner))
			if got != tc.want {
				t.Errorf("BootWait = %s, want %s", got, tc.want)
			}
			if extra := BootExtra(got, base); extra != tc.want-base {
				t.Errorf("BootExtra = %s, want %s", extra, tc.want-base)
			}
		})
	}
}

// TestRegistrationWaitValidated: a class's own registration_wait is bounded; absent is fine.
func TestRegistrationWaitValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, ""}, {MinRegistrationWait, ""}, {MaxRegistrationWait, ""},
		{10 * time.Second, "registration wait 10s: must be between 30s and 1h0m0s"},
		{2 * time.Hour, "registration wait 2h0m0s: must be between"},
	} {
		rc := validClass()
		rc.RegistrationWait = Duration(tc.d)
		err := rc.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("registration_wait %s: %v", tc.d, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("registration_wait %s: %v, want %q", tc.d, err, tc.want)
		}
	}
}
