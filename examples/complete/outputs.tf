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
