# What the small-x64 pool holds on a Saturday night in Paris.
data "runnerpool_schedule" "saturday_night" {
  table = "runnerpool-ci-prod"
  pool  = "small-x64"
  time  = "2025-03-29T23:30:00+01:00"
}

# What it holds now, and when that changes.
data "runnerpool_schedule" "now" {
  table = "runnerpool-ci-prod"
  pool  = "small-x64"
}

output "small_x64_now" {
  value = "${data.runnerpool_schedule.now.schedule}: ${data.runnerpool_schedule.now.hot} hot, ${data.runnerpool_schedule.now.stopped} stopped until ${coalesce(data.runnerpool_schedule.now.next_change, "further notice")}"
}
