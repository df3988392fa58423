# A runner image prepared for runnerpool: the packages, the runner user, the runnerpool agent and the
# GitHub Actions runner (and, for docker classes, rootless Docker) installed by the user data's own
# steps (`bake` mode), so that a boot downloads and installs nothing. See docs/guides/images.md.
#
#   terraform output -raw user_data > userdata.sh   # runnerpool_user_data's script, as the instances get it
#   packer init images/packer && packer build -var user_data_file=userdata.sh -var base=ubuntu-24.04 \
#     -var job_access=docker images/packer
#
# Build with the same user data (agent and runner pin) the launch template uses: a boot finds that runner
# and agent installed and intact and uses them; any other pin is downloaded and installed as on a plain
# image.

packer {
  required_plugins {
    amazon = {
      version = ">= 1.3.0"
      source  = "github.com/hashicorp/amazon"
    }
  }
}

variable "user_data_file" {
  type        = string
  description = "The rendered user data (runnerpool_user_data's script) whose install steps prepare the image."
}

variable "base" {
  type        = string
  default     = "ubuntu-24.04"
  description = "The base image: ubuntu-24.04, ubuntu-22.04, debian-12 or al2023 (docs/guides/images.md)."
  validation {
    condition     = contains(["ubuntu-24.04", "ubuntu-22.04", "debian-12", "al2023"], var.base)
    error_message = "The base must be one of ubuntu-24.04, ubuntu-22.04, debian-12, al2023."
  }
}

variable "arch" {
  type        = string
  default     = "x86_64"
  description = "x86_64 or arm64."
  validation {
    condition     = contains(["x86_64", "arm64"], var.arch)
    error_message = "The arch must be x86_64 or arm64."
  }
}

variable "job_access" {
  type        = string
  default     = "user"
  description = "The job access of the classes the image serves: user, docker (rootless Docker) or root (Docker and sudo)."
  validation {
    condition     = contains(["user", "docker", "root"], var.job_access)
    error_message = "The job access must be user, docker or root."
  }
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "instance_type" {
  type    = string
  default = ""
}

locals {
  deb_arch = var.arch == "x86_64" ? "amd64" : "arm64"
  # Each base's official images: their owner account, name pattern and login user.
  bases = {
    "ubuntu-24.04" = { owner = "099720109477", user = "ubuntu", name = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-${local.deb_arch}-server-*" }
    "ubuntu-22.04" = { owner = "099720109477", user = "ubuntu", name = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-${local.deb_arch}-server-*" }
    "debian-12"    = { owner = "136693071363", user = "admin", name = "debian-12-${local.deb_arch}-*" }
    "al2023"       = { owner = "137112412989", user = "ec2-user", name = "al2023-ami-2023.*-kernel-*-${var.arch}" }
  }
  base          = local.bases[var.base]
  # The runner release the user data installs (its `readonly RUNNER_VERSION='…'` line): the image
  # carries it, so the reconciler knows a boot on it installs nothing while its classes install that
  # release (their registration wait stays short; docs/guides/images.md).
  runner_version = regex("readonly RUNNER_VERSION='([0-9.]+)'", file(var.user_data_file))[0]
  instance_type = var.instance_type != "" ? var.instance_type : (var.arch == "x86_64" ? "t3.medium" : "t4g.medium")
}

source "amazon-ebs" "runner" {
  region        = var.region
  instance_type = local.instance_type
  ssh_username  = local.base.user
  ami_name      = "runnerpool-${var.base}-${var.arch}-${var.job_access}-{{timestamp}}"
  source_ami_filter {
    owners      = [local.base.owner]
    most_recent = true
    filters = {
      name                = local.base.name
      architecture        = var.arch
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
  }
  # As the launch template: IMDSv2 only.
  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }
  tags = {
    "runnerpool:base"           = var.base
    "runnerpool:job-access"     = var.job_access
    "runnerpool:runner-version" = local.runner_version
  }
}

build {
  sources = ["source.amazon-ebs.runner"]

  # First boot's own package work (cloud-init, unattended-upgrades) finishes first; the user data
  # waits for apt's locks in any case.
  provisioner "shell" {
    inline = ["cloud-init status --wait || true"]
  }

  provisioner "file" {
    source      = var.user_data_file
    destination = "/tmp/runnerpool-userdata.sh"
  }

  # The user data's install steps, as a boot runs them, without anything of an instance.
  provisioner "shell" {
    inline = ["sudo bash /tmp/runnerpool-userdata.sh bake ${var.job_access}"]
  }

  # What an instance of the image must not inherit: this build's logs, cloud-init's record of having
  # run (so that the instances run their user data), downloaded packages.
  provisioner "shell" {
    inline = [
      "sudo rm -f /tmp/runnerpool-userdata.sh /var/log/runnerpool-bootstrap.log",
      "if command -v apt-get >/dev/null; then sudo apt-get clean; else sudo dnf clean all; fi",
      "sudo cloud-init clean --logs",
    ]
  }
}
