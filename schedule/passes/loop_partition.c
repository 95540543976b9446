/*
 * Loop partitioning: removes the guards that non-divisible splits and padding put in hot
 * loops.
 *
 * For a loop `for v in [m, M]` (constant bounds) the pass looks at every IF in its body, and
 * at the condition of every if_then_else expression (padding reads, stencil borders), directly
 * or inside nested loops of known range, and at each conjunct of the condition that
 * is a comparison linear in v: `a*v + rest < 0` (or <=, >, >=), where rest depends on inner
 * loop variables and outer ones. Over the ranges of those variables the conjunct holds for
 * every iteration in an interval of v (a prefix when a > 0, a suffix when a < 0). The
 * intersection of those intervals is the clean part [lo, hi]; the loop becomes up to three
 * loops, [m, lo-1], [lo, hi], [hi+1, M], each simplified with its own range, so the middle one
 * loses the guards and the others keep what they still need. The pieces are then partitioned
 * again further in.
 *
 *     for i_o in [0,4): for i_i in [0,32): if (i_o*32 + i_i < 100) body
 *  -> for i_o in [0,3): for i_i in [0,32): body
 *     for i_i in [0,4): body[i_o := 3]        (the simplifier tightens the tail loop)
 */
#include "schedule/passes.h"

/* simplify.c: simplifies s under the ranges of enclosing loops; NULL when s vanishes or on
 * error (*failed). */

/* Upper bound on the loops one call may split, so nested guards cannot blow code up. */
#define MAX_SPLITS 256

typedef struct lp {
    te_ctx *ctx;
    te__range_map ranges;
    bool failed;
    int splits;
} lp;

static bool push_range(lp *p, const te_expr *v, int64_t lo, int64_t hi)
{
    if (te__ranges_push(p->ctx, &p->ranges, v, lo, hi) != TE_OK) {
        p->failed = true;
        return false;
    }
    return true;
}

/* Constant range [lo, hi] of a loop's variable under the current ranges. */
static bool loop_range(lp *p, const te_stmt *s, int64_t *lo, int64_t *hi)
{
    int64_t mlo, mhi, elo, ehi;
    if (!te__expr_const_bounds(s->u.loop.min, &p->ranges, &mlo, &mhi) ||
        !te__expr_const_bounds(s->u.loop.extent, &p->ranges, &elo, &ehi) || ehi < 1)
        return false;
    if (__builtin_add_overflow(mhi, ehi - 1, hi))
        return false;
    *lo = mlo;
    return true;
}

/* For a comparison `A op B` linear in v, narrows [*tlo, *thi] to the values of v for which it
 * holds whatever the other variables are (within their ranges). Returns false when the
 * conjunct does not mention v or has another shape. */
static bool conjunct_interval(lp *p, te_expr *c, const te_expr *v, int64_t *tlo, int64_t *thi)
{
    te_ctx *ctx = p->ctx;
    if (c->kind != TE_E_BINARY || c->lanes != 1 || c->u.bin.a->dtype != TE_I64)
        return false;
    te_binop op = c->u.bin.op;
    if (op != TE_LT && op != TE_LE && op != TE_GT && op != TE_GE)
        return false;
    if (!te__expr_uses_var(c, v))
        return false;
    te_expr *d = te__simplify_expr(ctx, te_sub(ctx, c->u.bin.a, c->u.bin.b), NULL);
    if (!d)
        return false;
    /* d = a*v + rest with rest free of v: check by rebuilding. */
    te_expr *one = te_int(ctx, 1), *zero = te_int(ctx, 0);
    te_expr *vp1 = te_add(ctx, (te_expr *)v, one);
    te__subst m1 = {1, (const te_expr *[]){v}, (te_expr *[]){vp1}};
    te__subst m0 = {1, (const te_expr *[]){v}, (te_expr *[]){zero}};
    te_expr *ae = te__simplify_expr(ctx, te_sub(ctx, te__substitute(ctx, d, &m1), d), NULL);
    te_expr *rest = te__simplify_expr(ctx, te__substitute(ctx, d, &m0), NULL);
    int64_t a, rlo, rhi;
    if (!ae || !rest || !te__is_const_int(ae, &a) || a == 0 || te__expr_uses_var(rest, v))
        return false;
    te_expr *chk = te__simplify_expr(
        ctx, te_sub(ctx, d, te_add(ctx, te_mul(ctx, (te_expr *)v, te_int(ctx, a)), rest)), NULL);
    if (!chk || !te__is_const_int(chk, &rlo) || rlo != 0)
        return false;
    if (!te__expr_const_bounds(rest, &p->ranges, &rlo, &rhi))
        return false;
    /* Bring to a*v + R < 0 with R <= Rhi. */
    int64_t Rhi;
    if (rlo < -(INT64_C(1) << 60) || rhi > (INT64_C(1) << 60) || a < -(INT64_C(1) << 60) ||
        a > (INT64_C(1) << 60))
        return false;
    switch (op) {
    case TE_LT:
        Rhi = rhi;
        break;
    case TE_LE:
        Rhi = rhi - 1;
        break;
    case TE_GT:
        a = -a, Rhi = -rlo;
        break;
    default:
        a = -a, Rhi = -rlo - 1;
        break; /* GE */
    }
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (a > 0)
        hi = -te__arith_floordiv(Rhi, a) - 1; /* ceil(-Rhi / a) - 1; |Rhi|, |a| <= 2^60 */
    else
        lo = te__arith_floordiv(Rhi, -a) + 1;
    *tlo = lo > *tlo ? lo : *tlo;
    *thi = hi < *thi ? hi : *thi;
    return true;
}

static void cond_interval(lp *p, te_expr *c, const te_expr *v, int64_t *tlo, int64_t *thi,
                          bool *found)
{
    if (c->kind == TE_E_BINARY && c->u.bin.op == TE_AND) {
        cond_interval(p, c->u.bin.a, v, tlo, thi, found);
        cond_interval(p, c->u.bin.b, v, tlo, thi, found);
        return;
    }
    if (conjunct_interval(p, c, v, tlo, thi))
        *found = true;
}

/* The guards of if_then_else expressions (padding reads, stencil borders) count like those of
 * if statements: where they provably hold the simplifier drops them, so the interior piece
 * reads without guards (and vectorizes to plain loads). */
typedef struct ite_guards {
    lp *p;
    const te_expr *v;
    int64_t *tlo, *thi;
    bool *found;
} ite_guards;

static bool ite_visit(const te_expr *e, void *user)
{
    ite_guards *g = user;
    if (e->kind == TE_E_IF && e->lanes == 1)
        cond_interval(g->p, e->u.sel.c, g->v, g->tlo, g->thi, g->found);
    return true;
}

static void expr_guards(lp *p, const te_expr *e, const te_expr *v, int64_t *tlo, int64_t *thi,
                        bool *found)
{
    ite_guards g = {p, v, tlo, thi, found};
    te__expr_visit(e, ite_visit, &g);
}

/* Walks the body of v's loop and intersects the clean intervals of every guard on v. */
static void guards(lp *p, te_stmt *s, const te_expr *v, int64_t *tlo, int64_t *thi, bool *found)
{
    if (!s || p->failed)
        return;
    switch (s->kind) {
    case TE_S_FOR: {
        int64_t lo, hi;
        if (!loop_range(p, s, &lo, &hi) || !push_range(p, s->u.loop.var, lo, hi))
            return;
        guards(p, s->u.loop.body, v, tlo, thi, found);
        te__ranges_pop(&p->ranges);
        break;
    }
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            guards(p, s->u.seq.v[i], v, tlo, thi, found);
        break;
    case TE_S_STORE:
        for (int i = 0; i < s->u.store.n; i++)
            expr_guards(p, s->u.store.idx[i], v, tlo, thi, found);
        expr_guards(p, s->u.store.value, v, tlo, thi, found);
        break;
    case TE_S_IF:
        cond_interval(p, s->u.cond.cond, v, tlo, thi, found);
        guards(p, s->u.cond.then_s, v, tlo, thi, found);
        guards(p, s->u.cond.else_s, v, tlo, thi, found);
        break;
    case TE_S_LET: {
        int64_t lo, hi;
        bool have = te_dtype_is_int(s->u.let.value->dtype) &&
                    te__expr_const_bounds(s->u.let.value, &p->ranges, &lo, &hi);
        expr_guards(p, s->u.let.value, v, tlo, thi, found);
        if (have && !push_range(p, s->u.let.var, lo, hi))
            return;
        guards(p, s->u.let.body, v, tlo, thi, found);
        if (have)
            te__ranges_pop(&p->ranges);
        break;
    }
    case TE_S_ALLOC:
        guards(p, s->u.alloc.body, v, tlo, thi, found);
        break;
    default:
        break;
    }
}

static te_stmt *part(lp *p, te_stmt *s);

/* One piece [lo, hi] of a split loop, simplified under its own range and then partitioned
 * further in. */
static te_stmt *piece(lp *p, te_stmt *loop, int64_t lo, int64_t hi)
{
    te_ctx *ctx = p->ctx;
    te_stmt *f = te__for(ctx, loop->u.loop.var, te_int(ctx, lo), te_int(ctx, hi - lo + 1),
                         loop->u.loop.fkind, loop->u.loop.body);
    if (!f) {
        p->failed = true;
        return NULL;
    }
    f->u.loop.thread_tag = loop->u.loop.thread_tag;
    bool failed = false;
    te_stmt *r = te__simplify_stmt_in(ctx, f, &p->ranges, &failed);
    if (failed) {
        p->failed = true;
        return NULL;
    }
    return r ? part(p, r) : NULL;
}

static te_stmt *part_for(lp *p, te_stmt *s)
{
    te_ctx *ctx = p->ctx;
    int64_t m = 0, M = 0;
    bool known = loop_range(p, s, &m, &M);
    te_for_kind k = s->u.loop.fkind;
    bool const_bounds =
        te__is_const_int(s->u.loop.min, NULL) && te__is_const_int(s->u.loop.extent, NULL);
    if (known && const_bounds && k != TE_FOR_THREAD && k != TE_FOR_VTHREAD &&
        k != TE_FOR_VECTORIZED && p->splits < MAX_SPLITS) {
        int64_t tlo = INT64_MIN, thi = INT64_MAX;
        bool found = false;
        guards(p, s->u.loop.body, s->u.loop.var, &tlo, &thi, &found);
        if (p->failed)
            return NULL;
        int64_t clo = tlo > m ? tlo : m, chi = thi < M ? thi : M;
        if (found && clo <= chi && (clo > m || chi < M)) {
            p->splits++;
            te_stmt *v[3] = {NULL, NULL, NULL};
            if (clo > m)
                v[0] = piece(p, s, m, clo - 1);
            v[1] = p->failed ? NULL : piece(p, s, clo, chi);
            if (chi < M && !p->failed)
                v[2] = piece(p, s, chi + 1, M);
            if (p->failed)
                return NULL;
            if (!v[0] && !v[1] && !v[2])
                return NULL;
            te_stmt *r = te__seq(ctx, 3, v);
            if (!r)
                p->failed = true;
            return r;
        }
    }
    /* Not split here: partition further in. */
    bool pushed = known && push_range(p, s->u.loop.var, m, M);
    if (p->failed)
        return NULL;
    te_stmt *b = part(p, s->u.loop.body);
    if (pushed)
        te__ranges_pop(&p->ranges);
    if (p->failed || !b)
        return NULL;
    if (b == s->u.loop.body)
        return s;
    te_stmt *r = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, k, b);
    if (!r) {
        p->failed = true;
        return NULL;
    }
    r->u.loop.thread_tag = s->u.loop.thread_tag;
    return r;
}

static te_stmt *part_child(void *user, te_stmt *s);

static te_stmt *part(lp *p, te_stmt *s)
{
    te_ctx *ctx = p->ctx;
    if (!s || p->failed)
        return NULL;
    te_stmt *r = s;
    switch (s->kind) {
    case TE_S_FOR:
        return part_for(p, s);
    case TE_S_LET: {
        int64_t lo, hi;
        bool have = te_dtype_is_int(s->u.let.value->dtype) &&
                    te__expr_const_bounds(s->u.let.value, &p->ranges, &lo, &hi);
        if (have && !push_range(p, s->u.let.var, lo, hi))
            return NULL;
        te_stmt *b = part(p, s->u.let.body);
        if (have)
            te__ranges_pop(&p->ranges);
        if (p->failed || !b)
            return NULL;
        if (b == s->u.let.body)
            return s;
        r = te__let(ctx, s->u.let.var, s->u.let.value, b);
        break;
    }
    default:
        return te__stmt_map_children(ctx, s, part_child, p, &p->failed);
    }
    if (!r)
        p->failed = true;
    return r;
}

static te_stmt *part_child(void *user, te_stmt *s) { return part(user, s); }

te_stmt *te__pass_loop_partition(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    lp p = {ctx, {0, 0, NULL, NULL, NULL}, false, 0};
    te_stmt *r = part(&p, s);
    if (p.failed) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_INTERNAL, "loop partition: could not rebuild a loop");
        return NULL;
    }
    return r ? r : te__seq(ctx, 0, NULL);
}
