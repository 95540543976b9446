/* Every library operator, built for the CPU with its default schedule, against the reference
 * interpreter; matmul and conv2d also against OpenBLAS. */
#include <cblas.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "op_cases.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "testutil.h"

/* Builds with the default schedule, runs on random inputs; returns outputs (caller frees). */
static float **run_default(te_ctx *ctx, te_tensor **in, int n_in, te_tensor **out, int n_out,
                           void **in_data)
{
    te_schedule *s = te_schedule_create(ctx, n_out, out);
    assert_non_null(s);
    te_tensor *args[2 * TE_OP_MAX_IO];
    memcpy(args, in, sizeof(te_tensor *) * (size_t)n_in);
    memcpy(args + n_in, out, sizeof(te_tensor *) * (size_t)n_out);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, n_in + n_out, args, "op", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    void *data[2 * TE_OP_MAX_IO];
    float **outs = calloc((size_t)n_out, sizeof(float *));
    memcpy(data, in_data, sizeof(void *) * (size_t)n_in);
    for (int o = 0; o < n_out; o++) {
        size_t n = (size_t)te_tensor_numel(out[o]);
        outs[o] = malloc(sizeof(int64_t) * n); /* room for i64 outputs (argmax) */
        tt_poison_f32(outs[o], 2 * n);
        data[n_in + o] = outs[o];
    }
    assert_int_equal(te_module_run(m, data), TE_OK);
    for (int o = 0; o < n_out; o++) /* integer outputs (indices, quantized) compared as floats */
        tt_output_as_f32(outs[o], te_tensor_dtype(out[o]), (size_t)te_tensor_numel(out[o]));
    te_module_free(m);
    return outs;
}

static void test_every_operator_default_schedule(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(11));
    for (int k = 0; k < NCASES; k++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni, no;
        if (te_op_build(ctx, cases[k].op, cases[k].params, in, &ni, out, &no))
            fail_msg("%s: %s", cases[k].op, te_ctx_errmsg(ctx));
        void *data[TE_OP_MAX_IO];
        for (int i = 0; i < ni; i++) {
            size_t n = (size_t)te_tensor_numel(in[i]);
            data[i] = malloc(sizeof(float) * n);
            tt_fill_f32(&r, data[i], n);
        }
        float **got = run_default(ctx, in, ni, out, no, data);
        for (int o = 0; o < no; o++) {
            size_t n = (size_t)te_tensor_numel(out[o]);
            double *ref = malloc(sizeof(double) * n);
            assert_int_equal(
                te_reference_eval(ctx, ni, in, (const void *const *)data, 1, &out[o], &ref), TE_OK);
            double e = tt_max_rel_err_f32(got[o], ref, n);
            if (!(e < 1e-5))
                fail_msg("%s(%s) output %d: max relative error %g", cases[k].op, cases[k].params, o,
                         e);
            free(ref);
            free(got[o]);
        }
        free(got);
        for (int i = 0; i < ni; i++)
            free(data[i]);
        te_ctx_free(ctx);
    }
}

/* The test cases cover every registered operator. */
static void test_cases_cover_registry(void **state)
{
    (void)state;
    int n;
    const te_op_info *ops = te_op_list(&n);
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int k = 0; k < NCASES; k++)
            found |= !strcmp(cases[k].op, ops[i].name);
        if (!found)
            fail_msg("operator '%s' has no test case in tests/op_cases.h", ops[i].name);
    }
}

static void test_matmul_against_openblas(void **state)
{
    (void)state;
    enum { M = 67, N = 96, K = 80 };
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[2], *out[1];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "matmul", "m=67,n=96,k=80", in, &ni, out, &no), TE_OK);
    tt_rng r;
    tt_rng_seed(&r, 5);
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c = malloc(sizeof(float) * M * N);
    tt_fill_f32(&r, a, M * K);
    tt_fill_f32(&r, b, K * N);
    float **got = run_default(ctx, in, 2, out, 1, (void *[]){a, b});
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    double worst = 0;
    for (int q = 0; q < M * N; q++)
        worst = fmax(worst, fabs((double)got[0][q] - c[q]) / fmax(1.0, fabs((double)c[q])));
    assert_true(worst < 1e-5);
    free(got[0]);
    free(got);
    free(a);
    free(b);
    free(c);
    te_ctx_free(ctx);
}

/* Weights packed once (key nb): the kernel reads panels packed by te_op_pack_panels and
 * computes what the plain layout computes, against OpenBLAS, for both layouts of B. */
static void test_packed_weights_against_openblas(void **state)
{
    (void)state;
    enum { M = 21, N = 64, K = 24 };
    tt_rng r;
    tt_rng_seed(&r, 9);
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *bp = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
    tt_fill_f32(&r, a, M * K);
    tt_fill_f32(&r, b, K * N);
    for (int tb = 0; tb < 2; tb++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[2], *out[1];
        int ni, no;
        char params[64];
        snprintf(params, sizeof params, "m=%d,n=%d,k=%d,trans_b=%d,nb=16", M, N, K, tb);
        assert_int_equal(te_op_build(ctx, "matmul", params, in, &ni, out, &no), TE_OK);
        /* The argument is the panels [n / nb, k, nb]. */
        assert_string_equal(te_tensor_name(in[1]), "B_panels");
        assert_int_equal(te_tensor_ndim(in[1]), 3);
        assert_int_equal(te_tensor_shape(in[1])[0], N / 16);
        assert_int_equal(te_op_pack_panels(b, K, N, tb, 16, bp), TE_OK);
        float **got = run_default(ctx, in, 2, out, 1, (void *[]){a, bp});
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a,
                    K, b, tb ? K : N, 0.0f, c, N);
        double worst = 0;
        for (int q = 0; q < M * N; q++)
            worst = fmax(worst, fabs((double)got[0][q] - c[q]) / fmax(1.0, fabs((double)c[q])));
        if (!(worst < 1e-5))
            fail_msg("trans_b %d: max relative error %g against cblas_sgemm", tb, worst);
        free(got[0]);
        free(got);
        te_ctx_free(ctx);
    }
    /* Bad sizes are refused, never packed halfway. */
    assert_int_equal(te_op_pack_panels(b, K, N, 0, 24, bp), TE_ERR_ARG);
    assert_int_equal(te_op_pack_panels(NULL, K, N, 0, 16, bp), TE_ERR_ARG);
    free(a);
    free(b);
    free(bp);
    free(c);
}

static void test_conv2d_against_openblas(void **state)
{
    (void)state;
    /* NCHW, 3x3, pad 1, stride 1: im2col + sgemm is the baseline. */
    enum { C = 4, H = 9, W = 7, OC = 6, KH = 3, KW = 3, OH = 9, OW = 7 };
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[2], *out[1];
    int ni, no;
    assert_int_equal(
        te_op_build(ctx, "conv2d", "n=1,c=4,h=9,w=7,oc=6,kh=3,kw=3,pad=1", in, &ni, out, &no),
        TE_OK);
    tt_rng r;
    tt_rng_seed(&r, 6);
    float *x = malloc(sizeof(float) * C * H * W), *w = malloc(sizeof(float) * OC * C * KH * KW);
    tt_fill_f32(&r, x, C * H * W);
    tt_fill_f32(&r, w, OC * C * KH * KW);
    float **got = run_default(ctx, in, 2, out, 1, (void *[]){x, w});
    float *col = calloc((size_t)C * KH * KW * OH * OW, sizeof(float));
    float *y = malloc(sizeof(float) * OC * OH * OW);
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < KH; ky++)
            for (int kx = 0; kx < KW; kx++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++) {
                        int ih = oh + ky - 1, iw = ow + kx - 1;
                        col[((c * KH + ky) * KW + kx) * OH * OW + oh * OW + ow] =
                            ih >= 0 && ih < H && iw >= 0 && iw < W ? x[(c * H + ih) * W + iw] : 0;
                    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, OH * OW, C * KH * KW, 1.0f, w,
                C * KH * KW, col, OH * OW, 0.0f, y, OH * OW);
    double worst = 0;
    for (int q = 0; q < OC * OH * OW; q++)
        worst = fmax(worst, fabs((double)got[0][q] - y[q]) / fmax(1.0, fabs((double)y[q])));
    assert_true(worst < 1e-5);
    free(got[0]);
    free(got);
    free(x);
    free(w);
    free(col);
    free(y);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases_cover_registry),
        cmocka_unit_test(test_every_operator_default_schedule),
        cmocka_unit_test(test_matmul_against_openblas),
        cmocka_unit_test(test_packed_weights_against_openblas),
        cmocka_unit_test(test_conv2d_against_openblas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
