/*
 * te/arith_impl.h (private to te/arith_*.c): the pieces the arithmetic library's files share:
 * small integer helpers, bounds with either side unknown, linear forms, constant folding.
 * Everything else includes te/arith.h instead.
 */
#ifndef TESSERA_TE_ARITH_IMPL_H
#define TESSERA_TE_ARITH_IMPL_H

#include "te/arith.h"

/* ---- Small integer helpers --------------------------------------------------------------- */

/* Floor division (b != 0, not INT64_MIN / -1). */
static inline int64_t fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* Floor modulo: the sign of b (b != 0). */
static inline int64_t fmodi(int64_t a, int64_t b)
{
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* gcd of |a| and |b|; INT64_MIN when that is 2^63 (callers treat it as "too large"). */
static inline int64_t gcd64(int64_t a, int64_t b)
{
    uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
    while (y) {
        uint64_t t = x % y;
        x = y;
        y = t;
    }
    return (int64_t)x;
}

/* Wraps v to the width of an integer dtype (two's complement, as the generated code does). */
static inline int64_t wrap_int(te_dtype dt, int64_t v)
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

/* Value range of a narrow integer dtype; false for i64 (whose range is int64 itself). */
static inline bool dtype_range(te_dtype dt, int64_t *lo, int64_t *hi)
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

/* An integer constant of dtype dt, wrapped to its width; NULL on allocation failure. */
static inline te_expr *mk_int(te_ctx *ctx, te_dtype dt, int64_t v)
{
    te_expr *e = te__new_expr(ctx, TE_E_INT, dt);
    if (e)
        e->u.i = wrap_int(dt, v);
    return e;
}

/* A float constant of dtype dt (rounded to float where dt computes in f32: f32, f16, bf16, whose
 * values between stores are f32 values); NULL on allocation failure. */
static inline te_expr *mk_float(te_ctx *ctx, te_dtype dt, double v)
{
    te_expr *e = te__new_expr(ctx, TE_E_FLOAT, dt);
    if (e)
        e->u.f = te_dtype_compute(dt) == TE_F32 ? (double)(float)v : v;
    return e;
}

/* Whether e is the scalar integer constant v. */
static inline bool is_int(const te_expr *e, int64_t v)
{
    return e->kind == TE_E_INT && e->lanes == 1 && e->u.i == v;
}

/* Whether a scalar i64 or i32 expression takes part in range reasoning. */
static inline bool index_type(const te_expr *e)
{
    return e->lanes == 1 && (e->dtype == TE_I64 || e->dtype == TE_I32);
}

/* ---- Bounds (arith_bounds.c) -------------------------------------------------------------- */

/* An interval with each side known or not. */
typedef struct te__bnd {
    bool has_lo, has_hi;
    int64_t lo, hi;
} te__bnd;

#define TE__BND_NONE ((te__bnd){false, false, 0, 0})

static inline te__bnd te__bnd_const(int64_t v) { return (te__bnd){true, true, v, v}; }

/* Sum; a side is unknown when either operand's is or the sum overflows int64. */
static inline te__bnd te__bnd_add(te__bnd a, te__bnd b)
{
    te__bnd r = TE__BND_NONE;
    r.has_lo = a.has_lo && b.has_lo && !__builtin_add_overflow(a.lo, b.lo, &r.lo);
    r.has_hi = a.has_hi && b.has_hi && !__builtin_add_overflow(a.hi, b.hi, &r.hi);
    return r;
}

/* a * c for a constant c. */
static inline te__bnd te__bnd_scale(te__bnd a, int64_t c)
{
    te__bnd r = TE__BND_NONE;
    if (c >= 0) {
        r.has_lo = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.lo);
        r.has_hi = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.hi);
    } else {
        r.has_lo = a.has_hi && !__builtin_mul_overflow(a.hi, c, &r.lo);
        r.has_hi = a.has_lo && !__builtin_mul_overflow(a.lo, c, &r.hi);
    }
    return r;
}

/* Bounds of an expression under a range map (NULL: none). Sound for every evaluation of e
 * without overflow. */
te__bnd te__arith_bnd(const te_expr *e, const te__range_map *m);

/* ---- Linear forms (arith_linear.c) ----------------------------------------------------- */

typedef struct te__lterm {
    te_expr *t;
    int64_t k;
} te__lterm;

/* c + sum(k * t). The term array is malloc'ed: te__lf_free releases it. */
typedef struct te__lform {
    int n, cap;
    te__lterm *v;
    int64_t c;
    bool ok; /* false after an overflow or allocation failure: the form is unusable */
} te__lform;

/* An empty form (ok). */
void te__lf_init(te__lform *f);
/* Frees the term array (the terms themselves belong to the context). */
void te__lf_free(te__lform *f);
/* Adds the constant k (ok cleared on overflow). */
void te__lf_add_const(te__lform *f, int64_t k);
/* Adds k * t, merging with an equal term (te__expr_equal); ok cleared on overflow or when
 * out of memory. */
void te__lf_add_term(te__lform *f, te_expr *t, int64_t k);
/* Adds scale * e, decomposing + - unary minus and products by constants of scalar e. */
void te__lf_add(te__lform *f, te_expr *e, int64_t scale);
/* f = a - b. */
void te__lf_diff(te__lform *f, te_expr *a, te_expr *b);
/* Bounds of the form's value under m. */
te__bnd te__lf_bounds(const te__lform *f, const te__range_map *m);
/* Rebuilds the canonical expression of f (sorting its terms in place); NULL on allocation
 * failure. */
te_expr *te__lf_build(te_ctx *ctx, te__lform *f);
/* Order of terms in a canonical sum. */
int te__term_cmp(const te_expr *a, const te_expr *b);

/* What the evaluation of some i64 expressions without overflow implies about the values of
 * their nodes: every node of their linear structure (sums, differences, negations, products by
 * constants) and the terms below it, each with bounds. Fixed capacity: facts beyond it are
 * dropped, which only makes proofs weaker. */
#define TE__FACTS_MAX 48
typedef struct te__facts {
    int n;
    const te_expr *node[TE__FACTS_MAX];
    te__bnd b[TE__FACTS_MAX];
    const te__range_map *ranges;
} te__facts;

/* Starts an empty set of facts under ranges (may be NULL). */
void te__facts_init(te__facts *fs, const te__range_map *ranges);
/* Adds what evaluating scalar i64 expression e without overflow implies. */
void te__facts_add(te__facts *fs, const te_expr *e);
/* Whether every node r computes that is not a term of the facts (sums, differences, negations
 * and products by constants built around terms) provably stays within int64; with root_free the
 * root itself is exempt (when its value is known to equal an evaluated expression's). */
bool te__facts_fit(const te__facts *fs, const te_expr *r, bool root_free);

/* ---- Constant folding (arith_fold.c) ---------------------------------------------------- */

/* a op b for integer constants in dtype dt (wrapped to its width); false on division by zero
 * or INT64_MIN / -1. */
bool te__fold_int(te_binop op, te_dtype dt, int64_t a, int64_t b, int64_t *out);
/* a op b for float constants (f32 rounded after the operation); NULL when op does not fold. */
te_expr *te__fold_float(te_ctx *ctx, te_binop op, te_dtype dt, double a, double b);
/* A call of constant float arguments, folded; e itself otherwise. */
te_expr *te__fold_call(te_ctx *ctx, te_expr *e);
/* A cast of a constant, folded when the conversion is defined; e itself otherwise. */
te_expr *te__fold_cast(te_ctx *ctx, te_expr *e);

#endif
