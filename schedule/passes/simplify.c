/*
 * Simplification: constant folding, canonical linear arithmetic over i64 and range-based
 * decisions.
 *
 * Canonical form. An i64 expression built from +, -, unary minus and multiplication by a
 * constant is a linear form: a constant plus a sum of coefficient * term, where a term is a
 * variable or an opaque subexpression (a load, a floordiv/floormod/min/max that did not
 * simplify away, a product of two non-constants, ...). Terms are compared structurally
 * (te__expr_equal; variables by identity) so equal terms merge and cancel. The form is rebuilt
 * in one order: terms sorted by the smallest variable id they mention (outer loops were made
 * first, so `i*32 + j`), plain variables before compound terms, ties by a structural order;
 * positive terms first, negative ones subtracted, the constant last (`i*32 + j - 1`).
 *
 * Ranges. te__expr_const_bounds does interval arithmetic, with each side of an interval known
 * or not; variables take their ranges from the range map. The bounds of a linear form are the
 * sum of the bounds of its terms, so `x - x` and `i*32 + j - i*32` are exact.
 *
 * Floating point. Only constants are folded (f32 results rounded to float after each
 * operation, as the generated code computes them) plus the exact identities x*1, x/1 and x-0.
 * Float arithmetic is never reassociated.
 *
 * Integer types other than i64 get constant folding (wrapped to their width) and the exact
 * identities only; bounds-based decisions apply to i32 as well.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/passes.h"

/* ---- Small integer helpers --------------------------------------------------------------- */

static int64_t fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t fmodi(int64_t a, int64_t b)
{
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Wraps v to the width of an integer dtype (two's complement, as the generated code does). */
static int64_t wrap_int(te_dtype dt, int64_t v)
{
    switch (dt) {
    case TE_BOOL:
        return v != 0;
    case TE_I8:
        return (int8_t)v;
    case TE_U8:
        return (uint8_t)v;
    case TE_I32:
        return (int32_t)v;
    default:
        return v;
    }
}

static bool dtype_range(te_dtype dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case TE_BOOL:
        *lo = 0, *hi = 1;
        return true;
    case TE_I8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        return true;
    case TE_U8:
        *lo = 0, *hi = UINT8_MAX;
        return true;
    case TE_I32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return true;
    default:
        return false;
    }
}

static te_expr *mk_int(te_ctx *ctx, te_dtype dt, int64_t v)
{
    te_expr *e = te__new_expr(ctx, TE_E_INT, dt);
    if (e)
        e->u.i = wrap_int(dt, v);
    return e;
}

static te_expr *mk_float(te_ctx *ctx, te_dtype dt, double v)
{
    te_expr *e = te__new_expr(ctx, TE_E_FLOAT, dt);
    if (e)
        e->u.f = dt == TE_F32 ? (double)(float)v : v;
    return e;
}

static bool is_int(const te_expr *e, int64_t v)
{
    return e->kind == TE_E_INT && e->lanes == 1 && e->u.i == v;
}

/* Whether a scalar i64 or i32 expression takes part in range reasoning. */
static bool index_type(const te_expr *e)
{
    return e->lanes == 1 && (e->dtype == TE_I64 || e->dtype == TE_I32);
}

/* ---- Bounds ------------------------------------------------------------------------------ */

typedef struct bnd {
    bool has_lo, has_hi;
    int64_t lo, hi;
} bnd;

static const bnd BND_NONE = {false, false, 0, 0};

static bnd bnd_const(int64_t v) { return (bnd){true, true, v, v}; }

static bool range_lookup(const te__range_map *m, const te_expr *v, int64_t *lo, int64_t *hi)
{
    if (!m)
        return false;
    for (int i = m->n - 1; i >= 0; i--) {
        if (m->vars[i] == v) {
            *lo = m->lo[i];
            *hi = m->hi[i];
            return true;
        }
    }
    return false;
}

static bnd bnd_add(bnd a, bnd b)
{
    bnd r = BND_NONE;
    r.has_lo = a.has_lo && b.has_lo && !__builtin_add_overflow(a.lo, b.lo, &r.lo);
    r.has_hi = a.has_hi && b.has_hi && !__builtin_add_overflow(a.hi, b.hi, &r.hi);
    return r;
}

static bnd bnd_scale(bnd a, int64_t c)
{
    bnd r = BND_NONE;
    if (c >= 0) {
        r.has_lo = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.lo);
        r.has_hi = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.hi);
    } else {
        r.has_lo = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.lo);
        r.has_hi = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.hi);
    }
    return r;
}

static bnd bnd_mul(bnd a, bnd b)
{
    if (a.has_lo && a.has_hi && a.lo == a.hi)
        return bnd_scale(b, a.lo);
    if (b.has_lo && b.has_hi && b.lo == b.hi)
        return bnd_scale(a, b.lo);
    if (!a.has_lo || !a.has_hi || !b.has_lo || !b.has_hi)
        return BND_NONE;
    int64_t c[4];
    if (__builtin_mul_overflow(a.lo, b.lo, &c[0]) || __builtin_mul_overflow(a.lo, b.hi, &c[1]) ||
        __builtin_mul_overflow(a.hi, b.lo, &c[2]) || __builtin_mul_overflow(a.hi, b.hi, &c[3]))
        return BND_NONE;
    bnd r = {true, true, c[0], c[0]};
    for (int i = 1; i < 4; i++) {
        r.lo = c[i] < r.lo ? c[i] : r.lo;
        r.hi = c[i] > r.hi ? c[i] : r.hi;
    }
    return r;
}

static bnd bnd_floordiv(bnd a, int64_t c)
{
    bnd r = BND_NONE;
    if (c <= 0)
        return r;
    if ((r.has_lo = a.has_lo))
        r.lo = fdiv(a.lo, c);
    if ((r.has_hi = a.has_hi))
        r.hi = fdiv(a.hi, c);
    return r;
}

static bnd bnd_floormod(bnd a, int64_t c)
{
    if (c <= 0)
        return BND_NONE;
    if (a.has_lo && a.has_hi && fdiv(a.lo, c) == fdiv(a.hi, c))
        return (bnd){true, true, fmodi(a.lo, c), fmodi(a.hi, c)};
    bnd r = {true, true, 0, c - 1};
    if (a.has_lo && a.lo >= 0 && a.has_hi && a.hi < r.hi)
        r.hi = a.hi;
    return r;
}

static bnd bnd_union(bnd a, bnd b)
{
    bnd r = BND_NONE;
    if ((r.has_lo = a.has_lo && b.has_lo))
        r.lo = a.lo < b.lo ? a.lo : b.lo;
    if ((r.has_hi = a.has_hi && b.has_hi))
        r.hi = a.hi > b.hi ? a.hi : b.hi;
    return r;
}

static bnd bounds(const te_expr *e, const te__range_map *m);

static bnd bnd_minmax(bnd a, bnd b, bool is_min)
{
    bnd r = BND_NONE;
    if (is_min) {
        if ((r.has_lo = a.has_lo && b.has_lo))
            r.lo = a.lo < b.lo ? a.lo : b.lo;
        if (a.has_hi && b.has_hi)
            r.has_hi = true, r.hi = a.hi < b.hi ? a.hi : b.hi;
        else if (a.has_hi || b.has_hi)
            r.has_hi = true, r.hi = a.has_hi ? a.hi : b.hi;
    } else {
        if ((r.has_hi = a.has_hi && b.has_hi))
            r.hi = a.hi > b.hi ? a.hi : b.hi;
        if (a.has_lo && b.has_lo)
            r.has_lo = true, r.lo = a.lo > b.lo ? a.lo : b.lo;
        else if (a.has_lo || b.has_lo)
            r.has_lo = true, r.lo = a.has_lo ? a.lo : b.lo;
    }
    return r;
}

static bnd bounds_binary(const te_expr *e, const te__range_map *m)
{
    const te_expr *a = e->u.bin.a, *b = e->u.bin.b;
    if (e->dtype == TE_BOOL)
        return (bnd){true, true, 0, 1};
    if (te_dtype_is_float(e->dtype))
        return BND_NONE;
    bnd ba = bounds(a, m), bb = bounds(b, m);
    int64_t c = 0;
    bool bconst = b->kind == TE_E_INT && (c = b->u.i, true);
    switch (e->u.bin.op) {
    case TE_ADD:
        return bnd_add(ba, bb);
    case TE_SUB:
        return bnd_add(ba, bnd_scale(bb, -1));
    case TE_MUL:
        return bnd_mul(ba, bb);
    case TE_FLOORDIV:
        return bconst ? bnd_floordiv(ba, c) : BND_NONE;
    case TE_FLOORMOD:
        return bconst ? bnd_floormod(ba, c) : BND_NONE;
    case TE_DIV:
        if (!bconst || c <= 0)
            return BND_NONE;
        if (ba.has_lo && ba.lo >= 0)
            return bnd_floordiv(ba, c);
        /* Truncating division by a positive constant is monotonic. */
        return (bnd){ba.has_lo, ba.has_hi, ba.has_lo ? ba.lo / c : 0, ba.has_hi ? ba.hi / c : 0};
    case TE_MOD:
        if (!bconst || c <= 0)
            return BND_NONE;
        if (ba.has_lo && ba.lo >= 0)
            return bnd_floormod(ba, c);
        if (ba.has_hi && ba.hi <= 0)
            return (bnd){true, true, -(c - 1), 0};
        return (bnd){true, true, -(c - 1), c - 1};
    case TE_MIN:
        return bnd_minmax(ba, bb, true);
    case TE_MAX:
        return bnd_minmax(ba, bb, false);
    default:
        return BND_NONE;
    }
}

static bnd bounds(const te_expr *e, const te__range_map *m)
{
    int64_t lo, hi;
    bnd r = BND_NONE;
    if (!e || te_dtype_is_float(e->dtype))
        return r;
    switch (e->kind) {
    case TE_E_INT:
        return bnd_const(e->u.i);
    case TE_E_VAR:
        if (range_lookup(m, e, &lo, &hi))
            return (bnd){true, true, lo, hi};
        break;
    case TE_E_BINARY:
        r = bounds_binary(e, m);
        break;
    case TE_E_NEG:
        r = bnd_scale(bounds(e->u.un.a, m), -1);
        break;
    case TE_E_NOT:
        return (bnd){true, true, 0, 1};
    case TE_E_SELECT:
    case TE_E_IF:
        r = bnd_union(bounds(e->u.sel.t, m), bounds(e->u.sel.f, m));
        break;
    case TE_E_CAST:
        if (te_dtype_is_int(e->u.un.a->dtype) && e->dtype != TE_BOOL) {
            r = bounds(e->u.un.a, m);
            if (dtype_range(e->dtype, &lo, &hi) &&
                !(r.has_lo && r.has_hi && r.lo >= lo && r.hi <= hi))
                r = BND_NONE;
        }
        break;
    case TE_E_RAMP: {
        int64_t span;
        if (__builtin_mul_overflow(e->u.ramp.stride, (int64_t)(e->lanes - 1), &span))
            return BND_NONE;
        bnd s = span >= 0 ? (bnd){true, true, 0, span} : (bnd){true, true, span, 0};
        r = bnd_add(bounds(e->u.ramp.base, m), s);
        break;
    }
    case TE_E_BCAST:
        r = bounds(e->u.un.a, m);
        break;
    default:
        break;
    }
    /* Narrow types bound every value they hold. */
    if (dtype_range(e->dtype, &lo, &hi)) {
        if (!r.has_lo || r.lo < lo)
            r.has_lo = true, r.lo = lo;
        if (!r.has_hi || r.hi > hi)
            r.has_hi = true, r.hi = hi;
    }
    return r;
}

bool te__expr_const_bounds(const te_expr *e, const te__range_map *ranges, int64_t *lo, int64_t *hi)
{
    if (!e || !te_dtype_is_int(e->dtype))
        return false;
    bnd b = bounds(e, ranges);
    if (!b.has_lo || !b.has_hi)
        return false;
    if (lo)
        *lo = b.lo;
    if (hi)
        *hi = b.hi;
    return true;
}

/* ---- Structural order -------------------------------------------------------------------- */

static int cmp64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

/* A total order on expressions, consistent with te__expr_equal for the kinds it compares. */
static int expr_cmp(const te_expr *a, const te_expr *b)
{
    if (a == b)
        return 0;
    int c;
    if ((c = cmp64(a->kind, b->kind)) || (c = cmp64(a->dtype, b->dtype)) ||
        (c = cmp64(a->lanes, b->lanes)))
        return c;
    switch (a->kind) {
    case TE_E_INT:
        return cmp64(a->u.i, b->u.i);
    case TE_E_FLOAT:
        return a->u.f < b->u.f ? -1 : a->u.f > b->u.f;
    case TE_E_VAR:
        return cmp64(a->u.var.id, b->u.var.id);
    case TE_E_BINARY:
        if ((c = cmp64(a->u.bin.op, b->u.bin.op)) || (c = expr_cmp(a->u.bin.a, b->u.bin.a)))
            return c;
        return expr_cmp(a->u.bin.b, b->u.bin.b);
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        return expr_cmp(a->u.un.a, b->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        if ((c = expr_cmp(a->u.sel.c, b->u.sel.c)) || (c = expr_cmp(a->u.sel.t, b->u.sel.t)))
            return c;
        return expr_cmp(a->u.sel.f, b->u.sel.f);
    case TE_E_CALL:
        if ((c = cmp64(a->u.call.fn, b->u.call.fn)))
            return c;
        for (int i = 0; i < a->u.call.n; i++)
            if ((c = expr_cmp(a->u.call.args[i], b->u.call.args[i])))
                return c;
        return 0;
    case TE_E_LOAD:
        if ((c = cmp64(a->u.load.buf->id, b->u.load.buf->id)) ||
            (c = cmp64(a->u.load.n, b->u.load.n)))
            return c;
        for (int i = 0; i < a->u.load.n; i++)
            if ((c = expr_cmp(a->u.load.idx[i], b->u.load.idx[i])))
                return c;
        return 0;
    case TE_E_READ:
        if ((c = cmp64(a->u.read.t->id, b->u.read.t->id)))
            return c;
        for (int i = 0; i < a->u.read.n; i++)
            if ((c = expr_cmp(a->u.read.idx[i], b->u.read.idx[i])))
                return c;
        return 0;
    case TE_E_RAMP:
        if ((c = cmp64(a->u.ramp.stride, b->u.ramp.stride)))
            return c;
        return expr_cmp(a->u.ramp.base, b->u.ramp.base);
    case TE_E_REDUCE:
        return (uintptr_t)a < (uintptr_t)b ? -1 : 1;
    }
    return 0;
}

static bool min_id_fn(const te_expr *e, void *user)
{
    int *m = user;
    if (e->kind == TE_E_VAR && e->u.var.id < *m)
        *m = e->u.var.id;
    return true;
}

static int min_var_id(const te_expr *e)
{
    int m = INT32_MAX;
    te__expr_visit(e, min_id_fn, &m);
    return m;
}

/* Order of terms in a canonical sum. */
static int term_cmp(const te_expr *a, const te_expr *b)
{
    int c;
    if ((c = cmp64(min_var_id(a), min_var_id(b))))
        return c;
    if ((c = cmp64(a->kind != TE_E_VAR, b->kind != TE_E_VAR)))
        return c;
    return expr_cmp(a, b);
}

/* ---- Linear forms ------------------------------------------------------------------------ */

typedef struct lterm {
    te_expr *t;
    int64_t k;
} lterm;

typedef struct lform {
    int n, cap;
    lterm *v;
    int64_t c;
    bool ok; /* false after an overflow or allocation failure: the form is unusable */
} lform;

static void lf_init(lform *f)
{
    memset(f, 0, sizeof *f);
    f->ok = true;
}

static void lf_free(lform *f)
{
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

static void lf_add_const(lform *f, int64_t k)
{
    if (__builtin_add_overflow(f->c, k, &f->c))
        f->ok = false;
}

static void lf_add_term(lform *f, te_expr *t, int64_t k)
{
    if (k == 0)
        return;
    for (int i = 0; i < f->n; i++) {
        if (te__expr_equal(f->v[i].t, t)) {
            if (__builtin_add_overflow(f->v[i].k, k, &f->v[i].k))
                f->ok = false;
            if (f->v[i].k == 0) {
                memmove(&f->v[i], &f->v[i + 1], sizeof(lterm) * (size_t)(f->n - i - 1));
                f->n--;
            }
            return;
        }
    }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        lterm *v = realloc(f->v, sizeof(lterm) * (size_t)cap);
        if (!v) {
            f->ok = false;
            return;
        }
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (lterm){t, k};
}

/* Adds scale * e to f. e is already simplified (so constants sit where the canonical form
 * puts them) and of dtype i64. */
static void lf_add(lform *f, te_expr *e, int64_t scale)
{
    int64_t k;
    if (!f->ok || scale == 0)
        return;
    if (e->lanes != 1) {
        lf_add_term(f, e, scale);
        return;
    }
    switch (e->kind) {
    case TE_E_INT:
        if (__builtin_mul_overflow(e->u.i, scale, &k))
            f->ok = false;
        else
            lf_add_const(f, k);
        return;
    case TE_E_NEG:
        if (scale == INT64_MIN)
            f->ok = false;
        else
            lf_add(f, e->u.un.a, -scale);
        return;
    case TE_E_BINARY:
        switch (e->u.bin.op) {
        case TE_ADD:
            lf_add(f, e->u.bin.a, scale);
            lf_add(f, e->u.bin.b, scale);
            return;
        case TE_SUB:
            lf_add(f, e->u.bin.a, scale);
            if (scale == INT64_MIN)
                f->ok = false;
            else
                lf_add(f, e->u.bin.b, -scale);
            return;
        case TE_MUL:
            if (e->u.bin.b->kind == TE_E_INT || e->u.bin.a->kind == TE_E_INT) {
                te_expr *c = e->u.bin.b->kind == TE_E_INT ? e->u.bin.b : e->u.bin.a;
                te_expr *x = c == e->u.bin.b ? e->u.bin.a : e->u.bin.b;
                if (__builtin_mul_overflow(c->u.i, scale, &k))
                    f->ok = false;
                else
                    lf_add(f, x, k);
                return;
            }
            break;
        default:
            break;
        }
        break;
    default:
        break;
    }
    lf_add_term(f, e, scale);
}

static bnd lf_bounds(const lform *f, const te__range_map *m)
{
    bnd r = bnd_const(f->c);
    for (int i = 0; i < f->n && (r.has_lo || r.has_hi); i++)
        r = bnd_add(r, bnd_scale(bounds(f->v[i].t, m), f->v[i].k));
    return r;
}

static int lterm_cmp(const void *pa, const void *pb)
{
    const lterm *a = pa, *b = pb;
    return term_cmp(a->t, b->t);
}

/* Builds sum(|k| * t) over the terms of f whose sign is `sign`, in canonical order; NULL when
 * there are none. *fail is set on allocation failure. */
static te_expr *build_sum(te_ctx *ctx, const lform *f, int sign, te_expr *acc, bool *fail)
{
    for (int i = 0; i < f->n; i++) {
        int64_t k = f->v[i].k;
        if ((k > 0) != (sign > 0))
            continue;
        te_expr *t = f->v[i].t;
        bool sub = false;
        if (k < 0 && k != INT64_MIN && acc) {
            k = -k;
            sub = true;
        } else if (k < 0 && k != INT64_MIN && !acc) {
            k = -k;
            t = k == 1 ? te_neg(ctx, t) : te_mul(ctx, t, te_int(ctx, -k));
            k = 1;
        }
        te_expr *p = k == 1 ? t : te_mul(ctx, t, te_int(ctx, k));
        acc = !acc ? p : sub ? te_sub(ctx, acc, p) : te_add(ctx, acc, p);
        if (!acc) {
            *fail = true;
            return NULL;
        }
    }
    return acc;
}

/* Rebuilds the canonical expression of f (sorting its terms in place). */
static te_expr *lf_build(te_ctx *ctx, lform *f)
{
    bool fail = false;
    if (f->n > 1)
        qsort(f->v, (size_t)f->n, sizeof(lterm), lterm_cmp);
    te_expr *e = build_sum(ctx, f, 1, NULL, &fail);
    if (!e && f->c > 0 && f->n > 0) {
        /* Only negative terms: lead with the constant, `8 - i`. */
        e = te_int(ctx, f->c);
        e = build_sum(ctx, f, -1, e, &fail);
        return fail ? NULL : e;
    }
    e = build_sum(ctx, f, -1, e, &fail);
    if (fail)
        return NULL;
    if (!e)
        return te_int(ctx, f->c);
    if (f->c > 0)
        e = te_add(ctx, e, te_int(ctx, f->c));
    else if (f->c < 0 && f->c != INT64_MIN)
        e = te_sub(ctx, e, te_int(ctx, -f->c));
    else if (f->c == INT64_MIN)
        e = te_add(ctx, e, te_int(ctx, f->c));
    return e;
}

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
static void lf_recombine(simp *s, lform *f)
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
                    lf_add_term(f, t, -kt);
                    lf_add_term(f, d, -kd);
                    lf_add(f, x, kt);
                    changed = true;
                    break;
                }
                if (te__expr_equal(t, x) && x->kind == TE_E_VAR && prod == -kd) {
                    te_expr *m = resimp(s, te_floormod(s->ctx, x, te_int(s->ctx, c)));
                    if (!m) {
                        f->ok = false;
                        return;
                    }
                    lf_add_term(f, t, -kt);
                    lf_add_term(f, d, -kd);
                    lf_add_term(f, m, kt);
                    changed = true;
                    break;
                }
            }
        }
        if (!changed)
            return;
    }
}

/* Canonical expression of an i64 sum/difference/product node; NULL on failure. */
static te_expr *canon_linear(simp *s, te_expr *e)
{
    lform f;
    lf_init(&f);
    lf_add(&f, e, 1);
    lf_recombine(s, &f);
    te_expr *r = f.ok ? lf_build(s->ctx, &f) : e;
    lf_free(&f);
    return r;
}

/* Linear form of a - b (both simplified i64 expressions). */
static void lf_diff(lform *f, te_expr *a, te_expr *b)
{
    lf_init(f);
    lf_add(f, a, 1);
    lf_add(f, b, -1);
}

/* ---- Constant folding -------------------------------------------------------------------- */

static bool fold_int(te_binop op, te_dtype dt, int64_t a, int64_t b, int64_t *out)
{
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case TE_ADD:
        *out = (int64_t)(ua + ub);
        break;
    case TE_SUB:
        *out = (int64_t)(ua - ub);
        break;
    case TE_MUL:
        *out = (int64_t)(ua * ub);
        break;
    case TE_DIV:
    case TE_MOD:
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return false;
        *out = op == TE_DIV        ? a / b
               : op == TE_MOD      ? a % b
               : op == TE_FLOORDIV ? fdiv(a, b)
                                   : fmodi(a, b);
        break;
    case TE_MIN:
        *out = a < b ? a : b;
        break;
    case TE_MAX:
        *out = a > b ? a : b;
        break;
    case TE_EQ:
        *out = a == b;
        return true;
    case TE_NE:
        *out = a != b;
        return true;
    case TE_LT:
        *out = a < b;
        return true;
    case TE_LE:
        *out = a <= b;
        return true;
    case TE_GT:
        *out = a > b;
        return true;
    case TE_GE:
        *out = a >= b;
        return true;
    case TE_AND:
        *out = a && b;
        return true;
    case TE_OR:
        *out = a || b;
        return true;
    }
    *out = wrap_int(dt, *out);
    return true;
}

static te_expr *fold_float(te_ctx *ctx, te_binop op, te_dtype dt, double a, double b)
{
    bool f32 = dt == TE_F32;
    double r;
    switch (op) {
    case TE_ADD:
        r = f32 ? (double)((float)a + (float)b) : a + b;
        break;
    case TE_SUB:
        r = f32 ? (double)((float)a - (float)b) : a - b;
        break;
    case TE_MUL:
        r = f32 ? (double)((float)a * (float)b) : a * b;
        break;
    case TE_DIV:
        r = f32 ? (double)((float)a / (float)b) : a / b;
        break;
    case TE_MIN:
    case TE_MAX:
        if (isnan(a) || isnan(b))
            return NULL;
        r = (op == TE_MIN) == (a < b) ? a : b;
        break;
    case TE_EQ:
        return mk_int(ctx, TE_BOOL, a == b);
    case TE_NE:
        return mk_int(ctx, TE_BOOL, a != b);
    case TE_LT:
        return mk_int(ctx, TE_BOOL, a < b);
    case TE_LE:
        return mk_int(ctx, TE_BOOL, a <= b);
    case TE_GT:
        return mk_int(ctx, TE_BOOL, a > b);
    case TE_GE:
        return mk_int(ctx, TE_BOOL, a >= b);
    default:
        return NULL;
    }
    return mk_float(ctx, dt, r);
}

static te_expr *fold_call(te_ctx *ctx, te_expr *e)
{
    for (int i = 0; i < e->u.call.n; i++)
        if (e->u.call.args[i]->kind != TE_E_FLOAT || e->u.call.args[i]->lanes != 1)
            return e;
    double x = e->u.call.args[0]->u.f, y = e->u.call.n > 1 ? e->u.call.args[1]->u.f : 0, r;
    if (e->dtype == TE_F32) {
        float xf = (float)x, yf = (float)y;
        switch (e->u.call.fn) {
        case TE_EXP:
            r = expf(xf);
            break;
        case TE_LOG:
            r = logf(xf);
            break;
        case TE_SQRT:
            r = sqrtf(xf);
            break;
        case TE_RSQRT:
            r = 1.0f / sqrtf(xf);
            break;
        case TE_TANH:
            r = tanhf(xf);
            break;
        case TE_ERF:
            r = erff(xf);
            break;
        case TE_SIGMOID:
            r = 1.0f / (1.0f + expf(-xf));
            break;
        case TE_FABS:
            r = fabsf(xf);
            break;
        case TE_FLOOR:
            r = floorf(xf);
            break;
        case TE_CEIL:
            r = ceilf(xf);
            break;
        case TE_POW:
            r = powf(xf, yf);
            break;
        default:
            return e;
        }
    } else {
        switch (e->u.call.fn) {
        case TE_EXP:
            r = exp(x);
            break;
        case TE_LOG:
            r = log(x);
            break;
        case TE_SQRT:
            r = sqrt(x);
            break;
        case TE_RSQRT:
            r = 1.0 / sqrt(x);
            break;
        case TE_TANH:
            r = tanh(x);
            break;
        case TE_ERF:
            r = erf(x);
            break;
        case TE_SIGMOID:
            r = 1.0 / (1.0 + exp(-x));
            break;
        case TE_FABS:
            r = fabs(x);
            break;
        case TE_FLOOR:
            r = floor(x);
            break;
        case TE_CEIL:
            r = ceil(x);
            break;
        case TE_POW:
            r = pow(x, y);
            break;
        default:
            return e;
        }
    }
    return mk_float(ctx, e->dtype, r);
}

static te_expr *fold_cast(te_ctx *ctx, te_expr *e)
{
    te_expr *a = e->u.un.a;
    if (a->lanes != 1 || (a->kind != TE_E_INT && a->kind != TE_E_FLOAT))
        return e;
    if (te_dtype_is_float(e->dtype))
        return mk_float(ctx, e->dtype, a->kind == TE_E_INT ? (double)a->u.i : a->u.f);
    if (a->kind == TE_E_INT)
        return mk_int(ctx, e->dtype, a->u.i);
    double v = a->u.f;
    if (e->dtype == TE_BOOL)
        return mk_int(ctx, TE_BOOL, v != 0);
    /* Float to integer is only defined when the truncated value fits. */
    if (!(v > -9.2e18 && v < 9.2e18))
        return e;
    int64_t iv = (int64_t)v, lo, hi;
    if (dtype_range(e->dtype, &lo, &hi) && (iv < lo || iv > hi))
        return e;
    return mk_int(ctx, e->dtype, iv);
}

/* ---- Comparisons ------------------------------------------------------------------------- */

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
    lform d;
    lf_diff(&d, a, b);
    lf_recombine(s, &d);
    if (!d.ok) {
        lf_free(&d);
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
        lf_free(&d);
        return orig;
    }
    bnd bd = lf_bounds(&d, s->ranges);
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
        lf_free(&d);
        return mk_int(ctx, TE_BOOL, decided);
    }
    if (g < 1 || g == INT64_MIN) {
        lf_free(&d);
        return orig;
    }
    /* g*D + c < 0  <=>  D < ceil(-c / g);  g*D + c == 0  <=>  D == -c / g. */
    int64_t kc = d.c == INT64_MIN ? 0 : (op == TE_LT ? ceil_div(-d.c, g) : -d.c / g);
    if (d.c == INT64_MIN) {
        lf_free(&d);
        return orig;
    }
    lform P, N;
    lf_init(&P);
    lf_init(&N);
    for (int i = 0; i < d.n; i++) {
        int64_t k = d.v[i].k / g;
        if (k > 0)
            lf_add_term(&P, d.v[i].t, k);
        else
            lf_add_term(&N, d.v[i].t, -k);
    }
    te_expr *r;
    if (P.n > 0) {
        lf_add_const(&N, kc);
        r = te_binary(ctx, op, lf_build(ctx, &P), lf_build(ctx, &N));
    } else {
        /* -N < K  <=>  N > -K  <=>  N >= 1 - K */
        te_binop rop = op == TE_LT ? TE_GE : op;
        int64_t rc = op == TE_LT ? 1 - kc : -kc;
        P.c = rc;
        r = te_binary(ctx, rop, lf_build(ctx, &N), te_int(ctx, P.c));
    }
    lf_free(&d);
    lf_free(&P);
    lf_free(&N);
    return r;
}

/* Comparison of two index values of another integer type: bounds only. */
static te_expr *simp_cmp_bounds(simp *s, te_binop op, te_expr *a, te_expr *b, te_expr *orig)
{
    bnd ba = bounds(a, s->ranges), bb = bounds(b, s->ranges);
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
    lform f, q, r;
    lf_init(&f);
    lf_init(&q);
    lf_init(&r);
    lf_add(&f, a, 1);
    te_expr *res = orig;
    if (!f.ok)
        goto done;
    for (int i = 0; i < f.n; i++) {
        if (f.v[i].k % c == 0)
            lf_add_term(&q, f.v[i].t, f.v[i].k / c);
        else
            lf_add_term(&r, f.v[i].t, f.v[i].k);
    }
    if (!is_div) {
        lf_add_const(&r, fmodi(f.c, c)); /* floormod(x + k, c) = floormod(x + k mod c, c) */
    } else if (r.n == 0) {
        lf_add_const(&q, fdiv(f.c, c));
        lf_add_const(&r, fmodi(f.c, c));
    } else {
        lf_add_const(&r, f.c);
    }
    if (!q.ok || !r.ok)
        goto done;
    bnd br = lf_bounds(&r, s->ranges);
    if (br.has_lo && br.has_hi && fdiv(br.lo, c) == fdiv(br.hi, c)) {
        int64_t m = fdiv(br.lo, c);
        if (is_div) {
            lf_add_const(&q, m);
            if (q.ok)
                res = lf_build(ctx, &q);
        } else {
            lf_add_const(&r, -m * c);
            if (r.ok)
                res = lf_build(ctx, &r);
        }
        goto done;
    }
    if (is_div && q.n == 0 && q.c == 0 && r.n == f.n && r.c == f.c) {
        res = orig; /* nothing to pull out */
        goto done;
    }
    te_expr *re = lf_build(ctx, &r);
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
    lf_add_term(&q, inner, 1);
    res = q.ok ? lf_build(ctx, &q) : orig;
done:
    lf_free(&f);
    lf_free(&q);
    lf_free(&r);
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
    int64_t st;
    switch (e->u.bin.op) {
    case TE_ADD:
        if (__builtin_add_overflow(sa, sb, &st))
            return e;
        return mk_vec(s, resimp(s, te_add(ctx, ba, bb)), st, lanes);
    case TE_SUB:
        if (__builtin_sub_overflow(sa, sb, &st))
            return e;
        return mk_vec(s, resimp(s, te_sub(ctx, ba, bb)), st, lanes);
    case TE_MUL: {
        te_expr *base = sb == 0 ? ba : bb, *k = sb == 0 ? bb : ba;
        int64_t sv = sb == 0 ? sa : sb;
        if ((sa != 0 && sb != 0) || k->kind != TE_E_INT || __builtin_mul_overflow(sv, k->u.i, &st))
            return e;
        return mk_vec(s, resimp(s, te_mul(ctx, base, k)), st, lanes);
    }
    case TE_FLOORDIV:
    case TE_FLOORMOD: {
        /* ramp(q*c + r, st, L) with 0 <= r and r + st*(L-1) < c stays in one block of c. */
        if (sb != 0 || bb->kind != TE_E_INT || bb->u.i <= 0 || sa < 0)
            return e;
        int64_t c = bb->u.i, span;
        te_expr *r = resimp(s, te_floormod(ctx, ba, bb));
        if (!r)
            return NULL;
        bnd br = bounds(r, s->ranges);
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
        if (fold_int(op, dt, a->u.i, b->u.i, &r))
            return mk_int(ctx, e->dtype, r);
        return e;
    }
    if (a->kind == TE_E_FLOAT && b->kind == TE_E_FLOAT) {
        te_expr *r = fold_float(ctx, op, dt, a->u.f, b->u.f);
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
        bnd ba = bounds(a, s->ranges);
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
                lform fa, fb;
                lf_init(&fa);
                lf_init(&fb);
                lf_add(&fa, a, 1);
                lf_add(&fb, b, 1);
                te_expr *r = NULL;
                if (fa.ok && fb.ok && fa.n == 1 && fa.c == 0 && fb.n == 1 && fb.c == 0) {
                    int64_t k;
                    te_expr *t1 = fa.v[0].t, *t2 = fb.v[0].t;
                    if (!__builtin_mul_overflow(fa.v[0].k, fb.v[0].k, &k)) {
                        if (term_cmp(t1, t2) > 0) {
                            te_expr *t = t1;
                            t1 = t2, t2 = t;
                        }
                        te_expr *p = te_mul(ctx, t1, t2);
                        r = p && k != 1 ? te_mul(ctx, p, te_int(ctx, k)) : p;
                    }
                } else if (term_cmp(a, b) > 0) {
                    r = te_mul(ctx, b, a);
                }
                lf_free(&fa);
                lf_free(&fb);
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
            bnd ba = bounds(a, s->ranges);
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
                lform d;
                lf_diff(&d, a, b);
                bnd bd = d.ok ? lf_bounds(&d, s->ranges) : BND_NONE;
                lf_free(&d);
                if (bd.has_hi && bd.hi <= 0) /* a <= b */
                    dec = is_min ? 1 : 2;
                else if (bd.has_lo && bd.lo >= 0)
                    dec = is_min ? 2 : 1;
            } else {
                bnd ba = bounds(a, s->ranges), bb = bounds(b, s->ranges);
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
        return fold_cast(ctx, e);
    case TE_E_CALL:
        return fold_call(ctx, e);
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
    if (cond->kind != TE_E_BINARY || !is_cmp(cond->u.bin.op) || cond->u.bin.a->dtype != TE_I64 ||
        cond->lanes != 1)
        return false;
    lform d;
    lf_diff(&d, cond->u.bin.a, cond->u.bin.b);
    bool ok = d.ok && d.n == 1 && d.v[0].t == v;
    int64_t k = ok ? d.v[0].k : 0, c = d.c;
    lf_free(&d);
    if (!ok)
        return false;
    te_binop op = cond->u.bin.op;
    if (k < 0) {
        if (k == INT64_MIN || c == INT64_MIN)
            return false;
        k = -k, c = -c, op = flip_cmp(op);
    }
    /* k*v + c op 0 with k > 0. */
    *lo = INT64_MIN, *hi = INT64_MAX;
    int64_t nc = c == INT64_MIN ? 0 : -c;
    if (c == INT64_MIN)
        return false;
    switch (op) {
    case TE_LT:
        *hi = ceil_div(nc, k) - 1;
        break; /* v < -c/k */
    case TE_LE:
        *hi = fdiv(nc, k);
        break; /* v <= -c/k */
    case TE_GT:
        *lo = fdiv(nc, k) + 1;
        break; /* v > -c/k */
    case TE_GE:
        *lo = ceil_div(nc, k);
        break; /* v >= -c/k */
    case TE_EQ:
        if (nc % k != 0)
            *lo = 1, *hi = 0;
        else
            *lo = *hi = nc / k;
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
        bnd bm = bounds(mn, &w->ranges), be = bounds(ex, &w->ranges);
        if (bm.has_lo && bm.has_hi && be.has_hi && !__builtin_add_overflow(bm.hi, be.hi - 1, &hi)) {
            lo = bm.lo;
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
    if (v->kind != TE_E_VAR || !range_lookup(&w->ranges, v, &lo, &hi) ||
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
        bnd bv = bounds(v, &w->ranges);
        bool have = te_dtype_is_int(v->dtype) && bv.has_lo && bv.has_hi;
        if (have && !push(w, s->u.let.var, bv.lo, bv.hi))
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
    if (s->kind == TE_S_STORE || s->kind == TE_S_BARRIER)
        *found = true;
    return !*found;
}

/* Whether a statement has an effect: a store or a barrier somewhere inside. */
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

static bool buf_use_expr(const te_expr *e, void *user)
{
    buf_use *u = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == u->buf)
        u->found = true;
    return !u->found;
}

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
    te__stmt_visit(s, buf_use_stmt, buf_use_expr, &u);
    return u.found;
}

/* Dead code: loops, allocations and branches that store nothing (what is left when loop
 * partitioning empties a piece of a producer and its consumer), and allocations nothing in
 * their scope touches. Comments stay only beside statements that do something. */
static te_stmt *drop_dead(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)ctx;
    (void)user;
    if (s->kind == TE_S_SEQ || s->kind == TE_S_COMMENT || s->kind == TE_S_STORE ||
        s->kind == TE_S_BARRIER)
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
