# Live instances of the small-x64 pool by state.
data "runnerpool_pool_status" "small_x64" {
  table = "runnerpool-ci-prod"
  pool  = "small-x64"
}

output "small_x64_ready" {
  value = data.runnerpool_pool_status.small_x64.counts["ready"] + data.runnerpool_pool_status.small_x64.counts["stopped"]
}
