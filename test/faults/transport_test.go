// The fault transports with the real SDK against the shared stack's DynamoDB Local.
package faults_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func client(t *testing.T, rt http.RoundTripper) (*dynamodb.Client, string) {
	t.Helper()
	stk := stacktest.Shared(t)
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(t.Context(), stk.DynamoDB(), table); err != nil {
		t.Fatal(err)
	}
	cfg, _ := stk.AWSConfig(t.Context())
	cfg.HTTPClient = &http.Client{Transport: rt}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), table
}

// TestCrash: the requests before N reach DynamoDB; N and every later one fail at once, and the
// SDK does not retry them (each failed call is one request).
func TestCrash(t *testing.T) {
	t.Parallel()
	crash := faults.NewCrash(3, nil)
	db, table := client(t, crash)
	st := store.New(db, table)
	for i := range 2 {
		if _, err := st.CurrentLease(t.Context(), "x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("call %d before the crash: %v, want not found", i+1, err)
		}
	}
	if crash.Dead() {
		t.Fatal("dead before its call")
	}
	for i := range 3 {
		began := time.Now()
		_, err := st.CurrentLease(t.Context(), "x")
		if !errors.Is(err, faults.ErrCrashed) {
			t.Fatalf("call %d after the crash: %v, want ErrCrashed", i+3, err)
		}
		if time.Since(began) > time.Second {
			t.Errorf("a crashed call took %s: the SDK retried it", time.Since(began))
		}
	}
	select {
	case <-crash.Killed():
	default:
		t.Fatal("Killed not closed")
	}
	if got := crash.Calls(); got != 5 {
		t.Errorf("Calls() = %d, want 5 (no retries of crashed calls)", got)
	}
	if got := crash.Cut(); got != "DynamoDB_20120810.GetItem" {
		t.Errorf("Cut() = %q", got)
	}
}

// TestInject: injected throttling and 5xx errors are retried by the SDK and the calls succeed.
func TestInject(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{faults.KindThrottle, faults.KindServerError} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			inj := &faults.Inject{Every: 2, Kind: kind}
			db, table := client(t, faults.Chain(nil, nil, inj))
			for range 4 {
				if _, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)}); err != nil {
					t.Fatalf("DescribeTable: %v", err)
				}
			}
			if inj.Injected() < 3 {
				t.Errorf("%d errors injected over 4 calls at one in two, want at least 3", inj.Injected())
			}
		})
	}
}

// TestLostAnswerNamesWrites: the answers of conditional writes are counted by the name their
// request's context carries (condwrite); a conditional request that carries none is counted as
// unnamed, with its operation, item kind and condition, so a write nobody declared shows.
func TestLostAnswerNamesWrites(t *testing.T) {
	t.Parallel()
	lost := &faults.LostAnswer{Conditional: true}
	db, table := client(t, lost)
	db = dynamodb.New(db.Options(), func(o *dynamodb.Options) { // retry at once: the answer was only lost
		o.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None }), 10*time.Millisecond)
	})
	st := store.New(db, table)
	if _, err := st.MarkOnce(t.Context(), "delivery:7", time.Hour); err != nil {
		t.Fatalf("MarkOnce: %v", err)
	}
	if _, err := st.AcquireLease(t.Context(), "cron", "me", time.Minute); err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	_, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(table), ConditionExpression: aws.String("attribute_not_exists(pk)"),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "ROGUE#1"}, "sk": &types.AttributeValueMemberS{Value: "x"},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("an undeclared conditional put after a lost answer: %v, want its retry's failed condition", err)
	}
	want := map[string]int{"once mark": 1, "lease acquire": 1, "unnamed PutItem ROGUE attribute_not_exists(pk)": 1}
	if diff := cmp.Diff(want, lost.Writes()); diff != "" {
		t.Errorf("writes hit (-want +got):\n%s", diff)
	}
}
