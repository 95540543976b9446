/*
 * The machine's measured fp32 FMA peak, for `tessera bench --report`: every thread runs 12-16
 * independent chains of vector FMAs (enough to cover the FMA latency on two pipes) on the
 * widest vectors the CPU has, chosen at run time (AVX-512, AVX2+FMA, else plain SSE
 * multiply-add), and the figure is the median of several runs.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#include "tools/peak.h"

#define ITERS 20000000L

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One body per vector width: `chains` accumulators in named variables (registers: 16 of the 32
 * AVX-512 registers, 12 of the 16 AVX2/SSE ones, leaving room for the two operands), a = a * b
 * + c, ITERS times. Returns a value derived from every accumulator so nothing is optimized away;
 * the accumulators start apart, or the compiler merges identical chains. */
#define FMA_STEP(a) a = a * b + c
#define FMA_BODY(vt, lanes, chains)                                                                \
    vt b, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;                 \
    for (int l = 0; l < (lanes); l++) {                                                            \
        b[l] = 0.999999f;                                                                          \
        c[l] = 1e-7f * (float)(l + 1);                                                             \
    }                                                                                              \
    a0 = c + seed, a1 = c + 2 * seed, a2 = c + 3 * seed, a3 = c + 4 * seed;                        \
    a4 = c + 5 * seed, a5 = c + 6 * seed, a6 = c + 7 * seed, a7 = c + 8 * seed;                    \
    a8 = c - seed, a9 = c - 2 * seed, a10 = c - 3 * seed, a11 = c - 4 * seed;                      \
    a12 = c - 5 * seed, a13 = c - 6 * seed, a14 = c - 7 * seed, a15 = c - 8 * seed;                \
    for (long i = 0; i < ITERS; i++) {                                                             \
        FMA_STEP(a0), FMA_STEP(a1), FMA_STEP(a2), FMA_STEP(a3);                                    \
        FMA_STEP(a4), FMA_STEP(a5), FMA_STEP(a6), FMA_STEP(a7);                                    \
        FMA_STEP(a8), FMA_STEP(a9), FMA_STEP(a10), FMA_STEP(a11);                                  \
        if ((chains) > 12) {                                                                       \
            FMA_STEP(a12), FMA_STEP(a13), FMA_STEP(a14), FMA_STEP(a15);                            \
        }                                                                                          \
    }                                                                                              \
    vt s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));          \
    if ((chains) > 12)                                                                             \
        s += (a12 + a13) + (a14 + a15);                                                            \
    float sum = 0;                                                                                 \
    for (int l = 0; l < (lanes); l++)                                                              \
        sum += s[l];                                                                               \
    return sum

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

__attribute__((target("avx512f"), noinline)) static float fma512(float seed)
{
    FMA_BODY(v16, 16, 16);
}
__attribute__((target("avx2,fma"), noinline)) static float fma256(float seed)
{
    FMA_BODY(v8, 8, 12);
}
__attribute__((noinline)) static float fma128(float seed) { FMA_BODY(v4, 4, 12); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double te_peak_fma_gflops(int threads, int *lanes_out)
{
    __builtin_cpu_init();
    int lanes = __builtin_cpu_supports("avx512f")                                 ? 16
                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8
                                                                                  : 4;
    if (lanes_out)
        *lanes_out = lanes;
    /* An FMA is 2 flops; the SSE fallback does a multiply and an add (also 2). */
    double flops = 2.0 * (lanes == 16 ? 16 : 12) * lanes * (double)ITERS * threads;
    double t[7];
    volatile float sink = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = now_s();
#pragma omp parallel num_threads(threads)
        {
            float seed = 1e-3f * (float)(omp_get_thread_num() + 1) + 1e-5f * (float)r;
            float v = lanes == 16 ? fma512(seed) : lanes == 8 ? fma256(seed) : fma128(seed);
#pragma omp atomic
            sink += v;
        }
        t[r] = now_s() - t0;
    }
    (void)sink;
    qsort(t, 7, sizeof t[0], cmp_double);
    return flops / t[3] * 1e-9;
}
