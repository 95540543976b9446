/* End to end: loops the schedule vectorizes whose bodies read through if_then_else guards
 * (padding, stencil borders) or at constant strides other than 1 are built with te_build and
 * checked against te_reference_eval (random inputs, poisoned outputs); te_lowered_notes says
 * which loops stayed scalar and why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "testutil.h"

/* Lowers and builds s (args: inputs then the one output), runs it on random inputs and compares
 * with the reference. Returns the number of notes of the lowered program; when src_has is not
 * NULL the emitted C must contain it. */
static int check(te_ctx *ctx, te_schedule *s, int n_in, te_tensor **in, te_tensor *out,
                 const char *src_has)
{
    te_tensor *args[8];
    memcpy(args, in, sizeof(te_tensor *) * (size_t)n_in);
    args[n_in] = out;
    te_target tgt = te_target_host();
    te_lowered *f = te_lower(s, n_in + 1, args, "k", &tgt);
    if (!f)
        fail_msg("te_lower: %s", te_ctx_errmsg(ctx));
    int notes = te_lowered_notes(f, NULL, 0);
    const char *src = te_emit_c(ctx, f, &tgt);
    assert_non_null(src);
    if (getenv("TESSERA_TEST_VERBOSE"))
        te_lowered_print(f, stderr);
    if (src_has && !strstr(src, src_has))
        fail_msg("emitted C has no '%s':\n%s", src_has, src);
    te_module *m = NULL;
    if (te_build(s, n_in + 1, args, "k", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    tt_rng r;
    tt_rng_seed(&r, tt_seed(13));
    void *data[8];
    for (int i = 0; i < n_in; i++) {
        size_t n = (size_t)te_tensor_numel(in[i]);
        data[i] = malloc(sizeof(float) * n);
        tt_fill_f32(&r, data[i], n);
    }
    size_t n = (size_t)te_tensor_numel(out);
    float *got = malloc(sizeof(float) * n);
    tt_poison_f32(got, n);
    data[n_in] = got;
    assert_int_equal(te_module_run(m, data), TE_OK);
    double *ref = malloc(sizeof(double) * n);
    assert_int_equal(te_reference_eval(ctx, n_in, in, (const void *const *)data, 1, &out, &ref),
                     TE_OK);
    double e = tt_max_rel_err_f32(got, ref, n);
    if (!(e < 1e-5))
        fail_msg("max relative error %g", e);
    free(ref);
    free(got);
    for (int i = 0; i < n_in; i++)
        free(data[i]);
    te_module_free(m);
    return notes;
}

/* B[i] = A[i-1] + A[i] + A[i+1], zero outside A: the borders are if_then_else reads. */
static te_tensor *stencil(te_ctx *ctx, te_tensor *A, int64_t n)
{
    te_expr *i = te_axis(ctx, "i", n);
    te_expr *im = te_sub(ctx, i, te_int(ctx, 1)), *ip = te_add(ctx, i, te_int(ctx, 1));
    te_expr *l = te_if_then_else(ctx, te_ge(ctx, im, te_int(ctx, 0)), te_read(ctx, A, 1, &im),
                                 te_f32(ctx, 0));
    te_expr *h = te_if_then_else(ctx, te_lt(ctx, ip, te_int(ctx, n)), te_read(ctx, A, 1, &ip),
                                 te_f32(ctx, 0));
    te_expr *body = te_add(ctx, te_add(ctx, l, te_read(ctx, A, 1, &i)), h);
    return te_compute(ctx, "B", 1, &i, body);
}

static void test_stencil_borders_vectorize(void **state)
{
    (void)state;
    /* 8 divides 64 (one vector per outer iteration) and does not divide 61 (a tail). */
    const int64_t sizes[] = {64, 61};
    for (int k = 0; k < 2; k++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *A = te_placeholder(ctx, "A", TE_F32, 1, &sizes[k]);
        te_tensor *B = stencil(ctx, A, sizes[k]);
        te_schedule *s = te_schedule_create(ctx, 1, &B);
        te_stage *st = te_schedule_stage(s, B);
        te_iter *io, *ii;
        assert_int_equal(te_split(st, te_stage_axis(st, 0), 8, &io, &ii), TE_OK);
        assert_int_equal(te_vectorize(st, ii), TE_OK);
        /* Before: kept scalar without a word. Now the border iterations are peeled (masked
         * gathers), the interior is plain vector loads; with 61 the 5-element tail of the split
         * stays scalar, with a note. */
        assert_int_equal(check(ctx, s, 1, &A, B, "te_load_f32x8"), k);
        te_ctx_free(ctx);
    }
}

static void test_padding_vectorizes(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[4], *out[4];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "pad", "n=1,c=2,h=5,w=30,pad=1", in, &ni, out, &no), TE_OK);
    te_schedule *s = te_schedule_create(ctx, 1, out);
    assert_int_equal(te_schedule_apply_trace(s, "split pad i3 8\nvectorize pad i3_i\n"), TE_OK);
    /* the interior rows and columns are plain vector loads */
    assert_int_equal(check(ctx, s, ni, in, out[0], "te_load_f32x8(&X["), 0);
    te_ctx_free(ctx);
}

/* Stride 1: the interior reads X with plain vector loads; stride 2: gathers, masked at the
 * borders. */
static void conv2d_case(const char *params, const char *src_has)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[4], *out[4];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "conv2d", params, in, &ni, out, &no), TE_OK);
    te_schedule *s = te_schedule_create(ctx, 1, out);
    te_stage *st = te_schedule_stage(s, out[0]);
    /* The padding read inlined into the convolution: the guard sits in the hot loop. */
    for (int i = 0; i < te_schedule_nstages(s); i++) {
        te_stage *p = te_schedule_stage_at(s, i);
        if (p != st)
            assert_int_equal(te_compute_inline(p), TE_OK);
    }
    int nl = te_stage_nleaves(st);
    te_iter *x = te_stage_axis(st, 3), *xo, *xi;
    assert_int_equal(te_split(st, x, 8, &xo, &xi), TE_OK);
    te_iter *order[8];
    int k = 0;
    for (int i = 0; i < nl + 1; i++) {
        te_iter *l = te_stage_leaf(st, i);
        if (l != xi)
            order[k++] = l;
    }
    order[k++] = xi;
    assert_int_equal(te_reorder(st, k, order), TE_OK);
    assert_int_equal(te_vectorize(st, xi), TE_OK);
    assert_int_equal(check(ctx, s, ni, in, out[0], src_has), 0);
    te_ctx_free(ctx);
}

static void test_padded_conv2d_vectorizes(void **state)
{
    (void)state;
    conv2d_case("n=1,c=3,h=10,w=16,oc=4,kh=3,kw=3,pad=1", "te_load_f32x8(&X[");
    conv2d_case("n=1,c=2,h=9,w=33,oc=3,kh=3,kw=3,pad=1,stride=2", "te_gather_f32x8(&X[");
}

static void test_stride2_read_is_a_gather(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    int64_t n = 64, m = 128;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 1, &m);
    te_expr *i = te_axis(ctx, "i", n);
    te_expr *i2 = te_mul(ctx, i, te_int(ctx, 2));
    te_tensor *B =
        te_compute(ctx, "B", 1, &i, te_mul(ctx, te_read(ctx, A, 1, &i2), te_f32(ctx, 3)));
    te_schedule *s = te_schedule_create(ctx, 1, &B);
    te_stage *st = te_schedule_stage(s, B);
    te_iter *io, *ii;
    assert_int_equal(te_split(st, te_stage_axis(st, 0), 8, &io, &ii), TE_OK);
    assert_int_equal(te_vectorize(st, ii), TE_OK);
    assert_int_equal(check(ctx, s, 1, &A, B, "te_gather_f32x8"), 0);
    te_ctx_free(ctx);
}

/* A loop that cannot vectorize says so, in the program and through te_lowered_notes. */
static void test_fallback_is_reported(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    int64_t n = 60;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 1, &n);
    te_tensor *B = stencil(ctx, A, n);
    te_schedule *s = te_schedule_create(ctx, 1, &B);
    te_stage *st = te_schedule_stage(s, B);
    te_iter *io, *ii;
    assert_int_equal(te_split(st, te_stage_axis(st, 0), 6, &io, &ii), TE_OK);
    assert_int_equal(te_vectorize(st, ii), TE_OK);
    /* the borders peeled: head, interior and tail loops, each with its note */
    assert_int_equal(check(ctx, s, 1, &A, B, "// vectorize i_i: kept scalar: extent 6 is not"), 3);
    te_tensor *args[2] = {A, B};
    te_target tgt = te_target_host();
    te_lowered *f = te_lower(s, 2, args, "k", &tgt);
    const char *notes[4] = {NULL, NULL, NULL, NULL};
    assert_int_equal(te_lowered_notes(f, notes, 2), 3);
    assert_null(notes[2]); /* max respected */
    for (int i = 0; i < 2; i++)
        assert_string_equal(
            notes[i], "vectorize i_i: kept scalar: extent 6 is not a power of two in [2, 64] or "
                      "a multiple of the register width");
    assert_int_equal(te_lowered_notes(NULL, notes, 2), 0);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stencil_borders_vectorize),
        cmocka_unit_test(test_padding_vectorizes),
        cmocka_unit_test(test_padded_conv2d_vectorizes),
        cmocka_unit_test(test_stride2_read_is_a_gather),
        cmocka_unit_test(test_fallback_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
