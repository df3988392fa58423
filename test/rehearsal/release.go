package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// releaseStep builds the release as docs/guides/local-build.md says (its "release" block: goreleaser
// on .goreleaser.yml, the image left out), the checksums file signed with a throwaway GPG key made
// here, as release.yml signs with the project's.
func releaseStep(ctx context.Context, r *R) error {
	if r.Dist != "" { // -dist: a release built before
		return readVersion(r)
	}
	gnupg := filepath.Join(r.Work, "gnupg")
	if err := os.MkdirAll(gnupg, 0o700); err != nil {
		return err
	}
	env := r.Env("GNUPGHOME=" + gnupg)
	if _, err := r.run(ctx, r.Work, env, "gpg", "--batch", "--passphrase", "", "--quick-gen-key", "rehearsal <rehearsal@localhost>", "default", "sign", "1d"); err != nil {
		return err
	}
	out, err := r.run(ctx, r.Work, env, "gpg", "--batch", "--with-colons", "--list-secret-keys")
	if err != nil {
		return err
	}
	var fpr string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, ":"); len(f) > 9 && f[0] == "fpr" && fpr == "" {
			fpr = f[9]
		}
	}
	if fpr == "" {
		return fmt.Errorf("no fingerprint in gpg's list:\n%s", out)
	}
	block, err := guideBlock(r.Root, "release")
	if err != nil {
		return err
	}
	if _, err := r.bash(ctx, r.Root, append(env, "GPG_FINGERPRINT="+fpr), block); err != nil {
		return err
	}
	r.Dist = filepath.Join(r.Root, "dist")
	if err := readVersion(r); err != nil {
		return err
	}
	fmt.Fprintf(r.Out, "rehearsal: release %s in %s, signed by %s\n", r.Version, r.Dist, fpr)
	return nil
}

// readVersion reads the release's version from its dist folder's metadata.json.
func readVersion(r *R) error {
	b, err := os.ReadFile(filepath.Join(r.Dist, "metadata.json"))
	if err != nil {
		return err
	}
	var meta struct{ Version string }
	if err := json.Unmarshal(b, &meta); err != nil || meta.Version == "" {
		return fmt.Errorf("dist/metadata.json: no version (%v)", err)
	}
	r.Version = meta.Version
	return nil
}

// artifact is a line of goreleaser's dist/artifacts.json.
type artifact struct{ Name, Path, Type string }

// releaseFiles are the files the release uploads, by name: the uploadable artifacts of
// artifacts.json (a build's binary is not uploaded as such; the raw agent binaries are, under their
// archive names).
func releaseFiles(dist string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dist, "artifacts.json"))
	if err != nil {
		return nil, err
	}
	var as []artifact
	if err := json.Unmarshal(b, &as); err != nil {
		return nil, fmt.Errorf("artifacts.json: %w", err)
	}
	files := map[string]string{}
	for _, a := range as {
		switch a.Type {
		case "Archive", "Uploadable Binary", "Checksum", "Signature", "Uploadable File", "Binary":
		default:
			continue
		}
		if a.Type == "Binary" && a.Name == filepath.Base(a.Path) {
			continue // a build, not the raw binary a binary archive uploads under its own name
		}
		p := a.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(dist), p)
		}
		files[a.Name] = p
	}
	return files, nil
}

// serveReleaseStep serves the release over HTTPS on 127.0.0.1 in a GitHub release's layout:
// /OWNER/REPO/releases/download/vVERSION/FILE, /OWNER/REPO/releases/latest redirecting to the tag.
// The certificate is signed by a CA made here, which the clients are told to trust (R.Env:
// SSL_CERT_FILE, CURL_CA_BUNDLE); nothing else trusts it.
func serveReleaseStep(ctx context.Context, r *R) error {
	files, err := releaseFiles(r.Dist)
	if err != nil {
		return err
	}
	// release.extra_files (.goreleaser.yml) are uploaded by the publishing step, which a snapshot
	// skips: the Registry manifest, under its release name.
	files["terraform-provider-runnerpool_"+r.Version+"_manifest.json"] = filepath.Join(r.Root, "terraform-registry-manifest.json")
	for _, want := range []string{
		"runnerpool_linux_amd64", "runnerpool_linux_arm64",
		"terraform-provider-runnerpool_" + r.Version + "_SHA256SUMS",
		"terraform-provider-runnerpool_" + r.Version + "_SHA256SUMS.sig",
		"terraform-provider-runnerpool_" + r.Version + "_manifest.json",
		"terraform-provider-runnerpool_" + r.Version + "_linux_amd64.zip",
		"runnerpool_" + r.Version + "_linux_amd64.tar.gz",
	} {
		if _, ok := files[want]; !ok {
			return fmt.Errorf("the release has no %s", want)
		}
	}
	ca, caKey, err := newCert(nil, nil, true)
	if err != nil {
		return err
	}
	leaf, leafKey, err := newCert(ca, caKey, false)
	if err != nil {
		return err
	}
	r.CAFile = filepath.Join(r.Work, "release-ca.pem")
	if err := os.WriteFile(r.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "/" + owner + "/" + repo + "/releases"
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+base+"/latest", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, base+"/tag/v"+r.Version, http.StatusFound)
	})
	mux.HandleFunc("GET "+base+"/tag/v"+r.Version, func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET "+base+"/download/v"+r.Version+"/{file}", func(w http.ResponseWriter, req *http.Request) {
		p, ok := files[req.PathValue("file")]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeFile(w, req, p)
	})
	// actions/runner's releases in their layout (github.com/actions/runner/releases/download/vV/FILE),
	// for the user data's runner download: what a step puts in RunnerReleasesDir.
	r.RunnerReleasesDir = filepath.Join(r.Work, "runner-releases")
	if err := os.MkdirAll(r.RunnerReleasesDir, 0o755); err != nil {
		return err
	}
	mux.Handle("GET /actions/runner/releases/download/", http.StripPrefix("/actions/runner/releases/download/", http.FileServer(http.Dir(r.RunnerReleasesDir))))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: leafKey}},
	}}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	r.Defer(func() { _ = srv.Close() })
	r.ReleaseURL = "https://" + lis.Addr().String() + base
	r.RunnerReleasesURL = "https://" + lis.Addr().String() + "/actions/runner/releases/download"
	fmt.Fprintf(r.Out, "rehearsal: release host %s (%d files)\n", r.ReleaseURL, len(files))
	// The host answers as GitHub does, through the CA it was given.
	_, err = r.run(ctx, r.Work, r.Env(), "curl", "--fail", "--silent", "--show-error", "--location", "--output", "/dev/null", r.ReleaseURL+"/latest")
	return err
}

// newCert makes a CA (parent nil) or a certificate for 127.0.0.1 signed by parent.
func newCert(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "runnerpool rehearsal release host"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if isCA {
		tmpl.Subject.CommonName = "runnerpool rehearsal CA"
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		// 10.0.2.2 is the host's loopback as slirp4netns shows it to the user data's Debian
		// system (userdata-os step).
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 2, 2)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// releaseNamesStep runs TestReleaseNames (reconciler/cmd/runnerpool, build tag release) on this
// release: every release URL and image the examples and docs give is one of its files or tags. It
// runs in the checkout, whose build cache the copy's new path would miss.
func releaseNamesStep(ctx context.Context, r *R) error {
	_, err := r.run(ctx, r.Checkout, r.Env("RUNNERPOOL_RELEASE_DIST="+r.Dist), "go", "test", "-count=1", "-tags", "release",
		"-run", "^TestReleaseNames$", "./reconciler/cmd/runnerpool/")
	return err
}

// installActionStep runs the actions' install script as the provision and release actions call it,
// with the release host as their release-url input and the release's version: the archive is
// verified against the served SHA256SUMS, and the installed runnerpool is that version.
func installActionStep(ctx context.Context, r *R) error {
	cache := filepath.Join(r.Work, "toolcache")
	ghPath := filepath.Join(r.Work, "github_path")
	env := r.Env("RP_VERSION="+r.Version, "RP_RELEASE_URL="+r.ReleaseURL, "RUNNER_TOOL_CACHE="+cache,
		"RUNNER_TEMP="+r.Work, "GITHUB_PATH="+ghPath, "PATH="+strings.Join(cleanPath(), ":"))
	out, err := r.run(ctx, r.Root, env, "bash", "examples/github-actions/install-runnerpool.sh")
	if err != nil {
		return err
	}
	dir := strings.TrimSpace(lastLine(out))
	ver, err := r.run(ctx, r.Work, env, filepath.Join(dir, "runnerpool"), "version")
	if err != nil {
		return err
	}
	if !strings.Contains(ver, r.Version) {
		return fmt.Errorf("runnerpool version says %q, want %s", strings.TrimSpace(ver), r.Version)
	}
	return nil
}

// cleanPath is PATH without a runnerpool on it (the script would check and use that one).
func cleanPath() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "runnerpool")); err != nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
