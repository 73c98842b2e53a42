#!/usr/bin/env bash
# Run a command against the installed package layout: `bash scripts/staged.sh CMD [ARGS...]`.
# The layer folders (protocol/, orchestrator/, ...) are installed as subpackages of `surreal`, but
# import-linter and mypy read packages from the file system, so assemble the installed layout in a
# temporary folder (symlinks, nothing copied), put it first on PYTHONPATH and MYPYPATH, run CMD there.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/surreal"
for f in "$root"/surreal/*; do ln -s "$f" "$stage/surreal/"; done
for layer in protocol orchestrator provisioner algorithms runtime; do ln -s "$root/$layer" "$stage/surreal/$layer"; done
cd "$stage"
PYTHONPATH="$stage" MYPYPATH="$stage" "$@"
