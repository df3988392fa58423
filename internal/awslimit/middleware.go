// The smithy middleware that puts Limits in front of every EC2 call, and the retryer that backs
// off on RequestLimitExceeded.
package awslimit

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"
)

// Middleware ids, so tests and other options can find them in a stack.
const (
	requestMiddlewareID  = "runnerpool.EC2RequestLimit"
	resourceMiddlewareID = "runnerpool.EC2ResourceLimit"
)

// Retry defaults for EC2. The SDK's standard retryer already treats RequestLimitExceeded as a
// throttling error (retry.DefaultThrottleErrorCodes) and retries it with exponential backoff and
// jitter; its defaults (3 attempts, 20 s maximum backoff) give up within a second or two of a
// throttling burst, while EC2 refills its mutating bucket at only 5 tokens a second. AWS's advice
// for RequestLimitExceeded is more attempts with a longer backoff.
const (
	DefaultMaxAttempts = 8
	DefaultMaxBackoff  = 30 * time.Second
)

// RetryOptions tune NewRetryer; zero values take the defaults above.
type RetryOptions struct {
	MaxAttempts int
	MaxBackoff  time.Duration
}

// NewRetryer returns the standard retryer with more attempts and a longer maximum backoff. Its
// client-side retry quota is turned off (ratelimit.None): our request-rate buckets already pace
// every attempt, retries included, and the quota (500 tokens, 5 per retry) would otherwise turn a
// sustained throttling episode into immediate failures of unrelated calls of the same client.
func NewRetryer(o RetryOptions) aws.Retryer {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	r := retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None })
	return retry.AddWithMaxBackoffDelay(retry.AddWithMaxAttempts(r, o.MaxAttempts), o.MaxBackoff)
}

// WithEC2Limits installs l on an EC2 client, with the default retryer:
//
//	ec2.NewFromConfig(cfg, awslimit.WithEC2Limits(limits))
//
// Use WithEC2LimitsRetry to tune the retryer.
func WithEC2Limits(l *Limits) func(*ec2.Options) {
	return WithEC2LimitsRetry(l, RetryOptions{})
}

// WithEC2LimitsRetry is WithEC2Limits with explicit retry options.
func WithEC2LimitsRetry(l *Limits, ro RetryOptions) func(*ec2.Options) {
	return func(o *ec2.Options) {
		o.Retryer = NewRetryer(ro)
		o.APIOptions = append(o.APIOptions, l.AddMiddleware)
	}
}

// AddMiddleware adds the limits to one operation's middleware stack. It is an APIOptions entry:
// the resource-rate wait runs in the Initialize step, where the typed input is known; the
// request-rate wait in the Finalize step right after the retry middleware, so every attempt waits.
func (l *Limits) AddMiddleware(stack *middleware.Stack) error {
	res := middleware.InitializeMiddlewareFunc(resourceMiddlewareID, func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if bucket, n := resourceCost(in.Parameters); n > 0 {
			if err := l.WaitResource(ctx, bucket, n); err != nil {
				return middleware.InitializeOutput{}, middleware.Metadata{}, fmt.Errorf("ec2 %s: %w", middleware.GetOperationName(ctx), err)
			}
		}
		return next.HandleInitialize(ctx, in)
	})
	if err := stack.Initialize.Add(res, middleware.After); err != nil {
		return err
	}
	req := middleware.FinalizeMiddlewareFunc(requestMiddlewareID, func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if err := l.WaitRequest(ctx, middleware.GetOperationName(ctx)); err != nil {
			return middleware.FinalizeOutput{}, middleware.Metadata{}, err
		}
		return next.HandleFinalize(ctx, in)
	})
	// "Retry" is the id of the SDK's retry (attempt) middleware.
	if _, ok := stack.Finalize.Get("Retry"); ok {
		return stack.Finalize.Insert(req, "Retry", middleware.After)
	}
	return stack.Finalize.Add(req, middleware.Before)
}

// resourceCost says which resource-rate bucket an operation draws from and how many tokens: one
// per instance it launches, starts, stops or terminates.
func resourceCost(params any) (bucket string, n int) {
	switch in := params.(type) {
	case *ec2.RunInstancesInput:
		return ResourceLaunched, int(aws.ToInt32(in.MaxCount))
	case *ec2.CreateFleetInput:
		if in.TargetCapacitySpecification != nil {
			return ResourceLaunched, int(aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity))
		}
	case *ec2.StartInstancesInput:
		return ResourceStarted, len(in.InstanceIds)
	case *ec2.StopInstancesInput:
		return ResourceStopped, len(in.InstanceIds)
	case *ec2.TerminateInstancesInput:
		return ResourceTerminated, len(in.InstanceIds)
	}
	return "", 0
}
