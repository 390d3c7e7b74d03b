#!/usr/bin/env bash
# Installs the real frameworks that `make test-frameworks` runs (Debian 12 packages, pinned: CPU builds of
# PyTorch, torchvision and XGBoost; Open MPI and mpi4py; tqdm, whose bars the supervisor reads; OpenSSH,
# which gets security updates within Debian 12, at whatever 9.2p1 revision the mirror has) when they are not installed yet, and prints the
# python3 that has them.
# Needs root (or sudo) for apt-get; the packages stay installed, so a second run is instant.
set -euo pipefail

packages=(python3-torch=1.13.1+dfsg-4 python3-torchvision=0.14.1-2 python3-xgboost=1.7.4-1
	openmpi-bin=4.1.4-3+b1 python3-mpi4py=3.1.4-2+b2 python3-tqdm=4.64.1-1)
unpinned=(openssh-server openssh-client)

missing=()
for p in "${packages[@]}"; do
	name=${p%%=*} version=${p#*=}
	# Status too: a removed package whose configuration files are kept still reports its version.
	if [ "$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)" != "install ok installed $version" ]; then
		missing+=("$p")
	fi
done
for p in "${unpinned[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "frameworks.sh: installing ${missing[*]} (a few minutes, once)" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
/usr/bin/python3 -c 'import torch, torchvision, xgboost, mpi4py, tqdm' >&2
command -v torchrun mpirun /usr/sbin/sshd ssh >/dev/null
ssh -V 2>&1 | grep -q "OpenSSH_9" >&2
echo /usr/bin/python3
