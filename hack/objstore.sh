#!/usr/bin/env bash
# Builds the S3-compatible server the checkpoint tests run against (versitygw, Apache-2.0) from its pinned
# Go module, once, into a cache directory outside the repository, and prints the binary's path.
# (GCS is tested against fake-gcs-server, which the tests run in-process from its Go module.)
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/objstore/versitygw-$VERSITYGW_VERSION"

if [ ! -x "$BIN_DIR/versitygw" ]; then
  echo "objstore: building versitygw $VERSITYGW_VERSION into $BIN_DIR (first time only, about 2 minutes)" >&2
  start=$(date +%s)
  mkdir -p "$BIN_DIR"
  GOBIN="$BIN_DIR" GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
  echo "objstore: built versitygw in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN_DIR/versitygw"
