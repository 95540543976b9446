/*
 * Traces: te_schedule_apply_trace replays every primitive's line (round trip over random
 * schedules: same trace, same lowered IR), reports the failing line, and te_trace_to_c prints C
 * that reproduces the trace when compiled (with the system compiler) and run.
 *
 * Environment: TESSERA_TEST_SEED (default 7), TESSERA_TRACE_SCHEDULES (default 2000).
 */
#include <stdbool.h>

#include "rand_schedule.h"
#include "space_testlib.h"

static const struct {
    const char *op, *params;
} cases[] = {
    {"matmul", "m=9,n=13,k=7"},
    {"matmul", "m=8,n=16,k=12,trans_a=1,trans_b=1"},
    {"batch_matmul", "b=2,m=5,n=6,k=4"},
    {"dense_bias", "m=6,n=10,k=5"},
    {"conv2d", "n=1,c=3,h=7,w=6,oc=4,kh=3,kw=3,pad=1"},
    {"depthwise_conv2d", "n=1,c=3,h=6,w=6,kh=3,kw=3,pad=1"},
    {"avg_pool2d", "n=1,c=2,h=5,w=5,kh=3,kw=3,pad=1"},
    {"softmax", "m=5,n=9"},
    {"layer_norm", "m=4,n=12"},
    {"rms_norm", "m=3,n=10"},
    {"gelu", "m=4,n=9"},
    {"add", "m=5,n=6,bcast=1"},
    {"transpose", "m=5,n=6"},
    {"sum", "m=4,n=9"},
    {"matmul_bias_act", "m=6,n=10,k=5,act=gelu"},
    {"mlp_gate", "m=6,n=10,k=8"},
    {"conv2d_bn_relu", "n=1,c=3,h=5,w=5,oc=4,kh=3,kw=3,pad=1"},
    {"qkv_projection", "m=5,n=6,k=7"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static char *lowered_text(te_schedule *s, const tcase *c)
{
    te_target tgt = te_target_host();
    te_tensor *args[2 * TE_OP_MAX_IO];
    tcase_args(c, args);
    te_lowered *low = te_lower(s, c->n_in + c->n_out, args, "kernel", &tgt);
    if (!low)
        fail_msg("%s: lowering failed: %s\n%s", c->label, te_ctx_errmsg(c->ctx),
                 te_schedule_trace(s));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    te_lowered_print(low, f);
    fclose(f);
    return buf;
}

static void test_round_trip(void **state)
{
    (void)state;
    uint64_t seed = tt_seed(7);
    const char *zn = getenv("TESSERA_TRACE_SCHEDULES");
    int total = zn ? atoi(zn) : 2000;
    tt_rng r;
    tt_rng_seed(&r, seed);
    tcase cs[NCASES];
    for (int k = 0; k < NCASES; k++)
        tcase_op(&cs[k], cases[k].op, cases[k].params, &r);
    int nonempty = 0, rfactors = 0, cache_reads = 0;
    for (int t = 0; t < total; t++) {
        tcase *c = &cs[t % NCASES];
        te_schedule *s1 = te_schedule_create(c->ctx, c->n_out, c->out);
        assert_non_null(s1);
        rs_schedule(s1, c->n_in, c->in, &r);
        const char *t1 = te_schedule_trace(s1);
        nonempty += *t1 != 0;
        rfactors += trace_has(t1, "rfactor ");
        cache_reads += trace_has(t1, "cache_read ");
        te_schedule *s2 = te_schedule_create(c->ctx, c->n_out, c->out);
        assert_non_null(s2);
        if (te_schedule_apply_trace(s2, t1) != TE_OK)
            fail_msg("seed %llu %s: replay failed: %s\n%s", (unsigned long long)seed, c->label,
                     te_ctx_errmsg(c->ctx), t1);
        const char *t2 = te_schedule_trace(s2);
        if (strcmp(t1, t2))
            fail_msg("seed %llu %s: trace differs after replay:\n%s---\n%s",
                     (unsigned long long)seed, c->label, t1, t2);
        char *l1 = lowered_text(s1, c), *l2 = lowered_text(s2, c);
        if (strcmp(l1, l2))
            fail_msg("seed %llu %s: lowered IR differs after replay of\n%s\n%s---\n%s",
                     (unsigned long long)seed, c->label, t1, l1, l2);
        free(l1);
        free(l2);
    }
    assert_true(nonempty > total / 2);
    assert_true(rfactors > total / 50 && cache_reads > total / 50);
    printf("replayed %d random schedules (%d with rfactor, %d with cache_read)\n", total, rfactors,
           cache_reads);
    for (int k = 0; k < NCASES; k++)
        tcase_free(&cs[k]);
}

/* ---- Errors ----------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, 1);
    tcase c;
    tcase_op(&c, "matmul", "m=8,n=8,k=8", &r);
    struct {
        const char *trace, *want1, *want2;
        int code;
    } bad[] = {
        {"split matmul j 4\nsplit matmul i 0\n", "line 2", "factor", TE_ERR_ARG},
        {"\n# a comment\nfrobnicate matmul\n", "line 3", "unknown primitive", TE_ERR_ARG},
        {"split nosuch i 4\n", "line 1", "nosuch", TE_ERR_NOT_FOUND},
        {"split matmul q 4\n", "line 1", "'q'", TE_ERR_NOT_FOUND},
        {"split matmul i 4\nsplit matmul i 2\n", "line 2", "not a current loop", TE_ERR_SCHEDULE},
        {"split matmul i x\n", "line 1", "not an integer", TE_ERR_ARG},
        {"split matmul i\n", "line 1", "fields", TE_ERR_ARG},
        {"cache_write matmul nowhere\n", "line 1", "scope", TE_ERR_ARG},
        {"cache_read Z global matmul\n", "line 1", "'Z'", TE_ERR_NOT_FOUND},
        {"bind matmul i warp.x\n", "line 1", "tag", TE_ERR_ARG},
        {"nontemporal matmul 2\n", "line 1", "0 or 1", TE_ERR_ARG},
        {"compute_inline matmul\n", "line 1", "output", TE_ERR_SCHEDULE},
    };
    for (size_t q = 0; q < sizeof bad / sizeof bad[0]; q++) {
        te_schedule *s = te_schedule_create(c.ctx, 1, c.out);
        int rc = te_schedule_apply_trace(s, bad[q].trace);
        const char *m = te_ctx_errmsg(c.ctx);
        if (rc != bad[q].code || !strstr(m, bad[q].want1) || !strstr(m, bad[q].want2))
            fail_msg("trace %zu: got %d '%s'", q, rc, m);
        te_ctx_clear_error(c.ctx);
    }
    /* Blank lines, comments and a missing final newline are fine; so is the empty trace. */
    te_schedule *s = te_schedule_create(c.ctx, 1, c.out);
    assert_int_equal(te_schedule_apply_trace(s, ""), TE_OK);
    assert_int_equal(
        te_schedule_apply_trace(s, "\n  \n# x\n   split   matmul i 4  \nsplit matmul j 2"), TE_OK);
    assert_string_equal(te_schedule_trace(s), "split matmul i 4\nsplit matmul j 2\n");
    assert_int_equal(te_schedule_apply_trace(NULL, ""), TE_ERR_ARG);
    assert_int_equal(te_schedule_apply_trace(s, NULL), TE_ERR_ARG);
    /* Every primitive's line, including bind and cache_read of a placeholder. */
    te_schedule *s2 = te_schedule_create(c.ctx, 1, c.out);
    const char *all = "cache_write matmul local\n"
                      "cache_read B global matmul_local\n"
                      "tile matmul i j 4 4\n"
                      "split_nparts matmul i_o 1\n"
                      "fuse matmul i_o_o i_o_i\n"
                      "reorder matmul j_o i_o_o_i_o_i_f\n"
                      "parallel matmul j_o\n"
                      "unroll matmul i_i\n"
                      "vectorize matmul j_i\n"
                      "compute_at matmul_local matmul i_o_o_i_o_i_f\n"
                      "compute_at B_global matmul j_o\n"
                      "compute_root B_global\n"
                      "unroll_max matmul_local 16\n"
                      "nontemporal matmul 1\n"
                      "bind matmul_local k blockIdx.x\n";
    int rc = te_schedule_apply_trace(s2, all);
    /* bind of a reduction loop is refused, on the last line. */
    assert_int_equal(rc, TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "line 15"));
    te_ctx_clear_error(c.ctx);
    te_schedule *s3 = te_schedule_create(c.ctx, 1, c.out);
    assert_int_equal(
        te_schedule_apply_trace(s3, "bind matmul i blockIdx.x\nbind matmul j threadIdx.y\n"),
        TE_OK);
    assert_string_equal(te_schedule_trace(s3),
                        "bind matmul i blockIdx.x\nbind matmul j threadIdx.y\n");
    /* The GPU primitives' lines replay too. */
    te_schedule *g1 = te_schedule_create(c.ctx, 1, c.out);
    te_stage *mst = te_schedule_stage(g1, c.out[0]);
    te_tensor *As = te_cache_read(g1, c.in[0], TE_SCOPE_SHARED, 1, &mst);
    assert_non_null(As);
    te_stage *ast = te_schedule_stage(g1, As);
    te_iter *ko, *ki;
    assert_int_equal(te_split(mst, te_stage_reduce_axis(mst, 0), 4, &ko, &ki), TE_OK);
    assert_int_equal(te_compute_at(ast, mst, ko), TE_OK);
    assert_int_equal(te_storage_align(ast, 0, 32, 1), TE_OK);
    assert_int_equal(te_double_buffer(ast), TE_OK);
    assert_int_equal(te_bind_reduce(mst, ki, TE_THREAD_X), TE_OK);
    const char *gt = te_schedule_trace(g1);
    assert_true(trace_has(gt, "storage_align A_shared 0 32 1") && trace_has(gt, "double_buffer ") &&
                trace_has(gt, "bind_reduce matmul k_i threadIdx.x"));
    te_schedule *g2 = te_schedule_create(c.ctx, 1, c.out);
    if (te_schedule_apply_trace(g2, gt) != TE_OK)
        fail_msg("%s\n%s", te_ctx_errmsg(c.ctx), gt);
    assert_string_equal(te_schedule_trace(g2), gt);
    char *gc = te_trace_to_c(gt, "s");
    assert_non_null(gc);
    assert_non_null(strstr(gc, "te_storage_align(st_A_shared, 0, 32, 1)"));
    assert_non_null(strstr(gc, "te_double_buffer(st_A_shared)"));
    assert_non_null(
        strstr(gc, "te_bind_reduce(st_matmul, te_stage_iter(st_matmul, \"k_i\"), TE_THREAD_X)"));
    free(gc);
    te_schedule *g3 = te_schedule_create(c.ctx, 1, c.out);
    assert_int_equal(te_schedule_apply_trace(g3, "storage_align matmul 0 x 1\n"), TE_ERR_ARG);
    te_ctx_clear_error(c.ctx);
    assert_int_equal(te_schedule_apply_trace(g3, "bind_reduce matmul k blockIdx.q\n"), TE_ERR_ARG);
    te_ctx_clear_error(c.ctx);
    assert_int_equal(te_schedule_apply_trace(g3, "split matmul k 2\nrfactor matmul k_i\n"), TE_OK);
    assert_non_null(te_schedule_stage_by_name(g3, "matmul_rf"));
    tcase_free(&c);
}

/* ---- Trace to C ------------------------------------------------------------------------- */

typedef int (*replay_fn)(te_schedule *s, te_tensor *const *in);

/* Compiles `snippet` inside a function replay(s, in) whose placeholders are variables named
 * like the inputs, loads it and runs it on a fresh schedule; returns that schedule's trace. */
static const char *run_c(tcase *c, const char *snippet)
{
    size_t cap = strlen(snippet) + 4096;
    char *src = malloc(cap);
    int k = snprintf(src, cap,
                     "#include <stdio.h>\n#include <stdbool.h>\n"
                     "#include \"tessera/schedule.h\"\n"
                     "int replay(te_schedule *s, te_tensor *const *in)\n{\n");
    for (int i = 0; i < c->n_in; i++)
        k += snprintf(src + k, cap - (size_t)k, "    te_tensor *%s = in[%d];\n    (void)%s;\n",
                      te_tensor_name(c->in[i]), i, te_tensor_name(c->in[i]));
    k += snprintf(src + k, cap - (size_t)k, "%s    return 0;\n}\n", snippet);
    char flags[2048];
    snprintf(flags, sizeof flags,
             "-O0 -fPIC -shared -std=gnu11 -Wall -Werror -I%s/include -I%s/include", TT_SOURCE_DIR,
             TT_BINARY_DIR);
    te__cc_opts opts = {NULL, flags, NULL};
    te__cc_lib *lib = NULL;
    char err[8192];
    if (te__cc_build(src, &opts, &lib, err, sizeof err) != TE_OK)
        fail_msg("%s: the C of the trace did not compile:\n%s\n%s", c->label, src, err);
    replay_fn fn = (replay_fn)te__cc_lib_sym(lib, "replay");
    assert_non_null(fn);
    te_schedule *s = te_schedule_create(c->ctx, c->n_out, c->out);
    fn(s, c->in);
    te__cc_lib_free(lib);
    free(src);
    return te_schedule_trace(s);
}

/* Found by tests/fuzz/fuzz_trace.c: numbers at and beyond the int64 range. A factor that
 * does not fit int64 is refused as not an integer (strtoll clamped it before); INT64_MAX as a
 * split factor or part count gives sane extents instead of overflowing the ceiling division. */
static void test_huge_numbers(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, 1);
    tcase c;
    tcase_op(&c, "matmul", "m=8,n=8,k=8", &r);
    const char *too_big[] = {
        "split matmul i 92233720368547758078\n", "split matmul i -92233720368547758078\n",
        "tile matmul i j 4 92233720368547758078\n", "unroll_max matmul 92233720368547758078\n"};
    for (size_t q = 0; q < sizeof too_big / sizeof too_big[0]; q++) {
        te_schedule *s = te_schedule_create(c.ctx, 1, c.out);
        int rc = te_schedule_apply_trace(s, too_big[q]);
        if (rc != TE_ERR_ARG || !strstr(te_ctx_errmsg(c.ctx), "integer"))
            fail_msg("'%s': got %d '%s'", too_big[q], rc, te_ctx_errmsg(c.ctx));
        te_ctx_clear_error(c.ctx);
    }
    const char *huge[] = {"split matmul i 9223372036854775807\n",
                          "split_nparts matmul i 9223372036854775807\n",
                          "tile matmul i j 9223372036854775807 9223372036854775807\n"};
    for (size_t q = 0; q < sizeof huge / sizeof huge[0]; q++) {
        te_schedule *s = te_schedule_create(c.ctx, 1, c.out);
        int rc = te_schedule_apply_trace(s, huge[q]);
        if (rc != TE_OK)
            fail_msg("'%s': got %d '%s'", huge[q], rc, te_ctx_errmsg(c.ctx));
        te_stage *st = te_schedule_stage(s, c.out[0]);
        int64_t product = 1;
        for (int k = 0; k < te_stage_nleaves(st); k++) {
            int64_t e = te_iter_extent(te_stage_leaf(st, k));
            if (e < 1 || e > 8)
                fail_msg("'%s': loop %d has extent %lld", huge[q], k, (long long)e);
            product *= e;
        }
        assert_int_equal(product, 8 * 8 * 8);
    }
    tcase_free(&c);
}

static void test_trace_to_c(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(11));
    int checked = 0;
    /* Template and sketch configurations (cache_read of a placeholder, cache_write, compute_at,
     * tile, fuse, reorder, annotations) and random schedules. */
    const struct {
        const char *op, *params;
        te_space_kind kind;
    } sp_cases[] = {
        {"matmul", "m=16,n=40,k=12", TE_SPACE_TEMPLATE},
        {"mlp_gate", "m=8,n=24,k=8", TE_SPACE_SKETCH},
        {"softmax", "m=4,n=20", TE_SPACE_TEMPLATE},
        {"conv2d", "n=1,c=3,h=7,w=6,oc=4,kh=3,kw=3,pad=1", TE_SPACE_SKETCH},
    };
    for (size_t q = 0; q < sizeof sp_cases / sizeof sp_cases[0]; q++) {
        tcase c;
        tcase_op(&c, sp_cases[q].op, sp_cases[q].params, &r);
        te_target tgt = te_target_host();
        te_space *sp =
            te_space_create(c.ctx, c.label, c.n_in, c.in, c.n_out, c.out, sp_cases[q].kind, &tgt);
        assert_non_null(sp);
        te_rng rr;
        te_rng_seed(&rr, 5 + q);
        for (int i = 0; i < 3; i++) {
            const char *t = NULL;
            /* For the matmul template, make sure the packed variant (cache_read) is covered. */
            for (int a = 0; a < 50; a++) {
                t = te_space_sample(sp, &rr);
                assert_non_null(t);
                if (q != 0 || trace_has(t, "cache_read"))
                    break;
            }
            char *code = te_trace_to_c(t, "s");
            assert_non_null(code);
            const char *got = run_c(&c, code);
            if (strcmp(got, t))
                fail_msg("%s: the C of the trace gave another trace:\n%s---\n%s\n%s", c.label, t,
                         got, code);
            free(code);
            checked++;
        }
        tcase_free(&c);
    }
    for (int k = 0; k < NCASES; k += 3) {
        tcase c;
        tcase_op(&c, cases[k].op, cases[k].params, &r);
        te_schedule *s = te_schedule_create(c.ctx, c.n_out, c.out);
        rs_schedule(s, c.n_in, c.in, &r);
        const char *t = te_schedule_trace(s);
        char *code = te_trace_to_c(t, "s");
        assert_non_null(code);
        const char *got = run_c(&c, code);
        if (strcmp(got, t))
            fail_msg("%s: the C of the trace gave another trace:\n%s---\n%s\n%s", c.label, t, got,
                     code);
        free(code);
        checked++;
        tcase_free(&c);
    }
    /* A bad line gives NULL; another schedule variable name is used. */
    assert_null(te_trace_to_c("split C i\n", "s"));
    assert_null(te_trace_to_c("frobnicate\n", "s"));
    assert_null(te_trace_to_c(NULL, "s"));
    char *code = te_trace_to_c("split C i 4\n# note\n", "sched");
    assert_non_null(code);
    assert_non_null(strstr(code, "te_schedule_stage_by_name(sched, \"C\")"));
    assert_non_null(strstr(code, "te_split(st_C, te_stage_iter(st_C, \"i\"), 4, NULL, NULL)"));
    assert_non_null(strstr(code, "/* note */"));
    free(code);
    printf("checked %d traces printed as C\n", checked);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_trace_to_c),
        cmocka_unit_test(test_huge_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
