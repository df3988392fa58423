// DescribeSpotPriceHistory: spot prices of the catalog's types in the region's first three zones,
// a fixed fraction of the on-demand price that differs by zone, with two history points per zone
// (an hour ago and ten minutes ago), newest first as EC2 lists them. Enough for the cost figures'
// spot price lookup to run against the local stack through the real SDK.
package ec2server

import (
	"encoding/xml"
	"fmt"
	"slices"
	"time"
)

type spotPriceXML struct {
	InstanceType       string `xml:"instanceType"`
	ProductDescription string `xml:"productDescription"`
	SpotPrice          string `xml:"spotPrice"`
	Timestamp          string `xml:"timestamp"`
	AvailabilityZone   string `xml:"availabilityZone"`
}

type describeSpotPriceHistoryResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeSpotPriceHistoryResponse"`
	responseMeta
	SpotPriceHistorySet items[spotPriceXML] `xml:"spotPriceHistorySet"`
	NextToken           string              `xml:"nextToken"`
}

// spotProducts are the product descriptions EC2 accepts (the ones the catalog's images run).
var spotProducts = []string{"Linux/UNIX", "Linux/UNIX (Amazon VPC)"}

func (s *Server) describeSpotPriceHistory(p *params) (response, *apiError) {
	names := p.list("InstanceType")
	products := p.list("ProductDescription")
	zone := p.str("AvailabilityZone")
	if p.err != nil {
		return nil, p.err
	}
	for _, n := range names {
		if catalogByName[n] == nil {
			return nil, invalidValue("The instance type '%s' is not valid.", n)
		}
	}
	for _, pd := range products {
		if !slices.Contains(spotProducts, pd) {
			return nil, invalidValue("The product description '%s' is not valid.", pd)
		}
	}
	zones := []string{s.opts.Region + "a", s.opts.Region + "b", s.opts.Region + "c"}
	if zone != "" {
		if !slices.Contains(zones, zone) {
			return nil, invalidValue("The availability zone '%s' is not valid.", zone)
		}
		zones = []string{zone}
	}
	now := s.opts.Now()
	out := &describeSpotPriceHistoryResponse{}
	var list []spotPriceXML
	for _, t := range catalog {
		if len(names) > 0 && !slices.Contains(names, t.Name) {
			continue
		}
		for _, z := range zones {
			base := 0.30 + 0.04*float64(z[len(z)-1]-'a')
			for _, pt := range []struct {
				age    time.Duration
				factor float64
			}{{10 * time.Minute, base}, {time.Hour, base + 0.02}} {
				list = append(list, spotPriceXML{
					InstanceType: t.Name, ProductDescription: "Linux/UNIX", AvailabilityZone: z,
					SpotPrice: fmt.Sprintf("%.6f", t.Price*pt.factor), Timestamp: ec2Time(now.Add(-pt.age)),
				})
			}
		}
	}
	out.SpotPriceHistorySet = items[spotPriceXML]{Items: list}
	return out, nil
}
