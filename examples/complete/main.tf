# runnerpool on AWS: the state table and the pool queues (this provider), the runner classes and
# warm pools the reconciler reads from the table, a launch template per runner class with the rendered bootstrap,
# and the IAM roles (iam.tf) and the reconciler service (reconciler.tf).

locals {
  name = "runnerpool-${var.deployment_id}"
}

resource "runnerpool_state_table" "main" {
  name                   = local.name
  point_in_time_recovery = true
  deletion_protection    = var.deletion_protection
}

resource "runnerpool_pool_queue" "class" {
  for_each = var.runner_classes

  runner_class = each.key
}

# The pool-job queue: workflow_job webhooks for `pool=NAME` jobs and the jobs of the scale sets go
# through it to whichever replica serves them (RUNNERPOOL_POOL_JOB_QUEUE_URL). Setting it enables warm
# pools: convergence, webhook routing, scale-set listeners. A job's message stays invisible while a
# replica serves it and comes back if that replica dies.
resource "aws_sqs_queue" "pool_jobs" {
  name                       = "${local.name}-pool-jobs"
  visibility_timeout_seconds = 120
  message_retention_seconds  = 86400
  sqs_managed_sse_enabled    = true
}

# Runner instances ship their bootstrap log and journal here (runnerpool_user_data's CloudWatch
# shipping); the runner role may write to this log group only (iam.tf).
resource "aws_cloudwatch_log_group" "instances" {
  name              = "/runnerpool/${var.deployment_id}/instances"
  retention_in_days = 30
}

# DynamoDB through a gateway endpoint from the runner subnets: requests then carry aws:SourceVpc and
# aws:VpcSourceIp, which the instance role compares with the properties its credentials were issued
# with (aws:EC2InstanceSourceVPC, aws:EC2InstanceSourcePrivateIPv4), so a copy of the credentials
# used from another host reaches nothing in the table (iam.tf). Gateway endpoints cost nothing. A
# route table takes one route per prefix list: where the runner subnets already route DynamoDB
# through an endpoint, give its id (dynamodb_gateway_endpoint_id) and none is created.
resource "aws_vpc_endpoint" "dynamodb" {
  count = var.dynamodb_gateway_endpoint_id == "" ? 1 : 0

  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${var.region}.dynamodb"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.runner_route_table_ids
}

resource "aws_security_group" "runner" {
  name        = "${local.name}-runner"
  description = "runnerpool runners: no inbound; outbound to GitHub, AWS APIs and package mirrors."
  vpc_id      = var.vpc_id

  egress {
    description = "HTTPS to GitHub and AWS APIs."
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }

  egress {
    description = "HTTP for package mirrors."
    from_port   = 80
    to_port     = 80
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

# The bootstrap every instance runs once: installs the agent (checked against its SHA-256) and the
# pinned GitHub Actions runner, and starts the agent. It carries no secret.
data "runnerpool_user_data" "runner" {
  table       = runnerpool_state_table.main.name
  agent_x64   = var.agent.x64
  agent_arm64 = var.agent.arm64
  log_group   = aws_cloudwatch_log_group.instances.name
  # Where the agents of classes with the cache on ask the reconciler for presigned URLs (cache.tf).
  cache_url = local.cache ? var.api_url : null
}

# One launch template per runner class: the bootstrap, metadata options and shutdown behaviour. The
# reconciler launches each class from its own version of it, with the class's image, root volume,
# security groups, instance profile and pre-runner script on top (docs/reconciler.md); the values
# here are the template's own defaults, and the root volume keeps its encryption setting.
resource "aws_launch_template" "runner" {
  for_each = var.runner_classes

  name_prefix            = "${local.name}-${each.key}-"
  description            = "runnerpool runners of class ${each.key}."
  update_default_version = true
  image_id               = each.value.image
  user_data              = data.runnerpool_user_data.runner.rendered_base64
  vpc_security_group_ids = [aws_security_group.runner.id]

  iam_instance_profile {
    arn = aws_iam_instance_profile.runner.arn
  }

  block_device_mappings {
    device_name = each.value.root_device_name
    ebs {
      volume_type           = "gp3"
      volume_size           = each.value.volume_size_gib
      iops                  = each.value.volume_iops
      throughput            = each.value.volume_throughput_mibps
      encrypted             = true
      delete_on_termination = true
    }
  }

  # IMDSv2 only; instance metadata tags carry the claim notice the agent watches (runnerpool:wake).
  # A hop limit of 1 keeps IMDSv2 tokens from reaching containers on a bridge network; the user data
  # also blocks the runner user and containers from the metadata address (allow_job_metadata_access).
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "enabled"
  }

  # Terminate on shutdown: an instance that stops itself past its deadline is gone, not stopped.
  instance_initiated_shutdown_behavior = "terminate"

  tag_specifications {
    resource_type = "volume"
    tags = {
      "runnerpool:deployment"   = var.deployment_id
      "runnerpool:runner-class" = each.key
    }
  }
}

resource "runnerpool_runner_class" "class" {
  for_each = var.runner_classes

  table                   = runnerpool_state_table.main.name
  name                    = each.key
  image                   = each.value.image
  cpu                     = each.value.cpu
  memory_mib              = each.value.memory_mib
  instance_types          = each.value.instance_types
  volume_size_gib         = each.value.volume_size_gib
  volume_iops             = each.value.volume_iops
  volume_throughput_mibps = each.value.volume_throughput_mibps
  usage_class             = each.value.usage_class
  subnets                 = var.runner_subnet_ids
  security_groups         = [aws_security_group.runner.id]
  instance_profile        = aws_iam_instance_profile.runner.arn
  labels                  = each.value.labels
  job_access              = each.value.job_access
  reuse                   = each.value.reuse
  pre_runner_script       = each.value.pre_runner_script
  max_runtime             = each.value.max_runtime
  idle_time               = each.value.idle_time
  launch_template_id      = aws_launch_template.runner[each.key].id
  queue_url               = runnerpool_pool_queue.class[each.key].url

  dynamic "cache" {
    for_each = each.value.cache == null ? [] : [each.value.cache]
    content {
      repository_limit_gib = cache.value.repository_limit_gib
      max_age              = "${cache.value.max_age_days * 24}h"
    }
  }
}

resource "runnerpool_warm_pool" "pool" {
  for_each = var.warm_pools

  table        = runnerpool_state_table.main.name
  name         = each.key
  runner_class = runnerpool_runner_class.class[each.value.runner_class].name
  timezone     = each.value.timezone

  dynamic "schedule" {
    for_each = each.value.schedules
    content {
      name    = schedule.value.name
      days    = schedule.value.days
      hot     = schedule.value.hot
      stopped = schedule.value.stopped

      dynamic "time_range" {
        for_each = schedule.value.time_ranges
        content {
          start = time_range.value.start
          end   = time_range.value.end
        }
      }
    }
  }
}

# Warm pools serve `runs-on: [self-hosted, pool=NAME]` jobs through the workflow_job webhook, and the
# jobs of these scale sets (`runs-on: <scale set name>`) through the Actions service's message queue.
resource "runnerpool_scale_set" "set" {
  for_each = var.scale_sets

  table        = runnerpool_state_table.main.name
  name         = each.key
  warm_pool    = runnerpool_warm_pool.pool[each.value.warm_pool].name
  scope        = each.value.scope
  runner_group = each.value.runner_group
  max_runners  = each.value.max_runners
}
