/*
 * Double buffering (te_double_buffer): a shared buffer allocated at the top of a serial loop's
 * body gets two halves, and iteration v uses half v % 2, so the next tile can be fetched while
 * the current one is read. The barrier pass knows the halves alternate.
 */
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

typedef struct {
    te_buf *from, *to;
    te_expr *half; /* (v % 2) */
} db_ctx;

static te_expr *db_expr(te_ctx *ctx, te_expr *e, void *user)
{
    db_ctx *d = user;
    if (e->kind != TE_E_LOAD || e->u.load.buf != d->from)
        return e;
    te_expr *idx[TE_MAX_DIMS];
    idx[0] = d->half;
    for (int i = 0; i < e->u.load.n; i++)
        idx[i + 1] = e->u.load.idx[i];
    return te__load(ctx, d->to, e->u.load.n + 1, idx);
}

static te_stmt *db_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    db_ctx *d = user;
    if (s->kind == TE_S_STORE && s->u.store.buf == d->from) {
        te_expr *idx[TE_MAX_DIMS];
        idx[0] = d->half;
        for (int i = 0; i < s->u.store.n; i++)
            idx[i + 1] = s->u.store.idx[i];
        return te__store(ctx, d->to, s->u.store.n + 1, idx, s->u.store.value);
    }
    if (s->kind == TE_S_ALLOC && s->u.alloc.buf == d->from)
        return te__alloc_stmt(ctx, d->to, s->u.alloc.body);
    return s;
}

typedef struct {
    const te_schedule *sched;
} dbp_ctx;

static te_stmt *db_loops(te_ctx *ctx, te_stmt *s, void *user)
{
    dbp_ctx *p = user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind == TE_FOR_THREAD)
        return s;
    /* Allocations at the top of the loop body: with_attached wraps them around it. */
    te_stmt *body = s->u.loop.body;
    for (te_stmt *a = body; a && a->kind == TE_S_ALLOC; a = a->u.alloc.body) {
        te_buf *b = a->u.alloc.buf;
        if (b->scope != TE_SCOPE_SHARED || !b->tensor || b->ndim >= TE_MAX_DIMS ||
            !te__gpu_is_double_buffered(p->sched, b->tensor->name))
            continue;
        int64_t shape[TE_MAX_DIMS];
        shape[0] = 2;
        memcpy(shape + 1, b->shape, sizeof(int64_t) * (size_t)b->ndim);
        te_buf *nb = te__buf_new(ctx, b->name, b->dtype, b->ndim + 1, shape, b->scope);
        if (!nb)
            return NULL;
        nb->tensor = b->tensor;
        te_expr *rel = te_sub(ctx, s->u.loop.var, s->u.loop.min);
        db_ctx d = {b, nb, te_floormod(ctx, rel, te_int(ctx, 2))};
        if (!d.half || !(body = te__stmt_mutate(ctx, body, db_stmt, db_expr, &d)))
            return NULL;
    }
    if (body == s->u.loop.body)
        return s;
    te_stmt *r =
        te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, body);
    if (r)
        r->u.loop.thread_tag = s->u.loop.thread_tag;
    return r;
}

te_stmt *te__pass_double_buffer(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    const te_schedule *sched = pc->sched;
    if (!s || !sched)
        return s;
    bool any = false;
    for (int i = 0; i < sched->trace.n && !any; i++)
        any = strncmp(sched->trace.v[i], "double_buffer ", 14) == 0;
    if (!any)
        return s;
    dbp_ctx p = {sched};
    return te__stmt_mutate(ctx, s, db_loops, NULL, &p);
}
