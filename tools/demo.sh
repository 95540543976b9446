#!/usr/bin/env bash
# The main job on a default example: installs dependencies, builds Tessera, then builds the
# fused transformer MLP gate y = silu(x W1) * (x W3) with a hand schedule, checks it against
# the reference interpreter and prints the generated C.
#
#   bash tools/demo.sh [M K N]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
./build/example_mlp_gate "$@"
