#!/usr/bin/env bash
# Installs what the Python SDK's tests (sdk/python) run with, Debian 12's packages, pinned: the official
# Kubernetes client, Optuna (with SQLAlchemy for its SQLite and PostgreSQL storages), tqdm, PyYAML, pytest,
# psycopg2, and python3-venv to check `pip install ./sdk/python`; when they are not installed yet. Prints the
# python3 that has them. Needs root (or sudo) for apt-get; a second run is instant.
set -euo pipefail

packages=(python3-kubernetes=22.6.0-2 python3-optuna=3.1.0-4 python3-sqlalchemy=1.4.46+ds1-1 python3-tqdm=4.64.1-1
	python3-yaml=6.0-3+b2 python3-pytest=7.2.1-2 python3-psycopg2=2.9.5-1+b1 python3-venv=3.11.2-1+b1 python3-pip=23.0.1+dfsg-1)

missing=()
for p in "${packages[@]}"; do
	name=${p%%=*} version=${p#*=}
	if [ "$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)" != "install ok installed $version" ]; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "python.sh: installing ${missing[*]} (a minute, once)" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
/usr/bin/python3 -c 'import kubernetes, optuna, tqdm, yaml, pytest, psycopg2, sqlalchemy' >&2
echo /usr/bin/python3
