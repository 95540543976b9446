#!/bin/sh
# `tessera tune OP --target cuda` measuring on the emulated GPU (tests/cuda_emu/: the emitted
# CUDA runs as host threads behind the driver API): candidates compiled with NVRTC, measured in
# forked children against the float64 reference, every trial recorded under the device's full
# target key, which `tessera gen` on the same device finds; a child killed by a sticky error (an
# injected abort) costs only its candidate, a hung launch is killed at --timeout, wrong results
# are caught, bad usage exits 2.
# Usage: tune_cuda_emulated.sh TESSERA LIBCUDA_EMU LIBNVRTC_EMU. Skipped (77) without NVRTC.
T=$1
export TESSERA_LIBCUDA=$2 TESSERA_NVRTC=$3
W=$(mktemp -d "${TMPDIR:-/tmp}/tune_cuda_emu.XXXXXX")
trap 'rm -rf "$W"' EXIT
export TESSERA_CACHE_DIR=$W/cache EMU_CACHE=${EMU_CACHE:-$W/emu}
fail() {
    printf '%s\n' "$out"
    echo "FAIL: $*"
    exit 1
}
WK='matmul;k=24,m=40,n=36;f32'
count() { # status -> number of trials with it in $W/t.db
    "$T" db history --db "$W/t.db" --workload "$WK" --json 2>/dev/null |
        grep -o "\"status\":\"$1\"" | wc -l
}

out=$("$T" tune matmul --shape m=40,n=36,k=24 --target cuda --trials 5 --db "$W/t.db" 2>&1)
rc=$?
case $out in *"needs NVRTC"*)
    echo "SKIP: $out"
    exit 77
    ;;
esac
[ $rc = 0 ] || fail "tune: exit $rc"
printf '%s\n' "$out" | grep -q "on Tessera emulated GPU (sm_80, 1 SMs, driver 13.0, nvrtc " ||
    fail "no device line"
printf '%s\n' "$out" | grep -q "target key: cuda;sm_80;Tessera emulated GPU;1 SMs;nvrtc [0-9.]*;driver 13.0" ||
    fail "no full target key"
printf '%s\n' "$out" | grep -q "^measured 5 candidates in .* 5 ok, 5 trials recorded" ||
    fail "not 5 ok trials"
printf '%s\n' "$out" | grep -q "^best: .* ms" || fail "no best"
[ "$(count ok)" = 5 ] || fail "the database does not hold 5 ok trials"
"$T" db best --db "$W/t.db" --workload "$WK" | grep -q "cuda;sm_80;Tessera emulated GPU" ||
    fail "db best does not show the GPU record"

# gen on the same device picks the record (exact target key); for a bare SM only with --fallback.
out=$("$T" gen matmul --shape m=40,n=36,k=24 --target cuda --db "$W/t.db" -o "$W/g1" 2>&1) ||
    fail "gen: exit $?"
printf '%s\n' "$out" | grep -q "1 from database records" || fail "gen did not take the record"
grep -q "target: *cuda;sm_80;Tessera emulated GPU;1 SMs;nvrtc [0-9.]*;driver 13.0" "$W/g1/matmul.cu" ||
    fail "gen: no device target in the header"
out=$("$T" gen matmul --shape m=40,n=36,k=24 --target cuda --sm 80 --db "$W/t.db" -o "$W/g2" 2>&1)
printf '%s\n' "$out" | grep -q "0 from database records" || fail "gen --sm 80 took a device record"
out=$("$T" gen matmul --shape m=40,n=36,k=24 --target cuda --sm 80 --fallback --db "$W/t.db" \
    -o "$W/g3" 2>&1)
printf '%s\n' "$out" | grep -q "record of the compatible target cuda;sm_80;Tessera emulated GPU" ||
    fail "gen --fallback"

# A sticky error: the 3rd launch (across processes) aborts its child; a fresh child goes on.
rm -f "$W/t.db"
out=$(EMU_CRASH_AT="$W/launches:3" "$T" tune matmul --shape m=40,n=36,k=24 --target cuda \
    --trials 5 --db "$W/t.db" 2>&1) || fail "crash: exit $?"
[ "$(printf '%s\n' "$out" | grep -c "runtime_error    the measuring process died (signal 6")" = 1 ] ||
    fail "not one candidate lost to the abort"
[ "$(count ok)" = 4 ] && [ "$(count runtime_error)" = 1 ] || fail "crash: not 4 ok + 1 runtime_error"

# A hung launch is killed at --timeout and recorded as a (transient) timeout.
rm -f "$W/t.db"
out=$(EMU_HANG_AT="$W/hang:1" "$T" tune matmul --shape m=40,n=36,k=24 --target cuda \
    --trials 3 --timeout 3 --db "$W/t.db" 2>&1) || fail "hang: exit $?"
printf '%s\n' "$out" | grep -q "timeout  *no result after 3 s" || fail "no timeout"
[ "$(count ok)" = 2 ] && [ "$(count timeout)" = 1 ] || fail "hang: not 2 ok + 1 timeout"

# Wrong results are never timed or taken as best.
rm -f "$W/t.db"
out=$(EMU_CORRUPT_DTOH=1 "$T" tune matmul --shape m=40,n=36,k=24 --target cuda --trials 2 \
    --db "$W/t.db" 2>&1)
[ $? = 1 ] || fail "wrong answers: must exit 1"
printf '%s\n' "$out" | grep -q "wrong_answer .*relative error" || fail "no wrong_answer"
printf '%s\n' "$out" | grep -q "no candidate ran correctly" || fail "no final message"
[ "$(count wrong_answer)" = 2 ] || fail "wrong answers not recorded"

# Another operator: softmax (cross-thread reductions) measures and checks.
out=$("$T" tune softmax --shape m=5,n=300 --target cuda --trials 3 --db "$W/s.db" 2>&1) ||
    fail "softmax: exit $?"
printf '%s\n' "$out" | grep -q "3 ok, 3 trials recorded" || fail "softmax: not 3 ok"

# Usage errors.
"$T" tune matmul --shape m=8,n=8,k=8 --target cuda --sm 80 --db "$W/u.db" >/dev/null 2>&1
[ $? = 2 ] || fail "--sm without --dry-run must exit 2"
"$T" tune matmul --shape m=8,n=8,k=8 --target cuda --json --db "$W/u.db" >/dev/null 2>&1
[ $? = 2 ] || fail "--json without --dry-run must exit 2"
echo "ok"
