package ec2server

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// DescribeTags through the SDK's paginator: the key and value filters (exact and patterns), pages
// of MaxResults, a bad filter refused.
func TestDescribeTags(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newTestServer(t, Options{})
	launch := func(n int32, deployment string) []string {
		out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
			ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeM6iLarge, MinCount: aws.Int32(n), MaxCount: aws.Int32(n),
			TagSpecifications: instanceTags("Name", "runner", "runnerpool:deployment", deployment),
		})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range out.Instances {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
		return ids
	}
	mine := launch(7, "d1")
	launch(3, "d1-other")
	list := func(filters ...types.Filter) (ids []string, pages int) {
		p := ec2.NewDescribeTagsPaginator(c, &ec2.DescribeTagsInput{Filters: filters, MaxResults: aws.Int32(5)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, td := range page.Tags {
				if td.ResourceType != types.ResourceTypeInstance || aws.ToString(td.Key) != "runnerpool:deployment" {
					t.Errorf("entry %+v", td)
				}
				ids = append(ids, aws.ToString(td.ResourceId))
			}
		}
		return ids, pages
	}
	filter := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	ids, pages := list(filter("resource-type", "instance"), filter("key", "runnerpool:deployment"), filter("value", "d1"))
	if !slices.Equal(ids, mine) || pages != 2 {
		t.Errorf("value d1: %v in %d pages, want %v in 2", ids, pages, mine)
	}
	if ids, _ := list(filter("key", "runnerpool:deployment"), filter("value", "d1*")); len(ids) != 10 {
		t.Errorf("value d1*: %d entries, want 10", len(ids))
	}
	if _, err := c.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []types.Filter{filter("owner", "x")}}); apiCode(err) != "InvalidParameterValue" {
		t.Errorf("unknown filter: %v", err)
	}
}
