// example_test.go runs examples/complete as it is declared: the reconciler's task environment is
// the example's own (parsed from reconciler.tf's container definition, its secrets resolved as ECS
// would from Secrets Manager), its runner classes, warm pools and scale sets are the example's
// resources as the provider writes them, and it serves what the example and its README promise: the
// sample workflow's provision and release (examples/github-actions/workflow.yml), a webhook pool
// job, and a job of the organisation scale set.
package service_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v4"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// taskEnvironment is the reconciler container's environment in the example's task definition, its
// secrets resolved from secretValues (by Secrets Manager ARN), as ECS starts the task.
func taskEnvironment(t *testing.T, m *exampletf.Module, secretValues map[string]string) map[string]string {
	t.Helper()
	var defs []struct {
		Name        string
		Environment []struct{ Name, Value string }
		Secrets     []struct{ Name, ValueFrom string }
	}
	td := m.Resource("resource", "aws_ecs_task_definition", "reconciler")
	if err := json.Unmarshal([]byte(td.GetAttr("container_definitions").AsString()), &defs); err != nil || len(defs) != 1 {
		t.Fatalf("the reconciler's container definitions: %v (%d containers)", err, len(defs))
	}
	env := map[string]string{}
	for _, e := range defs[0].Environment {
		env[e.Name] = e.Value
	}
	for _, s := range defs[0].Secrets {
		v, ok := secretValues[s.ValueFrom]
		if !ok {
			t.Fatalf("the task reads secret %s from %s, which the test does not know", s.Name, s.ValueFrom)
		}
		env[s.Name] = v
	}
	return env
}

// writeExampleConfig writes the example's runner classes, warm pools and scale sets to the table as
// the provider does, and returns the runner classes and warm pools by name.
func writeExampleConfig(t *testing.T, env *servicetest.Env, m *exampletf.Module) (map[string]declared.RunnerClass, map[string]declared.WarmPool) {
	t.Helper()
	ctx := t.Context()
	repo := declared.NewRepository(env.Store)
	classes := map[string]declared.RunnerClass{}
	for name, a := range m.Resource("resource", "runnerpool_runner_class", "class").AsValueMap() {
		rc := declared.RunnerClass{
			Name: name, Image: str(a, "image"), CPU: num(a, "cpu"), MemoryMiB: num(a, "memory_mib"),
			InstanceTypes: strs(a, "instance_types"), UsageClass: str(a, "usage_class"), Subnets: strs(a, "subnets"),
			SecurityGroups: strs(a, "security_groups"), InstanceProfile: str(a, "instance_profile"), Labels: strs(a, "labels"),
			MaxRuntime: dur(t, a, "max_runtime"), IdleTime: dur(t, a, "idle_time"),
			LaunchTemplateID: str(a, "launch_template_id"), QueueURL: str(a, "queue_url"),
			Volume: declared.Volume{Type: declared.VolumeGP3, SizeGiB: num(a, "volume_size_gib"), IOPS: num(a, "volume_iops"), ThroughputMiBps: num(a, "volume_throughput_mibps")},
		}
		for _, s := range rc.Subnets {
			env.EC2.SetSubnet(s, servicetest.Region+"a")
		}
		if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
			t.Fatalf("runner class %s: %v", name, err)
		}
		classes[name] = rc
	}
	pools := map[string]declared.WarmPool{}
	declaredPools := m.Variable("warm_pools").AsValueMap()
	for name, a := range m.Resource("resource", "runnerpool_warm_pool", "pool").AsValueMap() {
		wp := declared.WarmPool{Name: name, RunnerClass: str(a, "runner_class"), Timezone: str(a, "timezone")}
		// The resource's schedule blocks are dynamic blocks over the variable's schedules.
		for _, s := range declaredPools[name].GetAttr("schedules").AsValueSlice() {
			sc := schedule.Schedule{Name: str(s, "name"), Hot: num(s, "hot"), Stopped: num(s, "stopped")}
			days, times := strs(s, "days"), s.GetAttr("time_ranges").AsValueSlice()
			if len(days) > 0 || len(times) > 0 {
				sc.Match = &schedule.Match{Days: days}
				for _, tr := range times {
					sc.Match.Times = append(sc.Match.Times, schedule.TimeRange{Start: str(tr, "start"), End: str(tr, "end")})
				}
			}
			wp.Schedules = append(wp.Schedules, sc)
		}
		if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
			t.Fatalf("warm pool %s: %v", name, err)
		}
		pools[name] = wp
	}
	for name, a := range m.Resource("resource", "runnerpool_scale_set", "set").AsValueMap() {
		set := declared.ScaleSet{Name: name, WarmPool: str(a, "warm_pool"), Scope: str(a, "scope"), RunnerGroup: str(a, "runner_group"), MaxRunners: num(a, "max_runners")}
		if _, err := repo.PutScaleSet(ctx, set, 0); err != nil {
			t.Fatalf("scale set %s: %v", name, err)
		}
	}
	return classes, pools
}

func str(v cty.Value, attr string) string {
	if !v.Type().HasAttribute(attr) || v.GetAttr(attr).IsNull() {
		return ""
	}
	return v.GetAttr(attr).AsString()
}

func num(v cty.Value, attr string) int {
	if !v.Type().HasAttribute(attr) || v.GetAttr(attr).IsNull() {
		return 0
	}
	n, _ := v.GetAttr(attr).AsBigFloat().Int64()
	return int(n)
}

func strs(v cty.Value, attr string) []string {
	if !v.Type().HasAttribute(attr) || v.GetAttr(attr).IsNull() {
		return nil
	}
	var out []string
	for _, e := range v.GetAttr(attr).AsValueSlice() {
		out = append(out, e.AsString())
	}
	return out
}

func dur(t *testing.T, v cty.Value, attr string) declared.Duration {
	t.Helper()
	d, err := time.ParseDuration(str(v, attr))
	if err != nil {
		t.Fatalf("%s: %v", attr, err)
	}
	return declared.Duration(d)
}

// sampleProvision is the provision step of examples/github-actions/workflow.yml as the provision
// action sends it: its inputs, the runner class the deployment's default.
func sampleProvision(t *testing.T) (apiv1.ProvisionRequest, apiv1.ReleaseRequest) {
	t.Helper()
	b, err := os.ReadFile("../../examples/github-actions/workflow.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses string
				With map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("workflow.yml: %v", err)
	}
	step := func(action string) map[string]string {
		for _, j := range wf.Jobs {
			for _, s := range j.Steps {
				if strings.Contains(s.Uses, "/examples/github-actions/"+action+"@") {
					return s.With
				}
			}
		}
		t.Fatalf("workflow.yml has no %s step", action)
		return nil
	}
	p, r := step("provision"), step("release")
	count, err := strconv.Atoi(p["count"])
	if err != nil {
		t.Fatalf("count %q: %v", p["count"], err)
	}
	req := apiv1.ProvisionRequest{Count: count, UsageClass: p["usage-class"], ResourceClass: p["resource-class"], RunnerClass: p["runner-class"]}
	for _, pat := range strings.Split(p["allowed-instance-types"], ",") {
		req.AllowedInstanceTypes = append(req.AllowedInstanceTypes, strings.TrimSpace(pat))
	}
	idle, err := time.ParseDuration(r["idle-time"])
	if err != nil {
		t.Fatalf("idle-time %q: %v", r["idle-time"], err)
	}
	return req, apiv1.ReleaseRequest{IdleTimeSeconds: int(idle.Seconds())}
}

// TestExampleServesItsDeclaredWork: `runnerpool serve` with examples/complete's own task environment
// serves the sample workflow's provision (resource class small, c* or m5.* types, the default runner
// class) and release, a `pool=NAME` webhook job from the example's warm pool, and a job of the
// example's organisation scale set (owner-level runners). At cc50e7d the example declared none of
// the pool-job queue, the webhook secret, the default runner class or the resource classes, and the
// class did not allow the workflow's types: the replica served no webhook (404), and the provision
// was refused (400).
func TestExampleServesItsDeclaredWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true, InstanceKeys: config.InstanceKeysARN})
	m := env.Example(t, "../../examples/complete", nil)
	secrets := map[string]string{}
	for name, value := range map[string]string{"webhook_secret_arn": servicetest.WebhookSecret} {
		secrets[m.Variable(name).AsString()] = value
	}
	secrets[m.Variable("github_app").GetAttr("private_key_secret_arn").AsString()] = string(env.GitHub.AppPrivateKeyPEM())
	taskEnv := taskEnvironment(t, m, secrets)
	for _, owner := range strings.Split(taskEnv["RUNNERPOOL_ALLOWED_REPOSITORIES"], ",") {
		env.GitHub.AddInstallation(strings.SplitN(owner, "/", 2)[0])
	}
	classes, pools := writeExampleConfig(t, env, m)

	// What only a local run changes: loopback addresses on free ports, the local OIDC issuer and
	// GitHub fake, and no runner classes file (servicetest's default; the example reads the table).
	// Everything else is the example's, over servicetest's test-sized timings.
	extra := map[string]string{
		"RUNNERPOOL_GITHUB_TOKEN": "", "RUNNERPOOL_RUNNER_CLASSES_FILE": "",
		"RUNNERPOOL_LISTEN": "127.0.0.1:0", "RUNNERPOOL_DASHBOARD_LISTEN": "127.0.0.1:0", "RUNNERPOOL_METRICS_LISTEN": "localhost:0",
	}
	for k, v := range taskEnv {
		if _, local := extra[k]; !local && k != "AWS_REGION" {
			extra[k] = v
		}
	}
	for _, k := range []string{"RUNNERPOOL_POOL_JOB_QUEUE_URL", "RUNNERPOOL_WEBHOOK_SECRET", "RUNNERPOOL_DEFAULT_RUNNER_CLASS", "RUNNERPOOL_RESOURCE_CLASSES",
		"RUNNERPOOL_OWNER_RUNNERS", "RUNNERPOOL_MAX_INSTANCES", "RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY", "RUNNERPOOL_GITHUB_APP_ID", "RUNNERPOOL_GITHUB_APP_KEY"} {
		if extra[k] == "" {
			t.Errorf("the example's task sets no %s", k)
		}
	}
	poolName := slices.Sorted(func(yield func(string) bool) {
		for k := range pools {
			if !yield(k) {
				return
			}
		}
	})[0]
	wp := pools[poolName]
	rc := classes[wp.RunnerClass]
	env.Hot(t, rc, wp.Name, declared.SpecHash(rc, wp), 1)
	r := env.Start(t, "a", extra)

	// The sample workflow: provision, release.
	prov, rel := sampleProvision(t)
	tok := env.Token(t, "5001", map[string]any{"aud": m.Variable("api_url").AsString()})
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, tok, prov)
	if code != http.StatusOK {
		t.Fatalf("the sample workflow's provision %+v: %d %s", prov, code, body)
	}
	if got := servicetest.Decode[apiv1.ProvisionResponse](t, body); len(got.Runners) != prov.Count || got.Label != "5001-1" {
		t.Errorf("provisioned %d runners labelled %q, want %d labelled 5001-1 (the workflow's runs-on: the run id and attempt): %s", len(got.Runners), got.Label, prov.Count, body)
	}
	if code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, rel); code != http.StatusOK {
		t.Fatalf("the sample workflow's release: %d %s", code, body)
	}

	// A webhook pool job, served from the warm pool.
	const jobID = 7101
	code, resp := deliver(t, r.URL, hook{delivery: "d-ex-7101", event: "workflow_job", body: queuedJob(jobID, 8101, "self-hosted", "pool="+poolName)})
	if code != http.StatusOK || resp.Result != webhook.ResultEnqueued || resp.Pool != poolName {
		t.Fatalf("pool job: %d %+v, want 200 enqueued for pool %s", code, resp, poolName)
	}
	waitServed(ctx, t, env, warmpool.JobRunID(jobID), "the webhook pool job")

	// A job of the example's organisation scale set.
	sets := m.Resource("resource", "runnerpool_scale_set", "set").AsValueMap()
	for name, a := range sets {
		scope := str(a, "scope")
		waitFor(t, 20*time.Second, "the replica to hold scale set "+name+"'s session", func() bool {
			st, ok := env.GitHub.ScaleSet(scope, name)
			return ok && st.Session != nil && st.Session.Owner == "a"
		})
		env.GitHub.QueueScaleSetJob("acme", "api", 9101, name)
		waitServed(ctx, t, env, "", "the scale set "+name+"'s job")
	}
	if len(sets) == 0 {
		t.Error("the example declares no scale set")
	}
	env.Audit(t)
}

// waitServed waits until a live instance of the environment serves the run (any run of a scale-set
// job when run is empty: a hot, started or, past the pool, newly created one) and its agent
// registered for it.
func waitServed(ctx context.Context, t *testing.T, env *servicetest.Env, run, what string) {
	t.Helper()
	waitFor(t, 30*time.Second, what+" served by an instance whose agent registered for it", func() bool {
		for _, v := range env.EC2.Instances() {
			id := v.ID
			rec, err := env.Store.Get(ctx, id)
			if err != nil {
				continue
			}
			match := rec.RunID == run || (run == "" && strings.HasPrefix(rec.RunID, "job:ss"))
			if match && rec.State.Live() && slices.Contains(env.Registered(id), rec.RunID) {
				return true
			}
		}
		return ctx.Err() != nil
	})
}
