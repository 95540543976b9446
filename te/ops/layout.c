/* Layout operators: constant padding, transpose and reshape. */
#include <stdio.h>
#include <string.h>

#include "te/ops/ops_internal.h"

te_tensor *te_op_pad(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *pad_before,
                     const int64_t *pad_after, double value, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "pad", name ? name : "pad"};
    if (!op__need(&s, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    if (ndim != r)
        return op__fail(&s, TE_ERR_SHAPE, "%d padding entries given but input '%s' has rank %d",
                        ndim, te_tensor_name(X), r);
    if (r > 0 && (!pad_before || !pad_after))
        return op__fail(&s, TE_ERR_ARG,
                        "pad_before and pad_after for input '%s' must not be "
                        "NULL",
                        te_tensor_name(X));
    const int64_t *xs = te_tensor_shape(X);
    int64_t shape[TE_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        if (pad_before[d] < 0 || pad_after[d] < 0)
            return op__fail(&s, TE_ERR_ARG,
                            "padding of input '%s' axis %d is (%lld, %lld); "
                            "pads must be >= 0",
                            te_tensor_name(X), d, (long long)pad_before[d],
                            (long long)pad_after[d]);
        shape[d] = pad_before[d] + xs[d] + pad_after[d];
    }
    te_expr *axes[TE_MAX_DIMS], *idx[TE_MAX_DIMS], *cond = NULL;
    if (!op__axes(ctx, r, shape, NULL, axes))
        return NULL;
    for (int d = 0; d < r; d++) {
        idx[d] = axes[d];
        if (pad_before[d] == 0 && pad_after[d] == 0)
            continue;
        idx[d] = pad_before[d] ? te_sub(ctx, axes[d], te_int(ctx, pad_before[d])) : axes[d];
        te_expr *c = te_lt(ctx, axes[d], te_int(ctx, pad_before[d] + xs[d]));
        if (pad_before[d])
            c = te_and(ctx, te_ge(ctx, axes[d], te_int(ctx, pad_before[d])), c);
        cond = cond ? te_and(ctx, cond, c) : c;
    }
    te_expr *v = te_read(ctx, X, r, idx);
    te_expr *body =
        cond ? te_if_then_else(ctx, cond, v, te_const(ctx, te_tensor_dtype(X), value)) : v;
    return op__tag(ctx, te_compute(ctx, s.name, r, axes, body), "pad");
}

te_tensor *te_op_transpose(te_ctx *ctx, te_tensor *X, const int *perm, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "transpose", name ? name : "transpose"};
    if (!op__need(&s, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    if (r > 0 && !perm)
        return op__fail(&s, TE_ERR_ARG, "perm for input '%s' is NULL", te_tensor_name(X));
    bool used[TE_MAX_DIMS] = {0};
    const int64_t *xs = te_tensor_shape(X);
    int64_t shape[TE_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        if (perm[d] < 0 || perm[d] >= r)
            return op__fail(&s, TE_ERR_ARG,
                            "perm[%d] = %d is not an axis of input '%s' (rank "
                            "%d)",
                            d, perm[d], te_tensor_name(X), r);
        if (used[perm[d]])
            return op__fail(&s, TE_ERR_ARG,
                            "perm[%d] repeats axis %d of input '%s'; perm "
                            "must list each axis once",
                            d, perm[d], te_tensor_name(X));
        used[perm[d]] = true;
        shape[d] = xs[perm[d]];
    }
    te_expr *axes[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    if (!op__axes(ctx, r, shape, NULL, axes))
        return NULL;
    for (int d = 0; d < r; d++)
        idx[perm[d]] = axes[d];
    return op__tag(ctx, te_compute(ctx, s.name, r, axes, te_read(ctx, X, r, idx)), "transpose");
}

te_tensor *te_op_reshape(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *shape_in,
                         const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "reshape", name ? name : "reshape"};
    if (!op__need(&s, X, "input 'X'"))
        return NULL;
    if (ndim < 1 || ndim > TE_MAX_DIMS || !shape_in)
        return op__fail(&s, TE_ERR_ARG,
                        "target rank %d for input '%s' must be 1 to %d with a "
                        "shape",
                        ndim, te_tensor_name(X), TE_MAX_DIMS);
    int64_t numel = te_tensor_numel(X), known = 1, shape[TE_MAX_DIMS];
    int infer = -1;
    for (int d = 0; d < ndim; d++) {
        shape[d] = shape_in[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
            continue;
        }
        if (shape[d] <= 0)
            return op__fail(&s, TE_ERR_ARG,
                            "target axis %d has extent %lld; extents must be "
                            "positive (one may be -1)",
                            d, (long long)shape[d]);
        if (__builtin_mul_overflow(known, shape[d], &known))
            return op__fail(&s, TE_ERR_OVERFLOW, "target element count overflows at axis %d", d);
    }
    if (infer >= 0) {
        if (numel % known)
            return op__fail(&s, TE_ERR_SHAPE,
                            "input '%s' has %lld elements, not a multiple of "
                            "%lld, so target axis %d cannot be inferred",
                            te_tensor_name(X), (long long)numel, (long long)known, infer);
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return op__fail(&s, TE_ERR_SHAPE,
                        "input '%s' has %lld elements but the target shape "
                        "has %lld",
                        te_tensor_name(X), (long long)numel, (long long)known);
    te_expr *axes[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    if (!op__axes(ctx, ndim, shape, NULL, axes))
        return NULL;
    /* Flat row-major index of the output element, then X's index from it. */
    te_expr *flat = NULL;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1)
            continue;
        flat = op__mad(ctx, axes[d], stride, flat);
        stride *= shape[d];
    }
    if (!flat)
        flat = te_int(ctx, 0);
    int r = te_tensor_ndim(X);
    const int64_t *xs = te_tensor_shape(X);
    stride = 1;
    for (int d = r - 1; d >= 0; d--) {
        te_expr *e = stride == 1 ? flat : te_floordiv(ctx, flat, te_int(ctx, stride));
        if (stride * xs[d] < numel) /* the outermost varying axis needs no wrap */
            e = te_floormod(ctx, e, te_int(ctx, xs[d]));
        idx[d] = xs[d] == 1 ? te_int(ctx, 0) : e;
        stride *= xs[d];
    }
    return op__tag(ctx, te_compute(ctx, s.name, ndim, axes, te_read(ctx, X, r, idx)), "reshape");
}

te_tensor *te_op_packed_view(te_ctx *ctx, const char *name, const char *panels_name, te_dtype dt,
                             int64_t k, int64_t n, int trans, int64_t nb, te_tensor **panels)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "packed_view", name ? name : "W"};
    if (!panels)
        return op__fail(&s, TE_ERR_ARG, "no place for the panels placeholder");
    *panels = NULL;
    if (k < 1 || n < 1 || nb < 1 || n % nb)
        return op__fail(&s, TE_ERR_SHAPE,
                        "weight '%s' [k %lld, n %lld]: panels of nb = %lld columns must "
                        "divide n (nb > 0)",
                        s.name, (long long)k, (long long)n, (long long)nb);
    char pn[96];
    if (panels_name)
        snprintf(pn, sizeof pn, "%s", panels_name);
    else
        snprintf(pn, sizeof pn, "%s_panels", s.name);
    te_tensor *P = te_placeholder(ctx, pn, dt, 3, (int64_t[]){n / nb, k, nb});
    if (!P)
        return NULL;
    te_expr *a0 = te_axis(ctx, "i0", trans ? n : k), *a1 = te_axis(ctx, "i1", trans ? k : n);
    te_expr *kk = trans ? a1 : a0, *j = trans ? a0 : a1, *c = te_int(ctx, nb);
    te_expr *rd = TE_AT(ctx, P, te_floordiv(ctx, j, c), kk, te_floormod(ctx, j, c));
    te_tensor *V =
        op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){a0, a1}, rd), "packed_view");
    if (V)
        *panels = P;
    return V;
}

int te_op_pack_panels(const float *w, int64_t k, int64_t n, int trans, int64_t nb, float *dst)
{
    if (!w || !dst || k < 1 || n < 1 || nb < 1 || n % nb)
        return TE_ERR_ARG;
    for (int64_t jb = 0; jb < n / nb; jb++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = 0; j < nb; j++)
                dst[(jb * k + kk) * nb + j] =
                    trans ? w[(jb * nb + j) * k + kk] : w[kk * n + jb * nb + j];
    return TE_OK;
}
