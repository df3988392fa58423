#!/usr/bin/env bash
# Prints the path of promtool (Prometheus's rule checker and rule unit-test runner): the one on PATH,
# else the pinned version built once from the Go module proxy into the tools cache
# (tools/cached-go-tool.sh). Prometheus 3.x's Go module is versioned v0.3xx (v0.316.0 is 3.16.0).
set -euo pipefail
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-v0.316.0}
exec "$(dirname "$0")/cached-go-tool.sh" promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_MODULE_VERSION"
