/* te_compute_with: a stage's loops fused with a sibling's (Halide's compute_with). Softmax's
 * partial sums computed in the exponentials' loop (both at the output's row loop, the sums'
 * stage with a kept axis of extent 1 and its initialization before its loop) and a row sum
 * fused at the root with the stage it sums: bit for bit what the unfused schedule computes and
 * within 1e-5 of the float64 reference, one loop fewer; the trace replays and prints as C;
 * requests the primitive or lowering cannot honour are refused with the reason. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
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

enum { M = 40, N = 256, W = 32 };

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* ---- softmax: the sums with the exponentials ------------------------------------------- */

typedef struct {
    te_ctx *ctx;
    te_tensor *X, *Y;
    te_schedule *s;
    te_stage *sy, *exp, *sum_rf, *max_rf;
    te_iter *row, *exp_o;
} smx;

/* The reduction of st rfactored W wide (tt_rf_lanes). */
static te_stage *rf_lanes(te_schedule *s, te_stage *st)
{
    te_stage *srf = tt_rf_lanes(s, st, W);
    assert_non_null(srf);
    return srf;
}

/* Softmax over M x N, every stage at the output's (parallel) row loop, the exponentials in
 * vectors of `exp_w`, the reductions rfactored W wide. */
static void build_smx(smx *r, int64_t exp_w)
{
    r->ctx = te_ctx_create();
    r->X = te_placeholder(r->ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    r->Y = te_op_softmax(r->ctx, r->X, -1, "sm");
    assert_non_null(r->Y);
    r->s = te_schedule_create(r->ctx, 1, &r->Y);
    r->sy = te_schedule_stage(r->s, r->Y);
    r->row = te_stage_axis(r->sy, 0);
    te_iter *jo, *ji;
    assert_int_equal(te_parallel(r->sy, r->row), TE_OK);
    assert_int_equal(te_split(r->sy, te_stage_axis(r->sy, 1), W, &jo, &ji), TE_OK);
    assert_int_equal(te_vectorize(r->sy, ji), TE_OK);
    r->max_rf = rf_lanes(r->s, te_schedule_stage_by_name(r->s, "sm_max"));
    r->sum_rf = rf_lanes(r->s, te_schedule_stage_by_name(r->s, "sm_sum"));
    r->exp = te_schedule_stage_by_name(r->s, "sm_exp");
    assert_non_null(r->exp);
    for (int q = te_schedule_nstages(r->s) - 2; q >= 0; q--)
        assert_int_equal(te_compute_at(te_schedule_stage_at(r->s, q), r->sy, r->row), TE_OK);
    assert_int_equal(te_split(r->exp, te_stage_axis(r->exp, 1), exp_w, &r->exp_o, &ji), TE_OK);
    assert_int_equal(te_vectorize(r->exp, ji), TE_OK);
}

static int build_module(te_schedule *s, int n, te_tensor **args, te_module **m)
{
    te_target tgt = te_target_host();
    return te_build(s, n, args, "cw", &tgt, m);
}

/* Builds and runs (output poisoned first); the source in *src (caller frees). */
static void run(te_schedule *s, te_tensor *X, te_tensor *Y, void **bufs, size_t nout, char **src)
{
    te_module *m = NULL;
    if (build_module(s, 2, (te_tensor *[]){X, Y}, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(te_schedule_ctx(s)));
    *src = strdup(te_module_source(m));
    tt_poison_f32(bufs[1], nout);
    assert_int_equal(te_module_run(m, bufs), TE_OK);
    te_module_free(m);
}

static void test_softmax_sums_in_the_exponentials_loop(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(61));
    float *x = malloc(sizeof(float) * M * N), *y0 = malloc(sizeof(float) * M * N),
          *y1 = malloc(sizeof(float) * M * N);
    tt_fill_f32(&g, x, (size_t)M * N);
    smx plain, cw;
    build_smx(&plain, W);
    build_smx(&cw, W);
    assert_int_equal(te_compute_with(cw.sum_rf, cw.exp, cw.exp_o), TE_OK);
    char *s0 = NULL, *s1 = NULL;
    run(plain.s, plain.X, plain.Y, (void *[]){x, y0}, (size_t)M * N, &s0);
    run(cw.s, cw.X, cw.Y, (void *[]){x, y1}, (size_t)M * N, &s1);
    /* the same additions in the same order */
    assert_int_equal(memcmp(y0, y1, sizeof(float) * M * N), 0);
    double *want = malloc(sizeof(double) * M * N);
    assert_int_equal(te_reference_eval(cw.ctx, 1, &cw.X, (const void *const *)&x, 1, &cw.Y, &want),
                     TE_OK);
    double e = tt_max_rel_err_f32(y1, want, (size_t)M * N);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);
    /* the sums' own loop is gone */
    if (!(count(s1, "for (") < count(s0, "for (")))
        fail_msg("no loop fewer:\n%s", s1);
    assert_non_null(strstr(s1, "compute_with sm_sum_rf sm_exp ")); /* the header's schedule */

    /* the trace replays to the same kernel and prints as C */
    const char *trace = te_schedule_trace(cw.s);
    const char *line = strstr(trace, "compute_with ");
    assert_non_null(line);
    smx re;
    build_smx(&re, W);
    assert_int_equal(te_schedule_apply_trace(re.s, line), TE_OK);
    char *s2 = NULL;
    run(re.s, re.X, re.Y, (void *[]){x, y0}, (size_t)M * N, &s2);
    assert_string_equal(s1, s2);
    char *c = te_trace_to_c(trace, "s");
    assert_non_null(c);
    if (!strstr(c, "te_compute_with("))
        fail_msg("C translation lacks te_compute_with:\n%s", c);
    free(c), free(s0), free(s1), free(s2), free(want), free(x), free(y0), free(y1);
    te_ctx_free(plain.ctx), te_ctx_free(cw.ctx), te_ctx_free(re.ctx);
}

/* ---- at the root: a row sum with the stage it sums ---------------------------------------- */

typedef struct {
    te_ctx *ctx;
    te_tensor *X, *A, *B;
    te_schedule *s;
    te_stage *sa, *sb;
} rsum;

/* A = X * 2 + 1, B[i] = sum_j A[i, rev ? N - 1 - j : j], both at the root. */
static void build_rsum(rsum *r, bool rev)
{
    te_ctx *ctx = r->ctx = te_ctx_create();
    r->X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    r->A = te_compute(
        ctx, "A", 2, (te_expr *[]){i, j},
        te_add(ctx, te_mul(ctx, TE_AT(ctx, r->X, i, j), te_f32(ctx, 2)), te_f32(ctx, 1)));
    te_expr *i2 = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", N);
    te_expr *col = rev ? te_sub(ctx, te_int(ctx, N - 1), k) : k;
    r->B = te_compute(ctx, "B", 1, &i2, te_sum(ctx, TE_AT(ctx, r->A, i2, col), 1, &k));
    r->s = te_schedule_create(ctx, 1, &r->B);
    r->sa = te_schedule_stage(r->s, r->A);
    r->sb = te_schedule_stage(r->s, r->B);
}

static void test_root_row_sum(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(62));
    float x[M * N], b0[M], b1[M];
    tt_fill_f32(&g, x, (size_t)M * N);
    rsum plain, cw;
    build_rsum(&plain, false);
    build_rsum(&cw, false);
    assert_int_equal(te_compute_with(cw.sb, cw.sa, te_stage_axis(cw.sa, 1)), TE_OK);
    char *s0 = NULL, *s1 = NULL;
    run(plain.s, plain.X, plain.B, (void *[]){x, b0}, M, &s0);
    run(cw.s, cw.X, cw.B, (void *[]){x, b1}, M, &s1);
    /* Not bit for bit: the plain row sum accumulates in a register (store_motion), which the C
     * emitter lets the compiler vectorize (an OpenMP simd reduction), while the fused loop also
     * stores A and stays in order. */
    assert_true(tt_max_rel_diff_f32(b1, b0, M) < 1e-5);
    double want[M];
    assert_int_equal(
        te_reference_eval(cw.ctx, 1, &cw.X, (const void *const[]){x}, 1, &cw.B, (double *[]){want}),
        TE_OK);
    double e = tt_max_rel_err_f32(b1, want, M);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);
    if (!(count(s1, "for (") < count(s0, "for (")))
        fail_msg("no loop fewer:\n%s", s1);
    free(s0), free(s1);
    te_ctx_free(plain.ctx), te_ctx_free(cw.ctx);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void expect_build_error(te_schedule *s, te_tensor *X, te_tensor *Y, const char *want)
{
    te_module *m = NULL;
    assert_int_equal(build_module(s, 2, (te_tensor *[]){X, Y}, &m), TE_ERR_SCHEDULE);
    if (!strstr(te_ctx_errmsg(te_schedule_ctx(s)), want))
        fail_msg("error '%s' lacks '%s'", te_ctx_errmsg(te_schedule_ctx(s)), want);
}

static void expect_refused(te_ctx *ctx, int rc, const char *want)
{
    assert_int_equal(rc, TE_ERR_SCHEDULE);
    if (!strstr(te_ctx_errmsg(ctx), want))
        fail_msg("error '%s' lacks '%s'", te_ctx_errmsg(ctx), want);
    te_ctx_clear_error(ctx);
}

static void test_refusals(void **state)
{
    (void)state;
    smx r;
    /* loops that differ: the exponentials in 16-wide vectors (16 steps), the sums' partial
     * results 32 wide (8 steps) */
    build_smx(&r, 16);
    assert_int_equal(te_compute_with(r.sum_rf, r.exp, r.exp_o), TE_OK);
    expect_build_error(r.s, r.X, r.Y, "do not run the same iterations");
    te_ctx_free(r.ctx);

    /* refused by the primitive: a reduction to fuse after, another place, twice, NULL, x not
     * a loop of `with`, a cycle */
    build_smx(&r, W);
    expect_refused(r.ctx, te_compute_with(r.exp, r.max_rf, te_stage_leaf(r.max_rf, 0)),
                   "is a reduction");
    assert_int_equal(te_compute_root(r.exp), TE_OK);
    expect_refused(r.ctx, te_compute_with(r.sum_rf, r.exp, r.exp_o), "not computed at the same");
    te_ctx_free(r.ctx);
    build_smx(&r, W);
    assert_int_equal(te_compute_with(r.sum_rf, r.exp, r.exp_o), TE_OK);
    expect_refused(r.ctx, te_compute_with(r.sum_rf, r.exp, r.exp_o), "already computed with");
    assert_int_equal(te_compute_with(r.sum_rf, NULL, r.exp_o), TE_ERR_ARG);
    te_ctx_clear_error(r.ctx);
    assert_int_equal(te_compute_with(r.max_rf, r.exp, r.row), TE_ERR_SCHEDULE);
    te_ctx_clear_error(r.ctx);
    te_ctx_free(r.ctx);

    /* `with` after st: the exponentials read the maxima, so they come after them */
    build_smx(&r, W);
    assert_int_equal(te_compute_with(r.max_rf, r.exp, r.exp_o), TE_OK);
    expect_build_error(r.s, r.X, r.Y, "is not computed before");
    te_ctx_free(r.ctx);

    /* at the root: a sum read in reverse reads elements a later iteration writes */
    rsum q;
    build_rsum(&q, true);
    assert_int_equal(te_compute_with(q.sb, q.sa, te_stage_axis(q.sa, 1)), TE_OK);
    expect_build_error(q.s, q.X, q.B, "does not write it in the same iteration");
    te_ctx_free(q.ctx);

    /* a parallel loop runs its iterations in no order */
    build_rsum(&q, false);
    assert_int_equal(te_parallel(q.sa, te_stage_axis(q.sa, 0)), TE_OK);
    assert_int_equal(te_parallel(q.sb, te_stage_axis(q.sb, 0)), TE_OK);
    assert_int_equal(te_compute_with(q.sb, q.sa, te_stage_axis(q.sa, 1)), TE_OK);
    expect_build_error(q.s, q.X, q.B, "parallel, vectorized or bound");
    te_ctx_free(q.ctx);

    /* `with`'s loop split after the fusion was asked for */
    build_rsum(&q, false);
    te_iter *jo, *jj;
    assert_int_equal(te_compute_with(q.sb, q.sa, te_stage_axis(q.sa, 1)), TE_OK);
    assert_int_equal(te_split(q.sa, te_stage_axis(q.sa, 1), 8, &jo, &jj), TE_OK);
    expect_build_error(q.s, q.X, q.B, "was split or fused after");
    te_ctx_free(q.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_sums_in_the_exponentials_loop),
        cmocka_unit_test(test_root_row_sum),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
