/* Operator library, elementwise / layout / normalization operators: each evaluated by the
 * reference interpreter on random inputs and compared with a naive float64 implementation. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/ops.h"
#include "testutil.h"

static uint64_t g_seed;
static tt_rng g_rng;

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

#define CHECK_CLOSE(got, want, n, tol)                                                             \
    do {                                                                                           \
        double e_ = max_rel((got), (want), (n));                                                   \
        if (!(e_ < (tol))) {                                                                       \
            fprintf(stderr, "%s:%d: max relative error %g >= %g (seed %llu)\n", __FILE__,          \
                    __LINE__, e_, (double)(tol), (unsigned long long)g_seed);                      \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

static double *eval(te_ctx *ctx, te_tensor *out, int n_in, te_tensor *const *ins,
                    const void *const *data)
{
    if (!out) {
        fprintf(stderr, "operator failed: %s\n", te_ctx_errmsg(ctx));
        fail();
    }
    double *res = malloc(sizeof(double) * (size_t)te_tensor_numel(out));
    if (te_reference_eval(ctx, n_in, ins, data, 1, &out, &res)) {
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
    g_seed = tt_seed(777);
    tt_rng_seed(&g_rng, g_seed);
    return 0;
}

/* Row-major strides of a shape. */
static void strides_of(int nd, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

/* Multi-index of flat index i. */
static void unflat(int nd, const int64_t *shape, int64_t i, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/* ---- activations ---------------------------------------------------------------------- */

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

static void test_activations_any_rank(void **state)
{
    (void)state;
    typedef te_tensor *(*act_fn)(te_ctx *, te_tensor *, const char *);
    const struct {
        act_fn fn;
        te_op_act act;
        const char *tag;
    } acts[] = {{te_op_relu, TE_ACT_RELU, "relu"},
                {te_op_gelu, TE_ACT_GELU, "gelu"},
                {te_op_gelu_tanh, TE_ACT_GELU_TANH, "gelu_tanh"},
                {te_op_silu, TE_ACT_SILU, "silu"},
                {te_op_sigmoid, TE_ACT_SIGMOID, "sigmoid"},
                {te_op_tanh, TE_ACT_TANH, "tanh"}};
    const int64_t shapes[3][4] = {{17}, {3, 5}, {2, 3, 2, 2}};
    const int ranks[3] = {1, 2, 4};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        for (int s = 0; s < 3; s++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = ph(ctx, "X", ranks[s], shapes[s]);
            te_tensor *Y = acts[a].fn(ctx, X, "Y");
            assert_non_null(Y);
            assert_string_equal(te_tensor_tag(Y), acts[a].tag);
            assert_int_equal(te_tensor_ndim(Y), ranks[s]);
            size_t n = (size_t)te_tensor_numel(X);
            float *x = rnd(n);
            for (size_t i = 0; i < n; i++)
                x[i] *= 3.0f; /* reach the saturating parts of the curves */
            double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
            double *want = malloc(sizeof(double) * n);
            for (size_t i = 0; i < n; i++)
                want[i] = act_ref(acts[a].act, x[i]);
            CHECK_CLOSE(got, want, n, 1e-9);
            free(x);
            free(got);
            free(want);
            te_ctx_free(ctx);
        }
}

static void test_relu_on_integers(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_I32, 1, (int64_t[]){6});
    te_tensor *Y = te_op_relu(ctx, X, "Y");
    assert_non_null(Y);
    assert_int_equal(te_tensor_dtype(Y), TE_I32);
    int32_t x[6] = {-3, 5, 0, -1, 7, 2};
    double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
    double want[6] = {0, 5, 0, 0, 7, 2};
    CHECK_CLOSE(got, want, 6, 1e-12);
    free(got);
    te_ctx_free(ctx);
}

/* ---- broadcasting binary --------------------------------------------------------------- */

static void test_binary_broadcast(void **state)
{
    (void)state;
    const te_binop ops[] = {TE_ADD, TE_SUB, TE_MUL, TE_DIV, TE_MIN, TE_MAX};
    const struct {
        int ra, rb;
        int64_t a[4], b[4];
    } cases[] = {
        {3, 2, {2, 1, 4}, {3, 1}}, /* -> [2, 3, 4] */
        {2, 2, {3, 4}, {3, 4}},    /* same shape */
        {1, 3, {4}, {2, 3, 4}},    /* lower rank on the left */
        {4, 1, {2, 1, 3, 1}, {1}}, /* scalar-like */
        {2, 2, {1, 5}, {4, 1}},    /* outer product shape */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *A = ph(ctx, "A", cases[c].ra, cases[c].a);
            te_tensor *B = ph(ctx, "B", cases[c].rb, cases[c].b);
            te_tensor *Y = te_op_binary(ctx, ops[o], A, B, "Y");
            assert_non_null(Y);
            int R = te_tensor_ndim(Y);
            const int64_t *ys = te_tensor_shape(Y);
            float *a = rnd((size_t)te_tensor_numel(A)), *b = rnd((size_t)te_tensor_numel(B));
            double *got = eval(ctx, Y, 2, (te_tensor *[]){A, B}, (const void *[]){a, b});
            size_t n = (size_t)te_tensor_numel(Y);
            double *want = malloc(sizeof(double) * n);
            int64_t sa[4], sb[4], idx[8];
            strides_of(cases[c].ra, cases[c].a, sa);
            strides_of(cases[c].rb, cases[c].b, sb);
            for (size_t i = 0; i < n; i++) {
                unflat(R, ys, (int64_t)i, idx);
                int64_t fa = 0, fb = 0;
                for (int d = 0; d < cases[c].ra; d++)
                    fa += (cases[c].a[d] == 1 ? 0 : idx[d + R - cases[c].ra]) * sa[d];
                for (int d = 0; d < cases[c].rb; d++)
                    fb += (cases[c].b[d] == 1 ? 0 : idx[d + R - cases[c].rb]) * sb[d];
                double x = a[fa], y = b[fb];
                switch (ops[o]) {
                case TE_ADD:
                    want[i] = x + y;
                    break;
                case TE_SUB:
                    want[i] = x - y;
                    break;
                case TE_MUL:
                    want[i] = x * y;
                    break;
                case TE_DIV:
                    want[i] = x / y;
                    break;
                case TE_MIN:
                    want[i] = x < y ? x : y;
                    break;
                default:
                    want[i] = x > y ? x : y;
                    break;
                }
            }
            CHECK_CLOSE(got, want, n, 1e-9);
            free(a);
            free(b);
            free(got);
            free(want);
            te_ctx_free(ctx);
        }
}

/* ---- layout -------------------------------------------------------------------------- */

static void test_pad(void **state)
{
    (void)state;
    const int64_t xs[3] = {2, 3, 4}, before[3] = {0, 2, 1}, after[3] = {1, 0, 3};
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 3, xs);
    te_tensor *Y = te_op_pad(ctx, X, 3, before, after, 2.5, "Y");
    assert_non_null(Y);
    assert_string_equal(te_tensor_tag(Y), "pad");
    const int64_t *ys = te_tensor_shape(Y);
    assert_int_equal(ys[0], 3);
    assert_int_equal(ys[1], 5);
    assert_int_equal(ys[2], 8);
    float *x = rnd(24);
    double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
    size_t n = (size_t)te_tensor_numel(Y);
    double *want = malloc(sizeof(double) * n);
    int64_t idx[3];
    for (size_t i = 0; i < n; i++) {
        unflat(3, ys, (int64_t)i, idx);
        bool in = true;
        int64_t f = 0;
        for (int d = 0; d < 3; d++) {
            int64_t j = idx[d] - before[d];
            in = in && j >= 0 && j < xs[d];
            f = f * xs[d] + j;
        }
        want[i] = in ? x[f] : 2.5;
    }
    CHECK_CLOSE(got, want, n, 1e-12);
    free(x);
    free(got);
    free(want);
    te_ctx_free(ctx);
}

static void test_transpose(void **state)
{
    (void)state;
    const int64_t xs[4] = {2, 3, 4, 5};
    const int perm[4] = {2, 0, 3, 1};
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 4, xs);
    te_tensor *Y = te_op_transpose(ctx, X, perm, "Y");
    assert_non_null(Y);
    const int64_t *ys = te_tensor_shape(Y);
    for (int d = 0; d < 4; d++)
        assert_int_equal(ys[d], xs[perm[d]]);
    float *x = rnd(120);
    double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
    double want[120];
    int64_t st[4], idx[4];
    strides_of(4, xs, st);
    for (int i = 0; i < 120; i++) {
        unflat(4, ys, i, idx);
        int64_t f = 0;
        for (int d = 0; d < 4; d++)
            f += idx[d] * st[perm[d]];
        want[i] = x[f];
    }
    CHECK_CLOSE(got, want, 120, 1e-12);
    free(x);
    free(got);
    te_ctx_free(ctx);
}

static void test_reshape(void **state)
{
    (void)state;
    const struct {
        int rx, ry;
        int64_t xs[4], ys[4], want[4];
    } cases[] = {
        {3, 2, {2, 3, 4}, {4, -1}, {4, 6}},
        {2, 3, {6, 4}, {2, 2, 6}, {2, 2, 6}},
        {3, 4, {2, 1, 6}, {3, 1, 2, 2}, {3, 1, 2, 2}},
        {2, 1, {3, 5}, {-1}, {15}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = ph(ctx, "X", cases[c].rx, cases[c].xs);
        te_tensor *Y = te_op_reshape(ctx, X, cases[c].ry, cases[c].ys, "Y");
        assert_non_null(Y);
        for (int d = 0; d < cases[c].ry; d++)
            assert_int_equal(te_tensor_shape(Y)[d], cases[c].want[d]);
        size_t n = (size_t)te_tensor_numel(X);
        float *x = rnd(n);
        double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
        double *want = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++)
            want[i] = x[i]; /* a row-major reshape keeps the flat order */
        CHECK_CLOSE(got, want, n, 1e-12);
        free(x);
        free(got);
        free(want);
        te_ctx_free(ctx);
    }
}

/* ---- softmax and norms ---------------------------------------------------------------- */

/* Calls fn(base offset, stride, length) for every line of X along axis. */
typedef void (*line_fn)(int64_t off, int64_t stride, int64_t len, void *user);
static void for_lines(int nd, const int64_t *shape, int axis, line_fn fn, void *user)
{
    int64_t st[TE_MAX_DIMS], total = 1, idx[TE_MAX_DIMS];
    strides_of(nd, shape, st);
    for (int d = 0; d < nd; d++)
        total *= shape[d];
    for (int64_t i = 0; i < total; i++) {
        unflat(nd, shape, i, idx);
        if (idx[axis] != 0)
            continue;
        fn(i, st[axis], shape[axis], user);
    }
}

typedef struct {
    const float *x, *g, *b;
    double *y;
    double eps;
} line_data;

static void softmax_line(int64_t off, int64_t st, int64_t len, void *user)
{
    line_data *u = user;
    double mx = -INFINITY, s = 0;
    for (int64_t k = 0; k < len; k++)
        mx = fmax(mx, u->x[off + k * st]);
    for (int64_t k = 0; k < len; k++)
        s += exp(u->x[off + k * st] - mx);
    for (int64_t k = 0; k < len; k++)
        u->y[off + k * st] = exp(u->x[off + k * st] - mx) / s;
}

static void test_softmax(void **state)
{
    (void)state;
    const int64_t xs[3] = {3, 4, 5};
    for (int axis = -1; axis < 3; axis++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = ph(ctx, "X", 3, xs);
        te_tensor *Y = te_op_softmax(ctx, X, axis, "Y");
        assert_non_null(Y);
        assert_string_equal(te_tensor_tag(Y), "softmax");
        const char *stages[] = {"Y_max", "Y_exp", "Y_sum"};
        for (int s = 0; s < 3; s++)
            assert_non_null(te_op_find(Y, stages[s]));
        te_tensor *all[8];
        assert_int_equal(te_op_stages(Y, all, 8), 4);
        assert_ptr_equal(all[3], Y);
        float *x = rnd(60);
        for (int i = 0; i < 60; i++)
            x[i] *= 20.0f; /* large values: the max subtraction matters */
        double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
        double want[60];
        line_data u = {x, NULL, NULL, want, 0};
        int ax = axis < 0 ? 2 : axis;
        for_lines(3, xs, ax, softmax_line, &u);
        CHECK_CLOSE(got, want, 60, 1e-9);
        /* Every line sums to 1. */
        double sums[60] = {0}, ones[60];
        int64_t st[3], idx[3];
        strides_of(3, xs, st);
        int nl = 0;
        for (int i = 0; i < 60; i++) {
            unflat(3, xs, i, idx);
            if (idx[ax])
                continue;
            double s = 0;
            for (int k = 0; k < xs[ax]; k++)
                s += got[i + k * st[ax]];
            sums[nl] = s;
            ones[nl++] = 1.0;
        }
        CHECK_CLOSE(sums, ones, (size_t)nl, 1e-12);
        free(x);
        free(got);
        te_ctx_free(ctx);
    }
}

static void layer_norm_line(int64_t off, int64_t st, int64_t len, void *user)
{
    line_data *u = user;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < len; k++)
        mean += u->x[off + k * st];
    mean /= (double)len;
    for (int64_t k = 0; k < len; k++)
        var += (u->x[off + k * st] - mean) * (u->x[off + k * st] - mean);
    var /= (double)len;
    for (int64_t k = 0; k < len; k++) {
        double y = (u->x[off + k * st] - mean) / sqrt(var + u->eps);
        if (u->g)
            y *= u->g[k];
        if (u->b)
            y += u->b[k];
        u->y[off + k * st] = y;
    }
}

static void test_layer_norm(void **state)
{
    (void)state;
    const int64_t xs[3] = {2, 3, 7};
    const struct {
        int axis, gamma, beta;
    } cases[] = {{-1, 1, 1}, {1, 1, 0}, {0, 0, 1}, {2, 0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        te_ctx *ctx = te_ctx_create();
        int ax = cases[c].axis < 0 ? 2 : cases[c].axis;
        te_tensor *X = ph(ctx, "X", 3, xs);
        te_tensor *G = ph(ctx, "gamma", 1, &xs[ax]), *B = ph(ctx, "beta", 1, &xs[ax]);
        const double eps = 1e-5;
        te_tensor *Y = te_op_layer_norm(ctx, X, cases[c].gamma ? G : NULL, cases[c].beta ? B : NULL,
                                        eps, cases[c].axis, "Y");
        assert_non_null(Y);
        assert_non_null(te_op_find(Y, "Y_mean"));
        assert_non_null(te_op_find(Y, "Y_var"));
        float *x = rnd(42), *g = rnd((size_t)xs[ax]), *b = rnd((size_t)xs[ax]);
        double *got = eval(ctx, Y, 3, (te_tensor *[]){X, G, B}, (const void *[]){x, g, b});
        double want[42];
        line_data u = {x, cases[c].gamma ? g : NULL, cases[c].beta ? b : NULL, want,
                       (double)(float)eps};
        for_lines(3, xs, ax, layer_norm_line, &u);
        CHECK_CLOSE(got, want, 42, 1e-9);
        free(x);
        free(g);
        free(b);
        free(got);
        te_ctx_free(ctx);
    }
}

static void test_rms_norm(void **state)
{
    (void)state;
    const int M = 4, N = 9;
    for (int with_gamma = 0; with_gamma < 2; with_gamma++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = ph(ctx, "X", 2, (int64_t[]){M, N}), *G = ph(ctx, "g", 1, (int64_t[]){N});
        te_tensor *Y = te_op_rms_norm(ctx, X, with_gamma ? G : NULL, 1e-6, "Y");
        assert_non_null(Y);
        assert_non_null(te_op_find(Y, "Y_ms"));
        float *x = rnd(M * N), *g = rnd(N);
        double *got = eval(ctx, Y, 2, (te_tensor *[]){X, G}, (const void *[]){x, g});
        double want[M * N];
        for (int i = 0; i < M; i++) {
            double ms = 0;
            for (int j = 0; j < N; j++)
                ms += (double)x[i * N + j] * x[i * N + j];
            ms /= N;
            for (int j = 0; j < N; j++)
                want[i * N + j] =
                    x[i * N + j] / sqrt(ms + (double)(float)1e-6) * (with_gamma ? g[j] : 1.0);
        }
        CHECK_CLOSE(got, want, M * N, 1e-9);
        free(x);
        free(g);
        free(got);
        te_ctx_free(ctx);
    }
}

/* ---- reductions ------------------------------------------------------------------------ */

static void test_reduce_and_mean(void **state)
{
    (void)state;
    const int64_t xs[3] = {3, 4, 5};
    const te_reduce_kind kinds[] = {TE_RSUM, TE_RMAX, TE_RMIN, TE_RPROD};
    for (int keep = 0; keep < 2; keep++)
        for (int k = 0; k < 5; k++) { /* k == 4: mean */
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = ph(ctx, "X", 3, xs);
            const int axes[2] = {0, -1};
            te_tensor *Y = k < 4 ? te_op_reduce(ctx, X, kinds[k], 2, axes, keep, "Y")
                                 : te_op_mean(ctx, X, 2, axes, keep, "Y");
            assert_non_null(Y);
            assert_int_equal(te_tensor_ndim(Y), keep ? 3 : 1);
            assert_int_equal(te_tensor_numel(Y), 4);
            float *x = rnd(60);
            double *got = eval(ctx, Y, 1, (te_tensor *[]){X}, (const void *[]){x});
            double want[4];
            for (int j = 0; j < 4; j++) {
                double acc = k == 1 ? -INFINITY : k == 2 ? INFINITY : k == 3 ? 1 : 0;
                for (int i = 0; i < 3; i++)
                    for (int l = 0; l < 5; l++) {
                        double v = x[(i * 4 + j) * 5 + l];
                        acc = k == 1   ? fmax(acc, v)
                              : k == 2 ? fmin(acc, v)
                              : k == 3 ? acc * v
                                       : acc + v;
                    }
                want[j] = k == 4 ? acc / 15 : acc;
            }
            CHECK_CLOSE(got, want, 4, 1e-9);
            free(x);
            free(got);
            te_ctx_free(ctx);
        }
    /* A full reduction gives shape [1]. */
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", 2, (int64_t[]){2, 3});
    te_tensor *Y = te_op_reduce(ctx, X, TE_RSUM, 2, (const int[]){1, 0}, 0, "Y");
    assert_non_null(Y);
    assert_int_equal(te_tensor_ndim(Y), 1);
    assert_int_equal(te_tensor_shape(Y)[0], 1);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_activations_any_rank, setup),
        cmocka_unit_test_setup(test_relu_on_integers, setup),
        cmocka_unit_test_setup(test_binary_broadcast, setup),
        cmocka_unit_test_setup(test_pad, setup),
        cmocka_unit_test_setup(test_transpose, setup),
        cmocka_unit_test_setup(test_reshape, setup),
        cmocka_unit_test_setup(test_softmax, setup),
        cmocka_unit_test_setup(test_layer_norm, setup),
        cmocka_unit_test_setup(test_rms_norm, setup),
        cmocka_unit_test_setup(test_reduce_and_mean, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
