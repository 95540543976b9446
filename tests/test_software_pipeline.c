/* te_pipeline: a row operation's output loop runs one row behind, fused into the next row's
 * first pass. The pipelined kernel computes exactly what the same schedule without it computes
 * (bit for bit) and the float64 reference, with rows in chunks that do not divide the row count
 * (guarded tails); the generated code has the prologue, the fused loop and the epilogue; the
 * trace replays and prints as C; illegal requests are refused with the reason. */
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

enum { M = 200, N = 256, CHUNK = 16, W = 32 };

typedef struct {
    te_ctx *ctx;
    te_tensor *in[TE_OP_MAX_IO], *Y;
    int n_in;
    te_schedule *s;
    te_stage *sy, *first_rf, *elementwise;
    te_iter *chunk, *row, *jo;
} rowop;

/* The reduction of st rfactored W wide (tt_rf_lanes). */
static te_stage *rf_lanes(te_schedule *s, te_stage *st)
{
    te_stage *srf = tt_rf_lanes(s, st, W);
    assert_non_null(srf);
    return srf;
}

/* op over M x N: rows in chunks of CHUNK (parallel), the output's columns in W-wide vectors,
 * every reduction rfactored W wide, every stage computed at the output's row loop. */
static void build(rowop *r, const char *op, int out_split)
{
    r->ctx = te_ctx_create();
    te_tensor *out[TE_OP_MAX_IO];
    int no;
    char params[64];
    snprintf(params, sizeof params, "m=%d,n=%d", M, N);
    assert_int_equal(te_op_build(r->ctx, op, params, r->in, &r->n_in, out, &no), TE_OK);
    r->Y = out[0];
    r->s = te_schedule_create(r->ctx, 1, &r->Y);
    assert_non_null(r->s);
    r->sy = te_schedule_stage(r->s, r->Y);
    te_iter *ji;
    assert_int_equal(te_split(r->sy, te_stage_axis(r->sy, 0), CHUNK, &r->chunk, &r->row), TE_OK);
    assert_int_equal(te_parallel(r->sy, r->chunk), TE_OK);
    assert_int_equal(te_split(r->sy, te_stage_axis(r->sy, 1), out_split, &r->jo, &ji), TE_OK);
    assert_int_equal(te_vectorize(r->sy, ji), TE_OK);
    te_tensor *reds[8];
    int nred = 0;
    for (int q = 0; q < te_schedule_nstages(r->s) && nred < 8; q++)
        if (te_stage_nreduce(te_schedule_stage_at(r->s, q)) > 0)
            reds[nred++] = te_stage_tensor(te_schedule_stage_at(r->s, q));
    r->first_rf = NULL;
    for (int q = 0; q < nred; q++) {
        te_stage *srf = rf_lanes(r->s, te_schedule_stage(r->s, reds[q]));
        if (!r->first_rf)
            r->first_rf = srf;
    }
    r->elementwise = NULL;
    for (int q = te_schedule_nstages(r->s) - 2; q >= 0; q--) {
        te_stage *st = te_schedule_stage_at(r->s, q);
        assert_int_equal(te_compute_at(st, r->sy, r->row), TE_OK);
        if (te_stage_nreduce(st) == 0 && !r->elementwise &&
            te_tensor_ndim(te_stage_tensor(st)) == 2 &&
            te_tensor_shape(te_stage_tensor(st))[1] == N)
            r->elementwise = st;
    }
}

/* te_build of r for the host (inputs, then the output); its status. */
static int build_module(rowop *r, te_module **m)
{
    te_target tgt = te_target_host();
    te_tensor *args[TE_OP_MAX_IO + 1];
    for (int q = 0; q < r->n_in; q++)
        args[q] = r->in[q];
    args[r->n_in] = r->Y;
    return te_build(r->s, r->n_in + 1, args, "rowop_pipe", &tgt, m);
}

/* Builds and runs r on bufs (inputs, then the output, poisoned first); the source in *src
 * (caller frees) when src is set. Returns te_build's status. */
static int run(rowop *r, void **bufs, char **src)
{
    te_module *m = NULL;
    int rc = build_module(r, &m);
    if (rc != TE_OK)
        return rc;
    if (src)
        *src = strdup(te_module_source(m));
    tt_poison_f32(bufs[r->n_in], (size_t)M * N);
    assert_int_equal(te_module_run(m, bufs), TE_OK);
    te_module_free(m);
    return TE_OK;
}

static void check_op(const char *op)
{
    tt_rng g;
    tt_rng_seed(&g, tt_seed(11));
    rowop plain, pipe;
    build(&plain, op, W);
    build(&pipe, op, W);
    void *bufs[TE_OP_MAX_IO + 1];
    for (int q = 0; q < pipe.n_in; q++) {
        size_t n = (size_t)te_tensor_numel(pipe.in[q]);
        bufs[q] = malloc(n * sizeof(float));
        tt_fill_f32(&g, bufs[q], n);
    }
    float *y0 = malloc(sizeof(float) * M * N), *y1 = malloc(sizeof(float) * M * N);
    bufs[pipe.n_in] = y0;
    assert_int_equal(run(&plain, bufs, NULL), TE_OK);

    assert_int_equal(te_pipeline(pipe.sy, pipe.row, pipe.first_rf), TE_OK);
    char *src = NULL;
    bufs[pipe.n_in] = y1;
    if (run(&pipe, bufs, &src) != TE_OK)
        fail_msg("%s: build: %s", op, te_ctx_errmsg(pipe.ctx));
    const char *marks[] = {"pipeline prologue: i0_i = 0", "one iteration behind (te_pipeline)",
                           "pipeline epilogue:", "for (int64_t i0_i = 1; i0_i < 16; ++i0_i)"};
    for (int q = 0; q < 4; q++)
        if (!strstr(src, marks[q]))
            fail_msg("%s: no '%s' in:\n%s", op, marks[q], src);
    /* the same arithmetic in another order of rows: bit for bit */
    assert_int_equal(memcmp(y0, y1, sizeof(float) * M * N), 0);
    double *want = malloc(sizeof(double) * M * N);
    assert_int_equal(te_reference_eval(pipe.ctx, pipe.n_in, pipe.in, (const void *const *)bufs, 1,
                                       &pipe.Y, &want),
                     TE_OK);
    double e = tt_max_rel_err_f32(y1, want, (size_t)M * N);
    if (!(e < 1e-5))
        fail_msg("%s: max relative error %g", op, e);

    /* The trace replays to the same kernel and prints as C. */
    const char *trace = te_schedule_trace(pipe.s);
    const char *line = strstr(trace, "pipeline ");
    assert_non_null(line);
    rowop re;
    build(&re, op, W);
    assert_int_equal(te_schedule_apply_trace(re.s, line), TE_OK);
    char *src2 = NULL;
    assert_int_equal(run(&re, bufs, &src2), TE_OK);
    assert_string_equal(src, src2);
    char *c = te_trace_to_c(trace, "s");
    assert_non_null(c);
    if (!strstr(c, "te_pipeline("))
        fail_msg("C translation lacks te_pipeline:\n%s", c);
    free(c), free(src), free(src2), free(want);
    for (int q = 0; q < pipe.n_in; q++)
        free(bufs[q]);
    free(y0), free(y1);
    te_ctx_free(plain.ctx), te_ctx_free(pipe.ctx), te_ctx_free(re.ctx);
}

static void test_softmax(void **state)
{
    (void)state;
    check_op("softmax");
}

static void test_layer_norm(void **state)
{
    (void)state;
    check_op("layer_norm");
}

/* Builds r and expects te_build to fail with a message containing `want`. */
static void expect_build_error(rowop *r, const char *want)
{
    te_module *m = NULL;
    assert_int_equal(build_module(r, &m), TE_ERR_SCHEDULE);
    if (!strstr(te_ctx_errmsg(r->ctx), want))
        fail_msg("error '%s' lacks '%s'", te_ctx_errmsg(r->ctx), want);
}

static void test_refusals(void **state)
{
    (void)state;
    rowop r;
    /* the output reads the exponentials, which the exp stage's own loop writes */
    build(&r, "softmax", W);
    assert_int_equal(te_pipeline(r.sy, r.row, r.elementwise), TE_OK);
    expect_build_error(&r, "which is written before the loop of 'softmax_exp' ends");
    te_ctx_free(r.ctx);

    /* loops that differ in extent: the output in 16-wide vectors (16 steps), the partial
     * maxima in 32-wide ones (8 steps) */
    build(&r, "softmax", 16);
    assert_int_equal(te_pipeline(r.sy, r.row, r.first_rf), TE_OK);
    expect_build_error(&r, "cannot be fused with loop");
    te_ctx_free(r.ctx);

    /* a parallel loop runs its iterations in no order */
    build(&r, "softmax", W);
    te_stage *srf = r.first_rf;
    assert_int_equal(te_compute_at(srf, r.sy, r.chunk), TE_OK);
    assert_int_equal(te_pipeline(r.sy, r.chunk, srf), TE_OK);
    expect_build_error(&r, "is parallel, vectorized, unrolled or bound");
    te_ctx_free(r.ctx);

    /* the pipelined loop cannot be split afterwards (stages are computed at it) */
    build(&r, "softmax", W);
    assert_int_equal(te_pipeline(r.sy, r.row, r.first_rf), TE_OK);
    te_iter *ro, *ri;
    assert_int_equal(te_split(r.sy, r.row, 4, &ro, &ri), TE_ERR_SCHEDULE);
    te_ctx_free(r.ctx);

    /* refused by the primitive itself: a producer computed elsewhere, a reduction stage, a
     * reduction loop, a second pipeline */
    build(&r, "softmax", W);
    assert_int_equal(te_pipeline(r.sy, r.chunk, r.first_rf), TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(r.ctx), "is not computed at loop 'i0_o'"));
    te_ctx_clear_error(r.ctx); /* the first error stays until cleared */
    assert_int_equal(te_pipeline(r.first_rf, te_stage_axis(r.first_rf, 0), r.elementwise),
                     TE_ERR_SCHEDULE);
    if (!strstr(te_ctx_errmsg(r.ctx), "is a reduction"))
        fail_msg("%s", te_ctx_errmsg(r.ctx));
    te_ctx_clear_error(r.ctx);
    assert_int_equal(te_pipeline(r.sy, r.row, NULL), TE_ERR_ARG);
    te_ctx_clear_error(r.ctx);
    assert_int_equal(te_pipeline(r.sy, r.row, r.first_rf), TE_OK);
    assert_int_equal(te_pipeline(r.sy, r.row, r.first_rf), TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(r.ctx), "already pipelined"));
    te_ctx_free(r.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
