/*
 * tools/bl_vec.c: the baselines' vectorized passes (tools/bl_vec.h).
 *
 * Each pass is written once, over 16-lane GCC vectors (v16f), in an always_inline body; three
 * wrappers compile that body for AVX-512, for AVX2 + FMA and for the baseline x86-64 (SSE2,
 * four 4-lane operations per v16f), and a dispatcher picks the widest the CPU runs. Lanes past
 * a row's or array's end are done by the scalar forms, which compute the same functions.
 */
#include "tools/bl_vec.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* The v16f helpers are always inlined, never called across an ABI boundary: GCC's note that a
 * 64-byte vector argument's ABI differs without AVX-512 does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

#define AI static inline __attribute__((always_inline))

AI v16f ld(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

AI void st(float *p, v16f v) { memcpy(p, &v, sizeof v); }

AI v16f splat(float s) { return (v16f){0} + s; }

AI v16f blend(v16i m, v16f a, v16f b) { return (v16f)((m & (v16i)a) | (~m & (v16i)b)); }

AI v16f vmax(v16f a, v16f b) { return blend(a > b, a, b); }

AI float hmax(v16f v)
{
    float m = v[0];
    for (int l = 1; l < 16; l++)
        m = v[l] > m ? v[l] : m;
    return m;
}

AI float hsum(v16f v)
{
    float s = 0;
    for (int l = 0; l < 16; l++)
        s += v[l];
    return s;
}

/* exp: x = n ln2 + r (Cody-Waite), exp(r) by the degree-6 minimax polynomial of the kernels
 * Tessera generates (backends/c/emit_prelude.c: Horner, 1.4 ulp), 2^n in two exponent steps
 * (exact down to the subnormals); x clamped to [-104, 89]. The baselines' exponentials cost
 * what ours do, so that a fused kernel's ratio does not come from a cheaper exp. */
AI v16f vexp(v16f x)
{
    x = blend(x < -104.0f, splat(-104.0f), x);
    x = blend(x > 89.0f, splat(89.0f), x);
    v16f t = x * 1.44269504088896341f + 0.5f;
    v16i n = __builtin_convertvector(t, v16i);
    n += __builtin_convertvector(n, v16f) > t; /* truncation to floor: -1 where needed */
    v16f nf = __builtin_convertvector(n, v16f);
    v16f r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    v16f p = 1.384365372e-3f * r + 8.374156430e-3f;
    p = p * r + 4.166800156e-2f;
    p = p * r + 1.666643173e-1f;
    p = p * r + 4.999999404e-1f;
    p = p * r + 1.0f;
    v16f y = p * r + 1.0f;
    v16i n1 = n >> 1, n2 = n - n1;
    y *= (v16f)((n1 + 127) << 23);
    return y * (v16f)((n2 + 127) << 23);
}

/* erf by Abramowitz-Stegun 7.1.26 (absolute error 1.5e-7), odd. */
AI v16f verf(v16f x)
{
    v16i neg = x < 0.0f;
    v16f a = blend(neg, -x, x);
    v16f t = 1.0f / (1.0f + 0.3275911f * a);
    v16f p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
              0.254829592f) *
             t;
    v16f e = 1.0f - p * vexp(-(a * a));
    return blend(neg, -e, e);
}

static float serf(float x)
{
    float a = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * a);
    float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
               0.254829592f) *
              t;
    float e = 1.0f - p * expf(-a * a);
    return x < 0 ? -e : e;
}

AI v16f vact(te_bl_act act, v16f v)
{
    switch (act) {
    case TE_BL_RELU:
        return vmax(v, splat(0.0f));
    case TE_BL_GELU:
        return 0.5f * v * (1.0f + verf(v * 0.70710678f));
    case TE_BL_SIGMOID:
        return 1.0f / (1.0f + vexp(-v));
    case TE_BL_TANH:
        return 1.0f - 2.0f / (vexp(2.0f * v) + 1.0f);
    case TE_BL_SILU:
        return v / (1.0f + vexp(-v));
    case TE_BL_GELU_TANH: {
        v16f z = 0.7978845608f * (v + 0.044715f * v * v * v);
        return 0.5f * v * (2.0f - 2.0f / (vexp(2.0f * z) + 1.0f));
    }
    default:
        return v;
    }
}

static float sact(te_bl_act act, float v)
{
    switch (act) {
    case TE_BL_RELU:
        return v > 0 ? v : 0;
    case TE_BL_GELU:
        return 0.5f * v * (1.0f + serf(v * 0.70710678f));
    case TE_BL_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    case TE_BL_TANH:
        return tanhf(v);
    case TE_BL_SILU:
        return v / (1.0f + expf(-v));
    case TE_BL_GELU_TANH:
        return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    default:
        return v;
    }
}

/* ---- The bodies ------------------------------------------------------------------------ */

AI void silu_mul_body(float *y, const float *g, const float *u, size_t n)
{
    size_t n16 = n / 16 * 16;
    for (size_t i = 0; i < n16; i += 16) {
        v16f vg = ld(g + i);
        st(y + i, vg / (1.0f + vexp(-vg)) * ld(u + i));
    }
    for (size_t i = n16; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

AI void act_body(te_bl_act act, const float *x, float *y, size_t n)
{
    size_t n16 = n / 16 * 16;
    for (size_t i = 0; i < n16; i += 16)
        st(y + i, vact(act, ld(x + i)));
    for (size_t i = n16; i < n; i++)
        y[i] = sact(act, x[i]);
}

AI void softmax_body(const float *x, float *o, int64_t n, float scale)
{
    int64_t n16 = n / 16 * 16;
    v16f vm = splat(-INFINITY);
    for (int64_t j = 0; j < n16; j += 16)
        vm = vmax(vm, ld(x + j));
    float m = hmax(vm);
    for (int64_t j = n16; j < n; j++)
        m = x[j] > m ? x[j] : m;
    if (m == -INFINITY) { /* fully masked */
        memset(o, 0, sizeof *o * (size_t)n);
        return;
    }
    float sm = scale * m;
    v16f vs = splat(0.0f);
    for (int64_t j = 0; j < n16; j += 16) {
        v16f xv = ld(x + j);
        v16f e = blend(xv == -INFINITY, splat(0.0f), vexp(xv * scale - sm)); /* masked: 0 */
        st(o + j, e);
        vs += e;
    }
    float sum = hsum(vs);
    for (int64_t j = n16; j < n; j++)
        sum += o[j] = expf(x[j] * scale - sm);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n16; j += 16)
        st(o + j, ld(o + j) * inv);
    for (int64_t j = n16; j < n; j++)
        o[j] *= inv;
}

AI void layer_norm_body(const float *x, float *o, int64_t n, double eps, const float *g,
                        const float *b)
{
    int64_t n16 = n / 16 * 16;
    v16f vs = splat(0.0f);
    for (int64_t j = 0; j < n16; j += 16)
        vs += ld(x + j);
    float mean = hsum(vs);
    for (int64_t j = n16; j < n; j++)
        mean += x[j];
    mean /= (float)n;
    v16f vv = splat(0.0f);
    for (int64_t j = 0; j < n16; j += 16) {
        v16f d = ld(x + j) - mean;
        vv += d * d;
    }
    float var = hsum(vv);
    for (int64_t j = n16; j < n; j++)
        var += (x[j] - mean) * (x[j] - mean);
    float inv = 1.0f / sqrtf(var / (float)n + (float)eps);
    for (int64_t j = 0; j < n16; j += 16) {
        v16f y = (ld(x + j) - mean) * inv;
        if (g)
            y *= ld(g + j);
        if (b)
            y += ld(b + j);
        st(o + j, y);
    }
    for (int64_t j = n16; j < n; j++)
        o[j] = (x[j] - mean) * inv * (g ? g[j] : 1.0f) + (b ? b[j] : 0.0f);
}

/* ---- One wrapper per target, and the dispatch ------------------------------------------- */

#define VARIANTS(name, params, args)                                                               \
    __attribute__((target("avx512f"))) static void name##_avx512 params { name##_body args; }      \
    __attribute__((target("avx2,fma"))) static void name##_avx2 params { name##_body args; }       \
    static void name##_base params { name##_body args; }

VARIANTS(silu_mul, (float *y, const float *g, const float *u, size_t n), (y, g, u, n))
VARIANTS(act, (te_bl_act a, const float *x, float *y, size_t n), (a, x, y, n))
VARIANTS(softmax, (const float *x, float *o, int64_t n, float scale), (x, o, n, scale))
VARIANTS(layer_norm,
         (const float *x, float *o, int64_t n, double eps, const float *g, const float *b),
         (x, o, n, eps, g, b))

/* 2: AVX-512, 1: AVX2 + FMA, 0: baseline x86-64. The entry points call it once before their
 * parallel loops, so that the threads only read the cached value. */
static int isa(void)
{
    static int k = -1;
    if (k < 0)
        k = __builtin_cpu_supports("avx512f")                                 ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                              : 0;
    return k;
}

#define DISPATCH(name, args)                                                                       \
    do {                                                                                           \
        int k_ = isa();                                                                            \
        if (k_ == 2)                                                                               \
            name##_avx512 args;                                                                    \
        else if (k_ == 1)                                                                          \
            name##_avx2 args;                                                                      \
        else                                                                                       \
            name##_base args;                                                                      \
    } while (0)

/* Elementwise passes go over the threads in chunks of 4096 floats. */
#define CHUNK 4096

void te_bl_silu_mul(float *y, const float *g, const float *u, size_t n)
{
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
    (void)isa();
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        size_t lo = (size_t)c * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        DISPATCH(silu_mul, (y + lo, g + lo, u + lo, len));
    }
}

void te_bl_activation(te_bl_act act, const float *x, float *y, size_t n)
{
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
    (void)isa();
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        size_t lo = (size_t)c * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        DISPATCH(act, (act, x + lo, y + lo, len));
    }
}

void te_bl_softmax_rows(const float *x, float *o, int64_t rows, int64_t n, float scale)
{
    (void)isa();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        DISPATCH(softmax, (x + r * n, o + r * n, n, scale));
}

void te_bl_layer_norm_rows(const float *x, float *o, int64_t rows, int64_t n, double eps,
                           const float *g, const float *b)
{
    (void)isa();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        DISPATCH(layer_norm, (x + r * n, o + r * n, n, eps, g, b));
}

/* ---- Streaming copy ----------------------------------------------------------------------- */

/* n bytes with non-temporal (streaming) stores: the destination's lines are written without
 * being read first (a cached store reads each line before writing it, a third stream of
 * traffic), which is what a kernel with streaming stores competes with. 64-byte blocks where
 * both pointers are 64-byte aligned (AVX-512) or 32-byte blocks of 32-byte aligned ones
 * (AVX), memcpy for the rest and on CPUs with neither. */
__attribute__((target("avx512f"))) static size_t stream_avx512(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m512 a = _mm512_load_ps((const float *)(s + i)),
               b = _mm512_load_ps((const float *)(s + i + 64));
        __m512 c = _mm512_load_ps((const float *)(s + i + 128)),
               e = _mm512_load_ps((const float *)(s + i + 192));
        _mm512_stream_ps((float *)(d + i), a);
        _mm512_stream_ps((float *)(d + i + 64), b);
        _mm512_stream_ps((float *)(d + i + 128), c);
        _mm512_stream_ps((float *)(d + i + 192), e);
    }
    _mm_sfence();
    return i;
}

__attribute__((target("avx"))) static size_t stream_avx(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256 a = _mm256_load_ps((const float *)(s + i)),
               b = _mm256_load_ps((const float *)(s + i + 32));
        __m256 c = _mm256_load_ps((const float *)(s + i + 64)),
               e = _mm256_load_ps((const float *)(s + i + 96));
        _mm256_stream_ps((float *)(d + i), a);
        _mm256_stream_ps((float *)(d + i + 32), b);
        _mm256_stream_ps((float *)(d + i + 64), c);
        _mm256_stream_ps((float *)(d + i + 96), e);
    }
    _mm_sfence();
    return i;
}

void te_bl_stream_copy(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    size_t done = 0;
    uintptr_t al = (uintptr_t)d | (uintptr_t)s;
    if (isa() == 2 && al % 64 == 0)
        done = stream_avx512(d, s, n);
    else if (__builtin_cpu_supports("avx") && al % 32 == 0)
        done = stream_avx(d, s, n);
    memcpy(d + done, s + done, n - done);
}

void te_bl_stream_copy_par(void *dst, const void *src, size_t n)
{
    enum { BLOCK = 64 << 10 }; /* a multiple of 256, so every block start stays aligned */
    long blocks = (long)((n + BLOCK - 1) / BLOCK);
    (void)isa();
#pragma omp parallel for schedule(static)
    for (long b = 0; b < blocks; b++) {
        size_t lo = (size_t)b * BLOCK, len = n - lo < BLOCK ? n - lo : BLOCK;
        te_bl_stream_copy((char *)dst + lo, (const char *)src + lo, len);
    }
}
