# Provider configuration of this example, run as a root module. To use the directory as a child
# module, delete this file and pass the providers from the caller.
provider "aws" {
  region = var.region

  default_tags {
    tags = {
      "runnerpool:deployment" = var.deployment_id
    }
  }
}

provider "runnerpool" {
  region        = var.region
  deployment_id = var.deployment_id
}
