# The pool queue of the small-x64 runner class: released runners wait on it for the next workflow.
resource "runnerpool_pool_queue" "small_x64" {
  runner_class               = "small-x64"
  visibility_timeout_seconds = 30
  encryption                 = "sse-sqs"

  tags = {
    team = "platform"
  }
}
