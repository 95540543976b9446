/*
 * backends/cuda/emit_cuda_expr.c: the CUDA emitter's names (valid C++, never reserved, unique),
 * types, line writer and expressions as C++ text with the fewest parentheses; lanes of vector
 * expressions for the statements written lane by lane.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/emit_cuda_impl.h"

void te__cem_fail(cem *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vfail(e->ctx, &e->err, "te_emit_cuda", e->f ? e->f->name : NULL, code, fmt, ap);
    va_end(ap);
}

static bool is_reserved(const char *z) { return te__emit_reserved(z, TE__LANG_CUDA); }

static bool name_taken(cem *e, const char *z)
{
    for (int i = 0; i < e->names.n; i++)
        if (!strcmp(e->names.v[i].name, z))
            return true;
    return false;
}

/* The name of an entity (by pointer), made from base the first time: valid, not reserved, not
 * taken ("_<id>" and a counter make it so). */
const char *te__cem_lookup(cem *e, int kind, int id, const void *ptr, const char *base)
{
    const char *z = te__names_find(&e->names, kind, false, id, ptr);
    if (z)
        return z;
    char b[160];
    te__c_ident(base, b, sizeof b);
    if (is_reserved(b) || name_taken(e, b))
        z = te__sprintf(e->ctx, "%s_%d", b, id);
    else
        z = te__strdup(e->ctx, b);
    for (int k = 2; z && name_taken(e, z); k++)
        z = te__sprintf(e->ctx, "%s_%d_%d", b, id, k);
    if (!z || te__names_add(e->ctx, &e->names, kind, id, ptr, z) != TE_OK) {
        te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        return "?";
    }
    return z;
}

const char *te__cem_ctype(cem *e, te_dtype d)
{
    if (d == TE_I64 && e->small)
        return "int";
    if (te_dtype_is_half(d))
        e->uses_half = true;
    const char *t = te_dtype_cuda_type(d);
    return t ? t : "?";
}

const char *te__cem_value_ctype(cem *e, te_dtype d)
{
    return te__cem_ctype(e, te_dtype_compute(d));
}

void te__cem_line(cem *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vline(e->o, e->indent, fmt, ap);
    va_end(ap);
}

/* ---- Expressions -------------------------------------------------------------------------- */

static void put(cem *e, te__sb *o, const te_expr *x, int minp);

void te__cem_check_push(cem *e, int rc)
{
    if (rc != TE_OK)
        te__cem_fail(e, rc, "out of memory");
}

/* A float literal; NaN and infinities by their bit patterns (CUDA has no math.h macros). */
static void put_float(te__sb *o, te_dtype d, double v)
{
    static const te__nonfinite f32 = {"__int_as_float(0x7fc00000)", "__int_as_float(0x7f800000)",
                                      "__int_as_float(0xff800000)"};
    static const te__nonfinite f64 = {"__longlong_as_double(0x7ff8000000000000LL)",
                                      "__longlong_as_double(0x7ff0000000000000LL)",
                                      "__longlong_as_double(0xfff0000000000000LL)"};
    te__emit_float(o, d, v, te_dtype_compute(d) == TE_F32 ? &f32 : &f64);
}

static const char *fn_name(te_intrin fn, te_dtype d)
{
    if (fn == TE_RSQRT)
        return te_dtype_compute(d) == TE_F32 ? "rsqrtf" : "rsqrt";
    return te__emit_libm_name(fn, d);
}

static void put_binary(cem *e, te__sb *o, const te_expr *x, int minp)
{
    const te_expr *a = x->u.bin.a, *b = x->u.bin.b;
    te_binop op = x->u.bin.op;
    bool fl = te_dtype_is_float(a->dtype);
    bool f32 = te_dtype_compute(a->dtype) == TE_F32; /* f16/bf16 values are f32 ones */
    int64_t c;
    switch (op) {
    case TE_MIN:
    case TE_MAX:
        te__sb_puts(o, fl ? (op == TE_MIN ? (f32 ? "fminf(" : "fmin(") : (f32 ? "fmaxf(" : "fmax("))
                          : (op == TE_MIN ? "min(" : "max("));
        put(e, o, a, 0);
        te__sb_puts(o, ", ");
        put(e, o, b, 0);
        te__sb_puts(o, ")");
        return;
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        if (fl) {
            const char *flr = f32 ? "floorf" : "floor";
            if (op == TE_FLOORDIV) {
                te__sb_printf(o, "%s(", flr);
                put(e, o, a, P_MUL);
                te__sb_puts(o, " / ");
                put(e, o, b, P_UNARY);
                te__sb_puts(o, ")");
            } else {
                if (minp > P_ADD)
                    te__sb_puts(o, "(");
                put(e, o, a, P_ADD);
                te__sb_printf(o, " - %s(", flr);
                put(e, o, a, P_MUL);
                te__sb_puts(o, " / ");
                put(e, o, b, P_UNARY);
                te__sb_puts(o, ") * ");
                put(e, o, b, P_UNARY);
                if (minp > P_ADD)
                    te__sb_puts(o, ")");
            }
            return;
        }
        if (te__is_const_int(b, &c) && c > 0 && te__arith_nonneg(a, &e->ranges)) {
            if (minp > P_MUL)
                te__sb_puts(o, "(");
            put(e, o, a, P_MUL);
            te__sb_puts(o, op == TE_FLOORDIV ? " / " : " % ");
            put(e, o, b, P_UNARY);
            if (minp > P_MUL)
                te__sb_puts(o, ")");
            return;
        }
        te__sb_puts(o, op == TE_FLOORDIV ? "te_floordiv(" : "te_floormod(");
        put(e, o, a, 0);
        te__sb_puts(o, ", ");
        put(e, o, b, 0);
        te__sb_puts(o, ")");
        return;
    default:
        break;
    }
    int p;
    const char *tok = te__emit_binop(op, false, &p);
    if (!tok) {
        te__cem_fail(e, TE_ERR_UNSUPPORTED, "binary operator %d", (int)op);
        return;
    }
    if (p < minp)
        te__sb_puts(o, "(");
    put(e, o, a, p);
    te__sb_printf(o, " %s ", tok);
    put(e, o, b, p + 1);
    if (p < minp)
        te__sb_puts(o, ")");
}

/* A cast with te_cast's semantics (include/tessera/status.h): to f16/bf16 rounds to nearest
 * even (the value stays a float), float to integer truncates, saturates and maps NaN to 0 (the
 * __float2int_rz family does exactly that: PTX cvt.rzi saturates), the rest as C++ casts. */
static void put_cast(cem *e, te__sb *o, const te_expr *x)
{
    te_dtype to = x->dtype, from = te_dtype_compute(x->u.un.a->dtype);
    if (te_dtype_is_half(to) && from != TE_BOOL) {
        e->uses_half = true;
        te__sb_printf(o, "%s(%s((float)(", te_dtype_conv_fn(to, 1, 0), te_dtype_conv_fn(to, 1, 1));
        put(e, o, x->u.un.a, 0);
        te__sb_puts(o, ")))");
        return;
    }
    if (te_dtype_is_float(from) && te_dtype_is_int(to) && to != TE_BOOL) {
        const char *src = from == TE_F32 ? "float" : "double";
        if (to == TE_I64)
            te__sb_printf(o, "((%s)__%s2ll_rz(", te__cem_ctype(e, TE_I64), src);
        else if (to == TE_I32)
            te__sb_printf(o, "(__%s2int_rz(", src);
        else
            te__sb_printf(o, "((%s)min(max(__%s2int_rz(", te__cem_ctype(e, to), src);
        put(e, o, x->u.un.a, 0);
        if (to == TE_I8)
            te__sb_puts(o, "), -128), 127))");
        else if (to == TE_U8)
            te__sb_puts(o, "), 0), 255))");
        else
            te__sb_puts(o, "))");
        return;
    }
    te__sb_printf(o, "((%s)", te__cem_value_ctype(e, to));
    put(e, o, x->u.un.a, P_UNARY);
    te__sb_puts(o, ")");
}

static void put(cem *e, te__sb *o, const te_expr *x, int minp)
{
    if (!x || e->err)
        return;
    if (x->lanes > 1) {
        te__cem_fail(e, TE_ERR_INTERNAL, "a vector expression outside a vector store");
        return;
    }
    switch (x->kind) {
    case TE_E_INT:
        if (x->dtype == TE_BOOL)
            te__sb_puts(o, x->u.i ? "true" : "false");
        else if (x->u.i < 0 && minp > P_UNARY - 1)
            te__sb_printf(o, "(%lld%s)", (long long)x->u.i,
                          (x->dtype == TE_I64 && !e->small) ? "LL" : "");
        else
            te__sb_printf(o, "%lld%s", (long long)x->u.i,
                          (x->dtype == TE_I64 && !e->small) ? "LL" : "");
        return;
    case TE_E_FLOAT:
        if (x->u.f < 0 && minp > P_ADD)
            te__sb_puts(o, "(");
        put_float(o, x->dtype, x->u.f);
        if (x->u.f < 0 && minp > P_ADD)
            te__sb_puts(o, ")");
        return;
    case TE_E_VAR:
        te__sb_puts(o, te__cem_var_name(e, x));
        return;
    case TE_E_BINARY:
        put_binary(e, o, x, minp);
        return;
    case TE_E_NOT:
    case TE_E_NEG:
        if (minp > P_UNARY)
            te__sb_puts(o, "(");
        te__sb_puts(o, x->kind == TE_E_NOT ? "!" : "-");
        put(e, o, x->u.un.a, P_UNARY);
        if (minp > P_UNARY)
            te__sb_puts(o, ")");
        return;
    case TE_E_SELECT:
    case TE_E_IF:
        if (minp > P_TERNARY)
            te__sb_puts(o, "(");
        put(e, o, x->u.sel.c, P_LOR);
        te__sb_puts(o, " ? ");
        put(e, o, x->u.sel.t, P_TERNARY);
        te__sb_puts(o, " : ");
        put(e, o, x->u.sel.f, P_TERNARY);
        if (minp > P_TERNARY)
            te__sb_puts(o, ")");
        return;
    case TE_E_CAST:
        put_cast(e, o, x);
        return;
    case TE_E_CALL: {
        te_dtype d = x->dtype;
        if (x->u.call.fn == TE_SIGMOID) {
            te__sb_puts(o, te_dtype_compute(d) == TE_F32 ? "(1.0f / (1.0f + expf(-"
                                                         : "(1.0 / (1.0 + exp(-");
            put(e, o, x->u.call.args[0], P_UNARY);
            te__sb_puts(o, ")))");
            return;
        }
        const char *n = fn_name(x->u.call.fn, d);
        if (!n) {
            te__cem_fail(e, TE_ERR_UNSUPPORTED, "intrinsic %d", (int)x->u.call.fn);
            return;
        }
        te__sb_printf(o, "%s(", n);
        for (int i = 0; i < x->u.call.n; i++) {
            if (i)
                te__sb_puts(o, ", ");
            put(e, o, x->u.call.args[i], 0);
        }
        te__sb_puts(o, ")");
        return;
    }
    case TE_E_LOAD: {
        const char *wide = te__cem_vload_lane(e, x);
        if (wide) { /* a component of a wide load emitted ahead */
            te__sb_puts(o, wide);
            return;
        }
        if (x->u.load.n != 1) {
            te__cem_fail(e, TE_ERR_INTERNAL, "load of '%s' with an index that is not flat",
                         x->u.load.buf->name);
            return;
        }
        if (te_dtype_is_half(x->u.load.buf->dtype)) { /* a float value */
            e->uses_half = true;
            te__sb_printf(o, "%s(", te_dtype_conv_fn(x->u.load.buf->dtype, 1, 0));
        }
        te__sb_printf(o, "%s[", te__cem_buf_name(e, x->u.load.buf));
        put(e, o, x->u.load.idx[0], 0);
        te__sb_puts(o, te_dtype_is_half(x->u.load.buf->dtype) ? "])" : "]");
        return;
    }
    default:
        te__cem_fail(e, TE_ERR_UNSUPPORTED, "expression kind %d in CUDA code", (int)x->kind);
        return;
    }
}

const char *te__cem_text(cem *e, const te_expr *x)
{
    te__sb t = {0};
    put(e, &t, x, 0);
    const char *z = te__strdup(e->ctx, t.p ? t.p : "");
    free(t.p);
    return z ? z : "";
}

/* Lane l of a vector expression, as a scalar expression. */
te_expr *te__cem_lane(cem *e, te_expr *x, int l)
{
    te_ctx *ctx = e->ctx;
    if (!x || x->lanes == 1)
        return x;
    switch (x->kind) {
    case TE_E_RAMP:
        return te_add(ctx, x->u.ramp.base, te_int(ctx, x->u.ramp.stride * l));
    case TE_E_BCAST:
        return x->u.un.a;
    case TE_E_LOAD: {
        te_expr *i = te__cem_lane(e, x->u.load.idx[0], l);
        return i ? te__load(ctx, x->u.load.buf, 1, &i) : NULL;
    }
    case TE_E_BINARY:
        return te_binary(ctx, x->u.bin.op, te__cem_lane(e, x->u.bin.a, l),
                         te__cem_lane(e, x->u.bin.b, l));
    case TE_E_NOT:
        return te_not(ctx, te__cem_lane(e, x->u.un.a, l));
    case TE_E_NEG:
        return te_neg(ctx, te__cem_lane(e, x->u.un.a, l));
    case TE_E_CAST:
        return te_cast(ctx, x->dtype, te__cem_lane(e, x->u.un.a, l));
    case TE_E_SELECT:
        return te_select(ctx, te__cem_lane(e, x->u.sel.c, l), te__cem_lane(e, x->u.sel.t, l),
                         te__cem_lane(e, x->u.sel.f, l));
    case TE_E_IF:
        return te_if_then_else(ctx, te__cem_lane(e, x->u.sel.c, l), te__cem_lane(e, x->u.sel.t, l),
                               te__cem_lane(e, x->u.sel.f, l));
    case TE_E_CALL: {
        te_expr *a[2] = {NULL, NULL};
        for (int i = 0; i < x->u.call.n; i++)
            a[i] = te__cem_lane(e, x->u.call.args[i], l);
        return te_call(ctx, x->u.call.fn, x->u.call.n, a);
    }
    default:
        te__cem_fail(e, TE_ERR_UNSUPPORTED, "vector expression kind %d", (int)x->kind);
        return NULL;
    }
}
