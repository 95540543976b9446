#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build and test Tessera.
#
#   bash tools/install-deps.sh
#
# Idempotent and quick: when every package is already installed it does not touch apt at all.
# Runs apt-get as root, through sudo when started by another user and sudo exists.
set -euo pipefail

packages=(
    build-essential        # gcc, make, libc headers; gcc brings the ASan/UBSan runtimes
    cmake
    pkg-config
    libopenblas-openmp-dev # reference BLAS for tests and benchmarks, OpenMP build: one threading runtime
    libdnnl-dev            # oneDNN, the second baseline of `tessera bench`/`tune` (dlopen'ed; optional at run time)
    libsqlite3-dev         # the tuning database
    sqlite3                # the sqlite3 shell, for inspecting tuning databases
    libjansson-dev         # JSON reading and writing (export/import, task lists, --json)
    librsvg2-bin           # rsvg-convert, to look at roofline plots as PNG (optional)
    libcmocka-dev          # the unit test framework
    clang                  # the libFuzzer target is built with clang
    clang-format           # tools/format.sh --check, a CI step
    libclang-rt-dev        # clang's runtimes (libFuzzer, sanitizers); only recommended by clang
    libomp-dev             # clang's OpenMP runtime: a clang build of the library needs -fopenmp
    libonnx-dev            # onnx.proto, from which the build generates the ONNX importer's C
    protobuf-c-compiler    # protoc-c, which generates it
    libprotobuf-c-dev      # the protobuf-c runtime the importer links
    python3-venv           # the ONNX peer check (tests/onnx_peer) makes a venv for onnx + onnxruntime
    slurm-wlm              # tests/cluster/slurm_test.sh runs a private single-node Slurm (job array + merge)
    munge                  # Slurm's authentication daemon, started by that test with its own key
    python3-yaml           # tests/cluster/k8s_manifest_test.sh reads the Kubernetes manifest
)

missing=()
for p in "${packages[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages already installed"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
