terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
    runnerpool = {
      source  = "runnerpool/runnerpool"
      version = ">= 0.1.0"
    }
  }
}
