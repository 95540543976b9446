/*
 * Search spaces: templates for the operator library (every enumerated and sampled
 * configuration builds and matches the reference), grid enumeration, kinds, reproducible
 * sampling, mutation, and the feature vector.
 *
 * Environment: TESSERA_TEST_SEED (default 3).
 */
#include <stdbool.h>

#include "space_testlib.h"

static const struct {
    const char *op, *params;
    int per_case; /* configurations checked */
} tcases[] = {
    {"matmul", "m=13,n=40,k=9", 16},
    {"matmul", "m=7,n=20,k=6,trans_a=1,trans_b=1", 6},
    {"batch_matmul", "b=2,m=5,n=20,k=6", 6},
    {"dense_bias", "m=6,n=18,k=5", 8},
    {"matmul_bias_act", "m=9,n=33,k=7,act=gelu", 8},
    {"mlp_gate", "m=6,n=36,k=8", 8},
    {"qkv_projection", "m=5,n=20,k=7", 6},
    {"conv2d", "n=1,c=3,h=8,w=9,oc=5,kh=3,kw=3,pad=1", 10},
    {"conv2d", "n=2,c=4,h=6,w=6,oc=6,kh=3,kw=3,stride=2", 6},
    {"conv2d_bn_relu", "n=1,c=3,h=6,w=7,oc=4,kh=3,kw=3,pad=1", 8},
    {"softmax", "m=5,n=37", 8},
    {"layer_norm", "m=4,n=21", 8},
    {"rms_norm", "m=3,n=40", 8},
    {"relu", "m=5,n=37", 6},
    {"add", "m=5,n=6,bcast=1", 4},
    {"transpose", "m=5,n=19", 4},
    {"pad", "n=1,c=2,h=4,w=3,pad=1", 4},
};
#define NT ((int)(sizeof tcases / sizeof tcases[0]))

static te_space *make(tcase *c, const char *op, te_space_kind kind)
{
    te_target tgt = te_target_host();
    te_space *sp = te_space_create(c->ctx, op, c->n_in, c->in, c->n_out, c->out, kind, &tgt);
    if (!sp)
        fail_msg("%s: te_space_create: %s", c->label, te_ctx_errmsg(c->ctx));
    return sp;
}

/* Every template: a spread of grid points plus samples build and match the reference; grid
 * points are distinct configurations. */
static void test_templates(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(3));
    for (int k = 0; k < NT; k++) {
        tcase c;
        tcase_op(&c, tcases[k].op, tcases[k].params, &r);
        te_space *sp = make(&c, c.label, TE_SPACE_TEMPLATE);
        assert_int_equal(te_space_kind_of(sp), TE_SPACE_TEMPLATE);
        int64_t size = te_space_size(sp);
        assert_true(size >= 1);
        int n = tcases[k].per_case;
        const char *tr[64];
        int nt = 0;
        /* Grid points spread over the space (the first and the last included). */
        int ng = n / 2 > 1 ? n / 2 : 1;
        for (int i = 0; i < ng && i < size; i++) {
            int64_t idx = ng > 1 ? (size - 1) * i / (ng - 1) : 0;
            tr[nt] = te_space_get(sp, idx);
            if (!tr[nt])
                fail_msg("%s: configuration %lld of %lld: %s", c.label, (long long)idx,
                         (long long)size, te_ctx_errmsg(c.ctx));
            nt++;
        }
        te_rng rr;
        te_rng_seed(&rr, (uint64_t)k);
        while (nt < n) {
            tr[nt] = te_space_sample(sp, &rr);
            assert_non_null(tr[nt]);
            nt++;
        }
        check_traces(&c, sp, nt, tr, 1e-4);
        /* Every grid point applies, and distinct points give distinct traces (small grids). */
        if (size <= 64) {
            const char *all[64];
            for (int64_t i = 0; i < size; i++) {
                all[i] = te_space_get(sp, i);
                if (!all[i])
                    fail_msg("%s: configuration %lld: %s", c.label, (long long)i,
                             te_ctx_errmsg(c.ctx));
                for (int64_t j = 0; j < i; j++)
                    if (!strcmp(all[i], all[j]))
                        fail_msg("%s: configurations %lld and %lld give one trace:\n%s", c.label,
                                 (long long)j, (long long)i, all[i]);
            }
        } else {
            for (int64_t i = 0; i < size; i += 1 + size / 97)
                if (!te_space_get(sp, i))
                    fail_msg("%s: configuration %lld: %s", c.label, (long long)i,
                             te_ctx_errmsg(c.ctx));
        }
        tcase_free(&c);
    }
}

/* The matmul template's grid is the product of its knobs and reaches the packed variant. */
static void test_grid(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, 1);
    tcase c;
    /* n = 192: every tile width (one to four vectors of 16 or 8) divides it */
    tcase_op(&c, "matmul", "m=64,n=192,k=64", &r);
    te_space *sp = make(&c, "matmul", TE_SPACE_TEMPLATE);
    int64_t size = te_space_size(sp);
    assert_true(size >= 6 * 4 * 4 * 3);
    int packed = 0, par = 0;
    for (int64_t i = 0; i < size; i++) {
        const char *t = te_space_get(sp, i);
        assert_non_null(t);
        packed += trace_has(t, "cache_read B global");
        par += trace_has(t, "parallel ");
        assert_true(trace_has(t, "vectorize matmul_local"));
        assert_true(trace_has(t, "cache_write matmul local"));
        /* Every register tile whose width divides n is vector code, three vectors across
         * included (48 lanes with AVX-512, 24 with AVX2): no configuration is a scalar loop
         * in disguise. (A tile that overhangs n guards its lanes.) */
        long long mr = 0, nr = 0;
        const char *tl = strstr(t, "tile matmul i j ");
        if (!tl || sscanf(tl, "tile matmul i j %lld %lld", &mr, &nr) != 2 || 192 % nr)
            continue;
        te_schedule *sch = te_space_instantiate(sp, t);
        assert_non_null(sch);
        te_tensor *args[3] = {c.in[0], c.in[1], c.out[0]};
        te_target host = te_target_host();
        te_lowered *f = te_lower(sch, 3, args, "k", &host);
        if (!f)
            fail_msg("configuration %lld: %s", (long long)i, te_ctx_errmsg(c.ctx));
        const char *notes[4];
        int nn = te_lowered_notes(f, notes, 4);
        for (int q = 0; q < nn && q < 4; q++)
            if (strstr(notes[q], "matmul_local") || strstr(notes[q], "j_i"))
                fail_msg("configuration %lld: %s\n%s", (long long)i, notes[q], t);
    }
    assert_true(packed > 0 && packed < size);
    te_target tgt = te_target_host();
    /* Every configuration parallelizes a loop unless its tiles leave only loops of extent 1
     * (te__parallel skips those). */
    if (tgt.num_cores > 1)
        assert_true(par > size / 2);
    assert_null(te_space_get(sp, size));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "outside"));
    te_ctx_clear_error(c.ctx);
    assert_null(te_space_get(sp, -1));
    te_ctx_clear_error(c.ctx);
    /* One thread: no parallel knob, a smaller grid. */
    tgt.num_cores = 1;
    te_space *sp1 =
        te_space_create(c.ctx, "matmul", c.n_in, c.in, c.n_out, c.out, TE_SPACE_TEMPLATE, &tgt);
    assert_non_null(sp1);
    assert_true(te_space_size(sp1) < size);
    for (int64_t i = 0; i < te_space_size(sp1); i++)
        assert_false(trace_has(te_space_get(sp1, i), "parallel "));
    tcase_free(&c);
}

static void test_kinds(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, 2);
    tcase c;
    tcase_op(&c, "sum", "m=4,n=9", &r);
    te_target tgt = te_target_host();
    /* AUTO without a template is a sketch space: not enumerable. */
    te_space *sp = make(&c, "sum", TE_SPACE_AUTO);
    assert_int_equal(te_space_kind_of(sp), TE_SPACE_SKETCH);
    assert_int_equal(te_space_size(sp), -1);
    assert_null(te_space_get(sp, 0));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "sketch"));
    te_ctx_clear_error(c.ctx);
    assert_null(
        te_space_create(c.ctx, "sum", c.n_in, c.in, c.n_out, c.out, TE_SPACE_TEMPLATE, &tgt));
    assert_int_equal(te_ctx_errcode(c.ctx), TE_ERR_UNSUPPORTED);
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "no template"));
    te_ctx_clear_error(c.ctx);
    /* A template name on an expression it does not fit: AUTO falls back, TEMPLATE refuses. */
    sp = make(&c, "matmul", TE_SPACE_AUTO);
    assert_int_equal(te_space_kind_of(sp), TE_SPACE_SKETCH);
    assert_null(
        te_space_create(c.ctx, "matmul", c.n_in, c.in, c.n_out, c.out, TE_SPACE_TEMPLATE, &tgt));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "does not fit"));
    te_ctx_clear_error(c.ctx);
    /* Bad arguments. */
    assert_null(te_space_create(c.ctx, "sum", c.n_in, c.in, 0, c.out, TE_SPACE_AUTO, &tgt));
    te_ctx_clear_error(c.ctx);
    assert_null(te_space_create(c.ctx, "sum", c.n_in, c.in, 1, c.in, TE_SPACE_AUTO, &tgt));
    te_ctx_clear_error(c.ctx);
    assert_null(te_space_create(c.ctx, "sum", c.n_in, c.in, 1, c.out, (te_space_kind)7, &tgt));
    te_ctx_clear_error(c.ctx);
    assert_null(te_space_create(NULL, "sum", c.n_in, c.in, 1, c.out, TE_SPACE_AUTO, &tgt));
    assert_null(te_space_sample(sp, NULL));
    te_ctx_clear_error(c.ctx);
    assert_null(te_space_mutate(sp, NULL, NULL));
    te_ctx_clear_error(c.ctx);
    /* NULL target: the host. */
    assert_non_null(
        te_space_create(c.ctx, NULL, c.n_in, c.in, c.n_out, c.out, TE_SPACE_AUTO, NULL));
    /* A template on the op: AUTO picks it. */
    tcase m;
    tcase_op(&m, "matmul", "m=8,n=16,k=4", &r);
    assert_int_equal(te_space_kind_of(make(&m, "matmul", TE_SPACE_AUTO)), TE_SPACE_TEMPLATE);
    assert_int_equal(te_space_kind_of(make(&m, "matmul", TE_SPACE_SKETCH)), TE_SPACE_SKETCH);
    /* Without an operator name (a fused group) AUTO recognizes the gemm structure... */
    assert_int_equal(te_space_kind_of(make(&m, NULL, TE_SPACE_AUTO)), TE_SPACE_TEMPLATE);
    tcase_free(&m);
    /* ... and a convolution with its padding and a batch-norm + relu epilogue ... */
    tcase cv;
    tcase_op(&cv, "conv2d_bn_relu", "n=1,c=4,h=6,w=6,oc=8,kh=3,kw=3,pad=1", &r);
    te_space *cs = make(&cv, NULL, TE_SPACE_AUTO);
    assert_int_equal(te_space_kind_of(cs), TE_SPACE_TEMPLATE);
    assert_true(te_space_size(cs) > 0); /* the conv2d template's knobs, enumerable */
    assert_non_null(te_space_get(cs, 0));
    tcase_free(&cv);
    /* ... while a reduction that is neither gets sketches. */
    tcase sm;
    tcase_op(&sm, "softmax", "m=4,n=16", &r);
    assert_int_equal(te_space_kind_of(make(&sm, NULL, TE_SPACE_AUTO)), TE_SPACE_SKETCH);
    tcase_free(&sm);
    tcase_free(&c);
}

/* Same seed, same sequence, in another context too; mutation changes one decision. */
static void test_reproducible_and_mutate(void **state)
{
    (void)state;
    const char *ops[][2] = {
        {"matmul", "m=32,n=48,k=16"}, {"softmax", "m=8,n=40"}, {"mlp_gate", "m=8,n=32,k=16"}};
    for (int q = 0; q < 3; q++) {
        for (int kind = TE_SPACE_TEMPLATE; kind <= TE_SPACE_SKETCH; kind++) {
            tt_rng r;
            tt_rng_seed(&r, 1);
            tcase a, b;
            tcase_op(&a, ops[q][0], ops[q][1], &r);
            tcase_op(&b, ops[q][0], ops[q][1], &r);
            te_space *sa = make(&a, ops[q][0], (te_space_kind)kind);
            te_space *sb = make(&b, ops[q][0], (te_space_kind)kind);
            te_rng ra, rb;
            te_rng_seed(&ra, 42);
            te_rng_seed(&rb, 42);
            int distinct = 0;
            const char *prev = NULL;
            for (int i = 0; i < 20; i++) {
                const char *ta = te_space_sample(sa, &ra), *tb = te_space_sample(sb, &rb);
                assert_non_null(ta);
                assert_non_null(tb);
                assert_string_equal(ta, tb);
                distinct += prev && strcmp(prev, ta);
                prev = ta;
                const char *ma = te_space_mutate(sa, ta, &ra), *mb = te_space_mutate(sb, tb, &rb);
                assert_non_null(ma);
                assert_string_equal(ma, mb);
                if (!strcmp(ma, ta))
                    fail_msg("%s: mutation returned its input:\n%s", a.label, ta);
                te_schedule *s = te_space_instantiate(sa, ma);
                if (!s)
                    fail_msg("%s: mutated trace does not apply: %s\n%s", a.label,
                             te_ctx_errmsg(a.ctx), ma);
                assert_string_equal(te_schedule_trace(s), ma);
            }
            assert_true(distinct >= 5);
            /* A trace the space did not produce mutates by its numbers. */
            const char *foreign = q == 0   ? "split matmul i 4\nsplit matmul j 8\n"
                                  : q == 1 ? "unroll_max softmax 16\n"
                                           : "split mlp_gate i 2\n";
            const char *mf = te_space_mutate(sa, foreign, &ra);
            if (!mf)
                fail_msg("%s: %s", a.label, te_ctx_errmsg(a.ctx));
            assert_true(strcmp(mf, foreign) != 0);
            assert_non_null(te_space_instantiate(sa, mf));
            /* Nothing to mutate in an empty trace. */
            assert_null(te_space_mutate(sa, "", &ra));
            te_ctx_clear_error(a.ctx);
            tcase_free(&a);
            tcase_free(&b);
        }
    }
}

/* ---- Features ----------------------------------------------------------------------------- */

/* Lowered for a fixed AVX-512 target: the C target's last passes split vectors to the target's
 * register width, and the features below are checked the same on every build machine. */
static te_lowered *lower_trace(tcase *c, te_space *sp, const char *trace)
{
    te_target tgt = te_target_host();
    tgt.vector_bits = 512;
    snprintf(tgt.isa, sizeof tgt.isa, "sse4_2,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw");
    te_tensor *args[2 * TE_OP_MAX_IO];
    tcase_args(c, args);
    te_schedule *s = te_space_instantiate(sp, trace);
    if (!s)
        fail_msg("%s", te_ctx_errmsg(c->ctx));
    te_lowered *f = te_lower(s, c->n_in + c->n_out, args, "kernel", &tgt);
    if (!f)
        fail_msg("%s", te_ctx_errmsg(c->ctx));
    return f;
}

static void test_features(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, 4);
    tcase c;
    tcase_op(&c, "matmul", "m=64,n=64,k=32", &r);
    te_space *sp = make(&c, "matmul", TE_SPACE_TEMPLATE);
    te_lowered *plain = lower_trace(&c, sp, "");
    te_lowered *tiled = lower_trace(&c, sp, te_space_get(sp, te_space_size(sp) - 1));
    te_lowered *vec = lower_trace(&c, sp,
                                  "split matmul j 16\nreorder matmul i j_o k j_i\n"
                                  "vectorize matmul j_i\nparallel matmul i\n");
    float a[TE_NUM_FEATURES], b[TE_NUM_FEATURES], v[TE_NUM_FEATURES], a2[TE_NUM_FEATURES + 4];
    assert_int_equal(te_features(plain, a, TE_NUM_FEATURES), TE_NUM_FEATURES);
    assert_int_equal(te_features(tiled, b, TE_NUM_FEATURES), TE_NUM_FEATURES);
    assert_int_equal(te_features(vec, v, TE_NUM_FEATURES), TE_NUM_FEATURES);
    for (int i = 0; i < TE_NUM_FEATURES + 4; i++)
        a2[i] = -7;
    assert_int_equal(te_features(plain, a2, TE_NUM_FEATURES + 4), TE_NUM_FEATURES);
    assert_memory_equal(a, a2, sizeof a);  /* deterministic */
    assert_true(a2[TE_NUM_FEATURES] == 0); /* extra slots are zeroed */
    for (int i = 0; i < TE_NUM_FEATURES; i++) {
        assert_true(isfinite(a[i]) && isfinite(b[i]) && isfinite(v[i]));
    }
    /* Same arithmetic: 2 M N K float ops (adds and muls alike), whatever the schedule. */
    double want = log2(1.0 + 64.0 * 64 * 32);
    assert_true(fabs(a[1] - want) < 0.05 && fabs(b[1] - want) < 0.05 && fabs(v[1] - want) < 0.05);
    /* Annotations show. */
    assert_true(a[14] == 1 && v[14] == 16);  /* widest store */
    assert_true(a[50] == 0 && v[50] > 0.9f); /* vector share of the float ops */
    assert_true(a[18] == 0 && v[18] == 1);   /* parallel loops */
    assert_true(v[17] == (float)log2(65.0)); /* outermost parallel extent */
    assert_true(b[41] > 0.5f);               /* tiled: stores go to the local accumulator */
    assert_true(b[32] > 0);                  /* ... which is a local allocation */
    assert_true(a[22] == 3 && a[23] >= 3);   /* loop depth and count of the plain nest */
    /* Truncated output. */
    float few[3] = {9, 9, 9};
    assert_int_equal(te_features(plain, few, 2), TE_NUM_FEATURES);
    assert_true(few[0] == a[0] && few[1] == a[1] && few[2] == 9);
    assert_int_equal(te_features(NULL, few, 3), TE_NUM_FEATURES);
    assert_true(few[0] == 0);
    /* A softmax: intrinsic calls counted. */
    tcase s;
    tcase_op(&s, "softmax", "m=4,n=32", &r);
    te_space *ss = make(&s, "softmax", TE_SPACE_TEMPLATE);
    float f[TE_NUM_FEATURES];
    te_features(lower_trace(&s, ss, te_space_get(ss, 0)), f, TE_NUM_FEATURES);
    assert_true(f[4] >= (float)log2(1.0 + 4 * 32));
    tcase_free(&s);
    tcase_free(&c);
}

/* The rowop template's widest partial results: eight vectors (128 lanes with AVX-512, 64 with
 * AVX2) of layer norm's Kahan pairs, in 64-lane parts where wider, fold and match the
 * reference. (An unrolled 128-wide rfactor once computed wrong layer norms.) */
static void test_rowop_eight_vectors(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    tcase c;
    tcase_op(&c, "layer_norm", "m=2,n=4096", &r); /* Kahan sums (TE_OP_KAHAN_MIN_ROW) */
    te_space *sp = make(&c, "layer_norm", TE_SPACE_TEMPLATE);
    int64_t size = te_space_size(sp);
    int lanes = te_target_host().vector_bits >= 512 ? 16 : 8;
    char want[64];
    snprintf(want, sizeof want, "split layer_norm_mean k %d\n", 8 * lanes);
    const char *tr[8];
    int nt = 0;
    for (int64_t i = 0; i < size && nt < 8; i++) {
        const char *t = te_space_get(sp, i);
        assert_non_null(t);
        if (strstr(t, want))
            tr[nt++] = t;
    }
    assert_true(nt > 0);
    if (getenv("TESSERA_TEST_VERBOSE"))
        fputs(tr[0], stderr);
    check_traces(&c, sp, nt, tr, 1e-4);
    tcase_free(&c);
}

/* rowop with pipe: configurations that pipeline the output (te_pipeline) are offered where
 * rows chunk and the reductions take two vectors or more, and compute the reference. */
static void test_rowop_pipelined(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(6));
    const char *ops[] = {"softmax", "layer_norm"};
    for (int o = 0; o < 2; o++) {
        tcase c;
        tcase_op(&c, ops[o], "m=40,n=512", &r); /* 40 rows: chunks with a tail */
        te_space *sp = make(&c, ops[o], TE_SPACE_TEMPLATE);
        int64_t size = te_space_size(sp);
        const char *tr[6];
        int nt = 0;
        for (int64_t i = 0; i < size && nt < 6; i += 7) {
            const char *t = te_space_get(sp, i);
            assert_non_null(t);
            if (strstr(t, "\npipeline "))
                tr[nt++] = t;
        }
        if (nt == 0)
            fail_msg("%s: no pipelined configuration among %lld", ops[o], (long long)size);
        if (getenv("TESSERA_TEST_VERBOSE"))
            fputs(tr[0], stderr);
        check_traces(&c, sp, nt, tr, 1e-5);
        tcase_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_reproducible_and_mutate),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_templates),
        cmocka_unit_test(test_rowop_eight_vectors),
        cmocka_unit_test(test_rowop_pipelined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
