/* Fused operators: a reduction stage followed by a separate elementwise epilogue stage, so a
 * schedule can compute_at or inline the epilogue. */
#include "te/ops/ops_internal.h"

te_tensor *te_op_matmul_bias_act(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *bias,
                                 te_op_act act, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul_bias_act", name ? name : "matmul_bias_act"};
    if (!te_op_act_name(act))
        return op__fail(&s, TE_ERR_ARG, "invalid activation %d", (int)act);
    if (!op__rank(&s, X, "input 'X'", 2, "[m, k]") || !op__rank(&s, W, "weight 'W'", 2, "[k, n]"))
        return NULL;
    if (act != TE_ACT_NONE && act != TE_ACT_RELU && !op__float(&s, X, "input 'X'"))
        return NULL;
    int64_t n = te_tensor_shape(W)[1];
    if (bias) {
        if (!op__rank(&s, bias, "bias", 1, "[n]") || !op__same_dtype(&s, X, bias, "bias"))
            return NULL;
        if (te_tensor_shape(bias)[0] != n)
            return op__fail(&s, TE_ERR_SHAPE,
                            "bias '%s' axis 0 has %lld elements but weight "
                            "'%s' axis 1 (n) has %lld",
                            te_tensor_name(bias), (long long)te_tensor_shape(bias)[0],
                            te_tensor_name(W), (long long)n);
    }
    te_tensor *mm =
        op__matmul(&s, X, W, 0, 0, op__stage_name(ctx, s.name, "mm"), "matmul_bias_act_mm");
    if (!mm)
        return NULL;
    te_expr *i = te_axis(ctx, "i", te_tensor_shape(mm)[0]), *j = te_axis(ctx, "j", n);
    te_expr *v = TE_AT(ctx, mm, i, j);
    if (bias)
        v = te_add(ctx, v, TE_AT(ctx, bias, j));
    te_expr *body = te_op_act_expr(ctx, act, v);
    return op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){i, j}, body), "matmul_bias_act");
}

te_tensor *te_op_mlp_gate(te_ctx *ctx, te_tensor *X, te_tensor *W1, te_tensor *W3, const char *name)
{
    return te_op_mlp_gate_tb(ctx, X, W1, W3, 0, name);
}

te_tensor *te_op_mlp_gate_tb(te_ctx *ctx, te_tensor *X, te_tensor *W1, te_tensor *W3, int trans_b,
                             const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "mlp_gate", name ? name : "mlp_gate"};
    if (trans_b != 0 && trans_b != 1)
        return op__fail(&s, TE_ERR_ARG, "trans_b is %d; expected 0 (W [k, n]) or 1 (W [n, k])",
                        trans_b);
    const char *wl = trans_b ? "[n, k] (trans_b)" : "[k, n]";
    if (!op__rank(&s, X, "input 'X'", 2, "[m, k]") || !op__rank(&s, W1, "weight 'W1'", 2, wl) ||
        !op__rank(&s, W3, "weight 'W3'", 2, wl) || !op__float(&s, X, "input 'X'"))
        return NULL;
    const int64_t *s1 = te_tensor_shape(W1), *s3 = te_tensor_shape(W3);
    for (int d = 0; d < 2; d++)
        if (s1[d] != s3[d])
            return op__fail(&s, TE_ERR_SHAPE,
                            "weight 'W1' ('%s') axis %d has %lld but weight "
                            "'W3' ('%s') axis %d has %lld",
                            te_tensor_name(W1), d, (long long)s1[d], te_tensor_name(W3), d,
                            (long long)s3[d]);
    te_tensor *G =
        op__matmul(&s, X, W1, 0, trans_b, op__stage_name(ctx, s.name, "gate"), "mlp_gate_gate");
    if (!G)
        return NULL;
    te_tensor *U =
        op__matmul(&s, X, W3, 0, trans_b, op__stage_name(ctx, s.name, "up"), "mlp_gate_up");
    if (!U)
        return NULL;
    te_expr *i = te_axis(ctx, "i", te_tensor_shape(G)[0]);
    te_expr *j = te_axis(ctx, "j", te_tensor_shape(G)[1]);
    te_expr *body =
        te_mul(ctx, te_op_act_expr(ctx, TE_ACT_SILU, TE_AT(ctx, G, i, j)), TE_AT(ctx, U, i, j));
    return op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){i, j}, body), "mlp_gate");
}

te_tensor *te_op_conv2d_bn_relu(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *scale,
                                te_tensor *shift, const te_conv2d_params *p, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "conv2d_bn_relu", name ? name : "conv2d_bn_relu"};
    te_conv2d_params q;
    if (!op__conv_params(&s, p, &q))
        return NULL;
    te_tensor *C =
        op__conv2d(&s, X, W, &q, op__stage_name(ctx, s.name, "conv"), "conv2d_bn_relu_conv");
    if (!C)
        return NULL;
    bool nhwc = q.layout == TE_LAYOUT_NHWC;
    int oca = nhwc ? 3 : 1;
    int64_t OC = te_tensor_shape(C)[oca];
    const te_tensor *vs[2] = {scale, shift};
    const char *roles[2] = {"scale", "shift"};
    for (int v = 0; v < 2; v++) {
        if (!op__rank(&s, vs[v], roles[v], 1, "[oc]") || !op__same_dtype(&s, X, vs[v], roles[v]))
            return NULL;
        if (te_tensor_shape(vs[v])[0] != OC)
            return op__fail(&s, TE_ERR_SHAPE,
                            "%s '%s' axis 0 has %lld elements but the "
                            "convolution has %lld output channels (weight '%s' axis %d)",
                            roles[v], te_tensor_name(vs[v]), (long long)te_tensor_shape(vs[v])[0],
                            (long long)OC, te_tensor_name(W), nhwc ? 3 : 0);
    }
    static const char *const nchw[4] = {"n", "oc", "oh", "ow"}, *const nhwc_n[4] = {"n", "oh", "ow",
                                                                                    "oc"};
    te_expr *ax[4];
    if (!op__axes(ctx, 4, te_tensor_shape(C), nhwc ? nhwc_n : nchw, ax))
        return NULL;
    te_expr *v = te_add(ctx, te_mul(ctx, te_read(ctx, C, 4, ax), TE_AT(ctx, scale, ax[oca])),
                        TE_AT(ctx, shift, ax[oca]));
    te_expr *body = te_op_act_expr(ctx, TE_ACT_RELU, v);
    return op__tag(ctx, te_compute(ctx, s.name, 4, ax, body), "conv2d_bn_relu");
}

int te_op_qkv_projection(te_ctx *ctx, te_tensor *X, te_tensor *Wq, te_tensor *Wk, te_tensor *Wv,
                         te_tensor *out[3], const char *name)
{
    if (!ctx)
        return TE_ERR_ARG;
    op_site s = {ctx, "qkv_projection", name ? name : "qkv"};
    if (!out)
        return op__failc(&s, TE_ERR_ARG, "the out[3] array is NULL");
    out[0] = out[1] = out[2] = NULL;
    te_tensor *W[3] = {Wq, Wk, Wv};
    const char *roles[3] = {"weight 'Wq'", "weight 'Wk'", "weight 'Wv'"};
    const char *suffix[3] = {"q", "k", "v"};
    if (!op__rank(&s, X, "input 'X'", 2, "[m, k]"))
        return te_ctx_errcode(ctx);
    for (int p = 0; p < 3; p++)
        if (!op__rank(&s, W[p], roles[p], 2, "[k, n]"))
            return te_ctx_errcode(ctx);
    te_tensor *res[3];
    for (int p = 0; p < 3; p++) {
        /* Report shape errors with the weight's role in the message. */
        int64_t k = te_tensor_shape(X)[1], kw = te_tensor_shape(W[p])[0];
        if (kw != k)
            return op__failc(&s, TE_ERR_SHAPE,
                             "%s ('%s') axis 0 has %lld rows but input 'X' "
                             "('%s') axis 1 (k) has %lld",
                             roles[p], te_tensor_name(W[p]), (long long)kw, te_tensor_name(X),
                             (long long)k);
        res[p] =
            op__matmul(&s, X, W[p], 0, 0, op__stage_name(ctx, s.name, suffix[p]), "qkv_projection");
        if (!res[p])
            return te_ctx_errcode(ctx);
    }
    for (int p = 0; p < 3; p++)
        out[p] = res[p];
    return TE_OK;
}
