// AWS SDK configuration and clients pointed at a local stack: static dummy credentials, region
// us-east-1, and each service's endpoint.
package stack

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// AWSConfig returns an SDK configuration for the stack: region us-east-1, static dummy credentials,
// and the stack's endpoints for DynamoDB, SQS and EC2, so that clients made from it with
// dynamodb.NewFromConfig and the like reach the stack without further options. (One exception, the
// SDK's: when the process has AWS_ENDPOINT_URL set and not the service's own variable, the global one
// wins.) It reads no environment or shared files, so it never fails; the error is for the signature
// product code expects from a config loader.
func (s *Stack) AWSConfig(ctx context.Context) (aws.Config, error) {
	return staticConfig(s.Endpoints), nil
}

// DynamoDB returns a DynamoDB client for the stack. Response CRC32 validation is off: DynamoDB Local
// does not always send a checksum that matches what the SDK reads.
func (s *Stack) DynamoDB() *dynamodb.Client {
	return dynamodb.NewFromConfig(staticConfig(s.Endpoints), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(s.Endpoints.DynamoDB)
		o.DisableValidateResponseChecksum = true
	})
}

// SQS returns an SQS client for the stack (fauxqs).
func (s *Stack) SQS() *sqs.Client {
	return sqs.NewFromConfig(staticConfig(s.Endpoints), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(s.Endpoints.SQS)
	})
}

// EC2Client returns an EC2 client for the stack's EC2 server.
func (s *Stack) EC2Client() *ec2.Client {
	return ec2.NewFromConfig(staticConfig(s.Endpoints), func(o *ec2.Options) {
		o.BaseEndpoint = aws.String(s.Endpoints.EC2)
	})
}

func staticConfig(e Endpoints) aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		// Service clients look up their base endpoint in the config sources (that is how the
		// AWS_ENDPOINT_URL_* variables work); this source answers with the stack's endpoints.
		ConfigSources: []any{endpointSource(e)},
	}
}

// endpointSource gives each service client its endpoint in the stack, by SDK service id.
type endpointSource Endpoints

func (e endpointSource) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	var v string
	switch sdkID {
	case "DynamoDB":
		v = e.DynamoDB
	case "SQS":
		v = e.SQS
	case "EC2":
		v = e.EC2
	}
	return v, v != "", nil
}
