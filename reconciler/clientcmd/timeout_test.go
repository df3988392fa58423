package clientcmd

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestProvisionOutwaitsTheReconciler: the provision step waits longer than the reconciler's own time
// limit of a provision whose runner class boots a stock image (apt's lock wait and the install on top
// of the default --provision-timeout of 10m), with a minute for the retries after it; before, the
// step gave up at 20 minutes while such a provision could run 23.
func TestProvisionOutwaitsTheReconciler(t *testing.T) {
	t.Parallel()
	reconciler := 10*time.Minute + declared.AptLockWait + declared.InstallAllowance
	guide, err := os.ReadFile("../../templates/guides/images.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("`runnerpool provision` waits %d minutes", int(ProvisionTimeout.Minutes())); !strings.Contains(strings.Join(strings.Fields(string(guide)), " "), want) {
		t.Errorf("the images guide does not say %q", want)
	}
	if ProvisionTimeout < reconciler+time.Minute {
		t.Errorf("provision step timeout %s, want at least %s (the reconciler's limit for a class that installs at boot, and a minute)", ProvisionTimeout, reconciler+time.Minute)
	}
}
