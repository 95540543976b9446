/* te_graph_lower_bf16 (graph/lower_bf16.c): f32 matmuls with constant weights rewritten onto
 * bf16 dot products (cast of A, weights rounded and packed once, matmul_vnni, epilogues as
 * separate nodes). For matmul + bias + gelu (64x256x128, as three nodes and as one
 * matmul_bias_act), the MLP gate silu(x W1) * (x W3) (32x256x512, one mlp_gate node), a
 * trans_b=1 matmul and a dense_bias: the lowered graph, fused (the shipped rules), compiled and
 * run, is within te_graph_value_bf16_tolerance of the float64 reference of the UNLOWERED graph,
 * the bound is tight (the observed error within a factor 8 of it) and the error is larger than
 * the unlowered f32 run's. On a host with AVX-512 BF16 or AMX the products run on the
 * tensorize template (the group notes name the intrinsic); elsewhere the graph is lowered for a
 * target that claims the instructions and runs as plain loops. Refusals (B not a constant, n
 * not a multiple of 32, a target without the instructions, trans_a) leave the node and say why. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "testutil.h"

static tt_rng g_rng;

static te_graph *parse(const char *text)
{
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, text, "case"))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

/* Fuses with the shipped rules, compiles for the host and runs g on x into out; *tensorized
 * (may be NULL) counts the groups whose note names a bf16 intrinsic. */
static void run(te_graph *g, const float *x, float *out, int *tensorized)
{
    char err[512], path[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    te_fuse_rules *rules = te_fuse_rules_load(path, err, sizeof err);
    if (!rules)
        fail_msg("%s", err);
    te_fuse_target t;
    te_fuse_target_host(&t);
    te_fuse_plan *p = te_graph_fuse(g, rules, &t);
    if (!p)
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    for (int i = 0; tensorized && i < te_fuse_plan_group_count(p); i++) {
        const char *note = NULL;
        te_graph_exec_group_from_db(e, i, &note);
        if (note && (strstr(note, "tensorize avx512bf16_") || strstr(note, "amx_bf16")))
            ++*tensorized;
    }
    if (te_graph_run(e, (const void *[]){x}, (void *[]){out}))
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_fuse_rules_free(rules);
}

/* A target with bf16 dot products: the host's when it has them, else the host's plus the
 * feature names (the graph is only lowered for it; kernels are built for the host). */
static te_target bf16_target(void)
{
    te_target t = te_target_host();
    if (!te_graph_bf16_supported(&t)) {
        size_t l = strlen(t.isa);
        snprintf(t.isa + l, sizeof t.isa - l, "%savx512f,avx512_bf16", l ? "," : "");
    }
    return t;
}

typedef struct bcase {
    const char *what, *text;
    int64_t nx, ny, k;
    int gated; /* a product of two lowered products: the bound grows with the values */
    int nodes; /* matmul nodes rewritten */
} bcase;

static void check_case(const bcase *c)
{
    te_graph *g0 = parse(c->text), *g1 = parse(c->text);
    te_target t = bf16_target(), host = te_target_host();
    char log[4096] = "";
    FILE *lf = fmemopen(log, sizeof log - 1, "w");
    int nrw = -1;
    if (te_graph_lower_bf16(g1, &t, lf, &nrw))
        fail_msg("%s", te_graph_errmsg(g1));
    fclose(lf);
    if (nrw != c->nodes)
        fail_msg("%s: %d nodes rewritten, not %d: %s", c->what, nrw, c->nodes, log);
    int casts = 0; /* matmuls of one input share one cast */
    for (int n = 0; n < te_graph_node_count(g1); n++)
        casts += !strcmp(te_graph_node_op(g1, n), "cast");
    assert_int_equal(casts, 1);
    /* the output keeps its name; the f32 weights are gone, their packed copies there */
    int out1 = te_graph_output_value(g1, 0), out0 = te_graph_output_value(g0, 0);
    assert_string_equal(te_graph_value_name(g1, out1), te_graph_value_name(g0, out0));
    for (int v = 0; v < te_graph_value_count(g1); v++)
        if (te_graph_value_kind_of(g1, v) == TE_GRAPH_CONST && te_graph_value_ndim(g1, v) == 2)
            fail_msg("%s: f32 weight '%s' left", c->what, te_graph_value_name(g1, v));
    float *x = malloc(sizeof(float) * (size_t)c->nx), *y0 = malloc(sizeof(float) * (size_t)c->ny),
          *y1 = malloc(sizeof(float) * (size_t)c->ny);
    double *ref = malloc(sizeof(double) * (size_t)c->ny);
    tt_fill_f32(&g_rng, x, (size_t)c->nx);
    tt_poison_f32(y0, (size_t)c->ny);
    tt_poison_f32(y1, (size_t)c->ny);
    int tz = 0;
    run(g0, x, y0, NULL);
    run(g1, x, y1, &tz);
    assert_int_equal(te_graph_eval_reference(g0, (const void *[]){x}, 1, &out0, &ref), TE_OK);
    double ss = 0;
    for (int64_t i = 0; i < c->ny; i++)
        ss += ref[i] * ref[i];
    double rms = sqrt(ss / (double)c->ny);
    double tol = te_graph_value_bf16_tolerance(g1, out1, rms);
    double want = te_graph_bf16_tolerance(c->k) * (c->gated ? 1 + 2 * sqrt(rms) : 1);
    assert_true(fabs(tol - want) <= 1e-12 * want);
    double e0 = tt_max_rel_err_f32(y0, ref, (size_t)c->ny);
    double e1 = tt_max_rel_err_f32(y1, ref, (size_t)c->ny);
    print_message("  %-28s bf16 error %.3g, bound %.3g (%.1fx), f32 error %.2g; %d group(s) on "
                  "a bf16 intrinsic\n",
                  c->what, e1, tol, tol / e1, e0, tz);
    if (!(e1 <= tol))
        fail_msg("%s: bf16 error %.3g above the bound %.3g\n%s", c->what, e1, tol, log);
    if (!(tol <= 8 * e1)) /* the bound is tight */
        fail_msg("%s: bound %.3g more than 8x the error %.3g", c->what, tol, e1);
    if (!(e1 > 10 * e0)) /* what was measured is bf16 rounding, not f32's */
        fail_msg("%s: bf16 error %.3g not above the f32 error %.3g", c->what, e1, e0);
    /* f32 values are not checked loosely: the unlowered graph has no bf16 value */
    assert_true(te_graph_value_bf16_tolerance(g0, out0, rms) == 0);
    if (te_graph_bf16_supported(&host) && tz < 1)
        fail_msg("%s: no group runs on a bf16 intrinsic on this host", c->what);
    if (te_graph_bf16_supported(&host) && c->gated && tz != 1) /* both products in one group */
        fail_msg("%s: %d groups on a bf16 intrinsic, not the gate's one", c->what, tz);
    free(x), free(y0), free(y1), free(ref);
    te_graph_free(g0);
    te_graph_free(g1);
}

static void test_lowered_graphs_are_within_the_bf16_bound(void **state)
{
    (void)state;
    te_target host = te_target_host();
    if (!te_graph_bf16_supported(&host))
        print_message("note: this CPU has no AVX-512 BF16 or AMX-BF16: the lowered graphs run "
                      "as plain loop nests here (the rewrite and the bound are still checked)\n");
    static const bcase cases[] = {
        {"matmul + bias + gelu",
         "input x f32[64,256]\nconst w f32[256,128] random seed=1\n"
         "const b f32[128] random seed=2\nh = matmul(x, w)\n"
         "hb = add(h, b)\ny = gelu(hb)\noutput y\n",
         64 * 256, 64 * 128, 256, 0, 1},
        {"matmul_bias_act gelu",
         "input x f32[64,256]\nconst w f32[256,128] random seed=1\n"
         "const b f32[128] random seed=2\n"
         "y = matmul_bias_act(x, w, b) act=gelu\noutput y\n",
         64 * 256, 64 * 128, 256, 0, 1},
        {"mlp_gate silu(xW1) * (xW3)",
         "input x f32[32,256]\nconst w1 f32[256,512] random seed=3\n"
         "const w3 f32[256,512] random seed=4\n"
         "y = mlp_gate(x, w1, w3)\noutput y\n",
         32 * 256, 32 * 512, 256, 1, 1},
        {"gate as separate nodes",
         "input x f32[32,256]\nconst w1 f32[256,512] random seed=3\n"
         "const w3 f32[256,512] random seed=4\np1 = matmul(x, w1)\n"
         "s1 = silu(p1)\np3 = matmul(x, w3)\ny = mul(s1, p3)\n"
         "output y\n",
         32 * 256, 32 * 512, 256, 1, 2},
        {"matmul trans_b=1",
         "input x f32[16,512]\nconst w f32[64,512] random seed=5\n"
         "y = matmul(x, w) trans_b=1\noutput y\n",
         16 * 512, 16 * 64, 512, 0, 1},
        {"dense_bias",
         "input x f32[24,128]\nconst w f32[128,96] random seed=6\n"
         "const b f32[96] random seed=7\ny = dense_bias(x, w, b)\noutput y\n",
         24 * 128, 24 * 96, 128, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

/* Lowers text for t; the log into log (n bytes) and the count. */
static int lower_log(const char *text, const te_target *t, char *log, size_t n)
{
    te_graph *g = parse(text);
    memset(log, 0, n);
    FILE *lf = fmemopen(log, n - 1, "w");
    int nrw = -1;
    assert_int_equal(te_graph_lower_bf16(g, t, lf, &nrw), TE_OK);
    fclose(lf);
    te_graph_free(g);
    return nrw;
}

static void test_lowering_refusals_say_why(void **state)
{
    (void)state;
    te_target t = bf16_target();
    char log[1024];
    /* n = 40: not a multiple of 32 */
    assert_int_equal(lower_log("input x f32[4,64]\nconst w f32[64,40] random\n"
                               "y = matmul(x, w)\noutput y\n",
                               &t, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "y (matmul) left as it is: n is not a multiple of 32"));
    /* B an input, not a constant */
    assert_int_equal(lower_log("input x f32[4,64]\ninput w f32[64,64]\n"
                               "y = matmul(x, w)\noutput y\n",
                               &t, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "B is not a constant"));
    /* k odd */
    assert_int_equal(lower_log("input x f32[4,63]\nconst w f32[63,64] random\n"
                               "y = matmul(x, w)\noutput y\n",
                               &t, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "k is not a multiple of 2"));
    /* trans_a */
    assert_int_equal(lower_log("input x f32[64,4]\nconst w f32[64,64] random\n"
                               "y = matmul(x, w) trans_a=1\noutput y\n",
                               &t, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "trans_a=1"));
    /* f64: only f32 is lowered */
    assert_int_equal(lower_log("input x f64[4,64]\nconst w f64[64,64] random\n"
                               "y = matmul(x, w)\noutput y\n",
                               &t, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "not f32"));
    /* a target without the instructions */
    te_target bare = te_target_host();
    snprintf(bare.isa, sizeof bare.isa, "sse4_2,avx,avx2,fma,avx512f,avx512_vnni");
    assert_false(te_graph_bf16_supported(&bare));
    assert_false(te_graph_bf16_supported(NULL));
    assert_int_equal(lower_log("input x f32[4,64]\nconst w f32[64,64] random\n"
                               "y = matmul(x, w)\noutput y\n",
                               &bare, log, sizeof log),
                     0);
    assert_non_null(strstr(log, "no bf16 dot product"));
    /* other operators are not mentioned */
    assert_int_equal(lower_log("input x f32[4,64]\ny = relu(x)\noutput y\n", &t, log, sizeof log),
                     0);
    assert_string_equal(log, "");
    te_graph *g = parse("input x f32[4,64]\ny = relu(x)\noutput y\n");
    assert_int_equal(te_graph_lower_bf16(NULL, &t, NULL, NULL), TE_ERR_ARG);
    assert_int_equal(te_graph_lower_bf16(g, NULL, NULL, NULL), TE_ERR_ARG);
    assert_true(te_graph_value_bf16_tolerance(NULL, 0, 1) == 0);
    assert_true(te_graph_value_bf16_tolerance(g, 99, 1) == 0);
    te_graph_free(g);
    /* the bound grows like sqrt(k) and is above f32's */
    assert_true(te_graph_bf16_tolerance(1024) > 1.9 * te_graph_bf16_tolerance(256));
    assert_true(te_graph_bf16_tolerance(1024) < 2.1 * te_graph_bf16_tolerance(256));
    assert_true(te_graph_bf16_tolerance(1) > 100 * te_dtype_tolerance(TE_F32, 1));
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(16));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lowered_graphs_are_within_the_bf16_bound),
        cmocka_unit_test(test_lowering_refusals_say_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
