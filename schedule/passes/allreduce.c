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

typedef struct {
    te_buf *from, *to;
} part_ctx;

static te_expr *part_expr(te_ctx *ctx, te_expr *e, void *user)
{
    part_ctx *p = user;
    if (e->kind != TE_E_LOAD || e->u.load.buf != p->from)
        return e;
    te_expr *z = te_int(ctx, 0);
    return te__load(ctx, p->to, 1, &z);
}

static te_stmt *part_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    part_ctx *p = user;
    if (s->kind != TE_S_STORE || s->u.store.buf != p->from)
        return s;
    te_expr *z = te_int(ctx, 0);
    return te__store(ctx, p->to, 1, &z, s->u.store.value);
}

static te_stmt *thread_for(te_ctx *ctx, te_expr *var, int64_t extent, int tag, te_stmt *body)
{
    te_stmt *r = te__for(ctx, var, te_int(ctx, 0), te_int(ctx, extent), TE_FOR_THREAD, body);
    if (r)
        r->u.loop.thread_tag = tag;
    return r;
}

/* The loops bound to threadIdx around the marked loop being lowered. */
typedef struct xr {
    te_ctx *ctx;
    const te_stmt *outer[16];
    int n;
    bool failed;
} xr;

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
    part_ctx pc = {buf, part};
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
