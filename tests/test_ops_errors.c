/* Operator library: bad inputs return NULL with a message naming the tensor and axis; the
 * stage finder; the registry (KEY=VAL parser, builders, workload keys). */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/ops.h"
#include "testutil.h"

static te_tensor *ph(te_ctx *ctx, const char *name, int ndim, const int64_t *shape)
{
    te_tensor *t = te_placeholder(ctx, name, TE_F32, ndim, shape);
    assert_non_null(t);
    return t;
}

#define SHAPE(...)                                                                                 \
    (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

/* Asserts that `t` is NULL and that the context's message contains every string given, then
 * clears the error for the next case. */
static void expect_fail(te_ctx *ctx, const void *t, int line, const char *const *needles)
{
    const char *msg = te_ctx_errmsg(ctx);
    if (getenv("TESSERA_SHOW_ERRORS"))
        fprintf(stderr, "line %d: %s\n", line, msg);
    if (t != NULL) {
        fprintf(stderr, "line %d: expected NULL, got a tensor\n", line);
        fail();
    }
    if (te_ctx_errcode(ctx) == TE_OK) {
        fprintf(stderr, "line %d: no error recorded\n", line);
        fail();
    }
    for (const char *const *n = needles; *n; n++)
        if (!strstr(msg, *n)) {
            fprintf(stderr, "line %d: message \"%s\" lacks \"%s\"\n", line, msg, *n);
            fail();
        }
    te_ctx_clear_error(ctx);
}
#define EXPECT_FAIL(ctx, t, ...)                                                                   \
    expect_fail(ctx, t, __LINE__, (const char *const[]){__VA_ARGS__, NULL})

static int n_bad_cases;
#define BAD(ctx, t, ...)                                                                           \
    do {                                                                                           \
        EXPECT_FAIL(ctx, t, __VA_ARGS__);                                                          \
        n_bad_cases++;                                                                             \
    } while (0)

static void test_bad_linear_algebra(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = ph(ctx, "A", SHAPE(4, 5)), *B = ph(ctx, "B", SHAPE(6, 7));
    te_tensor *A3 = ph(ctx, "A3", SHAPE(2, 4, 5));
    te_tensor *B57 = ph(ctx, "B57", SHAPE(5, 7));
    te_tensor *D = te_placeholder(ctx, "D", TE_F64, 2, (int64_t[]){5, 7});

    BAD(ctx, te_op_matmul(ctx, A3, B57, 0, 0, "C"), "matmul 'C'", "'A3'", "rank 3");
    BAD(ctx, te_op_matmul(ctx, A, B, 0, 0, "C"), "'A'", "axis 1", "'B'", "axis 0");
    BAD(ctx, te_op_matmul(ctx, A, B, 1, 1, "C"), "'A'", "axis 0", "'B'", "axis 1");
    BAD(ctx, te_op_matmul(ctx, A, NULL, 0, 0, "C"), "input 'B' is NULL");
    BAD(ctx, te_op_matmul(ctx, A, D, 0, 0, "C"), "input 'B' ('D') has dtype f64");

    te_tensor *Bb = ph(ctx, "Bb", SHAPE(3, 5, 2));
    BAD(ctx, te_op_batch_matmul(ctx, A3, Bb, 0, 0, "C"), "batch axis 0", "'A3'", "'Bb'");

    te_tensor *W = ph(ctx, "W", SHAPE(5, 7)), *bias = ph(ctx, "bias", SHAPE(6));
    BAD(ctx, te_op_dense_bias(ctx, A, W, bias, "Y"), "bias 'bias' axis 0", "'W' axis 1");

    te_tensor *bias7 = ph(ctx, "b7", SHAPE(7)), *W3 = ph(ctx, "W3", SHAPE(5, 8));
    BAD(ctx, te_op_mlp_gate(ctx, A, W, W3, "Y"), "'W3'", "axis 1");
    BAD(ctx, te_op_matmul_bias_act(ctx, A, W, bias7, (te_op_act)42, "Y"), "activation 42");
    BAD(ctx, te_op_matmul_bias_act(ctx, A, W, bias, TE_ACT_RELU, "Y"), "bias 'bias' axis 0");

    te_tensor *Wk = ph(ctx, "Wk", SHAPE(4, 8)), *out[3];
    int rc = te_op_qkv_projection(ctx, A, W, Wk, W, out, "qkv");
    assert_int_equal(rc, TE_ERR_SHAPE);
    assert_null(out[0]);
    BAD(ctx, NULL, "weight 'Wk'", "axis 0", "'A'", "axis 1");
    te_ctx_free(ctx);
}

static void test_bad_convolution_and_pooling(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", SHAPE(1, 3, 8, 8));
    te_tensor *W4 = ph(ctx, "W", SHAPE(4, 4, 3, 3));
    te_tensor *W3 = ph(ctx, "W3", SHAPE(4, 3, 3, 3));
    te_conv2d_params p = te_conv2d_params_default();

    BAD(ctx, te_op_conv2d(ctx, X, W4, &p, "Y"), "input 'X' channel axis 1 has 3 channels",
        "weight 'W' axis 1 expects 4");
    p.groups = 2;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "groups 2 does not divide", "'X' (axis 1)");
    te_tensor *X4 = ph(ctx, "X4", SHAPE(1, 4, 8, 8)), *Wo = ph(ctx, "Wo", SHAPE(3, 2, 3, 3));
    BAD(ctx, te_op_conv2d(ctx, X4, Wo, &p, "Y"), "output channels of weight 'Wo' (axis 0)");
    p = te_conv2d_params_default();
    p.pad_h = -1;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "padding (-1, 0)");
    p = te_conv2d_params_default();
    p.stride_w = 0;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "stride (1, 0)");
    p = te_conv2d_params_default();
    p.dilation_h = 0;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "dilation (0, 1)");
    te_conv2d_params zero = {0};
    BAD(ctx, te_op_conv2d(ctx, X, W3, &zero, "Y"), "stride");
    p = te_conv2d_params_default();
    p.layout = (te_op_layout)7;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "layout 7");
    te_tensor *Xs = ph(ctx, "Xs", SHAPE(1, 3, 2, 8));
    BAD(ctx, te_op_conv2d(ctx, Xs, W3, NULL, "Y"), "input 'Xs' height axis 2", "window spans 3");
    p.layout = TE_LAYOUT_NCHW;
    p.dilation_w = 4;
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "width axis 3", "spans 9");
    te_tensor *X3 = ph(ctx, "X3d", SHAPE(3, 8, 8));
    BAD(ctx, te_op_conv2d(ctx, X3, W3, NULL, "Y"), "input 'X' ('X3d') has rank 3", "rank 4");
    p = te_conv2d_params_default();
    p.layout = TE_LAYOUT_NHWC; /* X is [1, 3, 8, 8]: 8 channels in NHWC */
    BAD(ctx, te_op_conv2d(ctx, X, W3, &p, "Y"), "channel axis 3 has 8 channels",
        "weight 'W3' axis 2");
    BAD(ctx, te_op_conv2d(ctx, NULL, W3, NULL, "Y"), "input 'X' is NULL");

    te_tensor *Wd = ph(ctx, "Wd", SHAPE(4, 1, 3, 3));
    BAD(ctx, te_op_depthwise_conv2d(ctx, X, Wd, NULL, "Y"), "channel axis 1 has 3",
        "weight 'Wd' axis 0 has 4");
    p = te_conv2d_params_default();
    p.layout = TE_LAYOUT_NHWC;
    BAD(ctx, te_op_depthwise_conv2d(ctx, X, Wd, &p, "Y"), "NCHW");

    te_tensor *sc = ph(ctx, "scale", SHAPE(5)), *sh = ph(ctx, "shift", SHAPE(4));
    BAD(ctx, te_op_conv2d_bn_relu(ctx, X, W3, sc, sh, NULL, "Y"), "scale 'scale' axis 0",
        "4 output channels");

    te_pool2d_params pp = {3, 3, 1, 1, 3, 0, 0};
    BAD(ctx, te_op_pool2d(ctx, X, TE_POOL_MAX, &pp, "P"), "padding (3, 0)", "smaller than");
    pp = (te_pool2d_params){0, 3, 1, 1, 0, 0, 0};
    BAD(ctx, te_op_pool2d(ctx, X, TE_POOL_MAX, &pp, "P"), "kernel (0, 3)");
    pp = (te_pool2d_params){2, 2, 1, 0, 0, 0, 0};
    BAD(ctx, te_op_pool2d(ctx, X, TE_POOL_AVG, &pp, "P"), "stride (1, 0)");
    te_tensor *Xi = te_placeholder(ctx, "Xi", TE_I32, 4, (int64_t[]){1, 1, 4, 4});
    pp = (te_pool2d_params){2, 2, 2, 2, 0, 0, 0};
    BAD(ctx, te_op_pool2d(ctx, Xi, TE_POOL_AVG, &pp, "P"), "'Xi'", "dtype i32");
    assert_non_null(te_op_pool2d(ctx, Xi, TE_POOL_MAX, &pp, "P")); /* max works on ints */
    pp = (te_pool2d_params){9, 2, 1, 1, 0, 0, 0};
    BAD(ctx, te_op_pool2d(ctx, X, TE_POOL_MAX, &pp, "P"), "input 'X' height axis 2");
    te_ctx_free(ctx);
}

static void test_bad_elementwise_and_layout(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = ph(ctx, "A", SHAPE(2, 3)), *B = ph(ctx, "B", SHAPE(4));
    te_tensor *X = ph(ctx, "X", SHAPE(2, 3, 4));
    te_tensor *Xi = te_placeholder(ctx, "Xi", TE_I32, 2, (int64_t[]){2, 3});

    BAD(ctx, te_op_binary(ctx, TE_ADD, A, B, "Y"), "input 'A' ('A') axis 1 (extent 3)",
        "input 'B' ('B') axis 0 (extent 4)");
    BAD(ctx, te_op_binary(ctx, TE_MOD, A, A, "Y"), "operator");
    BAD(ctx, te_op_binary(ctx, TE_MUL, A, Xi, "Y"), "('Xi') has dtype i32");
    BAD(ctx, te_op_gelu(ctx, Xi, "Y"), "('Xi') has dtype i32", "f32 or f64");
    BAD(ctx, te_op_relu(ctx, NULL, "Y"), "relu 'Y'", "input 'X' is NULL");
    BAD(ctx, te_op_activation(ctx, A, TE_ACT_COUNT, "Y"), "invalid activation");

    BAD(ctx, te_op_pad(ctx, X, 3, (int64_t[]){0, -1, 0}, (int64_t[]){0, 0, 0}, 0, "Y"),
        "'X' axis 1", "(-1, 0)");
    BAD(ctx, te_op_pad(ctx, X, 2, (int64_t[]){0, 0}, (int64_t[]){0, 0}, 0, "Y"),
        "2 padding entries", "'X' has rank 3");

    BAD(ctx, te_op_transpose(ctx, X, (int[]){0, 1, 1}, "Y"), "perm[2] repeats axis 1");
    BAD(ctx, te_op_transpose(ctx, X, (int[]){0, 3, 1}, "Y"), "perm[1] = 3", "'X' (rank 3)");

    BAD(ctx, te_op_reshape(ctx, X, 2, (int64_t[]){5, 5}, "Y"), "'X' has 24 elements",
        "target shape has 25");
    BAD(ctx, te_op_reshape(ctx, X, 2, (int64_t[]){-1, -1}, "Y"), "target axis 1");
    BAD(ctx, te_op_reshape(ctx, X, 2, (int64_t[]){5, -1}, "Y"), "not a multiple of 5",
        "target axis 1");

    BAD(ctx, te_op_softmax(ctx, X, 3, "S"), "axis 3", "'X' of rank 3");
    BAD(ctx, te_op_softmax(ctx, X, -4, "S"), "axis -4");
    BAD(ctx, te_op_softmax(ctx, Xi, -1, "S"), "'Xi'", "i32");

    te_tensor *g = ph(ctx, "g", SHAPE(3));
    BAD(ctx, te_op_layer_norm(ctx, X, g, NULL, 1e-5, -1, "LN"), "gamma 'g' axis 0 has 3",
        "'X' axis 2 has 4");
    assert_non_null(te_op_layer_norm(ctx, X, g, NULL, 1e-5, 1, "LN")); /* axis 1 has 3 */
    BAD(ctx, te_op_layer_norm(ctx, X, NULL, A, 1e-5, 1, "LN"), "beta ('A') has rank 2");
    BAD(ctx, te_op_rms_norm(ctx, X, NULL, -1.0, "R"), "eps -1");
    BAD(ctx, te_op_rms_norm(ctx, X, g, 1e-6, "R"), "gamma 'g' axis 0");

    BAD(ctx, te_op_reduce(ctx, X, TE_RSUM, 2, (int[]){1, -2}, 0, "R"),
        "axis 1 of input 'X' is "
        "listed twice");
    BAD(ctx, te_op_reduce(ctx, X, TE_RCUSTOM, 1, (int[]){0}, 0, "R"), "reduction kind");
    BAD(ctx, te_op_mean(ctx, X, 1, (int[]){5}, 0, "R"), "axis 5");

    /* A bad output name is reported by te_compute. */
    BAD(ctx, te_op_relu(ctx, A, "not a name"), "not a name");
    te_ctx_free(ctx);
}

static void test_first_error_is_kept(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = ph(ctx, "A", SHAPE(2, 3)), *B = ph(ctx, "B", SHAPE(4, 5));
    te_tensor *C = te_op_matmul(ctx, A, B, 0, 0, "C");
    te_tensor *D = te_op_relu(ctx, C, "D"); /* NULL input: the first message stays */
    assert_null(D);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "matmul 'C'"));
    te_ctx_free(ctx);
}

static void test_bad_case_count(void **state)
{
    (void)state;
    /* The spec asks for at least 20 distinct bad calls; run after the three groups. */
    assert_true(n_bad_cases >= 20);
}

/* ---- te_op_find, tags ----------------------------------------------------------------- */

static void test_find_stages_and_tags(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = ph(ctx, "X", SHAPE(1, 2, 5, 5)), *W = ph(ctx, "W", SHAPE(3, 2, 3, 3));
    te_conv2d_params p = te_conv2d_params_default();
    p.pad_h = p.pad_w = 1;
    te_tensor *Y = te_op_conv2d(ctx, X, W, &p, "conv");
    te_tensor *Z = te_op_relu(ctx, Y, "act");
    assert_non_null(Z);
    te_tensor *pad = te_op_find(Z, "conv_pad");
    assert_non_null(pad);
    assert_string_equal(te_tensor_tag(pad), "conv2d_pad");
    assert_ptr_equal(te_op_find(Z, "conv"), Y);
    assert_ptr_equal(te_op_find(Z, "act"), Z);
    assert_null(te_op_find(Z, "X")); /* placeholders are not stages */
    assert_null(te_op_find(Z, "nothing"));
    assert_null(te_op_find(NULL, "conv"));
    te_tensor *st[2];
    assert_int_equal(te_op_stages(Z, st, 2), 3); /* count even past the capacity */
    assert_ptr_equal(st[0], pad);
    assert_ptr_equal(st[1], Y);
    te_ctx_free(ctx);
}

/* ---- registry ---------------------------------------------------------------------------- */

static void test_params_parse(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    assert_int_equal(te_op_params_parse(ctx, " m=4, n = 5,k=6 ,layout=NHWC,dtype=f64", &kv), TE_OK);
    assert_int_equal(kv.n, 4);
    assert_string_equal(kv.p[1].key, "n");
    assert_true(kv.p[1].is_int);
    assert_int_equal(kv.p[1].ival, 5);
    assert_false(kv.p[3].is_int);
    assert_string_equal(kv.p[3].val, "NHWC");
    assert_int_equal(kv.dtype, TE_F64);
    assert_int_equal(te_op_params_parse(ctx, "", &kv), TE_OK);
    assert_int_equal(kv.n, 0);
    assert_int_equal(kv.dtype, TE_F32);

    const struct {
        const char *text, *needle;
    } bad[] = {{"m", "not KEY=VAL"},
               {"m=", "empty value"},
               {"=4", "empty key"},
               {"m=1,m=2", "'m' is given twice"},
               {"m=1,,n=2", "empty item"},
               {"m=1,", "empty item"},
               {"dtype=f17", "unknown dtype 'f17'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(te_op_params_parse(ctx, bad[i].text, &kv), TE_ERR_ARG);
        if (!strstr(te_ctx_errmsg(ctx), bad[i].needle)) {
            fprintf(stderr, "'%s': message \"%s\" lacks \"%s\"\n", bad[i].text, te_ctx_errmsg(ctx),
                    bad[i].needle);
            fail();
        }
        te_ctx_clear_error(ctx);
    }
    te_ctx_free(ctx);
}

static void test_workload_key(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    char key[256];
    const te_op_info *mm = te_op_lookup("matmul");
    assert_non_null(mm);
    assert_null(te_op_lookup("no_such_op"));
    assert_int_equal(te_op_params_parse(ctx, "n=1024,m=1024,k=1024", &kv), TE_OK);
    int len = te_op_workload_key(ctx, mm, &kv, key, sizeof key);
    assert_string_equal(key, "matmul;k=1024,m=1024,n=1024;f32");
    assert_int_equal(len, (int)strlen(key));
    assert_int_equal(te_op_params_parse(ctx, "k=1024,trans_a=0,m=1024,n=1024,trans_b=1", &kv),
                     TE_OK);
    te_op_workload_key(ctx, mm, &kv, key, sizeof key);
    assert_string_equal(key, "matmul;k=1024,m=1024,n=1024,trans_b=1;f32");

    const te_op_info *cv = te_op_lookup("conv2d");
    char k1[256], k2[256];
    assert_int_equal(te_op_params_parse(ctx, "n=1,c=3,h=32,w=32,oc=8,kh=3,kw=3,pad=1", &kv), TE_OK);
    te_op_workload_key(ctx, cv, &kv, k1, sizeof k1);
    assert_int_equal(te_op_params_parse(ctx,
                                        "kw=3,kh=3,oc=8,w=32,h=32,c=3,n=1,pad=1,stride=1,"
                                        "layout=NCHW,dtype=f32",
                                        &kv),
                     TE_OK);
    te_op_workload_key(ctx, cv, &kv, k2, sizeof k2);
    assert_string_equal(k1, k2);
    assert_string_equal(k1, "conv2d;c=3,h=32,kh=3,kw=3,n=1,oc=8,pad=1,w=32;f32");

    assert_int_equal(te_op_params_parse(ctx, "m=4,n=4", &kv), TE_OK);
    assert_true(te_op_workload_key(ctx, mm, &kv, key, sizeof key) < 0);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "missing key 'k'"));
    te_ctx_free(ctx);
}

static void test_build_errors(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int ni, no;
    const struct {
        const char *op, *params, *needle;
        int rc;
    } bad[] = {
        {"matmul", "m=4,n=4", "missing key 'k'", TE_ERR_ARG},
        {"matmul", "m=4,n=4,k=4,q=1", "unknown key 'q'", TE_ERR_ARG},
        {"matmul", "m=4,n=x,k=4", "key 'n' has value 'x', which is not an integer", TE_ERR_ARG},
        {"matmul", "m=4,n=4.5,k=4", "'4.5'", TE_ERR_ARG},
        {"conv2d", "n=1,c=3,h=8,w=8,oc=4,kh=3,kw=3,layout=NCDHW", "use one of NCHW|NHWC",
         TE_ERR_ARG},
        {"conv2d", "n=1,c=3,h=8,w=8,oc=4,kh=3,kw=3,groups=2", "groups 2 does not divide",
         TE_ERR_ARG},
        {"matmul", "m=0,n=4,k=4", "non-positive extent", TE_ERR_SHAPE},
        {"matmul", "m=4,n=24,k=4,nb=16", "nb = 16 does not divide n = 24", TE_ERR_SHAPE},
        {"mlp_gate", "m=4,n=24,k=4,nb=-8", "nb = -8 does not divide n = 24", TE_ERR_SHAPE},
        {"nope", "m=1", "unknown operator 'nope'", TE_ERR_NOT_FOUND},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = te_op_build(ctx, bad[i].op, bad[i].params, in, &ni, out, &no);
        if (rc != bad[i].rc || !strstr(te_ctx_errmsg(ctx), bad[i].needle)) {
            fprintf(stderr, "%s %s: rc %d, message \"%s\" (want %d, \"%s\")\n", bad[i].op,
                    bad[i].params, rc, te_ctx_errmsg(ctx), bad[i].rc, bad[i].needle);
            fail();
        }
        te_ctx_clear_error(ctx);
    }
    te_ctx_free(ctx);
}

/* Flags (keys documented "1: ...") take only 0 or 1: "trans_a=7" must not become part of a
 * workload key. Checked for every flag of every operator, through the key and the builder. */
static void test_flag_keys_take_zero_or_one(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    int n_ops = 0, n_flags = 0;
    const te_op_info *ops = te_op_list(&n_ops);
    for (int o = 0; o < n_ops; o++) {
        for (int k = 0; k < ops[o].nkeys; k++) {
            const te_op_key *key = &ops[o].keys[k];
            if (key->is_str || strncmp(key->help, "1:", 2) != 0)
                continue;
            n_flags++;
            /* Small values for the operator's other required keys. */
            char base[512] = "";
            for (int j = 0; j < ops[o].nkeys; j++)
                if (!ops[o].keys[j].dflt)
                    snprintf(base + strlen(base), sizeof base - strlen(base), "%s=4,",
                             ops[o].keys[j].name);
            const char *bad[] = {"7", "-1", "2"};
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                char params[600], wkey[256];
                snprintf(params, sizeof params, "%s%s=%s", base, key->name, bad[b]);
                te_op_params kv;
                assert_int_equal(te_op_params_parse(ctx, params, &kv), TE_OK);
                int len = te_op_workload_key(ctx, &ops[o], &kv, wkey, sizeof wkey);
                if (len >= 0 || !strstr(te_ctx_errmsg(ctx), "takes 0 or 1")) {
                    fprintf(stderr, "%s %s: key %d \"%s\", message \"%s\"\n", ops[o].name, params,
                            len, len >= 0 ? wkey : "", te_ctx_errmsg(ctx));
                    fail();
                }
                assert_non_null(strstr(te_ctx_errmsg(ctx), key->name));
                te_ctx_clear_error(ctx);
                te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
                int ni, no;
                assert_int_equal(te_op_build(ctx, ops[o].name, params, in, &ni, out, &no),
                                 TE_ERR_ARG);
                assert_non_null(strstr(te_ctx_errmsg(ctx), "takes 0 or 1"));
                te_ctx_clear_error(ctx);
            }
            for (int v = 0; v <= 1; v++) {
                char params[600], wkey[256];
                snprintf(params, sizeof params, "%s%s=%d", base, key->name, v);
                te_op_params kv;
                assert_int_equal(te_op_params_parse(ctx, params, &kv), TE_OK);
                assert_true(te_op_workload_key(ctx, &ops[o], &kv, wkey, sizeof wkey) > 0);
            }
        }
    }
    assert_true(n_flags >= 6); /* matmul, batch_matmul (2 each), avg_pool2d, bias add */
    te_ctx_free(ctx);
}

/* Small values for every required key; builds and evaluates every registered operator. */
static void test_build_every_operator(void **state)
{
    (void)state;
    const struct {
        const char *key;
        int val;
    } small[] = {{"m", 3},  {"n", 2},  {"k", 4},  {"b", 2},   {"c", 2},  {"h", 5},  {"w", 4},
                 {"oc", 3}, {"kh", 2}, {"kw", 3}, {"pad", 1}, {"lq", 3}, {"lk", 5}, {"dh", 4}};
    int nops = 0;
    const te_op_info *ops = te_op_list(&nops);
    assert_true(nops >= 25);
    tt_rng rng;
    tt_rng_seed(&rng, 5);
    for (int o = 0; o < nops; o++) {
        const te_op_info *op = &ops[o];
        assert_non_null(op->description);
        assert_non_null(op->build);
        char params[256] = "";
        for (int k = 0; k < op->nkeys; k++) {
            if (op->keys[k].dflt)
                continue;
            int v = 0;
            for (size_t s = 0; s < sizeof small / sizeof small[0]; s++)
                if (strcmp(small[s].key, op->keys[k].name) == 0)
                    v = small[s].val;
            assert_true(v > 0);
            snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s=%d",
                     params[0] ? "," : "", op->keys[k].name, v);
        }
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni = 0, no = 0;
        int rc = te_op_build(ctx, op->name, params, in, &ni, out, &no);
        if (rc) {
            fprintf(stderr, "%s %s: %s\n", op->name, params, te_ctx_errmsg(ctx));
            fail();
        }
        assert_true(ni >= 1 && no >= 1);
        void *data[TE_OP_MAX_IO];
        for (int i = 0; i < ni; i++) {
            size_t n = (size_t)te_tensor_numel(in[i]);
            data[i] = malloc(sizeof(float) * n);
            tt_fill_f32(&rng, data[i], n);
        }
        double *res[TE_OP_MAX_IO];
        for (int i = 0; i < no; i++) {
            res[i] = malloc(sizeof(double) * (size_t)te_tensor_numel(out[i]));
            assert_true(te_tensor_tag(out[i])[0] != 0);
        }
        rc = te_reference_eval(ctx, ni, in, (const void *const *)data, no, out, res);
        if (rc) {
            fprintf(stderr, "%s: %s\n", op->name, te_ctx_errmsg(ctx));
            fail();
        }
        for (int i = 0; i < no; i++) {
            for (int64_t j = 0; j < te_tensor_numel(out[i]); j++)
                assert_true(isfinite(res[i][j]));
            free(res[i]);
        }
        for (int i = 0; i < ni; i++)
            free(data[i]);
        te_ctx_free(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_linear_algebra),
        cmocka_unit_test(test_bad_convolution_and_pooling),
        cmocka_unit_test(test_bad_elementwise_and_layout),
        cmocka_unit_test(test_bad_case_count),
        cmocka_unit_test(test_first_error_is_kept),
        cmocka_unit_test(test_find_stages_and_tags),
        cmocka_unit_test(test_params_parse),
        cmocka_unit_test(test_workload_key),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_flag_keys_take_zero_or_one),
        cmocka_unit_test(test_build_every_operator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
