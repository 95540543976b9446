#!/usr/bin/env bash
# Tunes fp32 matmul 1024x1024x1024 and draws its tuning curve (trial vs best GFLOP/s so far,
# every measured candidate, and OpenBLAS measured on the same machine in the same run) into
# docs/tuning_curve.svg. The SVG is written by `tessera tune --curve` itself (no plotting
# tool needed).
#
#   bash tools/tuning-curve.sh                 # 400 trials, evolutionary search, seed 1
#   bash tools/tuning-curve.sh 200 random      # trials, strategy
#   BUILD=build-tune bash tools/tuning-curve.sh
#
# The database goes to a temporary directory (a fresh job every time, so the curve starts at
# trial 1); set DB=FILE to keep it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD:-build}
trials=${1:-400}
strategy=${2:-evolutionary}
out=${OUT:-docs/tuning_curve.svg}

if [ ! -x "$build/tessera" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j "$(nproc)" --target tessera_cli
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
db=${DB:-$tmp/curve.db}

"$build/tessera" tune matmul --shape m=1024,n=1024,k=1024 --trials "$trials" \
    --strategy "$strategy" --seed 1 --new-job --db "$db" --curve "$out"
echo "tuning-curve: wrote $out"
