output "table" {
  description = "The state table."
  value       = runnerpool_state_table.main.name
}

output "api_url" {
  description = "Where workflows reach the reconciler (point the certificate's name at load_balancer_dns_name)."
  value       = var.api_url
}

output "load_balancer_dns_name" {
  description = "DNS name of the reconciler's load balancer."
  value       = aws_lb.api.dns_name
}

output "queues" {
  description = "Pool queue URL of each runner class."
  value       = { for k, q in runnerpool_pool_queue.class : k => q.url }
}

output "launch_templates" {
  description = "Launch template id of each runner class."
  value       = { for k, lt in aws_launch_template.runner : k => lt.id }
}

output "pool_job_queue_url" {
  description = "The pool-job queue (webhook and scale-set jobs)."
  value       = aws_sqs_queue.pool_jobs.url
}

output "instance_log_group" {
  description = "CloudWatch Logs group of the runner instances' bootstrap log and journal."
  value       = aws_cloudwatch_log_group.instances.name
}

output "dynamodb_gateway_endpoint_id" {
  description = "The DynamoDB gateway endpoint the runners' requests go through (created here, or yours)."
  value       = var.dynamodb_gateway_endpoint_id != "" ? var.dynamodb_gateway_endpoint_id : aws_vpc_endpoint.dynamodb[0].id
}

output "webhook_url" {
  description = "Where GitHub's workflow_job webhooks go (with the webhook secret)."
  value       = "${trimsuffix(var.api_url, "/")}/v1/webhooks/github"
}
