package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// SQSAPI is the part of the SQS client the pool uses; *sqs.Client satisfies it.
type SQSAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Queue is the pool of one runner class: its class queue and, when made with NewScopedQueue, one
// queue per scope (scope.go).
type Queue struct {
	api    SQSAPI
	url    string
	scopes *scopes // nil: every message in the class queue
}

// NewQueue returns the pool queue at url: every message of the class in that one queue.
func NewQueue(api SQSAPI, url string) *Queue { return &Queue{api: api, url: url} }

// URL is the class queue's URL.
func (q *Queue) URL() string { return q.url }

// Put adds an idle instance to the pool: to the queue of its scope (URLFor). delaySeconds (0-900)
// hides it for that long. A scope queue that cannot be created, or vanished (refresh deletes one
// that stayed empty for a day, and SQS refuses a deleted queue's name for 60 s), makes the message
// go to the class queue: it is not lost, selection's second look finds the instance, and refresh
// moves the message to its scope queue.
func (q *Queue) Put(ctx context.Context, m Message, delaySeconds int32) error {
	body, err := m.Encode()
	if err != nil {
		return err
	}
	url := q.URLFor(m.Scope)
	if url != q.url {
		if url, err = q.send(ctx, m, url, body, delaySeconds); err == nil {
			return nil
		}
		q.scopes.log.Warn("pool message put in the class queue: its scope queue did not take it", "instance", m.InstanceID, "scope_queue", url, "err", err)
	}
	return q.sendTo(ctx, m, q.url, body, delaySeconds)
}

// send puts body in the scope queue at url, creating it first if this replica has not seen it,
// and once more after creating it again when SQS says it does not exist.
func (q *Queue) send(ctx context.Context, m Message, url, body string, delaySeconds int32) (string, error) {
	var err error
	for range 2 {
		if err = q.scopes.ensure(ctx, url); err != nil {
			return url, err
		}
		if err = q.sendTo(ctx, m, url, body, delaySeconds); !IsQueueMissing(err) {
			return url, err
		}
		q.scopes.forget(url)
	}
	return url, err
}

func (q *Queue) sendTo(ctx context.Context, m Message, url, body string, delaySeconds int32) error {
	_, err := q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body), DelaySeconds: delaySeconds,
	})
	if err != nil {
		return fmt.Errorf("putting %s in pool %s: %w", m.InstanceID, url, err)
	}
	return nil
}

// IsQueueMissing reports whether err is SQS's answer for a queue that does not exist.
func IsQueueMissing(err error) bool {
	if err == nil {
		return false
	}
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || ae.ErrorCode() == "QueueDoesNotExist")
}
