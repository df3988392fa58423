// Batched deletes and visibility changes against fauxqs through the real SQS client.
package pool_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// receiveAll puts n messages and receives them all, hidden for a minute; it returns their handles.
func receiveAll(t *testing.T, client *sqs.Client, q *pool.Queue, n int) []string {
	t.Helper()
	for i := range n {
		put(t, q, msg(fmt.Sprintf("i-%08d", i)))
	}
	var receipts []string
	for range 100 {
		if len(receipts) == n {
			return receipts
		}
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		for _, m := range out.Messages {
			receipts = append(receipts, aws.ToString(m.ReceiptHandle))
		}
	}
	t.Fatalf("received %d of %d messages", len(receipts), n)
	return nil
}

func TestBatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		n         int  // messages received
		bogus     bool // a receipt handle SQS never gave is added
		visible   bool // SetVisibilityBatch 0 instead of DeleteBatch
		gone      bool // the calls name a queue that does not exist
		want      pool.BatchResult
		wantLeft  int // messages visible afterwards
		wantError bool
	}{
		{name: "nothing", want: pool.BatchResult{}},
		{name: "delete fewer than a batch", n: 3, want: pool.BatchResult{Succeeded: 3, Calls: 1}},
		{name: "delete exactly a batch", n: 10, want: pool.BatchResult{Succeeded: 10, Calls: 1}},
		{name: "delete over two batches", n: 23, want: pool.BatchResult{Succeeded: 23, Calls: 3}},
		{name: "a bad handle fails alone", n: 4, bogus: true, visible: true, want: pool.BatchResult{Succeeded: 4, Failed: 1, Calls: 1}, wantLeft: 4, wantError: true},
		{name: "a failed call fails all its entries", n: 12, gone: true, want: pool.BatchResult{Failed: 12, Calls: 2}, wantError: true},
		{name: "visible again", n: 12, visible: true, want: pool.BatchResult{Succeeded: 12, Calls: 2}, wantLeft: 12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, client := testQueue(t)
			receipts := receiveAll(t, client, q, tc.n)
			if tc.bogus {
				receipts = append(receipts, "not-a-receipt-handle")
			}
			url := q.URL()
			if tc.gone {
				url += "-gone"
			}
			var got pool.BatchResult
			if tc.visible {
				got = pool.SetVisibilityBatch(t.Context(), client, url, receipts, 0)
			} else {
				got = pool.DeleteBatch(t.Context(), client, url, receipts)
			}
			if (got.Err() != nil) != tc.wantError {
				t.Errorf("errors = %v, want error %v", got.Errs, tc.wantError)
			}
			got.Errs, tc.want.Errs = nil, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("result = %+v, want %+v", got, tc.want)
			}
			if left := len(drain(t, client, q)); left != tc.wantLeft {
				t.Errorf("%d messages visible afterwards, want %d", left, tc.wantLeft)
			}
		})
	}
}

func TestSetVisibilityBatchHides(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	receipts := receiveAll(t, client, q, 2)
	if res := pool.SetVisibilityBatch(t.Context(), client, q.URL(), receipts, time.Hour); res.Err() != nil || res.Succeeded != 2 {
		t.Fatalf("SetVisibilityBatch = %+v", res)
	}
	if left := len(drain(t, client, q)); left != 0 {
		t.Errorf("%d messages visible after hiding them for an hour, want 0", left)
	}
}
