#!/usr/bin/env bash
# Builds the Kueue manager (sigs.k8s.io/kueue, pinned) from its Go module in a throwaway module of its own
# (its k8s.io versions never mix with ours), once, into a cache directory outside the repository, and copies
# its CRDs beside it. Prints the directory: kueue (the manager) and crds/*.yaml (v1beta2 is stored).
# No image or release binary can be downloaded on the project's machines; the Go module can.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/kueue/kueue-$KUEUE_VERSION"
WORK_DIR="$CACHE_ROOT/build/kueue-$KUEUE_VERSION"

if [ ! -x "$BIN_DIR/kueue" ] || [ ! -d "$BIN_DIR/crds" ]; then
  echo "kueue: building the Kueue manager $KUEUE_VERSION into $BIN_DIR (first time only, about 3 min on 2 cores)" >&2
  start=$(date +%s)
  mkdir -p "$BIN_DIR" "$WORK_DIR"
  (
    cd "$WORK_DIR"
    cat >tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
GO
    [ -f go.mod ] || go mod init build/kueue >/dev/null 2>&1
    go get "sigs.k8s.io/kueue@$KUEUE_VERSION" >&2
    go mod tidy >&2
    pkg="sigs.k8s.io/kueue/pkg/version"
    GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $pkg.GitVersion=$KUEUE_VERSION" \
      -o "$BIN_DIR/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue >&2
    src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
    rm -rf "$BIN_DIR/crds.tmp" && mkdir -p "$BIN_DIR/crds.tmp"
    cp "$src"/config/components/crd/bases/*.yaml "$BIN_DIR/crds.tmp/"
    chmod -R u+w "$BIN_DIR/crds.tmp"
  )
  rm -rf "$BIN_DIR/crds" && mv "$BIN_DIR/crds.tmp" "$BIN_DIR/crds"
  mv "$BIN_DIR/kueue.tmp" "$BIN_DIR/kueue"
  echo "kueue: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN_DIR"
