/*
 * backends/c/emit_prelude.c: what a C file has before its first kernel: the vector types and
 * the helper registry (each helper records the helpers, types and headers it uses), the
 * helpers' text (vector exp, log, tanh, erf, sigmoid as polynomials with 1-2 ulp error,
 * blends, min/max, floor division, loads, stores, streaming stores, gathers, scatters), and the
 * includes and loop-pragma macros.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/emit_impl.h"

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

/* ---- Types -------------------------------------------------------------------------------- */

const char *te__c_dt_short(te_dtype d)
{
    return d == TE_BOOL ? "i32" /* masks */ : te_dtype_str(d);
}

/* Element dtype of the vector type a value of dtype d is held in (bools are i32 masks, f16 and
 * bf16 values are f32). */
te_dtype te__c_vec_elem(te_dtype d) { return d == TE_BOOL ? TE_I32 : te_dtype_compute(d); }

/* Integer dtype of the same width as d's values (mask and bit-pattern type). */
te_dtype te__c_int_of(te_dtype d)
{
    switch (te_dtype_compute(d)) {
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

const char *te__c_vtype(emitter *em, te_dtype d, int lanes)
{
    te_dtype e = te__c_vec_elem(d);
    em->vtypes[e] |= 1u << lane_slot(lanes);
    return te__sprintf(em->ctx, "te_%sx%d", te__c_dt_short(e), lanes);
}

/* Type name of a value: scalar C type or vector typedef. */
const char *te__c_type_of(emitter *em, te_dtype d, int lanes)
{
    return lanes > 1 ? te__c_vtype(em, d, lanes) : te__c_value_ctype(d);
}

/* Helpers that read or write memory: for f16/bf16 they are their own (te_load_f16x16 converts
 * the lanes); every other helper works on values, which for f16/bf16 are f32 ones. */
static bool mem_helper(helper h)
{
    return h == H_LOAD || h == H_STORE || h == H_STREAM || h == H_GATHER || h == H_GATHER_IDX ||
           h == H_SCATTER || h == H_SCATTER_IDX;
}

/* The dtype a helper for values of dtype d is registered and named under. */
static te_dtype helper_dtype(helper h, te_dtype d)
{
    return mem_helper(h) ? d : d == TE_BOOL ? d : te_dtype_compute(d);
}

const char *te__c_half_conv(emitter *em, te_dtype d, int to_storage)
{
    em->need_half = true;
    return te_dtype_conv_fn(d, 0, to_storage);
}

/* Whether a cast to `to` from a value of `from` needs a te_cvt_* helper. */
static bool cast_needs_helper(te_dtype to, te_dtype from)
{
    if (te_dtype_is_half(to))
        return from != TE_BOOL;
    return te_dtype_is_float(from) && te_dtype_is_int(to) && to != TE_BOOL;
}

/* Whether a vector cast between bytes and 32-bit lanes goes through a helper: u8/i8 to i32
 * or f32, i32 to u8/i8, at 8 or 16 lanes. GCC 12 scalarizes chains of these when they are
 * written with __builtin_convertvector (requantize's i32 -> u8 -> i32 became 16 byte moves and
 * inserts per vector, a quarter of an int8 matmul's time; u8 -> f32 16 scalar conversions),
 * so the helpers use the widening and narrowing instructions (vpmovzxbd, vpmovdb), which it
 * keeps. Integer narrowing keeps C's modular semantics, as __builtin_convertvector. */
static bool byte_cast(te_dtype to, te_dtype from, int lanes)
{
    bool bt = to == TE_U8 || to == TE_I8, bf = from == TE_U8 || from == TE_I8;
    return (lanes == 8 || lanes == 16) &&
           ((bf && (to == TE_I32 || to == TE_F32)) || (bt && from == TE_I32));
}

const char *te__c_cast_helper(emitter *em, te_dtype to, te_dtype from, int lanes)
{
    from = te_dtype_compute(from);
    if (byte_cast(to, from, lanes)) {
        em->casts[to][from] |= 1u << lane_slot(lanes); /* no scalar helper: emit_byte_cast */
        em->need_immintrin = true;
        te__c_vtype(em, TE_I32, lanes);
        te__c_vtype(em, to, lanes);
        te__c_vtype(em, from, lanes);
        return te__sprintf(em->ctx, "te_cvt_%s_%sx%d", te_dtype_str(to), te_dtype_str(from), lanes);
    }
    if (!cast_needs_helper(to, from))
        return NULL;
    em->casts[to][from] |= 1u << lane_slot(lanes);
    em->casts[to][from] |= 1u; /* vector helpers call the scalar one */
    if (to == TE_I32 && from == TE_F32 && (lanes == 8 || lanes == 16))
        em->need_immintrin = true; /* cvtt where the ISA has it (emit_casts) */
    if (te_dtype_is_half(to))
        em->need_half = true;
    if (lanes == 1)
        return te__sprintf(em->ctx, "te_cvt_%s_%s", te_dtype_str(to), te_dtype_str(from));
    te__c_vtype(em, to, lanes);
    te__c_vtype(em, from, lanes);
    return te__sprintf(em->ctx, "te_cvt_%s_%sx%d", te_dtype_str(to), te_dtype_str(from), lanes);
}

void te__c_use_helper(emitter *em, helper h, te_dtype d, int lanes);

/* Name of a helper for dtype/lanes, marking it used: te_exp_f32x16, te_floordiv_i64. */
const char *te__c_helper_name(emitter *em, helper h, te_dtype d, int lanes)
{
    static const char *const names[H_COUNT] = {
        "splat",   "blend",  "min",    "max",        "floordiv", "floormod",    "load",
        "store",   "stream", "gather", "gather_idx", "scatter",  "scatter_idx", "fabs",
        "floor",   "ceil",   "rint",   "sqrt",       "exp",      "log",         "tanh",
        "sigmoid", "erf",    "pow",    "sfence"};
    d = helper_dtype(h, d);
    te__c_use_helper(em, h, d, lanes);
    if (h == H_SFENCE)
        return "te_sfence";
    if (lanes == 1)
        return te__sprintf(em->ctx, "te_%s_%s", names[h], te_dtype_str(d));
    te_dtype e = te_dtype_is_half(d) ? d : te__c_vec_elem(d);
    return te__sprintf(em->ctx, "te_%s_%sx%d", names[h], te__c_dt_short(e), lanes);
}

void te__c_use_helper(emitter *em, helper h, te_dtype d, int lanes)
{
    d = helper_dtype(h, d);
    te_dtype e = lanes > 1 && !te_dtype_is_half(d) ? te__c_vec_elem(d) : d;
    unsigned bit = 1u << lane_slot(lanes);
    if (em->helpers[h][e] & bit)
        return;
    em->helpers[h][e] |= bit;
    if (te_dtype_is_half(e)) {
        /* f16/bf16 loads and stores: lane loops over the scalar conversions, f32 values */
        em->need_half = true;
        te__c_vtype(em, TE_F32, lanes);
        if (h == H_GATHER_IDX || h == H_SCATTER_IDX)
            te__c_vtype(em, TE_I64, lanes);
        return;
    }
    if (lanes > 1) {
        te__c_vtype(em, e, lanes);
        te__c_vtype(em, TE_I32, lanes); /* masks */
        te__c_vtype(em, te__c_int_of(e), lanes);
    }
    bool f32v = e == TE_F32 && lanes > 1;
    switch (h) {
    case H_MIN:
    case H_MAX:
        if (lanes > 1) {
            te__c_use_helper(em, H_BLEND, e, lanes);
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
        te__c_vtype(em, TE_I64, lanes);
        break;
    case H_FLOOR:
    case H_CEIL:
    case H_LOG:
        if (f32v) {
            te__c_use_helper(em, H_SPLAT, e, lanes);
            te__c_use_helper(em, H_BLEND, e, lanes);
            if (h != H_LOG)
                em->need_immintrin = true; /* roundscale / round where the ISA has them */
        }
        break;
    case H_SQRT:
    case H_RINT:
        if (lanes > 1)
            em->need_immintrin = true;
        break;
    case H_EXP:
        if (f32v) {
            te__c_use_helper(em, H_SPLAT, e, lanes);
            te__c_use_helper(em, H_MIN, e, lanes);
            te__c_use_helper(em, H_MAX, e, lanes);
            if (lanes == 16)
                em->need_immintrin = true;
        }
        break;
    case H_TANH:
    case H_SIGMOID:
    case H_ERF:
        if (f32v) {
            te__c_use_helper(em, H_EXP, e, lanes);
            te__c_use_helper(em, H_BLEND, e, lanes);
        }
        break;
    default:
        break;
    }
}

/* ---- Helper text -------------------------------------------------------------------------- */

/* exp: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), exp(r) by a degree-6
 * polynomial in Horner form (1 + r + c2 r^2 + ... + c6 r^6, a minimax fit of the relative error
 * on [-ln2/2, ln2/2]: 2.0e-9 in exact arithmetic; evaluated in f32 with FMA the max relative
 * error of the whole function is 8.2e-8, 1.4 ulp, over [-87, 88]), then 2^n applied so that
 * subnormal results and overflow to infinity come out right. It replaced the Cephes expf
 * polynomial (degree 7 with a separate r^2 term, about 1 ulp): six multiply-adds instead of
 * eight operations, and on AVX-512 n rounded by adding 1.5 * 2^23 (a multiply-add and a
 * subtraction) instead of a multiply and vrndscaleps (two uops on port 0), 13 vector
 * operations instead of 16 in all: softmax over 4096 x 4096, whose exponentials are its
 * compute, went from 0.71 to 0.76 of the streaming copy on two cores of a Xeon. Three parts:
 * the head, the portable body, and for 16 lanes an AVX-512 body (vscalef applies 2^n in one
 * instruction) chosen when the compiler targets AVX-512. */
static const char math_exp_f32_head[] =
    "/* exp: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), exp(r) by a "
    "degree-6\n"
    " * minimax polynomial (Horner), then 2^n applied so that subnormal results and overflow to\n"
    " * infinity come out right. Max relative error 8.2e-8 (1.4 ulp). */\n"
    "static inline te_f32x$L te_exp_f32x$L(te_f32x$L x)\n"
    "{\n";
static const char math_exp_f32_body[] =
    "    x = te_min_f32x$L(te_max_f32x$L(x, te_splat_f32x$L(-104.0f)), te_splat_f32x$L(89.0f));\n"
    "    te_f32x$L t = x * 1.44269504088896341f + 0.5f;\n"
    "    te_i32x$L n = __builtin_convertvector(t, te_i32x$L);\n"
    "    n += __builtin_convertvector(n, te_f32x$L) > t; /* truncation to floor: -1 where needed "
    "*/\n"
    "    te_f32x$L nf = __builtin_convertvector(n, te_f32x$L);\n"
    "    te_f32x$L r = x - nf * 0.693359375f;\n"
    "    r = r - nf * -2.12194440e-4f;\n"
    "    te_f32x$L p = 1.384365372e-3f * r + 8.374156430e-3f;\n"
    "    p = p * r + 4.166800156e-2f;\n"
    "    p = p * r + 1.666643173e-1f;\n"
    "    p = p * r + 4.999999404e-1f;\n"
    "    p = p * r + 1.0f;\n"
    "    te_f32x$L y = p * r + 1.0f;\n"
    "    te_i32x$L n1 = n >> 1, n2 = n - n1;\n"
    "    y *= (te_f32x$L)((n1 + 127) << 23);\n"
    "    return y * (te_f32x$L)((n2 + 127) << 23);\n";
static const char math_exp_f32_avx512[] =
    "    __m512 v = _mm512_min_ps(_mm512_max_ps((__m512)x, _mm512_set1_ps(-104.0f)),\n"
    "                             _mm512_set1_ps(89.0f));\n"
    "    /* n = round(v log2(e)): 1.5 * 2^23 added leaves the integer in the low mantissa bits */\n"
    "    __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.44269504088896341f), "
    "_mm512_set1_ps(12582912.0f));\n"
    "    __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f));\n"
    "    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);\n"
    "    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);\n"
    "    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.384365372e-3f), r, "
    "_mm512_set1_ps(8.374156430e-3f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166800156e-2f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.666643173e-1f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.999999404e-1f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));\n"
    "    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));\n"
    "    return (te_f32x16)_mm512_scalef_ps(p, n); /* p 2^n, exact for subnormals and overflow "
    "*/\n";
/* The 8-lane body with AVX2 and FMA: n rounded as in the AVX-512 body (the portable body takes
 * four instructions: convert, convert back, compare, correct), the same polynomial and the
 * same two-step 2^n. n is the nearest integer to x log2(e) here and floor(x log2(e) + 1/2) in
 * the portable body; they differ only at exact ties, where either keeps |r| <= ln2 / 2. */
static const char math_exp_f32_avx2[] =
    "    __m256 v = _mm256_min_ps(_mm256_max_ps((__m256)x, _mm256_set1_ps(-104.0f)),\n"
    "                             _mm256_set1_ps(89.0f));\n"
    "    __m256 t = _mm256_fmadd_ps(v, _mm256_set1_ps(1.44269504088896341f), "
    "_mm256_set1_ps(12582912.0f));\n"
    "    __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(12582912.0f));\n"
    "    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), v);\n"
    "    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);\n"
    "    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.384365372e-3f), r, "
    "_mm256_set1_ps(8.374156430e-3f));\n"
    "    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166800156e-2f));\n"
    "    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.666643173e-1f));\n"
    "    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.999999404e-1f));\n"
    "    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));\n"
    "    __m256 y = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));\n"
    "    __m256i ni = _mm256_cvtps_epi32(n); /* exact: n is an integer */\n"
    "    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);\n"
    "    __m256i k = _mm256_set1_epi32(127);\n"
    "    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, k), "
    "23)));\n"
    "    return (te_f32x8)_mm256_mul_ps(y, "
    "_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, "
    "k), 23)));\n";
static const char math_log_f32[] =
    "/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) with f = m - "
    "1\n"
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
    "    te_f32x$L a = te_min_f32x$L((te_f32x$L)((te_i32x$L)x & 0x7fffffff), "
    "te_splat_f32x$L(4.0f));\n"
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

/* Writes the intrinsic applied to lane l as C text for lane-loop helpers. */
static void lane_loop(te__sb *b, const char *v, int lanes, const char *proto, const char *stmt)
{
    te__sb_printf(
        b,
        "static inline %s\n{\n    %s r = {0};\n    for (int l = 0; l < %d; ++l)\n        %s;\n"
        "    return r;\n}\n",
        proto, v, lanes, stmt);
}

/* lane_loop through a lane array copied into the vector at the end (stmt assigns ra[l]): gcc
 * 12 fails with an internal compiler error (store_constructor) on the vector-subscript form of
 * some conversions to 64-bit lanes with AVX-512 when they are inlined. */
static void lane_loop_arr(te__sb *b, const char *v, int lanes, const char *proto, const char *stmt)
{
    te__sb_printf(b,
                  "static inline %s\n{\n    %s r;\n    __typeof__(r[0]) ra[%d];\n"
                  "    for (int l = 0; l < %d; ++l)\n        %s;\n"
                  "    memcpy(&r, ra, sizeof r);\n    return r;\n}\n",
                  proto, v, lanes, lanes, stmt);
}

/* Writes the helper function `fn` (a whole definition: prototype, "{", portable body, "}") with
 * `native` (statements returning the result) in its place where the C compiler targets `guard`
 * (an ISA macro: __AVX512F__, __AVX__, ...): the portable body stays the fallback. */
static void emit_guarded(te__sb *b, const char *fn, const char *guard, const char *native)
{
    const char *open = strstr(fn, "{\n");
    size_t len = strlen(fn);
    if (!guard || !open || len < 2 || strcmp(fn + len - 2, "}\n") != 0) {
        te__sb_puts(b, fn);
        return;
    }
    te__sb_putn(b, fn, (size_t)(open + 2 - fn));
    te__sb_printf(b, "#if defined(%s)\n%s#else\n", guard, native);
    te__sb_putn(b, open + 2, (size_t)(fn + len - 2 - (open + 2)));
    te__sb_puts(b, "#endif\n}\n");
}

/* The body of a rounding helper ("return (V)round(x, mode)") for a vector of `bytes` bytes of
 * f32 (or f64) on x86 into native[cap]; returns the ISA macro that has the instruction
 * (__AVX512F__ roundscale, __AVX__ / __SSE4_1__ round), or NULL where none has it. */
static const char *x86_round(char *native, size_t cap, const char *V, int bytes, bool f64,
                             const char *mode)
{
    const char *guard = bytes == 64   ? "__AVX512F__"
                        : bytes == 32 ? "__AVX__"
                        : bytes == 16 ? "__SSE4_1__"
                                      : NULL;
    const char *fn = bytes == 64   ? "_mm512_roundscale_p"
                     : bytes == 32 ? "_mm256_round_p"
                                   : "_mm_round_p";
    const char *nat = bytes == 64 ? "__m512" : bytes == 32 ? "__m256" : "__m128";
    snprintf(native, cap, "    return (%s)%s%c((%s%s)x, %s | _MM_FROUND_NO_EXC);\n", V, fn,
             f64 ? 'd' : 's', nat, f64 ? "d" : "", mode);
    return guard;
}

/* The memory helpers of f16/bf16 vectors: lane loops converting each lane (gcc vectorizes the
 * bf16 ones, shifts; f16 ones stay lane by lane, correct first). The vectors are f32 values. */
static void emit_half_mem_helper(te__sb *b, helper h, te_dtype d, int lanes)
{
    const char *dn = te_dtype_str(d), *ld = te_dtype_conv_fn(d, 0, 0),
               *st = te_dtype_conv_fn(d, 0, 1);
    char V[32], proto[256], stmt[128];
    snprintf(V, sizeof V, "te_f32x%d", lanes);
    switch (h) {
    case H_LOAD:
        snprintf(proto, sizeof proto, "%s te_load_%sx%d(const uint16_t *p)", V, dn, lanes);
        snprintf(stmt, sizeof stmt, "r[l] = %s(p[l])", ld);
        break;
    case H_GATHER:
        snprintf(proto, sizeof proto, "%s te_gather_%sx%d(const uint16_t *p, int64_t stride)", V,
                 dn, lanes);
        snprintf(stmt, sizeof stmt, "r[l] = %s(p[l * stride])", ld);
        break;
    case H_GATHER_IDX:
        snprintf(proto, sizeof proto, "%s te_gather_idx_%sx%d(const uint16_t *p, te_i64x%d idx)", V,
                 dn, lanes, lanes);
        snprintf(stmt, sizeof stmt, "r[l] = %s(p[idx[l]])", ld);
        break;
    case H_STORE:
        te__sb_printf(b,
                      "static inline void te_store_%sx%d(uint16_t *p, %s v)\n{\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[l] = %s(v[l]);\n}\n",
                      dn, lanes, V, lanes, st);
        return;
    case H_STREAM:
        te__sb_printf(b,
                      "static inline void te_stream_%sx%d(int aligned, uint16_t *p, %s v)\n{\n"
                      "    (void)aligned;\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[l] = %s(v[l]);\n}\n",
                      dn, lanes, V, lanes, st);
        return;
    case H_SCATTER:
        te__sb_printf(b,
                      "static inline void te_scatter_%sx%d(uint16_t *p, int64_t stride, %s v)\n{\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[l * stride] = %s(v[l]);\n}\n",
                      dn, lanes, V, lanes, st);
        return;
    case H_SCATTER_IDX:
        te__sb_printf(b,
                      "static inline void te_scatter_idx_%sx%d(uint16_t *p, te_i64x%d idx, %s v)"
                      "\n{\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[idx[l]] = %s(v[l]);\n}\n",
                      dn, lanes, lanes, V, lanes, st);
        return;
    default:
        return;
    }
    lane_loop(b, V, lanes, proto, stmt);
}

/* The conversions between f16/bf16 bits and f32, exactly those of te_f16_to_f32 ... in
 * te/status.c (round to nearest even, overflow to infinity, f16 subnormals, quiet NaNs). */
static const char half_conversions[] =
    "/* f16 and bf16 are stored as their bits; values are floats: loads convert exactly, stores\n"
    " * round to nearest even (overflow to infinity, f16 subnormals, quiet NaNs). */\n"
    "static inline float te_f16_to_f32(uint16_t h)\n{\n"
    "    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;\n"
    "    float f;\n"
    "    if (e == 0) {\n"
    "        f = (float)m * 0x1p-24f;\n"
    "        return sign ? -f : f;\n"
    "    }\n"
    "    u = e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);\n"
    "    memcpy(&f, &u, 4);\n"
    "    return f;\n}\n"
    "static inline uint16_t te_f32_to_f16(float x)\n{\n"
    "    uint32_t u, a;\n"
    "    memcpy(&u, &x, 4);\n"
    "    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);\n"
    "    a = u & 0x7fffffffu;\n"
    "    if (a > 0x7f800000u)\n"
    "        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));\n"
    "    if (a >= 0x477ff000u)\n"
    "        return (uint16_t)(sign | 0x7c00);\n"
    "    if (a < 0x38800000u) {\n"
    "        if (a < 0x33000000u)\n"
    "            return sign;\n"
    "        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;\n"
    "        uint32_t sh = 126 - e, q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - "
    "1);\n"
    "        q += rem > half || (rem == half && (q & 1));\n"
    "        return (uint16_t)(sign | q);\n"
    "    }\n"
    "    uint32_t r = a - 0x38000000u, q = r >> 13, rem = r & 0x1fff;\n"
    "    q += rem > 0x1000 || (rem == 0x1000 && (q & 1));\n"
    "    return (uint16_t)(sign | q);\n}\n"
    "static inline float te_bf16_to_f32(uint16_t b)\n{\n"
    "    uint32_t u = (uint32_t)b << 16;\n"
    "    float f;\n"
    "    memcpy(&f, &u, 4);\n"
    "    return f;\n}\n"
    "static inline uint16_t te_f32_to_bf16(float x)\n{\n"
    "    uint32_t u;\n"
    "    memcpy(&u, &x, 4);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u)\n"
    "        return (uint16_t)((u >> 16) | 0x0040);\n"
    "    u += 0x7fffu + ((u >> 16) & 1);\n"
    "    return (uint16_t)(u >> 16);\n}\n\n";

/* The range of an integer dtype as C literals of its limits, and the float bounds of the
 * saturation: x >= hi -> max, x < lo -> min (both exact powers of two, or 0). */
static void int_limits(te_dtype d, const char **mn, const char **mx, const char **lo,
                       const char **hi)
{
    switch (d) {
    case TE_I8:
        *mn = "INT8_MIN", *mx = "INT8_MAX", *lo = "-128.0", *hi = "128.0";
        break;
    case TE_U8:
        *mn = "0", *mx = "UINT8_MAX", *lo = "0.0", *hi = "256.0";
        break;
    case TE_I32:
        *mn = "INT32_MIN", *mx = "INT32_MAX", *lo = "-2147483648.0", *hi = "2147483648.0";
        break;
    default:
        *mn = "INT64_MIN", *mx = "INT64_MAX", *lo = "-9223372036854775808.0",
        *hi = "9223372036854775808.0";
        break;
    }
}

/* A byte_cast helper: the widening or narrowing instruction where the ISA has it
 * (AVX-512F at 16 lanes, AVX2 or AVX-512VL at 8), __builtin_convertvector elsewhere. */
static void emit_byte_cast(te__sb *o, te_dtype t, te_dtype f, int lanes, const char *R,
                           const char *proto)
{
    bool wide = lanes == 16, sgn = f == TE_I8;
    char fb[512], nat[512];
    snprintf(fb, sizeof fb, "static inline %s\n{\n    return __builtin_convertvector(x, %s);\n}\n",
             proto, R);
    const char *guard;
    if (t == TE_I32 || t == TE_F32) {
        /* widen the bytes to 32-bit lanes (then convert to f32) */
        const char *ext = wide ? (sgn ? "_mm512_cvtepi8_epi32" : "_mm512_cvtepu8_epi32")
                               : (sgn ? "_mm256_cvtepi8_epi32" : "_mm256_cvtepu8_epi32");
        const char *cvf = t == TE_F32 ? (wide ? "_mm512_cvtepi32_ps" : "_mm256_cvtepi32_ps") : "";
        if (wide)
            snprintf(nat, sizeof nat,
                     "    __m128i b;\n    memcpy(&b, &x, 16);\n"
                     "    return (%s)%s(%s(b));\n",
                     R, cvf, ext);
        else
            snprintf(nat, sizeof nat,
                     "    long long q;\n    memcpy(&q, &x, 8);\n"
                     "    return (%s)%s(%s(_mm_cvtsi64_si128(q)));\n",
                     R, cvf, ext);
        guard = wide ? "__AVX512F__" : "__AVX2__";
    } else {
        /* narrow 32-bit lanes to their low bytes */
        snprintf(nat, sizeof nat,
                 "    __m128i b = %s((%s)x);\n    %s r;\n"
                 "    memcpy(&r, &b, sizeof r);\n    return r;\n",
                 wide ? "_mm512_cvtepi32_epi8" : "_mm256_cvtepi32_epi8",
                 wide ? "__m512i" : "__m256i", R);
        guard = wide ? "__AVX512F__" : "__AVX512VL__";
    }
    emit_guarded(o, fb, guard, nat);
}

/* The cast helpers te_cvt_<to>_<from>[x<lanes>] (scalar ones first: vector ones call them). */
static void emit_casts(emitter *em, te__sb *o)
{
    for (int s = 0; s < NLANES; s++)
        for (int to = 0; to < TE_DTYPE_COUNT; to++)
            for (int fr = 0; fr < TE_DTYPE_COUNT; fr++) {
                if (!(em->casts[to][fr] & (1u << s)))
                    continue;
                te_dtype t = (te_dtype)to, f = (te_dtype)fr;
                const char *tn = te_dtype_str(t), *fn = te_dtype_str(f);
                const char *fc = te__c_ctype(f);
                int lanes = 1 << s;
                if (lanes > 1) {
                    char V[32], R[32], proto[256], stmt[128];
                    snprintf(V, sizeof V, "te_%sx%d", te__c_dt_short(f), lanes);
                    snprintf(R, sizeof R, "te_%sx%d", te__c_dt_short(te__c_vec_elem(t)), lanes);
                    snprintf(proto, sizeof proto, "%s te_cvt_%s_%sx%d(%s x)", R, tn, fn, lanes, V);
                    snprintf(stmt, sizeof stmt, "ra[l] = te_cvt_%s_%s(x[l])", tn, fn);
                    if (byte_cast(t, f, lanes)) {
                        emit_byte_cast(o, t, f, lanes, R, proto);
                    } else if (t == TE_I32 && f == TE_F32 && (lanes == 16 || lanes == 8)) {
                        /* cvtt gives INT32_MIN out of range and for NaN: the lanes at or
                         * above 2^31 become INT32_MAX, NaN lanes 0 (the scalar helper's
                         * semantics), in three instructions instead of a lane loop. */
                        te__sb fnb = {0};
                        lane_loop_arr(&fnb, R, lanes, proto, stmt);
                        char nat[1024];
                        if (lanes == 16)
                            snprintf(nat, sizeof nat,
                                     "    __m512 v = (__m512)x;\n"
                                     "    __m512i r = _mm512_cvttps_epi32(v);\n"
                                     "    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, "
                                     "_mm512_set1_ps(2147483648.0f), _CMP_GE_OQ), "
                                     "_mm512_set1_epi32(INT32_MAX));\n"
                                     "    return (%s)_mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, "
                                     "v, _CMP_ORD_Q), r);\n",
                                     R);
                        else
                            snprintf(nat, sizeof nat,
                                     "    __m256 v = (__m256)x;\n"
                                     "    __m256 r = _mm256_castsi256_ps(_mm256_cvttps_epi32(v));\n"
                                     "    r = _mm256_blendv_ps(r, "
                                     "_mm256_castsi256_ps(_mm256_set1_epi32(INT32_MAX)), "
                                     "_mm256_cmp_ps(v, _mm256_set1_ps(2147483648.0f), "
                                     "_CMP_GE_OQ));\n"
                                     "    return (%s)_mm256_and_ps(r, _mm256_cmp_ps(v, v, "
                                     "_CMP_ORD_Q));\n",
                                     R);
                        if (fnb.oom)
                            o->oom = true;
                        else
                            emit_guarded(o, fnb.p, lanes == 16 ? "__AVX512F__" : "__AVX__", nat);
                        free(fnb.p);
                    } else {
                        lane_loop_arr(o, R, lanes, proto, stmt);
                    }
                } else if (te_dtype_is_half(t)) {
                    te__sb_printf(
                        o, "static inline float te_cvt_%s_%s(%s x) { return %s(%s((float)x)); }\n",
                        tn, fn, fc, te_dtype_conv_fn(t, 0, 0), te_dtype_conv_fn(t, 0, 1));
                } else {
                    const char *mn, *mx, *lo, *hi;
                    int_limits(t, &mn, &mx, &lo, &hi);
                    const char *sfx = f == TE_F32 ? "f" : "";
                    te__sb_printf(
                        o,
                        "/* truncation toward zero, saturated, NaN -> 0 */\n"
                        "static inline %s te_cvt_%s_%s(%s x)\n{\n"
                        "    return x != x ? 0 : x >= %s%s ? %s : x < %s%s ? %s : (%s)x;\n}\n",
                        te__c_ctype(t), tn, fn, fc, hi, sfx, mx, lo, sfx, mn, te__c_ctype(t));
                }
                te__sb_puts(o, "\n");
            }
}

static void emit_helper(emitter *em, te__sb *b, helper h, te_dtype d, int lanes)
{
    if (te_dtype_is_half(d)) {
        if (lanes > 1)
            emit_half_mem_helper(b, h, d, lanes);
        return;
    }
    const char *S = te__c_ctype(d);
    char V[32], I[32], M[32], Vu[40], tmp[512], proto[256];
    snprintf(V, sizeof V, "te_%sx%d", te__c_dt_short(d), lanes);
    snprintf(I, sizeof I, "te_%sx%d", te__c_dt_short(te__c_int_of(d)), lanes);
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
            te__sb_printf(b, "static inline %s te_%s_%s(%s a, %s b) { return a %s b ? a : b; }\n",
                          S, h == H_MIN ? "min" : "max", dn, S, S, h == H_MIN ? "<" : ">");
            break;
        case H_FLOORDIV:
            te__sb_printf(b,
                          "static inline %s te_floordiv_%s(%s a, %s b)\n{\n"
                          "    %s q = a / b, r = a %% b;\n"
                          "    return q - (r != 0 && (r < 0) != (b < 0));\n}\n",
                          S, dn, S, S, S);
            break;
        case H_FLOORMOD:
            te__sb_printf(b,
                          "static inline %s te_floormod_%s(%s a, %s b)\n{\n"
                          "    %s r = a %% b;\n"
                          "    return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n}\n",
                          S, dn, S, S, S);
            break;
        case H_SIGMOID:
            te__sb_printf(b,
                          "static inline %s te_sigmoid_%s(%s x)\n{\n"
                          "    %s e = %s(-%s(x)); /* exp(-|x|): no overflow, no cancellation */\n"
                          "    return (x < 0 ? e : %s) / (%s + e);\n}\n",
                          S, dn, S, S, te__emit_libm_name(TE_EXP, d),
                          te__emit_libm_name(TE_FABS, d), one, one);
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
    const char *mopen = te__c_int_of(d) == TE_I32 ? "" : "__builtin_convertvector(";
    char mclose[48];
    snprintf(mclose, sizeof mclose, "%s%s", te__c_int_of(d) == TE_I32 ? "" : ", ",
             te__c_int_of(d) == TE_I32 ? "" : M);
    if (te__c_int_of(d) != TE_I32)
        strcat(mclose, ")");

    switch (h) {
    case H_SPLAT:
        te__sb_printf(b, "static inline %s te_splat_%s(%s s) { return (%s){0} + s; }\n", V, V + 3,
                      S, V);
        break;
    case H_BLEND:
        if (te__c_int_of(d) == TE_I32)
            te__sb_printf(b,
                          "static inline %s te_blend_%s(%s m, %s a, %s b)\n{\n"
                          "    return (%s)((m & (%s)a) | (~m & (%s)b));\n}\n",
                          V, V + 3, M, V, V, V, I, I);
        else
            te__sb_printf(b,
                          "static inline %s te_blend_%s(%s m, %s a, %s b)\n{\n"
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
            te__sb_printf(b, "#if defined(%s)\n    return (%s)%s%s_%s((%s)a, (%s)b);\n#else\n",
                          guard, V, mm, nm, sfx, nat, nat);
        te__sb_printf(b, "    return te_blend_%s(%sa %s b%s, a, b);\n", V + 3, mopen,
                      h == H_MIN ? "<" : ">", mclose);
        if (mm)
            te__sb_puts(b, "#endif\n");
        te__sb_puts(b, "}\n");
        break;
    }
    case H_FLOORDIV:
        te__sb_printf(b,
                      "static inline %s te_floordiv_%s(%s a, %s b)\n{\n"
                      "    %s q = a / b, r = a %% b;\n"
                      "    return q + ((r != 0) & ((r ^ b) < 0)); /* masks are -1 */\n}\n",
                      V, V + 3, V, V, V);
        break;
    case H_FLOORMOD:
        te__sb_printf(b,
                      "static inline %s te_floormod_%s(%s a, %s b)\n{\n"
                      "    %s r = a %% b;\n"
                      "    return r + (((r != 0) & ((r ^ b) < 0)) & b);\n}\n",
                      V, V + 3, V, V, V);
        break;
    case H_LOAD:
        te__sb_printf(b, "static inline %s te_load_%s(const %s *p) { return *(const %s *)p; }\n", V,
                      V + 3, S, Vu);
        break;
    case H_STORE:
        te__sb_printf(b, "static inline void te_store_%s(%s *p, %s v) { *(%s *)p = v; }\n", V + 3,
                      S, V, Vu);
        break;
    case H_STREAM: {
        /* gcc has no __builtin_nontemporal_store: use the ISA's streaming store */
        int bytes = lanes * (int)te_dtype_size(d);
        const char *guard, *fn, *nat;
        if (bytes == 64)
            guard = "__AVX512F__",
            nat = d == TE_F32   ? "__m512"
                  : d == TE_F64 ? "__m512d"
                                : "__m512i",
            fn = d == TE_F32   ? "_mm512_stream_ps"
                 : d == TE_F64 ? "_mm512_stream_pd"
                               : "_mm512_stream_si512";
        else if (bytes == 32)
            guard = "__AVX__",
            nat = d == TE_F32   ? "__m256"
                  : d == TE_F64 ? "__m256d"
                                : "__m256i",
            fn = d == TE_F32   ? "_mm256_stream_ps"
                 : d == TE_F64 ? "_mm256_stream_pd"
                               : "_mm256_stream_si256";
        else
            guard = "__SSE2__",
            nat = d == TE_F32   ? "__m128"
                  : d == TE_F64 ? "__m128d"
                                : "__m128i",
            fn = d == TE_F32   ? "_mm_stream_ps"
                 : d == TE_F64 ? "_mm_stream_pd"
                               : "_mm_stream_si128";
        te__sb_printf(
            b,
            "/* Streaming store where p is 64-byte aligned (the flag), else a plain one. */\n"
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
        snprintf(proto, sizeof proto, "%s te_gather_%s(const %s *p, int64_t stride)", V, V + 3, S);
        lane_loop(b, V, lanes, proto, "r[l] = p[l * stride]");
        break;
    case H_GATHER_IDX:
        snprintf(proto, sizeof proto, "%s te_gather_idx_%s(const %s *p, te_i64x%d idx)", V, V + 3,
                 S, lanes);
        lane_loop(b, V, lanes, proto, "r[l] = p[idx[l]]");
        break;
    case H_SCATTER:
        te__sb_printf(b,
                      "static inline void te_scatter_%s(%s *p, int64_t stride, %s v)\n{\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[l * stride] = v[l];\n}\n",
                      V + 3, S, V, lanes);
        break;
    case H_SCATTER_IDX:
        te__sb_printf(b,
                      "static inline void te_scatter_idx_%s(%s *p, te_i64x%d idx, %s v)\n{\n"
                      "    for (int l = 0; l < %d; ++l)\n        p[idx[l]] = v[l];\n}\n",
                      V + 3, S, lanes, V, lanes);
        break;
    case H_FABS:
        if (f)
            te__sb_printf(b, "static inline %s te_fabs_%s(%s x) { return (%s)((%s)x & %s); }\n", V,
                          V + 3, V, V, I, d == TE_F32 ? "0x7fffffff" : "0x7fffffffffffffffLL");
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
            te__sb fnb = {0};
            if (!x.oom)
                sb_template(&fnb, x.p, lanes);
            char native[256];
            const char *guard =
                x86_round(native, sizeof native, V, lanes * 4, false,
                          h == H_FLOOR ? "_MM_FROUND_TO_NEG_INF" : "_MM_FROUND_TO_POS_INF");
            if (x.oom || fnb.oom)
                b->oom = true;
            else
                emit_guarded(b, fnb.p, guard, native); /* one instruction where the ISA has it */
            free(x.p);
            free(fnb.p);
        } else {
            snprintf(proto, sizeof proto, "%s te_%s_%s(%s x)", V, h == H_FLOOR ? "floor" : "ceil",
                     V + 3, V);
            snprintf(tmp, sizeof tmp, "r[l] = %s(x[l])",
                     te__emit_libm_name(h == H_FLOOR ? TE_FLOOR : TE_CEIL, d));
            lane_loop(b, V, lanes, proto, tmp);
        }
        break;
    case H_RINT: {
        /* Ties to even in one instruction where the ISA has it, else rint lane by lane. */
        te__sb fnb = {0};
        snprintf(proto, sizeof proto, "%s te_rint_%s(%s x)", V, V + 3, V);
        snprintf(tmp, sizeof tmp, "r[l] = %s(x[l])", te__emit_libm_name(TE_RINT, d));
        lane_loop(&fnb, V, lanes, proto, tmp);
        char native[256] = "";
        const char *guard = d == TE_F32 || d == TE_F64
                                ? x86_round(native, sizeof native, V, lanes * (int)te_dtype_size(d),
                                            d == TE_F64, "_MM_FROUND_TO_NEAREST_INT")
                                : NULL;
        if (fnb.oom)
            b->oom = true;
        else
            emit_guarded(b, fnb.p, guard, native);
        free(fnb.p);
        break;
    }
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
            fn = d == TE_F32 ? "_mm_sqrt_ps" : "_mm_sqrt_pd",
            nat = d == TE_F32 ? "__m128" : "__m128d";
        te__sb_printf(b, "static inline %s te_sqrt_%s(%s x)\n{\n", V, V + 3, V);
        if (guard)
            te__sb_printf(b, "#if defined(%s)\n    return (%s)%s((%s)x);\n#else\n", guard, V, fn,
                          nat);
        te__sb_printf(
            b,
            "    %s r = {0};\n    for (int l = 0; l < %d; ++l)\n        r[l] = %s(x[l]);\n"
            "    return r;\n",
            V, lanes, te__emit_libm_name(TE_SQRT, d));
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
            if (lanes == 16 || lanes == 8) {
                te__sb_puts(b, lanes == 16 ? "#if defined(__AVX512F__)\n"
                                           : "#if defined(__AVX2__) && defined(__FMA__)\n");
                te__sb_puts(b, lanes == 16 ? math_exp_f32_avx512 : math_exp_f32_avx2);
                te__sb_puts(b, "#else\n");
            }
            sb_template(b, math_exp_f32_body, lanes);
            if (lanes == 16 || lanes == 8)
                te__sb_puts(b, "#endif\n");
            te__sb_puts(b, "}\n");
        } else if (d == TE_F32) {
            const char *t = h == H_LOG    ? math_log_f32
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
        snprintf(tmp, sizeof tmp, "r[l] = %s(x[l], y[l])", te__emit_libm_name(TE_POW, d));
        lane_loop(b, V, lanes, proto, tmp);
        break;
    default:
        break;
    }
}

/* ---- The prelude --------------------------------------------------------------------------- */

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
            const char *n = te__c_dt_short((te_dtype)d);
            te__sb_printf(o, "typedef %s te_%sx%d __attribute__((vector_size(%d)));\n",
                          te__c_ctype((te_dtype)d), n, lanes, bytes);
            if (em->vtypes_u[d] & bit)
                te__sb_printf(o,
                              "typedef %s te_%sx%du __attribute__((vector_size(%d), aligned(%zu), "
                              "may_alias));\n",
                              te__c_ctype((te_dtype)d), n, lanes, bytes,
                              te_dtype_size((te_dtype)d));
            any = true;
        }
    }
    if (any)
        te__sb_puts(o, "\n");
}

static void emit_helpers(emitter *em, te__sb *o)
{
    if (em->need_half)
        te__sb_puts(o, half_conversions);
    emit_casts(em, o);
    for (int h = 0; h < H_COUNT; h++)
        for (int d = 0; d < TE_DTYPE_COUNT; d++)
            for (int s = 0; s < NLANES; s++)
                if (em->helpers[h][d] & (1u << s)) {
                    emit_helper(em, o, (helper)h, (te_dtype)d, 1 << s);
                    te__sb_puts(o, "\n");
                }
}

/* Includes, macros, vector typedefs and inline helpers: everything before the first kernel. */
void te__c_emit_prelude(emitter *u, te__sb *o, bool standalone)
{
    te__sb_puts(o, "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n"
                   "#include <stdlib.h>\n#include <string.h>\n"
                   "#ifdef _OPENMP\n#include <omp.h>\n#endif\n");
    if (u->need_immintrin)
        te__sb_puts(
            o, "#if defined(__x86_64__) || defined(__i386__)\n#include <immintrin.h>\n#endif\n");
    bool vectors = false;
    for (int d = 0; d < TE_DTYPE_COUNT; d++)
        vectors |= u->vtypes[d] != 0;
    if (vectors)
        te__sb_puts(o,
                    "#if defined(__clang__)\n"
                    "#pragma clang diagnostic ignored \"-Wunknown-warning-option\"\n"
                    "#pragma clang diagnostic ignored \"-Wpsabi\" /* vector arguments */\n"
                    "/* helpers that only some ISA branches call (gcc does not warn) */\n"
                    "#pragma clang diagnostic ignored \"-Wunused-function\"\n"
                    "#elif defined(__GNUC__)\n"
                    "#pragma GCC diagnostic ignored \"-Wpsabi\" /* vector arguments */\n#endif\n");
    if (standalone)
        te__sb_puts(o, "#if defined(__GNUC__) && !defined(__clang__)\n"
                       "/* Registers of a tile are set and read under the same tail guards. */\n"
                       "#pragma GCC diagnostic ignored \"-Wmaybe-uninitialized\"\n#endif\n");
    if (u->uses_omp || u->uses_unroll)
        te__sb_puts(o, "\n/* Loop pragmas: OpenMP ones vanish when compiled without OpenMP. */\n"
                       "#define TE_PRAGMA(x) _Pragma(#x)\n");
    if (u->uses_omp)
        te__sb_puts(o,
                    "#ifdef _OPENMP\n#define TE_OMP(x) TE_PRAGMA(omp x)\n#else\n#define TE_OMP(x)\n"
                    "#endif\n");
    if (u->uses_unroll)
        te__sb_puts(o, "#if defined(__clang__)\n#define TE_UNROLL(n) TE_PRAGMA(unroll n)\n"
                       "#elif defined(__GNUC__)\n#define TE_UNROLL(n) TE_PRAGMA(GCC unroll n)\n"
                       "#else\n#define TE_UNROLL(n)\n#endif\n");
    if (u->uses_heap)
        te__sb_puts(
            o, "\n/* 64-byte aligned scratch from malloc (C99 has no aligned_alloc): the\n"
               " * byte before the block records the offset back to malloc's pointer. */\n"
               "static inline void *te_alloc64(size_t n)\n{\n"
               "    unsigned char *p = (unsigned char *)malloc(n + 64), *a;\n"
               "    if (!p)\n        return NULL;\n"
               "    a = p + 64 - ((uintptr_t)p & 63);\n"
               "    a[-1] = (unsigned char)(a - p);\n    return a;\n}\n\n"
               "static inline void te_free64(void *a)\n{\n"
               "    if (a)\n        free((unsigned char *)a - ((unsigned char *)a)[-1]);\n}\n");
    if (u->nscratch > 0) {
        te__sb_puts(
            o,
            "\n/* The kernels' whole-call buffers, kept between calls: a block of 128 KiB or more\n"
            " * freed at the end of every call goes back to the OS (glibc unmaps or trims it),\n"
            " * and the next call pays its page faults again. One slot per allocation site,\n"
            " * taken and given back with atomic exchanges, so that concurrent calls each get a\n"
            " * block of their own; the blocks are freed when this code is unloaded or the\n"
            " * program ends. */\n");
        char line[96];
        snprintf(line, sizeof line, "static void *te_scratch[%d];\n\n", u->nscratch);
        te__sb_puts(o, line);
        te__sb_puts(
            o,
            "static inline void *te_scratch_take(int site, size_t n)\n{\n"
            "    void *p = __atomic_exchange_n(&te_scratch[site], (void *)0, __ATOMIC_ACQUIRE);\n"
            "    return p ? p : te_alloc64(n);\n}\n\n"
            "static inline void te_scratch_keep(int site, void *p)\n{\n"
            "    te_free64(__atomic_exchange_n(&te_scratch[site], p, __ATOMIC_ACQ_REL));\n}\n\n"
            "__attribute__((destructor)) static void te_scratch_release(void)\n{\n"
            "    for (size_t i = 0; i < sizeof te_scratch / sizeof te_scratch[0]; i++) {\n"
            "        te_free64(te_scratch[i]);\n        te_scratch[i] = (void *)0;\n    }\n}\n");
    }
    te__sb_puts(o, "\n");
    emit_typedefs(u, o);
    emit_helpers(u, o);
}
