#!/bin/sh
# The ONNX peer check: models built with the PyPI `onnx` package and run by `onnxruntime` in a
# venv under the build directory, against Tessera's import + compiled run (peer_check.c).
#
#   tests/onnx_peer/run.sh BUILD_DIR PEER_CHECK_EXE
#
# Creates BUILD_DIR/onnx_peer_venv when it is missing (pip needs the network once; later runs
# reuse the venv offline). When the venv cannot be made, prints why and exits 77 (CTest's skip).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
check=$2
venv=$build/onnx_peer_venv
py=$venv/bin/python
if ! "$py" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q onnx onnxruntime numpy; } \
        >"$build/onnx_peer_pip.log" 2>&1; then
        echo "onnx peer check skipped: could not create the venv with onnx and onnxruntime" \
            "(no network?); see $build/onnx_peer_pip.log"
        exit 77
    fi
fi
out=$build/onnx_peer_models
rm -rf "$out"
"$py" "$here/make_models.py" "$out" "${TESSERA_TEST_SEED:-12}"
"$check" "$out"
