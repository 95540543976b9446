#!/bin/sh
# `tessera tune OP --target cuda --dry-run` (tools/tune_cuda.c): every candidate drawn from an
# operator's GPU search space compiles through NVRTC for sm_80 and sm_90 (a ragged matmul, the
# MLP gate, softmax, layer norm, an elementwise operator; GPU sketches for an operator without a
# template and for --space sketch), the report names registers, spills
# and the pruning; bad usage exits 2; without --dry-run on a machine without a device the
# command says so and exits 1 (tests/tune_cuda_emulated.sh measures on the emulated GPU).
# Skipped (77) where NVRTC cannot be loaded.
T=$1
fail() {
    printf '%s\n' "$out"
    echo "FAIL: $*"
    exit 1
}

out=$("$T" tune matmul --shape m=100,n=70,k=36 --target cuda --dry-run --trials 16 2>&1)
rc=$?
case $out in *"needs NVRTC"*)
    echo "SKIP: $out"
    exit 77
    ;;
esac
[ $rc = 0 ] || fail "matmul dry run: exit $rc"
for sm in 80 90; do
    printf '%s\n' "$out" | grep -q "^sm_$sm: 16 of 16 compiled$" || fail "matmul: sm_$sm"
done
printf '%s\n' "$out" | grep -q "registers per thread: min [0-9]*, median" || fail "no registers"
printf '%s\n' "$out" | grep -q "pruned before measurement: [0-9]* (" || fail "no pruning line"

# (attention at head dimension 64 with its default 128-key block: the K^T and V tiles would
# take 64 KiB of shared memory; V is read from global memory instead)
for case in "mlp_gate m=64,k=48,n=40" "softmax m=5,n=300" "layer_norm m=3,n=130" \
    "gelu m=7,n=33" "attention batch=1,heads=1,lq=32,lk=128,dh=64" \
    "softmax_online m=5,n=300" "layer_norm_welford m=3,n=256"; do
    set -- $case
    out=$("$T" tune "$1" --shape "$2" --target cuda --dry-run --trials 8 --sm 80 2>&1) ||
        fail "$1: exit $?"
    printf '%s\n' "$out" | grep -q "^sm_80: \([0-9]*\) of \1 compiled$" || fail "$1"
done

# attention at head dimension 128: the block's P V is summed per element of d inside the
# accumulator's loop, so no candidate spills (each spilled and was pruned when P V was a
# dh-long local array beside the accumulator)
out=$("$T" tune attention --shape batch=1,heads=2,lq=256,lk=256,dh=128 --target cuda --dry-run \
    --sm 80 2>&1) || fail "attention dh 128: exit $?"
printf '%s\n' "$out" | grep -q "spills: 0 candidates spill" || fail "attention dh 128 spills"

# the GPU sketches: an operator without a GPU template, and a matmul asked for sketches
for case in "transpose m=40,n=72" "matmul m=48,n=40,k=24 --space sketch"; do
    set -- $case
    op=$1 shp=$2
    shift 2
    out=$("$T" tune "$op" --shape "$shp" "$@" --target cuda --dry-run --trials 6 --sm 80 2>&1) ||
        fail "$op sketches: exit $?"
    printf '%s\n' "$out" | grep -q "of the GPU sketch space" || fail "$op: not the sketch space"
    printf '%s\n' "$out" | grep -q "^sm_80: \([0-9]*\) of \1 compiled$" || fail "$op sketches"
done

out=$("$T" tune softmax --shape m=5,n=300 --target cuda --dry-run --json --sm 90 2>&1) ||
    fail "--json: exit $?"
printf '%s\n' "$out" | grep -q '"sms": \[{"sm": 90, "compiled": 18, "failed": 0,' || fail "--json"

"$T" tune matmul --shape m=8,n=8,k=8 --target cuda --dry-run --sm 7x >/dev/null 2>&1
[ $? = 2 ] || fail "--sm 7x must exit 2"
"$T" tune matmul --shape m=8,n=8,k=8 --dry-run >/dev/null 2>&1
[ $? = 2 ] || fail "--dry-run without --target cuda must exit 2"
out=$(TESSERA_LIBCUDA=/nonexistent/libcuda.so.1 "$T" tune matmul --shape m=8,n=8,k=8 \
    --target cuda --db "${TMPDIR:-/tmp}/tune_cuda_dry_run.$$.db" 2>&1)
[ $? = 1 ] || fail "--target cuda without a device must exit 1"
printf '%s\n' "$out" | grep -q "no CUDA device to measure on" || fail "no message without a device"
[ ! -e "${TMPDIR:-/tmp}/tune_cuda_dry_run.$$.db" ] || fail "a database was made without a device"
out=$("$T" tune matmul --shape m=8,n=8,k=8 --target cuda --dry-run --trials 4 2>&1 |
    head -1)
echo "ok: $out"
