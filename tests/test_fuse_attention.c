/* te_graph_fuse_attention: attention chains (the encoder block's batch_matmul -> mul ->
 * softmax -> batch_matmul, and the ONNX BERT form with 4-D reshapes, a transposed K, a div by
 * sqrt(dh) and an additive [b, 1, 1, lk] mask) become one attention node; the graph's values
 * stay equal (float64 reference before and after), the fused graph compiles and runs; chains
 * whose intermediates are read elsewhere are left alone. */
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

static te_graph *parse(const char *text)
{
    te_graph *g = te_graph_create();
    assert_non_null(g);
    if (te_graph_parse(g, text, "test"))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

static int count_op(const te_graph *g, const char *op)
{
    int c = 0;
    for (int n = 0; n < te_graph_node_count(g); n++)
        c += !strcmp(te_graph_node_op(g, n), op);
    return c;
}

/* Random inputs (a mask input named "mask" gets 0 or -10000 per key, BERT's convention). */
static void **make_inputs(te_graph *g, tt_rng *r)
{
    int n = te_graph_input_count(g);
    void **in = calloc((size_t)n, sizeof *in);
    for (int i = 0; i < n; i++) {
        int v = te_graph_input_value(g, i);
        size_t ne = (size_t)te_graph_value_numel(g, v);
        float *d = malloc(sizeof(float) * ne);
        tt_fill_f32(r, d, ne);
        if (!strcmp(te_graph_value_name(g, v), "mask"))
            for (size_t q = 0; q < ne; q++)
                d[q] = q % 3 == 2 ? -10000.0f : 0.0f;
        in[i] = d;
    }
    return in;
}

static double *eval_output(te_graph *g, void **in)
{
    int v = te_graph_output_value(g, 0);
    size_t n = (size_t)te_graph_value_numel(g, v);
    double *out = malloc(sizeof(double) * n);
    if (te_graph_eval_reference(g, (const void *const *)in, 1, &v, &out))
        fail_msg("%s", te_graph_errmsg(g));
    return out;
}

/* Fuses g, checks one attention node replaced the chain and the output is unchanged, then
 * compiles the fused graph and runs it against the original reference. */
static void check_fused(const char *text, int want_fused)
{
    tt_rng r;
    tt_rng_seed(&r, tt_seed(51));
    te_graph *g = parse(text);
    void **in = make_inputs(g, &r);
    int ov = te_graph_output_value(g, 0);
    size_t n = (size_t)te_graph_value_numel(g, ov);
    double *before = eval_output(g, in);
    int fused = -1;
    if (te_graph_fuse_attention(g, &fused))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(fused, want_fused);
    assert_int_equal(count_op(g, "attention"), want_fused);
    if (want_fused)
        assert_int_equal(count_op(g, "softmax"), 0);
    double *after = eval_output(g, in);
    for (size_t q = 0; q < n; q++) {
        double e = fabs(after[q] - before[q]) / fmax(1.0, fabs(before[q]));
        if (!(e < 1e-6))
            fail_msg("element %zu: %g after the rewrite, %g before", q, after[q], before[q]);
    }
    /* The fused graph runs as kernels (the shipped CPU rules, default schedules, C
     * backend); the attention node takes its head-merging layout epilogue along. */
    char path[512], why[256];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    te_fuse_rules *rules = te_fuse_rules_load(path, why, sizeof why);
    if (!rules)
        fail_msg("%s", why);
    te_fuse_plan *p = te_graph_fuse(g, rules, NULL);
    if (!p)
        fail_msg("%s", te_graph_errmsg(g));
    if (want_fused) {
        int gi = -1;
        for (int i = 0; i < te_fuse_plan_group_count(p); i++) {
            te_fuse_group gr;
            te_fuse_plan_group(p, i, &gr);
            if (!strcmp(gr.rule, "attention_head_merge"))
                gi = i;
        }
        assert_true(gi >= 0);
    }
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    float *got = malloc(sizeof(float) * n);
    tt_poison_f32(got, n);
    void *outs[1] = {got};
    assert_int_equal(te_graph_run(e, (const void *const *)in, outs), TE_OK);
    double err = tt_max_rel_err_f32(got, before, n);
    if (!(err < 1e-5))
        fail_msg("compiled fused graph: max relative error %g", err);
    free(got);
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_fuse_rules_free(rules);
    for (int i = 0; i < te_graph_input_count(g); i++)
        free(in[i]);
    free(in);
    free(before);
    free(after);
    te_graph_free(g);
}

static void test_encoder_block_chain_becomes_one_attention_node(void **state)
{
    (void)state;
    check_fused("input qh f32[4,10,8]\ninput kh f32[4,12,8]\ninput vh f32[4,12,8]\n"
                "const scale f32[1] fill=0.35355339\n"
                "s = batch_matmul(qh, kh) trans_b=1\nss = mul(s, scale)\np = softmax(ss)\n"
                "o = batch_matmul(p, vh)\not = transpose(o) perm=1:0:2\noutput ot\n",
                1);
}

/* What an ONNX BERT export imports to: 4-D MatMuls as reshapes around batch_matmul, K
 * transposed by perm (0, 2, 3, 1), Div by sqrt(dh), Add of the [b, 1, 1, lk] mask. */
static void test_onnx_bert_chain_with_mask_becomes_one_attention_node(void **state)
{
    (void)state;
    check_fused("input q4 f32[2,3,7,8]\ninput k4 f32[2,3,9,8]\ninput v4 f32[2,3,9,8]\n"
                "input mask f32[2,1,1,9]\nconst c f32[1] fill=2.8284271\n"
                "kt4 = transpose(k4) perm=0:1:3:2\n"
                "q3 = reshape(q4) shape=6:7:8\nk3 = reshape(kt4) shape=6:8:9\n"
                "s3 = batch_matmul(q3, k3)\ns4 = reshape(s3) shape=2:3:7:9\n"
                "sd = div(s4, c)\nsa = add(sd, mask)\np = softmax(sa)\n"
                "p3 = reshape(p) shape=6:7:9\nv3 = reshape(v4) shape=6:9:8\n"
                "o3 = batch_matmul(p3, v3)\no4 = reshape(o3) shape=2:3:7:8\n"
                "ot = transpose(o4) perm=0:2:1:3\noutput ot\n",
                1);
}

static void test_chain_read_elsewhere_is_left_alone(void **state)
{
    (void)state;
    /* The probabilities are also a graph output: fusing would have to materialize them. */
    tt_rng r;
    tt_rng_seed(&r, 52);
    te_graph *g = parse("input q f32[2,5,4]\ninput k f32[2,5,4]\ninput v f32[2,5,4]\n"
                        "s = batch_matmul(q, k) trans_b=1\np = softmax(s)\n"
                        "o = batch_matmul(p, v)\noutput o, p\n");
    int fused = -1;
    assert_int_equal(te_graph_fuse_attention(g, &fused), TE_OK);
    assert_int_equal(fused, 0);
    assert_int_equal(count_op(g, "softmax"), 1);
    te_graph_free(g);
    /* A mask that depends on the head is not expressible as [b, 1, lq, lk]. */
    g = parse("input q f32[2,5,4]\ninput k f32[2,5,4]\ninput v f32[2,5,4]\n"
              "input m f32[2,5,5]\n"
              "s = batch_matmul(q, k) trans_b=1\nsm = add(s, m)\np = softmax(sm)\n"
              "o = batch_matmul(p, v)\noutput o\n");
    assert_int_equal(te_graph_fuse_attention(g, &fused), TE_OK);
    assert_int_equal(fused, 0);
    te_graph_free(g);
}

/* te_graph_optimize ends with the rewrite: `tessera run/tune --optimize` and every imported
 * model get the fused attention node, and the log says so. */
static void test_optimize_rewrites_attention(void **state)
{
    (void)state;
    te_graph *g = parse("input q f32[2,5,4]\ninput k f32[2,5,4]\ninput v f32[2,5,4]\n"
                        "s = batch_matmul(q, k) trans_b=1\np = softmax(s)\n"
                        "o = batch_matmul(p, v)\noutput o\n");
    char buf[512] = "";
    FILE *log = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(log);
    assert_int_equal(te_graph_optimize(g, log), TE_OK);
    fclose(log);
    assert_non_null(strstr(buf, "fuse_attention: 1 chains rewritten"));
    assert_int_equal(count_op(g, "attention"), 1);
    assert_int_equal(count_op(g, "softmax"), 0);
    te_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_block_chain_becomes_one_attention_node),
        cmocka_unit_test(test_onnx_bert_chain_with_mask_becomes_one_attention_node),
        cmocka_unit_test(test_chain_read_elsewhere_is_left_alone),
        cmocka_unit_test(test_optimize_rewrites_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
