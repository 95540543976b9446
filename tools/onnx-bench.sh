#!/usr/bin/env bash
# Tessera against onnxruntime on ONNX models (tools/onnx_bench.py): BERT-style encoders (hidden
# 384 and 768, 6 and 12 layers, sequence 128, batch 1 and 8) and a small CNN, built with the
# PyPI `onnx` package; `tessera run --bench` (after `tessera tune` into a database per model
# with --tune N) and onnxruntime at intra-op threads 1 and 2 in the same run; prints the
# medians, the ratio and the worst output difference.
#
#   tools/onnx-bench.sh [--toy] [--tune TRIALS] [--threads 1,2] [--runs N] [--only NAME]
#                       [--json FILE] [--build DIR]
#
# --toy runs a 2-layer hidden-64 encoder and the CNN at batch 1 only (a minute; proves the
# script works). The Python packages live in the venv the ONNX peer test makes under the build
# directory (BUILD/onnx_peer_venv, tests/onnx_peer/run.sh); it is created here when missing
# (pip needs the network once). Models, inputs, outputs and databases go to BUILD/onnx_bench.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
    esac
done
if [ ! -x "$build/tessera" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j"$(nproc)" --target tessera_cli >/dev/null
fi
venv=$build/onnx_peer_venv
py=$venv/bin/python
if ! "$py" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
    echo "onnx-bench: creating $venv (pip install onnx onnxruntime numpy)" >&2
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q onnx onnxruntime numpy; } \
        >"$build/onnx_peer_pip.log" 2>&1; then
        echo "onnx-bench: could not create the venv (no network?); see $build/onnx_peer_pip.log" >&2
        exit 1
    fi
fi
exec "$py" "$root/tools/onnx_bench.py" --tessera "$build/tessera" --out "$build/onnx_bench" \
    ${args[@]+"${args[@]}"}
