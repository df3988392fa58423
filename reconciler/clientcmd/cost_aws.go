package clientcmd

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
)

// newPriceListClient is the Price List API client: its endpoint is in us-east-1 for every
// region's prices.
func newPriceListClient(cfg aws.Config) *awspricing.Client {
	return awspricing.NewFromConfig(cfg, func(o *awspricing.Options) { o.Region = "us-east-1" })
}
