# A warm pool is imported as <table>/<name>.
terraform import runnerpool_warm_pool.small_x64 runnerpool-ci-prod/small-x64
