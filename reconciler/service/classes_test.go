// Runner classes from the state table: written by the Terraform provider (internal/declared), used by
// the next provision of a running replica.
package service_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestRunnerClassFromTable: without a runner classes file a replica provisions with the runner
// classes of the state table; one written while it runs is used by the next provision, with no
// restart; one that cannot launch (no launch template) is refused with the reason.
func TestRunnerClassFromTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{})
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  "",
		"RUNNERPOOL_DEFAULT_RUNNER_CLASS": servicetest.RunnerClass,
		"RUNNERPOOL_RESOURCE_CLASSES":     "small=2:4096",
		"RUNNERPOOL_CONFIG_CACHE_TTL":     "1h", // the class is found because the provision names it, not by expiry
	})
	repo := declared.NewRepository(env.Store)

	// The table holds no runner class yet.
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "3001", nil), provisionBody(1))
	if code != http.StatusBadRequest || !strings.Contains(string(body), `runner class \"linux\" is not configured`) {
		t.Fatalf("provision before the class exists: %d %s, want 400 naming the runner class", code, body)
	}

	// terraform apply writes it; the next provision launches with it.
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "3002", nil), provisionBody(1))
	if code != http.StatusOK {
		t.Fatalf("provision after the class was written: %d %s", code, body)
	}
	prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
	if len(prov.Runners) != 1 || prov.Runners[0].Source != apiv1.SourceCreated {
		t.Fatalf("provision answer %+v, want one created runner", prov)
	}
	id := prov.Runners[0].InstanceID
	rec, err := env.Store.Get(ctx, id)
	if err != nil || rec.RunnerClass != rc.Name || rec.State != store.StateRunning {
		t.Errorf("record %+v, %v: want running, runner class %s", rec, err, rc.Name)
	}
	out, err := env.EC2Client().DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 {
		t.Fatalf("DescribeInstances %s: %v", id, err)
	}
	inst := out.Reservations[0].Instances[0]
	if subnet := aws.ToString(inst.SubnetId); !slices.Contains(slices.Collect(maps.Keys(servicetest.TableSubnets)), subnet) {
		t.Errorf("instance launched in %s, want one of the table runner class's subnets", subnet)
	}

	// A class the table holds that step-driven provisions cannot use.
	noLT := env.TableRunnerClass("nolt")
	noLT.LaunchTemplateID = ""
	if _, err := repo.PutRunnerClass(ctx, noLT, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	req := provisionBody(1)
	req.RunnerClass = "nolt"
	code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "3003", nil), req)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "no launch_template_id") {
		t.Errorf("provision of a class without launch template: %d %s, want 400 saying why", code, body)
	}
	env.Audit(t)
}

// TestTableRunnerClassFieldsHonoured: a runner class of the state table with instance types, a
// usage class and labels: a provision naming it (with wider patterns of its own and no usage
// class) gets runners of the class's types and usage class, labelled with the class's labels as
// well as the run's; a request asking for another usage class or for types outside the class is
// refused with a 400 that says why.
func TestTableRunnerClassFieldsHonoured(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{})
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  "",
		"RUNNERPOOL_DEFAULT_RUNNER_CLASS": "spotty",
		"RUNNERPOOL_RESOURCE_CLASSES":     "small=2:4096",
	})
	rc := env.TableRunnerClass("spotty")
	rc.UsageClass, rc.InstanceTypes, rc.Labels = declared.UsageSpot, []string{"c6i.xlarge"}, []string{"linux-x64", "team-ci"}
	if _, err := declared.NewRepository(env.Store).PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	req := provisionBody(2) // allowed c6i.*, resource class small, no usage class
	req.RunnerClass = "spotty"
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "3101", nil), req)
	if code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
	if want := []string{"3101-1", "runnerpool", "linux-x64", "team-ci"}; !slices.Equal(prov.Labels, want) {
		t.Errorf("labels %v, want %v", prov.Labels, want)
	}
	if len(prov.Runners) != 2 {
		t.Fatalf("runners %+v, want 2", prov.Runners)
	}
	for _, rn := range prov.Runners {
		if rn.InstanceType != "c6i.xlarge" || rn.UsageClass != declared.UsageSpot {
			t.Errorf("runner %+v: want a spot c6i.xlarge", rn)
		}
		if v, ok := env.EC2.Instance(rn.InstanceID); !ok || v.Lifecycle != "spot" || v.InstanceType != "c6i.xlarge" {
			t.Errorf("instance %s in EC2: %+v, want a spot c6i.xlarge", rn.InstanceID, v)
		}
		creds := env.Credentials(rn.InstanceID)
		if len(creds) != 1 || !slices.Equal(creds[0].Labels, prov.Labels) {
			t.Errorf("credentials of %s: %+v, want one registration with labels %v", rn.InstanceID, creds, prov.Labels)
		}
	}

	for _, tc := range []struct {
		name   string
		mutate func(*apiv1.ProvisionRequest)
		want   string
	}{
		{"other usage class", func(p *apiv1.ProvisionRequest) { p.UsageClass = "on-demand" }, `conflicts with runner class \"spotty\", whose runners are spot`},
		{"types outside the class", func(p *apiv1.ProvisionRequest) { p.AllowedInstanceTypes = []string{"m5.*"} }, `outside runner class \"spotty\"'s instance types (c6i.xlarge)`},
	} {
		bad := req
		tc.mutate(&bad)
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "3102", nil), bad)
		if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want 400 containing %s", tc.name, code, body, tc.want)
		}
	}
	env.Audit(t)
}
