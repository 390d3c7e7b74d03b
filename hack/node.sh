#!/usr/bin/env bash
# Installs and builds what a real node of the local stack needs, pinned, once, and prints the directory of
# the binaries it built (kubelet, kube-proxy, coredns; containerd, runc and the CNI plugins come from
# Debian's packages, found on the PATH and in /usr/lib/cni):
#   - containerd, runc, containernetworking-plugins, iptables, conntrack: Debian's packages, pinned;
#   - kubelet and kube-proxy: built from the pinned k8s.io/kubernetes module by hack/testbin.sh;
#   - CoreDNS: built from its pinned Go module with the plugins a cluster's DNS needs (COREDNS_PLUGINS),
#     into the same cache.
# Nothing is downloaded but Debian packages and Go modules.
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
COREDNS_PLUGINS=(bind cache errors forward health kubernetes log loop ready)
# Debian 12 (bookworm) versions; apt-get installs exactly these.
DEB_PACKAGES=(
  "containerd=1.6.20~ds1-1+deb12u3"
  "runc=1.1.5+ds1-1+deb12u1"
  "containernetworking-plugins=1.1.1+ds1-3+b5"
)
DEB_TOOLS=(iptables conntrack iproute2)
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
HERE="$(cd "$(dirname "$0")" && pwd)"

log() { echo "node: $*" >&2; }

install_debs() {
  local missing=()
  for p in "${DEB_PACKAGES[@]}"; do
    # Status too: a removed package whose configuration files are kept still reports its version.
    [ "$(dpkg-query -W -f='${Status} ${Version}' "${p%%=*}" 2>/dev/null || true)" = "install ok installed ${p#*=}" ] || missing+=("$p")
  done
  for p in "${DEB_TOOLS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  # The package starts containerd with its own configuration; the local stack runs its own instances.
  systemctl disable --now containerd >/dev/null 2>&1 || true
}

build_coredns() {
  local bin="$1/coredns" dir="$CACHE_ROOT/build/coredns-$COREDNS_VERSION" stamp="$COREDNS_VERSION ${COREDNS_PLUGINS[*]}"
  [ -x "$bin" ] && [ "$(cat "$bin.stamp" 2>/dev/null)" = "$stamp" ] && return
  log "building CoreDNS $COREDNS_VERSION (${COREDNS_PLUGINS[*]}) into $1 (first time only, a few minutes)"
  mkdir -p "$dir"
  {
    echo "// CoreDNS with the plugins the local stack's cluster DNS uses (hack/node.sh writes this file)."
    echo "package main"
    echo
    echo "import ("
    for p in "${COREDNS_PLUGINS[@]}"; do echo "	_ \"github.com/coredns/coredns/plugin/$p\""; done
    echo "	\"github.com/coredns/coredns/coremain\""
    echo ")"
    echo
    echo "func main() { coremain.Run() }"
  } >"$dir/main.go"
  (
    cd "$dir"
    [ -f go.mod ] || go mod init testbin/coredns >/dev/null 2>&1
    go get "github.com/coredns/coredns@$COREDNS_VERSION" >&2
    go mod tidy >&2
    GOGC=off GOMEMLIMIT=2GiB CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" . >&2
  )
  mv "$bin.tmp" "$bin"
  echo "$stamp" >"$bin.stamp"
}

install_debs
dir=$("$HERE/testbin.sh" kubelet kube-proxy)
build_coredns "$dir"
echo "$dir"
