/* The arithmetic library, part 2: linear forms c + sum(k * t) over i64, their canonical
 * order, and the overflow proofs of expressions rebuilt from them (te__facts). See te/arith.h.
 *
 * Canonical form. An i64 expression built from +, -, unary minus and multiplication by a
 * constant is a linear form: a constant plus a sum of coefficient * term, where a term is a
 * variable or an opaque subexpression (a load, a floordiv/floormod/min/max that did not
 * simplify away, a product of two non-constants, ...). Terms are compared structurally
 * (te__expr_equal; variables by identity) so equal terms merge and cancel. The form is rebuilt
 * in one order: terms sorted by the smallest variable id they mention (outer loops were made
 * first, so `i*32 + j`), plain variables before compound terms, ties by a structural order;
 * positive terms first, negative ones subtracted, the constant last (`i*32 + j - 1`).
 */
#include <stdlib.h>
#include <string.h>

#include "te/arith_impl.h"

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
int te__term_cmp(const te_expr *a, const te_expr *b)
{
    int c;
    if ((c = cmp64(min_var_id(a), min_var_id(b))))
        return c;
    if ((c = cmp64(a->kind != TE_E_VAR, b->kind != TE_E_VAR)))
        return c;
    return expr_cmp(a, b);
}

/* ---- Linear forms ------------------------------------------------------------------------ */

void te__lf_init(te__lform *f)
{
    memset(f, 0, sizeof *f);
    f->ok = true;
}

void te__lf_free(te__lform *f)
{
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

void te__lf_add_const(te__lform *f, int64_t k)
{
    if (__builtin_add_overflow(f->c, k, &f->c))
        f->ok = false;
}

void te__lf_add_term(te__lform *f, te_expr *t, int64_t k)
{
    if (k == 0)
        return;
    for (int i = 0; i < f->n; i++) {
        if (te__expr_equal(f->v[i].t, t)) {
            if (__builtin_add_overflow(f->v[i].k, k, &f->v[i].k))
                f->ok = false;
            if (f->v[i].k == 0) {
                memmove(&f->v[i], &f->v[i + 1], sizeof(te__lterm) * (size_t)(f->n - i - 1));
                f->n--;
            }
            return;
        }
    }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        te__lterm *v = realloc(f->v, sizeof(te__lterm) * (size_t)cap);
        if (!v) {
            f->ok = false;
            return;
        }
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (te__lterm){t, k};
}

/* Adds scale * e to f. e is already simplified (so constants sit where the canonical form
 * puts them) and of dtype i64. */
void te__lf_add(te__lform *f, te_expr *e, int64_t scale)
{
    int64_t k;
    if (!f->ok || scale == 0)
        return;
    if (e->lanes != 1) {
        te__lf_add_term(f, e, scale);
        return;
    }
    switch (e->kind) {
    case TE_E_INT:
        if (__builtin_mul_overflow(e->u.i, scale, &k))
            f->ok = false;
        else
            te__lf_add_const(f, k);
        return;
    case TE_E_NEG:
        if (scale == INT64_MIN)
            f->ok = false;
        else
            te__lf_add(f, e->u.un.a, -scale);
        return;
    case TE_E_BINARY:
        switch (e->u.bin.op) {
        case TE_ADD:
            te__lf_add(f, e->u.bin.a, scale);
            te__lf_add(f, e->u.bin.b, scale);
            return;
        case TE_SUB:
            te__lf_add(f, e->u.bin.a, scale);
            if (scale == INT64_MIN)
                f->ok = false;
            else
                te__lf_add(f, e->u.bin.b, -scale);
            return;
        case TE_MUL:
            if (e->u.bin.b->kind == TE_E_INT || e->u.bin.a->kind == TE_E_INT) {
                te_expr *c = e->u.bin.b->kind == TE_E_INT ? e->u.bin.b : e->u.bin.a;
                te_expr *x = c == e->u.bin.b ? e->u.bin.a : e->u.bin.b;
                if (__builtin_mul_overflow(c->u.i, scale, &k))
                    f->ok = false;
                else
                    te__lf_add(f, x, k);
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
    te__lf_add_term(f, e, scale);
}

te__bnd te__lf_bounds(const te__lform *f, const te__range_map *m)
{
    te__bnd r = te__bnd_const(f->c);
    for (int i = 0; i < f->n && (r.has_lo || r.has_hi); i++)
        r = te__bnd_add(r, te__bnd_scale(te__arith_bnd(f->v[i].t, m), f->v[i].k));
    return r;
}

static int lterm_cmp(const void *pa, const void *pb)
{
    const te__lterm *a = pa, *b = pb;
    return te__term_cmp(a->t, b->t);
}

/* Builds sum(|k| * t) over the terms of f whose sign is `sign`, in canonical order; NULL when
 * there are none. *fail is set on allocation failure. */
static te_expr *build_sum(te_ctx *ctx, const te__lform *f, int sign, te_expr *acc, bool *fail)
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
te_expr *te__lf_build(te_ctx *ctx, te__lform *f)
{
    bool fail = false;
    if (f->n > 1)
        qsort(f->v, (size_t)f->n, sizeof(te__lterm), lterm_cmp);
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

/* Linear form of a - b (both simplified i64 expressions). */
void te__lf_diff(te__lform *f, te_expr *a, te_expr *b)
{
    te__lf_init(f);
    te__lf_add(f, a, 1);
    te__lf_add(f, b, -1);
}

bool te__arith_linear_in_var(const te_expr *a, const te_expr *b, const te_expr *v, int64_t *k,
                             int64_t *c)
{
    if (!a || !b || a->lanes != 1 || b->lanes != 1 || a->dtype != TE_I64 || b->dtype != TE_I64)
        return false;
    te__lform d;
    /* te__lf_add only reads the expressions; the form keeps pointers to their terms. */
    te__lf_diff(&d, (te_expr *)a, (te_expr *)b);
    bool ok = d.ok && (d.n == 0 || (d.n == 1 && d.v[0].t == v));
    if (ok) {
        *k = d.n ? d.v[0].k : 0;
        *c = d.c;
    }
    te__lf_free(&d);
    return ok;
}

/* ---- Overflow proofs ----------------------------------------------------------------------
 * A rewrite replaces an expression e by r with the same mathematical value. r may compute
 * intermediate values e never computed (`(i + 1) * 4` becomes `i * 4 + 4`), which can overflow
 * where e does not. te__facts gathers what e's evaluation without overflow implies (each node
 * of its linear structure is an int64 value; if `x + 5` is one, x <= INT64_MAX - 5; if `k * 32`
 * is one, |k| <= INT64_MAX / 32), and te__facts_fit checks every node r builds against the
 * bounds its terms then have. */

static te__bnd full_i64(void) { return (te__bnd){true, true, INT64_MIN, INT64_MAX}; }

/* Intersection (a side known in either operand is known). */
static te__bnd meet(te__bnd a, te__bnd b)
{
    te__bnd r = a;
    if (b.has_lo && (!r.has_lo || b.lo > r.lo))
        r.has_lo = true, r.lo = b.lo;
    if (b.has_hi && (!r.has_hi || b.hi < r.hi))
        r.has_hi = true, r.hi = b.hi;
    return r;
}

/* The values x with x * c within want (c != 0), as far as they can be told. */
static te__bnd div_bnd(te__bnd want, int64_t c)
{
    te__bnd r = TE__BND_NONE;
    if (c == 0 || c == INT64_MIN)
        return r;
    if (c < 0) {
        /* x * c in [lo, hi]  <=>  x * -c in [-hi, -lo] */
        te__bnd n = te__bnd_scale(want, -1);
        return div_bnd(n, -c);
    }
    if ((r.has_lo = want.has_lo))
        r.lo = fdiv(want.lo, c) + (fmodi(want.lo, c) != 0);
    if ((r.has_hi = want.has_hi))
        r.hi = fdiv(want.hi, c);
    return r;
}

static te__bnd fwd(const te__facts *fs, const te_expr *e)
{
    return meet(te__arith_bnd(e, fs->ranges), full_i64());
}

static void note(te__facts *fs, const te_expr *e, te__bnd b)
{
    for (int i = 0; i < fs->n; i++) {
        if (fs->node[i] == e || te__expr_equal(fs->node[i], e)) {
            fs->b[i] = meet(fs->b[i], b);
            return;
        }
    }
    if (fs->n < TE__FACTS_MAX) {
        fs->node[fs->n] = e;
        fs->b[fs->n++] = b;
    }
}

static bool lookup(const te__facts *fs, const te_expr *e, te__bnd *b)
{
    for (int i = 0; i < fs->n; i++) {
        if (fs->node[i] == e || te__expr_equal(fs->node[i], e)) {
            *b = fs->b[i];
            return true;
        }
    }
    return false;
}

/* Records that e's value lies within want, and what follows for its operands. */
static void facts_walk(te__facts *fs, const te_expr *e, te__bnd want)
{
    want = meet(want, full_i64());
    note(fs, e, want);
    if (e->lanes != 1 || e->dtype != TE_I64)
        return;
    const te_expr *a, *b;
    switch (e->kind) {
    case TE_E_NEG:
        facts_walk(fs, e->u.un.a, te__bnd_scale(want, -1));
        return;
    case TE_E_BINARY:
        a = e->u.bin.a, b = e->u.bin.b;
        switch (e->u.bin.op) {
        case TE_ADD: /* a in want - b, b in want - a */
            facts_walk(fs, a, te__bnd_add(want, te__bnd_scale(fwd(fs, b), -1)));
            facts_walk(fs, b, te__bnd_add(want, te__bnd_scale(fwd(fs, a), -1)));
            return;
        case TE_SUB: /* a in want + b, b in a - want */
            facts_walk(fs, a, te__bnd_add(want, fwd(fs, b)));
            facts_walk(fs, b, te__bnd_add(fwd(fs, a), te__bnd_scale(want, -1)));
            return;
        case TE_MUL:
            if (b->kind == TE_E_INT)
                facts_walk(fs, a, div_bnd(want, b->u.i));
            else if (a->kind == TE_E_INT)
                facts_walk(fs, b, div_bnd(want, a->u.i));
            return;
        default:
            return;
        }
    default:
        return;
    }
}

void te__facts_init(te__facts *fs, const te__range_map *ranges)
{
    fs->n = 0;
    fs->ranges = ranges;
}

void te__facts_add(te__facts *fs, const te_expr *e)
{
    if (e)
        facts_walk(fs, e, full_i64());
}

/* Bounds of r's value; clears *ok when a node r builds may leave int64. */
static te__bnd fit(const te__facts *fs, const te_expr *r, bool exempt, bool *ok)
{
    te__bnd f, res;
    if (lookup(fs, r, &f)) /* r is (equal to) an expression the original evaluated */
        return meet(f, fwd(fs, r));
    if (r->lanes != 1)
        return fwd(fs, r);
    switch (r->kind) {
    case TE_E_INT:
        return te__bnd_const(r->u.i);
    case TE_E_NEG:
        res = te__bnd_scale(fit(fs, r->u.un.a, false, ok), -1);
        break;
    case TE_E_BINARY: {
        te_binop op = r->u.bin.op;
        const te_expr *a = r->u.bin.a, *b = r->u.bin.b;
        if (op == TE_ADD) {
            res = te__bnd_add(fit(fs, a, false, ok), fit(fs, b, false, ok));
        } else if (op == TE_SUB) {
            res = te__bnd_add(fit(fs, a, false, ok), te__bnd_scale(fit(fs, b, false, ok), -1));
        } else if (op == TE_MUL && b->kind == TE_E_INT) {
            res = te__bnd_scale(fit(fs, a, false, ok), b->u.i);
        } else if (op == TE_MUL && a->kind == TE_E_INT) {
            res = te__bnd_scale(fit(fs, b, false, ok), a->u.i);
        } else {
            return fwd(fs, r); /* a term: computed as the original computes it */
        }
        break;
    }
    default:
        return fwd(fs, r); /* a term */
    }
    if (!exempt && !(res.has_lo && res.has_hi))
        *ok = false;
    return meet(res, full_i64());
}

bool te__facts_fit(const te__facts *fs, const te_expr *r, bool root_free)
{
    bool ok = true;
    if (r)
        fit(fs, r, root_free, &ok);
    return r && ok;
}
