# The reconciler: `runnerpool serve` as an ECS Fargate service behind an HTTPS load balancer, which
# workflows (provision, release, status; authenticated with their OIDC token) and GitHub (webhooks)
# reach. Several replicas serve the API; the cron jobs run under a leader lease in the state table.

resource "aws_cloudwatch_log_group" "reconciler" {
  name              = "/runnerpool/${var.deployment_id}/reconciler"
  retention_in_days = 30
}

resource "aws_ecs_cluster" "main" {
  name = local.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_task_definition" "reconciler" {
  family                   = "${local.name}-reconciler"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = "512"
  memory                   = "1024"
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.reconciler.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "ARM64"
  }

  container_definitions = jsonencode([merge({
    name      = "reconciler"
    image     = var.reconciler_image
    essential = true
    command   = ["serve"]
    portMappings = [
      { containerPort = 8080, protocol = "tcp" },
      # The dashboard (dashboard.tf): reachable only through the load balancer's OIDC rule.
      { containerPort = 8081, protocol = "tcp" },
      # /metrics, /healthz and /readyz: never behind the load balancer's listener (metrics name
      # repositories and their spend); the load balancer reaches it for health checks only.
      { containerPort = 9090, protocol = "tcp" },
    ]
    environment = [for k, v in local.reconciler_environment : { name = k, value = v }]
    # Secrets reach the reconciler only, as environment variables ECS reads from Secrets Manager.
    secrets = [for k, v in local.reconciler_secrets : { name = k, valueFrom = v }]
    # The distroless image has no shell: the binary checks its own liveness.
    healthCheck = {
      command     = ["CMD", "/ko-app/runnerpool", "healthcheck", "-url", "http://127.0.0.1:9090/healthz"]
      interval    = 15
      timeout     = 5
      retries     = 3
      startPeriod = 30
    }
    # On SIGTERM the reconciler lets in-flight provisions and releases finish for
    # RUNNERPOOL_DRAIN_TIMEOUT (60 s) and releases its lease; Fargate's default 30 s would cut that.
    stopTimeout = 120
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        "awslogs-group"         = aws_cloudwatch_log_group.reconciler.name
        "awslogs-region"        = local.region
        "awslogs-stream-prefix" = "reconciler"
      }
    }
    },
    # A private image (ghcr.io makes a new container package private): ECS pulls it with these
    # credentials, which the execution role may read (iam.tf).
    var.reconciler_image_credentials_secret_arn == "" ? {} : {
      repositoryCredentials = { credentialsParameter = var.reconciler_image_credentials_secret_arn }
  })])

  lifecycle {
    precondition {
      condition     = (var.github_app == null) != (var.github_token_secret_arn == "")
      error_message = "Set exactly one of github_app (recommended) and github_token_secret_arn."
    }
    precondition {
      condition     = var.max_instances >= local.warm_pool_peak
      error_message = "max_instances is below the sum of the warm pools' largest targets (hot + stopped): convergence could never fill them."
    }
  }
}

locals {
  # The organisations of the scale sets (scope "acme", not "acme/app"): owner-level runner
  # credentials may be minted for them (RUNNERPOOL_OWNER_RUNNERS), so GitHub App or token needs the
  # organisation's "Self-hosted runners" write permission.
  allowed_owners  = distinct([for r in var.allowed_repositories : lower(split("/", r)[0])])
  warm_pool_scope = var.warm_pool_scope != "" ? var.warm_pool_scope : (length(local.allowed_owners) == 1 ? local.allowed_owners[0] : "")
  # How much longer than RUNNERPOOL_PROVISION_TIMEOUT a provision of a runner class whose image
  # installs packages at boot may run (apt's lock wait and the install; docs/guides/images.md).
  boot_extra_seconds   = 780
  owner_runners        = distinct([for s in var.scale_sets : lower(s.scope) if length(split("/", s.scope)) == 1])
  default_runner_class = var.default_runner_class != "" ? var.default_runner_class : sort(keys(var.runner_classes))[0]
  warm_pool_peak       = length(var.warm_pools) == 0 ? 0 : sum([for p in var.warm_pools : max([for s in p.schedules : s.hot + s.stopped]...)])

  reconciler_environment = merge({
    AWS_REGION                            = local.region
    RUNNERPOOL_LISTEN                     = ":8080"
    RUNNERPOOL_DASHBOARD_LISTEN           = ":8081"
    RUNNERPOOL_METRICS_LISTEN             = ":9090"
    RUNNERPOOL_TABLE                      = runnerpool_state_table.main.name
    RUNNERPOOL_DEPLOYMENT_ID              = var.deployment_id
    RUNNERPOOL_OIDC_AUDIENCE              = var.api_url
    RUNNERPOOL_ALLOWED_REPOSITORIES       = join(",", var.allowed_repositories)
    RUNNERPOOL_DEFAULT_RUNNER_CLASS       = local.default_runner_class
    RUNNERPOOL_RESOURCE_CLASSES           = join(",", [for k, v in var.resource_classes : "${k}=${v.cpu}:${v.memory_mib}"])
    RUNNERPOOL_POOL_JOB_QUEUE_URL         = aws_sqs_queue.pool_jobs.url
    RUNNERPOOL_OWNER_RUNNERS              = join(",", local.owner_runners)
    RUNNERPOOL_MAX_INSTANCES              = tostring(var.max_instances)
    RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY = tostring(var.max_runners_per_repository)
    RUNNERPOOL_PROVISION_TIMEOUT          = "${var.provision_timeout_seconds}s"
    RUNNERPOOL_DRAIN_TIMEOUT              = "60s"
    # Step-driven provisions (the sample workflow) take hot warm-pool instances of this scope.
    RUNNERPOOL_WARM_POOL_SCOPE = local.warm_pool_scope
    # The metrics the alert rules read, as embedded metric format lines on stdout every minute:
    # CloudWatch extracts them from the log group for the alarms (alarms.tf).
    RUNNERPOOL_EMF_INTERVAL  = "60s"
    RUNNERPOOL_EMF_NAMESPACE = local.metrics_namespace
    # Instance items are keyed by instance ARN, as the runners' user data says (instance_keys) and
    # the runners' role requires (iam.tf); the account is given so start-up needs no STS call.
    RUNNERPOOL_INSTANCE_KEYS  = "arn"
    RUNNERPOOL_AWS_ACCOUNT_ID = local.account
    }, var.github_app == null ? {} : {
    RUNNERPOOL_GITHUB_APP_ID = tostring(var.github_app.id)
    }, local.cache ? {
    # The runner cache's bucket (cache.tf): the API presigns the cache servers' requests in it.
    RUNNERPOOL_CACHE_BUCKET = aws_s3_bucket.cache[0].bucket
  } : {})

  reconciler_secrets = merge({
    RUNNERPOOL_WEBHOOK_SECRET = var.webhook_secret_arn
    }, var.github_app == null ? {
    RUNNERPOOL_GITHUB_TOKEN = var.github_token_secret_arn
    } : {
    RUNNERPOOL_GITHUB_APP_KEY = var.github_app.private_key_secret_arn
  })
}

resource "aws_security_group" "alb" {
  name        = "${local.name}-alb"
  description = "runnerpool API: HTTPS from GitHub and workflows."
  vpc_id      = var.vpc_id

  ingress {
    description = "HTTPS"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }

  egress {
    description = "To the reconciler tasks: the API (8080), the dashboard (8081), health checks (9090)."
    from_port   = 8080
    to_port     = 9090
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }

  # The dashboard's OIDC authentication: the load balancer itself calls the identity provider's
  # token and user info endpoints.
  egress {
    description = "HTTPS to the dashboard's identity provider."
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

resource "aws_security_group" "reconciler" {
  name        = "${local.name}-reconciler"
  description = "runnerpool reconciler tasks: the API from the load balancer; out to AWS and GitHub."
  vpc_id      = var.vpc_id

  ingress {
    description     = "API and dashboard from the load balancer."
    from_port       = 8080
    to_port         = 8081
    protocol        = "tcp"
    security_groups = [aws_security_group.alb.id]
  }

  ingress {
    description     = "Health checks (/readyz on the internal port) from the load balancer."
    from_port       = 9090
    to_port         = 9090
    protocol        = "tcp"
    security_groups = [aws_security_group.alb.id]
  }

  dynamic "ingress" {
    for_each = length(var.metrics_cidr_blocks) > 0 ? [1] : []
    content {
      description = "/metrics from the operators' Prometheus."
      from_port   = 9090
      to_port     = 9090
      protocol    = "tcp"
      cidr_blocks = var.metrics_cidr_blocks
    }
  }

  egress {
    description = "HTTPS to AWS APIs and GitHub."
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

resource "aws_lb" "api" {
  name                       = trimsuffix(substr("${local.name}-api", 0, 32), "-")
  load_balancer_type         = "application"
  subnets                    = var.public_subnet_ids
  security_groups            = [aws_security_group.alb.id]
  drop_invalid_header_fields = true
  # A provision answers when its runners registered (a cold boot: minutes); the default 60 s would cut
  # the workflow's request first. A runner class whose image installs packages at boot provisions
  # up to boot_extra_seconds longer than RUNNERPOOL_PROVISION_TIMEOUT.
  idle_timeout = min(var.provision_timeout_seconds + local.boot_extra_seconds + 60, 4000)
}

resource "aws_lb_target_group" "reconciler" {
  name        = trimsuffix(substr("${local.name}-api", 0, 32), "-")
  port        = 8080
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = var.vpc_id
  # A stopping task leaves the target group first and keeps serving its open requests this long
  # before ECS stops it: a provision waits up to provision_timeout_seconds (the default 300 s would
  # cut a cold one). The load balancer allows at most 3600.
  deregistration_delay = min(var.provision_timeout_seconds + local.boot_extra_seconds + 60, 3600)

  # /readyz is served on the internal port (RUNNERPOOL_METRICS_LISTEN); a draining replica answers
  # 503 there and leaves the target group before it stops.
  health_check {
    path    = "/readyz"
    port    = "9090"
    matcher = "200"
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.api.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.reconciler.arn
  }
}

resource "aws_ecs_service" "reconciler" {
  name            = "reconciler"
  cluster         = aws_ecs_cluster.main.id
  task_definition = aws_ecs_task_definition.reconciler.arn
  desired_count   = var.reconciler_count
  launch_type     = "FARGATE"

  network_configuration {
    subnets          = var.service_subnet_ids
    security_groups  = [aws_security_group.reconciler.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.reconciler.arn
    container_name   = "reconciler"
    container_port   = 8080
  }

  dynamic "load_balancer" {
    for_each = aws_lb_target_group.dashboard
    content {
      target_group_arn = load_balancer.value.arn
      container_name   = "reconciler"
      container_port   = 8081
    }
  }

  # New tasks start before old ones stop (docs/upgrading.md): a draining replica finishes its
  # requests, the lease moves on, and the service never runs short.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  # A deployment whose tasks never become healthy (an image that cannot be pulled, a configuration
  # the reconciler refuses at start) fails and rolls back to the last good task definition, and
  # `terraform apply` reports it, instead of ECS retrying forever.
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  wait_for_steady_state = true

  depends_on = [aws_lb_listener.https]
}
