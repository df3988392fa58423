package userdata

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestImageRecipe ties the Packer template and the images guide to the script: the template prepares
// the image with the user data's own `bake` mode, for job accesses and bases the guide names.
func TestImageRecipe(t *testing.T) {
	t.Parallel()
	recipe, err := os.ReadFile("../../images/packer/runnerpool.pkr.hcl")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../../templates/guides/images.md.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(recipe), `"sudo bash /tmp/runnerpool-userdata.sh bake ${var.job_access}"`) {
		t.Errorf("the Packer template does not prepare the image with the user data's bake mode")
	}
	script := render(t, func(*Params) {})
	// The tags the reconciler reads to tell a prepared image (declared.BootInstalls): the job access,
	// and the runner release, read from the script as the template reads it.
	for _, tag := range []string{`"` + declared.ImageTagJobAccess + `"     = var.job_access`, `"` + declared.ImageTagRunnerVersion + `" = local.runner_version`} {
		if !strings.Contains(string(recipe), tag) {
			t.Errorf("the Packer template does not tag the image %s", tag)
		}
	}
	re := regexp.MustCompile(`regex\("((?:[^"\\]|\\.)*)", file\(var.user_data_file\)\)\[0\]`).FindSubmatch(recipe)
	if re == nil {
		t.Fatalf("the Packer template does not read the runner version from the user data")
	}
	if m := regexp.MustCompile(strings.ReplaceAll(string(re[1]), `\\`, `\`)).FindStringSubmatch(script); m == nil || m[1] != RunnerVersion {
		t.Errorf("the Packer template's pattern %s reads %q from the script, want %s", re[1], m, RunnerVersion)
	}
	for _, access := range []string{"user", "docker", "root"} {
		if !strings.Contains(string(recipe), `"`+access+`"`) {
			t.Errorf("the Packer template does not offer job access %s", access)
		}
		if !regexp.MustCompile(`(?m)^  ` + access + `\) access=`).MatchString(script) {
			t.Errorf("the script cannot bake for job access %s", access)
		}
	}
	for base, name := range map[string]string{"ubuntu-24.04": "Ubuntu 24.04", "ubuntu-22.04": "Ubuntu 22.04", "debian-12": "Debian 12", "al2023": "Amazon Linux 2023"} {
		if !regexp.MustCompile(`"` + regexp.QuoteMeta(base) + `"\s+= \{`).Match(recipe) {
			t.Errorf("the Packer template has no base %s", base)
		}
		if !strings.Contains(string(guide), "| "+name) {
			t.Errorf("the images guide does not name %s", name)
		}
	}
}
