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

/* The number of enclosing loops expression e must stay inside: the deepest binding of its
 * variables and buffers, and of the loops that write what it reads. *reads is set when it
 * loads memory, *calls when it calls a math function. */
static int need_depth(const hctx *h, const te_expr *e, bool *reads, bool *calls);

static int need_children(const hctx *h, const te_expr *e, bool *reads, bool *calls)
{
    int d = 0;
#define NEED(x)                                                                                    \
    do {                                                                                           \
        int d_ = need_depth(h, (x), reads, calls);                                                 \
        d = d_ > d ? d_ : d;                                                                       \
    } while (0)
    switch (e->kind) {
    case TE_E_BINARY:
        NEED(e->u.bin.a);
        NEED(e->u.bin.b);
        break;
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        NEED(e->u.un.a);
        break;
    case TE_E_SELECT:
    case TE_E_IF:
        NEED(e->u.sel.c);
        NEED(e->u.sel.t);
        NEED(e->u.sel.f);
        break;
    case TE_E_CALL:
        for (int i = 0; i < e->u.call.n; i++)
            NEED(e->u.call.args[i]);
        break;
    case TE_E_LOAD:
        for (int i = 0; i < e->u.load.n; i++)
            NEED(e->u.load.idx[i]);
        break;
    case TE_E_RAMP:
        NEED(e->u.ramp.base);
        break;
    default:
        break;
    }
#undef NEED
    return d;
}

static int need_depth(const hctx *h, const te_expr *e, bool *reads, bool *calls)
{
    switch (e->kind) {
    case TE_E_INT:
    case TE_E_FLOAT:
        return 0;
    case TE_E_VAR:
        return bound_depth(h, e);
    case TE_E_READ:
    case TE_E_REDUCE:
        return h->nloops; /* not lowered: leave it */
    case TE_E_CALL:
        *calls = true;
        break;
    case TE_E_LOAD: {
        *reads = true;
        int d = bound_depth(h, e->u.load.buf);
        for (int i = h->nloops - 1; i >= d; i--) {
            const scope_loop *l = &h->loops[i];
            for (int w = 0; w < l->nwritten; w++)
                if (l->written[w] == e->u.load.buf) {
                    d = i + 1;
                    break;
                }
        }
        int c = need_children(h, e, reads, calls);
        return c > d ? c : d;
    }
    default:
        break;
    }
    return need_children(h, e, reads, calls);
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

/* e with its largest movable subexpressions replaced by let variables. `guarded`: e is only
 * evaluated on a condition (a branch of an if_then_else) inside the innermost loop. */
static te_expr *rewrite(hctx *h, te_expr *e, bool guarded);

static te_expr *rewrite_children(hctx *h, te_expr *e, bool guarded)
{
    te_ctx *c = h->ctx;
    switch (e->kind) {
    case TE_E_BINARY: {
        te_expr *a = rewrite(h, e->u.bin.a, guarded), *b = rewrite(h, e->u.bin.b, guarded);
        if (!a || !b)
            return NULL;
        if (a == e->u.bin.a && b == e->u.bin.b)
            return e;
        te_expr *r = te__new_expr(c, TE_E_BINARY, e->dtype);
        if (r) {
            r->lanes = e->lanes;
            r->u.bin.op = e->u.bin.op;
            r->u.bin.a = a;
            r->u.bin.b = b;
        }
        return r;
    }
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST: {
        te_expr *a = rewrite(h, e->u.un.a, guarded);
        if (!a || a == e->u.un.a)
            return a ? e : NULL;
        te_expr *r = te__new_expr(c, e->kind, e->dtype);
        if (r) {
            r->lanes = e->lanes;
            r->u.un.a = a;
        }
        return r;
    }
    case TE_E_SELECT:
    case TE_E_IF: {
        bool g = guarded || e->kind == TE_E_IF;
        te_expr *cc = rewrite(h, e->u.sel.c, guarded), *t = rewrite(h, e->u.sel.t, g),
                *f = rewrite(h, e->u.sel.f, g);
        if (!cc || !t || !f)
            return NULL;
        if (cc == e->u.sel.c && t == e->u.sel.t && f == e->u.sel.f)
            return e;
        te_expr *r = te__new_expr(c, e->kind, e->dtype);
        if (r) {
            r->lanes = e->lanes;
            r->u.sel.c = cc;
            r->u.sel.t = t;
            r->u.sel.f = f;
        }
        return r;
    }
    case TE_E_CALL: {
        te_expr *a[2] = {NULL, NULL};
        bool same = true;
        for (int i = 0; i < e->u.call.n; i++) {
            if (!(a[i] = rewrite(h, e->u.call.args[i], guarded)))
                return NULL;
            same = same && a[i] == e->u.call.args[i];
        }
        if (same)
            return e;
        te_expr *r = te__new_expr(c, TE_E_CALL, e->dtype);
        if (r) {
            *r = *e;
            r->u.call.args[0] = a[0];
            r->u.call.args[1] = a[1];
        }
        return r;
    }
    default:
        /* Loads, ramps and leaves: index arithmetic, which the C compiler moves itself. */
        return e;
    }
}

static te_expr *rewrite(hctx *h, te_expr *e, bool guarded)
{
    if (!e || h->oom)
        return NULL;
    if (e->lanes == 1 && te_dtype_is_float(e->dtype) && e->kind != TE_E_LOAD &&
        e->kind != TE_E_VAR) {
        bool reads = false, calls = false;
        int d = need_depth(h, e, &reads, &calls);
        if (d < h->barrier)
            d = h->barrier;
        if (reads && d < h->guard)
            d = h->guard;
        if (reads && guarded)
            d = h->nloops;
        if (calls && d < h->nloops)
            return hoist_to(h, d, e);
        if (!calls)
            return e;
    }
    return rewrite_children(h, e, guarded);
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
        te_expr *v = rewrite(h, s->u.store.value, false);
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
