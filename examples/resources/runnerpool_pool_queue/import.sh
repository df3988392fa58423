# A pool queue is imported by its URL or its name; its runner class comes from its
# runnerpool:runner-class tag.
terraform import runnerpool_pool_queue.small_x64 https://sqs.eu-west-1.amazonaws.com/123456789012/ci-prod-pool-small-x64
terraform import runnerpool_pool_queue.small_x64 ci-prod-pool-small-x64
