# A scale set is imported as <table>/<name>.
terraform import runnerpool_scale_set.small_x64 runnerpool-ci-prod/small-x64-warm
