package config

import (
	"maps"
	"strings"
	"testing"
)

func TestQuotaSettings(t *testing.T) {
	t.Parallel()
	classWithCap := func(n string) string {
		return `{"runner_classes": {"linux": {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/pool", "launch_template_id": "lt-1", "subnets": ["subnet-a"], "max_instances": ` + n + `}}}`
	}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    Quotas
		wantErr []string // substrings; empty: no error
	}{
		{name: "none", want: Quotas{}},
		{
			name: "limits and overrides",
			args: []string{"--max-instances", "200", "--max-runners-per-repository", "10", "--max-runners-per-repository-overrides", "Acme/API=40, other-org/docs=2"},
			want: Quotas{MaxInstances: 200, MaxRunnersPerRepository: 10, RepositoryOverrides: map[string]int{"acme/api": 40, "other-org/docs": 2}},
		},
		{name: "zero cap", args: []string{"--max-instances", "0"}, wantErr: []string{"max-instances (--max-instances)", "positive"}},
		{name: "negative repository limit", env: map[string]string{"RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY": "-3"}, wantErr: []string{"max-runners-per-repository (RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY)", `"-3"`}},
		{name: "not a number", args: []string{"--max-instances", "lots"}, wantErr: []string{`"lots"`}},
		{name: "zero override", args: []string{"--max-runners-per-repository-overrides", "acme/api=0"}, wantErr: []string{"acme/api", "positive"}},
		{name: "override of an owner", args: []string{"--max-runners-per-repository-overrides", "acme=3"}, wantErr: []string{"want a repository"}},
		{name: "override without a limit", args: []string{"--max-runners-per-repository-overrides", "acme/api"}, wantErr: []string{"owner/repo=N"}},
		{name: "override twice", args: []string{"--max-runners-per-repository-overrides", "acme/api=3,ACME/api=4"}, wantErr: []string{"given twice"}},
		{name: "unknown repository", args: []string{"--max-runners-per-repository-overrides", "acme/web=3,stranger/x=1"},
			wantErr: []string{"acme/web is not an allowed repository", "stranger/x is not an allowed repository"}},
		{name: "class cap zero", env: map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": writeFile(t, "zero.json", classWithCap("0"))}, wantErr: []string{`runner class "linux": max_instances 0`}},
		{name: "class cap above the deployment's", args: []string{"--max-instances", "5"},
			env: map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": writeFile(t, "big.json", classWithCap("6"))}, wantErr: []string{"runner class linux: max_instances 6 exceeds max-instances 5"}},
		{name: "class cap", args: []string{"--max-instances", "6"},
			env: map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": writeFile(t, "ok.json", classWithCap("6"))}, want: Quotas{MaxInstances: 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			maps.Copy(env, tc.env)
			c, err := load(env, tc.args...)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("accepted: %+v", c.Quotas)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not mention %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Quotas.MaxInstances != tc.want.MaxInstances || c.Quotas.MaxRunnersPerRepository != tc.want.MaxRunnersPerRepository ||
				!maps.Equal(c.Quotas.RepositoryOverrides, tc.want.RepositoryOverrides) {
				t.Errorf("quotas %+v, want %+v", c.Quotas, tc.want)
			}
		})
	}
}

func TestRepositoryLimit(t *testing.T) {
	t.Parallel()
	q := Quotas{MaxRunnersPerRepository: 10, RepositoryOverrides: map[string]int{"acme/api": 40}}
	for repo, want := range map[string]int{"acme/api": 40, "Acme/API": 40, "acme/web": 10} {
		if got := q.RepositoryLimit(repo); got != want {
			t.Errorf("%s: %d, want %d", repo, got, want)
		}
	}
	if (Quotas{}).RepositoryLimits() || !(Quotas{RepositoryOverrides: map[string]int{"a/b": 1}}).RepositoryLimits() {
		t.Error("RepositoryLimits")
	}
}
