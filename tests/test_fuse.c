/* Fusion: the rule file parser (shipped rules, malformed files refused with file:line, random
 * mutations never crash), the four fusion classes on real sub-graphs (conv + bn + relu,
 * matmul + bias + gelu, QKV, the MLP gate, residual add + layer norm, layer norm -> QKV), the
 * feasibility checks (cycle, L2, roofline) with their reasons, the generic kind-based fallback,
 * and the `tessera fuse` command. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "testutil.h"

static tt_rng g_rng;
static te_fuse_rules *g_rules;

/* Fixed target facts so the decisions do not depend on the machine running the test. */
static te_fuse_target target(size_t l2)
{
    te_fuse_target t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "cpu");
    snprintf(t.isa, sizeof t.isa, "avx2,fma");
    t.cores = 2;
    t.vector_bits = 256;
    t.l2_bytes = l2;
    t.peak_gflops = 100;
    t.mem_gbps = 20;
    t.launch_us = 2;
    snprintf(t.source, sizeof t.source, "test");
    return t;
}

static te_graph *parse(const char *text)
{
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, text, "test.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

static te_fuse_plan *fuse(te_graph *g, const te_fuse_rules *r, size_t l2)
{
    te_fuse_target t = target(l2);
    te_fuse_plan *p = te_graph_fuse(g, r, &t);
    if (!p)
        fail_msg("%s", te_graph_errmsg(g));
    return p;
}

/* The group holding the node named `node`. */
static te_fuse_group group_of(const te_graph *g, const te_fuse_plan *p, const char *node)
{
    int v = te_graph_find(g, node);
    assert_true(v >= 0);
    int gi = te_fuse_plan_group_of(p, te_graph_value_producer(g, v));
    assert_true(gi >= 0);
    te_fuse_group gr;
    assert_int_equal(te_fuse_plan_group(p, gi, &gr), TE_OK);
    return gr;
}

/* The first rejected decision whose check is `check`, or NULL. */
static const char *rejected(const te_fuse_plan *p, const char *check, const char *rule)
{
    for (int i = 0; i < te_fuse_plan_decision_count(p); i++) {
        te_fuse_decision d;
        te_fuse_plan_decision(p, i, &d);
        if (!d.accepted && !strcmp(d.check, check) && (!rule || !strcmp(d.rule, rule)))
            return d.reason;
    }
    return NULL;
}

static char *plan_text(const te_fuse_plan *p)
{
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    te_fuse_plan_print(p, f);
    fclose(f);
    return buf;
}

/* ---- Rules -------------------------------------------------------------------------------- */

static void test_shipped_rules_parse_and_cover_the_classes(void **state)
{
    (void)state;
    int n = te_fuse_rules_count(g_rules);
    assert_true(n >= 30);
    int cls[4] = {0};
    const char *names[] = {"vertical", "horizontal", "branch", "composite"};
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 4; c++)
            cls[c] += !strcmp(te_fuse_rule_class(g_rules, i), names[c]);
    for (int c = 0; c < 4; c++)
        if (cls[c] < 2)
            fail_msg("only %d %s rules shipped", cls[c], names[c]);
}

static void expect_rule_error(const char *text, const char *needle)
{
    char err[256];
    te_fuse_rules *r = te_fuse_rules_parse(text, "bad.rules", err, sizeof err);
    if (r)
        fail_msg("accepted: %s", text);
    if (!strstr(err, needle))
        fail_msg("'%s' not in '%s'", needle, err);
}

static void test_malformed_rule_files_are_refused_with_file_and_line(void **state)
{
    (void)state;
    expect_rule_error("rule a\n  class vertical\n  pattern matmul add\n", "bad.rules:1: rule 'a' "
                                                                          "has no 'end'");
    expect_rule_error("\nrule a\n  class vertical\n  pattern matmull add\nend\n",
                      "bad.rules:4: unknown operator 'matmull'");
    expect_rule_error("rule a\n  class vertical\n  pattern matmul @fancy\nend\n",
                      "bad.rules:3: unknown kind '@fancy'");
    expect_rule_error("rule a\n  class sideways\n  pattern matmul add\nend\n",
                      "bad.rules:1: rule 'a': unknown class 'sideways'");
    expect_rule_error("rule a\n  class horizontal\n  pattern matmul add\nend\n",
                      "bad.rules:1: rule 'a': a horizontal pattern is one '[siblings]'");
    expect_rule_error("rule a\n  class vertical\n  pattern matmul add{3,1}\nend\n",
                      "bad.rules:3: quantifier {3,1} is empty");
    expect_rule_error("rule a\n  class vertical\n  pattern matmul\n  priority high\nend\n",
                      "bad.rules:4: priority 'high'");
    expect_rule_error("rule a\n  class vertical\n  pattern matmul add\n  where rank=9\nend\n",
                      "bad.rules:4: constraint 'rank=9'");
    expect_rule_error("rule a\n  class vertical\n  pattern matmul add\n  colour red\nend\n",
                      "bad.rules:4: unknown directive 'colour'");
    expect_rule_error("class vertical\n", "bad.rules:1: 'class' outside a rule");
    expect_rule_error("rule a\n  class branch\n  pattern (matmul, matmul\nend\n",
                      "bad.rules:3: expected ')'");
    expect_rule_error("rule a\n class vertical\n pattern relu\nend\nrule a\n class vertical\n "
                      "pattern relu\nend\n",
                      "bad.rules:5: rule 'a' is defined twice (first at line 1)");
    expect_rule_error("rule a\n  class vertical\n  pattern add? relu\nend\n",
                      "the first element cannot be optional");
    expect_rule_error("rule a\n  class vertical\n  pattern relu\n  produces nothing_op\nend\n",
                      "bad.rules:4: produces unknown operator 'nothing_op'");
    expect_rule_error("rule a\n  class vertical\n  pattern xyz*\nend\n",
                      "bad.rules:3: pattern 'xyz*' matches no operator");
}

static void test_random_mutations_of_the_rules_never_crash(void **state)
{
    (void)state;
    /* The parser is a pure function of its text: mutate the shipped file and parse. */
    char path[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    static char mut[65536];
    const char alphabet[] = "()[]{},|?+*@->\n #=0123456789abcxyz_";
    int accepted = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(mut, text, n + 1);
        int edits = 1 + (int)tt_rng_int(&g_rng, 4);
        for (int e = 0; e < edits; e++) {
            size_t pos = (size_t)tt_rng_int(&g_rng, (int64_t)n);
            mut[pos] = alphabet[tt_rng_int(&g_rng, (int64_t)sizeof alphabet - 1)];
        }
        char err[256];
        te_fuse_rules *r = te_fuse_rules_parse(mut, "mut.rules", err, sizeof err);
        if (r) {
            accepted++;
            te_fuse_rules_free(r);
        } else {
            assert_true(strncmp(err, "mut.rules:", 10) == 0);
        }
    }
    assert_true(accepted < 400);
}

/* ---- Vertical ----------------------------------------------------------------------------- */

static const char *k_conv_block = "input x f32[1,16,14,14]\n"
                                  "const w f32[16,16,3,3] random seed=1\n"
                                  "const gamma f32[16] random seed=2 lo=0.5 hi=1.5\n"
                                  "const beta f32[16] random seed=3\n"
                                  "const mean f32[16] random seed=4\n"
                                  "const var f32[16] random seed=5 lo=0.5 hi=2\n"
                                  "c = conv2d(x, w) pad=1\n"
                                  "bn = batch_norm(c, gamma, beta, mean, var)\n"
                                  "y = relu(bn)\n"
                                  "output y\n";

static void test_vertical_conv_bn_relu_before_and_after_folding(void **state)
{
    (void)state;
    te_graph *g = parse(k_conv_block);
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_fuse_group gr = group_of(g, p, "y");
    assert_string_equal(gr.rule, "conv_bn_relu");
    assert_string_equal(gr.cls, "vertical");
    assert_string_equal(gr.fused_op, "conv2d_bn_relu");
    assert_int_equal(gr.n_nodes, 3);
    te_fuse_plan_free(p);

    /* Folded: conv2d + add(bias) + relu, still one conv2d_bn_relu kernel. */
    assert_int_equal(te_graph_optimize(g, NULL), TE_OK);
    p = fuse(g, g_rules, 1 << 20);
    gr = group_of(g, p, "y");
    assert_string_equal(gr.rule, "conv_bias_relu");
    assert_string_equal(gr.fused_op, "conv2d_bn_relu");
    assert_int_equal(gr.n_nodes, 3);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_vertical_matmul_bias_gelu_names_the_library_operator(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[64,128]\n"
                        "const w f32[128,256] random seed=1\n"
                        "const b f32[256] random seed=2\n"
                        "h = matmul(x, w)\n"
                        "hb = add(h, b)\n"
                        "y = gelu(hb)\n"
                        "output y\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_fuse_group gr = group_of(g, p, "h");
    assert_string_equal(gr.rule, "matmul_bias_gelu");
    assert_string_equal(gr.fused_op, "matmul_bias_act act=gelu");
    assert_int_equal(gr.n_outputs, 1);
    char *txt = plan_text(p);
    assert_non_null(strstr(txt, "group 0: matmul_bias_gelu [vertical] = matmul_bias_act act=gelu"));
    assert_non_null(strstr(txt, "why:     3 nodes"));
    free(txt);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_higher_priority_rule_wins_residual_conv(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[1,8,8,8]\n"
                        "const w f32[8,8,3,3] random seed=1\n"
                        "const b f32[8,1,1] random seed=2\n"
                        "c = conv2d(x, w) pad=1\n"
                        "cb = add(c, b)\n"
                        "r = add(cb, x)\n"
                        "y = relu(r)\n"
                        "output y\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    te_fuse_group gr = group_of(g, p, "c");
    assert_string_equal(gr.rule, "conv_bias_residual_relu");
    assert_int_equal(gr.n_nodes, 4);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

/* ---- Horizontal, branch, composite -------------------------------------------------------- */

static const char *k_qkv = "const wq f32[768,768] random seed=1\n"
                           "const wk f32[768,768] random seed=2\n"
                           "const wv f32[768,768] random seed=3\n"
                           "q = matmul(x, wq)\n"
                           "k = matmul(x, wk)\n"
                           "v = matmul(x, wv)\n"
                           "output q, k, v\n";

static void test_horizontal_qkv_projections_become_one_kernel(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text, "input x f32[128,768]\n%s", k_qkv);
    te_graph *g = parse(text);
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_fuse_group gr = group_of(g, p, "k");
    assert_string_equal(gr.rule, "qkv_projection");
    assert_string_equal(gr.cls, "horizontal");
    assert_string_equal(gr.fused_op, "qkv_projection");
    assert_int_equal(gr.n_outputs, 3);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_branch_mlp_gate_joins_two_paths(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[32,256]\n"
                        "const w1 f32[256,512] random seed=1\n"
                        "const w3 f32[256,512] random seed=2\n"
                        "a = matmul(x, w1)\n"
                        "s = silu(a)\n"
                        "u = matmul(x, w3)\n"
                        "y = mul(s, u)\n"
                        "output y\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_fuse_group gr = group_of(g, p, "y");
    assert_string_equal(gr.rule, "mlp_gate");
    assert_string_equal(gr.cls, "branch");
    assert_string_equal(gr.fused_op, "mlp_gate");
    assert_int_equal(gr.n_nodes, 4);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_branch_residual_add_layer_norm_keeps_the_sum_as_output(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[128,768]\n"
                        "input h f32[128,768]\n"
                        "const g1 f32[768] random seed=1\n"
                        "const b1 f32[768] random seed=2\n"
                        "r = add(x, h)\n"
                        "n = layer_norm(r, g1, b1)\n"
                        "t = tanh(n)\n"
                        "r2 = add(r, t)\n"
                        "output r2\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    te_fuse_group gr = group_of(g, p, "n");
    assert_string_equal(gr.rule, "residual_layer_norm");
    assert_int_equal(gr.n_nodes, 2);
    assert_int_equal(gr.n_outputs, 2); /* r goes on to the next residual */
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_composite_layer_norm_qkv_and_its_l2_limit(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text,
             "input x f32[128,768]\nconst g1 f32[768] random seed=9\nln = layer_norm(x, g1)\n%s",
             k_qkv);
    for (char *s = strstr(text, "matmul(x,"); s; s = strstr(s, "matmul(x,"))
        memcpy(s, "matmul(ln,", 10); /* "matmul(x, " -> "matmul(ln," */
    te_graph *g = parse(text);
    /* 128 x 768 f32 = 384 KiB: staged in a 1 MiB L2. */
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    te_fuse_group gr = group_of(g, p, "q");
    assert_string_equal(gr.rule, "ln_qkv");
    assert_string_equal(gr.cls, "composite");
    assert_int_equal(gr.n_nodes, 4);
    char *txt = plan_text(p);
    assert_non_null(strstr(txt, "'ln' (384.0 KiB) staged in L2 (1.00 MiB)"));
    free(txt);
    te_fuse_plan_free(p);
    /* With a 256 KiB L2 the candidate is rejected, with the numbers, and QKV fuses alone. */
    p = fuse(g, g_rules, 256 << 10);
    const char *why = rejected(p, "l2", "ln_qkv");
    assert_non_null(why);
    assert_non_null(strstr(why, "'ln' (layer_norm, 384.0 KiB) is re-read 768x by 'q' (matmul)"));
    assert_non_null(strstr(why, "the L2 holds 256.0 KiB"));
    gr = group_of(g, p, "q");
    assert_string_equal(gr.rule, "qkv_projection");
    te_fuse_plan_free(p);
    te_graph_free(g);
}

/* ---- Feasibility -------------------------------------------------------------------------- */

static void test_cycle_through_the_rest_of_the_graph_is_rejected(void **state)
{
    (void)state;
    char err[256];
    te_fuse_rules *r = te_fuse_rules_parse("rule mm_add\n  class branch\n  pattern matmul add\n"
                                           "  where escape=1\n  priority 1\nend\n",
                                           "user.rules", err, sizeof err);
    assert_non_null(r);
    te_graph *g = parse("input x f32[16,16]\n"
                        "const w f32[16,16] random seed=1\n"
                        "a = matmul(x, w)\n"
                        "t = tanh(a)\n"
                        "y = add(a, t)\n"
                        "output y\n");
    te_fuse_plan *p = fuse(g, r, 1 << 20);
    const char *why = rejected(p, "cycle", "mm_add");
    assert_non_null(why);
    assert_non_null(strstr(why, "'a' leaves the group to 't' (tanh), whose result comes back "
                                "into 'y'"));
    assert_true(te_fuse_plan_group_of(p, 0) != te_fuse_plan_group_of(p, 2));
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_fuse_rules_free(r);
}

/* A rule for new GPUs only (min_sm): skipped on a CPU, refused with the reason where the
 * target's compute capability is unknown or too old, applied where it is new enough. */
static void test_compute_capability_constraint(void **state)
{
    (void)state;
    char err[256];
    te_fuse_rules *r = te_fuse_rules_parse("rule attention_sm90\n  class vertical\n"
                                           "  pattern batch_matmul softmax batch_matmul\n"
                                           "  where target=cuda min_sm=90\n  priority 5\nend\n",
                                           "gpu.rules", err, sizeof err);
    if (!r)
        fail_msg("%s", err);
    te_graph *g = parse("input q f32[2,16,8]\ninput k f32[2,16,8]\ninput v f32[2,16,8]\n"
                        "s = batch_matmul(q, k) trans_b=1\np = softmax(s)\n"
                        "o = batch_matmul(p, v)\noutput o\n");
    te_fuse_target t = target(1 << 20);
    struct {
        const char *name;
        int sm;
        const char *why; /* NULL: the rule forms the group */
    } cases[] = {
        {"cpu", 0, ""}, /* skipped: no decision at all */
        {"cuda", 0,
         "the target's compute capability is not known (te_fuse_target.sm), the rule "
         "wants sm_90 or newer"},
        {"cuda", 80, "the target is sm_80, the rule wants sm_90 or newer"},
        {"cuda", 90, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(t.name, sizeof t.name, "%s", cases[i].name);
        t.sm = cases[i].sm;
        te_fuse_plan *p = te_graph_fuse(g, r, &t);
        assert_non_null(p);
        const char *why = rejected(p, "constraint", "attention_sm90");
        if (cases[i].why && cases[i].why[0]) {
            if (!why || strcmp(why, cases[i].why))
                fail_msg("%s sm %d: '%s'", cases[i].name, cases[i].sm, why ? why : "(none)");
        } else {
            assert_null(why);
        }
        assert_true(!strcmp(group_of(g, p, "o").rule, "attention_sm90") == !cases[i].why);
        te_fuse_plan_free(p);
    }
    te_graph_free(g);
    te_fuse_rules_free(r);
    expect_rule_error("rule a\n  class vertical\n  pattern matmul add\n  where min_sm=8\nend\n",
                      "constraint 'min_sm=8' is unknown or has a bad value");
}

static void test_escape_needs_the_rule_to_allow_extra_outputs(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[64,64]\n"
                        "const w f32[64,64] random seed=1\n"
                        "const b f32[64] random seed=2\n"
                        "h = matmul(x, w)\n"
                        "hb = add(h, b)\n"
                        "y = gelu(hb)\n"
                        "z = mul(h, h)\n"
                        "output y, z\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    const char *why = rejected(p, "escape", "matmul_bias_gelu");
    assert_non_null(why);
    assert_non_null(strstr(why, "'h' (matmul) is also read by 'z' outside the group"));
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_roofline_rejects_recomputing_a_producer_inside_a_matmul(void **state)
{
    (void)state;
    char err[256];
    te_fuse_rules *r = te_fuse_rules_parse("rule act_into_mm\n  class vertical\n"
                                           "  pattern gelu matmul\n  priority 1\nend\n",
                                           "user.rules", err, sizeof err);
    assert_non_null(r);
    te_graph *g = parse("input x f32[256,512]\n"
                        "const w f32[512,1024] random seed=1\n"
                        "a = gelu(x)\n"
                        "y = matmul(a, w)\n"
                        "output y\n");
    /* A 64 KiB L2 cannot stage 'a' (512 KiB): gelu would be recomputed for every column. */
    te_fuse_plan *p = fuse(g, r, 64 << 10);
    const char *why = rejected(p, "roofline", "act_into_mm");
    if (!why)
        fail_msg("%s", plan_text(p));
    assert_non_null(strstr(why, "fused"));
    assert_non_null(strstr(why, "recomputed"));
    assert_int_equal(te_fuse_plan_group_count(p), 2);
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_fuse_rules_free(r);
}

/* ---- Generic fallback --------------------------------------------------------------------- */

static void test_generic_kind_based_fusion_without_rules(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[32,64]\n"
                        "input r f32[32,64]\n"
                        "const w f32[64,64] random seed=1\n"
                        "const b f32[64] random seed=2\n"
                        "h = matmul(x, w)\n"
                        "hb = add(h, b)\n"
                        "a = gelu(hb)\n"
                        "s = add(a, r)\n"
                        "n = layer_norm(s)\n"
                        "t = transpose(n)\n"
                        "u = reshape(t) shape=2048\n"
                        "output u\n");
    te_fuse_plan *p = fuse(g, NULL, 1 << 20);
    te_fuse_group gr = group_of(g, p, "h");
    assert_string_equal(gr.rule, "generic:out_ewise+elemwise");
    assert_int_equal(gr.n_nodes, 4); /* matmul, add, gelu, add(residual) */
    gr = group_of(g, p, "n");
    assert_string_equal(gr.rule, "single"); /* its producer went with the matmul */
    gr = group_of(g, p, "t");
    assert_string_equal(gr.rule, "generic:injective");
    assert_int_equal(gr.n_nodes, 2);
    assert_int_equal(te_fuse_plan_group_count(p), 3);
    /* Groups come in dependency order. */
    assert_true(te_fuse_plan_group_of(p, 0) < te_fuse_plan_group_of(p, 4));
    te_fuse_plan_free(p);

    /* A reduction absorbs its elemwise producers when nothing claimed them. */
    te_graph *g2 = parse("input x f32[32,64]\ninput r f32[32,64]\n"
                         "s = add(x, r)\nn = layer_norm(s)\noutput n\n");
    p = fuse(g2, NULL, 1 << 20);
    gr = group_of(g2, p, "n");
    assert_string_equal(gr.rule, "generic:reduction+producers");
    assert_int_equal(gr.n_nodes, 2);
    te_fuse_plan_free(p);
    te_graph_free(g2);
    te_graph_free(g);
}

static void test_json_and_dot_outputs(void **state)
{
    (void)state;
    te_graph *g = parse(k_conv_block);
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(te_fuse_plan_print_json(p, f), TE_OK);
    fclose(f);
    assert_non_null(strstr(buf, "\"rule\":\"conv_bn_relu\",\"class\":\"vertical\","
                                "\"fused_op\":\"conv2d_bn_relu\",\"nodes\":[\"c\",\"bn\",\"y\"]"));
    free(buf);
    f = open_memstream(&buf, &len);
    assert_int_equal(te_fuse_plan_print_dot(p, f), TE_OK);
    fclose(f);
    assert_non_null(strstr(buf, "digraph fused {"));
    assert_non_null(strstr(buf, "subgraph cluster_0"));
    assert_non_null(strstr(buf, "\"n_c\" -> \"n_bn\""));
    free(buf);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_host_target_reads_l2_at_run_time(void **state)
{
    (void)state;
    te_fuse_target t;
    int rc = te_fuse_target_host(&t);
    assert_true(rc == TE_OK || rc == TE_ERR_IO);
    if (rc == TE_OK)
        assert_true(t.l2_bytes >= 64 * 1024);
    assert_true(t.cores >= 1);
    assert_true(t.peak_gflops > 0);
    assert_string_equal(t.name, "cpu");
}

static void test_target_and_kernel_constraints(void **state)
{
    (void)state;
    te_graph *g = parse("input q f32[2,16,8]\ninput k f32[2,16,8]\ninput v f32[2,16,8]\n"
                        "s = batch_matmul(q, k) trans_b=1\np = softmax(s)\n"
                        "o = batch_matmul(p, v)\noutput o\n");
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    /* the GPU-only rules skipped: P V is its own kernel on a CPU */
    assert_string_equal(group_of(g, p, "o").rule, "single");
    te_fuse_plan_free(p);
    te_fuse_target t = target(1 << 20);
    snprintf(t.name, sizeof t.name, "cuda");
    p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(p);
    assert_string_equal(group_of(g, p, "o").rule, "flash_attention_cuda");
    te_fuse_plan_free(p);
    te_graph_free(g);

    /* Inception-style 1x1 siblings fuse; 3x3 siblings fall to the same-shape rule, and the
     * kernel constraint's refusal is recorded. */
    g = parse("input x f32[1,16,8,8]\n"
              "const a f32[8,16,1,1] random seed=1\nconst b f32[8,16,1,1] random seed=2\n"
              "const c f32[8,16,3,3] random seed=3\nconst d f32[8,16,3,3] random seed=4\n"
              "ya = conv2d(x, a)\nyb = conv2d(x, b)\n"
              "x2 = relu(x)\nyc = conv2d(x2, c) pad=1\nyd = conv2d(x2, d) pad=1\n"
              "output ya, yb, yc, yd\n");
    p = fuse(g, g_rules, 1 << 20);
    te_fuse_group gr = group_of(g, p, "ya");
    assert_string_equal(gr.rule, "conv1x1_siblings");
    assert_int_equal(gr.n_nodes, 2);
    assert_string_equal(group_of(g, p, "yc").rule, "conv_siblings");
    const char *why = rejected(p, "constraint", "conv1x1_siblings");
    assert_non_null(why);
    assert_non_null(strstr(why, "'yc' has a 3x3 kernel, the rule wants 1x1"));
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_register_tile_fit_limits_horizontal_fusion(void **state)
{
    (void)state;
    char err[256];
    te_fuse_rules *r = te_fuse_rules_parse("rule eight\n  class horizontal\n"
                                           "  pattern [matmul{2,8}]\n  priority 1\nend\n",
                                           "user.rules", err, sizeof err);
    assert_non_null(r);
    char text[2048] = "input x f32[16,32]\n";
    for (int i = 0; i < 8; i++) {
        size_t n = strlen(text);
        snprintf(text + n, sizeof text - n,
                 "const w%d f32[32,32] random seed=%d\ny%d = matmul(x, w%d)\noutput y%d\n", i,
                 i + 1, i, i, i);
    }
    te_graph *g = parse(text);
    te_fuse_plan *p = fuse(g, r, 1 << 20); /* avx2: 16 vector registers */
    const char *why = rejected(p, "registers", "eight");
    assert_non_null(why);
    assert_non_null(strstr(why, "8 matmul/conv nodes read 'x' in one kernel: 8 accumulator tiles "
                                "of 1x16 need 19 vector registers, the target has 16"));
    te_fuse_plan_free(p);
    te_fuse_target t = target(1 << 20);
    snprintf(t.isa, sizeof t.isa, "avx512f,fma");
    p = te_graph_fuse(g, r, &t);
    te_fuse_group gr = group_of(g, p, "y0");
    assert_string_equal(gr.rule, "eight");
    assert_int_equal(gr.n_nodes, 8);
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_fuse_rules_free(r);
}

/* ---- The shipped sample graphs and user rules --------------------------------------------- */

static te_graph *load_sample(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/graph/examples/%s", TE_SOURCE_DIR, name);
    te_graph *g = te_graph_create();
    if (te_graph_load(g, path))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

static void test_encoder_block_sample_fuses_into_ten_kernels_and_a_view(void **state)
{
    (void)state;
    te_graph *g = load_sample("encoder_block.graph");
    assert_int_equal(te_graph_node_count(g), 29);
    te_fuse_plan *p = fuse(g, g_rules, 512 << 10);
    assert_int_equal(te_fuse_plan_group_count(p), 12);
    char *txt = plan_text(p);
    /* q's and v's head splits are left alone (their transposes join the products): views. */
    if (!strstr(txt, "fusion plan: 29 nodes -> 10 kernels (9 fused groups; 2 reshape views, no "
                     "kernel)"))
        fail_msg("%s", txt);
    assert_non_null(strstr(txt, ": view [view]\n  nodes:   v3 (reshape)"));
    te_fuse_group gv = group_of(g, p, "v3");
    assert_true(gv.view);
    assert_string_equal(gv.rule, "view");
    assert_non_null(strstr(txt, "intermediates written to memory: "));
    free(txt);
    te_fuse_group gr = group_of(g, p, "q");
    assert_string_equal(gr.rule, "ln_qkv+epilogue"); /* the bias adds joined the QKV kernel */
    assert_int_equal(gr.n_nodes, 7);
    assert_null(gr.fused_op);
    gr = group_of(g, p, "h2");
    assert_string_equal(gr.rule, "bias_residual_layer_norm");
    assert_int_equal(gr.n_outputs, 2);
    gr = group_of(g, p, "f1");
    assert_string_equal(gr.fused_op, "matmul_bias_act act=gelu");
    te_fuse_plan_free(p);
    /* On a GPU target the attention rules apply, and the 12 x 128 x 128 attention
     * probabilities (768 KiB) do not fit a 512 KiB L2. */
    te_fuse_target t = target(512 << 10);
    snprintf(t.name, sizeof t.name, "cuda");
    p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(p);
    const char *why = rejected(p, "l2", NULL);
    if (!why || !strstr(why, "'p' (softmax, 768.0 KiB) is re-read 64x by 'o'")) {
        char *t2 = plan_text(p);
        fail_msg("no L2 rejection of the attention chain:\n%s", t2);
    }
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_resnet_block_sample_after_folding_is_two_kernels(void **state)
{
    (void)state;
    te_graph *g = load_sample("resnet_block.graph");
    assert_int_equal(te_graph_optimize(g, NULL), TE_OK);
    te_fuse_plan *p = fuse(g, g_rules, 1 << 20);
    assert_int_equal(te_fuse_plan_group_count(p), 2);
    assert_string_equal(group_of(g, p, "r1").rule, "conv_bias_relu");
    assert_string_equal(group_of(g, p, "y").rule, "conv_bias_residual_relu");
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_user_rules_merge_and_take_priority(void **state)
{
    (void)state;
    char err[256];
    te_fuse_rules *all = te_fuse_rules_parse("", "empty.rules", err, sizeof err);
    assert_non_null(all);
    assert_int_equal(te_fuse_rules_merge(all, g_rules, err, sizeof err), TE_OK);
    te_fuse_rules *user = te_fuse_rules_parse("rule my_mm_add\n  class vertical\n"
                                              "  pattern matmul add\n  priority 500\nend\n",
                                              "user.rules", err, sizeof err);
    assert_non_null(user);
    assert_int_equal(te_fuse_rules_merge(all, user, err, sizeof err), TE_OK);
    assert_int_equal(te_fuse_rules_count(all), te_fuse_rules_count(g_rules) + 1);
    assert_int_equal(te_fuse_rules_merge(all, user, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "rule 'my_mm_add' is defined in both"));
    te_graph *g = parse("input x f32[8,16]\nconst w f32[16,16] random seed=1\n"
                        "const b f32[16] random seed=2\n"
                        "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n");
    te_fuse_plan *p = fuse(g, all, 1 << 20);
    te_fuse_group gr = group_of(g, p, "h");
    assert_string_equal(gr.rule, "my_mm_add+epilogue"); /* gelu joins as an epilogue */
    assert_int_equal(gr.n_nodes, 3);
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_fuse_rules_free(user);
    te_fuse_rules_free(all);
}

/* ---- CLI ---------------------------------------------------------------------------------- */

static char *run(const char *cmd, int *status)
{
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    *status = pclose(f);
    return out;
}

static void test_cli_prints_the_plan(void **state)
{
    (void)state;
    char path[] = "/tmp/test_fuse_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(k_conv_block, f);
    fclose(f);
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "%s fuse %s --rules %s/cpu.rules 2>&1", TESSERA_CLI, path,
             TE_RULES_DIR);
    char *out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "group 0: conv_bn_relu [vertical] = conv2d_bn_relu"));
    snprintf(cmd, sizeof cmd, "%s fuse %s --rules %s/cpu.rules --json 2>&1", TESSERA_CLI, path,
             TE_RULES_DIR);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_true(out[0] == '{');
    snprintf(cmd, sizeof cmd, "%s fuse %s --optimize --rules %s/cpu.rules 2>&1", TESSERA_CLI, path,
             TE_RULES_DIR);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "conv_bias_relu"));
    snprintf(cmd, sizeof cmd, "%s fuse %s --optimize --check --rules %s/cpu.rules 2>&1",
             TESSERA_CLI, path, TE_RULES_DIR);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("%s", out);
    assert_non_null(strstr(out, "check: group 0 conv_bias_relu"));
    assert_non_null(strstr(out, "check: 1 kernels, all outputs match"));
    snprintf(cmd, sizeof cmd, "%s fuse /nonexistent.graph 2>&1", TESSERA_CLI);
    out = run(cmd, &st);
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_non_null(strstr(out, "/nonexistent.graph"));
    snprintf(cmd, sizeof cmd, "%s fuse 2>&1", TESSERA_CLI);
    out = run(cmd, &st);
    assert_int_equal(WEXITSTATUS(st), 2);
    remove(path);
}

static int setup(void **state)
{
    (void)state;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    g_rules = te_fuse_rules_load(path, err, sizeof err);
    if (!g_rules)
        fprintf(stderr, "%s\n", err);
    return g_rules ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    te_fuse_rules_free(g_rules);
    return 0;
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(13));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_rules_parse_and_cover_the_classes),
        cmocka_unit_test(test_malformed_rule_files_are_refused_with_file_and_line),
        cmocka_unit_test(test_random_mutations_of_the_rules_never_crash),
        cmocka_unit_test(test_vertical_conv_bn_relu_before_and_after_folding),
        cmocka_unit_test(test_vertical_matmul_bias_gelu_names_the_library_operator),
        cmocka_unit_test(test_higher_priority_rule_wins_residual_conv),
        cmocka_unit_test(test_horizontal_qkv_projections_become_one_kernel),
        cmocka_unit_test(test_branch_mlp_gate_joins_two_paths),
        cmocka_unit_test(test_branch_residual_add_layer_norm_keeps_the_sum_as_output),
        cmocka_unit_test(test_composite_layer_norm_qkv_and_its_l2_limit),
        cmocka_unit_test(test_cycle_through_the_rest_of_the_graph_is_rejected),
        cmocka_unit_test(test_compute_capability_constraint),
        cmocka_unit_test(test_escape_needs_the_rule_to_allow_extra_outputs),
        cmocka_unit_test(test_roofline_rejects_recomputing_a_producer_inside_a_matmul),
        cmocka_unit_test(test_generic_kind_based_fusion_without_rules),
        cmocka_unit_test(test_json_and_dot_outputs),
        cmocka_unit_test(test_host_target_reads_l2_at_run_time),
        cmocka_unit_test(test_target_and_kernel_constraints),
        cmocka_unit_test(test_register_tile_fit_limits_horizontal_fusion),
        cmocka_unit_test(test_encoder_block_sample_fuses_into_ten_kernels_and_a_view),
        cmocka_unit_test(test_resnet_block_sample_after_folding_is_two_kernels),
        cmocka_unit_test(test_user_rules_merge_and_take_priority),
        cmocka_unit_test(test_cli_prints_the_plan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
