# The provider reads AWS credentials and region from the SDK's default chain (environment, profile,
# SSO, instance or task role). deployment_id names this runnerpool deployment in queue names and tags.
provider "runnerpool" {
  region        = "eu-west-1"
  deployment_id = "ci-prod"
}

# Another account, through a role assumed with the default chain's credentials, and VPC endpoints.
provider "runnerpool" {
  alias         = "shared"
  region        = "eu-west-1"
  profile       = "platform"
  deployment_id = "ci-shared"

  assume_role {
    role_arn     = "arn:aws:iam::123456789012:role/runnerpool-terraform"
    session_name = "terraform-runnerpool"
    duration     = "1h"
  }

  endpoints {
    dynamodb = "https://vpce-0123456789abcdef0-abcdefgh.dynamodb.eu-west-1.vpce.amazonaws.com"
    sqs      = "https://sqs.eu-west-1.amazonaws.com"
  }
}
