#!/usr/bin/env bash
# Builds the peers the benchmark runs beside the operator, each from its pinned Go module in a throwaway module
# of its own (their k8s.io versions never mix with ours or each other's), once, into a cache directory outside
# the repository, and copies their CRDs and Trainer's torch runtime beside them. Prints the directory:
#   jobset            JobSet's manager (the module's root package)          crds/jobset/*.yaml
#   trainer           Kubeflow Trainer's trainer-controller-manager         crds/trainer/*.yaml, runtimes/torch_distributed.yaml
#   training-operator Kubeflow Training Operator v1                         crds/training-operator/kubeflow.org_pytorchjobs.yaml
# No image or release binary can be downloaded on the project's machines; the Go modules can.
set -euo pipefail

JOBSET_VERSION="${JOBSET_VERSION:-v0.12.0}"
TRAINER_VERSION="${TRAINER_VERSION:-v2.3.0}"
TRAINING_OPERATOR_VERSION="${TRAINING_OPERATOR_VERSION:-v1.9.3}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/peers/jobset-$JOBSET_VERSION-trainer-$TRAINER_VERSION-training-operator-$TRAINING_OPERATOR_VERSION"

# build NAME MODULE VERSION PACKAGE CRD_DIR [CRD_GLOB]: the binary NAME and crds/NAME from the module's CRD_DIR.
build() {
  local name=$1 module=$2 version=$3 pkg=$4 crds=$5 glob=${6:-*.yaml}
  [ -x "$BIN_DIR/$name" ] && [ -d "$BIN_DIR/crds/$name" ] && return 0
  local work="$CACHE_ROOT/build/$name-$version" start
  start=$(date +%s)
  echo "peers: building $pkg $version into $BIN_DIR (first time only, 1-4 min on 2 cores)" >&2
  mkdir -p "$BIN_DIR" "$work"
  (
    cd "$work"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >tools.go
    [ -f go.mod ] || go mod init "build/$name" >/dev/null 2>&1
    go get "$module@$version" >&2
    go mod tidy >&2
    GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/$name.tmp" "$pkg" >&2
    src=$(go list -m -f '{{.Dir}}' "$module")
    rm -rf "$BIN_DIR/crds/$name.tmp" && mkdir -p "$BIN_DIR/crds/$name.tmp"
    # shellcheck disable=SC2086
    cp "$src/$crds"/$glob "$BIN_DIR/crds/$name.tmp/"
    if [ "$name" = trainer ]; then
      mkdir -p "$BIN_DIR/runtimes" && cp "$src/manifests/base/runtimes/torch_distributed.yaml" "$BIN_DIR/runtimes/"
    fi
    chmod -R u+w "$BIN_DIR/crds/$name.tmp" "$BIN_DIR/runtimes" 2>/dev/null || true
  )
  rm -rf "$BIN_DIR/crds/$name" && mv "$BIN_DIR/crds/$name.tmp" "$BIN_DIR/crds/$name"
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  echo "peers: $name built in $(( $(date +%s) - start ))s" >&2
}

build jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset config/components/crd/bases
build trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" \
  github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager manifests/base/crds 'trainer.kubeflow.org_*.yaml'
build training-operator github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION" \
  github.com/kubeflow/training-operator/cmd/training-operator.v1 manifests/base/crds 'kubeflow.org_pytorchjobs.yaml'
echo "$BIN_DIR"
