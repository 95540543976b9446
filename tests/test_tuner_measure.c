/* Tests for the tuner's measurer (autotune/measure.c) and workload helpers
 * (autotune/workload.c): raw C sources fed to the builder and runner, one that is right, one
 * that segfaults, one that hangs, one that computes wrong values and one that does not
 * compile; each must be recorded with its status while the batch completes. Also the cost
 * model on a synthetic problem, flop counts and expression keys. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune/tune_impl.h"
#include "backends/c/c_backend.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "testutil.h"

/* The default schedule of a small matmul, emitted as kernel "cand". */
static const char *matmul_source(te_ctx *ctx, te_tensor **ins, te_tensor **outs, int *n_in,
                                 int *n_out, const char *params)
{
    assert_int_equal(te_op_build(ctx, "matmul", params, ins, n_in, outs, n_out), TE_OK);
    te_schedule *s = te_schedule_create(ctx, *n_out, outs);
    assert_non_null(s);
    te_tensor *args[4] = {ins[0], ins[1], outs[0]};
    te_target tgt = te_target_host();
    te_lowered *f = te_lower(s, 3, args, "cand", &tgt);
    assert_non_null(f);
    const char *src = te_emit_c(ctx, f, &tgt);
    assert_non_null(src);
    return src;
}

/* The default schedule of matmul 24x40x16 as kernel "cand"; ident (64 bytes) receives the C
 * identifier its source defines (<ident>_packed is the entry), for hand-written variants. */
static const char *cand_matmul(te_ctx *ctx, te_tensor **ins, te_tensor **outs, int *n_in,
                               int *n_out, char *ident)
{
    te__c_kernel_ident("cand", ident, 64);
    return matmul_source(ctx, ins, outs, n_in, n_out, "m=24,n=40,k=16");
}

static void test_faulty_candidates_are_recorded(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    char ident[64];
    const char *good = cand_matmul(ctx, ins, outs, &n_in, &n_out, ident);
    char segv[256], hang[256], wrong[512], bad[256], good2[64];
    snprintf(segv, sizeof segv,
             "/* segv %p */ int %s_packed(void **a) { (void)a; volatile int *p = 0; *p = 1; "
             "return 0; }\n",
             (void *)segv, ident);
    snprintf(hang, sizeof hang,
             "/* hang %p */ int %s_packed(void **a) { (void)a; for (;;) __asm__ volatile(\"\"); "
             "return 0; }\n",
             (void *)hang, ident);
    snprintf(wrong, sizeof wrong,
             "/* wrong %p */ int %s_packed(void **a) { float *c = a[2]; "
             "for (int i = 0; i < 24 * 40; i++) c[i] = (float)i; return 0; }\n",
             (void *)wrong, ident);
    snprintf(bad, sizeof bad, "int %s_packed(void **a) { return a + ; }\n", ident);
    (void)good2;
    te_measure_options mo = {0};
    mo.timeout_s = 1.0;
    char err[512];
    te__measurer *m = te__measurer_create(n_in, ins, n_out, outs, NULL, &mo, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(te__measurer_reference(m, ctx, 0, err, sizeof err), TE_OK);
    assert_string_equal(te__measurer_ref_kind(m), "te_reference_eval");
    /* The order puts the good one after the crash and the hang: the batch must go on. */
    const char *srcs[6] = {segv, good, hang, wrong, bad, good};
    te__cand c[6];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 6; i++)
        c[i].source = srcs[i];
    double t0 = tt_now_s();
    te__measure_batch(m, c, 6);
    double dt = tt_now_s() - t0;
    for (int i = 0; i < 6; i++)
        printf("  cand %d: %s %s\n", i, te_trial_status_str(c[i].status), c[i].err);
    assert_int_equal(c[0].status, TE_TRIAL_RUNTIME_ERROR);
    assert_non_null(strstr(c[0].err, "SIGSEGV"));
    assert_int_equal(c[1].status, TE_TRIAL_OK);
    assert_true(c[1].median_s > 0 && c[1].repeats >= 3);
    assert_int_equal(c[2].status, TE_TRIAL_TIMEOUT);
    assert_int_equal(c[3].status, TE_TRIAL_WRONG_ANSWER);
    assert_int_equal(c[4].status, TE_TRIAL_COMPILE_ERROR);
    assert_int_equal(c[5].status, TE_TRIAL_OK);
    for (int i = 0; i < 6; i++)
        assert_true(c[i].done);
    assert_true(dt < 30);
    te__measurer_free(m);
    te_ctx_free(ctx);
}

/* A larger workload checks against the default schedule's output instead of the
 * interpreter. */
/* A small matmul's default schedule measured against the default-schedule reference, with
 * the inputs of mask `cold` evicted before every timed run (te__measurer_set_cold). */
static void measure_default_matmul(uint32_t cold)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    const char *good = matmul_source(ctx, ins, outs, &n_in, &n_out, "m=64,n=64,k=64");
    char err[512];
    te__measurer *m = te__measurer_create(n_in, ins, n_out, outs, NULL, NULL, err, sizeof err);
    assert_non_null(m);
    te__measurer_set_cold(m, cold);
    assert_int_equal(te__measurer_reference(m, ctx, 1000, err, sizeof err), TE_OK);
    assert_string_equal(te__measurer_ref_kind(m), "default schedule");
    te__cand c[1];
    memset(c, 0, sizeof c);
    c[0].source = good;
    te__measure_batch(m, c, 1);
    assert_int_equal(c[0].status, TE_TRIAL_OK);
    assert_true(c[0].max_err <= te__measurer_tolerance(m));
    assert_true(c[0].median_s > 0);
    te__measurer_free(m);
    te_ctx_free(ctx);
}

static void test_reference_from_default_schedule(void **state)
{
    (void)state;
    measure_default_matmul(0);
}

/* A candidate far slower than the best so far is timed by its probe alone (repeats 1): the
 * best of the batch's earlier candidates counts, as does the one the tuner passes in; with
 * slow_factor < 0 every candidate is timed in full. "slow" is the right kernel plus a 3 ms
 * spin, so it passes the check. */
static void test_far_slower_candidates_are_timed_once(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    char ident[64];
    const char *good = cand_matmul(ctx, ins, outs, &n_in, &n_out, ident);
    size_t size = strlen(good) + 1024;
    char *slow = malloc(size);
    assert_non_null(slow);
    snprintf(slow, size,
             "#include <time.h>\n#define %s_packed %s_inner_packed\n%s\n#undef %s_packed\n"
             "int %s_packed(void **a) {\n"
             "    int r = %s_inner_packed(a);\n"
             "    struct timespec t0, t;\n"
             "    clock_gettime(CLOCK_MONOTONIC, &t0);\n"
             "    do clock_gettime(CLOCK_MONOTONIC, &t);\n"
             "    while ((t.tv_sec - t0.tv_sec) * 1e9 + (t.tv_nsec - t0.tv_nsec) < 3e6);\n"
             "    return r;\n}\n",
             ident, ident, good, ident, ident, ident);
    for (int full = 0; full < 2; full++) {
        te_measure_options mo = {0};
        mo.slow_factor = full ? -1 : 0;
        char err[512];
        te__measurer *m = te__measurer_create(n_in, ins, n_out, outs, NULL, &mo, err, sizeof err);
        assert_non_null(m);
        assert_int_equal(te__measurer_reference(m, ctx, 0, err, sizeof err), TE_OK);
        /* slow before any best: timed in full; after good: once (unless full). */
        const char *srcs[3] = {slow, good, slow};
        te__cand c[3];
        memset(c, 0, sizeof c);
        for (int i = 0; i < 3; i++)
            c[i].source = srcs[i];
        te__measure_batch(m, c, 3);
        for (int i = 0; i < 3; i++) {
            printf("  %s cand %d: %s, %d runs, median %.3g ms\n", full ? "full" : "cut", i,
                   te_trial_status_str(c[i].status), c[i].repeats, c[i].median_s * 1e3);
            assert_int_equal(c[i].status, TE_TRIAL_OK);
        }
        assert_true(c[0].repeats >= 3 && c[1].repeats >= 3);
        assert_true(c[0].median_s >= 3e-3 && c[2].median_s >= 3e-3);
        /* Timed in full: at least 3 runs, more while they add up to less than min_time (a
         * 3.0-3.4 ms run takes 3 or 4, depending on the machine's load). */
        if (full)
            assert_true(c[2].repeats >= 3);
        else
            assert_int_equal(c[2].repeats, 1);
        /* The best from earlier batches counts too. */
        if (!full) {
            te__measurer_set_best(m, c[1].median_s);
            memset(c, 0, sizeof c);
            c[0].source = slow;
            te__measure_batch(m, c, 1);
            assert_int_equal(c[0].status, TE_TRIAL_OK);
            assert_int_equal(c[0].repeats, 1);
        }
        te__measurer_free(m);
    }
    free(slow);
    te_ctx_free(ctx);
}

/* Inputs marked cold are evicted before every timed run and still give right answers; the
 * tuner's key says which inputs were cold, so records measured hot and cold never mix, and a
 * mask naming an input the task lacks is refused. */
static void test_cold_inputs(void **state)
{
    (void)state;
    measure_default_matmul(2u); /* B cold */
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    assert_int_equal(te_op_build(ctx, "matmul", "m=8,n=16,k=32", ins, &n_in, outs, &n_out), TE_OK);
    char key[128] = "mm;A=8x32;f32";
    assert_int_equal(te_tuner_key_add_cold(key, sizeof key, 0), (int)strlen("mm;A=8x32;f32"));
    assert_int_equal(te_tuner_key_add_cold(key, sizeof key, 0x5u),
                     (int)strlen("mm;A=8x32;f32;cold=0.2"));
    assert_string_equal(key, "mm;A=8x32;f32;cold=0.2");
    te_tune_options o = te_tune_options_default();
    o.quiet = 1;
    te_tuner *t = te_tuner_create(NULL, &o);
    assert_non_null(t);
    assert_int_equal(te_tuner_set_cold_inputs(t, 1u), TE_ERR_ARG); /* no task yet */
    assert_int_equal(te_tuner_add_expr(t, "mm", n_in, ins, n_out, outs, 1), TE_OK);
    assert_int_equal(te_tuner_set_cold_inputs(t, 4u), TE_ERR_ARG); /* a matmul has 2 inputs */
    assert_non_null(strstr(te_tuner_errmsg(t), "2 inputs"));
    assert_int_equal(te_tuner_set_cold_inputs(t, 2u), TE_OK);
    te_tune_task_info ti;
    assert_int_equal(te_tuner_task_info(t, 0, &ti), TE_OK);
    assert_non_null(strstr(ti.workload_key, ";cold=1"));
    assert_int_equal(te_tuner_set_cold_inputs(t, 1u), TE_ERR_ARG); /* set once */
    te_tuner_free(t);
    te_ctx_free(ctx);
}

/* The small matmul the tests below lower candidates of: its inputs, outputs and the kernel's
 * arguments (A, B, C). */
typedef struct {
    te_tensor *ins[8], *outs[8], *args[3];
    int n_in, n_out;
} small_mm;

static void small_matmul(te_ctx *ctx, small_mm *p)
{
    assert_int_equal(
        te_op_build(ctx, "matmul", "m=32,n=48,k=24", p->ins, &p->n_in, p->outs, &p->n_out), TE_OK);
    p->args[0] = p->ins[0], p->args[1] = p->ins[1], p->args[2] = p->outs[0];
}

/* A candidate of p: its axis `axis` split by `factor` (and unrolled up to unroll_max
 * statements when that is positive), lowered for the host. */
static te_lowered *split_candidate(te_ctx *ctx, small_mm *p, int axis, int64_t factor,
                                   int unroll_max)
{
    te_target tgt = te_target_host();
    te_schedule *s = te_schedule_create(ctx, 1, p->outs);
    te_stage *st = te_schedule_stage(s, p->outs[0]);
    te_iter *o, *i;
    assert_int_equal(te_split(st, te_stage_axis(st, axis), factor, &o, &i), TE_OK);
    if (unroll_max > 0)
        assert_int_equal(te_pragma_unroll_max(st, unroll_max), TE_OK);
    te_lowered *f = te_lower(s, 3, p->args, "cand", &tgt);
    assert_non_null(f);
    return f;
}

/* A measurer of p's candidates (options mo, may be NULL) with its reference computed. */
static te__measurer *small_measurer(te_ctx *ctx, small_mm *p, const te_measure_options *mo)
{
    char err[512];
    te__measurer *m =
        te__measurer_create(p->n_in, p->ins, p->n_out, p->outs, NULL, mo, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(te__measurer_reference(m, ctx, 0, err, sizeof err), TE_OK);
    return m;
}

/* Candidates with the generated shape are compiled several per unit; a unit with one bad
 * member is rebuilt member by member so only that one is a compile error. */
static void test_merged_units_attribute_errors(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    small_mm p;
    small_matmul(ctx, &p);
    te_target tgt = te_target_host();
    const char *src[6];
    for (int v = 0; v < 6; v++) { /* distinct schedules: split i by 1 .. 6 */
        src[v] = te_emit_c(ctx, split_candidate(ctx, &p, 0, v + 1, 0), &tgt);
        assert_non_null(src[v]);
    }
    /* Break the body of candidate 3 (after its prelude), keeping the generated shape. */
    const char *k = strstr(src[3], "\nint cand(");
    assert_non_null(k);
    size_t at = (size_t)(k - src[3]) + 1;
    char *bad = malloc(strlen(src[3]) + 64);
    memcpy(bad, src[3], at);
    strcpy(bad + at, "static int broken = ;\n");
    strcat(bad, src[3] + at);
    src[3] = bad;
    te__measurer *m = small_measurer(ctx, &p, NULL);
    te__cand c[6];
    memset(c, 0, sizeof c);
    for (int v = 0; v < 6; v++)
        c[v].source = src[v];
    te__measure_batch(m, c, 6);
    for (int v = 0; v < 6; v++) {
        printf("  cand %d: %s\n", v, te_trial_status_str(c[v].status));
        assert_int_equal(c[v].status, v == 3 ? TE_TRIAL_COMPILE_ERROR : TE_TRIAL_OK);
    }
    assert_non_null(strstr(c[3].err, "broken"));
    free(bad);
    te__measurer_free(m);
    te_ctx_free(ctx);
}

/* Candidates given as lowered functions go through the backend table: emitted several to a
 * unit (renamed apart by the backend, not by editing text) and each measured on its own. */
static void test_lowered_candidates_share_units(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    small_mm p;
    small_matmul(ctx, &p);
    te__measurer *m = small_measurer(ctx, &p, NULL);
    te__cand c[5];
    memset(c, 0, sizeof c);
    for (int v = 0; v < 5; v++)
        c[v].lowered = split_candidate(ctx, &p, 0, v + 2, 0);
    te__measure_batch(m, c, 5);
    for (int v = 0; v < 5; v++) {
        printf("  cand %d: %s %s\n", v, te_trial_status_str(c[v].status), c[v].err);
        assert_int_equal(c[v].status, TE_TRIAL_OK);
        assert_true(c[v].done);
    }
    te__measurer_free(m);
    te_ctx_free(ctx);
}

/* The code budget: a candidate whose lowered program is over max_stmts is a compile_error that
 * says so, not compiled, not retried; the others of its batch are measured (units balanced by
 * size around it). The same candidates with no limit all run. */
static void test_candidates_over_the_code_budget_are_not_compiled(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    small_mm p;
    small_matmul(ctx, &p);
    te__cand c[6];
    int64_t small = 0, big = 0;
    for (int limit = 0; limit < 2; limit++) {
        memset(c, 0, sizeof c);
        for (int v = 0; v < 6; v++) {
            /* odd: 8 x 32 copies of the update */
            c[v].lowered = split_candidate(ctx, &p, 1, v % 2 ? 8 : 4, v % 2 ? 256 : 0);
            int64_t n = te__lowered_stmts(c[v].lowered);
            if (v % 2)
                big = n;
            else
                small = n;
        }
        assert_true(big > 4 * small);
        te_measure_options mo = {0};
        mo.max_stmts = limit ? (int)(small + big) / 2 : -1;
        te__measurer *m = small_measurer(ctx, &p, &mo);
        te__measure_batch(m, c, 6);
        for (int v = 0; v < 6; v++) {
            assert_true(c[v].done);
            if (limit && v % 2) {
                assert_int_equal(c[v].status, TE_TRIAL_COMPILE_ERROR);
                assert_non_null(strstr(c[v].err, "over the code budget"));
                assert_false(te__cand_transient(&c[v]));
            } else {
                if (c[v].status != TE_TRIAL_OK)
                    fail_msg("cand %d: %s", v, c[v].err);
            }
        }
        te__measurer_free(m);
    }
    te_ctx_free(ctx);
}

static void test_flops_and_keys(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    assert_int_equal(te_op_build(ctx, "matmul", "m=8,n=16,k=32", ins, &n_in, outs, &n_out), TE_OK);
    assert_true(fabs(te_tuner_flops(n_out, outs) - 2.0 * 8 * 16 * 32) < 1e-9);
    assert_int_equal(te__max_reduction(n_out, outs), 32);
    char k1[256], k2[256], k3[256];
    assert_true(te_tuner_expr_key("mm", n_in, ins, n_out, outs, k1, sizeof k1) > 0);
    assert_non_null(strstr(k1, "mm;A=8x32,B=32x16;f32;expr="));
    /* The same structure built again gives the same key; another shape does not. */
    te_ctx *c2 = te_ctx_create();
    te_tensor *i2[8], *o2[8];
    assert_int_equal(te_op_build(c2, "matmul", "m=8,n=16,k=32", i2, &n_in, o2, &n_out), TE_OK);
    te_tuner_expr_key("mm", n_in, i2, n_out, o2, k2, sizeof k2);
    assert_string_equal(k1, k2);
    assert_int_equal(te_op_build(c2, "matmul", "m=8,n=16,k=33", i2, &n_in, o2, &n_out), TE_OK);
    te_tuner_expr_key("mm", n_in, i2, n_out, o2, k3, sizeof k3);
    assert_string_not_equal(k1, k3);
    /* The MLP gate: two matmuls and an epilogue (silu: mul, sigmoid; times up). */
    assert_int_equal(te_op_build(c2, "mlp_gate", "m=4,n=8,k=16", i2, &n_in, o2, &n_out), TE_OK);
    double f = te_tuner_flops(n_out, o2);
    assert_true(f >= 4.0 * 4 * 8 * 16 && f < 4.0 * 4 * 8 * 16 + 8 * 4 * 8);
    /* An int8 matmul's work is its integer multiply-adds (2 M N K), not zero; the index
     * arithmetic of its packed operand does not count. */
    int64_t as[2] = {8, 32}, bs[3] = {8, 16, 4};
    te_tensor *A8 = te_placeholder(c2, "A", TE_U8, 2, as),
              *B8 = te_placeholder(c2, "B", TE_I8, 3, bs);
    te_tensor *C32 = te_op_matmul_vnni(c2, A8, B8, TE_I32, "C");
    assert_non_null(C32);
    assert_true(fabs(te_tuner_flops(1, &C32) - 2.0 * 8 * 16 * 32) < 1e-9);
    te_ctx_free(c2);
    te_ctx_free(ctx);
}

static void test_durations_and_targets(void **state)
{
    (void)state;
    assert_true(te_tune_parse_duration("90") == 90);
    assert_true(te_tune_parse_duration("15m") == 900);
    assert_true(te_tune_parse_duration("8h") == 8 * 3600);
    assert_true(te_tune_parse_duration("1.5h") == 5400);
    assert_true(te_tune_parse_duration("10x") < 0);
    assert_true(te_tune_parse_duration("") < 0);
    assert_true(te_tune_parse_duration("-3") < 0);
    te_tune_strategy s;
    assert_int_equal(te_tune_strategy_parse("grid", &s), TE_OK);
    assert_int_equal(s, TE_TUNE_GRID);
    assert_int_equal(te_tune_strategy_parse("best", &s), TE_ERR_ARG);
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024], key[512];
    assert_int_equal(te_tuner_db_target(&tgt, &dbt, storage, sizeof storage), TE_OK);
    assert_string_equal(dbt.backend, "c");
    assert_true(te_db_target_key(&dbt, key, sizeof key) > 0);
    printf("  target key: %s\n", key);
    assert_true(strncmp(key, "c;", 2) == 0);
}

/* The cost model learns a ranking: y depends on two of the features. */
static void test_cost_model_ranks(void **state)
{
    (void)state;
    te__gbt *g = te__gbt_create(TE_NUM_FEATURES);
    assert_non_null(g);
    uint64_t s = 42;
    float x[TE_NUM_FEATURES];
    for (int i = 0; i < 400; i++) {
        for (int f = 0; f < TE_NUM_FEATURES; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[f] = (float)((s >> 33) % 1000) / 100.0f;
        }
        double y = exp(-0.1 * (x[3] - 5) * (x[3] - 5)) * (x[7] > 4 ? 1.0 : 0.3);
        assert_int_equal(te__gbt_add(g, x, y, 1.0), TE_OK);
    }
    double t0 = tt_now_s();
    assert_int_equal(te__gbt_fit(g), TE_OK);
    printf("  fit of 400 samples: %.1f ms\n", (tt_now_s() - t0) * 1e3);
    /* Held-out pairs: the model must order most of them right. */
    int right = 0, total = 0;
    for (int i = 0; i < 200; i++) {
        float a[TE_NUM_FEATURES], b[TE_NUM_FEATURES];
        for (int f = 0; f < TE_NUM_FEATURES; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a[f] = (float)((s >> 33) % 1000) / 100.0f;
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b[f] = (float)((s >> 33) % 1000) / 100.0f;
        }
        double ya = exp(-0.1 * (a[3] - 5) * (a[3] - 5)) * (a[7] > 4 ? 1.0 : 0.3);
        double yb = exp(-0.1 * (b[3] - 5) * (b[3] - 5)) * (b[7] > 4 ? 1.0 : 0.3);
        if (fabs(ya - yb) < 0.1)
            continue;
        total++;
        right += (te__gbt_predict(g, a) > te__gbt_predict(g, b)) == (ya > yb);
    }
    printf("  pairs ordered right: %d / %d\n", right, total);
    assert_true(right >= 0.85 * total);
    te__gbt_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faulty_candidates_are_recorded),
        cmocka_unit_test(test_reference_from_default_schedule),
        cmocka_unit_test(test_far_slower_candidates_are_timed_once),
        cmocka_unit_test(test_cold_inputs),
        cmocka_unit_test(test_merged_units_attribute_errors),
        cmocka_unit_test(test_lowered_candidates_share_units),
        cmocka_unit_test(test_candidates_over_the_code_budget_are_not_compiled),
        cmocka_unit_test(test_flops_and_keys),
        cmocka_unit_test(test_durations_and_targets),
        cmocka_unit_test(test_cost_model_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
