package fleet_test

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
)

func TestTagged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		class map[string]string
		tags  fleet.LaunchTags
		want  map[string]string
	}{
		{
			name: "provision", tags: fleet.LaunchTags{Deployment: "dep", RunnerClass: "small", RunID: "run-1", Name: "runnerpool-small"},
			want: map[string]string{tags.Deployment: "dep", tags.RunnerClass: "small", tags.RunID: "run-1", tags.Name: "runnerpool-small"},
		},
		{
			name:  "warm pool, class tags kept",
			class: map[string]string{"team": "infra"},
			tags:  fleet.LaunchTags{Deployment: "dep", RunnerClass: "small", Pool: "p", SpecHash: "v1-a", Name: "runnerpool-pool-p"},
			want: map[string]string{"team": "infra", tags.Deployment: "dep", tags.RunnerClass: "small", tags.Pool: "p",
				tags.SpecHash: "v1-a", tags.Name: "runnerpool-pool-p"},
		},
		{
			name:  "the class names its instances",
			class: map[string]string{tags.Name: "builders"},
			tags:  fleet.LaunchTags{Deployment: "dep", Name: "runnerpool-small"},
			want:  map[string]string{tags.Name: "builders", tags.Deployment: "dep"},
		},
		{
			name:  "a class tag never overrides runnerpool's",
			class: map[string]string{tags.Deployment: "other", tags.Pool: "forged"},
			tags:  fleet.LaunchTags{Deployment: "dep", Pool: "p"},
			want:  map[string]string{tags.Deployment: "dep", tags.Pool: "p"},
		},
		{
			name: "empty fields put no tag", tags: fleet.LaunchTags{Deployment: "dep"},
			want: map[string]string{tags.Deployment: "dep"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := fleet.LaunchSpec{LaunchTemplateID: "lt-1", Tags: tc.class}
			before := maps.Clone(tc.class)
			got := spec.Tagged(tc.tags)
			if diff := cmp.Diff(tc.want, got.Tags); diff != "" {
				t.Errorf("Tagged (-want +got):\n%s", diff)
			}
			if got.LaunchTemplateID != "lt-1" {
				t.Errorf("LaunchTemplateID = %q, want the spec's", got.LaunchTemplateID)
			}
			if diff := cmp.Diff(before, spec.Tags); diff != "" {
				t.Errorf("the class's tags were modified (-before +after):\n%s", diff)
			}
		})
	}
}
