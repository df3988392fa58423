# The bootstrap of runnerpool instances, for a launch template.
data "runnerpool_user_data" "runner" {
  table = "runnerpool-ci-prod"

  agent_x64 = {
    url    = "https://github.com/runnerpool/terraform-provider-runnerpool/releases/download/v1.0.0/runnerpool_linux_amd64"
    sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
  }
  agent_arm64 = {
    url    = "https://github.com/runnerpool/terraform-provider-runnerpool/releases/download/v1.0.0/runnerpool_linux_arm64"
    sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
  }
}

resource "aws_launch_template" "runner" {
  name_prefix = "runnerpool-"
  user_data   = data.runnerpool_user_data.runner.rendered_base64

  metadata_options {
    http_tokens            = "required"
    instance_metadata_tags = "enabled"
  }
}
