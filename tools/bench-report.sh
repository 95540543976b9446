#!/usr/bin/env bash
# Regenerates docs/PERFORMANCE.md: `tessera bench` on 1 and 2 threads (hand-written schedules,
# or the best records of a tuning database), beside the strongest baselines, with the
# machine's measured FMA peak and copy bandwidth, and the roofline plot roofline.svg beside
# it. Run it on a quiet machine: nothing else running, no builds.
#
#   bash tools/bench-report.sh [--db FILE] [--reps N] [-o FILE]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/docs/PERFORMANCE.md
args=()
while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift ;;
    --db | --reps) args+=("$1" "$2"); shift ;;
    -h | --help) sed -n '2,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "bench-report.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
cli=$root/build/tessera
[ -x "$cli" ] || { cmake -S "$root" -B "$root/build" >/dev/null && cmake --build "$root/build" -j "$(nproc)" --target tessera_cli >/dev/null; }
"$cli" bench --threads 1,2 "${args[@]}" --report "$out" --roofline "$(dirname "$out")/roofline.svg"
