#!/usr/bin/env bash
# The main job on a default example, from a new Debian machine: installs dependencies, builds
# Tessera, tunes the transformer MLP gate y = silu(x W1) * (x W3) into an on-disk SQLite
# database (./tessera.db), shows the best record, and generates a standalone C kernel from it
# (./generated/mlp_gate.c and .h).
#
#   bash tools/demo.sh [TRIALS]        (default 64 trials, about a minute on 2 cores)
#
# Rerunning continues in the same database; `sqlite3 tessera.db` reads it too.
#
# The "x oneDNN" / "x OpenBLAS" ratio the tuner prints is to the strongest baseline on this
# machine, measured like `tessera bench` does (tools/baselines.c): OpenBLAS with the kernels that
# fit the CPU (the tuner re-runs itself with OPENBLAS_CORETYPE set when OpenBLAS picked generic
# ones, and says so) and oneDNN's matmul when libdnnl is installed; medians of alternating runs
# on the tuning target's threads. The line "beside the baselines at the end" times the best
# schedule and the baselines alternating in one process: that is the ratio to quote (on a quiet
# machine; a busy one is reported as such).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
trials=${1:-64}
shape=m=256,n=1024,k=512
workload="mlp_gate;k=512,m=256,n=1024;f32"
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== tessera tune mlp_gate --shape $shape --trials $trials --db tessera.db"
./build/tessera tune mlp_gate --shape "$shape" --trials "$trials" --db tessera.db
echo
echo "== tessera db best --workload '$workload' --db tessera.db --top 3"
./build/tessera db best --workload "$workload" --db tessera.db --top 3
echo
echo "== tessera gen mlp_gate --shape $shape --db tessera.db -o generated"
./build/tessera gen mlp_gate --shape "$shape" --db tessera.db -o generated
