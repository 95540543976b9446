/*
 * Matrix-vector and skinny products (autotune/templates_gemv.c and the gemm template's skinny
 * restrictions): every configuration (or a sample of a large space) for m = 1, 3 and 16 in both
 * weight layouts matches the float64 reference; B stored [n, k] reduces along k (rfactor,
 * vectorized partial sums); no template configuration parallelizes a loop of extent 1; and
 * mlp_gate's trans_b flag matches the reference in both layouts.
 *
 * Environment: TESSERA_TEST_SEED (default 5).
 */
#include <stdbool.h>

#include "schedule/sched_impl.h"
#include "space_testlib.h"

static te_space *make(tcase *c, const char *op, int cores)
{
    te_target tgt = te_target_host();
    if (cores > 0)
        tgt.num_cores = cores;
    te_space *sp =
        te_space_create(c->ctx, op, c->n_in, c->in, c->n_out, c->out, TE_SPACE_TEMPLATE, &tgt);
    if (!sp)
        fail_msg("%s: te_space_create: %s", c->label, te_ctx_errmsg(c->ctx));
    return sp;
}

/* Every configuration of a space of at most `cap`, else `cap` of them spread over it plus the
 * last; returns how many went into tr. */
static int spread(tcase *c, te_space *sp, const char **tr, int cap)
{
    int64_t size = te_space_size(sp);
    assert_true(size >= 1);
    int n = 0;
    for (int64_t q = 0; q < cap && q < size; q++) {
        int64_t idx = size <= cap ? q : (size - 1) * q / (cap - 1);
        tr[n] = te_space_get(sp, idx);
        if (!tr[n])
            fail_msg("%s: configuration %lld of %lld: %s", c->label, (long long)idx,
                     (long long)size, te_ctx_errmsg(c->ctx));
        n++;
    }
    return n;
}

/* Configurations for m = 1, 3, 16 in both layouts (k with and without a tail) match the
 * reference, with one core and with two. */
static void test_skinny_configurations_match_reference(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    static const char *const params[] = {
        "m=1,n=40,k=64,trans_b=1",  "m=1,n=40,k=64",
        "m=3,n=37,k=45,trans_b=1",  "m=3,n=37,k=45",
        "m=16,n=24,k=48,trans_b=1", "m=16,n=24,k=48",
        "m=1,n=7,k=5,trans_b=1",    "m=1,n=70,k=33,trans_b=1,trans_a=1",
    };
    for (size_t p = 0; p < sizeof params / sizeof params[0]; p++) {
        for (int cores = 1; cores <= 2; cores++) {
            tcase c;
            tcase_op(&c, "matmul", params[p], &r);
            te_space *sp = make(&c, "matmul", cores);
            /* 16 spread over each space (all of a small one): the grid's corners and
             * middle; the whole space is sampled by the tuner tests' random draws. */
            const char *tr[16];
            int n = spread(&c, sp, tr, 16);
            check_traces(&c, sp, n, tr, 1e-5);
            tcase_free(&c);
        }
    }
}

/* B stored [n, k]: every configuration reduces along k (an rfactor whose lanes vectorize) and
 * none gathers along n; B stored [k, n] keeps the register tiles vectorized along n. */
static void test_weight_layout_picks_the_reduction_axis(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    tcase c;
    tcase_op(&c, "matmul", "m=1,n=768,k=768,trans_b=1", &r);
    te_space *sp = make(&c, "matmul", 2);
    int64_t size = te_space_size(sp);
    assert_true(size >= 8);
    for (int64_t i = 0; i < size; i++) {
        const char *t = te_space_get(sp, i);
        assert_non_null(t);
        if (!trace_has(t, "rfactor matmul") || !trace_has(t, "vectorize matmul_rf") ||
            !trace_has(t, "parallel matmul "))
            fail_msg("configuration %lld is not a k reduction in parallel:\n%s", (long long)i, t);
    }
    tcase_free(&c);
    tcase_op(&c, "matmul", "m=1,n=768,k=768", &r);
    sp = make(&c, "matmul", 2);
    int streamed = 0;
    for (int64_t i = 0; i < te_space_size(sp); i++) {
        const char *t = te_space_get(sp, i);
        assert_non_null(t);
        assert_false(trace_has(t, "rfactor"));
        assert_true(trace_has(t, "vectorize matmul_local"));
        /* order 3: rows of B streamed (k outermost in the block of columns) */
        streamed += trace_has(t, "reorder matmul_local k") != 0;
    }
    assert_true(streamed > 0);
    tcase_free(&c);
}

/* The loop of stage `st` that is parallel with an extent of 1, or NULL. */
static const te_iter *trivial_parallel(te_stage *st)
{
    for (int l = 0; l < te_stage_nleaves(st); l++) {
        const te_iter *it = te_stage_leaf(st, l);
        if (it->ann == TE_ANN_PARALLEL && te_iter_extent(it) <= 1)
            return it;
    }
    return NULL;
}

/* No configuration of any template, on a two-core target, parallelizes a loop of extent 1
 * (skinny products included, where the row axis has one iteration). */
static void test_no_parallel_loop_of_extent_one(void **state)
{
    (void)state;
    static const struct {
        const char *op, *params;
    } cases[] = {
        {"matmul", "m=1,n=768,k=64,trans_b=1"},
        {"matmul", "m=1,n=768,k=64"},
        {"matmul", "m=1,n=8,k=16"},
        {"matmul", "m=1,n=1,k=32,trans_b=1"},
        {"matmul", "m=3,n=40,k=24,trans_b=1"},
        {"matmul", "m=8,n=16,k=16"},
        {"matmul", "m=32,n=8,k=16"},
        {"batch_matmul", "b=1,m=4,n=16,k=8"},
        {"mlp_gate", "m=1,n=64,k=32,trans_b=1"},
        {"mlp_gate", "m=1,n=64,k=32"},
        {"dense_bias", "m=1,n=48,k=16"},
        {"qkv_projection", "m=1,n=32,k=16"},
        {"conv2d", "n=1,c=4,h=4,w=4,oc=16,kh=3,kw=3,pad=1"},
        {"softmax", "m=1,n=64"},
        {"layer_norm", "m=1,n=64"},
        {"relu", "m=1,n=64"},
        {"relu", "m=1,n=8"},
    };
    tt_rng r;
    tt_rng_seed(&r, 1);
    int checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        tcase_op(&c, cases[k].op, cases[k].params, &r);
        te_space *sp = make(&c, cases[k].op, 2);
        int64_t size = te_space_size(sp);
        for (int64_t i = 0; i < size; i += 1 + size / 200) {
            const char *t = te_space_get(sp, i);
            if (!t)
                fail_msg("%s(%s): configuration %lld: %s", cases[k].op, cases[k].params,
                         (long long)i, te_ctx_errmsg(c.ctx));
            te_schedule *s = te_space_instantiate(sp, t);
            assert_non_null(s);
            for (int q = 0; q < te_schedule_nstages(s); q++) {
                te_stage *st = te_schedule_stage_at(s, q);
                const te_iter *it = trivial_parallel(st);
                if (it)
                    fail_msg("%s(%s): configuration %lld parallelizes %s.%s of extent 1:\n%s",
                             cases[k].op, cases[k].params, (long long)i, te_stage_name(st),
                             te_iter_name(it), t);
            }
            checked++;
        }
        tcase_free(&c);
    }
    assert_true(checked > 50);
}

/* mlp_gate with W1 and W3 stored [n, k] (trans_b=1) and [k, n]: template configurations match
 * the reference; a weight of the wrong layout is refused naming it. */
static void test_mlp_gate_weight_layout(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    static const char *const params[] = {"m=1,n=40,k=32,trans_b=1", "m=3,n=21,k=19,trans_b=1",
                                         "m=1,n=40,k=32", "m=5,n=36,k=8,trans_b=1"};
    for (size_t p = 0; p < sizeof params / sizeof params[0]; p++) {
        tcase c;
        tcase_op(&c, "mlp_gate", params[p], &r);
        bool tb = strstr(params[p], "trans_b=1") != NULL;
        /* W1 is input 1: [n, k] with trans_b. */
        const int64_t *ws = te_tensor_shape(c.in[1]);
        const int64_t *ys = te_tensor_shape(c.out[0]);
        assert_int_equal(ws[tb ? 0 : 1], ys[1]);
        te_space *sp = make(&c, "mlp_gate", 2);
        const char *tr[16];
        int n = spread(&c, sp, tr, 16);
        /* [n, k] weights: both products reduce along k inside the epilogue's blocks. */
        for (int q = 0; q < n; q++)
            if (tb != (trace_has(tr[q], "rfactor mlp_gate_gate") &&
                       trace_has(tr[q], "rfactor mlp_gate_up") &&
                       trace_has(tr[q], "compute_at mlp_gate_up_rf mlp_gate")))
                fail_msg("mlp_gate(%s): configuration %d:\n%s", params[p], q, tr[q]);
        check_traces(&c, sp, n, tr, 1e-5);
        tcase_free(&c);
    }
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){2, 8});
    te_tensor *W1 = te_placeholder(ctx, "W1", TE_F32, 2, (int64_t[]){8, 16});
    te_tensor *W3 = te_placeholder(ctx, "W3", TE_F32, 2, (int64_t[]){8, 16});
    /* [k, n] weights read as [n, k]: k differs. */
    assert_null(te_op_mlp_gate_tb(ctx, X, W1, W3, 1, "Y"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "W1"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_mlp_gate_tb(ctx, X, W1, W3, 2, "Y"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "trans_b"));
    te_ctx_clear_error(ctx);
    assert_non_null(te_op_mlp_gate_tb(ctx, X, W1, W3, 0, "Y"));
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skinny_configurations_match_reference),
        cmocka_unit_test(test_weight_layout_picks_the_reduction_axis),
        cmocka_unit_test(test_no_parallel_loop_of_extent_one),
        cmocka_unit_test(test_mlp_gate_weight_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
