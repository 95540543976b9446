/* More reductions: log-softmax and the L2 norm over axes (max over axes is te_op_reduce with
 * TE_RMAX). */
#include <string.h>

#include "te/ops/ops_internal.h"

te_tensor *te_op_log_softmax(te_ctx *ctx, te_tensor *X, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "log_softmax", name ? name : "log_softmax"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") || !op__axis(&s, X, &axis))
        return NULL;
    int r = te_tensor_ndim(X);
    const int64_t *xs = te_tensor_shape(X);
    int64_t kshape[TE_MAX_DIMS];
    memcpy(kshape, xs, sizeof(int64_t) * (size_t)r);
    kshape[axis] = 1;
    /* "<name>_max" and "<name>_sum" keep the axis with extent 1; both reduce over "k". */
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!op__axes(ctx, r, kshape, NULL, oa) || !(k = te_reduce_axis(ctx, "k", xs[axis])))
        return NULL;
    for (int d = 0; d < r; d++)
        ia[d] = d == axis ? k : oa[d];
    te_tensor *M = op__tag(ctx,
                           te_compute(ctx, op__stage_name(ctx, s.name, "max"), r, oa,
                                      te_rmax(ctx, te_read(ctx, X, r, ia), 1, &k)),
                           "log_softmax_max");
    if (!M || !op__axes(ctx, r, kshape, NULL, oa) || !(k = te_reduce_axis(ctx, "k", xs[axis])))
        return NULL;
    te_expr *mi[TE_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        ia[d] = d == axis ? k : oa[d];
        mi[d] = d == axis ? te_int(ctx, 0) : oa[d];
    }
    te_expr *e = te_exp(ctx, te_sub(ctx, te_read(ctx, X, r, ia), te_read(ctx, M, r, mi)));
    te_tensor *S = op__tag(
        ctx, te_compute(ctx, op__stage_name(ctx, s.name, "sum"), r, oa, te_sum(ctx, e, 1, &k)),
        "log_softmax_sum");
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!S || !op__axes(ctx, r, xs, NULL, ax))
        return NULL;
    for (int d = 0; d < r; d++)
        i1[d] = d == axis ? te_int(ctx, 0) : ax[d];
    te_expr *y = te_sub(ctx, te_sub(ctx, te_read(ctx, X, r, ax), te_read(ctx, M, r, i1)),
                        te_log(ctx, te_read(ctx, S, r, i1)));
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, y), "log_softmax");
}

te_tensor *te_op_reduce_l2(te_ctx *ctx, te_tensor *X, int naxes, const int *axes, int keepdims,
                           const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "reduce_l2", name ? name : "reduce_l2"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, r, te_tensor_shape(X), NULL, ax))
        return NULL;
    te_expr *x = te_read(ctx, X, r, ax);
    te_tensor *Q =
        op__tag(ctx, te_compute(ctx, op__stage_name(ctx, s.name, "sq"), r, ax, te_mul(ctx, x, x)),
                "reduce_l2_sq");
    te_tensor *S = op__tag(
        ctx,
        te_op_reduce(ctx, Q, TE_RSUM, naxes, axes, keepdims, op__stage_name(ctx, s.name, "sum")),
        "reduce_l2_sum");
    if (!S) /* te_op_reduce's message names the "<name>_sum" stage */
        return NULL;
    int ro = te_tensor_ndim(S);
    te_expr *oa[TE_MAX_DIMS];
    if (!op__axes(ctx, ro, te_tensor_shape(S), NULL, oa))
        return NULL;
    return op__tag(ctx, te_compute(ctx, s.name, ro, oa, te_sqrt(ctx, te_read(ctx, S, ro, oa))),
                   "reduce_l2");
}
