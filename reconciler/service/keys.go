// Instance keys: with --instance-keys arn (the default) the partition key of an instance's items is
// INSTANCE#<instance ARN>, which the runners' IAM role can match exactly
// (dynamodb:LeadingKeys = INSTANCE#${ec2:SourceInstanceARN}), so each instance reaches its own items
// only. The ARN is arn:PARTITION:ec2:REGION:ACCOUNT:instance/ID: the region is the SDK's (the
// reconciler launches its instances there), the account RUNNERPOOL_AWS_ACCOUNT_ID or, unset, the
// caller's account from STS. Every component of a deployment must use the same keys: the agents
// (their user data's instance_keys) and every replica.
package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
)

// CallerIdentityAPI is the part of the STS client the service uses; *sts.Client satisfies it.
// GetCallerIdentity needs no IAM permission.
type CallerIdentityAPI interface {
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, opts ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

// identityTimeout bounds the STS call at start-up.
const identityTimeout = 15 * time.Second

// instanceKeyPrefix returns the store's instance key prefix for the configuration: "" for id keys,
// store.InstanceARNPrefix(region, account) for ARN keys.
func instanceKeyPrefix(ctx context.Context, cfg config.Config, awsCfg aws.Config, identity CallerIdentityAPI) (string, error) {
	if cfg.InstanceKeys == config.InstanceKeysID {
		return "", nil
	}
	if awsCfg.Region == "" {
		return "", errors.New("instance keys arn: the AWS region is not configured (AWS_REGION); it is part of the instance ARNs")
	}
	account := cfg.AWSAccountID
	if account == "" {
		ictx, cancel := context.WithTimeout(ctx, identityTimeout)
		defer cancel()
		out, err := identity.GetCallerIdentity(ictx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return "", fmt.Errorf("instance keys arn: finding the AWS account with STS GetCallerIdentity (set RUNNERPOOL_AWS_ACCOUNT_ID, or RUNNERPOOL_INSTANCE_KEYS=id on the local stack): %w", err)
		}
		account = aws.ToString(out.Account)
		if account == "" {
			return "", errors.New("instance keys arn: STS GetCallerIdentity answered no account; set RUNNERPOOL_AWS_ACCOUNT_ID")
		}
	}
	return store.InstanceARNPrefix(awsCfg.Region, account), nil
}
