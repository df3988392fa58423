# The dashboard: `runnerpool serve` serves it on its own port (RUNNERPOOL_DASHBOARD_LISTEN, 8081 in
# the task definition). It has NO authentication of its own, so it is reachable only through this
# listener rule, which makes the load balancer authenticate every request against your identity
# provider (OIDC) before forwarding it. Never add another route to port 8081: the security groups
# admit it from the load balancer only, and the load balancer forwards to it only here.
#
# Set dashboard_host (a name on the API certificate, e.g. runnerpool-dashboard.example.com) and the
# OIDC client of your identity provider to enable it. The ALB needs the client secret in its rule,
# so it passes through the Terraform state: keep the state encrypted and access-controlled.

variable "dashboard_host" {
  description = "Host name of the dashboard on the API load balancer (on the certificate); empty: no dashboard route."
  type        = string
  default     = ""
}

variable "dashboard_oidc" {
  description = "The OIDC client the load balancer authenticates dashboard users with (your IdP: Okta, Entra ID, Google, ...)."
  type = object({
    issuer                 = string
    authorization_endpoint = string
    token_endpoint         = string
    user_info_endpoint     = string
    client_id              = string
    client_secret          = string
  })
  default   = null
  sensitive = true

  validation {
    condition     = var.dashboard_oidc == null || try(startswith(var.dashboard_oidc.issuer, "https://"), false)
    error_message = "dashboard_oidc.issuer must be an https URL."
  }
}

locals {
  dashboard = var.dashboard_host != ""
}

resource "aws_lb_target_group" "dashboard" {
  count       = local.dashboard ? 1 : 0
  name        = trimsuffix(substr("${local.name}-dash", 0, 32), "-")
  port        = 8081
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = var.vpc_id

  health_check {
    # The dashboard answers GET /pools from the state table: a failing table shows as unhealthy.
    path    = "/pools"
    matcher = "200"
  }
}

resource "aws_lb_listener_rule" "dashboard" {
  count        = local.dashboard ? 1 : 0
  listener_arn = aws_lb_listener.https.arn
  priority     = 10

  condition {
    host_header {
      values = [var.dashboard_host]
    }
  }

  # Unauthenticated browsers are sent to the IdP; nothing reaches the dashboard without a session.
  action {
    type = "authenticate-oidc"

    authenticate_oidc {
      issuer                     = try(var.dashboard_oidc.issuer, "")
      authorization_endpoint     = try(var.dashboard_oidc.authorization_endpoint, "")
      token_endpoint             = try(var.dashboard_oidc.token_endpoint, "")
      user_info_endpoint         = try(var.dashboard_oidc.user_info_endpoint, "")
      client_id                  = try(var.dashboard_oidc.client_id, "")
      client_secret              = try(var.dashboard_oidc.client_secret, "")
      on_unauthenticated_request = "authenticate"
      scope                      = "openid email"
      session_timeout            = 28800
    }
  }

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.dashboard[0].arn
  }

  lifecycle {
    precondition {
      condition     = var.dashboard_oidc != null
      error_message = "dashboard_host is set: dashboard_oidc is required (the dashboard has no authentication of its own)."
    }
  }
}

# Prices for the cost figures (dashboard, `runnerpool status --cost`, runnerpool_cost_* metrics):
# on-demand prices from the Price List API, spot prices from EC2's spot price history. Both are
# read-only and account-wide by nature (no resource-level permissions exist for them). Without
# this policy, or with RUNNERPOOL_AWS_PRICES=false, prices come from RUNNERPOOL_PRICE_FILE only.
resource "aws_iam_role_policy" "reconciler_prices" {
  name = "prices"
  role = aws_iam_role.reconciler.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "Prices"
      Effect   = "Allow"
      Action   = ["pricing:GetProducts", "ec2:DescribeSpotPriceHistory"]
      Resource = "*"
    }]
  })
}
