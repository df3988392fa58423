package config

import (
	"strings"
	"testing"
)

// TestGitHubAppKeyFromEnvironment: the App's private key may come as the PEM itself in
// RUNNERPOOL_GITHUB_APP_KEY (how ECS passes a Secrets Manager secret), not only from a file; setting
// both, or a key without an App id, or an App id without a key is refused with a clear error.
func TestGitHubAppKeyFromEnvironment(t *testing.T) {
	t.Parallel()
	const pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----"
	tests := []struct {
		name    string
		env     map[string]string
		wantPEM string
		wantErr string
	}{
		{"key from the environment", map[string]string{"RUNNERPOOL_GITHUB_APP_ID": "42", EnvGitHubAppKey: pem + "\n\n"}, pem + "\n", ""},
		{"key from a file", map[string]string{"RUNNERPOOL_GITHUB_APP_ID": "42", "RUNNERPOOL_GITHUB_APP_KEY_FILE": "FILE"}, pem, ""},
		{"both", map[string]string{"RUNNERPOOL_GITHUB_APP_ID": "42", EnvGitHubAppKey: pem, "RUNNERPOOL_GITHUB_APP_KEY_FILE": "FILE"}, "", "both RUNNERPOOL_GITHUB_APP_KEY and --github-app-key-file"},
		{"no key", map[string]string{"RUNNERPOOL_GITHUB_APP_ID": "42"}, "", "needs the App's private key (--github-app-key-file or RUNNERPOOL_GITHUB_APP_KEY)"},
		{"a key without an App", map[string]string{EnvGitHubAppKey: pem, "RUNNERPOOL_GITHUB_TOKEN": "ghp_x"}, "", "an App private key is set but no --github-app-id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			delete(env, "RUNNERPOOL_GITHUB_TOKEN")
			for k, v := range tc.env {
				if v == "FILE" {
					v = writeFile(t, "key.pem", pem)
				}
				env[k] = v
			}
			c, err := load(env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if string(c.GitHubAppKeyPEM) != tc.wantPEM || c.GitHubAppID != 42 {
				t.Errorf("app %d key %q, want 42 and %q", c.GitHubAppID, c.GitHubAppKeyPEM, tc.wantPEM)
			}
			if strings.Contains(c.GitHubAuth(), "BEGIN") {
				t.Errorf("GitHubAuth reveals the key: %s", c.GitHubAuth())
			}
		})
	}
}
