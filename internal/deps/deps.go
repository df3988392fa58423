//go:build deps

// Package deps pins product dependencies that later capabilities use, so `go mod tidy` keeps them
// while the code that imports them is being written. Delete an import here once real code uses it.
package deps

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	_ "github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	_ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/aws/aws-sdk-go-v2/service/ec2"
	_ "github.com/aws/aws-sdk-go-v2/service/sqs"
	_ "github.com/bradleyfalzon/ghinstallation/v2"
	_ "github.com/coreos/go-oidc/v3/oidc"
	_ "github.com/go-jose/go-jose/v4"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/go-github/v62/github"
	_ "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/robfig/cron/v3"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/time/rate"
)
