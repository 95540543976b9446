/*
 * The hoist_invariants pass: math calls a loop does not move are computed once, before it.
 *
 *     for (i1_o, 0, 256) {                        let h0 = 1f / sqrt(m2[0] / 4096f + 1e-05f)
 *       Y[..] = (X[..] - mean[0])           ->    for (i1_o, 0, 256) {
 *               * (1f / sqrt(m2[0] / 4096f + ..))   Y[..] = (X[..] - mean[0]) * h0
 *     }                                           }
 *
 * A C compiler moves invariant arithmetic out of a loop itself, but not a call of sqrtf, expf
 * or logf: under the default -fmath-errno those may write errno, so gcc evaluates them (and
 * the division around them) on every iteration. Layer norm's output pass divided by the square
 * root of the variance once per 16 elements.
 *
 * What moves: a largest scalar float subexpression of a stored value that holds a call and
 * that some enclosing loops do not move. It becomes a let just before the outermost such loop,
 * so it is computed once per iteration of the loop around that one. An equal expression moved
 * to the same place reuses the let. The conditions, with n loops around the expression:
 *   - its variables are bound outside that loop (loop variables, lets);
 *   - the buffers it reads are neither allocated nor written (stores, tensor intrinsics)
 *     inside that loop, so they hold the same values before the loop as in it;
 *   - when it reads memory, nothing between that loop and the expression makes the read
 *     conditional (an if, one branch of an if_then_else, a loop whose extent is not a positive
 *     constant): a read moved out of its guard could leave the buffer's bounds.
 * Only serial, parallel and leftover vectorized or unrolled loops are moved out of, never GPU
 * thread or virtual-thread loops, nor loops carrying a cross-thread reduction (they stop the
 * search: nothing moves above them). Float arithmetic does not trap, so a moved call computes
 * at worst a value nobody reads (a loop that runs zero times).
 */
#include <stdio.h>
#include <string.h>

#include "schedule/passes.h"

/* A loop around the statement being rewritten, and what it binds and writes. */
typedef struct scope_loop {
    te_stmt *loop;
    te_buf **written; /* buffers stored or handed to an intrinsic anywhere in its body */
    int nwritten;
} scope_loop;

/* A let to put before loop `at`. */
typedef struct hoisted {
    int at;
    te_expr *var, *value;
} hoisted;

/* A variable or buffer bound inside the walk, with the number of loops around its binding. */
typedef struct binding {
    const void *what;
    int depth;
} binding;

typedef struct hctx {
    te_ctx *ctx;
    scope_loop *loops;
    int nloops, cap_loops;
    binding *binds;
    int nbinds, cap_binds;
    hoisted *hoist;
    int nhoist, cap_hoist;
    int barrier; /* loops [0, barrier) cannot be moved out of (inside a thread loop) */
    int guard;   /* reads stay inside loops [0, guard): an if or a loop of unknown extent */
    int counter;
    bool oom;
} hctx;

static bool grow(hctx *h, void **p, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return true;
    int nc = *cap ? *cap * 2 : 16;
    void *q = te__alloc(h->ctx, elem * (size_t)nc);
    if (!q) {
        h->oom = true;
        return false;
    }
    if (*p)
        memcpy(q, *p, elem * (size_t)n);
    *p = q;
    *cap = nc;
    return true;
}

static void bind(hctx *h, const void *what)
{
    if (grow(h, (void **)&h->binds, h->nbinds, &h->cap_binds, sizeof *h->binds))
        h->binds[h->nbinds++] = (binding){what, h->nloops};
}

static int bound_depth(const hctx *h, const void *what)
{
    for (int i = h->nbinds - 1; i >= 0; i--)
        if (h->binds[i].what == what)
            return h->binds[i].depth;
    return 0; /* bound outside the kernel's loops: an argument, a free variable */
}

typedef struct writes {
    hctx *h;
    te_buf **v;
    int n, cap;
} writes;

static void add_write(writes *w, te_buf *b)
{
    for (int i = 0; i < w->n; i++)
        if (w->v[i] == b)
            return;
    if (grow(w->h, (void **)&w->v, w->n, &w->cap, sizeof *w->v))
        w->v[w->n++] = b;
}

static bool collect_writes(const te_stmt *s, void *user)
{
    writes *w = user;
    if (s->kind == TE_S_STORE)
        add_write(w, s->u.store.buf);
    else if (s->kind == TE_S_INTRIN)
        for (int o = 0; o < s->u.intrin.nops; o++)
            if (s->u.intrin.addr[o]->kind == TE_E_LOAD)
                add_write(w, s->u.intrin.addr[o]->u.load.buf);
    return true;
}

/* What an expression depends on (need_visit): the number of enclosing loops it must stay
 * inside (the deepest binding of its variables and buffers, and of the loops that write what
 * it reads), whether it reads memory and whether it calls a math function. */
typedef struct need {
    const hctx *h;
    int depth;
    bool reads, calls;
} need;

static bool need_visit(const te_expr *e, void *user)
{
    need *n = user;
    const hctx *h = n->h;
    int d = 0;
    if (e->kind == TE_E_VAR) {
        d = bound_depth(h, e);
    } else if (e->kind == TE_E_READ || e->kind == TE_E_REDUCE) {
        d = h->nloops; /* not lowered: leave it */
    } else if (e->kind == TE_E_CALL) {
        n->calls = true;
    } else if (e->kind == TE_E_LOAD) {
        n->reads = true;
        d = bound_depth(h, e->u.load.buf);
        for (int i = h->nloops - 1; i >= d; i--)
            for (int w = 0; w < h->loops[i].nwritten; w++)
                if (h->loops[i].written[w] == e->u.load.buf) {
                    d = i + 1;
                    break;
                }
    }
    n->depth = d > n->depth ? d : n->depth;
    return true;
}

/* The let variable holding `value` before loop `at`: an existing one for an equal value, else
 * a new one. NULL when out of memory. */
static te_expr *hoist_to(hctx *h, int at, te_expr *value)
{
    for (int i = 0; i < h->nhoist; i++)
        if (h->hoist[i].at == at && te__expr_equal(h->hoist[i].value, value))
            return h->hoist[i].var;
    char name[32];
    snprintf(name, sizeof name, "hoisted%d", h->counter++);
    te_expr *var = te_var(h->ctx, name, value->dtype);
    if (!var || !grow(h, (void **)&h->hoist, h->nhoist, &h->cap_hoist, sizeof *h->hoist)) {
        h->oom = true;
        return NULL;
    }
    h->hoist[h->nhoist++] = (hoisted){at, var, value};
    return var;
}

/* The largest movable subexpressions of an expression, found top down (find_visit): each is
 * recorded as a let before its loop and its node mapped to the let's variable. */
typedef struct moved {
    const te_expr *from;
    te_expr *to;
} moved;

typedef struct found {
    hctx *h;
    bool guarded; /* inside a branch of an if_then_else: evaluated on a condition */
    moved *m;
    int n, cap;
} found;

static bool find_visit(const te_expr *e, void *user)
{
    found *f = user;
    hctx *h = f->h;
    if (h->oom)
        return false;
    if (e->kind == TE_E_IF && !f->guarded) {
        /* only the taken branch is evaluated: reads in either may not move out */
        te__expr_visit(e->u.sel.c, find_visit, f);
        f->guarded = true;
        te__expr_visit(e->u.sel.t, find_visit, f);
        te__expr_visit(e->u.sel.f, find_visit, f);
        f->guarded = false;
        return false;
    }
    if (e->lanes != 1 || !te_dtype_is_float(e->dtype) || e->kind == TE_E_LOAD ||
        e->kind == TE_E_VAR)
        return true;
    need n = {h, 0, false, false};
    te__expr_visit(e, need_visit, &n);
    int d = n.depth > h->barrier ? n.depth : h->barrier;
    if (n.reads && d < h->guard)
        d = h->guard;
    if (n.reads && f->guarded)
        d = h->nloops;
    if (!n.calls)
        return false; /* nothing in it to move */
    if (d >= h->nloops)
        return true; /* a part of it may still move */
    te_expr *var = hoist_to(h, d, (te_expr *)e);
    if (!var || !grow(h, (void **)&f->m, f->n, &f->cap, sizeof *f->m)) {
        h->oom = true;
        return false;
    }
    f->m[f->n++] = (moved){e, var};
    return false;
}

static te_expr *replace_found(te_ctx *ctx, te_expr *e, void *user)
{
    (void)ctx;
    const found *f = user;
    for (int i = 0; i < f->n; i++)
        if (f->m[i].from == e)
            return f->m[i].to;
    return e;
}

/* e with its largest movable subexpressions replaced by let variables (NULL when out of
 * memory). */
static te_expr *rewrite(hctx *h, te_expr *e)
{
    found f = {h, false, NULL, 0, 0};
    te__expr_visit(e, find_visit, &f);
    if (h->oom)
        return NULL;
    return f.n ? te__expr_mutate(h->ctx, e, replace_found, &f) : e;
}

static te_stmt *walk(hctx *h, te_stmt *s);

static te_stmt *walk_child(void *user, te_stmt *child) { return walk(user, child); }

/* A loop: its body walked with it on the stack, then the lets moved before it wrapped
 * around it (the first moved outermost, so later ones may use it). */
static te_stmt *walk_loop(hctx *h, te_stmt *s)
{
    int64_t ext;
    bool movable = (s->u.loop.fkind == TE_FOR_SERIAL || s->u.loop.fkind == TE_FOR_PARALLEL ||
                    s->u.loop.fkind == TE_FOR_VECTORIZED || s->u.loop.fkind == TE_FOR_UNROLLED) &&
                   !s->u.loop.xreduce;
    bool known = te__is_const_int(s->u.loop.extent, &ext) && ext > 0;
    if (!grow(h, (void **)&h->loops, h->nloops, &h->cap_loops, sizeof *h->loops))
        return NULL;
    writes w = {h, NULL, 0, 0};
    te__stmt_visit(s->u.loop.body, collect_writes, NULL, &w);
    if (h->oom)
        return NULL;
    int at = h->nloops, saved_barrier = h->barrier, saved_guard = h->guard;
    int saved_binds = h->nbinds, saved_hoist = h->nhoist;
    h->loops[h->nloops++] = (scope_loop){s, w.v, w.n};
    bind(h, s->u.loop.var);
    if (!movable)
        h->barrier = h->nloops;
    if (!known)
        h->guard = h->nloops;
    te_stmt *body = walk(h, s->u.loop.body);
    h->nloops--;
    h->nbinds = saved_binds;
    h->barrier = saved_barrier;
    h->guard = saved_guard;
    if (!body)
        return NULL;
    te_stmt *r = s;
    if (body != s->u.loop.body) {
        if (!(r = te__for(h->ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind,
                          body)))
            return NULL;
        r->u.loop.thread_tag = s->u.loop.thread_tag;
        r->u.loop.xreduce = s->u.loop.xreduce;
    }
    /* This loop's lets, and only those: the body may also have moved some further out. */
    for (int i = h->nhoist - 1; i >= saved_hoist; i--)
        if (h->hoist[i].at == at && !(r = te__let(h->ctx, h->hoist[i].var, h->hoist[i].value, r)))
            return NULL;
    int m = saved_hoist;
    for (int i = saved_hoist; i < h->nhoist; i++)
        if (h->hoist[i].at != at)
            h->hoist[m++] = h->hoist[i];
    h->nhoist = m;
    return r;
}

static te_stmt *walk(hctx *h, te_stmt *s)
{
    if (!s || h->oom)
        return s;
    switch (s->kind) {
    case TE_S_FOR:
        return walk_loop(h, s);
    case TE_S_STORE: {
        te_expr *v = rewrite(h, s->u.store.value);
        if (!v)
            return NULL;
        if (v == s->u.store.value)
            return s;
        te_stmt *r = te__store(h->ctx, s->u.store.buf, s->u.store.n, s->u.store.idx, v);
        if (r)
            r->u.store.nontemporal = s->u.store.nontemporal;
        return r;
    }
    case TE_S_IF: {
        int saved = h->guard;
        h->guard = h->nloops;
        bool failed = false;
        te_stmt *r = te__stmt_map_children(h->ctx, s, walk_child, h, &failed);
        h->guard = saved;
        return failed ? NULL : r;
    }
    case TE_S_LET:
    case TE_S_ALLOC: {
        int saved = h->nbinds;
        bind(h, s->kind == TE_S_LET ? (const void *)s->u.let.var : (const void *)s->u.alloc.buf);
        bool failed = false;
        te_stmt *r = te__stmt_map_children(h->ctx, s, walk_child, h, &failed);
        h->nbinds = saved;
        return failed ? NULL : r;
    }
    case TE_S_SEQ: {
        bool failed = false;
        te_stmt *r = te__stmt_map_children(h->ctx, s, walk_child, h, &failed);
        return failed ? NULL : r;
    }
    default:
        return s;
    }
}

te_stmt *te__pass_hoist_invariants(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    hctx h = {.ctx = ctx};
    te_stmt *r = walk(&h, s);
    if (!r || h.oom) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_NOMEM, "hoist_invariants: out of memory");
        return NULL;
    }
    return r;
}
