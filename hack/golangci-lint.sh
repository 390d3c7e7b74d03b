#!/usr/bin/env bash
# Builds golangci-lint (make lint, run by make verify) from its pinned Go module, once, into a cache
# directory outside the repository, and prints the binary's path. The configuration is .golangci.yml.
# No release binary can be downloaded on the project's machines; the Go module can.
set -euo pipefail

GOLANGCI_LINT_VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/golangci-lint/golangci-lint-$GOLANGCI_LINT_VERSION"

if [ ! -x "$BIN_DIR/golangci-lint" ]; then
  echo "golangci-lint: building $GOLANGCI_LINT_VERSION into $BIN_DIR (first time only, a few minutes)" >&2
  start=$(date +%s)
  mkdir -p "$BIN_DIR"
  GOBIN="$BIN_DIR" GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X main.version=${GOLANGCI_LINT_VERSION#v} -X main.commit=module -X main.date=unknown" \
    "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION" >&2
  echo "golangci-lint: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN_DIR/golangci-lint"
