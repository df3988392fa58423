package declared

import (
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

func TestCheckCaps(t *testing.T) {
	t.Parallel()
	pool := func(name, class string, targets ...[2]int) WarmPool {
		p := WarmPool{Name: name, RunnerClass: class}
		for _, tg := range targets {
			p.Schedules = append(p.Schedules, schedule.Schedule{Hot: tg[0], Stopped: tg[1]})
		}
		return p
	}
	pools := []WarmPool{pool("a", "std", [2]int{2, 3}, [2]int{6, 0}), pool("b", "big", [2]int{1, 1})}
	classes := map[string]RunnerClass{"std": {MaxInstances: 5}, "big": {MaxInstances: 2}}
	tests := []struct {
		name string
		max  int
		want []string
	}{
		{"no deployment cap", 0, []string{"runner class std keep up to 6 instances, more than its max_instances 5"}},
		{"deployment cap holds the pools", 8, []string{"std"}},
		{"deployment cap below the pools", 7, []string{"up to 8 instances, more than the deployment's cap of 7", "std"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := CheckCaps(tc.max, classes, pools)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %q does not mention %q", errs[i], w)
				}
			}
		})
	}
	if got := (pool("c", "x", [2]int{0, 4}, [2]int{3, 0})).PeakTarget(); got != 4 {
		t.Errorf("peak %d, want 4", got)
	}
}

func TestMaxInstancesValidation(t *testing.T) {
	t.Parallel()
	rc := validClass()
	rc.MaxInstances = -1
	if err := rc.Validate(); err == nil || !strings.Contains(err.Error(), "max instances -1") {
		t.Errorf("negative max_instances: %v", err)
	}
	rc.MaxInstances = 3
	if err := rc.Validate(); err != nil {
		t.Errorf("max_instances 3: %v", err)
	}
}
