/* ONNX neural-network operators onto graph operators: MatMul and Gemm (matmul, batch_matmul
 * with reshapes), Conv (conv2d with groups, dilation, symmetric padding; bias as a broadcast
 * add), pooling, normalizations, Softmax and the reductions (chains of the graph's sum). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

static int shape_of(ox_ctx *c, int v, int64_t *s)
{
    int nd = te_graph_value_ndim(c->g, v);
    memcpy(s, te_graph_value_shape(c->g, v), (size_t)nd * sizeof *s);
    return nd;
}

static int scale(ox_ctx *c, const Onnx__NodeProto *n, int x, double k, const char *suffix)
{
    int kv = ox_scalar(c, k);
    return kv < 0 ? kv : ox_gnode(c, n, "mul", NULL, 2, (int[]){x, kv}, suffix);
}

/* A[..., m, k] x B[..., k, n] with numpy batch broadcasting, onto matmul or batch_matmul. */
static int matmul(ox_ctx *c, const Onnx__NodeProto *n, int a, int b, int ta, int tb,
                  const char *suffix)
{
    int64_t sa[TE_MAX_DIMS], sb[TE_MAX_DIMS], so[TE_MAX_DIMS];
    int na = shape_of(c, a, sa), nb = shape_of(c, b, sb);
    char at[32];
    snprintf(at, sizeof at, "trans_a=%d,trans_b=%d", ta, tb);
    if (na < 2 || nb < 2)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "1-D operands are not supported");
    if (na == 2 && nb == 2)
        return ox_gnode(c, n, "matmul", at, 2, (int[]){a, b}, suffix);
    int64_t m = sa[na - 2], k = sa[na - 1], nn = sb[nb - 1];
    if (nb == 2 && !ta) { /* fold A's batch into its rows */
        int64_t rows = 1;
        for (int d = 0; d < na - 1; d++)
            rows *= sa[d];
        int a2 = ox_reshape(c, n, a, 2, (int64_t[]){rows, k}, "rows");
        if (a2 < 0)
            return a2;
        int y = ox_gnode(c, n, "matmul", at, 2, (int[]){a2, b}, "mm");
        if (y < 0)
            return y;
        memcpy(so, sa, sizeof so);
        so[na - 1] = tb ? sb[0] : nn;
        return ox_reshape(c, n, y, na, so, suffix);
    }
    /* Batched: the batch axes of both must be equal (or all of one side 1). */
    int nd = na > nb ? na : nb;
    int64_t ba = 1, bb = 1;
    for (int d = 0; d < na - 2; d++)
        ba *= sa[d];
    for (int d = 0; d < nb - 2; d++)
        bb *= sb[d];
    int same = na == nb;
    for (int d = 0; same && d < na - 2; d++)
        same = sa[d] == sb[d];
    if (!same && ba != 1 && bb != 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "batch axes must be equal or 1");
    const int64_t *bs = ba >= bb ? sa : sb;
    int bnd = ba >= bb ? na : nb;
    int a3 = ox_reshape(c, n, a, 3, (int64_t[]){ba, sa[na - 2], sa[na - 1]}, "a3");
    int b3 = a3 < 0 ? a3 : ox_reshape(c, n, b, 3, (int64_t[]){bb, sb[nb - 2], sb[nb - 1]}, "b3");
    if (b3 < 0)
        return b3;
    int y = ox_gnode(c, n, "batch_matmul", at, 2, (int[]){a3, b3}, "bmm");
    if (y < 0)
        return y;
    int64_t s3[TE_MAX_DIMS];
    shape_of(c, y, s3);
    for (int d = 0; d < bnd - 2; d++)
        so[d] = bs[d];
    int od = bnd - 2;
    (void)nd;
    (void)m;
    so[od++] = s3[1];
    so[od++] = s3[2];
    return ox_reshape(c, n, y, od, so, suffix);
}

static int gemm(ox_ctx *c, const Onnx__NodeProto *n)
{
    int a = ox_in_gv(c, n, 0);
    int b = a < 0 ? a : ox_in_gv(c, n, 1);
    if (b < 0)
        return b;
    double alpha = ox_attr_f(n, "alpha", 1.0), beta = ox_attr_f(n, "beta", 1.0);
    int ta = (int)ox_attr_i(n, "transA", 0), tb = (int)ox_attr_i(n, "transB", 0);
    int has_c = ox_in(c, n, 2) != NULL && beta != 0;
    int y = matmul(c, n, a, b, ta, tb, alpha != 1 || has_c ? "mm" : NULL);
    if (y >= 0 && alpha != 1)
        y = scale(c, n, y, alpha, has_c ? "alpha" : NULL);
    if (y >= 0 && has_c) {
        int cv = ox_in_gv(c, n, 2);
        if (cv >= 0 && beta != 1)
            cv = scale(c, n, cv, beta, "beta");
        y = cv < 0 ? cv : ox_gnode(c, n, "add", NULL, 2, (int[]){y, cv}, NULL);
    }
    return ox_set_out(c, n, 0, y);
}

/* One symmetric padding for both spatial axes, from pads or auto_pad. */
static int spatial(ox_ctx *c, const Onnx__NodeProto *n, const int64_t *xs, const int64_t *k,
                   int64_t stride, int64_t dil, int64_t *pad)
{
    int64_t p[4] = {0, 0, 0, 0};
    char buf[32];
    const char *ap = ox_attr_s(n, "auto_pad", buf, sizeof buf);
    if (ap && (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))) {
        for (int d = 0; d < 2; d++) {
            int64_t in = xs[2 + d], out = (in + stride - 1) / stride;
            int64_t total = (out - 1) * stride + dil * (k[d] - 1) + 1 - in;
            total = total < 0 ? 0 : total;
            int64_t small = total / 2, big = total - small;
            p[d] = ap[5] == 'U' ? small : big;
            p[d + 2] = ap[5] == 'U' ? big : small;
        }
    } else if (!ap || !strcmp(ap, "NOTSET")) {
        int np = ox_attr_ints(n, "pads", p, 4);
        if (np >= 0 && np != 4)
            return ox_nfail(c, n, TE_ERR_ARG, "pads needs 4 values");
    } else if (strcmp(ap, "VALID"))
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "auto_pad %s", ap);
    if (p[0] != p[2] || p[1] != p[3] || p[0] != p[1])
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "padding %" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                        " (only equal padding on every side is supported)",
                        p[0], p[1], p[2], p[3]);
    *pad = p[0];
    return TE_OK;
}

/* strides / dilations: one value for both axes. */
static int same2(ox_ctx *c, const Onnx__NodeProto *n, const char *name, int64_t *v)
{
    int64_t s[3] = {1, 1, 1};
    int k = ox_attr_ints(n, name, s, 3);
    if (k > 2 || (k == 2 && s[0] != s[1]) || k == 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "%s must be equal on both spatial axes", name);
    *v = s[0];
    return TE_OK;
}

int ox_conv_attrs(ox_ctx *c, const Onnx__NodeProto *n, int x, int w, char *attrs, size_t size)
{
    int64_t xs[TE_MAX_DIMS], ws[TE_MAX_DIMS], stride = 1, dil = 1, pad = 0;
    if (shape_of(c, x, xs) != 4 || shape_of(c, w, ws) != 4)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "only 2-D convolutions (rank-4 NCHW)");
    if (same2(c, n, "strides", &stride) || same2(c, n, "dilations", &dil) ||
        spatial(c, n, xs, ws + 2, stride, dil, &pad))
        return c->rc;
    int64_t group = ox_attr_i(n, "group", 1);
    snprintf(attrs, size, "stride=%" PRId64 ",pad=%" PRId64 ",dilation=%" PRId64 ",groups=%" PRId64,
             stride, pad, dil, group);
    return TE_OK;
}

static int conv(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    int w = x < 0 ? x : ox_in_gv(c, n, 1);
    if (w < 0)
        return w;
    int64_t ws[TE_MAX_DIMS];
    char a[128];
    if (ox_conv_attrs(c, n, x, w, a, sizeof a))
        return c->rc;
    shape_of(c, w, ws);
    int has_b = ox_in(c, n, 2) != NULL;
    int y = ox_gnode(c, n, "conv2d", a, 2, (int[]){x, w}, has_b ? "conv" : NULL);
    if (y >= 0 && has_b) {
        int b = ox_in_gv(c, n, 2);
        if (b >= 0)
            b = ox_reshape(c, n, b, 3, (int64_t[]){ws[0], 1, 1}, "bias");
        y = b < 0 ? b : ox_gnode(c, n, "add", NULL, 2, (int[]){y, b}, NULL);
    }
    return ox_set_out(c, n, 0, y);
}

static int pool(ox_ctx *c, const Onnx__NodeProto *n, int avg, int global)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int64_t xs[TE_MAX_DIMS], k[3] = {0, 0, 0}, stride = 1, pad = 0;
    if (shape_of(c, x, xs) != 4)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "only 2-D pooling (rank-4 NCHW)");
    if (global) {
        if (xs[2] != xs[3] && !avg)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "global max pooling of a non-square map");
        if (xs[2] != xs[3]) { /* sum over H*W, then scale */
            int r = ox_reshape(c, n, x, 3, (int64_t[]){xs[0], xs[1], xs[2] * xs[3]}, "hw");
            int s = r < 0 ? r : ox_gnode(c, n, "sum", "axis=-1,keepdims=1", 1, &r, "sum");
            if (s >= 0 && avg)
                s = scale(c, n, s, 1.0 / (double)(xs[2] * xs[3]), "mean");
            return ox_set_out(
                c, n, 0, s < 0 ? s : ox_reshape(c, n, s, 4, (int64_t[]){xs[0], xs[1], 1, 1}, NULL));
        }
        k[0] = k[1] = xs[2];
    } else {
        if (ox_attr_ints(n, "kernel_shape", k, 3) != 2 || k[0] != k[1])
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "kernel_shape must be square and 2-D");
        if (ox_attr_i(n, "ceil_mode", 0))
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "ceil_mode=1");
        int64_t dil = 1;
        if (same2(c, n, "strides", &stride) || same2(c, n, "dilations", &dil) ||
            spatial(c, n, xs, k, stride, 1, &pad))
            return c->rc;
        if (dil != 1)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "dilated pooling");
    }
    char a[128];
    snprintf(
        a, sizeof a, "kernel=%" PRId64 ",stride=%" PRId64 ",pad=%" PRId64 "%s", k[0], stride, pad,
        avg ? (ox_attr_i(n, "count_include_pad", 0) ? ",include_pad=1" : ",include_pad=0") : "");
    return ox_set_out(c, n, 0, ox_gnode(c, n, avg ? "avg_pool2d" : "max_pool2d", a, 1, &x, NULL));
}

static int norm_axis(ox_ctx *c, const Onnx__NodeProto *n, int64_t axis, int nd)
{
    int64_t a = axis < 0 ? axis + nd : axis;
    if (a < 0 || a >= nd)
        return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", axis, nd);
    return (int)a;
}

static int softmax(ox_ctx *c, const Onnx__NodeProto *n, const char *gop)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x);
    int axis = norm_axis(c, n, ox_attr_i(n, "axis", c->opset < 13 ? 1 : -1), nd);
    if (axis < 0)
        return axis;
    if (c->opset < 13 && axis != nd - 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "before opset 13 only the last axis (coerced to 2-D otherwise)");
    char a[32];
    snprintf(a, sizeof a, "axis=%d", axis);
    return ox_set_out(c, n, 0, ox_gnode(c, n, gop, a, 1, &x, NULL));
}

static int layer_norm(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x);
    int axis = norm_axis(c, n, ox_attr_i(n, "axis", -1), nd);
    if (axis < 0)
        return axis;
    if (axis != nd - 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "normalizing over several axes (axis %d)", axis);
    int ins[3] = {x, -1, -1}, nin = 1;
    for (size_t i = 1; i < 3 && ox_in(c, n, i); i++) {
        int v = ox_in_gv(c, n, i);
        if (v < 0)
            return v;
        int64_t s[TE_MAX_DIMS];
        int vn = shape_of(c, v, s);
        if (vn > 1) /* [1, C] and friends: the operator wants [C] */
            v = ox_reshape(c, n, v, 1, (int64_t[]){te_graph_value_numel(c->g, v)},
                           i == 1 ? "gamma" : "beta");
        if (v < 0)
            return v;
        ins[nin++] = v;
    }
    if (nin == 1 && ox_in(c, n, 2))
        return ox_nfail(c, n, TE_ERR_ARG, "bias without scale");
    char a[64];
    snprintf(a, sizeof a, "eps=%.9g,axis=-1", ox_attr_f(n, "epsilon", 1e-5));
    return ox_set_out(c, n, 0, ox_gnode(c, n, "layer_norm", a, nin, ins, NULL));
}

static int batch_norm(ox_ctx *c, const Onnx__NodeProto *n)
{
    if (ox_attr_i(n, "training_mode", 0))
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "training_mode=1 (inference only)");
    int ins[5];
    for (size_t i = 0; i < 5; i++)
        if ((ins[i] = ox_in_gv(c, n, i)) < 0)
            return ins[i];
    char a[64];
    snprintf(a, sizeof a, "eps=%.9g,axis=1", ox_attr_f(n, "epsilon", 1e-5));
    return ox_set_out(c, n, 0, ox_gnode(c, n, "batch_norm", a, 5, ins, NULL));
}

/* ReduceSum / ReduceMean: one graph reduction per axis (kept), a reshape when
 * keepdims=0, and a scale for the mean. */
static int reduce(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int64_t xs[TE_MAX_DIMS], ax[TE_MAX_DIMS + 1];
    int nd = shape_of(c, x, xs), na;
    int axes_input = (!strcmp(op, "ReduceSum") && c->opset >= 13) || c->opset >= 18;
    if (axes_input && ox_in(c, n, 1)) {
        ox_val *v = ox_in(c, n, 1);
        if (v->kind != OX_CONST || v->numel > TE_MAX_DIMS)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "axes must be a constant");
        na = (int)v->numel;
        for (int i = 0; i < na; i++)
            ax[i] = ox_i64(v->d[i]);
    } else
        na = axes_input ? -1 : ox_attr_ints(n, "axes", ax, TE_MAX_DIMS + 1);
    if (na > TE_MAX_DIMS)
        return ox_nfail(c, n, TE_ERR_ARG, "too many axes");
    if (na < 0 || na == 0) {
        if (ox_attr_i(n, "noop_with_empty_axes", 0))
            return ox_set_out(c, n, 0, x);
        for (na = 0; na < nd; na++)
            ax[na] = na;
    }
    char mark[TE_MAX_DIMS] = {0};
    int64_t count = 1;
    for (int i = 0; i < na; i++) {
        int a = norm_axis(c, n, ax[i], nd);
        if (a < 0)
            return a;
        if (mark[a])
            return ox_nfail(c, n, TE_ERR_ARG, "axis %d given twice", a);
        mark[a] = 1;
        count *= xs[a];
    }
    int keep = (int)ox_attr_i(n, "keepdims", 1), y = x, left = na;
    const char *gop = "sum";
    for (int d = nd - 1; d >= 0; d--) {
        if (!mark[d])
            continue;
        char a[48];
        snprintf(a, sizeof a, "axis=%d,keepdims=1", d);
        y = ox_gnode(c, n, gop, a, 1, &y, --left || keep == 0 || count != 1 ? "r" : NULL);
        if (y < 0)
            return y;
    }
    if (!strcmp(op, "ReduceMean") && count != 1 &&
        (y = scale(c, n, y, 1.0 / (double)count, keep ? NULL : "mean")) < 0)
        return y;
    if (!keep) {
        int64_t s[TE_MAX_DIMS];
        int od = 0;
        for (int d = 0; d < nd; d++)
            if (!mark[d])
                s[od++] = xs[d];
        if (!od)
            s[od++] = 1;
        y = ox_reshape(c, n, y, od, s, NULL);
    }
    return ox_set_out(c, n, 0, y);
}

/* ReduceMax / ReduceL2: one reduce_max or reduce_l2 node over the axes (attribute before
 * opset 18, constant input since; none: every axis, or X itself with noop_with_empty_axes). */
static int reduce_axes(ox_ctx *c, const Onnx__NodeProto *n, const char *gop)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x), na;
    int64_t ax[TE_MAX_DIMS + 1];
    if (c->opset >= 18)
        na = ox_in(c, n, 1) ? ox_in_ints(c, n, 1, ax, TE_MAX_DIMS + 1) : 0;
    else
        na = ox_attr_ints(n, "axes", ax, TE_MAX_DIMS + 1);
    if (c->rc)
        return c->rc;
    if (na > nd)
        return ox_nfail(c, n, TE_ERR_ARG, "%d axes for rank %d", na, nd);
    if (na <= 0 && c->opset >= 18 && ox_attr_i(n, "noop_with_empty_axes", 0))
        return ox_set_out(c, n, 0, x);
    char a[96] = "axes=", mark[TE_MAX_DIMS] = {0};
    for (int i = 0; i < na; i++) {
        int d = norm_axis(c, n, ax[i], nd);
        if (d < 0)
            return d;
        if (mark[d])
            return ox_nfail(c, n, TE_ERR_ARG, "axis %d given twice", d);
        mark[d] = 1;
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%d", i ? ":" : "", d);
    }
    snprintf(a + strlen(a), sizeof a - strlen(a), ",keepdims=%d",
             ox_attr_i(n, "keepdims", 1) ? 1 : 0);
    return ox_set_out(c, n, 0, ox_gnode(c, n, gop, a, 1, &x, NULL));
}

static const char *const nn_ops[] = {"MatMul",
                                     "Gemm",
                                     "Conv",
                                     "MaxPool",
                                     "AveragePool",
                                     "GlobalAveragePool",
                                     "GlobalMaxPool",
                                     "Softmax",
                                     "LayerNormalization",
                                     "BatchNormalization",
                                     "ReduceMean",
                                     "ReduceSum",
                                     "LogSoftmax",
                                     "ReduceMax",
                                     "ReduceL2"};

int ox_nn_supported(const char *op_type)
{
    for (size_t i = 0; i < sizeof nn_ops / sizeof nn_ops[0]; i++)
        if (!strcmp(nn_ops[i], op_type))
            return 1;
    return 0;
}

int ox_convert_nn(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    if (!ox_nn_supported(op))
        return 0;
    if (!strcmp(op, "MatMul")) {
        int a = ox_in_gv(c, n, 0);
        int b = a < 0 ? a : ox_in_gv(c, n, 1);
        if (b >= 0)
            ox_set_out(c, n, 0, matmul(c, n, a, b, 0, 0, NULL));
    } else if (!strcmp(op, "Gemm"))
        gemm(c, n);
    else if (!strcmp(op, "Conv"))
        conv(c, n);
    else if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool"))
        pool(c, n, op[0] == 'A', 0);
    else if (!strcmp(op, "GlobalAveragePool") || !strcmp(op, "GlobalMaxPool"))
        pool(c, n, op[6] == 'A', 1);
    else if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax"))
        softmax(c, n, op[0] == 'L' ? "log_softmax" : "softmax");
    else if (!strcmp(op, "ReduceMax") || !strcmp(op, "ReduceL2"))
        reduce_axes(c, n, op[6] == 'M' ? "reduce_max" : "reduce_l2");
    else if (!strcmp(op, "LayerNormalization"))
        layer_norm(c, n);
    else if (!strcmp(op, "BatchNormalization"))
        batch_norm(c, n);
    else
        reduce(c, n, op);
    return 1;
}
