// Table tests of refresh's pure helpers: reading ids out of EC2 error messages and runner names.
package refresh

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMentioned(t *testing.T) {
	t.Parallel()
	batch := []string{"i-0abc1234", "i-0abc1234def567890", "i-11111111"}
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{"The instance ID 'i-0abc1234def567890' does not exist", []string{"i-0abc1234def567890"}},
		{"The instance IDs 'i-0abc1234, i-11111111' do not exist", []string{"i-0abc1234", "i-11111111"}},
		{`Invalid id: "i-11111111"`, []string{"i-11111111"}},
		{"The instance ID 'i-22222222' does not exist", nil},
		{"Injected failure (InvalidInstanceID.NotFound).", nil},
	} {
		if diff := cmp.Diff(tc.want, mentioned(tc.msg, batch)); diff != "" {
			t.Errorf("mentioned(%q) (-want +got):\n%s", tc.msg, diff)
		}
	}
}

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
