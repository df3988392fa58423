package ghaccess_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// TestCheckPermissions: the start-up check names every permission the credential lacks for the
// configured scopes, against the GitHub fake's installations and PAT.
func TestCheckPermissions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		app          bool
		perms        map[string]string // the installation's, for the App
		scopes       []string          // the PAT's classic scopes
		allowed      []string
		ownerRunners []string
		want         []string
	}{
		{"app with everything", true, nil, nil, []string{"acme", "acme/api"}, []string{"acme"}, nil},
		{"app without owner runners", true,
			map[string]string{"administration": "write", "actions": "write", "metadata": "read"}, nil,
			[]string{"acme"}, []string{"acme"},
			[]string{"acme: organization_self_hosted_runners: write needed, has none"}},
		{"app with read-only administration", true,
			map[string]string{"administration": "read", "metadata": "read", "organization_self_hosted_runners": "write"}, nil,
			[]string{"acme/api"}, nil,
			[]string{"acme/api: actions: write needed, has none", "acme/api: administration: write needed, has read"}},
		{"owner runners not configured: no organisation permission needed", true,
			map[string]string{"administration": "write", "actions": "write", "metadata": "read"}, nil,
			[]string{"acme"}, nil, nil},
		{"classic pat with everything", false, nil, []string{"repo", "admin:org"}, []string{"acme", "acme/api"}, []string{"acme"}, nil},
		{"classic pat without admin:org", false, nil, []string{"repo"}, []string{"acme"}, []string{"acme"},
			[]string{"acme: the token lacks the admin:org scope"}},
		{"classic pat without repo", false, nil, []string{"workflow"}, []string{"acme/api"}, nil,
			[]string{"acme/api: the token lacks the repo scope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, url := newFake(t)
			cfg := ghaccess.Config{APIURL: url, Allowed: tt.allowed, OwnerRunners: tt.ownerRunners}
			if tt.app {
				fake.AddInstallation("acme")
				if tt.perms != nil {
					fake.SetInstallationPermissions("acme", tt.perms)
				}
				cfg.AppID, cfg.PrivateKeyPEM = fake.AppID(), fake.AppPrivateKeyPEM()
			} else {
				cfg.Token = fake.PAT()
				fake.SetPATScopes(tt.scopes...)
			}
			c, err := ghaccess.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			missing, err := c.CheckPermissions(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range missing {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("missing = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestInstallationTokenRefusedWithoutPermission: the fake refuses what an installation lacks as
// GitHub does, and the client's error says so.
func TestInstallationTokenRefusedWithoutPermission(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	fake.AddInstallation("acme")
	fake.SetInstallationPermissions("acme", map[string]string{"administration": "read", "metadata": "read"})
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, AppID: fake.AppID(), PrivateKeyPEM: fake.AppPrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRunners(t.Context(), "acme/api"); err != nil {
		t.Fatalf("listing with administration read: %v", err)
	}
	_, err = c.GenerateJITConfig(t.Context(), "acme/api", "runnerpool-i-1", []string{"x"}, 0)
	if err == nil || !containsAll(fmt.Sprint(err), "403", "Resource not accessible by integration") {
		t.Fatalf("a JIT config without administration write: %v, want GitHub's 403", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
