#!/usr/bin/env bash
# Builds the helm command the chart's tests use (helm lint, template, install, upgrade, uninstall) from its
# pinned Go module, once, into a cache directory outside the repository, and prints the binary's path.
# No helm package or release binary can be downloaded on the project's machines; the Go module can.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/helm/helm-$HELM_VERSION"

if [ ! -x "$BIN_DIR/helm" ]; then
  echo "helm: building helm $HELM_VERSION into $BIN_DIR (first time only, a few minutes)" >&2
  start=$(date +%s)
  mkdir -p "$BIN_DIR"
  pkg="helm.sh/helm/v3/internal/version"
  GOBIN="$BIN_DIR" GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X $pkg.version=$HELM_VERSION -X $pkg.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  echo "helm: built helm in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN_DIR/helm"
