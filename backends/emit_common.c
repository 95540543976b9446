/*
 * backends/emit_common.c: the emission pieces the C and CUDA emitters share (see
 * emit_common.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/emit_common.h"
#include "schedule/passes.h"

#define C TE__LANG_C
#define CU TE__LANG_CUDA

/* Every word a generated name may not be, with the languages it is reserved in. */
static const struct {
    const char *word;
    unsigned langs;
} reserved_words[] = {
    /* keywords of C and C++ */
    {"auto", C | CU},
    {"break", C | CU},
    {"case", C | CU},
    {"char", C | CU},
    {"const", C | CU},
    {"continue", C | CU},
    {"default", C | CU},
    {"do", C | CU},
    {"double", C | CU},
    {"else", C | CU},
    {"enum", C | CU},
    {"extern", C | CU},
    {"float", C | CU},
    {"for", C | CU},
    {"goto", C | CU},
    {"if", C | CU},
    {"inline", C | CU},
    {"int", C | CU},
    {"long", C | CU},
    {"register", C | CU},
    {"restrict", C | CU},
    {"return", C | CU},
    {"short", C | CU},
    {"signed", C | CU},
    {"sizeof", C | CU},
    {"static", C | CU},
    {"struct", C | CU},
    {"switch", C | CU},
    {"typedef", C | CU},
    {"union", C | CU},
    {"unsigned", C | CU},
    {"void", C | CU},
    {"volatile", C | CU},
    {"while", C | CU},
    {"asm", C | CU},
    {"bool", C | CU},
    {"true", C | CU},
    {"false", C | CU},
    {"NULL", C | CU},
    {"main", C | CU},
    /* C only */
    {"_Bool", C},
    {"_Complex", C},
    {"_Imaginary", C},
    {"_Alignas", C},
    {"_Alignof", C},
    {"_Atomic", C},
    {"_Generic", C},
    {"_Noreturn", C},
    {"_Static_assert", C},
    {"_Thread_local", C},
    {"typeof", C},
    {"args", C},
    {"int8_t", C},
    {"uint8_t", C},
    {"int32_t", C},
    {"uint32_t", C},
    {"int64_t", C},
    {"uint64_t", C},
    {"uintptr_t", C},
    {"size_t", C},
    {"malloc", C},
    {"free", C},
    {"aligned_alloc", C},
    {"memset", C},
    {"memcpy", C},
    {"abs", C},
    {"labs", C},
    {"errno", C},
    {"INFINITY", C},
    {"NAN", C},
    {"isnan", C},
    {"isinf", C},
    {"omp_get_thread_num", C},
    {"omp_get_num_threads", C},
    /* C++ and CUDA only */
    {"class", CU},
    {"new", CU},
    {"delete", CU},
    {"this", CU},
    {"template", CU},
    {"typename", CU},
    {"namespace", CU},
    {"operator", CU},
    {"private", CU},
    {"public", CU},
    {"protected", CU},
    {"friend", CU},
    {"virtual", CU},
    {"using", CU},
    {"try", CU},
    {"catch", CU},
    {"throw", CU},
    {"nullptr", CU},
    {"threadIdx", CU},
    {"blockIdx", CU},
    {"blockDim", CU},
    {"gridDim", CU},
    {"warpSize", CU},
    {"min", CU},
    {"max", CU},
    {"float2", CU},
    {"float4", CU},
    {"int2", CU},
    {"int4", CU},
    {"dim3", CU},
    {"rsqrtf", CU},
    /* the math library */
    {"exp", C | CU},
    {"expf", C | CU},
    {"log", C | CU},
    {"logf", C | CU},
    {"sqrt", C | CU},
    {"sqrtf", C | CU},
    {"tanh", C | CU},
    {"tanhf", C | CU},
    {"erf", C | CU},
    {"erff", C | CU},
    {"fabs", C | CU},
    {"fabsf", C | CU},
    {"floor", C | CU},
    {"floorf", C | CU},
    {"ceil", C | CU},
    {"ceilf", C | CU},
    {"pow", C | CU},
    {"powf", C | CU},
    {"fmin", C | CU},
    {"fmax", C | CU},
    {"fminf", C | CU},
    {"fmaxf", C | CU},
    {"fma", C | CU},
    {"fmaf", C | CU},
    {"sin", C | CU},
    {"sinf", C | CU},
    {"cos", C | CU},
    {"cosf", C | CU},
    {"tan", C | CU},
    {"tanf", C | CU},
    {"asin", C | CU},
    {"asinf", C | CU},
    {"acos", C | CU},
    {"acosf", C | CU},
    {"atan", C | CU},
    {"atanf", C | CU},
    {"atan2", C | CU},
    {"atan2f", C | CU},
    {"sinh", C | CU},
    {"sinhf", C | CU},
    {"cosh", C | CU},
    {"coshf", C | CU},
    {"asinh", C | CU},
    {"asinhf", C | CU},
    {"acosh", C | CU},
    {"acoshf", C | CU},
    {"atanh", C | CU},
    {"atanhf", C | CU},
    {"exp2", C | CU},
    {"exp2f", C | CU},
    {"expm1", C | CU},
    {"expm1f", C | CU},
    {"log2", C | CU},
    {"log2f", C | CU},
    {"log10", C | CU},
    {"log10f", C | CU},
    {"log1p", C | CU},
    {"log1pf", C | CU},
    {"cbrt", C | CU},
    {"cbrtf", C | CU},
    {"hypot", C | CU},
    {"hypotf", C | CU},
    {"round", C | CU},
    {"roundf", C | CU},
    {"trunc", C | CU},
    {"truncf", C | CU},
    {"rint", C | CU},
    {"rintf", C | CU},
    {"lrint", C | CU},
    {"lrintf", C | CU},
    {"llrint", C | CU},
    {"llrintf", C | CU},
    {"lround", C | CU},
    {"lroundf", C | CU},
    {"llround", C | CU},
    {"llroundf", C | CU},
    {"nearbyint", C | CU},
    {"nearbyintf", C | CU},
    {"fmod", C | CU},
    {"fmodf", C | CU},
    {"remainder", C | CU},
    {"remainderf", C | CU},
    {"remquo", C | CU},
    {"remquof", C | CU},
    {"copysign", C | CU},
    {"copysignf", C | CU},
    {"nan", C | CU},
    {"nanf", C | CU},
    {"erfc", C | CU},
    {"erfcf", C | CU},
    {"tgamma", C | CU},
    {"tgammaf", C | CU},
    {"lgamma", C | CU},
    {"lgammaf", C | CU},
    {"ldexp", C | CU},
    {"ldexpf", C | CU},
    {"frexp", C | CU},
    {"frexpf", C | CU},
    {"modf", C | CU},
    {"modff", C | CU},
    {"scalbn", C | CU},
    {"scalbnf", C | CU},
    {"ilogb", C | CU},
    {"ilogbf", C | CU},
    {"logb", C | CU},
    {"logbf", C | CU},
    {"fdim", C | CU},
    {"fdimf", C | CU},
    {"nextafter", C | CU},
    {"nextafterf", C | CU},
    /* classification macros, and the C library the generated code also includes */
    {"isnan", C | CU},
    {"isinf", C | CU},
    {"isfinite", C | CU},
    {"signbit", C | CU},
    {"abs", C | CU},
    {"labs", C | CU},
    {"malloc", C | CU},
    {"calloc", C | CU},
    {"realloc", C | CU},
    {"free", C | CU},
    {"memcpy", C | CU},
    {"memset", C | CU},
    {"memmove", C | CU},
    {"abort", C | CU},
    {"exit", C | CU},
    {"printf", C | CU},
    {"main", C | CU},
};

bool te__emit_reserved(const char *z, unsigned langs)
{
    if (strncmp(z, "te_", 3) == 0 || strncmp(z, "__", 2) == 0 ||
        (z[0] == '_' && z[1] >= 'A' && z[1] <= 'Z'))
        return true;
    for (size_t i = 0; i < sizeof reserved_words / sizeof reserved_words[0]; i++)
        if ((reserved_words[i].langs & langs) && strcmp(z, reserved_words[i].word) == 0)
            return true;
    return false;
}

char *te__emit_kernel_ident(const char *name, unsigned langs, char *buf, size_t n)
{
    te__c_ident(name, buf, n);
    if (te__emit_reserved(buf, langs)) {
        size_t l = strlen(buf);
        snprintf(buf + l, n > l ? n - l : 0, "_kernel");
    }
    return buf;
}

void te__emit_float(te__sb *b, te_dtype d, double v, const te__nonfinite *nf)
{
    d = te_dtype_compute(d); /* f16/bf16 values are f32 values between stores */
    if (isnan(v)) {
        te__sb_puts(b, nf->nan);
        return;
    }
    if (isinf(v)) {
        te__sb_puts(b, v < 0 ? nf->neg_inf : nf->inf);
        return;
    }
    char z[64];
    if (v == floor(v) && fabs(v) < 1e15) { /* integral: 10.0f, not 1e+01f */
        snprintf(z, sizeof z, "%.1f", v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(z, sizeof z, "%.*g", p, v);
            if (d == TE_F32 ? strtof(z, NULL) == (float)v : strtod(z, NULL) == v)
                break;
        }
        if (!strpbrk(z, ".en"))
            strcat(z, ".0");
    }
    te__sb_puts(b, z);
    if (d == TE_F32)
        te__sb_puts(b, "f");
}

void te__emit_indent(te__sb *b, int indent)
{
    for (int i = 0; i < indent; i++)
        te__sb_puts(b, "    ");
}

void te__emit_vline(te__sb *b, int indent, const char *fmt, va_list ap)
{
    char tmp[1024];
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(tmp, sizeof tmp, fmt, aq);
    va_end(aq);
    te__emit_indent(b, indent);
    if (n >= (int)sizeof tmp) { /* a long line: format it again into the heap */
        char *p = malloc((size_t)n + 1);
        if (!p) {
            b->oom = true;
            return;
        }
        vsnprintf(p, (size_t)n + 1, fmt, ap);
        te__sb_puts(b, p);
        free(p);
    } else if (n > 0) {
        te__sb_puts(b, tmp);
    }
    te__sb_puts(b, "\n");
}

void te__emit_line(te__sb *b, int indent, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vline(b, indent, fmt, ap);
    va_end(ap);
}

void te__emit_comment_line(te__sb *b, int indent, const char *text)
{
    te__emit_indent(b, indent);
    te__sb_puts(b, "// ");
    for (const char *p = text ? text : ""; *p; p++)
        te__sb_putn(b, *p == '\n' ? " " : p, 1);
    te__sb_puts(b, "\n");
}

int te__emit_vfail(te_ctx *ctx, int *err, const char *who, const char *fname, int code,
                   const char *fmt, va_list ap)
{
    if (*err)
        return *err;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    *err = code;
    te_ctx_set_error(ctx, code, "%s '%s': %s", who, fname ? fname : "?", msg);
    return code;
}

void te__emit_provenance(te__sb *b, const char *ident, const char *backend, int n,
                         const char *const *headers, const te_target *target)
{
    char key[512] = "";
    if (target)
        te_target_key(target, key, sizeof key);
    te__sb_printf(b, "/*\n * %s: generated by Tessera %s (%s backend).\n *\n", ident ? ident : "?",
                  te_version(), backend);
    for (int i = 0; i < n; i++)
        if (headers[i] && *headers[i]) {
            te__sb_comment(b, headers[i]);
            te__sb_puts(b, " *\n");
        }
    te__sb_printf(b, " * target: %s\n */\n", target ? key : "(none given)");
}

const char *te__emit_binop(te_binop op, bool vec, int *prec)
{
    switch (op) {
    case TE_ADD:
        *prec = P_ADD;
        return "+";
    case TE_SUB:
        *prec = P_ADD;
        return "-";
    case TE_MUL:
        *prec = P_MUL;
        return "*";
    case TE_DIV:
    case TE_FLOORDIV:
        *prec = P_MUL;
        return "/";
    case TE_MOD:
    case TE_FLOORMOD:
        *prec = P_MUL;
        return "%";
    case TE_EQ:
        *prec = P_EQ;
        return "==";
    case TE_NE:
        *prec = P_EQ;
        return "!=";
    case TE_LT:
        *prec = P_REL;
        return "<";
    case TE_LE:
        *prec = P_REL;
        return "<=";
    case TE_GT:
        *prec = P_REL;
        return ">";
    case TE_GE:
        *prec = P_REL;
        return ">=";
    case TE_AND:
        *prec = vec ? P_BAND : P_LAND;
        return vec ? "&" : "&&";
    case TE_OR:
        *prec = vec ? P_BOR : P_LOR;
        return vec ? "|" : "||";
    default:
        *prec = P_PRIMARY;
        return NULL;
    }
}

const char *te__names_find(const te__name_table *t, int kind, bool by_id, int id, const void *ptr)
{
    for (int i = 0; i < t->n; i++) {
        const te__name_ent *e = &t->v[i];
        if (e->kind == kind && (by_id ? e->id == id : e->ptr == ptr))
            return e->name;
    }
    return NULL;
}

int te__names_add(te_ctx *ctx, te__name_table *t, int kind, int id, const void *ptr,
                  const char *name)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        te__name_ent *v = te__alloc(ctx, sizeof *v * (size_t)cap);
        if (!v)
            return TE_ERR_NOMEM;
        if (t->n)
            memcpy(v, t->v, sizeof *v * (size_t)t->n);
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = (te__name_ent){kind, id, ptr, name};
    return TE_OK;
}

const char *te__emit_libm_name(te_intrin fn, te_dtype d)
{
    static const char *const f64[TE_INTRIN_COUNT] = {
        "exp", "log", "sqrt", NULL, "tanh", "erf", NULL, "fabs", "floor", "ceil", "pow", "rint"};
    static const char *const f32[TE_INTRIN_COUNT] = {"expf",   "logf",  "sqrtf", NULL,
                                                     "tanhf",  "erff",  NULL,    "fabsf",
                                                     "floorf", "ceilf", "powf",  "rintf"};
    if ((int)fn < 0 || fn >= TE_INTRIN_COUNT)
        return NULL;
    return te_dtype_compute(d) == TE_F32 ? f32[fn] : f64[fn];
}

int te__emit_push_loop_range(te_ctx *ctx, te__range_map *r, const te_expr *var, const te_expr *min,
                             const te_expr *extent)
{
    int64_t lo, mhi, ehi, hi = INT64_MAX;
    if (!te__arith_nonneg(min, r) || !te__expr_const_bounds(min, r, &lo, NULL))
        return TE_OK;
    if (te__expr_const_bounds(min, r, NULL, &mhi) && te__expr_const_bounds(extent, r, NULL, &ehi)) {
        if (ehi < 1)
            hi = lo; /* the loop runs no iteration */
        else if (__builtin_add_overflow(mhi, ehi - 1, &hi))
            hi = INT64_MAX;
    }
    return te__ranges_push(ctx, r, var, lo, hi);
}

int te__emit_push_let_range(te_ctx *ctx, te__range_map *r, const te_expr *var, const te_expr *value)
{
    int64_t lo, hi;
    if (!te__arith_nonneg(value, r) || !te__expr_const_bounds(value, r, &lo, NULL))
        return TE_OK;
    if (!te__expr_const_bounds(value, r, NULL, &hi))
        hi = INT64_MAX;
    return te__ranges_push(ctx, r, var, lo, hi);
}

void te__emit_ranges_restore(te__range_map *r, int n)
{
    while (r->n > n)
        te__ranges_pop(r);
}

int64_t te__intrin_stride(const te_stmt *s, int o, int f)
{
    const te_buf *b = s->u.intrin.addr[o]->u.load.buf;
    int64_t stride = s->u.intrin.smul[o * TE_MAX_DIMS + f];
    for (int d = s->u.intrin.sdim[o * TE_MAX_DIMS + f] + 1; d < b->ndim; d++)
        stride *= b->shape[d];
    return stride;
}

int te__intrin_record(const struct te_tensor_intrin **v, int *n, int cap,
                      const struct te_tensor_intrin *in)
{
    for (int i = 0; i < *n; i++)
        if (v[i] == in)
            return TE_OK;
    if (*n == cap)
        return TE_ERR_UNSUPPORTED;
    v[(*n)++] = in;
    return TE_OK;
}
