/* VNNI packing and the matmul over packed weights (te/ops/quant.c): te_op_pack_vnni against an
 * independent index computation (zero padding when k is not a multiple of the group), then
 * pack + te_op_matmul_vnni against te_op_matmul_mixed (bf16, f16, f32) and
 * te_op_matmul_integer (u8 x i8, i8 x u8) on the same data, compiled with the default schedule
 * and through the float64 reference interpreter; batched A; the exact form of the body (what
 * a tensorize matcher looks for); and every refusal with its message. */
#include <math.h>
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

/* Random values of dtype d in [-1, 1) (floats) or over the whole byte range (u8, i8). */
static void *rand_data(tt_rng *r, te_dtype d, size_t n)
{
    void *p = malloc(n * te_dtype_size(d));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        if (d == TE_U8 || d == TE_I8)
            ((uint8_t *)p)[i] = (uint8_t)tt_rng_int(r, 256);
        else
            te_dtype_store(d, p, i, tt_rng_uniform(r, -1, 1));
    }
    return p;
}

/* Builds `outs` (one or two outputs) from `ins` with the default (untransformed) schedule, as
 * tests/test_quant.c does, and runs it on
 * `data`; the outputs' buffers are poisoned first. */
static void build_run(te_ctx *ctx, int nin, te_tensor **ins, int nout, te_tensor **outs,
                      void **data)
{
    te_schedule *s = te_schedule_create(ctx, nout, outs);
    assert_non_null(s);
    te_tensor *args[8];
    void *bufs[8];
    for (int i = 0; i < nin; i++) {
        args[i] = ins[i];
        bufs[i] = data[i];
    }
    for (int o = 0; o < nout; o++) {
        args[nin + o] = outs[o];
        size_t bytes = (size_t)te_tensor_numel(outs[o]) * te_dtype_size(te_tensor_dtype(outs[o]));
        memset(data[nin + o], 0x7f, bytes); /* f32 NaN-ish / huge i32: never a right answer */
        bufs[nin + o] = data[nin + o];
    }
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, nin + nout, args, "vnni", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_module_run(m, bufs), TE_OK);
    te_module_free(m);
}

/* ---- Packing ------------------------------------------------------------------------ */

static void check_pack(te_ctx *ctx, te_dtype d, int64_t K, int64_t N, int g)
{
    tt_rng r;
    tt_rng_seed(&r, tt_seed(31) + (uint64_t)(K * 131 + N * 7 + g));
    size_t es = te_dtype_size(d);
    void *b = rand_data(&r, d, (size_t)(K * N));
    int64_t ko = (K + g - 1) / g;
    size_t np = (size_t)(ko * N * g);
    unsigned char *bp = malloc(np * es);
    double *ref = malloc(np * sizeof(double));
    te_tensor *B = te_placeholder(ctx, "B", d, 2, (int64_t[]){K, N});
    te_tensor *P = te_op_pack_vnni(ctx, B, g, "Bp");
    if (!P)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_string_equal(te_tensor_tag(P), "pack_vnni");
    assert_int_equal(te_tensor_dtype(P), d);
    assert_int_equal(te_tensor_ndim(P), 3);
    assert_int_equal(te_tensor_shape(P)[0], ko);
    assert_int_equal(te_tensor_shape(P)[1], N);
    assert_int_equal(te_tensor_shape(P)[2], g);
    build_run(ctx, 1, &B, 1, &P, (void *[]){b, bp});
    assert_int_equal(te_reference_eval(ctx, 1, &B, (const void *[]){b}, 1, &P, (double *[]){ref}),
                     TE_OK);
    int pads = 0;
    for (int64_t o = 0; o < ko; o++)
        for (int64_t j = 0; j < N; j++)
            for (int q = 0; q < g; q++) {
                size_t at = (size_t)((o * N + j) * g + q);
                int64_t row = o * g + q;
                /* bytes compared: exact, whatever the dtype */
                unsigned char zero[8] = {0};
                const unsigned char *want =
                    row < K ? (const unsigned char *)b + (size_t)(row * N + j) * es : zero;
                pads += row >= K;
                if (memcmp(bp + at * es, want, es))
                    fail_msg("pack_vnni %s K=%lld N=%lld g=%d: Bp[%lld, %lld, %d] differs (%s)",
                             te_dtype_str(d), (long long)K, (long long)N, g, (long long)o,
                             (long long)j, q, row < K ? "B's element" : "zero padding");
                double wv = row < K ? te_dtype_load(d, b, (size_t)(row * N + j)) : 0;
                if (ref[at] != wv)
                    fail_msg("reference interpreter Bp[%lld, %lld, %d]: %g, want %g", (long long)o,
                             (long long)j, q, ref[at], wv);
            }
    assert_int_equal(pads, (int)((ko * g - K) * N));
    free(b);
    free(bp);
    free(ref);
}

static void test_pack_vnni_groups_k_values_and_pads_with_zeros(void **state)
{
    te_ctx *ctx = *state;
    check_pack(ctx, TE_BF16, 16, 9, 2);
    check_pack(ctx, TE_BF16, 13, 9, 2); /* one padded row */
    check_pack(ctx, TE_I8, 20, 7, 4);
    check_pack(ctx, TE_U8, 10, 5, 4); /* two padded rows */
    check_pack(ctx, TE_F32, 11, 6, 4);
    check_pack(ctx, TE_F32, 5, 3, 1); /* group 1: a reshape */
    check_pack(ctx, TE_I8, 3, 4, 4);  /* k below the group: one group, mostly padding */
}

/* ---- Matmul over packed weights ---------------------------------------------------- */

/* C = A B as te_op_matmul_mixed / te_op_matmul_integer (the oracle operators) and as
 * matmul_vnni(A', pack_vnni(B, g)), with A' = A padded with zeros to a multiple of g; both
 * compiled (default schedule) and evaluated by the reference interpreter, on the same data. */
static void check_matmul(te_ctx *ctx, te_dtype da, te_dtype db, int64_t M, int64_t N, int64_t K,
                         int g)
{
    bool fl = te_dtype_is_float(da);
    te_dtype acc = fl ? TE_F32 : TE_I32;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(41) + (uint64_t)(M * 1000 + K * 10 + g));
    void *a = rand_data(&r, da, (size_t)(M * K)), *b = rand_data(&r, db, (size_t)(K * N));
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){K, N});
    te_tensor *C0 = fl ? te_op_matmul_mixed(ctx, A, B, 0, 0, acc, "C0")
                       : te_op_matmul_integer(ctx, A, B, 0, 0, "C0");
    te_tensor *P = te_op_pack_vnni(ctx, B, g, "Bp");
    int64_t kp = (K + g - 1) / g * g;
    te_tensor *Ap =
        kp == K ? A : te_op_pad(ctx, A, 2, (int64_t[]){0, 0}, (int64_t[]){0, kp - K}, 0.0, "Ap");
    te_tensor *C = te_op_matmul_vnni(ctx, Ap, P, acc, "C");
    if (!C0 || !C)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_tensor_dtype(C), acc);
    assert_string_equal(te_tensor_tag(C), "matmul_vnni");
    size_t mn = (size_t)(M * N);
    void *c0 = malloc(mn * 4), *c = malloc(mn * 4);
    double *r0 = malloc(mn * sizeof(double)), *rv = malloc(mn * sizeof(double));
    build_run(ctx, 2, (te_tensor *[]){A, B}, 2, (te_tensor *[]){C0, C}, (void *[]){a, b, c0, c});
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 2,
                                       (te_tensor *[]){C0, C}, (double *[]){r0, rv}),
                     TE_OK);
    /* The same products summed in another order: within f32's bound for k terms (floats),
     * exactly equal (integers). The references sum exact products in float64. */
    double tol = fl ? te_dtype_tolerance(TE_F32, K) : 0, worst = 0;
    for (size_t q = 0; q < mn; q++) {
        double want = 0;
        for (int64_t k = 0; k < K; k++)
            want += te_dtype_load(da, a, (size_t)(q / (size_t)N * (size_t)K + (size_t)k)) *
                    te_dtype_load(db, b, (size_t)(k * N) + q % (size_t)N);
        double g0 = te_dtype_load(acc, c0, q), gv = te_dtype_load(acc, c, q);
        double e = fabs(gv - g0) / fmax(1, fabs(want));
        worst = fmax(worst, e);
        if (!(e <= tol))
            fail_msg("%s x %s (M=%lld N=%lld K=%lld g=%d) C[%zu]: matmul_vnni %.9g, %s %.9g "
                     "(difference %g > %g)",
                     te_dtype_str(da), te_dtype_str(db), (long long)M, (long long)N, (long long)K,
                     g, q, gv, fl ? "matmul_mixed" : "matmul_integer", g0, e, tol);
        if (fabs(rv[q] - want) > 1e-12 * fmax(1, fabs(want)) ||
            fabs(r0[q] - want) > 1e-12 * fmax(1, fabs(want)))
            fail_msg("reference interpreter C[%zu]: vnni %.17g, oracle op %.17g, independent "
                     "%.17g",
                     q, rv[q], r0[q], want);
        if (!fl && (gv != want || g0 != want))
            fail_msg("integer C[%zu]: vnni %g, matmul_integer %g, want %g", q, gv, g0, want);
    }
    print_message("%s x %s g=%d K=%lld: worst difference to the oracle operator %.3g (bound "
                  "%.3g)\n",
                  te_dtype_str(da), te_dtype_str(db), g, (long long)K, worst, tol);
    free(a);
    free(b);
    free(c0);
    free(c);
    free(r0);
    free(rv);
}

static void test_matmul_vnni_bf16_equals_matmul_mixed(void **state)
{
    te_ctx *ctx = *state;
    check_matmul(ctx, TE_BF16, TE_BF16, 12, 20, 64, 2);
    check_matmul(ctx, TE_BF16, TE_BF16, 7, 9, 37, 2); /* k padded by one */
    check_matmul(ctx, TE_F16, TE_F16, 5, 16, 24, 2);
    check_matmul(ctx, TE_F32, TE_F32, 6, 8, 10, 4); /* no casts: A, Bp already f32 */
}

static void test_matmul_vnni_int8_equals_matmul_integer(void **state)
{
    te_ctx *ctx = *state;
    check_matmul(ctx, TE_U8, TE_I8, 12, 20, 64, 4);
    check_matmul(ctx, TE_U8, TE_I8, 9, 11, 30, 4); /* k padded by two */
    check_matmul(ctx, TE_I8, TE_U8, 5, 7, 8, 4);
    check_matmul(ctx, TE_I8, TE_I8, 4, 6, 9, 1);
}

/* A [2, 3, M, K]: every batch element against the one packed B. */
static void test_matmul_vnni_broadcasts_leading_axes_of_a(void **state)
{
    te_ctx *ctx = *state;
    enum { B0 = 2, B1 = 3, M = 5, N = 6, K = 16, G = 4 };
    tt_rng r;
    tt_rng_seed(&r, tt_seed(51));
    uint8_t *a = rand_data(&r, TE_U8, B0 * B1 * M * K);
    int8_t *b = rand_data(&r, TE_I8, K * N);
    te_tensor *A = te_placeholder(ctx, "A", TE_U8, 4, (int64_t[]){B0, B1, M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_I8, 2, (int64_t[]){K, N});
    te_tensor *C = te_op_matmul_vnni(ctx, A, te_op_pack_vnni(ctx, B, G, "Bp"), TE_I32, "C");
    if (!C)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_tensor_ndim(C), 4);
    assert_int_equal(te_tensor_shape(C)[3], N);
    int32_t c[B0 * B1 * M * N];
    double ref[B0 * B1 * M * N];
    build_run(ctx, 2, (te_tensor *[]){A, B}, 1, &C, (void *[]){a, b, c});
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 1, &C,
                                       (double *[]){ref}),
                     TE_OK);
    for (int p = 0; p < B0 * B1; p++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int32_t want = 0;
                for (int k = 0; k < K; k++)
                    want += a[(p * M + i) * K + k] * b[k * N + j];
                int at = (p * M + i) * N + j;
                if (c[at] != want || ref[at] != want)
                    fail_msg("batch %d C[%d, %d]: compiled %d, reference %g, want %d", p, i, j,
                             c[at], ref[at], want);
            }
    free(a);
    free(b);
}

/* The definition as te_tensor_print writes it. */
static void expect_print(te_tensor *t, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    te_tensor_print(t, f);
    fclose(f);
    while (len && text[len - 1] == '\n')
        text[--len] = 0;
    if (strcmp(text, want))
        fail_msg("definition\n  %s\nexpected\n  %s", text, want);
    free(text);
}

/* Two reduction axes ko, kk in that order and exactly the documented body, with the casts
 * left out for operands already of the accumulation dtype. */
static void test_matmul_vnni_body_has_the_matcher_form(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){8, 32});
    te_tensor *B = te_placeholder(ctx, "B", TE_BF16, 2, (int64_t[]){32, 16});
    te_tensor *C = te_op_matmul_vnni(ctx, A, te_op_pack_vnni(ctx, B, 2, "Bp"), TE_F32, "C");
    assert_non_null(C);
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    te_stage *st = te_schedule_stage(s, C);
    assert_int_equal(te_stage_nreduce(st), 2);
    assert_string_equal(te_iter_name(te_stage_reduce_axis(st, 0)), "ko");
    assert_int_equal(te_iter_extent(te_stage_reduce_axis(st, 0)), 16);
    assert_string_equal(te_iter_name(te_stage_reduce_axis(st, 1)), "kk");
    assert_int_equal(te_iter_extent(te_stage_reduce_axis(st, 1)), 2);
    expect_print(C, "C[i, j] = sum((f32(A[i, ((ko * 2) + kk)]) * f32(Bp[ko, j, kk])), "
                    "axis=[ko, kk])");
    te_tensor *A32 = te_placeholder(ctx, "A32", TE_F32, 2, (int64_t[]){8, 32});
    te_tensor *B32 = te_placeholder(ctx, "B32", TE_F32, 2, (int64_t[]){32, 16});
    te_tensor *P32 = te_op_pack_vnni(ctx, B32, 4, "P32");
    expect_print(te_op_matmul_vnni(ctx, A32, P32, TE_F32, "C32"),
                 "C32[i, j] = sum((A32[i, ((ko * 4) + kk)] * P32[ko, j, kk]), axis=[ko, kk])");
    te_tensor *Au = te_placeholder(ctx, "Au", TE_U8, 3, (int64_t[]){2, 8, 32});
    te_tensor *Bi = te_placeholder(ctx, "Bi", TE_I8, 2, (int64_t[]){32, 16});
    expect_print(te_op_matmul_vnni(ctx, Au, te_op_pack_vnni(ctx, Bi, 4, "Pi"), TE_I32, "Ci"),
                 "Ci[b0, i, j] = sum((i32(Au[b0, i, ((ko * 4) + kk)]) * i32(Pi[ko, j, kk])), "
                 "axis=[ko, kk])");
    /* the packer: guarded only when it pads */
    expect_print(P32, "P32[ko, n, kk] = B32[((ko * 4) + kk), n]");
    te_tensor *B10 = te_placeholder(ctx, "B10", TE_I8, 2, (int64_t[]){10, 16});
    expect_print(
        te_op_pack_vnni(ctx, B10, 4, "P10"),
        "P10[ko, n, kk] = if_then_else((((ko * 4) + kk) < 10), B10[((ko * 4) + kk), n], 0)");
}

/* ---- Refusals ------------------------------------------------------------------------ */

/* The call returned NULL with code `code` and a message containing `needle`. */
static void refused(te_ctx *ctx, te_tensor *t, int code, const char *needle)
{
    if (t)
        fail_msg("accepted; expected a refusal with '%s'", needle);
    if (te_ctx_errcode(ctx) != code || !strstr(te_ctx_errmsg(ctx), needle))
        fail_msg("code %d message '%s'; expected code %d with '%s'", te_ctx_errcode(ctx),
                 te_ctx_errmsg(ctx), code, needle);
    te_ctx_clear_error(ctx);
}

static void test_vnni_ops_refuse_bad_arguments(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *B = te_placeholder(ctx, "B", TE_I8, 2, (int64_t[]){8, 4});
    te_tensor *B3 = te_placeholder(ctx, "B3", TE_I8, 3, (int64_t[]){2, 8, 4});
    te_tensor *A = te_placeholder(ctx, "A", TE_U8, 2, (int64_t[]){5, 8});
    te_tensor *A1 = te_placeholder(ctx, "A1", TE_U8, 1, (int64_t[]){8});
    te_tensor *A12 = te_placeholder(ctx, "A12", TE_U8, 2, (int64_t[]){5, 12});
    te_tensor *Ab = te_placeholder(ctx, "Ab", TE_BF16, 2, (int64_t[]){5, 8});
    te_tensor *Ad = te_placeholder(ctx, "Ad", TE_F64, 2, (int64_t[]){5, 8});
    te_tensor *Ai = te_placeholder(ctx, "Ai", TE_I32, 2, (int64_t[]){5, 8});
    te_tensor *Pb = te_placeholder(ctx, "Pb", TE_BF16, 3, (int64_t[]){4, 4, 2});
    te_tensor *Ph = te_placeholder(ctx, "Ph", TE_F16, 3, (int64_t[]){4, 4, 2});
    te_tensor *Pd = te_placeholder(ctx, "Pd", TE_F64, 3, (int64_t[]){4, 4, 2});
    te_tensor *P = te_op_pack_vnni(ctx, B, 4, "P"); /* [2, 4, 4] */
    assert_non_null(P);
    te_ctx_clear_error(ctx);

    refused(ctx, te_op_pack_vnni(ctx, B3, 4, "X"), TE_ERR_SHAPE, "input 'B' ('B3') has rank 3");
    refused(ctx, te_op_pack_vnni(ctx, B, 0, "X"), TE_ERR_ARG, "group 0");
    refused(ctx, te_op_pack_vnni(ctx, B, -2, "X"), TE_ERR_ARG, "group -2");
    refused(ctx, te_op_pack_vnni(ctx, NULL, 4, "X"), TE_ERR_ARG, "input 'B' is NULL");

    refused(ctx, te_op_matmul_vnni(ctx, A1, P, TE_I32, "X"), TE_ERR_SHAPE,
            "input 'A' ('A1') has rank 1");
    refused(ctx, te_op_matmul_vnni(ctx, A, B, TE_I32, "X"), TE_ERR_SHAPE,
            "packed 'Bp' ('B') has rank 2");
    refused(ctx, te_op_matmul_vnni(ctx, A12, P, TE_I32, "X"), TE_ERR_SHAPE,
            "input 'A' ('A12') has k = 12 (axis 1) but packed 'Bp' ('P') [2, 4, 4] holds 2 x 4 "
            "= 8 rows");
    refused(ctx, te_op_matmul_vnni(ctx, NULL, P, TE_I32, "X"), TE_ERR_ARG, "input 'A' is NULL");
    refused(ctx, te_op_matmul_vnni(ctx, A, NULL, TE_I32, "X"), TE_ERR_ARG, "packed 'Bp' is NULL");
    /* dtype pairs: mixed floats, float x bytes, wrong accumulations, f64, i32 */
    refused(ctx, te_op_matmul_vnni(ctx, Ab, Ph, TE_F32, "X"), TE_ERR_DTYPE,
            "input 'A' ('Ab') bf16, packed 'Bp' ('Ph') f16, accumulation f32");
    refused(ctx, te_op_matmul_vnni(ctx, A, Pb, TE_I32, "X"), TE_ERR_DTYPE, "u8, packed 'Bp'");
    refused(ctx, te_op_matmul_vnni(ctx, Ab, Pb, TE_I32, "X"), TE_ERR_DTYPE, "accumulation i32");
    refused(ctx, te_op_matmul_vnni(ctx, A, P, TE_F32, "X"), TE_ERR_DTYPE, "accumulation f32");
    refused(ctx, te_op_matmul_vnni(ctx, Ab, Pb, TE_BF16, "X"), TE_ERR_DTYPE, "accumulation bf16");
    refused(ctx, te_op_matmul_vnni(ctx, Ad, Pd, TE_F32, "X"), TE_ERR_DTYPE, "f64");
    refused(ctx, te_op_matmul_vnni(ctx, Ai, P, TE_I32, "X"), TE_ERR_DTYPE, "i32, packed");
    /* the operator and output are named */
    refused(ctx, te_op_matmul_vnni(ctx, A, Pb, TE_I32, "Yq"), TE_ERR_DTYPE, "matmul_vnni 'Yq'");
    assert_null(te_op_matmul_vnni(NULL, A, P, TE_I32, "X"));
    assert_null(te_op_pack_vnni(NULL, B, 4, "X"));

    /* the registry: k must be a multiple of the group there (it makes Bp directly) */
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "matmul_vnni", "m=4,n=4,k=10,group=4", in, &ni, out, &no),
                     TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "k = 10 is not a multiple of group = 4"));
    te_ctx_clear_error(ctx);
    assert_int_equal(
        te_op_build(ctx, "matmul_vnni", "m=4,n=4,k=8,group=2,a_dtype=bf16", in, &ni, out, &no),
        TE_OK);
    assert_int_equal(te_tensor_dtype(in[1]), TE_BF16); /* b_dtype auto: A's float dtype */
    assert_int_equal(te_tensor_dtype(out[0]), TE_F32);
    assert_int_equal(te_op_build(ctx, "matmul_vnni", "m=4,n=4,k=8", in, &ni, out, &no), TE_OK);
    assert_int_equal(te_tensor_dtype(in[1]), TE_I8); /* u8 x i8 by default */
    assert_int_equal(te_tensor_dtype(out[0]), TE_I32);
    assert_int_equal(te_op_build(ctx, "pack_vnni", "k=8,n=4,group=0", in, &ni, out, &no),
                     TE_ERR_ARG);
    te_ctx_clear_error(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pack_vnni_groups_k_values_and_pads_with_zeros, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_matmul_vnni_bf16_equals_matmul_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_vnni_int8_equals_matmul_integer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_matmul_vnni_broadcasts_leading_axes_of_a, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_matmul_vnni_body_has_the_matcher_form, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_vnni_ops_refuse_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
