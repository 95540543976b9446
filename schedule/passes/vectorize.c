/*
 * schedule/passes/vectorize.c: turn TE_FOR_VECTORIZED loops into straight-line vector code.
 *
 * The pass runs after storage flattening, so every LOAD and STORE has one flat i64 index. For a
 * loop `vectorized (x, min, L)` it rewrites the body with x = RAMP(min, 1, L):
 *
 *   - an index linear in x with constant coefficient c becomes RAMP(base, c, L), where base is
 *     the index at x = min: c == 1 is a contiguous vector access, other c a strided gather or
 *     scatter (the backend decides how to emit them);
 *   - an index that does not mention x stays a scalar load, broadcast where a vector is needed;
 *   - any other index that mentions x becomes a vector of indices (a general gather);
 *   - scalar operands of vector operations are broadcast (BCAST).
 *
   - an if_then_else whose condition depends on the lane and that guards loads (padding,
 *     stencil borders) becomes select(c, t, f) with each side vectorized under the mask of the
 *     lanes that take it (c, !c, and-ed with any enclosing mask): a load under a mask is a
 *     gather at select(mask, index, 0), so lanes the scalar program would not evaluate read
 *     element 0, never out of bounds. (Loop partitioning peels such borders first, so only
 *     the border iterations pay for the gathers.)
 *
 * The loop is left serial (TE_FOR_SERIAL: scalar fallback, gcc may still vectorize it) when the
 * extent is not a constant power of two in [2, 64] (nor, on C targets, a multiple of the
 * register's lanes up to 64: see lanes_ok), or the body holds something that has no
 * straight-line vector form: a store whose index does not depend on the lane (a reduction into
 * an accumulator), an `if` statement whose condition depends on the lane, a nested loop, an
 * allocation, a barrier, a bool buffer accessed per lane. (A store of a lane-invariant value to
 * a lane-invariant element that the loop never loads stays one scalar store: every lane
 * would write the same.) The
 * fallback is never silent: a
 * comment "vectorize <var>: kept scalar: <reason>" goes in front of the loop (te_lowered_notes
 * lists them; the C backend writes them as C comments).
 *
 * The linear analysis is deliberately small (sums, differences, negation, multiplication by an
 * integer constant, integer casts, and floor division or remainder by a constant when every
 * lane falls in one block of the divisor, which a residue of the lane-0 index proves: the
 * index arithmetic of reshapes); anything else that mentions x counts as not linear.
 */
#include <string.h>

#include "schedule/passes.h"

#define MAX_VLETS 64

typedef struct vec_state {
    te_ctx *ctx;
    const te_expr *var; /* the loop variable */
    te_expr *min;
    int lanes;
    /* lets inside the loop whose value became a vector, and their vector variables */
    int nlets;
    const te_expr *let_from[MAX_VLETS];
    te_expr *let_to[MAX_VLETS];
    /* Inside a branch of an if_then_else whose condition depends on the lane: the lanes for
     * which the branch is taken (NULL outside any). Loads under a mask read only there. */
    te_expr *mask;
    bool fail;           /* cannot vectorize: fall back to a serial loop */
    const char *reason;  /* why, for the note in front of the loop */
    bool nomem;          /* allocation failure: the pass fails */
    const te_stmt *body; /* the loop's body */
} vec_state;

/* Gives up on the loop (scalar fallback), remembering the first reason. */
static void give_up(vec_state *v, const char *reason)
{
    if (!v->fail)
        v->reason = reason;
    v->fail = true;
}

static te_expr *clone_expr(vec_state *v, const te_expr *e)
{
    te_expr *c = te__alloc(v->ctx, sizeof *c);
    if (!c) {
        v->nomem = true;
        return NULL;
    }
    *c = *e;
    return c;
}

/* ---- Lane dependence and linear analysis ------------------------------------------------- */

typedef struct dep_ctx {
    const vec_state *v;
    bool found;
} dep_ctx;

static bool dep_visit(const te_expr *e, void *user)
{
    dep_ctx *d = user;
    if (e->kind == TE_E_VAR) {
        if (e == d->v->var)
            d->found = true;
        for (int i = 0; i < d->v->nlets && !d->found; i++)
            if (e == d->v->let_from[i])
                d->found = true;
    }
    return !d->found;
}

/* Whether e depends on the lane: mentions the loop variable or a let that became a vector. */
static bool lane_dependent(const vec_state *v, const te_expr *e)
{
    dep_ctx d = {v, false};
    te__expr_visit(e, dep_visit, &d);
    return d.found;
}

static bool is_int_dtype(te_dtype d) { return te_dtype_is_int(d) && d != TE_BOOL; }

/* ---- Residues: floor division of a ramp that stays inside one block ------------------------ */

static int64_t gcd64(int64_t a, int64_t b)
{
    a = a < 0 ? -a : a, b = b < 0 ? -b : b;
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* r reduced into [0, g) (g > 0). */
static int64_t mod_pos(int64_t r, int64_t g) { return (r % g + g) % g; }

/* What e is known to be modulo some g, with the loop variable at its minimum (the lane-0
 * value): e == g k + r for an integer k, g = 0 meaning e == r exactly. Sums, differences,
 * negations, integer casts and products by constants are looked into; any other integer
 * expression is only known to be an integer (g = 1, r = 0). */
static void residue(const vec_state *v, const te_expr *e, int64_t *g, int64_t *r)
{
    int64_t ga, ra, gb, rb, k;
    *g = 1, *r = 0;
    if (e == v->var) {
        residue(v, v->min, g, r); /* the lane-0 value */
        return;
    }
    switch (e->kind) {
    case TE_E_INT:
        *g = 0, *r = e->u.i;
        return;
    case TE_E_CAST:
        if (is_int_dtype(e->dtype) && is_int_dtype(e->u.un.a->dtype))
            residue(v, e->u.un.a, g, r);
        return;
    case TE_E_NEG:
        residue(v, e->u.un.a, &ga, &ra);
        if (!__builtin_sub_overflow((int64_t)0, ra, r))
            *g = ga;
        else
            *g = 1, *r = 0;
        break;
    case TE_E_BINARY:
        switch (e->u.bin.op) {
        case TE_ADD:
        case TE_SUB:
            residue(v, e->u.bin.a, &ga, &ra);
            residue(v, e->u.bin.b, &gb, &rb);
            if (e->u.bin.op == TE_ADD ? __builtin_add_overflow(ra, rb, r)
                                      : __builtin_sub_overflow(ra, rb, r))
                return (void)(*g = 1, *r = 0);
            *g = gcd64(ga, gb);
            break;
        case TE_MUL: {
            const te_expr *x = NULL;
            if (te__is_const_int(e->u.bin.a, &k))
                x = e->u.bin.b;
            else if (te__is_const_int(e->u.bin.b, &k))
                x = e->u.bin.a;
            if (!x)
                return;
            residue(v, x, &ga, &ra);
            if (__builtin_mul_overflow(ga, k < 0 ? -k : k, g) || __builtin_mul_overflow(ra, k, r))
                return (void)(*g = 1, *r = 0);
            break;
        }
        default:
            return;
        }
        break;
    default:
        return;
    }
    if (*g > 0)
        *r = mod_pos(*r, *g);
}

/* For a, linear in the lane with coefficient c >= 0: whether all lanes of a lie in one block
 * [q D, (q + 1) D) of the divisor D > 0, so that floor(a / D) is the same in every lane (and
 * floormod(a, D) linear with coefficient c). With the lane-0 value g k + r, g' = gcd(g, D)
 * divides both (g k) mod D and D, so (g k + r) mod D <= D - g' + (r mod g'): the lanes add at
 * most c (L - 1), and stay in the block when (r mod g') + c (L - 1) < g'. Head splits and
 * merges (reshape + transpose) index x + floor((64 i + x) / 8192) * 64: a contiguous load. */
static bool lanes_in_one_block(const vec_state *v, const te_expr *a, int64_t c, int64_t D)
{
    int64_t g, r, span, top;
    if (c < 0 || D <= 0)
        return false;
    residue(v, a, &g, &r);
    int64_t gd = gcd64(g, D);
    return !__builtin_mul_overflow(c, (int64_t)v->lanes - 1, &span) &&
           !__builtin_add_overflow(mod_pos(r, gd), span, &top) && top < gd;
}

/* If e == coef * var + (terms without lane dependence), stores coef and returns true. */
static bool linear_coef(const vec_state *v, const te_expr *e, int64_t *coef)
{
    if (!lane_dependent(v, e)) {
        *coef = 0;
        return true;
    }
    int64_t ca, cb, k;
    switch (e->kind) {
    case TE_E_VAR:
        if (e != v->var)
            return false; /* a vector let: its value is not known to be linear */
        *coef = 1;
        return true;
    case TE_E_BINARY:
        switch (e->u.bin.op) {
        case TE_ADD:
        case TE_SUB:
            if (!linear_coef(v, e->u.bin.a, &ca) || !linear_coef(v, e->u.bin.b, &cb))
                return false;
            return !(e->u.bin.op == TE_ADD ? __builtin_add_overflow(ca, cb, coef)
                                           : __builtin_sub_overflow(ca, cb, coef));
        case TE_MUL:
            if (te__is_const_int(e->u.bin.a, &k) && linear_coef(v, e->u.bin.b, &cb))
                return !__builtin_mul_overflow(k, cb, coef);
            if (te__is_const_int(e->u.bin.b, &k) && linear_coef(v, e->u.bin.a, &ca))
                return !__builtin_mul_overflow(k, ca, coef);
            return false;
        case TE_FLOORDIV:
        case TE_FLOORMOD:
            /* Of a linear a whose lanes stay in one block of the divisor: the quotient is
             * lane-invariant, the remainder a - D q linear with a's coefficient. */
            if (!te__is_const_int(e->u.bin.b, &k) || !linear_coef(v, e->u.bin.a, &ca) ||
                !lanes_in_one_block(v, e->u.bin.a, ca, k))
                return false;
            *coef = e->u.bin.op == TE_FLOORDIV ? 0 : ca;
            return true;
        default:
            return false;
        }
    case TE_E_NEG:
        return linear_coef(v, e->u.un.a, &ca) && !__builtin_sub_overflow((int64_t)0, ca, coef);
    case TE_E_CAST:
        if (!is_int_dtype(e->dtype) || !is_int_dtype(e->u.un.a->dtype))
            return false;
        return linear_coef(v, e->u.un.a, coef);
    default:
        return false;
    }
}

/* Folds integer additions and multiplications with constant operands (the base of a ramp is
 * the index with the loop variable replaced by its minimum, usually 0). */
static te_expr *int_const(te_ctx *ctx, te_dtype dtype, int64_t v)
{
    te_expr *e = te__new_expr(ctx, TE_E_INT, dtype);
    if (e)
        e->u.i = v;
    return e;
}

static te_expr *fold_fn(te_ctx *ctx, te_expr *e, void *user)
{
    (void)user;
    if (e->kind != TE_E_BINARY || !is_int_dtype(e->dtype) || e->lanes != 1)
        return e;
    int64_t a, b, v;
    bool ka = te__is_const_int(e->u.bin.a, &a), kb = te__is_const_int(e->u.bin.b, &b);
    /* Constant operands: folded by the arithmetic library (in the dtype; not on overflow). */
    bool kv = ka && kb && te__arith_const_int(e, &v);
    switch (e->u.bin.op) {
    case TE_ADD:
        if (kv)
            return int_const(ctx, e->dtype, v);
        if (ka && a == 0)
            return e->u.bin.b;
        if (kb && b == 0)
            return e->u.bin.a;
        break;
    case TE_SUB:
        if (kv)
            return int_const(ctx, e->dtype, v);
        if (kb && b == 0)
            return e->u.bin.a;
        break;
    case TE_MUL:
        if (kv)
            return int_const(ctx, e->dtype, v);
        if ((ka && a == 0) || (kb && b == 0))
            return int_const(ctx, e->dtype, 0);
        if (ka && a == 1)
            return e->u.bin.b;
        if (kb && b == 1)
            return e->u.bin.a;
        if (kb) { /* (x * c1) * c2 -> x * (c1 * c2) */
            te_expr *x = e->u.bin.a;
            int64_t c1;
            te_expr *k;
            if (x->kind == TE_E_BINARY && x->u.bin.op == TE_MUL && x->lanes == 1 &&
                te__is_const_int(x->u.bin.b, &c1)) {
                if (!(k = int_const(ctx, e->dtype, c1)) ||
                    !(k = te_binary(ctx, TE_MUL, k, e->u.bin.b)))
                    return NULL;
                if (!te__arith_const_int(k, &v))
                    return e; /* c1 * c2 overflows the dtype */
                k = int_const(ctx, e->dtype, v);
                return k ? te_binary(ctx, TE_MUL, x->u.bin.a, k) : NULL;
            }
        }
        break;
    default:
        break;
    }
    return e;
}

/* The index at lane 0: the loop variable replaced by the loop's minimum, folded. */
static te_expr *lane0(vec_state *v, te_expr *idx)
{
    const te_expr *from[1] = {v->var};
    te_expr *to[1] = {v->min};
    te__subst map = {1, from, to};
    te_expr *r = te__substitute(v->ctx, idx, &map);
    if (r)
        r = te__expr_mutate(v->ctx, r, fold_fn, NULL);
    if (!r)
        v->nomem = true;
    return r;
}

/* ---- Expressions -------------------------------------------------------------------------- */

static te_expr *vec_expr(vec_state *v, te_expr *e);

static te_expr *widen(vec_state *v, te_expr *e)
{
    if (!e || e->lanes == v->lanes)
        return e;
    te_expr *r = te__bcast(v->ctx, e, v->lanes);
    if (!r)
        v->nomem = true;
    return r;
}

/* Vector form of a flat index: a ramp when linear, else an index vector (gather/scatter).
 * Returns NULL with v->fail when the index does not depend on the lane (callers decide). */
static te_expr *vec_index(vec_state *v, te_expr *idx)
{
    int64_t c;
    if (linear_coef(v, idx, &c)) {
        if (c == 0) /* the lane may appear (x - x, a quotient within one block): lane 0's */
            return lane_dependent(v, idx) ? lane0(v, idx) : idx;
        te_expr *base = lane0(v, idx);
        if (!base)
            return NULL;
        te_expr *r = te__ramp(v->ctx, base, c, v->lanes);
        if (!r)
            v->nomem = true;
        return r;
    }
    return widen(v, vec_expr(v, idx));
}

/* mask && c (c when there is no mask). */
static te_expr *and_mask(vec_state *v, te_expr *c)
{
    te_expr *r = v->mask ? te_and(v->ctx, v->mask, c) : c;
    if (!r)
        v->nomem = true;
    return r;
}

/* if_then_else(c, t, f) with a lane-dependent c guarding loads: select(c, t', f'), t' under
 * the mask c, f' under !c. */
static te_expr *vec_guarded(vec_state *v, te_expr *e)
{
    te_expr *c = widen(v, vec_expr(v, e->u.sel.c)), *saved = v->mask, *t, *f, *nc;
    if (!c)
        return NULL;
    if (!(v->mask = and_mask(v, c)))
        return NULL;
    t = widen(v, vec_expr(v, e->u.sel.t));
    v->mask = saved;
    if (!t || !(nc = te_not(v->ctx, c)) || !(v->mask = and_mask(v, nc))) {
        v->nomem = v->nomem || (t && !v->fail);
        v->mask = saved;
        return NULL;
    }
    f = widen(v, vec_expr(v, e->u.sel.f));
    v->mask = saved;
    if (!f)
        return NULL;
    te_expr *r = te_select(v->ctx, c, t, f);
    if (!r)
        v->nomem = true;
    return r;
}

/* A load under a mask: a gather whose index is the original one where the mask holds and 0
 * (every buffer has an element 0) elsewhere, so the lanes that the scalar program would not
 * evaluate read nothing out of bounds. */
static te_expr *masked_load(vec_state *v, te_buf *buf, te_expr *idx)
{
    te_expr *vi = widen(v, idx), *zero = NULL, *safe = NULL, *r = NULL;
    if (vi && (zero = widen(v, int_const(v->ctx, idx->dtype, 0))))
        safe = te_select(v->ctx, v->mask, vi, zero);
    if (safe)
        r = te__load(v->ctx, buf, 1, &safe);
    if (!r)
        v->nomem = true;
    return r;
}

static te_expr *vec_expr(vec_state *v, te_expr *e)
{
    if (v->fail || v->nomem || !e)
        return NULL;
    if (!lane_dependent(v, e) && !(v->mask && te__expr_has_load(e)))
        return e; /* invariant: stays scalar (an invariant load under a mask is not safe) */
    te_expr *r;
    switch (e->kind) {
    case TE_E_INT:
    case TE_E_FLOAT:
        return e;
    case TE_E_VAR:
        if (e == v->var) {
            if (!(r = te__ramp(v->ctx, v->min, 1, v->lanes)))
                v->nomem = true;
            return r;
        }
        for (int i = 0; i < v->nlets; i++)
            if (e == v->let_from[i])
                return v->let_to[i];
        return e;
    case TE_E_BINARY: {
        te_expr *a = widen(v, vec_expr(v, e->u.bin.a));
        te_expr *b = widen(v, vec_expr(v, e->u.bin.b));
        if (!a || !b || !(r = clone_expr(v, e)))
            return NULL;
        r->u.bin.a = a;
        r->u.bin.b = b;
        r->lanes = v->lanes;
        return r;
    }
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST: {
        te_expr *a = vec_expr(v, e->u.un.a);
        if (!a || !(r = clone_expr(v, e)))
            return NULL;
        r->u.un.a = a;
        r->lanes = a->lanes;
        return r;
    }
    case TE_E_IF:
        /* if_then_else evaluates only the taken side, so it may guard an out-of-bounds load
         * (padding): with a lane-dependent condition each side is vectorized under the mask of
         * the lanes that take it (its loads become gathers that read nothing for the others)
         * and the results are blended. */
        if ((v->mask || lane_dependent(v, e->u.sel.c)) &&
            (te__expr_has_load(e->u.sel.t) || te__expr_has_load(e->u.sel.f)))
            return vec_guarded(v, e);
        /* no loads to protect: a blend is exact */
        __attribute__((fallthrough));
    case TE_E_SELECT: {
        te_expr *c = vec_expr(v, e->u.sel.c);
        te_expr *t = vec_expr(v, e->u.sel.t);
        te_expr *f = vec_expr(v, e->u.sel.f);
        if (!c || !t || !f)
            return NULL;
        if (c->lanes > 1) {
            t = widen(v, t);
            f = widen(v, f);
        } else if (t->lanes > 1 || f->lanes > 1) {
            t = widen(v, t);
            f = widen(v, f);
        }
        if (!t || !f || !(r = clone_expr(v, e)))
            return NULL;
        if (c->lanes > 1)
            r->kind = TE_E_SELECT;
        r->u.sel.c = c;
        r->u.sel.t = t;
        r->u.sel.f = f;
        r->lanes = v->lanes;
        return r;
    }
    case TE_E_CALL: {
        te_expr *a[2] = {NULL, NULL};
        for (int i = 0; i < e->u.call.n; i++)
            if (!(a[i] = widen(v, vec_expr(v, e->u.call.args[i]))))
                return NULL;
        if (!(r = clone_expr(v, e)))
            return NULL;
        r->u.call.args[0] = a[0];
        r->u.call.args[1] = a[1];
        r->lanes = v->lanes;
        return r;
    }
    case TE_E_LOAD: {
        if (e->u.load.n != 1) {
            give_up(v, "an access that is not flattened");
            return NULL;
        }
        if (e->dtype == TE_BOOL) {
            give_up(v, "a bool buffer accessed per lane (no vector form)");
            return NULL;
        }
        te_expr *idx = vec_index(v, e->u.load.idx[0]);
        if (!idx)
            return NULL;
        if (v->mask)
            return masked_load(v, e->u.load.buf, idx);
        if (!(r = te__load(v->ctx, e->u.load.buf, 1, &idx)))
            v->nomem = true;
        return r;
    }
    case TE_E_RAMP:
    case TE_E_BCAST:
    case TE_E_READ:
    case TE_E_REDUCE:
        /* already vectorized (nested vector loops) or not lowered */
        give_up(v, "a vector or unlowered expression in the body");
        return NULL;
    }
    give_up(v, "an unsupported expression");
    return NULL;
}

/* ---- Statements --------------------------------------------------------------------------- */

static te_stmt *vec_stmt(vec_state *v, te_stmt *s)
{
    if (v->fail || v->nomem)
        return NULL;
    te_stmt *r = NULL;
    switch (s->kind) {
    case TE_S_STORE: {
        if (s->u.store.n != 1 || s->u.store.buf->dtype == TE_BOOL) {
            give_up(v, s->u.store.n != 1 ? "an access that is not flattened"
                                         : "a bool buffer accessed per lane (no vector form)");
            return NULL;
        }
        te_expr *idx = s->u.store.idx[0];
        if (!lane_dependent(v, idx) && !lane_dependent(v, s->u.store.value) && !v->mask &&
            !te__stmt_loads(v->body, s->u.store.buf))
            return s; /* every lane stores the same value to an element the loop never
                         reads: once */
        if (!lane_dependent(v, idx)) {
            /* Every lane writes one element: a reduction into an accumulator. */
            give_up(v, "every lane stores to the same element (a reduction)");
            return NULL;
        }
        int64_t c;
        if (linear_coef(v, idx, &c) && c == 0) {
            /* e.g. x - x: the index does not really depend on the lane */
            give_up(v, "every lane stores to the same element (a reduction)");
            return NULL;
        }
        te_expr *vi = vec_index(v, idx);
        te_expr *val = widen(v, vec_expr(v, s->u.store.value));
        if (!vi || !val)
            return NULL;
        if (!(r = te__store(v->ctx, s->u.store.buf, 1, &vi, val))) {
            v->nomem = true;
            return NULL;
        }
        r->u.store.nontemporal = s->u.store.nontemporal;
        return r;
    }
    case TE_S_SEQ: {
        te_stmt **items = te__alloc(v->ctx, sizeof(te_stmt *) * (size_t)s->u.seq.n);
        if (!items) {
            v->nomem = true;
            return NULL;
        }
        for (int i = 0; i < s->u.seq.n; i++)
            if (!(items[i] = vec_stmt(v, s->u.seq.v[i])))
                return NULL;
        if (!(r = te__seq(v->ctx, s->u.seq.n, items)))
            v->nomem = true;
        return r;
    }
    case TE_S_IF: {
        if (lane_dependent(v, s->u.cond.cond)) {
            /* lanes would take different branches */
            give_up(v, "an if statement whose condition depends on the lane");
            return NULL;
        }
        te_stmt *t = vec_stmt(v, s->u.cond.then_s);
        te_stmt *e = s->u.cond.else_s ? vec_stmt(v, s->u.cond.else_s) : NULL;
        if (!t || (s->u.cond.else_s && !e))
            return NULL;
        if (!(r = te__if(v->ctx, s->u.cond.cond, t, e)))
            v->nomem = true;
        return r;
    }
    case TE_S_LET: {
        te_expr *val = vec_expr(v, s->u.let.value);
        if (!val)
            return NULL;
        te_expr *var = s->u.let.var;
        if (val->lanes > 1) {
            if (v->nlets == MAX_VLETS) {
                give_up(v, "too many vector lets");
                return NULL;
            }
            /* Same variable (same id, so the same name in the emitted code), now a vector. */
            te_expr *vv = clone_expr(v, var);
            if (!vv)
                return NULL;
            vv->lanes = v->lanes;
            v->let_from[v->nlets] = var;
            v->let_to[v->nlets] = vv;
            v->nlets++;
            var = vv;
        }
        te_stmt *b = vec_stmt(v, s->u.let.body);
        if (!b)
            return NULL;
        if (!(r = te__let(v->ctx, var, val, b)))
            v->nomem = true;
        return r;
    }
    case TE_S_COMMENT:
        return s;
    case TE_S_FOR:
        give_up(v, "a nested loop in the body");
        return NULL;
    case TE_S_ALLOC:
        give_up(v, "an allocation in the body (scratch per lane)");
        return NULL;
    case TE_S_BARRIER: /* GPU only */
        give_up(v, "a barrier in the body");
        return NULL;
    case TE_S_INTRIN:
        give_up(v, "a tensor intrinsic call in the body");
        return NULL;
    }
    give_up(v, "an unsupported statement");
    return NULL;
}

static bool is_pow2_lanes(int64_t n) { return n >= 2 && n <= 64 && (n & (n - 1)) == 0; }

/* Lanes the C target can take: a power of two up to 64, or a multiple of the register width
 * `width` (48 = 3 x 16 on AVX-512), which legalize_vectors splits into register-wide parts
 * before any code is printed (a register tile of three vectors across). width is 0 where no
 * such split runs (CUDA). */
static bool lanes_ok(int64_t n, int width)
{
    return is_pow2_lanes(n) || (width > 1 && n > width && n <= 64 && n % width == 0);
}

/* The scalar fallback: the loop made serial, behind a comment that says why (what
 * te_lowered_notes reports and the C backend writes as a C comment). */
static te_stmt *serial(te_ctx *ctx, te_stmt *s, const char *reason)
{
    te_stmt *r =
        te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_SERIAL, s->u.loop.body);
    if (!r)
        return NULL;
    r->u.loop.thread_tag = s->u.loop.thread_tag;
    const char *text = te__sprintf(ctx, "%s%s: kept scalar: %s", TE__VECTORIZE_NOTE,
                                   s->u.loop.var->u.var.name, reason ? reason : "unsupported body");
    te_stmt *c = text ? te__comment(ctx, text) : NULL;
    return c ? te__seq(ctx, 2, (te_stmt *[]){c, r}) : NULL;
}

static te_stmt *vectorize_loop(te_ctx *ctx, te_stmt *s, void *user)
{
    int width = *(const int *)user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_VECTORIZED)
        return s;
    int64_t lanes;
    if (!te__is_const_int(s->u.loop.extent, &lanes))
        return serial(ctx, s, "the extent is not a constant");
    if (!lanes_ok(lanes, width))
        return serial(ctx, s,
                      te__sprintf(ctx,
                                  "extent %lld is not a power of two in [2, 64] or a multiple of "
                                  "the register width",
                                  (long long)lanes));
    vec_state v;
    memset(&v, 0, sizeof v);
    v.ctx = ctx;
    v.var = s->u.loop.var;
    v.min = s->u.loop.min;
    v.lanes = (int)lanes;
    v.body = s->u.loop.body;
    te_stmt *body = vec_stmt(&v, s->u.loop.body);
    if (v.nomem)
        return NULL;
    if (v.fail || !body)
        return serial(ctx, s, v.reason);
    return body;
}

te_stmt *te__pass_vectorize(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    /* Lanes come from the schedule; the C backend legalizes them to the target's width. */
    if (!s)
        return NULL;
    bool cuda = pc->target && pc->target->backend == TE_BACKEND_CUDA;
    int width = cuda ? 0 : te__vector_width_lanes(pc->target);
    return te__stmt_mutate(ctx, s, vectorize_loop, NULL, &width);
}
