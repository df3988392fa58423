package runnerclass_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
)

// versions answers version "7" for every class, and says it installs runner 2.338.0.
type versions struct{ err error }

func (v versions) For(context.Context, declared.RunnerClass) (string, error) { return "7", v.err }
func (versions) Runner(_ declared.RunnerClass, n string) string {
	if n == "7" {
		return "2.338.0"
	}
	return ""
}

func TestResolve(t *testing.T) {
	t.Parallel()
	q := &pool.Queue{}
	queue := func(url string) *pool.Queue {
		if url != "https://sqs.example/q" {
			t.Errorf("queue(%q), want the class's queue URL", url)
		}
		return q
	}
	rc := declared.RunnerClass{
		Name: "linux", LaunchTemplateID: "lt-0123456789abcdef0", QueueURL: "https://sqs.example/q",
		Subnets: []string{"subnet-a"}, Tags: map[string]string{"team": "ci"},
	}
	r, err := runnerclass.Resolve(t.Context(), rc, versions{}, queue)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "linux" || r.TemplateVersion != "7" || r.RunnerVersion != "2.338.0" || r.Queue != q {
		t.Errorf("Resolve = %+v, want version 7, runner 2.338.0 and the class's queue", r)
	}
	if r.JobAccess != declared.JobAccessUser {
		t.Errorf("JobAccess = %q, want %q spelled out", r.JobAccess, declared.JobAccessUser)
	}
	l := r.Launch()
	if l.LaunchTemplateID != rc.LaunchTemplateID || l.LaunchTemplateVersion != "7" || len(l.Subnets) != 1 || l.Tags["team"] != "ci" {
		t.Errorf("Launch() = %+v", l)
	}
	l.Tags["team"] = "changed"
	if r.Tags["team"] != "ci" {
		t.Error("Launch() shares the class's tags: a caller's Tagged would change the class")
	}

	noQueue := rc
	noQueue.QueueURL = ""
	if r, err := runnerclass.Resolve(t.Context(), noQueue, versions{}, queue); err != nil || r.Queue != nil {
		t.Errorf("without a queue URL: %+v, %v; want no queue and no error", r, err)
	}
	noLT := rc
	noLT.LaunchTemplateID = ""
	if _, err := runnerclass.Resolve(t.Context(), noLT, versions{}, queue); !errors.Is(err, runnerclass.ErrNoLaunchTemplate) {
		t.Errorf("without a launch template: %v, want ErrNoLaunchTemplate", err)
	}
	refused := errors.New("EC2 refused the version")
	if _, err := runnerclass.Resolve(t.Context(), rc, versions{err: refused}, queue); !errors.Is(err, refused) {
		t.Errorf("a refused version: %v, want EC2's error", err)
	}
	if _, err := runnerclass.Resolve(t.Context(), rc, nil, queue); err == nil {
		t.Error("without launch template versions: no error")
	}
}
