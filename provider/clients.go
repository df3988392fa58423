// AWS access shared by every resource and data source: the SDK's default configuration chain with
// the provider's overrides (region, profile, assume role, endpoints), and the small client interfaces
// the resources use.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// dynamoAPI is the part of the DynamoDB client the provider uses.
type dynamoAPI interface {
	store.DynamoDBAPI
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
	DeleteTable(ctx context.Context, in *dynamodb.DeleteTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeContinuousBackups(ctx context.Context, in *dynamodb.DescribeContinuousBackupsInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeContinuousBackupsOutput, error)
	UpdateContinuousBackups(ctx context.Context, in *dynamodb.UpdateContinuousBackupsInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateContinuousBackupsOutput, error)
	ListTagsOfResource(ctx context.Context, in *dynamodb.ListTagsOfResourceInput, opts ...func(*dynamodb.Options)) (*dynamodb.ListTagsOfResourceOutput, error)
	TagResource(ctx context.Context, in *dynamodb.TagResourceInput, opts ...func(*dynamodb.Options)) (*dynamodb.TagResourceOutput, error)
	UntagResource(ctx context.Context, in *dynamodb.UntagResourceInput, opts ...func(*dynamodb.Options)) (*dynamodb.UntagResourceOutput, error)
}

// sqsAPI is the part of the SQS client the provider uses.
type sqsAPI interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, opts ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SetQueueAttributes(ctx context.Context, in *sqs.SetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error)
	ListQueueTags(ctx context.Context, in *sqs.ListQueueTagsInput, opts ...func(*sqs.Options)) (*sqs.ListQueueTagsOutput, error)
	TagQueue(ctx context.Context, in *sqs.TagQueueInput, opts ...func(*sqs.Options)) (*sqs.TagQueueOutput, error)
	UntagQueue(ctx context.Context, in *sqs.UntagQueueInput, opts ...func(*sqs.Options)) (*sqs.UntagQueueOutput, error)
	DeleteQueue(ctx context.Context, in *sqs.DeleteQueueInput, opts ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error)
	// ListQueues finds a pool queue's scope queues (pool.ListScopeQueues), deleted with it.
	ListQueues(ctx context.Context, in *sqs.ListQueuesInput, opts ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
}

// clients is the provider data handed to resources and data sources.
type clients struct {
	dynamodb     dynamoAPI
	sqs          sqsAPI
	region       string
	deploymentID string
	now          func() time.Time
}

// store returns the store of one state table.
func (c *clients) store(table string) *store.Store { return store.New(c.dynamodb, table) }

// repo returns the configuration repository of one state table.
func (c *clients) repo(table string) *declared.Repository {
	return declared.NewRepository(c.store(table))
}

func newClients(ctx context.Context, m Model, version string, now func() time.Time) (*clients, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithAppID("terraform-provider-runnerpool/" + version)}
	if r := m.Region.ValueString(); r != "" {
		opts = append(opts, awsconfig.WithRegion(r))
	}
	if p := m.Profile.ValueString(); p != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(p))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: set the provider's region, AWS_REGION, or a region in the profile")
	}
	var ep endpointsModel
	if m.Endpoints != nil {
		ep = *m.Endpoints
	}
	if a := m.AssumeRole; a != nil {
		stsClient := sts.NewFromConfig(cfg, func(o *sts.Options) {
			if u := ep.STS.ValueString(); u != "" {
				o.BaseEndpoint = aws.String(u)
			}
		})
		session := a.SessionName.ValueString()
		if session == "" {
			session = "terraform-provider-runnerpool"
		}
		duration := time.Hour
		if d := a.Duration.ValueString(); d != "" {
			duration, err = time.ParseDuration(d)
			if err != nil {
				return nil, fmt.Errorf("assume_role duration: %w", err)
			}
		}
		cfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, a.RoleARN.ValueString(), func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = session
			o.Duration = duration
			if x := a.ExternalID.ValueString(); x != "" {
				o.ExternalID = aws.String(x)
			}
		}))
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if u := ep.DynamoDB.ValueString(); u != "" {
			o.BaseEndpoint = aws.String(u)
		}
		// o.BaseEndpoint is also set when the endpoint came from AWS_ENDPOINT_URL_DYNAMODB or the
		// shared config. Real DynamoDB always sends a CRC32 that matches; DynamoDB Local does not.
		if o.BaseEndpoint != nil {
			o.DisableValidateResponseChecksum = true
		}
	})
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if u := ep.SQS.ValueString(); u != "" {
			o.BaseEndpoint = aws.String(u)
		}
	})
	return &clients{
		dynamodb: db, sqs: q, region: cfg.Region, deploymentID: m.DeploymentID.ValueString(), now: now,
	}, nil
}

// addError adds an error diagnostic shaped summary / detail / "Original Error: ...".
func addError(diags *diag.Diagnostics, summary, detail string, err error) {
	diags.AddError(summary, detail+"\n\nOriginal Error: "+err.Error())
}

// providerData type-asserts the provider data handed to Configure of a resource or data source.
// It returns nil (and no diagnostic) before the provider is configured, which Terraform does when
// validating.
func providerData(data any, diags *diag.Diagnostics) *clients {
	if data == nil {
		return nil
	}
	c, ok := data.(*clients)
	if !ok {
		diags.AddError("Unexpected provider data",
			fmt.Sprintf("Expected *provider.clients, got %T. This is a bug in the provider; please report it.", data))
		return nil
	}
	return c
}

// configured reports whether the provider data is there, with an error diagnostic when not (a
// data source read before the provider was configured is a bug in Terraform or in the provider).
func configured(c *clients, diags *diag.Diagnostics) bool {
	if c == nil {
		diags.AddError("Provider not configured", "The provider was not configured before this read. This is a bug; please report it.")
		return false
	}
	return true
}

// apiErrorCode returns the AWS error code of err, or "".
func apiErrorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// unsupported reports whether the endpoint does not implement the operation at all (emulators
// such as DynamoDB Local answer UnknownOperationException for tagging and backups).
func unsupported(err error) bool {
	switch apiErrorCode(err) {
	case "UnknownOperationException", "UnsupportedOperation", "NotImplemented":
		return true
	}
	return false
}
