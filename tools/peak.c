/*
 * The machine's measured peaks. FMA: every thread runs 12-16 independent chains of FMAs
 * (enough to cover the FMA latency on two pipes) on vectors of the requested ISA, chosen at run
 * time, and the figure is the median of several runs. Copy: every thread memcpy's its share of
 * a buffer much larger than the caches, median of several runs.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/peak.h"

#include "tools/bl_vec.h"

#define DEFAULT_ITERS 20000000L

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One body per type: `chains` accumulators in named variables (registers: 16 of the 32
 * AVX-512 registers, 12 of the 16 AVX2/SSE ones, leaving room for the two operands), a = a * b
 * + c, iters times. Returns a value derived from every accumulator so nothing is optimized
 * away; the accumulators start apart, or the compiler merges identical chains. `init(x, v)`
 * sets every lane of x to v, `lanesum(s)` adds the lanes of s. */
#define FMA_STEP(a) a = a * b + c
#define FMA_BODY(vt, chains, init, lanesum)                                                        \
    vt b, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;                 \
    init(b, 0.999999);                                                                             \
    init(c, 1e-7);                                                                                 \
    a0 = c + seed, a1 = c + 2 * seed, a2 = c + 3 * seed, a3 = c + 4 * seed;                        \
    a4 = c + 5 * seed, a5 = c + 6 * seed, a6 = c + 7 * seed, a7 = c + 8 * seed;                    \
    a8 = c - seed, a9 = c - 2 * seed, a10 = c - 3 * seed, a11 = c - 4 * seed;                      \
    a12 = c - 5 * seed, a13 = c - 6 * seed, a14 = c - 7 * seed, a15 = c - 8 * seed;                \
    for (long i = 0; i < iters; i++) {                                                             \
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
    return lanesum(s)

#define VINIT(x, v)                                                                                \
    do {                                                                                           \
        for (size_t l_ = 0; l_ < sizeof(x) / sizeof(x[0]); l_++)                                   \
            x[l_] = (v) * (1.0 + 1e-3 * (double)l_);                                               \
    } while (0)
#define SINIT(x, v) (x = (v))
#define VSUM(s)                                                                                    \
    ({                                                                                             \
        double t_ = 0;                                                                             \
        for (size_t l_ = 0; l_ < sizeof(s) / sizeof(s[0]); l_++)                                   \
            t_ += (double)s[l_];                                                                   \
        t_;                                                                                        \
    })
#define SSUM(s) ((double)(s))

typedef float f16v __attribute__((vector_size(64)));
typedef float f8v __attribute__((vector_size(32)));
typedef float f4v __attribute__((vector_size(16)));
typedef double d8v __attribute__((vector_size(64)));
typedef double d4v __attribute__((vector_size(32)));
typedef double d2v __attribute__((vector_size(16)));

#define AVX512 __attribute__((target("avx512f"), noinline))
#define AVX2 __attribute__((target("avx2,fma"), noinline))
#define PLAIN __attribute__((noinline))

AVX512 static double f32_512(float seed, long iters) { FMA_BODY(f16v, 16, VINIT, VSUM); }
AVX2 static double f32_256(float seed, long iters) { FMA_BODY(f8v, 12, VINIT, VSUM); }
PLAIN static double f32_128(float seed, long iters) { FMA_BODY(f4v, 12, VINIT, VSUM); }
AVX2 static double f32_1(float seed, long iters) { FMA_BODY(float, 12, SINIT, SSUM); }
AVX512 static double f64_512(double seed, long iters) { FMA_BODY(d8v, 16, VINIT, VSUM); }
AVX2 static double f64_256(double seed, long iters) { FMA_BODY(d4v, 12, VINIT, VSUM); }
PLAIN static double f64_128(double seed, long iters) { FMA_BODY(d2v, 12, VINIT, VSUM); }
AVX2 static double f64_1(double seed, long iters) { FMA_BODY(double, 12, SINIT, SSUM); }
/* The scalar bodies above use FMA instructions; a CPU without AVX2/FMA runs these. */
PLAIN static double f32_1_plain(float seed, long iters) { FMA_BODY(float, 12, SINIT, SSUM); }
PLAIN static double f64_1_plain(double seed, long iters) { FMA_BODY(double, 12, SINIT, SSUM); }

static int has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const char *te_peak_isa_name(te_peak_isa isa)
{
    static const char *const names[] = {"scalar", "sse", "avx2", "avx512"};
    return isa >= 0 && isa < TE_PEAK_ISA_COUNT ? names[isa] : "?";
}

te_peak_isa te_peak_widest_isa(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? TE_PEAK_AVX512
           : has_avx2()                      ? TE_PEAK_AVX2
                                             : TE_PEAK_SSE;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double one_run(int is_f64, te_peak_isa isa, long iters, double seed)
{
    int fma = has_avx2();
    if (is_f64) {
        switch (isa) {
        case TE_PEAK_AVX512:
            return f64_512(seed, iters);
        case TE_PEAK_AVX2:
            return f64_256(seed, iters);
        case TE_PEAK_SSE:
            return f64_128(seed, iters);
        default:
            return fma ? f64_1(seed, iters) : f64_1_plain(seed, iters);
        }
    }
    switch (isa) {
    case TE_PEAK_AVX512:
        return f32_512((float)seed, iters);
    case TE_PEAK_AVX2:
        return f32_256((float)seed, iters);
    case TE_PEAK_SSE:
        return f32_128((float)seed, iters);
    default:
        return fma ? f32_1((float)seed, iters) : f32_1_plain((float)seed, iters);
    }
}

double te_peak_fma(int is_f64, te_peak_isa isa, int threads, long iters, int runs)
{
    if (isa < 0 || isa > te_peak_widest_isa())
        return -1;
    if (threads < 1)
        threads = 1;
    if (iters <= 0)
        iters = DEFAULT_ITERS;
    if (runs <= 0)
        runs = 7;
    runs |= 1;
    static const int lanes32[] = {1, 4, 8, 16};
    int lanes = lanes32[isa] / (is_f64 && isa != TE_PEAK_SCALAR ? 2 : 1);
    int chains = isa == TE_PEAK_AVX512 ? 16 : 12;
    /* An FMA is 2 flops; without FMA instructions a multiply and an add (also 2). */
    double flops = 2.0 * chains * lanes * (double)iters * threads;
    double *t = malloc(sizeof *t * (size_t)runs);
    if (!t)
        return -1;
    volatile double sink = 0;
    /* Untimed: starts the thread team and brings the cores up to speed. */
#pragma omp parallel num_threads(threads)
    {
        double v = one_run(is_f64, isa, iters / 8 + 1, 1e-3);
#pragma omp atomic
        sink += v;
    }
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
#pragma omp parallel num_threads(threads)
        {
            double seed = 1e-3 * (omp_get_thread_num() + 1) + 1e-5 * r;
            double v = one_run(is_f64, isa, iters, seed);
#pragma omp atomic
            sink += v;
        }
        t[r] = now_s() - t0;
    }
    (void)sink;
    qsort(t, (size_t)runs, sizeof t[0], cmp_double);
    double med = t[runs / 2];
    free(t);
    return med > 0 ? flops / med * 1e-9 : -1;
}

double te_peak_fma_gflops(int threads, int *lanes_out)
{
    te_peak_isa isa = te_peak_widest_isa();
    if (lanes_out)
        *lanes_out = isa == TE_PEAK_AVX512 ? 16 : isa == TE_PEAK_AVX2 ? 8 : 4;
    return te_peak_fma(0, isa, threads, 0, 7);
}

double te_peak_copy_gbps(int threads, size_t bytes, int runs)
{
    if (threads < 1)
        threads = 1;
    if (bytes == 0)
        bytes = (size_t)256 << 20;
    if (runs <= 0)
        runs = 7;
    runs |= 1;
    /* Every thread's share is a whole number of pages, so shares never split a page. */
    size_t share = (bytes + (size_t)threads * 4096 - 1) / ((size_t)threads * 4096) * 4096;
    size_t total = share * (size_t)threads;
    char *src = aligned_alloc(4096, total), *dst = aligned_alloc(4096, total);
    double *t = malloc(sizeof *t * (size_t)(runs + 1));
    if (!src || !dst || !t) {
        free(src);
        free(dst);
        free(t);
        return -1;
    }
    /* Run 0 touches the pages (each thread its own share, as in the timed runs) and is not
     * counted. memcpy and the streaming copy alternate (copy 0 and 1); the faster median
     * counts. */
    double med = INFINITY;
    for (int copy = 0; copy < 2; copy++) {
        for (int r = 0; r <= runs; r++) {
            double t0 = now_s();
#pragma omp parallel num_threads(threads)
            {
                size_t off = share * (size_t)omp_get_thread_num();
                if (r == 0 && copy == 0)
                    memset(src + off, 1 + omp_get_thread_num(), share);
                if (copy)
                    te_bl_stream_copy(dst + off, src + off, share);
                else
                    memcpy(dst + off, src + off, share);
            }
            t[r] = now_s() - t0;
        }
        qsort(t + 1, (size_t)runs, sizeof t[0], cmp_double);
        med = t[1 + runs / 2] < med ? t[1 + runs / 2] : med;
    }
    volatile char sink = dst[total - 1];
    (void)sink;
    free(src);
    free(dst);
    free(t);
    return med > 0 ? 2.0 * (double)total / med * 1e-9 : -1;
}
