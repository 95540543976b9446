/* Tuning tuple computes: sketches of the operators built on tuple reducers (argmax with its
 * i64 index, the Welford layer norm, the one-pass softmax) and of a user-written tuple
 * expression all build and match the reference on every output; the tuner measures a few
 * trials of a multi-output tuple workload and checks every output (no wrong answers). */
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

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "testutil.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    return tt_tmpdir_make(dir, sizeof dir, "tuple-tune");
}

static int teardown(void **state)
{
    (void)state;
    return tt_tmpdir_remove(dir);
}

/* Runs the schedule of `trace` and returns the worst error over every output. */
static double run_trace(te_ctx *ctx, te_space *sp, const char *trace, int ni, te_tensor **in,
                        void **in_data, int no, te_tensor **out)
{
    te_schedule *s = te_space_instantiate(sp, trace);
    if (!s)
        fail_msg("trace did not apply: %s\n%s", te_ctx_errmsg(ctx), trace);
    te_tensor *args[16];
    memcpy(args, in, sizeof(te_tensor *) * (size_t)ni);
    memcpy(args + ni, out, sizeof(te_tensor *) * (size_t)no);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, ni + no, args, "k", &tgt, &m))
        fail_msg("te_build: %s\n%s", te_ctx_errmsg(ctx), trace);
    void *data[16];
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
            worst = fmax(worst, isnan(e) ? INFINITY : e);
        }
        free(ref);
        free(data[ni + o]);
    }
    te_module_free(m);
    return worst;
}

static void check_sketches(te_ctx *ctx, const char *label, int ni, te_tensor **in, int no,
                           te_tensor **out, int nsamples)
{
    te_target tgt = te_target_host();
    te_space *sp = te_space_create(ctx, NULL, ni, in, no, out, TE_SPACE_SKETCH, &tgt);
    if (!sp)
        fail_msg("%s: %s", label, te_ctx_errmsg(ctx));
    void *data[8];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(41));
    for (int i = 0; i < ni; i++) {
        size_t n = (size_t)te_tensor_numel(in[i]);
        data[i] = malloc(sizeof(float) * n);
        tt_fill_f32(&g, data[i], n);
    }
    te_rng rr;
    te_rng_seed(&rr, 7);
    int rfactored = 0;
    for (int k = 0; k < nsamples; k++) {
        const char *tr = te_space_sample(sp, &rr);
        if (!tr)
            fail_msg("%s: sample %d: %s", label, k, te_ctx_errmsg(ctx));
        rfactored += strstr(tr, "rfactor ") != NULL;
        double e = run_trace(ctx, sp, tr, ni, in, data, no, out);
        if (!(e < 1e-4))
            fail_msg("%s: max relative error %g with\n%s", label, e, tr);
    }
    printf("  %s: %d sketches correct, %d with rfactor\n", label, nsamples, rfactored);
    for (int i = 0; i < ni; i++)
        free(data[i]);
}

static void test_sketches_of_tuple_operators_are_correct(void **state)
{
    (void)state;
    static const struct {
        const char *op, *params;
    } ops[] = {{"argmax", "m=6,n=40"},
               {"argmin", "m=3,n=33"},
               {"layer_norm_welford", "m=5,n=37"},
               {"softmax_online", "m=6,n=41"}};
    for (size_t q = 0; q < sizeof ops / sizeof ops[0]; q++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[8], *out[8];
        int ni, no;
        if (te_op_build(ctx, ops[q].op, ops[q].params, in, &ni, out, &no))
            fail_msg("%s: %s", ops[q].op, te_ctx_errmsg(ctx));
        check_sketches(ctx, ops[q].op, ni, in, no, out, 6);
        te_ctx_free(ctx);
    }
}

/* A user-written tuple: (sum, sum of squares) of the rows, read by a consumer. */
static void test_sketches_of_a_user_tuple_expression(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){7, 50});
    te_expr *x0 = te_var(ctx, "x0", TE_F32), *x1 = te_var(ctx, "x1", TE_F32);
    te_expr *y0 = te_var(ctx, "y0", TE_F32), *y1 = te_var(ctx, "y1", TE_F32);
    te_reducer *r =
        te_reducer_create_tuple(ctx, "sumsq", 2, (te_expr *[]){x0, x1}, (te_expr *[]){y0, y1},
                                (te_expr *[]){te_add(ctx, x0, y0), te_add(ctx, x1, y1)},
                                (te_expr *[]){te_f32(ctx, 0), te_f32(ctx, 0)});
    te_expr *i = te_axis(ctx, "i", 7), *k = te_reduce_axis(ctx, "k", 50);
    te_expr *v = TE_AT(ctx, A, i, k);
    te_tensor *sq[2];
    assert_int_equal(
        te_compute_tuple(ctx, 2, (const char *[]){"S", "Q"}, 1, &i,
                         te_reduce_tuple(ctx, r, 2, (te_expr *[]){v, te_mul(ctx, v, v)}, 1, &k),
                         sq),
        TE_OK);
    te_expr *i2 = te_axis(ctx, "i", 7);
    te_tensor *V = te_compute(ctx, "V", 1, &i2,
                              te_sub(ctx, TE_AT(ctx, sq[1], i2),
                                     te_mul(ctx, TE_AT(ctx, sq[0], i2), TE_AT(ctx, sq[0], i2))));
    assert_non_null(V);
    check_sketches(ctx, "user sumsq", 1, &A, 1, &V, 6);
    check_sketches(ctx, "user sumsq outputs", 1, &A, 2, sq, 6);
    te_ctx_free(ctx);
}

/* Two tuple expressions that differ only in the second component (its source, or its
 * combine) are different workloads: the hash covers every component. */
static uint64_t sumsq_hash(int variant)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){7, 50});
    te_expr *x0 = te_var(ctx, "x0", TE_F32), *x1 = te_var(ctx, "x1", TE_F32);
    te_expr *y0 = te_var(ctx, "y0", TE_F32), *y1 = te_var(ctx, "y1", TE_F32);
    te_expr *c1 = variant == 2 ? te_max(ctx, x1, y1) : te_add(ctx, x1, y1);
    te_reducer *r = te_reducer_create_tuple(
        ctx, "sumsq", 2, (te_expr *[]){x0, x1}, (te_expr *[]){y0, y1},
        (te_expr *[]){te_add(ctx, x0, y0), c1}, (te_expr *[]){te_f32(ctx, 0), te_f32(ctx, 0)});
    te_expr *i = te_axis(ctx, "i", 7), *k = te_reduce_axis(ctx, "k", 50);
    te_expr *v = TE_AT(ctx, A, i, k);
    te_expr *second = variant == 1 ? te_add(ctx, v, v) : te_mul(ctx, v, v);
    te_tensor *sq[2];
    assert_int_equal(te_compute_tuple(ctx, 2, (const char *[]){"S", "Q"}, 1, &i,
                                      te_reduce_tuple(ctx, r, 2, (te_expr *[]){v, second}, 1, &k),
                                      sq),
                     TE_OK);
    uint64_t h = te_tuner_expr_hash(2, sq);
    te_ctx_free(ctx);
    return h;
}

static void test_tuple_workload_hash_covers_every_component(void **state)
{
    (void)state;
    uint64_t h0 = sumsq_hash(0), h1 = sumsq_hash(1), h2 = sumsq_hash(2);
    assert_true(h0 == sumsq_hash(0)); /* deterministic */
    assert_true(h0 != h1);            /* second source differs */
    assert_true(h0 != h2);            /* second combine differs */
}

static void tune(const char *op, const char *params)
{
    te_db *db = NULL;
    char name[64];
    snprintf(name, sizeof name, "%s.db", op);
    assert_int_equal(te_db_open(tt_path_in(dir, name), NULL, &db), TE_OK);
    te_tune_options o = te_tune_options_default();
    o.max_trials = 8;
    o.batch_size = 8;
    o.quiet = 1;
    o.measure.compile_timeout_s = 20;
    te_tuner *t = te_tuner_create(db, &o);
    assert_non_null(t);
    if (te_tuner_add_op(t, op, params, 1) || te_tuner_run(t))
        fail_msg("%s: %s", op, te_tuner_errmsg(t));
    te_tune_task_info ti;
    assert_int_equal(te_tuner_task_info(t, 0, &ti), TE_OK);
    printf("  %s: %lld trials, %lld ok, %lld wrong, space %s, best %s\n", ti.workload_key,
           (long long)ti.trials, (long long)ti.n_by_status[TE_TRIAL_OK],
           (long long)ti.n_by_status[TE_TRIAL_WRONG_ANSWER], ti.space_kind,
           ti.best_trace ? "found" : "none");
    for (int k = 0; k < TE_TRIAL_STATUS_COUNT; k++)
        if (ti.n_by_status[k])
            printf("    status %d: %lld\n", k, (long long)ti.n_by_status[k]);
    assert_true(ti.n_by_status[TE_TRIAL_OK] > 0);
    assert_int_equal(ti.n_by_status[TE_TRIAL_WRONG_ANSWER], 0);
    assert_non_null(ti.best_trace);
    te_tuner_free(t);
    te_db_close(db);
}

static void test_tuner_measures_tuple_workloads_checking_every_output(void **state)
{
    (void)state;
    tune("argmax", "m=16,n=64");
    tune("softmax_online", "m=16,n=64");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* First: the tuner forks children that run OpenMP code, which must not have run in
         * this process before (the sketch tests run kernels here). */
        cmocka_unit_test(test_tuner_measures_tuple_workloads_checking_every_output),
        cmocka_unit_test(test_sketches_of_tuple_operators_are_correct),
        cmocka_unit_test(test_sketches_of_a_user_tuple_expression),
        cmocka_unit_test(test_tuple_workload_hash_covers_every_component),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
