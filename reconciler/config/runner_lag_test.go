package config

import (
	"strings"
	"testing"
	"time"
)

// The runner upgrade lag defaults to 7 days and is refused above 28 (GitHub stops assigning jobs to a
// runner 30 days after a newer release).
func TestRunnerUpgradeLag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		want  time.Duration
		err   string
	}{
		{"", 7 * 24 * time.Hour, ""},
		{"24h", 24 * time.Hour, ""},
		{"672h", 28 * 24 * time.Hour, ""},
		{"673h", 0, "runner upgrade lag"},
		{"-1h", 0, "runner upgrade lag"},
		{"a week", 0, "invalid duration"},
	} {
		env := baseEnv(t)
		if tc.value != "" {
			env["RUNNERPOOL_RUNNER_UPGRADE_LAG"] = tc.value
		}
		c, err := load(env)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: Load = %v, want an error naming %q", tc.value, err, tc.err)
		case tc.err == "" && (err != nil || c.RunnerUpgradeLag != tc.want):
			t.Errorf("%q: lag %s, %v; want %s", tc.value, c.RunnerUpgradeLag, err, tc.want)
		}
	}
}
