// Package wake is the control plane's half of the claim notice: after a change an idle instance's
// agent must act on (a claim, a release), the control plane sets the instance tag TagKey to the
// record's new version. The agent watches its own tags through the instance metadata service, which
// is local and free, and re-reads its record from DynamoDB only when the tag changes. The tag
// carries no authority: the record in the table stays the only source of truth.
package wake

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TagKey is the instance tag that wakes an agent. Instance metadata tags must be enabled on the
// launch template (MetadataOptions.InstanceMetadataTags = enabled) for the agent to see it.
const TagKey = "runnerpool:wake"

// Tagger is the part of the EC2 client wake uses.
type Tagger interface {
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// Notify wakes the agent of instanceID: version is the record version the agent should read (or a
// later one). A failed notify is not fatal to the caller's transition: the agent also re-reads its
// record on a slow fallback timer.
func Notify(ctx context.Context, api Tagger, instanceID string, version int64) error {
	_, err := api.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{instanceID},
		Tags:      []types.Tag{{Key: aws.String(TagKey), Value: aws.String(strconv.FormatInt(version, 10))}},
	})
	if err != nil {
		return fmt.Errorf("waking %s: %w", instanceID, err)
	}
	return nil
}
