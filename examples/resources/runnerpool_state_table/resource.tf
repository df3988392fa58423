# The table every part of runnerpool keeps its state in. Its keys and indexes are the product's.
resource "runnerpool_state_table" "main" {
  name                   = "runnerpool-ci-prod"
  point_in_time_recovery = true
  deletion_protection    = true

  tags = {
    team = "platform"
  }
}
