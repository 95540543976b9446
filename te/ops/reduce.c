/* Reductions and the operators built on them: softmax, layer norm, RMS norm, sum/max/mean. */
#include <math.h>
#include <string.h>

#include "te/internal.h"
#include "te/ops/ops_internal.h"

/* Axes for a reduction of X along `axis` that keeps the axis with extent 1: out[] are the
 * output axes (extent 1 at `axis`), in[] the index into X (the reduction axis *k at `axis`). */
static bool keep_axes(te_ctx *ctx, const te_tensor *X, int axis, te_expr **out, te_expr **in,
                      te_expr **k)
{
    int r = te_tensor_ndim(X);
    int64_t shape[TE_MAX_DIMS];
    memcpy(shape, te_tensor_shape(X), sizeof(int64_t) * (size_t)r);
    shape[axis] = 1;
    if (!op__axes(ctx, r, shape, NULL, out) ||
        !(*k = te_reduce_axis(ctx, "k", te_tensor_shape(X)[axis])))
        return false;
    for (int d = 0; d < r; d++)
        in[d] = d == axis ? *k : out[d];
    return true;
}

/* Elementwise axes over X's shape: ax[] and idx1[] = ax with 0 at `axis` (to read a
 * keepdims statistic). */
static bool elem_axes(te_ctx *ctx, const te_tensor *X, int axis, te_expr **ax, te_expr **idx1)
{
    int r = te_tensor_ndim(X);
    if (!op__axes(ctx, r, te_tensor_shape(X), NULL, ax))
        return false;
    for (int d = 0; d < r; d++)
        idx1[d] = d == axis ? te_int(ctx, 0) : ax[d];
    return true;
}

static te_tensor *stage(te_ctx *ctx, const op_site *s, const char *suffix, int r,
                        te_expr *const *axes, te_expr *body, const char *tag)
{
    const char *nm = suffix ? op__stage_name(ctx, s->name, suffix) : s->name;
    return op__tag(ctx, te_compute(ctx, nm, r, axes, body), tag);
}

/* A sum over k of `v` as stage "<name>_<suffix>": compensated (a Kahan tuple compute whose
 * second output "<name>_<suffix>_c" holds the compensation) when the row has at least
 * TE_OP_KAHAN_MIN_ROW elements, a plain te_sum otherwise. Returns the sum tensor. */
static te_tensor *row_sum(te_ctx *ctx, const op_site *s, const char *suffix, int r,
                          te_expr *const *axes, te_expr *v, te_expr *k, const char *tag)
{
    const char *nm = op__stage_name(ctx, s->name, suffix);
    if (!nm || !v || !k)
        return NULL;
    if (k->u.var.extent < TE_OP_KAHAN_MIN_ROW)
        return op__tag(ctx, te_compute(ctx, nm, r, axes, te_sum(ctx, v, 1, &k)), tag);
    te_reducer *kr = te_reducer_kahan(ctx, v->dtype);
    te_expr *body =
        kr ? te_reduce_tuple(ctx, kr, 2, (te_expr *[]){v, te_const(ctx, v->dtype, 0)}, 1, &k)
           : NULL;
    te_tensor *out[2];
    const char *names[2] = {nm, op__stage_name(ctx, nm, "c")};
    if (!body || !names[1] || te_compute_tuple(ctx, 2, names, r, axes, body, out))
        return NULL;
    op__tag(ctx, out[1], tag);
    return op__tag(ctx, out[0], tag);
}

/* The row statistics of layer norm and RMS norm: the reductions sum (x, (x - mean)^2, x^2) and
 * the division by the row length n is applied where the sum is read, `sum / n`, which the
 * compiler computes once per row (loop-invariant) instead of once per element: a vector
 * division costs 8-16 multiplications, and dividing every element (or multiplying by a
 * rounded 1/n, which would move the operator's definition 3e-8 away from the exact mean) is
 * what kept layer norm below memory speed. The stages keep their names (`_mean`, `_var`,
 * `_ms`, which schedules and recorded traces refer to) and hold the row's sums. */
static te_expr *per_n(te_ctx *ctx, te_expr *sum, te_dtype dt, int64_t n)
{
    return te_div(ctx, sum, te_const(ctx, dt, (double)n));
}

/* a / b for b constant along the row: a times 1/b, so the division is done once per row (the
 * compiler hoists 1/b out of the row loop) instead of once per element; within one ulp of a / b. */
static te_expr *div_row(te_ctx *ctx, te_expr *a, te_expr *b)
{
    return te_mul(ctx, a, te_div(ctx, te_const(ctx, b->dtype, 1), b));
}

te_tensor *te_op_softmax(te_ctx *ctx, te_tensor *X, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "softmax", name ? name : "softmax"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") || !op__axis(&s, X, &axis))
        return NULL;
    int r = te_tensor_ndim(X);
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_tensor *M =
        stage(ctx, &s, "max", r, oa, te_rmax(ctx, te_read(ctx, X, r, ia), 1, &k), "softmax_max");
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!M || !elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    te_expr *e = te_exp(ctx, te_sub(ctx, te_read(ctx, X, r, ax), te_read(ctx, M, r, i1)));
    te_tensor *E = stage(ctx, &s, "exp", r, ax, e, "softmax_exp");
    if (!E || !keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_tensor *S =
        stage(ctx, &s, "sum", r, oa, te_sum(ctx, te_read(ctx, E, r, ia), 1, &k), "softmax_sum");
    if (!S || !elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    te_expr *y = div_row(ctx, te_read(ctx, E, r, ax), te_read(ctx, S, r, i1));
    return stage(ctx, &s, NULL, r, ax, y, "softmax");
}

/* Checks that a per-channel parameter (gamma, beta) is 1-D with extent n. */
static bool check_vec(const op_site *s, const te_tensor *X, const te_tensor *v, const char *role,
                      int axis)
{
    if (!v)
        return true;
    if (!op__rank(s, v, role, 1, "[features]") || !op__same_dtype(s, X, v, role))
        return false;
    int64_t n = te_tensor_shape(X)[axis];
    if (te_tensor_shape(v)[0] != n) {
        op__fail(s, TE_ERR_SHAPE,
                 "%s '%s' axis 0 has %lld elements but input '%s' axis %d has "
                 "%lld",
                 role, te_tensor_name(v), (long long)te_tensor_shape(v)[0], te_tensor_name(X), axis,
                 (long long)n);
        return false;
    }
    return true;
}

/* The arguments of a layer norm: float X, its axis (normalized in place), gamma and beta
 * vectors along it, eps >= 0. */
static bool check_norm(op_site *s, te_tensor *X, te_tensor *gamma, te_tensor *beta, double eps,
                       int *axis)
{
    if (!op__need(s, X, "input 'X'") || !op__float(s, X, "input 'X'") || !op__axis(s, X, axis) ||
        !check_vec(s, X, gamma, "gamma", *axis) || !check_vec(s, X, beta, "beta", *axis))
        return false;
    if (!(eps >= 0)) {
        op__fail(s, TE_ERR_ARG, "eps %g must be >= 0", eps);
        return false;
    }
    return true;
}

te_tensor *te_op_layer_norm(te_ctx *ctx, te_tensor *X, te_tensor *gamma, te_tensor *beta,
                            double eps, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "layer_norm", name ? name : "layer_norm"};
    if (!check_norm(&s, X, gamma, beta, eps, &axis))
        return NULL;
    int r = te_tensor_ndim(X);
    te_dtype dt = te_tensor_dtype(X);
    int64_t n = te_tensor_shape(X)[axis];
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_tensor *mean = row_sum(ctx, &s, "mean", r, oa, te_read(ctx, X, r, ia), k,
                              "layer_norm_mean"); /* the row's sum: the mean is mean / n */
    te_expr *mi[TE_MAX_DIMS];
    if (!mean || !keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    for (int d = 0; d < r; d++)
        mi[d] = d == axis ? te_int(ctx, 0) : oa[d];
    te_expr *dev =
        te_sub(ctx, te_read(ctx, X, r, ia), per_n(ctx, te_read(ctx, mean, r, mi), dt, n));
    te_tensor *var = row_sum(ctx, &s, "var", r, oa, te_mul(ctx, dev, dev), k,
                             "layer_norm_var"); /* the sum of squared deviations */
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!var || !elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    te_expr *y = te_mul(
        ctx, te_sub(ctx, te_read(ctx, X, r, ax), per_n(ctx, te_read(ctx, mean, r, i1), dt, n)),
        te_rsqrt(ctx,
                 te_add(ctx, per_n(ctx, te_read(ctx, var, r, i1), dt, n), te_const(ctx, dt, eps))));
    if (gamma)
        y = te_mul(ctx, y, TE_AT(ctx, gamma, ax[axis]));
    if (beta)
        y = te_add(ctx, y, TE_AT(ctx, beta, ax[axis]));
    return stage(ctx, &s, NULL, r, ax, y, "layer_norm");
}

te_tensor *te_op_rms_norm(te_ctx *ctx, te_tensor *X, te_tensor *gamma, double eps, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "rms_norm", name ? name : "rms_norm"};
    int axis = -1;
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") ||
        !op__axis(&s, X, &axis) || !check_vec(&s, X, gamma, "gamma", axis))
        return NULL;
    if (!(eps >= 0))
        return op__fail(&s, TE_ERR_ARG, "eps %g must be >= 0", eps);
    int r = te_tensor_ndim(X);
    te_dtype dt = te_tensor_dtype(X);
    int64_t n = te_tensor_shape(X)[axis];
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_expr *x = te_read(ctx, X, r, ia);
    te_tensor *ms = row_sum(ctx, &s, "ms", r, oa, te_mul(ctx, x, x), k,
                            "rms_norm_ms"); /* the sum of squares: the mean square is ms / n */
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!ms || !elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    te_expr *y = te_mul(ctx, te_read(ctx, X, r, ax),
                        te_rsqrt(ctx, te_add(ctx, per_n(ctx, te_read(ctx, ms, r, i1), dt, n),
                                             te_const(ctx, dt, eps))));
    if (gamma)
        y = te_mul(ctx, y, TE_AT(ctx, gamma, ax[axis]));
    return stage(ctx, &s, NULL, r, ax, y, "rms_norm");
}

static const char *reduce_tag(te_reduce_kind kind)
{
    switch (kind) {
    case TE_RSUM:
        return "sum";
    case TE_RMAX:
        return "max";
    case TE_RMIN:
        return "min";
    case TE_RPROD:
        return "prod";
    default:
        return NULL;
    }
}

/* Reduction with the checks of te_op_reduce, reported through s, output named `nm`. */
static te_tensor *reduce_impl(const op_site *s, te_tensor *X, te_reduce_kind kind, int naxes,
                              const int *axes_in, int keepdims, const char *nm, const char *tag)
{
    te_ctx *ctx = s->ctx;
    if (!op__need(s, X, "input 'X'") || !op__same_dtype(s, X, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    if (naxes < 1 || naxes > r || !axes_in)
        return op__fail(s, TE_ERR_ARG, "needs 1 to %d axes of input '%s' to reduce, got %d", r,
                        te_tensor_name(X), naxes);
    bool red[TE_MAX_DIMS] = {0};
    for (int a = 0; a < naxes; a++) {
        int ax = axes_in[a];
        if (!op__axis(s, X, &ax))
            return NULL;
        if (red[ax])
            return op__fail(s, TE_ERR_ARG, "axis %d of input '%s' is listed twice", ax,
                            te_tensor_name(X));
        red[ax] = true;
    }
    const int64_t *xs = te_tensor_shape(X);
    int64_t shape[TE_MAX_DIMS];
    int ro = 0;
    for (int d = 0; d < r; d++)
        if (!red[d] || keepdims)
            shape[ro++] = red[d] ? 1 : xs[d];
    bool full = ro == 0;
    if (full)
        shape[ro++] = 1;
    te_expr *oa[TE_MAX_DIMS], *ka[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    if (!op__axes(ctx, ro, shape, NULL, oa))
        return NULL;
    int nk = 0, o = 0;
    for (int d = 0; d < r; d++) {
        if (red[d]) {
            char nmk[16];
            snprintf(nmk, sizeof nmk, "k%d", nk);
            if (!(ka[nk] = te_reduce_axis(ctx, nmk, xs[d])))
                return NULL;
            idx[d] = ka[nk++];
            if (keepdims)
                o++;
        } else {
            idx[d] = oa[o++];
        }
    }
    te_expr *body = te_reduce(ctx, kind, NULL, te_read(ctx, X, r, idx), nk, ka);
    return op__tag(ctx, te_compute(ctx, nm, ro, oa, body), tag);
}

te_tensor *te_op_reduce(te_ctx *ctx, te_tensor *X, te_reduce_kind kind, int naxes, const int *axes,
                        int keepdims, const char *name)
{
    if (!ctx)
        return NULL;
    const char *tag = reduce_tag(kind);
    op_site s = {ctx, tag ? tag : "reduce", name ? name : tag ? tag : "reduce"};
    if (!tag)
        return op__fail(&s, TE_ERR_ARG,
                        "reduction kind %d is not TE_RSUM, TE_RMAX, TE_RMIN or "
                        "TE_RPROD",
                        (int)kind);
    return reduce_impl(&s, X, kind, naxes, axes, keepdims, s.name, tag);
}

te_tensor *te_op_mean(te_ctx *ctx, te_tensor *X, int naxes, const int *axes, int keepdims,
                      const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "mean", name ? name : "mean"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'"))
        return NULL;
    te_tensor *S = reduce_impl(&s, X, TE_RSUM, naxes, axes, keepdims,
                               op__stage_name(ctx, s.name, "sum"), "mean_sum");
    if (!S)
        return NULL;
    double count = (double)te_tensor_numel(X) / (double)te_tensor_numel(S);
    int r = te_tensor_ndim(S);
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, r, te_tensor_shape(S), NULL, ax))
        return NULL;
    te_expr *y = te_div(ctx, te_read(ctx, S, r, ax), te_const(ctx, te_tensor_dtype(X), count));
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, y), "mean");
}

/* ---- Tuple reductions: argmax/argmin, one-pass layer norm and softmax --------------------- */

te_tensor *te_op_argmax(te_ctx *ctx, te_tensor *X, int axis, int keepdims, const char *name)
{
    return te_op_arg_reduce(ctx, X, 1, axis, keepdims, name);
}

te_tensor *te_op_argmin(te_ctx *ctx, te_tensor *X, int axis, int keepdims, const char *name)
{
    return te_op_arg_reduce(ctx, X, 0, axis, keepdims, name);
}

te_tensor *te_op_arg_reduce(te_ctx *ctx, te_tensor *X, int is_max, int axis, int keepdims,
                            const char *name)
{
    if (!ctx)
        return NULL;
    const char *tag = is_max ? "argmax" : "argmin";
    op_site s = {ctx, tag, name ? name : tag};
    if (!op__need(&s, X, "input 'X'") || !op__same_dtype(&s, X, X, "input 'X'") ||
        !op__axis(&s, X, &axis))
        return NULL;
    if (te_tensor_dtype(X) == TE_BOOL)
        return op__fail(&s, TE_ERR_DTYPE, "input '%s' is bool; argmax needs numbers",
                        te_tensor_name(X));
    int r = te_tensor_ndim(X);
    const int64_t *xs = te_tensor_shape(X);
    int64_t shape[TE_MAX_DIMS];
    int ro = 0;
    for (int d = 0; d < r; d++)
        if (d != axis || keepdims)
            shape[ro++] = d == axis ? 1 : xs[d];
    if (ro == 0)
        shape[ro++] = 1;
    te_expr *oa[TE_MAX_DIMS], *idx[TE_MAX_DIMS];
    te_expr *k = te_reduce_axis(ctx, "k", xs[axis]);
    if (!k || !op__axes(ctx, ro, shape, NULL, oa))
        return NULL;
    for (int d = 0, o = 0; d < r; d++) {
        if (d == axis) {
            idx[d] = k;
            if (keepdims)
                o++;
        } else {
            idx[d] = oa[o++];
        }
    }
    te_reducer *red = is_max ? te_reducer_argmax(ctx, te_tensor_dtype(X), TE_I64)
                             : te_reducer_argmin(ctx, te_tensor_dtype(X), TE_I64);
    te_expr *body =
        red ? te_reduce_tuple(ctx, red, 2, (te_expr *[]){te_read(ctx, X, r, idx), k}, 1, &k) : NULL;
    const char *names[2] = {op__stage_name(ctx, s.name, "val"), s.name};
    te_tensor *out[2];
    if (!body || !names[0] || te_compute_tuple(ctx, 2, names, ro, oa, body, out))
        return NULL;
    op__tag(ctx, out[0], tag);
    return op__tag(ctx, out[1], tag);
}

te_tensor *te_op_layer_norm_welford(te_ctx *ctx, te_tensor *X, te_tensor *gamma, te_tensor *beta,
                                    double eps, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "layer_norm_welford", name ? name : "layer_norm_welford"};
    if (!check_norm(&s, X, gamma, beta, eps, &axis))
        return NULL;
    int r = te_tensor_ndim(X);
    te_dtype dt = te_tensor_dtype(X);
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_reducer *w = te_reducer_welford(ctx, dt);
    te_expr *srcs[3] = {te_const(ctx, dt, 1), te_read(ctx, X, r, ia), te_const(ctx, dt, 0)};
    te_expr *body = w ? te_reduce_tuple(ctx, w, 3, srcs, 1, &k) : NULL;
    const char *names[3] = {op__stage_name(ctx, s.name, "cnt"), op__stage_name(ctx, s.name, "mean"),
                            op__stage_name(ctx, s.name, "m2")};
    te_tensor *st[3];
    if (!body || !names[0] || !names[1] || !names[2] ||
        te_compute_tuple(ctx, 3, names, r, oa, body, st))
        return NULL;
    for (int i = 0; i < 3; i++)
        op__tag(ctx, st[i], "layer_norm_welford_stats");
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    te_expr *N = te_const(ctx, dt, (double)te_tensor_shape(X)[axis]);
    te_expr *var = te_div(ctx, te_read(ctx, st[2], r, i1), N);
    te_expr *y = te_mul(ctx, te_sub(ctx, te_read(ctx, X, r, ax), te_read(ctx, st[1], r, i1)),
                        te_rsqrt(ctx, te_add(ctx, var, te_const(ctx, dt, eps))));
    if (gamma)
        y = te_mul(ctx, y, TE_AT(ctx, gamma, ax[axis]));
    if (beta)
        y = te_add(ctx, y, TE_AT(ctx, beta, ax[axis]));
    return stage(ctx, &s, NULL, r, ax, y, "layer_norm_welford");
}

te_tensor *te_op_softmax_online(te_ctx *ctx, te_tensor *X, int axis, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "softmax_online", name ? name : "softmax_online"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") || !op__axis(&s, X, &axis))
        return NULL;
    int r = te_tensor_ndim(X);
    te_dtype dt = te_tensor_dtype(X);
    te_expr *oa[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *k;
    if (!keep_axes(ctx, X, axis, oa, ia, &k))
        return NULL;
    te_reducer *os = te_reducer_online_softmax(ctx, dt);
    te_expr *body =
        os ? te_reduce_tuple(ctx, os, 2,
                             (te_expr *[]){te_read(ctx, X, r, ia), te_const(ctx, dt, 1)}, 1, &k)
           : NULL;
    const char *names[2] = {op__stage_name(ctx, s.name, "max"), op__stage_name(ctx, s.name, "sum")};
    te_tensor *st[2];
    if (!body || !names[0] || !names[1] || te_compute_tuple(ctx, 2, names, r, oa, body, st))
        return NULL;
    op__tag(ctx, st[0], "softmax_online_stats");
    op__tag(ctx, st[1], "softmax_online_stats");
    te_expr *ax[TE_MAX_DIMS], *i1[TE_MAX_DIMS];
    if (!elem_axes(ctx, X, axis, ax, i1))
        return NULL;
    /* A fully masked row (every element -inf) has max -inf: its outputs are 0, not
     * exp(-inf - -inf) = NaN. */
    te_expr *m = te_read(ctx, st[0], r, i1);
    te_expr *y = div_row(ctx, te_exp(ctx, te_sub(ctx, te_read(ctx, X, r, ax), m)),
                         te_read(ctx, st[1], r, i1));
    y = te_select(ctx, te_eq(ctx, m, te_const(ctx, dt, -INFINITY)), te_const(ctx, dt, 0), y);
    return stage(ctx, &s, NULL, r, ax, y, "softmax_online");
}
