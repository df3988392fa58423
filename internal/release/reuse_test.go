package release

import (
	"errors"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestReuseRefused: which run scopes a class's reuse rule lets the release pool an instance for.
func TestReuseRefused(t *testing.T) {
	t.Parallel()
	rules := map[string]string{"any": declared.ReuseAny, "unset": "", "same": declared.ReuseSameRepository, "never": declared.ReuseNever, "odd": "sometimes"}
	r := &Releaser{opts: Options{Reuse: func(class string) (string, error) {
		rule, ok := rules[class]
		if !ok {
			return "", errors.New("not read")
		}
		return rule, nil
	}}}
	for _, tc := range []struct {
		class, scope, refused string // refused: a part of the reason ("": pooled)
	}{
		{"any", "acme/app", ""},
		{"any", "acme", ""},
		{"unset", "acme/app", ""},
		{"same", "acme/app", ""},
		{"same", "acme", "not a repository"},
		{"never", "acme/app", "does not reuse instances"},
		{"odd", "acme/app", "unknown reuse rule"},
		{"gone", "acme/app", "reuse rule is unknown"},
	} {
		got, _ := r.reuseRefused(tc.class, tc.scope)
		if (got == "") != (tc.refused == "") || !strings.Contains(got, tc.refused) {
			t.Errorf("class %s, scope %s: %q, want %q", tc.class, tc.scope, got, tc.refused)
		}
	}
	if got, _ := (&Releaser{}).reuseRefused("any", "acme"); got != "" {
		t.Errorf("without a Reuse function: %q, want every class pooled", got)
	}
}
