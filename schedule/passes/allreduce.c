/*
 * Cross-thread reduction (te_bind_reduce): the reduction loop bound to threadIdx becomes
 *
 *     alloc <buf>_red[shared, extent]
 *     for k (threadIdx): { <buf>_part = identity; <body on <buf>_part>; <buf>_red[k] = <buf>_part }
 *     for k (threadIdx, extent h): <buf>_red[k] = combine(<buf>_red[k], <buf>_red[k + m])
 *         ... one step per halving, until one element is left
 *     <buf>[idx] = combine(<buf>[idx], <buf>_red[0])
 *
 * Inside other loops bound to threadIdx (rows along threadIdx.y, each reducing its own row
 * across threadIdx.x), the shared array has one slice of `extent` elements per thread of those
 * loops, so the rows do not overwrite each other's partial results.
 *
 * The last store runs in every thread when the buffer is per-thread (LOCAL: every thread needs
 * the total, as a softmax's max does) and in thread 0 only otherwise. The barrier pass puts a
 * barrier between the steps. The CUDA backend turns the steps of 32 threads and fewer into warp
 * shuffles (see backends/cuda/emit_cuda_stmt.c).
 */
#include <stdio.h>

#include "schedule/passes.h"

/* Accesses of the accumulators from[0..n) become accesses of the per-thread partials to[]. */
typedef struct {
    int n;
    te_buf *const *from, *const *to;
} part_ctx;

static te_buf *part_of(const part_ctx *p, const te_buf *b)
{
    for (int i = 0; i < p->n; i++)
        if (p->from[i] == b)
            return p->to[i];
    return NULL;
}

static te_expr *part_expr(te_ctx *ctx, te_expr *e, void *user)
{
    te_buf *to = e->kind == TE_E_LOAD ? part_of(user, e->u.load.buf) : NULL;
    if (!to)
        return e;
    te_expr *z = te_int(ctx, 0);
    return te__load(ctx, to, 1, &z);
}

static te_stmt *part_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    te_buf *to = s->kind == TE_S_STORE ? part_of(user, s->u.store.buf) : NULL;
    if (!to)
        return s;
    te_expr *z = te_int(ctx, 0);
    return te__store(ctx, to, 1, &z, s->u.store.value);
}

/* A tuple update: dst[i][didx[i]] = combine_i(a, b) for every component, every combine reading
 * the old values (lets first, then the stores). */
static te_stmt *tuple_step(te_ctx *ctx, const te_reducer *r, te_buf *const *dst, int dn,
                           te_expr *const *didx, te_expr *const *a, te_expr *const *b)
{
    te_expr *c[TE_MAX_TUPLE], *v[TE_MAX_TUPLE];
    if (te__reduce_combine_tuple(ctx, r, a, b, c))
        return NULL;
    te_stmt *stores = NULL;
    for (int i = 0; i < r->n; i++) {
        char nm[160];
        snprintf(nm, sizeof nm, "%s_next", dst[i]->name);
        if (!(v[i] = te_var(ctx, nm, c[i]->dtype)))
            return NULL;
        stores = te__seq2(ctx, stores, te__store(ctx, dst[i], dn, didx, v[i]));
    }
    for (int i = r->n - 1; i >= 0 && stores; i--)
        stores = te__let(ctx, v[i], c[i], stores);
    return stores;
}

static te_stmt *thread_for(te_ctx *ctx, te_expr *var, int64_t extent, int tag, te_stmt *body)
{
    te_stmt *r = te__for(ctx, var, te_int(ctx, 0), te_int(ctx, extent), TE_FOR_THREAD, body);
    if (r)
        r->u.loop.thread_tag = tag;
    return r;
}

/* The loops bound to threadIdx around the marked loop being lowered. */
struct xr {
    te_ctx *ctx;
    const te_stmt *outer[16];
    int n;
    bool failed;
};
typedef struct xr xr;

static te_stmt *allreduce_tuple(xr *xc, const te_stmt *loop, te_expr *base, int64_t slots,
                                int64_t extent);

/* red[base + i] (base NULL: red[i]) */
static te_expr *at(te_ctx *ctx, te_expr *base, te_expr *i)
{
    return base ? te_add(ctx, base, i) : i;
}

static te_stmt *allreduce(xr *xc, const te_stmt *loop)
{
    te_ctx *ctx = xc->ctx;
    const te__xreduce *x = loop->u.loop.xreduce;
    te_expr *var = loop->u.loop.var;
    te_stmt *body = loop->u.loop.body;
    int tag = loop->u.loop.thread_tag;
    te_buf *buf = x->buf;
    int ndim = x->ndim;
    te_expr *const *idx = x->idx;
    te_reduce_kind kind = x->kind;
    te_reducer *custom = x->custom;
    te_dtype dtype = x->dtype;
    int64_t extent;
    if (!te__is_const_int(loop->u.loop.extent, &extent) || extent <= 0) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "cross-thread reduction over '%s' needs a constant "
                         "positive thread count",
                         var->u.var.name);
        return NULL;
    }
    /* Inside other thread loops (threadIdx.y rows each reducing their own row), every thread
     * of those loops reduces separately: one slice of the shared array each. */
    te_expr *slot = NULL;
    int64_t slots = 1;
    for (int i = 0; i < xc->n; i++) {
        const te_stmt *o = xc->outer[i];
        int64_t mn, ex;
        if (o->u.loop.thread_tag == tag || !te__is_const_int(o->u.loop.min, &mn) ||
            !te__is_const_int(o->u.loop.extent, &ex) || ex <= 0) {
            te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                             "cross-thread reduction over '%s' is inside loop '%s', which is "
                             "bound to the same thread index or has a non-constant extent",
                             var->u.var.name, o->u.loop.var->u.var.name);
            return NULL;
        }
        te_expr *rel = te_sub(ctx, o->u.loop.var, te_int(ctx, mn));
        slot = slot ? te_add(ctx, te_mul(ctx, slot, te_int(ctx, ex)), rel) : rel;
        slots *= ex;
    }
    te_expr *base = slot ? te_mul(ctx, slot, te_int(ctx, extent)) : NULL;
    if (x->ntuple)
        return allreduce_tuple(xc, loop, base, slots, extent);
    int64_t red_n = slots * extent;
    char name[160];
    snprintf(name, sizeof name, "%s_red", buf->name);
    te_buf *red = te__buf_new(ctx, name, dtype, 1, &red_n, TE_SCOPE_SHARED);
    snprintf(name, sizeof name, "%s_part", buf->name);
    int64_t one = 1;
    te_buf *part = te__buf_new(ctx, name, dtype, 1, &one, TE_SCOPE_LOCAL);
    if (!red || !part)
        return NULL;
    te_expr *zero = te_int(ctx, 0);
    part_ctx pc = {1, &buf, &part};
    te_stmt *pbody = te__stmt_mutate(ctx, body, part_stmt, part_expr, &pc);
    te_stmt *init = te__store(ctx, part, 1, &zero, te__reduce_identity(ctx, kind, custom, dtype));
    te_expr *pi = at(ctx, base, var);
    te_stmt *publish = te__store(ctx, red, 1, &pi, te__load(ctx, part, 1, &zero));
    te_stmt *first = te__seq2(ctx, te__seq2(ctx, init, pbody), publish);
    first = first ? te__alloc_stmt(ctx, part, first) : NULL;
    te_stmt *out = thread_for(ctx, var, extent, tag, first);
    /* The tree: n active partial results; the first h take in the last h. */
    for (int64_t n = extent; n > 1 && out;) {
        int64_t h = n / 2, m = n - h;
        snprintf(name, sizeof name, "%s_s%lld", var->u.var.name, (long long)h);
        te_expr *k = te__loop_var(ctx, name, h);
        te_expr *ka = at(ctx, base, k);
        te_expr *a = te__load(ctx, red, 1, &ka);
        te_expr *kb = at(ctx, base, te_add(ctx, k, te_int(ctx, m)));
        te_expr *b = kb ? te__load(ctx, red, 1, &kb) : NULL;
        te_expr *c = a && b ? te__reduce_combine(ctx, kind, custom, a, b) : NULL;
        te_stmt *step = c ? te__store(ctx, red, 1, &ka, c) : NULL;
        out = te__seq2(ctx, out, step ? thread_for(ctx, k, h, tag, step) : NULL);
        if (!step)
            out = NULL;
        n = m;
    }
    te_expr *acc = te__load(ctx, buf, ndim, idx);
    te_expr *t0 = base ? base : zero;
    te_expr *tot = te__load(ctx, red, 1, &t0);
    te_expr *c = acc && tot ? te__reduce_combine(ctx, kind, custom, acc, tot) : NULL;
    te_stmt *fin = c ? te__store(ctx, buf, ndim, idx, c) : NULL;
    if (fin && buf->scope != TE_SCOPE_LOCAL) {
        snprintf(name, sizeof name, "%s_w", var->u.var.name);
        fin = thread_for(ctx, te__loop_var(ctx, name, 1), 1, tag, fin);
    }
    if (!out || !fin)
        return NULL;
    return te__alloc_stmt(ctx, red, te__seq2(ctx, out, fin));
}

/* allreduce for a tuple stage: one shared array and one partial per component, each tree step
 * and the final fold a tuple update. */
static te_stmt *allreduce_tuple(xr *xc, const te_stmt *loop, te_expr *base, int64_t slots,
                                int64_t extent)
{
    te_ctx *ctx = xc->ctx;
    const te__xreduce *x = loop->u.loop.xreduce;
    const te_reducer *r = x->custom;
    te_expr *var = loop->u.loop.var;
    int tag = loop->u.loop.thread_tag, n = x->ntuple;
    int64_t red_n = slots * extent, one = 1;
    te_buf *red[TE_MAX_TUPLE], *part[TE_MAX_TUPLE];
    char name[160];
    for (int i = 0; i < n; i++) {
        te_dtype dt = r->identities[i]->dtype;
        snprintf(name, sizeof name, "%s_red", x->bufs[i]->name);
        red[i] = te__buf_new(ctx, name, dt, 1, &red_n, TE_SCOPE_SHARED);
        snprintf(name, sizeof name, "%s_part", x->bufs[i]->name);
        part[i] = te__buf_new(ctx, name, dt, 1, &one, TE_SCOPE_LOCAL);
        if (!red[i] || !part[i])
            return NULL;
    }
    te_expr *zero = te_int(ctx, 0);
    part_ctx pc = {n, x->bufs, part};
    te_stmt *first = te__stmt_mutate(ctx, loop->u.loop.body, part_stmt, part_expr, &pc);
    te_expr *pi = at(ctx, base, var);
    for (int i = 0; i < n; i++) {
        first = te__seq2(ctx, te__store(ctx, part[i], 1, &zero, r->identities[i]), first);
        first =
            te__seq2(ctx, first, te__store(ctx, red[i], 1, &pi, te__load(ctx, part[i], 1, &zero)));
    }
    for (int i = n - 1; i >= 0 && first; i--)
        first = te__alloc_stmt(ctx, part[i], first);
    te_stmt *out = first ? thread_for(ctx, var, extent, tag, first) : NULL;
    for (int64_t cnt = extent; cnt > 1 && out;) {
        int64_t h = cnt / 2, m = cnt - h;
        snprintf(name, sizeof name, "%s_s%lld", var->u.var.name, (long long)h);
        te_expr *k = te__loop_var(ctx, name, h);
        te_expr *ka = at(ctx, base, k), *kb = at(ctx, base, te_add(ctx, k, te_int(ctx, m)));
        te_expr *a[TE_MAX_TUPLE], *b[TE_MAX_TUPLE];
        for (int i = 0; i < n; i++) {
            a[i] = te__load(ctx, red[i], 1, &ka);
            b[i] = kb ? te__load(ctx, red[i], 1, &kb) : NULL;
            if (!a[i] || !b[i])
                return NULL;
        }
        te_stmt *step = tuple_step(ctx, r, red, 1, &ka, a, b);
        out = step ? te__seq2(ctx, out, thread_for(ctx, k, h, tag, step)) : NULL;
        cnt = m;
    }
    te_expr *t0 = base ? base : zero;
    te_expr *acc[TE_MAX_TUPLE], *tot[TE_MAX_TUPLE];
    for (int i = 0; i < n; i++) {
        acc[i] = te__load(ctx, x->bufs[i], x->ndim, x->idx);
        tot[i] = te__load(ctx, red[i], 1, &t0);
        if (!acc[i] || !tot[i])
            return NULL;
    }
    te_stmt *fin = tuple_step(ctx, r, x->bufs, x->ndim, x->idx, acc, tot);
    if (fin && x->buf->scope != TE_SCOPE_LOCAL) {
        snprintf(name, sizeof name, "%s_w", var->u.var.name);
        fin = thread_for(ctx, te__loop_var(ctx, name, 1), 1, tag, fin);
    }
    if (!out || !fin)
        return NULL;
    te_stmt *res = te__seq2(ctx, out, fin);
    for (int i = n - 1; i >= 0 && res; i--)
        res = te__alloc_stmt(ctx, red[i], res);
    return res;
}

static te_stmt *lower(xr *x, te_stmt *s);

static te_stmt *lower_child(void *user, te_stmt *s) { return lower(user, s); }

/* Lowers the marked loops in s, keeping the thread loops around them in x. */
static te_stmt *lower(xr *x, te_stmt *s)
{
    if (!s || x->failed)
        return NULL;
    if (s->kind != TE_S_FOR)
        return te__stmt_map_children(x->ctx, s, lower_child, x, &x->failed);
    if (s->u.loop.xreduce) {
        te_stmt *r = allreduce(x, s);
        x->failed |= !r;
        return r;
    }
    bool push = s->u.loop.fkind == TE_FOR_THREAD && s->u.loop.thread_tag >= TE_THREAD_X;
    if (push && x->n == 16) {
        te_ctx_set_error(x->ctx, TE_ERR_UNSUPPORTED, "more than 16 nested thread loops");
        x->failed = true;
        return NULL;
    }
    if (push)
        x->outer[x->n++] = s;
    te_stmt *b = lower(x, s->u.loop.body);
    if (push)
        x->n--;
    if (x->failed)
        return NULL;
    if (b == s->u.loop.body)
        return s;
    if (!b)
        b = te__seq(x->ctx, 0, NULL);
    te_stmt *r =
        b ? te__for(x->ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, b)
          : NULL;
    if (r)
        r->u.loop.thread_tag = s->u.loop.thread_tag;
    x->failed |= !r;
    return r;
}

te_stmt *te__pass_cross_thread_reduce(const te__pass_ctx *pc, te_stmt *s)
{
    if (!s)
        return NULL;
    xr x = {.ctx = pc->ctx, .n = 0, .failed = false};
    te_stmt *r = lower(&x, s);
    if (x.failed) {
        if (te_ctx_errcode(pc->ctx) == TE_OK)
            te_ctx_set_error(pc->ctx, TE_ERR_NOMEM, "cross-thread reduction: out of memory");
        return NULL;
    }
    return r ? r : te__seq(pc->ctx, 0, NULL);
}
