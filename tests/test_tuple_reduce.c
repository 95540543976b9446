/* Tuple reducers (te/reduce_tuple.c): the built-in ones through the reference interpreter
 * against direct float64 computations, a user-defined one, printing, and the errors for
 * tuples used wrongly. */
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

#include "tessera/te.h"
#include "testutil.h"

enum { M = 5, K = 37 };

/* Row-wise argmax/argmin over A[M, K] with planted ties: the smallest index wins. */
static void check_arg(bool is_max)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_reducer *r =
        is_max ? te_reducer_argmax(ctx, TE_F32, TE_I64) : te_reducer_argmin(ctx, TE_F32, TE_I64);
    assert_non_null(r);
    assert_ptr_equal(r, is_max ? te_reducer_argmax(ctx, TE_F32, TE_I64)
                               : te_reducer_argmin(ctx, TE_F32, TE_I64)); /* cached */
    assert_int_equal(te_reducer_ncomp(r), 2);
    assert_int_equal(te_reducer_dtype(r, 1), TE_I64);
    te_expr *red = te_reduce_tuple(ctx, r, 2, (te_expr *[]){TE_AT(ctx, A, i, k), k}, 1, &k);
    te_tensor *out[2];
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"val", "idx"}, 1, &i, red, out),
                     TE_OK);
    assert_int_equal(te_tensor_dtype(out[0]), TE_F32);
    assert_int_equal(te_tensor_dtype(out[1]), TE_I64);
    assert_int_equal(te_tensor_tuple_size(out[1]), 2);
    assert_ptr_equal(te_tensor_tuple_member(out[1], 0), out[0]);

    float a[M * K];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(3));
    tt_fill_f32(&g, a, M * K);
    for (int m = 0; m < M; m++) { /* ties: the extreme value twice in each row */
        a[m * K + 7 + m] = is_max ? 5.0f : -5.0f;
        a[m * K + 20 + m] = is_max ? 5.0f : -5.0f;
    }
    a[2 * K + 3] = is_max ? 5.0f : -5.0f; /* row 2: the tie is earlier */
    double val[M], idx[M];
    assert_int_equal(
        te_reference_eval(ctx, 1, &A, (const void *[]){a}, 2, out, (double *[]){val, idx}), TE_OK);
    for (int m = 0; m < M; m++) {
        assert_true(val[m] == (is_max ? 5.0 : -5.0));
        assert_true(idx[m] == (m == 2 ? 3 : 7 + m));
    }
    te_ctx_free(ctx);
}

static void test_argmax_reference_ties_go_to_smallest_index(void **state)
{
    (void)state;
    check_arg(true);
    check_arg(false);
}

static te_tensor *welford(te_ctx *ctx, te_tensor *A, te_tensor **out)
{
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_reducer *r = te_reducer_welford(ctx, TE_F64);
    te_expr *src[3] = {te_const(ctx, TE_F64, 1), TE_AT(ctx, A, i, k), te_const(ctx, TE_F64, 0)};
    te_expr *red = te_reduce_tuple(ctx, r, 3, src, 1, &k);
    assert_int_equal(
        te_compute_tuple(ctx, 3, (const char *[]){"cnt", "mean", "m2"}, 1, &i, red, out), TE_OK);
    return out[0];
}

static void test_welford_reference_matches_two_pass_variance(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F64, 2, (int64_t[]){M, K});
    te_tensor *out[3];
    welford(ctx, A, out);
    double a[M * K], cnt[M], mean[M], m2[M];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(4));
    for (int j = 0; j < M * K; j++)
        a[j] = 1000.0 + tt_rng_uniform(&g, -1, 1); /* large mean: one-pass sums would cancel */
    assert_int_equal(
        te_reference_eval(ctx, 1, &A, (const void *[]){a}, 3, out, (double *[]){cnt, mean, m2}),
        TE_OK);
    for (int m = 0; m < M; m++) {
        double s = 0, q = 0;
        for (int c = 0; c < K; c++)
            s += a[m * K + c];
        s /= K;
        for (int c = 0; c < K; c++)
            q += (a[m * K + c] - s) * (a[m * K + c] - s);
        assert_true(cnt[m] == K);
        assert_true(fabs(mean[m] - s) < 1e-12 * fabs(s));
        assert_true(fabs(m2[m] - q) < 1e-9 * q);
    }
    te_ctx_free(ctx);
}

/* (max, sum exp(x - max)) per row; rows 0 and 1 are fully -inf (masked) and huge. */
static void test_online_softmax_reference_masked_and_huge_rows(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_reducer *r = te_reducer_online_softmax(ctx, TE_F32);
    te_expr *red =
        te_reduce_tuple(ctx, r, 2, (te_expr *[]){TE_AT(ctx, A, i, k), te_f32(ctx, 1)}, 1, &k);
    te_tensor *out[2];
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"mx", "sm"}, 1, &i, red, out),
                     TE_OK);
    float a[M * K];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(5));
    tt_fill_f32(&g, a, M * K);
    for (int c = 0; c < K; c++) {
        a[0 * K + c] = -INFINITY;
        a[1 * K + c] = 1e30f * (float)(c % 3);
    }
    a[3 * K + 4] = -INFINITY; /* one masked element */
    double mx[M], sm[M];
    assert_int_equal(
        te_reference_eval(ctx, 1, &A, (const void *[]){a}, 2, out, (double *[]){mx, sm}), TE_OK);
    for (int m = 0; m < M; m++) {
        double want_m = -INFINITY, want_s = 0;
        for (int c = 0; c < K; c++)
            want_m = fmax(want_m, a[m * K + c]);
        for (int c = 0; c < K; c++)
            want_s += m == 0 ? 1.0 : exp(a[m * K + c] - want_m);
        assert_false(isnan(sm[m]));
        assert_true(mx[m] == want_m);
        assert_true(fabs(sm[m] - want_s) < 1e-12 * want_s);
    }
    te_ctx_free(ctx);
}

/* A user-defined tuple reducer: (sum, sum of squares) of one source. */
static void test_user_tuple_reducer_sum_and_sumsq(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *x0 = te_var(ctx, "x0", TE_F32), *x1 = te_var(ctx, "x1", TE_F32);
    te_expr *y0 = te_var(ctx, "y0", TE_F32), *y1 = te_var(ctx, "y1", TE_F32);
    te_reducer *r =
        te_reducer_create_tuple(ctx, "sumsq", 2, (te_expr *[]){x0, x1}, (te_expr *[]){y0, y1},
                                (te_expr *[]){te_add(ctx, x0, y0), te_add(ctx, x1, y1)},
                                (te_expr *[]){te_f32(ctx, 0), te_f32(ctx, 0)});
    assert_non_null(r);
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_expr *v = TE_AT(ctx, A, i, k);
    te_expr *red = te_reduce_tuple(ctx, r, 2, (te_expr *[]){v, te_mul(ctx, v, v)}, 1, &k);
    te_tensor *out[2];
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"S", "Q"}, 1, &i, red, out), TE_OK);
    char buf[512] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    te_tensor_print(out[1], f);
    fclose(f);
    assert_non_null(strstr(buf, "Q[i] = sumsq((A[i, k], (A[i, k] * A[i, k])), axis=[k]).1"));
    float a[M * K];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(6));
    tt_fill_f32(&g, a, M * K);
    double S[M], Q[M];
    assert_int_equal(te_reference_eval(ctx, 1, &A, (const void *[]){a}, 2, out, (double *[]){S, Q}),
                     TE_OK);
    for (int m = 0; m < M; m++) {
        double s = 0, q = 0;
        for (int c = 0; c < K; c++)
            s += a[m * K + c], q += (double)a[m * K + c] * a[m * K + c];
        assert_true(fabs(S[m] - s) < 1e-12);
        assert_true(fabs(Q[m] - q) < 1e-12);
    }
    te_ctx_free(ctx);
}

static void expect_err(te_ctx *ctx, const char *what)
{
    if (!strstr(te_ctx_errmsg(ctx), what))
        fail_msg("error \"%s\" lacks \"%s\"", te_ctx_errmsg(ctx), what);
    te_ctx_clear_error(ctx);
}

static void test_tuple_misuse_is_refused_with_a_clear_message(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_reducer *r = te_reducer_argmax(ctx, TE_F32, TE_I64);
    te_expr *v = TE_AT(ctx, A, i, k);
    /* wrong tuple size */
    assert_null(te_reduce_tuple(ctx, r, 1, (te_expr *[]){v}, 1, &k));
    expect_err(ctx, "combines 2 values but 1 sources");
    /* wrong dtype of a source */
    assert_null(te_reduce_tuple(ctx, r, 2, (te_expr *[]){v, v}, 1, &k));
    expect_err(ctx, "component 1 works on i64 but source 1 is f32");
    /* a tuple reduction outside te_compute_tuple */
    te_expr *red = te_reduce_tuple(ctx, r, 2, (te_expr *[]){v, k}, 1, &k);
    assert_non_null(red);
    assert_null(te_compute(ctx, "bad", 1, &i, red));
    expect_err(ctx, "only valid as the body of te_compute_tuple");
    te_expr *sum = te_add(ctx, red, te_f32(ctx, 1));
    assert_null(te_compute(ctx, "bad2", 1, &i, sum));
    expect_err(ctx, "only valid as the whole body of te_compute_tuple");
    /* te_compute_tuple with the wrong number of outputs or a plain body */
    te_tensor *out[3];
    assert_int_equal(te_compute_tuple(ctx, 3, (const char *[]){"a", "b", "c"}, 1, &i, red, out),
                     TE_ERR_ARG);
    expect_err(ctx, "yields 2 values but 3 outputs");
    assert_int_equal(
        te_compute_tuple(ctx, 2, (const char *[]){"a", "b"}, 1, &i, te_sum(ctx, v, 1, &k), out),
        TE_ERR_ARG);
    expect_err(ctx, "must be a te_reduce_tuple reduction");
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"a", "a"}, 1, &i, red, out),
                     TE_ERR_ARG);
    expect_err(ctx, "two outputs are named 'a'");
    /* a tuple reducer given to te_reduce */
    assert_null(te_reduce(ctx, TE_RCUSTOM, r, v, 1, &k));
    expect_err(ctx, "is a tuple reducer");
    /* mixed dtypes inside one component */
    te_expr *x0 = te_var(ctx, "x0", TE_F32), *y0 = te_var(ctx, "y0", TE_I64);
    assert_null(
        te_reducer_create_tuple(ctx, "mix", 1, &x0, &y0, &x0, (te_expr *[]){te_f32(ctx, 0)}));
    expect_err(ctx, "component 0 mixes dtypes");
    /* built-ins on dtypes they do not support */
    assert_null(te_reducer_welford(ctx, TE_I32));
    expect_err(ctx, "needs a floating-point dtype");
    assert_null(te_reducer_argmax(ctx, TE_F32, TE_F32));
    expect_err(ctx, "integer index dtype");
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_reference_ties_go_to_smallest_index),
        cmocka_unit_test(test_welford_reference_matches_two_pass_variance),
        cmocka_unit_test(test_online_softmax_reference_masked_and_huge_rows),
        cmocka_unit_test(test_user_tuple_reducer_sum_and_sumsq),
        cmocka_unit_test(test_tuple_misuse_is_refused_with_a_clear_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
