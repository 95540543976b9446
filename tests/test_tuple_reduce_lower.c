/* Tuple computes end to end on the C backend: lowering (one loop nest writes every output),
 * split, parallel, unroll, rfactor with a vectorized partial stage (lane-wise combine, then the
 * fold across lanes), compute_at of a producer inside the tuple's reduction loops, on argmax,
 * Welford, online softmax and Kahan sums; every output checked against the float64 reference.
 * Lengths are not multiples of the vector width or the split factors on purpose. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "testutil.h"

enum { M = 7, K = 37 };

typedef enum { P_ARGMAX, P_ARGMIN, P_WELFORD, P_SOFTMAX, P_KAHAN, P_COUNT } problem;
static const char *pnames[] = {"argmax", "argmin", "welford", "softmax", "kahan"};

typedef struct {
    te_ctx *ctx;
    te_tensor *A, *B; /* B: a producer (A * 2 + 1) the tuple reads, NULL when it reads A */
    int n;
    te_tensor *out[TE_MAX_TUPLE];
} prob;

static prob make(problem p, bool producer)
{
    prob r = {0};
    te_ctx *ctx = r.ctx = te_ctx_create();
    r.A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *src = r.A;
    if (producer) {
        te_expr *a = te_axis(ctx, "a", M), *b = te_axis(ctx, "b", K);
        r.B = te_compute(
            ctx, "B", 2, (te_expr *[]){a, b},
            te_add(ctx, te_mul(ctx, TE_AT(ctx, r.A, a, b), te_f32(ctx, 2)), te_f32(ctx, 1)));
        src = r.B;
    }
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_expr *v = TE_AT(ctx, src, i, k);
    te_reducer *red = NULL;
    te_expr *srcs[3];
    const char *names[3];
    switch (p) {
    case P_ARGMAX:
    case P_ARGMIN:
        red = p == P_ARGMAX ? te_reducer_argmax(ctx, TE_F32, TE_I64)
                            : te_reducer_argmin(ctx, TE_F32, TE_I64);
        srcs[0] = v, srcs[1] = k, names[0] = "val", names[1] = "idx";
        r.n = 2;
        break;
    case P_WELFORD:
        red = te_reducer_welford(ctx, TE_F32);
        srcs[0] = te_f32(ctx, 1), srcs[1] = v, srcs[2] = te_f32(ctx, 0);
        names[0] = "cnt", names[1] = "mean", names[2] = "m2";
        r.n = 3;
        break;
    case P_SOFTMAX:
        red = te_reducer_online_softmax(ctx, TE_F32);
        srcs[0] = v, srcs[1] = te_f32(ctx, 1), names[0] = "mx", names[1] = "sm";
        r.n = 2;
        break;
    default:
        red = te_reducer_kahan(ctx, TE_F32);
        srcs[0] = v, srcs[1] = te_f32(ctx, 0), names[0] = "ks", names[1] = "kc";
        r.n = 2;
        break;
    }
    te_expr *body = te_reduce_tuple(ctx, red, r.n, srcs, 1, &k);
    if (te_compute_tuple(ctx, r.n, names, 1, &i, body, r.out))
        fail_msg("%s: %s", pnames[p], te_ctx_errmsg(ctx));
    return r;
}

static void fill(problem p, float *a)
{
    tt_rng g;
    tt_rng_seed(&g, tt_seed(21 + (uint64_t)p));
    tt_fill_f32(&g, a, M * K);
    if (p == P_ARGMAX || p == P_ARGMIN)
        for (int m = 0; m < M; m++) /* ties, one of them across a split boundary */
            a[m * K + 9] = a[m * K + 30] = p == P_ARGMAX ? 3.0f : -3.0f;
    if (p == P_SOFTMAX) {
        for (int c = 0; c < K; c++) {
            a[0 * K + c] = -INFINITY;              /* a fully masked row */
            a[1 * K + c] = 1e38f * (float)(c % 2); /* huge values */
        }
        a[2 * K + 5] = -INFINITY;
    }
    if (p == P_WELFORD)
        for (int j = 0; j < M * K; j++)
            a[j] += 100.0f;
}

/* Schedules the tuple stage (and the producer) one of several ways. */
typedef enum {
    S_DEFAULT,
    S_SPLIT_PARALLEL,
    S_RFACTOR_VECTOR,
    S_RFACTOR_WHOLE,
    S_UNROLL_REDUCE,
    S_COUNT
} sched_kind;
static const char *snames[] = {"default", "split+parallel", "rfactor+vectorize", "rfactor whole",
                               "unroll"};

static void apply(prob *p, te_schedule *s, sched_kind k)
{
    te_stage *st = te_schedule_stage(s, p->out[p->n - 1]);
    assert_non_null(st);
    assert_ptr_equal(st, te_schedule_stage(s, p->out[0])); /* one stage for the tuple */
    te_iter *io, *ii, *ko = NULL, *ki;
    switch (k) {
    case S_DEFAULT:
        break;
    case S_SPLIT_PARALLEL:
        assert_int_equal(te_split(st, te_stage_axis(st, 0), 4, &io, &ii), TE_OK);
        assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 8, &ko, &ki), TE_OK);
        assert_int_equal(te_parallel(st, io), TE_OK);
        break;
    case S_RFACTOR_VECTOR: {
        assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 8, &ko, &ki), TE_OK);
        te_tensor *rf = te_rfactor(s, p->out[0], ki);
        if (!rf)
            fail_msg("rfactor: %s", te_ctx_errmsg(p->ctx));
        te_stage *rs = te_schedule_stage(s, rf);
        assert_int_equal(te_stage_nreduce(rs), 1);
        te_iter *lane = te_stage_axis(rs, 1), *rko = te_stage_reduce_axis(rs, 0);
        assert_int_equal(te_reorder(rs, 3, (te_iter *[]){te_stage_axis(rs, 0), rko, lane}), TE_OK);
        assert_int_equal(te_vectorize(rs, lane), TE_OK);
        assert_int_equal(te_unroll(st, te_stage_reduce_axis(st, 0)), TE_OK);
        break;
    }
    case S_RFACTOR_WHOLE:
        if (!te_rfactor(s, p->out[0], te_stage_reduce_axis(st, 0)))
            fail_msg("rfactor: %s", te_ctx_errmsg(p->ctx));
        break;
    case S_UNROLL_REDUCE:
        assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 4, &ko, &ki), TE_OK);
        assert_int_equal(te_unroll(st, ki), TE_OK);
        break;
    default:
        break;
    }
    if (p->B && k == S_RFACTOR_WHOLE) /* the producer inlined into the partial stage */
        assert_int_equal(te_compute_inline(te_schedule_stage(s, p->B)), TE_OK);
    if (p->B && k != S_RFACTOR_VECTOR && k != S_RFACTOR_WHOLE) {
        /* The producer per outer reduction step of the tuple compute (after rfactor the
         * partial stage reads B, which then stays at the root). */
        te_iter *at = k == S_DEFAULT ? te_stage_reduce_axis(st, 0) : ko;
        if (te_compute_at(te_schedule_stage(s, p->B), st, at))
            fail_msg("compute_at: %s", te_ctx_errmsg(p->ctx));
    }
}

static void run_case(problem pk, sched_kind sk, bool producer)
{
    prob p = make(pk, producer);
    te_schedule *s = te_schedule_create(p.ctx, p.n, p.out);
    assert_non_null(s);
    apply(&p, s, sk);
    te_tensor *args[1 + TE_MAX_TUPLE] = {p.A};
    memcpy(args + 1, p.out, sizeof(te_tensor *) * (size_t)p.n);
    te_target tgt = te_target_host();
    if (sk == S_RFACTOR_VECTOR) { /* the partial stage really is vector code */
        te_lowered *f = te_lower(s, 1 + p.n, args, "tup", &tgt);
        assert_non_null(f);
        const char *notes[4];
        int nn = te_lowered_notes(f, notes, 4);
        if (nn)
            fail_msg("%s: vectorize fell back: %s", pnames[pk], notes[0]);
    }
    te_module *m = NULL;
    if (te_build(s, 1 + p.n, args, "tup", &tgt, &m))
        fail_msg("%s/%s: te_build: %s", pnames[pk], snames[sk], te_ctx_errmsg(p.ctx));
    if (getenv("TESSERA_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", te_module_source(m));
    float a[M * K];
    fill(pk, a);
    void *data[1 + TE_MAX_TUPLE] = {a};
    double *ref[TE_MAX_TUPLE];
    for (int o = 0; o < p.n; o++) {
        data[1 + o] = malloc(8 * M);
        if (te_tensor_dtype(p.out[o]) == TE_I64)
            for (int j = 0; j < M; j++)
                ((int64_t *)data[1 + o])[j] = -777;
        else
            tt_poison_f32(data[1 + o], M);
        ref[o] = malloc(sizeof(double) * M);
    }
    assert_int_equal(te_module_run(m, data), TE_OK);
    assert_int_equal(te_reference_eval(p.ctx, 1, &p.A, (const void *[]){a}, p.n, p.out, ref),
                     TE_OK);
    for (int o = 0; o < p.n; o++) {
        for (int j = 0; j < M; j++) {
            double want = ref[o][j], got;
            if (te_tensor_dtype(p.out[o]) == TE_I64)
                got = (double)((int64_t *)data[1 + o])[j];
            else
                got = ((float *)data[1 + o])[j];
            double err = fabs(got - want) / fmax(1.0, fabs(want));
            bool ok = got == want || err < 1e-5;
            if (pk == P_KAHAN && o == 1)
                ok = fabs(got - want) < 1e-5; /* the compensation: tiny, rounding-dependent */
            if (!ok)
                fail_msg("%s/%s%s: output %s[%d] = %.9g, reference %.9g", pnames[pk], snames[sk],
                         producer ? " (producer at)" : "", te_tensor_name(p.out[o]), j, got, want);
        }
        free(data[1 + o]);
        free(ref[o]);
    }
    te_module_free(m);
    te_ctx_free(p.ctx);
}

static void test_every_tuple_reducer_every_schedule_matches_reference(void **state)
{
    (void)state;
    for (int p = 0; p < P_COUNT; p++)
        for (int k = 0; k < S_COUNT; k++)
            run_case((problem)p, (sched_kind)k, false);
}

static void test_producer_computed_inside_the_tuple_reduction(void **state)
{
    (void)state;
    for (int p = 0; p < P_COUNT; p++)
        for (int k = 0; k < S_COUNT; k++)
            run_case((problem)p, (sched_kind)k, true);
}

/* One loop nest writes every output: the lowered program has one reduction loop. */
static void test_one_loop_nest_writes_all_outputs(void **state)
{
    (void)state;
    prob p = make(P_WELFORD, false);
    te_schedule *s = te_schedule_create(p.ctx, p.n, p.out);
    assert_int_equal(te_schedule_nstages(s), 1);
    te_tensor *args[4] = {p.A, p.out[0], p.out[1], p.out[2]};
    te_lowered *f = te_lower(s, 4, args, "w", NULL);
    assert_non_null(f);
    char buf[8192] = "";
    FILE *fp = fmemopen(buf, sizeof buf, "w");
    te_lowered_print(f, fp);
    fclose(fp);
    const char *first = strstr(buf, "for (k");
    assert_non_null(first);
    assert_null(strstr(first + 1, "for (k"));
    assert_non_null(strstr(buf, "cnt["));
    assert_non_null(strstr(buf, "mean["));
    assert_non_null(strstr(buf, "m2["));
    te_ctx_free(p.ctx);
}

static void test_schedule_primitives_that_cannot_apply_are_refused(void **state)
{
    (void)state;
    prob p = make(P_ARGMAX, false);
    te_schedule *s = te_schedule_create(p.ctx, p.n, p.out);
    assert_null(te_cache_write(s, p.out[1], TE_SCOPE_LOCAL));
    assert_non_null(strstr(te_ctx_errmsg(p.ctx), "computes a tuple"));
    te_ctx_clear_error(p.ctx);
    te_stage *st = te_schedule_stage(s, p.out[1]);
    assert_int_equal(te_compute_inline(st), TE_ERR_SCHEDULE);
    te_ctx_free(p.ctx);
}

/* A tuple stage as a producer: the one-pass softmax's (max, sum) stage computed at the row loop
 * of the normalization, with its reduction rfactored across 8 vector lanes and the partial
 * stage at that row loop too. */
static void test_tuple_stage_computed_at_its_consumer_row_loop(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){5, 43});
    te_tensor *Y = te_op_softmax_online(ctx, X, 1, "sm");
    assert_non_null(Y);
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_stage *ys = te_schedule_stage(s, Y), *st = te_schedule_stage(s, te_op_find(Y, "sm_sum"));
    assert_ptr_equal(st, te_schedule_stage_by_name(s, "sm_max"));
    te_iter *row = te_stage_axis(ys, 0), *ko, *ki;
    assert_int_equal(te_compute_at(st, ys, row), TE_OK);
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 8, &ko, &ki), TE_OK);
    te_tensor *rf = te_rfactor(s, te_op_find(Y, "sm_max"), ki);
    assert_non_null(rf);
    te_stage *rs = te_schedule_stage(s, rf);
    te_iter *lane = te_stage_axis(rs, 2);
    assert_int_equal(te_reorder(rs, 2, (te_iter *[]){te_stage_reduce_axis(rs, 0), lane}), TE_OK);
    assert_int_equal(te_vectorize(rs, lane), TE_OK);
    assert_int_equal(te_compute_at(rs, ys, row), TE_OK);
    te_iter *jo, *ji;
    assert_int_equal(te_split(ys, te_stage_axis(ys, 1), 8, &jo, &ji), TE_OK);
    assert_int_equal(te_vectorize(ys, ji), TE_OK);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 2, (te_tensor *[]){X, Y}, "smo", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    float x[5 * 43], y[5 * 43];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(23));
    tt_fill_f32(&g, x, 5 * 43);
    for (int c = 0; c < 43; c++)
        x[c] = -INFINITY; /* row 0 fully masked */
    tt_poison_f32(y, 5 * 43);
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    double ref[5 * 43];
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *[]){x}, 1, &Y, (double *[]){ref}),
                     TE_OK);
    double e = tt_max_rel_err_f32(y, ref, 5 * 43);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);
    te_module_free(m);
    te_ctx_free(ctx);
}

/* Components that stay the same along the innermost loops (schedule/lower_tuple.c): the
 * online weighted softmax out[i][d] = (max_k X[i][k], sum_k exp(X[i][k] - max) V[k][d]),
 * attention's state in small. The maximum's source does not depend on d, so it is read and
 * combined once per row outside the d loops (split by 8 with a tail, vectorized or not, and
 * after the rows' loop when reordered there); the sum is per (i, d). Rows and columns are
 * not multiples of the splits, row 0 is all -inf (the maximum stays -inf, the sums 0). */
enum { WR = 9, WK = 13, WD = 21 };

static te_reducer *weighted_softmax_reducer(te_ctx *ctx)
{
    te_expr *m1 = te_var(ctx, "m1", TE_F32), *m2 = te_var(ctx, "m2", TE_F32);
    te_expr *a1 = te_var(ctx, "a1", TE_F32), *a2 = te_var(ctx, "a2", TE_F32);
    te_expr *e = te_select(ctx, te_eq(ctx, m1, m2), te_f32(ctx, 1),
                           te_exp(ctx, te_sub(ctx, te_min(ctx, m1, m2), te_max(ctx, m1, m2))));
    te_expr *c[2] = {te_max(ctx, m1, m2),
                     te_select(ctx, te_ge(ctx, m1, m2), te_add(ctx, a1, te_mul(ctx, a2, e)),
                               te_add(ctx, te_mul(ctx, a1, e), a2))};
    return te_reducer_create_tuple(ctx, "wsm", 2, (te_expr *[]){m1, a1}, (te_expr *[]){m2, a2}, c,
                                   (te_expr *[]){te_f32(ctx, -INFINITY), te_f32(ctx, 0)});
}

/* W_VPROD: the sum's source reads a stage (V scaled) computed inside the d loop: the maximum
 * is still combined outside it. W_XPROD: the maximum's source reads a stage computed inside the
 * d loop (X plus 0): its value is only there, so nothing is read ahead. */
typedef enum { W_PLAIN, W_SPLIT, W_VECTOR, W_ROWS_INSIDE, W_VPROD, W_XPROD, W_COUNT } wsched;

/* consumer: the tuple is an intermediate that a stage O = select(wm == -inf, 0, wa / 2 + wm)
 * reads (its buffers are allocations, not arguments): the maximum, the same along d, is then
 * one element per row where only inner loops move d (schedule/lower_tuple.c,
 * collapse_invariant), and O reads that element at every d. */
static void run_weighted(wsched ws, bool consumer)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){WR, WK});
    te_tensor *V = te_placeholder(ctx, "V", TE_F32, 2, (int64_t[]){WK, WD});
    te_expr *i = te_axis(ctx, "i", WR), *d = te_axis(ctx, "d", WD);
    te_expr *k = te_reduce_axis(ctx, "k", WK);
    te_tensor *P = NULL; /* W_VPROD / W_XPROD: the producer computed inside the d loop */
    if (ws == W_VPROD) {
        te_expr *pk = te_axis(ctx, "pk", WK), *pd = te_axis(ctx, "pd", WD);
        P = te_compute(ctx, "VS", 2, (te_expr *[]){pk, pd},
                       te_mul(ctx, TE_AT(ctx, V, pk, pd), te_f32(ctx, 1.5f)));
    } else if (ws == W_XPROD) {
        te_expr *pi = te_axis(ctx, "pi", WR), *pk = te_axis(ctx, "pk", WK);
        P = te_compute(ctx, "XS", 2, (te_expr *[]){pi, pk},
                       te_add(ctx, TE_AT(ctx, X, pi, pk), te_f32(ctx, 0)));
    }
    te_expr *xs = ws == W_XPROD ? TE_AT(ctx, P, i, k) : TE_AT(ctx, X, i, k);
    te_expr *vs = ws == W_VPROD ? TE_AT(ctx, P, k, d) : TE_AT(ctx, V, k, d);
    te_expr *red =
        te_reduce_tuple(ctx, weighted_softmax_reducer(ctx), 2, (te_expr *[]){xs, vs}, 1, &k);
    te_tensor *out[2];
    assert_int_equal(
        te_compute_tuple(ctx, 2, (const char *[]){"wm", "wa"}, 2, (te_expr *[]){i, d}, red, out),
        TE_OK);
    te_tensor *O = NULL;
    if (consumer) {
        te_expr *oi = te_axis(ctx, "oi", WR), *od = te_axis(ctx, "od", WD);
        te_expr *wm = TE_AT(ctx, out[0], oi, od);
        O = te_compute(
            ctx, "O", 2, (te_expr *[]){oi, od},
            te_select(ctx, te_eq(ctx, wm, te_f32(ctx, -INFINITY)), te_f32(ctx, 0),
                      te_add(ctx, te_mul(ctx, TE_AT(ctx, out[1], oi, od), te_f32(ctx, 0.5f)), wm)));
        assert_non_null(O);
    }
    te_schedule *s = consumer ? te_schedule_create(ctx, 1, &O) : te_schedule_create(ctx, 2, out);
    te_stage *st = te_schedule_stage(s, out[0]);
    te_iter *ri = te_stage_axis(st, 0), *rd = te_stage_axis(st, 1),
            *rk = te_stage_reduce_axis(st, 0);
    te_iter *dout, *din;
    bool plain = ws == W_PLAIN || ws == W_VPROD || ws == W_XPROD;
    if (!plain)
        assert_int_equal(te_split(st, rd, 8, &dout, &din), TE_OK);
    if (plain)
        assert_int_equal(te_reorder(st, 3, (te_iter *[]){rk, ri, rd}), TE_OK);
    if (P)
        assert_int_equal(te_compute_at(te_schedule_stage(s, P), st, rd), TE_OK);
    else if (ws == W_ROWS_INSIDE) /* d's outer loop, then the rows: only the lanes are inside */
        assert_int_equal(te_reorder(st, 4, (te_iter *[]){rk, dout, ri, din}), TE_OK);
    else if (ws == W_VECTOR)
        assert_int_equal(te_reorder(st, 4, (te_iter *[]){rk, ri, dout, din}), TE_OK);
    if (ws == W_SPLIT) { /* rows in 3 blocks of 4 (the last guarded): the snapshot is too */
        te_iter *io, *ii;
        assert_int_equal(te_split(st, ri, 4, &io, &ii), TE_OK);
        assert_int_equal(te_reorder(st, 5, (te_iter *[]){io, rk, ii, dout, din}), TE_OK);
    }
    if (ws == W_VECTOR || ws == W_ROWS_INSIDE)
        assert_int_equal(te_vectorize(st, din), TE_OK);
    te_tensor *args[4] = {X, V, consumer ? O : out[0], out[1]};
    int nargs = consumer ? 3 : 4;
    te_target tgt = te_target_host();
    te_lowered *f = te_lower(s, nargs, args, "wsm", &tgt);
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    FILE *fp = fmemopen(buf, 1 << 16, "w");
    te_lowered_print(f, fp);
    fclose(fp);
    if (getenv("TESSERA_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", buf);
    /* The maximum is read once outside the d loops, never per element. */
    const char *old = strstr(buf, "wm_old0");
    if (ws == W_XPROD) {
        if (old)
            fail_msg("schedule %d: the maximum's source is computed inside the d loop, yet it "
                     "is read ahead:\n%s",
                     (int)ws, buf);
    } else {
        if (!old)
            fail_msg("schedule %d: no snapshot of the maximum:\n%s", (int)ws, buf);
        const char *inner = plain ? "for (d" : ws == W_ROWS_INSIDE ? "for (d_i" : "for (d_o";
        if (!strstr(old, inner)) /* the loop comes after (inside) the snapshot */
            fail_msg("schedule %d: the snapshot is not outside '%s':\n%s", (int)ws, inner, buf);
    }
    if (consumer) {
        /* One element per row where only the inner loops move d; else the whole extent. */
        bool one = ws != W_XPROD && ws != W_ROWS_INSIDE;
        char want[64];
        snprintf(want, sizeof want, "allocate wm[f32 x %d x %d]", WR, one ? 1 : WD);
        if (!strstr(buf, want))
            fail_msg("schedule %d: no '%s':\n%s", (int)ws, want, buf);
        snprintf(want, sizeof want, "allocate wa[f32 x %d x %d]", WR, WD);
        if (!strstr(buf, want))
            fail_msg("schedule %d: no '%s':\n%s", (int)ws, want, buf);
        /* Stored once per row: at the first point of the serial d loop. */
        if (ws == W_PLAIN && !strstr(buf, "if ((d == 0)) {\n          wm[i] = wm_next0"))
            fail_msg("schedule %d: the maximum is not stored once per row:\n%s", (int)ws, buf);
    }
    free(buf);

    te_module *m = NULL;
    if (te_build(s, nargs, args, "wsm", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    float x[WR * WK], v[WK * WD], om[WR * WD], oa[WR * WD];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(41));
    tt_fill_f32(&g, x, WR * WK);
    tt_fill_f32(&g, v, WK * WD);
    for (int c = 0; c < WK; c++)
        x[c] = -INFINITY;
    tt_poison_f32(om, WR * WD);
    tt_poison_f32(oa, WR * WD);
    if (consumer) {
        assert_int_equal(te_module_run(m, (void *[]){x, v, om}), TE_OK);
        double ro[WR * WD];
        assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){X, V}, (const void *[]){x, v}, 1,
                                           &O, (double *[]){ro}),
                         TE_OK);
        for (int q = 0; q < WR * WD; q++)
            if (!(fabs(om[q] - ro[q]) <= 1e-5 * fmax(1.0, fabs(ro[q]))))
                fail_msg("schedule %d: O[%d] = %.9g, reference %.9g", (int)ws, q, om[q], ro[q]);
        te_module_free(m);
        te_ctx_free(ctx);
        return;
    }
    assert_int_equal(te_module_run(m, (void *[]){x, v, om, oa}), TE_OK);
    double rm[WR * WD], ra[WR * WD];
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){X, V}, (const void *[]){x, v}, 2,
                                       out, (double *[]){rm, ra}),
                     TE_OK);
    for (int q = 0; q < WR * WD; q++) {
        if (!(om[q] == rm[q]))
            fail_msg("schedule %d: wm[%d] = %.9g, reference %.9g", (int)ws, q, om[q], rm[q]);
        if (!(fabs(oa[q] - ra[q]) <= 1e-5 * fmax(1.0, fabs(ra[q]))))
            fail_msg("schedule %d: wa[%d] = %.9g, reference %.9g", (int)ws, q, oa[q], ra[q]);
    }
    te_module_free(m);
    te_ctx_free(ctx);
}

static void test_components_invariant_along_inner_loops_are_combined_outside(void **state)
{
    (void)state;
    for (int w = 0; w < W_COUNT; w++)
        run_weighted((wsched)w, false);
}

static void test_invariant_component_is_one_element_per_row(void **state)
{
    (void)state;
    for (int w = 0; w < W_COUNT; w++)
        run_weighted((wsched)w, true);
}

/* Nothing is hoisted when every component depends on the inner loop (argmax along k with the
 * rows innermost reads X[i][k] per row). */
static void test_no_snapshot_when_every_component_varies(void **state)
{
    (void)state;
    prob p = make(P_ARGMAX, false);
    te_schedule *s = te_schedule_create(p.ctx, p.n, p.out);
    te_stage *st = te_schedule_stage(s, p.out[0]);
    assert_int_equal(
        te_reorder(st, 2, (te_iter *[]){te_stage_reduce_axis(st, 0), te_stage_axis(st, 0)}), TE_OK);
    te_lowered *f = te_lower(s, 3, (te_tensor *[]){p.A, p.out[0], p.out[1]}, "am", NULL);
    assert_non_null(f);
    char buf[8192] = "";
    FILE *fp = fmemopen(buf, sizeof buf, "w");
    te_lowered_print(f, fp);
    fclose(fp);
    assert_null(strstr(buf, "_old"));
    te_ctx_free(p.ctx);
}

/* A full reduction over two axes to rank-0 outputs: argmax of a whole matrix as a flat index,
 * with the inner axis split and rfactored. */
static void test_rank0_tuple_over_two_axes_with_rfactor(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *r = te_reduce_axis(ctx, "r", M), *k = te_reduce_axis(ctx, "k", K);
    te_expr *flat = te_add(ctx, te_mul(ctx, r, te_int(ctx, K)), k);
    te_expr *body =
        te_reduce_tuple(ctx, te_reducer_argmax(ctx, TE_F32, TE_I64), 2,
                        (te_expr *[]){TE_AT(ctx, A, r, k), flat}, 2, (te_expr *[]){r, k});
    te_tensor *out[2];
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"mv", "mi"}, 0, NULL, body, out),
                     TE_OK);
    for (int sched = 0; sched < 2; sched++) {
        te_schedule *s = te_schedule_create(ctx, 2, out);
        if (sched) {
            te_stage *st = te_schedule_stage(s, out[1]);
            te_iter *ko, *ki;
            assert_int_equal(te_split(st, te_stage_reduce_axis(st, 1), 8, &ko, &ki), TE_OK);
            te_tensor *rf = te_rfactor(s, out[0], ki);
            if (!rf)
                fail_msg("rfactor: %s", te_ctx_errmsg(ctx));
            assert_int_equal(te_tensor_ndim(rf), 1);
        }
        te_target tgt = te_target_host();
        te_module *m = NULL;
        if (te_build(s, 3, (te_tensor *[]){A, out[0], out[1]}, "am0", &tgt, &m))
            fail_msg("te_build: %s", te_ctx_errmsg(ctx));
        float a[M * K], mv = NAN;
        int64_t mi = -1;
        tt_rng g;
        tt_rng_seed(&g, tt_seed(24));
        tt_fill_f32(&g, a, M * K);
        a[3 * K + 30] = a[5 * K + 2] = 9.0f; /* the first in row-major order wins */
        assert_int_equal(te_module_run(m, (void *[]){a, &mv, &mi}), TE_OK);
        assert_true(mv == 9.0f);
        assert_int_equal(mi, 3 * K + 30);
        double rv, ri;
        assert_int_equal(
            te_reference_eval(ctx, 1, &A, (const void *[]){a}, 2, out, (double *[]){&rv, &ri}),
            TE_OK);
        assert_true(rv == 9.0 && ri == 3 * K + 30);
        te_module_free(m);
    }
    te_ctx_free(ctx);
}

/* ---- te_reduce_tree --------------------------------------------------------------------
 * The row-reduction shape of the row operations: the row of KT split by 128 and rfactored
 * (128 partial results over 2 steps), those split by 16 and rfactored again (16 lanes, the 8
 * vector parts folded as a tree, the lanes vectorized inside the fold), then the 16 lanes folded
 * as a tree; and the whole row of a short reduction (37 values, odd levels) folded as one tree.
 * Every reducer, scalar and tuple, against the float64 reference. */
enum { KT = 256 };

static te_tensor *tree_problem(te_ctx *ctx, int which, int64_t k_len, te_tensor **A, int *n,
                               te_tensor **out)
{
    *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, k_len});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", k_len);
    te_expr *v = TE_AT(ctx, *A, i, k);
    if (which == 0 || which == 1) { /* sum, max: one-value reducers */
        *n = 1;
        out[0] = te_compute(ctx, "r", 1, &i,
                            which == 0 ? te_sum(ctx, v, 1, &k) : te_rmax(ctx, v, 1, &k));
        return out[0];
    }
    static const problem tp[] = {P_KAHAN, P_WELFORD, P_ARGMAX, P_SOFTMAX};
    problem pk = tp[which - 2];
    te_reducer *red = pk == P_KAHAN     ? te_reducer_kahan(ctx, TE_F32)
                      : pk == P_WELFORD ? te_reducer_welford(ctx, TE_F32)
                      : pk == P_ARGMAX  ? te_reducer_argmax(ctx, TE_F32, TE_I64)
                                        : te_reducer_online_softmax(ctx, TE_F32);
    te_expr *srcs[3] = {v, te_f32(ctx, 0), NULL};
    const char *names[3] = {"a", "b", "c"};
    *n = 2;
    if (pk == P_WELFORD)
        srcs[0] = te_f32(ctx, 1), srcs[1] = v, srcs[2] = te_f32(ctx, 0), *n = 3;
    if (pk == P_ARGMAX)
        srcs[1] = k;
    if (pk == P_SOFTMAX)
        srcs[1] = te_f32(ctx, 1);
    te_expr *body = te_reduce_tuple(ctx, red, *n, srcs, 1, &k);
    assert_int_equal(te_compute_tuple(ctx, *n, names, 1, &i, body, out), TE_OK);
    return out[0];
}

static void check_tree_case(int which, bool lanes)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *A, *out[TE_MAX_TUPLE];
    int n = 0;
    int64_t k_len = lanes ? KT : K;
    tree_problem(ctx, which, k_len, &A, &n, out);
    te_schedule *s = te_schedule_create(ctx, n, out);
    te_stage *st = te_schedule_stage(s, out[0]);
    if (lanes) {
        for (int64_t width = 128; width >= 16; width /= 8) {
            te_iter *ko, *ki;
            assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), width, &ko, &ki), TE_OK);
            te_tensor *rf = te_rfactor(s, out[0], ki);
            if (!rf)
                fail_msg("rfactor: %s", te_ctx_errmsg(ctx));
            te_stage *rs = te_schedule_stage(s, rf);
            te_iter *lane = te_stage_axis(rs, 1), *rko = te_stage_reduce_axis(rs, 0);
            assert_int_equal(te_reorder(rs, 3, (te_iter *[]){te_stage_axis(rs, 0), rko, lane}),
                             TE_OK);
            if (width == 16) { /* 8 vector parts of 16 lanes: vector code inside the tree */
                te_iter *lo, *li;
                assert_int_equal(te_split(rs, lane, 16, &lo, &li), TE_OK);
                assert_int_equal(te_reduce_tree(rs, rko), TE_OK);
                lane = li;
            }
            assert_int_equal(te_vectorize(rs, lane), TE_OK);
        }
    }
    /* the last fold: 16 lanes, or the whole row of 37 */
    if (te_reduce_tree(st, te_stage_reduce_axis(st, 0)))
        fail_msg("te_reduce_tree: %s", te_ctx_errmsg(ctx));
    assert_non_null(strstr(te_schedule_trace(s), "reduce_tree"));
    te_tensor *args[1 + TE_MAX_TUPLE] = {A};
    memcpy(args + 1, out, sizeof(te_tensor *) * (size_t)n);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 1 + n, args, "tree", &tgt, &m))
        fail_msg("reducer %d: te_build: %s", which, te_ctx_errmsg(ctx));
    const char *src = te_module_source(m);
    assert_non_null(strstr(src, "_u0_")); /* the first level of a tree */
    float *a = malloc(sizeof(float) * M * (size_t)k_len);
    tt_rng g;
    tt_rng_seed(&g, tt_seed(77 + (uint64_t)which));
    tt_fill_f32(&g, a, M * (int)k_len);
    if (which == 4) /* argmax: ties in different lanes and parts */
        for (int r = 0; r < M; r++)
            a[r * k_len + 3] = a[r * k_len + k_len - 5] = 4.0f;
    void *data[1 + TE_MAX_TUPLE] = {a};
    double *ref[TE_MAX_TUPLE];
    for (int o = 0; o < n; o++) {
        data[1 + o] = malloc(8 * M);
        tt_poison_f32(data[1 + o], 2 * M);
        ref[o] = malloc(sizeof(double) * M);
    }
    assert_int_equal(te_module_run(m, data), TE_OK);
    assert_int_equal(te_reference_eval(ctx, 1, &A, (const void *[]){a}, n, out, ref), TE_OK);
    for (int o = 0; o < n; o++) {
        bool i64 = te_tensor_dtype(out[o]) == TE_I64;
        for (int r = 0; r < M; r++) {
            double got = i64 ? (double)((int64_t *)data[1 + o])[r] : ((float *)data[1 + o])[r];
            double want = ref[o][r];
            bool ok = got == want || fabs(got - want) / fmax(1.0, fabs(want)) < 1e-5;
            if (which == 2 && o == 1)
                ok = fabs(got - want) < 1e-5; /* the Kahan compensation */
            if (!ok)
                fail_msg("reducer %d%s: %s[%d] = %.9g, reference %.9g", which,
                         lanes ? " (lanes)" : " (whole row)", te_tensor_name(out[o]), r, got, want);
        }
        free(data[1 + o]);
        free(ref[o]);
    }
    free(a);
    te_module_free(m);
    te_ctx_free(ctx);
}

static void test_reduce_tree_every_reducer_matches_reference(void **state)
{
    (void)state;
    for (int which = 0; which < 6; which++) {
        check_tree_case(which, true);
        check_tree_case(which, false);
    }
}

static void test_reduce_tree_refusals(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A, *out[TE_MAX_TUPLE];
    int n = 0;
    tree_problem(ctx, 2, KT, &A, &n, out);
    te_schedule *s = te_schedule_create(ctx, n, out);
    te_stage *st = te_schedule_stage(s, out[0]);
    /* a spatial loop; a loop of 256 iterations; a reduction loop inside */
    assert_int_equal(te_reduce_tree(st, te_stage_axis(st, 0)), TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "not a reduction loop"));
    te_ctx_clear_error(ctx);
    assert_int_equal(te_reduce_tree(st, te_stage_reduce_axis(st, 0)), TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "256 iterations"));
    te_ctx_clear_error(ctx);
    te_iter *ko, *ki;
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 64, &ko, &ki), TE_OK);
    assert_int_equal(te_reduce_tree(st, ko), TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "is inside"));
    te_ctx_clear_error(ctx);
    /* a fold of 64 is accepted, once per stage */
    assert_int_equal(te_reduce_tree(st, ki), TE_OK);
    assert_int_equal(te_reduce_tree(st, ko), TE_ERR_SCHEDULE);
    te_ctx_clear_error(ctx);
    /* replayed from its trace onto a fresh schedule, and translated to C */
    assert_true(tt_trace_replays(s, n, out, "te_reduce_tree("));
    te_ctx_free(ctx);

    /* lowering: a fold whose split leaves a guarded tail (37 by 8), and a reorder that puts a
     * reduction loop inside the fold after it was declared */
    ctx = te_ctx_create();
    tree_problem(ctx, 0, K, &A, &n, out);
    s = te_schedule_create(ctx, n, out);
    st = te_schedule_stage(s, out[0]);
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 8, &ko, &ki), TE_OK);
    assert_int_equal(te_reduce_tree(st, ki), TE_OK);
    te_tensor *args[2] = {A, out[0]};
    assert_null(te_lower(s, 2, args, "t", NULL));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "guarded tail"));
    te_ctx_clear_error(ctx);
    s = te_schedule_create(ctx, n, out);
    st = te_schedule_stage(s, out[0]);
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 37, &ko, &ki), TE_OK);
    assert_int_equal(te_reduce_tree(st, ki), TE_OK);
    assert_int_equal(te_reorder(st, 2, (te_iter *[]){ki, ko}), TE_OK);
    assert_null(te_lower(s, 2, args, "t", NULL));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "only plain spatial loops"));
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_tuple_reducer_every_schedule_matches_reference),
        cmocka_unit_test(test_producer_computed_inside_the_tuple_reduction),
        cmocka_unit_test(test_one_loop_nest_writes_all_outputs),
        cmocka_unit_test(test_rank0_tuple_over_two_axes_with_rfactor),
        cmocka_unit_test(test_tuple_stage_computed_at_its_consumer_row_loop),
        cmocka_unit_test(test_components_invariant_along_inner_loops_are_combined_outside),
        cmocka_unit_test(test_invariant_component_is_one_element_per_row),
        cmocka_unit_test(test_no_snapshot_when_every_component_varies),
        cmocka_unit_test(test_schedule_primitives_that_cannot_apply_are_refused),
        cmocka_unit_test(test_reduce_tree_every_reducer_matches_reference),
        cmocka_unit_test(test_reduce_tree_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
