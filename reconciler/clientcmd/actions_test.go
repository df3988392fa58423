package clientcmd_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

// TestCompositeActionsUseRealFlags keeps examples/github-actions in step with the commands: every
// flag an action passes exists.
func TestCompositeActionsUseRealFlags(t *testing.T) {
	t.Parallel()
	for name, cmd := range map[string]func(context.Context, []string, clientcmd.Env, io.Writer, io.Writer) error{
		"provision": clientcmd.Provision,
		"release":   clientcmd.Release,
	} {
		b, err := os.ReadFile("../../examples/github-actions/" + name + "/action.yml")
		if err != nil {
			t.Fatal(err)
		}
		var usage bytes.Buffer
		if err := cmd(t.Context(), []string{"-h"}, func(string) string { return "" }, io.Discard, &usage); err != nil {
			t.Fatalf("%s -h: %v", name, err)
		}
		flags := regexp.MustCompile(`[\s(]--([a-z-]+)`).FindAllStringSubmatch(string(b), -1)
		if len(flags) < 2 { // release passes two, provision more
			t.Fatalf("%s/action.yml passes %d flags; the pattern is broken", name, len(flags))
		}
		if !strings.Contains(string(b), "runnerpool "+name) {
			t.Errorf("%s/action.yml does not run `runnerpool %s`", name, name)
		}
		for _, f := range flags {
			if !strings.Contains(usage.String(), "  -"+f[1]+" ") && !strings.Contains(usage.String(), "  -"+f[1]+"\n") {
				t.Errorf("%s/action.yml passes --%s, which `runnerpool %s` does not have", name, f[1], name)
			}
		}
	}
}
