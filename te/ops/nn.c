/* Linear algebra, convolution and pooling operators. */
#include <math.h>
#include <string.h>

#include "te/ops/ops_internal.h"

/* ---- Matmul ---------------------------------------------------------------------------- */

te_tensor *op__matmul(const op_site *s, te_tensor *A, te_tensor *B, int ta, int tb,
                      const char *stage, const char *tag)
{
    te_ctx *ctx = s->ctx;
    if (!op__rank(s, A, "input 'A'", 2, ta ? "[k, m] (trans_a)" : "[m, k]") ||
        !op__rank(s, B, "input 'B'", 2, tb ? "[n, k] (trans_b)" : "[k, n]") ||
        !op__same_dtype(s, A, A, "input 'A'") || !op__same_dtype(s, A, B, "input 'B'"))
        return NULL;
    const int64_t *as = te_tensor_shape(A), *bs = te_tensor_shape(B);
    int ak = ta ? 0 : 1, bk = tb ? 1 : 0;
    int64_t m = as[1 - ak], k = as[ak], n = bs[1 - bk];
    if (bs[bk] != k)
        return op__fail(s, TE_ERR_SHAPE,
                        "reduction extent k differs: input 'A' ('%s') axis %d "
                        "has %lld but input 'B' ('%s') axis %d has %lld",
                        te_tensor_name(A), ak, (long long)k, te_tensor_name(B), bk,
                        (long long)bs[bk]);
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *kk = te_reduce_axis(ctx, "k", k);
    te_expr *a = ta ? TE_AT(ctx, A, kk, i) : TE_AT(ctx, A, i, kk);
    te_expr *b = tb ? TE_AT(ctx, B, j, kk) : TE_AT(ctx, B, kk, j);
    te_expr *body = te_sum(ctx, te_mul(ctx, a, b), 1, &kk);
    return op__tag(ctx, te_compute(ctx, stage, 2, (te_expr *[]){i, j}, body), tag);
}

te_tensor *te_op_matmul(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                        const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul", name ? name : "matmul"};
    return op__matmul(&s, A, B, trans_a, trans_b, s.name, "matmul");
}

te_tensor *te_op_batch_matmul(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                              const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "batch_matmul", name ? name : "batch_matmul"};
    if (!op__rank(&s, A, "input 'A'", 3, trans_a ? "[b, k, m] (trans_a)" : "[b, m, k]") ||
        !op__rank(&s, B, "input 'B'", 3, trans_b ? "[b, n, k] (trans_b)" : "[b, k, n]") ||
        !op__same_dtype(&s, A, A, "input 'A'") || !op__same_dtype(&s, A, B, "input 'B'"))
        return NULL;
    const int64_t *as = te_tensor_shape(A), *bs = te_tensor_shape(B);
    int ak = trans_a ? 1 : 2, bk = trans_b ? 2 : 1;
    int64_t m = as[3 - ak], k = as[ak], n = bs[3 - bk];
    if (as[0] != bs[0] && as[0] != 1 && bs[0] != 1)
        return op__fail(&s, TE_ERR_SHAPE,
                        "batch axis 0 of input 'A' ('%s') has %lld but input "
                        "'B' ('%s') has %lld; they must be equal or one of them 1",
                        te_tensor_name(A), (long long)as[0], te_tensor_name(B), (long long)bs[0]);
    if (bs[bk] != k)
        return op__fail(&s, TE_ERR_SHAPE,
                        "reduction extent k differs: input 'A' ('%s') axis "
                        "%d has %lld but input 'B' ('%s') axis %d has %lld",
                        te_tensor_name(A), ak, (long long)k, te_tensor_name(B), bk,
                        (long long)bs[bk]);
    int64_t nb = as[0] > bs[0] ? as[0] : bs[0];
    te_expr *b = te_axis(ctx, "b", nb), *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n);
    te_expr *kk = te_reduce_axis(ctx, "k", k);
    te_expr *ba = as[0] == 1 ? te_int(ctx, 0) : b, *bb = bs[0] == 1 ? te_int(ctx, 0) : b;
    te_expr *ea = trans_a ? TE_AT(ctx, A, ba, kk, i) : TE_AT(ctx, A, ba, i, kk);
    te_expr *eb = trans_b ? TE_AT(ctx, B, bb, j, kk) : TE_AT(ctx, B, bb, kk, j);
    te_expr *body = te_sum(ctx, te_mul(ctx, ea, eb), 1, &kk);
    return op__tag(ctx, te_compute(ctx, s.name, 3, (te_expr *[]){b, i, j}, body), "batch_matmul");
}

te_tensor *te_op_dense_bias(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *bias,
                            const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "dense", name ? name : "dense"};
    if (!op__rank(&s, X, "input 'X'", 2, "[m, k]") || !op__rank(&s, W, "weight 'W'", 2, "[k, n]") ||
        !op__rank(&s, bias, "bias", 1, "[n]") || !op__same_dtype(&s, X, bias, "bias"))
        return NULL;
    int64_t n = te_tensor_shape(W)[1];
    if (te_tensor_shape(bias)[0] != n)
        return op__fail(&s, TE_ERR_SHAPE,
                        "bias '%s' axis 0 has %lld elements but weight '%s' "
                        "axis 1 (n) has %lld",
                        te_tensor_name(bias), (long long)te_tensor_shape(bias)[0],
                        te_tensor_name(W), (long long)n);
    te_tensor *mm = op__matmul(&s, X, W, 0, 0, op__stage_name(ctx, s.name, "mm"), "dense_mm");
    if (!mm)
        return NULL;
    te_expr *i = te_axis(ctx, "i", te_tensor_shape(mm)[0]), *j = te_axis(ctx, "j", n);
    te_expr *body = te_add(ctx, TE_AT(ctx, mm, i, j), TE_AT(ctx, bias, j));
    return op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){i, j}, body), "dense");
}

/* ---- Convolution -------------------------------------------------------------------- */

te_conv2d_params te_conv2d_params_default(void)
{
    return (te_conv2d_params){1, 1, 0, 0, 1, 1, 1, TE_LAYOUT_NCHW};
}

bool op__conv_params(const op_site *s, const te_conv2d_params *p, te_conv2d_params *out)
{
    *out = p ? *p : te_conv2d_params_default();
    const te_conv2d_params *q = out;
    if (q->stride_h < 1 || q->stride_w < 1) {
        op__fail(s, TE_ERR_ARG, "stride (%d, %d) must be >= 1 on both axes", q->stride_h,
                 q->stride_w);
        return false;
    }
    if (q->pad_h < 0 || q->pad_w < 0) {
        op__fail(s, TE_ERR_ARG, "padding (%d, %d) must be >= 0 on both axes", q->pad_h, q->pad_w);
        return false;
    }
    if (q->dilation_h < 1 || q->dilation_w < 1) {
        op__fail(s, TE_ERR_ARG, "dilation (%d, %d) must be >= 1 on both axes", q->dilation_h,
                 q->dilation_w);
        return false;
    }
    if (q->groups < 1) {
        op__fail(s, TE_ERR_ARG, "groups %d must be >= 1", q->groups);
        return false;
    }
    if (q->layout != TE_LAYOUT_NCHW && q->layout != TE_LAYOUT_NHWC) {
        op__fail(s, TE_ERR_ARG, "layout %d is neither TE_LAYOUT_NCHW nor TE_LAYOUT_NHWC",
                 (int)q->layout);
        return false;
    }
    return true;
}

/* Output extent of a sliding window, or an error naming the axis. */
static bool out_extent(const op_site *s, const te_tensor *X, int axis, const char *axname,
                       int64_t in, int64_t k, int64_t pad, int64_t dil, int64_t stride,
                       int64_t *out)
{
    int64_t span = dil * (k - 1) + 1;
    if (in + 2 * pad < span) {
        op__fail(s, TE_ERR_SHAPE,
                 "input '%s' %s axis %d has extent %lld (%lld with padding) "
                 "but the window spans %lld",
                 te_tensor_name(X), axname, axis, (long long)in, (long long)(in + 2 * pad),
                 (long long)span);
        return false;
    }
    *out = (in + 2 * pad - span) / stride + 1;
    return true;
}

te_tensor *op__conv2d(const op_site *s, te_tensor *X, te_tensor *W, const te_conv2d_params *p,
                      const char *stage, const char *tag)
{
    te_ctx *ctx = s->ctx;
    bool nhwc = p->layout == TE_LAYOUT_NHWC;
    if (!op__rank(s, X, "input 'X'", 4, nhwc ? "[n, h, w, c] (NHWC)" : "[n, c, h, w] (NCHW)") ||
        !op__rank(s, W, "weight 'W'", 4,
                  nhwc ? "[kh, kw, c/groups, oc] (NHWC)" : "[oc, c/groups, kh, kw] (NCHW)") ||
        !op__same_dtype(s, X, X, "input 'X'") || !op__same_dtype(s, X, W, "weight 'W'"))
        return NULL;
    const int64_t *xs = te_tensor_shape(X), *ws = te_tensor_shape(W);
    int xc = nhwc ? 3 : 1, xh = nhwc ? 1 : 2, xw = nhwc ? 2 : 3;
    int wo = nhwc ? 3 : 0, wc = nhwc ? 2 : 1, wh = nhwc ? 0 : 2, ww = nhwc ? 1 : 3;
    int64_t C = xs[xc], OC = ws[wo], KH = ws[wh], KW = ws[ww], G = p->groups;
    if (C % G)
        return op__fail(s, TE_ERR_ARG,
                        "groups %lld does not divide the %lld channels of input "
                        "'%s' (axis %d)",
                        (long long)G, (long long)C, te_tensor_name(X), xc);
    if (OC % G)
        return op__fail(s, TE_ERR_ARG,
                        "groups %lld does not divide the %lld output channels of "
                        "weight '%s' (axis %d)",
                        (long long)G, (long long)OC, te_tensor_name(W), wo);
    if (ws[wc] != C / G)
        return op__fail(s, TE_ERR_SHAPE,
                        "input '%s' channel axis %d has %lld channels but "
                        "weight '%s' axis %d expects %lld (= %lld channels / %lld groups)",
                        te_tensor_name(X), xc, (long long)C, te_tensor_name(W), wc,
                        (long long)ws[wc], (long long)(ws[wc] * G), (long long)G);
    int64_t OH, OW;
    if (!out_extent(s, X, xh, "height", xs[xh], KH, p->pad_h, p->dilation_h, p->stride_h, &OH) ||
        !out_extent(s, X, xw, "width", xs[xw], KW, p->pad_w, p->dilation_w, p->stride_w, &OW))
        return NULL;
    te_tensor *P = op__pad_hw(s, X, xh, xw, p->pad_h, p->pad_w, 0.0, tag);
    if (!P)
        return NULL;
    int64_t N = xs[0], CG = C / G, OCG = OC / G;
    te_expr *n = te_axis(ctx, "n", N), *oc = te_axis(ctx, "oc", OC);
    te_expr *oh = te_axis(ctx, "oh", OH), *ow = te_axis(ctx, "ow", OW);
    te_expr *rc = te_reduce_axis(ctx, "rc", CG), *ry = te_reduce_axis(ctx, "ry", KH);
    te_expr *rx = te_reduce_axis(ctx, "rx", KW);
    te_expr *ic = G == 1 ? rc : op__mad(ctx, te_floordiv(ctx, oc, te_int(ctx, OCG)), CG, rc);
    te_expr *y = op__mad(ctx, oh, p->stride_h, op__mad(ctx, ry, p->dilation_h, NULL));
    te_expr *x = op__mad(ctx, ow, p->stride_w, op__mad(ctx, rx, p->dilation_w, NULL));
    te_expr *xv = nhwc ? TE_AT(ctx, P, n, y, x, ic) : TE_AT(ctx, P, n, ic, y, x);
    te_expr *wv = nhwc ? TE_AT(ctx, W, ry, rx, rc, oc) : TE_AT(ctx, W, oc, rc, ry, rx);
    te_expr *body = te_sum(ctx, te_mul(ctx, xv, wv), 3, (te_expr *[]){rc, ry, rx});
    te_expr *axes[4] = {n, oc, oh, ow};
    if (nhwc) {
        axes[1] = oh;
        axes[2] = ow;
        axes[3] = oc;
    }
    return op__tag(ctx, te_compute(ctx, stage, 4, axes, body), tag);
}

te_tensor *te_op_conv2d(te_ctx *ctx, te_tensor *X, te_tensor *W, const te_conv2d_params *p,
                        const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "conv2d", name ? name : "conv2d"};
    te_conv2d_params q;
    if (!op__conv_params(&s, p, &q))
        return NULL;
    return op__conv2d(&s, X, W, &q, s.name, "conv2d");
}

te_tensor *te_op_depthwise_conv2d(te_ctx *ctx, te_tensor *X, te_tensor *W,
                                  const te_conv2d_params *p, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "depthwise_conv2d", name ? name : "depthwise_conv2d"};
    te_conv2d_params q;
    if (!op__conv_params(&s, p, &q))
        return NULL;
    if (q.layout != TE_LAYOUT_NCHW)
        return op__fail(&s, TE_ERR_UNSUPPORTED, "only the NCHW layout is supported");
    if (q.groups != 1)
        return op__fail(&s, TE_ERR_ARG,
                        "groups must be left at 1 (got %d); the channel "
                        "multiplier is weight axis 1",
                        q.groups);
    if (!op__rank(&s, X, "input 'X'", 4, "[n, c, h, w] (NCHW)") ||
        !op__rank(&s, W, "weight 'W'", 4, "[c, mult, kh, kw]") ||
        !op__same_dtype(&s, X, X, "input 'X'") || !op__same_dtype(&s, X, W, "weight 'W'"))
        return NULL;
    const int64_t *xs = te_tensor_shape(X), *ws = te_tensor_shape(W);
    if (ws[0] != xs[1])
        return op__fail(&s, TE_ERR_SHAPE,
                        "input '%s' channel axis 1 has %lld channels but "
                        "weight '%s' axis 0 has %lld",
                        te_tensor_name(X), (long long)xs[1], te_tensor_name(W), (long long)ws[0]);
    int64_t OH, OW, M = ws[1];
    if (!out_extent(&s, X, 2, "height", xs[2], ws[2], q.pad_h, q.dilation_h, q.stride_h, &OH) ||
        !out_extent(&s, X, 3, "width", xs[3], ws[3], q.pad_w, q.dilation_w, q.stride_w, &OW))
        return NULL;
    te_tensor *P = op__pad_hw(&s, X, 2, 3, q.pad_h, q.pad_w, 0.0, "depthwise_conv2d");
    if (!P)
        return NULL;
    te_expr *n = te_axis(ctx, "n", xs[0]), *oc = te_axis(ctx, "oc", xs[1] * M);
    te_expr *oh = te_axis(ctx, "oh", OH), *ow = te_axis(ctx, "ow", OW);
    te_expr *ry = te_reduce_axis(ctx, "ry", ws[2]), *rx = te_reduce_axis(ctx, "rx", ws[3]);
    te_expr *ic = M == 1 ? oc : te_floordiv(ctx, oc, te_int(ctx, M));
    te_expr *m = M == 1 ? te_int(ctx, 0) : te_floormod(ctx, oc, te_int(ctx, M));
    te_expr *y = op__mad(ctx, oh, q.stride_h, op__mad(ctx, ry, q.dilation_h, NULL));
    te_expr *x = op__mad(ctx, ow, q.stride_w, op__mad(ctx, rx, q.dilation_w, NULL));
    te_expr *prod = te_mul(ctx, TE_AT(ctx, P, n, ic, y, x), TE_AT(ctx, W, ic, m, ry, rx));
    te_expr *body = te_sum(ctx, prod, 2, (te_expr *[]){ry, rx});
    return op__tag(ctx, te_compute(ctx, s.name, 4, (te_expr *[]){n, oc, oh, ow}, body),
                   "depthwise_conv2d");
}

/* ---- Pooling ------------------------------------------------------------------------ */

/* Lowest value of a dtype: the padding of max pooling. */
static double lowest(te_dtype dt)
{
    switch (dt) {
    case TE_I8:
        return -128;
    case TE_U8:
        return 0;
    case TE_I32:
        return -2147483648.0;
    case TE_I64:
        return -9223372036854775808.0;
    default:
        return -INFINITY;
    }
}

te_tensor *te_op_pool2d(te_ctx *ctx, te_tensor *X, te_pool_kind kind, const te_pool2d_params *p,
                        const char *name)
{
    if (!ctx)
        return NULL;
    bool avg = kind == TE_POOL_AVG;
    const char *tag = avg ? "avg_pool2d" : "max_pool2d";
    op_site s = {ctx, tag, name ? name : tag};
    if (kind != TE_POOL_MAX && kind != TE_POOL_AVG)
        return op__fail(&s, TE_ERR_ARG, "pool kind %d is neither TE_POOL_MAX nor TE_POOL_AVG",
                        (int)kind);
    if (!p)
        return op__fail(&s, TE_ERR_ARG, "pooling parameters are NULL");
    if (!op__rank(&s, X, "input 'X'", 4, "[n, c, h, w] (NCHW)") ||
        !op__same_dtype(&s, X, X, "input 'X'") || (avg && !op__float(&s, X, "input 'X'")))
        return NULL;
    if (p->kernel_h < 1 || p->kernel_w < 1)
        return op__fail(&s, TE_ERR_ARG, "kernel (%d, %d) must be >= 1 on both axes", p->kernel_h,
                        p->kernel_w);
    if (p->stride_h < 1 || p->stride_w < 1)
        return op__fail(&s, TE_ERR_ARG, "stride (%d, %d) must be >= 1 on both axes", p->stride_h,
                        p->stride_w);
    if (p->pad_h < 0 || p->pad_w < 0 || p->pad_h >= p->kernel_h || p->pad_w >= p->kernel_w)
        return op__fail(&s, TE_ERR_ARG,
                        "padding (%d, %d) must be >= 0 and smaller than the "
                        "kernel (%d, %d) on both axes",
                        p->pad_h, p->pad_w, p->kernel_h, p->kernel_w);
    const int64_t *xs = te_tensor_shape(X);
    int64_t OH, OW;
    if (!out_extent(&s, X, 2, "height", xs[2], p->kernel_h, p->pad_h, 1, p->stride_h, &OH) ||
        !out_extent(&s, X, 3, "width", xs[3], p->kernel_w, p->pad_w, 1, p->stride_w, &OW))
        return NULL;
    te_dtype dt = te_tensor_dtype(X);
    te_tensor *P = op__pad_hw(&s, X, 2, 3, p->pad_h, p->pad_w, avg ? 0.0 : lowest(dt), tag);
    if (!P)
        return NULL;
    te_expr *n = te_axis(ctx, "n", xs[0]), *c = te_axis(ctx, "c", xs[1]);
    te_expr *oh = te_axis(ctx, "oh", OH), *ow = te_axis(ctx, "ow", OW);
    te_expr *ry = te_reduce_axis(ctx, "ry", p->kernel_h),
            *rx = te_reduce_axis(ctx, "rx", p->kernel_w);
    te_expr *v =
        TE_AT(ctx, P, n, c, op__mad(ctx, oh, p->stride_h, ry), op__mad(ctx, ow, p->stride_w, rx));
    te_expr *axes[4] = {n, c, oh, ow};
    if (!avg) {
        te_expr *body = te_rmax(ctx, v, 2, (te_expr *[]){ry, rx});
        return op__tag(ctx, te_compute(ctx, s.name, 4, axes, body), tag);
    }
    te_tensor *S = op__tag(ctx,
                           te_compute(ctx, op__stage_name(ctx, s.name, "sum"), 4, axes,
                                      te_sum(ctx, v, 2, (te_expr *[]){ry, rx})),
                           "avg_pool2d_sum");
    if (!S)
        return NULL;
    te_expr *n2 = te_axis(ctx, "n", xs[0]), *c2 = te_axis(ctx, "c", xs[1]);
    te_expr *oh2 = te_axis(ctx, "oh", OH), *ow2 = te_axis(ctx, "ow", OW);
    te_expr *count;
    if (p->count_include_pad) {
        count = te_const(ctx, dt, (double)p->kernel_h * p->kernel_w);
    } else {
        /* Window rows [oh*s - pad, oh*s - pad + k) clipped to [0, h), likewise columns. */
        te_expr *y0 = te_sub(ctx, op__mad(ctx, oh2, p->stride_h, NULL), te_int(ctx, p->pad_h));
        te_expr *x0 = te_sub(ctx, op__mad(ctx, ow2, p->stride_w, NULL), te_int(ctx, p->pad_w));
        te_expr *rows =
            te_sub(ctx, te_min(ctx, te_add(ctx, y0, te_int(ctx, p->kernel_h)), te_int(ctx, xs[2])),
                   te_max(ctx, y0, te_int(ctx, 0)));
        te_expr *cols =
            te_sub(ctx, te_min(ctx, te_add(ctx, x0, te_int(ctx, p->kernel_w)), te_int(ctx, xs[3])),
                   te_max(ctx, x0, te_int(ctx, 0)));
        count = te_cast(ctx, dt, te_mul(ctx, rows, cols));
    }
    te_expr *body = te_div(ctx, TE_AT(ctx, S, n2, c2, oh2, ow2), count);
    return op__tag(ctx, te_compute(ctx, s.name, 4, (te_expr *[]){n2, c2, oh2, ow2}, body), tag);
}
