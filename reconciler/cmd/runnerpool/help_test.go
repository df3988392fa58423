package main

// The help of every subcommand, as a platform engineer reads it first: every flag's argument name
// is the kind of value it takes. Go's flag package takes the first backquoted word of a usage text as
// the argument name, which once made `serve --help` print `-claim-ack-wait claim-registration-wait`
// and `-aws-account-id --instance-keys`.

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// flagLine is a flag's first line in flag.PrintDefaults: two spaces, the flag, and its argument
// name when it takes one.
var flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)

// argNames are the argument names a flag may show: the kinds of value Go prints for its own flag
// types (a boolean flag shows none).
var argNames = map[string]bool{"": true, "string": true, "duration": true, "int": true, "bool": true, "uint": true, "float": true}

func TestHelpPlaceholders(t *testing.T) {
	t.Parallel()
	for _, name := range order {
		if name == "version" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), []string{name, "--help"}, &stdout, &stderr); code != 0 {
				t.Fatalf("runnerpool %s --help: exit %d\n%s", name, code, stderr.String())
			}
			help := stdout.String() + stderr.String()
			flags := 0
			for _, l := range strings.Split(help, "\n") {
				m := flagLine.FindStringSubmatch(l)
				if m == nil {
					if strings.HasPrefix(l, "  -") {
						t.Errorf("flag line %q: want `  -flag` and at most one argument name", l)
					}
					continue
				}
				flags++
				if !argNames[m[2]] {
					t.Errorf("-%s shows the argument name %q; want the kind of value it takes (string, duration, int, bool)", m[1], m[2])
				}
			}
			if flags == 0 {
				t.Fatalf("runnerpool %s --help lists no flags:\n%s", name, help)
			}
		})
	}
}

// TestServeHelpKeepsTheText: the backquoted words of serve's settings stay in the help text (as
// quoted words), and each setting shows the kind its default has.
func TestServeHelpKeepsTheText(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"serve", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("runnerpool serve --help: exit %d\n%s", code, stderr.String())
	}
	help := stderr.String()
	for _, want := range []string{
		"  -claim-ack-wait duration\n",
		"(at most half of 'claim-registration-wait')",
		"  -aws-account-id string\n",
		"  -github-listing-pages-per-minute int\n",
		"  -metrics-listen string\n",
		"Optional separate address for '/metrics'",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, help)
		}
	}
}
