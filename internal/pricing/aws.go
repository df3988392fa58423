// The AWS sources: the Price List API (GetProducts, on-demand Linux shared-tenancy prices; its
// endpoint is in us-east-1 whatever the instances' region) and EC2's spot price history (the
// latest price of a type in a zone, or the lowest across zones when no zone is given).
package pricing

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	ptypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
)

// PriceListAPI is the part of the Price List client used; *pricing.Client satisfies it.
type PriceListAPI interface {
	GetProducts(ctx context.Context, in *pricing.GetProductsInput, opts ...func(*pricing.Options)) (*pricing.GetProductsOutput, error)
}

// SpotAPI is the part of the EC2 client used; *ec2.Client satisfies it.
type SpotAPI interface {
	DescribeSpotPriceHistory(ctx context.Context, in *ec2.DescribeSpotPriceHistoryInput, opts ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error)
}

// PriceList looks up on-demand prices of one region.
type PriceList struct {
	API    PriceListAPI
	Region string // the instances' region, e.g. eu-west-1
}

// Lookup implements Lookup.
func (p PriceList) Lookup(ctx context.Context, k Key) (float64, bool, error) {
	term := func(field, value string) ptypes.Filter {
		return ptypes.Filter{Type: ptypes.FilterTypeTermMatch, Field: aws.String(field), Value: aws.String(value)}
	}
	out, err := p.API.GetProducts(ctx, &pricing.GetProductsInput{
		ServiceCode: aws.String("AmazonEC2"),
		Filters: []ptypes.Filter{
			term("instanceType", k.InstanceType), term("regionCode", p.Region), term("operatingSystem", "Linux"),
			term("tenancy", "Shared"), term("preInstalledSw", "NA"), term("capacitystatus", "Used"),
		},
		MaxResults: aws.Int32(10),
	})
	if err != nil {
		return 0, false, fmt.Errorf("price list of %s in %s: %w", k.InstanceType, p.Region, err)
	}
	for _, doc := range out.PriceList {
		if v, ok, err := onDemandUSD(doc); err != nil {
			return 0, false, fmt.Errorf("price list of %s in %s: %w", k.InstanceType, p.Region, err)
		} else if ok {
			return v, true, nil
		}
	}
	return 0, false, nil
}

// onDemandUSD reads the hourly USD price out of one Price List product document.
func onDemandUSD(doc string) (float64, bool, error) {
	var d struct {
		Terms struct {
			OnDemand map[string]struct {
				PriceDimensions map[string]struct {
					Unit         string            `json:"unit"`
					PricePerUnit map[string]string `json:"pricePerUnit"`
				} `json:"priceDimensions"`
			} `json:"OnDemand"`
		} `json:"terms"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return 0, false, fmt.Errorf("decoding a product: %w", err)
	}
	for _, t := range d.Terms.OnDemand {
		for _, dim := range t.PriceDimensions {
			usd, ok := dim.PricePerUnit["USD"]
			if !ok || (dim.Unit != "Hrs" && dim.Unit != "Hours") {
				continue
			}
			v, err := strconv.ParseFloat(usd, 64)
			if err != nil {
				return 0, false, fmt.Errorf("price %q: %w", usd, err)
			}
			if v > 0 {
				return v, true, nil
			}
		}
	}
	return 0, false, nil
}

// SpotHistory looks up current spot prices.
type SpotHistory struct {
	API SpotAPI
	Now func() time.Time
}

// Lookup implements Lookup: the newest price of the type (Linux/UNIX) in the key's zone, or the
// lowest of the zones' newest prices when the key has no zone.
func (s SpotHistory) Lookup(ctx context.Context, k Key) (float64, bool, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	in := &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes:       []ec2types.InstanceType{ec2types.InstanceType(k.InstanceType)},
		ProductDescriptions: []string{"Linux/UNIX"},
		StartTime:           aws.Time(now().Add(-3 * time.Hour)),
	}
	if k.Zone != "" {
		in.AvailabilityZone = aws.String(k.Zone)
	}
	out, err := s.API.DescribeSpotPriceHistory(ctx, in)
	if err != nil {
		return 0, false, fmt.Errorf("spot price history of %s: %w", k.InstanceType, err)
	}
	newest := map[string]ec2types.SpotPrice{}
	for _, p := range out.SpotPriceHistory {
		z := aws.ToString(p.AvailabilityZone)
		if cur, ok := newest[z]; !ok || aws.ToTime(p.Timestamp).After(aws.ToTime(cur.Timestamp)) {
			newest[z] = p
		}
	}
	best, found := 0.0, false
	for _, p := range newest {
		v, err := strconv.ParseFloat(aws.ToString(p.SpotPrice), 64)
		if err != nil {
			return 0, false, fmt.Errorf("spot price %q of %s: %w", aws.ToString(p.SpotPrice), k.InstanceType, err)
		}
		if !found || v < best {
			best, found = v, true
		}
	}
	return best, found, nil
}
