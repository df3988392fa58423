// Batched SQS deletes and visibility changes: SQS takes at most ten entries per batch call, and a
// batch call can succeed as a whole while some of its entries fail (an expired receipt handle, a
// message already deleted). Every caller that deletes or re-times several messages at once (the
// pickup manager, refresh's pool check, the warm-pool job queue) goes through these.
package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MaxBatch is SQS's limit on entries per batch call.
const MaxBatch = 10

// DeleteBatchAPI is the part of the SQS client DeleteBatch uses; *sqs.Client satisfies it.
type DeleteBatchAPI interface {
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// VisibilityBatchAPI is the part of the SQS client SetVisibilityBatch uses; *sqs.Client
// satisfies it.
type VisibilityBatchAPI interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// BatchResult is what a batched operation did. Every receipt handle given is counted once, in
// Succeeded or in Failed.
type BatchResult struct {
	Succeeded int
	Failed    int     // failed entries, and every entry of a call that failed
	Calls     int     // batch calls made
	Errs      []error // one per failed call (naming how many entries it carried) and per failed entry
}

// Err joins the failures, or is nil.
func (r BatchResult) Err() error { return errors.Join(r.Errs...) }

// DeleteBatch deletes the messages of receipts from the queue at url, MaxBatch per call.
func DeleteBatch(ctx context.Context, api DeleteBatchAPI, url string, receipts []string) BatchResult {
	return batches(receipts, func(chunk []string) (int, []types.BatchResultErrorEntry, error) {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, r := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r)}
		}
		out, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return 0, nil, err
		}
		return len(out.Successful), out.Failed, nil
	})
}

// SetVisibilityBatch sets the visibility timeout of the messages of receipts (whole seconds from
// now; zero makes them visible at once), MaxBatch per call.
func SetVisibilityBatch(ctx context.Context, api VisibilityBatchAPI, url string, receipts []string, timeout time.Duration) BatchResult {
	secs := int32(max(timeout.Seconds(), 0))
	return batches(receipts, func(chunk []string) (int, []types.BatchResultErrorEntry, error) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, r := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r), VisibilityTimeout: secs,
			}
		}
		out, err := api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return 0, nil, err
		}
		return len(out.Successful), out.Failed, nil
	})
}

// batches runs call on each chunk of MaxBatch receipts and adds up what they did.
func batches(receipts []string, call func(chunk []string) (ok int, failed []types.BatchResultErrorEntry, _ error)) BatchResult {
	var res BatchResult
	for chunk := range slices.Chunk(receipts, MaxBatch) {
		res.Calls++
		ok, failed, err := call(chunk)
		if err != nil {
			res.Failed += len(chunk)
			res.Errs = append(res.Errs, fmt.Errorf("batch of %d: %w", len(chunk), err))
			continue
		}
		res.Succeeded += ok
		res.Failed += len(failed)
		for _, f := range failed {
			res.Errs = append(res.Errs, fmt.Errorf("one message: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return res
}
