# A runner class is imported as <table>/<name>.
terraform import runnerpool_runner_class.small_x64 runnerpool-ci-prod/small-x64
