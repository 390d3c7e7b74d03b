#!/usr/bin/env bash
# Makes sure a C compiler is there for the process node's bind shim (internal/local/node/bindshim): installs
# Debian's gcc and libc headers when `cc` is missing (root or sudo), and prints the compiler's path.
set -euo pipefail
if ! command -v cc >/dev/null || ! printf '#include <dlfcn.h>\n' | cc -E -x c - >/dev/null 2>&1; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "cc.sh: installing gcc and libc6-dev for the process node's bind shim" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gcc libc6-dev >&2
fi
command -v cc
