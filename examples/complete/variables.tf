variable "region" {
  description = "AWS region of the deployment."
  type        = string
}

variable "deployment_id" {
  description = "Names this runnerpool deployment: prefixes resource names and tags every resource and instance (1-32 lower-case letters, digits, -)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,31}$", var.deployment_id))
    error_message = "deployment_id must be 1-32 lower-case letters, digits or -, starting with a letter or digit."
  }
}

variable "vpc_id" {
  description = "VPC of the runners and the reconciler."
  type        = string
}

variable "runner_subnet_ids" {
  description = "Private subnets runner instances launch in (one per zone gives CreateFleet more capacity to choose from)."
  type        = list(string)
}

variable "runner_route_table_ids" {
  description = "Route tables of the runner subnets: the DynamoDB gateway endpoint is added to them, so the instance role's conditions on aws:SourceVpc and aws:VpcSourceIp can tie a request to the instance it was issued to (iam.tf)."
  type        = list(string)
}

variable "service_subnet_ids" {
  description = "Private subnets of the reconciler's tasks."
  type        = list(string)
}

variable "public_subnet_ids" {
  description = "Public subnets of the load balancer GitHub (webhooks) and workflows (provision, release) reach the reconciler through."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate of the reconciler's HTTPS endpoint."
  type        = string
}

variable "api_url" {
  description = "Public URL of the reconciler (the certificate's name, pointed at the load balancer); the audience of the workflows' OIDC tokens."
  type        = string
}

variable "allowed_repositories" {
  description = "Repositories (owner/repo) and owners whose workflows may use this deployment."
  type        = list(string)
}

variable "github_token_secret_arn" {
  description = "Secrets Manager secret holding the reconciler's GitHub token (a GitHub App installation can replace it). Only the reconciler reads it; no instance ever does."
  type        = string
}

variable "reconciler_image" {
  description = "Container image of the reconciler: the release's ghcr.io/runnerpool/runnerpool:VERSION (linux amd64 and arm64, distroless static, non-root, entrypoint `runnerpool`; the task runs `serve`). Pin the release of the provider you use."
  type        = string
  default     = "ghcr.io/runnerpool/runnerpool:latest"
}

variable "reconciler_count" {
  description = "Reconciler replicas; one holds the leader lease for the cron jobs, all serve the API."
  type        = number
  default     = 2
}

variable "agent" {
  description = "The runnerpool binaries instances download at boot, with their SHA-256 (from the release's SHA256SUMS)."
  type = object({
    x64   = object({ url = string, sha256 = string })
    arm64 = object({ url = string, sha256 = string })
  })
}

variable "runner_classes" {
  description = "Runner classes by name. root_device_name is the image's root device (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)."
  type = map(object({
    image                   = string
    cpu                     = number
    memory_mib              = number
    instance_types          = optional(list(string))
    root_device_name        = optional(string, "/dev/sda1")
    volume_size_gib         = optional(number, 30)
    volume_iops             = optional(number, 3000)
    volume_throughput_mibps = optional(number, 125)
    usage_class             = optional(string, "on-demand")
    labels                  = optional(list(string))
    pre_runner_script       = optional(string)
    max_runtime             = optional(string, "6h")
    idle_time               = optional(string, "10m")
  }))
}

variable "warm_pools" {
  description = "Warm pools by name, each of a runner class, with schedules (see the provider's schedules guide)."
  type = map(object({
    runner_class = string
    timezone     = optional(string, "UTC")
    schedules = list(object({
      name    = string
      days    = optional(list(string))
      hot     = number
      stopped = number
      time_ranges = optional(list(object({
        start = string
        end   = string
      })), [])
    }))
  }))
  default = {}
}

variable "scale_sets" {
  description = "Runner scale sets by name (the label workflows use: runs-on: <name>), each feeding a warm pool without webhooks (see the provider's job sources guide). Needs github.com or GHES 3.9+."
  type = map(object({
    warm_pool    = string
    scope        = string # organization ("acme") or repository ("acme/app"), on the allow-list
    runner_group = optional(string)
    max_runners  = optional(number, 10)
  }))
  default = {}
}
