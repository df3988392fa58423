package service_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// TestStartupReportsMissingGitHubPermissions: a reconciler whose App installation lacks Actions
// write and has Administration read only says so by name at start-up.
func TestStartupReportsMissingGitHubPermissions(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	env := servicetest.New(t, servicetest.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	owner, _, _ := strings.Cut(servicetest.Repository, "/")
	env.GitHub.AddInstallation(owner)
	env.GitHub.AddInstallation("trusted-org")
	env.GitHub.SetInstallationPermissions(owner, map[string]string{"administration": "read", "metadata": "read"})
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, env.GitHub.AppPrivateKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	env.Start(t, "a", map[string]string{
		"RUNNERPOOL_GITHUB_TOKEN":        "",
		"RUNNERPOOL_GITHUB_APP_ID":       strconv.FormatInt(env.GitHub.AppID(), 10),
		"RUNNERPOOL_GITHUB_APP_KEY_FILE": keyFile,
	})
	want := []string{
		servicetest.Repository + ": actions: write needed, has none",
		servicetest.Repository + ": administration: write needed, has read",
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := logs.String()
		done := true
		for _, w := range want {
			done = done && strings.Contains(got, w)
		}
		if done {
			if strings.Contains(got, "trusted-org: ") {
				t.Errorf("a scope with every permission was reported:\n%s", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the start-up log does not name %q:\n%s", want, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
