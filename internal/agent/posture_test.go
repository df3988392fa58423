package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
)

// TestGrantFor: what each job access hands the runner user, and what OSHost writes and runs for it
// (below a temporary root; the commands recorded, not run).
func TestGrantFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		access, user string
		sudo         string // the drop-in's last line ("": none)
		cmds         []string
		wantErr      string
	}{
		{access: "", user: "runner"},
		{access: "user", user: ""},
		{access: "root", user: "runner", sudo: "runner ALL=(ALL) NOPASSWD: ALL", cmds: []string{"usermod --append --groups docker runner"}},
		{access: "root", user: "61234", sudo: "#61234 ALL=(ALL) NOPASSWD: ALL", cmds: []string{"usermod --append --groups docker 61234"}},
		{access: "docker", user: "runner"},
		{access: "root", user: "", wantErr: "needs a runner account"},
		{access: "root", user: "root", wantErr: "needs a runner account"},
		{access: "docker", user: "run ner", wantErr: "needs a runner account"},
		{access: "admin", user: "runner", wantErr: "job access"},
	} {
		t.Run(tc.access+"/"+tc.user, func(t *testing.T) {
			t.Parallel()
			g, err := agent.GrantFor(tc.access, tc.user)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("GrantFor = %+v, %v; want an error containing %q", g, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			sub := "runner:100000:65536\n"
			for _, f := range []string{"etc/subuid", "etc/subgid"} {
				if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, f), []byte(sub), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var cmds []string
			h := agent.OSHost{Root: root, Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
				if name != "visudo" {
					cmds = append(cmds, strings.Join(append([]string{name}, args...), " "))
				}
				return nil, nil
			}}
			if err := h.Apply(t.Context(), tc.user, g); err != nil {
				t.Fatalf("Apply(%+v): %v", g, err)
			}
			b, err := os.ReadFile(filepath.Join(root, agent.SudoersPath))
			switch {
			case tc.sudo == "" && err == nil:
				t.Errorf("a sudoers drop-in was written: %q", b)
			case tc.sudo != "" && (err != nil || !strings.HasSuffix(string(b), tc.sudo+"\n")):
				t.Errorf("sudoers drop-in = %q, %v; want it to end with %q", b, err, tc.sudo)
			}
			if !slices.Equal(cmds, tc.cmds) {
				t.Errorf("commands = %q, want %q", cmds, tc.cmds)
			}
			if g.RootlessDocker != (tc.access == "docker") {
				t.Errorf("RootlessDocker = %v for %q", g.RootlessDocker, tc.access)
			}
		})
	}
}
