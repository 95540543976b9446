#!/bin/sh
# The ONNX peer check: models built with the PyPI `onnx` package and run by `onnxruntime` in a
# venv under the build directory, against Tessera's import + compiled run (peer_check.c).
#
#   tests/onnx_peer/run.sh BUILD_DIR PEER_CHECK_EXE
#
# Creates BUILD_DIR/onnx_peer_venv when it is missing or lacks the packages (pip needs PyPI
# once; later runs reuse the venv offline). When the venv cannot be made, prints why and exits
# 77 (CTest's skip). $TESSERA_TEST_SEED picks other random models.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
check=$2
venv=$build/onnx_peer_venv
py=$venv/bin/python
log=$build/onnx_peer_pip.log
if ! "$py" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
    echo "onnx peer check: creating $venv (pip install onnx onnxruntime numpy; log in $log)"
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        echo "onnx peer check skipped: python3 with the venv module is needed" \
            "(apt-get install python3-venv; tools/install-deps.sh does)"
        exit 77
    fi
    if ! { python3 -m venv "$venv" &&
        "$venv/bin/pip" install -q --disable-pip-version-check --timeout 60 --retries 2 \
            onnx onnxruntime numpy; } >"$log" 2>&1; then
        echo "onnx peer check skipped: could not create the venv with onnx and onnxruntime" \
            "(no network?); see $log:"
        tail -5 "$log" || true
        exit 77
    fi
fi
out=$build/onnx_peer_models
rm -rf "$out"
"$py" "$here/make_models.py" "$out" "${TESSERA_TEST_SEED:-12}"
"$check" "$out"
