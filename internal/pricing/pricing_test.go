package pricing_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
)

func TestParseFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantErr string
	}{
		{"ok", `{"prices":[{"instance_type":"m7i.large","usage_class":"spot","per_hour":0.04},{"instance_type":"*","per_hour":0.1}]}`, ""},
		{"unknown field", `{"prices":[{"instance_type":"m7i.large","price":1}]}`, "unknown field"},
		{"no type", `{"prices":[{"per_hour":1}]}`, "prices[0]: instance_type is required"},
		{"bad usage", `{"prices":[{"instance_type":"a","usage_class":"reserved","per_hour":1}]}`, `usage_class "reserved"`},
		{"negative", `{"prices":[{"instance_type":"a","per_hour":-1}]}`, "per_hour -1"},
		{"not json", `prices: []`, "price file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pricing.ParseFile([]byte(tt.in))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("ParseFile: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

type lookupFunc func(ctx context.Context, k pricing.Key) (float64, bool, error)

func (f lookupFunc) Lookup(ctx context.Context, k pricing.Key) (float64, bool, error) {
	return f(ctx, k)
}

// TestBook: the file wins, the most specific row of it first; AWS answers are cached for the TTL;
// a failed lookup is unknown (never a guess), retried after a tenth of the TTL, and a price once
// known survives a later failure.
func TestBook(t *testing.T) {
	t.Parallel()
	f, err := pricing.ParseFile([]byte(`{"prices":[
		{"instance_type":"c6i.large","per_hour":0.085},
		{"instance_type":"c6i.large","usage_class":"spot","per_hour":0.03},
		{"instance_type":"c6i.large","usage_class":"spot","zone":"eu-west-1b","per_hour":0.031},
		{"instance_type":"*","usage_class":"spot","per_hour":0.05}]}`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var calls atomic.Int32
	var fail atomic.Bool
	od := lookupFunc(func(_ context.Context, k pricing.Key) (float64, bool, error) {
		calls.Add(1)
		if fail.Load() {
			return 0, false, errors.New("unreachable")
		}
		return 0.2, k.InstanceType == "m7i.xlarge", nil
	})
	b := pricing.New(pricing.Options{File: &f, PriceList: od, TTL: time.Hour, Now: func() time.Time { return now }})
	ctx := t.Context()
	for _, tt := range []struct {
		k        pricing.Key
		want     float64
		wantFrom string
	}{
		{pricing.Key{InstanceType: "c6i.large", UsageClass: "on-demand"}, 0.085, pricing.SourceFile},
		{pricing.Key{InstanceType: "c6i.large", UsageClass: "spot", Zone: "eu-west-1a"}, 0.03, pricing.SourceFile},
		{pricing.Key{InstanceType: "c6i.large", UsageClass: "spot", Zone: "eu-west-1b"}, 0.031, pricing.SourceFile},
		{pricing.Key{InstanceType: "r7i.large", UsageClass: "spot"}, 0.05, pricing.SourceFile},
		{pricing.Key{InstanceType: "m7i.xlarge"}, 0.2, pricing.SourcePriceList},
		{pricing.Key{InstanceType: "m7i.metal"}, 0, pricing.SourceUnknown},
		{pricing.Key{}, 0, pricing.SourceUnknown},
	} {
		if p := b.Price(ctx, tt.k); p.PerHour != tt.want || p.Source != tt.wantFrom {
			t.Errorf("Price(%+v) = %+v, want %v from %s", tt.k, p, tt.want, tt.wantFrom)
		}
	}
	before := calls.Load()
	b.Price(ctx, pricing.Key{InstanceType: "m7i.xlarge"})
	if calls.Load() != before {
		t.Error("a cached price was fetched again within the TTL")
	}
	fail.Store(true)
	now = now.Add(2 * time.Hour)
	if p := b.Price(ctx, pricing.Key{InstanceType: "m7i.xlarge"}); p.PerHour != 0.2 || p.Source != pricing.SourcePriceList {
		t.Errorf("after a failed refresh: %+v, want the last good price", p)
	}
	if p := b.Price(ctx, pricing.Key{InstanceType: "m6i.large"}); p.Known() {
		t.Errorf("a failed lookup gave %+v, want unknown", p)
	}
}

type fakePriceList struct{ docs []string }

func (f fakePriceList) GetProducts(_ context.Context, in *awspricing.GetProductsInput, _ ...func(*awspricing.Options)) (*awspricing.GetProductsOutput, error) {
	if aws.ToString(in.ServiceCode) != "AmazonEC2" || len(in.Filters) != 6 {
		return nil, errors.New("unexpected query")
	}
	return &awspricing.GetProductsOutput{PriceList: f.docs}, nil
}

// A Price List product document as the API returns it (abridged to the fields read).
const productDoc = `{"product":{"attributes":{"instanceType":"c6i.large","regionCode":"eu-west-1"}},
 "terms":{"OnDemand":{"ABC.JRTCKXETXF":{"priceDimensions":{"ABC.JRTCKXETXF.6YS6EN2CT7":
 {"unit":"Hrs","pricePerUnit":{"USD":"0.0960000000"},"description":"$0.096 per On Demand Linux c6i.large Instance Hour"}}}}}}`

func TestPriceList(t *testing.T) {
	t.Parallel()
	pl := pricing.PriceList{API: fakePriceList{docs: []string{productDoc}}, Region: "eu-west-1"}
	v, ok, err := pl.Lookup(t.Context(), pricing.Key{InstanceType: "c6i.large"})
	if err != nil || !ok || v != 0.096 {
		t.Errorf("Lookup = %v %v %v, want 0.096", v, ok, err)
	}
	if _, _, err := (pricing.PriceList{API: fakePriceList{docs: []string{"{"}}}).Lookup(t.Context(), pricing.Key{InstanceType: "x"}); err == nil {
		t.Error("a malformed product gave no error")
	}
}

type fakeSpot struct{ prices []ec2types.SpotPrice }

func (f fakeSpot) DescribeSpotPriceHistory(_ context.Context, in *ec2.DescribeSpotPriceHistoryInput, _ ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error) {
	var out []ec2types.SpotPrice
	for _, p := range f.prices {
		if in.AvailabilityZone == nil || aws.ToString(in.AvailabilityZone) == aws.ToString(p.AvailabilityZone) {
			out = append(out, p)
		}
	}
	return &ec2.DescribeSpotPriceHistoryOutput{SpotPriceHistory: out}, nil
}

// TestSpotHistory: the newest price of the zone, or the cheapest zone's newest without one.
func TestSpotHistory(t *testing.T) {
	t.Parallel()
	now := time.Now()
	sp := func(zone, price string, age time.Duration) ec2types.SpotPrice {
		return ec2types.SpotPrice{AvailabilityZone: aws.String(zone), SpotPrice: aws.String(price), Timestamp: aws.Time(now.Add(-age)), InstanceType: "c6i.large"}
	}
	s := pricing.SpotHistory{API: fakeSpot{prices: []ec2types.SpotPrice{
		sp("eu-west-1a", "0.0500", 2*time.Hour), sp("eu-west-1a", "0.0400", time.Hour), sp("eu-west-1b", "0.0450", time.Minute),
	}}}
	for zone, want := range map[string]float64{"eu-west-1a": 0.04, "eu-west-1b": 0.045, "": 0.04} {
		v, ok, err := s.Lookup(t.Context(), pricing.Key{InstanceType: "c6i.large", UsageClass: pricing.Spot, Zone: zone})
		if err != nil || !ok || v != want {
			t.Errorf("zone %q: %v %v %v, want %v", zone, v, ok, err, want)
		}
	}
}
