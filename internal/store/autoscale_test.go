package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A pool's kept queue times come back as written (millisecond precision); an item whose queue
// times no reconciler writes (a negative wait) is invalid, not read as a fast pool.
func TestAutoscaleQueueTimes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, db, table := newStore(t)
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	want := []store.QueueTime{{At: at, Wait: 1500 * time.Millisecond}, {At: at.Add(time.Minute), Wait: 12 * time.Second}}
	if _, err := st.PutAutoscale(ctx, store.AutoscaleState{Pool: "p", QueueTimes: want}, 0); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetAutoscale(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.QueueTimes) != 2 || !got.QueueTimes[1].At.Equal(want[1].At) || got.QueueTimes[0].Wait != want[0].Wait || got.QueueTimes[1].Wait != want[1].Wait {
		t.Errorf("queue times %+v, want %+v", got.QueueTimes, want)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "AUTOSCALE#p"}, "sk": &types.AttributeValueMemberS{Value: "STATE"}},
		UpdateExpression:          aws.String("SET queue_times = :q"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":q": &types.AttributeValueMemberS{Value: "[[1764000000000,-5]]"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetAutoscale(ctx, "p"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("an item with a negative queue time read with %v, want ErrInvalid", err)
	}
}
