// Tests of the stacktest helpers: names valid for DynamoDB tables and SQS queues, and one shared
// stack per test binary.
package stacktest_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// Valid for both: SQS queue names are 1-80 of [A-Za-z0-9_-] (plus ".fifo"), DynamoDB table names
// 3-255 of [A-Za-z0-9_.-].
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{3,75}$`)

func TestUniqueName(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, tc := range []struct{ name, prefix string }{
		{"plain", "state"},
		{"no prefix", ""},
		{"odd/chars: é.ü *?", "pool.queue/x"},
		{strings.Repeat("very-long-subtest-name-", 10), strings.Repeat("p", 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				got := stacktest.UniqueName(t, tc.prefix)
				if !validName.MatchString(got) {
					t.Errorf("UniqueName(%q) = %q: not a valid table and queue name", tc.prefix, got)
				}
				if seen[got] {
					t.Errorf("UniqueName(%q) = %q twice", tc.prefix, got)
				}
				seen[got] = true
			}
		})
	}
	if got := stacktest.UniqueName(t, "state"); !strings.HasPrefix(got, "state-TestUniqueName-") {
		t.Errorf("UniqueName = %q, want prefix, then the test name", got)
	}
}

func TestSharedIsShared(t *testing.T) {
	t.Parallel()
	a, b := stacktest.Shared(t), stacktest.Shared(t)
	if a != b {
		t.Fatalf("Shared returned two stacks")
	}
	// The FIFO form of a unique name is accepted by fauxqs.
	name := stacktest.UniqueName(t, "wake") + ".fifo"
	out, err := a.SQS().CreateQueue(t.Context(), &sqs.CreateQueueInput{
		QueueName:  aws.String(name),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	_, _ = a.SQS().DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
}
