#!/usr/bin/env bash
# Prepares, once, everything `make test` needs, side by side where that helps a small machine: what comes
# from Debian's packages (the C compiler, the frameworks, Prometheus, the runner's root filesystem: mostly
# downloads and unpacking, one after the other since apt runs one at a time) beside what Go builds (the
# control plane, Helm, versitygw, Kueue: CPU). The real node's parts (hack/node.sh: Debian's packages,
# then Go builds) follow the packages. Each part is the hack script the tests call anyway, which returns at
# once when its part is cached. Prints what each part took.
#
#   hack/prepare.sh             everything
#   hack/prepare.sh packages    Debian's parts only (.ci/run starts them beside make verify)
set -euo pipefail
cd "$(dirname "$0")/.."

part() {
  local start
  start=$(date +%s)
  "$@" >/dev/null || return
  echo "prepare: $* ready in $(($(date +%s) - start))s" >&2
}

# packages runs the parts that install Debian's packages, one after the other. The runner's root filesystem
# and the real node's parts need root, as make test-cluster does.
packages() {
  part hack/cc.sh
  part hack/frameworks.sh
  part hack/python.sh
  part hack/prometheus.sh
  if [ "$(id -u)" = 0 ]; then
    part hack/rootfs.sh
    part hack/node.sh
  fi
}

if [ "${1:-}" = packages ]; then
  packages
  exit 0
fi
set -m # the packages in a process group of their own: a stop ends apt-get too, `kill $!` would not
packages &
debs=$!
set +m
trap 'kill -- -"$debs" 2>/dev/null || true' EXIT
# A Go part that fails lets apt finish (one killed mid-install leaves dpkg to repair), then fails.
{ part hack/testbin.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubectl && part hack/helm.sh &&
  part hack/objstore.sh && part hack/kueue.sh; } || { rc=$?; wait "$debs" || true; exit "$rc"; }
wait "$debs"
trap - EXIT
