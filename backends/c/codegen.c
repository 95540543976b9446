/*
 * backends/c/codegen.c: a lowered function -> readable C11 (GNU C vector extensions, OpenMP).
 *
 * The emitted file has, in order:
 *   1. a comment header: the lowered function's provenance (operator, shapes, schedule trace)
 *      and the target key;
 *   2. a prelude: includes, then typedefs and inline helpers for exactly the vector types and
 *      operations the kernel uses (te_f32x16 and its unaligned twin te_f32x16u, te_load_*,
 *      te_store_*, te_blend_*, te_exp_*, ...);
 *   3. the kernel `int <name>(const float *restrict A, ..., float *restrict C)`, returning 0, or
 *      -1 when a heap allocation failed;
 *   4. the packed entry `int <name>_packed(void **args)`.
 *
 * Conventions of the generated code:
 *   - names: buffers and variables keep their IR names; a name that collides with another in
 *     the function, a C keyword, a libc/libm name or the prelude's te_ namespace gets "_<id>";
 *   - index arithmetic is int64_t; floordiv/floormod use te_floordiv_i64/te_floormod_i64
 *     unless the dividend is provably non-negative (loop variables of loops starting at >= 0)
 *     and the divisor a positive constant, where plain / and % are exact;
 *   - a vector of bools is an int32 mask vector (te_i32xL, -1 true, 0 false), whatever the
 *     width of the values compared;
 *   - register promotion: a LOCAL buffer of at most PROMOTE_MAX elements whose every access has
 *     a constant index, or is a stride-1 ramp of one lane count L at a constant base that is a
 *     multiple of L, becomes variables: <buf>_v<k> for chunk k of L elements (te_f32xL) and
 *     <buf>_s<i> for a scalar element outside vector chunks; a scalar access inside a vector
 *     chunk reads or writes a lane (<buf>_v0[5]). This keeps micro-kernel accumulators in
 *     registers;
 *   - streaming stores (store.nontemporal) of 16/32/64-byte vectors at an index provably a
 *     multiple of the lane count into an argument buffer use the ISA's streaming store
 *     (_mm512_stream_ps, ...; gcc has no __builtin_nontemporal_store) when the buffer is 64-byte
 *     aligned, which is tested once at entry (<buf>_nt), and ordinary stores otherwise; an
 *     sfence ends every parallel iteration and the kernel that used them.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/c_backend.h"
#include "schedule/passes.h"
#include "te/internal.h"

/* LOCAL buffers above this many bytes go on the heap instead of the stack. */
#define STACK_MAX_BYTES 65536

/* ---- String buffer ------------------------------------------------------------------------ */

/* Copies template text, replacing "$L" by the lane count. */
static void sb_template(te__sb *b, const char *t, int lanes)
{
    char l[16];
    snprintf(l, sizeof l, "%d", lanes);
    for (const char *p = t; *p;) {
        const char *d = strstr(p, "$L");
        if (!d) {
            te__sb_puts(b, p);
            break;
        }
        te__sb_putn(b, p, (size_t)(d - p));
        te__sb_puts(b, l);
        p = d + 2;
    }
}

/* ---- Names -------------------------------------------------------------------------------- */

static const char *const reserved_words[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "_Bool", "_Complex", "_Imaginary",
    "_Alignas", "_Alignof", "_Atomic", "_Generic", "_Noreturn", "_Static_assert",
    "_Thread_local", "asm", "typeof", "bool", "true", "false", "NULL", "main", "args",
    "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "uintptr_t", "size_t",
    "malloc", "free", "aligned_alloc", "memset", "memcpy", "abs", "labs", "errno", "INFINITY",
    "NAN", "exp", "expf", "log", "logf", "sqrt", "sqrtf", "tanh", "tanhf", "erf", "erff",
    "fabs", "fabsf", "floor", "floorf", "ceil", "ceilf", "pow", "powf", "fmin", "fmax",
    "fminf", "fmaxf", "isnan", "isinf", "omp_get_thread_num", "omp_get_num_threads", NULL};

static bool is_reserved(const char *z)
{
    if (strncmp(z, "te_", 3) == 0 || strncmp(z, "__", 2) == 0 ||
        (z[0] == '_' && z[1] >= 'A' && z[1] <= 'Z'))
        return true;
    for (int i = 0; reserved_words[i]; i++)
        if (strcmp(z, reserved_words[i]) == 0)
            return true;
    return false;
}


char *te__c_kernel_ident(const char *name, char *buf, size_t n)
{
    te__c_ident(name, buf, n);
    if (is_reserved(buf)) {
        size_t l = strlen(buf);
        snprintf(buf + l, n > l ? n - l : 0, "_kernel");
    }
    return buf;
}

/* ---- Helper registry ---------------------------------------------------------------------- */

/* Helpers in emission order: a helper may only use helpers listed before it. */
typedef enum helper {
    H_SPLAT, H_BLEND, H_MIN, H_MAX, H_FLOORDIV, H_FLOORMOD, H_LOAD, H_STORE, H_STREAM,
    H_GATHER, H_GATHER_IDX, H_SCATTER, H_SCATTER_IDX, H_FABS, H_FLOOR, H_CEIL, H_SQRT, H_EXP,
    H_LOG, H_TANH, H_SIGMOID, H_ERF, H_POW, H_SFENCE, H_COUNT
} helper;

#define NLANES 7 /* lane counts 1, 2, 4, ..., 64 */

static int lane_slot(int lanes)
{
    int s = 0;
    while ((1 << s) < lanes)
        s++;
    return s;
}

/* A buffer the promote_registers pass put in registers, and its variables' name stems. */
typedef struct promo {
    const te_buf *buf;
    const te__promotion *pr; /* the pass's decision (te/internal.h) */
    const char *vname;       /* "<buf>_v" */
    const char *sname;       /* "<buf>_s" */
} promo;

typedef struct name_ent {
    int kind; /* 0 variable (by id), 1 buffer, 2/3 its promoted vector/scalar prefix (by
               * pointer) */
    int id;
    const void *ptr;
    const char *name;
} name_ent;

typedef struct emitter {
    te_ctx *ctx;
    const te_lowered *f;
    const te_target *target;
    te__sb out;
    int indent;
    int err; /* first error status */

    name_ent *names;
    int nnames, capnames;
    const char **used; /* every C name taken in the function */
    int nused, capused;

    /* vector types used: bit lane_slot(lanes) per dtype; the unaligned twins separately */
    unsigned vtypes[TE_DTYPE_COUNT], vtypes_u[TE_DTYPE_COUNT];
    /* helpers used: bit lane_slot(lanes) per dtype (slot 0: the scalar helper) */
    unsigned helpers[H_COUNT][TE_DTYPE_COUNT];
    bool need_immintrin;

    promo *promos;
    int npromos, cappromos;

    int nonneg[512]; /* ids of variables known to be >= 0 */
    int nnonneg;

    /* declarations of the current C block and its parents, for re-declaration checks */
    int decl[1024];
    int ndecl;
    int block_start[256];
    int nblocks;

    /* heap allocations live at this point (names), for freeing on an early return */
    const char *heap[64];
    int nheap;
    int par_depth;
    bool uses_oom;
    bool uses_omp;    /* TE_OMP(...) pragmas */
    bool uses_unroll; /* TE_UNROLL(n) pragmas */
    bool uses_heap;   /* te_alloc64 / te_free64 */

    /* buffers used with streaming stores (argument buffers), and how many such stores */
    const te_buf *nt_bufs[64];
    const char *nt_flag[64];
    int n_nt;
    int nt_stores;
} emitter;

static void fail(emitter *em, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(emitter *em, int code, const char *fmt, ...)
{
    if (em->err)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    em->err = code;
    te_ctx_set_error(em->ctx, code, "te_emit_c '%s': %s", em->f->name ? em->f->name : "?",
                     msg);
}

static bool name_used(const emitter *em, const char *z)
{
    for (int i = 0; i < em->nused; i++)
        if (strcmp(em->used[i], z) == 0)
            return true;
    return false;
}

static const char *take_name(emitter *em, const char *z)
{
    const char *p = te__strdup(em->ctx, z);
    if (!p) {
        fail(em, TE_ERR_NOMEM, "out of memory");
        return "oom";
    }
    if (em->nused == em->capused) {
        int cap = em->capused ? em->capused * 2 : 64;
        const char **v = te__alloc(em->ctx, sizeof(char *) * (size_t)cap);
        if (!v) {
            fail(em, TE_ERR_NOMEM, "out of memory");
            return p;
        }
        if (em->nused)
            memcpy(v, em->used, sizeof(char *) * (size_t)em->nused);
        em->used = v;
        em->capused = cap;
    }
    em->used[em->nused++] = p;
    return p;
}

/* A fresh C name based on `base` (made valid and unique with "_<id>" or a counter). */
static const char *unique_name(emitter *em, const char *base, int id)
{
    char z[160], cand[224];
    te__c_ident(base, z, sizeof z);
    if (!is_reserved(z) && !name_used(em, z))
        return take_name(em, z);
    if (is_reserved(z) && strncmp(z, "te_", 3) == 0) {
        /* the te_ namespace belongs to the prelude: move out of it */
        snprintf(cand, sizeof cand, "v_%s", z);
        if (!name_used(em, cand))
            return take_name(em, cand);
        memmove(z + 2, z, sizeof z - 3);
        z[0] = 'v', z[1] = '_', z[sizeof z - 1] = 0;
    }
    snprintf(cand, sizeof cand, "%s_%d", z, id);
    for (int k = 2; name_used(em, cand) || is_reserved(cand); k++)
        snprintf(cand, sizeof cand, "%s_%d_%d", z, id, k);
    return take_name(em, cand);
}

static const char *lookup_name(emitter *em, int kind, int id, const void *ptr, const char *base)
{
    for (int i = 0; i < em->nnames; i++) {
        name_ent *e = &em->names[i];
        if (e->kind == kind && (kind == 0 ? e->id == id : e->ptr == ptr))
            return e->name;
    }
    if (em->nnames == em->capnames) {
        int cap = em->capnames ? em->capnames * 2 : 64;
        name_ent *v = te__alloc(em->ctx, sizeof *v * (size_t)cap);
        if (!v) {
            fail(em, TE_ERR_NOMEM, "out of memory");
            return "oom";
        }
        if (em->nnames)
            memcpy(v, em->names, sizeof *v * (size_t)em->nnames);
        em->names = v;
        em->capnames = cap;
    }
    name_ent *e = &em->names[em->nnames++];
    e->kind = kind;
    e->id = id;
    e->ptr = ptr;
    e->name = unique_name(em, base, id);
    return e->name;
}

static const char *var_name(emitter *em, const te_expr *v)
{
    return lookup_name(em, 0, v->u.var.id, NULL, v->u.var.name);
}

static const char *buf_name(emitter *em, const te_buf *b)
{
    return lookup_name(em, 1, b->id, b, b->name);
}

/* ---- Types -------------------------------------------------------------------------------- */

static const char *dt_short(te_dtype d)
{
    switch (d) {
    case TE_BOOL:
        return "i32"; /* masks */
    case TE_I8:
        return "i8";
    case TE_U8:
        return "u8";
    case TE_I32:
        return "i32";
    case TE_I64:
        return "i64";
    case TE_F32:
        return "f32";
    case TE_F64:
        return "f64";
    default:
        return "?";
    }
}

/* Element dtype of the vector type a value of dtype d is held in (bools are i32 masks). */
static te_dtype vec_elem(te_dtype d) { return d == TE_BOOL ? TE_I32 : d; }

/* Integer dtype of the same width (mask and bit-pattern type). */
static te_dtype int_of(te_dtype d)
{
    switch (d) {
    case TE_F32:
    case TE_BOOL:
    case TE_I32:
        return TE_I32;
    case TE_F64:
    case TE_I64:
        return TE_I64;
    default:
        return TE_I8;
    }
}

static const char *vtype(emitter *em, te_dtype d, int lanes)
{
    te_dtype e = vec_elem(d);
    em->vtypes[e] |= 1u << lane_slot(lanes);
    return te__sprintf(em->ctx, "te_%sx%d", dt_short(e), lanes);
}

static const char *ctype(te_dtype d) { return te_dtype_ctype(d); }

/* Type name of a value: scalar C type or vector typedef. */
static const char *type_of(emitter *em, te_dtype d, int lanes)
{
    return lanes > 1 ? vtype(em, d, lanes) : ctype(d);
}

static void use_helper(emitter *em, helper h, te_dtype d, int lanes);

/* Name of a helper for dtype/lanes, marking it used: te_exp_f32x16, te_floordiv_i64. */
static const char *helper_name(emitter *em, helper h, te_dtype d, int lanes)
{
    static const char *const names[H_COUNT] = {
        "splat", "blend", "min", "max", "floordiv", "floormod", "load", "store", "stream",
        "gather", "gather_idx", "scatter", "scatter_idx", "fabs", "floor", "ceil", "sqrt",
        "exp", "log", "tanh", "sigmoid", "erf", "pow", "sfence"};
    use_helper(em, h, d, lanes);
    if (h == H_SFENCE)
        return "te_sfence";
    if (lanes == 1)
        return te__sprintf(em->ctx, "te_%s_%s", names[h], te_dtype_str(d));
    return te__sprintf(em->ctx, "te_%s_%sx%d", names[h], dt_short(vec_elem(d)), lanes);
}

static void use_helper(emitter *em, helper h, te_dtype d, int lanes)
{
    te_dtype e = lanes > 1 ? vec_elem(d) : d;
    unsigned bit = 1u << lane_slot(lanes);
    if (em->helpers[h][e] & bit)
        return;
    em->helpers[h][e] |= bit;
    if (lanes > 1) {
        vtype(em, e, lanes);
        vtype(em, TE_I32, lanes); /* masks */
        vtype(em, int_of(e), lanes);
    }
    bool f32v = e == TE_F32 && lanes > 1;
    switch (h) {
    case H_MIN:
    case H_MAX:
        if (lanes > 1) {
            use_helper(em, H_BLEND, e, lanes);
            if (te_dtype_is_float(e))
                em->need_immintrin = true;
        }
        break;
    case H_LOAD:
    case H_STORE:
        em->vtypes_u[e] |= bit;
        break;
    case H_STREAM:
        em->vtypes_u[e] |= bit;
        em->need_immintrin = true;
        break;
    case H_GATHER_IDX:
    case H_SCATTER_IDX:
        vtype(em, TE_I64, lanes);
        break;
    case H_FLOOR:
    case H_CEIL:
        if (f32v) {
            use_helper(em, H_SPLAT, e, lanes);
            use_helper(em, H_BLEND, e, lanes);
        }
        break;
    case H_SQRT:
        if (lanes > 1)
            em->need_immintrin = true;
        break;
    case H_EXP:
        if (f32v) {
            use_helper(em, H_SPLAT, e, lanes);
            use_helper(em, H_MIN, e, lanes);
            use_helper(em, H_MAX, e, lanes);
            if (lanes == 16)
                em->need_immintrin = true;
        }
        break;
    case H_LOG:
        if (f32v) {
            use_helper(em, H_SPLAT, e, lanes);
            use_helper(em, H_BLEND, e, lanes);
        }
        break;
    case H_TANH:
    case H_SIGMOID:
    case H_ERF:
        if (f32v) {
            use_helper(em, H_EXP, e, lanes);
            use_helper(em, H_BLEND, e, lanes);
        }
        break;
    default:
        break;
    }
}

/* ---- Helper text -------------------------------------------------------------------------- */

/* exp: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), exp(r) by a degree-7
 * polynomial, then 2^n applied in two steps so that subnormal results and overflow to infinity
 * come out right. Max relative error about 1 ulp. Three parts: the head, the portable body, and
 * for 16 lanes an AVX-512 body (rounding and vscalef do in one instruction each what the
 * portable body does in several) chosen when the compiler targets AVX-512. */
static const char math_exp_f32_head[] =
    "/* exp: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), exp(r) by a degree-7\n"
    " * polynomial, then 2^n applied so that subnormal results and overflow to infinity come\n"
    " * out right. Max relative error about 1 ulp. */\n"
    "static inline te_f32x$L te_exp_f32x$L(te_f32x$L x)\n"
    "{\n";
static const char math_exp_f32_body[] =
    "    x = te_min_f32x$L(te_max_f32x$L(x, te_splat_f32x$L(-104.0f)), te_splat_f32x$L(89.0f));\n"
    "    te_f32x$L t = x * 1.44269504088896341f + 0.5f;\n"
    "    te_i32x$L n = __builtin_convertvector(t, te_i32x$L);\n"
    "    n += __builtin_convertvector(n, te_f32x$L) > t; /* truncation to floor: -1 where needed */\n"
    "    te_f32x$L nf = __builtin_convertvector(n, te_f32x$L);\n"
    "    te_f32x$L r = x - nf * 0.693359375f;\n"
    "    r = r - nf * -2.12194440e-4f;\n"
    "    te_f32x$L p = 1.9875691500e-4f * r + 1.3981999507e-3f;\n"
    "    p = p * r + 8.3334519073e-3f;\n"
    "    p = p * r + 4.1665795894e-2f;\n"
    "    p = p * r + 1.6666665459e-1f;\n"
    "    p = p * r + 5.0000001201e-1f;\n"
    "    te_f32x$L y = p * (r * r) + r + 1.0f;\n"
    "    te_i32x$L n1 = n >> 1, n2 = n - n1;\n"
    "    y *= (te_f32x$L)((n1 + 127) << 23);\n"
    "    return y * (te_f32x$L)((n2 + 127) << 23);\n";
static const char math_exp_f32_avx512[] =
    "    __m512 v = _mm512_min_ps(_mm512_max_ps((__m512)x, _mm512_set1_ps(-104.0f)),\n"
    "                             _mm512_set1_ps(89.0f));\n"
    "    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),\n"
    "                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);\n"
    "    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);\n"
    "    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));\n"
    "    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));\n"
    "    return (te_f32x16)_mm512_scalef_ps(y, n); /* y 2^n, exact for subnormals and overflow */\n";
static const char math_log_f32[] =
    "/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1\n"
    " * (degree-8 P), plus e ln2 in two parts. Subnormal inputs are scaled first. */\n"
    "static inline te_f32x$L te_log_f32x$L(te_f32x$L x)\n"
    "{\n"
    "    te_i32x$L tiny = x < 1.17549435e-38f;\n"
    "    te_f32x$L xs = te_blend_f32x$L(tiny, x * 8388608.0f, x);\n"
    "    te_i32x$L bits = (te_i32x$L)xs;\n"
    "    te_i32x$L e = ((bits >> 23) & 0xff) - 126 + (tiny & -23);\n"
    "    te_f32x$L m = (te_f32x$L)((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */\n"
    "    te_i32x$L lo = m < 0.707106781186547524f;\n"
    "    e += lo; /* -1 where m < sqrt(1/2) */\n"
    "    te_f32x$L f = te_blend_f32x$L(lo, m + m, m) - 1.0f;\n"
    "    te_f32x$L ef = __builtin_convertvector(e, te_f32x$L);\n"
    "    te_f32x$L z = f * f;\n"
    "    te_f32x$L p = 7.0376836292e-2f * f - 1.1514610310e-1f;\n"
    "    p = p * f + 1.1676998740e-1f;\n"
    "    p = p * f - 1.2420140846e-1f;\n"
    "    p = p * f + 1.4249322787e-1f;\n"
    "    p = p * f - 1.6668057665e-1f;\n"
    "    p = p * f + 2.0000714765e-1f;\n"
    "    p = p * f - 2.4999993993e-1f;\n"
    "    p = p * f + 3.3333331174e-1f;\n"
    "    te_f32x$L y = p * f * z + ef * -2.12194440e-4f - 0.5f * z;\n"
    "    y = f + y + ef * 0.693359375f;\n"
    "    y = te_blend_f32x$L(x == 0.0f, te_splat_f32x$L(-INFINITY), y);\n"
    "    y = te_blend_f32x$L(x < 0.0f, te_splat_f32x$L(NAN), y);\n"
    "    return te_blend_f32x$L(x == INFINITY, x, y);\n"
    "}\n";
static const char math_tanh_f32[] =
    "/* tanh: odd polynomial for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1), sign restored. */\n"
    "static inline te_f32x$L te_tanh_f32x$L(te_f32x$L x)\n"
    "{\n"
    "    te_i32x$L sign = (te_i32x$L)x & (int32_t)0x80000000;\n"
    "    te_f32x$L a = (te_f32x$L)((te_i32x$L)x & 0x7fffffff);\n"
    "    te_f32x$L s = x * x;\n"
    "    te_f32x$L p = -5.70498872745e-3f * s + 2.06390887954e-2f;\n"
    "    p = p * s - 5.37397155531e-2f;\n"
    "    p = p * s + 1.33314422036e-1f;\n"
    "    p = p * s - 3.33332819422e-1f;\n"
    "    te_f32x$L small = p * s * x + x;\n"
    "    te_f32x$L e = te_exp_f32x$L(te_min_f32x$L(a + a, te_splat_f32x$L(40.0f)));\n"
    "    te_f32x$L big = (te_f32x$L)((te_i32x$L)(1.0f - 2.0f / (e + 1.0f)) | sign);\n"
    "    return te_blend_f32x$L(a < 0.625f, small, big);\n"
    "}\n";
static const char math_sigmoid_f32[] =
    "/* sigmoid: 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) for x < 0, one division,\n"
    " * so that neither side loses accuracy to cancellation or underflow. */\n"
    "static inline te_f32x$L te_sigmoid_f32x$L(te_f32x$L x)\n"
    "{\n"
    "    te_i32x$L neg = x < 0.0f;\n"
    "    te_f32x$L e = te_exp_f32x$L(te_blend_f32x$L(neg, x, -x)); /* exp(-|x|) */\n"
    "    return te_blend_f32x$L(neg, e, te_splat_f32x$L(1.0f)) / (1.0f + e);\n"
    "}\n";
static const char math_erf_f32[] =
    "/* erf: x + x P(x^2) for |x| < 1; 1 - exp(-x^2) R(1/|x|) for 1 <= |x| < 4, sign restored;\n"
    " * +-1 beyond. P (degree 6) and R (degree 9, in 1/|x| - 0.625) are Chebyshev fits. */\n"
    "static inline te_f32x$L te_erf_f32x$L(te_f32x$L x)\n"
    "{\n"
    "    te_i32x$L sign = (te_i32x$L)x & (int32_t)0x80000000;\n"
    "    te_f32x$L a = te_min_f32x$L((te_f32x$L)((te_i32x$L)x & 0x7fffffff), te_splat_f32x$L(4.0f));\n"
    "    te_f32x$L u = x * x;\n"
    "    te_f32x$L p = 7.875875062685488e-05f * u - 8.01686428716587e-04f;\n"
    "    p = p * u + 5.189087423433974e-03f;\n"
    "    p = p * u - 2.6854212010626412e-02f;\n"
    "    p = p * u + 1.1283594715160218e-01f;\n"
    "    p = p * u - 3.7612626666720334e-01f;\n"
    "    p = p * u + 1.2837916584835093e-01f;\n"
    "    te_f32x$L small = x + x * p;\n"
    "    te_f32x$L s = 1.0f / a - 0.625f;\n"
    "    te_f32x$L r = 2.503254318653564e-02f * s - 7.090389200874667e-03f;\n"
    "    r = r * s - 2.6610224160197794e-02f;\n"
    "    r = r * s + 4.466035463530791e-02f;\n"
    "    r = r * s - 4.6975775462040355e-02f;\n"
    "    r = r * s + 2.3258428922195633e-02f;\n"
    "    r = r * s + 4.376821965127413e-02f;\n"
    "    r = r * s - 1.723935043927423e-01f;\n"
    "    r = r * s + 3.822837581694632e-01f;\n"
    "    r = r * s + 3.059529887942309e-01f;\n"
    "    te_f32x$L big = 1.0f - te_exp_f32x$L(-(a * a)) * r;\n"
    "    big = (te_f32x$L)((te_i32x$L)big | sign);\n"
    "    return te_blend_f32x$L(a < 1.0f, small, big);\n"
    "}\n";

/* floor and ceil of f32 vectors: truncate through int32 where |x| < 2^23 (larger values are
 * integers, infinities or NaN already), step by one where truncation went the wrong way, and
 * keep the sign of x so that zeros keep theirs. */
static const char math_floor_f32[] =
    "static inline te_f32x$L te_$F_f32x$L(te_f32x$L x)\n"
    "{\n"
    "    te_i32x$L bits = (te_i32x$L)x, sign = bits & (int32_t)0x80000000;\n"
    "    te_i32x$L small = (te_f32x$L)(bits & 0x7fffffff) < 8388608.0f;\n"
    "    te_f32x$L xs = (te_f32x$L)(small & bits);\n"
    "    te_f32x$L t = __builtin_convertvector(__builtin_convertvector(xs, te_i32x$L), "
    "te_f32x$L);\n"
    "    t $O= (te_f32x$L)((t $C xs) & 0x3f800000); /* 1.0f where truncation went the wrong "
    "way */\n"
    "    return te_blend_f32x$L(small, (te_f32x$L)((te_i32x$L)t | sign), x);\n"
    "}\n";

static const char *libm_name(te_intrin fn, te_dtype d)
{
    static const char *const n[] = {"exp", "log", "sqrt", "sqrt", "tanh", "erf", "exp",
                                    "fabs", "floor", "ceil", "pow"};
    static const char *const nf[] = {"expf", "logf", "sqrtf", "sqrtf", "tanhf", "erff", "expf",
                                     "fabsf", "floorf", "ceilf", "powf"};
    return d == TE_F32 ? nf[fn] : n[fn];
}

/* Writes the intrinsic applied to lane l as C text for lane-loop helpers. */
static void lane_loop(te__sb *b, const char *v, int lanes, const char *proto, const char *stmt)
{
    te__sb_printf(b, "static inline %s\n{\n    %s r = {0};\n    for (int l = 0; l < %d; ++l)\n        %s;\n"
                 "    return r;\n}\n",
              proto, v, lanes, stmt);
}

static void emit_helper(emitter *em, te__sb *b, helper h, te_dtype d, int lanes)
{
    const char *S = ctype(d);
    char V[32], I[32], M[32], Vu[40], tmp[512], proto[256];
    snprintf(V, sizeof V, "te_%sx%d", dt_short(d), lanes);
    snprintf(I, sizeof I, "te_%sx%d", dt_short(int_of(d)), lanes);
    snprintf(M, sizeof M, "te_i32x%d", lanes);
    snprintf(Vu, sizeof Vu, "%su", V);
    const char *dn = te_dtype_str(d);
    bool f = te_dtype_is_float(d);
    const char *one = d == TE_F32 ? "1.0f" : "1.0";
    (void)em;

    if (lanes == 1) {
        switch (h) {
        case H_MIN:
        case H_MAX:
            te__sb_printf(b, "static inline %s te_%s_%s(%s a, %s b) { return a %s b ? a : b; }\n", S,
                      h == H_MIN ? "min" : "max", dn, S, S, h == H_MIN ? "<" : ">");
            break;
        case H_FLOORDIV:
            te__sb_printf(b, "static inline %s te_floordiv_%s(%s a, %s b)\n{\n"
                         "    %s q = a / b, r = a %% b;\n"
                         "    return q - (r != 0 && (r < 0) != (b < 0));\n}\n",
                      S, dn, S, S, S);
            break;
        case H_FLOORMOD:
            te__sb_printf(b, "static inline %s te_floormod_%s(%s a, %s b)\n{\n"
                         "    %s r = a %% b;\n"
                         "    return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n}\n",
                      S, dn, S, S, S);
            break;
        case H_SIGMOID:
            te__sb_printf(b, "static inline %s te_sigmoid_%s(%s x)\n{\n"
                         "    %s e = %s(-%s(x)); /* exp(-|x|): no overflow, no cancellation */\n"
                         "    return (x < 0 ? e : %s) / (%s + e);\n}\n",
                      S, dn, S, S, libm_name(TE_EXP, d), libm_name(TE_FABS, d), one, one);
            break;
        case H_SFENCE:
            te__sb_puts(b, "/* Orders streaming (non-temporal) stores before later stores. */\n"
                       "static inline void te_sfence(void)\n{\n"
                       "#if defined(__x86_64__) || defined(__i386__)\n"
                       "    __builtin_ia32_sfence();\n#endif\n}\n");
            break;
        default:
            break;
        }
        return;
    }

    /* mask of a comparison of two V values, as the canonical int32 mask type */
    const char *mopen = int_of(d) == TE_I32 ? "" : "__builtin_convertvector(";
    char mclose[48];
    snprintf(mclose, sizeof mclose, "%s%s", int_of(d) == TE_I32 ? "" : ", ",
             int_of(d) == TE_I32 ? "" : M);
    if (int_of(d) != TE_I32)
        strcat(mclose, ")");

    switch (h) {
    case H_SPLAT:
        te__sb_printf(b, "static inline %s te_splat_%s(%s s) { return (%s){0} + s; }\n", V, V + 3, S,
                  V);
        break;
    case H_BLEND:
        if (int_of(d) == TE_I32)
            te__sb_printf(b, "static inline %s te_blend_%s(%s m, %s a, %s b)\n{\n"
                         "    return (%s)((m & (%s)a) | (~m & (%s)b));\n}\n",
                      V, V + 3, M, V, V, V, I, I);
        else
            te__sb_printf(b, "static inline %s te_blend_%s(%s m, %s a, %s b)\n{\n"
                         "    %s w = __builtin_convertvector(m, %s);\n"
                         "    return (%s)((w & (%s)a) | (~w & (%s)b));\n}\n",
                      V, V + 3, M, V, V, I, I, V, I, I);
        break;
    case H_MIN:
    case H_MAX: {
        /* x86 min/max instructions compute exactly a < b ? a : b (a > b ? a : b) */
        int bytes = lanes * (int)te_dtype_size(d);
        const char *mm = NULL, *guard = NULL, *nat = NULL;
        const char *sfx = d == TE_F32 ? "ps" : "pd";
        if (f && bytes == 64)
            mm = "_mm512_", guard = "__AVX512F__", nat = d == TE_F32 ? "__m512" : "__m512d";
        else if (f && bytes == 32)
            mm = "_mm256_", guard = "__AVX__", nat = d == TE_F32 ? "__m256" : "__m256d";
        else if (f && bytes == 16)
            mm = "_mm_", guard = d == TE_F32 ? "__SSE__" : "__SSE2__",
            nat = d == TE_F32 ? "__m128" : "__m128d";
        const char *nm = h == H_MIN ? "min" : "max";
        te__sb_printf(b, "static inline %s te_%s_%s(%s a, %s b)\n{\n", V, nm, V + 3, V, V);
        if (mm)
            te__sb_printf(b, "#if defined(%s)\n    return (%s)%s%s_%s((%s)a, (%s)b);\n#else\n", guard, V,
                      mm, nm, sfx, nat, nat);
        te__sb_printf(b, "    return te_blend_%s(%sa %s b%s, a, b);\n", V + 3, mopen,
                  h == H_MIN ? "<" : ">", mclose);
        if (mm)
            te__sb_puts(b, "#endif\n");
        te__sb_puts(b, "}\n");
        break;
    }
    case H_FLOORDIV:
        te__sb_printf(b, "static inline %s te_floordiv_%s(%s a, %s b)\n{\n"
                     "    %s q = a / b, r = a %% b;\n"
                     "    return q + ((r != 0) & ((r ^ b) < 0)); /* masks are -1 */\n}\n",
                  V, V + 3, V, V, V);
        break;
    case H_FLOORMOD:
        te__sb_printf(b, "static inline %s te_floormod_%s(%s a, %s b)\n{\n"
                     "    %s r = a %% b;\n"
                     "    return r + (((r != 0) & ((r ^ b) < 0)) & b);\n}\n",
                  V, V + 3, V, V, V);
        break;
    case H_LOAD:
        te__sb_printf(b, "static inline %s te_load_%s(const %s *p) { return *(const %s *)p; }\n", V,
                  V + 3, S, Vu);
        break;
    case H_STORE:
        te__sb_printf(b, "static inline void te_store_%s(%s *p, %s v) { *(%s *)p = v; }\n", V + 3, S,
                  V, Vu);
        break;
    case H_STREAM: {
        /* gcc has no __builtin_nontemporal_store: use the ISA's streaming store */
        int bytes = lanes * (int)te_dtype_size(d);
        const char *guard, *fn, *nat;
        if (bytes == 64)
            guard = "__AVX512F__",
            nat = d == TE_F32 ? "__m512" : d == TE_F64 ? "__m512d" : "__m512i",
            fn = d == TE_F32   ? "_mm512_stream_ps"
                 : d == TE_F64 ? "_mm512_stream_pd"
                               : "_mm512_stream_si512";
        else if (bytes == 32)
            guard = "__AVX__",
            nat = d == TE_F32 ? "__m256" : d == TE_F64 ? "__m256d" : "__m256i",
            fn = d == TE_F32   ? "_mm256_stream_ps"
                 : d == TE_F64 ? "_mm256_stream_pd"
                               : "_mm256_stream_si256";
        else
            guard = "__SSE2__",
            nat = d == TE_F32 ? "__m128" : d == TE_F64 ? "__m128d" : "__m128i",
            fn = d == TE_F32 ? "_mm_stream_ps" : d == TE_F64 ? "_mm_stream_pd" : "_mm_stream_si128";
        te__sb_printf(b, "/* Streaming store where p is 64-byte aligned (the flag), else a plain one. */\n"
                     "static inline void te_stream_%s(int aligned, %s *p, %s v)\n{\n"
                     "#if defined(%s)\n"
                     "    if (aligned) {\n        %s((%s *)p, (%s)v);\n        return;\n    }\n"
                     "#else\n"
                     "    (void)aligned;\n"
                     "#endif\n"
                     "    *(%s *)p = v;\n}\n",
                  V + 3, S, V, guard, fn, f ? S : nat, nat, Vu);
        break;
    }
    case H_GATHER:
        snprintf(proto, sizeof proto, "%s te_gather_%s(const %s *p, int64_t stride)", V, V + 3,
                 S);
        lane_loop(b, V, lanes, proto, "r[l] = p[l * stride]");
        break;
    case H_GATHER_IDX:
        snprintf(proto, sizeof proto, "%s te_gather_idx_%s(const %s *p, te_i64x%d idx)", V,
                 V + 3, S, lanes);
        lane_loop(b, V, lanes, proto, "r[l] = p[idx[l]]");
        break;
    case H_SCATTER:
        te__sb_printf(b, "static inline void te_scatter_%s(%s *p, int64_t stride, %s v)\n{\n"
                     "    for (int l = 0; l < %d; ++l)\n        p[l * stride] = v[l];\n}\n",
                  V + 3, S, V, lanes);
        break;
    case H_SCATTER_IDX:
        te__sb_printf(b, "static inline void te_scatter_idx_%s(%s *p, te_i64x%d idx, %s v)\n{\n"
                     "    for (int l = 0; l < %d; ++l)\n        p[idx[l]] = v[l];\n}\n",
                  V + 3, S, lanes, V, lanes);
        break;
    case H_FABS:
        if (f)
            te__sb_printf(b, "static inline %s te_fabs_%s(%s x) { return (%s)((%s)x & %s); }\n", V,
                      V + 3, V, V, I,
                      d == TE_F32 ? "0x7fffffff" : "0x7fffffffffffffffLL");
        break;
    case H_FLOOR:
    case H_CEIL:
        if (d == TE_F32) {
            const char *t = math_floor_f32;
            /* instantiate: $F name, $O operator, $C comparison */
            te__sb x = {0};
            for (const char *p = t; *p; p++) {
                if (p[0] == '$' && p[1] == 'F') {
                    te__sb_puts(&x, h == H_FLOOR ? "floor" : "ceil");
                    p++;
                } else if (p[0] == '$' && p[1] == 'O') {
                    te__sb_puts(&x, h == H_FLOOR ? "-" : "+");
                    p++;
                } else if (p[0] == '$' && p[1] == 'C') {
                    te__sb_puts(&x, h == H_FLOOR ? ">" : "<");
                    p++;
                } else {
                    te__sb_putn(&x, p, 1);
                }
            }
            if (x.oom)
                b->oom = true;
            else
                sb_template(b, x.p, lanes);
            free(x.p);
        } else {
            snprintf(proto, sizeof proto, "%s te_%s_%s(%s x)", V, h == H_FLOOR ? "floor" : "ceil",
                     V + 3, V);
            snprintf(tmp, sizeof tmp, "r[l] = %s(x[l])",
                     libm_name(h == H_FLOOR ? TE_FLOOR : TE_CEIL, d));
            lane_loop(b, V, lanes, proto, tmp);
        }
        break;
    case H_SQRT: {
        /* One instruction where the ISA has it; gcc does not vectorize sqrtf in a lane loop
         * because of errno. */
        const char *guard = NULL, *fn = NULL, *nat = NULL;
        int bytes = lanes * (int)te_dtype_size(d);
        if (bytes == 64)
            guard = "__AVX512F__", fn = d == TE_F32 ? "_mm512_sqrt_ps" : "_mm512_sqrt_pd",
            nat = d == TE_F32 ? "__m512" : "__m512d";
        else if (bytes == 32)
            guard = "__AVX__", fn = d == TE_F32 ? "_mm256_sqrt_ps" : "_mm256_sqrt_pd",
            nat = d == TE_F32 ? "__m256" : "__m256d";
        else if (bytes == 16)
            guard = d == TE_F32 ? "__SSE__" : "__SSE2__",
            fn = d == TE_F32 ? "_mm_sqrt_ps" : "_mm_sqrt_pd", nat = d == TE_F32 ? "__m128" : "__m128d";
        te__sb_printf(b, "static inline %s te_sqrt_%s(%s x)\n{\n", V, V + 3, V);
        if (guard)
            te__sb_printf(b, "#if defined(%s)\n    return (%s)%s((%s)x);\n#else\n", guard, V, fn, nat);
        te__sb_printf(b, "    %s r = {0};\n    for (int l = 0; l < %d; ++l)\n        r[l] = %s(x[l]);\n"
                     "    return r;\n",
                  V, lanes, libm_name(TE_SQRT, d));
        if (guard)
            te__sb_puts(b, "#endif\n");
        te__sb_puts(b, "}\n");
        break;
    }
    case H_EXP:
    case H_LOG:
    case H_TANH:
    case H_SIGMOID:
    case H_ERF:
        if (d == TE_F32 && h == H_EXP) {
            sb_template(b, math_exp_f32_head, lanes);
            if (lanes == 16) {
                te__sb_puts(b, "#if defined(__AVX512F__)\n");
                te__sb_puts(b, math_exp_f32_avx512);
                te__sb_puts(b, "#else\n");
            }
            sb_template(b, math_exp_f32_body, lanes);
            if (lanes == 16)
                te__sb_puts(b, "#endif\n");
            te__sb_puts(b, "}\n");
        } else if (d == TE_F32) {
            const char *t = h == H_LOG  ? math_log_f32
                            : h == H_TANH ? math_tanh_f32
                            : h == H_ERF  ? math_erf_f32
                                          : math_sigmoid_f32;
            sb_template(b, t, lanes);
        } else {
            static const char *const nm[] = {"exp", "log", "tanh", "sigmoid", "erf"};
            const char *n = nm[h - H_EXP];
            snprintf(proto, sizeof proto, "%s te_%s_%s(%s x)", V, n, V + 3, V);
            if (h == H_SIGMOID)
                snprintf(tmp, sizeof tmp, "r[l] = 1.0 / (1.0 + exp(-x[l]))");
            else
                snprintf(tmp, sizeof tmp, "r[l] = %s(x[l])", n);
            lane_loop(b, V, lanes, proto, tmp);
        }
        break;
    case H_POW:
        snprintf(proto, sizeof proto, "%s te_pow_%s(%s x, %s y)", V, V + 3, V, V);
        snprintf(tmp, sizeof tmp, "r[l] = %s(x[l], y[l])", libm_name(TE_POW, d));
        lane_loop(b, V, lanes, proto, tmp);
        break;
    default:
        break;
    }
}

/* ---- Expressions -------------------------------------------------------------------------- */

/* C operator precedence, higher binds tighter. */
enum {
    P_TERNARY = 3, P_LOR = 4, P_LAND = 5, P_BOR = 6, P_BAND = 8, P_EQ = 9, P_REL = 10,
    P_ADD = 12, P_MUL = 13, P_UNARY = 14, P_POSTFIX = 15, P_PRIMARY = 16
};

static bool is_nonneg_var(const emitter *em, const te_expr *v)
{
    for (int i = 0; i < em->nnonneg; i++)
        if (em->nonneg[i] == v->u.var.id)
            return true;
    return false;
}

/* Whether an integer expression is provably >= 0 (lane-wise for vectors). */
static bool nonneg(const emitter *em, const te_expr *e)
{
    int64_t c;
    if (te__const_int_eval(e, &c))
        return c >= 0;
    switch (e->kind) {
    case TE_E_VAR:
        return is_nonneg_var(em, e);
    case TE_E_BCAST:
        return nonneg(em, e->u.un.a);
    case TE_E_RAMP:
        return e->u.ramp.stride >= 0 && nonneg(em, e->u.ramp.base);
    case TE_E_CAST:
        return te_dtype_is_int(e->u.un.a->dtype) && nonneg(em, e->u.un.a);
    case TE_E_BINARY: {
        const te_expr *a = e->u.bin.a, *b = e->u.bin.b;
        switch (e->u.bin.op) {
        case TE_ADD:
        case TE_MUL:
        case TE_MIN:
            return nonneg(em, a) && nonneg(em, b);
        case TE_MAX:
            return nonneg(em, a) || nonneg(em, b);
        case TE_DIV:
        case TE_MOD:
        case TE_FLOORDIV:
        case TE_FLOORMOD:
            return nonneg(em, a) && nonneg(em, b);
        default:
            return false;
        }
    }
    default:
        return false;
    }
}

/* Whether e (an index) is provably a multiple of m. */
static bool multiple_of(const te_expr *e, int64_t m)
{
    int64_t c;
    if (te__const_int_eval(e, &c))
        return c % m == 0;
    if (e->kind != TE_E_BINARY)
        return false;
    switch (e->u.bin.op) {
    case TE_ADD:
    case TE_SUB:
        return multiple_of(e->u.bin.a, m) && multiple_of(e->u.bin.b, m);
    case TE_MUL:
        return multiple_of(e->u.bin.a, m) || multiple_of(e->u.bin.b, m);
    default:
        return false;
    }
}

static void put_int(te__sb *b, te_dtype d, int64_t v)
{
    if (d == TE_I64 && v == INT64_MIN)
        te__sb_puts(b, "INT64_MIN");
    else if (d == TE_I64 && (v > INT32_MAX || v < INT32_MIN))
        te__sb_printf(b, "%lldLL", (long long)v);
    else
        te__sb_printf(b, "%lld", (long long)v);
}

/* Shortest decimal that reads back as the same value. */
static void put_float(te__sb *b, te_dtype d, double v)
{
    if (isnan(v)) {
        te__sb_puts(b, "NAN");
        return;
    }
    if (isinf(v)) {
        te__sb_puts(b, v < 0 ? "-INFINITY" : "INFINITY");
        return;
    }
    char z[64];
    if (v == floor(v) && fabs(v) < 1e15) { /* integral: 10.0f, not 1e+01f */
        snprintf(z, sizeof z, "%.1f", v);
        te__sb_puts(b, z);
        if (d == TE_F32)
            te__sb_puts(b, "f");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(z, sizeof z, "%.*g", p, v);
        if (d == TE_F32 ? strtof(z, NULL) == (float)v : strtod(z, NULL) == v)
            break;
    }
    if (!strpbrk(z, ".en"))
        strcat(z, ".0");
    te__sb_puts(b, z);
    if (d == TE_F32)
        te__sb_puts(b, "f");
}

static int gen(emitter *em, te__sb *o, const te_expr *e);

/* Prints e, in parentheses when it binds looser than `minp`. */
static void put(emitter *em, te__sb *o, const te_expr *e, int minp)
{
    te__sb t = {0};
    int p = gen(em, &t, e);
    if (t.oom) {
        fail(em, TE_ERR_NOMEM, "out of memory");
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
static void put_vec(emitter *em, te__sb *o, const te_expr *e, int lanes)
{
    if (e->lanes > 1 && e->kind != TE_E_BCAST) {
        put(em, o, e, P_LOR);
        return;
    }
    const te_expr *s = e->kind == TE_E_BCAST ? e->u.un.a : e;
    te__sb_printf(o, "%s(", helper_name(em, H_SPLAT, s->dtype, lanes));
    if (s->dtype == TE_BOOL) {
        put(em, o, s, P_LOR);
        te__sb_puts(o, " ? -1 : 0");
    } else {
        put(em, o, s, P_LOR);
    }
    te__sb_puts(o, ")");
}

/* Operand of a vector arithmetic or comparison operator: a broadcast prints as its scalar,
 * which GNU C converts to the vector type. */
static void put_operand(emitter *em, te__sb *o, const te_expr *e, int lanes, int minp)
{
    if (lanes > 1 && (e->kind == TE_E_BCAST || e->lanes == 1)) {
        const te_expr *s = e->kind == TE_E_BCAST ? e->u.un.a : e;
        if (s->dtype == TE_BOOL) {
            put_vec(em, o, e, lanes);
            return;
        }
        put(em, o, s, minp);
        return;
    }
    put(em, o, e, minp);
}

/* The promoted variables of buffer b, or NULL. */
static const promo *find_promo(const emitter *em, const te_buf *b)
{
    for (int i = em->npromos - 1; i >= 0; i--)
        if (em->promos[i].buf == b)
            return &em->promos[i];
    return NULL;
}

/* Flat index of a (possibly multi-dimensional) access, printed. */
static void put_index(emitter *em, te__sb *o, const te_buf *b, int n, te_expr *const *idx)
{
    if (n == 1) {
        put(em, o, idx[0], 0);
        return;
    }
    /* not flattened: row-major over the buffer's shape */
    for (int d = 0; d < n; d++) {
        int64_t stride = 1;
        for (int k = d + 1; k < n; k++)
            stride *= b->shape[k];
        if (d)
            te__sb_puts(o, " + ");
        put(em, o, idx[d], stride == 1 ? P_ADD + 1 : P_MUL);
        if (stride != 1)
            te__sb_printf(o, " * %lld", (long long)stride);
    }
}

/* Name of a promoted element (scalar access at constant index i). */
static void put_promo_scalar(te__sb *o, const promo *p, int64_t i)
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
    const char *bn = buf_name(em, b);
    const promo *p = find_promo(em, b);
    te_expr *ix = e->u.load.idx[0];
    if (e->lanes == 1) {
        int64_t c;
        if (p && te__const_flat_index(b, e->u.load.n, e->u.load.idx, &c)) {
            put_promo_scalar(o, p, c);
            return P_POSTFIX;
        }
        te__sb_printf(o, "%s[", bn);
        put_index(em, o, b, e->u.load.n, e->u.load.idx);
        te__sb_puts(o, "]");
        return P_POSTFIX;
    }
    if (e->u.load.n != 1) {
        fail(em, TE_ERR_INTERNAL, "vector load of '%s' with an index that is not flat", b->name);
        return P_PRIMARY;
    }
    if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1) {
        int64_t c;
        if (p && te__const_int_eval(ix->u.ramp.base, &c)) {
            te__sb_printf(o, "%s%lld", p->vname, (long long)(c / e->lanes));
            return P_PRIMARY;
        }
        te__sb_printf(o, "%s(&%s[", helper_name(em, H_LOAD, e->dtype, e->lanes), bn);
        put(em, o, ix->u.ramp.base, 0);
        te__sb_puts(o, "])");
    } else if (ix->kind == TE_E_RAMP) {
        te__sb_printf(o, "%s(&%s[", helper_name(em, H_GATHER, e->dtype, e->lanes), bn);
        put(em, o, ix->u.ramp.base, 0);
        te__sb_printf(o, "], %lld)", (long long)ix->u.ramp.stride);
    } else {
        te__sb_printf(o, "%s(%s, ", helper_name(em, H_GATHER_IDX, e->dtype, e->lanes), bn);
        if (ix->dtype != TE_I64) {
            te__sb_printf(o, "__builtin_convertvector(");
            put_vec(em, o, ix, e->lanes);
            te__sb_printf(o, ", %s)", vtype(em, TE_I64, e->lanes));
        } else {
            put_vec(em, o, ix, e->lanes);
        }
        te__sb_puts(o, ")");
    }
    return P_PRIMARY;
}

static const char *binop_token(te_binop op, bool vec)
{
    switch (op) {
    case TE_ADD:
        return "+";
    case TE_SUB:
        return "-";
    case TE_MUL:
        return "*";
    case TE_DIV:
    case TE_FLOORDIV:
        return "/";
    case TE_MOD:
    case TE_FLOORMOD:
        return "%";
    case TE_EQ:
        return "==";
    case TE_NE:
        return "!=";
    case TE_LT:
        return "<";
    case TE_LE:
        return "<=";
    case TE_GT:
        return ">";
    case TE_GE:
        return ">=";
    case TE_AND:
        return vec ? "&" : "&&";
    case TE_OR:
        return vec ? "|" : "||";
    default:
        return "?";
    }
}

static int binop_prec(te_binop op, bool vec)
{
    switch (op) {
    case TE_ADD:
    case TE_SUB:
        return P_ADD;
    case TE_MUL:
    case TE_DIV:
    case TE_MOD:
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        return P_MUL;
    case TE_EQ:
    case TE_NE:
        return P_EQ;
    case TE_LT:
    case TE_LE:
    case TE_GT:
    case TE_GE:
        return P_REL;
    case TE_AND:
        return vec ? P_BAND : P_LAND;
    case TE_OR:
        return vec ? P_BOR : P_LOR;
    default:
        return P_PRIMARY;
    }
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
        te__sb_printf(o, "%s(", helper_name(em, op == TE_MIN ? H_MIN : H_MAX, od, lanes));
        if (vec) {
            put_vec(em, o, a, lanes);
            te__sb_puts(o, ", ");
            put_vec(em, o, b, lanes);
        } else {
            put(em, o, a, P_LOR);
            te__sb_puts(o, ", ");
            put(em, o, b, P_LOR);
        }
        te__sb_puts(o, ")");
        return P_PRIMARY;
    }
    if (op == TE_FLOORDIV || op == TE_FLOORMOD) {
        /* Exact as C's / and % when both sides are >= 0 (or the type is unsigned). */
        bool plain = od == TE_U8 || (nonneg(em, a) && nonneg(em, b));
        if (!plain && !te_dtype_is_float(od)) {
            te__sb_printf(o, "%s(", helper_name(em, op == TE_FLOORDIV ? H_FLOORDIV : H_FLOORMOD, od,
                                             lanes));
            if (vec) {
                put_vec(em, o, a, lanes);
                te__sb_puts(o, ", ");
                put_vec(em, o, b, lanes);
            } else {
                put(em, o, a, P_LOR);
                te__sb_puts(o, ", ");
                put(em, o, b, P_LOR);
            }
            te__sb_puts(o, ")");
            return P_PRIMARY;
        }
        if (te_dtype_is_float(od) && op == TE_FLOORDIV) {
            /* floor(a / b) on floats */
            te_expr q = *e;
            q.u.bin.op = TE_DIV;
            if (vec)
                te__sb_printf(o, "%s(", helper_name(em, H_FLOOR, od, lanes));
            else
                te__sb_printf(o, "%s(", libm_name(TE_FLOOR, od));
            put(em, o, &q, 0);
            te__sb_puts(o, ")");
            return P_PRIMARY;
        }
    }
    bool cmp = op >= TE_EQ && op <= TE_GE;
    bool conv = vec && cmp && int_of(od) != TE_I32;
    int p = binop_prec(op, vec);
    if (conv)
        te__sb_puts(o, "__builtin_convertvector(");
    /* Masks combined with & and | read better with their comparisons in parentheses. */
    int lp = p, rp = p + 1;
    if (op == TE_AND || op == TE_OR)
        lp = rp = vec ? P_REL + 1 : P_EQ;
    put_operand(em, o, a, lanes, lp);
    if (op == TE_ADD && !vec && te__const_int_eval(b, &c) && c < 0 && c != INT64_MIN) {
        te__sb_printf(o, " - ");
        put_int(o, b->dtype, -c);
    } else {
        te__sb_printf(o, " %s ", binop_token(op, vec));
        put_operand(em, o, b, lanes, rp);
    }
    if (conv) {
        te__sb_printf(o, ", %s)", vtype(em, TE_BOOL, lanes));
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
    const char *one = d == TE_F32 ? "1.0f" : "1.0";
    if (lanes == 1) {
        if (fn == TE_SIGMOID) {
            te__sb_printf(o, "%s(", helper_name(em, H_SIGMOID, d, 1));
        } else if (fn == TE_RSQRT) {
            te__sb_printf(o, "%s / %s(", one, libm_name(TE_SQRT, d));
            put(em, o, x, 0);
            te__sb_puts(o, ")");
            return P_MUL;
        } else {
            te__sb_printf(o, "%s(", libm_name(fn, d));
        }
        put(em, o, x, P_LOR);
        if (fn == TE_POW) {
            te__sb_puts(o, ", ");
            put(em, o, e->u.call.args[1], P_LOR);
        }
        te__sb_puts(o, ")");
        return P_PRIMARY;
    }
    static const helper hs[TE_INTRIN_COUNT] = {H_EXP,     H_LOG,  H_SQRT,  H_SQRT,
                                               H_TANH,    H_ERF,  H_SIGMOID, H_FABS,
                                               H_FLOOR,   H_CEIL, H_POW};
    if (fn == TE_RSQRT)
        te__sb_printf(o, "%s / ", one);
    te__sb_printf(o, "%s(", helper_name(em, hs[fn], d, lanes));
    put_vec(em, o, x, lanes);
    if (fn == TE_POW) {
        te__sb_puts(o, ", ");
        put_vec(em, o, e->u.call.args[1], lanes);
    }
    te__sb_puts(o, ")");
    return fn == TE_RSQRT ? P_MUL : P_PRIMARY;
}

static int gen_cast(emitter *em, te__sb *o, const te_expr *e)
{
    const te_expr *a = e->u.un.a;
    int lanes = e->lanes;
    if (lanes == 1) {
        te__sb_printf(o, "(%s)", ctype(e->dtype));
        put(em, o, a, P_UNARY);
        return P_UNARY;
    }
    if (e->dtype == TE_BOOL) {
        /* to a mask: nonzero lanes */
        bool conv = int_of(a->dtype) != TE_I32;
        if (conv)
            te__sb_puts(o, "__builtin_convertvector(");
        put_operand(em, o, a, lanes, P_REL + 1);
        te__sb_puts(o, " != 0");
        if (conv) {
            te__sb_printf(o, ", %s)", vtype(em, TE_BOOL, lanes));
            return P_PRIMARY;
        }
        return P_EQ;
    }
    if (a->dtype == TE_BOOL) {
        /* from a mask: -1 -> 1 */
        if (vec_elem(e->dtype) == TE_I32) {
            put(em, o, a, P_BAND + 1);
            te__sb_puts(o, " & 1");
            return P_BAND;
        }
        te__sb_puts(o, "__builtin_convertvector(");
        put(em, o, a, P_BAND + 1);
        te__sb_printf(o, " & 1, %s)", vtype(em, e->dtype, lanes));
        return P_PRIMARY;
    }
    te__sb_puts(o, "__builtin_convertvector(");
    put_vec(em, o, a, lanes);
    te__sb_printf(o, ", %s)", vtype(em, e->dtype, lanes));
    return P_PRIMARY;
}

static int gen(emitter *em, te__sb *o, const te_expr *e)
{
    int64_t c;
    if (e->lanes == 1 && e->kind != TE_E_INT && te_dtype_is_int(e->dtype) &&
        e->dtype != TE_BOOL && te__const_int_eval(e, &c)) {
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
        te__sb_puts(o, var_name(em, e));
        return P_PRIMARY;
    case TE_E_BINARY:
        return gen_binary(em, o, e);
    case TE_E_NOT:
        te__sb_puts(o, e->lanes > 1 ? "~" : "!");
        put(em, o, e->u.un.a, P_UNARY);
        return P_UNARY;
    case TE_E_NEG: {
        te__sb_puts(o, "-");
        /* never print "--x" */
        const te_expr *a = e->u.un.a;
        bool neg_inside = a->kind == TE_E_NEG || (a->kind == TE_E_INT && a->u.i < 0) ||
                          (a->kind == TE_E_FLOAT && signbit(a->u.f));
        put(em, o, a, neg_inside ? P_PRIMARY : P_UNARY);
        return P_UNARY;
    }
    case TE_E_SELECT:
    case TE_E_IF:
        if (e->lanes > 1 && e->u.sel.c->lanes > 1) {
            te__sb_printf(o, "%s(", helper_name(em, H_BLEND, e->dtype, e->lanes));
            put(em, o, e->u.sel.c, P_LOR);
            te__sb_puts(o, ", ");
            put_vec(em, o, e->u.sel.t, e->lanes);
            te__sb_puts(o, ", ");
            put_vec(em, o, e->u.sel.f, e->lanes);
            te__sb_puts(o, ")");
            return P_PRIMARY;
        }
        put(em, o, e->u.sel.c, P_LOR);
        te__sb_puts(o, " ? ");
        if (e->lanes > 1) {
            put_vec(em, o, e->u.sel.t, e->lanes);
            te__sb_puts(o, " : ");
            put_vec(em, o, e->u.sel.f, e->lanes);
        } else {
            put(em, o, e->u.sel.t, P_LOR);
            te__sb_puts(o, " : ");
            put(em, o, e->u.sel.f, P_LOR);
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
        const char *vt = vtype(em, e->dtype, e->lanes);
        int64_t b0 = 0;
        bool kb = te__const_int_eval(base, &b0);
        if (!kb) {
            put(em, o, base, P_ADD);
            te__sb_puts(o, " + ");
        }
        te__sb_printf(o, "(%s){", vt);
        for (int l = 0; l < e->lanes; l++)
            te__sb_printf(o, "%s%lld", l ? ", " : "", (long long)(b0 + l * e->u.ramp.stride));
        te__sb_puts(o, "}");
        return kb ? P_PRIMARY : P_ADD;
    }
    case TE_E_BCAST:
        put_vec(em, o, e, e->lanes);
        return P_PRIMARY;
    case TE_E_READ:
    case TE_E_REDUCE:
        fail(em, TE_ERR_INTERNAL, "a tensor read or reduction survived lowering");
        return P_PRIMARY;
    }
    return P_PRIMARY;
}

/* ---- Statements --------------------------------------------------------------------------- */

static void line_start(emitter *em)
{
    for (int i = 0; i < em->indent; i++)
        te__sb_puts(&em->out, "    ");
}

static void line(emitter *em, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(emitter *em, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    line_start(em);
    te__sb_puts(&em->out, tmp);
    te__sb_puts(&em->out, "\n");
}

static void block_open(emitter *em)
{
    if (em->nblocks < (int)(sizeof em->block_start / sizeof em->block_start[0]))
        em->block_start[em->nblocks] = em->ndecl;
    em->nblocks++;
    em->indent++;
}

static void block_close(emitter *em)
{
    em->nblocks--;
    if (em->nblocks < (int)(sizeof em->block_start / sizeof em->block_start[0]))
        em->ndecl = em->block_start[em->nblocks];
    em->indent--;
}

static bool declared_here(const emitter *em, int id)
{
    int from = em->nblocks > 0 ? em->block_start[em->nblocks - 1] : 0;
    for (int i = from; i < em->ndecl; i++)
        if (em->decl[i] == id)
            return true;
    return false;
}

static void declare(emitter *em, int id)
{
    if (em->ndecl < (int)(sizeof em->decl / sizeof em->decl[0]))
        em->decl[em->ndecl++] = id;
}

static void gen_stmt(emitter *em, const te_stmt *s);

/* Text of an expression as a string (owned by the arena). */
static const char *expr_text(emitter *em, const te_expr *e, int minp)
{
    te__sb t = {0};
    put(em, &t, e, minp);
    const char *z = t.oom ? NULL : te__strdup(em->ctx, t.p ? t.p : "");
    free(t.p);
    if (!z)
        fail(em, TE_ERR_NOMEM, "out of memory");
    return z ? z : "";
}

typedef struct reads_buf {
    const te_buf *buf;
    bool *found;
} reads_buf;

static bool reads_buf_visit(const te_expr *e, void *user)
{
    reads_buf *r = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == r->buf)
        *r->found = true;
    return !*r->found;
}

/* A reduction loop: the innermost loop body is one update `acc = acc op e` of a scalar
 * accumulator promoted to a variable, op one of + * min max, e not reading acc. Returns the
 * OpenMP reduction operator and stores the variable's name, else NULL. `#pragma omp simd
 * reduction(...)` then lets the compiler vectorize it (reassociating, as every vectorized
 * reduction does); without it gcc keeps a float reduction serial. */
static const char *reduction_of(emitter *em, const te_stmt *s, char *var, size_t n)
{
    const te_stmt *b = s->u.loop.body;
    if (b->kind != TE_S_STORE || b->u.store.value->lanes != 1)
        return NULL;
    const te_buf *buf = b->u.store.buf;
    const promo *p = find_promo(em, buf);
    int64_t at, c2;
    if (!p || !te__const_flat_index(buf, b->u.store.n, b->u.store.idx, &at) || p->pr->kind[at] != TE_PROMO_SCALAR)
        return NULL;
    const te_expr *v = b->u.store.value;
    if (v->kind != TE_E_BINARY)
        return NULL;
    const char *op;
    switch (v->u.bin.op) {
    case TE_ADD:
        op = "+";
        break;
    case TE_MUL:
        op = "*";
        break;
    case TE_MIN:
        op = "min";
        break;
    case TE_MAX:
        op = "max";
        break;
    default:
        return NULL;
    }
    const te_expr *a = v->u.bin.a, *e = v->u.bin.b;
    bool a_acc = a->kind == TE_E_LOAD && a->u.load.buf == buf &&
                 te__const_flat_index(buf, a->u.load.n, a->u.load.idx, &c2) && c2 == at;
    if (!a_acc) {
        const te_expr *t = a;
        a = e;
        e = t;
        a_acc = a->kind == TE_E_LOAD && a->u.load.buf == buf &&
                te__const_flat_index(buf, a->u.load.n, a->u.load.idx, &c2) && c2 == at;
    }
    if (!a_acc)
        return NULL;
    bool reads_acc = false;
    te__expr_visit(e, reads_buf_visit, &(reads_buf){buf, &reads_acc});
    if (reads_acc)
        return NULL;
    snprintf(var, n, "%s%lld", p->sname, (long long)at);
    return op;
}

static void gen_for(emitter *em, const te_stmt *s)
{
    const te_expr *var = s->u.loop.var;
    const char *v = var_name(em, var);
    const char *vt = ctype(var->dtype);
    int64_t mn, ex;
    bool kmin = te__const_int_eval(s->u.loop.min, &mn), kext = te__const_int_eval(s->u.loop.extent, &ex);
    const char *lo = expr_text(em, s->u.loop.min, 0);
    const char *hi;
    if (kmin && kext)
        hi = te__sprintf(em->ctx, "%lld", (long long)(mn + ex));
    else if (kmin && mn == 0)
        hi = expr_text(em, s->u.loop.extent, P_REL + 1);
    else
        hi = te__sprintf(em->ctx, "%s + %s", expr_text(em, s->u.loop.min, P_ADD),
                         expr_text(em, s->u.loop.extent, P_ADD + 1));
    switch (s->u.loop.fkind) {
    case TE_FOR_PARALLEL:
        line(em, "TE_OMP(parallel for schedule(static))");
        em->uses_omp = true;
        em->par_depth++;
        break;
    case TE_FOR_UNROLLED:
        line(em, "TE_UNROLL(%lld)", kext && ex <= 1024 ? (long long)ex : 8LL);
        em->uses_unroll = true;
        break;
    case TE_FOR_VECTORIZED:
        line(em, "TE_OMP(simd)");
        em->uses_omp = true;
        break;
    case TE_FOR_THREAD:
        line(em, "// GPU thread loop (tag %d), run serially on the CPU", s->u.loop.thread_tag);
        break;
    case TE_FOR_SERIAL:
        break;
    }
    char acc[200];
    const char *rop = s->u.loop.fkind == TE_FOR_SERIAL ? reduction_of(em, s, acc, sizeof acc) : NULL;
    if (rop) {
        line(em, "TE_OMP(simd reduction(%s : %s))", rop, acc);
        em->uses_omp = true;
    }
    line(em, "for (%s %s = %s; %s < %s; ++%s) {", vt, v, lo, v, hi, v);
    int saved_nonneg = em->nnonneg;
    if (nonneg(em, s->u.loop.min) && em->nnonneg < (int)(sizeof em->nonneg / sizeof em->nonneg[0]))
        em->nonneg[em->nnonneg++] = var->u.var.id;
    int nt_before = em->nt_stores;
    block_open(em);
    gen_stmt(em, s->u.loop.body);
    if (s->u.loop.fkind == TE_FOR_PARALLEL && em->nt_stores > nt_before)
        line(em, "%s();", helper_name(em, H_SFENCE, TE_F32, 1));
    block_close(em);
    line(em, "}");
    em->nnonneg = saved_nonneg;
    if (s->u.loop.fkind == TE_FOR_PARALLEL)
        em->par_depth--;
}

static void gen_if(emitter *em, const te_stmt *s, bool else_if)
{
    const char *c = expr_text(em, s->u.cond.cond, 0);
    if (else_if) {
        /* continue the line "} else " */
        te__sb_printf(&em->out, "if (%s) {\n", c);
    } else {
        line(em, "if (%s) {", c);
    }
    block_open(em);
    gen_stmt(em, s->u.cond.then_s);
    block_close(em);
    const te_stmt *e = s->u.cond.else_s;
    if (!e) {
        line(em, "}");
        return;
    }
    if (e->kind == TE_S_IF) {
        line_start(em);
        te__sb_puts(&em->out, "} else ");
        gen_if(em, e, true);
        return;
    }
    line(em, "} else {");
    block_open(em);
    gen_stmt(em, e);
    block_close(em);
    line(em, "}");
}

static const te_buf *nt_flag_buf(emitter *em, const te_buf *b, const char **flag)
{
    for (int i = 0; i < em->n_nt; i++)
        if (em->nt_bufs[i] == b) {
            *flag = em->nt_flag[i];
            return b;
        }
    if (em->n_nt == (int)(sizeof em->nt_bufs / sizeof em->nt_bufs[0]))
        return NULL;
    em->nt_bufs[em->n_nt] = b;
    em->nt_flag[em->n_nt] = unique_name(em, te__sprintf(em->ctx, "%s_nt", buf_name(em, b)), b->id);
    *flag = em->nt_flag[em->n_nt++];
    return b;
}

static void gen_store(emitter *em, const te_stmt *s)
{
    const te_buf *b = s->u.store.buf;
    const char *bn = buf_name(em, b);
    const promo *p = find_promo(em, b);
    const te_expr *val = s->u.store.value;
    te_expr *ix = s->u.store.idx[0];
    int lanes = val->lanes > ix->lanes ? val->lanes : ix->lanes;
    te__sb v = {0};
    if (lanes > 1)
        put_vec(em, &v, val, lanes);
    else
        put(em, &v, val, 0);
    const char *vz = v.p ? v.p : "";
    int64_t c;
    if (lanes == 1) {
        line_start(em);
        if (p && te__const_flat_index(b, s->u.store.n, s->u.store.idx, &c)) {
            put_promo_scalar(&em->out, p, c);
        } else {
            te__sb_printf(&em->out, "%s[", bn);
            put_index(em, &em->out, b, s->u.store.n, s->u.store.idx);
            te__sb_puts(&em->out, "]");
        }
        te__sb_printf(&em->out, " = %s;\n", vz);
    } else if (s->u.store.n != 1) {
        fail(em, TE_ERR_INTERNAL, "vector store to '%s' with an index that is not flat", b->name);
    } else if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1) {
        const char *base = expr_text(em, ix->u.ramp.base, 0);
        int bytes = lanes * (int)te_dtype_size(b->dtype);
        const char *flag = NULL;
        if (p && te__const_int_eval(ix->u.ramp.base, &c)) {
            line(em, "%s%lld = %s;", p->vname, (long long)(c / lanes), vz);
        } else if (s->u.store.nontemporal && b->arg_index >= 0 &&
                   (bytes == 16 || bytes == 32 || bytes == 64) &&
                   multiple_of(ix->u.ramp.base, lanes) && nt_flag_buf(em, b, &flag)) {
            em->nt_stores++;
            line(em, "%s(%s, &%s[%s], %s);", helper_name(em, H_STREAM, b->dtype, lanes), flag, bn,
                 base, vz);
        } else {
            line(em, "%s(&%s[%s], %s);", helper_name(em, H_STORE, b->dtype, lanes), bn, base, vz);
        }
    } else if (ix->kind == TE_E_RAMP) {
        line(em, "%s(&%s[%s], %lld, %s);", helper_name(em, H_SCATTER, b->dtype, lanes), bn,
             expr_text(em, ix->u.ramp.base, 0), (long long)ix->u.ramp.stride, vz);
    } else {
        te__sb t = {0};
        put_vec(em, &t, ix, lanes);
        line(em, "%s(%s, %s, %s);", helper_name(em, H_SCATTER_IDX, b->dtype, lanes), bn,
             t.p ? t.p : "", vz);
        free(t.p);
    }
    if (v.oom)
        fail(em, TE_ERR_NOMEM, "out of memory");
    free(v.p);
}

static void gen_heap_alloc(emitter *em, const te_stmt *s, const char *bn, int64_t bytes)
{
    const te_buf *b = s->u.alloc.buf;
    int64_t rounded = (bytes + 63) / 64 * 64;
    line(em, "%s *%s = te_alloc64(%lld);", ctype(b->dtype), bn, (long long)rounded);
    em->uses_heap = true;
    if (em->par_depth > 0) {
        /* no return out of a parallel region: flag the failure, skip the work */
        em->uses_oom = true;
        line(em, "if (!%s) {", bn);
        em->indent++;
        line(em, "__atomic_store_n(&te_oom, 1, __ATOMIC_RELAXED);");
        em->indent--;
        line(em, "} else {");
        block_open(em);
        gen_stmt(em, s->u.alloc.body);
        line(em, "te_free64(%s);", bn);
        block_close(em);
        line(em, "}");
        return;
    }
    if (em->nheap == 0) {
        line(em, "if (!%s)", bn);
        em->indent++;
        line(em, "return -1;");
        em->indent--;
    } else {
        line(em, "if (!%s) {", bn);
        em->indent++;
        for (int i = em->nheap - 1; i >= 0; i--)
            line(em, "te_free64(%s);", em->heap[i]);
        line(em, "return -1;");
        em->indent--;
        line(em, "}");
    }
    bool pushed = em->nheap < (int)(sizeof em->heap / sizeof em->heap[0]);
    if (pushed)
        em->heap[em->nheap++] = bn;
    gen_stmt(em, s->u.alloc.body);
    if (pushed)
        em->nheap--;
    line(em, "te_free64(%s);", bn);
}

static void gen_alloc(emitter *em, const te_stmt *s)
{
    const te_buf *b = s->u.alloc.buf;
    const char *bn = buf_name(em, b);
    int64_t n = te__buf_numel(b);
    int64_t bytes = n * (int64_t)te_dtype_size(b->dtype);
    bool wrap = declared_here(em, b->id); /* the same buffer twice in one block */
    if (wrap) {
        line(em, "{");
        block_open(em);
    }
    declare(em, b->id);
    const te__promotion *pm = s->u.alloc.promote;
    if (pm) {
        promo pr = {b, pm, NULL, NULL};
        /* The same buffer allocated again (loop partition copies) reuses its names: the
         * earlier declarations are in another C block. */
        pr.vname = lookup_name(em, 2, b->id, b, te__sprintf(em->ctx, "%s_v", bn));
        pr.sname = lookup_name(em, 3, b->id, b, te__sprintf(em->ctx, "%s_s", bn));
        line(em, "// %s: %lld x %s, promoted to registers", b->name, (long long)n,
             te_dtype_str(b->dtype));
        /* Declarations, wrapped before 100 columns. */
        for (int pass = 2; pass >= 1; pass--) {
            int64_t step = pass == 2 ? (pm->lanes ? pm->lanes : n) : 1;
            const char *type = pass == 2 ? (pm->lanes ? vtype(em, b->dtype, pm->lanes) : "")
                                         : ctype(b->dtype);
            const char *stem = pass == 2 ? pr.vname : pr.sname;
            size_t start = 0;
            bool open = false;
            for (int64_t i = 0; (pass == 1 || pm->lanes) && i < n; i += step) {
                if (pm->kind[i] != pass)
                    continue;
                char name[160];
                snprintf(name, sizeof name, "%s%lld", stem, (long long)(pass == 2 ? i / step : i));
                if (open && em->out.n - start + strlen(name) + 3 > 96) {
                    te__sb_puts(&em->out, ";\n");
                    open = false;
                }
                if (!open) {
                    line_start(em);
                    start = em->out.n - (size_t)(em->indent * 4);
                    te__sb_printf(&em->out, "%s %s", type, name);
                    open = true;
                } else {
                    te__sb_printf(&em->out, ", %s", name);
                }
            }
            if (open)
                te__sb_puts(&em->out, ";\n");
        }
        if (em->npromos == em->cappromos) {
            int cap = em->cappromos ? em->cappromos * 2 : 8;
            promo *v = te__alloc(em->ctx, sizeof *v * (size_t)cap);
            if (!v) {
                fail(em, TE_ERR_NOMEM, "out of memory");
                return;
            }
            if (em->npromos)
                memcpy(v, em->promos, sizeof *v * (size_t)em->npromos);
            em->promos = v;
            em->cappromos = cap;
        }
        em->promos[em->npromos++] = pr;
        gen_stmt(em, s->u.alloc.body);
        em->npromos--;
    } else if (b->scope != TE_SCOPE_GLOBAL && bytes <= STACK_MAX_BYTES) {
        line(em, "%s %s[%lld] __attribute__((aligned(64)));", ctype(b->dtype), bn, (long long)n);
        gen_stmt(em, s->u.alloc.body);
    } else {
        gen_heap_alloc(em, s, bn, bytes);
    }
    if (wrap) {
        block_close(em);
        line(em, "}");
    }
}

static void gen_let(emitter *em, const te_stmt *s)
{
    const te_expr *var = s->u.let.var, *val = s->u.let.value;
    bool wrap = declared_here(em, var->u.var.id);
    if (wrap) {
        line(em, "{");
        block_open(em);
    }
    declare(em, var->u.var.id);
    const char *t = type_of(em, val->dtype, val->lanes);
    line(em, "const %s %s = %s;", t, var_name(em, var), expr_text(em, val, 0));
    int saved_nonneg = em->nnonneg;
    if (te_dtype_is_int(val->dtype) && nonneg(em, val) &&
        em->nnonneg < (int)(sizeof em->nonneg / sizeof em->nonneg[0]))
        em->nonneg[em->nnonneg++] = var->u.var.id;
    gen_stmt(em, s->u.let.body);
    em->nnonneg = saved_nonneg;
    if (wrap) {
        block_close(em);
        line(em, "}");
    }
}

static void gen_stmt(emitter *em, const te_stmt *s)
{
    if (!s || em->err)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        gen_for(em, s);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            gen_stmt(em, s->u.seq.v[i]);
        break;
    case TE_S_IF:
        gen_if(em, s, false);
        break;
    case TE_S_STORE:
        gen_store(em, s);
        break;
    case TE_S_ALLOC:
        gen_alloc(em, s);
        break;
    case TE_S_LET:
        gen_let(em, s);
        break;
    case TE_S_COMMENT: {
        line_start(em);
        te__sb_puts(&em->out, "// ");
        for (const char *p = s->u.comment.text ? s->u.comment.text : ""; *p; p++)
            te__sb_putn(&em->out, *p == '\n' ? " " : p, 1);
        te__sb_puts(&em->out, "\n");
        break;
    }
    case TE_S_BARRIER:
        fail(em, TE_ERR_UNSUPPORTED,
             "a barrier (GPU schedule) reached the C backend; thread loops must be split at "
             "barriers first");
        break;
    }
}

/* ---- The file ------------------------------------------------------------------------------ */

static void emit_typedefs(emitter *em, te__sb *o)
{
    bool any = false;
    for (int d = 0; d < TE_DTYPE_COUNT; d++) {
        for (int s = 1; s < NLANES; s++) {
            unsigned bit = 1u << s;
            if (!(em->vtypes[d] & bit))
                continue;
            int lanes = 1 << s;
            int bytes = lanes * (int)te_dtype_size((te_dtype)d);
            const char *n = dt_short((te_dtype)d);
            te__sb_printf(o, "typedef %s te_%sx%d __attribute__((vector_size(%d)));\n",
                      ctype((te_dtype)d), n, lanes, bytes);
            if (em->vtypes_u[d] & bit)
                te__sb_printf(o,
                          "typedef %s te_%sx%du __attribute__((vector_size(%d), aligned(%zu), "
                          "may_alias));\n",
                          ctype((te_dtype)d), n, lanes, bytes, te_dtype_size((te_dtype)d));
            any = true;
        }
    }
    if (any)
        te__sb_puts(o, "\n");
}

static void emit_helpers(emitter *em, te__sb *o)
{
    for (int h = 0; h < H_COUNT; h++)
        for (int d = 0; d < TE_DTYPE_COUNT; d++)
            for (int s = 0; s < NLANES; s++)
                if (em->helpers[h][d] & (1u << s)) {
                    emit_helper(em, o, (helper)h, (te_dtype)d, 1 << s);
                    te__sb_puts(o, "\n");
                }
}

/* The prelude the kernels of a unit need: the union of what their emitters recorded. */
static void merge_needs(emitter *u, const emitter *em)
{
    for (int d = 0; d < TE_DTYPE_COUNT; d++) {
        u->vtypes[d] |= em->vtypes[d];
        u->vtypes_u[d] |= em->vtypes_u[d];
        for (int h = 0; h < H_COUNT; h++)
            u->helpers[h][d] |= em->helpers[h][d];
    }
    u->need_immintrin |= em->need_immintrin;
    u->uses_omp |= em->uses_omp;
    u->uses_unroll |= em->uses_unroll;
    u->uses_heap |= em->uses_heap;
}

/* Includes, macros, vector typedefs and inline helpers: everything before the first kernel. */
static void emit_prelude(emitter *u, te__sb *o, bool standalone)
{
    te__sb_puts(o, "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n"
               "#include <stdlib.h>\n#include <string.h>\n"
               "#ifdef _OPENMP\n#include <omp.h>\n#endif\n");
    if (u->need_immintrin)
        te__sb_puts(o, "#if defined(__x86_64__) || defined(__i386__)\n#include <immintrin.h>\n#endif\n");
    bool vectors = false;
    for (int d = 0; d < TE_DTYPE_COUNT; d++)
        vectors |= u->vtypes[d] != 0;
    if (vectors)
        te__sb_puts(o, "#if defined(__GNUC__) && !defined(__clang__)\n"
                   "#pragma GCC diagnostic ignored \"-Wpsabi\" /* vector arguments */\n#endif\n");
    if (standalone)
        te__sb_puts(o, "#if defined(__GNUC__) && !defined(__clang__)\n"
                   "/* Registers of a tile are set and read under the same tail guards. */\n"
                   "#pragma GCC diagnostic ignored \"-Wmaybe-uninitialized\"\n#endif\n");
    if (u->uses_omp || u->uses_unroll)
        te__sb_puts(o, "\n/* Loop pragmas: OpenMP ones vanish when compiled without OpenMP. */\n"
                   "#define TE_PRAGMA(x) _Pragma(#x)\n");
    if (u->uses_omp)
        te__sb_puts(o, "#ifdef _OPENMP\n#define TE_OMP(x) TE_PRAGMA(omp x)\n#else\n#define TE_OMP(x)\n"
                   "#endif\n");
    if (u->uses_unroll)
        te__sb_puts(o, "#if defined(__clang__)\n#define TE_UNROLL(n) TE_PRAGMA(unroll n)\n"
                   "#elif defined(__GNUC__)\n#define TE_UNROLL(n) TE_PRAGMA(GCC unroll n)\n"
                   "#else\n#define TE_UNROLL(n)\n#endif\n");
    if (u->uses_heap)
        te__sb_puts(o, "\n/* 64-byte aligned scratch from malloc (C99 has no aligned_alloc): the\n"
                   " * byte before the block records the offset back to malloc's pointer. */\n"
                   "static inline void *te_alloc64(size_t n)\n{\n"
                   "    unsigned char *p = (unsigned char *)malloc(n + 64), *a;\n"
                   "    if (!p)\n        return NULL;\n"
                   "    a = p + 64 - ((uintptr_t)p & 63);\n"
                   "    a[-1] = (unsigned char)(a - p);\n    return a;\n}\n\n"
                   "static inline void te_free64(void *a)\n{\n"
                   "    if (a)\n        free((unsigned char *)a - ((unsigned char *)a)[-1]);\n}\n");
    te__sb_puts(o, "\n");
    emit_typedefs(u, o);
    emit_helpers(u, o);
}

/* Emits one lowered function (its body, signature and, unless `packed` is false, its packed
 * entry) into *k; the prelude it needs stays recorded in em. `avoid` names (other kernels of
 * the unit) are never used for the function's own variables. Fills *info when given. */
static void emit_function(emitter *em, te__sb *k, bool packed, int n_avoid,
                          const char *const *avoid, const char *const *arg_names,
                          te__c_kernel_info *info)
{
    te_ctx *ctx = em->ctx;
    const te_lowered *f = em->f;
    char kname[160];
    te__c_kernel_ident(f->name, kname, sizeof kname - 8);
    take_name(em, kname);
    take_name(em, te__sprintf(ctx, "%s_packed", kname));
    for (int i = 0; i < n_avoid; i++)
        if (avoid[i] && !name_used(em, avoid[i]))
            take_name(em, avoid[i]);
    for (int i = 0; i < f->n_args; i++) {
        if (!f->args[i]) {
            fail(em, TE_ERR_ARG, "argument %d is NULL", i);
            break;
        }
        if (arg_names && arg_names[i] && *arg_names[i])
            lookup_name(em, 1, f->args[i]->id, f->args[i], arg_names[i]);
        else
            buf_name(em, f->args[i]);
    }

    /* the kernel body: it decides which types and helpers the prelude needs */
    block_open(em);
    gen_stmt(em, em->err ? NULL : f->body);
    block_close(em);
    if (em->nt_stores)
        use_helper(em, H_SFENCE, TE_F32, 1);

    /* kernel signature */
    te__sb sig = {0};
    te__sb_printf(&sig, "int %s(", kname);
    int n_in = f->n_args - f->n_outputs;
    for (int i = 0; i < f->n_args && !em->err; i++) {
        const te_buf *b = f->args[i];
        te__sb_printf(&sig, "%s%s%s *restrict %s", i ? ", " : "", i < n_in ? "const " : "",
                  ctype(b->dtype), buf_name(em, b));
    }
    te__sb_puts(&sig, ")");
    if (sig.p && strlen(sig.p) > 100) { /* one parameter per line */
        free(sig.p);
        sig = (te__sb){0};
        te__sb_printf(&sig, "int %s(", kname);
        for (int i = 0; i < f->n_args; i++) {
            const te_buf *b = f->args[i];
            te__sb_printf(&sig, "%s%s%s *restrict %s", i ? ",\n        " : "",
                      i < n_in ? "const " : "", ctype(b->dtype), buf_name(em, b));
        }
        te__sb_puts(&sig, ")");
    }
    te__sb_printf(k, "%s\n{\n", sig.p ? sig.p : "");
    if (sig.oom)
        k->oom = true;
    free(sig.p);
    for (int i = 0; i < em->n_nt; i++)
        te__sb_printf(k, "    const int %s = ((uintptr_t)%s & 63) == 0; /* streaming stores need "
                     "64-byte alignment */\n",
                  em->nt_flag[i], buf_name(em, em->nt_bufs[i]));
    if (em->uses_oom)
        te__sb_puts(k, "    int te_oom = 0; /* set when an allocation inside a parallel loop fails */\n");
    if (em->n_nt || em->uses_oom)
        te__sb_puts(k, "\n");
    te__sb_puts(k, em->out.p ? em->out.p : "");
    if (em->nt_stores)
        te__sb_printf(k, "    %s();\n", helper_name(em, H_SFENCE, TE_F32, 1));
    te__sb_puts(k, em->uses_oom ? "    return te_oom ? -1 : 0;\n}\n" : "    return 0;\n}\n");

    /* packed entry */
    if (packed) {
        te__sb_printf(k, "\nint %s_packed(void **args)\n{\n    return %s(", kname, kname);
        for (int i = 0; i < f->n_args; i++)
            te__sb_printf(k, "%sargs[%d]", i ? ", " : "", i);
        te__sb_puts(k, ");\n}\n");
    }
    if (em->out.oom)
        k->oom = true;

    if (info && !em->err) {
        memset(info, 0, sizeof *info);
        info->ident = te__strdup(ctx, kname);
        info->n_params = f->n_args;
        info->params = te__alloc(ctx, sizeof(char *) * (size_t)(f->n_args ? f->n_args : 1));
        info->nt_params = te__alloc(ctx, sizeof(char *) * (size_t)(em->n_nt ? em->n_nt : 1));
        if (!info->ident || !info->params || !info->nt_params) {
            fail(em, TE_ERR_NOMEM, "out of memory");
            return;
        }
        for (int i = 0; i < f->n_args; i++)
            info->params[i] = buf_name(em, f->args[i]);
        for (int i = 0; i < em->n_nt; i++)
            info->nt_params[i] = buf_name(em, em->nt_bufs[i]);
        info->n_nt = em->n_nt;
        info->may_fail = em->uses_heap || em->uses_oom;
        info->uses_omp = em->uses_omp;
    }
}

static bool lowered_ok(const te_lowered *f)
{
    return f && f->body && f->name && f->n_args >= 0 && (!f->n_args || f->args) &&
           f->n_outputs >= 0 && f->n_outputs <= f->n_args;
}

const char *te__emit_c_unit(te_ctx *ctx, int n, const te_lowered *const *fs,
                            const te_target *target, const te__c_unit_opts *opts,
                            te__c_kernel_info *info)
{
    if (!ctx)
        return NULL;
    if (n < 1 || !fs) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: no lowered function");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!lowered_ok(fs[i])) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: incomplete lowered function");
            return NULL;
        }
    bool packed = !opts || !opts->no_packed;
    emitter *u = calloc(1, sizeof *u);
    te__sb *kt = calloc((size_t)n, sizeof *kt);
    const char **idents = calloc((size_t)n, sizeof *idents);
    if (!u || !kt || !idents) {
        free(u);
        free(kt);
        free(idents);
        te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_c: out of memory");
        return NULL;
    }
    u->ctx = ctx;
    u->f = fs[0];
    u->target = target;
    char kname[160];
    for (int i = 0; i < n; i++)
        idents[i] = te__strdup(ctx, te__c_kernel_ident(fs[i]->name, kname, sizeof kname - 8));
    for (int i = 0; i < n && !u->err; i++)
        for (int j = 0; j < i; j++)
            if (idents[i] && idents[j] && !strcmp(idents[i], idents[j]))
                fail(u, TE_ERR_ARG, "two kernels of one file are both named '%s'", idents[i]);

    for (int i = 0; i < n && !u->err; i++) {
        emitter *em = calloc(1, sizeof *em);
        if (!em) {
            fail(u, TE_ERR_NOMEM, "out of memory");
            break;
        }
        em->ctx = ctx;
        em->f = fs[i];
        em->target = target;
        emit_function(em, &kt[i], packed, n, idents,
                      opts && opts->arg_names ? opts->arg_names[i] : NULL, info ? &info[i] : NULL);
        merge_needs(u, em);
        if (em->err)
            u->err = em->err;
        else if (kt[i].oom)
            fail(u, TE_ERR_NOMEM, "out of memory");
        free(em->out.p);
        free(em);
    }

    te__sb o = {0};
    if (opts && opts->comment) {
        te__sb_puts(&o, opts->comment);
    } else {
        char key[512] = "";
        if (target)
            te_target_key(target, key, sizeof key);
        te__sb_printf(&o, "/*\n * %s: generated by Tessera %s (C backend).\n *\n", idents[0] ? idents[0] : "?",
                  te_version());
        for (int i = 0; i < n; i++)
            if (fs[i]->header && *fs[i]->header) {
                te__sb_comment(&o, fs[i]->header);
                te__sb_puts(&o, " *\n");
            }
        te__sb_printf(&o, " * target: %s\n */\n", target ? key : "(none given)");
    }
    emit_prelude(u, &o, opts && opts->standalone);
    for (int i = 0; i < n; i++) {
        if (i)
            te__sb_puts(&o, "\n");
        te__sb_puts(&o, kt[i].p ? kt[i].p : "");
    }

    const char *result = NULL;
    if (o.oom)
        fail(u, TE_ERR_NOMEM, "out of memory");
    if (!u->err)
        result = te__strdup(ctx, o.p ? o.p : "");
    free(o.p);
    for (int i = 0; i < n; i++)
        free(kt[i].p);
    free(kt);
    free(idents);
    free(u);
    return result;
}

const char *te_emit_c(te_ctx *ctx, const te_lowered *f, const te_target *target)
{
    if (!ctx)
        return NULL;
    if (!lowered_ok(f)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: incomplete lowered function");
        return NULL;
    }
    return te__emit_c_unit(ctx, 1, &f, target, NULL, NULL);
}
