#!/usr/bin/env bash
# Regenerate the Python messages of protocol/v1/surreal.proto (no gRPC stubs: client.py and
# server.py bind the methods from the descriptor).
#
#   scripts/gen_protos.sh [OUT_DIR]     (default: protocol/v1, i.e. in place)
#   PYTHON=/path/to/python scripts/gen_protos.sh   (needs grpcio-tools)
#
# The proto is compiled as "surreal/v1/surreal.proto" (its path mirrors its package, so the
# descriptor name is the canonical one), then the stubs' imports are rewritten from
# `surreal.v1` to the installed package `surreal.protocol.v1` (imports and module names).
# tests/protocol/test_stubs.py runs this into a temp dir and fails if the committed stubs differ.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/protocol/v1}"
python="${PYTHON:-python3}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/surreal/v1" "$work/gen" "$out"
cp "$repo/protocol/v1/surreal.proto" "$work/src/surreal/v1/surreal.proto"

"$python" -m grpc_tools.protoc -I "$work/src" \
    --python_out="$work/gen" --pyi_out="$work/gen" \
    surreal/v1/surreal.proto

for f in surreal_pb2.py surreal_pb2.pyi; do
    sed -e 's/^from surreal\.v1 import /from surreal.protocol.v1 import /' \
        -e "s/'surreal\.v1\.surreal_pb2'/'surreal.protocol.v1.surreal_pb2'/" \
        "$work/gen/surreal/v1/$f" > "$work/$f"
done
# The .pyi is for mypy; it is protoc's code, not ours, so ruff is told to skip it.
{ printf '# ruff: noqa\n'; cat "$work/surreal_pb2.pyi"; } > "$work/surreal_pb2.pyi.tmp"
mv "$work/surreal_pb2.pyi.tmp" "$work/surreal_pb2.pyi"
cp "$work/surreal_pb2.py" "$work/surreal_pb2.pyi" "$out/"
