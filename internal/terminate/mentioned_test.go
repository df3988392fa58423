// Table test of reading ids out of EC2 error messages.
package terminate

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
