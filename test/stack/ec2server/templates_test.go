// templates_test.go: launch templates and versions through the SDK, and DescribeInstanceTypes.
package ec2server

import (
	"encoding/base64"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
)

func TestLaunchTemplates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newTestServer(t, Options{})
	userData := base64.StdEncoding.EncodeToString([]byte("#cloud-config\n"))
	created, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("pool-linux"),
		VersionDescription: aws.String("first"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-11111111"), InstanceType: types.InstanceTypeT3Small, UserData: aws.String(userData),
			IamInstanceProfile: &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String("runner")},
			SecurityGroupIds:   []string{"sg-11111111"},
			MetadataOptions: &types.LaunchTemplateInstanceMetadataOptionsRequest{HttpTokens: types.LaunchTemplateHttpTokensStateRequired,
				HttpPutResponseHopLimit: aws.Int32(2), InstanceMetadataTags: types.LaunchTemplateInstanceMetadataTagsStateEnabled},
			TagSpecifications: []types.LaunchTemplateTagSpecificationRequest{{ResourceType: types.ResourceTypeInstance,
				Tags: []types.Tag{{Key: aws.String("pool"), Value: aws.String("linux")}}}},
		},
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeLaunchTemplate,
			Tags: []types.Tag{{Key: aws.String("owner"), Value: aws.String("runnerpool")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lt := created.LaunchTemplate
	id := aws.ToString(lt.LaunchTemplateId)
	if !validResourceID(id, "lt") || aws.ToInt64(lt.DefaultVersionNumber) != 1 || aws.ToInt64(lt.LatestVersionNumber) != 1 ||
		lt.CreateTime == nil || aws.ToString(lt.CreatedBy) == "" || len(lt.Tags) != 1 {
		t.Errorf("created template = %+v", lt)
	}

	_, err = c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("pool-linux"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-1")}})
	if apiCode(err) != "InvalidLaunchTemplateName.AlreadyExistsException" {
		t.Errorf("duplicate name: err = %v", err)
	}

	// Version 2 copies version 1 and changes the instance type.
	v2, err := c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateName: aws.String("pool-linux"), SourceVersion: aws.String("1"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{InstanceType: types.InstanceTypeT3Large},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := aws.ToInt64(v2.LaunchTemplateVersion.VersionNumber); n != 2 || aws.ToBool(v2.LaunchTemplateVersion.DefaultVersion) {
		t.Errorf("new version = %d (default %v), want 2, not default", n, aws.ToBool(v2.LaunchTemplateVersion.DefaultVersion))
	}
	data := v2.LaunchTemplateVersion.LaunchTemplateData
	if data.InstanceType != types.InstanceTypeT3Large || aws.ToString(data.ImageId) != "ami-11111111" ||
		aws.ToString(data.UserData) != userData || aws.ToString(data.IamInstanceProfile.Name) != "runner" ||
		data.MetadataOptions.HttpTokens != types.LaunchTemplateHttpTokensStateRequired ||
		aws.ToInt32(data.MetadataOptions.HttpPutResponseHopLimit) != 2 ||
		len(data.SecurityGroupIds) != 1 || len(data.TagSpecifications) != 1 || len(data.TagSpecifications[0].Tags) != 1 {
		t.Errorf("version 2 data = %+v", data)
	}

	versions := func(in *ec2.DescribeLaunchTemplateVersionsInput) []int64 {
		t.Helper()
		out, err := c.DescribeLaunchTemplateVersions(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, v := range out.LaunchTemplateVersions {
			got = append(got, aws.ToInt64(v.VersionNumber))
		}
		return got
	}
	if diff := cmp.Diff([]int64{1, 2}, versions(&ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(id)})); diff != "" {
		t.Errorf("all versions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{2, 1}, versions(&ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(id),
		Versions: []string{"$Latest", "$Default"}})); diff != "" {
		t.Errorf("$Latest,$Default (-want +got):\n%s", diff)
	}

	mod, err := c.ModifyLaunchTemplate(ctx, &ec2.ModifyLaunchTemplateInput{LaunchTemplateId: aws.String(id), DefaultVersion: aws.String("2")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt64(mod.LaunchTemplate.DefaultVersionNumber) != 2 {
		t.Errorf("default after modify = %d", aws.ToInt64(mod.LaunchTemplate.DefaultVersionNumber))
	}
	if diff := cmp.Diff([]int64{2}, versions(&ec2.DescribeLaunchTemplateVersionsInput{Versions: []string{"$Default"}})); diff != "" {
		t.Errorf("$Default across templates (-want +got):\n%s", diff)
	}

	for _, in := range []*ec2.DescribeLaunchTemplatesInput{
		{LaunchTemplateIds: []string{id}},
		{LaunchTemplateNames: []string{"pool-linux"}},
		{Filters: []types.Filter{{Name: aws.String("tag:owner"), Values: []string{"runner*"}}}},
		{},
	} {
		out, err := c.DescribeLaunchTemplates(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.LaunchTemplates) != 1 || aws.ToString(out.LaunchTemplates[0].LaunchTemplateId) != id {
			t.Errorf("DescribeLaunchTemplates(%+v) = %+v", in, out.LaunchTemplates)
		}
	}

	errs := []struct {
		name string
		call func() error
		want string
	}{
		{"unknown id", func() error {
			_, err := c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{"lt-0123456789abcdef0"}})
			return err
		}, "InvalidLaunchTemplateId.NotFound"},
		{"unknown name", func() error {
			_, err := c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{"nope"}})
			return err
		}, "InvalidLaunchTemplateName.NotFoundException"},
		{"unknown version", func() error {
			_, err := c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: aws.String(id), Versions: []string{"7"}})
			return err
		}, "InvalidLaunchTemplateId.VersionNotFound"},
		{"malformed name", func() error {
			_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("a b"),
				LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-1")}})
			return err
		}, "InvalidLaunchTemplateName.MalformedException"},
		{"no data", func() error {
			_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("empty"),
				LaunchTemplateData: &types.RequestLaunchTemplateData{}})
			return err
		}, "MissingParameter"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); apiCode(err) != tt.want {
				t.Errorf("err = %v, want %s", err, tt.want)
			}
		})
	}

	for _, name := range []string{"pool-b", "pool-c", "pool-d"} {
		createTemplate(t, ctx, c, name)
	}
	var names []string
	pg := ec2.NewDescribeLaunchTemplatesPaginator(c, &ec2.DescribeLaunchTemplatesInput{MaxResults: aws.Int32(3)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, lt := range page.LaunchTemplates {
			names = append(names, aws.ToString(lt.LaunchTemplateName))
		}
	}
	if diff := cmp.Diff([]string{"pool-linux", "pool-b", "pool-c", "pool-d"}, names); diff != "" {
		t.Errorf("paged templates (-want +got):\n%s", diff)
	}

	del, err := c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: aws.String("pool-linux")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(del.LaunchTemplate.LaunchTemplateId) != id {
		t.Errorf("deleted %+v", del.LaunchTemplate)
	}
	if _, err := c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: aws.String(id)}); apiCode(err) != "InvalidLaunchTemplateId.NotFound" {
		t.Errorf("second delete: err = %v", err)
	}
}

func TestDescribeInstanceTypes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newTestServer(t, Options{})

	var all []types.InstanceTypeInfo
	pg := ec2.NewDescribeInstanceTypesPaginator(c, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(10)})
	pages := 0
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.InstanceTypes...)
	}
	if len(all) != len(catalog) || len(all) < 40 || pages != (len(catalog)+9)/10 {
		t.Errorf("paged %d types in %d pages, catalogue has %d", len(all), pages, len(catalog))
	}

	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	tests := []struct {
		name  string
		in    *ec2.DescribeInstanceTypesInput
		check func(t *testing.T, got []types.InstanceTypeInfo)
	}{
		{"by name", &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"c7g.xlarge", "t3.micro"}},
			func(t *testing.T, got []types.InstanceTypeInfo) {
				if len(got) != 2 {
					t.Fatalf("got %d types", len(got))
				}
				c7g := got[0]
				if c7g.InstanceType != "c7g.xlarge" || aws.ToInt32(c7g.VCpuInfo.DefaultVCpus) != 4 ||
					aws.ToInt64(c7g.MemoryInfo.SizeInMiB) != 8192 || c7g.ProcessorInfo.SupportedArchitectures[0] != types.ArchitectureTypeArm64 ||
					aws.ToBool(c7g.BurstablePerformanceSupported) {
					t.Errorf("c7g.xlarge = %+v", c7g)
				}
				if !aws.ToBool(got[1].BurstablePerformanceSupported) || !aws.ToBool(got[1].FreeTierEligible) {
					t.Errorf("t3.micro = %+v", got[1])
				}
			}},
		{"arm64", &ec2.DescribeInstanceTypesInput{Filters: []types.Filter{f("processor-info.supported-architecture", "arm64")}},
			func(t *testing.T, got []types.InstanceTypeInfo) {
				for _, it := range got {
					if it.ProcessorInfo.SupportedArchitectures[0] != types.ArchitectureTypeArm64 {
						t.Errorf("%s is not arm64", it.InstanceType)
					}
				}
				if len(got) != 15 {
					t.Errorf("got %d arm64 types, want 15", len(got))
				}
			}},
		{"burstable wildcard", &ec2.DescribeInstanceTypesInput{Filters: []types.Filter{
			f("burstable-performance-supported", "true"), f("instance-type", "t3.*")}},
			func(t *testing.T, got []types.InstanceTypeInfo) {
				if len(got) != 7 {
					t.Errorf("got %d t3 types, want 7", len(got))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := c.DescribeInstanceTypes(ctx, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, out.InstanceTypes)
		})
	}

	_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"t3.micro", "x9.mega"}})
	if apiCode(err) != "InvalidInstanceType" {
		t.Errorf("unknown type: err = %v", err)
	}
}
