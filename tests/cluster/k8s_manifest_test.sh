#!/usr/bin/env bash
# tools/cluster/tune-indexed-job.yaml without a Kubernetes cluster: reads the manifest (Python's
# yaml module), checks the Indexed Job's shape (completionMode Indexed, completions =
# parallelism = SHARDS, restartPolicy Never, the shard taken from JOB_COMPLETION_INDEX, the
# volume shared with the merge Job), then runs the pods' own commands here as Kubernetes would:
# the tune container's once per completion index, all at once, with its environment (a tiny budget instead
# of the manifest's), one index a second time as a retried pod, then the merge container's.
# Checks: the shards partition the task list, the retried pod measured nothing, the merged
# database holds every shard's trials once and passes `tessera db check`.
#
#   bash tests/cluster/k8s_manifest_test.sh [PATH/TO/tessera]
#
# Exit status 0 passed, 1 failed, 77 skipped (no python3 with yaml, no sqlite3).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tessera=${1:-$root/build/tessera}
tessera=$(cd "$(dirname "$tessera")" && pwd)/$(basename "$tessera")
manifest=$root/tools/cluster/tune-indexed-job.yaml

fail() {
    echo "k8s_manifest_test: FAILED: $*" >&2
    exit 1
}
[ -x "$tessera" ] || fail "no tessera binary at $tessera"
python3 -c 'import yaml' 2>/dev/null ||
    { echo "k8s_manifest_test: SKIPPED: python3 with yaml (python3-yaml) is not installed"; exit 77; }
command -v sqlite3 >/dev/null 2>&1 ||
    { echo "k8s_manifest_test: SKIPPED: sqlite3 is not installed"; exit 77; }

tmp=$(mktemp -d /tmp/tessera-k8s-XXXXXX) || fail "cannot make a temporary directory"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tasks" "$tmp/results" "$tmp/bin"
ln -s "$tessera" "$tmp/bin/tessera"

# The manifest's facts, checked, as shell assignments: the number of shards, the two pods'
# commands (with the mount paths moved into the temporary directory) and the tune pod's env.
facts=$(python3 - "$manifest" "$tmp" <<'EOF'
import shlex, sys, yaml

path, tmp = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)

pvc = by.get(("PersistentVolumeClaim", "tessera-results"))
tune = by.get(("Job", "tessera-tune"))
merge = by.get(("Job", "tessera-merge"))
need(pvc and tune and merge, "the volume claim, the tune Job and the merge Job")
if problems:
    sys.exit("; ".join(problems))
need("ReadWriteMany" in pvc["spec"]["accessModes"], "a ReadWriteMany volume")
need(pvc["metadata"]["labels"]["tessera-step"] == "tune", "the volume in the tune step")
need(tune["metadata"]["labels"]["tessera-step"] == "tune", "tessera-step=tune on the tune Job")
need(merge["metadata"]["labels"]["tessera-step"] == "merge", "tessera-step=merge on the merge Job")
ts = tune["spec"]
need(ts.get("completionMode") == "Indexed", "completionMode: Indexed")
pod = ts["template"]["spec"]
need(pod.get("restartPolicy") == "Never", "restartPolicy Never (backoffLimitPerIndex needs it)")
(c,) = pod["containers"]
env = {e["name"]: e["value"] for e in c.get("env", [])}
shards = int(env.get("SHARDS", "0"))
need(shards > 0 and ts.get("completions") == shards and ts.get("parallelism") == shards,
     "completions = parallelism = SHARDS")
need(env.get("OMP_NUM_THREADS") == str(c["resources"]["requests"]["cpu"]),
     "OMP_NUM_THREADS = the CPU request (the thread count is part of the target key)")
cmd = " ".join(c["command"][2:] + c["args"]) if c["command"][:2] == ["/bin/sh", "-c"] else ""
need("$JOB_COMPLETION_INDEX" in cmd and "--resume" in cmd and "--shard" in cmd,
     "the tune command shards by $JOB_COMPLETION_INDEX and resumes")
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
vols = {v["name"]: v for v in pod["volumes"]}
need(vols["results"]["persistentVolumeClaim"]["claimName"] == "tessera-results",
     "the tune pods mount the results volume")
mpod = merge["spec"]["template"]["spec"]
(mc,) = mpod["containers"]
mcmd = " ".join(mc["command"][2:] + mc["args"]) if mc["command"][:2] == ["/bin/sh", "-c"] else ""
mmounts = {m["name"]: m["mountPath"] for m in mc["volumeMounts"]}
need(mmounts.get("results") == mounts.get("results"), "the merge pod mounts the same volume there")
need({v["name"]: v for v in mpod["volumes"]}["results"]["persistentVolumeClaim"]["claimName"]
     == "tessera-results", "the merge pod mounts the results volume")
if problems:
    sys.exit("manifest: missing " + "; ".join(problems))
for name, mp in dict(mounts, **mmounts).items():
    cmd = cmd.replace(mp + "/", tmp + "/" + name + "/")
    mcmd = mcmd.replace(mp + "/", tmp + "/" + name + "/")
print("shards=%d" % shards)
print("tune_cmd=%s" % shlex.quote(cmd))
print("merge_cmd=%s" % shlex.quote(mcmd))
print("tune_env=(%s)" % " ".join(shlex.quote("%s=%s" % kv) for kv in env.items()))
EOF
) || fail "$facts"
shards=0 tune_cmd='' merge_cmd='' tune_env=()
eval "$facts"
echo "k8s_manifest_test: $shards shards; tune pod: $tune_cmd"

cat >"$tmp/tasks/tasks.json" <<'EOF'
[{"op": "softmax", "shape": "m=8,n=32"},
 {"op": "relu", "shape": "m=8,n=64"},
 {"op": "relu", "shape": "m=8,n=32"},
 {"op": "relu", "shape": "m=16,n=32"},
 {"op": "tanh", "shape": "m=8,n=64"},
 {"op": "gelu", "shape": "m=8,n=32"},
 {"op": "silu", "shape": "m=8,n=64"},
 {"op": "sigmoid", "shape": "m=16,n=32"}]
EOF
pod() { # pod INDEX: the tune container's command, as its pod would run it
    env "${tune_env[@]}" PATH="$tmp/bin:$PATH" JOB_COMPLETION_INDEX="$1" \
        TESSERA_TUNE_ARGS="--trials 8 --batch 4 --strategy random --quiet" \
        TESSERA_CACHE_DIR="$tmp/kcache" OMP_NUM_THREADS=1 /bin/sh -c "$tune_cmd" >"$tmp/pod-$1.log" 2>&1
}
sql() { sqlite3 -cmd '.timeout 10000' "$@"; }

# All pods at once, as parallelism = completions runs them.
podpids=()
for ((i = 0; i < shards; i++)); do
    pod "$i" &
    podpids+=($!)
done
for ((i = 0; i < shards; i++)); do
    wait "${podpids[$i]}" || fail "pod $i exited with status $?: $(cat "$tmp/pod-$i.log")"
done
ls "$tmp"/results/shard-*.db >/dev/null 2>&1 || fail "no shard database in $tmp/results"
before=$(sql "$tmp/results/shard-0.db" "SELECT count(*) FROM trials" 2>/dev/null)
pod 0 || fail "the retried pod 0 exited with status $?: $(cat "$tmp/pod-0.log")"
after=$(sql "$tmp/results/shard-0.db" "SELECT count(*) FROM trials" 2>/dev/null)
{ [ -n "$before" ] && [ "$before" = "$after" ]; } ||
    fail "the retried pod 0 measured again ($before trials, then $after)"

env PATH="$tmp/bin:$PATH" TESSERA_DB_NO_WAL=1 /bin/sh -c "$merge_cmd" >"$tmp/merge.log" 2>&1 ||
    fail "the merge pod failed: $(cat "$tmp/merge.log")"
merged=$tmp/results/merged.db
total=0
nworkloads=0
for s in "$tmp"/results/shard-*.db; do
    total=$((total + $(sql "$s" "SELECT count(*) FROM trials")))
    nworkloads=$((nworkloads + $(sql "$s" "SELECT count(*) FROM workloads")))
done
[ "$nworkloads" = 8 ] || fail "the shards tuned $nworkloads workloads, not the list's 8"
[ "$(sql "$merged" "SELECT count(*) FROM workloads")" = 8 ] || fail "merged: not 8 workloads"
got=$(sql "$merged" "SELECT count(*), count(DISTINCT uid) FROM trials")
[ "$got" = "$total|$total" ] || fail "merged: trials '$got', want $total, each once"
"$tessera" db check --db "$merged" >/dev/null || fail "tessera db check failed on the merged database"
echo "k8s_manifest_test: passed ($total trials in $shards shards, merged)"
