// AWS call counting: a smithy middleware added to every AWS client's APIOptions. It sits in the
// Initialize step, around the SDK's retry loop, so each operation counts once with its final
// result; retried attempts are EC2's and DynamoDB's business (awslimit paces them).
package metrics

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

const awsMiddlewareID = "runnerpool.Metrics"

// AWS results.
const (
	ResultOK              = "ok"
	ResultThrottled       = "throttled"
	ResultConditionFailed = "condition_failed"
	ResultCanceled        = "canceled"
	ResultError           = "error"
)

// throttleCodes are the error codes AWS services use for rate limiting.
var throttleCodes = map[string]bool{
	"Throttling": true, "ThrottlingException": true, "ThrottledException": true, "RequestThrottledException": true,
	"TooManyRequestsException": true, "ProvisionedThroughputExceededException": true, "RequestLimitExceeded": true,
	"RequestThrottled": true, "SlowDown": true, "RequestLimitExceededException": true,
}

// AWSMiddleware is an APIOptions entry (aws.Config.APIOptions or a client's Options.APIOptions)
// that counts every operation by service, operation and result, times it, and counts lost
// conditional writes on instance records as claim collisions.
func (m *Metrics) AWSMiddleware(stack *middleware.Stack) error {
	if m == nil {
		return nil
	}
	mw := middleware.InitializeMiddlewareFunc(awsMiddlewareID, func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		start := time.Now()
		out, md, err := next.HandleInitialize(ctx, in)
		service, op := middleware.GetServiceID(ctx), middleware.GetOperationName(ctx)
		result := classifyAWS(err)
		m.awsCalls.WithLabelValues(service, op, result).Inc()
		m.awsDuration.WithLabelValues(service, op).Observe(time.Since(start).Seconds())
		if result == ResultConditionFailed {
			if kind := collisionKind(in.Parameters); kind != "" {
				m.collisions.WithLabelValues(kind).Inc()
			}
		}
		return out, md, err
	})
	return stack.Initialize.Add(mw, middleware.After)
}

func classifyAWS(err error) string {
	if err == nil {
		return ResultOK
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ResultConditionFailed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ResultCanceled
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if throttleCodes[ae.ErrorCode()] {
			return ResultThrottled
		}
		if ae.ErrorCode() == "ConditionalCheckFailedException" {
			return ResultConditionFailed
		}
	}
	return ResultError
}

// collisionKind says whether a failed conditional DynamoDB write was a state change of an instance
// record: "claim" for a claim (the only change that requires the record to have no run id),
// "transition" for any other; "" for other items (leases, runs, config).
func collisionKind(params any) string {
	in, ok := params.(*dynamodb.UpdateItemInput)
	if !ok {
		return ""
	}
	pk, ok := in.Key["pk"].(*types.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(pk.Value, store.InstancePK("")) {
		return ""
	}
	if in.ConditionExpression != nil && strings.Contains(*in.ConditionExpression, "attribute_not_exists(run_id)") {
		return "claim"
	}
	return "transition"
}
