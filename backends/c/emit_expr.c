/*
 * backends/c/emit_expr.c: expressions as C text with the fewest parentheses: scalar code as
 * plain C (libm calls, te_floordiv_* unless plain / and % are exact), vector code with GNU C
 * vector operators and the prelude's helpers (loads, gathers, blends, math), promoted buffers
 * as their variables.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/emit_impl.h"

/* ---- Expressions -------------------------------------------------------------------------- */

static void put_int(te__sb *b, te_dtype d, int64_t v)
{
    if (d == TE_I64 && v == INT64_MIN)
        te__sb_puts(b, "INT64_MIN");
    else if (d == TE_I64 && (v > INT32_MAX || v < INT32_MIN))
        te__sb_printf(b, "%lldLL", (long long)v);
    else
        te__sb_printf(b, "%lld", (long long)v);
}

/* A float literal (NAN and INFINITY from math.h for the values without one). */
static void put_float(te__sb *b, te_dtype d, double v)
{
    static const te__nonfinite c_nonfinite = {"NAN", "INFINITY", "-INFINITY"};
    te__emit_float(b, d, v, &c_nonfinite);
}

static int gen(emitter *em, te__sb *o, const te_expr *e);

/* Prints e, in parentheses when it binds looser than `minp`. */
void te__c_put(emitter *em, te__sb *o, const te_expr *e, int minp)
{
    te__sb t = {0};
    int p = gen(em, &t, e);
    if (t.oom) {
        te__c_fail(em, TE_ERR_NOMEM, "out of memory");
    } else if (p < minp) {
        te__sb_puts(o, "(");
        te__sb_puts(o, t.p);
        te__sb_puts(o, ")");
    } else {
        te__sb_puts(o, t.p ? t.p : "");
    }
    free(t.p);
}

/* Prints e as a full vector of `lanes` (broadcasting scalars), for helper arguments. */
void te__c_put_vec(emitter *em, te__sb *o, const te_expr *e, int lanes)
{
    if (e->lanes > 1 && e->kind != TE_E_BCAST) {
        te__c_put(em, o, e, P_LOR);
        return;
    }
    const te_expr *s = e->kind == TE_E_BCAST ? e->u.un.a : e;
    te__sb_printf(o, "%s(", te__c_helper_name(em, H_SPLAT, s->dtype, lanes));
    if (s->dtype == TE_BOOL) {
        te__c_put(em, o, s, P_LOR);
        te__sb_puts(o, " ? -1 : 0");
    } else {
        te__c_put(em, o, s, P_LOR);
    }
    te__sb_puts(o, ")");
}

/* Operand of a vector arithmetic or comparison operator: a broadcast prints as its scalar,
 * which GNU C converts to the vector type. Not for bools, nor for a non-constant scalar of an
 * integer type narrower than int: C promotes it to int, and GNU C refuses to convert an int
 * to a vector of narrower lanes ("involves truncation"), so those are splatted. */
static void put_operand(emitter *em, te__sb *o, const te_expr *e, int lanes, int minp)
{
    if (lanes > 1 && (e->kind == TE_E_BCAST || e->lanes == 1)) {
        const te_expr *s = e->kind == TE_E_BCAST ? e->u.un.a : e;
        bool narrow =
            te_dtype_is_int(s->dtype) && te_dtype_size(s->dtype) < 4 && s->kind != TE_E_INT;
        if (s->dtype == TE_BOOL || narrow) {
            te__c_put_vec(em, o, e, lanes);
            return;
        }
        te__c_put(em, o, s, minp);
        return;
    }
    te__c_put(em, o, e, minp);
}

/* The promoted variables of buffer b, or NULL. */
const promo *te__c_find_promo(const emitter *em, const te_buf *b)
{
    for (int i = em->npromos - 1; i >= 0; i--)
        if (em->promos[i].buf == b)
            return &em->promos[i];
    return NULL;
}

/* Flat index of a (possibly multi-dimensional) access, printed. */
void te__c_put_index(emitter *em, te__sb *o, const te_buf *b, int n, te_expr *const *idx)
{
    if (n == 1) {
        te__c_put(em, o, idx[0], 0);
        return;
    }
    /* not flattened: row-major over the buffer's shape */
    for (int d = 0; d < n; d++) {
        int64_t stride = 1;
        for (int k = d + 1; k < n; k++)
            stride *= b->shape[k];
        if (d)
            te__sb_puts(o, " + ");
        te__c_put(em, o, idx[d], stride == 1 ? P_ADD + 1 : P_MUL);
        if (stride != 1)
            te__sb_printf(o, " * %lld", (long long)stride);
    }
}

/* Name of a promoted element (scalar access at constant index i). */
void te__c_put_promo_scalar(te__sb *o, const promo *p, int64_t i)
{
    if (p->pr->kind[i] == TE_PROMO_LANE)
        te__sb_printf(o, "%s%lld[%lld]", p->vname, (long long)(i / p->pr->lanes),
                      (long long)(i % p->pr->lanes));
    else
        te__sb_printf(o, "%s%lld", p->sname, (long long)i);
}

static int gen_load(emitter *em, te__sb *o, const te_expr *e)
{
    const te_buf *b = e->u.load.buf;
    const char *bn = te__c_buf_name(em, b);
    const promo *p = te__c_find_promo(em, b);
    te_expr *ix = e->u.load.idx[0];
    if (e->lanes == 1) {
        int64_t c;
        if (p && te__const_flat_index(b, e->u.load.n, e->u.load.idx, &c)) {
            te__c_put_promo_scalar(o, p, c);
            return P_POSTFIX;
        }
        bool half = te_dtype_is_half(b->dtype); /* bits in memory, a float value */
        if (half)
            te__sb_printf(o, "%s(", te__c_half_conv(em, b->dtype, 0));
        te__sb_printf(o, "%s[", bn);
        te__c_put_index(em, o, b, e->u.load.n, e->u.load.idx);
        te__sb_puts(o, half ? "])" : "]");
        return half ? P_PRIMARY : P_POSTFIX;
    }
    if (e->u.load.n != 1) {
        te__c_fail(em, TE_ERR_INTERNAL, "vector load of '%s' with an index that is not flat",
                   b->name);
        return P_PRIMARY;
    }
    if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1) {
        int64_t c;
        if (p && te__arith_const_int(ix->u.ramp.base, &c)) {
            te__sb_printf(o, "%s%lld", p->vname, (long long)(c / e->lanes));
            return P_PRIMARY;
        }
        te__sb_printf(o, "%s(&%s[", te__c_helper_name(em, H_LOAD, e->dtype, e->lanes), bn);
        te__c_put(em, o, ix->u.ramp.base, 0);
        te__sb_puts(o, "])");
    } else if (ix->kind == TE_E_RAMP) {
        te__sb_printf(o, "%s(&%s[", te__c_helper_name(em, H_GATHER, e->dtype, e->lanes), bn);
        te__c_put(em, o, ix->u.ramp.base, 0);
        te__sb_printf(o, "], %lld)", (long long)ix->u.ramp.stride);
    } else {
        te__sb_printf(o, "%s(%s, ", te__c_helper_name(em, H_GATHER_IDX, e->dtype, e->lanes), bn);
        if (ix->dtype != TE_I64) {
            te__sb_printf(o, "__builtin_convertvector(");
            te__c_put_vec(em, o, ix, e->lanes);
            te__sb_printf(o, ", %s)", te__c_vtype(em, TE_I64, e->lanes));
        } else {
            te__c_put_vec(em, o, ix, e->lanes);
        }
        te__sb_puts(o, ")");
    }
    return P_PRIMARY;
}

/* The two arguments and closing parenthesis of a helper call "name(" already written: whole
 * vectors for vector helpers. */
static int put_call2(emitter *em, te__sb *o, const te_expr *a, const te_expr *b, int lanes)
{
    if (lanes > 1) {
        te__c_put_vec(em, o, a, lanes);
        te__sb_puts(o, ", ");
        te__c_put_vec(em, o, b, lanes);
    } else {
        te__c_put(em, o, a, P_LOR);
        te__sb_puts(o, ", ");
        te__c_put(em, o, b, P_LOR);
    }
    te__sb_puts(o, ")");
    return P_PRIMARY;
}

static int gen_binary(emitter *em, te__sb *o, const te_expr *e)
{
    te_binop op = e->u.bin.op;
    const te_expr *a = e->u.bin.a, *b = e->u.bin.b;
    int lanes = e->lanes;
    bool vec = lanes > 1;
    te_dtype od = a->dtype; /* operand dtype */
    int64_t c;

    if (op == TE_MIN || op == TE_MAX) {
        te__sb_printf(o, "%s(", te__c_helper_name(em, op == TE_MIN ? H_MIN : H_MAX, od, lanes));
        return put_call2(em, o, a, b, lanes);
    }
    if (op == TE_FLOORDIV || op == TE_FLOORMOD) {
        /* Exact as C's / and % when both sides are >= 0 (or the type is unsigned). */
        bool plain =
            od == TE_U8 || (te__arith_nonneg(a, &em->ranges) && te__arith_nonneg(b, &em->ranges));
        if (!plain && !te_dtype_is_float(od)) {
            te__sb_printf(
                o, "%s(",
                te__c_helper_name(em, op == TE_FLOORDIV ? H_FLOORDIV : H_FLOORMOD, od, lanes));
            return put_call2(em, o, a, b, lanes);
        }
        if (te_dtype_is_float(od) && op == TE_FLOORDIV) {
            /* floor(a / b) on floats */
            te_expr q = *e;
            q.u.bin.op = TE_DIV;
            if (vec)
                te__sb_printf(o, "%s(", te__c_helper_name(em, H_FLOOR, od, lanes));
            else
                te__sb_printf(o, "%s(", te__emit_libm_name(TE_FLOOR, od));
            te__c_put(em, o, &q, 0);
            te__sb_puts(o, ")");
            return P_PRIMARY;
        }
    }
    bool cmp = op >= TE_EQ && op <= TE_GE;
    bool conv = vec && cmp && te__c_int_of(od) != TE_I32;
    int p;
    const char *tok = te__emit_binop(op, vec, &p);
    if (conv)
        te__sb_puts(o, "__builtin_convertvector(");
    /* Masks combined with & and | read better with their comparisons in parentheses. */
    int lp = p, rp = p + 1;
    if (op == TE_AND || op == TE_OR)
        lp = rp = vec ? P_REL + 1 : P_EQ;
    put_operand(em, o, a, lanes, lp);
    if (op == TE_ADD && !vec && te__arith_const_int(b, &c) && c < 0 && c != INT64_MIN) {
        te__sb_printf(o, " - ");
        put_int(o, b->dtype, -c);
    } else {
        te__sb_printf(o, " %s ", tok ? tok : "?");
        put_operand(em, o, b, lanes, rp);
    }
    if (conv) {
        te__sb_printf(o, ", %s)", te__c_vtype(em, TE_BOOL, lanes));
        return P_PRIMARY;
    }
    return p;
}

static int gen_call(emitter *em, te__sb *o, const te_expr *e)
{
    te_intrin fn = e->u.call.fn;
    te_dtype d = e->dtype;
    int lanes = e->lanes;
    const te_expr *x = e->u.call.args[0];
    const char *one = te_dtype_compute(d) == TE_F32 ? "1.0f" : "1.0";
    if (lanes == 1) {
        if (fn == TE_SIGMOID) {
            te__sb_printf(o, "%s(", te__c_helper_name(em, H_SIGMOID, d, 1));
        } else if (fn == TE_RSQRT) {
            te__sb_printf(o, "%s / %s(", one, te__emit_libm_name(TE_SQRT, d));
            te__c_put(em, o, x, 0);
            te__sb_puts(o, ")");
            return P_MUL;
        } else {
            te__sb_printf(o, "%s(", te__emit_libm_name(fn, d));
        }
        te__c_put(em, o, x, P_LOR);
        if (fn == TE_POW) {
            te__sb_puts(o, ", ");
            te__c_put(em, o, e->u.call.args[1], P_LOR);
        }
        te__sb_puts(o, ")");
        return P_PRIMARY;
    }
    static const helper hs[TE_INTRIN_COUNT] = {H_EXP,     H_LOG,  H_SQRT,  H_SQRT, H_TANH, H_ERF,
                                               H_SIGMOID, H_FABS, H_FLOOR, H_CEIL, H_POW,  H_RINT};
    if (fn == TE_RSQRT)
        te__sb_printf(o, "%s / ", one);
    te__sb_printf(o, "%s(", te__c_helper_name(em, hs[fn], d, lanes));
    te__c_put_vec(em, o, x, lanes);
    if (fn == TE_POW) {
        te__sb_puts(o, ", ");
        te__c_put_vec(em, o, e->u.call.args[1], lanes);
    }
    te__sb_puts(o, ")");
    return fn == TE_RSQRT ? P_MUL : P_PRIMARY;
}

static int gen_cast(emitter *em, te__sb *o, const te_expr *e)
{
    const te_expr *a = e->u.un.a;
    int lanes = e->lanes;
    /* Casts C leaves undefined (float to integer out of range, NaN) or does not have (to f16,
     * bf16), and vectors of bytes to or from 32-bit lanes (which GCC scalarizes), go through
     * the prelude's te_cvt_* helpers; bools keep the paths below. */
    const char *cvt = a->dtype == TE_BOOL || (e->dtype == TE_BOOL && lanes > 1)
                          ? NULL
                          : te__c_cast_helper(em, e->dtype, a->dtype, lanes);
    if (!cvt && te_dtype_is_half(a->dtype) && te_dtype_compute(a->dtype) == e->dtype) {
        /* f16/bf16 to f32: the value already is an f32 one */
        te__c_put(em, o, a, P_UNARY);
        return P_UNARY;
    }
    if (cvt) {
        te__sb_printf(o, "%s(", cvt);
        if (lanes > 1)
            te__c_put_vec(em, o, a, lanes);
        else
            te__c_put(em, o, a, P_LOR);
        te__sb_puts(o, ")");
        return P_PRIMARY;
    }
    if (lanes == 1) {
        te__sb_printf(o, "(%s)", te__c_value_ctype(e->dtype));
        te__c_put(em, o, a, P_UNARY);
        return P_UNARY;
    }
    if (e->dtype == TE_BOOL) {
        /* to a mask: nonzero lanes */
        bool conv = te__c_int_of(a->dtype) != TE_I32;
        if (conv)
            te__sb_puts(o, "__builtin_convertvector(");
        put_operand(em, o, a, lanes, P_REL + 1);
        te__sb_puts(o, " != 0");
        if (conv) {
            te__sb_printf(o, ", %s)", te__c_vtype(em, TE_BOOL, lanes));
            return P_PRIMARY;
        }
        return P_EQ;
    }
    if (a->dtype == TE_BOOL) {
        /* from a mask: -1 -> 1 */
        if (te__c_vec_elem(e->dtype) == TE_I32) {
            te__c_put(em, o, a, P_BAND + 1);
            te__sb_puts(o, " & 1");
            return P_BAND;
        }
        te__sb_puts(o, "__builtin_convertvector(");
        te__c_put(em, o, a, P_BAND + 1);
        te__sb_printf(o, " & 1, %s)", te__c_vtype(em, e->dtype, lanes));
        return P_PRIMARY;
    }
    te__sb_puts(o, "__builtin_convertvector(");
    te__c_put_vec(em, o, a, lanes);
    te__sb_printf(o, ", %s)", te__c_vtype(em, e->dtype, lanes));
    return P_PRIMARY;
}

static int gen(emitter *em, te__sb *o, const te_expr *e)
{
    int64_t c;
    if (e->lanes == 1 && e->kind != TE_E_INT && te_dtype_is_int(e->dtype) && e->dtype != TE_BOOL &&
        te__arith_const_int(e, &c)) {
        put_int(o, e->dtype, c);
        return c < 0 ? P_UNARY : P_PRIMARY;
    }
    switch (e->kind) {
    case TE_E_INT:
        put_int(o, e->dtype, e->u.i);
        return e->u.i < 0 ? P_UNARY : P_PRIMARY;
    case TE_E_FLOAT:
        put_float(o, e->dtype, e->u.f);
        return signbit(e->u.f) ? P_UNARY : P_PRIMARY;
    case TE_E_VAR:
        te__sb_puts(o, te__c_var_name(em, e));
        return P_PRIMARY;
    case TE_E_BINARY:
        return gen_binary(em, o, e);
    case TE_E_NOT:
        te__sb_puts(o, e->lanes > 1 ? "~" : "!");
        te__c_put(em, o, e->u.un.a, P_UNARY);
        return P_UNARY;
    case TE_E_NEG: {
        te__sb_puts(o, "-");
        /* never print "--x" */
        const te_expr *a = e->u.un.a;
        bool neg_inside = a->kind == TE_E_NEG || (a->kind == TE_E_INT && a->u.i < 0) ||
                          (a->kind == TE_E_FLOAT && signbit(a->u.f));
        te__c_put(em, o, a, neg_inside ? P_PRIMARY : P_UNARY);
        return P_UNARY;
    }
    case TE_E_SELECT:
    case TE_E_IF:
        if (e->lanes > 1 && e->u.sel.c->lanes > 1) {
            te__sb_printf(o, "%s(", te__c_helper_name(em, H_BLEND, e->dtype, e->lanes));
            te__c_put(em, o, e->u.sel.c, P_LOR);
            te__sb_puts(o, ", ");
            te__c_put_vec(em, o, e->u.sel.t, e->lanes);
            te__sb_puts(o, ", ");
            te__c_put_vec(em, o, e->u.sel.f, e->lanes);
            te__sb_puts(o, ")");
            return P_PRIMARY;
        }
        te__c_put(em, o, e->u.sel.c, P_LOR);
        te__sb_puts(o, " ? ");
        if (e->lanes > 1) {
            te__c_put_vec(em, o, e->u.sel.t, e->lanes);
            te__sb_puts(o, " : ");
            te__c_put_vec(em, o, e->u.sel.f, e->lanes);
        } else {
            te__c_put(em, o, e->u.sel.t, P_LOR);
            te__sb_puts(o, " : ");
            te__c_put(em, o, e->u.sel.f, P_LOR);
        }
        return P_TERNARY;
    case TE_E_CAST:
        return gen_cast(em, o, e);
    case TE_E_CALL:
        return gen_call(em, o, e);
    case TE_E_LOAD:
        return gen_load(em, o, e);
    case TE_E_RAMP: {
        const te_expr *base = e->u.ramp.base;
        const char *vt = te__c_vtype(em, e->dtype, e->lanes);
        int64_t b0 = 0;
        bool kb = te__arith_const_int(base, &b0);
        if (!kb) {
            te__c_put(em, o, base, P_ADD);
            te__sb_puts(o, " + ");
        }
        te__sb_printf(o, "(%s){", vt);
        for (int l = 0; l < e->lanes; l++)
            te__sb_printf(o, "%s%lld", l ? ", " : "", (long long)(b0 + l * e->u.ramp.stride));
        te__sb_puts(o, "}");
        return kb ? P_PRIMARY : P_ADD;
    }
    case TE_E_BCAST:
        te__c_put_vec(em, o, e, e->lanes);
        return P_PRIMARY;
    case TE_E_READ:
    case TE_E_REDUCE:
        te__c_fail(em, TE_ERR_INTERNAL, "a tensor read or reduction survived lowering");
        return P_PRIMARY;
    }
    return P_PRIMARY;
}

/* Text of an expression as a string (owned by the arena). */
const char *te__c_expr_text(emitter *em, const te_expr *e, int minp)
{
    te__sb t = {0};
    te__c_put(em, &t, e, minp);
    const char *z = t.oom ? NULL : te__strdup(em->ctx, t.p ? t.p : "");
    free(t.p);
    if (!z)
        te__c_fail(em, TE_ERR_NOMEM, "out of memory");
    return z ? z : "";
}
