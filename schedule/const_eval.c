/*
 * schedule/const_eval.c: the value of an integer expression made of constants only, and the
 * constant flat index of a buffer access. Shared by the late passes (vector legalization,
 * register promotion) and the C emitter, which must agree on which accesses are constant.
 */
#include "schedule/passes.h"

bool te__const_int_eval(const te_expr *e, int64_t *out)
{
    if (!e || e->lanes != 1 || te_dtype_is_float(e->dtype))
        return false;
    int64_t a, b;
    switch (e->kind) {
    case TE_E_INT:
        *out = e->u.i;
        return true;
    case TE_E_NEG:
        if (!te__const_int_eval(e->u.un.a, &a))
            return false;
        *out = -a;
        return true;
    case TE_E_CAST:
        if (e->dtype != TE_I64 && e->dtype != TE_I32)
            return false;
        if (!te__const_int_eval(e->u.un.a, &a))
            return false;
        *out = e->dtype == TE_I32 ? (int32_t)a : a;
        return true;
    case TE_E_BINARY:
        if (e->dtype == TE_BOOL || !te__const_int_eval(e->u.bin.a, &a) ||
            !te__const_int_eval(e->u.bin.b, &b))
            return false;
        switch (e->u.bin.op) {
        case TE_ADD:
            *out = a + b;
            return true;
        case TE_SUB:
            *out = a - b;
            return true;
        case TE_MUL:
            *out = a * b;
            return true;
        case TE_MIN:
            *out = a < b ? a : b;
            return true;
        case TE_MAX:
            *out = a > b ? a : b;
            return true;
        case TE_DIV:
        case TE_MOD:
        case TE_FLOORDIV:
        case TE_FLOORMOD: {
            if (b == 0 || (a == INT64_MIN && b == -1))
                return false;
            int64_t q = a / b, r = a % b;
            if (e->u.bin.op == TE_DIV)
                *out = q;
            else if (e->u.bin.op == TE_MOD)
                *out = r;
            else if (e->u.bin.op == TE_FLOORDIV)
                *out = q - (r != 0 && (r < 0) != (b < 0));
            else
                *out = r != 0 && (r < 0) != (b < 0) ? r + b : r;
            return true;
        }
        default:
            return false;
        }
    default:
        return false;
    }
}

bool te__const_flat_index(const te_buf *b, int n, te_expr *const *idx, int64_t *out)
{
    int64_t flat = 0;
    for (int d = 0; d < n; d++) {
        int64_t v;
        if (!te__const_int_eval(idx[d], &v))
            return false;
        flat = flat * (n == 1 ? 1 : b->shape[d]) + v;
    }
    *out = flat;
    return true;
}

int64_t te__buf_numel(const te_buf *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->shape[d];
    return n;
}
