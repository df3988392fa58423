// The instance type catalogue, read with DescribeInstanceTypes only when the offerings cache makes
// a request exclude types, and kept for an hour (types do not change within a deployment's day).
package fleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
)

// typeInfo is what the fleet needs to know of an instance type to narrow attribute-based
// selection by hand.
type typeInfo struct {
	Name      string
	VCPUs     int
	MemoryMiB int
	Burstable bool
}

type catalog struct {
	api EC2API
	ttl time.Duration
	now func() time.Time

	mu      chan struct{} // one loader at a time; a channel so waiting honours ctx
	types   []typeInfo
	fetched time.Time
}

func newCatalog(api EC2API, ttl time.Duration, now func() time.Time) *catalog {
	c := &catalog{api: api, ttl: ttl, now: now, mu: make(chan struct{}, 1)}
	return c
}

func (c *catalog) all(ctx context.Context) ([]typeInfo, error) {
	select {
	case c.mu <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.mu }()
	if c.types != nil && c.now().Sub(c.fetched) < c.ttl {
		return c.types, nil
	}
	var types []typeInfo
	p := ec2.NewDescribeInstanceTypesPaginator(c.api, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing instance types: %w", err)
		}
		for _, t := range page.InstanceTypes {
			ti := typeInfo{Name: string(t.InstanceType), Burstable: aws.ToBool(t.BurstablePerformanceSupported)}
			if t.VCpuInfo != nil {
				ti.VCPUs = int(aws.ToInt32(t.VCpuInfo.DefaultVCpus))
			}
			if t.MemoryInfo != nil {
				ti.MemoryMiB = int(aws.ToInt64(t.MemoryInfo.SizeInMiB))
			}
			types = append(types, ti)
		}
	}
	c.types, c.fetched = types, c.now()
	return types, nil
}

// matching returns the names of the catalogue's types that the request's attributes allow, as EC2
// would select them, minus the excluded names.
func (c *catalog) matching(ctx context.Context, req Request, exclude []string) ([]string, error) {
	all, err := c.all(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		switch {
		case t.VCPUs < req.MinCPU, req.MaxCPU > 0 && t.VCPUs > req.MaxCPU,
			t.MemoryMiB < req.MinMemoryMiB, req.MaxMemoryMiB > 0 && t.MemoryMiB > req.MaxMemoryMiB,
			t.Burstable && !req.AllowBurstable,
			!instancetype.MatchAny(req.InstanceTypes, t.Name),
			slices.Contains(exclude, t.Name):
			continue
		}
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out, nil
}
