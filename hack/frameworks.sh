#!/usr/bin/env bash
# Installs the real frameworks that `make test-frameworks` runs (Debian 12 packages, pinned: CPU builds of
# PyTorch and XGBoost) when they are not installed yet, and prints the python3 that has them.
# Needs root (or sudo) for apt-get; the packages stay installed, so a second run is instant.
set -euo pipefail

packages=(python3-torch=1.13.1+dfsg-4 python3-torchvision=0.14.1-2 python3-xgboost=1.7.4-1)

missing=()
for p in "${packages[@]}"; do
	name=${p%%=*} version=${p#*=}
	if [ "$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)" != "$version" ]; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "frameworks.sh: installing ${missing[*]} (a few minutes, once)" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
/usr/bin/python3 -c 'import torch, torchvision, xgboost' >&2
command -v torchrun >/dev/null
echo /usr/bin/python3
