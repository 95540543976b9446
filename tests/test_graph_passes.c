/* Graph passes: dead-node elimination, common subexpression elimination, constant folding of
 * weight-only subgraphs and of batch norm into convolution and matmul weights. Each test checks
 * the structure after the pass and that the graph computes the same numbers (float64 reference
 * on random inputs, relative error <= 1e-5). */
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
#include <unistd.h>

#include "tessera/graph.h"
#include "testutil.h"

static tt_rng g_rng;

/* Evaluates output `name` of g on the random input data `x` (NaN-poisoned first). */
static double *eval(te_graph *g, const char *name, const float *x)
{
    int v = te_graph_find(g, name);
    assert_true(v >= 0);
    size_t n = (size_t)te_graph_value_numel(g, v);
    double *out = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        out[i] = NAN;
    int rc = te_graph_eval_reference(g, (const void *[]){x}, 1, &v, (double *[]){out});
    if (rc)
        fail_msg("%s", te_graph_errmsg(g));
    return out;
}

static double max_rel(const double *a, const double *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

static te_graph *parse(const char *text)
{
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, text, "test.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

static int count_op(const te_graph *g, const char *op)
{
    int c = 0;
    for (int n = 0; n < te_graph_node_count(g); n++)
        c += strcmp(te_graph_node_op(g, n), op) == 0;
    return c;
}

static float *rnd(size_t n)
{
    float *p = malloc(sizeof(float) * n);
    tt_fill_f32(&g_rng, p, n);
    return p;
}

/* Runs pass(g) and checks output `out` before and after. */
static void check_same(te_graph *g, const char *out, size_t nin, int (*pass)(te_graph *, int *),
                       int *count)
{
    float *x = rnd(nin);
    int v = te_graph_find(g, out);
    size_t n = (size_t)te_graph_value_numel(g, v);
    double *before = eval(g, out, x);
    int rc = pass(g, count);
    if (rc)
        fail_msg("%s", te_graph_errmsg(g));
    double *after = eval(g, out, x);
    double e = max_rel(after, before, n);
    if (!(e <= 1e-5))
        fail_msg("output '%s' changed by the pass: relative error %g", out, e);
    free(x), free(before), free(after);
}

static void test_dce_removes_nodes_no_output_reads(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[4,8]\n"
                        "const w f32[8,8] random seed=1\n"
                        "const unused f32[3] random seed=2\n"
                        "a = relu(x)\n"
                        "dead1 = matmul(x, w)\n"
                        "dead2 = gelu(dead1)\n"
                        "y = tanh(a)\n"
                        "output y\n");
    int removed = -1;
    check_same(g, "y", 32, te_graph_dce, &removed);
    assert_int_equal(removed, 2);
    assert_int_equal(te_graph_node_count(g), 2);
    assert_true(te_graph_find(g, "dead2") < 0);
    assert_true(te_graph_find(g, "w") < 0); /* constants nobody reads go too */
    assert_true(te_graph_find(g, "unused") < 0);
    assert_true(te_graph_find(g, "x") >= 0); /* inputs stay */
    te_graph_free(g);
}

static void test_cse_merges_equal_nodes_and_constants(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[4,8]\n"
                        "const w1 f32[8,6] random seed=7\n"
                        "const w2 f32[8,6] random seed=7\n" /* same data as w1 */
                        "const w3 f32[8,6] random seed=8\n"
                        "a = matmul(x, w1)\n"
                        "b = matmul(x, w2)\n"
                        "c = matmul(x, w3)\n"
                        "s = add(a, b)\n"
                        "y = add(s, c)\n"
                        "output y\n");
    int merged = -1;
    check_same(g, "y", 32, te_graph_cse, &merged);
    assert_int_equal(merged, 1);
    assert_int_equal(count_op(g, "matmul"), 2);
    int s = te_graph_find(g, "s");
    int p = te_graph_value_producer(g, s);
    assert_int_equal(te_graph_node_input(g, p, 0), te_graph_node_input(g, p, 1));
    assert_true(te_graph_find(g, "w2") < 0);
    te_graph_free(g);
}

static void test_fold_evaluates_weight_only_subgraphs(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[4,8]\n"
                        "const w f32[6,8] random seed=1\n"
                        "const scale f32[6,8] random seed=2\n"
                        "ws = mul(w, scale)\n"
                        "wt = transpose(ws)\n"
                        "y = matmul(x, wt)\n"
                        "output y\n");
    int folded = -1;
    check_same(g, "y", 32, te_graph_fold_constants, &folded);
    assert_int_equal(folded, 2);
    assert_int_equal(te_graph_node_count(g), 1);
    int wt = te_graph_find(g, "wt");
    assert_int_equal(te_graph_value_kind_of(g, wt), TE_GRAPH_CONST);
    assert_true(te_graph_find(g, "w") < 0);
    te_graph_free(g);
}

static const char *k_conv_bn_relu = "input x f32[2,3,10,10]\n"
                                    "const w f32[8,3,3,3] random seed=1\n"
                                    "const gamma f32[8] random seed=2 lo=0.5 hi=1.5\n"
                                    "const beta f32[8] random seed=3\n"
                                    "const mean f32[8] random seed=4\n"
                                    "const var f32[8] random seed=5 lo=0.5 hi=2\n"
                                    "c = conv2d(x, w) stride=1,pad=1\n"
                                    "bn = batch_norm(c, gamma, beta, mean, var) eps=1e-5\n"
                                    "y = relu(bn)\n"
                                    "output y\n";

static void test_fold_batch_norm_into_conv2d_weights_and_bias(void **state)
{
    (void)state;
    te_graph *g = parse(k_conv_bn_relu);
    int folded = -1;
    check_same(g, "y", 2 * 3 * 10 * 10, te_graph_fold_constants, &folded);
    assert_int_equal(folded, 1);
    assert_int_equal(count_op(g, "batch_norm"), 0);
    assert_int_equal(te_graph_node_count(g), 3);
    assert_string_equal(te_graph_node_op(g, 0), "conv2d");
    assert_string_equal(te_graph_node_op(g, 1), "add");
    assert_string_equal(te_graph_node_op(g, 2), "relu");
    int bias = te_graph_node_input(g, 1, 1);
    assert_int_equal(te_graph_value_ndim(g, bias), 3); /* [8,1,1]: broadcasts over NCHW */
    assert_int_equal(te_graph_value_shape(g, bias)[0], 8);
    assert_true(te_graph_find(g, "gamma") < 0);
    te_graph_free(g);
}

static void test_fold_batch_norm_into_matmul(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[5,16]\n"
                        "const w f32[16,12] random seed=1\n"
                        "const gamma f32[12] random seed=2 lo=0.5 hi=1.5\n"
                        "const beta f32[12] random seed=3\n"
                        "const mean f32[12] random seed=4\n"
                        "const var f32[12] random seed=5 lo=0.5 hi=2\n"
                        "h = matmul(x, w)\n"
                        "bn = batch_norm(h, gamma, beta, mean, var) axis=1\n"
                        "y = gelu(bn)\n"
                        "output y\n");
    int folded = -1;
    check_same(g, "y", 80, te_graph_fold_constants, &folded);
    assert_int_equal(folded, 1);
    assert_int_equal(count_op(g, "batch_norm"), 0);
    assert_int_equal(count_op(g, "add"), 1);
    te_graph_free(g);
}

static void test_batch_norm_stays_when_the_conv_output_has_other_readers(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[1,3,6,6]\n"
                        "const w f32[4,3,1,1] random seed=1\n"
                        "const gamma f32[4] random seed=2\n"
                        "const beta f32[4] random seed=3\n"
                        "const mean f32[4] random seed=4\n"
                        "const var f32[4] random seed=5 lo=0.5 hi=2\n"
                        "c = conv2d(x, w)\n"
                        "bn = batch_norm(c, gamma, beta, mean, var)\n"
                        "y = add(bn, c)\n"
                        "output y\n");
    int folded = -1;
    check_same(g, "y", 108, te_graph_fold_constants, &folded);
    assert_int_equal(folded, 0);
    assert_int_equal(count_op(g, "batch_norm"), 1);
    te_graph_free(g);
}

static void test_optimize_runs_the_passes_in_order(void **state)
{
    (void)state;
    te_graph *g = parse(k_conv_bn_relu);
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(te_graph_optimize(g, f), TE_OK);
    fclose(f);
    assert_non_null(strstr(buf, "dce: 0 nodes removed\ncse: 0 nodes merged\nfuse_qdq: 0 matmuls "
                                "onto integer arithmetic\nfold_constants: 1 nodes folded\n"));
    free(buf);
    te_graph_free(g);
}

static void test_folded_constants_print_to_files_and_parse_back(void **state)
{
    (void)state;
    te_graph *g = parse(k_conv_bn_relu);
    assert_int_equal(te_graph_optimize(g, NULL), TE_OK);
    char dir[] = "/tmp/test_graph_passes_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(te_graph_print(g, f, dir), TE_OK);
    fclose(f);
    assert_non_null(strstr(buf, "file="));
    te_graph *g2 = parse(buf);
    float *x = rnd(2 * 3 * 10 * 10);
    double *a = eval(g, "y", x), *b = eval(g2, "y", x);
    assert_memory_equal(a, b, sizeof(double) * 2 * 8 * 10 * 10);
    for (int v = 0; v < te_graph_value_count(g); v++)
        if (te_graph_value_kind_of(g, v) == TE_GRAPH_CONST) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s.bin", dir, te_graph_value_name(g, v));
            remove(path);
        }
    rmdir(dir);
    free(buf), free(x), free(a), free(b);
    te_graph_free(g2);
    te_graph_free(g);
}

/* Runs te_graph_move_reshapes and checks that output `out` is unchanged bit for bit (the
 * rewritten graph computes the same elements in the same order). */
static void check_moved(te_graph *g, const char *out, size_t nin, int *count)
{
    float *x = rnd(nin);
    int v = te_graph_find(g, out);
    size_t n = (size_t)te_graph_value_numel(g, v);
    double *before = eval(g, out, x);
    if (te_graph_move_reshapes(g, count))
        fail_msg("%s", te_graph_errmsg(g));
    double *after = eval(g, out, x);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&after[i], &before[i], sizeof(double)))
            fail_msg("output '%s' element %zu changed by the pass: %.17g, was %.17g", out, i,
                     after[i], before[i]);
    free(x), free(before), free(after);
}

/* The op of the first node reading value `name`, or "". */
static const char *reader_op(te_graph *g, const char *name)
{
    int v = te_graph_find(g, name);
    assert_true(v >= 0);
    for (int n = 0; n < te_graph_node_count(g); n++)
        for (int i = 0; i < te_graph_node_ninputs(g, n); i++)
            if (te_graph_node_input(g, n, i) == v)
                return te_graph_node_op(g, n);
    return "";
}

/* What the ONNX importer writes for a 3-D MatMul (rows reshape, matmul, reshape back), with a
 * bias, GELU, a second product, a residual add of the graph input and a layer norm: the
 * reshapes sink to the end, so each product meets its bias. */
static void test_move_reshapes_lets_matmuls_meet_their_epilogues(void **state)
{
    (void)state;
    te_graph *g = parse("input x f32[2,8,16]\n"
                        "const w1 f32[16,12] random seed=1\n"
                        "const b1 f32[12] random seed=2\n"
                        "const w2 f32[12,16] random seed=3\n"
                        "const b2 f32[1,16] random seed=4\n"
                        "const gam f32[16] random seed=5\n"
                        "const bet f32[16] random seed=6\n"
                        "r1 = reshape(x) shape=16:16\n"
                        "m1 = matmul(r1, w1)\n"
                        "h1 = reshape(m1) shape=2:8:12\n"
                        "a1 = add(h1, b1)\n"
                        "g1 = gelu(a1)\n"
                        "r2 = reshape(g1) shape=16:12\n"
                        "m2 = matmul(r2, w2)\n"
                        "h2 = reshape(m2) shape=2:8:16\n"
                        "a2 = add(h2, b2)\n"
                        "res = add(a2, x)\n"
                        "y = layer_norm(res, gam, bet) axis=2\n"
                        "output y\n");
    int moved = -1;
    check_moved(g, "y", 2 * 8 * 16, &moved);
    assert_true(moved > 0);
    assert_string_equal(reader_op(g, "m1"), "add");
    assert_string_equal(reader_op(g, "m2"), "add");
    /* One reshape of the input (rows, shared by the residual after CSE would merge them) and
     * one at the output: nothing between the products. */
    int y = te_graph_find(g, "y");
    assert_true(y >= 0);
    assert_string_equal(te_graph_node_op(g, te_graph_value_producer(g, y)), "reshape");
    assert_true(count_op(g, "reshape") <= 3);
    te_graph_free(g);
}

/* Attention's head split as front ends write it: a transposed k viewed as 3-D, then
 * transposed back and viewed as 4-D; the two transposes compose across the unit reshapes. */
static void test_move_reshapes_composes_transposes(void **state)
{
    (void)state;
    te_graph *g = parse("input k f32[1,8,64]\n"
                        "kh = reshape(k) shape=1:8:4:16\n"
                        "kt = transpose(kh) perm=0:2:3:1\n"
                        "k3 = reshape(kt) shape=4:16:8\n"
                        "kb = transpose(k3) perm=0:2:1\n"
                        "k4 = reshape(kb) shape=1:4:8:16\n"
                        "y = relu(k4)\n"
                        "output y\n");
    int moved = -1;
    check_moved(g, "y", 8 * 64, &moved);
    assert_int_equal(count_op(g, "transpose"), 1);
    for (int n = 0; n < te_graph_node_count(g); n++)
        if (!strcmp(te_graph_node_op(g, n), "transpose"))
            assert_string_equal(te_graph_node_attrs(g, n), "perm=0:2:1:3");
    /* Transposes that cancel go altogether, and so do reshapes to the same shape. */
    te_graph *h = parse("input x f32[3,5,7]\n"
                        "t1 = transpose(x) perm=2:0:1\n"
                        "t2 = transpose(t1) perm=1:2:0\n"
                        "r = reshape(t2) shape=3:5:7\n"
                        "y = tanh(r)\n"
                        "output y\n");
    check_moved(h, "y", 3 * 5 * 7, &moved);
    assert_int_equal(count_op(h, "transpose"), 0);
    assert_int_equal(count_op(h, "reshape"), 0);
    assert_int_equal(te_graph_node_count(h), 1);
    te_graph_free(h);
    te_graph_free(g);
}

/* Where moving would change values, nothing moves: an operand broadcast along an axis the
 * reshape changes, a softmax over an axis that is not the last, a full-shape operand computed
 * by another node, batch norm (a channel axis), a graph output's identity reshape. */
static void test_move_reshapes_refuses_what_would_change_values(void **state)
{
    (void)state;
    static const char *const graphs[] = {
        "input x f32[4,6]\nconst c f32[2,1] random seed=1\n"
        "r = reshape(x) shape=2:12\ny = add(r, c)\noutput y\n",
        "input x f32[4,6]\nr = reshape(x) shape=2:12\ny = softmax(r) axis=0\noutput y\n",
        "input x f32[4,6]\nconst z f32[2,12] random seed=3\nt = tanh(z)\n"
        "r = reshape(x) shape=2:12\ny = add(r, t)\noutput y\n",
        "input x f32[2,3,4,4]\nconst ga f32[3] random seed=1\nconst be f32[3] random seed=2\n"
        "const mu f32[3] random seed=3\nconst va f32[3] random seed=4 lo=0.5 hi=2\n"
        "r = reshape(x) shape=2:3:16:1\ny = batch_norm(r, ga, be, mu, va)\noutput y\n",
        "input x f32[4,6]\nt = tanh(x)\ny = reshape(t) shape=4:6\noutput y\n",
    };
    for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++) {
        te_graph *g = parse(graphs[i]);
        int nodes = te_graph_node_count(g), moved = -1;
        int v = te_graph_input_value(g, 0);
        check_moved(g, "y", (size_t)te_graph_value_numel(g, v), &moved);
        if (moved != 0 || te_graph_node_count(g) != nodes)
            fail_msg("graph %zu: %d rewrites, %d nodes (was %d)", i, moved, te_graph_node_count(g),
                     nodes);
        te_graph_free(g);
    }
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(12));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dce_removes_nodes_no_output_reads),
        cmocka_unit_test(test_cse_merges_equal_nodes_and_constants),
        cmocka_unit_test(test_fold_evaluates_weight_only_subgraphs),
        cmocka_unit_test(test_fold_batch_norm_into_conv2d_weights_and_bias),
        cmocka_unit_test(test_fold_batch_norm_into_matmul),
        cmocka_unit_test(test_batch_norm_stays_when_the_conv_output_has_other_readers),
        cmocka_unit_test(test_optimize_runs_the_passes_in_order),
        cmocka_unit_test(test_folded_constants_print_to_files_and_parse_back),
        cmocka_unit_test(test_move_reshapes_lets_matmuls_meet_their_epilogues),
        cmocka_unit_test(test_move_reshapes_composes_transposes),
        cmocka_unit_test(test_move_reshapes_refuses_what_would_change_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
