/* Fused graphs compiled and run: every fused group is one kernel (the group's operators chained
 * on its inputs, default schedule, C backend), checked against the unfused graph evaluated by
 * the float64 reference interpreter at every group output (relative error <= 1e-5), on the
 * sub-graphs of the fusion classes: conv + bn + relu (folded), matmul + bias + gelu, QKV, the
 * MLP gate, residual add + layer norm, layer norm -> QKV; and lone reshapes as views (no kernel,
 * the storage of their root: an intermediate, a graph input, a constant, a graph output, through
 * a chain of two views), a reshape that is a graph output staying a kernel. */
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
static te_fuse_rules *g_rules;

static te_fuse_target target(void) { return tt_fuse_target(1 << 20); }

typedef struct check_ctx {
    te_graph *g;
    const te_fuse_plan *p;
    const void *const *inp;
    int checked;
} check_ctx;

/* After group i ran: its outputs against the reference evaluation of the unfused graph. */
static void check_group(te_graph_exec *e, int i, void *user)
{
    check_ctx *cc = user;
    te_graph *g = cc->g;
    te_fuse_group gr;
    te_fuse_plan_group(cc->p, i, &gr);
    for (int k = 0; k < gr.n_outputs; k++) {
        int v = gr.outputs[k];
        size_t n = (size_t)te_graph_value_numel(g, v);
        double *want = malloc(sizeof(double) * n);
        if (te_graph_eval_reference(g, cc->inp, 1, &v, &want))
            fail_msg("%s", te_graph_errmsg(g));
        double e1 = tt_max_rel_err_f32(te_graph_exec_value(e, v), want, n);
        if (!(e1 <= 1e-5))
            fail_msg("group %d (%s) output '%s': relative error %g", i, gr.rule,
                     te_graph_value_name(g, v), e1);
        free(want);
    }
    cc->checked++;
}

typedef void (*inspect_fn)(te_graph *g, const te_fuse_plan *p, te_graph_exec *e);

/* Parses, optionally optimizes, fuses, compiles and runs `text`; checks every group output and
 * the graph outputs against the reference; calls inspect (may be NULL) after the run; returns
 * the number of kernels. */
static int check_graph_inspect(const char *text, int optimize, const char *want_rule,
                               inspect_fn inspect)
{
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, text, "exec.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    if (optimize && te_graph_optimize(g, NULL))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(p);
    int found = 0;
    for (int i = 0; i < te_fuse_plan_group_count(p); i++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, i, &gr);
        found |= !strcmp(gr.rule, want_rule);
    }
    if (!found)
        fail_msg("no group formed by rule '%s'", want_rule);
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    int nin = te_graph_input_count(g);
    float *in[8];
    const void *inp[8];
    for (int i = 0; i < nin; i++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_input_value(g, i));
        in[i] = malloc(sizeof(float) * n);
        tt_fill_f32(&g_rng, in[i], n);
        inp[i] = in[i];
    }
    int nout = te_graph_output_count(g);
    float *out[8];
    for (int j = 0; j < nout; j++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_output_value(g, j));
        out[j] = malloc(sizeof(float) * n);
        tt_poison_f32(out[j], n);
    }
    /* Every group output, against the reference evaluation of the unfused graph, while it is
     * live in the pool. */
    check_ctx cc = {g, p, inp, 0};
    if (te_graph_run_each(e, inp, (void *const *)out, check_group, &cc))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(cc.checked, te_fuse_plan_group_count(p));
    for (int j = 0; j < nout; j++) {
        int v = te_graph_output_value(g, j);
        size_t n = (size_t)te_graph_value_numel(g, v);
        double *want = malloc(sizeof(double) * n);
        assert_int_equal(te_graph_eval_reference(g, inp, 1, &v, &want), TE_OK);
        assert_true(tt_max_rel_err_f32(out[j], want, n) <= 1e-5);
        free(want);
        free(out[j]);
    }
    if (inspect)
        inspect(g, p, e);
    for (int i = 0; i < nin; i++)
        free(in[i]);
    int nk = te_graph_exec_kernel_count(e);
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
    return nk;
}

static int check_graph(const char *text, int optimize, const char *want_rule)
{
    return check_graph_inspect(text, optimize, want_rule, NULL);
}

static void test_conv_bn_relu_folded_runs_as_one_kernel(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[1,8,10,10]\n"
                         "const w f32[8,8,3,3] random seed=1\n"
                         "const gamma f32[8] random seed=2 lo=0.5 hi=1.5\n"
                         "const beta f32[8] random seed=3\n"
                         "const mean f32[8] random seed=4\n"
                         "const var f32[8] random seed=5 lo=0.5 hi=2\n"
                         "c = conv2d(x, w) pad=1\n"
                         "bn = batch_norm(c, gamma, beta, mean, var)\n"
                         "y = relu(bn)\n"
                         "output y\n",
                         1, "conv_bias_relu");
    assert_int_equal(nk, 1);
}

static void test_matmul_bias_gelu_runs_as_one_kernel(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[16,32]\n"
                         "const w f32[32,24] random seed=1\n"
                         "const b f32[24] random seed=2\n"
                         "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n",
                         0, "matmul_bias_gelu");
    assert_int_equal(nk, 1);
}

/* Inspect: every constant weight of a group is read packed in column panels, or none is. */
static bool g_want_packed;
static void expect_packed(te_graph *g, const te_fuse_plan *p, te_graph_exec *e)
{
    (void)e;
    int packed = 0, weights = 0;
    for (int gi = 0; gi < te_fuse_plan_group_count(p); gi++) {
        te_ctx *ctx = te_ctx_create();
        te_graph_group_expr ge;
        assert_int_equal(te_graph_group_expr_build(g, p, gi, ctx, &ge), TE_OK);
        for (int i = 0; i < ge.n_in; i++) {
            if (te_graph_value_kind_of(g, ge.in_values[i]) != TE_GRAPH_CONST ||
                te_graph_value_ndim(g, ge.in_values[i]) != 2)
                continue;
            weights++;
            if (!ge.packed_nb[i])
                continue;
            packed++;
            /* the placeholder is [n / nb, k, nb] */
            const int64_t *ws = te_graph_value_shape(g, ge.in_values[i]);
            int tr = ge.packed_trans[i];
            assert_int_equal(te_tensor_ndim(ge.ins[i]), 3);
            assert_int_equal(te_tensor_shape(ge.ins[i])[1], ws[tr ? 1 : 0]);
            assert_int_equal(te_tensor_shape(ge.ins[i])[0] * ge.packed_nb[i], ws[tr ? 0 : 1]);
        }
        te_ctx_free(ctx);
    }
    assert_true(weights > 0);
    assert_int_equal(packed, g_want_packed ? weights : 0);
}

/* Constant weights of products with more than 16 rows are packed once into column panels and
 * read so (both layouts, an MLP gate's two, QKV's three); skinny products keep them. */
static void test_constant_weights_are_packed_in_panels(void **state)
{
    (void)state;
    float w[3 * 8], pk[3 * 8];
    for (int i = 0; i < 24; i++)
        w[i] = (float)i;
    /* W [k = 3, n = 8] in panels of 4: p[jb][kk][j] = W[kk][4 jb + j] */
    assert_int_equal(te_graph_pack_panels(w, 3, 8, 0, 4, pk), TE_OK);
    assert_true(pk[0] == 0 && pk[3] == 3 && pk[4] == 8 && pk[12] == 4 && pk[23] == 23);
    /* W [n = 8, k = 3]: p[jb][kk][j] = W[4 jb + j][kk] */
    assert_int_equal(te_graph_pack_panels(w, 3, 8, 1, 4, pk), TE_OK);
    assert_true(pk[0] == 0 && pk[1] == 3 && pk[4] == 1 && pk[12] == 12 && pk[23] == 23);
    assert_int_equal(te_graph_pack_panels(w, 3, 8, 0, 3, pk), TE_ERR_ARG);
    g_want_packed = true;
    check_graph_inspect("input x f32[48,32]\nconst w f32[32,64] random seed=1\n"
                        "const b f32[64] random seed=2\n"
                        "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n",
                        0, "matmul_bias_gelu", expect_packed);
    check_graph_inspect("input x f32[40,32]\nconst w f32[48,32] random seed=1\n"
                        "y = matmul(x, w) trans_b=1\noutput y\n",
                        0, "single", expect_packed);
    check_graph_inspect("input x f32[33,32]\n"
                        "const w1 f32[32,48] random seed=1\nconst w3 f32[32,48] random seed=2\n"
                        "a = matmul(x, w1)\ns = silu(a)\nu = matmul(x, w3)\ny = mul(s, u)\n"
                        "output y\n",
                        0, "mlp_gate", expect_packed);
    check_graph_inspect("input x f32[32,32]\n"
                        "const wq f32[32,32] random seed=1\nconst wk f32[32,32] random seed=2\n"
                        "const wv f32[32,16] random seed=3\n"
                        "q = matmul(x, wq)\nk = matmul(x, wk)\nv = matmul(x, wv)\n"
                        "output q, k, v\n",
                        0, "qkv_projection", expect_packed);
    g_want_packed = false;
    check_graph_inspect("input x f32[16,32]\nconst w f32[32,64] random seed=1\n"
                        "y = matmul(x, w)\noutput y\n",
                        0, "single", expect_packed);
}

static void test_qkv_runs_as_one_kernel_with_three_outputs(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[16,32]\n"
                         "const wq f32[32,32] random seed=1\n"
                         "const wk f32[32,32] random seed=2\n"
                         "const wv f32[32,16] random seed=3\n"
                         "q = matmul(x, wq)\nk = matmul(x, wk)\nv = matmul(x, wv)\n"
                         "output q, k, v\n",
                         0, "qkv_projection");
    assert_int_equal(nk, 1);
}

static void test_mlp_gate_runs_as_one_kernel(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[8,32]\n"
                         "const w1 f32[32,48] random seed=1\n"
                         "const w3 f32[32,48] random seed=2\n"
                         "a = matmul(x, w1)\ns = silu(a)\nu = matmul(x, w3)\ny = mul(s, u)\n"
                         "output y\n",
                         0, "mlp_gate");
    assert_int_equal(nk, 1);
}

static void test_residual_layer_norm_writes_both_outputs(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[8,64]\ninput h f32[8,64]\n"
                         "const g1 f32[64] random seed=1 lo=0.5 hi=1.5\n"
                         "const b1 f32[64] random seed=2\n"
                         "r = add(x, h)\nn = layer_norm(r, g1, b1)\nt = tanh(n)\n"
                         "r2 = add(r, t)\noutput r2\n",
                         0, "residual_layer_norm");
    assert_true(nk <= 2);
}

static void test_layer_norm_qkv_runs_as_one_kernel(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[8,32]\n"
                         "const g1 f32[32] random seed=9 lo=0.5 hi=1.5\n"
                         "const wq f32[32,32] random seed=1\n"
                         "const wk f32[32,32] random seed=2\n"
                         "const wv f32[32,32] random seed=3\n"
                         "const bq f32[32] random seed=4\n"
                         "ln = layer_norm(x, g1)\n"
                         "q = matmul(ln, wq)\nk = matmul(ln, wk)\nv = matmul(ln, wv)\n"
                         "qb = add(q, bq)\noutput qb, k, v\n",
                         0, "ln_qkv+epilogue");
    assert_int_equal(nk, 1);
}

/* The sample graphs of graph/examples at small sizes, end to end: every group compiles and
 * every group output matches the reference. */
static void test_small_encoder_block_end_to_end(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[8,32]\n"
                         "const ln1_g f32[32] random seed=1 lo=0.5 hi=1.5\n"
                         "const ln1_b f32[32] random seed=2\n"
                         "const wq f32[32,32] random seed=3 lo=-0.2 hi=0.2\n"
                         "const wk f32[32,32] random seed=4 lo=-0.2 hi=0.2\n"
                         "const wv f32[32,32] random seed=5 lo=-0.2 hi=0.2\n"
                         "const bq f32[32] random seed=6\n"
                         "const bk f32[32] random seed=7\n"
                         "const bv f32[32] random seed=8\n"
                         "const scale f32[1] fill=0.25\n"
                         "const wo f32[32,32] random seed=9 lo=-0.2 hi=0.2\n"
                         "const bo f32[32] random seed=10\n"
                         "const ln2_g f32[32] random seed=11 lo=0.5 hi=1.5\n"
                         "const ln2_b f32[32] random seed=12\n"
                         "const w1 f32[32,64] random seed=13 lo=-0.2 hi=0.2\n"
                         "const b1 f32[64] random seed=14\n"
                         "const w2 f32[64,32] random seed=15 lo=-0.2 hi=0.2\n"
                         "const b2 f32[32] random seed=16\n"
                         "h1 = layer_norm(x, ln1_g, ln1_b)\n"
                         "q = matmul(h1, wq)\nk = matmul(h1, wk)\nv = matmul(h1, wv)\n"
                         "qb = add(q, bq)\nkb = add(k, bk)\nvb = add(v, bv)\n"
                         "q3 = reshape(qb) shape=8:2:16\nk3 = reshape(kb) shape=8:2:16\n"
                         "v3 = reshape(vb) shape=8:2:16\n"
                         "qh = transpose(q3) perm=1:0:2\nkh = transpose(k3) perm=1:0:2\n"
                         "vh = transpose(v3) perm=1:0:2\n"
                         "s = batch_matmul(qh, kh) trans_b=1\nss = mul(s, scale)\n"
                         "p = softmax(ss)\no = batch_matmul(p, vh)\n"
                         "ot = transpose(o) perm=1:0:2\no2 = reshape(ot) shape=8:32\n"
                         "a = matmul(o2, wo)\nab = add(a, bo)\nr1 = add(ab, x)\n"
                         "h2 = layer_norm(r1, ln2_g, ln2_b)\n"
                         "f1 = matmul(h2, w1)\nf1b = add(f1, b1)\ng = gelu(f1b)\n"
                         "f2 = matmul(g, w2)\nf2b = add(f2, b2)\ny = add(f2b, r1)\n"
                         "output y\n",
                         0, "transpose_into_matmul"); /* the scores and P V products */
    assert_true(nk < 29);
}

static void test_small_resnet_block_end_to_end(void **state)
{
    (void)state;
    int nk = check_graph("input x f32[1,8,8,8]\n"
                         "const w1 f32[8,8,3,3] random seed=1 lo=-0.3 hi=0.3\n"
                         "const g1 f32[8] random seed=2 lo=0.5 hi=1.5\n"
                         "const be1 f32[8] random seed=3\n"
                         "const m1 f32[8] random seed=4\n"
                         "const v1 f32[8] random seed=5 lo=0.5 hi=2\n"
                         "const w2 f32[8,8,3,3] random seed=6 lo=-0.3 hi=0.3\n"
                         "const g2 f32[8] random seed=7 lo=0.5 hi=1.5\n"
                         "const be2 f32[8] random seed=8\n"
                         "const m2 f32[8] random seed=9\n"
                         "const v2 f32[8] random seed=10 lo=0.5 hi=2\n"
                         "c1 = conv2d(x, w1) pad=1\n"
                         "n1 = batch_norm(c1, g1, be1, m1, v1)\n"
                         "r1 = relu(n1)\n"
                         "c2 = conv2d(r1, w2) pad=1\n"
                         "n2 = batch_norm(c2, g2, be2, m2, v2)\n"
                         "s = add(n2, x)\n"
                         "y = relu(s)\n"
                         "output y\n",
                         1, "conv_bias_residual_relu");
    assert_int_equal(nk, 2);
}

/* Lone reshapes (each has several readers, or a matmul reads it: nothing fuses them) on every
 * kind of root: hr of the matmul h, the chain r1 -> r2 of the elementwise u, cr of a constant,
 * xr of the graph input, m1r of the graph output m1; yr is a graph output and stays a copy. */
static const char k_views[] = "input x f32[8,16]\n"
                              "const w1 f32[16,16] random seed=1 lo=-0.5 hi=0.5\n"
                              "const w2 f32[8,8] random seed=2 lo=-0.5 hi=0.5\n"
                              "const c f32[4,32] random seed=3 lo=-0.5 hi=0.5\n"
                              "h = matmul(x, w1)\n"
                              "hr = reshape(h) shape=16:8\n"
                              "s = softmax(hr)\n"
                              "t = tanh(hr)\n"
                              "u = add(s, t)\n"
                              "r1 = reshape(u) shape=8:16\n"
                              "r2 = reshape(r1) shape=4:32\n"
                              "m1 = matmul(r1, w1)\n"
                              "cr = reshape(c) shape=32:4\n"
                              "m4 = matmul(r2, cr)\n"
                              "xr = reshape(x) shape=16:8\n"
                              "m3 = matmul(xr, w2)\n"
                              "yr = reshape(m3) shape=8:16\n"
                              "m1r = reshape(m1) shape=16:8\n"
                              "m5 = matmul(m1r, w2)\n"
                              "output m1, m4, yr, m5\n";

static int group_of_value(te_graph *g, const te_fuse_plan *p, const char *name)
{
    int v = te_graph_find(g, name);
    assert_true(v >= 0);
    return te_fuse_plan_group_of(p, te_graph_value_producer(g, v));
}

/* The plan, the pool and the executable of k_views: six views, no kernel for them, no pool
 * bytes for them, each reading its root's buffer (the same pointer). */
static void inspect_views(te_graph *g, const te_fuse_plan *p, te_graph_exec *e)
{
    static const char *const views[] = {"hr", "r1", "r2", "cr", "xr", "m1r"};
    static const char *const roots[] = {"h", "u", "u", "c", "x", "m1"};
    int ng = te_fuse_plan_group_count(p), nviews = 0;
    for (int i = 0; i < ng; i++) {
        te_fuse_group gr;
        assert_int_equal(te_fuse_plan_group(p, i, &gr), TE_OK);
        if (!gr.view)
            continue;
        nviews++;
        assert_int_equal(gr.n_nodes, 1);
        assert_string_equal(te_graph_node_op(g, gr.nodes[0]), "reshape");
        assert_string_equal(gr.rule, "view");
        assert_string_equal(gr.cls, "view");
        assert_false(te_graph_value_is_output(g, te_graph_node_output(g, gr.nodes[0], 0)));
        assert_int_equal(te_graph_exec_group_seconds(e, i), 0);
        assert_int_equal(te_graph_exec_group_threads(e, i), 0);
        assert_string_equal(te_graph_exec_group_key(e, i), "");
    }
    assert_int_equal(nviews, 6);
    assert_int_equal(te_graph_exec_kernel_count(e), ng - nviews);
    /* The reshape that is a graph output is a kernel of its own (the caller reads its buffer). */
    te_fuse_group gy;
    te_fuse_plan_group(p, group_of_value(g, p, "yr"), &gy);
    assert_false(gy.view);
    assert_string_equal(gy.rule, "single");

    const te_graph_memplan *m = te_graph_exec_memplan(e);
    for (int i = 0; i < 6; i++) {
        int v = te_graph_find(g, views[i]), r = te_graph_find(g, roots[i]);
        const char *note = NULL;
        int gi = group_of_value(g, p, views[i]);
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        if (!gr.view)
            fail_msg("'%s' (group %d, %s) is not a view", views[i], gi, gr.rule);
        assert_int_equal(te_graph_memplan_alias(m, v), r);
        assert_int_equal(te_graph_memplan_offset(m, v), te_graph_memplan_offset(m, r));
        assert_ptr_equal(te_graph_exec_value(e, v), te_graph_exec_value(e, r));
        assert_int_equal(te_graph_exec_group_from_db(e, gi, &note), 0);
        char want[64];
        snprintf(want, sizeof want, "view of '%s'", roots[i]);
        if (!strstr(note, want))
            fail_msg("group %d's note is '%s'", gi, note);
    }
    assert_int_equal(te_graph_memplan_alias(m, te_graph_find(g, "h")), te_graph_find(g, "h"));
    /* Inputs, constants and graph outputs are not pooled, nor their views. */
    assert_int_equal(te_graph_memplan_offset(m, te_graph_find(g, "xr")), -1);
    assert_int_equal(te_graph_memplan_offset(m, te_graph_find(g, "cr")), -1);
    assert_int_equal(te_graph_memplan_offset(m, te_graph_find(g, "m1r")), -1);
    assert_true(te_graph_memplan_offset(m, te_graph_find(g, "hr")) >= 0);
    assert_int_equal(te_graph_memplan_alias(m, -1), -1);
    assert_int_equal(te_graph_memplan_alias(NULL, 0), -1);
    /* The pool holds h, s, u and m3 (yr's input): no view's bytes. u lives until m4, which reads
     * it through r2, and shares no byte with any buffer live then. */
    te_graph_mem_stats st;
    te_graph_memplan_stats(m, &st);
    assert_int_equal(st.n_buffers, 4);
    assert_int_equal(st.fused_bytes, 4 * 128 * sizeof(float));
    int u = te_graph_find(g, "u");
    for (int i = 0; i < st.n_buffers; i++) {
        te_graph_mem_buffer b;
        te_graph_memplan_buffer(m, i, &b);
        assert_int_equal(te_graph_memplan_alias(m, b.value), b.value);
        if (b.value == u)
            assert_int_equal(b.last, te_graph_exec_group_wave(e, group_of_value(g, p, "m4")));
    }
}

static void test_reshapes_run_as_views_of_their_roots(void **state)
{
    (void)state;
    int nk = check_graph_inspect(k_views, 0, "view", inspect_views);
    assert_int_equal(nk, 8);
}

/* The same graph on two threads with every group small: independent kernels share waves, views
 * join them with no threads, and the results are the reference's. */
static void test_views_in_concurrent_waves_match_the_reference(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, k_views, "views.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(p);
    te_graph_compile_opts o = {.threads = 2, .min_flops_per_thread = 1e9};
    te_graph_exec *e = NULL;
    if (te_graph_compile_ex(g, p, &o, &e))
        fail_msg("%s", te_graph_errmsg(g));
    int ng = te_fuse_plan_group_count(p), shared = 0;
    for (int w = 0; w < te_graph_exec_wave_count(e); w++) {
        int sum = 0, n = 0;
        for (int gi = 0; gi < ng; gi++)
            if (te_graph_exec_group_wave(e, gi) == w) {
                sum += te_graph_exec_group_threads(e, gi);
                n += te_graph_exec_group_threads(e, gi) > 0;
            }
        assert_int_equal(sum, 2);
        shared += n > 1;
    }
    assert_true(shared >= 1);
    /* A view runs nothing: it joins the wave of the group before it. */
    int gx = group_of_value(g, p, "xr");
    assert_int_equal(te_graph_exec_group_wave(e, gx), te_graph_exec_group_wave(e, gx - 1));
    float x[8 * 16], out[4][128];
    tt_fill_f32(&g_rng, x, 8 * 16);
    const void *inp[1] = {x};
    for (int run = 0; run < 3; run++) {
        for (int j = 0; j < 4; j++)
            tt_poison_f32(out[j], 128);
        if (te_graph_run(e, inp, (void *const[]){out[0], out[1], out[2], out[3]}))
            fail_msg("%s", te_graph_errmsg(g));
        for (int j = 0; j < te_graph_output_count(g); j++) {
            int v = te_graph_output_value(g, j);
            size_t n = (size_t)te_graph_value_numel(g, v);
            double want[128], *wp = want;
            assert_true(n <= 128);
            assert_int_equal(te_graph_eval_reference(g, inp, 1, &v, &wp), TE_OK);
            double err = tt_max_rel_err_f32(out[j], want, n);
            if (!(err <= 1e-5))
                fail_msg("output '%s': relative error %g", te_graph_value_name(g, v), err);
        }
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static int setup(void **state)
{
    (void)state;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    g_rules = te_fuse_rules_load(path, err, sizeof err);
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
    tt_rng_seed(&g_rng, tt_seed(14));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_bn_relu_folded_runs_as_one_kernel),
        cmocka_unit_test(test_matmul_bias_gelu_runs_as_one_kernel),
        cmocka_unit_test(test_constant_weights_are_packed_in_panels),
        cmocka_unit_test(test_qkv_runs_as_one_kernel_with_three_outputs),
        cmocka_unit_test(test_mlp_gate_runs_as_one_kernel),
        cmocka_unit_test(test_residual_layer_norm_writes_both_outputs),
        cmocka_unit_test(test_layer_norm_qkv_runs_as_one_kernel),
        cmocka_unit_test(test_small_encoder_block_end_to_end),
        cmocka_unit_test(test_small_resnet_block_end_to_end),
        cmocka_unit_test(test_reshapes_run_as_views_of_their_roots),
        cmocka_unit_test(test_views_in_concurrent_waves_match_the_reference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
