#!/usr/bin/env bash
# The main job on a model, from a new Debian machine, without the network beyond apt: installs
# dependencies, builds Tessera, and takes a small transformer encoder layer through the whole
# path. Everything it writes goes to ./demo/:
#
#   1. examples/onnx_model.c writes the model as ONNX          demo/encoder.onnx
#   2. tessera import   -> the graph of library operators       demo/encoder.graph (+ weights)
#   3. tessera fuse     -> the fusion plan: groups, why, memory
#   4. tessera tune     -> the fused groups tuned as one task list into an on-disk SQLite
#                          database, then the best few of each timed inside whole runs of
#                          the model (in-model selection)      demo/tessera.db
#   5. tessera run      -> compiled from the database, checked against the float64 reference
#                          of the unfused graph, outputs as .npy  demo/out/y.npy
#   6. tessera gen      -> the fused kernels as standalone C plus a runner; the runner is
#                          built with plain cc, run, and its output compared  demo/kernels/
#
#   bash tools/demo.sh [TRIALS]        (default 64 trials in batches of 8: one batch per fused
#                                       group; about 2 minutes on 2 idle cores after the
#                                       build)
#
# Rerunning continues the tuning job in the same database; `sqlite3 demo/tessera.db` reads it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
trials=${1:-64}
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target tessera_cli example_onnx_model >/dev/null
tessera=$root/build/tessera
mkdir -p demo
cd demo
step() { printf '\n== %s\n' "$*"; }

step "example_onnx_model -o encoder.onnx --seq 32 --hidden 64"
"$root/build/example_onnx_model" -o encoder.onnx --seq 32 --hidden 64

step "tessera import encoder.onnx -o encoder.graph"
"$tessera" import encoder.onnx -o encoder.graph

step "tessera fuse --optimize encoder.graph   (the plan; tessera run/tune/gen fuse the same way)"
"$tessera" fuse --optimize encoder.graph | sed -n '/^fusion plan/,/^target/p;/^group/p'

step "tessera tune encoder.onnx --trials $trials --batch 8 --db tessera.db"
# Progress on stderr; the report (every task's best schedule as a trace and as C) in tune.log.
"$tessera" tune encoder.onnx --trials "$trials" --batch 8 --db tessera.db >tune.log
grep -E '^(graph_|  best|best:|in-model selection)' tune.log | head -40 || true
echo "(the full report with the best schedules: demo/tune.log)"

step "tessera run encoder.onnx --db tessera.db --check --output-dir out"
"$tessera" run encoder.onnx --db tessera.db --check --output-dir out

step "tessera gen encoder.onnx --db tessera.db -o kernels"
"$tessera" gen encoder.onnx --db tessera.db -o kernels
make -s -C kernels
./kernels/runner x=out/x.npy -o kernels/out
# The runner's output beside tessera run's (same input: the random x that run wrote).
npy_floats() { # the f32 elements of a .npy file written by Tessera, one per line
    local hl
    hl=$(od -A n -t u2 -j 8 -N 2 "$1" | tr -d ' ')
    od -A n -v -t f4 -j $((10 + hl)) "$1" | tr -s ' ' '\n' | grep -v '^$'
}
paste <(npy_floats out/y.npy) <(npy_floats kernels/out/y.npy) | awk '
    { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; if (m < 1) m = 1;
      if (d / m > w) w = d / m }
    END { printf "generated runner vs tessera run: %d values, worst relative difference %.1e\n",
                 NR, w; exit !(NR > 0 && w <= 1e-5) }'
echo
echo "done: demo/encoder.onnx -> demo/encoder.graph -> demo/tessera.db -> demo/out/ -> demo/kernels/"
