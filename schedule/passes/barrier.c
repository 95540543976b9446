/*
 * Barrier insertion. In each block body, the state since the last barrier is the set of shared
 * buffers written (W) and read (R) by the block. Before a statement that reads a buffer in W
 * (read after write) or writes a buffer in R (write after read), a barrier is needed; it goes
 * as high as possible (before the outermost statement of a sequence whose accesses conflict),
 * so it runs once, not once per iteration of an inner loop. A serial loop is analysed with the
 * state at its end carried into its start until nothing changes, which places the barrier a
 * next iteration needs (the classic one before refilling a shared tile). A double-buffered
 * buffer alternates halves between iterations, so its reads are not carried; one whose next half
 * is prefetched (te_buf.prefetched) comes with its barriers from the double_buffer pass and is
 * left out here.
 *
 * Barriers may only be placed where every thread of the block arrives: not under a condition
 * that depends on the thread, nor inside a thread loop narrower than the block. Needing one
 * there is an error.
 */
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

#define MAXB 64

typedef struct bset {
    const te_buf *w[MAXB], *r[MAXB];
    int nw, nr;
} bset;

static bool has(const te_buf *const *v, int n, const te_buf *b)
{
    for (int i = 0; i < n; i++)
        if (v[i] == b)
            return true;
    return false;
}

static void add(const te_buf **v, int *n, const te_buf *b)
{
    if (!has(v, *n, b) && *n < MAXB)
        v[(*n)++] = b;
}

static void merge(bset *a, const bset *b)
{
    for (int i = 0; i < b->nw; i++)
        add(a->w, &a->nw, b->w[i]);
    for (int i = 0; i < b->nr; i++)
        add(a->r, &a->nr, b->r[i]);
}

static bool same(const bset *a, const bset *b)
{
    if (a->nw != b->nw || a->nr != b->nr)
        return false;
    for (int i = 0; i < a->nw; i++)
        if (!has(b->w, b->nw, a->w[i]))
            return false;
    for (int i = 0; i < a->nr; i++)
        if (!has(b->r, b->nr, a->r[i]))
            return false;
    return true;
}

/* The buffer a conflict is about, or NULL. */
static const te_buf *conflict(const bset *st, const bset *acc)
{
    for (int i = 0; i < acc->nr; i++)
        if (has(st->w, st->nw, acc->r[i]))
            return acc->r[i];
    for (int i = 0; i < acc->nw; i++)
        if (has(st->r, st->nr, acc->w[i]))
            return acc->w[i];
    return NULL;
}

/* ---- Access summaries -------------------------------------------------------------------- */

static bool sum_expr(const te_expr *e, void *user)
{
    bset *b = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf->scope == TE_SCOPE_SHARED &&
        !e->u.load.buf->prefetched)
        add(b->r, &b->nr, e->u.load.buf);
    return true;
}

static void summary(const te_stmt *s, bset *b)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        te__expr_visit(s->u.loop.min, sum_expr, b);
        te__expr_visit(s->u.loop.extent, sum_expr, b);
        summary(s->u.loop.body, b);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            summary(s->u.seq.v[i], b);
        break;
    case TE_S_IF:
        te__expr_visit(s->u.cond.cond, sum_expr, b);
        summary(s->u.cond.then_s, b);
        summary(s->u.cond.else_s, b);
        break;
    case TE_S_STORE:
        te__expr_visit(s->u.store.value, sum_expr, b);
        for (int i = 0; i < s->u.store.n; i++)
            te__expr_visit(s->u.store.idx[i], sum_expr, b);
        if (s->u.store.buf->scope == TE_SCOPE_SHARED && !s->u.store.buf->prefetched)
            add(b->w, &b->nw, s->u.store.buf);
        break;
    case TE_S_ALLOC:
        summary(s->u.alloc.body, b);
        break;
    case TE_S_LET:
        te__expr_visit(s->u.let.value, sum_expr, b);
        summary(s->u.let.body, b);
        break;
    case TE_S_INTRIN: /* every operand is read (an update reads its output), operand 0 written */
        for (int o = 0; o < s->u.intrin.nops; o++)
            te__expr_visit(s->u.intrin.addr[o], sum_expr, b);
        if (s->u.intrin.addr[0]->u.load.buf->scope == TE_SCOPE_SHARED)
            add(b->w, &b->nw, s->u.intrin.addr[0]->u.load.buf);
        break;
    default:
        break;
    }
}

/* ---- Insertion ----------------------------------------------------------------------------- */

typedef struct bctx {
    te_ctx *ctx;
    const te_schedule *sched;
    int64_t dims[3];
    const te_expr *dep[256]; /* variables whose value differs between threads */
    int ndep;
    bool failed;
} bctx;

typedef struct {
    bctx *b;
    bool found;
} dep_ctx;

static bool dep_fn(const te_expr *e, void *user)
{
    dep_ctx *d = user;
    if (e->kind == TE_E_LOAD)
        d->found = true; /* conservative: loaded values may differ between threads */
    if (e->kind == TE_E_VAR)
        for (int i = 0; i < d->b->ndep; i++)
            if (d->b->dep[i] == e)
                d->found = true;
    return !d->found;
}

static bool thread_dependent(bctx *b, const te_expr *e)
{
    dep_ctx d = {b, false};
    te__expr_visit(e, dep_fn, &d);
    return d.found;
}

static void push_dep(bctx *b, const te_expr *v)
{
    if (b->ndep < 256)
        b->dep[b->ndep++] = v;
}

static te_stmt *barrier_stmt(te_ctx *ctx)
{
    te_stmt *s = te__alloc(ctx, sizeof *s);
    if (s)
        s->kind = TE_S_BARRIER;
    return s;
}

static const char *tag_name(int t)
{
    static const char *n[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                              "threadIdx.x", "threadIdx.y", "threadIdx.z"};
    return t >= 0 && t < 6 ? n[t] : "?";
}

static void fail_divergent(bctx *b, const te_buf *buf, const char *where)
{
    if (!b->failed)
        te_ctx_set_error(b->ctx, TE_ERR_SCHEDULE,
                         "barrier insertion: shared buffer '%s' needs a "
                         "barrier (__syncthreads) %s, where not every thread of the block "
                         "arrives; bind loops so that every access to '%s' runs in code all "
                         "threads execute, or cover the block with the loops bound to threads",
                         buf->name, where, buf->name);
    b->failed = true;
}

static void drop_double_buffered(bctx *b, bset *st)
{
    int n = 0;
    for (int i = 0; i < st->nr; i++) {
        const te_buf *x = st->r[i];
        if (!(x->tensor && te__gpu_is_double_buffered(b->sched, x->tensor->name) && x->ndim >= 2 &&
              x->shape[0] == 2))
            st->r[n++] = x;
    }
    st->nr = n;
}

static te_stmt *insert(bctx *b, te_stmt *s, bset *st, const char *div);

static te_stmt *insert_seq(bctx *b, te_stmt *s, bset *st, const char *div)
{
    te_ctx *ctx = b->ctx;
    int n = s->u.seq.n;
    te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(2 * n));
    if (!v)
        return NULL;
    int m = 0;
    bool changed = false;
    for (int i = 0; i < n; i++) {
        te_stmt *c = s->u.seq.v[i];
        bset acc = {.nw = 0};
        summary(c, &acc);
        const te_buf *cb = conflict(st, &acc);
        if (cb) {
            if (div) {
                fail_divergent(b, cb, div);
                return NULL;
            }
            v[m++] = barrier_stmt(ctx);
            st->nw = st->nr = 0;
            changed = true;
        }
        te_stmt *c2 = insert(b, c, st, div);
        if (!c2)
            return NULL;
        changed |= c2 != c;
        v[m++] = c2;
    }
    return changed ? te__seq(ctx, m, v) : s;
}

static te_stmt *insert(bctx *b, te_stmt *s, bset *st, const char *div)
{
    te_ctx *ctx = b->ctx;
    if (!s || b->failed)
        return NULL;
    switch (s->kind) {
    case TE_S_SEQ:
        return insert_seq(b, s, st, div);
    case TE_S_BARRIER: /* placed by an earlier pass (double_buffer) */
        if (div) {
            if (!b->failed)
                te_ctx_set_error(
                    ctx, TE_ERR_SCHEDULE,
                    "barrier insertion: a barrier (__syncthreads) of a double-buffered "
                    "loop is %s, where not every thread of the block arrives",
                    div);
            b->failed = true;
            return NULL;
        }
        st->nw = st->nr = 0;
        return s;
    case TE_S_COMMENT:
        return s;
    case TE_S_INTRIN:
    case TE_S_STORE: {
        bset acc = {.nw = 0};
        summary(s, &acc);
        const te_buf *cb = conflict(st, &acc);
        merge(st, &acc);
        if (!cb)
            return s;
        if (div) {
            fail_divergent(b, cb, div);
            return NULL;
        }
        st->nw = st->nr = 0;
        merge(st, &acc);
        return te__seq2(ctx, barrier_stmt(ctx), s);
    }
    case TE_S_ALLOC: {
        te_stmt *body = insert(b, s->u.alloc.body, st, div);
        if (!body)
            return NULL;
        return body == s->u.alloc.body ? s : te__alloc_stmt(ctx, s->u.alloc.buf, body);
    }
    case TE_S_LET: {
        int saved = b->ndep;
        if (thread_dependent(b, s->u.let.value))
            push_dep(b, s->u.let.var);
        te_stmt *body = insert(b, s->u.let.body, st, div);
        b->ndep = saved;
        if (!body)
            return NULL;
        return body == s->u.let.body ? s : te__let(ctx, s->u.let.var, s->u.let.value, body);
    }
    case TE_S_IF: {
        const char *d = div;
        if (!d && thread_dependent(b, s->u.cond.cond))
            d = "inside a condition that depends on the thread";
        bset s1 = *st, s2 = *st;
        te_stmt *t = insert(b, s->u.cond.then_s, &s1, d);
        te_stmt *e = s->u.cond.else_s ? insert(b, s->u.cond.else_s, &s2, d) : NULL;
        if (!t || (s->u.cond.else_s && !e))
            return NULL;
        *st = s1;
        merge(st, &s2);
        if (t == s->u.cond.then_s && e == s->u.cond.else_s)
            return s;
        return te__if(ctx, s->u.cond.cond, t, e);
    }
    case TE_S_FOR: {
        te_stmt *body = NULL;
        int saved = b->ndep;
        if (s->u.loop.fkind == TE_FOR_THREAD) {
            const char *d = div;
            int tag = s->u.loop.thread_tag;
            int64_t e = 0;
            if (tag >= TE_THREAD_X) {
                push_dep(b, s->u.loop.var);
                if (!d &&
                    (!te__is_const_int(s->u.loop.extent, &e) || e < b->dims[tag - TE_THREAD_X])) {
                    d = te__sprintf(ctx,
                                    "inside a loop bound to %s with extent %lld, narrower "
                                    "than the block's %lld threads",
                                    tag_name(tag), (long long)e,
                                    (long long)b->dims[tag - TE_THREAD_X]);
                }
            }
            body = insert(b, s->u.loop.body, st, d);
        } else if (div || thread_dependent(b, s->u.loop.min) ||
                   thread_dependent(b, s->u.loop.extent)) {
            /* Per-thread loop: no barrier can go inside; the parent placed one before it. */
            push_dep(b, s->u.loop.var);
            bset acc = {.nw = 0};
            summary(s->u.loop.body, &acc);
            /* A buffer the loop both writes and reads needs a barrier inside it too (between
             * the write and the read, or before the next iteration's write). */
            const te_buf *cb = conflict(st, &acc);
            if (!cb)
                cb = conflict(&acc, &acc);
            if (cb) {
                fail_divergent(b, cb,
                               div ? div : "inside a loop whose bounds depend on the thread");
                return NULL;
            }
            merge(st, &acc);
            b->ndep = saved;
            return s;
        } else {
            /* Uniform loop: carry the end state into the start until it settles. */
            bset in = *st;
            te_stmt *best = NULL;
            for (int it = 0; it < 6; it++) {
                bset cur = in;
                best = insert(b, s->u.loop.body, &cur, div);
                if (!best)
                    return NULL;
                bset next = *st;
                bset carried = cur;
                drop_double_buffered(b, &carried);
                merge(&next, &carried);
                if (same(&next, &in)) {
                    *st = cur;
                    break;
                }
                in = next;
                *st = cur;
            }
            body = best;
        }
        b->ndep = saved;
        if (!body)
            return NULL;
        if (body == s->u.loop.body)
            return s;
        te_stmt *r =
            te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, body);
        if (r)
            r->u.loop.thread_tag = s->u.loop.thread_tag;
        return r;
    }
    }
    return s;
}

typedef struct {
    const te_schedule *sched;
} barrier_ctx;

static te_stmt *block_fn(te_ctx *ctx, te_stmt *body, void *user)
{
    barrier_ctx *p = user;
    bctx *b = te__alloc(ctx, sizeof *b);
    if (!b)
        return NULL;
    b->ctx = ctx;
    b->sched = p->sched;
    if (!te__block_dims(body, b->dims)) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "a loop bound to threadIdx has a non-constant "
                         "extent; thread counts must be known when the kernel is built");
        return NULL;
    }
    bset st = {.nw = 0};
    te_stmt *r = insert(b, body, &st, NULL);
    if (!r && te_ctx_errcode(ctx) == TE_OK)
        te_ctx_set_error(ctx, TE_ERR_NOMEM, "barrier insertion: out of memory");
    return r;
}

te_stmt *te__pass_barrier(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    const te_schedule *sched = pc->sched;
    barrier_ctx p = {sched};
    return te__gpu_map_blocks(ctx, s, block_fn, &p);
}
