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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
