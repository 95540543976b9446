/*
 * The simplify pass: walks statements with the ranges of the enclosing loops, simplifies every
 * expression with the arithmetic library (te/arith.h: te__simplify_expr), and removes what
 * becomes trivial: loops of extent 1 (substituting their min) or <= 0, ifs whose condition is
 * decided, loops tightened to the range a guard allows, dead code.
 */
#include "schedule/passes.h"

static bool is_cmp(te_binop op) { return op >= TE_EQ && op <= TE_GE; }

static te_binop flip_cmp(te_binop op)
{
    switch (op) {
    case TE_LT:
        return TE_GT;
    case TE_LE:
        return TE_GE;
    case TE_GT:
        return TE_LT;
    case TE_GE:
        return TE_LE;
    default:
        return op;
    }
}

/* ---- Statements -------------------------------------------------------------------------- */

typedef struct walk {
    te_ctx *ctx;
    te__range_map ranges;
    bool failed;
} walk;

static te_stmt *simp_stmt(walk *w, te_stmt *s);

static te_expr *sx(walk *w, te_expr *e)
{
    te_expr *r = te__simplify_expr(w->ctx, e, &w->ranges);
    if (!r)
        w->failed = true;
    return r;
}

static bool push(walk *w, const te_expr *v, int64_t lo, int64_t hi)
{
    if (te__ranges_push(w->ctx, &w->ranges, v, lo, hi) != TE_OK) {
        w->failed = true;
        return false;
    }
    return true;
}

/* The interval of values of v for which `a op b` holds, when a - b is linear in v alone
 * (k*v + c). Returns false when the comparison has another shape. */
static bool cmp_interval(const te_expr *cond, const te_expr *v, int64_t *lo, int64_t *hi)
{
    int64_t k, c;
    if (cond->kind != TE_E_BINARY || !is_cmp(cond->u.bin.op) || cond->u.bin.a->dtype != TE_I64 ||
        cond->lanes != 1 || !te__arith_linear_in_var(cond->u.bin.a, cond->u.bin.b, v, &k, &c) ||
        k == 0)
        return false;
    te_binop op = cond->u.bin.op;
    if (k < 0) {
        if (k == INT64_MIN || c == INT64_MIN)
            return false;
        k = -k, c = -c, op = flip_cmp(op);
    }
    /* k*v + c op 0 with k > 0, so v op -c/k. */
    if (c == INT64_MIN)
        return false;
    int64_t nc = -c, q = te__arith_floordiv(nc, k), ceil = q + (te__arith_floormod(nc, k) != 0);
    *lo = INT64_MIN, *hi = INT64_MAX;
    switch (op) {
    case TE_LT:
        *hi = ceil - 1; /* ceil >= INT64_MIN / k + 1 > INT64_MIN */
        break;
    case TE_LE:
        *hi = q;
        break;
    case TE_GT:
        if (q == INT64_MAX)
            return false;
        *lo = q + 1;
        break;
    case TE_GE:
        *lo = ceil;
        break;
    case TE_EQ:
        if (q != ceil)
            *lo = 1, *hi = 0;
        else
            *lo = *hi = q;
        break;
    default:
        return false;
    }
    return true;
}

/* Intersects [*lo, *hi] with the interval of v on which every conjunct of cond that is a
 * comparison of v alone holds. Returns whether any conjunct narrowed it. */
static bool cond_interval(const te_expr *cond, const te_expr *v, int64_t *lo, int64_t *hi)
{
    if (cond->kind == TE_E_BINARY && cond->u.bin.op == TE_AND) {
        bool a = cond_interval(cond->u.bin.a, v, lo, hi);
        bool b = cond_interval(cond->u.bin.b, v, lo, hi);
        return a || b;
    }
    int64_t l, h;
    if (!cmp_interval(cond, v, &l, &h))
        return false;
    bool changed = l > *lo || h < *hi;
    *lo = l > *lo ? l : *lo;
    *hi = h < *hi ? h : *hi;
    return changed;
}

static te_stmt *simp_for(walk *w, te_stmt *s)
{
    te_ctx *ctx = w->ctx;
    te_expr *mn = sx(w, s->u.loop.min), *ex = sx(w, s->u.loop.extent);
    if (!mn || !ex)
        return NULL;
    te_expr *var = s->u.loop.var;
    int64_t cmin, cext;
    bool cst = te__is_const_int(mn, &cmin) && te__is_const_int(ex, &cext);
    bool thread = s->u.loop.fkind == TE_FOR_THREAD;
    if (cst && cext <= 0)
        return NULL;
    if (cst && cext == 1 && !thread) {
        te__subst m = {1, (const te_expr *[]){var}, (te_expr *[]){mn}};
        te_stmt *b = te__stmt_substitute(ctx, s->u.loop.body, &m);
        if (!b) {
            w->failed = true;
            return NULL;
        }
        return simp_stmt(w, b);
    }
    int64_t lo = 0, hi = 0;
    bool have = false;
    if (cst) {
        have = !__builtin_add_overflow(cmin, cext - 1, &hi);
        lo = cmin;
    } else {
        int64_t mlo, mhi, ehi;
        if (te__expr_const_bounds(mn, &w->ranges, &mlo, &mhi) &&
            te__expr_const_bounds(ex, &w->ranges, NULL, &ehi) &&
            !__builtin_add_overflow(mhi, ehi - 1, &hi)) {
            lo = mlo;
            have = true;
        }
    }
    if (have && !push(w, var, lo, hi))
        return NULL;
    te_stmt *b = simp_stmt(w, s->u.loop.body);
    if (have)
        te__ranges_pop(&w->ranges);
    if (!b || w->failed)
        return NULL;
    /* Tightening: `for v in [lo, hi]: if (v < c) body` runs v over [lo, min(hi, c-1)]. */
    if (cst && !thread && b->kind == TE_S_IF && !b->u.cond.else_s) {
        int64_t tlo = lo, thi = hi;
        if (cond_interval(b->u.cond.cond, var, &tlo, &thi)) {
            if (tlo > thi)
                return NULL;
            te_stmt *n =
                te__for(ctx, var, te_int(ctx, tlo), te_int(ctx, thi - tlo + 1), s->u.loop.fkind, b);
            if (!n) {
                w->failed = true;
                return NULL;
            }
            n->u.loop.thread_tag = s->u.loop.thread_tag;
            return simp_stmt(w, n);
        }
    }
    if (mn == s->u.loop.min && ex == s->u.loop.extent && b == s->u.loop.body)
        return s;
    te_stmt *r = te__for(ctx, var, mn, ex, s->u.loop.fkind, b);
    if (!r) {
        w->failed = true;
        return NULL;
    }
    r->u.loop.thread_tag = s->u.loop.thread_tag;
    return r;
}

/* Pushes the ranges that a condition implies for variables with known ranges (conjuncts
 * `v op const`). Returns how many were pushed. */
static int push_cond_ranges(walk *w, const te_expr *cond)
{
    if (cond->kind == TE_E_BINARY && cond->u.bin.op == TE_AND)
        return push_cond_ranges(w, cond->u.bin.a) + push_cond_ranges(w, cond->u.bin.b);
    if (cond->kind != TE_E_BINARY || !is_cmp(cond->u.bin.op))
        return 0;
    const te_expr *v = cond->u.bin.a;
    int64_t lo, hi, clo, chi;
    if (v->kind != TE_E_VAR || !te__ranges_lookup(&w->ranges, v, &lo, &hi) ||
        !cmp_interval(cond, v, &clo, &chi))
        return 0;
    lo = clo > lo ? clo : lo;
    hi = chi < hi ? chi : hi;
    if (lo > hi) /* unreachable branch: keep the ranges as they were */
        return 0;
    return push(w, v, lo, hi) ? 1 : 0;
}

static te_stmt *simp_stmt(walk *w, te_stmt *s)
{
    te_ctx *ctx = w->ctx;
    if (!s || w->failed)
        return NULL;
    switch (s->kind) {
    case TE_S_FOR:
        return simp_for(w, s);
    case TE_S_SEQ: {
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(s->u.seq.n ? s->u.seq.n : 1));
        if (!v) {
            w->failed = true;
            return NULL;
        }
        int n = 0;
        bool changed = false;
        for (int i = 0; i < s->u.seq.n; i++) {
            te_stmt *c = simp_stmt(w, s->u.seq.v[i]);
            if (w->failed)
                return NULL;
            changed |= c != s->u.seq.v[i];
            if (c)
                v[n++] = c;
        }
        if (n == 0)
            return NULL;
        if (!changed)
            return s;
        te_stmt *r = te__seq(ctx, n, v);
        if (!r)
            w->failed = true;
        return r;
    }
    case TE_S_IF: {
        te_expr *c = sx(w, s->u.cond.cond);
        if (!c)
            return NULL;
        if (c->kind == TE_E_INT && c->lanes == 1)
            return simp_stmt(w, c->u.i ? s->u.cond.then_s : s->u.cond.else_s);
        int pushed = push_cond_ranges(w, c);
        te_stmt *t = simp_stmt(w, s->u.cond.then_s);
        for (int i = 0; i < pushed; i++)
            te__ranges_pop(&w->ranges);
        te_stmt *e = simp_stmt(w, s->u.cond.else_s);
        if (w->failed)
            return NULL;
        if (!t && !e)
            return NULL;
        if (!t) {
            c = te__simplify_expr(ctx, te_not(ctx, c), &w->ranges);
            t = e;
            e = NULL;
            if (!c) {
                w->failed = true;
                return NULL;
            }
        }
        if (c == s->u.cond.cond && t == s->u.cond.then_s && e == s->u.cond.else_s)
            return s;
        te_stmt *r = te__if(ctx, c, t, e);
        if (!r)
            w->failed = true;
        return r;
    }
    case TE_S_STORE: {
        te_expr *idx[TE_MAX_DIMS];
        bool changed = false;
        assert(s->u.store.n <= TE_MAX_DIMS);
        for (int i = 0; i < s->u.store.n; i++) {
            if (!(idx[i] = sx(w, s->u.store.idx[i])))
                return NULL;
            changed |= idx[i] != s->u.store.idx[i];
        }
        te_expr *v = sx(w, s->u.store.value);
        if (!v)
            return NULL;
        if (!changed && v == s->u.store.value)
            return s;
        te_stmt *r = te__store(ctx, s->u.store.buf, s->u.store.n, idx, v);
        if (!r) {
            w->failed = true;
            return NULL;
        }
        r->u.store.nontemporal = s->u.store.nontemporal;
        return r;
    }
    case TE_S_ALLOC: {
        te_stmt *b = simp_stmt(w, s->u.alloc.body);
        if (!b || w->failed)
            return NULL;
        if (b == s->u.alloc.body)
            return s;
        te_stmt *r = te__alloc_stmt(ctx, s->u.alloc.buf, b);
        if (!r)
            w->failed = true;
        return r;
    }
    case TE_S_LET: {
        te_expr *v = sx(w, s->u.let.value);
        if (!v)
            return NULL;
        if ((v->kind == TE_E_INT || v->kind == TE_E_FLOAT || v->kind == TE_E_VAR) &&
            v->lanes == 1) {
            te__subst m = {1, (const te_expr *[]){s->u.let.var}, (te_expr *[]){v}};
            te_stmt *b = te__stmt_substitute(ctx, s->u.let.body, &m);
            if (!b) {
                w->failed = true;
                return NULL;
            }
            return simp_stmt(w, b);
        }
        int64_t blo, bhi;
        bool have = te_dtype_is_int(v->dtype) && te__expr_const_bounds(v, &w->ranges, &blo, &bhi);
        if (have && !push(w, s->u.let.var, blo, bhi))
            return NULL;
        te_stmt *b = simp_stmt(w, s->u.let.body);
        if (have)
            te__ranges_pop(&w->ranges);
        if (!b || w->failed)
            return NULL;
        if (v == s->u.let.value && b == s->u.let.body)
            return s;
        te_stmt *r = te__let(ctx, s->u.let.var, v, b);
        if (!r)
            w->failed = true;
        return r;
    }
    case TE_S_INTRIN: {
        te_expr *a[TE_INTRIN_STMT_MAX_OPS];
        bool changed = false;
        for (int o = 0; o < s->u.intrin.nops; o++) {
            if (!(a[o] = sx(w, s->u.intrin.addr[o])))
                return NULL;
            if (a[o]->kind != TE_E_LOAD)
                a[o] = s->u.intrin.addr[o];
            changed |= a[o] != s->u.intrin.addr[o];
        }
        if (!changed)
            return s;
        te_stmt *r = te__intrin_call(ctx, s->u.intrin.in, s->u.intrin.name, s->u.intrin.overwrite,
                                     s->u.intrin.nops, a, s->u.intrin.nfree, s->u.intrin.sdim,
                                     s->u.intrin.smul, s->u.intrin.n);
        if (!r)
            w->failed = true;
        return r;
    }
    case TE_S_BARRIER:
    case TE_S_COMMENT:
        return s;
    }
    return s;
}

/* Simplifies s under the given ranges of enclosing variables (which it leaves as it found
 * them). Returns NULL either on error (*failed set) or when s simplifies to nothing. Used by
 * the other passes of this directory. */
te_stmt *te__simplify_stmt_in(te_ctx *ctx, te_stmt *s, te__range_map *ranges, bool *failed)
{
    walk w = {ctx, {0, 0, NULL, NULL, NULL}, false};
    if (ranges)
        w.ranges = *ranges;
    te_stmt *r = simp_stmt(&w, s);
    if (ranges) {
        /* The stack may have grown (reallocated); hand the storage back, at its old depth. */
        int n = ranges->n;
        *ranges = w.ranges;
        ranges->n = n;
    }
    *failed = w.failed;
    return r;
}

static bool effect_fn(const te_stmt *s, void *user)
{
    bool *found = user;
    if (s->kind == TE_S_STORE || s->kind == TE_S_BARRIER || s->kind == TE_S_INTRIN)
        *found = true;
    return !*found;
}

/* Whether a statement has an effect: a store, a barrier or an intrinsic call (which writes
 * its first operand) somewhere inside. */
static bool has_effect(const te_stmt *s)
{
    bool found = false;
    te__stmt_visit(s, effect_fn, NULL, &found);
    return found;
}

typedef struct {
    const te_buf *buf;
    bool found;
} buf_use;

static bool buf_use_stmt(const te_stmt *s, void *user)
{
    buf_use *u = user;
    if (s->kind == TE_S_STORE && s->u.store.buf == u->buf)
        u->found = true;
    return !u->found;
}

/* Whether statement s reads or writes buffer b. */
static bool uses_buf(const te_stmt *s, const te_buf *b)
{
    buf_use u = {b, false};
    te__stmt_visit(s, buf_use_stmt, NULL, &u);
    return u.found || te__stmt_loads(s, b);
}

/* Dead code: loops, allocations and branches that store nothing (what is left when loop
 * partitioning empties a piece of a producer and its consumer), and allocations nothing in
 * their scope touches. Comments stay only beside statements that do something. */
static te_stmt *drop_dead(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)ctx;
    (void)user;
    if (s->kind == TE_S_SEQ || s->kind == TE_S_COMMENT || s->kind == TE_S_STORE ||
        s->kind == TE_S_BARRIER || s->kind == TE_S_INTRIN)
        return s;
    if (!has_effect(s))
        return NULL;
    if (s->kind == TE_S_ALLOC && s->u.alloc.buf->arg_index < 0 &&
        !uses_buf(s->u.alloc.body, s->u.alloc.buf))
        return s->u.alloc.body;
    return s;
}

te_stmt *te__pass_simplify(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    bool failed = false;
    te_stmt *r = te__simplify_stmt_in(ctx, s, NULL, &failed);
    if (r && !failed && has_effect(r))
        r = te__stmt_mutate(ctx, r, drop_dead, NULL, NULL);
    if (failed) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_INTERNAL, "simplify: could not rebuild a statement");
        return NULL;
    }
    return r ? r : te__seq(ctx, 0, NULL);
}
