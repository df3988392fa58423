# One hot and two stopped instances by default; two stopped at night (22:00 to 06:00, Paris time,
# each night belonging to the day it starts on); one stopped at weekends outside the nights.
resource "runnerpool_warm_pool" "small_x64" {
  table        = "runnerpool-ci-prod"
  name         = "small-x64"
  runner_class = "small-x64"
  environment  = "prod"
  timezone     = "Europe/Paris"

  schedule {
    name    = "default"
    hot     = 1
    stopped = 2
  }

  schedule {
    name    = "nights"
    hot     = 0
    stopped = 2

    time_range {
      start = "22:00"
      end   = "06:00"
    }
  }

  schedule {
    name    = "weekends"
    days    = ["saturday", "sunday"]
    hot     = 0
    stopped = 1
  }
}

# Dependabot's jobs ask for the pool named dependabot: keep one hot on weekday office hours.
resource "runnerpool_warm_pool" "dependabot" {
  table        = "runnerpool-ci-prod"
  name         = "dependabot"
  runner_class = "small-x64"
  timezone     = "America/New_York"

  schedule {
    name    = "office"
    days    = ["monday", "tuesday", "wednesday", "thursday", "friday"]
    hot     = 1
    stopped = 0

    time_range {
      start = "08:00"
      end   = "18:30"
    }
  }
}
