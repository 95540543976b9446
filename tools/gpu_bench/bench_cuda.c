/*
 * tools/gpu_bench/bench_cuda.c: the GPU check's benchmark (run by tools/gpu-check.sh on a machine
 * with an NVIDIA GPU). Not part of the library build: the script compiles it against the built
 * library.
 *
 *   1. correctness on the device: every GPU template at small sizes vs te_reference_eval;
 *   2. fp32 matmul 4096^3: the template's default configuration, then a short tuning run over a
 *      few configurations, both against cuBLAS SGEMM (loaded with dlopen) in GFLOP/s;
 *   3. softmax and layer norm 4096 x 4096 in GB/s (one read and one write of the tensor) against
 *      a device-to-device copy of the same size.
 * Prints a Markdown table. Exit status 0 when everything ran and matched, 1 otherwise.
 *
 * Usage: bench_cuda [--quick] [--budget SECONDS]
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *p, size_t n, unsigned seed)
{
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

static int failures;

/* ---- 1. correctness ---------------------------------------------------------------------------
 */

typedef int (*sched_fn)(te_schedule *, te_tensor *, const te_cuda_knobs *);
static int s_mm(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_matmul(s, y, NULL, k);
}

static void check_one(const char *what, te_ctx *ctx, int n_in, te_tensor **t, sched_fn fn,
                      const te_cuda_knobs *k, double tol)
{
    te_tensor *out = t[n_in];
    float *data[8];
    for (int i = 0; i <= n_in; i++) {
        data[i] = malloc(sizeof(float) * (size_t)te_tensor_numel(t[i]));
        fill(data[i], (size_t)te_tensor_numel(t[i]), (unsigned)i + 7);
    }
    size_t n = (size_t)te_tensor_numel(out);
    double *ref = malloc(sizeof(double) * n);
    te_schedule *s = te_schedule_create(ctx, 1, &out);
    te_target tgt;
    te_cuda_module *m = NULL;
    const char *status = "ok";
    double err = 0;
    if (te_reference_eval(ctx, n_in, t, (const void *const *)data, 1, &out, &ref) != TE_OK)
        status = "reference failed";
    else if (fn(s, out, k) != TE_OK)
        status = "schedule failed";
    else if (te_cuda_target_device(0, &tgt) != TE_OK ||
             te_cuda_build(s, n_in + 1, t, "check", &tgt, &m) != TE_OK)
        status = "build failed";
    else if (te_cuda_module_run(m, (void *const *)data) != TE_OK)
        status = "run failed";
    else {
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)data[n_in][i] - ref[i]) / fmax(1.0, fabs(ref[i]));
            if (!(d <= err))
                err = isnan(d) ? INFINITY : d;
        }
        if (!(err <= tol))
            status = "WRONG";
    }
    bool ok = !strcmp(status, "ok");
    failures += !ok;
    printf("  check %-34s %-16s max rel err %.2e%s%s\n", what, status, err, ok ? "" : "  ",
           ok ? "" : (m ? te_cuda_module_errmsg(m) : te_ctx_errmsg(ctx)));
    te_cuda_module_free(m);
    for (int i = 0; i <= n_in; i++)
        free(data[i]);
    free(ref);
}

static int s_sm(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_softmax(s, y, k);
}
static int s_ln(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_layer_norm(s, y, k);
}
static int s_mlp(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_mlp_gate(s, y, k);
}
static int s_conv(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_conv2d(s, y, k);
}
static int s_elem(te_schedule *s, te_tensor *y, const te_cuda_knobs *k)
{
    return te_cuda_schedule_elementwise(s, y, k);
}

static void correctness(void)
{
    printf("## Correctness on the device (vs te_reference_eval)\n\n");
    te_ctx *ctx = te_ctx_create();
    te_tensor *t[4];
    static const te_cuda_knobs mm[] = {{64, 64, 8, 4, 4, 0, 4, 0, 0, 1, 0, 0, 0},
                                       {128, 128, 16, 8, 8, 0, 4, 0, 1, 1, 0, 0, 0},
                                       {32, 64, 16, 2, 4, 0, 4, 1, 1, 1, 0, 0, 0}};
    for (int i = 0; i < 3; i++) {
        t[0] = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){200, 136});
        t[1] = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){136, 264});
        t[2] = te_op_matmul(ctx, t[0], t[1], 0, 0, "C");
        char what[64];
        snprintf(what, sizeof what, "matmul 200x264x136 cfg%d", i);
        check_one(what, ctx, 2, t, s_mm, &mm[i], 1e-4);
    }
    te_cuda_knobs k = te_cuda_knobs_default("softmax");
    t[0] = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){64, 1000});
    t[1] = te_op_softmax(ctx, t[0], -1, "Y");
    check_one("softmax 64x1000", ctx, 1, t, s_sm, &k, 1e-5);
    t[0] = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){64, 768});
    t[1] = te_placeholder(ctx, "g", TE_F32, 1, (int64_t[]){768});
    t[2] = te_placeholder(ctx, "b", TE_F32, 1, (int64_t[]){768});
    t[3] = te_op_layer_norm(ctx, t[0], t[1], t[2], 1e-5, -1, "Y");
    k = te_cuda_knobs_default("layer_norm");
    check_one("layer_norm 64x768", ctx, 3, t, s_ln, &k, 1e-4);
    t[0] = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){128, 96});
    t[1] = te_placeholder(ctx, "W1", TE_F32, 2, (int64_t[]){96, 160});
    t[2] = te_placeholder(ctx, "W3", TE_F32, 2, (int64_t[]){96, 160});
    t[3] = te_op_mlp_gate(ctx, t[0], t[1], t[2], "Y");
    k = te_cuda_knobs_default("mlp_gate");
    check_one("mlp_gate 128x160x96", ctx, 3, t, s_mlp, &k, 1e-4);
    t[0] = te_placeholder(ctx, "X", TE_F32, 4, (int64_t[]){2, 16, 20, 20});
    t[1] = te_placeholder(ctx, "W", TE_F32, 4, (int64_t[]){32, 16, 3, 3});
    te_conv2d_params p = te_conv2d_params_default();
    p.pad_h = p.pad_w = 1;
    t[2] = te_op_conv2d(ctx, t[0], t[1], &p, "Y");
    k = te_cuda_knobs_default("conv2d");
    check_one("conv2d 2x16x20x20, 32x3x3", ctx, 2, t, s_conv, &k, 1e-4);
    t[0] = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){300, 301});
    t[1] = te_op_gelu(ctx, t[0], "Y");
    k = te_cuda_knobs_default("elementwise");
    check_one("gelu 300x301", ctx, 1, t, s_elem, &k, 1e-5);
    te_ctx_free(ctx);
    printf("\n");
}

/* ---- cuBLAS ------------------------------------------------------------------------------------
 */

typedef int (*cublasCreate_t)(void **);
typedef int (*cublasDestroy_t)(void *);
typedef int (*cublasSgemm_t)(void *, int, int, int, int, int, const float *, const float *, int,
                             const float *, int, const float *, float *, int);
static struct {
    void *h, *lib;
    cublasSgemm_t sgemm;
} cb;

static int cublas_load(void)
{
    const char *names[] = {"libcublas.so",
                           "libcublas.so.13",
                           "libcublas.so.12",
                           "libcublas.so.11",
                           "/usr/local/cuda/lib64/libcublas.so",
                           NULL};
    for (int i = 0; names[i] && !cb.lib; i++)
        cb.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cb.lib)
        return -1;
    cublasCreate_t cr = (cublasCreate_t)dlsym(cb.lib, "cublasCreate_v2");
    cb.sgemm = (cublasSgemm_t)dlsym(cb.lib, "cublasSgemm_v2");
    if (!cr || !cb.sgemm || cr(&cb.h) != 0)
        return -1;
    return 0;
}

typedef struct {
    int m, n, k;
    uint64_t a, b, c;
} gemm_args;

/* Row-major C = A B is column-major C^T = B^T A^T. */
static int run_cublas(void *user)
{
    gemm_args *g = user;
    const float one = 1, zero = 0;
    return cb.sgemm(cb.h, 0, 0, g->n, g->m, g->k, &one, (const float *)(uintptr_t)g->b, g->n,
                    (const float *)(uintptr_t)g->a, g->k, &zero, (float *)(uintptr_t)g->c, g->n)
               ? TE_ERR_RUNTIME
               : TE_OK;
}

typedef struct {
    uint64_t d, s;
    size_t n;
} copy_args;

static int run_copy(void *user)
{
    copy_args *c = user;
    return te_cuda_copy_device(c->d, c->s, c->n);
}

/* ---- 2. matmul --------------------------------------------------------------------------------
 */

static double time_matmul_cfg(int M, int N, int K, const te_cuda_knobs *k, uint64_t *dev, char *err,
                              size_t errn)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *C = te_op_matmul(ctx, A, B, 0, 0, "C");
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    te_target tgt;
    te_cuda_module *m = NULL;
    double med = -1;
    te_cuda_timing t = te_cuda_timing_default();
    t.min_time_s = 0.05;
    t.flush_l2 = 0;
    if (te_cuda_schedule_matmul(s, C, NULL, k) != TE_OK ||
        te_cuda_target_device(0, &tgt) != TE_OK ||
        te_cuda_build(s, 3, (te_tensor *[]){A, B, C}, "mm", &tgt, &m) != TE_OK)
        snprintf(err, errn, "%s", te_ctx_errmsg(ctx));
    else if (te_cuda_module_time(m, dev, &t, &med, NULL, NULL) != TE_OK)
        snprintf(err, errn, "%s", te_cuda_module_errmsg(m)), med = -1;
    te_cuda_module_free(m);
    te_ctx_free(ctx);
    return med;
}

static double max_rel_diff_dev(uint64_t x, uint64_t y, size_t n)
{
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    double e = INFINITY;
    if (a && b && te_cuda_copy_to_host(a, x, n * 4) == TE_OK &&
        te_cuda_copy_to_host(b, y, n * 4) == TE_OK) {
        e = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
            if (!(d <= e))
                e = isnan(d) ? INFINITY : d;
        }
    }
    free(a);
    free(b);
    return e;
}

int main(int argc, char **argv)
{
    bool quick = false;
    double budget = 240;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            budget = atof(argv[++i]);
    }
    double t0 = now_s();
    if (te_cuda_probe() != TE_OK) {
        printf("no GPU: %s\n", te_cuda_errmsg());
        return 1;
    }
    te_cuda_device_info di;
    te_cuda_device_info_get(0, &di);
    printf("# Tessera GPU check\n\ndevice: %s, sm_%d, %d SMs, %.0f GiB, L2 %d MiB, driver %d, "
           "NVRTC %d\n\n",
           di.name, di.sm, di.sm_count, (double)di.total_mem / (1 << 30), di.l2_bytes >> 20,
           di.driver_version, te_nvrtc_version());
    correctness();

    int M = 4096, N = 4096, K = 4096;
    size_t bytes = (size_t)M * K * 4;
    float *h = malloc(bytes);
    uint64_t dA, dB, dC, dR;
    te_cuda_malloc(&dA, bytes);
    te_cuda_malloc(&dB, bytes);
    te_cuda_malloc(&dC, bytes);
    te_cuda_malloc(&dR, bytes);
    fill(h, (size_t)M * K, 1);
    te_cuda_copy_to_device(dA, h, bytes);
    fill(h, (size_t)M * K, 2);
    te_cuda_copy_to_device(dB, h, bytes);
    double flop = 2.0 * M * N * K;

    /* cuBLAS */
    double cub_ms = -1;
    if (cublas_load() == 0) {
        gemm_args g = {M, N, K, dA, dB, dR};
        te_cuda_timing t = te_cuda_timing_default();
        t.flush_l2 = 0;
        if (te_cuda_time_fn(run_cublas, &g, &t, &cub_ms, NULL, NULL) != TE_OK)
            cub_ms = -1;
    } else {
        printf("cuBLAS not found (libcublas.so): no SGEMM baseline\n");
    }

    /* ours: default, then a short tuning run */
    char err[4096] = "";
    te_cuda_knobs def = te_cuda_knobs_default("matmul");
    uint64_t args[3] = {dA, dB, dC};
    double def_ms = time_matmul_cfg(M, N, K, &def, args, err, sizeof err);
    if (def_ms < 0)
        printf("default matmul failed: %s\n", err);
    else if (cub_ms > 0) {
        double e = max_rel_diff_dev(dC, dR, (size_t)M * N);
        printf("matmul default vs cuBLAS: max rel diff %.2e\n", e);
        if (!(e < 1e-3))
            failures++;
    }
    /* first the register tiles split over 2 x 2 virtual threads (CUTLASS's SGEMM thread map:
     * 4 x 4 runs strided by the block, float4 shared loads without bank conflicts) */
    static const te_cuda_knobs cands[] = {
        {128, 128, 8, 8, 8, 0, 4, 0, 1, 1, 2, 2, 0},  {128, 128, 16, 8, 8, 0, 4, 0, 1, 1, 2, 2, 0},
        {128, 64, 8, 8, 8, 0, 4, 0, 1, 1, 2, 2, 0},   {128, 128, 8, 8, 8, 0, 4, 4, 1, 1, 2, 2, 0},
        {128, 128, 8, 8, 8, 0, 4, 0, 0, 1, 0, 0, 0},  {128, 128, 16, 8, 8, 0, 4, 0, 0, 1, 0, 0, 0},
        {128, 128, 8, 8, 8, 0, 4, 0, 1, 1, 0, 0, 0},  {128, 128, 16, 8, 8, 0, 4, 4, 1, 1, 0, 0, 0},
        {128, 64, 8, 8, 4, 0, 4, 0, 1, 1, 0, 0, 0},   {64, 128, 8, 4, 8, 0, 4, 0, 1, 1, 0, 0, 0},
        {128, 128, 32, 8, 8, 0, 4, 0, 0, 1, 0, 0, 0}, {64, 64, 16, 4, 4, 0, 4, 0, 1, 1, 0, 0, 0},
        {128, 256, 8, 8, 16, 0, 4, 0, 0, 1, 0, 0, 0}, {256, 128, 8, 16, 8, 0, 4, 0, 0, 1, 0, 0, 0},
        {128, 128, 16, 4, 8, 0, 4, 0, 1, 1, 0, 0, 0}, {64, 256, 8, 4, 16, 0, 4, 0, 1, 1, 0, 0, 0},
    };
    int ncand = quick ? 3 : (int)(sizeof cands / sizeof cands[0]);
    double best_ms = def_ms;
    te_cuda_knobs best = def;
    for (int i = 0; i < ncand && now_s() - t0 < budget * 0.6; i++) {
        double ms = time_matmul_cfg(M, N, K, &cands[i], args, err, sizeof err);
        printf("  tune matmul cfg %2d: tile %3dx%3dx%2d thread %2dx%2d db %d pad %d: %s%.3f ms\n",
               i, cands[i].tile_m, cands[i].tile_n, cands[i].tile_k, cands[i].thread_m,
               cands[i].thread_n, cands[i].double_buffer, cands[i].pad, ms < 0 ? "failed " : "",
               ms < 0 ? 0.0 : ms);
        if (ms > 0 && (best_ms < 0 || ms < best_ms)) {
            best_ms = ms;
            best = cands[i];
        }
    }
    if (best_ms > 0 && cub_ms > 0) {
        time_matmul_cfg(M, N, K, &best, args, err, sizeof err);
        double e = max_rel_diff_dev(dC, dR, (size_t)M * N);
        printf("matmul best vs cuBLAS: max rel diff %.2e\n", e);
        if (!(e < 1e-3))
            failures++;
    }

    /* copy bandwidth */
    te_cuda_timing tt = te_cuda_timing_default();
    double copy_ms = -1;
    copy_args cp = {dC, dA, bytes};
    if (te_cuda_time_fn(run_copy, &cp, &tt, &copy_ms, NULL, NULL) != TE_OK)
        printf("device copy failed: %s\n", te_cuda_errmsg());
    /* softmax and layer norm 4096 x 4096 */
    double sm_ms = -1, ln_ms = -1;
    int sm_thr = 0, ln_thr = 0;
    static const int threads[] = {128, 256, 512, 1024};
    for (int op = 0; op < 2; op++) {
        for (int ti = 0; ti < 4; ti++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, K});
            te_tensor *G = te_placeholder(ctx, "g", TE_F32, 1, (int64_t[]){K});
            te_tensor *Bt = te_placeholder(ctx, "b", TE_F32, 1, (int64_t[]){K});
            te_tensor *Y = op == 0 ? te_op_softmax(ctx, X, -1, "Y")
                                   : te_op_layer_norm(ctx, X, G, Bt, 1e-5, -1, "Y");
            te_schedule *s = te_schedule_create(ctx, 1, &Y);
            te_cuda_knobs k = te_cuda_knobs_default(op == 0 ? "softmax" : "layer_norm");
            k.threads = threads[ti];
            te_target tgt;
            te_cuda_module *m = NULL;
            double ms = -1;
            int rc = op == 0 ? te_cuda_schedule_softmax(s, Y, &k)
                             : te_cuda_schedule_layer_norm(s, Y, &k);
            te_tensor *args3[4] = {X, G, Bt, Y};
            te_tensor *args1[2] = {X, Y};
            uint64_t d3[4] = {dA, dB, dB + (uint64_t)K * 4, dC}, d1[2] = {dA, dC};
            if (rc == TE_OK && te_cuda_target_device(0, &tgt) == TE_OK &&
                te_cuda_build(s, op == 0 ? 2 : 4, op == 0 ? args1 : args3,
                              op == 0 ? "softmax" : "layer_norm", &tgt, &m) == TE_OK)
                te_cuda_module_time(m, op == 0 ? d1 : d3, &tt, &ms, NULL, NULL);
            else
                printf("  %s threads %d failed: %s\n", op == 0 ? "softmax" : "layer_norm",
                       threads[ti], te_ctx_errmsg(ctx));
            if (ms > 0 && op == 0 && (sm_ms < 0 || ms < sm_ms))
                sm_ms = ms, sm_thr = threads[ti];
            if (ms > 0 && op == 1 && (ln_ms < 0 || ms < ln_ms))
                ln_ms = ms, ln_thr = threads[ti];
            te_cuda_module_free(m);
            te_ctx_free(ctx);
        }
    }
    double gb = 2.0 * (double)bytes / 1e9;
    printf("\n## Results (%s, sm_%d)\n\n", di.name, di.sm);
    printf("| workload | Tessera | baseline | ratio |\n|---|---|---|---|\n");
    if (cub_ms > 0) {
        printf(
            "| fp32 matmul 4096^3, default config (GFLOP/s) | %.0f | cuBLAS SGEMM %.0f | %.2f |\n",
            def_ms > 0 ? flop / def_ms / 1e6 : 0, flop / cub_ms / 1e6,
            def_ms > 0 ? cub_ms / def_ms : 0);
        printf(
            "| fp32 matmul 4096^3, after tuning %d configs (GFLOP/s) | %.0f | cuBLAS SGEMM %.0f | "
            "%.2f |\n",
            ncand, best_ms > 0 ? flop / best_ms / 1e6 : 0, flop / cub_ms / 1e6,
            best_ms > 0 ? cub_ms / best_ms : 0);
    } else {
        printf("| fp32 matmul 4096^3 (GFLOP/s) | default %.0f, tuned %.0f | (no cuBLAS) | - |\n",
               def_ms > 0 ? flop / def_ms / 1e6 : 0, best_ms > 0 ? flop / best_ms / 1e6 : 0);
    }
    printf("| softmax 4096x4096, %d threads (GB/s) | %.0f | D2D copy %.0f | %.2f |\n", sm_thr,
           sm_ms > 0 ? gb / sm_ms * 1e3 : 0, gb / copy_ms * 1e3, sm_ms > 0 ? copy_ms / sm_ms : 0);
    printf("| layer norm 4096x4096, %d threads (GB/s) | %.0f | D2D copy %.0f | %.2f |\n", ln_thr,
           ln_ms > 0 ? gb / ln_ms * 1e3 : 0, gb / copy_ms * 1e3, ln_ms > 0 ? copy_ms / ln_ms : 0);
    printf("\nbest matmul config: tile %dx%dx%d, thread %dx%d, vec %d, pad %d, double_buffer %d\n",
           best.tile_m, best.tile_n, best.tile_k, best.thread_m, best.thread_n, best.vec, best.pad,
           best.double_buffer);
    printf("wall time %.1f s, %d failure(s)\n", now_s() - t0, failures);
    te_cuda_free(dA);
    te_cuda_free(dB);
    te_cuda_free(dC);
    te_cuda_free(dR);
    free(h);
    return failures ? 1 : 0;
}
