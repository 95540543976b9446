/*
 * schedule/passes/promote_registers.c: register promotion (C target).
 *
 * A non-global buffer of at most TE__PROMOTE_MAX elements (not bool) whose every access inside
 * its allocation has a constant flat index, or is a stride-1 ramp of one lane count L at a
 * constant base that is a multiple of L, is marked to live in named variables: its ALLOC
 * statement gets a te__promotion (te/internal.h) saying, per element, whether it is a lane of
 * an L-lane vector variable (chunk i / L) or a scalar variable of its own. A scalar access to
 * an element inside a vector chunk is a lane of that chunk. This keeps a micro-kernel's
 * accumulator tile in registers; the C emitter only prints what the annotation says.
 *
 * Runs last: statement rebuilds drop the annotation.
 */
#include <stdlib.h>
#include <string.h>

#include "schedule/passes.h"

typedef struct access {
    int64_t index; /* constant flat index (vector: base) */
    int lanes;
} access;

typedef struct pscan {
    const te_buf *buf;
    bool ok;
    int lanes;
    access *v;
    int n, cap;
} pscan;

static void pscan_add(pscan *p, int64_t index, int lanes)
{
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        access *v = realloc(p->v, sizeof *v * (size_t)cap);
        if (!v) {
            p->ok = false;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n].index = index;
    p->v[p->n].lanes = lanes;
    p->n++;
}

static void pscan_access(pscan *p, int n, te_expr *const *idx, int lanes)
{
    int64_t c;
    if (!p->ok)
        return;
    if (lanes == 1) {
        if (te__const_flat_index(p->buf, n, idx, &c))
            pscan_add(p, c, 1);
        else
            p->ok = false;
        return;
    }
    const te_expr *ix = idx[0];
    if (n != 1 || ix->kind != TE_E_RAMP || ix->u.ramp.stride != 1 ||
        !te__arith_const_int(ix->u.ramp.base, &c) || (p->lanes && p->lanes != lanes)) {
        p->ok = false;
        return;
    }
    p->lanes = lanes;
    pscan_add(p, c, lanes);
}

static bool pscan_visit(const te_expr *e, void *user)
{
    pscan *p = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == p->buf)
        pscan_access(p, e->u.load.n, e->u.load.idx, e->lanes);
    return p->ok;
}

/* Records the accesses of every store to the scanned buffer; stops once it failed. */
static bool pscan_stmt(const te_stmt *s, void *user)
{
    pscan *p = user;
    if (!p->ok)
        return false;
    if (s->kind == TE_S_STORE && s->u.store.buf == p->buf)
        pscan_access(p, s->u.store.n, s->u.store.idx, s->u.store.value->lanes);
    if (s->kind == TE_S_INTRIN) /* passed by address: stays in memory */
        for (int o = 0; o < s->u.intrin.nops; o++)
            if (s->u.intrin.addr[o]->u.load.buf == p->buf)
                p->ok = false;
    return p->ok;
}

/* The promotion of buffer b allocated around body, or NULL when b stays in memory (or on
 * allocation failure, with *failed). */
static te__promotion *plan(te_ctx *ctx, const te_buf *b, const te_stmt *body, bool *failed)
{
    int64_t size = te__buf_numel(b);
    if (b->scope == TE_SCOPE_GLOBAL || b->dtype == TE_BOOL || size <= 0 || size > TE__PROMOTE_MAX)
        return NULL;
    pscan p = {b, true, 0, NULL, 0, 0};
    te__stmt_visit(body, pscan_stmt, pscan_visit, &p);
    bool ok = p.ok && p.n > 0;
    unsigned char *kind = NULL;
    te__promotion *pr = NULL;
    if (ok && (!(kind = te__alloc(ctx, (size_t)size)) || !(pr = te__alloc(ctx, sizeof *pr)))) {
        ok = false;
        *failed = true;
    }
    for (int i = 0; ok && i < p.n; i++) { /* vector chunks first */
        access a = p.v[i];
        if (a.lanes == 1)
            continue;
        if (a.index < 0 || a.index % a.lanes || a.index + a.lanes > size)
            ok = false;
        else
            memset(kind + a.index, TE_PROMO_LANE, (size_t)a.lanes);
    }
    for (int i = 0; ok && i < p.n; i++) {
        access a = p.v[i];
        if (a.lanes > 1)
            continue;
        if (a.index < 0 || a.index >= size)
            ok = false;
        else if (kind[a.index] == TE_PROMO_UNUSED && p.lanes &&
                 kind[a.index / p.lanes * p.lanes] == TE_PROMO_LANE)
            kind[a.index] = TE_PROMO_LANE; /* lane of a vector chunk */
        else if (kind[a.index] == TE_PROMO_UNUSED)
            kind[a.index] = TE_PROMO_SCALAR;
    }
    free(p.v);
    if (!ok)
        return NULL;
    pr->lanes = p.lanes;
    pr->size = size;
    pr->kind = kind;
    return pr;
}

typedef struct promote {
    te_ctx *ctx;
    bool failed;
} promote;

/* s with its statement children replaced, every other field kept (loop tags, store flags,
 * earlier annotations). */
static te_stmt *rebuild(promote *pm, te_stmt *s)
{
    if (!s || pm->failed)
        return s;
    te_stmt *kids[3] = {NULL, NULL, NULL}, **slot[3] = {NULL, NULL, NULL};
    int nk = 0;
    switch (s->kind) {
    case TE_S_FOR:
        kids[nk++] = s->u.loop.body;
        break;
    case TE_S_IF:
        kids[nk++] = s->u.cond.then_s;
        kids[nk++] = s->u.cond.else_s;
        break;
    case TE_S_ALLOC:
        kids[nk++] = s->u.alloc.body;
        break;
    case TE_S_LET:
        kids[nk++] = s->u.let.body;
        break;
    case TE_S_SEQ: {
        te_stmt **v = NULL;
        for (int i = 0; i < s->u.seq.n; i++) {
            te_stmt *c = rebuild(pm, s->u.seq.v[i]);
            if (pm->failed)
                return NULL;
            if (c != s->u.seq.v[i] && !v) {
                if (!(v = te__alloc(pm->ctx, sizeof *v * (size_t)s->u.seq.n))) {
                    pm->failed = true;
                    return NULL;
                }
                memcpy(v, s->u.seq.v, sizeof *v * (size_t)s->u.seq.n);
            }
            if (v)
                v[i] = c;
        }
        if (!v)
            return s;
        te_stmt *r = te__alloc(pm->ctx, sizeof *r);
        if (!r) {
            pm->failed = true;
            return NULL;
        }
        *r = *s;
        r->u.seq.v = v;
        return r;
    }
    default:
        return s;
    }
    bool changed = false;
    te_stmt *nkids[3];
    for (int i = 0; i < nk; i++) {
        nkids[i] = rebuild(pm, kids[i]);
        if (pm->failed)
            return NULL;
        changed |= nkids[i] != kids[i];
    }
    const te__promotion *pr = NULL;
    if (s->kind == TE_S_ALLOC && !s->u.alloc.promote &&
        !(pr = plan(pm->ctx, s->u.alloc.buf, nkids[0], &pm->failed)) && pm->failed)
        return NULL;
    if (!changed && !pr)
        return s;
    te_stmt *r = te__alloc(pm->ctx, sizeof *r);
    if (!r) {
        pm->failed = true;
        return NULL;
    }
    *r = *s;
    switch (s->kind) {
    case TE_S_FOR:
        slot[0] = &r->u.loop.body;
        break;
    case TE_S_IF:
        slot[0] = &r->u.cond.then_s, slot[1] = &r->u.cond.else_s;
        break;
    case TE_S_ALLOC:
        slot[0] = &r->u.alloc.body;
        if (pr)
            r->u.alloc.promote = pr;
        break;
    case TE_S_LET:
        slot[0] = &r->u.let.body;
        break;
    default:
        break;
    }
    for (int i = 0; i < nk; i++)
        *slot[i] = nkids[i];
    return r;
}

te_stmt *te__pass_promote_registers(const te__pass_ctx *pc, te_stmt *s)
{
    promote pm = {pc->ctx, false};
    te_stmt *r = rebuild(&pm, s);
    if (pm.failed) {
        if (te_ctx_errcode(pc->ctx) == TE_OK)
            te_ctx_set_error(pc->ctx, TE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return r;
}
