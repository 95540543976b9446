/*
 * Storage flattening: every LOAD and STORE with n indices into a buffer of shape
 * [s0, ..., s(n-1)] gets the one row-major index i0*(s1*...*s(n-1)) + ... + i(n-1), in
 * canonical (simplified) form. Vector indices (RAMP/BCAST lanes, in any dimension) stay
 * vectors: their bases flatten like scalars and their strides scale by the dimension's
 * stride, so `A[i, ramp(j, 1, 8)]` becomes `A[ramp(i*s1 + j, 1, 8)]`. Buffers keep their shape;
 * backends size allocations from it. The indices of a buffer's bcast_dims (extent 1) are
 * dropped: every position along them is the one element.
 */
#include "schedule/passes.h"

typedef struct fl {
    te_ctx *ctx;
    te__range_map ranges; /* every loop variable over the union of its loops' ranges */
    bool failed;
} fl;

/* Records the range of each loop's variable, so that the flat index can be put in canonical
 * form with the proof that its new intermediate sums do not overflow (te/arith.h). A loop
 * variable is only used inside its loop, so one map for the whole statement is sound; a
 * variable that several loops bind gets the union of their ranges. */
static bool collect_loop_ranges(const te_stmt *s, void *user)
{
    fl *f = user;
    int64_t mlo, mhi, elo, ehi, hi, plo, phi;
    if (s->kind != TE_S_FOR || f->failed)
        return !f->failed;
    if (!te__expr_const_bounds(s->u.loop.min, &f->ranges, &mlo, &mhi) ||
        !te__expr_const_bounds(s->u.loop.extent, &f->ranges, &elo, &ehi) || ehi < 1 ||
        __builtin_add_overflow(mhi, ehi - 1, &hi))
        return true;
    if (te__ranges_lookup(&f->ranges, s->u.loop.var, &plo, &phi)) {
        mlo = plo < mlo ? plo : mlo;
        hi = phi > hi ? phi : hi;
    }
    if (te__ranges_push(f->ctx, &f->ranges, s->u.loop.var, mlo, hi) != TE_OK)
        f->failed = true;
    return !f->failed;
}

/* Splits an index into base + stride * lane; false for an index that is neither scalar,
 * RAMP nor BCAST. */
static bool split_lanes(te_expr *e, te_expr **base, int64_t *stride)
{
    if (e->lanes == 1) {
        *base = e, *stride = 0;
        return true;
    }
    if (e->kind == TE_E_RAMP) {
        *base = e->u.ramp.base, *stride = e->u.ramp.stride;
        return true;
    }
    if (e->kind == TE_E_BCAST && e->u.un.a->lanes == 1) {
        *base = e->u.un.a, *stride = 0;
        return true;
    }
    return false;
}

/* The flat index of buf[idx[0], ..., idx[n-1]], or NULL on error (message on ctx). */
static te_expr *flat_index(te_ctx *ctx, const te_buf *buf, int n, te_expr *const *idx,
                           const te__range_map *ranges)
{
    if (n == 0)
        return te_int(ctx, 0);
    if (n != buf->ndim) {
        te_ctx_set_error(ctx, TE_ERR_INTERNAL,
                         "storage flatten: buffer '%s' has rank %d but is indexed with %d "
                         "index(es)",
                         buf->name, buf->ndim, n);
        return NULL;
    }
    int64_t strides[TE_MAX_DIMS];
    strides[n - 1] = 1;
    for (int d = n - 2; d >= 0; d--) {
        if (__builtin_mul_overflow(strides[d + 1], buf->shape[d + 1], &strides[d])) {
            te_ctx_set_error(ctx, TE_ERR_OVERFLOW,
                             "storage flatten: buffer '%s' has more than 2^63 elements", buf->name);
            return NULL;
        }
    }
    int lanes = 1;
    bool vec_ok = true;
    te_expr *bases[TE_MAX_DIMS];
    int64_t lane_stride = 0;
    for (int d = 0; d < n; d++) {
        int64_t s, t;
        lanes = idx[d]->lanes > lanes ? idx[d]->lanes : lanes;
        if (buf->bcast_dims >> d & 1) {
            bases[d] = NULL; /* index ignored: the dimension holds one element */
            continue;
        }
        if (!split_lanes(idx[d], &bases[d], &s) || __builtin_mul_overflow(s, strides[d], &t) ||
            __builtin_add_overflow(lane_stride, t, &lane_stride))
            vec_ok = false;
    }
    te_expr *flat = NULL;
    for (int d = 0; d < n; d++) {
        if (buf->bcast_dims >> d & 1)
            continue;
        te_expr *x = vec_ok ? bases[d] : idx[d];
        if (x->dtype != TE_I64)
            x = te_cast(ctx, TE_I64, x);
        te_expr *term = strides[d] == 1 ? x : te_mul(ctx, x, te_int(ctx, strides[d]));
        flat = flat ? te_add(ctx, flat, term) : term;
    }
    if (!flat)
        flat = te_int(ctx, 0);
    flat = te__simplify_expr(ctx, flat, ranges);
    if (!flat || lanes == 1 || !vec_ok)
        return flat;
    return lane_stride == 0 ? te__bcast(ctx, flat, lanes) : te__ramp(ctx, flat, lane_stride, lanes);
}

/* Whether a one-index access of b still needs flattening: b is one-dimensional and that
 * dimension's index is ignored. */
static bool flat_1d(const te_buf *b) { return b->ndim == 1 && (b->bcast_dims & 1); }

static te_expr *flatten_expr(te_ctx *ctx, te_expr *e, void *user)
{
    fl *f = user;
    if (e->kind != TE_E_LOAD || (e->u.load.n == 1 && !flat_1d(e->u.load.buf)))
        return e;
    te_expr *ix = flat_index(ctx, e->u.load.buf, e->u.load.n, e->u.load.idx, &f->ranges);
    te_expr *r = ix ? te__load(ctx, e->u.load.buf, 1, &ix) : NULL;
    if (!r)
        f->failed = true;
    return r;
}

static te_stmt *flatten_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    fl *f = user;
    if (s->kind != TE_S_STORE || (s->u.store.n == 1 && !flat_1d(s->u.store.buf)))
        return s;
    te_expr *ix = flat_index(ctx, s->u.store.buf, s->u.store.n, s->u.store.idx, &f->ranges);
    te_stmt *r = ix ? te__store(ctx, s->u.store.buf, 1, &ix, s->u.store.value) : NULL;
    if (!r) {
        f->failed = true;
        return NULL;
    }
    r->u.store.nontemporal = s->u.store.nontemporal;
    return r;
}

te_stmt *te__pass_storage_flatten(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    fl f = {ctx, {0, 0, NULL, NULL, NULL}, false};
    te__stmt_visit(s, collect_loop_ranges, NULL, &f);
    te_stmt *r = f.failed ? NULL : te__stmt_mutate(ctx, s, flatten_stmt, flatten_expr, &f);
    if (f.failed || !r) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_INTERNAL, "storage flatten: could not rebuild");
        return NULL;
    }
    return r;
}
