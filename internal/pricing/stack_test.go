package pricing_test

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// TestSpotHistoryOnTheStack: the spot lookup through the real EC2 client against the local stack's
// EC2 server (DescribeSpotPriceHistory): a zone's newest price, the cheapest zone without one, and
// an unknown type as EC2's InvalidParameterValue error, which the Book turns into unknown.
func TestSpotHistoryOnTheStack(t *testing.T) {
	t.Parallel()
	ec2c := stacktest.Shared(t).EC2Client()
	s := pricing.SpotHistory{API: ec2c}
	a, ok, err := s.Lookup(t.Context(), pricing.Key{InstanceType: "c6i.large", UsageClass: pricing.Spot, Zone: "us-east-1b"})
	if err != nil || !ok || a <= 0 {
		t.Fatalf("zone b: %v %v %v", a, ok, err)
	}
	any, ok, err := s.Lookup(t.Context(), pricing.Key{InstanceType: "c6i.large", UsageClass: pricing.Spot})
	if err != nil || !ok || any >= a {
		t.Errorf("any zone: %v %v %v, want the cheapest zone's price, below zone b's %v", any, ok, err, a)
	}
	if _, _, err := s.Lookup(t.Context(), pricing.Key{InstanceType: "c6i.nonexistent", UsageClass: pricing.Spot}); err == nil {
		t.Error("an unknown instance type gave no error")
	}
	b := pricing.New(pricing.Options{Spot: s})
	if p := b.Price(t.Context(), pricing.Key{InstanceType: "c6i.large", UsageClass: pricing.Spot, Zone: "us-east-1b"}); p.Source != pricing.SourceSpot || p.PerHour != a {
		t.Errorf("book: %+v, want %v from %s", p, a, pricing.SourceSpot)
	}
	if p := b.Price(t.Context(), pricing.Key{InstanceType: "c6i.nonexistent", UsageClass: pricing.Spot}); p.Known() {
		t.Errorf("book, unknown type: %+v, want unknown", p)
	}
}
