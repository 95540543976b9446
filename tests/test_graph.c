/* Graphs: construction through the C API and the text form, checking with errors that name the
 * node and input, every operator's pattern kind, and reference evaluation. */
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
#include "tessera/ops.h"
#include "testutil.h"

static tt_rng g_rng;

static void test_c_api_builds_matmul_bias_gelu_with_shapes(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){4, 8});
    int w = te_graph_const_random(g, "w", TE_F32, 2, (int64_t[]){8, 6}, 1, -1, 1);
    int b = te_graph_const_random(g, "b", TE_F32, 1, (int64_t[]){6}, 2, -1, 1);
    int h = te_graph_node(g, "matmul", NULL, 2, (int[]){x, w}, "h");
    int hb = te_graph_node(g, "add", NULL, 2, (int[]){h, b}, "hb");
    int y = te_graph_node(g, "gelu", NULL, 1, (int[]){hb}, "y");
    assert_int_equal(te_graph_output(g, y), TE_OK);
    assert_int_equal(te_graph_errcode(g), TE_OK);
    assert_int_equal(te_graph_node_count(g), 3);
    assert_int_equal(te_graph_value_ndim(g, y), 2);
    assert_int_equal(te_graph_value_shape(g, y)[0], 4);
    assert_int_equal(te_graph_value_shape(g, y)[1], 6);
    assert_int_equal(te_graph_value_producer(g, y), 2);
    assert_int_equal(te_graph_value_use_count(g, h), 1);
    assert_string_equal(te_graph_node_op(g, 0), "matmul");
    assert_int_equal(te_graph_node_flops(g, 0), 2 * 4 * 6 * 8);

    /* Reference evaluation agrees with a hand-written loop. */
    float xd[32];
    tt_fill_f32(&g_rng, xd, 32);
    double out[24];
    for (int i = 0; i < 24; i++)
        out[i] = NAN;
    assert_int_equal(te_graph_eval_reference(g, (const void *[]){xd}, 1, &y, (double *[]){out}),
                     TE_OK);
    const float *wd = te_graph_value_data(g, w), *bd = te_graph_value_data(g, b);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) {
            double s = 0;
            for (int k = 0; k < 8; k++)
                s += (double)xd[i * 8 + k] * wd[k * 6 + j];
            s = (float)(s + bd[j]);
            double want = 0.5 * s * (1 + erf(s / sqrt(2.0)));
            assert_true(fabs(out[i * 6 + j] - want) < 1e-5);
        }
    te_graph_free(g);
}

static void test_errors_name_the_node_and_the_input(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 4, (int64_t[]){1, 3, 8, 8});
    int w = te_graph_const_random(g, "w", TE_F32, 4, (int64_t[]){4, 5, 3, 3}, 1, -1, 1);
    int y = te_graph_node(g, "conv2d", "pad=1", 2, (int[]){x, w}, "y");
    assert_true(y < 0);
    assert_int_equal(te_graph_errcode(g), TE_ERR_SHAPE);
    assert_non_null(strstr(te_graph_errmsg(g), "node 'y' (conv2d)"));
    assert_non_null(strstr(te_graph_errmsg(g), "'x'"));
    assert_non_null(strstr(te_graph_errmsg(g), "'w'"));
    /* A later node given the failed id keeps the first message. */
    assert_true(te_graph_node(g, "relu", NULL, 1, (int[]){y}, "r") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "node 'y'"));
    te_graph_clear_error(g);

    int wd = te_graph_const_random(g, "wd", TE_F64, 4, (int64_t[]){4, 3, 3, 3}, 1, -1, 1);
    assert_true(te_graph_node(g, "conv2d", NULL, 2, (int[]){x, wd}, "y2") < 0);
    assert_int_equal(te_graph_errcode(g), TE_ERR_DTYPE);
    assert_non_null(strstr(te_graph_errmsg(g), "input 2 'wd' has dtype f64"));
    te_graph_clear_error(g);

    assert_true(te_graph_node(g, "conv2d", NULL, 1, (int[]){x}, "y3") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "takes X,W, 1 inputs given"));
    te_graph_clear_error(g);
    assert_true(te_graph_node(g, "conv2d", "strid=2", 2, (int[]){x, w}, "y4") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "unknown attribute 'strid'"));
    te_graph_clear_error(g);
    assert_true(te_graph_node(g, "convolution", NULL, 2, (int[]){x, w}, "y5") < 0);
    assert_int_equal(te_graph_errcode(g), TE_ERR_NOT_FOUND);
    te_graph_clear_error(g);
    assert_true(te_graph_input(g, "x", TE_F32, 1, (int64_t[]){3}) < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "already used"));
    te_graph_free(g);
}

static const char *k_block = "# conv + bn + relu, NCHW\n"
                             "input x f32[1,3,8,8]\n"
                             "const w f32[4,3,3,3] random seed=1\n"
                             "const gamma f32[4] random seed=2 lo=0.5 hi=1.5\n"
                             "const beta f32[4] random seed=3\n"
                             "const mean f32[4] fill=0.25\n"
                             "const var f32[4] random seed=5 lo=0.5 hi=2\n"
                             "c = conv2d(x, w) stride=1,pad=1\n"
                             "bn = batch_norm(c, gamma, beta, mean, var) eps=1e-5\n"
                             "y = relu(bn)   # activation\n"
                             "output y\n";

static void test_text_form_parses_and_prints_back(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    assert_int_equal(te_graph_parse(g, k_block, "block.graph"), TE_OK);
    int y = te_graph_find(g, "y");
    assert_true(y >= 0);
    assert_int_equal(te_graph_value_shape(g, y)[3], 8);
    assert_int_equal(te_graph_output_count(g), 1);
    const float *mean = te_graph_value_data(g, te_graph_find(g, "mean"));
    assert_true(mean[3] == 0.25f);
    char *buf;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(te_graph_print(g, f, NULL), TE_OK);
    fclose(f);
    assert_non_null(strstr(buf, "c = conv2d(x, w) stride=1,pad=1\n"));
    /* The printed form parses into the same graph. */
    te_graph *g2 = te_graph_create();
    assert_int_equal(te_graph_parse(g2, buf, "printed"), TE_OK);
    assert_int_equal(te_graph_node_count(g2), 3);
    float xd[192];
    tt_fill_f32(&g_rng, xd, 192);
    double a[256], b[256];
    int y2 = te_graph_find(g2, "y");
    assert_int_equal(te_graph_eval_reference(g, (const void *[]){xd}, 1, &y, (double *[]){a}), 0);
    assert_int_equal(te_graph_eval_reference(g2, (const void *[]){xd}, 1, &y2, (double *[]){b}), 0);
    assert_memory_equal(a, b, sizeof(double) * 256);
    free(buf);
    te_graph_free(g2);
    te_graph_free(g);
}

static void expect_parse_error(const char *text, const char *needle)
{
    te_graph *g = te_graph_create();
    assert_true(te_graph_parse(g, text, "bad.graph") < 0);
    if (!strstr(te_graph_errmsg(g), needle))
        fail_msg("'%s' not in '%s'", needle, te_graph_errmsg(g));
    te_graph_free(g);
}

static void test_text_form_errors_carry_file_and_line(void **state)
{
    (void)state;
    expect_parse_error("input x f32[2,3]\ny = relu(z)\n", "bad.graph:2: node 'y' input 1: no value "
                                                          "named 'z'");
    expect_parse_error("input x f33[2,3]\n", "bad.graph:1: expected a dtype");
    expect_parse_error("input x f32[2,3\n", "bad.graph:1: expected ',' or ']'");
    expect_parse_error("\n\ninput x f32[2,3]\nconst w f32[4,4]\ny = matmul(x, w)\n",
                       "bad.graph:5: node 'y' (matmul)");
    expect_parse_error("input x f32[2,3]\ny = relu(x) foo bar\n", "bad.graph:2: node 'y': "
                                                                  "attributes");
    expect_parse_error("const w f32[2] file=/nonexistent/w.bin\n", "bad.graph:1: const 'w': file");
    expect_parse_error("input x f32[2,0]\n", "bad.graph:1: input 'x': extent 0");
    expect_parse_error("x = \n", "bad.graph:1: node 'x': expected an operator");
    expect_parse_error("output q\n", "bad.graph:1: output: no value named 'q'");
}

static void test_multi_output_qkv_node(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    assert_int_equal(te_graph_parse(g,
                                    "input x f32[4,8]\n"
                                    "const wq f32[8,8] random seed=1\n"
                                    "const wk f32[8,8] random seed=2\n"
                                    "const wv f32[8,4] random seed=3\n"
                                    "q, k, v = qkv_projection(x, wq, wk, wv)\n"
                                    "output q, k, v\n",
                                    NULL),
                     TE_OK);
    int v = te_graph_find(g, "v");
    assert_int_equal(te_graph_value_shape(g, v)[1], 4);
    assert_int_equal(te_graph_output_count(g), 3);
    assert_int_equal(te_graph_node_noutputs(g, 0), 3);
    te_graph_free(g);
}

static void test_every_registry_operator_has_a_pattern_kind(void **state)
{
    (void)state;
    int n = 0;
    const te_op_info *ops = te_op_list(&n);
    assert_true(n > 20);
    for (int i = 0; i < n; i++) {
        int k = te_graph_op_kind(ops[i].name);
        if (k < 0)
            fail_msg("registry operator '%s' has no pattern kind in graph/ops.c", ops[i].name);
        assert_non_null(te_op_kind_name((te_op_kind)k));
        assert_non_null(te_graph_op_attrs(ops[i].name));
    }
    assert_int_equal(te_graph_op_kind("matmul"), TE_KIND_OUT_EWISE_FUSABLE);
    assert_int_equal(te_graph_op_kind("conv2d"), TE_KIND_OUT_EWISE_FUSABLE);
    assert_int_equal(te_graph_op_kind("relu"), TE_KIND_ELEMWISE);
    assert_int_equal(te_graph_op_kind("add"), TE_KIND_BROADCAST);
    assert_int_equal(te_graph_op_kind("transpose"), TE_KIND_INJECTIVE);
    assert_int_equal(te_graph_op_kind("layer_norm"), TE_KIND_REDUCTION);
    assert_int_equal(te_graph_op_kind("qkv_projection"), TE_KIND_OPAQUE);
    assert_int_equal(te_graph_op_kind("batch_norm"), TE_KIND_BROADCAST);
    assert_int_equal(te_graph_op_kind("nonsense"), TE_ERR_NOT_FOUND);
    te_op_kind k;
    assert_int_equal(te_op_kind_parse("out_ewise", &k), TE_OK);
    assert_int_equal(k, TE_KIND_OUT_EWISE_FUSABLE);
}

static void test_random_mutations_of_the_text_form_never_crash(void **state)
{
    (void)state;
    size_t n = strlen(k_block);
    char *mut = malloc(n + 1);
    const char alphabet[] = "()[],=#\n xyzw0123456789-.f_";
    int failed = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(mut, k_block, n + 1);
        for (int e = 0; e < 1 + (int)tt_rng_int(&g_rng, 3); e++)
            mut[tt_rng_int(&g_rng, (int64_t)n)] = alphabet[tt_rng_int(&g_rng, sizeof alphabet - 1)];
        te_graph *g = te_graph_create();
        if (te_graph_parse(g, mut, "mut.graph")) {
            failed++;
            assert_true(strncmp(te_graph_errmsg(g), "mut.graph:", 10) == 0);
        }
        te_graph_free(g);
    }
    assert_true(failed > 0);
    free(mut);
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(11));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c_api_builds_matmul_bias_gelu_with_shapes),
        cmocka_unit_test(test_errors_name_the_node_and_the_input),
        cmocka_unit_test(test_text_form_parses_and_prints_back),
        cmocka_unit_test(test_text_form_errors_carry_file_and_line),
        cmocka_unit_test(test_multi_output_qkv_node),
        cmocka_unit_test(test_every_registry_operator_has_a_pattern_kind),
        cmocka_unit_test(test_random_mutations_of_the_text_form_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
