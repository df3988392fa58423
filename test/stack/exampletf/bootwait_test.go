package exampletf_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestExampleKeepsTheSlowestClassOpen: the load balancer keeps a provision's request open, and a
// stopping task serves it, as long as the reconciler lets a provision of a runner class whose image
// installs packages at boot run (RUNNERPOOL_PROVISION_TIMEOUT plus config's apt lock wait and
// install); the README's figure is that. Before, the request was cut at the timeout + 60 s.
func TestExampleKeepsTheSlowestClassOpen(t *testing.T) {
	t.Parallel()
	extra := int64((declared.AptLockWait + declared.InstallAllowance) / time.Second)
	for _, timeout := range []int64{600, 120} {
		m := loadWith(t, map[string]cty.Value{"provision_timeout_seconds": cty.NumberIntVal(timeout)})
		idle, _ := m.Resource("resource", "aws_lb", "api").GetAttr("idle_timeout").AsBigFloat().Int64()
		delay, _ := m.Resource("resource", "aws_lb_target_group", "reconciler").GetAttr("deregistration_delay").AsBigFloat().Int64()
		if want := timeout + extra + 60; idle != want || delay != min(want, 3600) {
			t.Errorf("provision timeout %d s: idle timeout %d s, deregistration delay %d s; want %d s", timeout, idle, delay, want)
		}
	}
	readme, err := os.ReadFile("../../../examples/complete/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("and %d minutes more for a runner class whose image installs packages at boot", extra/60); !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), want) {
		t.Errorf("the example's README does not say %q", want)
	}
}
