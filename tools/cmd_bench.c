/*
 * `tessera bench`: hand-scheduled Tessera kernels beside the strongest baselines on this machine
 * (OpenBLAS with the kernels that fit the CPU and oneDNN's matmul, plain and with packed
 * weights, tools/baselines.c; the faster of memcpy and a streaming copy for memory-bound row
 * operations), measured in the same
 * process, alternating all of them, medians over repeats.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tuner.h"
#include "tools/baselines.h"
#include "tools/bench_attention.h"
#include "tools/bench_graph.h"
#include "tools/bench_lowp.h"
#include "tools/bench_report.h"
#include "tools/bl_vec.h"
#include "tools/cli.h"
#include "tools/roofline.h"

typedef te_bench_row row;

/* Prints x with fmt, or null when it is not finite (a ratio left out). */
static void jnum(double x, const char *fmt)
{
    if (isfinite(x))
        printf(fmt, x);
    else
        printf("null");
}

/* Prints s as a JSON string. */
static void jstr(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* A ratio for the table, "-" when left out. */
static void fmt_ratio(char *buf, size_t n, double x)
{
    snprintf(buf, n, isfinite(x) ? "%.2f" : "-", x);
}

/* Runs a and b alternately `reps` times after a warm-up; medians in seconds. */
static float *rand_buf(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
    }
    return p;
}

/* ---- Hand schedules ----------------------------------------------------------------------- */

/* Wp[jo, k, ji] = W[k, jo * nr + ji]: column panels of nr floats, contiguous along k, so the
 * micro-kernel streams each panel linearly. Columns past N read as zero. */
static te_tensor *pack_panels(te_ctx *ctx, te_tensor *W, int64_t nr, const char *name)
{
    int64_t K = te_tensor_shape(W)[0], N = te_tensor_shape(W)[1], NP = (N + nr - 1) / nr;
    te_expr *jo = te_axis(ctx, "jo", NP), *k = te_axis(ctx, "k", K), *ji = te_axis(ctx, "ji", nr);
    te_expr *col = te_add(ctx, te_mul(ctx, jo, te_int(ctx, nr)), ji);
    te_expr *v = N % nr ? te_if_then_else(ctx, te_lt(ctx, col, te_int(ctx, N)),
                                          TE_AT(ctx, W, k, col), te_f32(ctx, 0))
                        : TE_AT(ctx, W, k, col);
    return te_compute(ctx, name, 3, (te_expr *[]){jo, k, ji}, v);
}

/* X @ W through packed panels of W. */
static te_tensor *matmul_packed(te_ctx *ctx, te_tensor *X, te_tensor *Wp, int64_t N,
                                const char *name)
{
    int64_t M = te_tensor_shape(X)[0], K = te_tensor_shape(X)[1], nr = te_tensor_shape(Wp)[2];
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N), *k = te_reduce_axis(ctx, "k", K);
    te_expr *w = TE_AT(ctx, Wp, te_floordiv(ctx, j, te_int(ctx, nr)), k,
                       te_floormod(ctx, j, te_int(ctx, nr)));
    return te_compute(ctx, name, 2, (te_expr *[]){i, j},
                      te_sum(ctx, te_mul(ctx, TE_AT(ctx, X, i, k), w), 1, &k));
}

static void sched_pack(te_ctx *ctx, te_schedule *s, te_tensor *P)
{
    te_stage *sp = te_schedule_stage(s, P);
    TE_BENCH_CHECK(sp && te_parallel(sp, te_stage_axis(sp, 0)) == TE_OK);
    TE_BENCH_CHECK(te_vectorize(sp, te_stage_axis(sp, 2)) == TE_OK);
}

/* The register tile of one product: an mr x nr accumulator in registers, computed inside
 * loop `at` of the consumer stage. */
static void sched_tile(te_ctx *ctx, te_schedule *s, te_tensor *G, te_stage *consumer, te_iter *at,
                       bool inline_copy)
{
    te_tensor *acc = te_cache_write(s, G, TE_SCOPE_LOCAL);
    TE_BENCH_CHECK(acc);
    if (inline_copy)
        TE_BENCH_CHECK(te_compute_inline(te_schedule_stage(s, G)) == TE_OK);
    te_stage *sa = te_schedule_stage(s, acc);
    TE_BENCH_CHECK(te_compute_at(sa, consumer, at) == TE_OK);
    te_iter *i = te_stage_axis(sa, 0), *j = te_stage_axis(sa, 1), *k = te_stage_reduce_axis(sa, 0);
    te_iter *ko, *ki;
    TE_BENCH_CHECK(te_split(sa, k, 4, &ko, &ki) == TE_OK);
    TE_BENCH_CHECK(te_reorder(sa, 4, (te_iter *[]){ko, ki, i, j}) == TE_OK);
    TE_BENCH_CHECK(te_unroll(sa, ki) == TE_OK);
    TE_BENCH_CHECK(te_unroll(sa, i) == TE_OK);
    TE_BENCH_CHECK(te_vectorize(sa, j) == TE_OK);
}

/* Output tiles mr x nr; column panels in parallel, rows inside. Returns the row-tile loop. */
static te_iter *sched_output(te_ctx *ctx, te_stage *sy, int64_t mr, int64_t nr)
{
    te_iter *io, *jo, *ii, *ji;
    TE_BENCH_CHECK(te_tile(sy, te_stage_axis(sy, 0), te_stage_axis(sy, 1), mr, nr, &io, &jo, &ii,
                           &ji) == TE_OK);
    TE_BENCH_CHECK(te_reorder(sy, 2, (te_iter *[]){jo, io}) == TE_OK);
    TE_BENCH_CHECK(te_parallel(sy, jo) == TE_OK);
    TE_BENCH_CHECK(te_unroll(sy, ii) == TE_OK);
    TE_BENCH_CHECK(te_vectorize(sy, ji) == TE_OK);
    return io;
}

/* ---- Workloads ------------------------------------------------------------------------------ */

typedef struct {
    te_packed_fn fn;
    void **args;
} tess_run;

static void run_tess(void *p)
{
    tess_run *r = p;
    r->fn(r->args);
}

/* Times the Tessera kernel `tr` (writing ours_out) beside every baseline product available for
 * *sh over (A, B1, B3), all alternating in this process, and fills *out (GFLOP/s from `flop`
 * floating-point operations per run): the figures, the
 * strongest trusted baseline and which kernels it ran, the error against OpenBLAS. */
static void measure_products(tess_run *tr, const float *ours_out, const te_bl_shape *sh,
                             const float *A, const float *B1, const float *B3, double flop,
                             int threads, int reps, row *out)
{
    te_bl_set_threads(threads); /* before the products: oneDNN sizes its primitives by it */
    te_bl_set set;
    te_bl_result r;
    te_bl_set_create(&set, sh, A, B1, B3, &r);
    te_bl_run_fn fn[TE_BL_NLIBS + 1] = {run_tess};
    void *arg[TE_BL_NLIBS + 1] = {tr};
    int n = 1 + te_bl_set_fns(&set, fn + 1, arg + 1);
    double med[TE_BL_NLIBS + 1];
    if (te_bl_time_alternating(n, fn, arg, reps, med) != 0) {
        fprintf(stderr, "tessera bench: out of memory\n");
        exit(1);
    }
    te_bl_set_result(&set, med + 1, flop, &r);
    /* What was left out and why, beyond the notes printed once for the whole run. */
    for (const char *q = r.notes; *q;) {
        const char *e = strchr(q, '\n');
        int len = e ? (int)(e - q) : (int)strlen(q);
        if (strncmp(q, "oneDNN: not", 11) && strncmp(q, "OpenBLAS: ", 10))
            fprintf(stderr, "tessera bench: %.*s\n", len, q);
        q += len + (e ? 1 : 0);
    }
    out->threads = threads;
    out->unit = "gflops";
    out->ours = flop / med[0] * 1e-9;
    out->seconds = med[0];
    out->base = r.best;
    out->openblas = r.openblas;
    out->onednn = r.onednn;
    const char *lib = r.best_lib == TE_BL_OPENBLAS ? "sgemm" : "onednn matmul";
    if (r.best_lib < 0)
        snprintf(out->base_name, sizeof out->base_name, "none");
    else if (sh->gate)
        snprintf(out->base_name, sizeof out->base_name, "2x %s + silu pass", lib);
    else
        snprintf(out->base_name, sizeof out->base_name, "%s%s",
                 r.best_lib == TE_BL_OPENBLAS ? "openblas " : "", lib);
    snprintf(out->ob_impl, sizeof out->ob_impl, "%s",
             isfinite(r.openblas) ? r.impl[TE_BL_OPENBLAS] : "");
    snprintf(out->dn_impl, sizeof out->dn_impl, "%s",
             isfinite(r.onednn) ? r.impl[r.onednn_lib] : "");
    out->other_impl = r.best_lib == TE_BL_OPENBLAS ? out->dn_impl
                      : r.best_lib >= 0            ? out->ob_impl
                                                   : "";
    snprintf(out->base_impl, sizeof out->base_impl, "%s",
             r.best_lib < 0 ? "none" : r.impl[r.best_lib]);
    const float *ref = te_bl_set_reference(&set);
    out->err = ref ? te_bl_rel_err(ours_out, ref, (size_t)sh->m * sh->n) : NAN;
    te_bl_set_free(&set);
}

/* Vector lanes of f32 on this machine, and whether it has 32 vector registers (AVX-512) or 16:
 * the register tiles below are sized from these target facts (BLIS's habit), never fixed. */
static int64_t host_lanes(bool *regs32)
{
    te_target t = te_target_host();
    int64_t lanes = t.vector_bits >= 512 ? 16 : t.vector_bits >= 256 ? 8 : 4;
    *regs32 = lanes == 16;
    return lanes;
}

/* matmul M x N x K with the hand schedule. packed 0: B is an input the kernel copies into
 * column panels in every call (as OpenBLAS packs in every call); 1: B is packed once, untimed,
 * into panels the kernel reads (te_op_pack_panels; the contract of oneDNN's packed weights,
 * which the baseline row uses either way). */
static int bench_matmul(int M, int N, int K, int packed, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    bool regs32;
    /* 6 rows x 4 vectors with 32 vector registers (AVX-512): 24 accumulators, four loads of B
     * and a broadcast (the tile the tuner finds there: 142 -> 160 GFLOP/s on one core of a
     * Xeon); 6 x 2 with 16 registers: 12 accumulators, a broadcast and two loads. */
    const int64_t lanes = host_lanes(&regs32), nr = (regs32 ? 4 : 2) * lanes, mr = 6;
    packed = packed && N % nr == 0;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = packed ? NULL : te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *Bp = packed ? te_placeholder(ctx, "B_panels", TE_F32, 3, (int64_t[]){N / nr, K, nr})
                           : pack_panels(ctx, B, nr, "B_packed");
    te_tensor *C = matmul_packed(ctx, A, Bp, N, "C");
    TE_BENCH_CHECK(C);
    te_tensor_set_tag(ctx, C, "matmul");
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    TE_BENCH_CHECK(s);
    if (!packed)
        sched_pack(ctx, s, Bp);
    te_stage *sc = te_schedule_stage(s, C);
    te_tensor *acc = te_cache_write(s, C, TE_SCOPE_LOCAL);
    TE_BENCH_CHECK(acc);
    te_iter *io = sched_output(ctx, sc, mr, nr);
    te_stage *sa = te_schedule_stage(s, acc);
    TE_BENCH_CHECK(te_compute_at(sa, sc, io) == TE_OK);
    te_iter *i = te_stage_axis(sa, 0), *j = te_stage_axis(sa, 1), *k = te_stage_reduce_axis(sa, 0);
    te_iter *ko, *ki;
    TE_BENCH_CHECK(te_split(sa, k, 4, &ko, &ki) == TE_OK);
    TE_BENCH_CHECK(te_reorder(sa, 4, (te_iter *[]){ko, ki, i, j}) == TE_OK);
    TE_BENCH_CHECK(te_unroll(sa, ki) == TE_OK);
    TE_BENCH_CHECK(te_unroll(sa, i) == TE_OK);
    TE_BENCH_CHECK(te_vectorize(sa, j) == TE_OK);
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    te_module *m = NULL;
    TE_BENCH_CHECK(te_build(s, 3, (te_tensor *[]){A, packed ? Bp : B, C}, "matmul", &tgt, &m) ==
                   TE_OK);
    float *a = rand_buf((size_t)M * K, 1), *b = rand_buf((size_t)K * N, 2);
    float *c = rand_buf((size_t)M * N, 3), *bp = packed ? rand_buf((size_t)K * N, 5) : NULL;
    if (packed)
        TE_BENCH_CHECK(te_op_pack_panels(b, K, N, 0, nr, bp) == TE_OK);
    void *args[] = {a, packed ? bp : b, c};
    tess_run tr = {te_module_entry(m), args};
    te_bl_shape sh = {M, N, K, 0, 0, 0};
    measure_products(&tr, c, &sh, a, b, NULL, te_bl_shape_flops(&sh), threads, reps, out);
    snprintf(out->workload, sizeof out->workload, "matmul %dx%dx%d%s", M, N, K,
             packed ? " packed" : "");
    free(a);
    free(b);
    free(c);
    free(bp);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

/* Builds the packing kernel Wp = pack(W) for weights of shape [K, N]. */
static te_module *build_pack(int K, int N, int64_t nr)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *W = te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *P = pack_panels(ctx, W, nr, "W_packed");
    te_schedule *s = te_schedule_create(ctx, 1, &P);
    TE_BENCH_CHECK(s);
    sched_pack(ctx, s, P);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    TE_BENCH_CHECK(te_build(s, 2, (te_tensor *[]){W, P}, "pack_panels", &tgt, &m) == TE_OK);
    te_ctx_free(ctx);
    return m;
}

/* The fused f32 gate over weights packed once, as an inference engine does at load time; the
 * packing is not timed (as in ANCHORS.md's hand-fused kernel). */
struct te_bench_gate32 {
    te_ctx *ctx;
    te_module *m;
    float *p1, *p3, *y;
    void *args[4];
    te_packed_fn fn;
};

te_bench_gate32 *te_bench_gate32_create(int M, int N, int K, const float *x, const float *w1,
                                        const float *w3)
{
    te_ctx *ctx = te_ctx_create();
    bool regs32;
    /* The two products are computed one after the other per output tile (each in its own k
     * loop), so each has the register file: 8 x 2 = 16 accumulators with AVX-512, 6 x 2 = 12
     * of 16 with AVX2 (until session 5 it was 3 x 2 = 6 for "two products' accumulators",
     * fewer than FMA latency times two pipes needs: 44 GFLOP/s against 58 for 2 x sgemm). */
    const int64_t nr = 2 * host_lanes(&regs32), mr = regs32 ? 8 : 6, np = (N + nr - 1) / nr;
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *P1 = te_placeholder(ctx, "W1_packed", TE_F32, 3, (int64_t[]){np, K, nr});
    te_tensor *P3 = te_placeholder(ctx, "W3_packed", TE_F32, 3, (int64_t[]){np, K, nr});
    te_tensor *G = matmul_packed(ctx, X, P1, N, "G"), *U = matmul_packed(ctx, X, P3, N, "U");
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    te_expr *g = TE_AT(ctx, G, i, j);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                              te_mul(ctx, te_mul(ctx, g, te_sigmoid(ctx, g)), TE_AT(ctx, U, i, j)));
    TE_BENCH_CHECK(Y);
    te_tensor_set_tag(ctx, Y, "mlp_gate");
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    TE_BENCH_CHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *io = sched_output(ctx, sy, mr, nr);
    sched_tile(ctx, s, G, sy, io, true);
    sched_tile(ctx, s, U, sy, io, true);
    te_target tgt = te_target_host();
    te_bench_gate32 *gt = calloc(1, sizeof *gt);
    TE_BENCH_CHECK(gt);
    te_module *pack = build_pack(K, N, nr);
    TE_BENCH_CHECK(te_build(s, 4, (te_tensor *[]){X, P1, P3, Y}, "mlp_gate", &tgt, &gt->m) ==
                   TE_OK);
    size_t np_elems = (size_t)np * K * nr;
    gt->ctx = ctx;
    gt->p1 = rand_buf(np_elems, 11), gt->p3 = rand_buf(np_elems, 12);
    gt->y = rand_buf((size_t)M * N, 4);
    TE_BENCH_CHECK(te_module_run(pack, (void *[]){(void *)w1, gt->p1}) == TE_OK);
    TE_BENCH_CHECK(te_module_run(pack, (void *[]){(void *)w3, gt->p3}) == TE_OK);
    te_module_free(pack);
    gt->args[0] = (void *)x, gt->args[1] = gt->p1, gt->args[2] = gt->p3, gt->args[3] = gt->y;
    gt->fn = te_module_entry(gt->m);
    return gt;
}

void te_bench_gate32_run(void *g)
{
    te_bench_gate32 *gt = g;
    gt->fn(gt->args);
}

const float *te_bench_gate32_out(const te_bench_gate32 *g) { return g->y; }

void te_bench_gate32_free(te_bench_gate32 *g)
{
    if (!g)
        return;
    te_module_free(g->m);
    free(g->p1);
    free(g->p3);
    free(g->y);
    te_ctx_free(g->ctx);
    free(g);
}

static int bench_mlp_gate(int M, int N, int K, int threads, int reps, row *out)
{
    size_t nk = (size_t)M * K, kn = (size_t)K * N;
    float *x = rand_buf(nk, 1), *w1 = rand_buf(kn, 2), *w3 = rand_buf(kn, 3);
    te_bench_gate32 *gt = te_bench_gate32_create(M, N, K, x, w1, w3);
    tess_run tr = {gt->fn, gt->args};
    te_bl_shape sh = {M, N, K, 0, 0, 1};
    measure_products(&tr, gt->y, &sh, x, w1, w3, te_bl_shape_flops(&sh), threads, reps, out);
    snprintf(out->workload, sizeof out->workload, "mlp_gate %dx%dx%d packed", M, K, N);
    free(x);
    free(w1);
    free(w3);
    te_bench_gate32_free(gt);
    return 0;
}

/* A copy of n bytes from src: memcpy to dst, the streaming copy to its own sdst. With one
 * destination, the lines memcpy had just left in the cache were flushed by the streaming
 * stores to them, which cost the streaming copy 5-10% and flattered the kernels beside it. */
typedef struct {
    void *dst, *sdst;
    const void *src;
    size_t n;
} copy_run;

static void run_copy(void *p)
{
    copy_run *r = p;
    size_t half = r->n / 2;
#pragma omp parallel sections
    {
#pragma omp section
        memcpy(r->dst, r->src, half);
#pragma omp section
        memcpy((char *)r->dst + half, (const char *)r->src + half, r->n - half);
    }
}

static void run_stream_copy(void *p)
{
    copy_run *r = p;
    te_bl_stream_copy_par(r->sdst, r->src, r->n);
}

/* The copy bandwidth a memory-bound row is compared with: memcpy and the streaming copy
 * (te_bl_stream_copy_par) of the same bytes, both timed beside our kernel; the faster is the
 * baseline and the note gives both figures. memcpy alone flattered us where glibc does not
 * stream (it decides from the last-level cache size, which a virtual machine may report as
 * hundreds of MiB): a Xeon guest copied 4096 x 4096 floats at 13 GB/s with memcpy and 18.5
 * with streaming stores on one core, 32 and 51 on two. bytes: what one run moves. */
static void set_copy_base(row *out, double bytes, double t_memcpy, double t_stream,
                          const char *what)
{
    bool st = t_stream < t_memcpy;
    out->base = bytes / (st ? t_stream : t_memcpy) * 1e-9;
    snprintf(out->base_name, sizeof out->base_name, "copy");
    if (st)
        snprintf(out->base_impl, sizeof out->base_impl,
                 "streaming copy%s (non-temporal stores, 64 KiB blocks over the threads)", what);
    else
        snprintf(out->base_impl, sizeof out->base_impl, "memcpy%s, 2 OpenMP sections", what);
    snprintf(out->note, sizeof out->note,
             "copy bandwidth: streaming copy %.1f GB/s, memcpy %.1f GB/s (the faster is the "
             "baseline)",
             bytes / t_stream * 1e-9, bytes / t_memcpy * 1e-9);
}

/* Times our kernel beside memcpy and the streaming copy of cr's bytes (alternating, medians):
 * *ta ours, *tm memcpy, *ts streaming. */
static void time_copy3(tess_run *tr, copy_run *cr, int reps, double *ta, double *tm, double *ts)
{
    te_bl_run_fn fn[3] = {run_tess, run_copy, run_stream_copy};
    void *arg[3] = {tr, cr, cr};
    double med[3] = {NAN, NAN, NAN};
    te_bl_time_alternating(3, fn, arg, reps, med);
    *ta = med[0];
    *tm = med[1];
    *ts = med[2];
}

/* The reduction of st split by `width` and its inner part rfactored: the stage of `width`
 * partial results (its last axis, vectorized) reduced over the outer part; NULL on error.
 * The rowop template's rf_lanes (autotune/templates.c) does the same through its generator's
 * error handling; this one uses the public API only, as a user's hand schedule would. */
static te_stage *rf_lanes(te_schedule *s, te_stage *st, int64_t width)
{
    te_iter *ko, *ki;
    if (te_split(st, te_stage_reduce_axis(st, 0), width, &ko, &ki) != TE_OK)
        return NULL;
    te_tensor *rf = te_rfactor(s, te_stage_tensor(st), ki);
    te_stage *srf = rf ? te_schedule_stage(s, rf) : NULL;
    te_iter *lane = srf ? te_stage_axis(srf, te_tensor_ndim(rf) - 1) : NULL, *lo;
    if (!lane || te_reorder(srf, 2, (te_iter *[]){te_stage_reduce_axis(srf, 0), lane}) != TE_OK)
        return NULL;
    /* wider than one vector loop can be: 64-lane parts, unrolled */
    if (width > 64 && (te_split(srf, lane, 64, &lo, &lane) != TE_OK || te_unroll(srf, lo) != TE_OK))
        return NULL;
    if (te_vectorize(srf, lane) != TE_OK)
        return NULL;
    return srf;
}

/* Row operations: every stage computed per row inside the output's (parallel) row loop. */
static int bench_rowop(const char *op, int M, int N, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    char params[64];
    snprintf(params, sizeof params, "m=%d,n=%d", M, N);
    TE_BENCH_CHECK(te_op_build(ctx, op, params, in, &n_in, outs, &n_out) == TE_OK);
    te_tensor *Y = outs[0];
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    TE_BENCH_CHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *row_it = te_stage_axis(sy, 0), *jo, *ji, *jm, *chunk;
    /* Softmax: rows in chunks of 64, the chunks in parallel, each chunk's rows pipelined
     * (below). Not layer norm: its output pass reads the input row and gamma and beta again,
     * and its first pass is the Kahan (or Welford) reduction, the heavy one; pipelined, it was
     * 3-5% slower on a Xeon (the previous row, this row, gamma and beta fill the 48 KiB L1). */
    const int64_t width = N >= 256 ? 128 : N >= 128 ? 64 : 16;
    bool pipe = !strcmp(op, "softmax") && M % 64 == 0 && M >= 128 && N % width == 0 && width > 16;
    /* TESSERA_BENCH_STATS_PF=0/1 turns the reductions' prefetch (below) off or on (A/B). */
    const char *spf = getenv("TESSERA_BENCH_STATS_PF");
    bool stats_pf = spf ? atoi(spf) != 0 : !pipe;
    if (pipe) {
        TE_BENCH_CHECK(te_split(sy, row_it, 64, &chunk, &row_it) == TE_OK);
        TE_BENCH_CHECK(te_parallel(sy, chunk) == TE_OK);
        /* the output's loop in steps of `width`, as the partial sums' loop below runs */
        TE_BENCH_CHECK(te_split(sy, te_stage_axis(sy, 1), width, &jo, &jm) == TE_OK);
        TE_BENCH_CHECK(te_split(sy, jm, 16, &jm, &ji) == TE_OK);
        TE_BENCH_CHECK(te_unroll(sy, jm) == TE_OK);
    } else {
        TE_BENCH_CHECK(te_parallel(sy, row_it) == TE_OK);
        TE_BENCH_CHECK(te_split(sy, te_stage_axis(sy, 1), 16, &jo, &ji) == TE_OK);
    }
    TE_BENCH_CHECK(te_vectorize(sy, ji) == TE_OK);
    TE_BENCH_CHECK(te_stage_nontemporal(sy, true) == TE_OK);
    /* Row reductions: 128 partial results per row (rfactor) in eight vectors, so that eight
     * chains of dependent adds run at once (a Kahan step of layer norm's mean is a chain of
     * four dependent 4-cycle operations; four chains left layer norm at 0.62-0.68 of the
     * streaming copy on a Xeon, eight 0.71-0.78), reduced lane-wise. */
    te_tensor *reds[8];
    int nred = 0;
    for (int q = 0; q < te_schedule_nstages(s) && nred < 8; q++)
        if (te_stage_nreduce(te_schedule_stage_at(s, q)) > 0)
            reds[nred++] = te_stage_tensor(te_schedule_stage_at(s, q));
    te_stage *first_rf = NULL;
    for (int q = 0; q < nred; q++) {
        te_stage *st = te_schedule_stage(s, reds[q]);
        te_stage *srf = rf_lanes(s, st, width);
        TE_BENCH_CHECK(srf);
        if (!first_rf)
            first_rf = srf;
        if (N >= 128) {
            /* The vectors fold into one lane-wise first (a second rfactor), then its 16
             * lanes: a fold of all the partial results one after the other is a chain of 128
             * dependent steps (4 operations each for the Kahan pairs of layer norm), which
             * cost as much as the pass over the row. */
            te_stage *s2 = rf_lanes(s, st, 16);
            TE_BENCH_CHECK(s2 && te_reduce_tree(s2, te_stage_reduce_axis(s2, 0)) == TE_OK);
        }
        /* The partial results fold in straight-line code, so they stay in registers, as a
         * tree (te_reduce_tree): 16 lanes in 4 + 1 dependent steps instead of 16 (layer norm on
         * a Xeon: 0.72-0.77 -> 0.83-0.88 of the streaming copy on one core, with the fold of
         * the vectors above a tree too). */
        TE_BENCH_CHECK(te_reduce_tree(st, te_stage_reduce_axis(st, 0)) == TE_OK);
    }
    /* Every other stage per row, consumers first; elementwise stages vectorized. */
    for (int q = te_schedule_nstages(s) - 2; q >= 0; q--) {
        te_stage *st = te_schedule_stage_at(s, q);
        TE_BENCH_CHECK(te_compute_at(st, sy, row_it) == TE_OK);
        if (te_stage_nreduce(st) == 0 && te_tensor_ndim(te_stage_tensor(st)) == 2 &&
            te_tensor_shape(te_stage_tensor(st))[1] == N) {
            te_iter *a, *b;
            TE_BENCH_CHECK(te_split(st, te_stage_axis(st, 1), 16, &a, &b) == TE_OK);
            TE_BENCH_CHECK(te_vectorize(st, b) == TE_OK);
        }
    }
    /* Software pipelining: each row's output pass runs inside the next row's first pass
     * (the first partial reduction, over the row in steps of `width`), so that the output's
     * streaming stores overlap that row's computation instead of draining alone at the end of
     * every row. Stand-alone on a Xeon: softmax 0.75-0.80 -> 0.84-0.89 of the streaming copy. */
    if (pipe && first_rf)
        TE_BENCH_CHECK(te_pipeline(sy, row_it, first_rf) == TE_OK);
    /* The next row's input, a cache line at a time, into L2, while this row is computed:
     * issued from the last pass over the row that reads the input (at its innermost loop that
     * is not vectorized): the output pass where it reads the input (layer norm), so that the
     * next row's reads overlap this row's streaming stores (which otherwise drain alone:
     * 12.3 -> 13.7 GB/s on one core of a Xeon), else the last pass before it (softmax's
     * exponentials), so that they overlap compute and the next row's first pass finds the
     * row in cache instead of waiting on DRAM. Issued from the first pass, which waits on
     * memory itself, softmax gained 0.56 -> 0.61 of memcpy; from the exponentials, 0.79. */
    /* And a share of the next rows from the passes of partial results over the input (one
     * line per step of their outer loop; the first such pass fetches from the next row, the
     * second from the row after), so that memory does not idle while a row's statistics are
     * computed from the cache. Generated kernels side by side, one core of a Xeon: the Welford
     * layer norm 0.82-0.85 -> 0.86-0.88 of the streaming copy, the Kahan one 0.76-0.77 ->
     * 0.76-0.79 (earlier, with hand-placed prefetches, Welford 0.92-0.93 -> 0.97-0.98). Not
     * for the pipelined softmax, whose first pass already overlaps the previous row's stores:
     * 0.89-0.90 -> 0.65-0.82. The rowop template's `pfr`. */
    int64_t dist = 1;
    for (int q = 0; q < te_schedule_nstages(s) && stats_pf; q++) {
        te_stage *st = te_schedule_stage_at(s, q);
        const te_tensor *pt = te_stage_tensor(st);
        if (te_stage_nreduce(st) == 0 || te_tensor_shape(pt)[te_tensor_ndim(pt) - 1] < 16)
            continue;
        if (te_prefetch_lines(st, te_stage_reduce_axis(st, 0), in[0], row_it, dist, 2, 1) == TE_OK)
            dist++;
        te_ctx_clear_error(ctx);
    }
    bool prefetched = false;
    for (int q = te_schedule_nstages(s) - 1; q >= 0 && !prefetched; q--) {
        te_stage *st = te_schedule_stage_at(s, q);
        int nl = te_stage_nleaves(st);
        te_iter *at = nl >= 2 ? te_stage_leaf(st, nl - 2) : NULL;
        prefetched = at && at != row_it && te_prefetch_level(st, at, in[0], row_it, 1, 2) == TE_OK;
        te_ctx_clear_error(ctx);
    }
    te_target tgt = te_target_host();
    te_module *m = NULL;
    te_tensor *args[TE_OP_MAX_IO + 1];
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    args[n_in] = Y;
    TE_BENCH_CHECK(te_build(s, n_in + 1, args, op, &tgt, &m) == TE_OK);
    size_t mn = (size_t)M * N;
    void *bufs[TE_OP_MAX_IO + 1];
    for (int q = 0; q < n_in; q++)
        bufs[q] = rand_buf((size_t)te_tensor_numel(in[q]), 10u + (unsigned)q);
    float *y = rand_buf(mn, 9), *dst = rand_buf(mn, 8);
    bufs[n_in] = y;
    tess_run tr = {te_module_entry(m), bufs};
    float *sdst = rand_buf(mn, 7);
    copy_run cr = {dst, sdst, bufs[0], mn * sizeof(float)};
    te_bl_set_threads(threads);
    double ta, tm, ts;
    time_copy3(&tr, &cr, reps, &ta, &tm, &ts);
    double bytes = 2.0 * (double)mn * sizeof(float);
    snprintf(out->workload, sizeof out->workload, "%s %dx%d", op, M, N);
    out->threads = threads;
    out->unit = "gbps";
    out->ours = bytes / ta * 1e-9;
    out->seconds = ta;
    set_copy_base(out, bytes, tm, ts, "");
    out->openblas = out->onednn = NAN;
    out->other_impl = "";
    /* The output of the timed runs against the float64 reference interpreter. */
    double *ref = malloc(mn * sizeof *ref);
    out->err = NAN;
    if (ref && te_reference_eval(ctx, n_in, in, (const void *const *)bufs, 1, &Y, &ref) == TE_OK) {
        double worst = 0;
        for (size_t q = 0; q < mn; q++) {
            double e = fabs(y[q] - ref[q]) / fmax(1.0, fabs(ref[q])); /* as te_bl_rel_err */
            worst = e > worst || e != e ? e : worst;
        }
        out->err = worst;
    }
    free(ref);
    for (int q = 0; q <= n_in; q++)
        free(bufs[q]);
    free(dst);
    free(sdst);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

/* ---- gemv: matrix-vector products against a weight matrix ----------------------------------- */

typedef struct {
    int tb, n, k;
    const float *w, *x;
    float *y;
} sgemv_run;

static void run_sgemv(void *p)
{
    sgemv_run *r = p;
    if (r->tb) /* W [n][k]: y = W x */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, r->n, r->k, 1.0f, r->w, r->k, r->x, 1, 0.0f, r->y,
                    1);
    else /* W [k][n]: y = W^T x */
        cblas_sgemv(CblasRowMajor, CblasTrans, r->k, r->n, 1.0f, r->w, r->n, r->x, 1, 0.0f, r->y,
                    1);
}

/* y[1, n] = x[1, k] W, W stored [n][k] (tb, the [out][in] layout of inference engines) or
 * [k][n], scheduled as the gemv space of the gemm template does (autotune/templates_gemv.c):
 * with tb, kl = V lane-wise partial sums along k, 4 output rows per block, k unrolled by 2, the
 * blocks parallel; without, 2-vector column blocks (parallel) accumulated in registers over k
 * unrolled by 4. The figure is the weight bytes per second, beside a copy of the weights
 * (the faster of memcpy and a streaming copy: the copy bandwidth of this run, the row's
 * baseline) and OpenBLAS cblas_sgemv. */
static int bench_gemv(int N, int K, int tb, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    bool regs32;
    const int64_t V = host_lanes(&regs32);
    te_tensor *X = te_placeholder(ctx, "x", TE_F32, 2, (int64_t[]){1, K});
    te_tensor *W = tb ? te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){N, K})
                      : te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *Y = te_op_matmul(ctx, X, W, 0, tb, "y");
    TE_BENCH_CHECK(Y);
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    TE_BENCH_CHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *jo, *ji;
    if (tb) {
        te_iter *ko, *ki;
        TE_BENCH_CHECK(te_split(sy, te_stage_reduce_axis(sy, 0), V, &ko, &ki) == TE_OK);
        te_tensor *rf = te_rfactor(s, Y, ki);
        TE_BENCH_CHECK(rf);
        TE_BENCH_CHECK(te_split(sy, te_stage_axis(sy, 1), 4, &jo, &ji) == TE_OK);
        TE_BENCH_CHECK(te_parallel(sy, jo) == TE_OK);
        te_stage *sr = te_schedule_stage(s, rf);
        TE_BENCH_CHECK(te_compute_at(sr, sy, jo) == TE_OK);
        te_iter *kro, *kri;
        TE_BENCH_CHECK(te_split(sr, te_stage_reduce_axis(sr, 0), 2, &kro, &kri) == TE_OK);
        te_iter *rj = te_stage_axis(sr, 1), *rl = te_stage_axis(sr, 2);
        TE_BENCH_CHECK(te_reorder(sr, 5, (te_iter *[]){kro, kri, rj, te_stage_axis(sr, 0), rl}) ==
                       TE_OK);
        TE_BENCH_CHECK(te_unroll(sr, kri) == TE_OK && te_unroll(sr, rj) == TE_OK);
        TE_BENCH_CHECK(te_vectorize(sr, rl) == TE_OK);
    } else {
        /* W [k][n]: the rows of W streamed (the gemm template's order 3): blocks of 512
         * outputs in parallel, each accumulated in L1 while k runs outermost, 8 rows of W
         * read at once (k split by 8, unrolled inside the output vectors). */
        te_tensor *acc = te_cache_write(s, Y, TE_SCOPE_LOCAL);
        TE_BENCH_CHECK(acc);
        te_iter *jvo, *jvi;
        TE_BENCH_CHECK(te_split(sy, te_stage_axis(sy, 1), 64 * V, &jo, &ji) == TE_OK);
        TE_BENCH_CHECK(te_parallel(sy, jo) == TE_OK);
        TE_BENCH_CHECK(te_split(sy, ji, V, &jvo, &jvi) == TE_OK);
        TE_BENCH_CHECK(te_vectorize(sy, jvi) == TE_OK);
        te_stage *sa = te_schedule_stage(s, acc);
        TE_BENCH_CHECK(te_compute_at(sa, sy, jo) == TE_OK);
        te_iter *ko, *ki, *ajo, *aji;
        TE_BENCH_CHECK(te_split(sa, te_stage_reduce_axis(sa, 0), 8, &ko, &ki) == TE_OK);
        TE_BENCH_CHECK(te_split(sa, te_stage_axis(sa, 1), V, &ajo, &aji) == TE_OK);
        TE_BENCH_CHECK(te_reorder(sa, 5, (te_iter *[]){ko, te_stage_axis(sa, 0), ajo, ki, aji}) ==
                       TE_OK);
        TE_BENCH_CHECK(te_unroll(sa, ki) == TE_OK);
        TE_BENCH_CHECK(te_vectorize(sa, aji) == TE_OK);
    }
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    te_module *m = NULL;
    TE_BENCH_CHECK(te_build(s, 3, (te_tensor *[]){X, W, Y}, "gemv", &tgt, &m) == TE_OK);
    size_t nw = (size_t)N * K;
    float *x = rand_buf((size_t)K, 3), *w = rand_buf(nw, 4), *y = rand_buf((size_t)N, 5);
    float *yb = rand_buf((size_t)N, 6), *dst = rand_buf(nw, 7);
    void *args[3] = {x, w, y};
    tess_run tr = {te_module_entry(m), args};
    float *sdst = rand_buf(nw, 8);
    copy_run cr = {dst, sdst, w, nw * sizeof(float)};
    sgemv_run gr = {tb, N, K, w, x, yb};
    te_bl_set_threads(threads);
    te_bl_run_fn fn[4] = {run_tess, run_copy, run_stream_copy, run_sgemv};
    void *arg[4] = {&tr, &cr, &cr, &gr};
    double med[4];
    TE_BENCH_CHECK(te_bl_time_alternating(4, fn, arg, reps, med) == 0);
    double bytes = (double)nw * sizeof(float); /* the weights, read once */
    snprintf(out->workload, sizeof out->workload, "gemv %dx%d%s", N, K,
             tb ? " W[n][k]" : " W[k][n]");
    out->threads = threads;
    out->unit = "gbps";
    out->ours = bytes / med[0] * 1e-9;
    out->seconds = med[0];
    set_copy_base(out, bytes, med[1], med[2], " of the weights");
    out->openblas = bytes / med[3] * 1e-9;
    out->onednn = NAN;
    snprintf(out->ob_impl, sizeof out->ob_impl, "cblas_sgemv");
    out->other_impl = "openblas cblas_sgemv";
    out->err = te_bl_rel_err(y, yb, (size_t)N);
    free(x);
    free(w);
    free(y);
    free(yb);
    free(dst);
    free(sdst);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

/* ---- --db: the tuning database's best records ------------------------------------------- */

/* The record to use for `threads` threads: one tuned on exactly that many cores if the
 * database has it, else the host's (tuned with all its cores). Fills *lookup. */
static int db_lookup_target(te_db *db, const char *key, int threads, te_target *lookup)
{
    te_target t = te_target_host();
    te_target one = t;
    one.num_cores = threads;
    te_db_target dbt;
    char storage[1024];
    te_db_trial_list *l = NULL;
    int found = te_tuner_db_target(&one, &dbt, storage, sizeof storage) == TE_OK &&
                te_db_best(db, key, &dbt, 0, &l) == TE_OK && l && l->n;
    te_db_trial_list_free(l);
    *lookup = found ? one : t;
    if (found)
        return 1;
    l = NULL;
    found = te_tuner_db_target(&t, &dbt, storage, sizeof storage) == TE_OK &&
            te_db_best(db, key, &dbt, 0, &l) == TE_OK && l && l->n;
    te_db_trial_list_free(l);
    return found;
}

int te_bench_db_module(te_db *db, te_ctx *ctx, const char *op, const char *params, int threads,
                       te_bench_db_kernel *k)
{
    memset(k, 0, sizeof *k);
    te_tensor *outs[TE_OP_MAX_IO];
    TE_BENCH_CHECK(te_op_build(ctx, op, params, k->args, &k->n_in, outs, &k->n_out) == TE_OK);
    for (int q = 0; q < k->n_out; q++)
        k->args[k->n_in + q] = outs[q];
    TE_BENCH_CHECK(te_op_params_parse(ctx, params, &k->kv) == TE_OK);
    TE_BENCH_CHECK(te_op_workload_key(ctx, te_op_lookup(op), &k->kv, k->key, sizeof k->key) > 0);
    te_target lookup;
    if (!db_lookup_target(db, k->key, threads, &lookup)) {
        fprintf(stderr, "  no record for %s in the database; skipped\n", k->key);
        return 1;
    }
    te_schedule *s = NULL;
    int from_db = 0;
    char why[512];
    TE_BENCH_CHECK(te_tuner_best_schedule(ctx, db, k->key, k->n_out, outs, &lookup, &s, &from_db,
                                          why, sizeof why) == TE_OK);
    if (!from_db)
        fprintf(stderr, "tessera: warning: %s: %s; using the default schedule\n", k->key, why);
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    TE_BENCH_CHECK(te_build(s, k->n_in + k->n_out, k->args, op, &tgt, &k->m) == TE_OK);
    /* The tensor intrinsic the schedule calls, if any (its trace's tensorize line). */
    char a[64], b[64], c[64];
    for (const char *line = te_schedule_trace(s); line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (sscanf(line, " tensorize %63s %63s %63s", a, b, c) == 3)
            snprintf(k->intrin, sizeof k->intrin, "%s", c);
    return 0;
}

/* Builds workload (op, params) from the database's best record and times it beside the
 * workload's baseline. Returns 0, or 1 when the database has no record (row not filled). */
static int bench_db(te_db *db, const char *op, const char *params, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    te_bench_db_kernel dk;
    if (te_bench_db_module(db, ctx, op, params, threads, &dk)) {
        te_ctx_free(ctx);
        return 1;
    }
    te_tensor **args = dk.args, **outs = dk.args + dk.n_in;
    int n_in = dk.n_in, n_out = dk.n_out;
    te_module *m = dk.m;
    const te_op_params *kv = &dk.kv;
    void *bufs[2 * TE_OP_MAX_IO];
    for (int q = 0; q < n_in + n_out; q++)
        bufs[q] = rand_buf((size_t)te_tensor_numel(args[q]), 20u + (unsigned)q);
    int64_t M = 0, N = 0, K = 0, NB = 0, TB = 0;
    for (int i = 0; i < kv->n; i++) {
        if (!strcmp(kv->p[i].key, "m"))
            M = kv->p[i].ival;
        else if (!strcmp(kv->p[i].key, "n"))
            N = kv->p[i].ival;
        else if (!strcmp(kv->p[i].key, "k"))
            K = kv->p[i].ival;
        else if (!strcmp(kv->p[i].key, "nb"))
            NB = kv->p[i].ival;
        else if (!strcmp(kv->p[i].key, "trans_b"))
            TB = kv->p[i].ival;
    }
    size_t mn = (size_t)te_tensor_numel(outs[0]);
    float *ref = rand_buf(mn, 40);
    tess_run tr = {te_module_entry(m), bufs};
    int is_mm = !strcmp(op, "matmul"), is_gate = !strcmp(op, "mlp_gate");
    if (is_mm || is_gate) {
        /* Weights packed once (nb): the kernel reads the panels, the baselines the weights
         * they were packed from. */
        float *w[2] = {bufs[1], is_gate ? bufs[2] : NULL};
        for (int q = 0; NB && q < 1 + is_gate; q++) {
            w[q] = rand_buf((size_t)K * N, 50u + (unsigned)q);
            TE_BENCH_CHECK(te_op_pack_panels(w[q], K, N, (int)TB, NB, bufs[1 + q]) == TE_OK);
        }
        te_bl_shape sh = {(int)M, (int)N, (int)K, 0, (int)TB, is_gate};
        measure_products(&tr, bufs[n_in], &sh, bufs[0], w[0], w[1], te_tuner_flops(n_out, outs),
                         threads, reps, out);
        for (int q = 0; NB && q < 1 + is_gate; q++)
            free(w[q]);
    } else {
        float *sdst = rand_buf(mn, 41);
        copy_run cr = {ref, sdst, bufs[0], mn * sizeof(float)};
        te_bl_set_threads(threads);
        double ta, tm, ts;
        time_copy3(&tr, &cr, reps, &ta, &tm, &ts);
        double bytes = 2.0 * (double)mn * sizeof(float);
        out->threads = threads;
        out->unit = "gbps";
        out->ours = bytes / ta * 1e-9;
        out->seconds = ta;
        set_copy_base(out, bytes, tm, ts, "");
        out->openblas = out->onednn = NAN;
        out->other_impl = "";
        out->err = 0;
        free(sdst);
    }
    if (is_mm)
        snprintf(out->workload, sizeof out->workload, "matmul %dx%dx%d%s", (int)M, (int)N, (int)K,
                 NB ? " packed" : "");
    else if (is_gate)
        snprintf(out->workload, sizeof out->workload, "mlp_gate %dx%dx%d%s", (int)M, (int)K, (int)N,
                 NB ? " packed" : "");
    else
        snprintf(out->workload, sizeof out->workload, "%.30s %dx%d", op,
                 (int)te_tensor_shape(outs[0])[0], (int)te_tensor_shape(outs[0])[1]);
    for (int q = 0; q < n_in + n_out; q++)
        free(bufs[q]);
    free(ref);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

/* The library operator a row of work kind `kind` computes, for --roofline. */
static void row_op(row *r, const char *name, int kind, int m, int n, int k, int nb)
{
    if (kind >= 6) { /* low precision: no library operator with this packed layout */
        r->op[0] = 0;
    } else if (kind == 3) {
        snprintf(r->op, sizeof r->op, "attention");
        snprintf(r->params, sizeof r->params, "batch=1,heads=%d,lq=%d,lk=%d,dh=%d", n, m, m, k);
    } else if (kind >= 4) { /* gemv: kind 4 stores the weights [n][k] */
        snprintf(r->op, sizeof r->op, "matmul");
        snprintf(r->params, sizeof r->params, "m=1,n=%d,k=%d,trans_b=%d", n, k, kind == 4);
    } else {
        snprintf(r->op, sizeof r->op, "%s", name);
        if (kind == 2)
            snprintf(r->params, sizeof r->params, "m=%d,n=%d", m, n);
        else if (nb)
            snprintf(r->params, sizeof r->params, "m=%d,n=%d,k=%d,nb=%d", m, n, k, nb);
        else
            snprintf(r->params, sizeof r->params, "m=%d,n=%d,k=%d", m, n, k);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera bench [--json] [--reps N] [--threads LIST] [--only NAME] [--quick] "
            "[--db FILE] [--report FILE] [--roofline [FILE]]\n"
            "       tessera bench --graph GRAPH [--db FILE] [--threads LIST] [--json] (--help)\n\n"
            "Runs hand-scheduled Tessera kernels beside the strongest baselines on this\n"
            "machine (matmul, the MLP gate: OpenBLAS with the kernels that fit the CPU and\n"
            "oneDNN's matmul, plain and with packed weights; fused attention beside the\n"
            "unfused path on each library: matmul, a vectorized softmax, matmul), beside\n"
            "the copy bandwidth (the faster of memcpy and a streaming copy: softmax, layer\n"
            "norm; gemv, the m = 1 products against [n][k] and [k][n] weights, as a fraction\n"
            "of a copy of the weights, with OpenBLAS cblas_sgemv\n"
            "beside it) and, where the CPU has the instructions, bf16 and int8 matmuls\n"
            "beside oneDNN's, in one process, alternating all of them, and prints medians,\n"
            "which kernels each baseline ran, and ratios to the strongest (and to each\n"
            "library). When OpenBLAS runs kernels narrower than the CPU's vectors (its own\n"
            "choice or the caller's OPENBLAS_CORETYPE), the command re-runs itself once\n"
            "with the fitting OPENBLAS_CORETYPE and says so. With --db, the\n"
            "kernels are built from the tuning database's best records instead (workloads\n"
            "without a record are skipped).\n\n"
            "  --plugin LIB.so load the operators of a plugin (repeatable; also the\n"
            "                  colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
            "  --db FILE       benchmark the best tuned schedules of this database\n"
            "  --json          print a JSON list of rows instead of a table\n"
            "  --reps N        timed repetitions per kernel (default 9)\n"
            "  --threads LIST  comma-separated thread counts (default 1,2)\n"
            "  --only NAME     run only workloads whose name starts with NAME\n"
            "  --attn-seq N    attention at sequence length N only (default 512, 1024, 2048;\n"
            "                  a small N checks that the benchmark works)\n"
            "  --quick         one repetition, gemv rows at 1/8 of their n (checks that it\n"
            "                  runs; not a measurement)\n"
            "  --report FILE   also write the results as a Markdown report (the machine, its\n"
            "                  measured FMA peak and copy bandwidth, every row with the\n"
            "                  fraction of peak or bandwidth it reaches and the highest ratio\n"
            "                  the peak allows against its baseline): docs/PERFORMANCE.md\n"
            "  --roofline [FILE]  also place every row under the machine's roofs (peaks from\n"
            "                  `tessera target --measure` in the database, else measured now):\n"
            "                  a table, and the plot as SVG in FILE (default roofline.svg)\n");
}

int te_cmd_bench(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--graph")) /* tools/bench_graph.c */
        return te_cmd_bench_graph(argc - 1, argv + 1);
    bool json = false, quick = false;
    int reps = 9, threads[8] = {1, 2}, nthreads = 2;
    const char *only = NULL, *db_path = NULL, *report = NULL, *roofline = NULL;
    int attn_seq = 0;
    enum {
        O_HELP,
        O_JSON,
        O_REPS,
        O_THREADS,
        O_QUICK,
        O_ONLY,
        O_ATTN_SEQ,
        O_DB,
        O_REPORT,
        O_ROOFLINE
    };
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {
        {"help", 'h', TE_CLI_FLAG, O_HELP},        {"json", 0, TE_CLI_FLAG, O_JSON},
        {"reps", 0, TE_CLI_VALUE, O_REPS},         {"threads", 0, TE_CLI_VALUE, O_THREADS},
        {"quick", 0, TE_CLI_FLAG, O_QUICK},        {"only", 0, TE_CLI_VALUE, O_ONLY},
        {"attn-seq", 0, TE_CLI_VALUE, O_ATTN_SEQ}, {"db", 0, TE_CLI_VALUE, O_DB},
        {"report", 0, TE_CLI_VALUE, O_REPORT},     {"roofline", 0, TE_CLI_OPTIONAL, O_ROOFLINE},
        {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},     {0}};
    te_cli_parser cp;
    te_cli_parser_init(&cp, "bench", argc, argv, opts);
    bool roof_pending = false; /* a bare --roofline takes the next word as its file */
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        const char *v = cp.value;
        bool was_pending = roof_pending;
        roof_pending = false;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (was_pending) {
                roofline = v;
                break;
            }
            return te_cli_usage_error(&cp, "unexpected argument '%s'", v);
        case O_HELP:
            usage(stdout);
            return 0;
        case O_JSON:
            json = true;
            break;
        case O_REPS:
            reps = atoi(v);
            if (reps < 1 || reps > 1000) {
                fprintf(stderr, "tessera bench: --reps must be in [1, 1000]\n");
                return 2;
            }
            break;
        case O_THREADS:
            nthreads = 0;
            for (const char *q = v; *q && nthreads < 8;) {
                char *end;
                long t = strtol(q, &end, 10);
                if (end == q || t < 1 || t > 256 || (*end && *end != ',')) {
                    fprintf(stderr, "tessera bench: --threads takes a list like 1,2\n");
                    return 2;
                }
                threads[nthreads++] = (int)t;
                q = *end ? end + 1 : end;
            }
            break;
        case O_QUICK:
            quick = true;
            reps = 1;
            break;
        case O_ONLY:
            only = v;
            break;
        case O_ATTN_SEQ:
            attn_seq = atoi(v);
            if (attn_seq < 1 || attn_seq > 65536) {
                fprintf(stderr, "tessera bench: --attn-seq must be in [1, 65536]\n");
                return 2;
            }
            break;
        case O_DB:
            db_path = v;
            break;
        case O_REPORT:
            report = v;
            break;
        case O_ROOFLINE:
            roofline = v ? v : "roofline.svg";
            roof_pending = !v;
            break;
        }
    }
    if (te_cli_plugins_load("bench", &plugins))
        return 1;
    /* Before anything runs: OpenBLAS with the kernels that fit this CPU (may re-exec). */
    te_bl_openblas_select(te_cli_argv);
    const char *dn_note = NULL, *load_note = te_bl_load_note();
    te_bl_onednn_load(&dn_note);
    if (json)
        fprintf(stderr, "%s\n%s\n%s%s", te_bl_openblas_note(), dn_note, load_note,
                *load_note ? "\n" : "");
    row rows[64];
    memset(rows, 0, sizeof rows);
    int n = 0;
    te_db *db = NULL;
    if (db_path) {
        te_db_options ro = {TE_DB_READONLY, NULL, 0};
        if (te_db_open(db_path, &ro, &db) != TE_OK) {
            fprintf(stderr, "tessera bench: %s: %s\n", db_path, te_db_errmsg(db));
            te_db_close(db);
            return 1;
        }
    }
    /* nb: the products' weights packed once in column panels of nb (the rows named
     * "packed"; oneDNN's packed weights are the baseline of every product row). The hand
     * MLP gate is always packed; with --db its rows are the records of nb 0 and 64. */
    static const struct {
        const char *name;
        int kind, m, n, k, nb;
    } work[] = {
        {"matmul", 0, 1024, 1024, 1024, 0},
        {"matmul", 0, 1024, 1024, 1024, 64},
        {"matmul", 0, 512, 3072, 768, 0},
        {"matmul", 0, 512, 3072, 768, 64},
        {"mlp_gate", 1, 256, 2816, 1024, 0},
        {"mlp_gate", 1, 256, 2816, 1024, 64},
        {"softmax", 2, 4096, 4096, 0, 0},
        {"layer_norm", 2, 4096, 4096, 0, 0},
        {"layer_norm_welford", 2, 4096, 4096, 0, 0},
        /* Self-attention, 12 heads of 64, batch 1: m is the sequence length. */
        {"attention", 3, 512, 12, 64, 0},
        {"attention", 3, 1024, 12, 64, 0},
        {"attention", 3, 2048, 12, 64, 0},
        /* gemv (m = 1): kind 4 stores the weights [n][k], kind 5 [k][n]. */
        {"gemv", 4, 1, 768, 768, 0},
        {"gemv", 4, 1, 2048, 768, 0},
        {"gemv", 4, 1, 768, 2048, 0},
        {"gemv", 4, 1, 32000, 768, 0},
        {"gemv", 5, 1, 768, 768, 0},
        {"gemv", 5, 1, 2048, 768, 0},
        {"gemv", 5, 1, 768, 2048, 0},
        {"gemv", 5, 1, 32000, 768, 0},
        /* Low precision on the CPU's matrix instructions (tools/bench_lowp.c). */
        {"matmul_bf16", 6, 1024, 1024, 1024, 0},
        {"matmul_bf16", 6, 512, 3072, 768, 0},
        {"matmul_u8s8", 7, 1024, 1024, 1024, 0},
        {"mlp_gate_bf16", 8, 256, 2816, 1024, 0},
    };
    bool any = !only;
    for (size_t w = 0; w < sizeof work / sizeof work[0] && !any; w++)
        any = strncmp(work[w].name, only, strlen(only)) == 0;
    if (!any) {
        fprintf(stderr,
                "tessera bench: --only %s: no workload's name starts with it; the names:", only);
        for (size_t w = 0; w < sizeof work / sizeof work[0]; w++)
            if (!w || strcmp(work[w].name, work[w - 1].name))
                fprintf(stderr, " %s", work[w].name);
        fprintf(stderr, "\n");
        te_db_close(db);
        return 2;
    }
    for (size_t w = 0; w < sizeof work / sizeof work[0]; w++) {
        if (only && strncmp(work[w].name, only, strlen(only)))
            continue;
        if (work[w].kind == 3 && attn_seq && w > 0 && work[w - 1].kind == 3)
            continue; /* --attn-seq: one set of attention rows, at that length */
        for (int t = 0; t < nthreads && n < 64; t++) {
            if (work[w].kind == 3) {
                te_bench_attention(db, attn_seq ? attn_seq : work[w].m, work[w].n, work[w].k,
                                   threads[t], reps, &rows[n]);
            } else if (db && (work[w].kind == 4 || work[w].kind == 5 || work[w].kind == 8)) {
                continue; /* gemv and the bf16 gate: hand schedules only */
            } else if (work[w].kind >= 6) {
                static const te_bench_lowp_kind lk[] = {TE_BENCH_LOWP_BF16, TE_BENCH_LOWP_U8S8,
                                                        TE_BENCH_LOWP_GATE_BF16};
                if (te_bench_lowp(lk[work[w].kind - 6], work[w].m, work[w].n, work[w].k, threads[t],
                                  reps, db, &rows[n]) != 0)
                    continue;
            } else if (db) {
                char params[96];
                if (work[w].kind == 2)
                    snprintf(params, sizeof params, "m=%d,n=%d", work[w].m, work[w].n);
                else
                    snprintf(params, sizeof params, "m=%d,n=%d,k=%d", work[w].m, work[w].n,
                             work[w].k);
                if (work[w].nb)
                    snprintf(params + strlen(params), sizeof params - strlen(params), ",nb=%d",
                             work[w].nb);
                if (bench_db(db, work[w].name, params, threads[t], reps, &rows[n]) != 0)
                    continue;
            } else if (work[w].kind == 0) {
                bench_matmul(work[w].m, work[w].n, work[w].k, work[w].nb > 0, threads[t], reps,
                             &rows[n]);
            } else if (work[w].kind == 1) {
                if (!work[w].nb)
                    continue; /* the hand gate is packed: one row */
                bench_mlp_gate(work[w].m, work[w].n, work[w].k, threads[t], reps, &rows[n]);
            } else if (work[w].kind >= 4)
                bench_gemv(quick ? work[w].n / 8 : work[w].n, work[w].k, work[w].kind == 4,
                           threads[t], reps, &rows[n]);
            else
                bench_rowop(work[w].name, work[w].m, work[w].n, threads[t], reps, &rows[n]);
            if (!json)
                fprintf(stderr, "  measured %s, %d thread(s)\n", rows[n].workload, threads[t]);
            row_op(&rows[n], work[w].name, work[w].kind,
                   work[w].kind == 3 && attn_seq ? attn_seq : work[w].m,
                   quick && work[w].kind >= 4 ? work[w].n / 8 : work[w].n, work[w].k,
                   work[w].kind == 0 || work[w].kind == 1 ? work[w].nb : 0);
            n++;
        }
    }
    if (json) {
        printf("[");
        for (int r = 0; r < n; r++) {
            const row *w = &rows[r];
            printf("%s\n  {\"workload\": ", r ? "," : "");
            jstr(w->workload);
            printf(", \"threads\": %d, \"%s\": %.3f, \"baseline\": ", w->threads, w->unit, w->ours);
            jstr(w->base_name);
            printf(", \"baseline_impl\": ");
            jstr(w->base_impl);
            printf(", \"baseline_%s\": ", w->unit);
            jnum(w->base, "%.3f");
            printf(", \"ratio\": ");
            jnum(w->ours / w->base, "%.4f");
            if (*w->ob_impl) {
                printf(", \"openblas_impl\": ");
                jstr(w->ob_impl);
            }
            if (*w->dn_impl) {
                printf(", \"onednn_impl\": ");
                jstr(w->dn_impl);
            }
            /* Each library's figure when it was measured (and trusted); both ratios when both
             * were (with one, `ratio` is already the ratio to it). */
            if (isfinite(w->openblas))
                printf(", \"openblas_%s\": %.3f", w->unit, w->openblas);
            if (isfinite(w->onednn))
                printf(", \"onednn_%s\": %.3f", w->unit, w->onednn);
            if (isfinite(w->openblas) && isfinite(w->onednn))
                printf(", \"ratio_openblas\": %.4f, \"ratio_onednn\": %.4f", w->ours / w->openblas,
                       w->ours / w->onednn);
            printf(", \"max_rel_err\": ");
            jnum(w->err, "%.3g");
            if (*w->note) {
                printf(", \"note\": ");
                jstr(w->note);
            }
            printf("}");
        }
        printf("\n]\n");
    } else {
        printf("%-30s %7s %9s %9s %6s %10s %8s  %-7s  %s\n", "workload", "threads", "tessera",
               "baseline", "ratio", "x OpenBLAS", "x oneDNN", "unit", "baseline: kernels");
        for (int r = 0; r < n; r++) {
            const row *w = &rows[r];
            char rb[16], ro[16], rd[16], bb[16];
            fmt_ratio(rb, sizeof rb, w->ours / w->base);
            fmt_ratio(ro, sizeof ro, w->ours / w->openblas);
            fmt_ratio(rd, sizeof rd, w->ours / w->onednn);
            snprintf(bb, sizeof bb, isfinite(w->base) ? "%.1f" : "-", w->base);
            printf("%-30s %7d %9.1f %9s %6s %10s %8s  %-7s  %s: %s%s%s%s\n", w->workload,
                   w->threads, w->ours, bb, rb, ro, rd,
                   !strcmp(w->unit, "gbps") ? "GB/s" : "GFLOP/s", w->base_name, w->base_impl,
                   *w->other_impl ? " (other: " : "", w->other_impl, *w->other_impl ? ")" : "");
            if (*w->note)
                printf("%-30s %7s   %s\n", "", "", w->note);
        }
        printf(
            "(medians of %d alternating repetitions; ratio: to the strongest baseline)\n%s\n%s\n",
            reps, te_bl_openblas_note(), dn_note);
        if (*load_note)
            printf("%s\n", load_note);
    }
    te_db_close(db);
    if (report && te_bench_write_report(report, rows, n, threads, nthreads, reps,
                                        te_bl_openblas_note(), dn_note, load_note, db_path) != 0)
        return 1;
    /* With --json, stdout holds only the JSON list. */
    if (roofline && te_roofline_bench(rows, n, db_path, roofline, json ? stderr : stdout) != 0)
        return 1;
    return 0;
}
