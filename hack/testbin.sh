#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests need (etcd, kube-apiserver, kubectl,
# kube-controller-manager, kube-scheduler) from pinned Go modules, once, into a cache
# directory outside the repository. Prints the directory. Reuses binaries already built.
#
#   hack/testbin.sh [component...]    default: etcd kube-apiserver kube-controller-manager
#
# Nothing is downloaded but Go modules: setup-envtest's prebuilt binaries cannot be fetched here.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
BIN_DIR="$CACHE_ROOT/testbin/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
WORK_DIR="$CACHE_ROOT/build"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube-apiserver kube-controller-manager)

log() { echo "testbin: $*" >&2; }

build_etcd() {
  local dir="$WORK_DIR/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  cat >"$dir/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (
    cd "$dir"
    [ -f go.mod ] || go mod init testbin/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
    go mod tidy >&2
    GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go build -trimpath -o "$BIN_DIR/etcd.tmp" . >&2
  )
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
}

# k8s_module prepares a module that requires k8s.io/kubernetes and replaces each of its
# staging modules (./staging/src/k8s.io/<name>) with the published k8s.io/<name> at the
# matching v0.X.Y version.
k8s_module() {
  local dir="$WORK_DIR/kubernetes-$K8S_VERSION"
  mkdir -p "$dir"
  if [ ! -f "$dir/.ready" ]; then
    (
      cd "$dir"
      rm -f go.mod go.sum
      go mod init testbin/kubernetes >/dev/null 2>&1
      local gomod
      gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
        awk '{print $1}' | sort -u | while read -r m; do
          go mod edit -replace "$m=$m@$STAGING_VERSION"
        done
      go mod edit -require "k8s.io/kubernetes@$K8S_VERSION"
      touch .ready
    )
  fi
  echo "$dir"
}

build_k8s() {
  local name="$1" dir
  dir=$(k8s_module)
  local pkg="k8s.io/component-base/version"
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  (
    cd "$dir"
    GOFLAGS=-mod=mod GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
      -o "$BIN_DIR/$name.tmp" "k8s.io/kubernetes/cmd/$name" >&2
  )
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
}

mkdir -p "$BIN_DIR" "$WORK_DIR"
for c in "${components[@]}"; do
  if [ -x "$BIN_DIR/$c" ]; then
    continue
  fi
  log "building $c into $BIN_DIR (first time only: kube-apiserver takes 5-15 min on 2 cores)"
  start=$SECONDS
  case "$c" in
    etcd) build_etcd ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet | kube-proxy) build_k8s "$c" ;;
    *) log "unknown component $c"; exit 2 ;;
  esac
  log "built $c in $((SECONDS - start))s"
done
echo "$BIN_DIR"
