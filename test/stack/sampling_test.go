package stack_test

import (
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// sampledSQS is an SQS client of the shared stack through a Sampler with probability p.
func sampledSQS(t *testing.T, p float64) (*sqs.Client, *stack.Sampler, string) {
	t.Helper()
	st := stacktest.Shared(t)
	sm, err := stack.NewSampler(st.Endpoints.SQS, p, 7)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sm)
	t.Cleanup(srv.Close)
	cfg, err := st.AWSConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	q, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "sampled"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	return c, sm, aws.ToString(q.QueueUrl)
}

// A short poll comes back empty with the sampler's probability although the queue holds a message,
// and an emptied poll does not hide the message: the next long poll gets it at once.
func TestSamplerEmptiesShortPolls(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, sm, url := sampledSQS(t, 0.5)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	const polls = 40
	empty := 0
	for range polls {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		// Hand it straight back, as a pickup does with a misfit.
		if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: &url, ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			t.Fatal(err)
		}
	}
	st := sm.Stats()
	if st.ShortPolls != polls || st.Emptied != int64(empty) {
		t.Fatalf("stats %+v, want %d short polls and %d emptied", st, polls, empty)
	}
	// With p = 0.5 and a fixed seed, 40 polls are neither all full nor all empty.
	if empty == 0 || empty == polls {
		t.Fatalf("%d of %d short polls empty with p=0.5", empty, polls)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("long poll got %d messages, want 1", len(out.Messages))
	}
	if got := sm.Stats().LongPolls; got != 1 {
		t.Fatalf("long polls %d, want 1", got)
	}
}

func TestSamplerRejectsBadSettings(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{-0.1, 1, 2} {
		if _, err := stack.NewSampler("http://127.0.0.1:1", p, 1); err == nil {
			t.Errorf("NewSampler(p=%v): no error", p)
		}
	}
	if _, err := stack.NewSampler("not a url", 0.1, 1); err == nil {
		t.Error("NewSampler with a bad upstream: no error")
	}
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{{"", 0, true}, {"0.3", 0.3, true}, {"1", 0, false}, {"-1", 0, false}, {"lots", 0, false}} {
		got, err := stack.ParseSampling(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSampling(%q) = %v, %v", tc.in, got, err)
		}
	}
}
