/*
 * tests/cuda_shim/cuda_shim.h: runs the CUDA C++ the CUDA backend emits as host C++ (g++), for
 * tests/test_cuda_host.c. Included before the emitted text; the harness appends a kernel table
 * (tsh_kernels) and defines TSH_MAIN in the same file, which gives the runner's main().
 *
 * Execution model: one pthread per CUDA thread of a block, all started together; the blocks
 * of the grid run one after another on the same threads (so `__shared__` is a function-static
 * array: one per block, reused by the next block after an end-of-block barrier).
 * __syncthreads() is a barrier among the block's threads that also checks every thread reached
 * the same kind of barrier (a thread that left the kernel while others wait at __syncthreads is
 * reported, not deadlocked). Warp shuffles go through a per-warp exchange area with barriers
 * among the lanes the mask names; a mask naming a lane the block does not have, a caller outside
 * its own mask, or lanes disagreeing on the mask abort with a message; a read of a lane outside
 * the mask returns all bits set (NaN), as the GPU returns an undefined value. Vector types are
 * 16/8-byte aligned structs, so -fsanitize=alignment (in -fsanitize=undefined) reports a
 * misaligned float4/float2 access. Any check that fails prints "cuda_shim: ..." and aborts.
 *
 * What it cannot show: timing, real warp scheduling (lanes run as independent threads), the
 * GPU memory model (host memory is stronger), register or shared-memory limits.
 */
#ifndef TESSERA_TESTS_CUDA_SHIM_H
#define TESSERA_TESTS_CUDA_SHIM_H

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct tsh_uint3 {
    unsigned x, y, z;
};
struct float2 {
    float x, y;
} __attribute__((aligned(8)));
struct float4 {
    float x, y, z, w;
} __attribute__((aligned(16)));
struct int2 {
    int x, y;
} __attribute__((aligned(8)));
struct int4 {
    int x, y, z, w;
} __attribute__((aligned(16)));
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }

static thread_local tsh_uint3 threadIdx, blockIdx;
static tsh_uint3 blockDim, gridDim;

[[noreturn]] static void tsh_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tsh_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_shim: block (%u,%u,%u) thread (%u,%u,%u): ", blockIdx.x, blockIdx.y,
            blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* ---- math the emitter uses ---- */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __int_as_float(int v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static inline float __int_as_float(unsigned v) { return __int_as_float((int)v); }
static inline int __float_as_int(float f)
{
    int v;
    memcpy(&v, &f, 4);
    return v;
}
static inline double __longlong_as_double(long long v)
{
    double d;
    memcpy(&d, &v, 8);
    return d;
}
static inline double __longlong_as_double(unsigned long long v)
{
    return __longlong_as_double((long long)v);
}
/* round toward zero; out-of-range values saturate as on the GPU */
template <typename I, typename F> static inline I tsh_rz(F x, double lo, double hi)
{
    if (x != x)
        return 0;
    if ((double)x <= lo)
        return (I)lo;
    if ((double)x >= hi)
        return (I)hi;
    return (I)x;
}
static inline int __float2int_rz(float x) { return tsh_rz<int>(x, -2147483648.0, 2147483647.0); }
static inline int __double2int_rz(double x) { return tsh_rz<int>(x, -2147483648.0, 2147483647.0); }
static inline long long __float2ll_rz(float x)
{
    return tsh_rz<long long>(x, -9223372036854775808.0, 9223372036854774784.0);
}
static inline long long __double2ll_rz(double x)
{
    return tsh_rz<long long>(x, -9223372036854775808.0, 9223372036854774784.0);
}
template <typename T> static inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> static inline T max(T a, T b) { return a < b ? b : a; }
static inline long long min(long long a, int b) { return min<long long>(a, b); }
static inline long long max(long long a, int b) { return max<long long>(a, b); }
static inline long long min(int a, long long b) { return min<long long>(a, b); }
static inline long long max(int a, long long b) { return max<long long>(a, b); }

/* ---- barriers ---- */
/* A barrier of n threads whose waiters say what they wait at (kind); a completed round whose
 * waiters disagree is an error (a thread left the kernel, or threads wait at different
 * barriers). A round that does not complete within 20 s is reported as a deadlock. */
struct tsh_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
    unsigned gen;
    int kinds; /* bit per kind seen this round */
    int last_kinds;
};
enum { TSH_SYNC = 1, TSH_BLOCK_END = 2 };

static void tsh_barrier_init(tsh_barrier *b, int n)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->n = n;
    b->arrived = 0;
    b->gen = 0;
    b->kinds = 0;
    b->last_kinds = 0;
}

static int tsh_barrier_wait(tsh_barrier *b, int kind, const char *what)
{
    pthread_mutex_lock(&b->mu);
    unsigned g = b->gen;
    b->kinds |= kind;
    if (++b->arrived == b->n) {
        b->last_kinds = b->kinds;
        b->arrived = 0;
        b->kinds = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 20;
        while (b->gen == g) {
            int rc = pthread_cond_timedwait(&b->cv, &b->mu, &ts);
            if (rc == ETIMEDOUT && b->gen == g)
                tsh_fail("deadlock at %s: %d of %d threads arrived in 20 s", what, b->arrived,
                         b->n);
        }
    }
    int k = b->last_kinds;
    pthread_mutex_unlock(&b->mu);
    return k;
}

static tsh_barrier tsh_block_barrier;

static inline void __syncthreads(void)
{
    if (tsh_barrier_wait(&tsh_block_barrier, TSH_SYNC, "__syncthreads") != TSH_SYNC)
        tsh_fail("__syncthreads() not reached by every thread of the block (a thread left "
                 "the kernel while others waited at it)");
}

/* ---- warp shuffles ---- */
struct tsh_warp {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned mask; /* the mask of the shuffle in progress */
    int arrived;
    unsigned gen;
    uint64_t val[32];
    unsigned have; /* lanes that wrote val this round */
};
static tsh_warp *tsh_warps;
static int tsh_nthreads;

static inline int tsh_linear_tid(void)
{
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

static void tsh_warp_sync(tsh_warp *w, unsigned mask, const char *what)
{
    int need = __builtin_popcount(mask);
    unsigned g = w->gen;
    if (++w->arrived == need) {
        w->arrived = 0;
        w->gen++;
        pthread_cond_broadcast(&w->cv);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    while (w->gen == g) {
        int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (rc == ETIMEDOUT && w->gen == g)
            tsh_fail("deadlock at %s (mask 0x%08x): %d of %d lanes arrived in 20 s", what, mask,
                     w->arrived, need);
    }
}

/* src_of(lane) gives the lane read, or -1 for "keep my own value". */
template <typename T, typename F>
static T tsh_shfl(unsigned mask, T v, int width, const char *what, F src_of)
{
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    int tid = tsh_linear_tid(), lane = tid % 32, warp = tid / 32;
    int lanes_here = tsh_nthreads - warp * 32 < 32 ? tsh_nthreads - warp * 32 : 32;
    if (width <= 0 || width > 32 || (width & (width - 1)))
        tsh_fail("%s: width %d is not a power of two <= 32", what, width);
    if (!(mask >> lane & 1u))
        tsh_fail("%s: lane %d calls with mask 0x%08x, which does not name it", what, lane, mask);
    if (lanes_here < 32 && (mask >> lanes_here) != 0)
        tsh_fail("%s: mask 0x%08x names lanes %d..31, which this warp does not have (the "
                 "block has %d threads)",
                 what, mask, lanes_here, tsh_nthreads);
    tsh_warp *w = &tsh_warps[warp];
    pthread_mutex_lock(&w->mu);
    if (w->arrived == 0) {
        w->mask = mask;
        w->have = 0;
    } else if (w->mask != mask) {
        tsh_fail("%s: lane %d uses mask 0x%08x while other lanes use 0x%08x", what, lane, mask,
                 w->mask);
    }
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    w->val[lane] = bits;
    w->have |= 1u << lane;
    tsh_warp_sync(w, mask, what); /* every lane of the mask has written */
    int base = lane / width * width, src = src_of(lane - base, width);
    T r = v;
    if (src >= 0) {
        src += base;
        /* A lane outside the mask gives an undefined value on the GPU: poison (all bits set,
         * NaN in floats), so a result that uses it shows up in the comparison. */
        uint64_t poison = ~(uint64_t)0;
        memcpy(&r, (mask >> src & 1u) ? &w->val[src] : &poison, sizeof r);
    }
    tsh_warp_sync(w, mask, what); /* every lane has read before the next round writes */
    pthread_mutex_unlock(&w->mu);
    return r;
}

template <typename T> static T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return tsh_shfl(mask, v, width, "__shfl_down_sync",
                    [d](int l, int wd) { return l + (int)d < wd ? l + (int)d : -1; });
}
template <typename T> static T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return tsh_shfl(mask, v, width, "__shfl_up_sync",
                    [d](int l, int) { return l - (int)d >= 0 ? l - (int)d : -1; });
}
template <typename T> static T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    return tsh_shfl(mask, v, width, "__shfl_xor_sync",
                    [m](int l, int wd) { return (l ^ m) < wd ? (l ^ m) : -1; });
}
template <typename T> static T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return tsh_shfl(mask, v, width, "__shfl_sync", [src](int, int wd) { return src % wd; });
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)__shfl_sync(mask, 0, 0); }

/* ---- launching ---- */
typedef void (*tsh_call_fn)(void **args);
struct tsh_kernel {
    const char *name;
    tsh_call_fn call;
    int grid[3], block[3];
    int nparams;
    int params[64];
};

template <typename... P, size_t... I>
static void tsh_apply_(void (*fn)(P...), void **a, std::index_sequence<I...>)
{
    fn(static_cast<P>(a[I])...);
}
/* Calls kernel fn with its pointer parameters taken from a[]. */
template <typename... P> static void tsh_apply(void (*fn)(P...), void **a)
{
    tsh_apply_(fn, a, std::index_sequence_for<P...>{});
}

struct tsh_thread_arg {
    const tsh_kernel *k;
    void **args;
    int tid;
};

static void *tsh_thread_main(void *p)
{
    tsh_thread_arg *a = (tsh_thread_arg *)p;
    const tsh_kernel *k = a->k;
    threadIdx.x = (unsigned)(a->tid % k->block[0]);
    threadIdx.y = (unsigned)(a->tid / k->block[0] % k->block[1]);
    threadIdx.z = (unsigned)(a->tid / (k->block[0] * k->block[1]));
    for (int bz = 0; bz < k->grid[2]; bz++)
        for (int by = 0; by < k->grid[1]; by++)
            for (int bx = 0; bx < k->grid[0]; bx++) {
                blockIdx.x = (unsigned)bx, blockIdx.y = (unsigned)by, blockIdx.z = (unsigned)bz;
                k->call(a->args);
                if (tsh_barrier_wait(&tsh_block_barrier, TSH_BLOCK_END, "the end of the block") !=
                    TSH_BLOCK_END)
                    tsh_fail("left the kernel while other threads of the block waited at "
                             "__syncthreads()");
            }
    return NULL;
}

static void tsh_launch(const tsh_kernel *k, void **args)
{
    int nt = k->block[0] * k->block[1] * k->block[2];
    if (nt <= 0 || nt > 1024)
        tsh_fail("kernel %s: %d threads per block", k->name, nt);
    blockDim = {(unsigned)k->block[0], (unsigned)k->block[1], (unsigned)k->block[2]};
    gridDim = {(unsigned)k->grid[0], (unsigned)k->grid[1], (unsigned)k->grid[2]};
    tsh_nthreads = nt;
    tsh_barrier_init(&tsh_block_barrier, nt);
    int nw = (nt + 31) / 32;
    tsh_warps = (tsh_warp *)calloc((size_t)nw, sizeof *tsh_warps);
    pthread_t *th = (pthread_t *)calloc((size_t)nt, sizeof *th);
    tsh_thread_arg *ta = (tsh_thread_arg *)calloc((size_t)nt, sizeof *ta);
    if (!tsh_warps || !th || !ta)
        tsh_fail("out of memory");
    for (int w = 0; w < nw; w++) {
        pthread_mutex_init(&tsh_warps[w].mu, NULL);
        pthread_cond_init(&tsh_warps[w].cv, NULL);
    }
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 1 << 20);
    for (int t = 0; t < nt; t++) {
        ta[t] = {k, args, t};
        if (pthread_create(&th[t], &at, tsh_thread_main, &ta[t]) != 0)
            tsh_fail("kernel %s: cannot start thread %d of %d", k->name, t, nt);
    }
    for (int t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    pthread_attr_destroy(&at);
    free(th);
    free(ta);
    free(tsh_warps);
    tsh_warps = NULL;
}

/* The runner: argv[1] holds the buffers (int32 count; per buffer a uint64 byte size and the
 * bytes), every kernel of the table runs in order, argv[2] gets all buffers back. */
static int tsh_main(int argc, char **argv, const tsh_kernel *ks, int nk)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN OUT\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    int32_t nb = 0;
    if (!f || fread(&nb, 4, 1, f) != 1 || nb < 0 || nb > 512) {
        fprintf(stderr, "cuda_shim: cannot read %s\n", argv[1]);
        return 2;
    }
    void **bufs = (void **)calloc((size_t)nb + 1, sizeof *bufs);
    uint64_t *sz = (uint64_t *)calloc((size_t)nb + 1, sizeof *sz);
    for (int i = 0; i < nb; i++) {
        if (fread(&sz[i], 8, 1, f) != 1) {
            fprintf(stderr, "cuda_shim: %s is truncated\n", argv[1]);
            return 2;
        }
        /* cudaMalloc's alignment, and exactly the bytes asked for so ASan sees overruns */
        bufs[i] = aligned_alloc(256, (size_t)(sz[i] + 255) / 256 * 256);
        if (!bufs[i] || fread(bufs[i], 1, (size_t)sz[i], f) != (size_t)sz[i]) {
            fprintf(stderr, "cuda_shim: %s is truncated\n", argv[1]);
            return 2;
        }
    }
    fclose(f);
    for (int i = 0; i < nk; i++) {
        void *a[64];
        for (int p = 0; p < ks[i].nparams; p++) {
            if (ks[i].params[p] < 0 || ks[i].params[p] >= nb) {
                fprintf(stderr, "cuda_shim: kernel %s: parameter %d is buffer %d of %d\n",
                        ks[i].name, p, ks[i].params[p], nb);
                return 2;
            }
            a[p] = bufs[ks[i].params[p]];
        }
        tsh_launch(&ks[i], a);
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(&nb, 4, 1, f) != 1)
        return 2;
    for (int i = 0; i < nb; i++)
        if (fwrite(&sz[i], 8, 1, f) != 1 || fwrite(bufs[i], 1, (size_t)sz[i], f) != sz[i])
            return 2;
    fclose(f);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    free(bufs);
    free(sz);
    return 0;
}

#endif
