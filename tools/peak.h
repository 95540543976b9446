/* The machine's measured peaks (tools/peak.c): FMA throughput per dtype and vector ISA, and
 * copy bandwidth, for `tessera target --measure`, `tessera bench --report` and the roofline. */
#ifndef TESSERA_TOOLS_PEAK_H
#define TESSERA_TOOLS_PEAK_H

#include <stddef.h>

/* Vector ISAs of the FMA measurement, narrowest first. */
typedef enum {
    TE_PEAK_SCALAR, /* one lane (scalar FMA instructions where the CPU has them) */
    TE_PEAK_SSE,    /* 128-bit vectors */
    TE_PEAK_AVX2,   /* 256-bit vectors with FMA */
    TE_PEAK_AVX512, /* 512-bit vectors (AVX-512F) */
    TE_PEAK_ISA_COUNT
} te_peak_isa;

/* "scalar", "sse", "avx2", "avx512". */
const char *te_peak_isa_name(te_peak_isa isa);
/* The widest ISA this CPU runs. */
te_peak_isa te_peak_widest_isa(void);

/* Measured FMA throughput in GFLOP/s (an FMA is 2 flops) of dtype f32 (is_f64 = 0) or f64 on
 * `threads` OpenMP threads with `isa`: the median of `runs` runs (odd; 7 when <= 0) of 12-16
 * independent FMA chains per thread, `iters` steps each (0 = 20 million, about a second per
 * run; tests pass a few thousand). Returns a negative value when the CPU lacks isa. */
double te_peak_fma(int is_f64, te_peak_isa isa, int threads, long iters, int runs);

/* Measured fp32 FMA throughput in GFLOP/s on `threads` OpenMP threads, with the widest vectors
 * the CPU supports (their lanes in *lanes_out, may be NULL): te_peak_fma(0, widest, threads,
 * 0, 7). Takes about a second per run on a 2-core machine. */
double te_peak_fma_gflops(int threads, int *lanes_out);

/* Measured copy bandwidth in GB/s (bytes read plus bytes written, per second) of a copy of
 * `bytes` bytes (rounded up to 4 KiB; 0 = 256 MiB, far beyond the caches) split evenly over
 * `threads` OpenMP threads, each copying its part: the faster of memcpy and the streaming copy
 * (te_bl_stream_copy, non-temporal stores), each the median of `runs` runs (odd; 7 when <= 0),
 * after one untimed run that touches the pages. Returns a negative value when the buffers
 * cannot be allocated. */
double te_peak_copy_gbps(int threads, size_t bytes, int runs);

#endif
