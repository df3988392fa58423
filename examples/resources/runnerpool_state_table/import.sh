# A state table is imported by its name.
terraform import runnerpool_state_table.main runnerpool-ci-prod
