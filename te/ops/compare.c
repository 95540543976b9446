/* Comparison and logic operators: broadcasting comparisons, and/or/xor/not on truth values,
 * sign and mod. Truth values are TE_U8 tensors holding 0 or 1 (how the graph and ONNX store bool);
 * inputs of the logic operators may also be TE_BOOL. Each operator is one stage. */
#include <string.h>

#include "te/ops/ops_internal.h"

/* Numpy broadcast of A and B into shape (rank *R), reported through s. */
static bool bcast2(const op_site *s, const te_tensor *A, const te_tensor *B, int *R, int64_t *shape)
{
    int ra = te_tensor_ndim(A), rb = te_tensor_ndim(B), r = ra > rb ? ra : rb;
    const int64_t *as = te_tensor_shape(A), *bs = te_tensor_shape(B);
    for (int od = 0; od < r; od++) {
        int da = od - (r - ra), db = od - (r - rb);
        int64_t ea = da >= 0 ? as[da] : 1, eb = db >= 0 ? bs[db] : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            op__fail(s, TE_ERR_SHAPE,
                     "cannot broadcast input 'A' ('%s') axis %d (extent %lld) with input 'B' "
                     "('%s') axis %d (extent %lld): extents must be equal or 1",
                     te_tensor_name(A), da, (long long)ea, te_tensor_name(B), db, (long long)eb);
            return false;
        }
        shape[od] = ea > eb ? ea : eb;
    }
    *R = r;
    return true;
}

/* Read of t broadcast to the output axes (rank R, extents oshape). */
static te_expr *bread(te_ctx *ctx, te_tensor *t, int R, te_expr *const *ax, const int64_t *oshape)
{
    int r = te_tensor_ndim(t);
    const int64_t *ts = te_tensor_shape(t);
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < r; d++)
        idx[d] = ts[d] == 1 && oshape[d + R - r] != 1 ? te_int(ctx, 0) : ax[d + R - r];
    return te_read(ctx, t, r, idx);
}

/* cond as a u8 0 / 1. */
static te_expr *as_u8(te_ctx *ctx, te_expr *cond)
{
    return te_select(ctx, cond, te_const(ctx, TE_U8, 1), te_const(ctx, TE_U8, 0));
}

/* x as a truth value (TE_BOOL): itself, or x != 0. */
static te_expr *truth(te_ctx *ctx, te_expr *x, te_dtype dt)
{
    return dt == TE_BOOL ? x : te_ne(ctx, x, te_const(ctx, dt, 0));
}

/* Checks a truth-value input: TE_BOOL or TE_U8. */
static bool logical(const op_site *s, const te_tensor *t, const char *role)
{
    if (!op__need(s, t, role))
        return false;
    te_dtype dt = te_tensor_dtype(t);
    if (dt != TE_BOOL && dt != TE_U8) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') has dtype %s; truth values are bool or u8", role,
                 te_tensor_name(t), te_dtype_str(dt));
        return false;
    }
    return true;
}

static const char *compare_tag(te_binop op)
{
    switch (op) {
    case TE_EQ:
        return "equal";
    case TE_NE:
        return "not_equal";
    case TE_LT:
        return "less";
    case TE_LE:
        return "less_equal";
    case TE_GT:
        return "greater";
    case TE_GE:
        return "greater_equal";
    default:
        return NULL;
    }
}

te_tensor *te_op_compare(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name)
{
    if (!ctx)
        return NULL;
    const char *tag = compare_tag(op);
    op_site s = {ctx, tag ? tag : "compare", name ? name : tag ? tag : "compare"};
    if (!tag)
        return op__fail(&s, TE_ERR_ARG,
                        "operator %d is not one of TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE",
                        (int)op);
    if (!op__need(&s, A, "input 'A'") || !op__need(&s, B, "input 'B'") ||
        !op__same_dtype(&s, A, A, "input 'A'") || !op__same_dtype(&s, A, B, "input 'B'"))
        return NULL;
    int R;
    int64_t shape[TE_MAX_DIMS];
    te_expr *ax[TE_MAX_DIMS];
    if (!bcast2(&s, A, B, &R, shape) || !op__axes(ctx, R, shape, NULL, ax))
        return NULL;
    te_expr *c = te_binary(ctx, op, bread(ctx, A, R, ax, shape), bread(ctx, B, R, ax, shape));
    return op__tag(ctx, te_compute(ctx, s.name, R, ax, as_u8(ctx, c)), tag);
}

te_tensor *te_op_logic(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name)
{
    if (!ctx)
        return NULL;
    const char *tag = op == TE_AND ? "and" : op == TE_OR ? "or" : op == TE_NE ? "xor" : NULL;
    op_site s = {ctx, tag ? tag : "logic", name ? name : tag ? tag : "logic"};
    if (!tag)
        return op__fail(&s, TE_ERR_ARG,
                        "operator %d is not one of TE_AND, TE_OR, TE_NE (exclusive or)", (int)op);
    if (!logical(&s, A, "input 'A'") || !logical(&s, B, "input 'B'"))
        return NULL;
    int R;
    int64_t shape[TE_MAX_DIMS];
    te_expr *ax[TE_MAX_DIMS];
    if (!bcast2(&s, A, B, &R, shape) || !op__axes(ctx, R, shape, NULL, ax))
        return NULL;
    te_expr *a = truth(ctx, bread(ctx, A, R, ax, shape), te_tensor_dtype(A));
    te_expr *b = truth(ctx, bread(ctx, B, R, ax, shape), te_tensor_dtype(B));
    te_expr *c = op == TE_NE ? te_ne(ctx, as_u8(ctx, a), as_u8(ctx, b)) : te_binary(ctx, op, a, b);
    return op__tag(ctx, te_compute(ctx, s.name, R, ax, as_u8(ctx, c)), tag);
}

te_tensor *te_op_not(te_ctx *ctx, te_tensor *X, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "not", name ? name : "not"};
    if (!logical(&s, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, r, te_tensor_shape(X), NULL, ax))
        return NULL;
    te_expr *c = te_not(ctx, truth(ctx, te_read(ctx, X, r, ax), te_tensor_dtype(X)));
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, as_u8(ctx, c)), "not");
}

te_tensor *te_op_sign(te_ctx *ctx, te_tensor *X, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "sign", name ? name : "sign"};
    if (!op__need(&s, X, "input 'X'") || !op__same_dtype(&s, X, X, "input 'X'"))
        return NULL;
    int r = te_tensor_ndim(X);
    te_dtype dt = te_tensor_dtype(X);
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, r, te_tensor_shape(X), NULL, ax))
        return NULL;
    te_expr *x = te_read(ctx, X, r, ax), *zero = te_const(ctx, dt, 0);
    te_expr *neg = te_select(ctx, te_lt(ctx, x, zero), te_const(ctx, dt, -1), zero);
    te_expr *body = te_select(ctx, te_gt(ctx, x, zero), te_const(ctx, dt, 1), neg);
    return op__tag(ctx, te_compute(ctx, s.name, r, ax, body), "sign");
}

te_tensor *te_op_mod(te_ctx *ctx, te_tensor *A, te_tensor *B, int fmod, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "mod", name ? name : "mod"};
    if (!op__need(&s, A, "input 'A'") || !op__need(&s, B, "input 'B'") ||
        !op__same_dtype(&s, A, A, "input 'A'") || !op__same_dtype(&s, A, B, "input 'B'"))
        return NULL;
    te_dtype dt = te_tensor_dtype(A);
    bool flt = te_dtype_is_float(dt);
    if (flt && !fmod)
        return op__fail(&s, TE_ERR_ARG,
                        "input 'A' ('%s') is %s: a float remainder needs fmod=1 (as in ONNX)",
                        te_tensor_name(A), te_dtype_str(dt));
    int R;
    int64_t shape[TE_MAX_DIMS];
    te_expr *ax[TE_MAX_DIMS];
    if (!bcast2(&s, A, B, &R, shape) || !op__axes(ctx, R, shape, NULL, ax))
        return NULL;
    te_expr *a = bread(ctx, A, R, ax, shape), *b = bread(ctx, B, R, ax, shape), *body;
    if (flt) { /* a - b trunc(a / b); trunc rounds toward zero */
        te_expr *q = te_div(ctx, a, b);
        te_expr *t =
            te_select(ctx, te_lt(ctx, q, te_const(ctx, dt, 0)), te_ceil(ctx, q), te_floor(ctx, q));
        body = te_sub(ctx, a, te_mul(ctx, b, t));
    } else { /* divisors 0 and -1 give 0 without dividing (no trap, no INT_MIN % -1) */
        te_expr *r = fmod ? te_mod(ctx, a, b) : te_floormod(ctx, a, b);
        te_expr *safe = te_eq(ctx, b, te_const(ctx, dt, 0));
        if (dt != TE_U8)
            safe = te_or(ctx, safe, te_eq(ctx, b, te_const(ctx, dt, -1)));
        body = te_if_then_else(ctx, safe, te_const(ctx, dt, 0), r);
    }
    return op__tag(ctx, te_compute(ctx, s.name, R, ax, body), "mod");
}
