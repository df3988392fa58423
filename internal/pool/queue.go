package pool

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQSAPI is the part of the SQS client the pool uses; *sqs.Client satisfies it.
type SQSAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Queue is the pool queue of one runner class.
type Queue struct {
	api SQSAPI
	url string
}

// NewQueue returns the pool queue at url.
func NewQueue(api SQSAPI, url string) *Queue { return &Queue{api: api, url: url} }

// URL is the queue's URL.
func (q *Queue) URL() string { return q.url }

// Put adds an idle instance to the pool. delaySeconds (0-900) hides it for that long.
func (q *Queue) Put(ctx context.Context, m Message, delaySeconds int32) error {
	body, err := m.Encode()
	if err != nil {
		return err
	}
	_, err = q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String(body), DelaySeconds: delaySeconds,
	})
	if err != nil {
		return fmt.Errorf("putting %s in pool %s: %w", m.InstanceID, q.url, err)
	}
	return nil
}
