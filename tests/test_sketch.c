/*
 * Sketches: schedules generated from tensor expressions alone. Samples for user-written
 * expressions (the MLP gate as in examples/mlp_gate.c, matmul, an elementwise chain, two
 * chained products) and for library operators (conv2d, softmax, norms, pooling, reductions)
 * all lower, build and match the reference; the rules show in the traces; sampling is
 * reproducible.
 *
 * Environment: TESSERA_TEST_SEED (default 5), TESSERA_SKETCH_SAMPLES (default 8 per case).
 */
#include <stdbool.h>

#include "space_testlib.h"

/* ---- User-written expressions (no operator library) -------------------------------------- */

static te_tensor *mm(te_ctx *ctx, const char *name, te_tensor *x, te_tensor *w)
{
    int64_t m = te_tensor_shape(x)[0], k = te_tensor_shape(x)[1], n = te_tensor_shape(w)[1];
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *r = te_reduce_axis(ctx, "k", k);
    te_expr *prod = te_mul(ctx, TE_AT(ctx, x, i, r), TE_AT(ctx, w, r, j));
    return te_compute(ctx, name, 2, (te_expr *[]){i, j}, te_sum(ctx, prod, 1, &r));
}

/* examples/mlp_gate.c: Y = silu(X W1) * (X W3), as a user writes it. */
static void user_mlp_gate(tcase *c, int64_t M, int64_t K, int64_t N, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = "user mlp_gate";
    te_ctx *ctx = c->ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *W1 = te_placeholder(ctx, "W1", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *W3 = te_placeholder(ctx, "W3", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *G1 = mm(ctx, "G1", X, W1), *G3 = mm(ctx, "G3", X, W3);
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    te_expr *g1 = TE_AT(ctx, G1, i, j), *g3 = TE_AT(ctx, G3, i, j);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                              te_mul(ctx, te_mul(ctx, g1, te_sigmoid(ctx, g1)), g3));
    assert_non_null(Y);
    c->in[0] = X, c->in[1] = W1, c->in[2] = W3, c->n_in = 3;
    c->out[0] = Y, c->n_out = 1;
    tcase_fill(c, r);
}

static void user_matmul(tcase *c, int64_t M, int64_t K, int64_t N, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = "user matmul";
    te_ctx *ctx = c->ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    c->in[0] = A, c->in[1] = B, c->n_in = 2;
    c->out[0] = mm(ctx, "C", A, B), c->n_out = 1;
    assert_non_null(c->out[0]);
    tcase_fill(c, r);
}

/* Three elementwise stages: Z = tanh(2 X + b) * X - sigmoid(X). */
static void user_chain(tcase *c, int64_t M, int64_t N, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = "user elementwise chain";
    te_ctx *ctx = c->ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_tensor *b = te_placeholder(ctx, "b", TE_F32, 1, (int64_t[]){N});
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    te_tensor *S =
        te_compute(ctx, "S", 2, (te_expr *[]){i, j},
                   te_add(ctx, te_mul(ctx, te_f32(ctx, 2), TE_AT(ctx, X, i, j)), TE_AT(ctx, b, j)));
    te_expr *i2 = te_axis(ctx, "i", M), *j2 = te_axis(ctx, "j", N);
    te_tensor *T =
        te_compute(ctx, "T", 2, (te_expr *[]){i2, j2},
                   te_mul(ctx, te_tanh(ctx, TE_AT(ctx, S, i2, j2)), TE_AT(ctx, X, i2, j2)));
    te_expr *i3 = te_axis(ctx, "i", M), *j3 = te_axis(ctx, "j", N);
    te_tensor *Z =
        te_compute(ctx, "Z", 2, (te_expr *[]){i3, j3},
                   te_sub(ctx, TE_AT(ctx, T, i3, j3), te_sigmoid(ctx, TE_AT(ctx, X, i3, j3))));
    assert_non_null(Z);
    c->in[0] = X, c->in[1] = b, c->n_in = 2;
    c->out[0] = Z, c->n_out = 1;
    tcase_fill(c, r);
}

/* (A B) C: a product feeding another product. */
static void user_two_products(tcase *c, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = "user (A B) C";
    te_ctx *ctx = c->ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){9, 7});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){7, 12});
    te_tensor *C = te_placeholder(ctx, "Cw", TE_F32, 2, (int64_t[]){12, 20});
    te_tensor *AB = mm(ctx, "AB", A, B);
    c->in[0] = A, c->in[1] = B, c->in[2] = C, c->n_in = 3;
    c->out[0] = mm(ctx, "D", AB, C), c->n_out = 1;
    assert_non_null(c->out[0]);
    tcase_fill(c, r);
}

static te_space *sketch_space(tcase *c)
{
    te_target tgt = te_target_host();
    te_space *sp =
        te_space_create(c->ctx, NULL, c->n_in, c->in, c->n_out, c->out, TE_SPACE_SKETCH, &tgt);
    if (!sp)
        fail_msg("%s: %s", c->label, te_ctx_errmsg(c->ctx));
    assert_int_equal(te_space_kind_of(sp), TE_SPACE_SKETCH);
    assert_int_equal(te_space_size(sp), -1);
    return sp;
}

static int nsamples(void)
{
    const char *z = getenv("TESSERA_SKETCH_SAMPLES");
    return z && atoi(z) > 0 ? atoi(z) : 8;
}

/* Samples n traces (distinct where the space allows) and checks them all. */
static void check_samples(tcase *c, te_space *sp, uint64_t seed, int n, const char **out)
{
    te_rng rr;
    te_rng_seed(&rr, seed);
    const char *tr[256];
    if (n > 256)
        n = 256;
    for (int i = 0; i < n; i++) {
        tr[i] = te_space_sample(sp, &rr);
        if (!tr[i])
            fail_msg("%s: sample %d: %s", c->label, i, te_ctx_errmsg(c->ctx));
        if (out)
            out[i] = tr[i];
    }
    check_traces(c, sp, n, tr, 1e-4);
}

/* The MLP gate from its expression alone: every sample fuses both products into the output's
 * tile loop (register accumulators) and parallelizes; samples are correct. */
static void test_user_mlp_gate(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    tcase c;
    user_mlp_gate(&c, 12, 24, 40, &r);
    te_space *sp = sketch_space(&c);
    int n = nsamples() + 6;
    const char *tr[256];
    check_samples(&c, sp, 1, n, tr);
    te_target tgt = te_target_host();
    for (int i = 0; i < n; i++) {
        if (!trace_has(tr[i], "compute_at G1 Y ") || !trace_has(tr[i], "compute_at G3 Y ") ||
            !trace_has(tr[i], "vectorize G1 ") || !trace_has(tr[i], "vectorize Y "))
            fail_msg("sample without the fused register tiles:\n%s", tr[i]);
        if (tgt.num_cores > 1 && !trace_has(tr[i], "parallel Y "))
            fail_msg("sample without a parallel loop:\n%s", tr[i]);
    }
    tcase_free(&c);
}

static void test_user_expressions(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5) + 1);
    tcase c;
    const char *tr[256];
    int n = nsamples();

    user_matmul(&c, 19, 13, 37, &r);
    te_space *sp = sketch_space(&c);
    check_samples(&c, sp, 2, n, tr);
    /* Both shapes of rule 3/4 occur: with a register accumulator (cache_write) and without. */
    int cw = 0;
    te_rng rr;
    te_rng_seed(&rr, 9);
    for (int i = 0; i < 40; i++)
        cw += trace_has(te_space_sample(sp, &rr), "cache_write C local");
    assert_true(cw > 0 && cw < 40);
    tcase_free(&c);

    user_chain(&c, 7, 45, &r);
    sp = sketch_space(&c);
    check_samples(&c, sp, 3, n, tr);
    for (int i = 0; i < n; i++) /* S and T are cheap or single-use: inlined */
        assert_true(trace_has(tr[i], "compute_inline S") && trace_has(tr[i], "compute_inline T"));
    tcase_free(&c);

    user_two_products(&c, &r);
    sp = sketch_space(&c);
    check_samples(&c, sp, 4, n, tr);
    tcase_free(&c);
}

static void test_library_ops(void **state)
{
    (void)state;
    static const struct {
        const char *op, *params;
    } ops[] = {
        {"conv2d", "n=1,c=3,h=9,w=8,oc=5,kh=3,kw=3,pad=1"},
        {"conv2d", "n=1,c=4,h=7,w=7,oc=4,kh=3,kw=2,stride=2,groups=2,layout=NHWC"},
        {"depthwise_conv2d", "n=1,c=3,h=6,w=6,kh=3,kw=3,pad=1"},
        {"softmax", "m=6,n=37"},
        {"layer_norm", "m=5,n=24"},
        {"rms_norm", "m=3,n=40"},
        {"avg_pool2d", "n=1,c=2,h=9,w=9,kh=3,kw=3,pad=1"},
        {"max_pool2d", "n=1,c=2,h=8,w=40,kh=2,kw=2,stride=2"},
        {"sum", "m=5,n=33"},
        {"batch_matmul", "b=2,m=5,n=20,k=6"},
        {"matmul_bias_act", "m=9,n=33,k=7,act=gelu"},
        {"conv2d_bn_relu", "n=1,c=3,h=6,w=7,oc=4,kh=3,kw=3,pad=1"},
        {"qkv_projection", "m=5,n=20,k=7"},
        {"transpose", "m=5,n=19"},
    };
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5) + 2);
    int n = nsamples() * 2 / 3;
    for (size_t q = 0; q < sizeof ops / sizeof ops[0]; q++) {
        tcase c;
        tcase_op(&c, ops[q].op, ops[q].params, &r);
        te_space *sp = sketch_space(&c);
        const char *tr[256];
        check_samples(&c, sp, 10 + q, n > 2 ? n : 2, tr);
        if (!strcmp(ops[q].op, "softmax")) {
            /* Row rule: the reductions are computed inside the output's row loop. */
            te_rng rr;
            te_rng_seed(&rr, 3);
            int at_row = 0, rf = 0;
            for (int i = 0; i < 30; i++) {
                const char *t = te_space_sample(sp, &rr);
                at_row += trace_has(t, "compute_at softmax_sum softmax ");
                rf += trace_has(t, "rfactor softmax_sum ") &&
                      trace_has(t, "compute_at softmax_sum_rf softmax ");
            }
            assert_true(at_row > 0 && rf > 0);
        }
        if (!strcmp(ops[q].op, "conv2d") && strstr(ops[q].params, "pad=1"))
            for (int i = 0; i < (n > 2 ? n : 2); i++)
                assert_true(trace_has(tr[i], "compute_inline conv2d_pad"));
        tcase_free(&c);
    }
}

/* A reduction to fewer values than cores (a whole vector's sum; a length that the parts do
 * not divide): the threads split the reduction. Every sample factors it over parallel parts,
 * the part count a decision, and is correct; with enough outputs for the cores, none does. */
static void test_threads_split_a_short_output_reduction(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5) + 3);
    te_target tgt = te_target_host();
    tgt.num_cores = 2;
    tcase c;
    tcase_op(&c, "sum", "m=1,n=4100", &r);
    te_space *sp =
        te_space_create(c.ctx, NULL, c.n_in, c.in, c.n_out, c.out, TE_SPACE_SKETCH, &tgt);
    assert_non_null(sp);
    const char *tr[24];
    te_rng rr;
    te_rng_seed(&rr, 4);
    int parts[3] = {0};
    for (int i = 0; i < 24; i++) {
        tr[i] = te_space_sample(sp, &rr);
        assert_non_null(tr[i]);
        assert_true(trace_has(tr[i], "rfactor sum k0_o") &&
                    trace_has(tr[i], "parallel sum_rf k0_o_i0_f"));
        parts[0] += trace_has(tr[i], "split sum k0 2050\n"); /* 2 parts */
        parts[1] += trace_has(tr[i], "split sum k0 513\n");  /* 8 */
        parts[2] += trace_has(tr[i], "split sum k0 129\n");  /* 32 */
    }
    assert_true(parts[0] > 0 && parts[1] > 0 && parts[2] > 0);
    assert_int_equal(parts[0] + parts[1] + parts[2], 24);
    check_traces(&c, sp, 8, tr, 1e-4);
    tcase_free(&c);
    /* Two rows on two cores: the rows are the parallel work. */
    tcase_op(&c, "sum", "m=2,n=4100", &r);
    sp = te_space_create(c.ctx, NULL, c.n_in, c.in, c.n_out, c.out, TE_SPACE_SKETCH, &tgt);
    assert_non_null(sp);
    for (int i = 0; i < 8; i++)
        assert_false(trace_has(te_space_sample(sp, &rr), "rfactor sum k0_o"));
    tcase_free(&c);
}

/* Same seed, same samples, in another context; mutation gives a valid neighbour. */
static void test_reproducible(void **state)
{
    (void)state;
    tt_rng r1, r2;
    tt_rng_seed(&r1, 1);
    tt_rng_seed(&r2, 1);
    tcase a, b;
    user_mlp_gate(&a, 8, 16, 32, &r1);
    user_mlp_gate(&b, 8, 16, 32, &r2);
    te_space *sa = sketch_space(&a), *sb = sketch_space(&b);
    te_rng ra, rb;
    te_rng_seed(&ra, 77);
    te_rng_seed(&rb, 77);
    int distinct = 0;
    for (int i = 0; i < 50; i++) {
        const char *ta = te_space_sample(sa, &ra), *tb = te_space_sample(sb, &rb);
        assert_string_equal(ta, tb);
        const char *ma = te_space_mutate(sa, ta, &ra), *mb = te_space_mutate(sb, tb, &rb);
        assert_non_null(ma);
        assert_string_equal(ma, mb);
        distinct += strcmp(ma, ta) != 0;
        assert_non_null(te_space_instantiate(sa, ma));
    }
    assert_int_equal(distinct, 50);
    /* A different seed gives a different sequence. */
    te_rng rc;
    te_rng_seed(&rc, 78);
    te_rng_seed(&ra, 77);
    int same = 0;
    for (int i = 0; i < 10; i++)
        same += !strcmp(te_space_sample(sa, &ra), te_space_sample(sa, &rc));
    assert_true(same < 10);
    tcase_free(&a);
    tcase_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_split_a_short_output_reduction),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_user_mlp_gate),
        cmocka_unit_test(test_user_expressions),
        cmocka_unit_test(test_library_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
