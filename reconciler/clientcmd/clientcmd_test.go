// End to end: the workflow commands against an in-process reconciler, with the OIDC token fetched
// from the local issuer's Actions token endpoint and the outputs written to a GITHUB_OUTPUT file.
package clientcmd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// readOutputs parses a GITHUB_OUTPUT file (name<<DELIM ... DELIM blocks, or name=value lines).
func readOutputs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if name, delim, ok := strings.Cut(line, "<<"); ok {
			var val []string
			for sc.Scan() && sc.Text() != delim {
				val = append(val, sc.Text())
			}
			out[name] = strings.Join(val, "\n")
			continue
		}
		if name, val, ok := strings.Cut(line, "="); ok {
			out[name] = val
			continue
		}
		t.Fatalf("malformed output line %q", line)
	}
	return out
}

func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 1)
	r := env.Start(t, "a", nil)
	env.Issuer.SetActionsContext("request-token", env.Claims("6001", map[string]any{"aud": nil}))
	dir := t.TempDir()
	vars := map[string]string{
		"ACTIONS_ID_TOKEN_REQUEST_URL":   env.Issuer.ActionsTokenURL(),
		"ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
		"RUNNERPOOL_API_URL":             r.URL,
		"RUNNERPOOL_AUDIENCE":            servicetest.Audience,
	}
	run := func(t *testing.T, cmd func(context.Context, []string, clientcmd.Env, *bytes.Buffer, *bytes.Buffer) error, output string, args ...string) (string, map[string]string, error) {
		t.Helper()
		envv := func(k string) string {
			if k == "GITHUB_OUTPUT" {
				return output
			}
			return vars[k]
		}
		var stdout, stderr bytes.Buffer
		err := cmd(t.Context(), args, envv, &stdout, &stderr)
		if stderr.Len() > 0 {
			t.Logf("stderr: %s", stderr.String())
		}
		outs := map[string]string{}
		if output != "" {
			if _, serr := os.Stat(output); serr == nil {
				outs = readOutputs(t, output)
			}
		}
		return stdout.String(), outs, err
	}
	provision := func(ctx context.Context, a []string, e clientcmd.Env, o, s *bytes.Buffer) error {
		return clientcmd.Provision(ctx, a, e, o, s)
	}
	release := func(ctx context.Context, a []string, e clientcmd.Env, o, s *bytes.Buffer) error {
		return clientcmd.Release(ctx, a, e, o, s)
	}
	status := func(ctx context.Context, a []string, e clientcmd.Env, o, s *bytes.Buffer) error {
		return clientcmd.Status(ctx, a, e, o, s)
	}

	stdout, outs, err := run(t, provision, filepath.Join(dir, "provision"),
		"--count", "2", "--usage-class", "on-demand", "--allowed-instance-types", "c6i.*, m5.*", "--resource-class", "small")
	if err != nil {
		t.Fatalf("provision: %v\n%s", err, stdout)
	}
	key := servicetest.RepositoryID + ":6001:1"
	var runners []apiv1.Runner
	if err := json.Unmarshal([]byte(outs["runners"]), &runners); err != nil {
		t.Fatalf("runners output %q: %v", outs["runners"], err)
	}
	ids := strings.Split(outs["instance-ids"], ",")
	if outs["label"] != "6001-1" || outs["run-key"] != key || outs["count"] != "2" || len(runners) != 2 || len(ids) != 2 ||
		!slices.Contains(ids, pooled[0]) || outs["labels"] != "6001-1,runnerpool" {
		t.Errorf("provision outputs %v", outs)
	}
	if !strings.Contains(stdout, "Provisioned 2 runner(s)") || !strings.Contains(stdout, pooled[0]) {
		t.Errorf("provision summary:\n%s", stdout)
	}

	stdout, _, err = run(t, status, "")
	if err != nil || !strings.Contains(stdout, "RUNNER CLASS") || !strings.Contains(stdout, "6001") || !strings.Contains(stdout, servicetest.RunnerClass) {
		t.Errorf("status: %v\n%s", err, stdout)
	}
	t.Logf("status:\n%s", stdout)
	stdout, _, err = run(t, status, "", "--run", "6001")
	if err != nil || !strings.Contains(stdout, "Run "+key) || !strings.Contains(stdout, "reused") || !strings.Contains(stdout, "created") {
		t.Errorf("status --run: %v\n%s", err, stdout)
	}

	t.Logf("status --run:\n%s", stdout)
	stdout, outs, err = run(t, release, filepath.Join(dir, "release"), "--idle-time", "10m", "--run-key", key)
	if err != nil {
		t.Fatalf("release: %v\n%s", err, stdout)
	}
	var rep apiv1.ReleaseResponse
	if err := json.Unmarshal([]byte(outs["report"]), &rep); err != nil || outs["pooled"] != "2" || rep.RunKey != key {
		t.Errorf("release outputs %v (%v)", outs, err)
	}
	for _, id := range ids {
		if rec, err := env.Store.Get(t.Context(), id); err != nil || rec.State != store.StateIdle {
			t.Errorf("%s after release: %+v %v", id, rec, err)
		}
	}

	// A run that never provisioned has nothing to release, and that is not an error.
	env.Issuer.SetActionsContext("request-token", env.Claims("6002", map[string]any{"aud": nil}))
	stdout, outs, err = run(t, release, filepath.Join(dir, "release-none"))
	if err != nil || outs["pooled"] != "0" || !strings.Contains(stdout, "Nothing to release") {
		t.Errorf("release without provision: %v %v\n%s", err, outs, stdout)
	}

	// Refused: an unknown flag, a missing audience, no Actions context.
	if _, _, err := run(t, provision, "", "--frobnicate"); err == nil {
		t.Error("unknown flag accepted")
	}
	saved := vars["ACTIONS_ID_TOKEN_REQUEST_TOKEN"]
	delete(vars, "ACTIONS_ID_TOKEN_REQUEST_TOKEN")
	if _, _, err := run(t, provision, "", "--allowed-instance-types", "c6i.*"); err == nil || !strings.Contains(err.Error(), "id-token: write") {
		t.Errorf("provision without the Actions token variables: %v", err)
	}
	vars["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = saved
	env.Audit(t)
}
