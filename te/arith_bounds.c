/* The arithmetic library, part 1: range maps, constant bounds of expressions (interval
 * arithmetic with each side known or not), and the facts built on them (non-negative, multiple
 * of, constant value). See te/arith.h. */
#include <string.h>

#include "te/arith_impl.h"

/* ---- Range maps ---------------------------------------------------------------------------
 * A stack while a pass walks into loops. Lookups search from the top, so an inner binding
 * shadows an outer one. */

int te__ranges_push(te_ctx *ctx, te__range_map *m, const te_expr *var, int64_t lo, int64_t hi)
{
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 16;
        const te_expr **vars = te__alloc(ctx, sizeof(*vars) * (size_t)cap);
        int64_t *los = te__alloc(ctx, sizeof(int64_t) * (size_t)cap);
        int64_t *his = te__alloc(ctx, sizeof(int64_t) * (size_t)cap);
        if (!vars || !los || !his)
            return TE_ERR_NOMEM;
        if (m->n) {
            memcpy(vars, m->vars, sizeof(*vars) * (size_t)m->n);
            memcpy(los, m->lo, sizeof(int64_t) * (size_t)m->n);
            memcpy(his, m->hi, sizeof(int64_t) * (size_t)m->n);
        }
        m->vars = vars;
        m->lo = los;
        m->hi = his;
        m->cap = cap;
    }
    m->vars[m->n] = var;
    m->lo[m->n] = lo;
    m->hi[m->n] = hi;
    m->n++;
    return TE_OK;
}

void te__ranges_pop(te__range_map *m)
{
    assert(m->n > 0);
    m->n--;
}

bool te__ranges_lookup(const te__range_map *m, const te_expr *v, int64_t *lo, int64_t *hi)
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

int64_t te__arith_floordiv(int64_t a, int64_t b) { return fdiv(a, b); }
int64_t te__arith_floormod(int64_t a, int64_t b) { return fmodi(a, b); }

/* ---- Bounds ------------------------------------------------------------------------------ */

static te__bnd bnd_mul(te__bnd a, te__bnd b)
{
    if (a.has_lo && a.has_hi && a.lo == a.hi)
        return te__bnd_scale(b, a.lo);
    if (b.has_lo && b.has_hi && b.lo == b.hi)
        return te__bnd_scale(a, b.lo);
    if (a.has_lo && a.lo >= 0 && b.has_lo && b.lo >= 0) {
        /* Both non-negative (an upper side may be unknown): monotonic in each factor. */
        te__bnd r = TE__BND_NONE;
        r.has_lo = !__builtin_mul_overflow(a.lo, b.lo, &r.lo);
        r.has_hi = a.has_hi && b.has_hi && !__builtin_mul_overflow(a.hi, b.hi, &r.hi);
        return r;
    }
    if (!a.has_lo || !a.has_hi || !b.has_lo || !b.has_hi)
        return TE__BND_NONE;
    int64_t c[4];
    if (__builtin_mul_overflow(a.lo, b.lo, &c[0]) || __builtin_mul_overflow(a.lo, b.hi, &c[1]) ||
        __builtin_mul_overflow(a.hi, b.lo, &c[2]) || __builtin_mul_overflow(a.hi, b.hi, &c[3]))
        return TE__BND_NONE;
    te__bnd r = {true, true, c[0], c[0]};
    for (int i = 1; i < 4; i++) {
        r.lo = c[i] < r.lo ? c[i] : r.lo;
        r.hi = c[i] > r.hi ? c[i] : r.hi;
    }
    return r;
}

/* Division or remainder of a >= 0 by a non-constant divisor b >= 0 (b == 0 is an error at run
 * time, so b >= 1 wherever the value exists): the quotient is in [0, a.hi], the remainder in
 * [0, min(a.hi, b.hi - 1)]. */
static te__bnd bnd_divmod_nonneg(te__bnd a, te__bnd b, bool is_div)
{
    if (!a.has_lo || a.lo < 0 || !b.has_lo || b.lo < 0)
        return TE__BND_NONE;
    te__bnd r = {true, a.has_hi, 0, a.hi};
    if (!is_div && b.has_hi && b.hi >= 1 && (!r.has_hi || b.hi - 1 < r.hi))
        r.has_hi = true, r.hi = b.hi - 1;
    return r;
}

static te__bnd bnd_floordiv(te__bnd a, int64_t c)
{
    te__bnd r = TE__BND_NONE;
    if (c <= 0)
        return r;
    if ((r.has_lo = a.has_lo))
        r.lo = fdiv(a.lo, c);
    if ((r.has_hi = a.has_hi))
        r.hi = fdiv(a.hi, c);
    return r;
}

static te__bnd bnd_floormod(te__bnd a, int64_t c)
{
    if (c <= 0)
        return TE__BND_NONE;
    if (a.has_lo && a.has_hi && fdiv(a.lo, c) == fdiv(a.hi, c))
        return (te__bnd){true, true, fmodi(a.lo, c), fmodi(a.hi, c)};
    te__bnd r = {true, true, 0, c - 1};
    if (a.has_lo && a.lo >= 0 && a.has_hi && a.hi < r.hi)
        r.hi = a.hi;
    return r;
}

static te__bnd bnd_union(te__bnd a, te__bnd b)
{
    te__bnd r = TE__BND_NONE;
    if ((r.has_lo = a.has_lo && b.has_lo))
        r.lo = a.lo < b.lo ? a.lo : b.lo;
    if ((r.has_hi = a.has_hi && b.has_hi))
        r.hi = a.hi > b.hi ? a.hi : b.hi;
    return r;
}

static te__bnd bnd_minmax(te__bnd a, te__bnd b, bool is_min)
{
    te__bnd r = TE__BND_NONE;
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

static te__bnd bounds_binary(const te_expr *e, const te__range_map *m)
{
    const te_expr *a = e->u.bin.a, *b = e->u.bin.b;
    if (e->dtype == TE_BOOL)
        return (te__bnd){true, true, 0, 1};
    if (te_dtype_is_float(e->dtype))
        return TE__BND_NONE;
    te__bnd ba = te__arith_bnd(a, m), bb = te__arith_bnd(b, m);
    int64_t c = 0;
    bool bconst = b->kind == TE_E_INT && (c = b->u.i, true);
    switch (e->u.bin.op) {
    case TE_ADD:
        return te__bnd_add(ba, bb);
    case TE_SUB:
        return te__bnd_add(ba, te__bnd_scale(bb, -1));
    case TE_MUL:
        return bnd_mul(ba, bb);
    case TE_FLOORDIV:
        return bconst ? bnd_floordiv(ba, c) : bnd_divmod_nonneg(ba, bb, true);
    case TE_FLOORMOD:
        return bconst ? bnd_floormod(ba, c) : bnd_divmod_nonneg(ba, bb, false);
    case TE_DIV:
        if (!bconst)
            return bnd_divmod_nonneg(ba, bb, true);
        if (c <= 0)
            return TE__BND_NONE;
        if (ba.has_lo && ba.lo >= 0)
            return bnd_floordiv(ba, c);
        /* Truncating division by a positive constant is monotonic. */
        return (te__bnd){ba.has_lo, ba.has_hi, ba.has_lo ? ba.lo / c : 0,
                         ba.has_hi ? ba.hi / c : 0};
    case TE_MOD:
        if (!bconst)
            return bnd_divmod_nonneg(ba, bb, false);
        if (c <= 0)
            return TE__BND_NONE;
        if (ba.has_lo && ba.lo >= 0)
            return bnd_floormod(ba, c);
        if (ba.has_hi && ba.hi <= 0)
            return (te__bnd){true, true, -(c - 1), 0};
        return (te__bnd){true, true, -(c - 1), c - 1};
    case TE_MIN:
        return bnd_minmax(ba, bb, true);
    case TE_MAX:
        return bnd_minmax(ba, bb, false);
    default:
        return TE__BND_NONE;
    }
}

te__bnd te__arith_bnd(const te_expr *e, const te__range_map *m)
{
    int64_t lo, hi;
    te__bnd r = TE__BND_NONE;
    if (!e || te_dtype_is_float(e->dtype))
        return r;
    switch (e->kind) {
    case TE_E_INT:
        return te__bnd_const(e->u.i);
    case TE_E_VAR:
        if (te__ranges_lookup(m, e, &lo, &hi))
            return (te__bnd){true, true, lo, hi};
        break;
    case TE_E_BINARY:
        r = bounds_binary(e, m);
        break;
    case TE_E_NEG:
        r = te__bnd_scale(te__arith_bnd(e->u.un.a, m), -1);
        break;
    case TE_E_NOT:
        return (te__bnd){true, true, 0, 1};
    case TE_E_SELECT:
    case TE_E_IF:
        r = bnd_union(te__arith_bnd(e->u.sel.t, m), te__arith_bnd(e->u.sel.f, m));
        break;
    case TE_E_CAST:
        if (te_dtype_is_int(e->u.un.a->dtype) && e->dtype != TE_BOOL) {
            r = te__arith_bnd(e->u.un.a, m);
            if (dtype_range(e->dtype, &lo, &hi) &&
                !(r.has_lo && r.has_hi && r.lo >= lo && r.hi <= hi))
                r = TE__BND_NONE;
        }
        break;
    case TE_E_RAMP: {
        int64_t span;
        if (__builtin_mul_overflow(e->u.ramp.stride, (int64_t)(e->lanes - 1), &span))
            return TE__BND_NONE;
        te__bnd s = span >= 0 ? (te__bnd){true, true, 0, span} : (te__bnd){true, true, span, 0};
        r = te__bnd_add(te__arith_bnd(e->u.ramp.base, m), s);
        break;
    }
    case TE_E_BCAST:
        r = te__arith_bnd(e->u.un.a, m);
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
    te__bnd b = te__arith_bnd(e, ranges);
    if ((lo && !b.has_lo) || (hi && !b.has_hi) || (!lo && !hi && !(b.has_lo && b.has_hi)))
        return false;
    if (lo)
        *lo = b.lo;
    if (hi)
        *hi = b.hi;
    return true;
}

bool te__arith_nonneg(const te_expr *e, const te__range_map *ranges)
{
    if (!e || !te_dtype_is_int(e->dtype))
        return false;
    te__bnd b = te__arith_bnd(e, ranges);
    return b.has_lo && b.lo >= 0;
}

bool te__arith_multiple_of(const te_expr *e, int64_t m)
{
    int64_t c;
    if (!e || m <= 0)
        return false;
    if (m == 1)
        return te_dtype_is_int(e->dtype);
    if (te__arith_const_int(e, &c))
        return c % m == 0;
    switch (e->kind) {
    case TE_E_NEG:
        return te__arith_multiple_of(e->u.un.a, m);
    case TE_E_BINARY:
        switch (e->u.bin.op) {
        case TE_ADD:
        case TE_SUB:
            return te__arith_multiple_of(e->u.bin.a, m) && te__arith_multiple_of(e->u.bin.b, m);
        case TE_MUL:
            return te__arith_multiple_of(e->u.bin.a, m) || te__arith_multiple_of(e->u.bin.b, m);
        case TE_MOD:
        case TE_FLOORMOD: /* a - q b, truncated or floored q: a multiple when a and b are */
            return te__arith_multiple_of(e->u.bin.a, m) && te__arith_multiple_of(e->u.bin.b, m);
        default:
            return false;
        }
    default:
        return false;
    }
}

/* a op b in dtype dt without overflow; false on overflow, division by zero or another op.
 * Division, modulo, min and max cannot overflow once INT64_MIN / -1 is excluded: those are
 * the constant folder's (te__fold_int, in i64 where it does not wrap). */
static bool eval_op(te_binop op, te_dtype dt, int64_t a, int64_t b, int64_t *out)
{
    int64_t lo, hi;
    bool ovf;
    switch (op) {
    case TE_ADD:
        ovf = __builtin_add_overflow(a, b, out);
        break;
    case TE_SUB:
        ovf = __builtin_sub_overflow(a, b, out);
        break;
    case TE_MUL:
        ovf = __builtin_mul_overflow(a, b, out);
        break;
    case TE_DIV:
    case TE_MOD:
    case TE_FLOORDIV:
    case TE_FLOORMOD:
    case TE_MIN:
    case TE_MAX:
        ovf = !te__fold_int(op, TE_I64, a, b, out);
        break;
    default:
        return false;
    }
    return !ovf && (!dtype_range(dt, &lo, &hi) || (*out >= lo && *out <= hi));
}

bool te__arith_eval_int(const te_expr *e, int n, const te_expr *const *vars, const int64_t *vals,
                        int64_t *out)
{
    int64_t a, b;
    if (!e || e->lanes != 1 || !te_dtype_is_int(e->dtype) || e->dtype == TE_BOOL)
        return false;
    switch (e->kind) {
    case TE_E_INT:
        *out = e->u.i;
        return true;
    case TE_E_VAR:
        for (int i = 0; i < n; i++) {
            if (vars[i] == e) {
                *out = vals[i];
                return true;
            }
        }
        return false;
    case TE_E_CAST:
        /* Integer to integer conversions wrap to the target's width, as C's do. */
        if (!te__arith_eval_int(e->u.un.a, n, vars, vals, &a))
            return false;
        *out = wrap_int(e->dtype, a);
        return true;
    case TE_E_NEG:
        return te__arith_eval_int(e->u.un.a, n, vars, vals, &a) &&
               eval_op(TE_SUB, e->dtype, 0, a, out);
    case TE_E_BINARY:
        return te__arith_eval_int(e->u.bin.a, n, vars, vals, &a) &&
               te__arith_eval_int(e->u.bin.b, n, vars, vals, &b) &&
               eval_op(e->u.bin.op, e->dtype, a, b, out);
    default:
        return false;
    }
}

bool te__arith_const_int(const te_expr *e, int64_t *out)
{
    return te__arith_eval_int(e, 0, NULL, NULL, out);
}

bool te__const_flat_index(const te_buf *b, int n, te_expr *const *idx, int64_t *out)
{
    int64_t flat = 0;
    for (int d = 0; d < n; d++) {
        int64_t v;
        if (!te__arith_const_int(idx[d], &v) ||
            __builtin_mul_overflow(flat, n == 1 ? 1 : b->shape[d], &flat) ||
            __builtin_add_overflow(flat, v, &flat))
            return false;
    }
    *out = flat;
    return true;
}
