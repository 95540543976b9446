#!/usr/bin/env bash
# The cluster path on a real Slurm: starts a single-node Slurm of its own (munged, slurmctld and
# slurmd on localhost, every file in a temporary directory), submits a 4-task job array over a
# small task list with tools/cluster/submit.sh (tune-array.sbatch + merge.sbatch chained with
# afterany + shard markers), SIGKILLs the tessera of one array task mid-run so that the task
# retries it (with --resume, in its allocation), requeues another running task as Slurm does when
# a node fails (scontrol requeue), waits for the merge job and checks:
#   - every workload of the list was tuned in exactly one shard, the one of its key's hash;
#   - the killed and the requeued shards resumed their jobs: one job, its trial budget exactly, no configuration
#     measured twice, the crashed task retried once and the requeued one restarted once;
#   - a merge with a shard's marker missing refuses, naming the shard and its task state;
#   - the merged database holds every shard's trials once (by uid), none duplicated, and each
#     workload's best is the best of its shard; `tessera db check` passes on every database.
# Every daemon it started is stopped on exit.
#
#   bash tests/cluster/slurm_test.sh [PATH/TO/tessera]
#
# Exit status 0 passed, 1 failed, 77 skipped (no Slurm or munge installed, not root, or the
# daemons would not start; the reason is printed). tools/install-deps.sh installs slurm-wlm and
# munge. Takes about a minute.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tessera=${1:-$root/build/tessera}
tessera=$(cd "$(dirname "$tessera")" && pwd)/$(basename "$tessera")

skip() {
    echo "slurm_test: SKIPPED: $*"
    exit 77
}
fail() {
    keep=${TESSERA_KEEP_FAILED:-0}
    echo "slurm_test: FAILED: $*" >&2
    exit 1
}

[ -x "$tessera" ] || fail "no tessera binary at $tessera"
[ "$(id -u)" -eq 0 ] || skip "needs root (a private slurmctld and slurmd run as SlurmUser=root)"
for c in munged slurmctld slurmd sbatch scontrol squeue scancel sqlite3; do
    command -v "$c" >/dev/null 2>&1 ||
        skip "'$c' is not installed (bash tools/install-deps.sh installs slurm-wlm, munge and sqlite3)"
done

tmp=$(mktemp -d /tmp/tessera-slurm-XXXXXX) || fail "cannot make a temporary directory"
pids=()
cleanup() {
    if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
        scancel --quiet --user=root >/dev/null 2>&1 || true
    fi
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    if [ -f "$tmp/munge/munged.pid" ]; then
        kill "$(cat "$tmp/munge/munged.pid")" 2>/dev/null || true
    fi
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$p" 2>/dev/null || true
    done
    if [ "${keep:-0}" = 1 ]; then
        echo "slurm_test: files kept in $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- A private Slurm ------------------------------------------------------------------------

# Two free TCP ports on localhost: nothing accepts a connection there.
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
ctld_port=$(free_port) || skip "no free TCP port"
d_port=$(free_port) || skip "no free TCP port"
while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port) || skip "no free TCP port"; done

mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/work"
chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
# munged forks itself into the background once its socket is ready; its pid file lets us stop it.
munged --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.sock" \
    --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
    --seed-file="$tmp/munge/munged.seed" >"$tmp/log/munged.out" 2>&1 ||
    skip "munged would not start: $(tail -n 3 "$tmp/log/munged.out" "$tmp/munge/munged.log" 2>/dev/null)"

host=$(hostname -s)
cpus=4 # the node offers 4 slots so that all 4 array tasks run at once (they are tiny)
cat >"$tmp/slurm.conf" <<EOF
ClusterName=tessera-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf

slurmctld -D -i >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N "$host" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 100); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then
        up=1
        break
    fi
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || break 2
    done
    sleep 0.2
done
if [ "$up" != 1 ]; then
    skip "Slurm would not start: $(tail -n 5 "$tmp/log/slurmctld.out" "$tmp/log/slurmd.out" \
        "$tmp/log/slurmctld.log" "$tmp/log/slurmd.log" 2>/dev/null)"
fi
echo "slurm_test: Slurm $(sinfo -V | awk '{print $2}') up on $host (ports $ctld_port, $d_port)"

# ---- The run --------------------------------------------------------------------------------

# Eight tiny workloads, two per shard of 4 by their keys' FNV-1a hashes.
cat >"$tmp/tasks.json" <<'EOF'
[{"op": "softmax", "shape": "m=8,n=32"},
 {"op": "relu", "shape": "m=8,n=64"},
 {"op": "relu", "shape": "m=8,n=32"},
 {"op": "relu", "shape": "m=16,n=32"},
 {"op": "tanh", "shape": "m=8,n=64"},
 {"op": "gelu", "shape": "m=8,n=32"},
 {"op": "silu", "shape": "m=8,n=64"},
 {"op": "sigmoid", "shape": "m=16,n=32"}]
EOF
declare -A want_shard=(
    ["softmax;m=8,n=32;f32"]=0 ["tanh;m=8,n=64;f32"]=0
    ["relu;m=8,n=64;f32"]=1 ["gelu;m=8,n=32;f32"]=1
    ["relu;m=8,n=32;f32"]=2 ["silu;m=8,n=64;f32"]=2
    ["relu;m=16,n=32;f32"]=3 ["sigmoid;m=16,n=32;f32"]=3
)
budget=16
victim=2         # the shard whose tessera is killed mid-run (a crash)
requeued_shard=3 # the shard Slurm requeues mid-run (a lost node)
work=$tmp/work
export TESSERA=$tessera
export TESSERA_TUNE_ARGS="--trials $budget --batch 4 --strategy random --seed 7"
export TESSERA_CACHE_DIR=$tmp/kcache
export OMP_NUM_THREADS=1
export TESSERA_RETRY_DELAY=1

out=$(bash "$root/tools/cluster/submit.sh" "$tmp/tasks.json" 4 "$work") ||
    fail "submit.sh failed: $out"
echo "slurm_test: $out"
array=$(sed -n 's/^array job \([0-9]*\) .*/\1/p' <<<"$out")
merge=$(sed -n 's/.*merge job \([0-9]*\);.*/\1/p' <<<"$out")
{ [ -n "$array" ] && [ -n "$merge" ]; } || fail "cannot read the job ids from: $out"

job_field() { # job_field JOB FIELD: a field of `scontrol show job`
    scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
sql() { sqlite3 -cmd '.timeout 10000' "$@"; }

# first_batch I: waits until shard I recorded its first batch; sets n (trials so far) and pid
# (its tessera, from the job row).
first_batch() {
    local db=$work/shard-$1.db
    pid=
    n=0
    for _ in $(seq 900); do
        if [ -f "$db" ]; then
            n=$(sql "$db" "SELECT count(*) FROM trials" 2>/dev/null || echo 0)
            if [ "${n:-0}" -ge 4 ]; then
                pid=$(sql "$db" "SELECT pid FROM jobs WHERE status = 'running'" 2>/dev/null)
                break
            fi
        fi
        sleep 0.1
    done
    [ -n "$pid" ] || fail "shard $1 never recorded a batch (logs: $(cat "$work"/*.log))"
    [ "$n" -lt "$budget" ] || fail "shard $1 finished before it could be interrupted"
}

# A crash: kill the victim's tessera once its first batch is recorded. The task retries it.
first_batch "$victim"
kill -KILL "$pid" || fail "cannot kill shard $victim's tessera (pid $pid)"
echo "slurm_test: killed shard $victim (pid $pid) after $n of $budget trials"

# A lost node: Slurm requeues a running task (what it does when the node fails, for a job
# marked --requeue). Slurm holds a requeued task back for a while (BeginTime), which the test
# shortens. The merge job must wait for the task to come back and finish.
first_batch "$requeued_shard"
scontrol requeue "${array}_$requeued_shard" ||
    fail "scontrol requeue ${array}_$requeued_shard failed"
echo "slurm_test: requeued shard $requeued_shard after $n of $budget trials"
requeued=0
for _ in $(seq 600); do
    if [ "$(job_field "${array}_$requeued_shard" Restarts)" = 1 ] &&
        [ "$(job_field "${array}_$requeued_shard" JobState)" = PENDING ]; then
        # Not "now": slurmd revokes a killed job's credential with a time stamp in whole
        # seconds and refuses ("already killed, do not launch batch job") a relaunch in that
        # same second; the task then fails for good. Two seconds later is safe.
        scontrol update JobId="${array}_$requeued_shard" StartTime=now+2 >/dev/null 2>&1 &&
            requeued=1
        break
    fi
    sleep 0.1
done
[ "$requeued" = 1 ] ||
    fail "shard $requeued_shard was not requeued: $(scontrol show job "${array}_$requeued_shard")"

state=
for _ in $(seq 1500); do
    state=$(job_field "$merge" JobState)
    case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;;
    esac
    sleep 0.1
done
[ "$state" = COMPLETED ] ||
    fail "merge job $merge ended as '$state': $(cat "$work"/*.log 2>/dev/null)"
echo "slurm_test: merge job done"

# ---- Checks ---------------------------------------------------------------------------------

problems=0
check() { # check CONDITION-TEXT COMMAND...: runs the command, counts a failure
    local what=$1
    shift
    if ! "$@"; then
        echo "slurm_test: check failed: $what" >&2
        problems=$((problems + 1))
    fi
}
eq() { [ "$1" = "$2" ] || { echo "  got '$1', want '$2'" >&2 && false; }; }

merged=$work/merged.db
check "the merged database passes tessera db check" "$tessera" db check --db "$merged"
total=0
for i in 0 1 2 3; do
    s=$work/shard-$i.db
    check "shard $i has a database" test -f "$s"
    [ -f "$s" ] || continue
    check "shard $i passes tessera db check" "$tessera" db check --db "$s"
    # Its workloads are exactly the ones whose key hashes to it.
    while read -r w; do
        check "$w is tuned in shard ${want_shard[$w]:-?}, found in shard $i" eq "${want_shard[$w]:-?}" "$i"
    done < <(sql "$s" "SELECT key FROM workloads ORDER BY key")
    check "shard $i tuned 2 workloads" eq "$(sql "$s" "SELECT count(*) FROM workloads")" 2
    check "shard $i: one job, its budget" \
        eq "$(sql "$s" "SELECT count(*), sum(trials_done), min(status) FROM jobs")" "1|$budget|finished"
    check "shard $i: $budget trials, none measured twice" \
        eq "$(sql "$s" "SELECT count(*), count(DISTINCT workload_id || ' ' || trace_hash) FROM trials")" \
        "$budget|$budget"
    total=$((total + $(sql "$s" "SELECT count(*) FROM trials")))
    # The merged best of each of its workloads is the shard's best.
    while IFS='|' read -r w uid; do
        best=$("$tessera" db best --workload "$w" --json --db "$merged" 2>/dev/null)
        check "merged best of $w is shard $i's best ($uid)" grep -q "\"uid\":\"$uid\"" <<<"$best"
    done < <(sql "$s" "SELECT w.key, t.uid FROM workloads w JOIN trials t ON t.id = (SELECT id FROM
             trials WHERE workload_id = w.id AND status = 'ok' ORDER BY median_s, id LIMIT 1)")
done
check "every workload of the list was tuned" \
    eq "$(sql "$merged" "SELECT count(*) FROM workloads")" "${#want_shard[@]}"
check "the merged database holds every shard's trials once" \
    eq "$(sql "$merged" "SELECT count(*), count(DISTINCT uid) FROM trials")" "$total|$total"
check "no configuration twice in the merged database" \
    eq "$(sql "$merged" "SELECT count(DISTINCT workload_id || ' ' || trace_hash) FROM trials")" "$total"
check "the killed shard was retried once, in its own allocation" \
    eq "$(grep -c "^tune-array: retrying shard $victim/4" "$work/tessera-tune-${array}_$victim.log")" 1
check "the killed shard's log shows both runs" \
    eq "$(grep -c "^tune-array: shard $victim/4 on" "$work/tessera-tune-${array}_$victim.log")" 2
check "the other shards ran once" \
    eq "$(grep -c "^tune-array: shard 0/4 on" "$work/tessera-tune-${array}_0.log")" 1
check "the crashed shard was not requeued" eq "$(job_field "${array}_$victim" Restarts)" 0
check "the requeued shard was restarted once by Slurm" \
    eq "$(job_field "${array}_$requeued_shard" Restarts)" 1
check "the requeued shard's log shows a run before and after the requeue" \
    eq "$(grep -c "^tune-array: shard $requeued_shard/4 on .*, restart [01], attempt 1," \
        "$work/tessera-tune-${array}_$requeued_shard.log")" 2

# A shard that never finished: the merge refuses (after its grace period), naming the shard and
# its task state, and writes no database.
refuse=$tmp/refuse
mkdir -p "$refuse"
cp "$work"/shard-*.db "$work"/shard-*.ok "$refuse"/
rm -f "$refuse/shard-1.ok"
if msg=$(TESSERA_MERGE_GRACE=4 bash "$root/tools/cluster/merge.sbatch" "$refuse" \
    "$refuse/merged.db" 4 "$array" 2>&1); then
    check "the merge refuses a shard without its marker" false
else
    check "the merge names the unfinished shard and its state" \
        grep -q "shard(s) 1 of 4 did not finish.*1:COMPLETED" <<<"$msg"
fi
check "a refused merge writes no database" test ! -e "$refuse/merged.db"

if [ "$problems" -ne 0 ]; then
    keep=1
    echo "slurm_test: logs:" >&2
    cat "$work"/*.log >&2
    fail "$problems check(s) failed"
fi
echo "slurm_test: passed ($total trials in 4 shards, merged)"
