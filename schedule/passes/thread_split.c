/*
 * Thread split: GPU-scheduled loop programs on the CPU (the C backend), so that a GPU
 * schedule's numbers are checked against the reference without a GPU.
 *
 * A block body is SPMD code: every thread of the block runs it, in step at barriers. Without
 * barriers, running the thread loops one after the other is already a valid order. With
 * barriers, the body is rewritten (MCUDA's "loop fission"):
 *
 *   1. SPMD form: each loop bound to threadIdx.T becomes a use of the thread variable tT (a
 *      guard `tT < extent` when it is narrower than the block);
 *   2. fission: every maximal barrier-free region becomes `for tz, ty, tx: region`; a serial
 *      loop, branch, allocation or let that contains a barrier stays around its pieces (its
 *      bounds or condition must be the same in every thread);
 *   3. a per-thread (LOCAL) buffer whose lifetime crosses a barrier gets one copy per thread,
 *      indexed by the linear thread id; a let whose value depends on the thread is substituted.
 *
 * Block loops become ordinary loops, the outermost one parallel (OpenMP), so shared buffers
 * (allocated at the top of the block body) are per-block stack arrays.
 */
#include <stdio.h>

#include "schedule/passes.h"

typedef struct ts {
    te_ctx *ctx;
    int64_t dims[3];
    te_expr *tid[3];
    te_expr *lin; /* linear thread id */
    int64_t nthreads;
    const te_buf *local[256]; /* LOCAL buffers declared in the block body so far */
    int nlocal;
    bool failed;
} ts;

static const char *tid_names[3] = {"tx", "ty", "tz"};

/* ---- 1. SPMD form -------------------------------------------------------------------------- */

static te_stmt *spmd_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    ts *t = user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_THREAD ||
        s->u.loop.thread_tag < TE_THREAD_X)
        return s;
    int d = s->u.loop.thread_tag - TE_THREAD_X;
    int64_t mn = 0, ex = 0;
    te__is_const_int(s->u.loop.min, &mn);
    te__is_const_int(s->u.loop.extent, &ex);
    te__subst m = {1, (const te_expr *[]){s->u.loop.var}, (te_expr *[]){t->tid[d]}};
    te_stmt *body = te__stmt_substitute(ctx, s->u.loop.body, &m);
    if (!body)
        return NULL;
    te_expr *cond = NULL;
    if (mn > 0)
        cond = te_ge(ctx, t->tid[d], te_int(ctx, mn));
    if (mn + ex < t->dims[d]) {
        te_expr *c = te_lt(ctx, t->tid[d], te_int(ctx, mn + ex));
        cond = cond ? te_and(ctx, cond, c) : c;
    }
    return cond ? te__if(ctx, cond, body, NULL) : body;
}

/* ---- 2. fission ---------------------------------------------------------------------------- */

typedef struct {
    ts *t;
    bool found;
} dep_ctx;

static bool dep_fn(const te_expr *e, void *user)
{
    dep_ctx *d = user;
    if (e->kind == TE_E_VAR)
        for (int i = 0; i < 3; i++)
            if (e == d->t->tid[i])
                d->found = true;
    if (e->kind == TE_E_LOAD)
        for (int i = 0; i < d->t->nlocal; i++)
            if (e->u.load.buf == d->t->local[i] || e->u.load.buf->scope == TE_SCOPE_LOCAL)
                d->found = true;
    return !d->found;
}

static bool dependent(ts *t, const te_expr *e)
{
    dep_ctx d = {t, false};
    te__expr_visit(e, dep_fn, &d);
    return d.found;
}

static te_stmt *wrap(ts *t, te_stmt *s)
{
    if (!s)
        return NULL;
    for (int d = 0; d < 3 && s; d++) {
        s = te__for(t->ctx, t->tid[d], te_int(t->ctx, 0), te_int(t->ctx, t->dims[d]), TE_FOR_SERIAL,
                    s);
    }
    return s;
}

typedef struct {
    const te_buf *from;
    te_buf *to;
    te_expr *off;
} exp_ctx;

static te_expr *exp_index(te_ctx *ctx, te_expr *off, te_expr *idx)
{
    if (idx->lanes == 1)
        return te_add(ctx, off, idx);
    if (idx->kind == TE_E_RAMP)
        return te__ramp(ctx, te_add(ctx, off, idx->u.ramp.base), idx->u.ramp.stride, idx->lanes);
    return te_add(ctx, te__bcast(ctx, off, idx->lanes), idx);
}

static te_expr *exp_expr(te_ctx *ctx, te_expr *e, void *user)
{
    exp_ctx *x = user;
    if (e->kind != TE_E_LOAD || e->u.load.buf != x->from)
        return e;
    te_expr *i = exp_index(ctx, x->off, e->u.load.idx[0]);
    return i ? te__load(ctx, x->to, 1, &i) : NULL;
}

static te_stmt *exp_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    exp_ctx *x = user;
    if (s->kind != TE_S_STORE || s->u.store.buf != x->from)
        return s;
    te_expr *i = exp_index(ctx, x->off, s->u.store.idx[0]);
    te_stmt *r = i ? te__store(ctx, x->to, 1, &i, s->u.store.value) : NULL;
    if (r)
        r->u.store.nontemporal = s->u.store.nontemporal;
    return r;
}

static te_stmt *fission(ts *t, te_stmt *s);

static te_stmt *fail(ts *t, const char *msg)
{
    if (!t->failed)
        te_ctx_set_error(t->ctx, TE_ERR_SCHEDULE, "running a GPU schedule on the CPU: %s", msg);
    t->failed = true;
    return NULL;
}

static te_stmt *fission(ts *t, te_stmt *s)
{
    te_ctx *ctx = t->ctx;
    if (!s || t->failed)
        return NULL;
    if (!te__has_barrier(s))
        return wrap(t, s);
    switch (s->kind) {
    case TE_S_BARRIER:
    case TE_S_COMMENT:
    case TE_S_STORE:
    case TE_S_INTRIN:
        return NULL; /* a barrier: nothing runs here */
    case TE_S_SEQ: {
        te_stmt *out = NULL, *run = NULL;
        for (int i = 0; i < s->u.seq.n; i++) {
            te_stmt *c = s->u.seq.v[i];
            if (!te__has_barrier(c)) {
                run = te__seq2(ctx, run, c);
                continue;
            }
            if (run)
                out = te__seq2(ctx, out, wrap(t, run));
            run = NULL;
            te_stmt *f = fission(t, c);
            if (t->failed)
                return NULL;
            out = te__seq2(ctx, out, f);
        }
        if (run)
            out = te__seq2(ctx, out, wrap(t, run));
        return out;
    }
    case TE_S_FOR: {
        if (dependent(t, s->u.loop.min) || dependent(t, s->u.loop.extent))
            return fail(t, "a loop containing a barrier has bounds that depend on the thread");
        te_stmt *b = fission(t, s->u.loop.body);
        if (!b)
            return NULL;
        te_for_kind k = s->u.loop.fkind;
        if (k == TE_FOR_PARALLEL || k == TE_FOR_VECTORIZED || k == TE_FOR_THREAD)
            k = TE_FOR_SERIAL;
        return te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, k, b);
    }
    case TE_S_IF: {
        if (dependent(t, s->u.cond.cond))
            return fail(t, "a barrier is inside a condition that depends on the thread (a thread "
                           "loop narrower than the block, or a tail guard)");
        te_stmt *a = fission(t, s->u.cond.then_s);
        te_stmt *b = s->u.cond.else_s ? fission(t, s->u.cond.else_s) : NULL;
        if (t->failed)
            return NULL;
        if (!a && !b)
            return NULL;
        return a ? te__if(ctx, s->u.cond.cond, a, b)
                 : te__if(ctx, te_not(ctx, s->u.cond.cond), b, NULL);
    }
    case TE_S_ALLOC: {
        te_buf *buf = s->u.alloc.buf;
        te_stmt *body = s->u.alloc.body;
        if (buf->scope == TE_SCOPE_LOCAL) {
            int64_t n = 1;
            for (int d = 0; d < buf->ndim; d++)
                n *= buf->shape[d];
            int64_t total = n * t->nthreads;
            char name[160];
            snprintf(name, sizeof name, "%s", buf->name);
            te_buf *nb = te__buf_new(ctx, name, buf->dtype, 1, &total, TE_SCOPE_LOCAL);
            if (!nb)
                return NULL;
            nb->tensor = buf->tensor;
            exp_ctx x = {buf, nb, te_mul(ctx, t->lin, te_int(ctx, n))};
            if (!(body = te__stmt_mutate(ctx, body, exp_stmt, exp_expr, &x)))
                return NULL;
            buf = nb;
            if (t->nlocal < 256)
                t->local[t->nlocal++] = nb;
        }
        te_stmt *b = fission(t, body);
        return b ? te__alloc_stmt(ctx, buf, b) : NULL;
    }
    case TE_S_LET: {
        if (!dependent(t, s->u.let.value)) {
            te_stmt *b = fission(t, s->u.let.body);
            return b ? te__let(ctx, s->u.let.var, s->u.let.value, b) : NULL;
        }
        te__subst m = {1, (const te_expr *[]){s->u.let.var}, (te_expr *[]){s->u.let.value}};
        te_stmt *b = te__stmt_substitute(ctx, s->u.let.body, &m);
        return b ? fission(t, b) : NULL;
    }
    }
    return NULL;
}

/* ---- Per kernel ----------------------------------------------------------------------------- */

static bool nested_same_tag(const te_stmt *s, int seen)
{
    if (!s)
        return false;
    switch (s->kind) {
    case TE_S_FOR:
        if (s->u.loop.fkind == TE_FOR_THREAD && s->u.loop.thread_tag >= TE_THREAD_X) {
            int bit = 1 << s->u.loop.thread_tag;
            if (seen & bit)
                return true;
            seen |= bit;
        }
        return nested_same_tag(s->u.loop.body, seen);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            if (nested_same_tag(s->u.seq.v[i], seen))
                return true;
        return false;
    case TE_S_IF:
        return nested_same_tag(s->u.cond.then_s, seen) || nested_same_tag(s->u.cond.else_s, seen);
    case TE_S_ALLOC:
        return nested_same_tag(s->u.alloc.body, seen);
    case TE_S_LET:
        return nested_same_tag(s->u.let.body, seen);
    default:
        return false;
    }
}

/* Thread loops left in barrier-free bodies run serially: mark them so. */
static te_stmt *serial_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_THREAD)
        return s;
    return te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_SERIAL,
                   s->u.loop.body);
}

static te_stmt *split_block(te_ctx *ctx, te_stmt *body, void *user)
{
    (void)user;
    ts *t = te__alloc(ctx, sizeof *t);
    if (!t)
        return NULL;
    t->ctx = ctx;
    if (!te__block_dims(body, t->dims)) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "a loop bound to threadIdx has a non-constant "
                         "extent");
        return NULL;
    }
    if (!te__has_barrier(body) && !nested_same_tag(body, 0))
        return te__stmt_mutate(ctx, body, serial_fn, NULL, NULL);
    for (int d = 0; d < 3; d++)
        if (!(t->tid[d] = te__loop_var(ctx, tid_names[d], t->dims[d])))
            return NULL;
    t->nthreads = t->dims[0] * t->dims[1] * t->dims[2];
    t->lin =
        te_add(ctx,
               te_mul(ctx, te_add(ctx, te_mul(ctx, t->tid[2], te_int(ctx, t->dims[1])), t->tid[1]),
                      te_int(ctx, t->dims[0])),
               t->tid[0]);
    te_stmt *s = te__stmt_mutate(ctx, body, spmd_fn, NULL, t);
    if (!s)
        return NULL;
    te_stmt *r = fission(t, s);
    if (!r && !t->failed && te_ctx_errcode(ctx) == TE_OK)
        te_ctx_set_error(ctx, TE_ERR_INTERNAL, "thread split produced an empty block");
    return r;
}

/* Block loops: the outermost becomes parallel, the others serial. */
static te_stmt *blocks_to_loops(te_ctx *ctx, te_stmt *s, bool outer)
{
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_THREAD ||
        s->u.loop.thread_tag > TE_BLOCK_Z)
        return s;
    te_stmt *b = blocks_to_loops(ctx, s->u.loop.body, false);
    if (!b)
        return NULL;
    return te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent,
                   outer ? TE_FOR_PARALLEL : TE_FOR_SERIAL, b);
}

/* Pre-order, so the outermost block loop of each kernel is the parallel one. */
static te_stmt *convert_blocks(te_ctx *ctx, te_stmt *s)
{
    if (!s || !te__has_thread_loops(s))
        return s;
    switch (s->kind) {
    case TE_S_FOR: {
        if (s->u.loop.fkind == TE_FOR_THREAD && s->u.loop.thread_tag <= TE_BLOCK_Z)
            return blocks_to_loops(ctx, s, true);
        te_stmt *b = convert_blocks(ctx, s->u.loop.body);
        if (!b || b == s->u.loop.body)
            return b;
        te_stmt *r = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent,
                             s->u.loop.fkind == TE_FOR_THREAD ? TE_FOR_SERIAL : s->u.loop.fkind, b);
        return r;
    }
    case TE_S_SEQ: {
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)s->u.seq.n);
        if (!v)
            return NULL;
        for (int i = 0; i < s->u.seq.n; i++)
            if (!(v[i] = convert_blocks(ctx, s->u.seq.v[i])))
                return NULL;
        return te__seq(ctx, s->u.seq.n, v);
    }
    case TE_S_IF: {
        te_stmt *a = convert_blocks(ctx, s->u.cond.then_s);
        te_stmt *b = s->u.cond.else_s ? convert_blocks(ctx, s->u.cond.else_s) : NULL;
        return a ? te__if(ctx, s->u.cond.cond, a, b) : NULL;
    }
    case TE_S_ALLOC: {
        te_stmt *b = convert_blocks(ctx, s->u.alloc.body);
        return b ? te__alloc_stmt(ctx, s->u.alloc.buf, b) : NULL;
    }
    case TE_S_LET: {
        te_stmt *b = convert_blocks(ctx, s->u.let.body);
        return b ? te__let(ctx, s->u.let.var, s->u.let.value, b) : NULL;
    }
    default:
        return s;
    }
}

te_stmt *te__pass_thread_split(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    te_stmt *r = te__gpu_map_blocks(ctx, s, split_block, NULL);
    return r ? convert_blocks(ctx, r) : NULL;
}
