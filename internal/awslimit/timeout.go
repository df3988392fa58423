package awslimit

import (
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// CallTimeout bounds every attempt of every call made over c: an answer that has not arrived
// within d (headers and body) fails the attempt with a timeout, which the SDK retries, instead of
// holding the caller until its own deadline, or forever when it has none. A client that already
// has a shorter limit keeps it. d must exceed the longest long poll (SQS: 20 s). Use it on an
// aws.Config before building clients:
//
//	cfg.HTTPClient = awslimit.CallTimeout(cfg.HTTPClient, 30*time.Second)
func CallTimeout(c aws.HTTPClient, d time.Duration) aws.HTTPClient {
	if d <= 0 {
		return c
	}
	switch v := c.(type) {
	case nil:
		return awshttp.NewBuildableClient().WithTimeout(d)
	case *awshttp.BuildableClient:
		if t := v.GetTimeout(); t > 0 && t < d {
			return v
		}
		return v.WithTimeout(d)
	case *http.Client:
		cp := *v
		if cp.Timeout == 0 || cp.Timeout > d {
			cp.Timeout = d
		}
		return &cp
	default:
		// A client of another kind (a test's) keeps its own limits.
		return c
	}
}
