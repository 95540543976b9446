/* The operators built on tuple reducers (te/ops/reduce.c): argmax/argmin with and without
 * keepdims, the one-pass Welford layer norm, the one-pass softmax on masked and huge rows,
 * Kahan summation on adversarial data (the error plain fp32 sums make, measured and removed)
 * and the Kahan path of layer norm / RMS norm on long rows; built for the CPU and checked
 * against the float64 reference. */
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

#include "tessera/backend.h"
#include "tessera/graph.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "testutil.h"

/* Builds outs with the default schedule, runs it on in_data, and returns the worst relative
 * error against the reference over every output (i64 outputs compared exactly as doubles). */
static double run_check(te_ctx *ctx, int ni, te_tensor **in, void **in_data, int no,
                        te_tensor **out)
{
    te_schedule *s = te_schedule_create(ctx, no, out);
    assert_non_null(s);
    te_tensor *args[8];
    memcpy(args, in, sizeof(te_tensor *) * (size_t)ni);
    memcpy(args + ni, out, sizeof(te_tensor *) * (size_t)no);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, ni + no, args, "op", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    void *data[8];
    memcpy(data, in_data, sizeof(void *) * (size_t)ni);
    for (int o = 0; o < no; o++) {
        size_t n = (size_t)te_tensor_numel(out[o]);
        data[ni + o] = malloc(8 * n);
        tt_poison_f32(data[ni + o], 2 * n);
    }
    assert_int_equal(te_module_run(m, data), TE_OK);
    double worst = 0;
    for (int o = 0; o < no; o++) {
        size_t n = (size_t)te_tensor_numel(out[o]);
        double *ref = malloc(sizeof(double) * n);
        assert_int_equal(
            te_reference_eval(ctx, ni, in, (const void *const *)in_data, 1, &out[o], &ref), TE_OK);
        for (size_t i = 0; i < n; i++) {
            double g = te_tensor_dtype(out[o]) == TE_I64 ? (double)((int64_t *)data[ni + o])[i]
                                                         : ((float *)data[ni + o])[i];
            double e = g == ref[i] ? 0 : fabs(g - ref[i]) / fmax(1.0, fabs(ref[i]));
            if (isnan(e))
                e = INFINITY;
            worst = fmax(worst, e);
        }
        free(ref);
        free(data[ni + o]);
    }
    te_module_free(m);
    return worst;
}

static void test_argmax_argmin_ops_keepdims_and_ties(void **state)
{
    (void)state;
    for (int keep = 0; keep < 2; keep++)
        for (int is_max = 0; is_max < 2; is_max++) {
            te_ctx *ctx = te_ctx_create();
            te_tensor *X = te_placeholder(ctx, "X", TE_F32, 3, (int64_t[]){3, 13, 4});
            te_tensor *I = te_op_arg_reduce(ctx, X, is_max, 1, keep, "am");
            assert_non_null(I);
            assert_int_equal(te_tensor_dtype(I), TE_I64);
            assert_int_equal(te_tensor_ndim(I), keep ? 3 : 2);
            assert_int_equal(te_tensor_shape(I)[1], keep ? 1 : 4);
            te_tensor *V = te_op_find(I, "am_val");
            assert_non_null(V);
            assert_int_equal(te_tensor_dtype(V), TE_F32);
            float x[3 * 13 * 4];
            tt_rng g;
            tt_rng_seed(&g, tt_seed(31));
            tt_fill_f32(&g, x, 3 * 13 * 4);
            for (int a = 0; a < 3; a++) /* a tie in every column of every batch */
                for (int c = 0; c < 4; c++)
                    x[(a * 13 + 2) * 4 + c] = x[(a * 13 + 11) * 4 + c] = is_max ? 2.0f : -2.0f;
            double e = run_check(ctx, 1, &X, (void *[]){x}, 2, (te_tensor *[]){I, V});
            assert_true(e == 0);
            double idx[12];
            assert_int_equal(
                te_reference_eval(ctx, 1, &X, (const void *[]){x}, 1, &I, (double *[]){idx}),
                TE_OK);
            for (int j = 0; j < 12; j++)
                assert_true(idx[j] == 2);
            te_ctx_free(ctx);
        }
    te_ctx *ctx = te_ctx_create();
    te_tensor *X1 = te_placeholder(ctx, "X", TE_F32, 1, (int64_t[]){9});
    te_tensor *I1 = te_op_argmax(ctx, X1, -1, 0, "a1");
    assert_int_equal(te_tensor_ndim(I1), 1);
    assert_int_equal(te_tensor_shape(I1)[0], 1); /* a full reduction keeps shape [1] */
    te_tensor *B = te_placeholder(ctx, "B", TE_BOOL, 1, (int64_t[]){9});
    assert_null(te_op_argmax(ctx, B, 0, 0, "ab"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "bool"));
    te_ctx_free(ctx);
}

static void test_welford_layer_norm_matches_reference(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    enum { M = 6, N = 45 };
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_tensor *G = te_placeholder(ctx, "G", TE_F32, 1, (int64_t[]){N});
    te_tensor *B = te_placeholder(ctx, "Bt", TE_F32, 1, (int64_t[]){N});
    te_tensor *Y = te_op_layer_norm_welford(ctx, X, G, B, 1e-5, -1, "ln");
    assert_non_null(Y);
    assert_non_null(te_op_find(Y, "ln_cnt"));
    assert_int_equal(te_tensor_tuple_size(te_op_find(Y, "ln_mean")), 3);
    float x[M * N], gm[N], bt[N];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(32));
    tt_fill_f32(&g, x, M * N);
    for (int j = 0; j < M * N; j++)
        x[j] += 50.0f; /* a large mean */
    tt_fill_f32(&g, gm, N);
    tt_fill_f32(&g, bt, N);
    double e = run_check(ctx, 3, (te_tensor *[]){X, G, B}, (void *[]){x, gm, bt}, 1, &Y);
    printf("welford layer norm: max relative error %.3g\n", e);
    assert_true(e < 1e-4); /* the output divides by a small standard deviation */
    te_ctx_free(ctx);
}

static void test_online_softmax_masked_rows_and_huge_values(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    enum { M = 4, N = 27 };
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_tensor *Y = te_op_softmax_online(ctx, X, 1, "sm");
    assert_non_null(Y);
    float x[M * N];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(33));
    tt_fill_f32(&g, x, M * N);
    for (int c = 0; c < N; c++) {
        x[0 * N + c] = -INFINITY;              /* fully masked */
        x[1 * N + c] = 1e30f * (float)(c % 3); /* exp(x) alone would overflow */
        if (c % 2)
            x[2 * N + c] = -INFINITY; /* partly masked */
    }
    te_tensor *outs[3] = {Y, te_op_find(Y, "sm_max"), te_op_find(Y, "sm_sum")};
    assert_non_null(outs[1]);
    double e = run_check(ctx, 1, &X, (void *[]){x}, 3, outs);
    printf("online softmax: max relative error %.3g\n", e);
    assert_true(e < 1e-5);
    double y[M * N];
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *[]){x}, 1, &Y, (double *[]){y}),
                     TE_OK);
    for (int c = 0; c < N; c++) {
        assert_true(y[c] == 0); /* the defined result of a masked row */
        assert_false(isnan(y[N + c]));
    }
    te_ctx_free(ctx);
}

/* One row: 16 ones (one in each vector lane, whatever the width) then many values each below
 * half an ulp of the running sum, which plain fp32 summation drops one by one. */
enum { KN = 1 << 16 };

static void adversarial(float *x)
{
    for (int i = 0; i < KN; i++)
        x[i] = i < 16 ? 1.0f : 5e-8f;
}

static double sum_error(bool kahan)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){1, KN});
    te_expr *i = te_axis(ctx, "i", 1), *k = te_reduce_axis(ctx, "k", KN);
    te_expr *v = TE_AT(ctx, X, i, k);
    te_tensor *out[2] = {NULL, NULL};
    int no = 1;
    if (kahan) {
        te_expr *body = te_reduce_tuple(ctx, te_reducer_kahan(ctx, TE_F32), 2,
                                        (te_expr *[]){v, te_f32(ctx, 0)}, 1, &k);
        assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"S", "Sc"}, 1, &i, body, out),
                         TE_OK);
        no = 2;
    } else {
        out[0] = te_compute(ctx, "S", 1, &i, te_sum(ctx, v, 1, &k));
    }
    float *x = malloc(sizeof(float) * KN);
    adversarial(x);
    te_schedule *s = te_schedule_create(ctx, no, out);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 1 + no, (te_tensor *[]){X, out[0], out[1]}, "ksum", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    float got[2] = {NAN, NAN};
    assert_int_equal(te_module_run(m, (void *[]){x, &got[0], &got[1]}), TE_OK);
    double want;
    assert_int_equal(
        te_reference_eval(ctx, 1, &X, (const void *[]){x}, 1, out, (double *[]){&want}), TE_OK);
    double err = fabs(got[0] - want) / fabs(want);
    te_module_free(m);
    free(x);
    te_ctx_free(ctx);
    return err;
}

static void test_kahan_removes_the_error_of_plain_fp32_sums(void **state)
{
    (void)state;
    double plain = sum_error(false), comp = sum_error(true);
    printf("sum of 16 ones and %d x 5e-8: relative error plain fp32 %.3g, Kahan %.3g\n", KN - 16,
           plain, comp);
    assert_true(plain > 1e-4); /* the small terms are lost */
    assert_true(comp < 1e-6);  /* and recovered */
}

/* Layer norm and RMS norm switch to Kahan statistics at TE_OP_KAHAN_MIN_ROW. */
static void test_norms_use_kahan_on_long_rows(void **state)
{
    (void)state;
    for (int which = 0; which < 2; which++)
        for (int longrow = 0; longrow < 2; longrow++) {
            te_ctx *ctx = te_ctx_create();
            int64_t n = longrow ? TE_OP_KAHAN_MIN_ROW : 64;
            te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){2, n});
            te_tensor *Y = which ? te_op_rms_norm(ctx, X, NULL, 1e-6, "rn")
                                 : te_op_layer_norm(ctx, X, NULL, NULL, 1e-5, -1, "ln");
            assert_non_null(Y);
            const char *comp = which ? "rn_ms_c" : "ln_mean_c";
            assert_true((te_op_find(Y, comp) != NULL) == (longrow != 0));
            float *x = malloc(sizeof(float) * (size_t)(2 * n));
            tt_rng g;
            tt_rng_seed(&g, tt_seed(34));
            tt_fill_f32(&g, x, (size_t)(2 * n));
            for (int64_t j = 0; j < 2 * n; j++)
                x[j] += 3.0f;
            double e = run_check(ctx, 1, &X, (void *[]){x}, 1, &Y);
            if (!(e < 1e-4))
                fail_msg("%s n=%lld: max relative error %g", which ? "rms_norm" : "layer_norm",
                         (long long)n, e);
            free(x);
            te_ctx_free(ctx);
        }
}

/* Graph nodes use the new operators: one-pass softmax, argmax of it (i64) and the Welford
 * layer norm, fused with the shipped CPU rules, compiled and run. */
static void test_graph_nodes_use_the_tuple_operators(void **state)
{
    (void)state;
    enum { R = 6, C = 33 };
    te_graph *g = te_graph_create();
    const char *text = "input x f32[6,33]\n"
                       "s = softmax_online(x)\n"
                       "a = argmax(s)\n"
                       "l = layer_norm_welford(x)\n"
                       "output a, l\n";
    if (te_graph_parse(g, text, "tuple.graph") != TE_OK)
        fail_msg("parse: %s", te_graph_errmsg(g));
    char err[512], path[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    te_fuse_rules *rules = te_fuse_rules_load(path, err, sizeof err);
    if (!rules)
        fail_msg("rules: %s", err);
    te_fuse_target tgt;
    te_fuse_target_host(&tgt);
    te_fuse_plan *plan = te_graph_fuse(g, rules, &tgt);
    assert_non_null(plan);
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, plan, NULL, &e) != TE_OK)
        fail_msg("compile: %s", te_graph_errmsg(g));
    float x[R * C], l[R * C];
    int64_t a[R];
    tt_rng rg;
    tt_rng_seed(&rg, tt_seed(35));
    tt_fill_f32(&rg, x, R * C);
    tt_poison_f32(l, R * C);
    assert_int_equal(te_graph_run(e, (const void *[]){x}, (void *[]){a, l}), TE_OK);
    for (int r = 0; r < R; r++) {
        int best = 0;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) {
            if (x[r * C + c] > x[r * C + best])
                best = c;
            mean += x[r * C + c] / C;
        }
        for (int c = 0; c < C; c++)
            var += (x[r * C + c] - mean) * (x[r * C + c] - mean) / C;
        assert_int_equal(a[r], best);
        for (int c = 0; c < C; c++) {
            double want = (x[r * C + c] - mean) / sqrt(var + 1e-5);
            if (!(fabs(l[r * C + c] - want) < 1e-4 * fmax(1, fabs(want))))
                fail_msg("layer_norm_welford[%d, %d] = %g, want %g", r, c, l[r * C + c], want);
        }
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(plan);
    te_fuse_rules_free(rules);
    te_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_argmin_ops_keepdims_and_ties),
        cmocka_unit_test(test_welford_layer_norm_matches_reference),
        cmocka_unit_test(test_online_softmax_masked_rows_and_huge_values),
        cmocka_unit_test(test_kahan_removes_the_error_of_plain_fp32_sums),
        cmocka_unit_test(test_norms_use_kahan_on_long_rows),
        cmocka_unit_test(test_graph_nodes_use_the_tuple_operators),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
