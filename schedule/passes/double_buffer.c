/*
 * Double buffering (te_double_buffer, TVM's InjectDoubleBuffer): a shared buffer allocated at
 * the top of a serial loop's body gets two halves, and iteration v uses half (v - min) % 2.
 *
 * When the statements that fill the marked buffers come first in the body and read nothing the
 * loop writes (the cooperative copies of a matmul's k-step), the fill of the next iteration is
 * moved ahead of the current iteration's work, so the two overlap:
 *
 *   fill(min) -> half 0;  barrier
 *   for v: { if (v + 1 < end) fill(v + 1) -> half (v + 1 - min) % 2
 *            the rest of the body, reading half (v - min) % 2
 *            barrier }
 *
 * The one barrier per iteration orders both hazards: the next iteration reads the half filled
 * in this one, and fills the half read in this one. The buffers are marked `prefetched`: the
 * barrier pass leaves their accesses alone, and the CUDA backend fills them with cp.async on
 * sm_80+ (the copy then runs while the iteration computes; the wait is before the barrier).
 * Otherwise (a fill that is not first, or reads what the loop writes) only the halves alternate,
 * which saves one of the two barriers per iteration, and the barrier pass places them.
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

/* ---- which statements fill the doubled buffers ------------------------------------------- */

typedef struct {
    const te_buf *const *from;
    int n;
    int writes, writes_other; /* stores to the doubled buffers / to anything else */
    const te_buf *wr[64];     /* every buffer stored (for the read check) */
    int nwr;
    bool overflow;
} fill_scan;

static bool is_from(const fill_scan *f, const te_buf *b)
{
    for (int i = 0; i < f->n; i++)
        if (f->from[i] == b)
            return true;
    return false;
}

static bool fill_stmt(const te_stmt *s, void *user)
{
    fill_scan *f = user;
    const te_buf *b = s->kind == TE_S_STORE    ? s->u.store.buf
                      : s->kind == TE_S_INTRIN ? s->u.intrin.addr[0]->u.load.buf
                                               : NULL;
    if (!b)
        return true;
    if (is_from(f, b))
        f->writes++;
    else
        f->writes_other++;
    bool seen = false;
    for (int i = 0; i < f->nwr; i++)
        seen |= f->wr[i] == b;
    if (!seen) {
        if (f->nwr == 64)
            f->overflow = true;
        else
            f->wr[f->nwr++] = b;
    }
    return true;
}

typedef struct {
    const fill_scan *w;
    bool bad;
} read_scan;

static bool read_expr(const te_expr *e, void *user)
{
    read_scan *r = user;
    if (e->kind == TE_E_LOAD)
        for (int i = 0; i < r->w->nwr; i++)
            r->bad |= r->w->wr[i] == e->u.load.buf;
    return !r->bad;
}

/* The number of leading items of seq that fill the doubled buffers (comments between them
 * included, none after the last fill), or 0 when the fill cannot move ahead: the fills must
 * store only to doubled buffers, the rest must not store to them, and the fills must read
 * nothing stored anywhere in the loop body. */
static int fill_prefix(te_stmt *const *items, int n, const te_buf *const *from, int nfrom)
{
    int p = 0;
    for (int i = 0; i < n; i++) {
        if (items[i]->kind == TE_S_COMMENT)
            continue;
        fill_scan f = {.from = from, .n = nfrom};
        te__stmt_visit(items[i], fill_stmt, NULL, &f);
        if (!f.writes || f.writes_other)
            break;
        p = i + 1;
    }
    if (!p)
        return 0;
    fill_scan all = {.from = from, .n = nfrom}, rest = {.from = from, .n = nfrom};
    for (int i = 0; i < n; i++)
        te__stmt_visit(items[i], fill_stmt, NULL, i < p ? &all : &rest);
    for (int i = 0; i < rest.nwr; i++)
        if (!all.overflow && all.nwr < 64)
            all.wr[all.nwr++] = rest.wr[i];
    if (rest.writes || all.overflow || rest.overflow)
        return 0;
    for (int i = 0; i < nfrom; i++) { /* every doubled buffer is filled */
        bool filled = false;
        for (int j = 0; j < all.nwr; j++)
            filled |= all.wr[j] == from[i];
        if (!filled)
            return 0;
    }
    read_scan r = {&all, false};
    for (int i = 0; i < p && !r.bad; i++)
        te__stmt_visit(items[i], NULL, read_expr, &r);
    return r.bad ? 0 : p;
}

static te_stmt *barrier_stmt(te_ctx *ctx)
{
    te_stmt *b = te__alloc(ctx, sizeof *b);
    if (b)
        b->kind = TE_S_BARRIER;
    return b;
}

/* The prefetching form (file comment) of loop s whose body, under the allocations `keep` of
 * buffers that are not doubled, is `inner`; from/to the doubled buffers. NULL with *skip when
 * the fills cannot move ahead. */
static te_stmt *prefetched(te_ctx *ctx, te_stmt *s, te_stmt *inner, te_buf *const *keep, int nkeep,
                           const te_buf *const *from, te_buf *const *to, int n, bool *skip)
{
    int64_t mn, ext;
    *skip = true;
    if (!te__is_const_int(s->u.loop.min, &mn) || !te__is_const_int(s->u.loop.extent, &ext) ||
        ext < 2)
        return NULL;
    te_stmt *const *items = inner->kind == TE_S_SEQ ? inner->u.seq.v : &inner;
    int ni = inner->kind == TE_S_SEQ ? inner->u.seq.n : 1;
    int p = fill_prefix(items, ni, from, n);
    if (!p || p == ni)
        return NULL;
    *skip = false;
    te_expr *v = s->u.loop.var;
    te_stmt *fill = te__seq(ctx, p, items), *rest = te__seq(ctx, ni - p, items + p);
    if (!fill || !rest)
        return NULL;
    for (int i = 0; i < n; i++) {
        db_ctx d = {(te_buf *)from[i], to[i],
                    te_floormod(ctx, te_sub(ctx, v, s->u.loop.min), te_int(ctx, 2))};
        if (!d.half || !(fill = te__stmt_mutate(ctx, fill, db_stmt, db_expr, &d)) ||
            !(rest = te__stmt_mutate(ctx, rest, db_stmt, db_expr, &d)))
            return NULL;
    }
    te_expr *next = te_add(ctx, v, te_int(ctx, 1));
    te__subst at_next = {1, (const te_expr *[]){v}, (te_expr *[]){next}};
    te__subst at_first = {1, (const te_expr *[]){v}, (te_expr *[]){s->u.loop.min}};
    te_stmt *fill_next = te__stmt_substitute(ctx, fill, &at_next),
            *fill_first = te__stmt_substitute(ctx, fill, &at_first);
    te_expr *more = te_lt(ctx, next, te_int(ctx, mn + ext));
    te_stmt *guarded = fill_next && more ? te__if(ctx, more, fill_next, NULL) : NULL;
    te_stmt *body = guarded ? te__seq2(ctx, guarded, te__seq2(ctx, rest, barrier_stmt(ctx))) : NULL;
    for (int i = nkeep - 1; i >= 0 && body; i--)
        body = te__alloc_stmt(ctx, keep[i], body);
    te_stmt *loop =
        body ? te__for(ctx, v, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, body) : NULL;
    if (!loop || !fill_first)
        return NULL;
    loop->u.loop.thread_tag = s->u.loop.thread_tag;
    te_stmt *r = te__seq2(ctx, fill_first, te__seq2(ctx, barrier_stmt(ctx), loop));
    for (int i = n - 1; i >= 0 && r; i--) {
        to[i]->prefetched = true;
        r = te__alloc_stmt(ctx, to[i], r);
    }
    return r;
}

static te_stmt *db_loops(te_ctx *ctx, te_stmt *s, void *user)
{
    dbp_ctx *p = user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind == TE_FOR_THREAD)
        return s;
    /* Allocations at the top of the loop body: with_attached wraps them around it. */
    const te_buf *from[16];
    te_buf *to[16], *keep[16];
    int n = 0, nkeep = 0;
    te_stmt *a = s->u.loop.body;
    for (; a && a->kind == TE_S_ALLOC && n < 16 && nkeep < 16; a = a->u.alloc.body) {
        te_buf *b = a->u.alloc.buf;
        if (b->scope != TE_SCOPE_SHARED || !b->tensor || b->ndim >= TE_MAX_DIMS ||
            !te__gpu_is_double_buffered(p->sched, b->tensor->name)) {
            keep[nkeep++] = b;
            continue;
        }
        int64_t shape[TE_MAX_DIMS];
        shape[0] = 2;
        memcpy(shape + 1, b->shape, sizeof(int64_t) * (size_t)b->ndim);
        te_buf *nb = te__buf_new(ctx, b->name, b->dtype, b->ndim + 1, shape, b->scope);
        if (!nb)
            return NULL;
        nb->tensor = b->tensor;
        from[n] = b;
        to[n++] = nb;
    }
    if (!n)
        return s;
    if (a && a->kind != TE_S_ALLOC) {
        bool skip = false;
        te_stmt *r = prefetched(ctx, s, a, keep, nkeep, from, to, n, &skip);
        if (r || !skip)
            return r;
    }
    /* Halves only: every access in iteration v uses half (v - min) % 2. */
    te_stmt *body = s->u.loop.body;
    for (int i = 0; i < n; i++) {
        te_expr *rel = te_sub(ctx, s->u.loop.var, s->u.loop.min);
        db_ctx d = {(te_buf *)from[i], to[i], te_floormod(ctx, rel, te_int(ctx, 2))};
        if (!d.half || !(body = te__stmt_mutate(ctx, body, db_stmt, db_expr, &d)))
            return NULL;
    }
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
