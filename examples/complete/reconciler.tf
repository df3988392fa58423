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

  container_definitions = jsonencode([{
    name      = "reconciler"
    image     = var.reconciler_image
    essential = true
    command   = ["serve"]
    portMappings = [
      { containerPort = 8080, protocol = "tcp" },
      # The dashboard (dashboard.tf): reachable only through the load balancer's OIDC rule.
      { containerPort = 8081, protocol = "tcp" },
    ]
    environment = [
      { name = "AWS_REGION", value = local.region },
      { name = "RUNNERPOOL_LISTEN", value = ":8080" },
      { name = "RUNNERPOOL_DASHBOARD_LISTEN", value = ":8081" },
      { name = "RUNNERPOOL_TABLE", value = runnerpool_state_table.main.name },
      { name = "RUNNERPOOL_DEPLOYMENT_ID", value = var.deployment_id },
      { name = "RUNNERPOOL_OIDC_AUDIENCE", value = var.api_url },
      { name = "RUNNERPOOL_ALLOWED_REPOSITORIES", value = join(",", var.allowed_repositories) },
      # Instance items are keyed by instance ARN, as the runners' user data says (instance_keys) and
      # the runners' role requires (iam.tf); the account is given so start-up needs no STS call.
      { name = "RUNNERPOOL_INSTANCE_KEYS", value = "arn" },
      { name = "RUNNERPOOL_AWS_ACCOUNT_ID", value = local.account },
    ]
    # The token reaches the reconciler only, as an environment variable ECS reads from Secrets Manager.
    secrets = [
      { name = "RUNNERPOOL_GITHUB_TOKEN", valueFrom = var.github_token_secret_arn },
    ]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        "awslogs-group"         = aws_cloudwatch_log_group.reconciler.name
        "awslogs-region"        = local.region
        "awslogs-stream-prefix" = "reconciler"
      }
    }
  }])
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
    description = "To the reconciler tasks: the API (8080) and the dashboard (8081)."
    from_port   = 8080
    to_port     = 8081
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
}

resource "aws_lb_target_group" "reconciler" {
  name        = trimsuffix(substr("${local.name}-api", 0, 32), "-")
  port        = 8080
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = var.vpc_id

  health_check {
    path    = "/readyz"
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

  # Replace tasks one at a time: a draining replica finishes its requests, the lease moves on.
  deployment_minimum_healthy_percent = 50
  deployment_maximum_percent         = 200

  depends_on = [aws_lb_listener.https]
}
