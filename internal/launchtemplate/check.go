package launchtemplate

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// DescribeAPI is what Check reads an instance back with; *ec2.Client satisfies it.
type DescribeAPI interface {
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeVolumes(ctx context.Context, in *ec2.DescribeVolumesInput, opts ...func(*ec2.Options)) (*ec2.DescribeVolumesOutput, error)
	DescribeInstanceAttribute(ctx context.Context, in *ec2.DescribeInstanceAttributeInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceAttributeOutput, error)
}

// Field is one launch field of a runner class, compared with a launched instance.
type Field struct {
	Name      string // the runner class attribute: image, volume_type, ..., tags
	Want, Got string
}

// Honoured reports whether the instance has what the class declares.
func (f Field) Honoured() bool { return f.Want == f.Got }

// Check reads an instance back from EC2 (DescribeInstances, DescribeVolumes for its root volume,
// DescribeInstanceAttribute for its user data) and compares every launch field rc declares: image,
// root volume type, size, IOPS and throughput, security groups, instance profile, pre-runner script
// and tags (those the class leaves empty are not compared).
func Check(ctx context.Context, api DescribeAPI, instanceID string, rc declared.RunnerClass) ([]Field, error) {
	out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		return nil, fmt.Errorf("describing %s: %w", instanceID, err)
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		return nil, fmt.Errorf("describing %s: not one instance", instanceID)
	}
	in := out.Reservations[0].Instances[0]
	fields := []Field{{Name: "image", Want: rc.Image, Got: aws.ToString(in.ImageId)}}
	vol, err := rootVolume(ctx, api, in)
	if err != nil {
		return nil, err
	}
	itoa := func(n *int32) string { return strconv.Itoa(int(aws.ToInt32(n))) }
	fields = append(fields,
		Field{"volume_type", rc.Volume.Type, string(vol.VolumeType)},
		Field{"volume_size_gib", strconv.Itoa(rc.Volume.SizeGiB), itoa(vol.Size)},
		Field{"volume_iops", strconv.Itoa(rc.Volume.IOPS), itoa(vol.Iops)},
		Field{"volume_throughput_mibps", strconv.Itoa(rc.Volume.ThroughputMiBps), itoa(vol.Throughput)})
	if len(rc.SecurityGroups) > 0 {
		var got []string
		for _, g := range in.SecurityGroups {
			got = append(got, aws.ToString(g.GroupId))
		}
		fields = append(fields, Field{"security_groups", strings.Join(slices.Sorted(slices.Values(rc.SecurityGroups)), ","), strings.Join(slices.Sorted(slices.Values(got)), ",")})
	}
	if rc.InstanceProfile != "" {
		got := ""
		if in.IamInstanceProfile != nil {
			got = aws.ToString(in.IamInstanceProfile.Arn)
			if !strings.HasPrefix(rc.InstanceProfile, "arn:") {
				_, got, _ = strings.Cut(got, ":instance-profile/")
			}
		}
		fields = append(fields, Field{"instance_profile", rc.InstanceProfile, got})
	}
	if rc.PreRunnerScript != "" {
		got, err := preRunnerScript(ctx, api, instanceID)
		if err != nil {
			return nil, err
		}
		fields = append(fields, Field{"pre_runner_script", rc.PreRunnerScript, got})
	}
	if len(rc.Tags) > 0 {
		have := map[string]string{}
		for _, t := range in.Tags {
			if _, ok := rc.Tags[aws.ToString(t.Key)]; ok {
				have[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
		}
		fields = append(fields, Field{"tags", tagString(rc.Tags), tagString(have)})
	}
	return fields, nil
}

func tagString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func rootVolume(ctx context.Context, api DescribeAPI, in types.Instance) (types.Volume, error) {
	id := ""
	for _, m := range in.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == aws.ToString(in.RootDeviceName) && m.Ebs != nil {
			id = aws.ToString(m.Ebs.VolumeId)
		}
	}
	if id == "" {
		return types.Volume{}, nil // no root volume: every volume field is reported as not honoured
	}
	out, err := api.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil || len(out.Volumes) != 1 {
		return types.Volume{}, fmt.Errorf("describing root volume %s of %s: %v", id, aws.ToString(in.InstanceId), err)
	}
	return out.Volumes[0], nil
}

func preRunnerScript(ctx context.Context, api DescribeAPI, id string) (string, error) {
	out, err := api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData})
	if err != nil {
		return "", fmt.Errorf("reading the user data of %s: %w", id, err)
	}
	if out.UserData == nil {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(out.UserData.Value))
	if err != nil {
		return "", fmt.Errorf("decoding the user data of %s: %w", id, err)
	}
	return userdata.PreRunnerScriptOf(string(raw))
}
