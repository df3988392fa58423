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

variable "github_app" {
  description = "The GitHub App the reconciler authenticates as (recommended: installation tokens per owner, each with the App's own rate limit): its id and the Secrets Manager secret holding its private key (PEM), which ECS passes to the task as RUNNERPOOL_GITHUB_APP_KEY. Set this or github_token_secret_arn."
  type = object({
    id                     = number
    private_key_secret_arn = string
  })
  default = null
}

variable "github_token_secret_arn" {
  description = "Secrets Manager secret holding a personal access token for the reconciler, instead of github_app. Only the reconciler reads it; no instance ever does."
  type        = string
  default     = ""
}

variable "webhook_secret_arn" {
  description = "Secrets Manager secret holding the GitHub webhook secret: the reconciler verifies every workflow_job webhook with it (X-Hub-Signature-256). Warm pools serve `pool=NAME` jobs through the webhook, so it is required."
  type        = string
}

variable "reconciler_image" {
  description = "Container image of the reconciler, pinned: the release's ghcr.io/runnerpool/runnerpool:VERSION (linux amd64 and arm64, distroless static, non-root, entrypoint `runnerpool`; the task runs `serve`) or a local build's tag or digest (docs/guides/local-build.md). Use the release of the provider you use; `latest` is refused (a moving tag makes `apply` report success while tasks run something else)."
  type        = string

  validation {
    # A reference as registries take it: REPOSITORY:TAG, REPOSITORY@sha256:DIGEST or both; any tag but
    # latest (a local build's …:dev too). The rehearsal's TestImageReferenceForms reads this block.
    condition     = can(regex("^[^\\s@:/][^\\s@]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$", var.reconciler_image)) && can(regex("(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[0-9a-f]{64})$", var.reconciler_image)) && !can(regex(":latest(@|$)", var.reconciler_image))
    error_message = "reconciler_image must be pinned: a tag (…:1.2.3, …:dev), a digest (…@sha256:…) or both, not latest."
  }
}

variable "provision_timeout_seconds" {
  description = "Time limit of one provision (RUNNERPOOL_PROVISION_TIMEOUT): a cold provision waits for instances to boot and register. The load balancer's idle timeout is set above it, so the workflow's request is not cut first."
  type        = number
  default     = 600

  validation {
    condition     = var.provision_timeout_seconds >= 60 && var.provision_timeout_seconds <= 3600
    error_message = "provision_timeout_seconds must be between 60 and 3600 (the load balancer's idle timeout, set 60 s above it, stops at 4000)."
  }
}

variable "max_instances" {
  description = "Cap on the deployment's instances (warm, idle, running, being created): a provision past it is refused with 429, convergence creates no further. Must be at least the sum of the warm pools' largest targets."
  type        = number
  default     = 50
}

variable "max_runners_per_repository" {
  description = "Limit on the runners one repository's runs hold at once: one repository cannot take the whole deployment."
  type        = number
  default     = 20
}

variable "default_runner_class" {
  description = "Runner class of provisions that name none; empty: the first runner class by name."
  type        = string
  default     = ""
}

variable "resource_classes" {
  description = "Named minimum sizes provisions may ask for (`resource-class: small`)."
  type = map(object({
    cpu        = number
    memory_mib = number
  }))
  default = {
    small  = { cpu = 2, memory_mib = 4096 }
    medium = { cpu = 4, memory_mib = 8192 }
    large  = { cpu = 8, memory_mib = 16384 }
  }
}

variable "dynamodb_gateway_endpoint_id" {
  description = "An existing DynamoDB gateway endpoint already routed from runner_route_table_ids (a route table takes one route per prefix list, so a second endpoint cannot be added); empty: this module creates one."
  type        = string
  default     = ""
}

variable "kms_key_arns" {
  description = "Customer-managed KMS keys the reconciler's launches and starts need: the account's default EBS key when it is customer-managed (common under Control Tower baselines), the image's snapshot key, a key of the pool queues. Empty: AWS-managed keys only, no KMS permission."
  type        = list(string)
  default     = []
}

variable "metrics_cidr_blocks" {
  description = "Networks (your Prometheus) that may scrape /metrics on the tasks' internal port 9090. The load balancer never forwards to it."
  type        = list(string)
  default     = []
}

variable "reconciler_image_credentials_secret_arn" {
  description = "Secrets Manager secret with the registry credentials of reconciler_image (JSON {\"username\": ..., \"password\": ...}; for ghcr.io a token with read:packages), for a private image: ECS pulls with it (repositoryCredentials). Empty: the image is pulled anonymously, which a private package (ghcr.io makes a new container package private) refuses."
  type        = string
  default     = ""
}

variable "secrets_kms_key_arn" {
  description = "Customer-managed KMS key the task's secrets (webhook secret, App key or token, registry credentials) are encrypted with; the ECS execution role may decrypt with it through Secrets Manager only. Empty: the secrets use the AWS-managed key aws/secretsmanager."
  type        = string
  default     = ""
}

variable "deletion_protection" {
  description = "Deletion protection of the state table: on, `terraform destroy` fails on the table (set false for a trial you mean to destroy)."
  type        = bool
  default     = true
}

variable "warm_pool_scope" {
  description = "GitHub owner (or owner/repo) whose step-driven provisions (the sample workflow) may take hot warm-pool instances (RUNNERPOOL_WARM_POOL_SCOPE). Empty: the owner of allowed_repositories when they all have one owner, else none (hot instances then serve pool jobs only)."
  type        = string
  default     = ""
}

variable "alarm_topic_arn" {
  description = "SNS topic the CloudWatch alarms (alarms.tf, one per alert of reconciler/alerts) notify when they fire and when they clear; empty: the alarms are created without actions."
  type        = string
  default     = ""
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
  description = "Runner classes by name. cache switches the runner cache on for the class (cache.tf). root_device_name is the image's root device (/dev/sda1 for Ubuntu, /dev/xvda for Amazon Linux)."
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
    job_access              = optional(string)
    reuse                   = optional(string)
    pre_runner_script       = optional(string)
    max_runtime             = optional(string, "6h")
    idle_time               = optional(string, "10m")
    # The runner cache (cache.tf, docs/cache.md): absent, off. Each repository keeps at most
    # repository_limit_gib in the bucket (least recently used evicted first), and an entry unused
    # for max_age_days is evicted. The defaults are GitHub's own cache's: 10 GiB, 7 days.
    cache = optional(object({
      repository_limit_gib = optional(number, 10)
      max_age_days         = optional(number, 7)
    }))
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
    scope        = string           # organization ("acme") or repository ("acme/app"), on the allow-list
    runner_group = optional(string) # organisation scopes: GitHub's Default group refuses public repositories unless allowed
    max_runners  = optional(number, 10)
  }))
  default = {}
}
