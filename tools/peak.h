/* The machine's measured fp32 FMA peak (tools/peak.c), for `tessera bench --report`. */
#ifndef TESSERA_TOOLS_PEAK_H
#define TESSERA_TOOLS_PEAK_H

/* Measured fp32 FMA throughput in GFLOP/s on `threads` OpenMP threads, with the widest vectors
 * the CPU supports (their lanes in *lanes_out, may be NULL): the median of 7 runs of 12-16
 * independent FMA chains per thread. Takes about a second per run on a 2-core machine. */
double te_peak_fma_gflops(int threads, int *lanes_out);

#endif
