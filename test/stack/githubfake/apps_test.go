// Tests of GitHub App authentication against the fake through ghinstallation and go-github: App JWTs,
// installations, installation tokens (expiry, repository restriction) and which credential goes where.

package githubfake_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// appClients returns a go-github client authenticated as the App (JWT) and one as the installation.
func appClients(t *testing.T, base string, appID int64, key []byte, installationID int64) (app, inst *github.Client, itr *ghinstallation.Transport) {
	t.Helper()
	atr, err := ghinstallation.NewAppsTransport(http.DefaultTransport, appID, key)
	if err != nil {
		t.Fatalf("NewAppsTransport: %v", err)
	}
	atr.BaseURL = base
	itr = ghinstallation.NewFromAppsTransport(atr, installationID)
	itr.BaseURL = base
	return clientWithBase(t, base, atr), clientWithBase(t, base, itr), itr
}

func TestAppInstallationAuth(t *testing.T) {
	t.Parallel()
	var clk clock
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	instID := fake.AddInstallation("acme")
	if again := fake.AddInstallation("ACME"); again != instID {
		t.Errorf("AddInstallation is not idempotent: %d then %d", instID, again)
	}
	app, inst, itr := appClients(t, base, testAppID, fake.AppPrivateKeyPEM(), instID)
	ctx := t.Context()

	t.Run("app endpoints", func(t *testing.T) {
		t.Parallel()
		ins, _, err := app.Apps.ListInstallations(t.Context(), nil)
		if err != nil || len(ins) != 1 || ins[0].GetID() != instID || ins[0].GetAccount().GetLogin() != "acme" {
			t.Fatalf("ListInstallations = %s, %v; want installation %d on acme", github.Stringify(ins), err, instID)
		}
		for name, find := range map[string]func() (*github.Installation, *github.Response, error){
			"org": func() (*github.Installation, *github.Response, error) {
				return app.Apps.FindOrganizationInstallation(t.Context(), "acme")
			},
			"repo": func() (*github.Installation, *github.Response, error) {
				return app.Apps.FindRepositoryInstallation(t.Context(), "acme", "app")
			},
		} {
			in, _, err := find()
			if err != nil || in.GetID() != instID || in.GetAppID() != testAppID {
				t.Errorf("%s installation = %s, %v; want %d", name, github.Stringify(in), err, instID)
			}
		}
		if _, _, err := app.Apps.FindOrganizationInstallation(t.Context(), "nobody"); statusOf(err) != http.StatusNotFound {
			t.Errorf("installation of an owner without one: %v, want 404", err)
		}
	})
	t.Run("installation token via ghinstallation", func(t *testing.T) {
		t.Parallel()
		tok, err := itr.Token(t.Context())
		if err != nil || !strings.HasPrefix(tok, "ghs_") {
			t.Fatalf("Token = %q, %v", tok, err)
		}
		if _, _, err := inst.Actions.CreateRegistrationToken(t.Context(), "acme", "app"); err != nil {
			t.Errorf("registration token with the installation token: %v", err)
		}
		if _, _, err := inst.Actions.CreateOrganizationRegistrationToken(t.Context(), "acme"); err != nil {
			t.Errorf("org registration token with the installation token: %v", err)
		}
		if _, _, err := inst.Actions.CreateRegistrationToken(t.Context(), "other-org", "app"); statusOf(err) != http.StatusForbidden {
			t.Errorf("another owner's repository: %v, want 403", err)
		}
	})
	t.Run("credential kinds", func(t *testing.T) {
		t.Parallel()
		instTok, _, err := app.Apps.CreateInstallationToken(t.Context(), instID, nil)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			call func(*github.Client) error
			gh   *github.Client
		}{
			{"installation token on an App endpoint", func(c *github.Client) error {
				_, _, err := c.Apps.ListInstallations(t.Context(), nil)
				return err
			}, tokenClient(t, base, instTok.GetToken())},
			{"PAT on an App endpoint", func(c *github.Client) error {
				_, _, err := c.Apps.ListInstallations(t.Context(), nil)
				return err
			}, tokenClient(t, base, fake.PAT())},
			{"App JWT on a runner endpoint", func(c *github.Client) error {
				_, _, err := c.Actions.CreateRegistrationToken(t.Context(), "acme", "app")
				return err
			}, app},
			{"unknown token", func(c *github.Client) error {
				_, _, err := c.Actions.CreateRegistrationToken(t.Context(), "acme", "app")
				return err
			}, tokenClient(t, base, "ghs_nope")},
		}
		for _, tt := range tests {
			err := tt.call(tt.gh)
			var er *github.ErrorResponse
			if statusOf(err) != http.StatusUnauthorized || !errors.As(err, &er) || er.Message != "Bad credentials" {
				t.Errorf("%s: err = %v, want 401 Bad credentials", tt.name, err)
			}
		}
	})
	t.Run("token restricted to repositories", func(t *testing.T) {
		t.Parallel()
		tok, _, err := app.Apps.CreateInstallationToken(t.Context(), instID, &github.InstallationTokenOptions{Repositories: []string{"app"}})
		if err != nil {
			t.Fatal(err)
		}
		gh := tokenClient(t, base, tok.GetToken())
		if _, _, err := gh.Actions.CreateRegistrationToken(t.Context(), "acme", "app"); err != nil {
			t.Errorf("allowed repository: %v", err)
		}
		if _, _, err := gh.Actions.CreateRegistrationToken(t.Context(), "acme", "secret"); statusOf(err) != http.StatusForbidden {
			t.Errorf("other repository: %v, want 403", err)
		}
		if _, _, err := app.Apps.CreateInstallationToken(t.Context(), instID, &github.InstallationTokenOptions{RepositoryIDs: []int64{987654321}}); statusOf(err) != http.StatusUnprocessableEntity {
			t.Errorf("unknown repository id: %v, want 422", err)
		}
		if _, _, err := app.Apps.CreateInstallationToken(t.Context(), 1, nil); statusOf(err) != http.StatusNotFound {
			t.Errorf("unknown installation: %v, want 404", err)
		}
	})

	// Expiry moves the shared clock: it runs inline, before the parallel subtests above resume.
	tok, _, err := app.Apps.CreateInstallationToken(ctx, instID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Hour); !tok.GetExpiresAt().Time.Equal(want) {
		t.Errorf("expires_at = %v, want %v", tok.GetExpiresAt(), want)
	}
	t.Run("expiry", func(t *testing.T) {
		gh := tokenClient(t, base, tok.GetToken())
		if _, _, err := gh.Actions.ListRunners(t.Context(), "acme", "app", nil); err != nil {
			t.Fatalf("fresh token: %v", err)
		}
		clk.Advance(time.Hour)
		defer clk.Advance(-time.Hour)
		if _, _, err := gh.Actions.ListRunners(t.Context(), "acme", "app", nil); statusOf(err) != http.StatusUnauthorized {
			t.Errorf("expired token: %v, want 401", err)
		}
	})
}

func TestAppJWTVerification(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	instID := fake.AddInstallation("acme")
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)})
	tests := []struct {
		name  string
		appID int64
		key   []byte
		ok    bool
	}{
		{"right key and id", testAppID, fake.AppPrivateKeyPEM(), true},
		{"wrong key", testAppID, otherPEM, false},
		{"wrong app id", testAppID + 1, fake.AppPrivateKeyPEM(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app, inst, _ := appClients(t, base, tt.appID, tt.key, instID)
			_, _, err := app.Apps.ListInstallations(t.Context(), nil)
			_, _, ierr := inst.Actions.CreateRegistrationToken(t.Context(), "acme", "app")
			if tt.ok && (err != nil || ierr != nil) {
				t.Errorf("want success, got %v / %v", err, ierr)
			}
			if !tt.ok && (statusOf(err) != http.StatusUnauthorized || ierr == nil) {
				t.Errorf("want 401 and a failed token exchange, got %v / %v", err, ierr)
			}
		})
	}
}

func TestGeneratedAppKey(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppID: 7})
	defer fake.Close()
	block, _ := pem.Decode(fake.AppPrivateKeyPEM())
	if block == nil {
		t.Fatal("AppPrivateKeyPEM is not PEM")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		t.Errorf("generated key is not a PKCS#1 RSA key: %v", err)
	}
	if _, err := ghinstallation.NewAppsTransport(http.DefaultTransport, 7, fake.AppPrivateKeyPEM()); err != nil {
		t.Errorf("ghinstallation refuses the generated key: %v", err)
	}
	if fake.AppID() != 7 {
		t.Errorf("AppID = %d, want 7", fake.AppID())
	}
}
