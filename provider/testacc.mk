# Acceptance tests of the Terraform provider, docs and release checks. Included by GNUmakefile
# (`include provider/testacc.mk`), which defines GO, GOTEST, STACK and the deps target.
#
#   make testacc            the provider's acceptance tests on Terraform, then on OpenTofu
#   make testacc-terraform  ... on `terraform` from PATH, else terraform v1.5.7 built once into the tools cache
#   make testacc-opentofu   ... on `tofu` from PATH, else OpenTofu built once into the tools cache
#   make docs-check         fails when `make docs` would change docs/
#   make examples-check     fails when an example is not `terraform fmt`-formatted
#   make release-check      goreleaser check on .goreleaser.yml (in CI, .ci/run: goreleaser is built
#                           from source; `make test` runs neither this nor testacc-opentofu)
#   make workflows-check    actionlint (pinned in tools/actionlint/go.mod) on .github/workflows, and
#                           every `uses:` of the workflows and examples pinned by full commit SHA
#
# The tools cache is ${RUNNERPOOL_TOOLS_CACHE:-~/.cache/runnerpool-tools}: keep it in CI's cache so a
# fresh clone does not rebuild the CLIs (several minutes).

ENSURE_TF := tools/tf/ensure-terraform.sh

.PHONY: testacc testacc-terraform testacc-opentofu docs-check examples-check release-check workflows-check

testacc: testacc-terraform testacc-opentofu

# Each run starts its own local stack (or reuses the one in the environment under `make test`).
testacc-terraform: deps
	tf=$$($(ENSURE_TF) terraform) && \
	TF_ACC=1 TF_ACC_TERRAFORM_PATH="$$tf" $(STACK) -- $(GOTEST) ./provider/...

testacc-opentofu: deps
	tf=$$($(ENSURE_TF) tofu) && \
	TF_ACC=1 TF_ACC_TERRAFORM_PATH="$$tf" TF_ACC_PROVIDER_HOST=registry.opentofu.org $(STACK) -- $(GOTEST) ./provider/...

docs-check:
	tools/docs-check.sh

examples-check:
	tf=$$($(ENSURE_TF) terraform) && TF_CLI_CONFIG_FILE=provider/testdata/cli.tfrc "$$tf" fmt -check -recursive -diff examples

# TestReleaseNames (build tag release) runs in the rehearsal (make rehearsal), on its release.
release-check:
	tools/release-check.sh

# actionlint also runs shellcheck on the workflows' run scripts when shellcheck is on PATH (make
# test-deps installs it).
workflows-check:
	cd tools/actionlint && $(GO) build -o ../../$(BIN)/actionlint github.com/rhysd/actionlint/cmd/actionlint
	$(BIN)/actionlint .github/workflows/*.yml
	$(GOTEST) -run '^(TestUnpinned|TestWorkflowsPinActions)$$' ./test/stack/exampletf/
