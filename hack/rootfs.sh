#!/usr/bin/env bash
# Builds the Debian 12 root filesystem of the images that run Python on the local stack's real nodes (the
# default runner image, what Dockerfile.runner builds, and the MPI examples image; package internal/local/images):
# `debootstrap --variant=minbase` plus Debian's CPU builds of PyTorch and torchvision, tqdm, Open MPI with mpi4py
# and OpenSSH (the MPI workers' SSH server), pinned as hack/frameworks.sh pins them. It is written once, as
# one gzipped tarball (a layer, compressed once here rather than by every image built on it), into the cache beside the control plane, named by a digest of this script; the
# downloaded packages are kept there too. Prints the tarball's path.
# Needs root (debootstrap chroots and makes device nodes); installs debootstrap itself when missing.
set -euo pipefail

suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
debootstrap_version=1.0.128+nmu2+deb12u2
pinned=(python3-torch=1.13.1+dfsg-4 python3-torchvision=0.14.1-2 openmpi-bin=4.1.4-3+b1 python3-mpi4py=3.1.4-2+b2 python3-tqdm=4.64.1-1)
unpinned=(python3-numpy openssh-server openssh-client ca-certificates)

cache=${TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainingjob-operator}/rootfs
key=$(sha256sum "$0" | cut -c1-16)
out=$cache/debian-$suite-$key.tar.gz
if [ -f "$out" ]; then
	echo "$out"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "rootfs.sh: debootstrap needs root" >&2; exit 1; }
if [ "$(dpkg-query -W -f='${Status} ${Version}' debootstrap 2>/dev/null || true)" != "install ok installed $debootstrap_version" ]; then
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "debootstrap=$debootstrap_version" >&2
fi

mkdir -p "$cache/debs"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
names=()
for p in "${pinned[@]}"; do names+=("${p%%=*}"); done
echo "rootfs.sh: debootstrap $suite with ${names[*]} ${unpinned[*]} (several minutes, once)" >&2
include=$(IFS=,; echo "${names[*]},${unpinned[*]}")
debootstrap --variant=minbase --include="$include" --cache-dir="$cache/debs" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
for p in "${pinned[@]}"; do
	got=$(chroot "$root" dpkg-query -W -f='${Version}' "${p%%=*}")
	[ "$got" = "${p#*=}" ] || { echo "rootfs.sh: ${p%%=*} is $got, want ${p#*=}" >&2; exit 1; }
done
# torch 1.13 on Python 3.11: torchrun dies before starting anything (`AttributeError: 'NoneType' object has
# no attribute 'get'` in to_map(redirects, ...)) because Std.from_str finds a value by iterating the IntFlag
# Std, and since 3.11 iterating a Flag yields only its single-bit members: "0" (the default of --redirects
# and --tee) and "3" parse to None. torch 2.0 fixed it (pytorch/pytorch#92319) with `s = Std(int(v))` and
# `if s in Std: return s`; the same lines here, replacing exactly the old ones of 1.13.1+dfsg-4 (pinned
# above) or failing. The stale bytecode goes (Python compiles the source again).
chroot "$root" python3 - <<'EOF'
import pathlib, sys
p = pathlib.Path("/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py")
old = """            v = int(v)
            for s in Std:
                if s == v:
                    return s
"""
new = """            s = Std(int(v))
            if s in Std:
                return s
"""
text = p.read_text()
if text.count(old) != 1:
    sys.exit(f"rootfs.sh: {p}: the lines of torch's Std.from_str to patch are not there once")
p.write_text(text.replace(old, new))
for pyc in p.parent.glob("__pycache__/api.*.pyc"):
    pyc.unlink()
from torch.distributed.elastic.multiprocessing.api import Std
assert [Std.from_str(v) for v in "0123"] == [Std.NONE, Std.OUT, Std.ERR, Std.ALL], "rootfs.sh: torch's Std.from_str still wrong"
EOF
chroot "$root" python3 -c 'import torch, torchvision, mpi4py' >&2
# What a container runtime provides (/dev, /proc, /sys, resolv.conf, hosts) and what no image needs.
rm -rf "$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/* "$root"/tmp/*
: >"$root/etc/resolv.conf"
tar --numeric-owner --sort=name --mtime=@0 --xattrs -C "$root" -c . | gzip -1 -n >"$work/rootfs.tar.gz"
mv "$work/rootfs.tar.gz" "$out"
# One root filesystem is kept: an older one (another digest of this script) goes.
find "$cache" -maxdepth 1 -name "debian-$suite-*.tar.gz" ! -path "$out" -delete
echo "$out"
