/* The operators a graph node may apply: every registry operator plus the graph's own
 * (batch_norm, reshape), each with its pattern kind (TVM's OpPatternKind), its inputs, its
 * attributes with defaults, and a function that builds it on given input tensors by calling the
 * public te_op_* constructors. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* ---- Attributes --------------------------------------------------------------------------- */

/* Default value text of `key` in op->attrs, copied into buf; NULL when op has no such key. */
static const char *attr_default(const te__gop *op, const char *key, char *buf, size_t n)
{
    size_t klen = strlen(key);
    for (const char *p = op->attrs; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq && (size_t)(eq - p) == klen && strncmp(p, key, klen) == 0) {
            size_t vl = len - klen - 1;
            if (vl >= n)
                vl = n - 1;
            memcpy(buf, eq + 1, vl);
            buf[vl] = 0;
            return buf;
        }
        p = comma ? comma + 1 : p + len;
    }
    return NULL;
}

const char *te__gop_attr_str(const te__gop *op, const te_op_params *kv, const char *key, char *buf,
                             size_t n)
{
    for (int i = 0; kv && i < kv->n; i++)
        if (strcmp(kv->p[i].key, key) == 0) {
            snprintf(buf, n, "%s", kv->p[i].val);
            return buf;
        }
    const char *d = attr_default(op, key, buf, n);
    return d ? d : "";
}

int64_t te__gop_attr_int(const te__gop *op, const te_op_params *kv, const char *key)
{
    char buf[64];
    return strtoll(te__gop_attr_str(op, kv, key, buf, sizeof buf), NULL, 10);
}

double te__gop_attr_f64(const te__gop *op, const te_op_params *kv, const char *key)
{
    char buf[64];
    return strtod(te__gop_attr_str(op, kv, key, buf, sizeof buf), NULL);
}

int te__gop_check_attrs(te_ctx *ctx, const te__gop *op, const te_op_params *kv)
{
    for (int i = 0; i < kv->n; i++) {
        char buf[64];
        if (!attr_default(op, kv->p[i].key, buf, sizeof buf))
            return te_ctx_set_error(ctx, TE_ERR_ARG, "unknown attribute '%s' (%s takes: %s)",
                                    kv->p[i].key, op->name, *op->attrs ? op->attrs : "none");
        if (te__gop_is_user(op)) /* user operators read their attributes themselves */
            continue;
        /* An attribute whose default is not an integer (a scale "1.0", a dtype "u8") takes any
         * value its operator parses; integer ones must be integers. */
        char *end;
        (void)strtoll(buf, &end, 10);
        if (!*buf || *end)
            continue;
        if (strcmp(kv->p[i].key, "layout") == 0 || strcmp(kv->p[i].key, "act") == 0 ||
            strcmp(kv->p[i].key, "perm") == 0 || strcmp(kv->p[i].key, "shape") == 0 ||
            strcmp(kv->p[i].key, "eps") == 0 || strcmp(kv->p[i].key, "value") == 0 ||
            strcmp(kv->p[i].key, "axes") == 0 || strcmp(kv->p[i].key, "starts") == 0 ||
            strcmp(kv->p[i].key, "ends") == 0 || strcmp(kv->p[i].key, "steps") == 0 ||
            strcmp(kv->p[i].key, "sizes") == 0 || strcmp(kv->p[i].key, "scale") == 0 ||
            strcmp(kv->p[i].key, "to") == 0)
            continue;
        if (!kv->p[i].is_int)
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "attribute '%s' has value '%s', not an "
                                    "integer",
                                    kv->p[i].key, kv->p[i].val);
    }
    return TE_OK;
}

/* "1:0:2" into ints; returns the count or -1. */
static int parse_list(const char *s, int64_t *out, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || n == cap)
            return -1;
        out[n++] = v;
        s = end;
        if (*s == ':')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* ---- Builders ----------------------------------------------------------------------------- */

#define APPLY_ARGS                                                                                 \
    te_ctx *ctx, const te__gop *op, const te_op_params *kv, int n_in, te_tensor *const *in,        \
        const char *const *names, te_tensor **out
#define UNUSED_ARGS (void)op, (void)kv, (void)n_in, (void)in

static int done(te_ctx *ctx, te_tensor *t, te_tensor **out)
{
    out[0] = t;
    return t ? TE_OK : (te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL);
}

static int ap_matmul(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_matmul(ctx, in[0], in[1], (int)te__gop_attr_int(op, kv, "trans_a"),
                             (int)te__gop_attr_int(op, kv, "trans_b"), names[0]),
                out);
}

static int ap_batch_matmul(APPLY_ARGS)
{
    UNUSED_ARGS;
    int ta = (int)te__gop_attr_int(op, kv, "trans_a"),
        tb = (int)te__gop_attr_int(op, kv, "trans_b");
    te_tensor *B = in[1];
    const int64_t *as = te_tensor_ndim(in[0]) == 3 ? te_tensor_shape(in[0]) : NULL;
    if (tb && as && as[ta ? 2 : 1] > 16 && te_tensor_ndim(B) == 3) {
        /* B stored [b, n, k] (attention's Q K^T): its transpose [b, k, n] as a stage of its
         * own, which a schedule computes once (a prologue of the gemm template), so that the
         * product's tiles read rows of it along j, contiguous, instead of gathering a column
         * of B per vector. Skinny products (16 rows or fewer) keep B: they reduce along k. */
        char nm[160];
        snprintf(nm, sizeof nm, "%s_bt", names[0]);
        B = te_op_transpose(ctx, B, (const int[]){0, 2, 1}, nm);
        tb = 0;
    }
    return done(ctx, B ? te_op_batch_matmul(ctx, in[0], B, ta, tb, names[0]) : NULL, out);
}

static int ap_dense_bias(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_dense_bias(ctx, in[0], in[1], in[2], names[0]), out);
}

static te_conv2d_params conv_params(const te__gop *op, const te_op_params *kv)
{
    te_conv2d_params p = te_conv2d_params_default();
    char buf[16];
    p.stride_h = p.stride_w = (int32_t)te__gop_attr_int(op, kv, "stride");
    p.pad_h = p.pad_w = (int32_t)te__gop_attr_int(op, kv, "pad");
    p.dilation_h = p.dilation_w = (int32_t)te__gop_attr_int(op, kv, "dilation");
    if (strstr(op->attrs, "groups="))
        p.groups = (int32_t)te__gop_attr_int(op, kv, "groups");
    if (strstr(op->attrs, "layout="))
        p.layout = strcmp(te__gop_attr_str(op, kv, "layout", buf, sizeof buf), "NHWC") == 0
                       ? TE_LAYOUT_NHWC
                       : TE_LAYOUT_NCHW;
    return p;
}

static int check_layout(te_ctx *ctx, const te__gop *op, const te_op_params *kv)
{
    char buf[16];
    const char *l = te__gop_attr_str(op, kv, "layout", buf, sizeof buf);
    if (strcmp(l, "NCHW") && strcmp(l, "NHWC"))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "attribute layout=%s: use NCHW or NHWC", l);
    return TE_OK;
}

static int ap_conv2d(APPLY_ARGS)
{
    UNUSED_ARGS;
    int rc = check_layout(ctx, op, kv);
    if (rc)
        return rc;
    te_conv2d_params p = conv_params(op, kv);
    return done(ctx, te_op_conv2d(ctx, in[0], in[1], &p, names[0]), out);
}

static int ap_conv2d_bn_relu(APPLY_ARGS)
{
    UNUSED_ARGS;
    int rc = check_layout(ctx, op, kv);
    if (rc)
        return rc;
    te_conv2d_params p = conv_params(op, kv);
    return done(ctx, te_op_conv2d_bn_relu(ctx, in[0], in[1], in[2], in[3], &p, names[0]), out);
}

static int ap_depthwise(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_conv2d_params p = conv_params(op, kv);
    return done(ctx, te_op_depthwise_conv2d(ctx, in[0], in[1], &p, names[0]), out);
}

static int ap_pool(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_pool2d_params p = {0};
    p.kernel_h = p.kernel_w = (int32_t)te__gop_attr_int(op, kv, "kernel");
    p.stride_h = p.stride_w = (int32_t)te__gop_attr_int(op, kv, "stride");
    p.pad_h = p.pad_w = (int32_t)te__gop_attr_int(op, kv, "pad");
    int avg = strcmp(op->name, "avg_pool2d") == 0;
    if (avg)
        p.count_include_pad = (int32_t)te__gop_attr_int(op, kv, "include_pad");
    return done(ctx, te_op_pool2d(ctx, in[0], avg ? TE_POOL_AVG : TE_POOL_MAX, &p, names[0]), out);
}

static int ap_pad(APPLY_ARGS)
{
    UNUSED_ARGS;
    int nd = te_tensor_ndim(in[0]);
    int64_t before[TE_MAX_DIMS] = {0}, after[TE_MAX_DIMS] = {0};
    int64_t pad = te__gop_attr_int(op, kv, "pad");
    for (int d = nd - 2; d < nd; d++)
        if (d >= 0)
            before[d] = after[d] = pad;
    return done(
        ctx, te_op_pad(ctx, in[0], nd, before, after, te__gop_attr_f64(op, kv, "value"), names[0]),
        out);
}

static int ap_softmax(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_softmax(ctx, in[0], (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

/* Fused attention: Q, K, V [batch, heads, L, dh] and an optional additive mask; causal=1 for
 * the causal mask instead, scale=0 for 1 / sqrt(dh). */
/* Quantized matmuls (te/ops/quant.c): per-tensor zero points and scales as attributes. */
static int ap_matmul_integer(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_matmul_integer(ctx, in[0], in[1], (int32_t)te__gop_attr_int(op, kv, "a_zero"),
                                     (int32_t)te__gop_attr_int(op, kv, "b_zero"), names[0]),
                out);
}

static int ap_qlinear_matmul(APPLY_ARGS)
{
    UNUSED_ARGS;
    char buf[16];
    te_dtype yd;
    const char *y = te__gop_attr_str(op, kv, "y_dtype", buf, sizeof buf);
    if (te_dtype_parse(y, &yd) != TE_OK)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "attribute y_dtype=%s is not a dtype", y);
    return done(ctx,
                te_op_qlinear_matmul(ctx, in[0], te__gop_attr_f64(op, kv, "a_scale"),
                                     (int32_t)te__gop_attr_int(op, kv, "a_zero"), in[1],
                                     te__gop_attr_f64(op, kv, "b_scale"),
                                     (int32_t)te__gop_attr_int(op, kv, "b_zero"),
                                     te__gop_attr_f64(op, kv, "y_scale"),
                                     (int32_t)te__gop_attr_int(op, kv, "y_zero"), yd, names[0]),
                out);
}

/* Elementwise quantization (te/ops/quant.c): per-tensor scale / multiplier and zero point. */
static int quant_to(te_ctx *ctx, const te__gop *op, const te_op_params *kv, const char *key,
                    te_dtype *to)
{
    char buf[16];
    const char *v = te__gop_attr_str(op, kv, key, buf, sizeof buf);
    if (te_dtype_parse(v, to) != TE_OK)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "attribute %s=%s is not a dtype", key, v);
    return TE_OK;
}

static int ap_quant_ew(APPLY_ARGS)
{
    UNUSED_ARGS;
    int32_t zero = (int32_t)te__gop_attr_int(op, kv, "zero");
    te_dtype to = TE_U8;
    if (strcmp(op->name, "dequantize_linear") && quant_to(ctx, op, kv, "to", &to))
        return te_ctx_errcode(ctx);
    te_tensor *y =
        !strcmp(op->name, "quantize_linear")
            ? te_op_quantize_linear(ctx, in[0], te__gop_attr_f64(op, kv, "scale"), zero, to,
                                    names[0])
        : !strcmp(op->name, "requantize")
            ? te_op_requantize(ctx, in[0], te__gop_attr_f64(op, kv, "mult"), zero, to, names[0])
            : te_op_dequantize_linear(ctx, in[0], te__gop_attr_f64(op, kv, "scale"), zero,
                                      names[0]);
    return done(ctx, y, out);
}

/* Per-axis quantization (te/ops/quant.c): scales, multipliers and zero points as 1-D tensor
 * inputs along attribute axis. */
static int ap_quant_axis(APPLY_ARGS)
{
    UNUSED_ARGS;
    int axis = (int)te__gop_attr_int(op, kv, "axis");
    te_dtype to = TE_U8;
    if (strcmp(op->name, "dequantize_axis") && quant_to(ctx, op, kv, "to", &to))
        return te_ctx_errcode(ctx);
    te_tensor *z = n_in > 2 ? in[2] : NULL;
    te_tensor *y =
        !strcmp(op->name, "dequantize_axis")
            ? te_op_dequantize_axis(ctx, in[0], in[1], z, axis, names[0])
        : !strcmp(op->name, "quantize_axis")
            ? te_op_quantize_axis(ctx, in[0], in[1], z, axis, to, names[0])
            : te_op_requantize_axis(ctx, in[0], in[1], axis,
                                    (int32_t)te__gop_attr_int(op, kv, "zero"), to, names[0]);
    return done(ctx, y, out);
}

static int ap_matmul_integer_zp(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_matmul_integer_zp(ctx, in[0], in[1], in[2], in[3], names[0]), out);
}

/* ONNX DynamicQuantizeLinear: y (u8), its scale and zero point ([1] each, computed from X). */
static int ap_dynamic_quantize(APPLY_ARGS)
{
    UNUSED_ARGS;
    int rc = te_op_dynamic_qparams(ctx, in[0], names[2], &out[1], &out[2]);
    if (rc)
        return rc;
    return done(ctx, te_op_quantize_axis(ctx, in[0], out[1], out[2], 0, TE_U8, names[0]), out);
}

/* VNNI packing and the matmul over it (te/ops/quant.c); the accumulation follows A: f32 for
 * float inputs, i32 for bytes. */
static int ap_pack_vnni(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_pack_vnni(ctx, in[0], (int)te__gop_attr_int(op, kv, "group"), names[0]),
                out);
}

static int ap_matmul_vnni(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_dtype acc = te_dtype_is_float(te_tensor_dtype(in[0])) ? TE_F32 : TE_I32;
    return done(ctx, te_op_matmul_vnni(ctx, in[0], in[1], acc, names[0]), out);
}

static int ap_conv2d_vnni(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_dtype acc = te_dtype_is_float(te_tensor_dtype(in[0])) ? TE_F32 : TE_I32;
    return done(ctx,
                te_op_conv2d_vnni(ctx, in[0], in[1], (int)te__gop_attr_int(op, kv, "stride"), acc,
                                  names[0]),
                out);
}

static int ap_attention(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_attention_params p = te_attention_params_default();
    p.scale = te__gop_attr_f64(op, kv, "scale");
    int causal = (int)te__gop_attr_int(op, kv, "causal") != 0;
    if (causal && n_in > 3)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "attention: causal=1 and an explicit mask input; give one");
    p.mask = n_in > 3 ? TE_ATTN_MASK_EXPLICIT : causal ? TE_ATTN_MASK_CAUSAL : TE_ATTN_MASK_NONE;
    return done(
        ctx, te_op_attention(ctx, in[0], in[1], in[2], n_in > 3 ? in[3] : NULL, &p, names[0]), out);
}

static int ap_layer_norm(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_layer_norm(ctx, in[0], n_in > 1 ? in[1] : NULL, n_in > 2 ? in[2] : NULL,
                                 te__gop_attr_f64(op, kv, "eps"),
                                 (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

static int ap_rms_norm(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_rms_norm(ctx, in[0], n_in > 1 ? in[1] : NULL, te__gop_attr_f64(op, kv, "eps"),
                               names[0]),
                out);
}

static int ap_act(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_op_act act;
    if (te_op_act_parse(op->name, &act))
        return te_ctx_set_error(ctx, TE_ERR_INTERNAL, "no activation '%s'", op->name);
    return done(ctx, te_op_activation(ctx, in[0], act, names[0]), out);
}

static int ap_binary(APPLY_ARGS)
{
    UNUSED_ARGS;
    static const struct {
        const char *name;
        te_binop op;
    } ops[] = {{"add", TE_ADD}, {"sub", TE_SUB},     {"mul", TE_MUL},
               {"div", TE_DIV}, {"minimum", TE_MIN}, {"maximum", TE_MAX}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].name, op->name) == 0)
            return done(ctx, te_op_binary(ctx, ops[i].op, in[0], in[1], names[0]), out);
    return TE_ERR_INTERNAL;
}

static int ap_transpose(APPLY_ARGS)
{
    UNUSED_ARGS;
    int nd = te_tensor_ndim(in[0]);
    int perm[TE_MAX_DIMS];
    char buf[64];
    const char *s = te__gop_attr_str(op, kv, "perm", buf, sizeof buf);
    if (!*s) { /* swap the last two axes */
        for (int d = 0; d < nd; d++)
            perm[d] = d;
        if (nd >= 2) {
            perm[nd - 1] = nd - 2;
            perm[nd - 2] = nd - 1;
        }
    } else {
        int64_t v[TE_MAX_DIMS];
        if (parse_list(s, v, TE_MAX_DIMS) != nd)
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "attribute perm=%s: need %d axes separated by ':'", s, nd);
        for (int d = 0; d < nd; d++)
            perm[d] = (int)v[d];
    }
    return done(ctx, te_op_transpose(ctx, in[0], perm, names[0]), out);
}

static int ap_reshape(APPLY_ARGS)
{
    UNUSED_ARGS;
    char buf[128];
    int64_t shape[TE_MAX_DIMS];
    const char *s = te__gop_attr_str(op, kv, "shape", buf, sizeof buf);
    int nd = parse_list(s, shape, TE_MAX_DIMS);
    if (nd < 1)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "attribute shape='%s': give extents separated by ':' (one may "
                                "be -1)",
                                s);
    return done(ctx, te_op_reshape(ctx, in[0], nd, shape, names[0]), out);
}

static int ap_sum(APPLY_ARGS)
{
    UNUSED_ARGS;
    int axis = (int)te__gop_attr_int(op, kv, "axis");
    return done(ctx,
                te_op_reduce(ctx, in[0], TE_RSUM, 1, &axis,
                             (int)te__gop_attr_int(op, kv, "keepdims"), names[0]),
                out);
}

/* argmax/argmin: the node's one output is the index (i64); the value is the tuple stage's
 * other output, kept inside the node. */
static int ap_arg(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_arg_reduce(ctx, in[0], strcmp(op->name, "argmax") == 0,
                                 (int)te__gop_attr_int(op, kv, "axis"),
                                 (int)te__gop_attr_int(op, kv, "keepdims"), names[0]),
                out);
}

static int ap_layer_norm_welford(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_layer_norm_welford(ctx, in[0], n_in > 1 ? in[1] : NULL,
                                         n_in > 2 ? in[2] : NULL, te__gop_attr_f64(op, kv, "eps"),
                                         (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

static int ap_softmax_online(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_softmax_online(ctx, in[0], (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

static int ap_matmul_bias_act(APPLY_ARGS)
{
    UNUSED_ARGS;
    char buf[16];
    te_op_act act;
    const char *a = te__gop_attr_str(op, kv, "act", buf, sizeof buf);
    if (te_op_act_parse(a, &act))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "attribute act=%s is not an activation", a);
    return done(
        ctx, te_op_matmul_bias_act(ctx, in[0], in[1], n_in > 2 ? in[2] : NULL, act, names[0]), out);
}

static int ap_mlp_gate(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                te_op_mlp_gate_tb(ctx, in[0], in[1], in[2],
                                  (int)te__gop_attr_int(op, kv, "trans_b"), names[0]),
                out);
}

static int ap_qkv(APPLY_ARGS)
{
    UNUSED_ARGS;
    te_tensor *o[3] = {NULL, NULL, NULL};
    int rc = te_op_qkv_projection(ctx, in[0], in[1], in[2], in[3], o, names[0]);
    if (rc)
        return rc;
    /* The operator names its outputs "<name>_q" ...; the graph names them itself. */
    for (int i = 0; i < 3; i++)
        out[i] = o[i];
    return TE_OK;
}

/* Inference batch norm over axis `axis`: (x - mean) * rsqrt(var + eps) * gamma + beta. */
typedef struct bn_args {
    te_tensor *x, *gamma, *beta, *mean, *var;
    int axis;
    double eps;
} bn_args;

static te_expr *bn_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    bn_args *a = user;
    int nd = te_tensor_ndim(a->x);
    te_expr *x = te_read(ctx, a->x, nd, axes);
    te_expr *c = axes[a->axis];
    te_expr *inv = te_rsqrt(
        ctx, te_add(ctx, TE_AT(ctx, a->var, c), te_const(ctx, te_tensor_dtype(a->x), a->eps)));
    te_expr *norm = te_mul(ctx, te_sub(ctx, x, TE_AT(ctx, a->mean, c)), inv);
    return te_add(ctx, te_mul(ctx, norm, TE_AT(ctx, a->gamma, c)), TE_AT(ctx, a->beta, c));
}

static int ap_batch_norm(APPLY_ARGS)
{
    UNUSED_ARGS;
    bn_args a = {in[0],
                 in[1],
                 in[2],
                 in[3],
                 in[4],
                 (int)te__gop_attr_int(op, kv, "axis"),
                 te__gop_attr_f64(op, kv, "eps")};
    int nd = te_tensor_ndim(a.x);
    if (a.axis < 0)
        a.axis += nd;
    if (a.axis < 0 || a.axis >= nd)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "batch_norm: axis %d is outside rank %d",
                                (int)te__gop_attr_int(op, kv, "axis"), nd);
    te_dtype dt = te_tensor_dtype(a.x);
    if (dt != TE_F32 && dt != TE_F64)
        return te_ctx_set_error(ctx, TE_ERR_DTYPE, "batch_norm: needs f32 or f64, not %s",
                                te_dtype_str(dt));
    if (!(a.eps >= 0))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "batch_norm: eps must be >= 0");
    int64_t c = te_tensor_shape(a.x)[a.axis];
    const char *pn[] = {"gamma", "beta", "mean", "var"};
    for (int i = 1; i < 5; i++)
        if (te_tensor_ndim(in[i]) != 1 || te_tensor_shape(in[i])[0] != c)
            return te_ctx_set_error(ctx, TE_ERR_SHAPE,
                                    "batch_norm: input %d (%s) '%s' must have shape [%lld] (the "
                                    "extent of axis %d of '%s')",
                                    i + 1, pn[i - 1], te_tensor_name(in[i]), (long long)c, a.axis,
                                    te_tensor_name(a.x));
    te_tensor *y = te_compute_shape(ctx, names[0], nd, te_tensor_shape(a.x), bn_body, &a);
    if (y)
        te_tensor_set_tag(ctx, y, "batch_norm");
    return done(ctx, y, out);
}

/* ---- Intrinsic elementwise operators (exp, log, sqrt, rsqrt, erf, abs, floor, ceil)
 * --------------------- */
/* One stage y = fn(x) over X's shape with the te_call intrinsic; for front ends (the ONNX
 * importer) whose models use them outside the library's fused operators. */
typedef struct intrin_args {
    te_tensor *x;
    te_intrin fn;
} intrin_args;

static te_expr *intrin_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    const intrin_args *a = user;
    te_expr *x = te_read(ctx, a->x, te_tensor_ndim(a->x), axes);
    return te_call(ctx, a->fn, 1, &x);
}

static int ap_intrin(APPLY_ARGS)
{
    UNUSED_ARGS;
    static const struct {
        const char *name;
        te_intrin fn;
    } fns[] = {{"exp", TE_EXP},     {"log", TE_LOG},   {"sqrt", TE_SQRT},
               {"rsqrt", TE_RSQRT}, {"erf", TE_ERF},   {"abs", TE_FABS},
               {"floor", TE_FLOOR}, {"ceil", TE_CEIL}, {"round", TE_RINT}};
    te_dtype dt = te_tensor_dtype(in[0]);
    if (dt != TE_F32 && dt != TE_F64)
        return te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s: needs f32 or f64, not %s", op->name,
                                te_dtype_str(dt));
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!strcmp(fns[i].name, op->name)) {
            intrin_args u = {in[0], fns[i].fn};
            te_tensor *y = te_compute_shape(ctx, names[0], te_tensor_ndim(in[0]),
                                            te_tensor_shape(in[0]), intrin_body, &u);
            if (y)
                te_tensor_set_tag(ctx, y, op->name);
            return done(ctx, y, out);
        }
    return TE_ERR_INTERNAL;
}

/* ---- Comparison and logic (te/ops/compare.c): u8 truth values ------------------------------ */

static int ap_compare(APPLY_ARGS)
{
    UNUSED_ARGS;
    static const struct {
        const char *name;
        te_binop op;
        int logic;
    } ops[] = {{"equal", TE_EQ, 0},      {"not_equal", TE_NE, 0}, {"less", TE_LT, 0},
               {"less_equal", TE_LE, 0}, {"greater", TE_GT, 0},   {"greater_equal", TE_GE, 0},
               {"and", TE_AND, 1},       {"or", TE_OR, 1},        {"xor", TE_NE, 1}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].name, op->name) == 0)
            return done(ctx,
                        ops[i].logic ? te_op_logic(ctx, ops[i].op, in[0], in[1], names[0])
                                     : te_op_compare(ctx, ops[i].op, in[0], in[1], names[0]),
                        out);
    return TE_ERR_INTERNAL;
}

static int ap_mod(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_mod(ctx, in[0], in[1], (int)te__gop_attr_int(op, kv, "fmod"), names[0]),
                out);
}

static int ap_not_sign(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx,
                strcmp(op->name, "not") == 0 ? te_op_not(ctx, in[0], names[0])
                                             : te_op_sign(ctx, in[0], names[0]),
                out);
}

/* cast: y = (to) x elementwise with te_cast (C conversion rules); to= a dtype name but bool. */
typedef struct cast_args {
    te_tensor *x;
    te_dtype to;
} cast_args;

static te_expr *cast_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    const cast_args *a = user;
    return te_cast(ctx, a->to, te_read(ctx, a->x, te_tensor_ndim(a->x), axes));
}

static int ap_cast(APPLY_ARGS)
{
    UNUSED_ARGS;
    char buf[32];
    const char *s = te__gop_attr_str(op, kv, "to", buf, sizeof buf);
    cast_args u = {in[0], TE_F32};
    if (te_dtype_parse(s, &u.to) != TE_OK || u.to == TE_BOOL)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "cast: attribute to=%s is not a value dtype (f32, f64, i64, i32, "
                                "u8, ...)",
                                s);
    te_tensor *y = te_compute_shape(ctx, names[0], te_tensor_ndim(in[0]), te_tensor_shape(in[0]),
                                    cast_body, &u);
    if (y)
        te_tensor_set_tag(ctx, y, "cast");
    return done(ctx, y, out);
}

/* ---- Index operators and more reductions (te/ops/index.c, te/ops/reduce_more.c) ------------ */

/* List attribute `key` ("0:-1"; "" gives 0 entries) into v; count, or an error status. */
static int list_attr(te_ctx *ctx, const te__gop *op, const te_op_params *kv, const char *key,
                     int64_t *v)
{
    char buf[TE__G_ATTRS];
    const char *s = te__gop_attr_str(op, kv, key, buf, sizeof buf);
    int n = parse_list(s, v, TE_MAX_DIMS);
    if (n < 0)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "attribute %s=%s: give at most %d integers separated by ':'", key,
                                s, TE_MAX_DIMS);
    return n;
}

static int ap_concat(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_concat(ctx, n_in, in, (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

static int ap_slice(APPLY_ARGS)
{
    UNUSED_ARGS;
    int64_t ax[TE_MAX_DIMS], st[TE_MAX_DIMS], en[TE_MAX_DIMS], sp[TE_MAX_DIMS];
    int na = list_attr(ctx, op, kv, "axes", ax), ns = list_attr(ctx, op, kv, "starts", st);
    int ne = list_attr(ctx, op, kv, "ends", en), np = list_attr(ctx, op, kv, "steps", sp);
    if (na < 0 || ns < 0 || ne < 0 || np < 0)
        return te_ctx_errcode(ctx);
    if (ne != ns || (na && na != ns) || (np && np != ns))
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "slice: starts has %d entries, ends %d, axes %d, steps %d; give "
                                "one per sliced axis (axes and steps may be left empty)",
                                ns, ne, na, np);
    int axes[TE_MAX_DIMS];
    for (int i = 0; i < na; i++)
        axes[i] = (int)ax[i];
    return done(
        ctx, te_op_slice(ctx, in[0], ns, na ? axes : NULL, st, en, np ? sp : NULL, names[0]), out);
}

/* split: as many outputs as the node names (names is NULL-terminated), sizes "a:b:c" or equal
 * parts. */
static int ap_split(APPLY_ARGS)
{
    UNUSED_ARGS;
    int n = 0;
    while (n < TE__G_MAXIO && names[n])
        n++;
    int64_t sizes[TE_MAX_DIMS];
    int ns = list_attr(ctx, op, kv, "sizes", sizes);
    if (ns < 0)
        return te_ctx_errcode(ctx);
    if (ns && ns != n)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "split: sizes lists %d parts for %d outputs", ns,
                                n);
    return te_op_split(ctx, in[0], (int)te__gop_attr_int(op, kv, "axis"), n, ns ? sizes : NULL, out,
                       names[0]);
}

static int ap_gather(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(
        ctx, te_op_gather(ctx, in[0], in[1], (int)te__gop_attr_int(op, kv, "axis"), names[0]), out);
}

static int ap_where(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_where(ctx, in[0], in[1], in[2], names[0]), out);
}

static int ap_expand(APPLY_ARGS)
{
    UNUSED_ARGS;
    char buf[TE__G_ATTRS];
    int64_t shape[TE_MAX_DIMS];
    const char *s = te__gop_attr_str(op, kv, "shape", buf, sizeof buf);
    int nd = parse_list(s, shape, TE_MAX_DIMS);
    if (nd < 1)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "attribute shape='%s': give extents separated by ':'", s);
    return done(ctx, te_op_expand(ctx, in[0], nd, shape, names[0]), out);
}

static int ap_log_softmax(APPLY_ARGS)
{
    UNUSED_ARGS;
    return done(ctx, te_op_log_softmax(ctx, in[0], (int)te__gop_attr_int(op, kv, "axis"), names[0]),
                out);
}

/* reduce_max, reduce_l2: axes "a:b" (empty: all axes), keepdims. */
static int ap_reduce_axes(APPLY_ARGS)
{
    UNUSED_ARGS;
    int64_t ax[TE_MAX_DIMS];
    int na = list_attr(ctx, op, kv, "axes", ax), axes[TE_MAX_DIMS];
    if (na < 0)
        return te_ctx_errcode(ctx);
    for (int i = 0; i < na; i++)
        axes[i] = (int)ax[i];
    if (!na)
        for (na = 0; na < te_tensor_ndim(in[0]); na++)
            axes[na] = na;
    int keep = (int)te__gop_attr_int(op, kv, "keepdims");
    te_tensor *y = strcmp(op->name, "reduce_l2") == 0
                       ? te_op_reduce_l2(ctx, in[0], na, axes, keep, names[0])
                       : te_op_reduce(ctx, in[0], TE_RMAX, na, axes, keep, names[0]);
    return done(ctx, y, out);
}

int te__gop_input_any_dtype(const te__gop *op, int i)
{
    /* gather's indices are integers and where's condition any dtype (non-zero is true), while
     * the data inputs share one dtype. */
    return (strcmp(op->name, "gather") == 0 && i == 1) ||
           (strcmp(op->name, "where") == 0 && i == 0) ||
           strcmp(op->name, "matmul_integer") == 0 || /* u8 x i8 */
           strcmp(op->name, "qlinear_matmul") == 0 ||
           strcmp(op->name, "matmul_vnni") == 0 || /* u8 x i8 */
           strcmp(op->name, "dequantize_linear") == 0 || strcmp(op->name, "requantize") == 0 ||
           strcmp(op->name, "quantize_linear") == 0 || strcmp(op->name, "conv2d_vnni") == 0 ||
           strcmp(op->name, "dequantize_axis") == 0 || strcmp(op->name, "quantize_axis") == 0 ||
           strcmp(op->name, "requantize_axis") == 0 || strcmp(op->name, "matmul_integer_zp") == 0;
}

/* ---- The table ---------------------------------------------------------------------------- */

#define CONV_ATTRS "stride=1,pad=0,dilation=1,groups=1,layout=NCHW"
#define EW(nm, cost)                                                                               \
    {                                                                                              \
        nm, TE_KIND_ELEMWISE, 1, 1, 1, "X", "", cost, ap_act                                       \
    }
#define BIN(nm)                                                                                    \
    {                                                                                              \
        nm, TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_binary                                    \
    }

static const te__gop table[] = {
    {"matmul", TE_KIND_OUT_EWISE_FUSABLE, 2, 2, 1, "A,B", "trans_a=0,trans_b=0", 0, ap_matmul},
    {"batch_matmul", TE_KIND_OUT_EWISE_FUSABLE, 2, 2, 1, "A,B", "trans_a=0,trans_b=0", 0,
     ap_batch_matmul},
    {"dense_bias", TE_KIND_OUT_EWISE_FUSABLE, 3, 3, 1, "X,W,bias", "", 0, ap_dense_bias},
    {"conv2d", TE_KIND_OUT_EWISE_FUSABLE, 2, 2, 1, "X,W", CONV_ATTRS, 0, ap_conv2d},
    {"depthwise_conv2d", TE_KIND_OUT_EWISE_FUSABLE, 2, 2, 1, "X,W", "stride=1,pad=0,dilation=1", 0,
     ap_depthwise},
    {"max_pool2d", TE_KIND_OUT_EWISE_FUSABLE, 1, 1, 1, "X", "kernel=2,stride=2,pad=0", 0, ap_pool},
    {"avg_pool2d", TE_KIND_OUT_EWISE_FUSABLE, 1, 1, 1, "X", "kernel=2,stride=2,pad=0,include_pad=0",
     0, ap_pool},
    {"pad", TE_KIND_INJECTIVE, 1, 1, 1, "X", "pad=1,value=0", 0, ap_pad},
    {"softmax", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1", 8, ap_softmax},
    {"layer_norm", TE_KIND_REDUCTION, 1, 3, 1, "X[,gamma[,beta]]", "eps=1e-5,axis=-1", 8,
     ap_layer_norm},
    {"rms_norm", TE_KIND_REDUCTION, 1, 2, 1, "X[,gamma]", "eps=1e-6", 5, ap_rms_norm},
    {"layer_norm_welford", TE_KIND_REDUCTION, 1, 3, 1, "X[,gamma[,beta]]", "eps=1e-5,axis=-1", 8,
     ap_layer_norm_welford},
    {"softmax_online", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1", 8, ap_softmax_online},
    {"argmax", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1,keepdims=0", 2, ap_arg},
    {"argmin", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1,keepdims=0", 2, ap_arg},
    EW("relu", 1),
    EW("gelu", 14),
    EW("gelu_tanh", 16),
    EW("silu", 10),
    EW("sigmoid", 9),
    EW("tanh", 12),
    BIN("add"),
    BIN("sub"),
    BIN("mul"),
    BIN("div"),
    BIN("minimum"),
    BIN("maximum"),
    {"transpose", TE_KIND_INJECTIVE, 1, 1, 1, "X", "perm=", 0, ap_transpose},
    {"sum", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1,keepdims=0", 1, ap_sum},
    {"matmul_bias_act", TE_KIND_OUT_EWISE_FUSABLE, 2, 3, 1, "X,W[,bias]", "act=relu", 0,
     ap_matmul_bias_act},
    {"mlp_gate", TE_KIND_OUT_EWISE_FUSABLE, 3, 3, 1, "X,W1,W3", "trans_b=0", 0, ap_mlp_gate},
    {"conv2d_bn_relu", TE_KIND_OUT_EWISE_FUSABLE, 4, 4, 1, "X,W,scale,shift", CONV_ATTRS, 0,
     ap_conv2d_bn_relu},
    {"qkv_projection", TE_KIND_OPAQUE, 4, 4, 3, "X,Wq,Wk,Wv", "", 0, ap_qkv},
    {"attention", TE_KIND_OPAQUE, 3, 4, 1, "Q,K,V[,mask]", "scale=0.0,causal=0", 0, ap_attention},
    {"matmul_integer", TE_KIND_OPAQUE, 2, 2, 1, "A,B", "a_zero=0,b_zero=0", 0, ap_matmul_integer},
    {"qlinear_matmul", TE_KIND_OPAQUE, 2, 2, 1, "A,B",
     "a_scale=1.0,a_zero=0,b_scale=1.0,b_zero=0,y_scale=1.0,y_zero=0,y_dtype=u8", 0,
     ap_qlinear_matmul},
    {"quantize_linear", TE_KIND_ELEMWISE, 1, 1, 1, "X", "scale=1.0,zero=0,to=u8", 6, ap_quant_ew},
    {"dequantize_linear", TE_KIND_ELEMWISE, 1, 1, 1, "X", "scale=1.0,zero=0", 2, ap_quant_ew},
    {"requantize", TE_KIND_ELEMWISE, 1, 1, 1, "X", "mult=1.0,zero=0,to=u8", 6, ap_quant_ew},
    {"dequantize_axis", TE_KIND_BROADCAST, 2, 3, 1, "X,scale[,zero]", "axis=-1", 2, ap_quant_axis},
    {"quantize_axis", TE_KIND_BROADCAST, 2, 3, 1, "X,scale[,zero]", "axis=-1,to=u8", 6,
     ap_quant_axis},
    {"requantize_axis", TE_KIND_BROADCAST, 2, 2, 1, "X,mult", "axis=-1,zero=0,to=u8", 6,
     ap_quant_axis},
    {"matmul_integer_zp", TE_KIND_OPAQUE, 4, 4, 1, "A,B,a_zero,b_zero", "", 0,
     ap_matmul_integer_zp},
    {"dynamic_quantize", TE_KIND_OPAQUE, 1, 1, 3, "X", "", 0, ap_dynamic_quantize},
    {"pack_vnni", TE_KIND_INJECTIVE, 1, 1, 1, "B", "group=4", 0, ap_pack_vnni},
    {"matmul_vnni", TE_KIND_OUT_EWISE_FUSABLE, 2, 2, 1, "A,Bp", "", 0, ap_matmul_vnni},
    {"conv2d_vnni", TE_KIND_OPAQUE, 2, 2, 1, "X,Wp", "stride=1", 0, ap_conv2d_vnni},
    /* The graph's own operators (not in the registry). */
    {"batch_norm", TE_KIND_BROADCAST, 5, 5, 1, "X,gamma,beta,mean,var", "eps=1e-5,axis=1", 4,
     ap_batch_norm},
    {"reshape", TE_KIND_INJECTIVE, 1, 1, 1, "X", "shape=-1", 0, ap_reshape},
    /* Intrinsic elementwise operators (above): flop_per_elem as the C library's cost. */
    {"exp", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 8, ap_intrin},
    {"log", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 8, ap_intrin},
    {"sqrt", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 4, ap_intrin},
    {"rsqrt", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 5, ap_intrin},
    {"erf", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 12, ap_intrin},
    {"abs", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 1, ap_intrin},
    {"floor", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 1, ap_intrin},
    {"ceil", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 1, ap_intrin},
    {"round", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 1, ap_intrin}, /* ties to even */
    /* Comparison and logic operators (above): u8 0 / 1 outputs. */
    {"equal", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"not_equal", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"less", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"less_equal", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"greater", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"greater_equal", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"and", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"or", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"xor", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "", 1, ap_compare},
    {"not", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 1, ap_not_sign},
    {"cast", TE_KIND_ELEMWISE, 1, 1, 1, "X", "to=f32", 1, ap_cast},
    {"mod", TE_KIND_BROADCAST, 2, 2, 1, "A,B", "fmod=0", 4, ap_mod},
    {"sign", TE_KIND_ELEMWISE, 1, 1, 1, "X", "", 2, ap_not_sign},
    /* Index operators; split has as many outputs as its node names (the ONNX importer uses one
     * slice per part instead, which fuses with each part's consumers). */
    {"concat", TE_KIND_INJECTIVE, 1, TE__G_MAXIO, 1, "X0[,X1...]", "axis=0", 0, ap_concat},
    {"slice", TE_KIND_INJECTIVE, 1, 1, 1, "X", "axes=,starts=,ends=,steps=", 0, ap_slice},
    {"split", TE_KIND_INJECTIVE, 1, 1, 0, "X", "axis=0,sizes=", 0, ap_split},
    {"gather", TE_KIND_INJECTIVE, 2, 2, 1, "X,indices", "axis=0", 0, ap_gather},
    {"where", TE_KIND_BROADCAST, 3, 3, 1, "cond,X,Y", "", 1, ap_where},
    {"expand", TE_KIND_BROADCAST, 1, 1, 1, "X", "shape=1", 0, ap_expand},
    {"log_softmax", TE_KIND_REDUCTION, 1, 1, 1, "X", "axis=-1", 8, ap_log_softmax},
    {"reduce_max", TE_KIND_REDUCTION, 1, 1, 1, "X", "axes=,keepdims=1", 1, ap_reduce_axes},
    {"reduce_l2", TE_KIND_REDUCTION, 1, 1, 1, "X", "axes=,keepdims=1", 3, ap_reduce_axes},
};

#define NTABLE ((int)(sizeof table / sizeof table[0]))

const te__gop *te__gop_find_library(const char *name)
{
    for (int i = 0; name && i < NTABLE; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

const te__gop *te__gop_find(const char *name)
{
    const te__gop *op = te__gop_find_library(name);
    return op ? op : te__guser_find(name);
}

int te_graph_op_count(void) { return NTABLE; }

const char *te_graph_op_name(int i) { return i >= 0 && i < NTABLE ? table[i].name : NULL; }

int te_graph_op_kind(const char *op)
{
    const te__gop *o = te__gop_find(op);
    return o ? (int)o->kind : TE_ERR_NOT_FOUND;
}

const char *te_graph_op_attrs(const char *op)
{
    const te__gop *o = te__gop_find(op);
    return o ? o->attrs : NULL;
}

const char *te_graph_op_inputs(const char *op)
{
    const te__gop *o = te__gop_find(op);
    return o ? o->inputs : NULL;
}

static const char *const kind_names[TE_KIND_COUNT] = {"elemwise",  "broadcast", "injective",
                                                      "reduction", "out_ewise", "opaque"};

const char *te_op_kind_name(te_op_kind kind)
{
    return (unsigned)kind < TE_KIND_COUNT ? kind_names[kind] : NULL;
}

int te_op_kind_parse(const char *name, te_op_kind *out)
{
    for (int k = 0; name && k < TE_KIND_COUNT; k++)
        if (strcmp(kind_names[k], name) == 0) {
            if (out)
                *out = (te_op_kind)k;
            return TE_OK;
        }
    return TE_ERR_ARG;
}
