/* Interval arithmetic and numeric evaluation for bound inference. */
#include <string.h>

#include "schedule/bound.h"
#include "te/arith.h"

bool te__relax_add(te__relax *r, const te_expr *var, te_expr *lo, te_expr *hi)
{
    if (r->n == (int)(sizeof r->vars / sizeof r->vars[0]) || !lo || !hi)
        return false;
    r->vars[r->n] = var;
    r->iv[r->n].lo = lo;
    r->iv[r->n].hi = hi;
    r->n++;
    return true;
}

static bool is_point(const te__ival *v) { return v->lo == v->hi; }

bool te__eval_interval(te_ctx *ctx, te_expr *e, const te__relax *r, te__ival *out)
{
    te__ival a, b;
    int64_t c;
    switch (e->kind) {
    case TE_E_INT:
        out->lo = out->hi = e;
        return true;
    case TE_E_VAR:
        for (int i = r->n - 1; i >= 0; i--) {
            if (r->vars[i] == e) {
                *out = r->iv[i];
                return true;
            }
        }
        out->lo = out->hi = e;
        return true;
    case TE_E_CAST:
        if (!te_dtype_is_int(e->dtype) || !te__eval_interval(ctx, e->u.un.a, r, &a))
            return false;
        out->lo = te_cast(ctx, e->dtype, a.lo);
        out->hi = is_point(&a) ? out->lo : te_cast(ctx, e->dtype, a.hi);
        return out->lo && out->hi;
    case TE_E_NEG:
        if (!te__eval_interval(ctx, e->u.un.a, r, &a))
            return false;
        out->lo = te_neg(ctx, a.hi);
        out->hi = is_point(&a) ? out->lo : te_neg(ctx, a.lo);
        return out->lo && out->hi;
    case TE_E_BINARY:
        break;
    default:
        /* A load or call inside an index: only fine when it does not involve relaxed vars. */
        for (int i = 0; i < r->n; i++)
            if (te__expr_uses_var(e, r->vars[i]))
                return false;
        out->lo = out->hi = e;
        return true;
    }
    if (!te__eval_interval(ctx, e->u.bin.a, r, &a) || !te__eval_interval(ctx, e->u.bin.b, r, &b))
        return false;
    bool pt = is_point(&a) && is_point(&b);
    switch (e->u.bin.op) {
    case TE_ADD:
        out->lo = te_add(ctx, a.lo, b.lo);
        out->hi = pt ? out->lo : te_add(ctx, a.hi, b.hi);
        break;
    case TE_SUB:
        out->lo = te_sub(ctx, a.lo, b.hi);
        out->hi = pt ? out->lo : te_sub(ctx, a.hi, b.lo);
        break;
    case TE_MUL:
        if (te__is_const_int(b.lo, &c) && is_point(&b)) {
            out->lo = te_mul(ctx, c >= 0 ? a.lo : a.hi, b.lo);
            out->hi = pt ? out->lo : te_mul(ctx, c >= 0 ? a.hi : a.lo, b.lo);
        } else if (te__is_const_int(a.lo, &c) && is_point(&a)) {
            out->lo = te_mul(ctx, a.lo, c >= 0 ? b.lo : b.hi);
            out->hi = pt ? out->lo : te_mul(ctx, a.lo, c >= 0 ? b.hi : b.lo);
        } else if (pt) {
            out->lo = out->hi = te_mul(ctx, a.lo, b.lo);
        } else {
            return false;
        }
        break;
    case TE_DIV:
    case TE_FLOORDIV:
        if (pt) {
            out->lo = out->hi = te_binary(ctx, e->u.bin.op, a.lo, b.lo);
            break;
        }
        if (!is_point(&b) || !te__is_const_int(b.lo, &c) || c <= 0)
            return false;
        /* Truncating division is monotonic too, so the same rule holds. */
        out->lo = te_binary(ctx, e->u.bin.op, a.lo, b.lo);
        out->hi = te_binary(ctx, e->u.bin.op, a.hi, b.lo);
        break;
    case TE_MOD:
    case TE_FLOORMOD:
        if (pt) {
            out->lo = out->hi = te_binary(ctx, e->u.bin.op, a.lo, b.lo);
            break;
        }
        if (!is_point(&b) || !te__is_const_int(b.lo, &c) || c <= 0)
            return false;
        out->lo = te_int(ctx, e->u.bin.op == TE_MOD ? -(c - 1) : 0);
        out->hi = te_int(ctx, c - 1);
        if (e->u.bin.op == TE_MOD) {
            /* Non-negative dividends (the usual case) have remainders in [0, c). */
            int64_t lo;
            if (te__is_const_int(a.lo, &lo) && lo >= 0)
                out->lo = te_int(ctx, 0);
        }
        break;
    case TE_MIN:
        out->lo = te_min(ctx, a.lo, b.lo);
        out->hi = pt ? out->lo : te_min(ctx, a.hi, b.hi);
        break;
    case TE_MAX:
        out->lo = te_max(ctx, a.lo, b.lo);
        out->hi = pt ? out->lo : te_max(ctx, a.hi, b.hi);
        break;
    default:
        return false;
    }
    return out->lo && out->hi;
}

typedef struct {
    const te__var_ext *ve;
    const te_expr *vars[32];
    int64_t ext[32];
    int n;
    bool ok;
} collect_vars;

static bool collect_fn(const te_expr *e, void *user)
{
    collect_vars *c = user;
    if (e->kind != TE_E_VAR)
        return true;
    for (int i = 0; i < c->n; i++)
        if (c->vars[i] == e)
            return true;
    for (int i = 0; i < c->ve->n; i++) {
        if (c->ve->vars[i] == e) {
            if (c->n == 32) {
                c->ok = false;
                return false;
            }
            c->vars[c->n] = e;
            c->ext[c->n++] = c->ve->ext[i];
            return true;
        }
    }
    c->ok = false;
    return false;
}

bool te__max_over_vars(const te_expr *e, const te__var_ext *ve, int64_t *out)
{
    collect_vars c = {.ve = ve, .ok = true};
    te__expr_visit(e, collect_fn, &c);
    if (!c.ok)
        return false;
    int64_t space = 1;
    for (int i = 0; i < c.n && space <= 65536; i++)
        space *= c.ext[i];
    int64_t vals[32] = {0}, best = INT64_MIN, v;
    if (space <= 65536) {
        /* Few points: every one of them. */
        for (int64_t k = 0; k < space; k++) {
            int64_t rem = k;
            for (int i = 0; i < c.n; i++) {
                vals[i] = rem % c.ext[i];
                rem /= c.ext[i];
            }
            if (!te__arith_eval_int(e, c.n, c.vars, vals, &v))
                return false;
            best = v > best ? v : best;
        }
        *out = best;
        return true;
    }
    /* Too many points: a constant upper bound over the variables' ranges, or nothing (agreeing
     * samples prove nothing: the maximum may sit at a point no sample hits). */
    int64_t lo[32], hi[32];
    for (int i = 0; i < c.n; i++) {
        lo[i] = 0;
        hi[i] = c.ext[i] - 1;
    }
    te__range_map m = {c.n, c.n, c.vars, lo, hi};
    return te__expr_const_bounds(e, &m, NULL, out);
}
