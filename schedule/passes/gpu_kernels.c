/*
 * What every GPU pass shares: queries on thread loops, barriers and block dimensions, and
 * walking the block bodies of kernels (te__gpu_map_blocks). The passes themselves are in
 * double_buffer.c, hoist_shared.c, gpu_vector_filter.c, barrier.c, gpu_check.c, allreduce.c
 * and thread_split.c.
 */
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

static bool is_block_loop(const te_stmt *s)
{
    return s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
           s->u.loop.thread_tag <= TE_BLOCK_Z;
}

static bool is_thread_loop(const te_stmt *s)
{
    return s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
           s->u.loop.thread_tag >= TE_THREAD_X;
}

static bool find_thread(const te_stmt *s, void *user)
{
    bool *found = user;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD)
        *found = true;
    return !*found;
}

bool te__has_thread_loops(const te_stmt *s)
{
    bool found = false;
    te__stmt_visit(s, find_thread, NULL, &found);
    return found;
}

static bool find_barrier(const te_stmt *s, void *user)
{
    bool *found = user;
    if (s->kind == TE_S_BARRIER)
        *found = true;
    return !*found;
}

bool te__has_barrier(const te_stmt *s)
{
    bool found = false;
    te__stmt_visit(s, find_barrier, NULL, &found);
    return found;
}

typedef struct {
    int64_t *dims;
    bool ok;
} dims_ctx;

static bool dims_fn(const te_stmt *s, void *user)
{
    dims_ctx *d = user;
    if (is_thread_loop(s)) {
        int64_t e, m;
        if (!te__is_const_int(s->u.loop.extent, &e) || !te__is_const_int(s->u.loop.min, &m)) {
            d->ok = false;
            return true;
        }
        int t = s->u.loop.thread_tag - TE_THREAD_X;
        if (m + e > d->dims[t])
            d->dims[t] = m + e;
    }
    return true;
}

bool te__block_dims(const te_stmt *body, int64_t dims[3])
{
    dims[0] = dims[1] = dims[2] = 1;
    dims_ctx d = {dims, true};
    te__stmt_visit(body, dims_fn, NULL, &d);
    return d.ok;
}

/* ---- Walking kernels --------------------------------------------------------------------- */

te_stmt *te__gpu_map_blocks(te_ctx *ctx, te_stmt *s, te_stmt *(*fn)(te_ctx *, te_stmt *, void *),
                            void *user);

/* Rebuilds a chain of block loops around a new innermost body. */
static te_stmt *rebuild_chain(te_ctx *ctx, te_stmt *loop, te_stmt *body)
{
    if (!body)
        return NULL;
    te_stmt *inner =
        is_block_loop(loop->u.loop.body) ? rebuild_chain(ctx, loop->u.loop.body, body) : body;
    if (!inner)
        return NULL;
    if (inner == loop->u.loop.body)
        return loop;
    te_stmt *r = te__for(ctx, loop->u.loop.var, loop->u.loop.min, loop->u.loop.extent,
                         loop->u.loop.fkind, inner);
    if (r)
        r->u.loop.thread_tag = loop->u.loop.thread_tag;
    return r;
}

static te_stmt *innermost_block_body(te_stmt *loop)
{
    while (is_block_loop(loop->u.loop.body))
        loop = loop->u.loop.body;
    return loop->u.loop.body;
}

/* Applies fn to the block body of every kernel in s and rebuilds. A kernel without block loops
 * (threads only) has the thread loop nest itself as block body. */
te_stmt *te__gpu_map_blocks(te_ctx *ctx, te_stmt *s, te_stmt *(*fn)(te_ctx *, te_stmt *, void *),
                            void *user)
{
    if (!s)
        return NULL;
    if (is_block_loop(s))
        return rebuild_chain(ctx, s, fn(ctx, innermost_block_body(s), user));
    if (is_thread_loop(s))
        return fn(ctx, s, user);
    if (!te__has_thread_loops(s))
        return s;
    te_stmt *r = s;
    switch (s->kind) {
    case TE_S_SEQ: {
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)s->u.seq.n);
        if (!v)
            return NULL;
        bool changed = false;
        for (int i = 0; i < s->u.seq.n; i++) {
            v[i] = te__gpu_map_blocks(ctx, s->u.seq.v[i], fn, user);
            if (!v[i] && te_ctx_errcode(ctx) != TE_OK)
                return NULL;
            changed |= v[i] != s->u.seq.v[i];
        }
        if (changed)
            r = te__seq(ctx, s->u.seq.n, v);
        break;
    }
    case TE_S_FOR: {
        te_stmt *b = te__gpu_map_blocks(ctx, s->u.loop.body, fn, user);
        if (!b)
            return NULL;
        if (b != s->u.loop.body) {
            r = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, b);
            if (r)
                r->u.loop.thread_tag = s->u.loop.thread_tag;
        }
        break;
    }
    case TE_S_IF: {
        te_stmt *t = te__gpu_map_blocks(ctx, s->u.cond.then_s, fn, user);
        te_stmt *e = s->u.cond.else_s ? te__gpu_map_blocks(ctx, s->u.cond.else_s, fn, user) : NULL;
        if (!t || (s->u.cond.else_s && !e))
            return NULL;
        if (t != s->u.cond.then_s || e != s->u.cond.else_s)
            r = te__if(ctx, s->u.cond.cond, t, e);
        break;
    }
    case TE_S_ALLOC: {
        te_stmt *b = te__gpu_map_blocks(ctx, s->u.alloc.body, fn, user);
        if (!b)
            return NULL;
        if (b != s->u.alloc.body)
            r = te__alloc_stmt(ctx, s->u.alloc.buf, b);
        break;
    }
    case TE_S_LET: {
        te_stmt *b = te__gpu_map_blocks(ctx, s->u.let.body, fn, user);
        if (!b)
            return NULL;
        if (b != s->u.let.body)
            r = te__let(ctx, s->u.let.var, s->u.let.value, b);
        break;
    }
    default:
        break;
    }
    return r;
}
