# Least privilege for the two kinds of principals:
#   - runner instances (the agent): reading their own control-plane items and writing their own
#     reports in the state table, and terminating themselves;
#   - the reconciler: the state table, the pool queues, and EC2 instances carrying this deployment's tag.
# Terraform itself needs what the provider documentation lists.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account   = data.aws_caller_identity.current.account_id
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.name
  instances = "arn:${local.partition}:ec2:${local.region}:${local.account}:instance/*"
}

# ---- runner instances ----

data "aws_iam_policy_document" "runner_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "runner" {
  name               = "${local.name}-runner"
  assume_role_policy = data.aws_iam_policy_document.runner_assume.json
}

resource "aws_iam_instance_profile" "runner" {
  name = "${local.name}-runner"
  role = aws_iam_role.runner.name
}

data "aws_iam_policy_document" "runner" {
  # The agent's items, split by author so that a job which reached these credentials cannot steer the
  # control plane (internal/store: item.go, signals.go):
  #   - INSTANCE#<key>: what the control plane decides from (the instance record: state, run, scope,
  #     thresholds, class, type; the per-claim credentials it hands out). The reconciler writes them;
  #     the instance may only read its own (ReadOwnItems). It cannot delete its credential either:
  #     the control plane withdraws it once the agent reported.
  #   - AGENT#<key>: what the agent reports (heartbeat, signals, acknowledgements). The only items it
  #     may write (WriteOwnReports), and only with the attributes the agent writes: never an index key
  #     (idx_state, idx_run, idx_pool, idx_fit, threshold, id), so no item of the instance ever appears in a
  #     listing of the control plane; and never asking for old values back. The control plane reads
  #     them as evidence to check, never as facts.
  # Never a query, a scan or an index, never configuration, runs or leases. The reconciler and the
  # agents key an instance's items by its ARN (RUNNERPOOL_INSTANCE_KEYS and the user data's
  # instance_keys, both "arn" by default), so the conditions name exactly this instance's partitions:
  # ${ec2:SourceInstanceARN} is the ARN of the instance the role's credentials were issued to.
  #
  # Copied credentials. EC2 issues the role's credentials with the instance's properties
  # (ec2:SourceInstanceARN, aws:EC2InstanceSourceVPC, aws:EC2InstanceSourcePrivateIPv4), and they
  # travel with the credentials: a copy used elsewhere still names the instance. What ties a request
  # to the instance is its network path: aws:SourceVpc and aws:VpcSourceIp, which DynamoDB sees
  # through the gateway endpoint below (absent on a request over the internet, so the statements do
  # not apply there). A copy used from another host is thus refused every DynamoDB call; it can
  # still terminate the instance it was issued to (TerminateSelf: EC2 is reached without the
  # endpoint), which is the instance's own deadline anyway.
  # internal/agent/iam_test.go checks every call of the agent's lifecycle against these statements,
  # and that an item carrying an index key, a request for old values and a copied credential are
  # refused, with its own evaluator and with an IAM simulator we did not write (iam_sim_test.go,
  # @cloud-copilot/iam-simulate) on this file as evaluated.
  statement {
    sid       = "ReadOwnItems"
    actions   = ["dynamodb:GetItem"]
    resources = [runnerpool_state_table.main.arn]

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = ["INSTANCE#$${ec2:SourceInstanceARN}", "AGENT#$${ec2:SourceInstanceARN}"]
    }
    condition {
      test     = "ArnLike"
      variable = "ec2:SourceInstanceARN"
      values   = [local.instances]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceVpc"
      values   = ["$${aws:EC2InstanceSourceVPC}"]
    }
    # IAM substitutes policy variables only under string and ARN operators (never under IpAddress),
    # so the comparison names the credential's address as the key and the request's as the variable.
    condition {
      test     = "StringEquals"
      variable = "aws:EC2InstanceSourcePrivateIPv4"
      values   = ["$${aws:VpcSourceIp}"]
    }
  }

  statement {
    sid       = "WriteOwnReports"
    actions   = ["dynamodb:PutItem"]
    resources = [runnerpool_state_table.main.arn]

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = ["AGENT#$${ec2:SourceInstanceARN}"]
    }
    # The attributes of the agent's reports (internal/store/signals.go, attribution.go): the item's
    # key, the time, the signal, its run and detail, the agent's public key and signature, and the
    # time to live.
    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:Attributes"
      values   = ["pk", "sk", "at", "ttl", "signal", "run_id", "detail", "key", "sig"]
    }
    condition {
      test     = "StringEqualsIfExists"
      variable = "dynamodb:ReturnValues"
      values   = ["NONE"]
    }
    condition {
      test     = "ArnLike"
      variable = "ec2:SourceInstanceARN"
      values   = [local.instances]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceVpc"
      values   = ["$${aws:EC2InstanceSourceVPC}"]
    }
    # IAM substitutes policy variables only under string and ARN operators (never under IpAddress),
    # so the comparison names the credential's address as the key and the request's as the variable.
    condition {
      test     = "StringEquals"
      variable = "aws:EC2InstanceSourcePrivateIPv4"
      values   = ["$${aws:VpcSourceIp}"]
    }
  }

  # Self-termination past the instance's deadline: only the instance the credentials belong to, and
  # only if it carries this deployment's tag. Documented keys only (the Service Authorization
  # Reference's EC2 keys): ec2:SourceInstanceARN is the instance the credentials were issued to,
  # ec2:InstanceID the instance acted on, so the ARN built from the latter must equal the former.
  # (aws:ARN, used by some AWS managed policies for this, is not a published condition key.)
  statement {
    sid       = "TerminateSelf"
    actions   = ["ec2:TerminateInstances"]
    resources = [local.instances]

    condition {
      test     = "ArnEquals"
      variable = "ec2:SourceInstanceARN"
      values   = ["arn:${local.partition}:ec2:${local.region}:${local.account}:instance/$${ec2:InstanceID}"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/runnerpool:deployment"
      values   = [var.deployment_id]
    }
  }
}

# The instance's bootstrap log and journal, shipped to CloudWatch Logs (runnerpool_user_data): the one
# log group of this deployment's instances, each instance in streams of its own name. Not tied to
# the network path (CloudWatch Logs is reached without the DynamoDB endpoint); a job holding the role
# can add lines to the group, never read or delete any.
data "aws_iam_policy_document" "runner_logs" {
  statement {
    sid       = "ShipInstanceLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.instances.arn}:log-stream:*"]
  }
}

resource "aws_iam_role_policy" "runner_logs" {
  name   = "runnerpool-agent-logs"
  role   = aws_iam_role.runner.id
  policy = data.aws_iam_policy_document.runner_logs.json
}

resource "aws_iam_role_policy" "runner" {
  name   = "runnerpool-agent"
  role   = aws_iam_role.runner.id
  policy = data.aws_iam_policy_document.runner.json
}

# ---- the reconciler (ECS task role) ----

data "aws_iam_policy_document" "task_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "reconciler" {
  name               = "${local.name}-reconciler"
  assume_role_policy = data.aws_iam_policy_document.task_assume.json
}

data "aws_iam_policy_document" "reconciler" {
  # A transaction (TransactWriteItems) is authorised item by item, by the action of each: there is no
  # action of its own for it.
  statement {
    sid = "StateTable"
    actions = [
      "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
      "dynamodb:Query", "dynamodb:Scan", "dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem",
    ]
    resources = [runnerpool_state_table.main.arn, "${runnerpool_state_table.main.arn}/index/*"]
  }

  statement {
    sid       = "PoolQueues"
    actions   = ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
    resources = [for q in runnerpool_pool_queue.class : q.arn]
  }

  # Webhook pool jobs and scale-set jobs (RUNNERPOOL_POOL_JOB_QUEUE_URL): every replica sends and serves.
  statement {
    sid       = "PoolJobQueue"
    actions   = ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
    resources = [aws_sqs_queue.pool_jobs.arn]
  }

  # A runner class's pool keeps a queue per repository or owner beside its class queue, named
  # <class queue>-s-<8 hex>: the reconciler creates one on the first release into that scope (with the
  # class queue's attributes), and refresh deletes one that stayed empty for a day.
  statement {
    sid = "PoolScopeQueues"
    actions = [
      "sqs:CreateQueue", "sqs:DeleteQueue", "sqs:GetQueueAttributes",
      "sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
    ]
    resources = [for q in runnerpool_pool_queue.class : "${trimsuffix(q.arn, ".fifo")}-s-*"]
  }

  # ListQueues is authorised on no queue: refresh lists the scope queues by name prefix.
  statement {
    sid       = "ListPoolQueues"
    actions   = ["sqs:ListQueues"]
    resources = ["*"]
  }

  statement {
    sid = "Describe"
    actions = [
      "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeSubnets", "ec2:DescribeImages", "ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions",
      "ec2:DescribeSpotPriceHistory", "ec2:DescribeTags",
    ]
    resources = ["*"]
  }

  # Each runner class launches from its own version of its launch template (the class's image, root
  # volume, security groups, instance profile and pre-runner script), made and pruned by the reconciler.
  statement {
    sid       = "ClassLaunchTemplateVersions"
    actions   = ["ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions"]
    resources = [for lt in aws_launch_template.runner : lt.arn]
  }

  # CreateFleet (instant) launches through RunInstances; new instances must carry this deployment's tag.
  statement {
    sid       = "CreateFleet"
    actions   = ["ec2:CreateFleet"]
    resources = ["*"]
  }
  statement {
    sid       = "LaunchTaggedInstances"
    actions   = ["ec2:RunInstances"]
    resources = [local.instances]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/runnerpool:deployment"
      values   = [var.deployment_id]
    }
  }
  statement {
    sid     = "LaunchFrom"
    actions = ["ec2:RunInstances"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:${local.account}:volume/*",
      "arn:${local.partition}:ec2:${local.region}:${local.account}:network-interface/*",
      "arn:${local.partition}:ec2:${local.region}:${local.account}:spot-instances-request/*",
      "arn:${local.partition}:ec2:${local.region}:${local.account}:security-group/${aws_security_group.runner.id}",
      "arn:${local.partition}:ec2:${local.region}::image/*",
    ]
  }
  statement {
    sid       = "LaunchTemplates"
    actions   = ["ec2:RunInstances", "ec2:CreateFleet"]
    resources = [for lt in aws_launch_template.runner : lt.arn]
  }
  statement {
    sid       = "LaunchInSubnets"
    actions   = ["ec2:RunInstances"]
    resources = [for s in var.runner_subnet_ids : "arn:${local.partition}:ec2:${local.region}:${local.account}:subnet/${s}"]
  }
  statement {
    sid       = "TagOnLaunch"
    actions   = ["ec2:CreateTags"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["CreateFleet", "RunInstances"]
    }
  }

  # Start, stop, terminate and tag (claim notices) only this deployment's instances.
  statement {
    sid       = "ManageOwnInstances"
    actions   = ["ec2:StartInstances", "ec2:StopInstances", "ec2:TerminateInstances", "ec2:CreateTags"]
    resources = [local.instances]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/runnerpool:deployment"
      values   = [var.deployment_id]
    }
  }

  statement {
    sid       = "PassRunnerRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.runner.arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }

  # Spot runner classes need EC2's spot service-linked role once per account.
  statement {
    sid       = "SpotServiceLinkedRole"
    actions   = ["iam:CreateServiceLinkedRole"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "iam:AWSServiceName"
      values   = ["spot.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "reconciler" {
  name   = "runnerpool-reconciler"
  role   = aws_iam_role.reconciler.id
  policy = data.aws_iam_policy_document.reconciler.json
}

# Customer-managed KMS keys (kms_key_arns): an encrypted root volume is created by RunInstances and
# re-attached by StartInstances under the caller's permissions, through EC2, which needs a grant for
# the instance (AWS's EBS encryption docs: kms:CreateGrant with kms:GrantIsForAWSResource, and the
# data key calls, through ec2.<region>.amazonaws.com); a queue under such a key needs the data key
# calls through SQS.
data "aws_iam_policy_document" "reconciler_kms" {
  count = length(var.kms_key_arns) > 0 ? 1 : 0

  statement {
    sid       = "EbsVolumeGrants"
    actions   = ["kms:CreateGrant"]
    resources = var.kms_key_arns
    condition {
      test     = "Bool"
      variable = "kms:GrantIsForAWSResource"
      values   = ["true"]
    }
  }

  statement {
    sid       = "EncryptedVolumesAndQueues"
    actions   = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo"]
    resources = var.kms_key_arns
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["ec2.${local.region}.amazonaws.com", "sqs.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "reconciler_kms" {
  count  = length(var.kms_key_arns) > 0 ? 1 : 0
  name   = "runnerpool-reconciler-kms"
  role   = aws_iam_role.reconciler.id
  policy = data.aws_iam_policy_document.reconciler_kms[0].json
}

# ---- ECS task execution (image pull, logs, the task's secrets) ----

resource "aws_iam_role" "execution" {
  name               = "${local.name}-execution"
  assume_role_policy = data.aws_iam_policy_document.task_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

# ECS reads the task's secrets (the webhook secret, the App key or the token) when it starts a task.
data "aws_iam_policy_document" "execution_secret" {
  statement {
    sid       = "TaskSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = concat(values(local.reconciler_secrets), var.reconciler_image_credentials_secret_arn == "" ? [] : [var.reconciler_image_credentials_secret_arn])
  }

  # Secrets under a customer-managed key: Secrets Manager decrypts them with the caller's permission.
  dynamic "statement" {
    for_each = var.secrets_kms_key_arn == "" ? [] : [var.secrets_kms_key_arn]
    content {
      sid       = "TaskSecretsKey"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["secretsmanager.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role_policy" "execution_secret" {
  name   = "task-secrets"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution_secret.json
}
