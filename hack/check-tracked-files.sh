#!/usr/bin/env bash
# Fails when a file tracked by git is a compiled binary (ELF, Mach-O, PE, or an executable without a
# "#!" line) or larger than 1 MB, unless it is listed in LARGE_FILES below. Run by make verify, so a
# `go build` output or a large file never lands unnoticed.
#
#   hack/check-tracked-files.sh [DIR]    DIR: the repository to check (default: the current one)
set -euo pipefail

MAX_BYTES=$((1024 * 1024))
# Generated files that must be larger than MAX_BYTES, by path. None today.
LARGE_FILES=()

cd "${1:-.}"
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$MAX_BYTES" ] && [[ ! " ${LARGE_FILES[*]-} " == *" $f "* ]]; then
    echo "tracked file over 1 MB: $f ($size bytes); build outputs go to bin/, large generated files are listed in $0" >&2
    bad=1
  fi
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
      echo "tracked binary: $f (an executable's header); build outputs go to bin/" >&2; bad=1; continue ;;
  esac
  if [ -x "$f" ] && [ "$(head -c 2 "$f")" != "#!" ]; then
    echo "tracked executable without a #! line: $f; build outputs go to bin/" >&2
    bad=1
  fi
done < <(git ls-files -z)
exit "$bad"
