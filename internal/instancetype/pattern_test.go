package instancetype

import "testing"

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, typ string
		want         bool
	}{
		{"c*", "c6i.large", true},
		{"c*", "m5.large", false},
		{"m5.*", "m5.large", true},
		{"m5.*", "m5a.large", false},
		{"*.large", "c6i.large", true},
		{"*.large", "c6i.xlarge", false},
		{"c6i.large", "c6i.large", true},
		{"c6i.large", "c6i.large2", false},
		{"*", "anything", true},
		{"c*.*large", "c7g.2xlarge", true},
		{"c*g.*", "c6i.large", false},
		{"*a*a*", "ab", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.typ); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.typ, got, tt.want)
		}
	}
	if !MatchAny(nil, "x") {
		t.Error("MatchAny(nil) should match every type")
	}
	if MatchAny([]string{"c*", "m5.*"}, "r6i.large") {
		t.Error("MatchAny matched r6i.large")
	}
}

func TestValidatePattern(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"c*", "m5.*", "*", "c6i.large", "*.large"} {
		if err := ValidatePattern(ok); err != nil {
			t.Errorf("ValidatePattern(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "C5.*", "c5 large", "**", "c5.large;rm", "abcdefghijklmnopqrstuvwxyz12345"} {
		if err := ValidatePattern(bad); err == nil {
			t.Errorf("ValidatePattern(%q) = nil, want error", bad)
		}
	}
	if err := ValidatePatterns(nil); err == nil {
		t.Error("ValidatePatterns(nil) = nil, want error")
	}
}

func FuzzMatch(f *testing.F) {
	for _, s := range []string{"c*", "m5.*", "*", "**a"} {
		f.Add(s, "c6i.large")
	}
	f.Fuzz(func(t *testing.T, pattern, typ string) {
		Match(pattern, typ) // must not panic
		if Match(typ, typ) != true && !containsStar(typ) {
			t.Errorf("a type must match itself: %q", typ)
		}
	})
}

func containsStar(s string) bool {
	for _, r := range s {
		if r == '*' {
			return true
		}
	}
	return false
}

func TestCovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outer, inner string
		want         bool
	}{
		{"c7i.*", "c7i.large", true},
		{"c7i.*", "c7i.*", true},
		{"c*", "c7i.*", true},
		{"*", "m5.*", true},
		{"*.large", "c*.large", true},
		{"c7i.*", "c*", false},
		{"c7i.*", "c7i*", false},
		{"*.large", "*large", false},
		{"m5.*", "m5a.large", false},
		{"c*.*large", "c7g.*xlarge", true},
		{"c*.*large", "c*", false},
		{"c6i.large", "c6i.large", true},
		{"c6i.large", "c6i.*", false},
	}
	for _, tt := range tests {
		if got := Covers(tt.outer, tt.inner); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.outer, tt.inner, got, tt.want)
		}
	}
}
