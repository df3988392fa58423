# Jobs with `runs-on: small-x64-warm` in any repository of the acme organization are served by the
# small-x64 warm pool, learnt from the Actions service's message queue (no webhook needed).
resource "runnerpool_scale_set" "small_x64" {
  table       = "runnerpool-ci-prod"
  name        = "small-x64-warm"
  warm_pool   = "small-x64"
  scope       = "acme"
  max_runners = 20
}

# A repository's own scale set, in its default runner group.
resource "runnerpool_scale_set" "app" {
  table     = "runnerpool-ci-prod"
  name      = "app-warm"
  warm_pool = "small-x64"
  scope     = "acme/app"
}
