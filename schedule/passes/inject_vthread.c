/*
 * schedule/passes/inject_vthread.c: virtual threads (te_bind(.., TE_VTHREAD), TVM's
 * InjectVirtualThread).
 *
 * A loop `vthread (v, m, V) body` means: run body for v = m .. m+V-1, in any interleaving. This
 * pass moves the loop inward, statement by statement:
 *
 *   - a buffer allocated inside body whose contents depend on v (a register tile) gets a leading
 *     dimension of V, indexed by v - m, so the iterations keep separate copies;
 *   - a statement that does not mention v (a cooperative copy into shared memory, a comment) is
 *     kept once, where it was: every iteration would have done the same thing;
 *   - serial loops, thread loops, allocations, lets and ifs that do not mention v are entered and
 *     their bodies treated the same way;
 *   - anything else that mentions v (a store, an unrolled or vectorized loop, a loop or condition
 *     whose bounds mention v) is wrapped in `unrolled (v, m, V)`, which the unroll pass expands.
 *
 * For the matmul template's register tile split into V strided pieces this gives one k loop
 * with one set of shared-memory copies per step and, inside it, the V pieces' multiply-adds one
 * after the other (all in registers once unrolled), instead of V k loops each copying the tiles.
 *
 * Running a statement once instead of V times keeps the results only when it is idempotent and
 * independent of the iterations' own work. The pass checks, for every statement it keeps once,
 * that it writes only buffers allocated inside the loop (so it recomputes the same values from
 * scratch, never accumulating across iterations) and reads or writes nothing a statement that
 * depends on v writes. When a check fails, when the extent is not a constant or the loop holds
 * a tensor-intrinsic call, the loop becomes an ordinary serial loop: always correct.
 *
 * Runs before loop_partition (which would otherwise cut a virtual-thread loop at a tail guard into
 * copies of everything inside it, shared-memory copies included) and before storage_flatten
 * (buffers are still multi-dimensional); after it no TE_FOR_VTHREAD loop remains.
 */
#include <string.h>

#include "schedule/passes.h"

#define VT_MAX_BUFS 64

typedef struct {
    const te_buf *v[VT_MAX_BUFS];
    int n;
    bool overflow;
} bufset;

static bool bs_has(const bufset *b, const te_buf *x)
{
    for (int i = 0; i < b->n; i++)
        if (b->v[i] == x)
            return true;
    return false;
}

static void bs_add(bufset *b, const te_buf *x)
{
    if (bs_has(b, x))
        return;
    if (b->n == VT_MAX_BUFS)
        b->overflow = true;
    else
        b->v[b->n++] = x;
}

/* ---- what depends on v ------------------------------------------------------------------- */

typedef struct {
    const te_expr *vars[32]; /* v, and variables of lets whose value depends on v */
    int nvars;
    const bufset *expanded; /* buffers whose every element depends on v */
    bool hit;
} depscan;

static bool dep_visit(const te_expr *e, void *user)
{
    depscan *d = user;
    if (d->hit)
        return false;
    if (e->kind == TE_E_VAR)
        for (int i = 0; i < d->nvars; i++)
            if (d->vars[i] == e)
                d->hit = true;
    if (e->kind == TE_E_LOAD && d->expanded && bs_has(d->expanded, e->u.load.buf))
        d->hit = true;
    return !d->hit;
}

static bool expr_dep(depscan *d, const te_expr *e)
{
    if (!e)
        return false;
    d->hit = false;
    te__expr_visit(e, dep_visit, d);
    return d->hit;
}

static bool stmt_dep_visit(const te_stmt *s, void *user)
{
    depscan *d = user;
    if (s->kind == TE_S_STORE && d->expanded && bs_has(d->expanded, s->u.store.buf))
        d->hit = true;
    return !d->hit;
}

/* Whether anything in s mentions v (after expansion, every access to an expanded buffer does). */
static bool stmt_dep(const te_stmt *s, const te_expr *v)
{
    depscan d = {.vars = {v}, .nvars = 1};
    te__stmt_visit(s, stmt_dep_visit, dep_visit, &d);
    return d.hit;
}

/* ---- 1. which allocated buffers must be expanded ------------------------------------------- */

typedef struct {
    depscan d;
    const bufset *allocated;
    bufset *expand;
    bool changed, intrin;
} expscan;

static void exp_walk(expscan *x, const te_stmt *s, bool dep)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        dep = dep || expr_dep(&x->d, s->u.loop.min) || expr_dep(&x->d, s->u.loop.extent);
        exp_walk(x, s->u.loop.body, dep);
        return;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            exp_walk(x, s->u.seq.v[i], dep);
        return;
    case TE_S_IF:
        dep = dep || expr_dep(&x->d, s->u.cond.cond);
        exp_walk(x, s->u.cond.then_s, dep);
        exp_walk(x, s->u.cond.else_s, dep);
        return;
    case TE_S_ALLOC:
        exp_walk(x, s->u.alloc.body, dep);
        return;
    case TE_S_LET: {
        int saved = x->d.nvars;
        if (expr_dep(&x->d, s->u.let.value) && x->d.nvars < 32)
            x->d.vars[x->d.nvars++] = s->u.let.var;
        exp_walk(x, s->u.let.body, dep);
        x->d.nvars = saved;
        return;
    }
    case TE_S_STORE: {
        bool d = dep || expr_dep(&x->d, s->u.store.value);
        for (int i = 0; i < s->u.store.n && !d; i++)
            d = expr_dep(&x->d, s->u.store.idx[i]);
        const te_buf *b = s->u.store.buf;
        if (d && bs_has(x->allocated, b) && !bs_has(x->expand, b)) {
            bs_add(x->expand, b);
            x->changed = true;
        }
        return;
    }
    case TE_S_INTRIN:
        x->intrin = true;
        return;
    case TE_S_BARRIER:
    case TE_S_COMMENT:
        return;
    }
}

static bool alloc_visit(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_ALLOC)
        bs_add(user, s->u.alloc.buf);
    return true;
}

/* ---- 2. expansion ------------------------------------------------------------------------ */

typedef struct {
    const te_buf *from[VT_MAX_BUFS];
    te_buf *to[VT_MAX_BUFS];
    int n;
    te_expr *lane; /* v - m */
} expand_map;

static te_buf *expanded_of(const expand_map *m, const te_buf *b)
{
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == b)
            return m->to[i];
    return NULL;
}

static te_expr *exp_expr(te_ctx *ctx, te_expr *e, void *user)
{
    expand_map *m = user;
    te_buf *nb = e->kind == TE_E_LOAD ? expanded_of(m, e->u.load.buf) : NULL;
    if (!nb)
        return e;
    te_expr *idx[TE_MAX_DIMS];
    idx[0] = m->lane;
    for (int i = 0; i < e->u.load.n; i++)
        idx[i + 1] = e->u.load.idx[i];
    return te__load(ctx, nb, e->u.load.n + 1, idx);
}

static te_stmt *exp_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    expand_map *m = user;
    te_buf *nb;
    if (s->kind == TE_S_STORE && (nb = expanded_of(m, s->u.store.buf))) {
        te_expr *idx[TE_MAX_DIMS];
        idx[0] = m->lane;
        for (int i = 0; i < s->u.store.n; i++)
            idx[i + 1] = s->u.store.idx[i];
        te_stmt *r = te__store(ctx, nb, s->u.store.n + 1, idx, s->u.store.value);
        if (r)
            r->u.store.nontemporal = s->u.store.nontemporal;
        return r;
    }
    if (s->kind == TE_S_ALLOC && (nb = expanded_of(m, s->u.alloc.buf)))
        return te__alloc_stmt(ctx, nb, s->u.alloc.body);
    return s;
}

/* ---- 3. moving the loop inward ------------------------------------------------------------- */

typedef struct {
    te_ctx *ctx;
    te_expr *v, *min;
    int64_t extent;
    const bufset *allocated;
    bufset dep_writes; /* buffers stored by statements that mention v */
    bool illegal, failed;
} push_ctx;

static bool dep_writes_visit(const te_stmt *s, void *user)
{
    push_ctx *p = user;
    if (s->kind == TE_S_STORE && stmt_dep(s, p->v))
        bs_add(&p->dep_writes, s->u.store.buf);
    return true;
}

typedef struct {
    const push_ctx *p;
    bool bad;
} once_check;

static bool once_expr(const te_expr *e, void *user)
{
    once_check *c = user;
    if (e->kind == TE_E_LOAD && bs_has(&c->p->dep_writes, e->u.load.buf))
        c->bad = true;
    return !c->bad;
}

static bool once_stmt(const te_stmt *s, void *user)
{
    once_check *c = user;
    if (s->kind == TE_S_STORE &&
        (bs_has(&c->p->dep_writes, s->u.store.buf) || !bs_has(c->p->allocated, s->u.store.buf)))
        c->bad = true;
    return !c->bad;
}

static te_stmt *wrap(push_ctx *p, te_stmt *s)
{
    te_stmt *r = te__for(p->ctx, p->v, p->min, te_int(p->ctx, p->extent), TE_FOR_UNROLLED, s);
    if (!r)
        p->failed = true;
    return r;
}

static te_stmt *push(push_ctx *p, te_stmt *s);

static te_stmt *push_child(void *user, te_stmt *child) { return push(user, child); }

static te_stmt *push(push_ctx *p, te_stmt *s)
{
    if (!s || p->illegal || p->failed)
        return s;
    if (!stmt_dep(s, p->v)) {
        /* kept once: it must be idempotent and blind to the iterations' own writes */
        once_check c = {p, false};
        te__stmt_visit(s, once_stmt, once_expr, &c);
        if (c.bad)
            p->illegal = true;
        return s;
    }
    depscan d = {.vars = {p->v}, .nvars = 1};
    switch (s->kind) {
    case TE_S_FOR: {
        if (expr_dep(&d, s->u.loop.min) || expr_dep(&d, s->u.loop.extent) ||
            (s->u.loop.fkind != TE_FOR_SERIAL && s->u.loop.fkind != TE_FOR_THREAD) ||
            s->u.loop.xreduce)
            return wrap(p, s);
        te_stmt *b = push(p, s->u.loop.body);
        if (!b || p->illegal || p->failed)
            return s;
        te_stmt *r =
            te__for(p->ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, b);
        if (!r)
            p->failed = true;
        else
            r->u.loop.thread_tag = s->u.loop.thread_tag;
        return r;
    }
    case TE_S_IF:
        if (expr_dep(&d, s->u.cond.cond))
            return wrap(p, s);
        break;
    case TE_S_LET:
        if (expr_dep(&d, s->u.let.value))
            return wrap(p, s);
        break;
    case TE_S_SEQ:
    case TE_S_ALLOC:
        break;
    default:
        return wrap(p, s);
    }
    bool failed = false;
    te_stmt *r = te__stmt_map_children(p->ctx, s, push_child, p, &failed);
    if (failed || !r)
        p->failed = true;
    return r;
}

static te_stmt *serial(te_ctx *ctx, const te_stmt *s)
{
    return te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_SERIAL,
                   s->u.loop.body);
}

static te_stmt *inject(te_ctx *ctx, te_stmt *s)
{
    int64_t V;
    te_stmt *body = s->u.loop.body;
    if (!te__is_const_int(s->u.loop.extent, &V) || V < 1)
        return serial(ctx, s);
    bufset allocated = {.n = 0}, expand = {.n = 0};
    te__stmt_visit(body, alloc_visit, NULL, &allocated);
    expscan x = {.d = {.vars = {s->u.loop.var}, .nvars = 1, .expanded = &expand},
                 .allocated = &allocated,
                 .expand = &expand};
    do {
        x.changed = false;
        exp_walk(&x, body, false);
    } while (x.changed && !expand.overflow);
    if (x.intrin || allocated.overflow || expand.overflow)
        return serial(ctx, s);

    expand_map m = {.n = 0};
    m.lane = te_sub(ctx, s->u.loop.var, s->u.loop.min);
    if (!m.lane)
        return NULL;
    for (int i = 0; i < expand.n; i++) {
        const te_buf *b = expand.v[i];
        if (b->ndim + 1 > TE_MAX_DIMS)
            return serial(ctx, s);
        int64_t shape[TE_MAX_DIMS];
        shape[0] = V;
        memcpy(shape + 1, b->shape, sizeof(int64_t) * (size_t)b->ndim);
        te_buf *nb = te__buf_new(ctx, b->name, b->dtype, b->ndim + 1, shape, b->scope);
        if (!nb)
            return NULL;
        nb->tensor = b->tensor;
        m.from[m.n] = b;
        m.to[m.n++] = nb;
    }
    te_stmt *eb = m.n ? te__stmt_mutate(ctx, body, exp_stmt, exp_expr, &m) : body;
    if (!eb)
        return NULL;

    bufset alloc2 = {.n = 0};
    te__stmt_visit(eb, alloc_visit, NULL, &alloc2);
    push_ctx p = {
        .ctx = ctx, .v = s->u.loop.var, .min = s->u.loop.min, .extent = V, .allocated = &alloc2};
    te__stmt_visit(eb, dep_writes_visit, NULL, &p);
    if (p.dep_writes.overflow || alloc2.overflow)
        return serial(ctx, s);
    te_stmt *r = push(&p, eb);
    if (p.failed)
        return NULL;
    if (p.illegal)
        return serial(ctx, s);
    return r;
}

static te_stmt *vthread_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_VTHREAD)
        return s;
    return inject(ctx, s);
}

static bool has_vthread(const te_stmt *s, void *user)
{
    bool *any = user;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_VTHREAD)
        *any = true;
    return !*any;
}

te_stmt *te__pass_inject_vthread(const te__pass_ctx *pc, te_stmt *s)
{
    bool any = false;
    if (!s)
        return s;
    te__stmt_visit(s, has_vthread, NULL, &any);
    if (!any)
        return s;
    return te__stmt_mutate(pc->ctx, s, vthread_fn, NULL, NULL);
}
