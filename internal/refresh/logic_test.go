// Table tests of refresh's pure helpers: reading instance ids out of runner names.
package refresh

import "testing"

func TestInstanceOfRunner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"runnerpool-i-0123456789abcdef0", "i-0123456789abcdef0", true},
		{"runnerpool-i-01234567", "i-01234567", true},
		{"runnerpool-i-0123456789ABCDEF0", "", false},
		{"runnerpool-i-012", "", false},
		{"other-i-0123456789abcdef0", "", false},
		{"runnerpool-", "", false},
	} {
		got, ok := InstanceOfRunner(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("InstanceOfRunner(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
