//go:build linux && userdata_os && rehearsal

package userdata

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUserDataOnDebianFromRelease (the rehearsal's userdata-os step): the rendered user data boots
// on the Debian system TestUserDataOnDebian builds (a cold boot, apt's locks free), downloading over
// HTTPS from the rehearsal's release host on loopback: the agent is the release's
// runnerpool_linux_amd64, checked against its line in the release's SHA256SUMS; the runner is
// served by the same host in actions/runner's release layout (the runner tarball itself is the OS
// test's miniature with the real layout: this machine cannot fetch actions/runner's). The host's
// CA is the one the rehearsal made (SSL_CERT_FILE), given to the boot as TestUserDataOnDebian gives
// its own.
func TestUserDataOnDebianFromRelease(t *testing.T) {
	releaseURL, version, caFile := os.Getenv("RELEASE_URL"), os.Getenv("VERSION"), os.Getenv("SSL_CERT_FILE")
	runnerDir, runnerURL := os.Getenv("RUNNERPOOL_RUNNER_RELEASES_DIR"), os.Getenv("RUNNERPOOL_RUNNER_RELEASES_URL")
	if releaseURL == "" || version == "" || caFile == "" || runnerDir == "" || runnerURL == "" {
		t.Fatal("RELEASE_URL, VERSION, SSL_CERT_FILE and RUNNERPOOL_RUNNER_RELEASES_DIR/_URL are not set: make rehearsal runs this test on its release host")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("this test enters a chroot in namespaces of its own and needs root (euid %d)", os.Geteuid())
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	sumsName := "terraform-provider-runnerpool_" + version + "_SHA256SUMS"
	resp, err := client.Get(releaseURL + "/download/v" + version + "/" + sumsName)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", sumsName, resp.Status)
	}
	const agent = "runnerpool_linux_amd64"
	var agentSHA string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[1] == agent {
			agentSHA = f[0]
		}
	}
	if agentSHA == "" {
		t.Fatalf("%s lists no %s", sumsName, agent)
	}

	runner := fakeRunnerTarball(t)
	dir := filepath.Join(runnerDir, "v"+RunnerVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "actions-runner-linux-x64-"+RunnerVersion+".tar.gz"), runner, 0o644); err != nil {
		t.Fatal(err)
	}

	srv := newOSServers(t) // its instance metadata; the downloads come from the release host
	srv.agentURL, srv.agentSHA = releaseURL+"/download/v"+version+"/"+agent, agentSHA
	srv.runnerBaseURL, srv.runnerSHA, srv.caPEM = runnerURL, sum(runner), caPEM
	start := time.Now()
	out := runOnDebian(t, debianRootfs(t), srv, osCase{access: "docker"})
	t.Logf("booted from %s in %v", releaseURL, time.Since(start).Round(time.Second))
	checkBooted(t, out, osCase{access: "docker"})
	if srv.agentGets.Load() != 0 || srv.runnerGets.Load() != 0 {
		t.Errorf("the boot downloaded from the test's own files server (%d agent, %d runner), not the release host", srv.agentGets.Load(), srv.runnerGets.Load())
	}
}
