package sandbox

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// ReleaseLaunchTemplate creates a launch template named name whose user data runnerpool rendered
// (userdata.Render): its versions made by launchtemplate.Versions install the current runner release,
// and a simulated instance launched from one runs the runner version its user data installs
// (agenttest.RunnerVersion), held to GitHub's version policy by the GitHub fake. It returns its id.
func (s *Sandbox) ReleaseLaunchTemplate(ctx context.Context, name string) (string, error) {
	ud, err := userdata.Render(userdata.Params{Table: s.Table, Region: "us-east-1", Arch: userdata.ArchX64,
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		return "", fmt.Errorf("sandbox: rendering the user data: %w", err)
	}
	lt, err := s.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(name),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0123456789abcdef0"), UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(ud))),
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		return "", fmt.Errorf("sandbox: creating launch template %s: %w", name, err)
	}
	return aws.ToString(lt.LaunchTemplate.LaunchTemplateId), nil
}
