/* Index operators: concat, split, slice, gather, where and expand. Each output element reads
 * one input element at an index computed from the output's axes (gather: from the index
 * tensor's data), so every operator here is one injective (or broadcast) stage. */
#include <string.h>

#include "te/ops/ops_internal.h"

/* Checks that t has a numeric (non-bool) dtype; the index operators move any numeric data. */
static bool numeric(const op_site *s, const te_tensor *t, const char *role)
{
    return op__same_dtype(s, t, t, role);
}

/* ---- Concat ----------------------------------------------------------------------------- */

te_tensor *te_op_concat(te_ctx *ctx, int n, te_tensor *const *X, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "concat", name ? name : "concat"};
    if (n < 1 || n > TE_OP_CONCAT_MAX || !X)
        return op__fail(&s, TE_ERR_ARG, "needs 1 to %d inputs, got %d", TE_OP_CONCAT_MAX, n);
    for (int i = 0; i < n; i++) {
        char role[32];
        snprintf(role, sizeof role, "input %d", i);
        if (!op__need(&s, X[i], role) || !numeric(&s, X[0], "input 0") ||
            !op__same_dtype(&s, X[0], X[i], role))
            return NULL;
    }
    if (!op__axis(&s, X[0], &axis))
        return NULL;
    int r = te_tensor_ndim(X[0]);
    int64_t shape[TE_MAX_DIMS];
    memcpy(shape, te_tensor_shape(X[0]), sizeof(int64_t) * (size_t)r);
    shape[axis] = 0;
    for (int i = 0; i < n; i++) {
        const int64_t *xs = te_tensor_shape(X[i]);
        if (te_tensor_ndim(X[i]) != r)
            return op__fail(&s, TE_ERR_SHAPE, "input %d ('%s') has rank %d but input 0 ('%s') %d",
                            i, te_tensor_name(X[i]), te_tensor_ndim(X[i]), te_tensor_name(X[0]), r);
        for (int d = 0; d < r; d++)
            if (d != axis && xs[d] != te_tensor_shape(X[0])[d])
                return op__fail(&s, TE_ERR_SHAPE,
                                "input %d ('%s') axis %d has extent %lld but input 0 ('%s') "
                                "has %lld; only the concat axis %d may differ",
                                i, te_tensor_name(X[i]), d, (long long)xs[d], te_tensor_name(X[0]),
                                (long long)te_tensor_shape(X[0])[d], axis);
        if (__builtin_add_overflow(shape[axis], xs[axis], &shape[axis]))
            return op__fail(&s, TE_ERR_OVERFLOW, "concatenated extent overflows");
    }
    te_expr *ax[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    if (!op__axes(ctx, r, shape, NULL, ax))
        return NULL;
    /* A chain of guarded reads from the last input back to the first: input i holds the
     * output positions [off_i, off_i + extent_i) of the axis. */
    int64_t off[TE_OP_CONCAT_MAX + 1];
    off[0] = 0;
    for (int i = 0; i < n; i++)
        off[i + 1] = off[i] + te_tensor_shape(X[i])[axis];
    te_expr *body = NULL;
    for (int i = n - 1; i >= 0; i--) {
        for (int d = 0; d < r; d++)
            idx[d] = d == axis && off[i] ? te_sub(ctx, ax[d], te_int(ctx, off[i])) : ax[d];
        te_expr *v = te_read(ctx, X[i], r, idx);
        body =
            body ? te_if_then_else(ctx, te_lt(ctx, ax[axis], te_int(ctx, off[i + 1])), v, body) : v;
    }
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, body), "concat");
}

/* ---- Slice ------------------------------------------------------------------------------ */

/* ONNX Slice semantics for one axis of extent dim: start/end count from the end when negative
 * and are clamped ([0, dim] for positive steps, [-1, dim - 1] for negative ones); the slice has
 * max(0, ceil((end - start) / step)) elements. Writes the first index and the count. */
static void slice_range(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first,
                        int64_t *count)
{
    if (start < 0)
        start = start < -dim ? (step > 0 ? 0 : -1) : start + dim;
    if (end < 0)
        end = end < -dim ? -1 : end + dim;
    if (step > 0) {
        start = start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        *count = end > start ? (end - start + step - 1) / step : 0;
    } else {
        start = start > dim - 1 ? dim - 1 : start;
        end = end > dim - 1 ? dim - 1 : end;
        *count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    *first = start;
}

te_tensor *te_op_slice(te_ctx *ctx, te_tensor *X, int n, const int *axes, const int64_t *starts,
                       const int64_t *ends, const int64_t *steps, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "slice", name ? name : "slice"};
    if (!op__need(&s, X, "input 'X'") || !numeric(&s, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    if (n < 0 || n > r || (n && (!starts || !ends)))
        return op__fail(&s, TE_ERR_ARG, "needs 0 to %d sliced axes with starts and ends, got %d", r,
                        n);
    const int64_t *xs = te_tensor_shape(X);
    int64_t first[TE_MAX_DIMS], step[TE_MAX_DIMS], shape[TE_MAX_DIMS];
    bool seen[TE_MAX_DIMS] = {0};
    for (int d = 0; d < r; d++) {
        first[d] = 0;
        step[d] = 1;
        shape[d] = xs[d];
    }
    for (int i = 0; i < n; i++) {
        int a = axes ? axes[i] : i;
        if (!op__axis(&s, X, &a))
            return NULL;
        if (seen[a])
            return op__fail(&s, TE_ERR_ARG, "axis %d of input '%s' is sliced twice", a,
                            te_tensor_name(X));
        seen[a] = true;
        int64_t st = steps ? steps[i] : 1;
        if (st == 0 || st == INT64_MIN)
            return op__fail(&s, TE_ERR_ARG, "step %lld of axis %d is invalid (must be non-zero)",
                            (long long)st, a);
        slice_range(xs[a], starts[i], ends[i], st, &first[a], &shape[a]);
        if (shape[a] < 1)
            return op__fail(&s, TE_ERR_SHAPE,
                            "slice [%lld:%lld:%lld] of input '%s' axis %d (extent %lld) is empty; "
                            "tensors need positive extents",
                            (long long)starts[i], (long long)ends[i], (long long)st,
                            te_tensor_name(X), a, (long long)xs[a]);
        step[a] = st;
    }
    te_expr *ax[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    if (!op__axes(ctx, r, shape, NULL, ax))
        return NULL;
    for (int d = 0; d < r; d++) {
        idx[d] = ax[d];
        if (step[d] != 1)
            idx[d] = te_mul(ctx, idx[d], te_int(ctx, step[d]));
        if (first[d])
            idx[d] = te_add(ctx, idx[d], te_int(ctx, first[d]));
    }
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, te_read(ctx, X, r, idx)), "slice");
}

/* ---- Split ------------------------------------------------------------------------------ */

int te_op_split(te_ctx *ctx, te_tensor *X, int axis, int n, const int64_t *sizes, te_tensor **out,
                const char *name)
{
    if (!ctx)
        return TE_ERR_ARG;
    op_site s = {ctx, "split", name ? name : "split"};
    if (!out)
        return op__failc(&s, TE_ERR_ARG, "out is NULL");
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (!op__need(&s, X, "input 'X'") || !numeric(&s, X, "input 'X'") || !op__axis(&s, X, &axis))
        return te_ctx_errcode(ctx);
    int64_t dim = te_tensor_shape(X)[axis];
    if (n < 1 || n > dim)
        return op__failc(&s, TE_ERR_ARG,
                         "%d outputs for input '%s' axis %d of extent %lld (need 1 to %lld)", n,
                         te_tensor_name(X), axis, (long long)dim, (long long)dim);
    int64_t total = 0, chunk = (dim + n - 1) / n;
    for (int i = 0; i < n; i++) {
        int64_t sz = sizes ? sizes[i] : (i < n - 1 ? chunk : dim - chunk * (n - 1));
        if (sz < 1 || sz > dim - total)
            return op__failc(&s, TE_ERR_SHAPE,
                             sizes ? "size %lld of output %d does not fit input '%s' axis %d "
                                     "(extent %lld, %lld left); sizes must be >= 1 and sum to it"
                                   : "%lld elements per output %d: input '%s' axis %d of extent "
                                     "%lld (%lld left) cannot be split evenly enough",
                             (long long)sz, i, te_tensor_name(X), axis, (long long)dim,
                             (long long)(dim - total));
        total += sz;
    }
    if (total != dim)
        return op__failc(&s, TE_ERR_SHAPE, "sizes sum to %lld but input '%s' axis %d has %lld",
                         (long long)total, te_tensor_name(X), axis, (long long)dim);
    total = 0;
    for (int i = 0; i < n; i++) {
        int64_t sz = sizes ? sizes[i] : (i < n - 1 ? chunk : dim - chunk * (n - 1));
        char suffix[16];
        snprintf(suffix, sizeof suffix, "%d", i);
        int64_t b = total, e = total + sz, one = 1;
        te_tensor *t =
            te_op_slice(ctx, X, 1, &axis, &b, &e, &one, op__stage_name(ctx, s.name, suffix));
        if (!t) {
            for (int j = 0; j < i; j++)
                out[j] = NULL;
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
        }
        out[i] = op__tag(ctx, t, "split");
        total = e;
    }
    return TE_OK;
}

/* ---- Gather ----------------------------------------------------------------------------- */

te_tensor *te_op_gather(te_ctx *ctx, te_tensor *X, te_tensor *Ind, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "gather", name ? name : "gather"};
    if (!op__need(&s, X, "input 'X'") || !op__need(&s, Ind, "indices") ||
        !numeric(&s, X, "input 'X'") || !op__axis(&s, X, &axis))
        return NULL;
    te_dtype idt = te_tensor_dtype(Ind);
    if (!te_dtype_is_int(idt) || idt == TE_BOOL)
        return op__fail(&s, TE_ERR_DTYPE, "indices '%s' have dtype %s; they must be integers",
                        te_tensor_name(Ind), te_dtype_str(idt));
    int r = te_tensor_ndim(X), ri = te_tensor_ndim(Ind), ro = r - 1 + ri;
    if (ro > TE_MAX_DIMS)
        return op__fail(&s, TE_ERR_SHAPE,
                        "output rank %d (input '%s' rank %d + indices rank %d "
                        "- 1) exceeds %d",
                        ro, te_tensor_name(X), r, ri, TE_MAX_DIMS);
    const int64_t *xs = te_tensor_shape(X), *is = te_tensor_shape(Ind);
    int64_t shape[TE_MAX_DIMS];
    for (int d = 0; d < ro; d++)
        shape[d] = d < axis ? xs[d] : d < axis + ri ? is[d - axis] : xs[d - ri + 1];
    te_expr *ax[TE_MAX_DIMS], *ii[TE_MAX_DIMS], *xi[TE_MAX_DIMS];
    if (!op__axes(ctx, ro, shape, NULL, ax))
        return NULL;
    for (int d = 0; d < ri; d++)
        ii[d] = ax[axis + d];
    /* A negative index counts from the end; one outside [-dim, dim) is clamped to the nearest
     * valid element, since compiled code cannot report it (ONNX leaves it undefined). */
    int64_t dim = xs[axis];
    te_expr *j = te_read(ctx, Ind, ri, ii);
    if (idt != TE_I64)
        j = te_cast(ctx, TE_I64, j);
    j = te_select(ctx, te_lt(ctx, j, te_int(ctx, 0)), te_add(ctx, j, te_int(ctx, dim)), j);
    j = te_min(ctx, te_max(ctx, j, te_int(ctx, 0)), te_int(ctx, dim - 1));
    for (int d = 0; d < r; d++)
        xi[d] = d < axis ? ax[d] : d == axis ? j : ax[d + ri - 1];
    return op__tag(ctx, te_compute(ctx, s.name, ro, ax, te_read(ctx, X, r, xi)), "gather");
}

/* ---- Where and expand ------------------------------------------------------------------- */

/* Numpy broadcast of `shape` (rank *R) with t's shape, reported through s. */
static bool bcast_with(const op_site *s, const te_tensor *t, const char *role, int *R,
                       int64_t *shape)
{
    int rt = te_tensor_ndim(t), rr = *R > rt ? *R : rt;
    const int64_t *ts = te_tensor_shape(t);
    int64_t out[TE_MAX_DIMS];
    for (int od = 0; od < rr; od++) {
        int dt = od - (rr - rt), ds = od - (rr - *R);
        int64_t et = dt >= 0 ? ts[dt] : 1, es = ds >= 0 ? shape[ds] : 1;
        if (et != es && et != 1 && es != 1) {
            op__fail(s, TE_ERR_SHAPE,
                     "cannot broadcast %s ('%s') axis %d (extent %lld) to extent %lld: extents "
                     "must be equal or 1",
                     role, te_tensor_name(t), dt, (long long)et, (long long)es);
            return false;
        }
        out[od] = et > es ? et : es;
    }
    memcpy(shape, out, sizeof(int64_t) * (size_t)rr);
    *R = rr;
    return true;
}

/* Read of t broadcast to the output axes (rank R, extents oshape). */
static te_expr *bcast_read(te_ctx *ctx, te_tensor *t, int R, te_expr *const *ax,
                           const int64_t *oshape)
{
    int r = te_tensor_ndim(t);
    const int64_t *ts = te_tensor_shape(t);
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < r; d++)
        idx[d] = ts[d] == 1 && oshape[d + R - r] != 1 ? te_int(ctx, 0) : ax[d + R - r];
    return te_read(ctx, t, r, idx);
}

te_tensor *te_op_where(te_ctx *ctx, te_tensor *C, te_tensor *X, te_tensor *Y, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "where", name ? name : "where"};
    if (!op__need(&s, C, "condition 'C'") || !op__need(&s, X, "input 'X'") ||
        !op__need(&s, Y, "input 'Y'") || !numeric(&s, X, "input 'X'") ||
        !op__same_dtype(&s, X, Y, "input 'Y'"))
        return NULL;
    int R = 0;
    int64_t shape[TE_MAX_DIMS];
    if (!bcast_with(&s, C, "condition 'C'", &R, shape) ||
        !bcast_with(&s, X, "input 'X'", &R, shape) || !bcast_with(&s, Y, "input 'Y'", &R, shape))
        return NULL;
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, R, shape, NULL, ax))
        return NULL;
    te_expr *c = bcast_read(ctx, C, R, ax, shape);
    if (te_tensor_dtype(C) != TE_BOOL)
        c = te_ne(ctx, c, te_const(ctx, te_tensor_dtype(C), 0));
    te_expr *body =
        te_select(ctx, c, bcast_read(ctx, X, R, ax, shape), bcast_read(ctx, Y, R, ax, shape));
    return op__tag(ctx, te_compute(ctx, s.name, R, ax, body), "where");
}

te_tensor *te_op_expand(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *shape_in,
                        const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "expand", name ? name : "expand"};
    if (!op__need(&s, X, "input 'X'") || !numeric(&s, X, "input 'X'"))
        return NULL;
    if (ndim < 1 || ndim > TE_MAX_DIMS || !shape_in)
        return op__fail(&s, TE_ERR_ARG, "target rank %d must be 1 to %d with a shape", ndim,
                        TE_MAX_DIMS);
    int64_t shape[TE_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (shape_in[d] < 1)
            return op__fail(&s, TE_ERR_ARG, "target axis %d has extent %lld; extents must be >= 1",
                            d, (long long)shape_in[d]);
        shape[d] = shape_in[d];
    }
    int R = ndim;
    if (!bcast_with(&s, X, "input 'X'", &R, shape))
        return NULL;
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, R, shape, NULL, ax))
        return NULL;
    return op__tag(ctx, te_compute(ctx, s.name, R, ax, bcast_read(ctx, X, R, ax, shape)), "expand");
}
