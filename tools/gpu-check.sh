#!/usr/bin/env bash
# tools/gpu-check.sh: the GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit but no
# package registries. In one call of at most 8 minutes it
#   1. builds Tessera (CMake when its dependencies are installed, else the compiler core and the
#      CUDA backend directly with cc: no SQLite, OpenBLAS or cmocka needed);
#   2. runs the GPU tests (test_cuda: every GPU template on the device vs the reference, plus
#      NVRTC for sm_80/sm_90) when CMake built them;
#   3. runs tools/gpu_bench/bench_cuda.c: device correctness checks, fp32 matmul 4096^3 vs cuBLAS
#      SGEMM (dlopen) before and after a short tuning run, softmax and layer norm 4096x4096 vs a
#      device-to-device copy; prints a Markdown table (record it in docs/GPU.md);
#   4. tensor cores: test_tensorize_cuda (every CUDA tensor intrinsic on the device vs a float64 /
#      exact reference) and an fp16 GEMM 4096^3 (f32 accumulation) tensorized with
#      cuda_wmma_f16_16x16x16 (a fixed warp schedule: 16 x 16 tiles, 4 warps a block) against
#      cuBLAS GemmEx (dlopen), with a spot check of the result.
# Usage: bash tools/gpu-check.sh [--quick]     Output also goes to $OUT/gpu-check.log when $OUT is set.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
START=$(date +%s)
LIMIT=${GPU_CHECK_LIMIT:-470}          # seconds for the whole script (8 minutes, with margin)
B=${GPU_CHECK_BUILD:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
LOG=${OUT:-/tmp}/gpu-check.log
exec > >(tee "$LOG") 2>&1

left() { echo $(( LIMIT - ($(date +%s) - START) )); }
step() { echo; echo "== $* ($(( $(date +%s) - START ))s)"; }

step "machine"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-*; do
  if [ -n "$d" ] && [ -e "$d/lib64" ]; then export CUDA_HOME=${CUDA_HOME:-$d}; break; fi
done
echo "CUDA_HOME=${CUDA_HOME:-?}  cc=$(cc --version | head -1)  cores=$JOBS"
export LD_LIBRARY_PATH=${CUDA_HOME:-/usr/local/cuda}/lib64:${LD_LIBRARY_PATH:-}

step "build"
LIB=""
if command -v cmake >/dev/null &&
   timeout 120 cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_FUZZ=OFF >"$B.cmake.log" 2>&1 &&
   timeout $(( $(left) - 300 )) cmake --build "$B" -j "$JOBS" --target tessera test_cuda test_tensorize_cuda >"$B.build.log" 2>&1; then
  LIB="$B/libtessera.a"
  echo "CMake build: ok"
else
  echo "CMake build unavailable or failed (see $B.cmake.log / $B.build.log); building the core directly"
  tail -5 "$B.build.log" 2>/dev/null
  mkdir -p "$B/direct/include/tessera" "$B/direct/obj"
  sed -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/' \
      -e 's/@PROJECT_VERSION@/0.1.0/' include/tessera/version.h.in > "$B/direct/include/tessera/version.h"
  SRCS=$(ls te/*.c te/ops/*.c schedule/*.c schedule/passes/*.c backends/c/*.c backends/cuda/*.c)
  ok=1
  printf '%s\n' $SRCS | xargs -P "$JOBS" -I{} sh -c \
    'o='"$B"'/direct/obj/$(echo {} | tr / _).o; cc -std=gnu11 -O2 -fopenmp -fPIC -I include -I '"$B"'/direct/include -I . -DTE_VERSION_STRING=\"0.1.0\" -DTE_SOURCE_DIR=\"'"$ROOT"'\" -c {} -o $o' || ok=0
  ar rcs "$B/direct/libtessera.a" "$B"/direct/obj/*.o && [ $ok = 1 ] && LIB="$B/direct/libtessera.a"
fi
[ -z "$LIB" ] && { echo "BUILD FAILED"; exit 1; }
INC="-I include -I $B/include -I $B/direct/include -I ."

step "GPU tests"
if [ -x "$B/tests/test_cuda" ]; then
  TESSERA_CACHE_DIR="$B/kcache" OMP_NUM_THREADS=4 timeout 150 "$B/tests/test_cuda" 2>&1 | tail -60
  echo "test_cuda exit status: ${PIPESTATUS[0]}"
else
  echo "test_cuda not built (no cmocka); the benchmark's correctness checks cover the device"
fi

step "benchmark"
cc -std=gnu11 -O2 -fopenmp $INC tools/gpu_bench/bench_cuda.c "$LIB" -o "$B/bench_cuda" -ldl -lm -lpthread || {
  echo "benchmark build failed"; exit 1; }
BUDGET=$(( $(left) - 20 ))
[ $BUDGET -lt 30 ] && BUDGET=30
timeout $(( BUDGET + 15 )) "$B/bench_cuda" --budget "$BUDGET" $QUICK
RC=$?

step "tensor cores (te_tensorize with CUDA intrinsics)"
if [ -x "$B/tests/test_tensorize_cuda" ]; then
  TESSERA_CACHE_DIR="$B/kcache" timeout 120 "$B/tests/test_tensorize_cuda" 2>&1 | tail -40
  echo "test_tensorize_cuda exit status: ${PIPESTATUS[0]}"
fi
cat > "$B/bench_tz.c" <<'EOF_TZ'
/* fp16 GEMM C[M, N] f32 = A[M, K] f16 B[K, N] f16 tensorized with cuda_wmma_f16_16x16x16 vs
 * cuBLAS GemmEx (f16 inputs, f32 output and compute). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "tessera/tensorize.h"
typedef int (*gemmex_t)(void *, int, int, int, int, int, const void *, const void *, int, int,
                        const void *, int, int, const void *, void *, int, int, int, int);
static struct { void *h; gemmex_t gemm; } cb;
static uint64_t da, db, dc;
static int n_;
static int run_cublas(void *u)
{
    (void)u;
    const float one = 1, zero = 0; /* row-major C = A B: column-major C^T = B^T A^T */
    return cb.gemm(cb.h, 0, 0, n_, n_, n_, &one, (void *)(uintptr_t)db, 2 /* R_16F */, n_,
                   (void *)(uintptr_t)da, 2, n_, &zero, (void *)(uintptr_t)dc, 0 /* R_32F */, n_,
                   68 /* COMPUTE_32F */, -1 /* GEMM_DEFAULT */) ? TE_ERR_RUNTIME : TE_OK;
}
int main(void)
{
    int n = n_ = 4096;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F16, 2, (int64_t[]){n, n});
    te_tensor *B = te_placeholder(ctx, "B", TE_F16, 2, (int64_t[]){n, n});
    te_tensor *C = te_op_matmul_mixed(ctx, A, B, 0, 0, TE_F32, "C");
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    te_stage *sc = te_schedule_stage(s, C);
    te_iter *io, *ii, *jo, *ji, *jb, *jw;
    if (te_split(sc, te_stage_axis(sc, 0), 16, &io, &ii) ||
        te_split(sc, te_stage_axis(sc, 1), 16, &jo, &ji) || te_split(sc, jo, 4, &jb, &jw) ||
        te_reorder(sc, 6, (te_iter *[]){io, jb, jw, ii, ji, te_stage_reduce_axis(sc, 0)}) ||
        te_bind(sc, io, TE_BLOCK_Y) || te_bind(sc, jb, TE_BLOCK_X) ||
        te_bind(sc, jw, TE_THREAD_Y) ||
        te_tensorize(sc, ii, te_tensor_intrin_find("cuda_wmma_f16_16x16x16"))) {
        printf("schedule failed: %s\n", te_ctx_errmsg(ctx));
        return 1;
    }
    te_cuda_module *m = NULL;
    if (te_cuda_build(s, 3, (te_tensor *[]){A, B, C}, "gemm_f16", NULL, &m) != TE_OK) {
        printf("build failed: %s\n", te_ctx_errmsg(ctx));
        return 1;
    }
    size_t nn = (size_t)n * n;
    uint16_t *ha = malloc(nn * 2), *hb = malloc(nn * 2);
    float *hc = malloc(nn * 4);
    srand(7);
    for (size_t i = 0; i < nn; i++) {
        ha[i] = te_f32_to_f16((float)rand() / RAND_MAX - 0.5f);
        hb[i] = te_f32_to_f16((float)rand() / RAND_MAX - 0.5f);
    }
    if (te_cuda_malloc(&da, nn * 2) || te_cuda_malloc(&db, nn * 2) || te_cuda_malloc(&dc, nn * 4) ||
        te_cuda_copy_to_device(da, ha, nn * 2) || te_cuda_copy_to_device(db, hb, nn * 2)) {
        printf("device memory: %s\n", te_cuda_errmsg());
        return 1;
    }
    uint64_t args[3] = {da, db, dc};
    te_cuda_timing t = te_cuda_timing_default();
    double ms = 0, cms = 0, flop = 2.0 * n * (double)n * n;
    if (te_cuda_module_time(m, args, &t, &ms, NULL, NULL) != TE_OK) {
        printf("timing failed: %s\n", te_cuda_module_errmsg(m));
        return 1;
    }
    te_cuda_copy_to_host(hc, dc, nn * 4);
    double worst = 0;
    for (int q = 0; q < 64; q++) { /* spot check against float64 */
        int i = (q * 977) % n, j = (q * 3571) % n;
        double r = 0;
        for (int k = 0; k < n; k++)
            r += (double)te_f16_to_f32(ha[(size_t)i * n + k]) * te_f16_to_f32(hb[(size_t)k * n + j]);
        double e = fabs(hc[(size_t)i * n + j] - r) / (1 + fabs(r));
        worst = e > worst || isnan(e) ? e : worst;
    }
    printf("| fp16 GEMM %d^3 (f32 acc) | tessera wmma %.3f ms (%.1f TFLOP/s), max err %.2g |", n,
           ms, flop / ms * 1e-9, worst);
    const char *names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12", NULL};
    for (int i = 0; names[i] && !cb.h; i++)
        cb.h = dlopen(names[i], RTLD_NOW);
    int (*create)(void **) = cb.h ? (int (*)(void **))dlsym(cb.h, "cublasCreate_v2") : NULL;
    cb.gemm = cb.h ? (gemmex_t)dlsym(cb.h, "cublasGemmEx") : NULL;
    void *h = NULL;
    if (create && cb.gemm && create(&h) == 0) {
        void *lib = cb.h;
        cb.h = h;
        if (te_cuda_time_fn(run_cublas, NULL, &t, &cms, NULL, NULL) == TE_OK)
            printf(" cuBLAS GemmEx %.3f ms (%.1f TFLOP/s) | tessera / cuBLAS %.2f |\n", cms,
                   flop / cms * 1e-9, ms / cms);
        else
            printf(" cuBLAS failed |\n");
        (void)lib;
    } else {
        printf(" no cuBLAS |\n");
    }
    te_cuda_module_free(m);
    return worst < 1e-3 ? 0 : 2;
}
EOF_TZ
if cc -std=gnu11 -O2 -fopenmp $INC "$B/bench_tz.c" "$LIB" -o "$B/bench_tz" -ldl -lm -lpthread; then
  timeout 60 "$B/bench_tz"
  echo "bench_tz exit status: $?"
else
  echo "bench_tz build failed"
fi
step "tessera tune --target cuda (measured on the device, recorded in $B/gpu-tune.db)"
# The CLI needs SQLite; where CMake built the library it usually builds too.
if [ "$LIB" = "$B/libtessera.a" ] && [ "$(left)" -gt 90 ] &&
   timeout 60 cmake --build "$B" -j "$JOBS" --target tessera_cli >"$B.cli.log" 2>&1; then
  TESSERA_CACHE_DIR="$B/kcache" timeout $(( $(left) - 10 )) "$B/tessera" tune matmul \
    --shape m=2048,n=2048,k=2048 --target cuda --trials 24 --db "$B/gpu-tune.db" 2>&1 |
    tee "$B/gpu-tune.log" | grep -E "^(tune|  |measured|best|no candidate|tessera)"
  echo "tune exit status: ${PIPESTATUS[0]}"
else
  echo "skipped: no CLI build (see $B.cli.log) or too little time left"
fi
step "done (exit $RC), log in $LOG"
exit $RC
