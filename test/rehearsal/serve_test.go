//go:build rehearsal

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// containerDef is the part of the example's container definition a task is started from.
type containerDef struct {
	Image       string
	Command     []string
	Environment []struct{ Name, Value string }
	Secrets     []struct{ Name, ValueFrom string }
	HealthCheck struct{ Command []string }
}

// TestServeFromImageForms (the rehearsal's serve-image-forms step; RUNNERPOOL_RELEASE_DIST is its
// release): the release's runnerpool, as the image ko builds from it, served by a registry on
// loopback, is pulled under each reference form examples/complete accepts (the release's tag, a
// local build's tag in another repository, the digest, tag and digest), each one first passed
// through the example's own validation. Each pulled image's entrypoint is started with the
// container definition's command and the example's own task environment (its secrets resolved as
// ECS resolves them), pointed at the local stack: only the listen addresses (free loopback ports),
// the region and the endpoints of AWS, GitHub and the OIDC issuer are local. The task's own health
// check command passes, /readyz answers 200 (the start-up checks passed), and SIGTERM stops it
// cleanly.
func TestServeFromImageForms(t *testing.T) {
	dist := os.Getenv("RUNNERPOOL_RELEASE_DIST")
	if dist == "" {
		t.Fatal("RUNNERPOOL_RELEASE_DIST is not set: make rehearsal runs this test on the release it builds")
	}
	files, err := releaseFiles(dist)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(files["runnerpool_linux_"+runtime.GOARCH])
	if err != nil {
		t.Fatalf("the release's runnerpool_linux_%s: %v", runtime.GOARCH, err)
	}
	version := os.Getenv("VERSION")
	reg := &registry{}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	digest := reg.koImage(t, bin, runtime.GOARCH, "runnerpool/runnerpool:"+version, "local/runnerpool:dev")
	forms := map[string]string{
		"release tag":    host + "/runnerpool/runnerpool:" + version,
		"local build":    host + "/local/runnerpool:dev",
		"digest":         host + "/runnerpool/runnerpool@" + digest,
		"tag and digest": host + "/runnerpool/runnerpool:" + version + "@" + digest,
	}

	env := servicetest.New(t, servicetest.Options{WarmPools: true, InstanceKeys: config.InstanceKeysARN})
	for _, form := range slices.Sorted(func(yield func(string) bool) {
		for k := range forms {
			if !yield(k) {
				return
			}
		}
	}) {
		ref := forms[form]
		t.Run(form, func(t *testing.T) {
			m := env.Example(t, "../../examples/complete", map[string]cty.Value{"reconciler_image": cty.StringVal(ref)})
			if failed, err := m.Check(); err != nil || len(failed) > 0 {
				t.Fatalf("examples/complete refuses reconciler_image = %q: %v %v", ref, failed, err)
			}
			var defs []containerDef
			td := m.Resource("resource", "aws_ecs_task_definition", "reconciler")
			if err := json.Unmarshal([]byte(td.GetAttr("container_definitions").AsString()), &defs); err != nil || len(defs) != 1 {
				t.Fatalf("the reconciler's container definitions: %v (%d)", err, len(defs))
			}
			def := defs[0]
			if def.Image != ref {
				t.Fatalf("the task's image is %q, want %q", def.Image, ref)
			}
			root, img := pull(t, srv.URL, def.Image)
			taskEnv := map[string]string{}
			for _, e := range def.Environment {
				taskEnv[e.Name] = e.Value
			}
			secrets := map[string]string{
				m.Variable("webhook_secret_arn").AsString():                           servicetest.WebhookSecret,
				m.Variable("github_app").GetAttr("private_key_secret_arn").AsString(): string(env.GitHub.AppPrivateKeyPEM()),
			}
			for _, s := range def.Secrets {
				v, ok := secrets[s.ValueFrom]
				if !ok {
					t.Fatalf("the task reads secret %s from %s, which the rehearsal does not know", s.Name, s.ValueFrom)
				}
				taskEnv[s.Name] = v
			}
			for _, owner := range strings.Split(taskEnv["RUNNERPOOL_ALLOWED_REPOSITORIES"], ",") {
				env.GitHub.AddInstallation(strings.SplitN(owner, "/", 2)[0])
			}
			serveTask(t, env, root, img, def, taskEnv)
		})
	}
}

// serveTask starts the pulled image's entrypoint with the container's command and the task's
// environment, waits for the task's health check command to pass, reads /readyz, and stops it.
func serveTask(t *testing.T, env *servicetest.Env, root string, img imageConfig, def containerDef, taskEnv map[string]string) {
	t.Helper()
	// The one local change to the task: loopback addresses on free ports instead of the task's own
	// network namespace.
	ports := map[string]string{}
	for _, k := range []string{"RUNNERPOOL_LISTEN", "RUNNERPOOL_DASHBOARD_LISTEN", "RUNNERPOOL_METRICS_LISTEN"} {
		if !strings.HasPrefix(taskEnv[k], ":") {
			t.Fatalf("the task's %s is %q, want a port", k, taskEnv[k])
		}
		addr := freeAddr(t)
		ports[taskEnv[k]] = addr[strings.LastIndex(addr, ":"):]
		taskEnv[k] = addr
	}
	taskEnv["AWS_REGION"] = stack.Region
	taskEnv[stack.EnvGitHubAPI] = env.GitHubURL
	taskEnv[stack.EnvOIDCIssuer] = env.Issuer.URL()
	if len(img.Config.Entrypoint) != 1 || !strings.HasPrefix(img.Config.Entrypoint[0], "/") {
		t.Fatalf("image entrypoint %v", img.Config.Entrypoint)
	}
	entry := filepath.Join(root, img.Config.Entrypoint[0])
	var procEnv []string
	procEnv = append(procEnv, img.Config.Env...)
	procEnv = append(procEnv, env.Stack.Env()...)
	for k, v := range taskEnv {
		procEnv = append(procEnv, k+"="+v)
	}
	cmd := exec.Command(entry, def.Command...)
	cmd.Env = procEnv
	logs := filepath.Join(t.TempDir(), "task.log")
	lf, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logs)
			t.Logf("the task's output:\n%s", tail(string(b), 6000))
		}
	}()

	// The container's health check, as ECS runs it: the image's binary, the task's own arguments,
	// the port mapped to this run's.
	hc := slices.Clone(def.HealthCheck.Command)
	if len(hc) < 2 || hc[0] != "CMD" || hc[1] != img.Config.Entrypoint[0] {
		t.Fatalf("health check %v: want CMD and the image's entrypoint %s", hc, img.Config.Entrypoint[0])
	}
	hc = hc[1:]
	hc[0] = entry
	for i := range hc {
		for from, to := range ports {
			hc[i] = strings.Replace(hc[i], "127.0.0.1"+from+"/", "127.0.0.1"+to+"/", 1)
		}
	}
	var out []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err = exec.Command(hc[0], hc[1:]...).CombinedOutput()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			stopped = true
			t.Fatalf("the task exited before its health check passed: %v", werr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task's health check %v still fails after 60 s: %v %s", hc, err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	metrics := taskEnv["RUNNERPOOL_METRICS_LISTEN"]
	resp, err := http.Get("http://" + metrics + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 4096)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, body[:n])
	}
	t.Logf("%s %v: health check passed, /readyz 200: %s", filepath.Base(entry), def.Command, strings.Join(strings.Fields(string(body[:n])), " "))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("after SIGTERM the task exited with %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the task did not stop within 90 s of SIGTERM")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
