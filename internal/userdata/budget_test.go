package userdata

import (
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestPreRunnerBudget: a pre-runner script that config accepts always fits in EC2's user data next to
// the largest bootstrap (both architectures, a log group, the longest job access, every URL as long as a
// real release's), and one over the budget is refused at plan time. Before, a 12 KiB script passed
// the plan and failed at launch.
func TestPreRunnerBudget(t *testing.T) {
	t.Parallel()
	largest := func(script string) Params {
		p := validParams()
		long := "https://releases.example.com/" + strings.Repeat("r", 120) + "/runnerpool_linux_"
		p.AgentX64.URL, p.AgentARM64.URL = long+"amd64", long+"arm64"
		p.RunnerBaseURL = "https://mirror.example.com/" + strings.Repeat("m", 120)
		p.Table, p.Region, p.LogGroup = strings.Repeat("t", 255), "ap-southeast-5", "/"+strings.Repeat("g", 200)
		p.JobAccess, p.Notice, p.InstanceKeys = "docker", "poll", KeysID
		p.PreRunnerScript = script
		return p
	}
	// The largest incompressible script within the budget.
	n := declared.PreRunnerScriptBudget
	for len(declared.PackPreRunnerScript(declared.IncompressibleText(n))) > declared.PreRunnerScriptBudget {
		n -= 16
	}
	fits := declared.IncompressibleText(n)
	if err := declared.ValidatePreRunnerScript(fits); err != nil {
		t.Fatalf("config refuses a script within the budget: %v", err)
	}
	if _, err := Render(largest(fits)); err != nil {
		t.Errorf("a pre-runner script within config's budget does not fit in the largest user data: %v", err)
	}
	if err := declared.ValidatePreRunnerScript(declared.IncompressibleText(n + 64)); err == nil {
		t.Errorf("config accepts a script over the budget")
	}
	// A shell script of 6 KiB fits: this package's own template, cut to that size, stands for one.
	typical := tmplText[:6*1024]
	if err := declared.ValidatePreRunnerScript(typical); err != nil {
		t.Errorf("a typical 6 KiB script is refused: %v", err)
	}
	if _, err := Render(largest(typical)); err != nil {
		t.Errorf("a typical 6 KiB script does not fit: %v", err)
	}
}
