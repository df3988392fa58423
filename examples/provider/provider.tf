# The provider reads AWS credentials and region from the SDK's default chain (environment, profile,
# instance role). deployment_id names this runnerpool deployment in resource names and tags.
provider "runnerpool" {
  region        = "eu-west-1"
  deployment_id = "ci-prod"
}
