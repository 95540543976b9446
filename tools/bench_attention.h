/* The attention benchmark of `tessera bench` (tools/bench_attention.c). */
#ifndef TESSERA_TOOLS_BENCH_ATTENTION_H
#define TESSERA_TOOLS_BENCH_ATTENTION_H

#include "tessera/tuning_db.h"
#include "tools/bench_report.h"

/* Self-attention with `heads` heads of dimension dh over `seq` tokens, batch 1, fp32, on
 * `threads` threads: the fused kernel (te_op_attention with the best record of db for this
 * workload when db has one, else the attention template's default configuration) timed
 * alternately with the unfused path (OpenBLAS cblas_sgemm per head for Q K^T, a vectorized
 * softmax over the materialized scores, cblas_sgemm per head for P V), medians of `reps`.
 * Fills *out (GFLOP/s of 4 seq^2 dh heads flops, the ratio's baseline, the memory each path
 * allocates beyond its inputs and output in base_impl, the error against the unfused output)
 * and prints the memory line on stderr unless quiet. Returns 0, or exits with a message when
 * the kernel cannot be built (as the other benchmarks do). */
int te_bench_attention(te_db *db, int seq, int heads, int dh, int threads, int reps,
                       te_bench_row *out);

#endif
