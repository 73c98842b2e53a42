#!/usr/bin/env bash
# Check the import-linter contracts in pyproject.toml.
# The layer folders (protocol/, orchestrator/, ...) are installed as subpackages of `surreal`, but
# import-linter reads packages from the file system, so assemble the installed layout in a temporary
# folder (symlinks, nothing copied) and point it there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/surreal"
for f in "$root"/surreal/*; do ln -s "$f" "$stage/surreal/"; done
for layer in protocol orchestrator provisioner algorithms; do ln -s "$root/$layer" "$stage/surreal/$layer"; done
cd "$stage"
PYTHONPATH="$stage" "${LINT_IMPORTS:-lint-imports}" --config "$root/pyproject.toml" --no-cache
