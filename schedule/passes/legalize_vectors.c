/*
 * schedule/passes/legalize_vectors.c: vector width legalization (C target).
 *
 * GCC keeps a generic vector wider than the machine's registers (te_f32x32 on AVX-512) in
 * memory, so a micro-kernel's accumulators would live on the stack. Every store and let of more
 * than W lanes (W = vector register bits / 32), when its lane count is a multiple of W, is split
 * into W-lane parts: lanes [lo, lo + W) of RAMP(b, s, L) are RAMP(b + lo s, s, W), a broadcast
 * narrows, every other vector expression is sliced operand by operand, and a vector let becomes
 * one let per part (<var>_0, <var>_1, ...) whose uses take the matching part.
 */
#include <stdio.h>

#include "schedule/passes.h"

#define MAX_SPLIT 64

typedef struct legal {
    te_ctx *ctx;
    int width;
    bool failed;
    int nsplit;
    const te_expr *from[MAX_SPLIT]; /* vector let variables that were split */
    te_expr **parts[MAX_SPLIT];
} legal;

static void fail(legal *lg, const char *what, int detail)
{
    if (!lg->failed && te_ctx_errcode(lg->ctx) == TE_OK)
        te_ctx_set_error(lg->ctx, TE_ERR_INTERNAL, "%s %d", what, detail);
    lg->failed = true;
}

/* Lanes [lo, lo + n) of e. */
static te_expr *slice(legal *lg, te_expr *e, int lo, int n)
{
    te_ctx *ctx = lg->ctx;
    if (!e || e->lanes == 1)
        return e;
    te_expr *r = NULL;
    int64_t c;
    switch (e->kind) {
    case TE_E_RAMP: {
        te_expr *base = e->u.ramp.base;
        int64_t off = (int64_t)lo * e->u.ramp.stride;
        int64_t k;
        if (off && te__arith_const_int(base, &c) && base->dtype == TE_I64)
            base = te_int(ctx, c + off);
        else if (off && base->kind == TE_E_BINARY && base->u.bin.op == TE_ADD &&
                 base->dtype == TE_I64 && te__arith_const_int(base->u.bin.b, &k))
            base = te_add(ctx, base->u.bin.a, te_int(ctx, k + off)); /* x + 32 + 16 -> x + 48 */
        else if (off)
            base = te_add(ctx, base, te_int(ctx, off));
        return base ? te__ramp(ctx, base, e->u.ramp.stride, n) : NULL;
    }
    case TE_E_BCAST:
        return te__bcast(ctx, e->u.un.a, n);
    case TE_E_VAR:
        /* innermost binding first: an unrolled loop binds one let variable once per copy,
         * each copy's let nested in the previous one's body */
        for (int i = lg->nsplit - 1; i >= 0; i--)
            if (lg->from[i] == e)
                return lg->parts[i][lo / n];
        fail(lg, "no parts for a split vector variable of lanes", e->lanes);
        return NULL;
    default:
        break;
    }
    if (!(r = te__alloc(ctx, sizeof *r)))
        return NULL;
    *r = *e;
    r->lanes = n;
    switch (e->kind) {
    case TE_E_BINARY:
        r->u.bin.a = slice(lg, e->u.bin.a, lo, n);
        r->u.bin.b = slice(lg, e->u.bin.b, lo, n);
        return r->u.bin.a && r->u.bin.b ? r : NULL;
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
        r->u.un.a = slice(lg, e->u.un.a, lo, n);
        return r->u.un.a ? r : NULL;
    case TE_E_SELECT:
    case TE_E_IF:
        r->u.sel.c = slice(lg, e->u.sel.c, lo, n);
        r->u.sel.t = slice(lg, e->u.sel.t, lo, n);
        r->u.sel.f = slice(lg, e->u.sel.f, lo, n);
        return r->u.sel.c && r->u.sel.t && r->u.sel.f ? r : NULL;
    case TE_E_CALL:
        for (int i = 0; i < e->u.call.n; i++)
            if (!(r->u.call.args[i] = slice(lg, e->u.call.args[i], lo, n)))
                return NULL;
        return r;
    case TE_E_LOAD: {
        te_expr **idx = te__alloc(ctx, sizeof(te_expr *) * (size_t)e->u.load.n);
        if (!idx)
            return NULL;
        for (int i = 0; i < e->u.load.n; i++)
            if (!(idx[i] = slice(lg, e->u.load.idx[i], lo, n)))
                return NULL;
        r->u.load.idx = idx;
        return r;
    }
    default:
        fail(lg, "cannot split a vector expression of kind", e->kind);
        return NULL;
    }
}

static te_stmt *legalize(legal *lg, te_stmt *s);

static te_stmt *legalize_store(legal *lg, te_stmt *s)
{
    te_ctx *ctx = lg->ctx;
    int lanes = s->u.store.value->lanes;
    for (int i = 0; i < s->u.store.n; i++)
        if (s->u.store.idx[i]->lanes > lanes)
            lanes = s->u.store.idx[i]->lanes;
    if (lanes <= lg->width || lanes % lg->width)
        return s;
    te_stmt *seq = NULL;
    for (int lo = 0; lo < lanes; lo += lg->width) {
        te_expr *idx[TE_MAX_DIMS];
        for (int i = 0; i < s->u.store.n; i++)
            if (!(idx[i] = slice(lg, s->u.store.idx[i], lo, lg->width)))
                return NULL;
        te_expr *v = slice(lg, s->u.store.value, lo, lg->width);
        te_stmt *p = v ? te__store(ctx, s->u.store.buf, s->u.store.n, idx, v) : NULL;
        if (!p)
            return NULL;
        p->u.store.nontemporal = s->u.store.nontemporal;
        seq = te__seq2(ctx, seq, p);
    }
    return seq;
}

static te_stmt *legalize_let(legal *lg, te_stmt *s)
{
    te_ctx *ctx = lg->ctx;
    te_expr *var = s->u.let.var, *val = s->u.let.value;
    int lanes = val->lanes;
    if (lanes <= lg->width || lanes % lg->width || lg->nsplit == MAX_SPLIT) {
        te_stmt *b = legalize(lg, s->u.let.body);
        return b ? te__let(ctx, var, val, b) : NULL;
    }
    int np = lanes / lg->width;
    te_expr **parts = te__alloc(ctx, sizeof(te_expr *) * (size_t)np);
    te_expr **vals = te__alloc(ctx, sizeof(te_expr *) * (size_t)np);
    if (!parts || !vals)
        return NULL;
    for (int k = 0; k < np; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s_%d", var->u.var.name, k);
        te_expr *pv = te__alloc(ctx, sizeof *pv);
        if (!pv || !(vals[k] = slice(lg, val, k * lg->width, lg->width)))
            return NULL;
        *pv = *var;
        pv->u.var.name = te__strdup(ctx, name);
        pv->u.var.id = te__next_id(ctx);
        pv->lanes = lg->width;
        parts[k] = pv;
    }
    int mark = lg->nsplit;
    lg->from[lg->nsplit] = var;
    lg->parts[lg->nsplit] = parts;
    lg->nsplit++;
    te_stmt *b = legalize(lg, s->u.let.body);
    lg->nsplit = mark; /* the parts are out of scope after the let's body */
    for (int k = np - 1; b && k >= 0; k--)
        b = te__let(ctx, parts[k], vals[k], b);
    return b;
}

static te_stmt *legalize(legal *lg, te_stmt *s)
{
    te_ctx *ctx = lg->ctx;
    if (!s || lg->failed)
        return NULL;
    switch (s->kind) {
    case TE_S_FOR: {
        te_stmt *b = legalize(lg, s->u.loop.body);
        te_stmt *r =
            b ? te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, b)
              : NULL;
        if (r)
            r->u.loop.thread_tag = s->u.loop.thread_tag;
        return r;
    }
    case TE_S_SEQ: {
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(s->u.seq.n ? s->u.seq.n : 1));
        if (!v)
            return NULL;
        for (int i = 0; i < s->u.seq.n; i++)
            if (!(v[i] = legalize(lg, s->u.seq.v[i])))
                return NULL;
        return te__seq(ctx, s->u.seq.n, v);
    }
    case TE_S_IF: {
        te_stmt *t = legalize(lg, s->u.cond.then_s);
        te_stmt *e = s->u.cond.else_s ? legalize(lg, s->u.cond.else_s) : NULL;
        if (!t || (s->u.cond.else_s && !e))
            return NULL;
        return te__if(ctx, s->u.cond.cond, t, e);
    }
    case TE_S_STORE:
        return legalize_store(lg, s);
    case TE_S_ALLOC: {
        te_stmt *b = legalize(lg, s->u.alloc.body);
        return b ? te__alloc_stmt(ctx, s->u.alloc.buf, b) : NULL;
    }
    case TE_S_LET:
        return legalize_let(lg, s);
    case TE_S_BARRIER:
    case TE_S_COMMENT:
    case TE_S_INTRIN: /* scalar addresses */
        return s;
    }
    return s;
}

int te__vector_width_lanes(const te_target *target)
{
    return (target && target->vector_bits >= 128 ? target->vector_bits : 512) / 32;
}

te_stmt *te__pass_legalize_vectors(const te__pass_ctx *pc, te_stmt *s)
{
    legal lg = {.ctx = pc->ctx, .width = te__vector_width_lanes(pc->target)};
    te_stmt *r = legalize(&lg, s);
    if (!r && te_ctx_errcode(pc->ctx) == TE_OK)
        te_ctx_set_error(pc->ctx, TE_ERR_NOMEM, "out of memory splitting wide vectors");
    return r;
}
