resource "runnerpool_state_table" "main" {
  name = "runnerpool-ci-prod"
}

resource "runnerpool_pool_queue" "small_x64" {
  runner_class = "small-x64"
}

# Two vCPUs and 4 GiB on t3 or m7i, a free-baseline gp3 root volume, on demand.
resource "runnerpool_runner_class" "small_x64" {
  table          = runnerpool_state_table.main.name
  name           = runnerpool_pool_queue.small_x64.runner_class
  image          = "ami-0123456789abcdef0"
  cpu            = 2
  memory_mib     = 4096
  instance_types = ["t3.*", "m7i.large"]

  volume_size_gib         = 30
  volume_iops             = 3000
  volume_throughput_mibps = 125

  usage_class      = "on-demand"
  subnets          = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
  security_groups  = ["sg-0123456789abcdef0"]
  instance_profile = "runnerpool-runner"
  labels           = ["linux", "x64"]

  pre_runner_script = <<-EOT
    #!/bin/bash
    set -euo pipefail
    apt-get update && apt-get install -y jq
  EOT

  max_runtime = "6h"
  idle_time   = "10m"
  queue_url   = runnerpool_pool_queue.small_x64.url
}
