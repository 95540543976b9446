/* Operator library, linear algebra / convolution / pooling / fused operators: every operator
 * evaluated by the reference interpreter on random inputs and compared with a naive float64
 * implementation written here (and, for matmul and conv2d, with OpenBLAS sgemm). */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/ops.h"
#include "testutil.h"

static uint64_t g_seed;
static tt_rng g_rng;

/* Random f32 tensor data (never zero). */
static float *rnd(size_t n)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    tt_fill_f32(&g_rng, p, n);
    return p;
}

static double max_rel(const double *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

static double max_rel_f32(const float *got, const double *want, size_t n)
{
    return tt_max_rel_err_f32(got, want, n);
}

#define CHECK_CLOSE(got, want, n, tol)                                                             \
    do {                                                                                           \
        double e_ = max_rel((got), (want), (n));                                                   \
        if (!(e_ < (tol))) {                                                                       \
            fprintf(stderr, "%s:%d: max relative error %g >= %g (seed %llu)\n", __FILE__,          \
                    __LINE__, e_, (double)(tol), (unsigned long long)g_seed);                      \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

/* Evaluates `out` with the reference; returns a malloc'd array of its elements. */
static double *eval(te_ctx *ctx, te_tensor *out, int n_in, te_tensor *const *ins,
                    const void *const *data)
{
    if (!out) {
        fprintf(stderr, "operator failed: %s\n", te_ctx_errmsg(ctx));
        fail();
    }
    double *res = malloc(sizeof(double) * (size_t)te_tensor_numel(out));
    int rc = te_reference_eval(ctx, n_in, ins, data, 1, &out, &res);
    if (rc) {
        fprintf(stderr, "reference failed: %s\n", te_ctx_errmsg(ctx));
        fail();
    }
    return res;
}

static te_tensor *ph(te_ctx *ctx, const char *name, int ndim, const int64_t *shape)
{
    te_tensor *t = te_placeholder(ctx, name, TE_F32, ndim, shape);
    assert_non_null(t);
    return t;
}

static int setup(void **state)
{
    (void)state;
    g_seed = tt_seed(20240601);
    tt_rng_seed(&g_rng, g_seed);
    return 0;
}

/* ---- matmul -------------------------------------------------------------------------- */

static void naive_matmul(const float *A, const float *B, double *C, int M, int N, int K, int ta,
                         int tb)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[k * M + i] : A[i * K + k];
                double b = tb ? B[j * K + k] : B[k * N + j];
                s += a * b;
            }
            C[i * N + j] = s;
        }
}

static void test_matmul_all_transposes(void **state)
{
    (void)state;
    const int M = 5, N = 7, K = 6;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *A = ph(ctx, "A", 2, ta ? (int64_t[]){K, M} : (int64_t[]){M, K});
            te_tensor *B = ph(ctx, "B", 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
            te_tensor *C = te_op_matmul(ctx, A, B, ta, tb, "C");
            assert_non_null(C);
            assert_string_equal(te_tensor_tag(C), "matmul");
            assert_int_equal(te_tensor_shape(C)[0], M);
            assert_int_equal(te_tensor_shape(C)[1], N);
            float *a = rnd((size_t)M * K), *b = rnd((size_t)K * N);
            double *got = eval(ctx, C, 2, (te_tensor *[]){A, B}, (const void *[]){a, b});
            double want[M * N];
            naive_matmul(a, b, want, M, N, K, ta, tb);
            CHECK_CLOSE(got, want, (size_t)M * N, 1e-9);
            /* Against OpenBLAS in float32. */
            float c32[M * N];
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N,
                        0.0f, c32, N);
            assert_true(max_rel_f32(c32, got, (size_t)M * N) < 1e-5);
            free(a);
            free(b);
            free(got);
            te_ctx_free(ctx);
        }
}

static void test_batch_matmul(void **state)
{
    (void)state;
    const int M = 3, N = 4, K = 5;
    int64_t batches[3][2] = {{3, 3}, {1, 3}, {3, 1}};
    for (int bc = 0; bc < 3; bc++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            int64_t ba = batches[bc][0], bb = batches[bc][1], nb = ba > bb ? ba : bb;
            te_ctx *ctx = te_ctx_create();
            te_tensor *A = ph(ctx, "A", 3, ta ? (int64_t[]){ba, K, M} : (int64_t[]){ba, M, K});
            te_tensor *B = ph(ctx, "B", 3, tb ? (int64_t[]){bb, N, K} : (int64_t[]){bb, K, N});
            te_tensor *C = te_op_batch_matmul(ctx, A, B, ta, tb, "C");
            assert_non_null(C);
            assert_int_equal(te_tensor_shape(C)[0], nb);
            float *a = rnd((size_t)(ba * M * K)), *b = rnd((size_t)(bb * K * N));
            double *got = eval(ctx, C, 2, (te_tensor *[]){A, B}, (const void *[]){a, b});
            double want[3 * M * N];
            for (int64_t z = 0; z < nb; z++)
                naive_matmul(a + (ba == 1 ? 0 : z) * M * K, b + (bb == 1 ? 0 : z) * K * N,
                             want + z * M * N, M, N, K, ta, tb);
            CHECK_CLOSE(got, want, (size_t)(nb * M * N), 1e-9);
            free(a);
            free(b);
            free(got);
            te_ctx_free(ctx);
        }
}

static void test_dense_bias(void **state)
{
    (void)state;
    const int M = 4, N = 6, K = 5;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 2, (int64_t[]){M, K}), *W = ph(ctx, "W", 2, (int64_t[]){K, N});
    te_tensor *bias = ph(ctx, "bias", 1, (int64_t[]){N});
    te_tensor *Y = te_op_dense_bias(ctx, X, W, bias, "Y");
    assert_non_null(Y);
    assert_non_null(te_op_find(Y, "Y_mm"));
    float *x = rnd(M * K), *w = rnd(K * N), *b = rnd(N);
    double *got = eval(ctx, Y, 3, (te_tensor *[]){X, W, bias}, (const void *[]){x, w, b});
    double want[M * N];
    naive_matmul(x, w, want, M, N, K, 0, 0);
    for (int i = 0; i < M * N; i++)
        want[i] += b[i % N];
    CHECK_CLOSE(got, want, M * N, 1e-9);
    free(x);
    free(w);
    free(b);
    free(got);
    te_ctx_free(ctx);
}

/* ---- conv2d -------------------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, oc, kh, kw;
    te_conv2d_params p;
} conv_case;

static int conv_out(int in, int k, int pad, int dil, int stride)
{
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

/* Direct convolution in float64 on NCHW data with an [oc, c/g, kh, kw] weight. */
static void naive_conv_nchw(const conv_case *cc, const float *x, const float *wt, double *y)
{
    const te_conv2d_params *p = &cc->p;
    int OH = conv_out(cc->h, cc->kh, p->pad_h, p->dilation_h, p->stride_h);
    int OW = conv_out(cc->w, cc->kw, p->pad_w, p->dilation_w, p->stride_w);
    int cg = cc->c / p->groups, ocg = cc->oc / p->groups;
    for (int n = 0; n < cc->n; n++)
        for (int o = 0; o < cc->oc; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = 0;
                    int g = o / ocg;
                    for (int rc = 0; rc < cg; rc++)
                        for (int ry = 0; ry < cc->kh; ry++)
                            for (int rx = 0; rx < cc->kw; rx++) {
                                int iy = oh * p->stride_h + ry * p->dilation_h - p->pad_h;
                                int ix = ow * p->stride_w + rx * p->dilation_w - p->pad_w;
                                if (iy < 0 || iy >= cc->h || ix < 0 || ix >= cc->w)
                                    continue;
                                int ic = g * cg + rc;
                                s += (double)x[((n * cc->c + ic) * cc->h + iy) * cc->w + ix] *
                                     wt[((o * cg + rc) * cc->kh + ry) * cc->kw + rx];
                            }
                    y[((n * cc->oc + o) * OH + oh) * OW + ow] = s;
                }
}

/* The same convolution by im2col + cblas_sgemm per group, float32, NCHW. */
static void blas_conv_nchw(const conv_case *cc, const float *x, const float *wt, float *y)
{
    const te_conv2d_params *p = &cc->p;
    int OH = conv_out(cc->h, cc->kh, p->pad_h, p->dilation_h, p->stride_h);
    int OW = conv_out(cc->w, cc->kw, p->pad_w, p->dilation_w, p->stride_w);
    int cg = cc->c / p->groups, ocg = cc->oc / p->groups, KK = cg * cc->kh * cc->kw;
    float *col = malloc(sizeof(float) * (size_t)KK * OH * OW);
    for (int n = 0; n < cc->n; n++)
        for (int g = 0; g < p->groups; g++) {
            for (int rc = 0; rc < cg; rc++)
                for (int ry = 0; ry < cc->kh; ry++)
                    for (int rx = 0; rx < cc->kw; rx++) {
                        int row = (rc * cc->kh + ry) * cc->kw + rx;
                        for (int oh = 0; oh < OH; oh++)
                            for (int ow = 0; ow < OW; ow++) {
                                int iy = oh * p->stride_h + ry * p->dilation_h - p->pad_h;
                                int ix = ow * p->stride_w + rx * p->dilation_w - p->pad_w;
                                int ic = g * cg + rc;
                                col[(size_t)row * OH * OW + oh * OW + ow] =
                                    iy < 0 || iy >= cc->h || ix < 0 || ix >= cc->w
                                        ? 0.0f
                                        : x[((n * cc->c + ic) * cc->h + iy) * cc->w + ix];
                            }
                    }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ocg, OH * OW, KK, 1.0f,
                        wt + (size_t)g * ocg * KK, KK, col, OH * OW, 0.0f,
                        y + ((size_t)n * cc->oc + (size_t)g * ocg) * OH * OW, OH * OW);
        }
    free(col);
}

static const conv_case conv_cases[] = {
    {1, 3, 5, 5, 4, 3, 3, {1, 1, 0, 0, 1, 1, 1, TE_LAYOUT_NCHW}},
    {2, 4, 7, 6, 6, 3, 2, {2, 1, 1, 2, 1, 2, 2, TE_LAYOUT_NCHW}},
    {1, 6, 6, 7, 3, 2, 3, {1, 2, 2, 1, 2, 1, 3, TE_LAYOUT_NCHW}},
    {1, 2, 4, 4, 2, 1, 1, {1, 1, 0, 0, 1, 1, 1, TE_LAYOUT_NCHW}},
};

/* Converts NCHW x / OIHW w data to NHWC / HWIO. */
static void to_nhwc(const conv_case *cc, const float *x, const float *w, float *xh, float *wh)
{
    int cg = cc->c / cc->p.groups;
    for (int n = 0; n < cc->n; n++)
        for (int c = 0; c < cc->c; c++)
            for (int y = 0; y < cc->h; y++)
                for (int xx = 0; xx < cc->w; xx++)
                    xh[((n * cc->h + y) * cc->w + xx) * cc->c + c] =
                        x[((n * cc->c + c) * cc->h + y) * cc->w + xx];
    for (int o = 0; o < cc->oc; o++)
        for (int c = 0; c < cg; c++)
            for (int y = 0; y < cc->kh; y++)
                for (int xx = 0; xx < cc->kw; xx++)
                    wh[((y * cc->kw + xx) * cg + c) * cc->oc + o] =
                        w[((o * cg + c) * cc->kh + y) * cc->kw + xx];
}

static void test_conv2d_nchw_direct_and_blas(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        const conv_case *cc = &conv_cases[t];
        te_ctx *ctx = te_ctx_create();
        int cg = cc->c / cc->p.groups;
        te_tensor *X = ph(ctx, "X", 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w});
        te_tensor *W = ph(ctx, "W", 4, (int64_t[]){cc->oc, cg, cc->kh, cc->kw});
        te_tensor *Y = te_op_conv2d(ctx, X, W, &cc->p, "Y");
        assert_non_null(Y);
        assert_string_equal(te_tensor_tag(Y), "conv2d");
        bool padded = cc->p.pad_h || cc->p.pad_w;
        te_tensor *P = te_op_find(Y, "Y_pad");
        assert_true(padded ? P != NULL : P == NULL);
        size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w,
               nw = (size_t)cc->oc * cg * cc->kh * cc->kw;
        size_t ny = (size_t)te_tensor_numel(Y);
        float *x = rnd(nx), *w = rnd(nw);
        double *got = eval(ctx, Y, 2, (te_tensor *[]){X, W}, (const void *[]){x, w});
        double *want = malloc(sizeof(double) * ny);
        naive_conv_nchw(cc, x, w, want);
        CHECK_CLOSE(got, want, ny, 1e-9);
        float *yb = malloc(sizeof(float) * ny);
        blas_conv_nchw(cc, x, w, yb);
        double e = max_rel_f32(yb, got, ny);
        if (!(e < 1e-5)) {
            fprintf(stderr, "conv case %zu: OpenBLAS differs by %g (seed %llu)\n", t, e,
                    (unsigned long long)g_seed);
            fail();
        }
        free(x);
        free(w);
        free(got);
        free(want);
        free(yb);
        te_ctx_free(ctx);
    }
}

static void test_conv2d_nhwc(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        conv_case cc = conv_cases[t];
        cc.p.layout = TE_LAYOUT_NHWC;
        te_ctx *ctx = te_ctx_create();
        int cg = cc.c / cc.p.groups;
        te_tensor *X = ph(ctx, "X", 4, (int64_t[]){cc.n, cc.h, cc.w, cc.c});
        te_tensor *W = ph(ctx, "W", 4, (int64_t[]){cc.kh, cc.kw, cg, cc.oc});
        te_tensor *Y = te_op_conv2d(ctx, X, W, &cc.p, "Y");
        assert_non_null(Y);
        int OH = conv_out(cc.h, cc.kh, cc.p.pad_h, cc.p.dilation_h, cc.p.stride_h);
        int OW = conv_out(cc.w, cc.kw, cc.p.pad_w, cc.p.dilation_w, cc.p.stride_w);
        assert_int_equal(te_tensor_shape(Y)[1], OH);
        assert_int_equal(te_tensor_shape(Y)[3], cc.oc);
        size_t nx = (size_t)cc.n * cc.c * cc.h * cc.w, nw = (size_t)cc.oc * cg * cc.kh * cc.kw;
        size_t ny = (size_t)te_tensor_numel(Y);
        float *x = rnd(nx), *w = rnd(nw), *xh = malloc(sizeof(float) * nx),
              *wh = malloc(sizeof(float) * nw);
        to_nhwc(&cc, x, w, xh, wh);
        double *got = eval(ctx, Y, 2, (te_tensor *[]){X, W}, (const void *[]){xh, wh});
        double *nchw = malloc(sizeof(double) * ny), *want = malloc(sizeof(double) * ny);
        naive_conv_nchw(&cc, x, w, nchw);
        for (int n = 0; n < cc.n; n++)
            for (int o = 0; o < cc.oc; o++)
                for (int y = 0; y < OH * OW; y++)
                    want[((size_t)n * OH * OW + y) * cc.oc + o] =
                        nchw[((size_t)n * cc.oc + o) * OH * OW + y];
        CHECK_CLOSE(got, want, ny, 1e-9);
        free(x);
        free(w);
        free(xh);
        free(wh);
        free(got);
        free(nchw);
        free(want);
        te_ctx_free(ctx);
    }
}

static void test_depthwise_conv2d(void **state)
{
    (void)state;
    const int N = 2, C = 3, H = 6, W = 5, MU = 2, KH = 3, KW = 2;
    te_conv2d_params p = {2, 1, 1, 1, 1, 2, 1, TE_LAYOUT_NCHW};
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 4, (int64_t[]){N, C, H, W});
    te_tensor *Wt = ph(ctx, "W", 4, (int64_t[]){C, MU, KH, KW});
    te_tensor *Y = te_op_depthwise_conv2d(ctx, X, Wt, &p, "Y");
    assert_non_null(Y);
    int OH = conv_out(H, KH, 1, 1, 2), OW = conv_out(W, KW, 1, 2, 1);
    assert_int_equal(te_tensor_shape(Y)[1], C * MU);
    assert_int_equal(te_tensor_shape(Y)[2], OH);
    assert_int_equal(te_tensor_shape(Y)[3], OW);
    float *x = rnd(N * C * H * W), *w = rnd(C * MU * KH * KW);
    double *got = eval(ctx, Y, 2, (te_tensor *[]){X, Wt}, (const void *[]){x, w});
    size_t ny = (size_t)te_tensor_numel(Y);
    double *want = malloc(sizeof(double) * ny);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C * MU; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = 0;
                    int ic = o / MU, m = o % MU;
                    for (int ry = 0; ry < KH; ry++)
                        for (int rx = 0; rx < KW; rx++) {
                            int iy = oh * 2 + ry - 1, ix = ow + rx * 2 - 1;
                            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                s += (double)x[((n * C + ic) * H + iy) * W + ix] *
                                     w[((ic * MU + m) * KH + ry) * KW + rx];
                        }
                    want[((n * C * MU + o) * OH + oh) * OW + ow] = s;
                }
    CHECK_CLOSE(got, want, ny, 1e-9);
    free(x);
    free(w);
    free(got);
    free(want);
    te_ctx_free(ctx);
}

/* ---- pooling -------------------------------------------------------------------------- */

static void test_pool2d(void **state)
{
    (void)state;
    const int N = 2, C = 3, H = 7, W = 6;
    te_pool2d_params cases[] = {
        {3, 3, 2, 2, 1, 1, 0}, {3, 2, 2, 1, 1, 1, 1}, {2, 2, 2, 2, 0, 0, 0}, {3, 3, 1, 1, 2, 1, 0}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int kind = 0; kind < 2; kind++) {
            const te_pool2d_params *p = &cases[t];
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = ph(ctx, "X", 4, (int64_t[]){N, C, H, W});
            te_tensor *Y = te_op_pool2d(ctx, X, kind ? TE_POOL_AVG : TE_POOL_MAX, p, "Y");
            assert_non_null(Y);
            assert_string_equal(te_tensor_tag(Y), kind ? "avg_pool2d" : "max_pool2d");
            if (kind)
                assert_non_null(te_op_find(Y, "Y_sum"));
            int OH = (H + 2 * p->pad_h - p->kernel_h) / p->stride_h + 1;
            int OW = (W + 2 * p->pad_w - p->kernel_w) / p->stride_w + 1;
            assert_int_equal(te_tensor_numel(Y), N * C * OH * OW);
            float *x = rnd(N * C * H * W);
            double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
            double *want = malloc(sizeof(double) * (size_t)(N * C * OH * OW));
            for (int nc = 0; nc < N * C; nc++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++) {
                        double mx = -INFINITY, s = 0;
                        int cnt = 0;
                        for (int ry = 0; ry < p->kernel_h; ry++)
                            for (int rx = 0; rx < p->kernel_w; rx++) {
                                int iy = oh * p->stride_h + ry - p->pad_h;
                                int ix = ow * p->stride_w + rx - p->pad_w;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                double v = x[(nc * H + iy) * W + ix];
                                mx = v > mx ? v : mx;
                                s += v;
                                cnt++;
                            }
                        int div = p->count_include_pad ? p->kernel_h * p->kernel_w : cnt;
                        want[(nc * OH + oh) * OW + ow] = kind ? s / div : mx;
                    }
            CHECK_CLOSE(got, want, (size_t)(N * C * OH * OW), 1e-9);
            free(x);
            free(got);
            free(want);
            te_ctx_free(ctx);
        }
}

/* ---- fused ---------------------------------------------------------------------------- */

static double act_ref(te_op_act act, double x)
{
    switch (act) {
    case TE_ACT_NONE:
        return x;
    case TE_ACT_RELU:
        return x > 0 ? x : 0;
    case TE_ACT_GELU:
        return 0.5 * x * (1 + erf(x * (double)(float)M_SQRT1_2));
    case TE_ACT_GELU_TANH:
        return 0.5 * x *
               (1 + tanh((double)(float)0.7978845608028654 *
                         (x + (double)(float)0.044715 * x * x * x)));
    case TE_ACT_SILU:
        return x / (1 + exp(-x));
    case TE_ACT_SIGMOID:
        return 1 / (1 + exp(-x));
    case TE_ACT_TANH:
        return tanh(x);
    default:
        return NAN;
    }
}

static void test_matmul_bias_act(void **state)
{
    (void)state;
    const int M = 4, N = 5, K = 6;
    for (int act = 0; act < TE_ACT_COUNT; act++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = ph(ctx, "X", 2, (int64_t[]){M, K});
            te_tensor *W = ph(ctx, "W", 2, (int64_t[]){K, N});
            te_tensor *b = ph(ctx, "b", 1, (int64_t[]){N});
            te_tensor *Y = te_op_matmul_bias_act(ctx, X, W, with_bias ? b : NULL, act, "Y");
            assert_non_null(Y);
            te_tensor *mm = te_op_find(Y, "Y_mm");
            assert_non_null(mm);
            assert_string_equal(te_tensor_tag(Y), "matmul_bias_act");
            float *x = rnd(M * K), *w = rnd(K * N), *bb = rnd(N);
            double *got = eval(ctx, Y, 3, (te_tensor *[]){X, W, b}, (const void *[]){x, w, bb});
            double want[M * N];
            naive_matmul(x, w, want, M, N, K, 0, 0);
            for (int i = 0; i < M * N; i++)
                want[i] = act_ref(act, want[i] + (with_bias ? bb[i % N] : 0));
            CHECK_CLOSE(got, want, M * N, 1e-9);
            free(x);
            free(w);
            free(bb);
            free(got);
            te_ctx_free(ctx);
        }
}

static void test_mlp_gate(void **state)
{
    (void)state;
    const int M = 3, N = 5, K = 4;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 2, (int64_t[]){M, K});
    te_tensor *W1 = ph(ctx, "W1", 2, (int64_t[]){K, N}), *W3 = ph(ctx, "W3", 2, (int64_t[]){K, N});
    te_tensor *Y = te_op_mlp_gate(ctx, X, W1, W3, "Y");
    assert_non_null(Y);
    assert_non_null(te_op_find(Y, "Y_gate"));
    assert_non_null(te_op_find(Y, "Y_up"));
    float *x = rnd(M * K), *w1 = rnd(K * N), *w3 = rnd(K * N);
    double *got = eval(ctx, Y, 3, (te_tensor *[]){X, W1, W3}, (const void *[]){x, w1, w3});
    double g[M * N], u[M * N], want[M * N];
    naive_matmul(x, w1, g, M, N, K, 0, 0);
    naive_matmul(x, w3, u, M, N, K, 0, 0);
    for (int i = 0; i < M * N; i++)
        want[i] = g[i] / (1 + exp(-g[i])) * u[i];
    CHECK_CLOSE(got, want, M * N, 1e-9);
    free(x);
    free(w1);
    free(w3);
    free(got);
    te_ctx_free(ctx);
}

static void test_conv2d_bn_relu(void **state)
{
    (void)state;
    const conv_case *base = &conv_cases[1];
    for (int layout = 0; layout < 2; layout++) {
        conv_case cc = *base;
        cc.p.layout = layout ? TE_LAYOUT_NHWC : TE_LAYOUT_NCHW;
        int cg = cc.c / cc.p.groups;
        te_ctx *ctx = te_ctx_create();
        te_tensor *X =
            ph(ctx, "X", 4,
               layout ? (int64_t[]){cc.n, cc.h, cc.w, cc.c} : (int64_t[]){cc.n, cc.c, cc.h, cc.w});
        te_tensor *W = ph(ctx, "W", 4,
                          layout ? (int64_t[]){cc.kh, cc.kw, cg, cc.oc}
                                 : (int64_t[]){cc.oc, cg, cc.kh, cc.kw});
        te_tensor *sc = ph(ctx, "scale", 1, (int64_t[]){cc.oc});
        te_tensor *sh = ph(ctx, "shift", 1, (int64_t[]){cc.oc});
        te_tensor *Y = te_op_conv2d_bn_relu(ctx, X, W, sc, sh, &cc.p, "Y");
        assert_non_null(Y);
        assert_non_null(te_op_find(Y, "Y_conv"));
        assert_non_null(te_op_find(Y, "Y_pad"));
        size_t nx = (size_t)cc.n * cc.c * cc.h * cc.w, nw = (size_t)cc.oc * cg * cc.kh * cc.kw;
        size_t ny = (size_t)te_tensor_numel(Y);
        float *x = rnd(nx), *w = rnd(nw), *s = rnd(cc.oc), *f = rnd(cc.oc);
        float *xh = malloc(sizeof(float) * nx), *wh = malloc(sizeof(float) * nw);
        to_nhwc(&cc, x, w, xh, wh);
        double *got = eval(ctx, Y, 4, (te_tensor *[]){X, W, sc, sh},
                           (const void *[]){layout ? xh : x, layout ? wh : w, s, f});
        double *conv = malloc(sizeof(double) * ny), *want = malloc(sizeof(double) * ny);
        naive_conv_nchw(&cc, x, w, conv);
        int OHW = (int)(ny / (size_t)(cc.n * cc.oc));
        for (int n = 0; n < cc.n; n++)
            for (int o = 0; o < cc.oc; o++)
                for (int y = 0; y < OHW; y++) {
                    double v = conv[((size_t)n * cc.oc + o) * OHW + y] * s[o] + f[o];
                    size_t at = layout ? ((size_t)n * OHW + y) * cc.oc + o
                                       : ((size_t)n * cc.oc + o) * OHW + y;
                    want[at] = v > 0 ? v : 0;
                }
        CHECK_CLOSE(got, want, ny, 1e-9);
        free(x);
        free(w);
        free(s);
        free(f);
        free(xh);
        free(wh);
        free(got);
        free(conv);
        free(want);
        te_ctx_free(ctx);
    }
}

static void test_qkv_projection(void **state)
{
    (void)state;
    const int M = 3, K = 4, NQ = 6, NKV = 2;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 2, (int64_t[]){M, K});
    te_tensor *Wq = ph(ctx, "Wq", 2, (int64_t[]){K, NQ});
    te_tensor *Wk = ph(ctx, "Wk", 2, (int64_t[]){K, NKV});
    te_tensor *Wv = ph(ctx, "Wv", 2, (int64_t[]){K, NKV});
    te_tensor *out[3];
    assert_int_equal(te_op_qkv_projection(ctx, X, Wq, Wk, Wv, out, "attn"), TE_OK);
    assert_string_equal(te_tensor_name(out[0]), "attn_q");
    assert_string_equal(te_tensor_name(out[1]), "attn_k");
    assert_string_equal(te_tensor_name(out[2]), "attn_v");
    float *x = rnd(M * K), *w[3] = {rnd(K * NQ), rnd(K * NKV), rnd(K * NKV)};
    double *res[3];
    for (int p = 0; p < 3; p++)
        res[p] = malloc(sizeof(double) * (size_t)te_tensor_numel(out[p]));
    assert_int_equal(te_reference_eval(ctx, 4, (te_tensor *[]){X, Wq, Wk, Wv},
                                       (const void *[]){x, w[0], w[1], w[2]}, 3, out, res),
                     TE_OK);
    for (int p = 0; p < 3; p++) {
        int n = p ? NKV : NQ;
        double want[M * NQ];
        naive_matmul(x, w[p], want, M, n, K, 0, 0);
        CHECK_CLOSE(res[p], want, (size_t)(M * n), 1e-9);
        free(res[p]);
        free(w[p]);
    }
    free(x);
    te_ctx_free(ctx);
}

/* Operators are dtype-generic where that is natural: f64 and i32 matmul and conv2d. */
static void test_other_dtypes(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int M = 3, N = 4, K = 5;
    te_tensor *A = te_placeholder(ctx, "A", TE_F64, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F64, 2, (int64_t[]){K, N});
    te_tensor *C = te_op_matmul(ctx, A, B, 0, 0, "C");
    assert_non_null(C);
    assert_int_equal(te_tensor_dtype(C), TE_F64);
    double a[M * K], b[K * N], want[M * N];
    tt_fill_f64(&g_rng, a, M * K);
    tt_fill_f64(&g_rng, b, K * N);
    double *got = eval(ctx, C, 2, (te_tensor *[]){A, B}, (const void *[]){a, b});
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += a[i * K + k] * b[k * N + j];
            want[i * N + j] = acc;
        }
    CHECK_CLOSE(got, want, M * N, 1e-12);
    free(got);

    /* i32 convolution with padding: exact integer results. */
    te_tensor *X = te_placeholder(ctx, "X", TE_I32, 4, (int64_t[]){1, 2, 4, 4});
    te_tensor *W = te_placeholder(ctx, "W", TE_I32, 4, (int64_t[]){3, 2, 3, 3});
    te_conv2d_params p = te_conv2d_params_default();
    p.pad_h = p.pad_w = 1;
    te_tensor *Y = te_op_conv2d(ctx, X, W, &p, "Y");
    assert_non_null(Y);
    assert_int_equal(te_tensor_dtype(Y), TE_I32);
    int32_t x[32], w[54];
    float xf[32], wf[54];
    for (int i = 0; i < 32; i++)
        xf[i] = (float)(x[i] = (int32_t)tt_rng_int(&g_rng, 9) + 1); /* never zero */
    for (int i = 0; i < 54; i++)
        wf[i] = (float)(w[i] = (int32_t)tt_rng_int(&g_rng, 7) - 7);
    got = eval(ctx, Y, 2, (te_tensor *[]){X, W}, (const void *[]){x, w});
    conv_case cc = {1, 2, 4, 4, 3, 3, 3, p};
    double want_y[48];
    naive_conv_nchw(&cc, xf, wf, want_y);
    CHECK_CLOSE(got, want_y, 48, 1e-12);
    free(got);

    /* The registry honours dtype=. */
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "matmul", "m=2,n=3,k=4,dtype=f64", in, &ni, out, &no), TE_OK);
    assert_int_equal(te_tensor_dtype(in[0]), TE_F64);
    assert_int_equal(te_tensor_dtype(out[0]), TE_F64);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_matmul_all_transposes, setup),
        cmocka_unit_test_setup(test_batch_matmul, setup),
        cmocka_unit_test_setup(test_dense_bias, setup),
        cmocka_unit_test_setup(test_conv2d_nchw_direct_and_blas, setup),
        cmocka_unit_test_setup(test_conv2d_nhwc, setup),
        cmocka_unit_test_setup(test_depthwise_conv2d, setup),
        cmocka_unit_test_setup(test_pool2d, setup),
        cmocka_unit_test_setup(test_matmul_bias_act, setup),
        cmocka_unit_test_setup(test_mlp_gate, setup),
        cmocka_unit_test_setup(test_conv2d_bn_relu, setup),
        cmocka_unit_test_setup(test_qkv_projection, setup),
        cmocka_unit_test_setup(test_other_dtypes, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
