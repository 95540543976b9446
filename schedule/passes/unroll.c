/*
 * Unrolling: each TE_FOR_UNROLLED loop of constant extent (at most MAX_UNROLL) becomes a
 * sequence of copies of its body with the loop variable replaced by min + k, each copy
 * simplified under the ranges of the enclosing loops (so `i*4 + k` becomes `i*4 + 2` and guards
 * that a copy makes decidable disappear). Inner loops are unrolled first. An unrolled loop
 * whose extent is not a constant, or too large, is left as a serial loop.
 */
#include "schedule/passes.h"

/* simplify.c: simplifies s under the ranges of enclosing loops; NULL when s vanishes or on
 * error (*failed). */

/* Same limit as te_unroll's contract. */
#define MAX_UNROLL 1024

typedef struct ur {
    te_ctx *ctx;
    te__range_map ranges;
    bool failed;
} ur;

static te_stmt *unroll(ur *u, te_stmt *s);

static te_stmt *unroll_for(ur *u, te_stmt *s)
{
    te_ctx *ctx = u->ctx;
    te_expr *mn = te__simplify_expr(ctx, s->u.loop.min, &u->ranges);
    te_expr *ex = te__simplify_expr(ctx, s->u.loop.extent, &u->ranges);
    if (!mn || !ex) {
        u->failed = true;
        return NULL;
    }
    int64_t cmin = 0, cext = 0;
    bool cst = te__is_const_int(mn, &cmin) && te__is_const_int(ex, &cext);
    int64_t lo = 0, hi = 0, mlo, mhi, elo, ehi;
    bool have = false;
    if (te__expr_const_bounds(mn, &u->ranges, &mlo, &mhi) &&
        te__expr_const_bounds(ex, &u->ranges, &elo, &ehi) && ehi >= 1 &&
        !__builtin_add_overflow(mhi, ehi - 1, &hi)) {
        lo = mlo;
        have = true;
    }
    if (have && te__ranges_push(ctx, &u->ranges, s->u.loop.var, lo, hi) != TE_OK) {
        u->failed = true;
        return NULL;
    }
    te_stmt *body = unroll(u, s->u.loop.body);
    if (have)
        te__ranges_pop(&u->ranges);
    if (u->failed || !body)
        return NULL;
    te_for_kind kind = s->u.loop.fkind;
    if (kind == TE_FOR_UNROLLED && cst && cext <= 0)
        return NULL;
    if (kind == TE_FOR_UNROLLED && cst && cext <= MAX_UNROLL) {
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)cext);
        if (!v) {
            u->failed = true;
            return NULL;
        }
        int n = 0;
        for (int64_t k = 0; k < cext; k++) {
            te_expr *val = te_int(ctx, cmin + k);
            te__subst m = {1, (const te_expr *[]){s->u.loop.var}, (te_expr *[]){val}};
            te_stmt *copy = val ? te__stmt_substitute(ctx, body, &m) : NULL;
            bool failed = !copy;
            copy = copy ? te__simplify_stmt_in(ctx, copy, &u->ranges, &failed) : NULL;
            if (failed) {
                u->failed = true;
                return NULL;
            }
            if (copy)
                v[n++] = copy;
        }
        if (n == 0)
            return NULL;
        te_stmt *r = te__seq(ctx, n, v);
        if (!r)
            u->failed = true;
        return r;
    }
    if (kind == TE_FOR_UNROLLED)
        kind = TE_FOR_SERIAL; /* cannot unroll: run it as a plain loop */
    if (kind == s->u.loop.fkind && mn == s->u.loop.min && ex == s->u.loop.extent &&
        body == s->u.loop.body)
        return s;
    te_stmt *r = te__for(ctx, s->u.loop.var, mn, ex, kind, body);
    if (!r) {
        u->failed = true;
        return NULL;
    }
    r->u.loop.thread_tag = s->u.loop.thread_tag;
    return r;
}

static te_stmt *unroll_child(void *user, te_stmt *s);

static te_stmt *unroll(ur *u, te_stmt *s)
{
    if (!s || u->failed)
        return NULL;
    if (s->kind == TE_S_FOR)
        return unroll_for(u, s);
    return te__stmt_map_children(u->ctx, s, unroll_child, u, &u->failed);
}

static te_stmt *unroll_child(void *user, te_stmt *s) { return unroll(user, s); }

te_stmt *te__pass_unroll(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    ur u = {ctx, {0, 0, NULL, NULL, NULL}, false};
    te_stmt *r = unroll(&u, s);
    if (u.failed) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_INTERNAL, "unroll: could not rebuild a loop");
        return NULL;
    }
    return r ? r : te__seq(ctx, 0, NULL);
}
