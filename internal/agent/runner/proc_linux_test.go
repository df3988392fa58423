//go:build linux

package runner_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestRunnerKeepsSupplementaryGroups runs run.sh as a real runner account that is a member of two
// groups of its own: the runner's process has the account's uid, primary group and both supplementary
// groups (what initgroups gives a login), so membership the image grants (docker, a device group)
// reaches the jobs.
func TestRunnerKeepsSupplementaryGroups(t *testing.T) {
	t.Parallel()
	acct := agenttest.NewAccount(t, 2)
	dir := filepath.Join(acct.Home, "actions-runner") // t.TempDir's parent is root's alone
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"run.sh":  "#!/bin/sh\nid -u > ids; id -g >> ids; id -G >> ids\n",
		".runner": "{}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, err := runner.NewActions(runner.ActionsOptions{Dir: dir, User: acct.Name})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := a.RunCommand(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("run.sh: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ids"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || lines[0] != strconv.Itoa(acct.UID) || lines[1] != strconv.Itoa(acct.GID) {
		t.Fatalf("run.sh ran as %q, want uid %d gid %d", lines, acct.UID, acct.GID)
	}
	got := strings.Fields(lines[2])
	for _, g := range append([]int{acct.GID}, acct.Groups...) {
		if !slices.Contains(got, strconv.Itoa(g)) {
			t.Errorf("run.sh's groups are %v, want %d among them (account groups %v)", got, g, acct.Groups)
		}
	}
}
