#!/usr/bin/env bash
# The graph benchmarks: for each graph (default: graph/examples/encoder_block.graph and
# resnet_block.graph), tunes its fused groups for each thread count (`tessera tune --graph`
# with OMP_NUM_THREADS=T, so the records are for a T-core target), then runs
# `tessera bench --graph` (fused + tuned against node by node, 1 and 2 threads, medians).
# --trials is per fused group (the job's budget is that times the kernel count `tessera fuse`
# reports). Run it on a quiet machine. A database that already holds the records is reused;
# --trials 0 skips tuning.
#
# --optimize runs the graph passes first in both (the attention rewrite: the fused attention node
# against the unfused sgemm + softmax + sgemm chain).
#
#   bash tools/bench-graph.sh [--db FILE] [--trials N] [--threads LIST] [--reps N] [--json]
#                             [--optimize] [GRAPH...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
db=$root/build/bench-graph.db
trials=64
threads=1,2
bench=()
graphs=()
opt=()
while [ $# -gt 0 ]; do
    case $1 in
    --db) db=$2; shift ;;
    --trials) trials=$2; shift ;;
    --threads) threads=$2; shift ;;
    --reps) bench+=("$1" "$2"); shift ;;
    --json) bench+=("$1") ;;
    --optimize) opt=(--optimize) ;;
    -h | --help) sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "bench-graph.sh: unknown option '$1'" >&2; exit 2 ;;
    *) graphs+=("$1") ;;
    esac
    shift
done
[ ${#graphs[@]} -gt 0 ] || graphs=("$root/graph/examples/encoder_block.graph" "$root/graph/examples/resnet_block.graph")
cli=$root/build/tessera
[ -x "$cli" ] || { cmake -S "$root" -B "$root/build" >/dev/null && cmake --build "$root/build" -j "$(nproc)" --target tessera_cli >/dev/null; }
for g in "${graphs[@]}"; do
    if [ "$trials" -gt 0 ]; then
        kernels=$("$cli" fuse "$g" ${opt[@]+"${opt[@]}"} | sed -n 's/.* -> \([0-9][0-9]*\) kernels.*/\1/p' | head -1)
        budget=$((trials * ${kernels:-1}))
        for t in ${threads//,/ }; do
            echo "== tuning $g for $t thread(s): $budget trials ($trials x $kernels groups)" >&2
            OMP_NUM_THREADS=$t "$cli" tune --graph "$g" ${opt[@]+"${opt[@]}"} --db "$db" \
                --trials "$budget" >&2
        done
    fi
    "$cli" bench --graph "$g" ${opt[@]+"${opt[@]}"} --db "$db" --threads "$threads" \
        ${bench[@]+"${bench[@]}"}
done
