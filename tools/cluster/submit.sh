#!/usr/bin/env bash
# Submits a tuning run to Slurm: a job array of N tasks (tools/cluster/tune-array.sbatch, one
# shard of the task list each) and the job that merges their databases once all succeeded
# (tools/cluster/merge.sbatch, --dependency=afterany:<array>; it merges only when every shard
# finished). docs/CLUSTER.md has the details.
#
#   tools/cluster/submit.sh TASKS.json N [DIR] [-- SBATCH-OPTIONS...]
#
# DIR (default: ./tessera-tune) receives the shard databases, the logs and merged.db; it must
# be visible from every node. SBATCH-OPTIONS go to both submissions (--partition=..., --time=...,
# --cpus-per-task=..., --constraint=...). TESSERA (the binary) and TESSERA_TUNE_ARGS (the
# budget, e.g. "--time 7h") travel with the jobs' environment; TESSERA_ARRAY_LIMIT=K runs at
# most K tasks at once (--array=0-(N-1)%K). Prints the two job ids.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

if [ $# -lt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    usage
    [ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && exit 0
    exit 2
fi
tasks=$1
n=$2
shift 2
dir=./tessera-tune
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    dir=$1
    shift
fi
[ $# -gt 0 ] && [ "$1" = -- ] && shift
extra=("$@")

if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
    echo "submit.sh: N must be a positive number of shards, not '$n'" >&2
    exit 2
fi
if [ ! -r "$tasks" ]; then
    echo "submit.sh: cannot read the task list '$tasks'" >&2
    exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tasks=$(cd "$(dirname "$tasks")" && pwd)/$(basename "$tasks")

range="0-$((n - 1))${TESSERA_ARRAY_LIMIT:+%$TESSERA_ARRAY_LIMIT}"
# --parsable prints "id" or "id;cluster".
array=$(sbatch --parsable --array="$range" --chdir="$dir" \
    --output="$dir/tessera-tune-%A_%a.log" "${extra[@]}" \
    "$here/tune-array.sbatch" "$tasks" "$dir")
array=${array%%;*}
# afterany, not afterok: a shard that failed and requeued itself (tune-array.sbatch) counts as
# failed for afterok forever; merge.sbatch checks that every shard finished instead.
merge=$(sbatch --parsable --dependency="afterany:$array" \
    --chdir="$dir" --output="$dir/tessera-merge-%j.log" "${extra[@]}" \
    "$here/merge.sbatch" "$dir" "$dir/merged.db" "$n" "$array")
merge=${merge%%;*}
echo "array job $array ($n tasks), merge job $merge; results in $dir/merged.db"
