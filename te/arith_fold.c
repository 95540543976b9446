/* The arithmetic library, part 3: constant folding. Integer results wrap to their dtype's
 * width (an overflowing constant operation overflows in the original too); floating point
 * folds only constants, f32 results rounded to float after each operation as the generated
 * code computes them. See te/arith.h. */
#include <math.h>

#include "te/arith_impl.h"

bool te__fold_int(te_binop op, te_dtype dt, int64_t a, int64_t b, int64_t *out)
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

te_expr *te__fold_float(te_ctx *ctx, te_binop op, te_dtype dt, double a, double b)
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

te_expr *te__fold_call(te_ctx *ctx, te_expr *e)
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
        case TE_RINT:
            r = rintf(xf);
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
        case TE_RINT:
            r = rint(x);
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

te_expr *te__fold_cast(te_ctx *ctx, te_expr *e)
{
    te_expr *a = e->u.un.a;
    if (a->lanes != 1 || (a->kind != TE_E_INT && a->kind != TE_E_FLOAT))
        return e;
    if (te_dtype_is_float(e->dtype)) {
        /* te_dtype_convert rounds to e's dtype (f16, bf16 included), as the cast does */
        double v = a->kind == TE_E_INT ? (double)a->u.i : a->u.f;
        te_expr *r = mk_float(ctx, e->dtype, te_dtype_convert(v, a->dtype, e->dtype));
        return r ? r : e;
    }
    if (a->kind == TE_E_INT)
        return mk_int(ctx, e->dtype, a->u.i);
    double v = a->u.f;
    if (e->dtype == TE_BOOL)
        return mk_int(ctx, TE_BOOL, v != 0);
    /* Float to integer truncates and saturates, NaN -> 0 (te_dtype_convert). */
    double c = te_dtype_convert(v, a->dtype, e->dtype);
    return mk_int(ctx, e->dtype, c >= 0x1p63 ? INT64_MAX : (int64_t)c);
}
