/* The low-precision rows of `tessera bench` (tools/bench_lowp.c): bf16 and int8 matmuls
 * tensorized onto the CPU's matrix instructions against oneDNN's, and the bf16 MLP gate
 * against our own f32 gate and oneDNN's bf16 matmuls. */
#ifndef TESSERA_TOOLS_BENCH_LOWP_H
#define TESSERA_TOOLS_BENCH_LOWP_H

#include "tools/bench_report.h"

/* The hand-fused f32 MLP gate of `tessera bench` (tools/cmd_bench.c): Y = silu(x W1) * (x W3)
 * over weights packed once at creation (not timed). x, w1, w3 ([M, K], [K, N], [K, N]) must
 * outlive it. Exits with a message when the kernel cannot be built (as the benchmarks do). */
typedef struct te_bench_gate32 te_bench_gate32;
te_bench_gate32 *te_bench_gate32_create(int M, int N, int K, const float *x, const float *w1,
                                        const float *w3);
/* Runs it once (a te_bl_run_fn). */
void te_bench_gate32_run(void *g);
/* Its output, M x N (valid after a run; owned by g). */
const float *te_bench_gate32_out(const te_bench_gate32 *g);
void te_bench_gate32_free(te_bench_gate32 *g);

/* The low-precision workloads. */
typedef enum {
    TE_BENCH_LOWP_BF16,     /* C f32 = A bf16 x B bf16 */
    TE_BENCH_LOWP_U8S8,     /* C i32 = A u8 x B i8 */
    TE_BENCH_LOWP_GATE_BF16 /* Y f32 = silu(x W1) * (x W3), x, W bf16 */
} te_bench_lowp_kind;

/* Times our kernel (te_op_matmul_vnni over weights packed in column blocks once, tensorized
 * with the best built-in intrinsic the CPU has: AMX tiles, else AVX-512 BF16 / VNNI) beside
 * oneDNN's matmul for the same dtypes (plain and packed weights; the strongest is the ratio's
 * baseline), alternating, medians of reps, on `threads` threads; for the gate, beside two
 * oneDNN bf16 matmuls plus an f32 silu pass, and our f32 gate (its figure and our ratio to it
 * in other_impl). With db (not NULL; not for the gate), our kernel is instead operator
 * matmul_vnni with weights in blocks of 32 columns (a_dtype bf16 / u8, group 2 / 4, nb=32)
 * built from the database's best record. Fills *out. Returns 0, or -1 with a message on
 * stderr when the CPU has no instruction for it or the database no record (the row is then
 * not filled). */
int te_bench_lowp(te_bench_lowp_kind kind, int M, int N, int K, int threads, int reps, te_db *db,
                  te_bench_row *out);

#endif
