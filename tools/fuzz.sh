#!/usr/bin/env bash
# make fuzz: run every fuzz target for FUZZTIME (default 5s), one after the other (go test -fuzz
# takes one target of one package at a time). Seed corpora are in each package's testdata/fuzz;
# inputs that fail are written there too, to be committed with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}

targets=(
	"./internal/pool FuzzDecode"
	"./internal/webhook FuzzParseWorkflowJob"
	"./internal/webhook FuzzHandler"
	"./internal/schedule FuzzSpec"
	"./internal/userdata FuzzRender"
	"./internal/instancetype FuzzMatch"
	"./test/stack/ec2server FuzzQuery"
	"./reconciler/api FuzzProvisionBody"
	"./reconciler/api FuzzReleaseBody"
	"./reconciler/api FuzzRunPath"
)

# A target missing from the list is a target CI never fuzzes: fail instead.
listed=$(printf '%s\n' "${targets[@]}" | awk '{print $2}' | sort)
found=$(grep -rhoE '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' --include='*_test.go' internal reconciler provider test 2>/dev/null | awk '{print $2}' | sed 's/(.*//' | sort)
if [[ "$listed" != "$found" ]]; then
	echo "fuzz: tools/fuzz.sh lists:"; echo "$listed"; echo "fuzz: the repository has:"; echo "$found"
	exit 1
fi

failed=0
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name ($pkg, $FUZZTIME)"
	if ! "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then
		echo "fuzz: FAIL $name"
		failed=1
	fi
done
if [[ $failed -ne 0 ]]; then
	echo "fuzz: failures above; the failing inputs are in testdata/fuzz of their package"
	exit 1
fi
echo "fuzz: ok (${#targets[@]} targets, $FUZZTIME each)"
