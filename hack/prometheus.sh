#!/usr/bin/env bash
# Unpacks Debian 12's Prometheus (pinned; with promtool) into a cache directory outside the repository,
# once, and prints the directory holding the prometheus and promtool binaries. The package is downloaded
# and unpacked, not installed: nothing runs as a service, and only apt-get update needs root.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-2.42.0+ds-5+deb12u1}"
CACHE_ROOT="${TESTBIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainingjob-operator}"
DIR="$CACHE_ROOT/prometheus/prometheus-${PROMETHEUS_VERSION//+/_}"

if [ ! -x "$DIR/bin/prometheus" ] || [ ! -x "$DIR/bin/promtool" ]; then
  echo "prometheus.sh: unpacking Debian's prometheus $PROMETHEUS_VERSION into $DIR (once)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if ! (cd "$work" && apt-get download -qq "prometheus=$PROMETHEUS_VERSION" >&2); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq >&2
    (cd "$work" && apt-get download -qq "prometheus=$PROMETHEUS_VERSION" >&2)
  fi
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  mkdir -p "$DIR/bin"
  cp "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$DIR/bin/"
fi
"$DIR/bin/promtool" --version >/dev/null
echo "$DIR/bin"
