/*
 * schedule/passes.h (private): the lowering passes, each a function from statement to
 * statement in its own file under schedule/passes/, with its own test. The pass table in
 * schedule/pipeline.c lists them in the order te_lower runs them; read it for the table of
 * contents.
 *
 * Conventions: every pass has the signature te__pass_fn: it reads what it needs from the pass
 * context (the arena, the schedule being lowered, the target) and never mutates its input
 * (statements and expressions are rebuilt where they change and shared where they do not); it
 * returns NULL only on error, with a message on the context.
 */
#ifndef TESSERA_SCHEDULE_PASSES_H
#define TESSERA_SCHEDULE_PASSES_H

#include "te/arith.h"
#include "te/internal.h"
#include "tessera/schedule.h"
#include "tessera/target.h"

struct te_schedule;

/* What a pass may read besides the statement. sched is NULL when a pass runs outside te_lower
 * (tests); passes that need it then do nothing. target is never NULL inside te_lower; a pass
 * given NULL behaves as for the host C target. */
typedef struct te__pass_ctx {
    te_ctx *ctx;
    const struct te_schedule *sched;
    const te_target *target;
    /* The kernel's arguments in te_lower's order and their global buffers (arg_index set):
     * what the first step, loop_nests, builds the program over. */
    int n_args;
    te_tensor *const *args;
    te_buf *const *arg_bufs;
    const char *name; /* the kernel's name, for IR dumps */
} te__pass_ctx;

/* A pass context with only the arena, for running one pass by itself (tests). */
#define TE_PC(c) (&(te__pass_ctx){.ctx = (c)})

/* The one signature of every lowering pass. */
typedef te_stmt *(*te__pass_fn)(const te__pass_ctx *pc, te_stmt *s);

/* ---- pipeline.c: the pass table ----
 * When a pass runs: on every program, on programs with loops bound to GPU blocks or threads,
 * for the CUDA target, for the C target, or on GPU programs for the C target (which then run
 * on the CPU). */
typedef enum te__pass_when {
    TE_PASS_ALWAYS,
    TE_PASS_GPU,
    TE_PASS_CUDA,
    TE_PASS_C,
    TE_PASS_GPU_ON_C,
} te__pass_when;

typedef struct te__pass {
    const char *name; /* what TESSERA_DUMP_IR and error messages call it */
    te__pass_fn run;
    te__pass_when when;
    const char *what; /* one line for docs and `tessera lower --passes` */
} te__pass;

/* The lowering pipeline in order; te__pipeline[0] is loop_nests (its input is NULL). */
extern const te__pass te__pipeline[];
extern const int te__pipeline_n;

/* Runs the pipeline for pc: every pass whose `when` holds, in order. Stops at the first pass
 * that fails and returns NULL with the message on pc->ctx prefixed by the pass's name. When
 * dump is non-NULL ("all" or a comma-separated list of pass names) the IR after each selected
 * pass is written to out; an unknown name in dump is an error (TE_ERR_ARG) listing the passes. */
te_stmt *te__pipeline_run(const te__pass_ctx *pc, const char *dump, FILE *out);

/* ---- lower.c ----
 * The first step: inlining, bound inference and one loop nest per stage, producers placed at
 * their attach loops (the input statement is ignored). */
te_stmt *te__pass_loop_nests(const te__pass_ctx *pc, te_stmt *s);

/* ---- simplify.c ---- (the expression simplifier and range maps: te/arith.h) */
/* Simplifies every expression of a statement using the ranges of enclosing loops; removes
 * loops of extent 1 (substituting their min), loops of extent <= 0, and ifs whose condition is
 * provably true (keeps the then-branch) or false (keeps the else-branch). */
te_stmt *te__pass_simplify(const te__pass_ctx *pc, te_stmt *s);
/* Simplifies statement s under the ranges of the loops that enclose it (ranges is updated
 * while walking and restored on return). *failed is set on error. */
te_stmt *te__simplify_stmt_in(te_ctx *ctx, te_stmt *s, te__range_map *ranges, bool *failed);

/* ---- loop_partition.c ----
 * Splits a loop whose body is guarded by a condition linear in the loop variable (the tail
 * guard of a non-divisible split, `if (i_o * 32 + i_i < 100)`) into a main part where the guard
 * is provably true (and removed) and a tail part that keeps it, so hot loops carry no guard. */
te_stmt *te__pass_loop_partition(const te__pass_ctx *pc, te_stmt *s);

/* ---- inject_vthread.c ----
 * Virtual threads (te_bind TE_VTHREAD): each TE_FOR_VTHREAD loop is moved inward statement by
 * statement. Buffers allocated inside it whose contents depend on its variable gain a leading
 * dimension of its extent; statements that do not mention the variable stay once; the rest are
 * wrapped in an unrolled loop over it. Where keeping a statement once could change the results
 * (it writes a buffer allocated outside the loop, or touches what the per-iteration statements
 * write), or the loop holds a tensor-intrinsic call, the loop becomes a serial loop. No
 * TE_FOR_VTHREAD loop remains. */
te_stmt *te__pass_inject_vthread(const te__pass_ctx *pc, te_stmt *s);

/* ---- storage_flatten.c ----
 * Rewrites every multi-dimensional LOAD/STORE into one flat index (row-major over the
 * buffer's shape), so backends see n == 1. */
te_stmt *te__pass_storage_flatten(const te__pass_ctx *pc, te_stmt *s);

/* ---- vectorize.c ----
 * Turns each TE_FOR_VECTORIZED loop of constant extent L into straight-line vector code:
 * the loop variable becomes RAMP(min, 1, L); loads/stores whose flat index is linear in it
 * with coefficient 1 become contiguous vector accesses, coefficient 0 broadcasts, other
 * strides gathers/scatters; scalar operands are broadcast. When the body cannot be vectorized
 * (a store whose index does not depend on the lane, a condition that depends on the lane, a
 * nested loop, an unsupported op), the loop is left as a serial loop (scalar fallback) behind
 * a comment statement "vectorize <var>: kept scalar: <reason>" (te_lowered_notes). An
 * if_then_else whose condition depends on the lane and that guards loads becomes a blend of
 * its two sides, each vectorized under the mask of its lanes: their loads are gathers whose
 * masked-off lanes read element 0, never out of bounds. */
te_stmt *te__pass_vectorize(const te__pass_ctx *pc, te_stmt *s);
/* How the note of a scalar fallback begins. */
#define TE__VECTORIZE_NOTE "vectorize "

/* ---- unroll.c ----
 * Expands TE_FOR_UNROLLED loops of constant extent into copies of their body with the loop
 * variable replaced by each value. */
te_stmt *te__pass_unroll(const te__pass_ctx *pc, te_stmt *s);

/* ---- legalize_vectors.c (C target) ----
 * Splits every store and let of more than W lanes, when the lane count is a multiple of W,
 * into W-lane parts (W = te__vector_width_lanes(pc->target)): GCC keeps generic vectors wider
 * than a register in memory. Ramps are sliced by offsetting their base, broadcasts narrow,
 * other vector expressions are sliced operand by operand; a vector let becomes one let per
 * part, named <var>_<k>. Other statements are rebuilt unchanged. */
te_stmt *te__pass_legalize_vectors(const te__pass_ctx *pc, te_stmt *s);
/* 32-bit lanes in one vector register of the target: vector_bits / 32, and 16 (512 bits) for a
 * NULL target or one that gives no width. */
int te__vector_width_lanes(const te_target *target);

/* ---- merge_guards.c ----
 * Adjacent ifs without else on equal conditions become one if, and a serial (or leftover
 * vectorized) loop whose whole body is such an if on a condition it does not move runs inside
 * it; only for conditions that read no buffer. What loop partitioning and unrolling leave: one
 * test per statement of a guarded tail. */
te_stmt *te__pass_merge_guards(const te__pass_ctx *pc, te_stmt *s);

/* ---- hoist_invariants.c (C target) ----
 * The largest scalar float subexpressions of stored values that call a math function and
 * that enclosing loops do not move become lets before the outermost such loop (equal ones
 * share a let): C compilers leave sqrtf, expf and logf in the loop under -fmath-errno.
 * Reads move only out of loops that write nothing they read and only where no if, branch or
 * loop of unknown extent guards them; GPU thread loops are never moved out of. */
te_stmt *te__pass_hoist_invariants(const te__pass_ctx *pc, te_stmt *s);

/* ---- store_motion.c (C target) ----
 * Vector registers' worth of elements one loop keeps in registers at most. */
#define TE__STORE_MOTION_MAX_REGS 24
/* Elements a serial loop of constant extent reads and writes at addresses it does not move
 * (directly in its body, pairwise equal or disjoint, no streaming stores) are loaded into a
 * local buffer before the loop and stored back after it; promote_registers then keeps them
 * in registers. What gcc's store motion does, for compilers that do not (clang). */
te_stmt *te__pass_store_motion(const te__pass_ctx *pc, te_stmt *s);

/* ---- promote_registers.c (C target) ----
 * Largest buffer (elements) promoted to registers. */
#define TE__PROMOTE_MAX 1024
/* Marks every non-global, non-bool buffer of at most TE__PROMOTE_MAX elements whose accesses
 * inside its allocation all have constant indices (scalars, or stride-1 ramps of one lane
 * count L at bases that are multiples of L) with a te__promotion on its ALLOC statement
 * (te/internal.h): the C emitter then declares named variables <buf>_v<k> (chunk k of L
 * lanes) and <buf>_s<i> instead of an array. Runs last: later rebuilds would drop the mark. */
te_stmt *te__pass_promote_registers(const te__pass_ctx *pc, te_stmt *s);

/* ---- GPU passes (schedule/passes/gpu_*.c, barrier.c, thread_split.c, allreduce.c) --------
 * te_lower runs these when the loop program has loops bound to GPU blocks or threads
 * (TE_FOR_THREAD). Terms: a *kernel* is a root-level statement containing bound loops; its
 * *block loops* are the outermost loops bound to blockIdx; the *block body* is what is inside
 * them and runs once per block, by every thread of the block at once (SPMD). A loop bound to
 * threadIdx.T with extent e means "threads with threadIdx.T < e run this, as variable
 * threadIdx.T"; the block has, along T, the largest extent bound to T in that kernel. */

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
 * Cross-thread reduction (te_bind_reduce): every loop that the loop nests marked with a
 * te__xreduce becomes: each thread reduces its share into a register; the partial results go
 * to a shared array of `extent` elements and are combined by a tree (halving the active
 * threads each step); then every thread folds the total into buf[idx]. Barriers are left to
 * the barrier pass. Runs first on GPU programs, while the marked loops are as built. */
te_stmt *te__pass_cross_thread_reduce(const te__pass_ctx *pc, te_stmt *s);

/* ---- gpu_memory.c ----
 * Double buffering: for a shared buffer whose stage was marked te_double_buffer and is
 * allocated at the top of a serial loop's body, doubles the allocation and makes iteration v
 * use half (v % 2). */
te_stmt *te__pass_double_buffer(const te__pass_ctx *pc, te_stmt *s);
/* Moves every shared allocation of a kernel to the top of its block body (one per block, not
 * one per thread or per loop iteration). */
te_stmt *te__pass_hoist_shared(const te__pass_ctx *pc, te_stmt *s);
/* CUDA only: a vectorized loop stays vectorized only when its body is a single store (a copy,
 * which the CUDA backend emits as float4/float2 loads and stores); others are unrolled. */
te_stmt *te__pass_gpu_vector_filter(const te__pass_ctx *pc, te_stmt *s);

/* ---- barrier.c ----
 * Inserts a barrier (__syncthreads) into each block body exactly where a shared buffer is read
 * after being written by the block, or written after being read, since the last barrier; loops
 * are analysed across iterations (the next iteration's writes against this one's reads), except
 * that a double-buffered buffer alternates halves. A barrier is only placed in code every thread
 * of the block runs; needing one inside a branch or a thread loop narrower than the block is an
 * error naming the buffer. */
te_stmt *te__pass_barrier(const te__pass_ctx *pc, te_stmt *s);

/* ---- gpu_check.c ----
 * Checks every kernel against the target's limits: each root statement has loops bound to
 * blocks or threads, blockIdx loops are outermost and constant, threads per block and each
 * block dimension, grid dimensions, static shared memory per block. A violation is an error
 * that names the stage, the loop and the limit. */
te_stmt *te__pass_gpu_check(const te__pass_ctx *pc, te_stmt *s);

/* ---- thread_split.c ----
 * Makes GPU-scheduled code run on the CPU (C backend): in each block body, the code between
 * barriers runs in a loop over the block's threads (threadIdx loops become uses of those loop
 * variables); per-thread buffers that live across a barrier get one copy per thread; the
 * outermost block loop becomes a parallel loop. */
te_stmt *te__pass_thread_split(const te__pass_ctx *pc, te_stmt *s);

#endif
