// Table test of the pickup manager's in-memory filter.
package pool_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

func TestFilterMatches(t *testing.T) {
	t.Parallel()
	m := pool.Message{
		InstanceID: "i-0123456789abcdef0", UsageClass: "spot", InstanceType: "c6i.large",
		CPU: 2, MemoryMiB: 4096, ResourceClass: "medium", Scope: "acme/api",
		Threshold: time.Now().Add(time.Hour),
	}
	org := m
	org.Scope = "acme"
	unscoped := m
	unscoped.Scope = ""
	tests := []struct {
		name string
		f    pool.Filter
		m    pool.Message
		want bool
	}{
		{"empty filter matches everything", pool.Filter{}, m, true},
		{"usage class equal", pool.Filter{UsageClass: "spot"}, m, true},
		{"usage class differs", pool.Filter{UsageClass: "on-demand"}, m, false},
		{"exact instance type", pool.Filter{InstanceTypes: []string{"c6i.large"}}, m, true},
		{"family pattern", pool.Filter{InstanceTypes: []string{"c6i.*"}}, m, true},
		{"size pattern", pool.Filter{InstanceTypes: []string{"*.large"}}, m, true},
		{"one of several patterns", pool.Filter{InstanceTypes: []string{"m5.*", "c*"}}, m, true},
		{"no pattern matches", pool.Filter{InstanceTypes: []string{"m5.*", "*.xlarge"}}, m, false},
		{"cpu enough", pool.Filter{MinCPU: 2}, m, true},
		{"cpu too small", pool.Filter{MinCPU: 4}, m, false},
		{"memory enough", pool.Filter{MinMemoryMiB: 4096}, m, true},
		{"memory too small", pool.Filter{MinMemoryMiB: 8192}, m, false},
		{"resource class equal", pool.Filter{ResourceClass: "medium"}, m, true},
		{"resource class differs", pool.Filter{ResourceClass: "large"}, m, false},
		{"same repository", pool.Filter{Scope: "acme/api"}, m, true},
		{"repository names are case-insensitive", pool.Filter{Scope: "ACME/Api"}, m, true},
		{"other repository", pool.Filter{Scope: "acme/web"}, m, false},
		{"other owner", pool.Filter{Scope: "evil/api"}, m, false},
		{"repository instance never serves the organisation", pool.Filter{Scope: "acme"}, m, false},
		{"organisation instance serves its repository", pool.Filter{Scope: "acme/web"}, org, true},
		{"organisation instance serves the organisation", pool.Filter{Scope: "acme"}, org, true},
		{"organisation instance does not serve another owner", pool.Filter{Scope: "acmecorp/web"}, org, false},
		{"unscoped instance never serves a scoped request", pool.Filter{Scope: "acme/api"}, unscoped, false},
		{"every constraint at once", pool.Filter{
			UsageClass: "spot", InstanceTypes: []string{"c6i.*"}, MinCPU: 2, MinMemoryMiB: 2048,
			ResourceClass: "medium", Scope: "acme/api",
		}, m, true},
		{"every constraint but one", pool.Filter{
			UsageClass: "spot", InstanceTypes: []string{"c6i.*"}, MinCPU: 2, MinMemoryMiB: 2048,
			ResourceClass: "medium", Scope: "acme/web",
		}, m, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.f.Matches(tt.m); got != tt.want {
				t.Errorf("%+v.Matches(%+v) = %v, want %v", tt.f, tt.m, got, tt.want)
			}
		})
	}
}
