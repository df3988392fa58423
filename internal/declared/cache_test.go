package declared

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRunnerClassCache(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		c    *Cache
		want string
	}{
		{"none", nil, ""},
		{"on with the defaults", &Cache{Enabled: true}, ""},
		{"limits", &Cache{Enabled: true, RepositoryLimitGiB: 50, MaxAge: Duration(72 * time.Hour)}, ""},
		{"negative limit", &Cache{Enabled: true, RepositoryLimitGiB: -1}, "cache.repository_limit_gib"},
		{"limit too large", &Cache{Enabled: true, RepositoryLimitGiB: MaxCacheRepositoryLimitGiB + 1}, "cache.repository_limit_gib"},
		{"age too short", &Cache{Enabled: true, MaxAge: Duration(time.Minute)}, "cache.max_age"},
		{"age too long", &Cache{Enabled: true, MaxAge: Duration(91 * 24 * time.Hour)}, "cache.max_age"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := validClass()
			rc.Cache = tt.c
			err := rc.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
	// The defaults are GitHub's own: 10 GiB per repository, 7 days unused; a nil block is off.
	var off *Cache
	if off.On() || off.RepositoryLimit() != 10<<30 || off.Age() != 7*24*time.Hour {
		t.Errorf("nil block: on %v, limit %d, age %s", off.On(), off.RepositoryLimit(), off.Age())
	}
	if c := (&Cache{Enabled: true, RepositoryLimitGiB: 2, MaxAge: Duration(time.Hour)}); !c.On() || c.RepositoryLimit() != 2<<30 || c.Age() != time.Hour {
		t.Errorf("set block: on %v, limit %d, age %s", c.On(), c.RepositoryLimit(), c.Age())
	}
	// Stored and read back; a class without the block stores no key (its spec hash is unchanged).
	for _, c := range []*Cache{nil, {Enabled: true, RepositoryLimitGiB: 5, MaxAge: Duration(48 * time.Hour)}} {
		rc := validClass()
		rc.Cache = c
		b, err := json.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil && strings.Contains(string(b), `"cache"`) {
			t.Errorf("a class without a cache block stores %s", b)
		}
		got, err := DecodeRunnerClass(rc.Name, b)
		if err != nil || (got.Cache == nil) != (c == nil) || (c != nil && *got.Cache != *c) {
			t.Errorf("round trip of %s: %+v, %v", b, got.Cache, err)
		}
	}
}
