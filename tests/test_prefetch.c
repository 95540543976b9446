/* te_prefetch: software prefetch of the next row (the loop a stage is computed at) and of a
 * later iteration of the stage's own loop. The generated C issues __builtin_prefetch at the
 * chosen loop with the index clamped to the loop's last iteration; results are those of the
 * same schedule without it (and of the float64 reference); the trace replays and prints as C;
 * te_prefetch_level picks the cache level (the locality argument); illegal requests are refused
 * with the reason and leave the schedule as it was. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "testutil.h"

enum { M = 37, N = 96 };

typedef struct {
    te_ctx *ctx;
    te_tensor *X, *Y;
    te_schedule *s;
    te_stage *sy, *sexp;
    te_iter *row, *chunk;
} rowop;

/* softmax over rows; every stage at the output's row loop, the exp stage vectorized in chunks
 * of `width` (its loop `chunk`). */
static void build_w(rowop *r, int64_t width)
{
    r->ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int ni, no;
    char params[64];
    snprintf(params, sizeof params, "m=%d,n=%d", M, N);
    assert_int_equal(te_op_build(r->ctx, "softmax", params, in, &ni, out, &no), TE_OK);
    r->X = in[0];
    r->Y = out[0];
    r->s = te_schedule_create(r->ctx, 1, &r->Y);
    assert_non_null(r->s);
    r->sy = te_schedule_stage(r->s, r->Y);
    r->row = te_stage_axis(r->sy, 0);
    r->sexp = NULL;
    for (int q = te_schedule_nstages(r->s) - 2; q >= 0; q--) {
        te_stage *st = te_schedule_stage_at(r->s, q);
        assert_int_equal(te_compute_at(st, r->sy, r->row), TE_OK);
        if (te_stage_nreduce(st) == 0 && !r->sexp)
            r->sexp = st;
    }
    assert_non_null(r->sexp);
    te_iter *a, *b;
    assert_int_equal(te_split(r->sexp, te_stage_axis(r->sexp, 1), width, &a, &b), TE_OK);
    assert_int_equal(te_vectorize(r->sexp, b), TE_OK);
    r->chunk = a;
}

static void build(rowop *r) { build_w(r, 8); }

static void run(rowop *r, const float *x, float *y, char **src)
{
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(r->s, 2, (te_tensor *[]){r->X, r->Y}, "sm_pf", &tgt, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(r->ctx));
    if (src)
        *src = strdup(te_module_source(m));
    tt_poison_f32(y, (size_t)M * N);
    assert_int_equal(te_module_run(m, (void *[]){(void *)x, y}), TE_OK);
    te_module_free(m);
}

static void reference(const float *x, double *want)
{
    for (int i = 0; i < M; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < N; j++)
            mx = fmax(mx, x[i * N + j]);
        for (int j = 0; j < N; j++)
            s += exp(x[i * N + j] - mx);
        for (int j = 0; j < N; j++)
            want[i * N + j] = exp(x[i * N + j] - mx) / s;
    }
}

static void test_next_row_prefetch_keeps_results(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(5));
    float *x = malloc(sizeof(float) * M * N), *y0 = malloc(sizeof(float) * M * N),
          *y1 = malloc(sizeof(float) * M * N);
    double *want = malloc(sizeof(double) * M * N);
    tt_fill_f32(&g, x, (size_t)M * N);
    reference(x, want);

    rowop plain, pf;
    build(&plain);
    char *src0 = NULL, *src1 = NULL;
    run(&plain, x, y0, &src0);
    assert_null(strstr(src0, "__builtin_prefetch"));

    build(&pf);
    assert_int_equal(te_prefetch(pf.sexp, pf.chunk, pf.X, pf.row, 1), TE_OK);
    run(&pf, x, y1, &src1);
    /* One prefetch per chunk of 8, of the next row, clamped to the last row. */
    if (!strstr(src1, "__builtin_prefetch(&X[te_min_i64(i0 + 1, 36) * 96"))
        fail_msg("no clamped next-row prefetch in:\n%s", src1);
    assert_int_equal(memcmp(y0, y1, sizeof(float) * M * N), 0);
    double e = tt_max_rel_err_f32(y1, want, (size_t)M * N);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);

    /* The trace replays to the same kernel and prints as C. */
    const char *trace = te_schedule_trace(pf.s);
    assert_non_null(strstr(trace, "prefetch "));
    rowop re;
    build(&re);
    /* The replay starts from the same compute_at / split / vectorize; apply only the prefetch. */
    const char *line = strstr(trace, "prefetch ");
    assert_int_equal(te_schedule_apply_trace(re.s, line), TE_OK);
    char *src2 = NULL;
    run(&re, x, y0, &src2);
    assert_string_equal(src1, src2);
    char *c = te_trace_to_c(trace, "s");
    assert_non_null(c);
    if (!strstr(c, "te_prefetch("))
        fail_msg("C translation lacks te_prefetch:\n%s", c);
    free(c);
    free(src0), free(src1), free(src2);
    te_ctx_free(plain.ctx), te_ctx_free(pf.ctx), te_ctx_free(re.ctx);
    free(x), free(y0), free(y1), free(want);
}

/* The classic distance: a later iteration of the stage's own loop (the output's chunks, 4
 * ahead), clamped to the last chunk. */
static void test_own_loop_distance(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(6));
    float *x = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N);
    double *want = malloc(sizeof(double) * M * N);
    tt_fill_f32(&g, x, (size_t)M * N);
    reference(x, want);
    rowop r;
    build(&r);
    te_iter *a, *b;
    assert_int_equal(te_split(r.sexp, r.chunk, 2, &a, &b), TE_OK);
    assert_int_equal(te_prefetch(r.sexp, a, r.X, a, 4), TE_OK);
    char *src = NULL;
    run(&r, x, y, &src);
    if (!strstr(src, "te_min_i64(") || !strstr(src, "__builtin_prefetch("))
        fail_msg("no prefetch in:\n%s", src);
    double e = tt_max_rel_err_f32(y, want, (size_t)M * N);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);
    free(src);
    te_ctx_free(r.ctx);
    free(x), free(y), free(want);
}

/* te_prefetch_level: level 2 (L2) and 3 (last level) emit locality 2 and 1, the trace line gains
 * the level as a last field (level 1 keeps the old 7-field line), replays and prints as C, and
 * the results are those without the prefetch. */
static void test_cache_level(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(7));
    float *x = malloc(sizeof(float) * M * N), *y0 = malloc(sizeof(float) * M * N),
          *y1 = malloc(sizeof(float) * M * N);
    tt_fill_f32(&g, x, (size_t)M * N);
    rowop plain;
    build(&plain);
    run(&plain, x, y0, NULL);
    for (int level = 1; level <= 3; level++) {
        rowop r;
        build(&r);
        assert_int_equal(te_prefetch_level(r.sexp, r.chunk, r.X, r.row, 1, level), TE_OK);
        char *src = NULL, want[64];
        run(&r, x, y1, &src);
        snprintf(want, sizeof want, " * 96 + i1_o * 8], 0, %d);", 4 - level);
        if (!strstr(src, want))
            fail_msg("level %d: no '%s' in:\n%s", level, want, src);
        assert_int_equal(memcmp(y0, y1, sizeof(float) * M * N), 0);
        const char *line = strstr(te_schedule_trace(r.s), "prefetch ");
        assert_non_null(line);
        const char *end = strchr(line, '\n');
        char text[160];
        snprintf(text, sizeof text, "%.*s", end ? (int)(end - line) : (int)strlen(line), line);
        char expect[160];
        if (level == 1)
            snprintf(expect, sizeof expect, "prefetch softmax_exp i1_o X softmax i0 1");
        else
            snprintf(expect, sizeof expect, "prefetch softmax_exp i1_o X softmax i0 1 %d", level);
        assert_string_equal(text, expect);
        rowop re;
        build(&re);
        assert_int_equal(te_schedule_apply_trace(re.s, line), TE_OK);
        char *src2 = NULL;
        run(&re, x, y1, &src2);
        assert_string_equal(src, src2);
        char *c = te_trace_to_c(te_schedule_trace(r.s), "s");
        assert_non_null(c);
        if (!strstr(c, level == 1 ? "te_prefetch(" : "te_prefetch_level("))
            fail_msg("C translation of level %d:\n%s", level, c);
        free(c), free(src), free(src2);
        te_ctx_free(r.ctx), te_ctx_free(re.ctx);
    }
    te_ctx_free(plain.ctx);
    free(x), free(y0), free(y1);
}

static void expect_refused(rowop *r, int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(te_ctx_errmsg(r->ctx), needle))
        fail_msg("message '%s' lacks '%s'", te_ctx_errmsg(r->ctx), needle);
    te_ctx_clear_error(r->ctx);
}

static void test_refusals(void **state)
{
    (void)state;
    rowop r;
    build(&r);
    char *before = strdup(te_schedule_trace(r.s));
    te_iter *vec = te_stage_leaf(r.sexp, te_stage_nleaves(r.sexp) - 1);
    expect_refused(&r, te_prefetch(r.sexp, vec, r.X, r.row, 1), TE_ERR_SCHEDULE, "vectorized");
    expect_refused(&r, te_prefetch(r.sexp, r.chunk, r.X, r.row, 0), TE_ERR_ARG, "[1, 1024]");
    /* A loop of another stage that r.sexp is not computed at. */
    te_stage *other = te_schedule_stage_at(r.s, 0);
    if (other == r.sexp)
        other = te_schedule_stage_at(r.s, 1);
    expect_refused(&r, te_prefetch(r.sexp, r.chunk, r.X, te_stage_leaf(other, 0), 1),
                   TE_ERR_SCHEDULE, "neither a loop of the stage");
    /* The exp stage does not read the output. */
    expect_refused(&r, te_prefetch(r.sexp, r.chunk, r.Y, r.row, 1), TE_ERR_SCHEDULE,
                   "does not read");
    assert_int_equal(te_prefetch(NULL, r.chunk, r.X, r.row, 1), TE_ERR_ARG);
    expect_refused(&r, te_prefetch_level(r.sexp, r.chunk, r.X, r.row, 1, 4), TE_ERR_ARG,
                   "cache level must be 1, 2 or 3");
    expect_refused(&r, te_prefetch_level(r.sexp, r.chunk, r.X, r.row, 1, 0), TE_ERR_ARG,
                   "cache level must be 1, 2 or 3");
    assert_string_equal(before, te_schedule_trace(r.s));
    /* A bad replay line names its fault. */
    assert_int_not_equal(te_schedule_apply_trace(r.s, "prefetch softmax_exp i1_o X softmax i0 x"),
                         TE_OK);
    assert_int_not_equal(te_schedule_apply_trace(r.s, "prefetch softmax_exp i1_o X softmax i0 1 5"),
                         TE_OK);
    if (!strstr(te_ctx_errmsg(r.ctx), "cache level '5'"))
        fail_msg("message: %s", te_ctx_errmsg(r.ctx));
    te_ctx_clear_error(r.ctx);
    assert_string_equal(before, te_schedule_trace(r.s));
    free(before);
    te_ctx_free(r.ctx);
}

/* te_prefetch_lines: chunks of 32 floats cover two cache lines, and a prefetch per line is
 * issued by default; with one line per iteration only the first. The results do not change;
 * the trace carries the count, replays and prints as C. A Welford layer norm (a tuple
 * reduction, whose loads are in its sources) takes a prefetch at its reduction loop too. */
static void test_lines_per_iteration(void **state)
{
    (void)state;
    tt_rng g;
    tt_rng_seed(&g, tt_seed(8));
    float *x = malloc(sizeof(float) * M * N), *y0 = malloc(sizeof(float) * M * N),
          *y1 = malloc(sizeof(float) * M * N);
    tt_fill_f32(&g, x, (size_t)M * N);
    rowop plain;
    build_w(&plain, 32);
    run(&plain, x, y0, NULL);
    for (int lines = 1; lines <= 2; lines++) {
        rowop r;
        build_w(&r, 32);
        assert_int_equal(te_prefetch_lines(r.sexp, r.chunk, r.X, r.row, 1, 2, lines == 2 ? 8 : 1),
                         TE_OK);
        char *src = NULL;
        run(&r, x, y1, &src);
        assert_int_equal(memcmp(y0, y1, sizeof(float) * M * N), 0);
        assert_non_null(strstr(src, " * 96 + i1_o * 32], 0, 2);"));
        assert_int_equal(strstr(src, " * 96 + i1_o * 32 + 16], 0, 2);") != NULL, lines == 2);
        const char *tr = te_schedule_trace(r.s);
        if (lines == 1) {
            assert_non_null(strstr(tr, "prefetch softmax_exp i1_o X softmax i0 1 2 1"));
            rowop re;
            build_w(&re, 32);
            assert_int_equal(te_schedule_apply_trace(re.s, strstr(tr, "prefetch ")), TE_OK);
            char *src2 = NULL;
            run(&re, x, y1, &src2);
            assert_string_equal(src, src2);
            char *c = te_trace_to_c(tr, "s");
            assert_non_null(c);
            assert_non_null(strstr(c, "te_prefetch_lines("));
            free(c), free(src2);
            te_ctx_free(re.ctx);
            expect_refused(&r, te_prefetch_lines(r.sexp, r.chunk, r.X, r.row, 1, 2, 0), TE_ERR_ARG,
                           "lines per iteration");
            expect_refused(&r, te_prefetch_lines(r.sexp, r.chunk, r.X, r.row, 1, 2, 9), TE_ERR_ARG,
                           "lines per iteration");
            assert_int_not_equal(
                te_schedule_apply_trace(r.s, "prefetch softmax_exp i1_o X softmax i0 1 2 0"),
                TE_OK);
            te_ctx_clear_error(r.ctx);
        } else {
            assert_non_null(strstr(tr, "prefetch softmax_exp i1_o X softmax i0 1 2\n"));
        }
        free(src);
        te_ctx_free(r.ctx);
    }
    te_ctx_free(plain.ctx);

    /* The tuple reduction: Welford statistics per row, partial results over 32-float steps. */
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_tensor *Y = te_op_layer_norm_welford(ctx, X, NULL, NULL, 1e-5, -1, "ln");
    assert_non_null(Y);
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_stage *sy = te_schedule_stage(s, Y), *sw = te_schedule_stage(s, te_op_find(Y, "ln_cnt"));
    te_iter *row = te_stage_axis(sy, 0);
    for (int q = te_schedule_nstages(s) - 2; q >= 0; q--)
        assert_int_equal(te_compute_at(te_schedule_stage_at(s, q), sy, row), TE_OK);
    te_iter *ko, *ki;
    assert_int_equal(te_split(sw, te_stage_reduce_axis(sw, 0), 32, &ko, &ki), TE_OK);
    assert_int_equal(te_prefetch_lines(sw, ko, X, row, 1, 2, 1), TE_OK);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 2, (te_tensor *[]){X, Y}, "lnw_pf", &tgt, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(ctx));
    if (!strstr(te_module_source(m),
                "__builtin_prefetch(&X[te_min_i64(i0 + 1, 36) * 96 + k_o * 32]"))
        fail_msg("no prefetch in the Welford statistics:\n%s", te_module_source(m));
    tt_poison_f32(y1, (size_t)M * N);
    assert_int_equal(te_module_run(m, (void *[]){x, y1}), TE_OK);
    double *want = malloc(sizeof(double) * M * N);
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *const[]){x}, 1, &Y, &want), TE_OK);
    assert_true(tt_max_rel_err_f32(y1, want, (size_t)M * N) < 1e-4);
    free(want);
    te_module_free(m);
    te_ctx_free(ctx);
    free(x), free(y0), free(y1);
}

/* The row-op template prefetches the next row by default where the input is larger than a
 * private L2 (8 MiB here), and not by default for a small one (16 KiB); both are in its space. */
static void test_rowop_template_default(void **state)
{
    (void)state;
    const struct {
        const char *params;
        bool want;
    } cases[] = {{"m=2048,n=1024", true}, {"m=64,n=64", false}};
    for (int c = 0; c < 2; c++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni, no;
        assert_int_equal(te_op_build(ctx, "softmax", cases[c].params, in, &ni, out, &no), TE_OK);
        te_target tgt = te_target_host();
        te_space *sp = te_space_create(ctx, "softmax", ni, in, no, out, TE_SPACE_TEMPLATE, &tgt);
        if (!sp)
            fail_msg("%s: %s", cases[c].params, te_ctx_errmsg(ctx));
        const char *d = te_space_get(sp, 0);
        assert_non_null(d);
        if ((strstr(d, "\nprefetch ") != NULL || strncmp(d, "prefetch ", 9) == 0) != cases[c].want)
            fail_msg("%s: default trace %s a prefetch:\n%s", cases[c].params,
                     cases[c].want ? "lacks" : "has", d);
        te_ctx_free(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next_row_prefetch_keeps_results),
        cmocka_unit_test(test_own_loop_distance),
        cmocka_unit_test(test_cache_level),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_lines_per_iteration),
        cmocka_unit_test(test_rowop_template_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
