// volumes_test.go: what an instance is launched with, through the SDK: a launch template version's
// image, root volume, security groups, instance profile and user data reach the instance
// (DescribeInstances, DescribeVolumes, DescribeImages); what EC2 refuses is refused.
package ec2server

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TestLaunchFieldsFromVersion: a version built on the template's default version with every launch
// field of a runner class, launched by CreateFleet, is what DescribeInstances and DescribeVolumes say.
func TestLaunchFieldsFromVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	s.SetRootDevice("ami-0c1a5500000000001", "/dev/sda1")
	lt, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-0b0b0b0b0b0b0b0b0"), UserData: aws.String(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\nbase\n")))},
	})
	if err != nil {
		t.Fatal(err)
	}
	ltID := aws.ToString(lt.LaunchTemplate.LaunchTemplateId)
	v, err := c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateId: aws.String(ltID), SourceVersion: aws.String("1"), VersionDescription: aws.String("class"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0c1a5500000000001"),
			BlockDeviceMappings: []types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String("/dev/sda1"), Ebs: &types.LaunchTemplateEbsBlockDeviceRequest{
				VolumeType: types.VolumeTypeGp3, VolumeSize: aws.Int32(40), Iops: aws.Int32(4000), Throughput: aws.Int32(250), DeleteOnTermination: aws.Bool(true)}}},
			SecurityGroupIds:   []string{"sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"},
			IamInstanceProfile: &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String("runner-profile")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := aws.ToInt64(v.LaunchTemplateVersion.VersionNumber); n != 2 {
		t.Fatalf("version %d, want 2", n)
	}
	out, err := c.CreateFleet(ctx, &ec2.CreateFleetInput{
		Type: types.FleetTypeInstant,
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateId: aws.String(ltID), Version: aws.String("2")},
			Overrides:                   []types.FleetLaunchTemplateOverridesRequest{{InstanceType: types.InstanceTypeC6iLarge, SubnetId: aws.String("subnet-a")}},
		}},
		TargetCapacitySpecification: &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(1), DefaultTargetCapacityType: types.DefaultTargetCapacityTypeOnDemand},
	})
	if err != nil || len(out.Instances) != 1 {
		t.Fatalf("CreateFleet: %+v %v", out, err)
	}
	id := out.Instances[0].InstanceIds[0]
	di, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	in := di.Reservations[0].Instances[0]
	var groups []string
	for _, g := range in.SecurityGroups {
		groups = append(groups, aws.ToString(g.GroupId))
	}
	if aws.ToString(in.ImageId) != "ami-0c1a5500000000001" || aws.ToString(in.RootDeviceName) != "/dev/sda1" ||
		strings.Join(groups, ",") != "sg-0aaaaaaaaaaaaaaaa,sg-0bbbbbbbbbbbbbbbb" ||
		in.IamInstanceProfile == nil || !strings.HasSuffix(aws.ToString(in.IamInstanceProfile.Arn), ":instance-profile/runner-profile") ||
		len(in.BlockDeviceMappings) != 1 || aws.ToString(in.BlockDeviceMappings[0].DeviceName) != "/dev/sda1" {
		t.Fatalf("instance %+v", in)
	}
	vols, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{aws.ToString(in.BlockDeviceMappings[0].Ebs.VolumeId)}})
	if err != nil || len(vols.Volumes) != 1 {
		t.Fatalf("DescribeVolumes: %+v %v", vols, err)
	}
	if vol := vols.Volumes[0]; vol.VolumeType != types.VolumeTypeGp3 || aws.ToInt32(vol.Size) != 40 || aws.ToInt32(vol.Iops) != 4000 || aws.ToInt32(vol.Throughput) != 250 {
		t.Errorf("volume %+v: want gp3 40 GiB 4000 IOPS 250 MiB/s", vol)
	}
	attr, err := c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData})
	if err != nil || attr.UserData == nil || aws.ToString(attr.UserData.Value) != base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\nbase\n")) {
		t.Errorf("DescribeInstanceAttribute userData: %+v %v; want the source version's", attr, err)
	}
	img, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0c1a5500000000001"}})
	if err != nil || len(img.Images) != 1 || aws.ToString(img.Images[0].RootDeviceName) != "/dev/sda1" {
		t.Errorf("DescribeImages: %+v %v", img, err)
	}

	del, err := c.DeleteLaunchTemplateVersions(ctx, &ec2.DeleteLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(ltID), Versions: []string{"1", "2"}})
	if err != nil || len(del.SuccessfullyDeletedLaunchTemplateVersions) != 1 || len(del.UnsuccessfullyDeletedLaunchTemplateVersions) != 1 {
		t.Fatalf("DeleteLaunchTemplateVersions (the default one is kept): %+v %v", del, err)
	}
	_, err = c.CreateFleet(ctx, &ec2.CreateFleetInput{
		Type: types.FleetTypeInstant,
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateId: aws.String(ltID), Version: aws.String("2")},
		}},
		TargetCapacitySpecification: &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(1)},
	})
	if apiCode(err) != "InvalidLaunchTemplateId.VersionNotFound" {
		t.Errorf("fleet of a deleted version: %v", err)
	}
}

// TestLaunchRefusals: what EC2 refuses at launch, through RunInstances.
func TestLaunchRefusals(t *testing.T) {
	t.Parallel()
	ebs := func(vt types.VolumeType, size, iops, tput int32) []types.BlockDeviceMapping {
		e := &types.EbsBlockDevice{VolumeType: vt, VolumeSize: aws.Int32(size)}
		if iops > 0 {
			e.Iops = aws.Int32(iops)
		}
		if tput > 0 {
			e.Throughput = aws.Int32(tput)
		}
		return []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: e}}
	}
	for _, tc := range []struct {
		name string
		mod  func(in *ec2.RunInstancesInput)
		want string
	}{
		{"gp3 IOPS too high", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 100, 20000, 0) }, "InvalidParameterValue"},
		{"gp3 IOPS over 500 per GiB", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 8, 5000, 0) }, "InvalidParameterValue"},
		{"gp3 throughput too low", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 100, 3000, 100) }, "InvalidParameterValue"},
		{"gp3 throughput over IOPS/4", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 100, 3000, 900) }, "InvalidParameterValue"},
		{"gp2 with IOPS", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp2, 100, 3000, 0) }, "InvalidParameterCombination"},
		{"io1 with throughput", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeIo1, 100, 1000, 200) }, "InvalidParameterCombination"},
		{"root smaller than the snapshot", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 4, 0, 0) }, "InvalidParameterValue"},
		{"missing image", func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0dead000000000000") }, "InvalidAMIID.NotFound"},
		{"missing security group", func(in *ec2.RunInstancesInput) { in.SecurityGroupIds = []string{"sg-0dead000000000000"} }, "InvalidGroup.NotFound"},
		{"missing instance profile", func(in *ec2.RunInstancesInput) {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String("no-such-profile")}
		}, "InvalidParameterValue"},
		{"good gp3", func(in *ec2.RunInstancesInput) { in.BlockDeviceMappings = ebs(types.VolumeTypeGp3, 100, 16000, 1000) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c, _ := newTestServer(t, Options{})
			s.SetMissing("ami-0dead000000000000", "sg-0dead000000000000", "no-such-profile")
			in := &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeT3Micro,
				MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
			tc.mod(in)
			_, err := c.RunInstances(t.Context(), in)
			if apiCode(err) != tc.want {
				t.Fatalf("err = %v, want code %q", err, tc.want)
			}
			if tc.want != "" && len(s.Instances()) != 0 {
				t.Errorf("a refused launch left instances: %+v", s.Instances())
			}
		})
	}
}

// TestFleetOverrideFields: CreateFleet overrides take what FleetLaunchTemplateOverridesRequest has
// (the AMI, block devices, instance profile), not security groups or user data.
func TestFleetOverrideFields(t *testing.T) {
	t.Parallel()
	s, c, _ := newTestServer(t, Options{})
	ltID := createTemplate(t, t.Context(), c, "overrides")
	post := func(extra string) (int, string) {
		body := "Action=CreateFleet&Type=instant&TargetCapacitySpecification.TotalTargetCapacity=1" +
			"&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId=" + ltID +
			"&LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version=1" +
			"&LaunchTemplateConfigs.1.Overrides.1.InstanceType=t3.micro" + extra
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	for _, bad := range []string{"&LaunchTemplateConfigs.1.Overrides.1.SecurityGroupId.1=sg-0aaaaaaaaaaaaaaaa", "&LaunchTemplateConfigs.1.Overrides.1.UserData=eA=="} {
		if code, body := post(bad); code != http.StatusBadRequest || !strings.Contains(body, "UnknownParameter") {
			t.Errorf("override %s: %d %s, want 400 UnknownParameter", bad, code, body)
		}
	}
	code, body := post("&LaunchTemplateConfigs.1.Overrides.1.ImageId=ami-0c1a5500000000002&LaunchTemplateConfigs.1.Overrides.1.BlockDeviceMapping.1.DeviceName=/dev/xvda&LaunchTemplateConfigs.1.Overrides.1.BlockDeviceMapping.1.Ebs.VolumeSize=30")
	if code != http.StatusOK {
		t.Fatalf("accepted overrides: %d %s", code, body)
	}
	views := s.Instances()
	if len(views) != 1 || views[0].ImageID != "ami-0c1a5500000000002" || len(views[0].Volumes) != 1 || views[0].Volumes[0].SizeGiB != 30 {
		t.Errorf("instances %+v: want the override's image and a 30 GiB root volume", views)
	}
}
