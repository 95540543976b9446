/*
 * schedule/passes.h (private): the lowering passes, each a function from statement to
 * statement in its own file under schedule/passes/, with its own test. te_lower (lower.c)
 * runs them in order; read that function for the table of contents.
 *
 * Conventions: a pass never mutates its input (statements and expressions are rebuilt where
 * they change and shared where they do not); it returns NULL only on error, with a message on
 * the context.
 */
#ifndef TESSERA_SCHEDULE_PASSES_H
#define TESSERA_SCHEDULE_PASSES_H

#include "tessera/backend.h"
#include "te/arith.h"
#include "te/internal.h"

/* ---- simplify.c ---- (the expression simplifier and range maps: te/arith.h) */
/* Simplifies every expression of a statement using the ranges of enclosing loops; removes
 * loops of extent 1 (substituting their min), loops of extent <= 0, and ifs whose condition is
 * provably true (keeps the then-branch) or false (keeps the else-branch). */
te_stmt *te__pass_simplify(te_ctx *ctx, te_stmt *s);
/* Simplifies statement s under the ranges of the loops that enclose it (ranges is updated
 * while walking and restored on return). *failed is set on error. */
te_stmt *te__simplify_stmt_in(te_ctx *ctx, te_stmt *s, te__range_map *ranges, bool *failed);

/* ---- loop_partition.c ----
 * Splits a loop whose body is guarded by a condition linear in the loop variable (the tail
 * guard of a non-divisible split, `if (i_o * 32 + i_i < 100)`) into a main part where the guard
 * is provably true (and removed) and a tail part that keeps it, so hot loops carry no guard. */
te_stmt *te__pass_loop_partition(te_ctx *ctx, te_stmt *s);

/* ---- storage_flatten.c ----
 * Rewrites every multi-dimensional LOAD/STORE into one flat index (row-major over the
 * buffer's shape), so backends see n == 1. */
te_stmt *te__pass_storage_flatten(te_ctx *ctx, te_stmt *s);

/* ---- vectorize.c ----
 * Turns each TE_FOR_VECTORIZED loop of constant extent L into straight-line vector code:
 * the loop variable becomes RAMP(min, 1, L); loads/stores whose flat index is linear in it
 * with coefficient 1 become contiguous vector accesses, coefficient 0 broadcasts, other
 * strides gathers/scatters; scalar operands are broadcast. When the body cannot be vectorized
 * (a store whose index does not depend on the lane, a condition that depends on the lane, a
 * nested loop, an unsupported op), the loop is left as a serial loop (scalar fallback). */
te_stmt *te__pass_vectorize(te_ctx *ctx, te_stmt *s, const te_target *target);

/* ---- unroll.c ----
 * Expands TE_FOR_UNROLLED loops of constant extent into copies of their body with the loop
 * variable replaced by each value. */
te_stmt *te__pass_unroll(te_ctx *ctx, te_stmt *s);

/* ---- GPU passes (schedule/passes/gpu_*.c, barrier.c, thread_split.c, allreduce.c) --------
 * te_lower runs these when the loop program has loops bound to GPU blocks or threads
 * (TE_FOR_THREAD). Terms: a *kernel* is a root-level statement containing bound loops; its
 * *block loops* are the outermost loops bound to blockIdx; the *block body* is what is inside
 * them and runs once per block, by every thread of the block at once (SPMD). A loop bound to
 * threadIdx.T with extent e means "threads with threadIdx.T < e run this, as variable
 * threadIdx.T"; the block has, along T, the largest extent bound to T in that kernel. */

struct te_schedule;

/* Annotations recorded by schedule/gpu.c, read back from the schedule's trace. */
bool te__gpu_storage_align_of(const struct te_schedule *s, const char *stage, int *axis,
                              int *factor, int *offset);
bool te__gpu_is_double_buffered(const struct te_schedule *s, const char *stage);
/* Pads b's shape as storage_align asks for b's tensor (no-op without one). */
void te__gpu_apply_layout(const struct te_schedule *s, te_buf *b);

/* Whether s contains a loop bound to a GPU block or thread index. */
bool te__has_thread_loops(const te_stmt *s);
/* Whether s contains a barrier. */
bool te__has_barrier(const te_stmt *s);
/* Block dimensions of a block body: the largest constant extent bound to threadIdx.x/y/z (1 when
 * none). Returns false when a threadIdx loop has a non-constant extent. */
bool te__block_dims(const te_stmt *body, int64_t dims[3]);

/* Applies fn to the block body of every kernel in s and rebuilds s around the results. */
te_stmt *te__gpu_map_blocks(te_ctx *ctx, te_stmt *s, te_stmt *(*fn)(te_ctx *, te_stmt *, void *),
                            void *user);

/* ---- allreduce.c ----
 * Cross-thread reduction for a reduction loop bound to threadIdx (te_bind_reduce), called by
 * lowering when it builds that loop. `body` is the loop's body, in which every update of the
 * stage's buffer `buf` is `buf[idx] = combine(buf[idx], value)`. Produces: each thread reduces
 * its share into a register; the partial results go to a shared array of `extent` elements and
 * are combined by a tree (halving the active threads each step); then every thread folds the
 * total into buf[idx]. Barriers are left to the barrier pass. */
te_stmt *te__gpu_allreduce(te_ctx *ctx, te_expr *var, int64_t extent, int tag, te_stmt *body,
                           te_buf *buf, int ndim, te_expr *const *idx, te_reduce_kind kind,
                           te_reducer *custom, te_dtype dtype);

/* ---- gpu_memory.c ----
 * Double buffering: for a shared buffer whose stage was marked te_double_buffer and is
 * allocated at the top of a serial loop's body, doubles the allocation and makes iteration v
 * use half (v % 2). */
te_stmt *te__pass_double_buffer(te_ctx *ctx, const struct te_schedule *sched, te_stmt *s);
/* Moves every shared allocation of a kernel to the top of its block body (one per block, not
 * one per thread or per loop iteration). */
te_stmt *te__pass_hoist_shared(te_ctx *ctx, te_stmt *s);
/* CUDA only: a vectorized loop stays vectorized only when its body is a single store (a copy,
 * which the CUDA backend emits as float4/float2 loads and stores); others are unrolled. */
te_stmt *te__pass_gpu_vector_filter(te_ctx *ctx, te_stmt *s);

/* ---- barrier.c ----
 * Inserts a barrier (__syncthreads) into each block body exactly where a shared buffer is read
 * after being written by the block, or written after being read, since the last barrier; loops
 * are analysed across iterations (the next iteration's writes against this one's reads), except
 * that a double-buffered buffer alternates halves. A barrier is only placed in code every thread
 * of the block runs; needing one inside a branch or a thread loop narrower than the block is an
 * error naming the buffer. */
te_stmt *te__pass_barrier(te_ctx *ctx, const struct te_schedule *sched, te_stmt *s);

/* ---- gpu_check.c ----
 * Checks every kernel against the target's limits: each root statement has loops bound to
 * blocks or threads, blockIdx loops are outermost and constant, threads per block and each
 * block dimension, grid dimensions, static shared memory per block. A violation is an error
 * that names the stage, the loop and the limit. */
te_stmt *te__pass_gpu_check(te_ctx *ctx, te_stmt *s, const te_target *target);

/* ---- thread_split.c ----
 * Makes GPU-scheduled code run on the CPU (C backend): in each block body, the code between
 * barriers runs in a loop over the block's threads (threadIdx loops become uses of those loop
 * variables); per-thread buffers that live across a barrier get one copy per thread; the
 * outermost block loop becomes a parallel loop. */
te_stmt *te__pass_thread_split(te_ctx *ctx, te_stmt *s);

#endif
