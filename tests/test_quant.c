/* Quantized matmuls (te/ops/quant.c): ONNX MatMulInteger and QLinearMatMul on i8/u8, compiled
 * with the default and a tiled, vectorized schedule, compared exactly with an independent
 * integer computation and with the reference interpreter; their argument checks; and a tune
 * whose checker compares the integer outputs exactly. */
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
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

enum { M = 12, N = 24, K = 40 };

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

/* Random bytes over the whole range of i8 / u8. */
static void fill_bytes(tt_rng *r, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)p)[i] = (uint8_t)tt_rng_int(r, 256);
}

static int32_t elem(te_dtype d, const void *p, size_t i)
{
    return d == TE_I8 ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

/* acc[i, j] = sum_k (A[i, k] - za) (B[k, j] - zb) in 32-bit integers. */
static void int_matmul(te_dtype da, const void *a, int32_t za, te_dtype db, const void *b,
                       int32_t zb, int32_t *acc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (elem(da, a, (size_t)(i * K + k)) - za) *
                     (elem(db, b, (size_t)(k * N + j)) - zb);
            acc[i * N + j] = s;
        }
}

/* Builds outs[0] from A, B with the default schedule or a tiled, vectorized one of the stage
 * `tile_stage` (NULL: none), and runs it. */
static void build_run(te_ctx *ctx, te_tensor *A, te_tensor *B, te_tensor *Y, bool tiled,
                      const void *a, const void *b, void *y)
{
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    assert_non_null(s);
    if (tiled) {
        for (int i = 0; i < te_schedule_nstages(s); i++) {
            te_stage *st = te_schedule_stage_at(s, i);
            if (te_stage_tensor(st) == A || te_stage_tensor(st) == B)
                continue;
            te_iter *io, *jo, *ii, *ji;
            assert_int_equal(
                te_tile(st, te_stage_axis(st, 0), te_stage_axis(st, 1), 4, 8, &io, &jo, &ii, &ji),
                TE_OK);
            if (te_stage_nreduce(st) == 0) {
                assert_int_equal(te_vectorize(st, ji), TE_OK);
                continue;
            }
            te_iter *ko, *ki;
            assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 8, &ko, &ki), TE_OK);
            assert_int_equal(te_reorder(st, 6, (te_iter *[]){io, jo, ko, ii, ki, ji}), TE_OK);
            assert_int_equal(te_vectorize(st, ji), TE_OK);
        }
    }
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 3, (te_tensor *[]){A, B, Y}, tiled ? "q_tiled" : "q", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_module_run(m, (void *[]){(void *)a, (void *)b, y}), TE_OK);
    te_module_free(m);
}

static void check_matmul_integer(te_ctx *ctx, te_dtype da, int32_t za, te_dtype db, int32_t zb,
                                 bool tiled)
{
    uint8_t a[M * K], b[K * N];
    int32_t y[M * N], want[M * N];
    double ref[M * N];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(21));
    fill_bytes(&r, a, sizeof a);
    fill_bytes(&r, b, sizeof b);
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){K, N});
    te_tensor *Y = te_op_matmul_integer(ctx, A, B, za, zb, "Y");
    if (!Y)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_tensor_dtype(Y), TE_I32);
    memset(y, 0x5b, sizeof y);
    build_run(ctx, A, B, Y, tiled, a, b, y);
    int_matmul(da, a, za, db, b, zb, want);
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 1, &Y,
                                       (double *[]){ref}),
                     TE_OK);
    for (int i = 0; i < M * N; i++) {
        if (y[i] != want[i])
            fail_msg("matmul_integer %s x %s (zero points %d, %d)%s element %d: %d, want %d",
                     te_dtype_str(da), te_dtype_str(db), za, zb, tiled ? " tiled" : "", i, y[i],
                     want[i]);
        if (ref[i] != want[i])
            fail_msg("reference interpreter element %d: %g, want %d", i, ref[i], want[i]);
    }
}

static void test_matmul_integer_matches_integer_arithmetic(void **state)
{
    te_ctx *ctx = *state;
    check_matmul_integer(ctx, TE_I8, 0, TE_I8, 0, false);
    check_matmul_integer(ctx, TE_U8, 128, TE_I8, -3, false);
    check_matmul_integer(ctx, TE_U8, 7, TE_U8, 250, true);
    check_matmul_integer(ctx, TE_I8, -128, TE_U8, 0, true);
}

/* The independent requantization: f32 product, ties to even (nearbyintf in the default
 * rounding mode), zero point, saturation. */
static int32_t requant(int32_t acc, float mult, int32_t zero, te_dtype yd, int *ties)
{
    float x = (float)acc * mult;
    float f = nearbyintf(x);
    if (fabsf(x - truncf(x)) == 0.5f)
        (*ties)++;
    double q = (double)f + zero;
    double lo = yd == TE_I8 ? -128 : 0, hi = yd == TE_I8 ? 127 : 255;
    return (int32_t)(q < lo ? lo : q > hi ? hi : q);
}

/* Bytes of dtype d within `span` of zero point z (span >= 128: the whole range). */
static void fill_near(tt_rng *r, te_dtype d, int32_t z, int span, void *p, size_t n)
{
    int lo = d == TE_I8 ? -128 : 0, hi = d == TE_I8 ? 127 : 255;
    for (size_t i = 0; i < n; i++) {
        int v = z + (int)tt_rng_int(r, 2 * span + 1) - span;
        v = v < lo ? lo : v > hi ? hi : v;
        if (d == TE_I8)
            ((int8_t *)p)[i] = (int8_t)v;
        else
            ((uint8_t *)p)[i] = (uint8_t)v;
    }
}

typedef struct {
    int ties, saturated, inside;
} qstats;

static void check_qlinear(te_ctx *ctx, te_dtype da, int32_t za, te_dtype db, int32_t zb,
                          te_dtype yd, int32_t yz, double sa, double sb, double sy, int span,
                          bool tiled, qstats *st)
{
    uint8_t a[M * K], b[K * N], y[M * N];
    int32_t acc[M * N];
    double ref[M * N];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(22));
    fill_near(&r, da, za, span, a, sizeof a);
    fill_near(&r, db, zb, span, b, sizeof b);
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){K, N});
    te_tensor *Y = te_op_qlinear_matmul(ctx, A, sa, za, B, sb, zb, sy, yz, yd, "Y");
    if (!Y)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_tensor_dtype(Y), yd);
    memset(y, 0x5b, sizeof y);
    build_run(ctx, A, B, Y, tiled, a, b, y);
    int_matmul(da, a, za, db, b, zb, acc);
    float mult = (float)sa * (float)sb / (float)sy;
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 1, &Y,
                                       (double *[]){ref}),
                     TE_OK);
    for (int i = 0; i < M * N; i++) {
        int32_t want = requant(acc[i], mult, yz, yd, &st->ties), got = elem(yd, y, (size_t)i);
        if (want == (yd == TE_I8 ? -128 : 0) || want == (yd == TE_I8 ? 127 : 255))
            st->saturated++;
        else
            st->inside++;
        if (got != want)
            fail_msg("qlinear_matmul%s element %d: acc %d x %.9g -> %d, want %d",
                     tiled ? " tiled" : "", i, acc[i], (double)mult, got, want);
        if (ref[i] != want)
            fail_msg("reference interpreter element %d: %g, want %d", i, ref[i], want);
    }
}

static void test_qlinear_matmul_rounds_half_to_even_and_saturates(void **state)
{
    te_ctx *ctx = *state;
    qstats st = {0, 0, 0};
    /* multiplier 0.25 * 0.375 / 2 = 3/64: products exact in f32 (so the f32 computation and
     * the float64 reference agree exactly), ties at acc = 32 mod 64 (inputs near their zero
     * points: small accumulators, many ties), saturation (the whole range) */
    check_qlinear(ctx, TE_U8, 128, TE_I8, 0, TE_U8, 128, 0.25, 0.375, 2.0, 6, false, &st);
    check_qlinear(ctx, TE_U8, 128, TE_I8, 0, TE_U8, 128, 0.25, 0.375, 2.0, 6, true, &st);
    check_qlinear(ctx, TE_I8, -2, TE_U8, 127, TE_I8, -5, 0.25, 0.375, 2.0, 9, true, &st);
    check_qlinear(ctx, TE_I8, -2, TE_U8, 127, TE_I8, -5, 0.25, 0.375, 2.0, 128, false, &st);
    check_qlinear(ctx, TE_I8, 0, TE_I8, 0, TE_I8, 0, 1.0 / 256, 0.5, 4.0, 128, true, &st);
    print_message("ties rounded %d, saturated %d, inside %d\n", st.ties, st.saturated, st.inside);
    assert_true(st.ties > 0 && st.saturated > 0 && st.inside > 0);
}

static void test_quantized_ops_refuse_bad_arguments(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_I8, 2, (int64_t[]){4, 8});
    te_tensor *B = te_placeholder(ctx, "B", TE_U8, 2, (int64_t[]){8, 4});
    te_tensor *F = te_placeholder(ctx, "F", TE_F32, 2, (int64_t[]){8, 4});
    te_tensor *S = te_placeholder(ctx, "S", TE_U8, 2, (int64_t[]){5, 4});
    /* every bad call returns NULL ... */
    te_tensor *bad[] = {
        te_op_matmul_integer(ctx, A, F, 0, 0, "Y"),
        te_op_matmul_integer(ctx, A, B, 200, 0, "Y"),
        te_op_matmul_integer(ctx, A, B, 0, -1, "Y"),
        te_op_matmul_integer(ctx, A, S, 0, 0, "Y"),
        te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.0, 0, 1.0, 0, TE_U8, "Y"),
        te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.1, 0, 1.0, 0, TE_I32, "Y"),
        te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.1, 0, 1.0, 300, TE_U8, "Y"),
        te_op_matmul_integer(ctx, NULL, B, 0, 0, "Y"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(bad[i]);
    /* ... with a message naming the culprit (the first message sticks: clear before each) */
    const char *needles[] = {"quantized inputs are i8 or u8", "zero point 200 of input 'A'",
                             "zero point -1 of input 'B'", "reduction extent k differs"};
    te_ctx_clear_error(ctx);
    te_op_matmul_integer(ctx, A, F, 0, 0, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), needles[0]));
    te_ctx_clear_error(ctx);
    te_op_matmul_integer(ctx, A, B, 200, 0, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), needles[1]));
    te_ctx_clear_error(ctx);
    te_op_matmul_integer(ctx, A, B, 0, -1, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), needles[2]));
    te_ctx_clear_error(ctx);
    te_op_matmul_integer(ctx, A, S, 0, 0, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), needles[3]));
    te_ctx_clear_error(ctx);
    te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.0, 0, 1.0, 0, TE_U8, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), "scales must be positive"));
    te_ctx_clear_error(ctx);
    te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.1, 0, 1.0, 300, TE_U8, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), "output zero point 300"));
    te_ctx_clear_error(ctx);
    te_op_qlinear_matmul(ctx, A, 0.1, 0, B, 0.1, 0, 1.0, 0, TE_I32, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), "quantized outputs are i8 or u8"));
    te_ctx_clear_error(ctx);
}

/* Builds and runs Y = op(X) for one input with the default schedule. */
static void run1(te_ctx *ctx, te_tensor *X, te_tensor *Y, const void *x, void *y)
{
    if (!Y)
        fail_msg("%s", te_ctx_errmsg(ctx));
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (!s || te_build(s, 2, (te_tensor *[]){X, Y}, "qew", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_module_run(m, (void *[]){(void *)x, y}), TE_OK);
    te_module_free(m);
}

/* QuantizeLinear, DequantizeLinear and requantize on edge values, against the formulas in
 * double (ties to even; saturation at both ends; the zero point added after rounding). */
static void test_quantize_dequantize_requantize_edge_values(void **state)
{
    te_ctx *ctx = *state;
    enum { E = 16 };
    const float scale = 0.25f;
    /* x / scale: ties at +-0.5, +-1.5, +-2.5, values past both ends, zero, a random one */
    float x[E] = {0.125f, 0.375f, 0.625f, -0.125f, -0.375f, -0.625f, 0.0f,    -0.0f,
                  40.0f,  -40.0f, 31.9f,  -32.1f,  1e30f,   -1e30f,  0.1234f, 7.5f};
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 1, (int64_t[]){E});
    for (int t = 0; t < 2; t++) {
        te_dtype to = t ? TE_U8 : TE_I8;
        int32_t zero = t ? 128 : -3, lo = t ? 0 : -128, hi = t ? 255 : 127;
        uint8_t y[E];
        memset(y, 0x5a, sizeof y);
        run1(ctx, X, te_op_quantize_linear(ctx, X, scale, zero, to, "Q"), x, y);
        for (int i = 0; i < E; i++) {
            double q = nearbyint((double)x[i] / scale) + zero; /* ties to even (default mode) */
            int32_t want = q < lo ? lo : q > hi ? hi : (int32_t)q;
            int32_t got = t ? y[i] : (int8_t)y[i];
            if (got != want)
                fail_msg("quantize_linear to %s, x = %g: %d, want %d", te_dtype_str(to),
                         (double)x[i], got, want);
        }
        /* DequantizeLinear of every byte value back: (q - zero) * scale, exact here */
        uint8_t all[256];
        float d[256];
        for (int i = 0; i < 256; i++)
            all[i] = (uint8_t)i;
        te_tensor *Qb = te_placeholder(ctx, "Qb", to, 1, (int64_t[]){256});
        run1(ctx, Qb, te_op_dequantize_linear(ctx, Qb, scale, zero, "D"), all, d);
        for (int i = 0; i < 256; i++) {
            int32_t q = t ? all[i] : (int8_t)all[i];
            if (d[i] != (float)(q - zero) * scale)
                fail_msg("dequantize_linear of %s %d: %g", te_dtype_str(to), q, (double)d[i]);
        }
    }
    /* requantize: i32 accumulators times a multiplier, ties and both ends */
    int32_t acc[E] = {1,   3,   5,    -1, -3, -5, 0, 7, 1000, -1000, 2147483647, -2147483647 - 1,
                      255, 256, -254, 99};
    te_tensor *A = te_placeholder(ctx, "Acc", TE_I32, 1, (int64_t[]){E});
    uint8_t y[E];
    run1(ctx, A, te_op_requantize(ctx, A, 0.5, 3, TE_U8, "R"), acc, y);
    for (int i = 0; i < E; i++) {
        double q = nearbyint((float)acc[i] * 0.5) + 3;
        int32_t want = q < 0 ? 0 : q > 255 ? 255 : (int32_t)q;
        if (y[i] != want)
            fail_msg("requantize of %d: %d, want %d", acc[i], y[i], want);
    }
    /* bad arguments: a message naming what is wrong */
    assert_null(te_op_quantize_linear(ctx, A, 0.1, 0, TE_U8, "Q"));
    assert_null(te_op_quantize_linear(ctx, X, 0.0, 0, TE_U8, "Q"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "input 'X'"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_quantize_linear(ctx, X, 0.1, 300, TE_U8, "Q"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "zero point 300"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_dequantize_linear(ctx, X, 0.1, 0, "D"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "dequantize takes u8, i8 or i32"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_requantize(ctx, X, 0.5, 0, TE_U8, "R"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "requantize takes i32"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_requantize(ctx, A, -1.0, 0, TE_U8, "R"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "multiplier"));
    te_ctx_clear_error(ctx);
}

static void test_tune_of_quantized_matmuls_checks_integers_exactly(void **state)
{
    te_ctx *ctx = *state;
    char dir[256];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "quant"), 0);
    te_db *db = NULL;
    assert_int_equal(te_db_open(tt_path_in(dir, "t.db"), NULL, &db), TE_OK);
    te_tensor *A = te_placeholder(ctx, "A", TE_U8, 2, (int64_t[]){16, 32});
    te_tensor *B = te_placeholder(ctx, "B", TE_I8, 2, (int64_t[]){32, 16});
    te_tensor *Y = te_op_matmul_integer(ctx, A, B, 128, 0, "Y");
    te_tensor *Q = te_op_qlinear_matmul(ctx, A, 0.25, 128, B, 0.375, 0, 2.0, 128, TE_U8, "Q");
    te_tune_options o = te_tune_options_default();
    o.max_trials = 6;
    o.batch_size = 3;
    o.quiet = 1;
    te_tuner *t = te_tuner_create(db, &o);
    assert_non_null(t);
    assert_int_equal(te_tuner_add_expr(t, "mm_int", 2, (te_tensor *[]){A, B}, 1, &Y, 1), TE_OK);
    assert_int_equal(te_tuner_add_expr(t, "qmm", 2, (te_tensor *[]){A, B}, 1, &Q, 1), TE_OK);
    if (te_tuner_run(t) != TE_OK)
        fail_msg("%s", te_tuner_errmsg(t));
    for (int i = 0; i < 2; i++) {
        te_tune_task_info info;
        assert_int_equal(te_tuner_task_info(t, i, &info), TE_OK);
        print_message("%s: best %s\n", info.workload_key, info.best_trace ? "found" : "-");
        assert_non_null(info.best_trace);
    }
    te_tuner_free(t);
    te_db_close(db);
    tt_tmpdir_remove(dir);
}

/* Builds Y with the default schedule over args (inputs then Y) and runs it on ptrs. */
static void run_n(te_ctx *ctx, te_tensor *Y, int nargs, te_tensor **args, void **ptrs)
{
    if (!Y)
        fail_msg("%s", te_ctx_errmsg(ctx));
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (!s || te_build(s, nargs, args, "qaxis", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_module_run(m, ptrs), TE_OK);
    te_module_free(m);
}

/* quantize / requantize of v (already scaled) in f32 as onnxruntime: ties to even, saturate. */
static int32_t sat_rne(float v, int32_t zero, te_dtype to)
{
    float r = nearbyintf(v) + (float)zero;
    float lo = to == TE_I8 ? -128 : 0, hi = to == TE_I8 ? 127 : 255;
    return (int32_t)(r < lo ? lo : r > hi ? hi : r);
}

/* dequantize_axis, quantize_axis and requantize_axis read their scales, multipliers and zero
 * points along the axis (0, 1 and -1 of a [3, 4] tensor), one-element ones for every element. */
static void test_per_axis_ops_read_parameters_along_the_axis(void **state)
{
    te_ctx *ctx = *state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(21));
    enum { R = 3, C = 4 };
    uint8_t xb[R * C];
    int32_t xi[R * C];
    float xf[R * C], s4[C] = {0.25f, 0.5f, 0.125f, 0.0625f}, s3[R] = {0.5f, 0.25f, 0.125f};
    uint8_t z4[C] = {0, 3, 128, 255}, z3[R] = {7, 0, 200};
    fill_bytes(&r, xb, sizeof xb);
    for (int i = 0; i < R * C; i++) {
        xi[i] = (int32_t)tt_rng_int(&r, 4001) - 2000;
        xf[i] = ((float)tt_rng_int(&r, 161) - 80) * 0.0625f + (i % 3 ? 0.0f : 0.03125f);
    }
    te_tensor *X = te_placeholder(ctx, "X", TE_U8, 2, (int64_t[]){R, C});
    te_tensor *XI = te_placeholder(ctx, "XI", TE_I32, 2, (int64_t[]){R, C});
    te_tensor *XF = te_placeholder(ctx, "XF", TE_F32, 2, (int64_t[]){R, C});
    te_tensor *S4 = te_placeholder(ctx, "S4", TE_F32, 1, (int64_t[]){C});
    te_tensor *S3 = te_placeholder(ctx, "S3", TE_F32, 1, (int64_t[]){R});
    te_tensor *S1 = te_placeholder(ctx, "S1", TE_F32, 1, (int64_t[]){1});
    te_tensor *Z4 = te_placeholder(ctx, "Z4", TE_U8, 1, (int64_t[]){C});
    te_tensor *Z3 = te_placeholder(ctx, "Z3", TE_U8, 1, (int64_t[]){R});
    float s1 = 0.375f;
    for (int axis = -1; axis <= 1; axis++) {
        int a = axis < 0 ? 1 : axis;
        te_tensor *S = a ? S4 : S3, *Z = a ? Z4 : Z3;
        const float *sv = a ? s4 : s3;
        const uint8_t *zv = a ? z4 : z3;
        float y[R * C];
        te_tensor *DQ = te_op_dequantize_axis(ctx, X, S, Z, axis, "DQ");
        run_n(ctx, DQ, 4, (te_tensor *[]){X, S, Z, DQ}, (void *[]){xb, (void *)sv, (void *)zv, y});
        for (int i = 0; i < R * C; i++) {
            int c = a ? i % C : i / C;
            assert_true(y[i] == (float)((int32_t)xb[i] - zv[c]) * sv[c]);
        }
    }
    /* quantize_axis (ties to even: xf / s is often j + 0.5), requantize_axis, and a
     * one-element scale. */
    for (int t = 0; t < 2; t++) {
        te_dtype to = t ? TE_U8 : TE_I8;
        te_tensor *ZQ = te_placeholder(ctx, "ZQ", to, 1, (int64_t[]){C});
        int8_t zq[C] = {0, -5, 100, -128};
        uint8_t q[R * C];
        te_tensor *Y = te_op_quantize_axis(ctx, XF, S4, ZQ, 1, to, "Q");
        te_tensor *args[] = {XF, S4, ZQ, Y};
        if (!Y)
            fail_msg("%s", te_ctx_errmsg(ctx));
        run_n(ctx, Y, 4, args, (void *[]){xf, s4, zq, q});
        for (int i = 0; i < R * C; i++) {
            int32_t z = to == TE_I8 ? zq[i % C] : (uint8_t)zq[i % C];
            int32_t got = to == TE_I8 ? (int8_t)q[i] : q[i];
            assert_int_equal(got, sat_rne(xf[i] / s4[i % C], z, to));
        }
        te_tensor *RQ = te_op_requantize_axis(ctx, XI, S3, 0, t ? 128 : -3, to, "RQ");
        run_n(ctx, RQ, 3, (te_tensor *[]){XI, S3, RQ}, (void *[]){xi, s3, q});
        for (int i = 0; i < R * C; i++) {
            int32_t got = to == TE_I8 ? (int8_t)q[i] : q[i];
            assert_int_equal(got, sat_rne((float)xi[i] * s3[i / C], t ? 128 : -3, to));
        }
        te_tensor *Q1 = te_op_quantize_axis(ctx, XF, S1, NULL, 0, to, "Q1");
        run_n(ctx, Q1, 3, (te_tensor *[]){XF, S1, Q1}, (void *[]){xf, &s1, q});
        for (int i = 0; i < R * C; i++) {
            int32_t got = to == TE_I8 ? (int8_t)q[i] : q[i];
            assert_int_equal(got, sat_rne(xf[i] / s1, 0, to));
        }
    }
}

/* matmul_integer_zp: per-column zero points of B and a one-element one of A (a tensor, as
 * DynamicQuantizeLinear computes it) against the integer formula. */
static void test_matmul_integer_zp_subtracts_tensor_zero_points(void **state)
{
    te_ctx *ctx = *state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(22));
    uint8_t a[M * K], za[1] = {77};
    int8_t b[K * N], zb[N];
    fill_bytes(&r, a, sizeof a);
    fill_bytes(&r, b, sizeof b);
    fill_bytes(&r, zb, sizeof zb);
    te_tensor *A = te_placeholder(ctx, "A", TE_U8, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_I8, 2, (int64_t[]){K, N});
    te_tensor *ZA = te_placeholder(ctx, "ZA", TE_U8, 1, (int64_t[]){1});
    te_tensor *ZB = te_placeholder(ctx, "ZB", TE_I8, 1, (int64_t[]){N});
    te_tensor *Y = te_op_matmul_integer_zp(ctx, A, B, ZA, ZB, "Y");
    int32_t y[M * N];
    run_n(ctx, Y, 5, (te_tensor *[]){A, B, ZA, ZB, Y}, (void *[]){a, b, za, zb, y});
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += ((int32_t)a[i * K + k] - za[0]) * ((int32_t)b[k * N + j] - zb[j]);
            assert_int_equal(y[i * N + j], s);
        }
}

/* te_op_dynamic_qparams as onnxruntime's DynamicQuantizeLinear: the range widened to hold 0,
 * (max - min) / 255, zero point rounded half to even; an all-zero input has scale 1. */
static void test_dynamic_qparams_follow_onnxruntime(void **state)
{
    te_ctx *ctx = *state;
    enum { E = 10 };
    const float cases[3][E] = {{-1.5f, 2.25f, 0.1f, -0.7f, 3.0f, 0, 1, 2, -1, 0.5f},
                               {0.5f, 1.5f, 2.5f, 4.0f, 3.0f, 1, 1, 2, 2, 0.75f},
                               {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){2, 5});
    te_tensor *S = NULL, *Z = NULL;
    assert_int_equal(te_op_dynamic_qparams(ctx, X, "dq", &S, &Z), TE_OK);
    te_tensor *Y = te_op_quantize_axis(ctx, X, S, Z, 0, TE_U8, "Y");
    for (int c = 0; c < 3; c++) {
        float lo = 0, hi = 0;
        for (int i = 0; i < E; i++)
            lo = fminf(lo, cases[c][i]), hi = fmaxf(hi, cases[c][i]);
        float sc = hi == lo ? 1.0f : (hi - lo) / 255.0f;
        float iz = 0 - lo / sc;
        int32_t zp = (int32_t)nearbyintf(fmaxf(0, fminf(255, iz)));
        float s_out[1];
        uint8_t z_out[1], y[E];
        run_n(ctx, S, 2, (te_tensor *[]){X, S}, (void *[]){(void *)cases[c], s_out});
        run_n(ctx, Z, 2, (te_tensor *[]){X, Z}, (void *[]){(void *)cases[c], z_out});
        run_n(ctx, Y, 2, (te_tensor *[]){X, Y}, (void *[]){(void *)cases[c], y});
        assert_true(s_out[0] == sc);
        assert_int_equal(z_out[0], zp);
        for (int i = 0; i < E; i++)
            assert_int_equal(y[i], sat_rne(cases[c][i] / sc, zp, TE_U8));
    }
}

/* The per-axis operators refuse a bad axis, parameter dtype or length with a message. */
static void test_per_axis_ops_refuse_bad_parameters(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *X = te_placeholder(ctx, "X", TE_U8, 2, (int64_t[]){3, 4});
    te_tensor *XF = te_placeholder(ctx, "XF", TE_F32, 2, (int64_t[]){3, 4});
    te_tensor *S4 = te_placeholder(ctx, "S4", TE_F32, 1, (int64_t[]){4});
    te_tensor *S5 = te_placeholder(ctx, "S5", TE_F32, 1, (int64_t[]){5});
    te_tensor *I4 = te_placeholder(ctx, "I4", TE_I32, 1, (int64_t[]){4});
    te_tensor *Z8 = te_placeholder(ctx, "Z8", TE_I8, 1, (int64_t[]){4});
    te_tensor *B = te_placeholder(ctx, "B", TE_I8, 2, (int64_t[]){4, 5});
    const struct {
        te_tensor *y;
        const char *needle;
    } bad[] = {
        {te_op_dequantize_axis(ctx, X, S4, NULL, 2, "Y"), "axis 2 is outside the 2 axes"},
        {te_op_dequantize_axis(ctx, X, S4, NULL, 0, "Y"), "1 or 3 elements (axis 0"},
        {te_op_dequantize_axis(ctx, X, S5, NULL, 1, "Y"), "scale 'S' ('S5') must be 1-D"},
        {te_op_dequantize_axis(ctx, X, I4, NULL, 1, "Y"), "('I4') is i32; expected f32"},
        {te_op_dequantize_axis(ctx, X, S4, Z8, 1, "Y"), "('Z8') is i8; expected u8"},
        {te_op_quantize_axis(ctx, X, S4, NULL, 1, TE_U8, "Y"), "input 'X'"},
        {te_op_quantize_axis(ctx, XF, S4, NULL, 1, TE_I32, "Y"), "quantized outputs are i8 or u8"},
        {te_op_requantize_axis(ctx, XF, S4, 1, 0, TE_U8, "Y"), "requantize takes i32"},
        {te_op_requantize_axis(ctx, te_placeholder(ctx, "XI", TE_I32, 2, (int64_t[]){3, 4}), S4, 1,
                               300, TE_U8, "Y"),
         "output zero point 300"},
        {te_op_matmul_integer_zp(ctx, X, B, NULL, S4, "Y"), "expected i8"},
        {te_op_matmul_integer_zp(ctx, X, B, NULL, Z8, "Y"), "1 or 5 elements"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(bad[i].y);
    /* the first message sticks: rebuild each failing call after clearing */
    te_ctx_clear_error(ctx);
    te_op_dequantize_axis(ctx, X, S4, NULL, 2, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[0].needle));
    te_ctx_clear_error(ctx);
    te_op_dequantize_axis(ctx, X, S4, NULL, 0, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[1].needle));
    te_ctx_clear_error(ctx);
    te_op_dequantize_axis(ctx, X, S5, NULL, 1, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[2].needle));
    te_ctx_clear_error(ctx);
    te_op_dequantize_axis(ctx, X, I4, NULL, 1, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[3].needle));
    te_ctx_clear_error(ctx);
    te_op_dequantize_axis(ctx, X, S4, Z8, 1, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[4].needle));
    te_ctx_clear_error(ctx);
    te_op_matmul_integer_zp(ctx, X, B, NULL, Z8, "Y");
    assert_non_null(strstr(te_ctx_errmsg(ctx), bad[10].needle));
    te_ctx_clear_error(ctx);
    te_tensor *sc = X, *zp = X;
    assert_int_equal(te_op_dynamic_qparams(ctx, X, "dq", &sc, &zp), TE_ERR_DTYPE);
    assert_null(sc);
    assert_null(zp);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "f32 expected"));
    assert_int_equal(te_op_dynamic_qparams(ctx, X, "dq", NULL, &zp), TE_ERR_ARG);
    te_ctx_clear_error(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matmul_integer_matches_integer_arithmetic, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_qlinear_matmul_rounds_half_to_even_and_saturates,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_quantized_ops_refuse_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quantize_dequantize_requantize_edge_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tune_of_quantized_matmuls_checks_integers_exactly,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_axis_ops_read_parameters_along_the_axis, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_matmul_integer_zp_subtracts_tensor_zero_points, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dynamic_qparams_follow_onnxruntime, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_axis_ops_refuse_bad_parameters, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
