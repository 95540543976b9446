/* The arithmetic library, part 4: the rewrite rules of the expression simplifier, applied
 * bottom-up to every node (te__expr_mutate). See te/arith.h.
 *
 * Ranges. te__arith_bnd does interval arithmetic, with each side of an interval known or not;
 * variables take their ranges from the range map. The bounds of a linear form are the sum of
 * the bounds of its terms, so `x - x` and `i*32 + j - i*32` are exact.
 *
 * Overflow. A rule that computes new intermediate values (a canonical sum, the two sides of a
 * rearranged comparison, the split dividend of a floordiv) only applies when te__facts_fit
 * proves they stay within int64 wherever the original does not overflow; otherwise the node
 * is kept as it is.
 *
 * Floating point. Only constants are folded plus the exact identities x*1, x/1 and x-0. Float
 * arithmetic is never reassociated.
 *
 * Integer types other than i64 get constant folding (wrapped to their width) and the exact
 * identities only; bounds-based decisions apply to i32 as well.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "te/arith_impl.h"

/* ---- Simplifier state -------------------------------------------------------------------- */

typedef struct simp {
    te_ctx *ctx;
    const te__range_map *ranges;
} simp;

static te_expr *simp_node(te_ctx *ctx, te_expr *e, void *user);

/* Simplifies a node whose children are already simplified. */
static te_expr *resimp(simp *s, te_expr *e) { return e ? simp_node(s->ctx, e, s) : NULL; }

/* Pairs floordiv(X, c) * k*c with floormod(X, c) * k into k*X, and X*k with
 * floordiv(X, c) * -k*c into floormod(X, c) * k. */
static void lf_recombine(simp *s, te__lform *f)
{
    for (int iter = 0; iter < 8 && f->ok; iter++) {
        bool changed = false;
        for (int i = 0; i < f->n && !changed; i++) {
            te_expr *d = f->v[i].t;
            if (d->kind != TE_E_BINARY || d->u.bin.op != TE_FLOORDIV ||
                d->u.bin.b->kind != TE_E_INT || d->u.bin.b->u.i <= 0)
                continue;
            te_expr *x = d->u.bin.a;
            int64_t c = d->u.bin.b->u.i, kd = f->v[i].k;
            for (int j = 0; j < f->n; j++) {
                te_expr *t = f->v[j].t;
                int64_t kt = f->v[j].k, prod;
                if (__builtin_mul_overflow(kt, c, &prod))
                    continue;
                if (t->kind == TE_E_BINARY && t->u.bin.op == TE_FLOORMOD &&
                    t->u.bin.b->kind == TE_E_INT && t->u.bin.b->u.i == c &&
                    te__expr_equal(t->u.bin.a, x) && prod == kd) {
                    te__lf_add_term(f, t, -kt);
                    te__lf_add_term(f, d, -kd);
                    te__lf_add(f, x, kt);
                    changed = true;
                    break;
                }
                if (te__expr_equal(t, x) && x->kind == TE_E_VAR && prod == -kd) {
                    te_expr *m = resimp(s, te_floormod(s->ctx, x, te_int(s->ctx, c)));
                    if (!m) {
                        f->ok = false;
                        return;
                    }
                    te__lf_add_term(f, t, -kt);
                    te__lf_add_term(f, d, -kd);
                    te__lf_add_term(f, m, kt);
                    changed = true;
                    break;
                }
            }
        }
        if (!changed)
            return;
    }
}

/* Canonical expression of an i64 sum/difference/product node; NULL on failure. The node
 * itself when the canonical form could overflow where e does not. */
static te_expr *canon_linear(simp *s, te_expr *e)
{
    te__lform f;
    te__lf_init(&f);
    te__lf_add(&f, e, 1);
    lf_recombine(s, &f);
    te_expr *r = f.ok ? te__lf_build(s->ctx, &f) : e;
    te__lf_free(&f);
    if (r && r != e) {
        te__facts fs;
        te__facts_init(&fs, s->ranges);
        te__facts_add(&fs, e);
        if (!te__facts_fit(&fs, r, true)) /* r's value is e's: only its inner nodes matter */
            return e;
    }
    return r;
}

/* ---- Comparisons ------------------------------------------------------------------------- */

static te_binop negate_cmp(te_binop op)
{
    switch (op) {
    case TE_LT:
        return TE_GE;
    case TE_LE:
        return TE_GT;
    case TE_GT:
        return TE_LE;
    case TE_GE:
        return TE_LT;
    case TE_EQ:
        return TE_NE;
    case TE_NE:
        return TE_EQ;
    default:
        return op;
    }
}

static bool is_cmp(te_binop op) { return op >= TE_EQ && op <= TE_GE; }

static int64_t ceil_div(int64_t a, int64_t b) { return -fdiv(-a, b); }

/* a op b over i64 with a linear difference: decides by bounds, else canonical form
 * `P < N + K` (or ==, !=), with the gcd of the coefficients divided out. */
static te_expr *simp_cmp_i64(simp *s, te_binop op, te_expr *a, te_expr *b, te_expr *orig)
{
    te_ctx *ctx = s->ctx;
    te__lform d;
    te__lf_diff(&d, a, b);
    lf_recombine(s, &d);
    if (!d.ok) {
        te__lf_free(&d);
        return orig;
    }
    /* Bring every inequality to d < 0. */
    bool ok = true;
    switch (op) {
    case TE_GT: /* d > 0  <=>  -d < 0 */
    case TE_GE: /* d >= 0 <=>  -d - 1 < 0 */
        for (int i = 0; i < d.n; i++)
            ok &= !__builtin_mul_overflow(d.v[i].k, -1, &d.v[i].k);
        ok &= !__builtin_mul_overflow(d.c, -1, &d.c);
        if (op == TE_GE)
            ok &= !__builtin_sub_overflow(d.c, 1, &d.c);
        op = TE_LT;
        break;
    case TE_LE:
        ok &= !__builtin_sub_overflow(d.c, 1, &d.c);
        op = TE_LT;
        break;
    default:
        break;
    }
    if (!ok) {
        te__lf_free(&d);
        return orig;
    }
    te__bnd bd = te__lf_bounds(&d, s->ranges);
    int decided = -1;
    if (op == TE_LT) {
        if (bd.has_hi && bd.hi < 0)
            decided = 1;
        else if (bd.has_lo && bd.lo >= 0)
            decided = 0;
    } else {
        if (bd.has_lo && bd.has_hi && bd.lo == 0 && bd.hi == 0)
            decided = op == TE_EQ;
        else if ((bd.has_lo && bd.lo > 0) || (bd.has_hi && bd.hi < 0))
            decided = op == TE_NE;
    }
    if (decided < 0 && d.n == 0)
        decided = op == TE_LT ? d.c < 0 : (op == TE_EQ) == (d.c == 0);
    int64_t g = 0;
    for (int i = 0; i < d.n; i++)
        g = gcd64(g, d.v[i].k);
    if (decided < 0 && op != TE_LT && g > 1 && d.c % g != 0)
        decided = op == TE_NE;
    if (decided >= 0) {
        te__lf_free(&d);
        return mk_int(ctx, TE_BOOL, decided);
    }
    if (g < 1 || g == INT64_MIN) {
        te__lf_free(&d);
        return orig;
    }
    /* g*D + c < 0  <=>  D < ceil(-c / g);  g*D + c == 0  <=>  D == -c / g. */
    int64_t kc = d.c == INT64_MIN ? 0 : (op == TE_LT ? ceil_div(-d.c, g) : -d.c / g);
    if (d.c == INT64_MIN) {
        te__lf_free(&d);
        return orig;
    }
    te__lform P, N;
    te__lf_init(&P);
    te__lf_init(&N);
    for (int i = 0; i < d.n; i++) {
        int64_t k = d.v[i].k / g;
        if (k > 0)
            te__lf_add_term(&P, d.v[i].t, k);
        else if (k == INT64_MIN)
            N.ok = false; /* -k does not exist */
        else
            te__lf_add_term(&N, d.v[i].t, -k);
    }
    te_expr *r = orig, *rp = NULL, *rn = NULL;
    if (P.n > 0) {
        te__lf_add_const(&N, kc);
        if (P.ok && N.ok) {
            rp = te__lf_build(ctx, &P);
            rn = te__lf_build(ctx, &N);
            r = rp && rn ? te_binary(ctx, op, rp, rn) : NULL;
        }
    } else if (N.ok && !__builtin_sub_overflow(op == TE_LT ? 1 : 0, kc, &kc)) {
        /* -N < K  <=>  N > -K  <=>  N >= 1 - K (and -N == K  <=>  N == -K) */
        te_binop rop = op == TE_LT ? TE_GE : op;
        rn = te__lf_build(ctx, &N);
        rp = te_int(ctx, kc);
        r = rn && rp ? te_binary(ctx, rop, rn, rp) : NULL;
    }
    if (r && r != orig) {
        /* Both sides are new values: each must stay within int64 wherever a and b do. */
        te__facts fs;
        te__facts_init(&fs, s->ranges);
        te__facts_add(&fs, a);
        te__facts_add(&fs, b);
        if (!te__facts_fit(&fs, rp, false) || !te__facts_fit(&fs, rn, false))
            r = orig;
    }
    te__lf_free(&d);
    te__lf_free(&P);
    te__lf_free(&N);
    return r;
}

/* Comparison of two index values of another integer type: bounds only. */
static te_expr *simp_cmp_bounds(simp *s, te_binop op, te_expr *a, te_expr *b, te_expr *orig)
{
    te__bnd ba = te__arith_bnd(a, s->ranges), bb = te__arith_bnd(b, s->ranges);
    int t = -1;
    bool lt = ba.has_hi && bb.has_lo && ba.hi < bb.lo;  /* a < b always */
    bool le = ba.has_hi && bb.has_lo && ba.hi <= bb.lo; /* a <= b always */
    bool gt = ba.has_lo && bb.has_hi && ba.lo > bb.hi;
    bool ge = ba.has_lo && bb.has_hi && ba.lo >= bb.hi;
    switch (op) {
    case TE_LT:
        t = lt ? 1 : ge ? 0 : -1;
        break;
    case TE_LE:
        t = le ? 1 : gt ? 0 : -1;
        break;
    case TE_GT:
        t = gt ? 1 : le ? 0 : -1;
        break;
    case TE_GE:
        t = ge ? 1 : lt ? 0 : -1;
        break;
    case TE_EQ:
        t = (lt || gt) ? 0 : -1;
        break;
    case TE_NE:
        t = (lt || gt) ? 1 : -1;
        break;
    default:
        break;
    }
    return t >= 0 ? mk_int(s->ctx, TE_BOOL, t) : orig;
}

/* ---- Division ---------------------------------------------------------------------------- */

/* floordiv/floormod of an i64 expression a by a constant c > 0. Splits a = c*q + r where q
 * gathers the terms whose coefficients c divides; decides floordiv(r, c) when r's range lies
 * within one multiple of c. */
static te_expr *simp_floordivmod_i64(simp *s, bool is_div, te_expr *a, int64_t c, te_expr *orig)
{
    te_ctx *ctx = s->ctx;
    if (c == 1)
        return is_div ? a : te_int(ctx, 0);
    /* floordiv(floordiv(x, c1), c2) = floordiv(x, c1*c2);
     * floormod(floormod(x, c1), c2) = floormod(x, c2) when c2 divides c1. */
    if (a->kind == TE_E_BINARY && a->u.bin.b->kind == TE_E_INT && a->u.bin.b->u.i > 0) {
        int64_t c1 = a->u.bin.b->u.i, cc;
        if (is_div && a->u.bin.op == TE_FLOORDIV && !__builtin_mul_overflow(c1, c, &cc))
            return resimp(s, te_floordiv(ctx, a->u.bin.a, te_int(ctx, cc)));
        if (!is_div && a->u.bin.op == TE_FLOORMOD && c1 % c == 0)
            return resimp(s, te_floormod(ctx, a->u.bin.a, te_int(ctx, c)));
    }
    te__lform f, q, r;
    te__lf_init(&f);
    te__lf_init(&q);
    te__lf_init(&r);
    te__lf_add(&f, a, 1);
    te_expr *res = orig;
    if (!f.ok)
        goto done;
    for (int i = 0; i < f.n; i++) {
        if (f.v[i].k % c == 0)
            te__lf_add_term(&q, f.v[i].t, f.v[i].k / c);
        else
            te__lf_add_term(&r, f.v[i].t, f.v[i].k);
    }
    if (!is_div) {
        te__lf_add_const(&r, fmodi(f.c, c)); /* floormod(x + k, c) = floormod(x + k mod c, c) */
    } else if (r.n == 0) {
        te__lf_add_const(&q, fdiv(f.c, c));
        te__lf_add_const(&r, fmodi(f.c, c));
    } else {
        te__lf_add_const(&r, f.c);
    }
    if (!q.ok || !r.ok)
        goto done;
    /* What a's evaluation implies, for the overflow checks of what is rebuilt from it. */
    te__facts fs;
    te__facts_init(&fs, s->ranges);
    te__facts_add(&fs, a);
    te__bnd br = te__lf_bounds(&r, s->ranges);
    if (br.has_lo && br.has_hi && fdiv(br.lo, c) == fdiv(br.hi, c)) {
        int64_t m = fdiv(br.lo, c), mc;
        if (is_div) {
            te__lf_add_const(&q, m);
            if (q.ok)
                res = te__lf_build(ctx, &q);
        } else if (!__builtin_mul_overflow(m, -c, &mc)) {
            te__lf_add_const(&r, mc);
            if (r.ok)
                res = te__lf_build(ctx, &r);
        }
        /* The result's value is floordiv(a, c) (or floormod): only its inner nodes matter. */
        if (res && res != orig && !te__facts_fit(&fs, res, true))
            res = orig;
        goto done;
    }
    if (is_div && q.n == 0 && q.c == 0 && r.n == f.n && r.c == f.c) {
        res = orig; /* nothing to pull out */
        goto done;
    }
    te_expr *re = te__lf_build(ctx, &r);
    if (re && !te__facts_fit(&fs, re, false)) {
        res = orig; /* the new dividend could overflow where a does not */
        goto done;
    }
    te_expr *inner =
        re ? (is_div ? te_floordiv(ctx, re, te_int(ctx, c)) : te_floormod(ctx, re, te_int(ctx, c)))
           : NULL;
    if (!inner) {
        res = NULL;
        goto done;
    }
    if (!is_div) {
        res = inner;
        goto done;
    }
    te__lf_add_term(&q, inner, 1);
    res = q.ok ? te__lf_build(ctx, &q) : orig;
    if (res && res != orig && !te__facts_fit(&fs, res, true))
        res = orig;
done:
    te__lf_free(&f);
    te__lf_free(&q);
    te__lf_free(&r);
    return res;
}

/* ---- Vectors ----------------------------------------------------------------------------- */

/* Splits a vector (or scalar) integer operand into base + stride * lane. */
static bool as_ramp(te_expr *e, te_expr **base, int64_t *stride)
{
    if (e->lanes == 1) {
        *base = e, *stride = 0;
        return true;
    }
    if (e->kind == TE_E_RAMP) {
        *base = e->u.ramp.base, *stride = e->u.ramp.stride;
        return true;
    }
    if (e->kind == TE_E_BCAST && e->u.un.a->lanes == 1) {
        *base = e->u.un.a, *stride = 0;
        return true;
    }
    return false;
}

static te_expr *mk_vec(simp *s, te_expr *base, int64_t stride, int lanes)
{
    if (!base)
        return NULL;
    return stride == 0 ? te__bcast(s->ctx, base, lanes) : te__ramp(s->ctx, base, stride, lanes);
}

static te_expr *simp_vector_binary(simp *s, te_expr *e)
{
    te_ctx *ctx = s->ctx;
    te_expr *a = e->u.bin.a, *b = e->u.bin.b, *ba, *bb;
    int64_t sa, sb;
    int lanes = e->lanes;
    bool va = a->lanes == 1 || a->kind == TE_E_BCAST, vb = b->lanes == 1 || b->kind == TE_E_BCAST;
    if (va && vb) {
        /* Both uniform across lanes: compute once and broadcast. */
        te_expr *sa_ = a->lanes == 1 ? a : a->u.un.a, *sb_ = b->lanes == 1 ? b : b->u.un.a;
        if (sa_->lanes != 1 || sb_->lanes != 1)
            return e;
        te_expr *r = resimp(s, te_binary(ctx, e->u.bin.op, sa_, sb_));
        return r ? te__bcast(ctx, r, lanes) : NULL;
    }
    if (e->dtype != TE_I64 || !as_ramp(a, &ba, &sa) || !as_ramp(b, &bb, &sb))
        return e;
    int64_t st, span;
    /* The lane offsets stride * lane of a new ramp must be int64 constants themselves. */
#define SPAN_OVERFLOWS(st) __builtin_mul_overflow((st), (int64_t)(lanes - 1), &span)
    switch (e->u.bin.op) {
    case TE_ADD:
        if (__builtin_add_overflow(sa, sb, &st) || SPAN_OVERFLOWS(st))
            return e;
        return mk_vec(s, resimp(s, te_add(ctx, ba, bb)), st, lanes);
    case TE_SUB:
        if (__builtin_sub_overflow(sa, sb, &st) || SPAN_OVERFLOWS(st))
            return e;
        return mk_vec(s, resimp(s, te_sub(ctx, ba, bb)), st, lanes);
    case TE_MUL: {
        te_expr *base = sb == 0 ? ba : bb, *k = sb == 0 ? bb : ba;
        int64_t sv = sb == 0 ? sa : sb;
        if ((sa != 0 && sb != 0) || k->kind != TE_E_INT ||
            __builtin_mul_overflow(sv, k->u.i, &st) || SPAN_OVERFLOWS(st))
            return e;
        return mk_vec(s, resimp(s, te_mul(ctx, base, k)), st, lanes);
    }
    case TE_FLOORDIV:
    case TE_FLOORMOD: {
        /* ramp(q*c + r, st, L) with 0 <= r and r + st*(L-1) < c stays in one block of c. */
        if (sb != 0 || bb->kind != TE_E_INT || bb->u.i <= 0 || sa < 0)
            return e;
        int64_t c = bb->u.i;
        te_expr *r = resimp(s, te_floormod(ctx, ba, bb));
        if (!r)
            return NULL;
        te__bnd br = te__arith_bnd(r, s->ranges);
        if (__builtin_mul_overflow(sa, (int64_t)(lanes - 1), &span) || !br.has_lo || !br.has_hi ||
            br.lo < 0 || br.hi > c - 1 - span)
            return e;
        if (e->u.bin.op == TE_FLOORDIV)
            return mk_vec(s, resimp(s, te_floordiv(ctx, ba, bb)), 0, lanes);
        return mk_vec(s, r, sa, lanes);
    }
    default:
        return e;
    }
}
#undef SPAN_OVERFLOWS

/* ---- Node rules -------------------------------------------------------------------------- */

static te_expr *simp_binary(simp *s, te_expr *e)
{
    te_ctx *ctx = s->ctx;
    te_binop op = e->u.bin.op;
    te_expr *a = e->u.bin.a, *b = e->u.bin.b;
    te_dtype dt = a->dtype;
    if (e->lanes > 1)
        return simp_vector_binary(s, e);
    /* Constants. */
    if (a->kind == TE_E_INT && b->kind == TE_E_INT) {
        int64_t r = 0;
        if (te__fold_int(op, dt, a->u.i, b->u.i, &r))
            return mk_int(ctx, e->dtype, r);
        return e;
    }
    if (a->kind == TE_E_FLOAT && b->kind == TE_E_FLOAT) {
        te_expr *r = te__fold_float(ctx, op, dt, a->u.f, b->u.f);
        return r ? r : e;
    }
    if (te_dtype_is_float(dt)) {
        /* Exact identities only: x*1, 1*x, x/1, x-0. */
        if ((op == TE_MUL || op == TE_DIV) && b->kind == TE_E_FLOAT && b->u.f == 1.0)
            return a;
        if (op == TE_MUL && a->kind == TE_E_FLOAT && a->u.f == 1.0)
            return b;
        if (op == TE_SUB && b->kind == TE_E_FLOAT && b->u.f == 0.0 && !signbit(b->u.f))
            return a;
        return e;
    }
    if (op == TE_AND || op == TE_OR) {
        bool is_and = op == TE_AND;
        if (a->kind == TE_E_INT)
            return (a->u.i != 0) == is_and ? b : a;
        if (b->kind == TE_E_INT)
            return (b->u.i != 0) == is_and ? a : b;
        if (te__expr_equal(a, b))
            return a;
        return e;
    }
    bool i64 = dt == TE_I64;
    bool idx = index_type(a);
    /* Truncating division of a provably non-negative value is floor division. */
    if ((op == TE_DIV || op == TE_MOD) && idx && b->kind == TE_E_INT && b->u.i > 0) {
        te__bnd ba = te__arith_bnd(a, s->ranges);
        if (ba.has_lo && ba.lo >= 0)
            return resimp(s, te_binary(ctx, op == TE_DIV ? TE_FLOORDIV : TE_FLOORMOD, a, b));
    }
    switch (op) {
    case TE_ADD:
    case TE_SUB:
    case TE_MUL:
        if (i64) {
            if (op == TE_MUL && a->kind != TE_E_INT && b->kind != TE_E_INT) {
                /* (k1*t1) * (k2*t2) = (k1*k2) * (t1*t2), operands in canonical order. */
                te__lform fa, fb;
                te__lf_init(&fa);
                te__lf_init(&fb);
                te__lf_add(&fa, a, 1);
                te__lf_add(&fb, b, 1);
                te_expr *r = NULL;
                if (fa.ok && fb.ok && fa.n == 1 && fa.c == 0 && fb.n == 1 && fb.c == 0) {
                    int64_t k;
                    te_expr *t1 = fa.v[0].t, *t2 = fb.v[0].t;
                    /* |t1 * t2| <= |e| / |k|, which fits unless k == -1 and e may be
                     * INT64_MIN (then t1 * t2 would be 2^63). */
                    te__bnd be = te__arith_bnd(e, s->ranges);
                    if (!__builtin_mul_overflow(fa.v[0].k, fb.v[0].k, &k) &&
                        (k != -1 || (be.has_lo && be.lo > INT64_MIN))) {
                        if (te__term_cmp(t1, t2) > 0) {
                            te_expr *t = t1;
                            t1 = t2, t2 = t;
                        }
                        te_expr *p = te_mul(ctx, t1, t2);
                        r = p && k != 1 ? te_mul(ctx, p, te_int(ctx, k)) : p;
                    }
                } else if (te__term_cmp(a, b) > 0) {
                    r = te_mul(ctx, b, a);
                }
                te__lf_free(&fa);
                te__lf_free(&fb);
                if (r)
                    return r;
                return e;
            }
            return canon_linear(s, e);
        }
        if (op == TE_ADD && is_int(b, 0))
            return a;
        if (op == TE_ADD && is_int(a, 0))
            return b;
        if (op == TE_SUB && is_int(b, 0))
            return a;
        if (op == TE_SUB && te__expr_equal(a, b))
            return mk_int(ctx, e->dtype, 0);
        if (op == TE_MUL && (is_int(a, 0) || is_int(b, 0)))
            return mk_int(ctx, e->dtype, 0);
        if (op == TE_MUL && is_int(b, 1))
            return a;
        if (op == TE_MUL && is_int(a, 1))
            return b;
        return e;
    case TE_DIV:
        if (is_int(b, 1))
            return a;
        return e;
    case TE_MOD:
        if (is_int(b, 1))
            return mk_int(ctx, e->dtype, 0);
        return e;
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        if (b->kind != TE_E_INT || b->u.i <= 0)
            return e;
        if (i64)
            return simp_floordivmod_i64(s, op == TE_FLOORDIV, a, b->u.i, e);
        if (b->u.i == 1)
            return op == TE_FLOORDIV ? a : mk_int(ctx, e->dtype, 0);
        if (idx) {
            te__bnd ba = te__arith_bnd(a, s->ranges);
            if (ba.has_lo && ba.has_hi && ba.lo >= 0 && ba.hi < b->u.i)
                return op == TE_FLOORDIV ? mk_int(ctx, e->dtype, 0) : a;
        }
        return e;
    case TE_MIN:
    case TE_MAX: {
        bool is_min = op == TE_MIN;
        if (te__expr_equal(a, b))
            return a;
        if (idx) {
            int dec = 0; /* 1: a is the answer, 2: b is */
            if (i64) {
                te__lform d;
                te__lf_diff(&d, a, b);
                te__bnd bd = d.ok ? te__lf_bounds(&d, s->ranges) : TE__BND_NONE;
                te__lf_free(&d);
                if (bd.has_hi && bd.hi <= 0) /* a <= b */
                    dec = is_min ? 1 : 2;
                else if (bd.has_lo && bd.lo >= 0)
                    dec = is_min ? 2 : 1;
            } else {
                te__bnd ba = te__arith_bnd(a, s->ranges), bb = te__arith_bnd(b, s->ranges);
                if (ba.has_hi && bb.has_lo && ba.hi <= bb.lo)
                    dec = is_min ? 1 : 2;
                else if (ba.has_lo && bb.has_hi && ba.lo >= bb.hi)
                    dec = is_min ? 2 : 1;
            }
            if (dec)
                return dec == 1 ? a : b;
        }
        /* Constant second; min(min(x, c1), c2) = min(x, min(c1, c2)). */
        if (a->kind == TE_E_INT)
            return resimp(s, te_binary(ctx, op, b, a));
        if (b->kind == TE_E_INT && a->kind == TE_E_BINARY && a->u.bin.op == op &&
            a->u.bin.b->kind == TE_E_INT) {
            int64_t c1 = a->u.bin.b->u.i, c2 = b->u.i;
            int64_t c = is_min ? (c1 < c2 ? c1 : c2) : (c1 > c2 ? c1 : c2);
            return resimp(s, te_binary(ctx, op, a->u.bin.a, mk_int(ctx, dt, c)));
        }
        return e;
    }
    case TE_EQ:
    case TE_NE:
    case TE_LT:
    case TE_LE:
    case TE_GT:
    case TE_GE:
        if (i64)
            return simp_cmp_i64(s, op, a, b, e);
        if (te__expr_equal(a, b))
            return mk_int(ctx, TE_BOOL, op == TE_EQ || op == TE_LE || op == TE_GE);
        if (idx)
            return simp_cmp_bounds(s, op, a, b, e);
        return e;
    default:
        return e;
    }
}

static te_expr *simp_node(te_ctx *ctx, te_expr *e, void *user)
{
    simp *s = user;
    switch (e->kind) {
    case TE_E_BINARY:
        return simp_binary(s, e);
    case TE_E_NOT: {
        te_expr *a = e->u.un.a;
        if (a->kind == TE_E_INT && a->lanes == 1)
            return mk_int(ctx, TE_BOOL, !a->u.i);
        if (a->kind == TE_E_NOT)
            return a->u.un.a;
        /* !(x < y) is x >= y for integers (not for floats: NaN). */
        if (a->kind == TE_E_BINARY && is_cmp(a->u.bin.op) && a->lanes == 1 &&
            !te_dtype_is_float(a->u.bin.a->dtype))
            return resimp(s, te_binary(ctx, negate_cmp(a->u.bin.op), a->u.bin.a, a->u.bin.b));
        return e;
    }
    case TE_E_NEG: {
        te_expr *a = e->u.un.a;
        if (a->lanes != 1)
            return e;
        if (a->kind == TE_E_INT)
            return mk_int(ctx, e->dtype, (int64_t)(0 - (uint64_t)a->u.i));
        if (a->kind == TE_E_FLOAT)
            return mk_float(ctx, e->dtype, -a->u.f);
        if (a->kind == TE_E_NEG)
            return a->u.un.a;
        if (e->dtype == TE_I64)
            return canon_linear(s, e);
        return e;
    }
    case TE_E_SELECT:
    case TE_E_IF: {
        te_expr *c = e->u.sel.c;
        if (c->kind == TE_E_BCAST)
            c = c->u.un.a;
        if (c->kind == TE_E_INT && c->lanes == 1) {
            te_expr *r = c->u.i ? e->u.sel.t : e->u.sel.f;
            return r->lanes < e->lanes ? te__bcast(ctx, r, e->lanes) : r;
        }
        if (te__expr_equal(e->u.sel.t, e->u.sel.f) && e->u.sel.t->lanes == e->lanes)
            return e->u.sel.t;
        return e;
    }
    case TE_E_CAST:
        if (e->u.un.a->dtype == e->dtype)
            return e->u.un.a;
        return te__fold_cast(ctx, e);
    case TE_E_CALL:
        return te__fold_call(ctx, e);
    case TE_E_RAMP:
        if (e->u.ramp.stride == 0)
            return te__bcast(ctx, e->u.ramp.base, e->lanes);
        return e;
    default:
        return e;
    }
}

te_expr *te__simplify_expr(te_ctx *ctx, te_expr *e, const te__range_map *ranges)
{
    if (!ctx || !e)
        return NULL;
    simp s = {ctx, ranges};
    return te__expr_mutate(ctx, e, simp_node, &s);
}

static bool prove_simplified(te_ctx *ctx, te_expr *c, const te__range_map *ranges)
{
    if (c->kind == TE_E_BCAST)
        c = c->u.un.a;
    if (c->kind == TE_E_INT)
        return c->u.i != 0;
    if (c->kind == TE_E_BINARY && c->u.bin.op == TE_AND)
        return prove_simplified(ctx, c->u.bin.a, ranges) &&
               prove_simplified(ctx, c->u.bin.b, ranges);
    if (c->kind == TE_E_BINARY && c->u.bin.op == TE_OR)
        return prove_simplified(ctx, c->u.bin.a, ranges) ||
               prove_simplified(ctx, c->u.bin.b, ranges);
    return false;
}

bool te__prove(te_ctx *ctx, te_expr *cond, const te__range_map *ranges)
{
    te_expr *c = te__simplify_expr(ctx, cond, ranges);
    return c && prove_simplified(ctx, c, ranges);
}
