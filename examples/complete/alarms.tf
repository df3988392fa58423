# Alerts on AWS: every alert of reconciler/alerts/runnerpool.rules.yml as a CloudWatch alarm, for
# deployments where no Prometheus scrapes the tasks (their addresses change with every deployment).
# The reconciler writes the metrics those alerts read as CloudWatch embedded metric format lines on
# stdout (RUNNERPOOL_EMF_INTERVAL, reconciler.tf), which the awslogs driver sends to the reconciler's
# log group and CloudWatch turns into metrics of the namespace below with the dimension Deployment
# (docs/alerts.md). TestAlarmsCoverAlerts (test/stack/exampletf) fails when an alert has no
# alarm here or an alarm reads a metric the reconciler does not write.

locals {
  metrics_namespace = "Runnerpool"
  alarm_actions     = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]

  # By alert: the metrics (id => CloudWatch metric, statistic, extra dimensions), the metric math
  # expression over them the alarm compares (empty: the one metric itself), and the period and
  # number of periods standing for the rule's window and `for`. Counters are written as their
  # increase per flush, so a Sum is the increase.
  alarms = merge({
    RunnerpoolLeaderAbsent = {
      severity    = "critical"
      description = "No reconciler replica has held the leader lease for 5 minutes (or none writes metrics): refresh and warm-pool convergence are not running."
      metrics     = { leader = { name = "runnerpool_leader", stat = "Maximum", dimensions = {} } }
      expression  = ""
      comparison  = "LessThanThreshold"
      threshold   = 1
      period      = 60
      periods     = 5
      missing     = "breaching"
    }
    RunnerpoolProvisionsFailing = {
      severity    = "critical"
      description = "More than a fifth of the provisions of the last 15 minutes ended unsuccessful or in error (invalid requests left out)."
      metrics = {
        provisions    = { name = "runnerpool_provision_duration_seconds_count", stat = "Sum", dimensions = {} }
        invalids      = { name = "runnerpool_provision_duration_seconds_count", stat = "Sum", dimensions = { outcome = "invalid" } }
        unsuccessfuls = { name = "runnerpool_provision_duration_seconds_count", stat = "Sum", dimensions = { outcome = "unsuccessful" } }
        errors        = { name = "runnerpool_provision_duration_seconds_count", stat = "Sum", dimensions = { outcome = "error" } }
      }
      expression = "IF(FILL(provisions, 0) - FILL(invalids, 0) > 0, (FILL(unsuccessfuls, 0) + FILL(errors, 0)) / (FILL(provisions, 0) - FILL(invalids, 0)), 0)"
      comparison = "GreaterThanThreshold"
      threshold  = 0.2
      period     = 900
      periods    = 1
      missing    = "notBreaching"
    }
    RunnerpoolRegistrationsRefused = {
      severity    = "critical"
      description = "GitHub refused runner registrations in the last 15 minutes (the dimension reason says why: runner_version is a runner release GitHub no longer accepts)."
      metrics     = { refused = { name = "runnerpool_registrations_refused_total", stat = "Sum", dimensions = {} } }
      expression  = ""
      comparison  = "GreaterThanThreshold"
      threshold   = 0
      period      = 900
      periods     = 1
      missing     = "notBreaching"
    }
    RunnerpoolRunnerReleaseAge = {
      severity    = "warning"
      description = "The oldest live runner has been more than 21 days behind the current runner release for an hour; GitHub stops assigning jobs at 30."
      metrics     = { behind = { name = "runnerpool_runner_oldest_behind_seconds", stat = "Maximum", dimensions = {} } }
      expression  = ""
      comparison  = "GreaterThanThreshold"
      threshold   = 21 * 86400
      period      = 300
      periods     = 12
      missing     = "notBreaching"
    }
    RunnerpoolGitHubBudgetLow = {
      severity    = "warning"
      description = "Less than a tenth of a GitHub credential's hourly request budget has been left for 5 minutes."
      metrics     = { ratio = { name = "runnerpool_github_rate_limit_remaining_ratio", stat = "Minimum", dimensions = {} } }
      expression  = ""
      comparison  = "LessThanThreshold"
      threshold   = 0.1
      period      = 60
      periods     = 5
      missing     = "notBreaching"
    }
    RunnerpoolGitHubTokenExpiring = {
      severity    = "warning"
      description = "The reconciler's personal access token expires within 14 days: renew it (and its secret) or move to a GitHub App."
      metrics     = { left = { name = "runnerpool_github_token_expiry_seconds_left", stat = "Minimum", dimensions = {} } }
      expression  = ""
      comparison  = "LessThanThreshold"
      threshold   = 14 * 86400
      period      = 300
      periods     = 2
      missing     = "notBreaching"
    }
    RunnerpoolDynamoDBThrottled = {
      severity    = "warning"
      description = "DynamoDB has throttled the state table's calls (after the SDK's retries) for 10 minutes."
      metrics     = { throttled = { name = "runnerpool_aws_calls_total", stat = "Sum", dimensions = { service = "DynamoDB", result = "throttled" } } }
      expression  = ""
      comparison  = "GreaterThanThreshold"
      threshold   = 0
      period      = 300
      periods     = 2
      missing     = "notBreaching"
    }
    RunnerpoolQuotaRefusals = {
      severity    = "warning"
      description = "A limit (repository, deployment, runner class) has refused provisions or held back warm instances for 30 minutes."
      metrics     = { refused = { name = "runnerpool_quota_refusals_total", stat = "Sum", dimensions = {} } }
      expression  = ""
      comparison  = "GreaterThanThreshold"
      threshold   = 0
      period      = 900
      periods     = 2
      missing     = "notBreaching"
    }
    }, {
    # One per warm pool (an alarm watches fixed dimensions); a pool without autoscaling writes no
    # queue-time metrics and its alarm stays OK. p95 and jobs are written by the leader only.
    for pool in keys(var.warm_pools) : "RunnerpoolAutoscaleQueueGoalMissed-${pool}" => {
      severity    = "warning"
      description = "Autoscaled pool ${pool}: its jobs' measured queue-time p95 over the last hour has been above its goal for 30 minutes, with at least 20 jobs measured."
      metrics = {
        p95  = { name = "runnerpool_autoscale_queue_time_p95_seconds", stat = "Maximum", dimensions = { pool = pool } }
        goal = { name = "runnerpool_autoscale_queue_time_goal_seconds", stat = "Maximum", dimensions = { pool = pool } }
        jobs = { name = "runnerpool_autoscale_queue_time_jobs", stat = "Maximum", dimensions = { pool = pool } }
      }
      expression = "IF(jobs >= 20 AND p95 > goal, 1, 0)"
      comparison = "GreaterThanOrEqualToThreshold"
      threshold  = 1
      period     = 300
      periods    = 6
      missing    = "notBreaching"
    }
  })
}

resource "aws_cloudwatch_metric_alarm" "alert" {
  for_each = local.alarms

  alarm_name          = "${local.name}-${each.key}"
  alarm_description   = "${each.value.description} See docs/alerts.md."
  comparison_operator = each.value.comparison
  threshold           = each.value.threshold
  evaluation_periods  = each.value.periods
  datapoints_to_alarm = each.value.periods
  treat_missing_data  = each.value.missing
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = { severity = each.value.severity }

  dynamic "metric_query" {
    for_each = each.value.expression == "" ? [] : [each.value.expression]
    content {
      id          = "alert"
      expression  = metric_query.value
      label       = each.key
      return_data = true
    }
  }

  dynamic "metric_query" {
    for_each = each.value.metrics
    content {
      id          = metric_query.key
      return_data = each.value.expression == ""
      metric {
        namespace   = local.metrics_namespace
        metric_name = metric_query.value.name
        dimensions  = merge({ Deployment = var.deployment_id }, metric_query.value.dimensions)
        stat        = metric_query.value.stat
        period      = each.value.period
      }
    }
  }
}
