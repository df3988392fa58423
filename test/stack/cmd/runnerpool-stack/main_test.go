// Tests of the runnerpool-stack binary, built with go build: the command mode, the foreground mode,
// signals, errors, and that no emulator process survives it, however it ends.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds runnerpool-stack once per test binary.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "runnerpool-stack-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "runnerpool-stack")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var endpointRE = regexp.MustCompile(`^http://127\.0\.0\.1:(\d+)$`)

func portOf(t *testing.T, endpoint string) int {
	t.Helper()
	m := endpointRE.FindStringSubmatch(endpoint)
	if m == nil {
		t.Fatalf("endpoint %q is not http://127.0.0.1:PORT", endpoint)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// waitGone waits until no emulator process on these ports is left.
func waitGone(t *testing.T, ddbPort, sqsPort int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := stacktest.EmulatorProcesses(ddbPort, sqsPort)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator processes left behind: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestCommandMode(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary(t), "--", "sh", "-c", `echo $AWS_ENDPOINT_URL_DYNAMODB; echo $AWS_ENDPOINT_URL_SQS; echo $RUNNERPOOL_OIDC_ISSUER; exit 7`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 7 {
		t.Fatalf("exit: %v, want status 7 (the command's); stderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout = %q, want the command's three lines only", stdout.String())
	}
	ddbPort, sqsPort := portOf(t, lines[0]), portOf(t, lines[1])
	portOf(t, lines[2])
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q, want nothing", stderr.String())
	}
	// Close waited for the children: they are gone when the binary exits.
	waitGone(t, ddbPort, sqsPort, 0)
}

// startForeground starts the binary without a command and reads its endpoint lines.
func startForeground(t *testing.T) (cmd *exec.Cmd, env map[string]string, exited chan error) {
	t.Helper()
	cmd = exec.Command(binary(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	env = map[string]string{}
	var order []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "stack: ready" {
			break
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("unexpected line %q", line)
		}
		env[k] = v
		order = append(order, k)
	}
	want := []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_EC2", "RUNNERPOOL_GITHUB_API_URL", "RUNNERPOOL_OIDC_ISSUER"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("endpoint lines %v, want %v; stderr:\n%s", order, want, stderr.String())
	}
	for _, k := range want {
		portOf(t, env[k])
	}
	exited = make(chan error, 1)
	go func() {
		_, _ = bufio.NewReader(stdout).WriteTo(new(bytes.Buffer))
		exited <- cmd.Wait()
	}()
	return cmd, env, exited
}

func TestForegroundSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			cmd, env, exited := startForeground(t)
			ddbPort, sqsPort := portOf(t, env["AWS_ENDPOINT_URL_DYNAMODB"]), portOf(t, env["AWS_ENDPOINT_URL_SQS"])
			if n := len(stacktest.EmulatorProcesses(ddbPort, sqsPort)); n != 2 {
				t.Fatalf("%d emulator processes while running, want 2", n)
			}
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(env["AWS_ENDPOINT_URL_EC2"], "http://"), time.Second)
			if err != nil {
				t.Fatalf("EC2 server: %v", err)
			}
			_ = conn.Close()

			_ = cmd.Process.Signal(sig)
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("exit after %v: %v, want status 0", sig, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("still running 20s after %v", sig)
			}
			waitGone(t, ddbPort, sqsPort, 0)
		})
	}
}

// TestParentKilled: SIGKILL gives the binary no chance to stop its children; the kernel does
// (Pdeathsig).
func TestParentKilled(t *testing.T) {
	t.Parallel()
	cmd, env, exited := startForeground(t)
	ddbPort, sqsPort := portOf(t, env["AWS_ENDPOINT_URL_DYNAMODB"]), portOf(t, env["AWS_ENDPOINT_URL_SQS"])
	_ = cmd.Process.Kill()
	<-exited
	waitGone(t, ddbPort, sqsPort, 5*time.Second)
}

func TestCommandSignalForwarded(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary(t), "--", "sh", "-c", `trap 'exit 5' TERM; echo $AWS_ENDPOINT_URL_DYNAMODB $AWS_ENDPOINT_URL_SQS; while :; do sleep 0.1; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the command's output: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		t.Fatalf("command printed %q", line)
	}
	ddbPort, sqsPort := portOf(t, f[0]), portOf(t, f[1])
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 5 {
		t.Fatalf("exit: %v, want status 5 (the command's trap of the forwarded SIGTERM)", err)
	}
	waitGone(t, ddbPort, sqsPort, 0)
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	taken := lis.Addr().(*net.TCPAddr).Port
	var stderr bytes.Buffer
	cmd := exec.Command(binary(t), "-dynamodb-port", strconv.Itoa(taken), "--", "true")
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1", err)
	}
	want := fmt.Sprintf("runnerpool-stack: port %d for DynamoDB Local is already in use\n", taken)
	if stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
}
