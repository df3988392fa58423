package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// TestUserDataStartsLogsWithItsFlags: the unit the user data installs for a log group runs
// `runnerpool logs` with flags this command accepts, naming the group and the region.
func TestUserDataStartsLogsWithItsFlags(t *testing.T) {
	t.Parallel()
	script, err := userdata.Render(userdata.Params{Table: "runnerpool-prod", Region: "eu-central-1", Arch: userdata.ArchX64,
		LogGroup: "/runnerpool/prod/instances",
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=` + regexp.QuoteMeta(userdata.AgentPath) + ` logs (.*)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no runnerpool logs unit in the user data:\n%s", script)
	}
	f, err := parseLogsFlags(strings.Fields(m[1]), io.Discard)
	if err != nil {
		t.Fatalf("runnerpool logs refuses the user data's flags %q: %v", m[1], err)
	}
	if f.opts.Group != "/runnerpool/prod/instances" || f.region != "eu-central-1" || f.opts.StateDir != userdata.StateDir {
		t.Errorf("parsed %+v, region %q", f.opts, f.region)
	}
}
