/*
 * `tessera bench`: hand-scheduled Tessera kernels beside OpenBLAS (or memcpy for memory-bound
 * row operations), measured in the same process, alternating the two, medians over repeats.
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
#include "tools/cli.h"

void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);

typedef struct {
    char workload[64];
    int threads;
    const char *unit; /* "gflops" or "gbps" */
    double ours, base;
    const char *base_name;
    double err;
} row;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*run_fn)(void *arg);

/* Runs a and b alternately `reps` times after a warm-up; medians in seconds. */
static void time_pair(run_fn a, void *pa, run_fn b, void *pb, int reps, double *ta, double *tb)
{
    double *xa = malloc(sizeof(double) * (size_t)reps), *xb = malloc(sizeof(double) * (size_t)reps);
    a(pa);
    b(pb);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        a(pa);
        double t1 = now();
        b(pb);
        double t2 = now();
        xa[r] = t1 - t0;
        xb[r] = t2 - t1;
    }
    qsort(xa, (size_t)reps, sizeof(double), cmp_double);
    qsort(xb, (size_t)reps, sizeof(double), cmp_double);
    *ta = xa[reps / 2];
    *tb = xb[reps / 2];
    free(xa);
    free(xb);
}

static float *rand_buf(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
    }
    return p;
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(e <= w))
            w = e;
    }
    return w;
}

#define BCHECK(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "tessera bench: %s:%d: %s\n", __FILE__, __LINE__, te_ctx_errmsg(ctx)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

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
    BCHECK(sp && te_parallel(sp, te_stage_axis(sp, 0)) == TE_OK);
    BCHECK(te_vectorize(sp, te_stage_axis(sp, 2)) == TE_OK);
}

/* The register tile of one product: an mr x nr accumulator in registers, computed inside
 * loop `at` of the consumer stage. */
static void sched_tile(te_ctx *ctx, te_schedule *s, te_tensor *G, te_stage *consumer, te_iter *at,
                       bool inline_copy)
{
    te_tensor *acc = te_cache_write(s, G, TE_SCOPE_LOCAL);
    BCHECK(acc);
    if (inline_copy)
        BCHECK(te_compute_inline(te_schedule_stage(s, G)) == TE_OK);
    te_stage *sa = te_schedule_stage(s, acc);
    BCHECK(te_compute_at(sa, consumer, at) == TE_OK);
    te_iter *i = te_stage_axis(sa, 0), *j = te_stage_axis(sa, 1), *k = te_stage_reduce_axis(sa, 0);
    te_iter *ko, *ki;
    BCHECK(te_split(sa, k, 4, &ko, &ki) == TE_OK);
    BCHECK(te_reorder(sa, 4, (te_iter *[]){ko, ki, i, j}) == TE_OK);
    BCHECK(te_unroll(sa, ki) == TE_OK);
    BCHECK(te_unroll(sa, i) == TE_OK);
    BCHECK(te_vectorize(sa, j) == TE_OK);
}

/* Output tiles mr x nr; column panels in parallel, rows inside. Returns the row-tile loop. */
static te_iter *sched_output(te_ctx *ctx, te_stage *sy, int64_t mr, int64_t nr)
{
    te_iter *io, *jo, *ii, *ji;
    BCHECK(te_tile(sy, te_stage_axis(sy, 0), te_stage_axis(sy, 1), mr, nr, &io, &jo, &ii, &ji) ==
           TE_OK);
    BCHECK(te_reorder(sy, 2, (te_iter *[]){jo, io}) == TE_OK);
    BCHECK(te_parallel(sy, jo) == TE_OK);
    BCHECK(te_unroll(sy, ii) == TE_OK);
    BCHECK(te_vectorize(sy, ji) == TE_OK);
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

typedef struct {
    int M, N, K;
    const float *A, *B;
    float *C;
} sgemm_run;

static void run_sgemm(void *p)
{
    sgemm_run *r = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r->M, r->N, r->K, 1.0f, r->A, r->K, r->B,
                r->N, 0.0f, r->C, r->N);
}

static void set_threads(int t)
{
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
}

static int bench_matmul(int M, int N, int K, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    const int64_t mr = 6, nr = 32;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *Bp = pack_panels(ctx, B, nr, "B_packed");
    te_tensor *C = matmul_packed(ctx, A, Bp, N, "C");
    BCHECK(C);
    te_tensor_set_tag(ctx, C, "matmul");
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    BCHECK(s);
    sched_pack(ctx, s, Bp);
    te_stage *sc = te_schedule_stage(s, C);
    te_tensor *acc = te_cache_write(s, C, TE_SCOPE_LOCAL);
    BCHECK(acc);
    te_iter *io = sched_output(ctx, sc, mr, nr);
    te_stage *sa = te_schedule_stage(s, acc);
    BCHECK(te_compute_at(sa, sc, io) == TE_OK);
    te_iter *i = te_stage_axis(sa, 0), *j = te_stage_axis(sa, 1), *k = te_stage_reduce_axis(sa, 0);
    te_iter *ko, *ki;
    BCHECK(te_split(sa, k, 4, &ko, &ki) == TE_OK);
    BCHECK(te_reorder(sa, 4, (te_iter *[]){ko, ki, i, j}) == TE_OK);
    BCHECK(te_unroll(sa, ki) == TE_OK);
    BCHECK(te_unroll(sa, i) == TE_OK);
    BCHECK(te_vectorize(sa, j) == TE_OK);
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    te_module *m = NULL;
    BCHECK(te_build(s, 3, (te_tensor *[]){A, B, C}, "matmul", &tgt, &m) == TE_OK);
    float *a = rand_buf((size_t)M * K, 1), *b = rand_buf((size_t)K * N, 2);
    float *c = rand_buf((size_t)M * N, 3), *c2 = rand_buf((size_t)M * N, 4);
    void *args[] = {a, b, c};
    tess_run tr = {te_module_entry(m), args};
    sgemm_run sr = {M, N, K, a, b, c2};
    set_threads(threads);
    double ta, tb;
    time_pair(run_tess, &tr, run_sgemm, &sr, reps, &ta, &tb);
    double flop = 2.0 * M * N * K;
    snprintf(out->workload, sizeof out->workload, "matmul %dx%dx%d", M, N, K);
    out->threads = threads;
    out->unit = "gflops";
    out->ours = flop / ta * 1e-9;
    out->base = flop / tb * 1e-9;
    out->base_name = "openblas sgemm";
    out->err = rel_err(c, c2, (size_t)M * N);
    free(a);
    free(b);
    free(c);
    free(c2);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

typedef struct {
    int M, N, K;
    const float *X, *W1, *W3;
    float *G, *U, *Y;
} gate_run;

static void run_gate_blas(void *p)
{
    gate_run *r = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r->M, r->N, r->K, 1.0f, r->X, r->K,
                r->W1, r->N, 0.0f, r->G, r->N);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r->M, r->N, r->K, 1.0f, r->X, r->K,
                r->W3, r->N, 0.0f, r->U, r->N);
    size_t n = (size_t)r->M * r->N;
#pragma omp parallel for schedule(static)
    for (size_t q = 0; q < n; q++) {
        float g = r->G[q];
        r->Y[q] = g / (1.0f + expf(-g)) * r->U[q];
    }
}

/* Builds the packing kernel Wp = pack(W) for weights of shape [K, N]. */
static te_module *build_pack(int K, int N, int64_t nr)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *W = te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *P = pack_panels(ctx, W, nr, "W_packed");
    te_schedule *s = te_schedule_create(ctx, 1, &P);
    BCHECK(s);
    sched_pack(ctx, s, P);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    BCHECK(te_build(s, 2, (te_tensor *[]){W, P}, "pack_panels", &tgt, &m) == TE_OK);
    te_ctx_free(ctx);
    return m;
}

/* The fused gate over weights packed once, as an inference engine does at load time; the
 * packing is not timed (as in ANCHORS.md's hand-fused kernel). */
static int bench_mlp_gate(int M, int N, int K, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    const int64_t mr = 8, nr = 32, np = (N + nr - 1) / nr; /* 2 x 8 x 2 accumulators: 32 zmm */
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *P1 = te_placeholder(ctx, "W1_packed", TE_F32, 3, (int64_t[]){np, K, nr});
    te_tensor *P3 = te_placeholder(ctx, "W3_packed", TE_F32, 3, (int64_t[]){np, K, nr});
    te_tensor *G = matmul_packed(ctx, X, P1, N, "G"), *U = matmul_packed(ctx, X, P3, N, "U");
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    te_expr *g = TE_AT(ctx, G, i, j);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                              te_mul(ctx, te_mul(ctx, g, te_sigmoid(ctx, g)), TE_AT(ctx, U, i, j)));
    BCHECK(Y);
    te_tensor_set_tag(ctx, Y, "mlp_gate");
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    BCHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *io = sched_output(ctx, sy, mr, nr);
    sched_tile(ctx, s, G, sy, io, true);
    sched_tile(ctx, s, U, sy, io, true);
    te_target tgt = te_target_host();
    te_module *m = NULL, *pack = build_pack(K, N, nr);
    BCHECK(te_build(s, 4, (te_tensor *[]){X, P1, P3, Y}, "mlp_gate", &tgt, &m) == TE_OK);
    size_t nk = (size_t)M * K, kn = (size_t)K * N, mn = (size_t)M * N;
    float *x = rand_buf(nk, 1), *w1 = rand_buf(kn, 2), *w3 = rand_buf(kn, 3);
    float *y = rand_buf(mn, 4), *y2 = rand_buf(mn, 5), *gb = rand_buf(mn, 6), *ub = rand_buf(mn, 7);
    size_t np_elems = (size_t)np * K * nr;
    float *p1 = rand_buf(np_elems, 11), *p3 = rand_buf(np_elems, 12);
    BCHECK(te_module_run(pack, (void *[]){w1, p1}) == TE_OK);
    BCHECK(te_module_run(pack, (void *[]){w3, p3}) == TE_OK);
    void *args[] = {x, p1, p3, y};
    tess_run tr = {te_module_entry(m), args};
    gate_run gr = {M, N, K, x, w1, w3, gb, ub, y2};
    set_threads(threads);
    double ta, tb;
    time_pair(run_tess, &tr, run_gate_blas, &gr, reps, &ta, &tb);
    double flop = 4.0 * M * N * K;
    snprintf(out->workload, sizeof out->workload, "mlp_gate %dx%dx%d packed", M, K, N);
    out->threads = threads;
    out->unit = "gflops";
    out->ours = flop / ta * 1e-9;
    out->base = flop / tb * 1e-9;
    out->base_name = "2x sgemm + expf pass";
    out->err = rel_err(y, y2, mn);
    free(x);
    free(w1);
    free(w3);
    free(y);
    free(y2);
    free(gb);
    free(ub);
    free(p1);
    free(p3);
    te_module_free(pack);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

typedef struct {
    void *dst;
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

/* Row operations: every stage computed per row inside the output's (parallel) row loop. */
static int bench_rowop(const char *op, int M, int N, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    char params[64];
    snprintf(params, sizeof params, "m=%d,n=%d", M, N);
    BCHECK(te_op_build(ctx, op, params, in, &n_in, outs, &n_out) == TE_OK);
    te_tensor *Y = outs[0];
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    BCHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *row_it = te_stage_axis(sy, 0), *jo, *ji;
    BCHECK(te_parallel(sy, row_it) == TE_OK);
    BCHECK(te_split(sy, te_stage_axis(sy, 1), 16, &jo, &ji) == TE_OK);
    BCHECK(te_vectorize(sy, ji) == TE_OK);
    BCHECK(te_stage_nontemporal(sy, true) == TE_OK);
    /* Row reductions: 16 partial results per row (rfactor), reduced lane-wise. */
    te_tensor *reds[8];
    int nred = 0;
    for (int q = 0; q < te_schedule_nstages(s) && nred < 8; q++)
        if (te_stage_nreduce(te_schedule_stage_at(s, q)) > 0)
            reds[nred++] = te_stage_tensor(te_schedule_stage_at(s, q));
    for (int q = 0; q < nred; q++) {
        te_stage *st = te_schedule_stage(s, reds[q]);
        te_iter *ko, *ki;
        BCHECK(te_split(st, te_stage_reduce_axis(st, 0), 16, &ko, &ki) == TE_OK);
        te_tensor *rf = te_rfactor(s, reds[q], ki);
        BCHECK(rf);
        te_stage *srf = te_schedule_stage(s, rf);
        te_iter *lane = te_stage_axis(srf, te_tensor_ndim(rf) - 1);
        BCHECK(te_reorder(srf, 2, (te_iter *[]){te_stage_reduce_axis(srf, 0), lane}) == TE_OK);
        BCHECK(te_vectorize(srf, lane) == TE_OK);
        /* The 16 partial results fold in straight-line code, so they stay in a register. */
        BCHECK(te_unroll(st, te_stage_reduce_axis(st, 0)) == TE_OK);
    }
    /* Every other stage per row, consumers first; elementwise stages vectorized. */
    for (int q = te_schedule_nstages(s) - 2; q >= 0; q--) {
        te_stage *st = te_schedule_stage_at(s, q);
        BCHECK(te_compute_at(st, sy, row_it) == TE_OK);
        if (te_stage_nreduce(st) == 0 && te_tensor_ndim(te_stage_tensor(st)) == 2 &&
            te_tensor_shape(te_stage_tensor(st))[1] == N) {
            te_iter *a, *b;
            BCHECK(te_split(st, te_stage_axis(st, 1), 16, &a, &b) == TE_OK);
            BCHECK(te_vectorize(st, b) == TE_OK);
        }
    }
    te_target tgt = te_target_host();
    te_module *m = NULL;
    te_tensor *args[TE_OP_MAX_IO + 1];
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    args[n_in] = Y;
    BCHECK(te_build(s, n_in + 1, args, op, &tgt, &m) == TE_OK);
    size_t mn = (size_t)M * N;
    void *bufs[TE_OP_MAX_IO + 1];
    for (int q = 0; q < n_in; q++)
        bufs[q] = rand_buf((size_t)te_tensor_numel(in[q]), 10u + (unsigned)q);
    float *y = rand_buf(mn, 9), *dst = rand_buf(mn, 8);
    bufs[n_in] = y;
    tess_run tr = {te_module_entry(m), bufs};
    copy_run cr = {dst, bufs[0], mn * sizeof(float)};
    set_threads(threads);
    double ta, tb;
    time_pair(run_tess, &tr, run_copy, &cr, reps, &ta, &tb);
    double bytes = 2.0 * (double)mn * sizeof(float);
    snprintf(out->workload, sizeof out->workload, "%s %dx%d", op, M, N);
    out->threads = threads;
    out->unit = "gbps";
    out->ours = bytes / ta * 1e-9;
    out->base = bytes / tb * 1e-9;
    out->base_name = "memcpy";
    out->err = 0;
    for (int q = 0; q <= n_in; q++)
        free(bufs[q]);
    free(dst);
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

/* Builds workload (op, params) from the database's best record and times it beside the
 * workload's baseline. Returns 0, or 1 when the database has no record (row not filled). */
static int bench_db(te_db *db, const char *op, const char *params, int threads, int reps, row *out)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    BCHECK(te_op_build(ctx, op, params, in, &n_in, outs, &n_out) == TE_OK);
    te_op_params kv;
    char key[512];
    BCHECK(te_op_params_parse(ctx, params, &kv) == TE_OK);
    BCHECK(te_op_workload_key(ctx, te_op_lookup(op), &kv, key, sizeof key) > 0);
    te_target lookup;
    if (!db_lookup_target(db, key, threads, &lookup)) {
        fprintf(stderr, "  no record for %s in the database; skipped\n", key);
        te_ctx_free(ctx);
        return 1;
    }
    te_schedule *s = NULL;
    int from_db = 0;
    char why[512];
    BCHECK(te_tuner_best_schedule(ctx, db, key, n_out, outs, &lookup, &s, &from_db, why,
                                  sizeof why) == TE_OK);
    if (!from_db)
        fprintf(stderr, "tessera: warning: %s: %s; using the default schedule\n", key, why);
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    te_module *m = NULL;
    te_tensor *args[2 * TE_OP_MAX_IO];
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    for (int q = 0; q < n_out; q++)
        args[n_in + q] = outs[q];
    BCHECK(te_build(s, n_in + n_out, args, op, &tgt, &m) == TE_OK);
    void *bufs[2 * TE_OP_MAX_IO];
    for (int q = 0; q < n_in + n_out; q++)
        bufs[q] = rand_buf((size_t)te_tensor_numel(args[q]), 20u + (unsigned)q);
    int64_t M = 0, N = 0, K = 0;
    for (int i = 0; i < kv.n; i++) {
        if (!strcmp(kv.p[i].key, "m"))
            M = kv.p[i].ival;
        else if (!strcmp(kv.p[i].key, "n"))
            N = kv.p[i].ival;
        else if (!strcmp(kv.p[i].key, "k"))
            K = kv.p[i].ival;
    }
    size_t mn = (size_t)te_tensor_numel(outs[0]);
    float *ref = rand_buf(mn, 40), *g = NULL, *u = NULL;
    tess_run tr = {te_module_entry(m), bufs};
    sgemm_run sr = {(int)M, (int)N, (int)K, bufs[0], bufs[1], ref};
    gate_run gr = {(int)M, (int)N, (int)K, bufs[0], bufs[1], bufs[2], NULL, NULL, ref};
    copy_run cr = {ref, bufs[0], mn * sizeof(float)};
    run_fn base;
    void *barg;
    double flop = te_tuner_flops(n_out, outs);
    set_threads(threads);
    if (!strcmp(op, "matmul")) {
        base = run_sgemm, barg = &sr;
        out->base_name = "openblas sgemm";
    } else if (!strcmp(op, "mlp_gate")) {
        g = rand_buf(mn, 41);
        u = rand_buf(mn, 42);
        gr.G = g;
        gr.U = u;
        base = run_gate_blas, barg = &gr;
        out->base_name = "2x sgemm + expf pass";
    } else {
        base = run_copy, barg = &cr;
        out->base_name = "memcpy";
    }
    double ta, tb;
    time_pair(run_tess, &tr, base, barg, reps, &ta, &tb);
    if (!strcmp(op, "matmul"))
        snprintf(out->workload, sizeof out->workload, "matmul %dx%dx%d", (int)M, (int)N, (int)K);
    else if (!strcmp(op, "mlp_gate"))
        snprintf(out->workload, sizeof out->workload, "mlp_gate %dx%dx%d", (int)M, (int)K, (int)N);
    else
        snprintf(out->workload, sizeof out->workload, "%.30s %dx%d", op,
                 (int)te_tensor_shape(outs[0])[0], (int)te_tensor_shape(outs[0])[1]);
    out->threads = threads;
    if (base == run_copy) {
        double bytes = 2.0 * (double)mn * sizeof(float);
        out->unit = "gbps";
        out->ours = bytes / ta * 1e-9;
        out->base = bytes / tb * 1e-9;
        out->err = 0;
    } else {
        out->unit = "gflops";
        out->ours = flop / ta * 1e-9;
        out->base = flop / tb * 1e-9;
        out->err = rel_err(bufs[n_in], ref, mn);
    }
    for (int q = 0; q < n_in + n_out; q++)
        free(bufs[q]);
    free(ref);
    free(g);
    free(u);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera bench [--json] [--reps N] [--threads LIST] [--only NAME] "
               "[--db FILE]\n\n"
               "Runs hand-scheduled Tessera kernels beside OpenBLAS (matmul, the MLP gate) and\n"
               "beside memcpy (softmax, layer norm) in one process, alternating the two, and\n"
               "prints medians and ratios. With --db, the kernels are built from the tuning\n"
               "database's best records instead (workloads without a record are skipped).\n\n"
               "  --db FILE       benchmark the best tuned schedules of this database\n"
               "  --json          print a JSON list of rows instead of a table\n"
               "  --reps N        timed repetitions per kernel (default 9)\n"
               "  --threads LIST  comma-separated thread counts (default 1,2)\n"
               "  --only NAME     run only workloads whose name starts with NAME\n");
}

int te_cmd_bench(int argc, char **argv)
{
    bool json = false;
    int reps = 9, threads[8] = {1, 2}, nthreads = 2;
    const char *only = NULL, *db_path = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[a], "--json")) {
            json = true;
        } else if (!strcmp(argv[a], "--reps") && a + 1 < argc) {
            reps = atoi(argv[++a]);
            if (reps < 1 || reps > 1000) {
                fprintf(stderr, "tessera bench: --reps must be in [1, 1000]\n");
                return 2;
            }
        } else if (!strcmp(argv[a], "--threads") && a + 1 < argc) {
            nthreads = 0;
            for (char *p = argv[++a]; *p && nthreads < 8;) {
                char *end;
                long t = strtol(p, &end, 10);
                if (end == p || t < 1 || t > 256 || (*end && *end != ',')) {
                    fprintf(stderr, "tessera bench: --threads takes a list like 1,2\n");
                    return 2;
                }
                threads[nthreads++] = (int)t;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(argv[a], "--only") && a + 1 < argc) {
            only = argv[++a];
        } else if (!strcmp(argv[a], "--db") && a + 1 < argc) {
            db_path = argv[++a];
        } else {
            fprintf(stderr, "tessera bench: unknown or incomplete option '%s'\n", argv[a]);
            usage(stderr);
            return 2;
        }
    }
    row rows[64];
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
    static const struct {
        const char *name;
        int kind, m, n, k;
    } work[] = {
        {"matmul", 0, 1024, 1024, 1024},  {"matmul", 0, 512, 3072, 768},
        {"mlp_gate", 1, 256, 2816, 1024}, {"softmax", 2, 4096, 4096, 0},
        {"layer_norm", 2, 4096, 4096, 0},
    };
    for (size_t w = 0; w < sizeof work / sizeof work[0]; w++) {
        if (only && strncmp(work[w].name, only, strlen(only)))
            continue;
        for (int t = 0; t < nthreads && n < 64; t++) {
            if (db) {
                char params[96];
                if (work[w].kind == 2)
                    snprintf(params, sizeof params, "m=%d,n=%d", work[w].m, work[w].n);
                else
                    snprintf(params, sizeof params, "m=%d,n=%d,k=%d", work[w].m, work[w].n,
                             work[w].k);
                if (bench_db(db, work[w].name, params, threads[t], reps, &rows[n]) != 0)
                    continue;
            } else if (work[w].kind == 0)
                bench_matmul(work[w].m, work[w].n, work[w].k, threads[t], reps, &rows[n]);
            else if (work[w].kind == 1)
                bench_mlp_gate(work[w].m, work[w].n, work[w].k, threads[t], reps, &rows[n]);
            else
                bench_rowop(work[w].name, work[w].m, work[w].n, threads[t], reps, &rows[n]);
            if (!json)
                fprintf(stderr, "  measured %s, %d thread(s)\n", rows[n].workload, threads[t]);
            n++;
        }
    }
    if (json) {
        printf("[");
        for (int r = 0; r < n; r++)
            printf("%s\n  {\"workload\": \"%s\", \"threads\": %d, \"%s\": %.3f, \"baseline\": "
                   "\"%s\", \"baseline_%s\": %.3f, \"ratio\": %.4f, \"max_rel_err\": %.3g}",
                   r ? "," : "", rows[r].workload, rows[r].threads, rows[r].unit, rows[r].ours,
                   rows[r].base_name, rows[r].unit, rows[r].base, rows[r].ours / rows[r].base,
                   rows[r].err);
        printf("\n]\n");
    } else {
        printf("%-32s %7s %10s %10s %-22s %7s\n", "workload", "threads", "tessera", "baseline",
               "baseline is", "ratio");
        for (int r = 0; r < n; r++)
            printf("%-32s %7d %10.1f %10.1f %-22s %7.2f   %s\n", rows[r].workload, rows[r].threads,
                   rows[r].ours, rows[r].base, rows[r].base_name, rows[r].ours / rows[r].base,
                   !strcmp(rows[r].unit, "gbps") ? "GB/s" : "GFLOP/s");
        printf("(medians of %d alternating repetitions; OpenBLAS threads %d at the end)\n", reps,
               openblas_get_num_threads());
    }
    te_db_close(db);
    return 0;
}
