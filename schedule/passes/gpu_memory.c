/*
 * GPU memory passes: double buffering, hoisting shared allocations to the block, and keeping
 * only copy loops vectorized for CUDA. Also the small queries every GPU pass shares (thread
 * loops, barriers, block dimensions, walking the block bodies of kernels).
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

/* Visits every statement, pre-order; fn returns false to stop descending. */
typedef bool (*stmt_visitor)(const te_stmt *s, void *user);
static void visit(const te_stmt *s, stmt_visitor fn, void *user)
{
    if (!s || !fn(s, user))
        return;
    switch (s->kind) {
    case TE_S_FOR:
        visit(s->u.loop.body, fn, user);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            visit(s->u.seq.v[i], fn, user);
        break;
    case TE_S_IF:
        visit(s->u.cond.then_s, fn, user);
        visit(s->u.cond.else_s, fn, user);
        break;
    case TE_S_ALLOC:
        visit(s->u.alloc.body, fn, user);
        break;
    case TE_S_LET:
        visit(s->u.let.body, fn, user);
        break;
    default:
        break;
    }
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
    visit(s, find_thread, &found);
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
    visit(s, find_barrier, &found);
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
    visit(body, dims_fn, &d);
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

/* ---- Double buffering ------------------------------------------------------------------- */

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

/* ---- Hoisting shared allocations ---------------------------------------------------------- */

typedef struct {
    te_buf *bufs[64];
    int n;
    bool overflow;
} hoist_ctx;

static te_stmt *hoist_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    hoist_ctx *h = user;
    (void)ctx;
    if (s->kind != TE_S_ALLOC || s->u.alloc.buf->scope != TE_SCOPE_SHARED)
        return s;
    for (int i = 0; i < h->n; i++)
        if (h->bufs[i] == s->u.alloc.buf)
            return s->u.alloc.body;
    if (h->n == 64) {
        h->overflow = true;
        return s;
    }
    h->bufs[h->n++] = s->u.alloc.buf;
    return s->u.alloc.body;
}

static te_stmt *hoist_block(te_ctx *ctx, te_stmt *body, void *user)
{
    (void)user;
    hoist_ctx h = {.n = 0};
    te_stmt *b = te__stmt_mutate(ctx, body, hoist_fn, NULL, &h);
    if (!b)
        return NULL;
    if (h.overflow) {
        te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED, "more than 64 shared buffers in one kernel");
        return NULL;
    }
    for (int i = h.n - 1; i >= 0 && b; i--)
        b = te__alloc_stmt(ctx, h.bufs[i], b);
    return b;
}

te_stmt *te__pass_hoist_shared(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    return te__gpu_map_blocks(ctx, s, hoist_block, NULL);
}

/* ---- Vector filter ------------------------------------------------------------------------ */

static te_stmt *vf_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_VECTORIZED ||
        s->u.loop.body->kind == TE_S_STORE)
        return s;
    te_stmt *r = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_UNROLLED,
                         s->u.loop.body);
    return r;
}

te_stmt *te__pass_gpu_vector_filter(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    return te__stmt_mutate(ctx, s, vf_fn, NULL, NULL);
}
