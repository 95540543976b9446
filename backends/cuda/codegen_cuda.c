/*
 * backends/cuda/codegen_cuda.c: a lowered function (lowered for a CUDA target) -> CUDA C++.
 *
 * The file has the C backend's provenance header, a short prelude (index type, floor division
 * helpers), then one `extern "C" __global__` kernel per kernel of the loop program (a root
 * statement whose outer loops are bound to blockIdx): the block loops become `const int
 * <var> = blockIdx.<d>;`, a loop bound to threadIdx.<d> becomes `const int <var> =
 * threadIdx.<d>;` (inside `if (threadIdx.<d> < extent)` when it is narrower than the block),
 * shared allocations become `__shared__` arrays, barriers `__syncthreads()`. Each kernel carries
 * __launch_bounds__(threads per block) and a comment with its launch dimensions.
 *
 * Conventions:
 *   - index arithmetic is `int` when every buffer has fewer than 2^31 elements (and no tensor
 *     holds i64 data), else `long long`;
 *   - a vector store whose value is a contiguous load (a cooperative copy after vectorize) is one
 *     float4/float2 (int4/int2) load and store when both indices are provably multiples of the
 *     lane count; other vector statements are written lane by lane;
 *   - the steps of a cross-thread reduction tree (schedule/passes/allreduce.c) over 32 partial
 *     results or fewer become warp shuffles when the block is one-dimensional.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_impl.h"
#include "backends/emit_common.h"
#include "schedule/passes.h"

/* ---- Emitter -------------------------------------------------------------------------------- */

typedef struct cem {
    te_ctx *ctx;
    const te_lowered *f;
    te__sb *o;
    int indent;
    int err;
    bool small; /* int indices */
    int64_t dims[3];
    te__name_table names; /* kinds: 0 variable, 1 buffer, 2 the kernel name (by pointer) */
    const te_expr *nonneg[512];
    int nnonneg;
    /* buffers of the current kernel */
    const te_buf *used[TE__CUDA_MAX_PARAMS];
    int nused;
} cem;

static void fail(cem *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(cem *e, int code, const char *fmt, ...)
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
static const char *lookup(cem *e, int kind, int id, const void *ptr, const char *base)
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
        fail(e, TE_ERR_NOMEM, "out of memory");
        return "?";
    }
    return z;
}

static const char *var_name(cem *e, const te_expr *v)
{
    return lookup(e, 0, v->u.var.id, v, v->u.var.name);
}

static const char *buf_name(cem *e, const te_buf *b) { return lookup(e, 1, b->id, b, b->name); }

static const char *ctype(cem *e, te_dtype d)
{
    switch (d) {
    case TE_BOOL:
        return "bool";
    case TE_I8:
        return "signed char";
    case TE_U8:
        return "unsigned char";
    case TE_I32:
        return "int";
    case TE_I64:
        return e->small ? "int" : "long long";
    case TE_F32:
        return "float";
    case TE_F64:
        return "double";
    default:
        return "?";
    }
}

static void line(cem *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(cem *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vline(e->o, e->indent, fmt, ap);
    va_end(ap);
}

/* ---- Expressions -------------------------------------------------------------------------- */

static void put(cem *e, te__sb *o, const te_expr *x, int minp);

static bool is_nonneg(cem *e, const te_expr *x)
{
    int64_t v;
    if (te__is_const_int(x, &v))
        return v >= 0;
    switch (x->kind) {
    case TE_E_VAR:
        for (int i = 0; i < e->nnonneg; i++)
            if (e->nonneg[i] == x)
                return true;
        return false;
    case TE_E_BINARY:
        switch (x->u.bin.op) {
        case TE_ADD:
        case TE_MUL:
        case TE_MIN:
        case TE_FLOORDIV:
        case TE_DIV:
            return is_nonneg(e, x->u.bin.a) && is_nonneg(e, x->u.bin.b);
        case TE_MAX:
            return is_nonneg(e, x->u.bin.a) || is_nonneg(e, x->u.bin.b);
        case TE_FLOORMOD:
            return te__is_const_int(x->u.bin.b, &v) && v > 0;
        default:
            return false;
        }
    default:
        return false;
    }
}

/* A float literal; NaN and infinities by their bit patterns (CUDA has no math.h macros). */
static void put_float(te__sb *o, te_dtype d, double v)
{
    static const te__nonfinite f32 = {"__int_as_float(0x7fc00000)", "__int_as_float(0x7f800000)",
                                      "__int_as_float(0xff800000)"};
    static const te__nonfinite f64 = {"__longlong_as_double(0x7ff8000000000000LL)",
                                      "__longlong_as_double(0x7ff0000000000000LL)",
                                      "__longlong_as_double(0xfff0000000000000LL)"};
    te__emit_float(o, d, v, d == TE_F32 ? &f32 : &f64);
}

static const char *fn_name(te_intrin fn, te_dtype d)
{
    if (fn == TE_RSQRT)
        return d == TE_F32 ? "rsqrtf" : "rsqrt";
    return te__emit_libm_name(fn, d);
}

static void put_binary(cem *e, te__sb *o, const te_expr *x, int minp)
{
    const te_expr *a = x->u.bin.a, *b = x->u.bin.b;
    te_binop op = x->u.bin.op;
    bool fl = te_dtype_is_float(a->dtype);
    int64_t c;
    switch (op) {
    case TE_MIN:
    case TE_MAX:
        te__sb_puts(o, fl ? (op == TE_MIN ? (a->dtype == TE_F32 ? "fminf(" : "fmin(")
                                      : (a->dtype == TE_F32 ? "fmaxf(" : "fmax("))
                      : (op == TE_MIN ? "min(" : "max("));
        put(e, o, a, 0);
        te__sb_puts(o, ", ");
        put(e, o, b, 0);
        te__sb_puts(o, ")");
        return;
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        if (fl) {
            const char *flr = a->dtype == TE_F32 ? "floorf" : "floor";
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
        if (te__is_const_int(b, &c) && c > 0 && is_nonneg(e, a)) {
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
        fail(e, TE_ERR_UNSUPPORTED, "binary operator %d", (int)op);
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

static void put(cem *e, te__sb *o, const te_expr *x, int minp)
{
    if (!x || e->err)
        return;
    if (x->lanes > 1) {
        fail(e, TE_ERR_INTERNAL, "a vector expression outside a vector store");
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
        te__sb_puts(o, var_name(e, x));
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
        te__sb_printf(o, "((%s)", ctype(e, x->dtype));
        put(e, o, x->u.un.a, P_UNARY);
        te__sb_puts(o, ")");
        return;
    case TE_E_CALL: {
        te_dtype d = x->dtype;
        if (x->u.call.fn == TE_SIGMOID) {
            te__sb_puts(o, d == TE_F32 ? "(1.0f / (1.0f + expf(-" : "(1.0 / (1.0 + exp(-");
            put(e, o, x->u.call.args[0], P_UNARY);
            te__sb_puts(o, ")))");
            return;
        }
        const char *n = fn_name(x->u.call.fn, d);
        if (!n) {
            fail(e, TE_ERR_UNSUPPORTED, "intrinsic %d", (int)x->u.call.fn);
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
    case TE_E_LOAD:
        if (x->u.load.n != 1) {
            fail(e, TE_ERR_INTERNAL, "load of '%s' with an index that is not flat",
                 x->u.load.buf->name);
            return;
        }
        te__sb_printf(o, "%s[", buf_name(e, x->u.load.buf));
        put(e, o, x->u.load.idx[0], 0);
        te__sb_puts(o, "]");
        return;
    default:
        fail(e, TE_ERR_UNSUPPORTED, "expression kind %d in CUDA code", (int)x->kind);
        return;
    }
}

static const char *text(cem *e, const te_expr *x)
{
    te__sb t = {0};
    put(e, &t, x, 0);
    const char *z = te__strdup(e->ctx, t.p ? t.p : "");
    free(t.p);
    return z ? z : "";
}

/* Lane l of a vector expression, as a scalar expression. */
static te_expr *lane(cem *e, te_expr *x, int l)
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
        te_expr *i = lane(e, x->u.load.idx[0], l);
        return i ? te__load(ctx, x->u.load.buf, 1, &i) : NULL;
    }
    case TE_E_BINARY:
        return te_binary(ctx, x->u.bin.op, lane(e, x->u.bin.a, l), lane(e, x->u.bin.b, l));
    case TE_E_NOT:
        return te_not(ctx, lane(e, x->u.un.a, l));
    case TE_E_NEG:
        return te_neg(ctx, lane(e, x->u.un.a, l));
    case TE_E_CAST:
        return te_cast(ctx, x->dtype, lane(e, x->u.un.a, l));
    case TE_E_SELECT:
        return te_select(ctx, lane(e, x->u.sel.c, l), lane(e, x->u.sel.t, l),
                         lane(e, x->u.sel.f, l));
    case TE_E_IF:
        return te_if_then_else(ctx, lane(e, x->u.sel.c, l), lane(e, x->u.sel.t, l),
                               lane(e, x->u.sel.f, l));
    case TE_E_CALL: {
        te_expr *a[2] = {NULL, NULL};
        for (int i = 0; i < x->u.call.n; i++)
            a[i] = lane(e, x->u.call.args[i], l);
        return te_call(ctx, x->u.call.fn, x->u.call.n, a);
    }
    default:
        fail(e, TE_ERR_UNSUPPORTED, "vector expression kind %d", (int)x->kind);
        return NULL;
    }
}

/* ---- Statements --------------------------------------------------------------------------- */

static void gen(cem *e, const te_stmt *s);

static void gen_store(cem *e, const te_stmt *s)
{
    const te_buf *b = s->u.store.buf;
    te_expr *ix = s->u.store.idx[0], *val = s->u.store.value;
    if (s->u.store.n != 1) {
        fail(e, TE_ERR_INTERNAL, "store to '%s' with an index that is not flat", b->name);
        return;
    }
    int lanes = val->lanes > ix->lanes ? val->lanes : ix->lanes;
    if (lanes == 1) {
        line(e, "%s[%s] = %s;", buf_name(e, b), text(e, ix), text(e, val));
        return;
    }
    /* a contiguous, aligned copy: one vector load and store */
    size_t es = te_dtype_size(b->dtype);
    if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1 && val->kind == TE_E_LOAD &&
        val->u.load.idx[0]->kind == TE_E_RAMP && val->u.load.idx[0]->u.ramp.stride == 1 &&
        val->dtype == b->dtype && es == 4 && (lanes == 2 || lanes == 4) &&
        te__expr_multiple_of(ix->u.ramp.base, lanes) &&
        te__expr_multiple_of(val->u.load.idx[0]->u.ramp.base, lanes)) {
        const char *vt = b->dtype == TE_F32 ? (lanes == 4 ? "float4" : "float2")
                                            : (lanes == 4 ? "int4" : "int2");
        line(e, "*(%s *)&%s[%s] = *(const %s *)&%s[%s];", vt, buf_name(e, b),
             text(e, ix->u.ramp.base), vt, buf_name(e, val->u.load.buf),
             text(e, val->u.load.idx[0]->u.ramp.base));
        return;
    }
    for (int l = 0; l < lanes; l++) {
        te_expr *il = lane(e, ix, l), *vl = lane(e, val, l);
        if (!il || !vl) {
            fail(e, TE_ERR_NOMEM, "out of memory");
            return;
        }
        line(e, "%s[%s] = %s;", buf_name(e, b), text(e, il), text(e, vl));
    }
}

static const char *dim_name[3] = {"x", "y", "z"};

static void gen_for(cem *e, const te_stmt *s)
{
    const te_expr *var = s->u.loop.var;
    const char *v = var_name(e, var);
    int64_t mn = 0, ex = 0;
    bool kmin = te__is_const_int(s->u.loop.min, &mn),
         kext = te__is_const_int(s->u.loop.extent, &ex);
    if (s->u.loop.fkind == TE_FOR_THREAD) {
        int tag = s->u.loop.thread_tag;
        if (tag <= TE_BLOCK_Z) {
            fail(e, TE_ERR_SCHEDULE, "loop '%s' bound to blockIdx.%s is nested inside the kernel",
                 var->u.var.name, dim_name[tag]);
            return;
        }
        int d = tag - TE_THREAD_X;
        if (!kmin || !kext) {
            fail(e, TE_ERR_SCHEDULE, "loop '%s' bound to threadIdx.%s has a non-constant range",
                 var->u.var.name, dim_name[d]);
            return;
        }
        bool guard = mn > 0 || mn + ex < e->dims[d];
        if (guard) {
            if (mn > 0)
                line(e, "if (threadIdx.%s >= %lld && threadIdx.%s < %lld) {", dim_name[d],
                     (long long)mn, dim_name[d], (long long)(mn + ex));
            else
                line(e, "if (threadIdx.%s < %lld) {", dim_name[d], (long long)ex);
        } else {
            line(e, "{");
        }
        e->indent++;
        line(e, "const int %s = threadIdx.%s;", v, dim_name[d]);
        if (e->nnonneg < 512)
            e->nonneg[e->nnonneg++] = var;
        gen(e, s->u.loop.body);
        e->indent--;
        line(e, "}");
        return;
    }
    const char *it = e->small ? "int" : "long long";
    const char *lo = text(e, s->u.loop.min);
    const char *hi = kmin && kext ? te__sprintf(e->ctx, "%lld", (long long)(mn + ex))
                     : kmin && mn == 0
                         ? text(e, s->u.loop.extent)
                         : te__sprintf(e->ctx, "%s + %s", lo, text(e, s->u.loop.extent));
    if (s->u.loop.fkind == TE_FOR_UNROLLED)
        line(e, "#pragma unroll");
    line(e, "for (%s %s = %s; %s < %s; ++%s) {", it, v, lo, v, hi, v);
    int saved = e->nnonneg;
    if (is_nonneg(e, s->u.loop.min) && e->nnonneg < 512)
        e->nonneg[e->nnonneg++] = var;
    e->indent++;
    gen(e, s->u.loop.body);
    e->indent--;
    e->nnonneg = saved;
    line(e, "}");
}

/* ---- Warp-shuffle reduction steps ------------------------------------------------------------ */

/* A tree step of allreduce.c: for k (threadIdx.x, extent h): R[k] = comb(R[k], R[k + m]).
 * Returns R and stores h and m. */
static const te_buf *tree_step(const te_stmt *s, int64_t *h, int64_t *m)
{
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_THREAD ||
        s->u.loop.thread_tag != TE_THREAD_X || !te__is_const_int(s->u.loop.extent, h))
        return NULL;
    const te_stmt *st = s->u.loop.body;
    if (st->kind != TE_S_STORE || st->u.store.n != 1 || st->u.store.buf->scope != TE_SCOPE_SHARED ||
        st->u.store.idx[0] != s->u.loop.var)
        return NULL;
    const te_buf *R = st->u.store.buf;
    /* find the load R[k + m] */
    const te_expr *v = st->u.store.value;
    const te_expr *stack[64];
    int n = 0;
    stack[n++] = v;
    *m = -1;
    while (n) {
        const te_expr *x = stack[--n];
        if (x->kind == TE_E_LOAD && x->u.load.buf == R) {
            const te_expr *i = x->u.load.idx[0];
            int64_t c;
            if (i != s->u.loop.var) {
                if (i->kind == TE_E_BINARY && i->u.bin.op == TE_ADD &&
                    i->u.bin.a == s->u.loop.var && te__is_const_int(i->u.bin.b, &c))
                    *m = c;
                else
                    return NULL;
            }
            continue;
        }
        if (x->kind == TE_E_BINARY && n + 2 <= 64) {
            stack[n++] = x->u.bin.a;
            stack[n++] = x->u.bin.b;
        } else if ((x->kind == TE_E_SELECT || x->kind == TE_E_IF) && n + 3 <= 64) {
            stack[n++] = x->u.sel.c;
            stack[n++] = x->u.sel.t;
            stack[n++] = x->u.sel.f;
        } else if ((x->kind == TE_E_NOT || x->kind == TE_E_NEG || x->kind == TE_E_CAST) && n < 64) {
            stack[n++] = x->u.un.a;
        }
    }
    return *m > 0 ? R : NULL;
}

typedef struct {
    const te_buf *R;
    const te_expr *k;
    te_expr *a, *b;
} comb_ctx;

static te_expr *comb_fn(te_ctx *ctx, te_expr *x, void *user)
{
    comb_ctx *c = user;
    (void)ctx;
    if (x->kind == TE_E_LOAD && x->u.load.buf == c->R)
        return x->u.load.idx[0] == c->k ? c->a : c->b;
    return x;
}

/* Emits the steps from seq item i on as warp shuffles when they reduce 32 values or fewer.
 * Returns the index of the first item not consumed, or i when the pattern does not apply. */
static int gen_warp_steps(cem *e, const te_stmt *seq, int i)
{
    if (e->dims[1] != 1 || e->dims[2] != 1)
        return i;
    int64_t h, m;
    const te_buf *R = tree_step(seq->u.seq.v[i], &h, &m);
    int64_t n = h + m;
    if (!R || n > 32)
        return i;
    const te_stmt *first = seq->u.seq.v[i];
    int j = i + 1;
    for (;;) {
        int64_t h2, m2;
        if (j + 1 < seq->u.seq.n && seq->u.seq.v[j]->kind == TE_S_BARRIER &&
            tree_step(seq->u.seq.v[j + 1], &h2, &m2) == R)
            j += 2;
        else if (j < seq->u.seq.n && tree_step(seq->u.seq.v[j], &h2, &m2) == R)
            j += 1;
        else
            break;
    }
    te_ctx *ctx = e->ctx;
    const te_stmt *st = first->u.loop.body;
    te_dtype dt = R->dtype;
    te_expr *va = te_var(ctx, "v", dt), *vb = te_var(ctx, "o", dt);
    comb_ctx cc = {R, first->u.loop.var, va, vb};
    te_expr *comb = te__expr_mutate(ctx, st->u.store.value, comb_fn, &cc);
    if (!comb) {
        fail(e, TE_ERR_NOMEM, "out of memory");
        return j;
    }
    int64_t off = 1;
    while (off * 2 < n)
        off *= 2;
    const char *rn = buf_name(e, R);
    const char *va_n = var_name(e, va), *vb_n = var_name(e, vb);
    line(e, "if (threadIdx.x < 32) { // warp-shuffle reduction of %s[0..%lld)", rn, (long long)n);
    e->indent++;
    line(e, "%s %s = %s[threadIdx.x < %lld ? threadIdx.x : 0];", ctype(e, dt), va_n, rn,
         (long long)n);
    line(e, "#pragma unroll");
    line(e, "for (int off = %lld; off > 0; off >>= 1) {", (long long)off);
    e->indent++;
    line(e, "const %s %s = __shfl_down_sync(0xffffffffu, %s, off);", ctype(e, dt), vb_n, va_n);
    line(e, "if (threadIdx.x + off < %lld)", (long long)n);
    e->indent++;
    line(e, "%s = %s;", va_n, text(e, comb));
    e->indent -= 2;
    line(e, "}");
    line(e, "if (threadIdx.x == 0)");
    e->indent++;
    line(e, "%s[0] = %s;", rn, va_n);
    e->indent -= 2;
    line(e, "}");
    return j;
}

static void gen(cem *e, const te_stmt *s)
{
    if (!s || e->err)
        return;
    switch (s->kind) {
    case TE_S_BARRIER:
        line(e, "__syncthreads();");
        return;
    case TE_S_COMMENT:
        te__emit_comment_line(e->o, e->indent, s->u.comment.text);
        return;
    case TE_S_FOR:
        gen_for(e, s);
        return;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n;) {
            int j = gen_warp_steps(e, s, i); /* runs of tree steps as warp shuffles */
            if (j > i) {
                i = j;
                continue;
            }
            gen(e, s->u.seq.v[i]);
            i++;
        }
        return;
    case TE_S_IF:
        line(e, "if (%s) {", text(e, s->u.cond.cond));
        e->indent++;
        gen(e, s->u.cond.then_s);
        e->indent--;
        if (s->u.cond.else_s) {
            line(e, "} else {");
            e->indent++;
            gen(e, s->u.cond.else_s);
            e->indent--;
        }
        line(e, "}");
        return;
    case TE_S_STORE:
        gen_store(e, s);
        return;
    case TE_S_ALLOC: {
        const te_buf *b = s->u.alloc.buf;
        int64_t n = te__buf_numel(b);
        if (b->scope == TE_SCOPE_GLOBAL) {
            fail(e, TE_ERR_SCHEDULE,
                 "buffer '%s' is allocated in global memory inside a kernel; "
                 "compute it inside a bound loop (local or shared) or at the root",
                 b->name);
            return;
        }
        line(e, "%s%s __align__(16) %s[%lld];", b->scope == TE_SCOPE_SHARED ? "__shared__ " : "",
             ctype(e, b->dtype), buf_name(e, b), (long long)n);
        gen(e, s->u.alloc.body);
        return;
    }
    case TE_S_LET: {
        const te_expr *v = s->u.let.var;
        if (s->u.let.value->lanes > 1) {
            fail(e, TE_ERR_UNSUPPORTED, "vector let '%s'", v->u.var.name);
            return;
        }
        line(e, "const %s %s = %s;", ctype(e, s->u.let.value->dtype), var_name(e, v),
             text(e, s->u.let.value));
        int saved = e->nnonneg;
        if (te_dtype_is_int(v->dtype) && is_nonneg(e, s->u.let.value) && e->nnonneg < 512)
            e->nonneg[e->nnonneg++] = v;
        gen(e, s->u.let.body);
        e->nnonneg = saved;
        return;
    }
    }
}

/* ---- Kernels -------------------------------------------------------------------------------- */

typedef struct {
    const te_buf **v;
    int n, max;
} bufset;

static void bs_add(bufset *b, const te_buf *x)
{
    if (x->scope != TE_SCOPE_GLOBAL)
        return;
    for (int i = 0; i < b->n; i++)
        if (b->v[i] == x)
            return;
    if (b->n < b->max)
        b->v[b->n] = x;
    b->n++;
}

static bool bs_expr(const te_expr *x, void *user)
{
    if (x->kind == TE_E_LOAD)
        bs_add(user, x->u.load.buf);
    return true;
}

/* Every buffer a statement stores to (its loads come through bs_expr). */
static bool bs_stmt(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_STORE)
        bs_add(user, s->u.store.buf);
    return true;
}

static bool writes(const te_stmt *s, const te_buf *b)
{
    if (!s)
        return false;
    switch (s->kind) {
    case TE_S_FOR:
        return writes(s->u.loop.body, b);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            if (writes(s->u.seq.v[i], b))
                return true;
        return false;
    case TE_S_IF:
        return writes(s->u.cond.then_s, b) || writes(s->u.cond.else_s, b);
    case TE_S_STORE:
        return s->u.store.buf == b;
    case TE_S_ALLOC:
        return writes(s->u.alloc.body, b);
    case TE_S_LET:
        return writes(s->u.let.body, b);
    default:
        return false;
    }
}

typedef struct prog_ctx {
    cem *e;
    te__sb *src;
    const te_lowered *f;
    te__cuda_program *p;
    const te_buf *temps[256];
    int ntemps;
    te__vec kernels;
    const char *kbase;
    const char *stage;
} prog_ctx;

static int buf_slot(prog_ctx *pc, const te_buf *b)
{
    if (b->arg_index >= 0)
        return b->arg_index;
    for (int i = 0; i < pc->ntemps; i++)
        if (pc->temps[i] == b)
            return pc->f->n_args + i;
    return -1;
}

static void emit_kernel(prog_ctx *pc, const te_stmt *s)
{
    cem *e = pc->e;
    te_ctx *ctx = e->ctx;
    te__cuda_kernel *k = te__alloc(ctx, sizeof *k);
    if (!k) {
        fail(e, TE_ERR_NOMEM, "out of memory");
        return;
    }
    int idx = pc->kernels.n;
    k->name = idx == 0 ? pc->kbase : te__sprintf(ctx, "%s_k%d", pc->kbase, idx);
    k->grid[0] = k->grid[1] = k->grid[2] = 1;
    /* block loops */
    const te_stmt *b = s;
    const te_expr *bvars[3] = {NULL, NULL, NULL};
    while (b->kind == TE_S_FOR && b->u.loop.fkind == TE_FOR_THREAD &&
           b->u.loop.thread_tag <= TE_BLOCK_Z) {
        int64_t ex = 1;
        te__is_const_int(b->u.loop.extent, &ex);
        k->grid[b->u.loop.thread_tag] = (int)ex;
        bvars[b->u.loop.thread_tag] = b->u.loop.var;
        b = b->u.loop.body;
    }
    if (!te__block_dims(b, e->dims)) {
        fail(e, TE_ERR_SCHEDULE, "a loop bound to threadIdx has a non-constant extent");
        return;
    }
    for (int d = 0; d < 3; d++)
        k->block[d] = (int)e->dims[d];
    int nt = k->block[0] * k->block[1] * k->block[2];
    /* parameters */
    const te_buf *bv[TE__CUDA_MAX_PARAMS];
    bufset bs = {bv, 0, TE__CUDA_MAX_PARAMS};
    te__stmt_visit(s, bs_stmt, bs_expr, &bs);
    if (bs.n > TE__CUDA_MAX_PARAMS) {
        fail(e, TE_ERR_UNSUPPORTED, "a kernel uses more than %d buffers", TE__CUDA_MAX_PARAMS);
        return;
    }
    /* order: arguments by index, then temps */
    for (int i = 1; i < bs.n; i++)
        for (int j = i; j > 0 && buf_slot(pc, bv[j - 1]) > buf_slot(pc, bv[j]); j--) {
            const te_buf *t = bv[j];
            bv[j] = bv[j - 1];
            bv[j - 1] = t;
        }
    te__sb *o = pc->src;
    te__sb_printf(o, "// %s: grid (%d, %d, %d), block (%d, %d, %d)%s%s\n", k->name, k->grid[0],
              k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
              pc->stage ? "; stage " : "", pc->stage ? pc->stage : "");
    te__sb_printf(o, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", nt, k->name);
    bool multi = bs.n > 2;
    for (int i = 0; i < bs.n; i++) {
        const te_buf *x = bv[i];
        bool out = writes(s, x);
        k->params[k->nparams++] = buf_slot(pc, x);
        te__sb_printf(o, "%s%s%s%s *__restrict__ %s", i ? "," : "",
                  multi ? "\n        " : (i ? " " : ""), out ? "" : "const ", ctype(e, x->dtype),
                  buf_name(e, x));
    }
    te__sb_puts(o, ")\n{\n");
    e->indent = 1;
    e->nnonneg = 0;
    for (int d = 0; d < 3; d++)
        if (bvars[d]) {
            line(e, "const int %s = blockIdx.%s;", var_name(e, bvars[d]), dim_name[d]);
            e->nonneg[e->nnonneg++] = bvars[d];
        }
    gen(e, b);
    te__sb_puts(o, "}\n\n");
    te__vec_push(ctx, &pc->kernels, k);
}

static void walk_root(prog_ctx *pc, const te_stmt *s)
{
    cem *e = pc->e;
    if (!s || e->err)
        return;
    switch (s->kind) {
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            walk_root(pc, s->u.seq.v[i]);
        return;
    case TE_S_ALLOC:
        if (s->u.alloc.buf->scope == TE_SCOPE_GLOBAL && pc->ntemps < 256) {
            pc->temps[pc->ntemps++] = s->u.alloc.buf;
            walk_root(pc, s->u.alloc.body);
            return;
        }
        break;
    case TE_S_COMMENT:
        if (s->u.comment.text && !strncmp(s->u.comment.text, "compute ", 8))
            pc->stage = s->u.comment.text + 8;
        return;
    case TE_S_FOR:
        if (s->u.loop.fkind == TE_FOR_THREAD) {
            emit_kernel(pc, s);
            return;
        }
        break;
    default:
        break;
    }
    fail(e, TE_ERR_SCHEDULE,
         "stage '%s' runs outside any loop bound to blockIdx/threadIdx "
         "(lower with a CUDA target to get the GPU check's explanation)",
         pc->stage ? pc->stage : "?");
}

static bool big_buf(const te_buf *b)
{
    return te__buf_numel(b) >= ((int64_t)1 << 31) || b->dtype == TE_I64;
}

static bool any_big(const te_stmt *s, bool *big);
static bool big_expr(const te_expr *x, void *user)
{
    if (x->kind == TE_E_LOAD && big_buf(x->u.load.buf))
        *(bool *)user = true;
    return true;
}
static bool any_big(const te_stmt *s, bool *big)
{
    if (!s)
        return *big;
    switch (s->kind) {
    case TE_S_FOR:
        any_big(s->u.loop.body, big);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            any_big(s->u.seq.v[i], big);
        break;
    case TE_S_IF:
        any_big(s->u.cond.then_s, big);
        any_big(s->u.cond.else_s, big);
        break;
    case TE_S_STORE:
        if (big_buf(s->u.store.buf))
            *big = true;
        te__expr_visit(s->u.store.value, big_expr, big);
        break;
    case TE_S_ALLOC:
        if (big_buf(s->u.alloc.buf))
            *big = true;
        any_big(s->u.alloc.body, big);
        break;
    case TE_S_LET:
        te__expr_visit(s->u.let.value, big_expr, big);
        any_big(s->u.let.body, big);
        break;
    default:
        break;
    }
    return *big;
}


const char te__cuda_prelude[] =
    "\n// floor division and modulo for signed operands not known to be non-negative\n"
    "template <typename T> __device__ __forceinline__ T te_floordiv(T a, T b)\n"
    "{\n    T q = a / b;\n    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}\n"
    "template <typename T> __device__ __forceinline__ T te_floormod(T a, T b)\n"
    "{\n    T r = a % b;\n    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n\n";

static int emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                        te__cuda_program *out, bool kernels_only);

int te__cuda_emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out)
{
    return emit_program(ctx, f, target, out, false);
}

int te__cuda_emit_kernels(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out)
{
    return emit_program(ctx, f, target, out, true);
}

static int emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                        te__cuda_program *out, bool kernels_only)
{
    if (!ctx || !out)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (!f || !f->body || !f->name || f->n_args < 0 || (f->n_args && !f->args))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_cuda: incomplete lowered function");
    cem *e = calloc(1, sizeof *e);
    te__sb *body = calloc(1, sizeof *body);
    if (!e || !body) {
        free(e);
        free(body);
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
    }
    e->ctx = ctx;
    e->f = f;
    e->o = body;
    bool big = false;
    for (int i = 0; i < f->n_args; i++)
        big |= big_buf(f->args[i]);
    any_big(f->body, &big);
    e->small = !big;
    char kbase[160];
    te__emit_kernel_ident(f->name, TE__LANG_CUDA, kbase, sizeof kbase);
    lookup(e, 2, 0, e, kbase);
    for (int i = 0; i < f->n_args; i++)
        buf_name(e, f->args[i]);
    prog_ctx pc = {.e = e, .src = body, .f = f, .p = out, .kbase = te__strdup(ctx, kbase)};
    walk_root(&pc, f->body);
    if (!pc.kernels.n && !e->err)
        fail(e, TE_ERR_SCHEDULE, "no kernel: no loop is bound to blockIdx or threadIdx");

    te__sb o = {0};
    if (!kernels_only) {
        te__emit_provenance(&o, kbase, "CUDA", 1, &f->header, target);
        te__sb_puts(&o, te__cuda_prelude);
    }
    te__sb_puts(&o, body->p ? body->p : "");
    int rc = e->err;
    if (!rc && (o.oom || body->oom))
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
    if (!rc) {
        out->source = te__strdup(ctx, o.p ? o.p : "");
        out->nkernels = pc.kernels.n;
        out->kernels =
            te__alloc(ctx, sizeof(te__cuda_kernel) * (size_t)(pc.kernels.n ? pc.kernels.n : 1));
        out->n_args = f->n_args;
        out->ntemps = pc.ntemps;
        out->temp_bytes = te__alloc(ctx, sizeof(size_t) * (size_t)(pc.ntemps ? pc.ntemps : 1));
        if (!out->source || !out->kernels || !out->temp_bytes) {
            rc = TE_ERR_NOMEM;
        } else {
            for (int i = 0; i < pc.kernels.n; i++)
                out->kernels[i] = *(te__cuda_kernel *)pc.kernels.v[i];
            for (int i = 0; i < pc.ntemps; i++) {
                size_t n = te_dtype_size(pc.temps[i]->dtype);
                for (int d = 0; d < pc.temps[i]->ndim; d++)
                    n *= (size_t)pc.temps[i]->shape[d];
                out->temp_bytes[i] = n;
            }
        }
    }
    free(o.p);
    free(body->p);
    free(body);
    free(e);
    return rc;
}

const char *te_emit_cuda(te_ctx *ctx, const te_lowered *f, const te_target *target)
{
    te__cuda_program p;
    return te__cuda_emit_program(ctx, f, target, &p) == TE_OK ? p.source : NULL;
}
