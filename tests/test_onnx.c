/* te_graph_from_onnx: models written here with the generated protobuf-c structs (no network,
 * no Python) are imported; the structure is checked, the float64 reference evaluation of the
 * graph is compared with a direct C computation of the model, and the compiled graph with the
 * reference. Then every kind of bad model is refused with a clear message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onnx_testlib.h"
#include "tessera/graph.h"
#include "tessera/onnx.h"
#include "testutil.h"

static om_model M;
static tt_rng g_rng;

static const char *path_of(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", TE_ONNX_TEST_DIR, name);
    return buf;
}

/* Also keeps the model as a fuzz seed when $TE_ONNX_WRITE_CORPUS names a directory. */
static const char *write_model(const char *name, size_t truncate_to)
{
    const char *dir = getenv("TE_ONNX_WRITE_CORPUS");
    if (dir && *dir) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        om_write(&M, p, truncate_to);
    }
    const char *p = path_of(name);
    assert_int_equal(om_write(&M, p, truncate_to), 0);
    return p;
}

static te_graph *import_ok(const char *path, const char *opts)
{
    te_graph *g = NULL;
    char err[1024];
    int rc = te_graph_from_onnx(path, opts, &g, err, sizeof err);
    if (rc)
        fail_msg("import failed (%d): %s", rc, err);
    assert_non_null(g);
    return g;
}

static void import_fails(const char *path, const char *opts, const char *want)
{
    te_graph *g = (te_graph *)1;
    char err[1024];
    int rc = te_graph_from_onnx(path, opts, &g, err, sizeof err);
    if (rc >= 0)
        fail_msg("%s: import succeeded, expected an error with '%s'", path, want);
    assert_null(g);
    if (!strstr(err, want))
        fail_msg("%s: error '%s' does not mention '%s'", path, err, want);
    print_message("refused as expected: %s\n", err);
}

static int count_op(const te_graph *g, const char *op)
{
    int k = 0;
    for (int n = 0; n < te_graph_node_count(g); n++)
        k += !strcmp(te_graph_node_op(g, n), op);
    return k;
}

static void fill(float *p, size_t n) { tt_fill_f32(&g_rng, p, n); }

/* The graph's output j against want (float64 reference), then compiled against the reference. */
static void check_numbers(te_graph *g, const void *const *inputs, int nout, double *const *want)
{
    for (int j = 0; j < nout; j++) {
        int v = te_graph_output_value(g, j);
        size_t n = (size_t)te_graph_value_numel(g, v);
        double *ref = malloc(n * sizeof *ref);
        if (te_graph_eval_reference(g, inputs, 1, &v, &ref))
            fail_msg("%s", te_graph_errmsg(g));
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double e = fabs(ref[i] - want[j][i]) / fmax(1.0, fabs(want[j][i]));
            worst = e > worst || isnan(e) ? e : worst;
        }
        if (!(worst <= 1e-5))
            fail_msg("output %d '%s': reference vs direct computation: rel err %g", j,
                     te_graph_value_name(g, v), worst);
        free(ref);
    }
    te_fuse_plan *p = te_graph_fuse(g, NULL, NULL);
    if (!p)
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    float *out[8];
    for (int j = 0; j < nout; j++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_output_value(g, j));
        out[j] = malloc(n * sizeof(float));
        tt_poison_f32(out[j], n);
    }
    if (te_graph_run(e, inputs, (void *const *)out))
        fail_msg("%s", te_graph_errmsg(g));
    for (int j = 0; j < nout; j++) {
        int v = te_graph_output_value(g, j);
        size_t n = (size_t)te_graph_value_numel(g, v);
        double *ref = malloc(n * sizeof *ref);
        assert_int_equal(te_graph_eval_reference(g, inputs, 1, &v, &ref), 0);
        double err = tt_max_rel_err_f32(out[j], ref, n);
        if (!(err <= 1e-4))
            fail_msg("output %d: compiled vs reference: rel err %g", j, err);
        print_message("output '%s': compiled (%d kernels) vs reference rel err %.2g\n",
                      te_graph_value_name(g, v), te_graph_exec_kernel_count(e), err);
        free(ref);
        free(out[j]);
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
}

/* ---- An MLP with the exporters' erf GELU and a softmax head ------------------------------ */

#define MB 3
static float mx[MB * 4], w1[4 * 8], b1[8], w2t[3 * 8], b2[3];

static void build_mlp(void)
{
    om_reset(&M);
    fill(w1, 32);
    fill(b1, 8);
    fill(w2t, 24);
    fill(b2, 3);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){0, 4}, (const char *[]){"batch", NULL});
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){0, 3}, (const char *[]){"batch", NULL});
    M.inits[M.ni++] = om_tensor_f("fc1.weight", 2, (int64_t[]){4, 8}, w1, 1);
    M.inits[M.ni++] = om_tensor_f("fc1.bias", 1, (int64_t[]){8}, b1, 0);
    M.inits[M.ni++] = om_tensor_f("fc2.weight", 2, (int64_t[]){3, 8}, w2t, 1);
    M.inits[M.ni++] = om_tensor_f("fc2.bias", 1, (int64_t[]){3}, b2, 1);
    M.inits[M.ni++] = om_tensor_f("one", 0, NULL, (float[]){1.0f}, 1);
    M.inits[M.ni++] = om_tensor_f("half", 0, NULL, (float[]){0.5f}, 0);
    om_node(&M, "Constant", "sqrt2", "", "/gelu/sqrt2",
            om_attr_t("value", om_tensor_f("", 0, NULL, (float[]){1.4142135f}, 1)), NULL);
    om_node(&M, "MatMul", "/fc1/MatMul", "x,fc1.weight", "/fc1/mm", NULL);
    om_node(&M, "Add", "/fc1/Add", "/fc1/mm,fc1.bias", "/fc1/out", NULL);
    om_node(&M, "Div", "/gelu/Div", "/fc1/out,/gelu/sqrt2", "/gelu/div", NULL);
    om_node(&M, "Erf", "/gelu/Erf", "/gelu/div", "/gelu/erf", NULL);
    om_node(&M, "Add", "/gelu/Add", "/gelu/erf,one", "/gelu/add", NULL);
    om_node(&M, "Mul", "/gelu/Mul", "/fc1/out,/gelu/add", "/gelu/mul", NULL);
    om_node(&M, "Mul", "/gelu/Mul_1", "/gelu/mul,half", "/gelu/out", NULL);
    om_node(&M, "Gemm", "/fc2/Gemm", "/gelu/out,fc2.weight,fc2.bias", "logits",
            om_attr_i("transB", 1), NULL);
    om_node(&M, "Softmax", "/softmax", "logits", "y", om_attr_i("axis", -1), NULL);
}

static void mlp_direct(double *y)
{
    for (int r = 0; r < MB; r++) {
        double h[8], z[3], mx_ = -INFINITY, s = 0;
        for (int j = 0; j < 8; j++) {
            double a = b1[j];
            for (int k = 0; k < 4; k++)
                a += (double)mx[r * 4 + k] * w1[k * 8 + j];
            h[j] = 0.5 * a * (1 + erf(a / sqrt(2.0)));
        }
        for (int j = 0; j < 3; j++) {
            z[j] = b2[j];
            for (int k = 0; k < 8; k++)
                z[j] += h[k] * w2t[j * 8 + k];
            mx_ = fmax(mx_, z[j]);
        }
        for (int j = 0; j < 3; j++)
            s += exp(z[j] - mx_);
        for (int j = 0; j < 3; j++)
            y[r * 3 + j] = exp(z[j] - mx_) / s;
    }
}

static void test_mlp_gelu(void **state)
{
    (void)state;
    build_mlp();
    const char *p = write_model("mlp_gelu.onnx", 0);
    te_onnx_info info;
    te_graph *g = NULL;
    char err[512];
    if (te_graph_from_onnx_ex(p, "batch=3", &g, &info, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(info.opset, 17);
    assert_int_equal(info.n_onnx_nodes, 10);
    assert_int_equal(count_op(g, "gelu"), 1);
    assert_int_equal(count_op(g, "div"), 0); /* the erf pattern left nothing behind */
    assert_int_equal(count_op(g, "matmul"), 2);
    assert_int_equal(count_op(g, "softmax"), 1);
    assert_int_equal(te_graph_input_count(g), 1);
    int x = te_graph_input_value(g, 0);
    assert_int_equal(te_graph_value_shape(g, x)[0], MB);
    fill(mx, sizeof mx / sizeof mx[0]);
    double want[MB * 3];
    mlp_direct(want);
    check_numbers(g, (const void *[]){mx}, 1, (double *[]){want});
    te_graph_free(g);
    import_fails(p, NULL, "--shape batch=N");
    import_fails(p, "batch=three", "extents are integers");
}

/* Two erf GELUs reading the same initializers 1 and 0.5 and the same sqrt2 (as exporters
 * share them across layers): both are recognised, not only the first reader's. */
static void test_gelus_sharing_constants_are_both_recognised(void **state)
{
    (void)state;
    static float w8[8 * 8];
    om_reset(&M);
    fill(w1, 32);
    fill(w8, 64);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){MB, 4}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){MB, 8}, NULL);
    M.inits[M.ni++] = om_tensor_f("w1", 2, (int64_t[]){4, 8}, w1, 1);
    M.inits[M.ni++] = om_tensor_f("w8", 2, (int64_t[]){8, 8}, w8, 1);
    M.inits[M.ni++] = om_tensor_f("one", 0, NULL, (float[]){1.0f}, 1);
    M.inits[M.ni++] = om_tensor_f("half", 0, NULL, (float[]){0.5f}, 0);
    M.inits[M.ni++] = om_tensor_f("sqrt2", 0, NULL, (float[]){1.4142135f}, 1);
    const char *in = "x", *w[2] = {"w1", "w8"}, *out[2] = {"g0", "y"};
    for (int l = 0; l < 2; l++) {
        char nm[64], ins[96], o[6][32];
        for (int i = 0; i < 6; i++)
            snprintf(o[i], sizeof o[i], "l%d_%d", l, i);
        snprintf(ins, sizeof ins, "%s,%s", in, w[l]);
        snprintf(nm, sizeof nm, "mm%d", l);
        om_node(&M, "MatMul", nm, ins, o[0], NULL);
        snprintf(ins, sizeof ins, "%s,sqrt2", o[0]);
        snprintf(nm, sizeof nm, "div%d", l);
        om_node(&M, "Div", nm, ins, o[1], NULL);
        snprintf(nm, sizeof nm, "erf%d", l);
        om_node(&M, "Erf", nm, o[1], o[2], NULL);
        snprintf(ins, sizeof ins, "%s,one", o[2]);
        snprintf(nm, sizeof nm, "add%d", l);
        om_node(&M, "Add", nm, ins, o[3], NULL);
        snprintf(ins, sizeof ins, "%s,%s", o[0], o[3]);
        snprintf(nm, sizeof nm, "mul%d", l);
        om_node(&M, "Mul", nm, ins, o[4], NULL);
        snprintf(ins, sizeof ins, "half,%s", o[4]);
        snprintf(nm, sizeof nm, "half%d", l);
        om_node(&M, "Mul", nm, ins, out[l], NULL);
        in = out[l];
    }
    const char *p = write_model("gelu_shared.onnx", 0);
    te_graph *g = NULL;
    char err[512];
    if (te_graph_from_onnx_ex(p, NULL, &g, NULL, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(count_op(g, "gelu"), 2);
    assert_int_equal(count_op(g, "erf"), 0);
    assert_int_equal(count_op(g, "div"), 0);
    fill(mx, sizeof mx / sizeof mx[0]);
    double want[MB * 8];
    for (int r = 0; r < MB; r++) {
        double h[8], z[8];
        for (int j = 0; j < 8; j++) {
            double a = 0;
            for (int k = 0; k < 4; k++)
                a += (double)mx[r * 4 + k] * w1[k * 8 + j];
            h[j] = 0.5 * a * (1 + erf(a / 1.4142135f));
        }
        for (int j = 0; j < 8; j++) {
            double a = 0;
            for (int k = 0; k < 8; k++)
                a += h[k] * w8[k * 8 + j];
            z[j] = 0.5 * a * (1 + erf(a / 1.4142135f));
            want[r * 8 + j] = z[j];
        }
    }
    check_numbers(g, (const void *[]){mx}, 1, (double *[]){want});
    te_graph_free(g);
}

/* ---- Conv + BatchNorm + Relu + pooling, and a grouped dilated strided conv ---------------- */

static void conv_direct(const float *x, int c, int h, int w, const float *wt, const float *b,
                        int oc, int k, int stride, int pad, int dil, int groups, double *y,
                        int *oh_, int *ow_)
{
    int oh = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    int ow = (w + 2 * pad - dil * (k - 1) - 1) / stride + 1, cg = c / groups;
    for (int o = 0; o < oc; o++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                double a = b ? b[o] : 0;
                int g0 = o / (oc / groups);
                for (int ci = 0; ci < cg; ci++)
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            int yy = i * stride - pad + ky * dil, xx = j * stride - pad + kx * dil;
                            if (yy >= 0 && yy < h && xx >= 0 && xx < w)
                                a += (double)x[((g0 * cg + ci) * h + yy) * w + xx] *
                                     wt[((o * cg + ci) * k + ky) * k + kx];
                        }
                y[(o * oh + i) * ow + j] = a;
            }
    *oh_ = oh;
    *ow_ = ow;
}

static void test_conv_bn_relu(void **state)
{
    (void)state;
    static float x[2 * 6 * 6], w[3 * 2 * 9], b[3], sc[3], sh[3], mean[3], var[3];
    fill(x, 72);
    fill(w, 54);
    fill(b, 3);
    fill(sc, 3);
    fill(sh, 3);
    fill(mean, 3);
    for (int i = 0; i < 3; i++)
        var[i] = 0.5f + (float)i;
    om_reset(&M);
    M.opset = 13;
    M.ins[M.nin++] = om_vinfo("input", 4, (int64_t[]){1, 2, 6, 6}, NULL);
    M.outs[M.nout++] = om_vinfo("out", 2, (int64_t[]){1, 3}, NULL);
    M.inits[M.ni++] = om_tensor_f("conv.w", 4, (int64_t[]){3, 2, 3, 3}, w, 1);
    M.inits[M.ni++] = om_tensor_f("conv.b", 1, (int64_t[]){3}, b, 1);
    M.inits[M.ni++] = om_tensor_f("bn.scale", 1, (int64_t[]){3}, sc, 0);
    M.inits[M.ni++] = om_tensor_f("bn.bias", 1, (int64_t[]){3}, sh, 0);
    M.inits[M.ni++] = om_tensor_f("bn.mean", 1, (int64_t[]){3}, mean, 1);
    M.inits[M.ni++] = om_tensor_f("bn.var", 1, (int64_t[]){3}, var, 1);
    om_node(&M, "Conv", "conv", "input,conv.w,conv.b", "c",
            om_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
            om_attr_ints("strides", 2, (int64_t[]){1, 1}),
            om_attr_ints("kernel_shape", 2, (int64_t[]){3, 3}), NULL);
    om_node(&M, "BatchNormalization", "bn", "c,bn.scale,bn.bias,bn.mean,bn.var", "n",
            om_attr_f("epsilon", 1e-5f), NULL);
    om_node(&M, "Relu", "relu", "n", "r", NULL);
    om_node(&M, "MaxPool", "pool", "r", "p", om_attr_ints("kernel_shape", 2, (int64_t[]){2, 2}),
            om_attr_ints("strides", 2, (int64_t[]){2, 2}), NULL);
    om_node(&M, "GlobalAveragePool", "gap", "p", "gp", NULL);
    om_node(&M, "Flatten", "flat", "gp", "out", om_attr_i("axis", 1), NULL);
    te_graph *g = import_ok(write_model("conv_bn_relu.onnx", 0), NULL);
    assert_int_equal(count_op(g, "conv2d"), 1);
    assert_int_equal(count_op(g, "batch_norm"), 1);
    assert_int_equal(count_op(g, "max_pool2d"), 1);
    double c[3 * 36], want[3];
    int oh, ow;
    conv_direct(x, 2, 6, 6, w, b, 3, 3, 1, 1, 1, 1, c, &oh, &ow);
    for (int o = 0; o < 3; o++) {
        double s = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                double m = -INFINITY;
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++) {
                        double v = c[(o * 6 + 2 * i + dy) * 6 + 2 * j + dx];
                        v = (v - mean[o]) / sqrt((double)var[o] + 1e-5) * sc[o] + sh[o];
                        m = fmax(m, fmax(v, 0));
                    }
                s += m;
            }
        want[o] = s / 9;
    }
    check_numbers(g, (const void *[]){x}, 1, (double *[]){want});
    te_graph_free(g);

    /* Grouped, dilated, strided, padded; no bias. */
    static float x2[4 * 9 * 9], w2[4 * 2 * 9];
    fill(x2, sizeof x2 / sizeof x2[0]);
    fill(w2, sizeof w2 / sizeof w2[0]);
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 4, (int64_t[]){1, 4, 9, 9}, NULL);
    M.outs[M.nout++] = om_vinfo("y", -1, NULL, NULL);
    M.inits[M.ni++] = om_tensor_f("w", 4, (int64_t[]){4, 2, 3, 3}, w2, 0);
    om_node(&M, "Conv", "gconv", "x,w", "y", om_attr_i("group", 2),
            om_attr_ints("dilations", 2, (int64_t[]){2, 2}),
            om_attr_ints("strides", 2, (int64_t[]){2, 2}),
            om_attr_ints("pads", 4, (int64_t[]){2, 2, 2, 2}), NULL);
    g = import_ok(write_model("conv_group.onnx", 0), NULL);
    double y2[4 * 25];
    conv_direct(x2, 4, 9, 9, w2, NULL, 4, 3, 2, 2, 2, 2, y2, &oh, &ow);
    assert_int_equal(oh, 5);
    check_numbers(g, (const void *[]){x2}, 1, (double *[]){y2});
    te_graph_free(g);
}

/* ---- Shape computations folded into a constant reshape ----------------------------------- */

static void test_shape_chain(void **state)
{
    (void)state;
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 3, (int64_t[]){2, 3, 4}, NULL);
    M.outs[M.nout++] = om_vinfo("z", 2, (int64_t[]){12, 2}, NULL);
    M.inits[M.ni++] = om_tensor_i64("minus1", 1, (int64_t[]){-1});
    M.inits[M.ni++] = om_tensor_i64("axes0", 1, (int64_t[]){0});
    Onnx__TensorProto *zero = om_tensor_i64("zero", 1, (int64_t[]){0});
    zero->n_dims = 0; /* a scalar index */
    M.inits[M.ni++] = zero;
    om_node(&M, "Shape", "shape", "x", "s", NULL);
    om_node(&M, "Gather", "gather", "s,zero", "b", om_attr_i("axis", 0), NULL);
    om_node(&M, "Unsqueeze", "unsq", "b,axes0", "b1", NULL);
    om_node(&M, "Concat", "concat", "b1,minus1", "shp", om_attr_i("axis", 0), NULL);
    om_node(&M, "Cast", "cast", "shp", "shp64", om_attr_i("to", 7), NULL);
    om_node(&M, "Reshape", "reshape", "x,shp64", "y", NULL);
    om_node(&M, "Transpose", "t", "y", "z", om_attr_ints("perm", 2, (int64_t[]){1, 0}), NULL);
    te_graph *g = import_ok(write_model("shape_chain.onnx", 0), NULL);
    assert_int_equal(te_graph_node_count(g), 2); /* reshape, transpose: the rest was folded */
    assert_int_equal(count_op(g, "reshape"), 1);
    int z = te_graph_output_value(g, 0);
    assert_int_equal(te_graph_value_ndim(g, z), 2);
    assert_int_equal(te_graph_value_shape(g, z)[0], 12);
    static float x[24];
    double want[24];
    fill(x, 24);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 12; j++)
            want[j * 2 + i] = x[i * 12 + j];
    check_numbers(g, (const void *[]){x}, 1, (double *[]){want});
    te_graph_free(g);
}

/* ---- LayerNormalization, Sigmoid, Tanh, Sub, ReduceMean, ReduceSum, external data -------- */

static void test_norm_reduce_external(void **state)
{
    (void)state;
    static float x[3 * 5], gam[5], bet[5];
    fill(x, 15);
    fill(gam, 5);
    fill(bet, 5);
    /* gamma and beta live in one external file next to the model. */
    FILE *f = fopen(path_of("ln.bin"), "wb");
    assert_non_null(f);
    fwrite("pad!", 1, 4, f);
    fwrite(gam, 4, 5, f);
    fwrite(bet, 4, 5, f);
    fclose(f);
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("m", 2, (int64_t[]){3, 1}, NULL);
    M.outs[M.nout++] = om_vinfo("r", 1, (int64_t[]){5}, NULL);
    const char *names[2] = {"gamma", "beta"};
    for (int i = 0; i < 2; i++) {
        Onnx__TensorProto *t = om_tensor_f(names[i], 1, (int64_t[]){5}, gam, 0);
        t->n_float_data = 0;
        t->has_data_location = 1;
        t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        t->n_external_data = 3;
        t->external_data = om_alloc(3 * sizeof *t->external_data);
        const char *kv[3][2] = {
            {"location", "ln.bin"}, {"offset", i ? "24" : "4"}, {"length", "20"}};
        for (int k = 0; k < 3; k++) {
            Onnx__StringStringEntryProto *e = om_alloc(sizeof *e);
            onnx__string_string_entry_proto__init(e);
            e->key = om_str(kv[k][0]);
            e->value = om_str(kv[k][1]);
            t->external_data[k] = e;
        }
        M.inits[M.ni++] = t;
    }
    M.inits[M.ni++] = om_tensor_i64("ax0", 1, (int64_t[]){0});
    om_node(&M, "LayerNormalization", "ln", "x,gamma,beta", "l", om_attr_f("epsilon", 1e-5f), NULL);
    om_node(&M, "Sigmoid", "sig", "l", "s", NULL);
    om_node(&M, "Tanh", "tanh", "x", "t", NULL);
    om_node(&M, "Sub", "sub", "s,t", "d", NULL);
    om_node(&M, "ReduceMean", "mean", "d", "m", om_attr_ints("axes", 1, (int64_t[]){1}),
            om_attr_i("keepdims", 1), NULL);
    om_node(&M, "ReduceSum", "sum", "d,ax0", "r", om_attr_i("keepdims", 0), NULL);
    const char *p = write_model("norm_reduce.onnx", 0);
    te_graph *g = import_ok(p, NULL);
    assert_int_equal(count_op(g, "layer_norm"), 1);
    double d[15], m[3] = {0, 0, 0}, r[5] = {0, 0, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < 5; j++)
            mu += x[i * 5 + j] / 5.0;
        for (int j = 0; j < 5; j++)
            var += (x[i * 5 + j] - mu) * (x[i * 5 + j] - mu) / 5.0;
        for (int j = 0; j < 5; j++) {
            double l = (x[i * 5 + j] - mu) / sqrt(var + 1e-5) * gam[j] + bet[j];
            d[i * 5 + j] = 1 / (1 + exp(-l)) - tanh(x[i * 5 + j]);
            m[i] += d[i * 5 + j] / 5;
            r[j] += d[i * 5 + j];
        }
    }
    check_numbers(g, (const void *[]){x}, 2, (double *[]){m, r});
    te_graph_free(g);
    /* External data outside the model's directory is refused. */
    M.inits[0]->external_data[0]->value = om_str("../ln.bin");
    import_fails(write_model("traversal.onnx", 0), NULL, "relative path inside");
    M.inits[0]->external_data[0]->value = om_str("/etc/passwd");
    import_fails(write_model("absolute.onnx", 0), NULL, "relative path inside");
    M.inits[0]->external_data[0]->value = om_str("ln.bin");
    M.inits[0]->external_data[1]->value = om_str("40");
    import_fails(write_model("ext_short.onnx", 0), NULL, "holds 44 bytes");
}

/* ---- Elementwise operators one after the other, against libm -------------------------- */

static void test_elementwise(void **state)
{
    (void)state;
    static float x[2 * 7];
    fill(x, 14);
    om_reset(&M);
    M.opset = 12; /* Clip with min/max inputs; Softmax over the last axis */
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 7}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 7}, NULL);
    M.inits[M.ni++] = om_tensor_f("lo", 0, NULL, (float[]){-0.25f}, 1);
    M.inits[M.ni++] = om_tensor_f("hi", 0, NULL, (float[]){0.75f}, 1);
    M.inits[M.ni++] = om_tensor_f("two", 0, NULL, (float[]){2.0f}, 1);
    om_node(&M, "Abs", "abs", "x", "a", NULL);
    om_node(&M, "Sqrt", "sqrt", "a", "s", NULL);      /* sqrt|x| */
    om_node(&M, "Exp", "exp", "x", "e", NULL);        /* e^x */
    om_node(&M, "Log", "log", "e", "l", NULL);        /* x */
    om_node(&M, "Erf", "erf", "l", "f", NULL);        /* erf(x): not a GELU */
    om_node(&M, "Reciprocal", "rcp", "e", "r", NULL); /* e^-x */
    om_node(&M, "Neg", "neg", "f", "nf", NULL);
    om_node(&M, "LeakyRelu", "lrelu", "nf", "lr", om_attr_f("alpha", 0.1f), NULL);
    om_node(&M, "Clip", "clip", "x,lo,hi", "c", NULL);
    om_node(&M, "Pow", "pow", "c,two", "p", NULL);
    om_node(&M, "Add", "add1", "s,r", "t1", NULL);
    om_node(&M, "Add", "add2", "t1,lr", "t2", NULL);
    om_node(&M, "Add", "add3", "t2,p", "t3", NULL);
    om_node(&M, "Softmax", "sm", "t3", "y", om_attr_i("axis", 1), NULL);
    te_graph *g = import_ok(write_model("elementwise.onnx", 0), NULL);
    assert_int_equal(count_op(g, "erf"), 1);
    assert_int_equal(count_op(g, "gelu"), 0);
    double want[14];
    for (int i = 0; i < 2; i++) {
        double t[7], m = -INFINITY, sum = 0;
        for (int j = 0; j < 7; j++) {
            double v = x[i * 7 + j], nf = -erf(v), cl = fmin(fmax(v, -0.25), 0.75);
            t[j] = sqrt(fabs(v)) + exp(-v) + (nf >= 0 ? nf : 0.1 * nf) + cl * cl;
            m = fmax(m, t[j]);
        }
        for (int j = 0; j < 7; j++)
            sum += exp(t[j] - m);
        for (int j = 0; j < 7; j++)
            want[i * 7 + j] = exp(t[j] - m) / sum;
    }
    check_numbers(g, (const void *[]){x}, 1, (double *[]){want});
    te_graph_free(g);
}

/* ---- Attention scores: 4-D MatMul, Transpose, Div, Softmax, Gemm with alpha and beta ----- */

static void test_attention_gemm(void **state)
{
    (void)state;
    enum { B = 2, H = 2, S = 3, D = 4 };
    static float q[B * H * S * D], k[B * H * S * D], a[S * D], w[D * 5], cb[5];
    fill(q, sizeof q / sizeof q[0]);
    fill(k, sizeof k / sizeof k[0]);
    fill(a, sizeof a / sizeof a[0]);
    fill(w, sizeof w / sizeof w[0]);
    fill(cb, 5);
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("q", 4, (int64_t[]){B, H, S, D}, NULL);
    M.ins[M.nin++] = om_vinfo("k", 4, (int64_t[]){B, H, S, D}, NULL);
    M.ins[M.nin++] = om_vinfo("a", 2, (int64_t[]){S, D}, NULL);
    M.outs[M.nout++] = om_vinfo("p", 4, (int64_t[]){B, H, S, S}, NULL);
    M.outs[M.nout++] = om_vinfo("g", 2, (int64_t[]){S, 5}, NULL);
    M.inits[M.ni++] = om_tensor_f("scale", 0, NULL, (float[]){2.0f}, 1);
    M.inits[M.ni++] = om_tensor_f("w", 2, (int64_t[]){D, 5}, w, 1);
    M.inits[M.ni++] = om_tensor_f("cb", 1, (int64_t[]){5}, cb, 1);
    om_node(&M, "Transpose", "kt", "k", "kT", om_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2}),
            NULL);
    om_node(&M, "MatMul", "qk", "q,kT", "s", NULL);
    om_node(&M, "Div", "div", "s,scale", "sd", NULL);
    om_node(&M, "Softmax", "sm", "sd", "p", om_attr_i("axis", -1), NULL);
    om_node(&M, "Gemm", "gemm", "a,w,cb", "g", om_attr_f("alpha", 0.5f), om_attr_f("beta", 3.0f),
            NULL);
    te_graph *g = import_ok(write_model("attention.onnx", 0), NULL);
    assert_int_equal(count_op(g, "batch_matmul"), 1);
    double pw[B * H * S * S], gw[S * 5];
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < S; i++) {
            double sc[S], m = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                sc[j] = 0;
                for (int d = 0; d < D; d++)
                    sc[j] += (double)q[(bh * S + i) * D + d] * k[(bh * S + j) * D + d];
                sc[j] /= 2.0;
                m = fmax(m, sc[j]);
            }
            for (int j = 0; j < S; j++)
                sum += exp(sc[j] - m);
            for (int j = 0; j < S; j++)
                pw[(bh * S + i) * S + j] = exp(sc[j] - m) / sum;
        }
    for (int i = 0; i < S; i++)
        for (int j = 0; j < 5; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++)
                acc += (double)a[i * D + d] * w[d * 5 + j];
            gw[i * 5 + j] = 0.5 * acc + 3.0 * cb[j];
        }
    check_numbers(g, (const void *[]){q, k, a}, 2, (double *[]){pw, gw});
    te_graph_free(g);
}

/* ---- Bad models ------------------------------------------------------------------------ */

/* ---- Index operators and the added reductions at run time -------------------------------- */

/* An int64 initializer of any shape (om_tensor_i64 makes 1-D ones). */
static Onnx__TensorProto *tensor_i64(const char *name, int nd, const int64_t *dims,
                                     const int64_t *v)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= dims[d];
    Onnx__TensorProto *t = om_tensor_i64(name, (int)n, v);
    t->n_dims = (size_t)nd;
    t->dims = om_alloc((size_t)(nd ? nd : 1) * sizeof(int64_t));
    if (nd)
        memcpy(t->dims, dims, (size_t)nd * sizeof(int64_t));
    return t;
}

static void set_elem(Onnx__ValueInfoProto *v, int32_t type)
{
    v->type->tensor_type->elem_type = type;
}

/* x[2,5,4] f32, ids[3] int64 and keep[5,1] bool inputs through Gather (input indices, any axis;
 * a constant scalar index), Slice (negative step, clamped bounds), Concat, Split, Where,
 * Expand, LogSoftmax, ReduceMax (axes attribute) and ReduceL2. */
static float ix_x[2 * 5 * 4], ix_bias[4];
static int64_t ix_ids[3];
static uint8_t ix_keep[5];

static void build_index_model(void)
{
    om_reset(&M);
    fill(ix_bias, 4);
    M.ins[M.nin++] = om_vinfo("x", 3, (int64_t[]){2, 5, 4}, NULL);
    M.ins[M.nin++] = om_vinfo("ids", 1, (int64_t[]){3}, NULL);
    set_elem(M.ins[1], ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    M.ins[M.nin++] = om_vinfo("keep", 2, (int64_t[]){5, 1}, NULL);
    set_elem(M.ins[2], ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    M.outs[M.nout++] = om_vinfo("rm", 2, (int64_t[]){2, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("l2", 3, (int64_t[]){1, 3, 1}, NULL);
    M.outs[M.nout++] = om_vinfo("gs", 2, (int64_t[]){2, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("s", 3, (int64_t[]){2, 5, 2}, NULL);
    M.inits[M.ni++] = om_tensor_i64("st", 1, (int64_t[]){-1});
    M.inits[M.ni++] = om_tensor_i64("en", 1, (int64_t[]){-100});
    M.inits[M.ni++] = om_tensor_i64("ax", 1, (int64_t[]){2});
    M.inits[M.ni++] = om_tensor_i64("sp", 1, (int64_t[]){-2});
    M.inits[M.ni++] = om_tensor_i64("sizes", 2, (int64_t[]){3, 5});
    M.inits[M.ni++] = om_tensor_i64("eshape", 3, (int64_t[]){2, 1, 4});
    M.inits[M.ni++] = tensor_i64("two", 0, NULL, (int64_t[]){-2});
    M.inits[M.ni++] = om_tensor_f("bias", 1, (int64_t[]){4}, ix_bias, 1);
    M.inits[M.ni++] = om_tensor_f("m1", 0, NULL, (float[]){-1.0f}, 1);
    M.inits[M.ni++] = om_tensor_i64("l2ax", 2, (int64_t[]){0, 2});
    om_node(&M, "Gather", "g", "x,ids", "g", om_attr_i("axis", 1), NULL);
    om_node(&M, "Slice", "slice", "x,st,en,ax,sp", "s", NULL);
    om_node(&M, "Concat", "cat", "g,x", "c", om_attr_i("axis", -2), NULL);
    om_node(&M, "Split", "split", "c,sizes", "p0,p1", om_attr_i("axis", 1), NULL);
    om_node(&M, "Where", "where", "keep,p1,m1", "w", NULL);
    om_node(&M, "Expand", "expand", "bias,eshape", "e", NULL);
    om_node(&M, "Add", "add", "w,e", "a", NULL);
    om_node(&M, "LogSoftmax", "ls", "a", "ls", om_attr_i("axis", 1), NULL);
    om_node(&M, "ReduceMax", "rmax", "ls", "rm", om_attr_ints("axes", 1, (int64_t[]){-1}),
            om_attr_i("keepdims", 0), NULL);
    om_node(&M, "ReduceL2", "rl2", "p0", "l2", om_attr_ints("axes", 2, (int64_t[]){0, 2}), NULL);
    om_node(&M, "Gather", "gs", "x,two", "gs", om_attr_i("axis", 2), NULL);
}

static void test_index_ops_and_reductions_at_run_time(void **state)
{
    (void)state;
    build_index_model();
    te_graph *g = import_ok(write_model("index_ops.onnx", 0), NULL);
    assert_int_equal(count_op(g, "gather"), 2);
    assert_int_equal(count_op(g, "slice"), 3); /* Slice and the two parts of Split */
    assert_int_equal(count_op(g, "concat"), 1);
    assert_int_equal(count_op(g, "where"), 1);
    assert_int_equal(count_op(g, "expand"), 1);
    assert_int_equal(count_op(g, "log_softmax"), 1);
    assert_int_equal(count_op(g, "reduce_max"), 1);
    assert_int_equal(count_op(g, "reduce_l2"), 1);
    assert_int_equal(te_graph_value_dtype(g, te_graph_input_value(g, 1)), TE_I64);
    assert_int_equal(te_graph_value_dtype(g, te_graph_input_value(g, 2)), TE_U8);
    fill(ix_x, 40);
    for (int i = 0; i < 3; i++)
        ix_ids[i] = tt_rng_int(&g_rng, 10) - 5; /* [-5, 5): negative ones count from the end */
    for (int i = 0; i < 5; i++)
        ix_keep[i] = (uint8_t)(i % 2 || tt_rng_int(&g_rng, 2));
    ix_keep[0] = 0;
#define X(b, r, k) ((double)ix_x[((b)*5 + (r)) * 4 + (k)])
    double c[2][8][4], a[2][5][4], rm[10], l2[3], gs[10], sl[20];
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 8; r++)
            for (int k = 0; k < 4; k++)
                c[b][r][k] =
                    r < 3 ? X(b, ix_ids[r] < 0 ? ix_ids[r] + 5 : ix_ids[r], k) : X(b, r - 3, k);
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 5; r++)
            for (int k = 0; k < 4; k++)
                a[b][r][k] = (ix_keep[r] ? c[b][r + 3][k] : -1.0) + ix_bias[k];
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++) {
            double top = -INFINITY, sum = 0;
            for (int r = 0; r < 5; r++)
                top = fmax(top, a[b][r][k]);
            for (int r = 0; r < 5; r++)
                sum += exp(a[b][r][k] - top);
            for (int r = 0; r < 5; r++)
                a[b][r][k] = a[b][r][k] - top - log(sum);
        }
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 5; r++) {
            rm[b * 5 + r] = fmax(fmax(a[b][r][0], a[b][r][1]), fmax(a[b][r][2], a[b][r][3]));
            gs[b * 5 + r] = X(b, r, 2);
            sl[(b * 5 + r) * 2] = X(b, r, 3);
            sl[(b * 5 + r) * 2 + 1] = X(b, r, 1);
        }
    for (int r = 0; r < 3; r++) {
        l2[r] = 0;
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 4; k++)
                l2[r] += c[b][r][k] * c[b][r][k];
        l2[r] = sqrt(l2[r]);
    }
#undef X
    assert_int_equal(te_graph_output_count(g), 4);
    /* The graph lists its outputs in value order: match them by name. */
    const char *names[4] = {"rm", "l2", "gs", "s"};
    double *want[4], *by_name[4] = {rm, l2, gs, sl};
    for (int j = 0; j < 4; j++) {
        want[j] = NULL;
        for (int q = 0; q < 4; q++)
            if (!strcmp(te_graph_value_name(g, te_graph_output_value(g, j)), names[q]))
                want[j] = by_name[q];
        assert_non_null(want[j]);
    }
    check_numbers(g, (const void *[]){ix_x, ix_ids, ix_keep}, 4, want);
    te_graph_free(g);

    /* Opset 18: ReduceMax / ReduceL2 take their axes as an input, Split num_outputs. */
    om_reset(&M);
    M.opset = 18;
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("m", 2, (int64_t[]){3, 1}, NULL);
    M.outs[M.nout++] = om_vinfo("q0", 2, (int64_t[]){3, 2}, NULL);
    M.outs[M.nout++] = om_vinfo("q2", 2, (int64_t[]){3, 1}, NULL);
    M.inits[M.ni++] = om_tensor_i64("axes", 1, (int64_t[]){1});
    om_node(&M, "ReduceMax", "rmax", "x,axes", "m", NULL);
    om_node(&M, "Split", "split", "x", "q0,q1,q2", om_attr_i("axis", 1),
            om_attr_i("num_outputs", 3), NULL);
    g = import_ok(write_model("index_ops18.onnx", 0), NULL);
    float x18[15];
    fill(x18, 15);
    double m18[3], q0[6], q2[3];
    for (int r = 0; r < 3; r++) {
        m18[r] = -INFINITY;
        for (int k = 0; k < 5; k++)
            m18[r] = fmax(m18[r], x18[r * 5 + k]);
        q0[r * 2] = x18[r * 5];
        q0[r * 2 + 1] = x18[r * 5 + 1];
        q2[r] = x18[r * 5 + 4];
    }
    check_numbers(g, (const void *[]){x18}, 3, (double *[]){m18, q0, q2});
    te_graph_free(g);

    /* Opset 9: Slice takes starts/ends/axes as attributes (clamped: 1000 is the end). */
    om_reset(&M);
    M.opset = 9;
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){3, 3}, NULL);
    om_node(&M, "Slice", "slice9", "x", "y", om_attr_ints("starts", 1, (int64_t[]){-3}),
            om_attr_ints("ends", 1, (int64_t[]){1000}), om_attr_ints("axes", 1, (int64_t[]){1}),
            NULL);
    g = import_ok(write_model("slice_opset9.onnx", 0), NULL);
    double y9[9];
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++)
            y9[r * 3 + k] = x18[r * 5 + 2 + k];
    check_numbers(g, (const void *[]){x18}, 1, (double *[]){y9});
    te_graph_free(g);
    /* Before opset 13 LogSoftmax coerces to 2-D: only the last axis maps. */
    om_reset(&M);
    M.opset = 11;
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){3, 5}, NULL);
    om_node(&M, "LogSoftmax", "ls11", "x", "y", om_attr_i("axis", 0), NULL);
    import_fails(write_model("logsoftmax11.onnx", 0), NULL,
                 "node 'ls11' (LogSoftmax): before opset 13 only the last axis");
}

/* ---- Comparison and logic -------------------------------------------------------------- */

/* ids[2,6] int64, x[2,6] f32 and flag[2,6] bool through Equal (int64 ids against an int64
 * scalar constant), Less, LessOrEqual, Greater, GreaterOrEqual, Not, And, Or, Xor, Where,
 * Floor, Ceil, Sign, three-input Max / Min, Mod (int64, the divisor's sign) and Cast of bool
 * and int64 to float; a mask computed
 * from the ids (Equal(ids, 0) -> Where(-1e9, 0)) added to scores before a softmax, as BERT
 * exporters write it. */
static float cl_x[12];
static int64_t cl_ids[12];
static uint8_t cl_flag[12];

static void build_compare_model(void)
{
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("ids", 2, (int64_t[]){2, 6}, NULL);
    set_elem(M.ins[0], ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 6}, NULL);
    M.ins[M.nin++] = om_vinfo("flag", 2, (int64_t[]){2, 6}, NULL);
    set_elem(M.ins[2], ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    M.outs[M.nout++] = om_vinfo("p", 2, (int64_t[]){2, 6}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 6}, NULL);
    M.outs[M.nout++] = om_vinfo("mm", 2, (int64_t[]){2, 6}, NULL);
    M.outs[M.nout++] = om_vinfo("q", 2, (int64_t[]){2, 6}, NULL);
    M.inits[M.ni++] = tensor_i64("zero", 0, NULL, (int64_t[]){0});
    M.inits[M.ni++] = tensor_i64("mtwo", 0, NULL, (int64_t[]){-2});
    M.inits[M.ni++] = om_tensor_f("half", 0, NULL, (float[]){0.5f}, 1);
    M.inits[M.ni++] = om_tensor_f("mhalf", 0, NULL, (float[]){-0.5f}, 1);
    M.inits[M.ni++] = om_tensor_f("three", 0, NULL, (float[]){3.0f}, 1);
    M.inits[M.ni++] = om_tensor_f("big", 0, NULL, (float[]){-1e9f}, 1);
    M.inits[M.ni++] = om_tensor_f("nil", 0, NULL, (float[]){0.0f}, 1);
    om_node(&M, "Equal", "eq", "ids,zero", "m", NULL);
    om_node(&M, "Where", "mask", "m,big,nil", "bias", NULL);
    om_node(&M, "Add", "scores", "x,bias", "sc", NULL);
    om_node(&M, "Softmax", "sm", "sc", "p", om_attr_i("axis", -1), NULL);
    om_node(&M, "Less", "lt", "x,half", "lt", NULL);
    om_node(&M, "GreaterOrEqual", "ge", "x,mhalf", "ge", NULL);
    om_node(&M, "Not", "not", "m", "nm", NULL);
    om_node(&M, "And", "and", "nm,lt", "a", NULL);
    om_node(&M, "Or", "or", "a,flag", "o", NULL);
    om_node(&M, "Xor", "xor", "o,ge", "xr", NULL);
    om_node(&M, "Greater", "gt", "x,nil", "gt", NULL);
    om_node(&M, "LessOrEqual", "le", "ids,zero", "le", NULL);
    om_node(&M, "And", "and2", "gt,le", "gl", NULL);
    om_node(&M, "Mul", "x3", "x,three", "x3", NULL);
    om_node(&M, "Floor", "fl", "x3", "fl", NULL);
    om_node(&M, "Ceil", "ce", "x3", "ce", NULL);
    om_node(&M, "Sign", "sg", "x", "sg", NULL);
    om_node(&M, "Where", "w", "xr,fl,ce", "w", NULL);
    om_node(&M, "Where", "w2", "gl,sg,w", "y", NULL);
    om_node(&M, "Max", "mx", "x,fl,sg", "mx", NULL);
    om_node(&M, "Min", "mn", "mx,ce,three", "mm", NULL);
    om_node(&M, "Cast", "cx", "xr", "cx", om_attr_i("to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT),
            NULL);
    om_node(&M, "Cast", "ci", "ids", "ci", om_attr_i("to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT),
            NULL);
    om_node(&M, "Mod", "md", "ids,mtwo", "md", om_attr_i("fmod", 0), NULL);
    om_node(&M, "Cast", "cm", "md", "cm", om_attr_i("to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT),
            NULL);
    om_node(&M, "Add", "q0", "cx,ci", "q0", NULL);
    om_node(&M, "Add", "q", "q0,cm", "q", NULL);
}

static void test_compare_and_logic_ops(void **state)
{
    (void)state;
    build_compare_model();
    te_graph *g = import_ok(write_model("compare_ops.onnx", 0), NULL);
    assert_int_equal(count_op(g, "equal"), 1);
    assert_int_equal(count_op(g, "less_equal"), 1);
    assert_int_equal(count_op(g, "xor"), 1);
    assert_int_equal(count_op(g, "not"), 1);
    assert_int_equal(count_op(g, "maximum"), 2);
    assert_int_equal(count_op(g, "minimum"), 2);
    assert_int_equal(count_op(g, "cast"), 3);
    assert_int_equal(count_op(g, "mod"), 1);
    for (int n = 0; n < te_graph_node_count(g); n++)
        if (!strcmp(te_graph_node_op(g, n), "equal"))
            assert_int_equal(te_graph_value_dtype(g, te_graph_node_output(g, n, 0)), TE_U8);
    for (int rep = 0; rep < 4; rep++) {
        fill(cl_x, 12);
        for (int i = 0; i < 12; i++) {
            cl_ids[i] = tt_rng_int(&g_rng, 3); /* zeros are padding */
            cl_flag[i] = (uint8_t)tt_rng_int(&g_rng, 2);
        }
        cl_ids[0] = cl_ids[6] = 1; /* no row is all padding */
        double p[12], y[12], mm[12], q[12];
        for (int r = 0; r < 2; r++) {
            double top = -INFINITY, sum = 0, sc[6];
            for (int k = 0; k < 6; k++) {
                sc[k] = cl_x[r * 6 + k] + (cl_ids[r * 6 + k] == 0 ? -1e9 : 0.0);
                top = fmax(top, sc[k]);
            }
            for (int k = 0; k < 6; k++)
                sum += exp(sc[k] - top);
            for (int k = 0; k < 6; k++)
                p[r * 6 + k] = exp(sc[k] - top) / sum;
        }
        for (int i = 0; i < 12; i++) {
            double x = cl_x[i], x3 = (double)(cl_x[i] * 3.0f);
            int m = cl_ids[i] == 0, o = (!m && x < 0.5) || cl_flag[i], xr = o != (x >= -0.5);
            double fl = floor(x3), ce = ceil(x3), sg = x > 0 ? 1 : x < 0 ? -1 : 0;
            y[i] = x > 0 && cl_ids[i] <= 0 ? sg : xr ? fl : ce;
            mm[i] = fmin(fmin(fmax(fmax(x, fl), sg), ce), 3.0);
            q[i] = xr + (double)cl_ids[i] - (double)(cl_ids[i] % 2); /* floor mod -2: 0, -1 */
        }
        const char *names[4] = {"p", "y", "mm", "q"};
        double *want[4], *by_name[4] = {p, y, mm, q};
        for (int j = 0; j < 4; j++) {
            want[j] = NULL;
            for (int k = 0; k < 4; k++)
                if (!strcmp(te_graph_value_name(g, te_graph_output_value(g, j)), names[k]))
                    want[j] = by_name[k];
            assert_non_null(want[j]);
        }
        check_numbers(g, (const void *[]){cl_ids, cl_x, cl_flag}, 4, want);
    }
    te_graph_free(g);

    /* Comparisons on constants fold (shape computations); a float graph value against an int64
     * one is refused naming the node. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){3}, NULL);
    M.ins[M.nin++] = om_vinfo("ids", 1, (int64_t[]){3}, NULL);
    set_elem(M.ins[1], ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    M.outs[M.nout++] = om_vinfo("y", 1, (int64_t[]){3}, NULL);
    M.inits[M.ni++] = om_tensor_i64("a", 3, (int64_t[]){1, 5, 2});
    M.inits[M.ni++] = om_tensor_i64("b", 1, (int64_t[]){2});
    M.inits[M.ni++] = om_tensor_f("one", 0, NULL, (float[]){1.0f}, 1);
    om_node(&M, "Less", "k", "a,b", "k", NULL);
    om_node(&M, "Not", "nk", "k", "nk", NULL);
    om_node(&M, "Where", "w", "nk,x,one", "y", NULL);
    g = import_ok(write_model("compare_fold.onnx", 0), NULL);
    assert_int_equal(count_op(g, "less"), 0);
    assert_int_equal(count_op(g, "not"), 0);
    float xf[3] = {0.25f, -0.75f, 2.5f};
    double yw[3] = {1.0, -0.75, 2.5}; /* 1 < 2 is true, so not() is false: one */
    check_numbers(g, (const void *[]){xf, cl_ids}, 1, (double *[]){yw});
    te_graph_free(g);
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){3}, NULL);
    M.ins[M.nin++] = om_vinfo("ids", 1, (int64_t[]){3}, NULL);
    set_elem(M.ins[1], ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    M.outs[M.nout++] = om_vinfo("y", 1, (int64_t[]){3}, NULL);
    om_node(&M, "Equal", "eq_mixed", "x,ids", "y", NULL);
    import_fails(write_model("compare_mixed.onnx", 0), NULL,
                 "node 'eq_mixed' (Equal): node 'y' (equal): input 2 'ids' has dtype i64");
}

static void test_index_ops_refuse_unsupported_forms_naming_the_node(void **state)
{
    (void)state;
    /* Float indices at run time. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){4, 3}, NULL);
    M.ins[M.nin++] = om_vinfo("i", 1, (int64_t[]){2}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 3}, NULL);
    om_node(&M, "Gather", "gather_f", "x,i", "y", NULL);
    import_fails(write_model("gather_float_idx.onnx", 0), NULL,
                 "node 'gather_f' (Gather): indices 'i' are f32");
    /* Computed slice bounds. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){4}, NULL);
    M.ins[M.nin++] = om_vinfo("b", 1, (int64_t[]){1}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 1, (int64_t[]){2}, NULL);
    M.inits[M.ni++] = om_tensor_i64("e", 1, (int64_t[]){2});
    om_node(&M, "Slice", "slice_b", "x,b,e", "y", NULL);
    import_fails(write_model("slice_computed.onnx", 0), NULL,
                 "node 'slice_b' (Slice): input 2 must be a constant");
    /* An empty slice. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){4}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 1, (int64_t[]){2}, NULL);
    M.inits[M.ni++] = om_tensor_i64("b", 1, (int64_t[]){3});
    M.inits[M.ni++] = om_tensor_i64("e", 1, (int64_t[]){1});
    om_node(&M, "Slice", "slice_e", "x,b,e", "y", NULL);
    import_fails(write_model("slice_empty.onnx", 0), NULL,
                 "node 'slice_e' (Slice): node 'y' (slice): slice 'y': slice [3:1:1] of input "
                 "'x' axis 0 (extent 4) is empty");
    /* Split sizes that do not add up, and an uneven split without num_outputs. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("a", 2, (int64_t[]){2, 2}, NULL);
    M.outs[M.nout++] = om_vinfo("b", 2, (int64_t[]){2, 2}, NULL);
    M.inits[M.ni++] = om_tensor_i64("sz", 2, (int64_t[]){2, 2});
    om_node(&M, "Split", "split_s", "x,sz", "a,b", om_attr_i("axis", 1), NULL);
    import_fails(write_model("split_sizes.onnx", 0), NULL,
                 "node 'split_s' (Split): sizes sum to 4 but axis 1 has extent 5");
    M.nn = 0;
    om_node(&M, "Split", "split_u", "x", "a,b", om_attr_i("axis", 1), NULL);
    import_fails(write_model("split_uneven.onnx", 0), NULL,
                 "node 'split_u' (Split): axis 1 (extent 5) does not split evenly into 2");
    /* Expand to a computed shape; Where with two inputs. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){3}, NULL);
    M.ins[M.nin++] = om_vinfo("t", 1, (int64_t[]){2}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 3}, NULL);
    om_node(&M, "Expand", "expand_t", "x,t", "y", NULL);
    import_fails(write_model("expand_computed.onnx", 0), NULL,
                 "node 'expand_t' (Expand): input 2 must be a constant");
    M.nn = 0;
    om_node(&M, "Where", "where_2", "x,t", "y", NULL);
    import_fails(write_model("where_two.onnx", 0), NULL,
                 "node 'where_2' (Where): needs three inputs");
    /* An integer input feeding float arithmetic: the graph's dtype message names the node. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){3}, NULL);
    M.ins[M.nin++] = om_vinfo("k", 1, (int64_t[]){3}, NULL);
    set_elem(M.ins[1], ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    M.outs[M.nout++] = om_vinfo("y", 1, (int64_t[]){3}, NULL);
    om_node(&M, "Add", "add_i", "x,k", "y", NULL);
    import_fails(write_model("add_int_input.onnx", 0), NULL, "has dtype i64");
    set_elem(M.ins[1], ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE);
    import_fails(write_model("double_input.onnx", 0), NULL,
                 "input 'k': element type 11 (float32, int64, int32, uint8, int8 and bool inputs");
}

/* ---- Quantized operators ------------------------------------------------------------------ */

/* A tensor of ONNX element type `type` (esize bytes each) in raw_data; nd 0 is a scalar. */
static Onnx__TensorProto *tensor_raw(const char *name, int32_t type, int nd, const int64_t *dims,
                                     const void *data, size_t esize)
{
    Onnx__TensorProto *t = om_alloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = om_str(name);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)nd;
    t->dims = om_alloc((size_t)(nd ? nd : 1) * sizeof(int64_t));
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= (size_t)(t->dims[d] = dims[d]);
    t->has_raw_data = 1;
    t->raw_data.len = numel * esize;
    t->raw_data.data = om_alloc(t->raw_data.len);
    memcpy(t->raw_data.data, data, t->raw_data.len);
    return t;
}

/* Uniform integer in [lo, hi]. */
static int irand(int lo, int hi) { return lo + (int)tt_rng_int(&g_rng, hi - lo + 1); }

#define U8T ONNX__TENSOR_PROTO__DATA_TYPE__UINT8
#define I8T ONNX__TENSOR_PROTO__DATA_TYPE__INT8

/* round half to even of x, saturated to [lo, hi] after adding zero (ONNX's quantization). */
static int quant_ref(double x, int zero, int lo, int hi)
{
    double r = nearbyint(x) + zero; /* the default rounding mode: ties to even */
    return r < lo ? lo : r > hi ? hi : (int)r;
}

/* a[2,3,4] u8 (zero point 7) x w[4,5] i8 (zero point -3, a 1-element tensor): MatMulInteger
 * into i32 y[2,3,5], QLinearMatMul into u8 q[2,3,5]; x[2,3,4] f32 through QuantizeLinear ->
 * DequantizeLinear (u8, scale 1/8: exact ties), MatMul with the dequantized int8 weights and an
 * int32 bias through DequantizeLinear into f32 f[2,3,5]. */
static uint8_t qa[24];
static int8_t qw[20];
static float qx[24];
static int32_t qb[5];

static void build_quant_model(void)
{
    om_reset(&M);
    for (int i = 0; i < 24; i++) {
        qa[i] = (uint8_t)irand(0, 255);
        qx[i] = (float)(irand(-90, 90) * 0.0625); /* every other one a tie */
    }
    for (int i = 0; i < 20; i++)
        qw[i] = (int8_t)irand(-128, 127);
    for (int i = 0; i < 5; i++)
        qb[i] = (int32_t)irand(-500, 500);
    M.ins[M.nin++] = om_vinfo("a", 3, (int64_t[]){2, 3, 4}, NULL);
    set_elem(M.ins[0], U8T);
    M.ins[M.nin++] = om_vinfo("x", 3, (int64_t[]){2, 3, 4}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 3, (int64_t[]){2, 3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("q", 3, (int64_t[]){2, 3, 5}, NULL);
    M.outs[M.nout++] = om_vinfo("f", 3, (int64_t[]){2, 3, 5}, NULL);
    M.inits[M.ni++] = tensor_raw("w", I8T, 2, (int64_t[]){4, 5}, qw, 1);
    M.inits[M.ni++] = tensor_raw("az", U8T, 0, NULL, (uint8_t[]){7}, 1);
    M.inits[M.ni++] = tensor_raw("wz", I8T, 1, (int64_t[]){1}, (int8_t[]){-3}, 1);
    M.inits[M.ni++] = om_tensor_f("sa", 0, NULL, (float[]){0.02f}, 1);
    M.inits[M.ni++] = om_tensor_f("sw", 1, (int64_t[]){1}, (float[]){0.01f}, 1);
    M.inits[M.ni++] = om_tensor_f("sy", 0, NULL, (float[]){0.37f}, 1);
    M.inits[M.ni++] = tensor_raw("yz", U8T, 0, NULL, (uint8_t[]){100}, 1);
    M.inits[M.ni++] = om_tensor_f("sx", 0, NULL, (float[]){0.125f}, 1);
    M.inits[M.ni++] = tensor_raw("xz", U8T, 0, NULL, (uint8_t[]){128}, 1);
    M.inits[M.ni++] =
        tensor_raw("b", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){5}, qb, 4);
    M.inits[M.ni++] = om_tensor_f("sb", 0, NULL, (float[]){0.125f * 0.01f}, 1);
    om_node(&M, "MatMulInteger", "mmi", "a,w,az,wz", "y", NULL);
    om_node(&M, "QLinearMatMul", "qmm", "a,sa,az,w,sw,wz,sy,yz", "q", NULL);
    om_node(&M, "QuantizeLinear", "qx", "x,sx,xz", "xq", om_attr_i("axis", 1), NULL);
    om_node(&M, "DequantizeLinear", "dqx", "xq,sx,xz", "xd", NULL);
    om_node(&M, "DequantizeLinear", "dqw", "w,sw,wz", "wd", NULL);
    om_node(&M, "DequantizeLinear", "dqb", "b,sb", "bd", NULL);
    om_node(&M, "MatMul", "mm", "xd,wd", "h", NULL);
    om_node(&M, "Add", "bias", "h,bd", "f", NULL);
}

static void test_quantized_ops_match_a_direct_computation(void **state)
{
    (void)state;
    build_quant_model();
    te_graph *g = import_ok(write_model("quant_ops.onnx", 0), NULL);
    assert_int_equal(count_op(g, "matmul_integer"), 1);
    assert_int_equal(count_op(g, "qlinear_matmul"), 1);
    assert_int_equal(count_op(g, "quantize_linear"), 1);
    assert_int_equal(count_op(g, "dequantize_linear"), 3);
    assert_int_equal(te_graph_value_dtype(g, te_graph_input_value(g, 0)), TE_U8);
    assert_int_equal(te_graph_value_dtype(g, te_graph_output_value(g, 0)), TE_I32);
    assert_int_equal(te_graph_value_dtype(g, te_graph_output_value(g, 1)), TE_U8);
    assert_int_equal(te_graph_value_dtype(g, te_graph_output_value(g, 2)), TE_F32);
    /* The direct computation: float32 arithmetic where ONNX specifies it. */
    int32_t y[30];
    uint8_t q[30];
    double f[30];
    float mult = 0.02f * 0.01f / 0.37f;
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 5; j++) {
            int32_t acc = 0;
            double h = 0;
            for (int k = 0; k < 4; k++) {
                acc += (qa[r * 4 + k] - 7) * (qw[k * 5 + j] + 3);
                int xq = quant_ref((double)(qx[r * 4 + k] / 0.125f), 128, 0, 255);
                h += (double)((xq - 128) * 0.125f) * (double)((float)(qw[k * 5 + j] + 3) * 0.01f);
            }
            y[r * 5 + j] = acc;
            q[r * 5 + j] = (uint8_t)quant_ref((double)((float)acc * mult), 100, 0, 255);
            f[r * 5 + j] = h + (double)((float)qb[j] * (0.125f * 0.01f));
        }
    te_fuse_plan *p = te_graph_fuse(g, NULL, NULL);
    te_graph_exec *e = NULL;
    if (!p || te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    int32_t gy[30];
    uint8_t gq[30];
    float gf[30];
    if (te_graph_run(e, (const void *[]){qa, qx}, (void *[]){gy, gq, gf}))
        fail_msg("%s", te_graph_errmsg(g));
    int nq = 0;
    for (int i = 0; i < 30; i++) {
        assert_int_equal(gy[i], y[i]);
        assert_int_equal(gq[i], q[i]);
        nq += q[i] != 0 && q[i] != 255;
        if (!(fabs(gf[i] - f[i]) <= 1e-5 * fmax(1.0, fabs(f[i]))))
            fail_msg("f[%d]: %.9g, directly %.9g", i, (double)gf[i], f[i]);
    }
    assert_true(nq > 10); /* most requantized values are inside the range */
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_quantized_ops_refuse_per_axis_and_bad_parameters(void **state)
{
    (void)state;
    /* Per-column b_scale with as many values as B has columns: matmul_integer + a per-column
     * requantization; with another count: refused, naming the node, the input and the counts. */
    build_quant_model();
    M.inits[4] =
        om_tensor_f("sw", 1, (int64_t[]){5}, (float[]){0.01f, 0.02f, 0.01f, 0.01f, 0.01f}, 1);
    te_graph *pc = import_ok(write_model("quant_per_column.onnx", 0), NULL);
    assert_int_equal(count_op(pc, "requantize_axis"), 1);
    assert_int_equal(count_op(pc, "dequantize_axis"), 1); /* dqw reads sw too */
    te_graph_free(pc);
    M.inits[4] = om_tensor_f("sw", 1, (int64_t[]){4}, (float[]){0.01f, 0.02f, 0.01f, 0.01f}, 1);
    import_fails(write_model("quant_per_column_len.onnx", 0), NULL,
                 "node 'qmm' (QLinearMatMul): b_scale 'sw' has 4 values (rank 1) but b's column "
                 "count has 5");
    /* Equal values are per tensor. */
    build_quant_model();
    M.inits[4] =
        om_tensor_f("sw", 1, (int64_t[]){5}, (float[]){0.01f, 0.01f, 0.01f, 0.01f, 0.01f}, 1);
    te_graph *eq = import_ok(write_model("quant_equal_scales.onnx", 0), NULL);
    assert_int_equal(count_op(eq, "requantize_axis"), 0);
    te_graph_free(eq);
    /* A per-axis QuantizeLinear scale: 3 values along axis 1 (extent 3) are per axis; along
     * axis 2 (extent 4) they are refused; a negative one among them too. */
    build_quant_model();
    M.inits[7] = om_tensor_f("sx", 1, (int64_t[]){3}, (float[]){0.125f, 0.25f, 0.5f}, 1);
    te_graph *pa = import_ok(write_model("quant_per_axis.onnx", 0), NULL);
    assert_int_equal(count_op(pa, "quantize_axis"), 1);
    te_graph_free(pa);
    M.nn = 0;
    om_node(&M, "MatMulInteger", "mmi", "a,w,az,wz", "y", NULL);
    om_node(&M, "QLinearMatMul", "qmm", "a,sa,az,w,sw,wz,sy,yz", "q", NULL);
    om_node(&M, "QuantizeLinear", "qx", "x,sx,xz", "xq", om_attr_i("axis", 2), NULL);
    om_node(&M, "DequantizeLinear", "dqx", "xq,sx,xz", "xd", om_attr_i("axis", 2), NULL);
    om_node(&M, "DequantizeLinear", "dqw", "w,sw,wz", "wd", NULL);
    om_node(&M, "DequantizeLinear", "dqb", "b,sb", "bd", NULL);
    om_node(&M, "MatMul", "mm", "xd,wd", "h", NULL);
    om_node(&M, "Add", "bias", "h,bd", "f", NULL);
    import_fails(write_model("quant_per_axis_len.onnx", 0), NULL,
                 "node 'qx' (QuantizeLinear): y_scale 'sx' has 3 values (rank 1) but the axis of x "
                 "has 4");
    build_quant_model();
    M.inits[7] = om_tensor_f("sx", 1, (int64_t[]){3}, (float[]){0.125f, -0.25f, 0.5f}, 1);
    import_fails(
        write_model("quant_per_axis_negative.onnx", 0), NULL,
        "node 'qx' (QuantizeLinear): y_scale 'sx' element 1 is -0.25; a scale is positive");
    build_quant_model();
    M.inits[7] = om_tensor_f("sx", 1, (int64_t[]){3}, (float[]){0.125f, NAN, 0.5f}, 1);
    import_fails(write_model("quant_per_axis_nan.onnx", 0), NULL,
                 "node 'qx' (QuantizeLinear): y_scale 'sx' element 1 is nan");
    /* Per-row zero points of MatMulInteger. */
    build_quant_model();
    M.inits[1] = tensor_raw("az", U8T, 1, (int64_t[]){3}, (uint8_t[]){1, 2, 3}, 1);
    import_fails(write_model("quant_per_row_zero.onnx", 0), NULL,
                 "node 'mmi' (MatMulInteger): a_zero_point 'az' has 3 different values (per-row");
    /* A uint8 zero point whose int32_data holds 300. */
    build_quant_model();
    Onnx__TensorProto *z = tensor_raw("az", U8T, 0, NULL, (uint8_t[]){0}, 1);
    z->has_raw_data = 0;
    z->n_int32_data = 1;
    z->int32_data = om_alloc(sizeof(int32_t));
    z->int32_data[0] = 300;
    M.inits[1] = z;
    import_fails(write_model("quant_zero_range.onnx", 0), NULL,
                 "node 'mmi' (MatMulInteger): a_zero_point 'az' is 300, outside the range [0, 255] "
                 "of u8");
    /* A zero point of another type than its operand. */
    build_quant_model();
    M.inits[1] = tensor_raw("az", I8T, 0, NULL, (int8_t[]){7}, 1);
    import_fails(write_model("quant_zero_type.onnx", 0), NULL,
                 "node 'mmi' (MatMulInteger): a_zero_point 'az' has element type 3 but the values "
                 "it applies to are u8");
    /* A scale computed at run time (a graph input). */
    build_quant_model();
    M.inits[7] = om_tensor_f("unused", 0, NULL, (float[]){1}, 1);
    M.ins[M.nin++] = om_vinfo("sx", 1, (int64_t[]){1}, NULL);
    import_fails(write_model("quant_scale_input.onnx", 0), NULL,
                 "node 'qx' (QuantizeLinear): y_scale 'sx' must be a constant");
    /* A float operand of MatMulInteger; a batched B. */
    build_quant_model();
    M.nn = 0;
    om_node(&M, "MatMulInteger", "mmf", "x,w", "y", NULL);
    import_fails(write_model("quant_float_a.onnx", 0), NULL,
                 "node 'mmf' (MatMulInteger): input A 'x' is f32; uint8 or int8 expected");
    M.nn = 0;
    M.inits[0] = tensor_raw("w", I8T, 3, (int64_t[]){1, 4, 5}, qw, 1);
    om_node(&M, "MatMulInteger", "mmb", "a,w", "y", NULL);
    import_fails(write_model("quant_batched_b.onnx", 0), NULL,
                 "node 'mmb' (MatMulInteger): B has rank 3");
    /* A zero scale. */
    build_quant_model();
    M.inits[10] = om_tensor_f("sb", 0, NULL, (float[]){0.0f}, 1);
    import_fails(write_model("quant_zero_scale.onnx", 0), NULL,
                 "node 'dqb' (DequantizeLinear): x_scale 'sb' is 0; a scale is positive");
}

/* QLinearConv (per-output-channel weight scales, an int32 bias, padding), ConvInteger and
 * DynamicQuantizeLinear import onto conv2d + requantize_axis and dynamic_quantize; bad scales,
 * biases, operands and non-constant parameters are refused naming the node and the input. */
static int8_t cw[3 * 2 * 3 * 3];
static int32_t cb[3];

static void build_qconv_model(const char *ws_name, int ws_n, const float *ws)
{
    om_reset(&M);
    for (size_t i = 0; i < sizeof cw; i++)
        cw[i] = (int8_t)irand(-128, 127);
    for (int i = 0; i < 3; i++)
        cb[i] = (int32_t)irand(-300, 300);
    M.ins[M.nin++] = om_vinfo("x", 4, (int64_t[]){1, 2, 5, 5}, NULL);
    set_elem(M.ins[0], U8T);
    M.outs[M.nout++] = om_vinfo("y", 4, (int64_t[]){1, 3, 5, 5}, NULL);
    set_elem(M.outs[0], U8T);
    M.inits[M.ni++] = tensor_raw("w", I8T, 4, (int64_t[]){3, 2, 3, 3}, cw, 1);
    M.inits[M.ni++] = om_tensor_f("xs", 0, NULL, (float[]){0.02f}, 1);
    M.inits[M.ni++] = tensor_raw("xz", U8T, 0, NULL, (uint8_t[]){120}, 1);
    M.inits[M.ni++] = om_tensor_f(ws_name, 1, (int64_t[]){ws_n}, ws, 1);
    M.inits[M.ni++] = tensor_raw("wz", I8T, 1, (int64_t[]){3}, (int8_t[]){0, 0, 0}, 1);
    M.inits[M.ni++] = om_tensor_f("ys", 0, NULL, (float[]){0.3f}, 1);
    M.inits[M.ni++] = tensor_raw("yz", U8T, 0, NULL, (uint8_t[]){128}, 1);
    M.inits[M.ni++] =
        tensor_raw("b", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){3}, cb, 4);
    om_node(&M, "QLinearConv", "qc", "x,xs,xz,w,ws,wz,ys,yz,b", "y",
            om_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), NULL);
}

static void test_quantized_conv_and_dynamic_quantize_import_and_refuse_bad_parameters(void **state)
{
    (void)state;
    const float ws[3] = {0.01f, 0.02f, 0.005f};
    build_qconv_model("ws", 3, ws);
    te_graph *g = import_ok(write_model("qconv.onnx", 0), NULL);
    assert_int_equal(count_op(g, "conv2d"), 1);
    assert_int_equal(count_op(g, "requantize_axis"), 1);
    te_graph_free(g);
    /* w_scale with 2 values for 3 output channels; a zero one; y_scale an input; a float B */
    build_qconv_model("ws", 2, ws);
    import_fails(write_model("qconv_ws_len.onnx", 0), NULL,
                 "node 'qc' (QLinearConv): w_scale 'ws' has 2 values (rank 1) but w's output "
                 "channels (axis 0) has 3");
    build_qconv_model("ws", 3, (float[]){0.01f, 0.0f, 0.02f});
    import_fails(write_model("qconv_ws_zero.onnx", 0), NULL,
                 "node 'qc' (QLinearConv): w_scale 'ws' element 1 is 0; a scale is positive");
    build_qconv_model("ws", 3, ws);
    M.inits[5] = om_tensor_f("unused", 0, NULL, (float[]){1}, 1);
    M.ins[M.nin++] = om_vinfo("ys", 1, (int64_t[]){1}, NULL);
    import_fails(write_model("qconv_ys_input.onnx", 0), NULL,
                 "node 'qc' (QLinearConv): y_scale 'ys' must be a constant");
    build_qconv_model("ws", 3, ws);
    M.inits[7] = om_tensor_f("b", 1, (int64_t[]){3}, (float[]){1, 2, 3}, 1);
    import_fails(write_model("qconv_float_bias.onnx", 0), NULL,
                 "node 'qc' (QLinearConv): B 'b' must be an int32 constant");
    /* a float x; ConvInteger with per-channel zero points of a non-constant w */
    build_qconv_model("ws", 3, ws);
    set_elem(M.ins[0], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    import_fails(write_model("qconv_float_x.onnx", 0), NULL,
                 "node 'qc' (QLinearConv): input x 'x' is f32; uint8 or int8 expected");
    build_qconv_model("ws", 3, ws);
    M.nn = 0;
    M.inits[0] = om_tensor_f("unused_w", 0, NULL, (float[]){1}, 1);
    M.ins[M.nin++] = om_vinfo("w", 4, (int64_t[]){3, 2, 3, 3}, NULL);
    set_elem(M.ins[1], I8T);
    M.inits[4] = tensor_raw("wz", I8T, 1, (int64_t[]){3}, (int8_t[]){0, 1, 2}, 1);
    set_elem(M.outs[0], ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    om_node(&M, "ConvInteger", "ci", "x,w,xz,wz", "y",
            om_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), NULL);
    import_fails(write_model("convint_wz_input_w.onnx", 0), NULL,
                 "node 'ci' (ConvInteger): w_zero_point 'wz' is per output channel but w 'w' is "
                 "not a constant");
    /* A 1x1 ConvInteger with a constant w: imported as a matmul_integer_zp over NHWC rows (the
     * int8 lowering's form), no conv2d left; a 3x3 one stays conv2d. */
    {
        static int8_t cw1[4 * 8 * 9]; /* room for both kernels */
        for (size_t i = 0; i < sizeof cw1; i++)
            cw1[i] = (int8_t)irand(-128, 127);
        for (int kk = 1; kk <= 3; kk += 2) {
            om_reset(&M);
            M.ins[M.nin++] = om_vinfo("x", 4, (int64_t[]){1, 8, 4, 4}, NULL);
            set_elem(M.ins[0], U8T);
            M.outs[M.nout++] = om_vinfo("y", 4, (int64_t[]){1, kk == 1 ? 32 : 4, 4, 4}, NULL);
            set_elem(M.outs[0], ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
            M.inits[M.ni++] = kk == 1 ? tensor_raw("w", I8T, 4, (int64_t[]){32, 8, 1, 1}, cw1, 1)
                                      : tensor_raw("w", I8T, 4, (int64_t[]){4, 8, 3, 3}, cw1, 1);
            M.inits[M.ni++] = tensor_raw("xz", U8T, 0, NULL, (uint8_t[]){120}, 1);
            M.inits[M.ni++] = tensor_raw("wz", I8T, 0, NULL, (int8_t[]){3}, 1);
            om_node(&M, "ConvInteger", "ci", "x,w,xz,wz", "y",
                    kk == 1 ? NULL : om_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), NULL);
            g = import_ok(write_model("convint_1x1.onnx", 0), NULL);
            assert_int_equal(count_op(g, "matmul_integer_zp"), kk == 1 ? 1 : 0);
            assert_int_equal(count_op(g, "conv2d"), kk == 1 ? 0 : 1);
            assert_true(te_graph_find(g, "y") >= 0);
            te_graph_free(g);
        }
    }
    /* DynamicQuantizeLinear of a float input, and of a uint8 one */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 3}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 3}, NULL);
    set_elem(M.outs[0], U8T);
    M.outs[M.nout++] = om_vinfo("ys", 0, NULL, NULL);
    M.outs[M.nout++] = om_vinfo("yz", 0, NULL, NULL);
    set_elem(M.outs[2], U8T);
    om_node(&M, "DynamicQuantizeLinear", "dq", "x", "y,ys,yz", NULL);
    g = import_ok(write_model("dynamic_quantize.onnx", 0), NULL);
    assert_int_equal(count_op(g, "dynamic_quantize"), 1);
    assert_int_equal(te_graph_output_count(g), 3);
    te_graph_free(g);
    set_elem(M.ins[0], U8T);
    import_fails(write_model("dynamic_quantize_u8.onnx", 0), NULL,
                 "node 'dq' (DynamicQuantizeLinear): input x 'x' is u8; float32 expected");
}

static void test_bad_models(void **state)
{
    (void)state;
    build_mlp();
    size_t size;
    om_pack(&M, &size);
    import_fails(write_model("truncated.onnx", size / 2), "batch=1", "");
    import_fails(write_model("empty.onnx", 1), "batch=1", ""); /* one byte */
    FILE *f = fopen(path_of("text.onnx"), "w");
    fputs("input x f32[2]\ny = relu(x)\noutput y\n", f);
    fclose(f);
    import_fails(path_of("text.onnx"), NULL, "not an ONNX model");
    import_fails(path_of("no_such_file.onnx"), NULL, "cannot open");

    /* A missing initializer. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 4}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 8}, NULL);
    om_node(&M, "MatMul", "mm", "x,fc.weight", "y", NULL);
    import_fails(write_model("missing_init.onnx", 0), NULL, "input 'fc.weight' is not defined");

    /* A cycle. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 1, (int64_t[]){4}, NULL);
    M.outs[M.nout++] = om_vinfo("b", 1, (int64_t[]){4}, NULL);
    om_node(&M, "Add", "first", "x,b", "a", NULL);
    om_node(&M, "Relu", "second", "a", "b", NULL);
    import_fails(write_model("cycle.onnx", 0), NULL, "cyclic graph");

    /* Shapes that do not broadcast, and a declared shape that disagrees. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 3}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 3}, NULL);
    M.inits[M.ni++] = om_tensor_f("c", 1, (int64_t[]){4}, (float[]){1, 2, 3, 4}, 1);
    om_node(&M, "Add", "bad_add", "x,c", "y", NULL);
    import_fails(write_model("shape_mismatch.onnx", 0), NULL, "node 'bad_add' (Add)");
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 3}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 4}, NULL);
    om_node(&M, "Relu", "r", "x", "y", NULL);
    import_fails(write_model("declared_mismatch.onnx", 0), NULL, "declared [2,4] but is [2,3]");

    /* Unknown operators: all listed with their nodes, nothing imported. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 3}, NULL);
    M.outs[M.nout++] = om_vinfo("z", 2, (int64_t[]){2, 3}, NULL);
    om_node(&M, "Relu", "ok", "x", "a", NULL);
    om_node(&M, "FooBar", "foo_1", "a", "b", NULL);
    om_node(&M, "LSTM", "lstm_0", "b", "z", NULL);
    import_fails(write_model("unknown_op.onnx", 0), NULL,
                 "2 unsupported nodes: FooBar (node 'foo_1'), LSTM (node 'lstm_0')");
    M.opset = 3;
    import_fails(write_model("old_opset.onnx", 0), NULL, "opset 3");

    /* A tensor claiming 2 GB in a tiny file, and one claiming more elements than exist. */
    om_reset(&M);
    M.ins[M.nin++] = om_vinfo("x", 2, (int64_t[]){2, 2}, NULL);
    M.outs[M.nout++] = om_vinfo("y", 2, (int64_t[]){2, 2}, NULL);
    Onnx__TensorProto *t = om_tensor_f("huge", 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4}, 1);
    t->dims[0] = (int64_t)1 << 28;
    t->dims[1] = 2; /* 2^29 floats: 2 GiB */
    M.inits[M.ni++] = t;
    om_node(&M, "Add", "add", "x,huge", "y", NULL);
    import_fails(write_model("huge_tensor.onnx", 0), NULL, "raw_data holds 16 bytes");
    t->dims[0] = (int64_t)1 << 40;
    import_fails(write_model("huge_dims.onnx", 0), NULL, "too many elements");
    t->has_raw_data = 0;
    t->n_float_data = 3;
    t->float_data = om_alloc(3 * sizeof(float));
    t->dims[0] = 2;
    import_fails(write_model("short_typed.onnx", 0), NULL, "holds 3 elements");
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(12));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_gelu),
        cmocka_unit_test(test_gelus_sharing_constants_are_both_recognised),
        cmocka_unit_test(test_conv_bn_relu),
        cmocka_unit_test(test_shape_chain),
        cmocka_unit_test(test_norm_reduce_external),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_attention_gemm),
        cmocka_unit_test(test_index_ops_and_reductions_at_run_time),
        cmocka_unit_test(test_compare_and_logic_ops),
        cmocka_unit_test(test_index_ops_refuse_unsupported_forms_naming_the_node),
        cmocka_unit_test(test_quantized_ops_match_a_direct_computation),
        cmocka_unit_test(test_quantized_ops_refuse_per_axis_and_bad_parameters),
        cmocka_unit_test(test_quantized_conv_and_dynamic_quantize_import_and_refuse_bad_parameters),
        cmocka_unit_test(test_bad_models),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    om_reset(&M);
    return rc;
}
