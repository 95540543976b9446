/*
 * Tuple reducers: reductions that carry several values at once (TVM's comm_reducer over
 * tuples), the built-in ones (argmax/argmin, Welford, online softmax, Kahan), te_reduce_tuple
 * and te_compute_tuple.
 *
 * Representation (te/internal.h): a tuple reduction is a TE_E_REDUCE node with nsrc > 0
 * sources. te_reduce_tuple returns the node for the whole tuple (comp == -1), which only
 * te_compute_tuple accepts; it gives every output tensor its own copy of the node with comp
 * set to that output's component, so each output's body is an ordinary expression of its own
 * dtype, and the outputs are linked (te_tensor.tuple) so a schedule gives them one stage.
 */
#include <math.h>
#include <string.h>

#include "te/internal.h"

static bool is_free_var(const te_expr *e)
{
    return e && e->kind == TE_E_VAR && e->u.var.vkind == TE_VAR_FREE;
}

te_reducer *te_reducer_create_tuple(te_ctx *ctx, const char *name, int n, te_expr *const *x,
                                    te_expr *const *y, te_expr *const *combine,
                                    te_expr *const *identity)
{
    if (!ctx)
        return NULL;
    const char *nm = name && *name ? name : "?";
    if (!name || !*name) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_reducer_create_tuple: a name is required");
        return NULL;
    }
    if (n < 1 || n > TE_MAX_TUPLE) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reducer_create_tuple: reducer '%s' has %d components; 1 to %d "
                         "are supported",
                         nm, n, TE_MAX_TUPLE);
        return NULL;
    }
    if (!x || !y || !combine || !identity) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reducer_create_tuple: reducer '%s' needs x, y, combine and "
                         "identity arrays of %d entries",
                         nm, n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!x[i] || !y[i] || !combine[i] || !identity[i])
            return NULL; /* a failed constructor already said why */
    for (int i = 0; i < n; i++) {
        if (!is_free_var(x[i]) || !is_free_var(y[i])) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "reducer '%s': x[%d] and y[%d] must be te_var variables", nm, i, i);
            return NULL;
        }
        for (int j = 0; j < n; j++)
            if (x[i] == y[j] || (j != i && (x[i] == x[j] || y[i] == y[j]))) {
                te_ctx_set_error(ctx, TE_ERR_ARG,
                                 "reducer '%s': the variables x[0..%d) and y[0..%d) must be "
                                 "distinct",
                                 nm, n, n);
                return NULL;
            }
        te_dtype dt = identity[i]->dtype;
        if (x[i]->dtype != dt || y[i]->dtype != dt || combine[i]->dtype != dt) {
            te_ctx_set_error(ctx, TE_ERR_DTYPE,
                             "reducer '%s': component %d mixes dtypes (x %s, y %s, combine %s, "
                             "identity %s); each component has one",
                             nm, i, te_dtype_str(x[i]->dtype), te_dtype_str(y[i]->dtype),
                             te_dtype_str(combine[i]->dtype), te_dtype_str(dt));
            return NULL;
        }
        if (combine[i]->lanes != 1 || identity[i]->lanes != 1) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "reducer '%s': component %d is not scalar", nm, i);
            return NULL;
        }
    }
    te_reducer *r = te__alloc(ctx, sizeof *r);
    size_t sz = sizeof(te_expr *) * (size_t)n;
    if (!r || !(r->xs = te__alloc(ctx, sz)) || !(r->ys = te__alloc(ctx, sz)) ||
        !(r->combines = te__alloc(ctx, sz)) || !(r->identities = te__alloc(ctx, sz)) ||
        !(r->name = te__strdup(ctx, name)))
        return NULL;
    memcpy(r->xs, x, sz);
    memcpy(r->ys, y, sz);
    memcpy(r->combines, combine, sz);
    memcpy(r->identities, identity, sz);
    r->n = n;
    r->tuple = true;
    r->x = x[0];
    r->y = y[0];
    r->combine = combine[0];
    r->identity = identity[0];
    return r;
}

int te_reducer_ncomp(const te_reducer *r) { return r ? r->n : 0; }

te_dtype te_reducer_dtype(const te_reducer *r, int i)
{
    return r && i >= 0 && i < r->n ? r->identities[i]->dtype : TE_F32;
}

int te__reduce_combine_tuple(te_ctx *ctx, const te_reducer *r, te_expr *const *acc,
                             te_expr *const *val, te_expr **out)
{
    const te_expr *from[2 * TE_MAX_TUPLE];
    te_expr *to[2 * TE_MAX_TUPLE];
    for (int i = 0; i < r->n; i++) {
        from[i] = r->xs[i];
        to[i] = acc[i];
        from[r->n + i] = r->ys[i];
        to[r->n + i] = val[i];
    }
    te__subst m = {2 * r->n, from, to};
    for (int i = 0; i < r->n; i++)
        if (!(out[i] = te__substitute(ctx, r->combines[i], &m)))
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
    return TE_OK;
}

/* ---- Built-in tuple reducers ------------------------------------------------------------- */

enum { BI_ARGMAX, BI_ARGMIN, BI_WELFORD, BI_SOFTMAX, BI_KAHAN, BI_COUNT };

/* The smallest (lowest) value of dtype, as a constant. */
static te_expr *lowest(te_ctx *ctx, te_dtype dt, bool hi)
{
    switch (dt) {
    case TE_F32:
    case TE_F64:
        return te_const(ctx, dt, hi ? INFINITY : -INFINITY);
    case TE_I8:
        return te_const(ctx, dt, hi ? 127 : -128);
    case TE_U8:
        return te_const(ctx, dt, hi ? 255 : 0);
    case TE_I32:
        return te_const(ctx, dt, hi ? 2147483647.0 : -2147483648.0);
    case TE_I64: {
        te_expr *e = te_int(ctx, hi ? INT64_MAX : INT64_MIN);
        return e;
    }
    default:
        return NULL;
    }
}

static bool numeric(te_dtype dt) { return dt != TE_BOOL && (unsigned)dt < TE_DTYPE_COUNT; }

static te_reducer *make_arg(te_ctx *ctx, bool is_max, te_dtype v, te_dtype ix)
{
    const char *fn = is_max ? "te_reducer_argmax" : "te_reducer_argmin";
    if (!numeric(v) || !te_dtype_is_int(ix) || ix == TE_BOOL) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE,
                         "%s: needs a numeric value dtype and an integer index dtype (got %s, "
                         "%s)",
                         fn, te_dtype_str(v), te_dtype_str(ix));
        return NULL;
    }
    te_expr *xv = te_var(ctx, "xv", v), *xi = te_var(ctx, "xi", ix);
    te_expr *yv = te_var(ctx, "yv", v), *yi = te_var(ctx, "yi", ix);
    /* y wins when strictly better, or equal with a smaller index: ties go to the smallest
     * index whatever order the values are combined in (vector lanes, rfactor, threads). */
    te_expr *better = te_or(ctx, is_max ? te_gt(ctx, yv, xv) : te_lt(ctx, yv, xv),
                            te_and(ctx, te_eq(ctx, yv, xv), te_lt(ctx, yi, xi)));
    te_expr *comb[2] = {te_select(ctx, better, yv, xv), te_select(ctx, better, yi, xi)};
    te_expr *id[2] = {lowest(ctx, v, !is_max), lowest(ctx, ix, true)};
    return te_reducer_create_tuple(ctx, is_max ? "argmax" : "argmin", 2, (te_expr *[]){xv, xi},
                                   (te_expr *[]){yv, yi}, comb, id);
}

static te_reducer *make_welford(te_ctx *ctx, te_dtype dt)
{
    te_expr *na = te_var(ctx, "na", dt), *ma = te_var(ctx, "ma", dt), *qa = te_var(ctx, "qa", dt);
    te_expr *nb = te_var(ctx, "nb", dt), *mb = te_var(ctx, "mb", dt), *qb = te_var(ctx, "qb", dt);
    /* Chan et al.: n = na + nb, delta = mb - ma, mean = ma + delta * nb / n,
     * M2 = qa + qb + delta^2 * na * nb / n. r = nb / max(n, 1) is 0 when both are empty, so
     * two identities combine to the identity without a division by zero. */
    te_expr *n = te_add(ctx, na, nb);
    te_expr *r = te_div(ctx, nb, te_max(ctx, n, te_const(ctx, dt, 1)));
    te_expr *delta = te_sub(ctx, mb, ma);
    te_expr *comb[3] = {n, te_add(ctx, ma, te_mul(ctx, delta, r)),
                        te_add(ctx, te_add(ctx, qa, qb),
                               te_mul(ctx, te_mul(ctx, delta, delta), te_mul(ctx, na, r)))};
    te_expr *id[3] = {te_const(ctx, dt, 0), te_const(ctx, dt, 0), te_const(ctx, dt, 0)};
    return te_reducer_create_tuple(ctx, "welford", 3, (te_expr *[]){na, ma, qa},
                                   (te_expr *[]){nb, mb, qb}, comb, id);
}

static te_reducer *make_softmax(te_ctx *ctx, te_dtype dt)
{
    te_expr *m1 = te_var(ctx, "m1", dt), *s1 = te_var(ctx, "s1", dt);
    te_expr *m2 = te_var(ctx, "m2", dt), *s2 = te_var(ctx, "s2", dt);
    /* s1 exp(m1 - M) + s2 exp(m2 - M) with one exp: the state with the larger max keeps its sum,
     * the other's is scaled by e = exp(min - max). Equal maxima (two -inf included) take e = 1,
     * never exp(-inf - -inf) = NaN. */
    te_expr *M = te_max(ctx, m1, m2), *lo = te_min(ctx, m1, m2);
    te_expr *e =
        te_select(ctx, te_eq(ctx, m1, m2), te_const(ctx, dt, 1), te_exp(ctx, te_sub(ctx, lo, M)));
    te_expr *sum = te_select(ctx, te_ge(ctx, m1, m2), te_add(ctx, s1, te_mul(ctx, s2, e)),
                             te_add(ctx, te_mul(ctx, s1, e), s2));
    te_expr *comb[2] = {M, sum};
    te_expr *id[2] = {te_const(ctx, dt, -INFINITY), te_const(ctx, dt, 0)};
    return te_reducer_create_tuple(ctx, "online_softmax", 2, (te_expr *[]){m1, s1},
                                   (te_expr *[]){m2, s2}, comb, id);
}

static te_reducer *make_kahan(te_ctx *ctx, te_dtype dt)
{
    te_expr *s1 = te_var(ctx, "s1", dt), *c1 = te_var(ctx, "c1", dt);
    te_expr *s2 = te_var(ctx, "s2", dt), *c2 = te_var(ctx, "c2", dt);
    /* The true sum of a state is s - c. Merging two states adds s2 - c1 - c2 to s1 with the
     * classic compensated step; an element v is the state (v, 0). Written (s2 - c1) - c2, so
     * that for an element the compiler drops the "- 0" (exact in IEEE arithmetic; c1 + 0 is
     * not, for c1 = -0) and the loop-carried chain is the classic four operations. */
    te_expr *yv = te_sub(ctx, te_sub(ctx, s2, c1), c2);
    te_expr *t = te_add(ctx, s1, yv);
    te_expr *comb[2] = {t, te_sub(ctx, te_sub(ctx, t, s1), yv)};
    te_expr *id[2] = {te_const(ctx, dt, 0), te_const(ctx, dt, 0)};
    return te_reducer_create_tuple(ctx, "kahan", 2, (te_expr *[]){s1, c1}, (te_expr *[]){s2, c2},
                                   comb, id);
}

static te_reducer *builtin(te_ctx *ctx, int kind, te_dtype a, te_dtype b)
{
    if (!ctx)
        return NULL;
    if ((unsigned)a >= TE_DTYPE_COUNT || (unsigned)b >= TE_DTYPE_COUNT) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "built-in tuple reducer: invalid dtype");
        return NULL;
    }
    if ((kind == BI_WELFORD || kind == BI_SOFTMAX || kind == BI_KAHAN) && !te_dtype_is_float(a)) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s reducer: needs a floating-point dtype (got %s)",
                         kind == BI_WELFORD   ? "welford"
                         : kind == BI_SOFTMAX ? "online_softmax"
                                              : "kahan",
                         te_dtype_str(a));
        return NULL;
    }
    void **slot =
        te__ctx_cache_slot(ctx, (kind * TE_DTYPE_COUNT + (int)a) * TE_DTYPE_COUNT + (int)b);
    if (!slot)
        return NULL;
    if (*slot)
        return *slot;
    te_reducer *r = NULL;
    switch (kind) {
    case BI_ARGMAX:
    case BI_ARGMIN:
        r = make_arg(ctx, kind == BI_ARGMAX, a, b);
        break;
    case BI_WELFORD:
        r = make_welford(ctx, a);
        break;
    case BI_SOFTMAX:
        r = make_softmax(ctx, a);
        break;
    default:
        r = make_kahan(ctx, a);
        break;
    }
    *slot = r;
    return r;
}

te_reducer *te_reducer_argmax(te_ctx *ctx, te_dtype value, te_dtype index)
{
    return builtin(ctx, BI_ARGMAX, value, index);
}
te_reducer *te_reducer_argmin(te_ctx *ctx, te_dtype value, te_dtype index)
{
    return builtin(ctx, BI_ARGMIN, value, index);
}
te_reducer *te_reducer_welford(te_ctx *ctx, te_dtype dt)
{
    return builtin(ctx, BI_WELFORD, dt, dt);
}
te_reducer *te_reducer_online_softmax(te_ctx *ctx, te_dtype dt)
{
    return builtin(ctx, BI_SOFTMAX, dt, dt);
}
te_reducer *te_reducer_kahan(te_ctx *ctx, te_dtype dt) { return builtin(ctx, BI_KAHAN, dt, dt); }

/* ---- te_reduce_tuple / te_compute_tuple -------------------------------------------------- */

te_expr *te_reduce_tuple(te_ctx *ctx, te_reducer *r, int n, te_expr *const *srcs, int naxes,
                         te_expr *const *axes)
{
    if (!ctx)
        return NULL;
    if (!r) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_reduce_tuple: needs a reducer");
        return NULL;
    }
    if (!srcs || n != r->n) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reduce_tuple: reducer '%s' combines %d values but %d sources were "
                         "given",
                         r->name, r->n, srcs ? n : 0);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!srcs[i])
            return NULL;
    for (int i = 0; i < n; i++) {
        if (srcs[i]->dtype != r->identities[i]->dtype) {
            te_ctx_set_error(ctx, TE_ERR_DTYPE,
                             "te_reduce_tuple: reducer '%s' component %d works on %s but source "
                             "%d is %s",
                             r->name, i, te_dtype_str(r->identities[i]->dtype), i,
                             te_dtype_str(srcs[i]->dtype));
            return NULL;
        }
        if (srcs[i]->dtype == TE_BOOL) {
            te_ctx_set_error(ctx, TE_ERR_DTYPE,
                             "te_reduce_tuple: source %d is bool; bool values cannot be reduced",
                             i);
            return NULL;
        }
        if (srcs[i]->kind == TE_E_REDUCE) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_reduce_tuple: source %d is itself a reduction; nested "
                             "reductions are not supported",
                             i);
            return NULL;
        }
    }
    /* te_reduce checks the axes and builds the node around source 0. */
    te_expr *e = te_reduce(ctx, TE_RSUM, NULL, srcs[0], naxes, axes);
    if (!e)
        return NULL;
    e->u.red.rkind = TE_RCUSTOM;
    e->u.red.custom = r;
    e->u.red.nsrc = n;
    e->u.red.comp = -1;
    if (!(e->u.red.srcs = te__alloc(ctx, sizeof(te_expr *) * (size_t)n)))
        return NULL;
    memcpy(e->u.red.srcs, srcs, sizeof(te_expr *) * (size_t)n);
    return e;
}

int te_compute_tuple(te_ctx *ctx, int n, const char *const *names, int ndim, te_expr *const *axes,
                     te_expr *body, te_tensor **outs)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (outs)
        for (int i = 0; i < n && i <= TE_MAX_TUPLE; i++)
            outs[i] = NULL;
    if (!body)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute_tuple: NULL body");
    if (!te__is_tuple_reduce(body) || body->u.red.comp != -1)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_compute_tuple: the body must be a te_reduce_tuple "
                                "reduction (use te_compute for anything else)");
    if (!names || !outs || n != body->u.red.nsrc)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_compute_tuple: reducer '%s' yields %d values but %d outputs "
                                "(names, outs) were given",
                                body->u.red.custom->name, body->u.red.nsrc, names && outs ? n : 0);
    for (int i = 0; i < n; i++) {
        if (!names[i])
            return te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute_tuple: output %d has no name", i);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "te_compute_tuple: two outputs are named '%s'", names[i]);
    }
    te_tensor **group = te__alloc(ctx, sizeof(te_tensor *) * (size_t)n);
    if (!group)
        return TE_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        te_expr *c = te__alloc(ctx, sizeof *c);
        if (!c)
            return TE_ERR_NOMEM;
        *c = *body;
        c->u.red.comp = i;
        c->u.red.src = body->u.red.srcs[i];
        c->dtype = body->u.red.srcs[i]->dtype;
        te_tensor *t = te_compute(ctx, names[i], ndim, axes, c);
        if (!t)
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_ARG;
        group[i] = t;
    }
    for (int i = 0; i < n; i++) {
        group[i]->tuple_n = n;
        group[i]->tuple_index = i;
        group[i]->tuple = group;
        outs[i] = group[i];
    }
    return TE_OK;
}

int te_tensor_tuple_size(const te_tensor *t) { return t ? t->tuple_n : 0; }

te_tensor *te_tensor_tuple_member(const te_tensor *t, int i)
{
    return t && i >= 0 && i < t->tuple_n ? t->tuple[i] : NULL;
}
