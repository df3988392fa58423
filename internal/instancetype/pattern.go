// Package instancetype matches EC2 instance types against allowed-instance-types patterns, with the
// syntax EC2's attribute-based selection uses (AllowedInstanceTypes): `*` matches any run of
// characters, as in `c*`, `m5.*`, `*.large` or `c6i.large`.
package instancetype

import (
	"fmt"
	"regexp"
	"strings"
)

// patternRE is what EC2 accepts in AllowedInstanceTypes: letters, digits, '.', '-' and '*'.
var patternRE = regexp.MustCompile(`^[a-z0-9.*-]{1,30}$`)

// ValidatePattern reports why a pattern is not usable, or nil.
func ValidatePattern(p string) error {
	switch {
	case strings.TrimSpace(p) == "":
		return fmt.Errorf("instance type pattern is empty")
	case !patternRE.MatchString(p):
		return fmt.Errorf("instance type pattern %q: use lower-case letters, digits, '.', '-' and '*' (at most 30 characters)", p)
	case strings.Trim(p, "*") == "" && p != "*":
		return fmt.Errorf("instance type pattern %q: use a single * to allow every type", p)
	}
	return nil
}

// ValidatePatterns validates every pattern of a list; an empty list is an error.
func ValidatePatterns(ps []string) error {
	if len(ps) == 0 {
		return fmt.Errorf("allowed instance types: at least one pattern is required")
	}
	for _, p := range ps {
		if err := ValidatePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// Match reports whether the instance type matches the pattern.
func Match(pattern, instanceType string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == instanceType
	}
	if !strings.HasPrefix(instanceType, parts[0]) {
		return false
	}
	rest := instanceType[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return strings.HasSuffix(rest, last)
}

// MatchAny reports whether the type matches any pattern. An empty list matches every type.
func MatchAny(patterns []string, instanceType string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if Match(p, instanceType) {
			return true
		}
	}
	return false
}

// Covers reports whether every instance type inner matches also matches outer: inner is a pattern
// at least as narrow as outer ("c7i.large" and "c7i.*" are within "c7i.*" and "c*"; "c*" is not
// within "c7i.*"). It is exact for this syntax: outer matches inner read with its stars as
// literal characters exactly when outer's stars can absorb whatever inner's stars stand for.
func Covers(outer, inner string) bool {
	return Match(outer, inner)
}
