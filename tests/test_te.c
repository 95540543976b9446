/* Tensor expressions: constructors, their checks on bad input, and the reference interpreter. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/schedule.h"
#include "tessera/te.h"
#include "testutil.h"

static int setup(void **state)
{
    *state = te_ctx_create();
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    te_ctx_free(*state);
    return 0;
}

/* A call that must fail: NULL result, the given code, and a message naming the culprit. */
#define EXPECT_FAIL(ctx, call, code, needle)                                                       \
    do {                                                                                           \
        te_ctx_clear_error(ctx);                                                                   \
        void *r_ = (void *)(call);                                                                 \
        assert_null(r_);                                                                           \
        assert_int_equal(te_ctx_errcode(ctx), (code));                                             \
        if (!strstr(te_ctx_errmsg(ctx), (needle)))                                                 \
            fail_msg("message '%s' lacks '%s'", te_ctx_errmsg(ctx), (needle));                     \
        te_ctx_clear_error(ctx);                                                                   \
    } while (0)

static void test_status_and_dtype_tables(void **state)
{
    (void)state;
    assert_string_equal(te_status_str(TE_OK), "ok");
    assert_string_equal(te_status_str(TE_ERR_SCHEDULE), "illegal schedule");
    assert_string_equal(te_status_str(12345), "unknown status");
    te_dtype d;
    assert_int_equal(te_dtype_parse("i64", &d), TE_OK);
    assert_int_equal(d, TE_I64);
    assert_int_equal(te_dtype_parse("f8", &d), TE_ERR_ARG);
    assert_int_equal(te_dtype_parse("bf16", &d), TE_OK);
    assert_int_equal(d, TE_BF16);
    assert_int_equal(te_dtype_size(TE_F64), 8);
    assert_string_equal(te_dtype_ctype(TE_U8), "uint8_t");
}

static void test_bad_tensors(void **state)
{
    te_ctx *ctx = *state;
    EXPECT_FAIL(ctx, te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){4, 0}), TE_ERR_SHAPE,
                "'A' axis 1 has non-positive extent 0");
    EXPECT_FAIL(ctx, te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){4, -3}), TE_ERR_SHAPE,
                "axis 1");
    EXPECT_FAIL(
        ctx,
        te_placeholder(ctx, "Big", TE_F32, 3, (int64_t[]){INT64_C(1) << 31, INT64_C(1) << 31, 4}),
        TE_ERR_OVERFLOW, "'Big' element count overflows");
    EXPECT_FAIL(ctx, te_placeholder(ctx, "A", TE_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}),
                TE_ERR_SHAPE, "rank 9");
    EXPECT_FAIL(ctx, te_placeholder(ctx, "1bad", TE_F32, 1, (int64_t[]){4}), TE_ERR_ARG,
                "C identifier");
    EXPECT_FAIL(ctx, te_placeholder(ctx, "A", (te_dtype)99, 1, (int64_t[]){4}), TE_ERR_ARG,
                "invalid dtype");
    EXPECT_FAIL(ctx, te_axis(ctx, "i", 0), TE_ERR_SHAPE, "axis 'i' has non-positive extent");
    EXPECT_FAIL(ctx, te_reduce_axis(ctx, "k", -1), TE_ERR_SHAPE, "axis 'k'");
}

static void test_bad_expressions(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){4, 5});
    te_tensor *I = te_placeholder(ctx, "I", TE_I32, 1, (int64_t[]){4});
    te_expr *i = te_axis(ctx, "i", 4), *j = te_axis(ctx, "j", 5);
    EXPECT_FAIL(ctx, TE_AT(ctx, A, i), TE_ERR_SHAPE, "'A' has rank 2 but is indexed with 1");
    EXPECT_FAIL(ctx, te_read(ctx, A, 2, (te_expr *[]){i, te_f32(ctx, 1)}), TE_ERR_DTYPE,
                "index 1 of tensor 'A' has dtype f32");
    EXPECT_FAIL(ctx, te_add(ctx, TE_AT(ctx, A, i, j), TE_AT(ctx, I, i)), TE_ERR_DTYPE,
                "dtype mismatch in '+': left operand is f32, right operand is i32");
    EXPECT_FAIL(ctx, te_and(ctx, i, j), TE_ERR_DTYPE, "needs bool operands");
    EXPECT_FAIL(ctx, te_mod(ctx, TE_AT(ctx, A, i, j), TE_AT(ctx, A, i, j)), TE_ERR_DTYPE,
                "needs integer operands");
    EXPECT_FAIL(ctx, te_div(ctx, i, te_int(ctx, 0)), TE_ERR_ARG, "division by the constant zero");
    EXPECT_FAIL(ctx, te_mul(ctx, i, te_f32(ctx, 0.5)), TE_ERR_DTYPE,
                "constant 0.5 cannot be used as i64");
    EXPECT_FAIL(ctx, te_const(ctx, TE_I32, NAN), TE_ERR_ARG, "does not fit in i32");
    EXPECT_FAIL(ctx, te_exp(ctx, i), TE_ERR_DTYPE, "exp needs a floating-point argument");
    EXPECT_FAIL(ctx, te_call(ctx, TE_POW, 1, &i), TE_ERR_ARG, "pow takes 2 argument(s)");
    EXPECT_FAIL(ctx, te_select(ctx, i, i, j), TE_ERR_DTYPE, "condition must be bool");
    EXPECT_FAIL(ctx, te_not(ctx, i), TE_ERR_DTYPE, "bool operand");
    /* NULL operands propagate without replacing the first message. */
    te_ctx_clear_error(ctx);
    te_expr *bad = te_exp(ctx, i);
    assert_null(te_add(ctx, bad, te_f32(ctx, 1)));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "exp needs"));
    te_ctx_clear_error(ctx);
}

static void test_bad_computes(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){4, 5});
    te_expr *i = te_axis(ctx, "i", 4), *j = te_axis(ctx, "j", 5), *k = te_reduce_axis(ctx, "k", 5);
    te_expr *i9 = te_axis(ctx, "i9", 9);
    /* A reduction axis outside its reduction. */
    EXPECT_FAIL(ctx, te_compute(ctx, "B", 1, &i, TE_AT(ctx, A, i, k)), TE_ERR_ARG,
                "compute 'B': reduction axis 'k' is used outside a reduction");
    /* An axis that is not an output axis. */
    EXPECT_FAIL(ctx, te_compute(ctx, "B", 1, &i, TE_AT(ctx, A, i, j)), TE_ERR_ARG,
                "axis 'j' is not one of its output axes");
    /* Out-of-bounds read for constant shapes. */
    EXPECT_FAIL(ctx, te_compute(ctx, "B", 2, (te_expr *[]){i9, j}, TE_AT(ctx, A, i9, j)),
                TE_ERR_BOUNDS, "read of tensor 'A' axis 0 spans [0, 8] but the axis has extent 4");
    EXPECT_FAIL(ctx,
                te_compute(ctx, "B", 2, (te_expr *[]){i, j},
                           TE_AT(ctx, A, i, te_add(ctx, j, te_int(ctx, 1)))),
                TE_ERR_BOUNDS, "'A' axis 1 spans [1, 5]");
    /* A reduction nested in an expression. */
    EXPECT_FAIL(ctx,
                te_compute(ctx, "B", 1, &i,
                           te_add(ctx, te_sum(ctx, TE_AT(ctx, A, i, k), 1, &k), te_f32(ctx, 1))),
                TE_ERR_ARG, "a reduction must be the whole body");
    EXPECT_FAIL(ctx, te_compute(ctx, "B", 2, (te_expr *[]){i, i}, TE_AT(ctx, A, i, i)), TE_ERR_ARG,
                "axis 'i' appears twice");
    EXPECT_FAIL(ctx, te_compute(ctx, "B", 1, (te_expr *[]){k}, TE_AT(ctx, A, k, k)), TE_ERR_ARG,
                "not a te_axis");
    EXPECT_FAIL(ctx, te_sum(ctx, TE_AT(ctx, A, i, j), 1, &j), TE_ERR_ARG,
                "is not a reduction axis");
    EXPECT_FAIL(ctx, te_sum(ctx, TE_AT(ctx, A, i, k), 2, (te_expr *[]){k, k}), TE_ERR_ARG,
                "listed twice");
    /* A guarded read may leave the bounds: checked at run time instead. */
    te_expr *g =
        te_if_then_else(ctx, te_lt(ctx, i9, te_int(ctx, 4)), TE_AT(ctx, A, i9, j), te_f32(ctx, 0));
    assert_non_null(te_compute(ctx, "P", 2, (te_expr *[]){i9, j}, g));
}

static void test_reference_matmul_and_guarded_pad(void **state)
{
    te_ctx *ctx = *state;
    enum { M = 7, N = 5, K = 6 };
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N), *k = te_reduce_axis(ctx, "k", K);
    te_tensor *C =
        te_compute(ctx, "C", 2, (te_expr *[]){i, j},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, A, i, k), TE_AT(ctx, B, k, j)), 1, &k));
    /* P pads C by one row on each side: only the taken branch is evaluated. */
    te_expr *pi = te_axis(ctx, "pi", M + 2), *pj = te_axis(ctx, "pj", N);
    te_expr *in = te_and(ctx, te_ge(ctx, pi, te_int(ctx, 1)), te_le(ctx, pi, te_int(ctx, M)));
    te_tensor *P =
        te_compute(ctx, "P", 2, (te_expr *[]){pi, pj},
                   te_if_then_else(ctx, in, TE_AT(ctx, C, te_sub(ctx, pi, te_int(ctx, 1)), pj),
                                   te_f32(ctx, -7)));
    assert_non_null(P);
    tt_rng rng;
    tt_rng_seed(&rng, 1);
    float a[M * K], b[K * N];
    tt_fill_f32(&rng, a, M * K);
    tt_fill_f32(&rng, b, K * N);
    double out[(M + 2) * N];
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 1, &P,
                                       (double *[]){out}),
                     TE_OK);
    for (int r = 0; r < M + 2; r++)
        for (int c = 0; c < N; c++) {
            double want = -7;
            if (r >= 1 && r <= M) {
                want = 0;
                for (int q = 0; q < K; q++)
                    want += (double)a[(r - 1) * K + q] * b[q * N + c];
            }
            assert_true(fabs(out[r * N + c] - want) < 1e-12);
        }
    /* A missing input is reported by name. */
    assert_int_equal(te_reference_eval(ctx, 1, &A, (const void *[]){a}, 1, &P, (double *[]){out}),
                     TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "placeholder 'B'"));
    te_ctx_clear_error(ctx);
}

static void test_reference_reducers_and_ints(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){3, 4});
    te_expr *i = te_axis(ctx, "i", 3), *k = te_reduce_axis(ctx, "k", 4);
    te_tensor *mx = te_compute(ctx, "mx", 1, &i, te_rmax(ctx, TE_AT(ctx, X, i, k), 1, &k));
    te_expr *i2 = te_axis(ctx, "i", 3), *k2 = te_reduce_axis(ctx, "k", 4);
    /* A user-defined reducer: sum of squares via combine(x, y) = x + y * y. */
    te_expr *x = te_var(ctx, "x", TE_F32), *y = te_var(ctx, "y", TE_F32);
    te_reducer *ss =
        te_reducer_create(ctx, "sumsq", x, y, te_add(ctx, x, te_mul(ctx, y, y)), te_f32(ctx, 0));
    assert_non_null(ss);
    te_tensor *sq = te_compute(ctx, "sq", 1, &i2,
                               te_reduce(ctx, TE_RCUSTOM, ss, TE_AT(ctx, X, i2, k2), 1, &k2));
    /* Integer floor division and modulo of negative values. */
    te_expr *i3 = te_axis(ctx, "i", 3);
    te_expr *neg = te_sub(ctx, i3, te_int(ctx, 5));
    te_tensor *fd = te_compute(
        ctx, "fd", 1, &i3,
        te_cast(ctx, TE_F32,
                te_add(ctx, te_mul(ctx, te_floordiv(ctx, neg, te_int(ctx, 2)), te_int(ctx, 10)),
                       te_floormod(ctx, neg, te_int(ctx, 2)))));
    assert_non_null(mx);
    assert_non_null(sq);
    assert_non_null(fd);
    float xv[12];
    tt_rng rng;
    tt_rng_seed(&rng, 2);
    tt_fill_f32(&rng, xv, 12);
    double o1[3], o2[3], o3[3];
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *[]){xv}, 3,
                                       (te_tensor *[]){mx, sq, fd}, (double *[]){o1, o2, o3}),
                     TE_OK);
    for (int r = 0; r < 3; r++) {
        double m = -INFINITY, s = 0;
        for (int c = 0; c < 4; c++) {
            m = fmax(m, xv[r * 4 + c]);
            s += (double)xv[r * 4 + c] * xv[r * 4 + c];
        }
        assert_true(o1[r] == m);
        assert_true(fabs(o2[r] - s) < 1e-12);
        int64_t n = r - 5, q = n >= 0 ? n / 2 : -((-n + 1) / 2), md = n - q * 2;
        assert_true(o3[r] == (double)(q * 10 + md));
    }
}

static void test_reference_runtime_bounds(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 1, (int64_t[]){4});
    te_expr *i = te_axis(ctx, "i", 6);
    /* The guard is wrong on purpose (i < 6 is always true): the read leaves X at run time. */
    te_tensor *Y = te_compute(
        ctx, "Y", 1, &i,
        te_if_then_else(ctx, te_lt(ctx, i, te_int(ctx, 6)), TE_AT(ctx, X, i), te_f32(ctx, 0)));
    assert_non_null(Y);
    float xv[4] = {1, 2, 3, 4};
    double out[6];
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *[]){xv}, 1, &Y, (double *[]){out}),
                     TE_ERR_BOUNDS);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "tensor 'X' axis 0 at index 4"));
    te_ctx_clear_error(ctx);
}

static void test_print(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){4, 5});
    te_expr *i = te_axis(ctx, "i", 4), *k = te_reduce_axis(ctx, "k", 5);
    te_tensor *S =
        te_compute(ctx, "S", 1, &i, te_sum(ctx, te_exp(ctx, TE_AT(ctx, A, i, k)), 1, &k));
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    te_tensor_print(S, f);
    fclose(f);
    assert_string_equal(buf, "S[i] = sum(exp(A[i, k]), axis=[k])\n");
    free(buf);
}

/* Issue 13: operands never cross contexts unless the context was made to (freeing the other
 * context would leave the expression pointing into freed memory). */
static void test_cross_context_operands_are_refused(void **state)
{
    (void)state;
    te_ctx *a = te_ctx_create(), *b = te_ctx_create();
    te_tensor *X = te_placeholder(a, "X", TE_F32, 1, (int64_t[]){8});
    te_expr *i = te_axis(b, "i", 8);
    assert_null(te_read(b, X, 1, &i));
    assert_int_equal(te_ctx_errcode(b), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(b), "tensor 'X' belongs to another context"));
    /* An expression node of context a inside a body built in b. */
    te_ctx_clear_error(b);
    te_expr *ia = te_axis(a, "i", 8);
    assert_null(te_compute(b, "Y", 1, (te_expr *[]){ia}, te_add(b, ia, te_int(b, 1))));
    assert_non_null(strstr(te_ctx_errmsg(b), "another context"));
    /* A child of a may use a's tensors, and a schedule made in it works. */
    te_ctx *c = te_ctx_create_child(a);
    assert_non_null(c);
    te_expr *ic = te_axis(c, "i", 8);
    te_tensor *Z =
        te_compute(c, "Z", 1, (te_expr *[]){ic}, te_mul(c, te_read(c, X, 1, &ic), te_f32(c, 2)));
    assert_non_null(Z);
    assert_non_null(te_schedule_create(c, 1, &Z));
    /* ... but a's sibling contexts and a's parent may not use the child's. */
    assert_null(te_read(b, Z, 1, &i));
    assert_null(te_read(a, Z, 1, &ia));
    assert_null(te_ctx_create_child(NULL));
    te_ctx_free(c);
    te_ctx_free(a);
    te_ctx_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_context_operands_are_refused),
        cmocka_unit_test(test_status_and_dtype_tables),
        cmocka_unit_test_setup_teardown(test_bad_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_expressions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_computes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reference_matmul_and_guarded_pad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reference_reducers_and_ints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reference_runtime_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
