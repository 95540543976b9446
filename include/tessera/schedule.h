/*
 * tessera/schedule.h: TVM-style schedules over tensor expressions.
 *
 * A schedule has one stage per computed tensor that its outputs depend on. Each stage owns
 * iteration variables (te_iter): the root axes of its tensor, its reduction axes, and the new
 * ones that split/fuse make. Primitives change how a stage is computed, never what: the
 * tensor expressions stay as they were built, and te_reference_eval on them remains the
 * oracle.
 *
 *     te_schedule *s = te_schedule_create(ctx, 1, &C);
 *     te_stage *sc = te_schedule_stage(s, C);
 *     te_iter *io, *jo, *ii, *ji;
 *     te_tile(sc, te_stage_axis(sc, 0), te_stage_axis(sc, 1), 8, 32, &io, &jo, &ii, &ji);
 *     te_vectorize(sc, ji);
 *     te_parallel(sc, io);
 *
 * Every primitive validates its arguments first. On an illegal request it returns a negative
 * status (usually TE_ERR_SCHEDULE or TE_ERR_ARG), leaves a message on the context naming the
 * stage and axis, and leaves the schedule unchanged. Schedule objects live in the context's
 * arena: there is nothing to free.
 *
 * Each successful primitive is appended to the schedule's trace (te_schedule_trace), a text
 * form that names stages and iterators and can be replayed (te_schedule_apply_trace).
 */
#ifndef TESSERA_SCHEDULE_H
#define TESSERA_SCHEDULE_H

#include <stdbool.h>
#include <stdio.h>

#include "tessera/target.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct te_schedule te_schedule;
typedef struct te_stage te_stage;
typedef struct te_iter te_iter;

/* GPU thread axes for te_bind. */
typedef enum te_thread_tag {
    TE_BLOCK_X,
    TE_BLOCK_Y,
    TE_BLOCK_Z,
    TE_THREAD_X,
    TE_THREAD_Y,
    TE_THREAD_Z,
    /* A virtual thread (TVM's "vthread"): the loop stays a loop of every real thread, but lowering
     * interleaves its iterations (schedule/passes/inject_vthread.c). Bind the outer part of a split
     * of an output axis to it, above the threadIdx loops, and each thread's register tile becomes
     * V pieces strided by the threads' span: neighbouring threads read neighbouring shared-memory
     * words (no bank conflicts) while the shared-memory tiles staged inside stay one per block. */
    TE_VTHREAD
} te_thread_tag;

/* Creates a schedule computing `outs` (each a computed tensor). Every compute the outputs
 * depend on gets a stage attached at the root. Tensor names must be unique within the
 * schedule (stages and the placeholders they read), because traces, lowering and the
 * generated code address tensors by name: two different tensors with one name are refused
 * with TE_ERR_ARG, and so is a NULL output (unless an earlier error, such as the failed call
 * that produced the NULL, is already on ctx: the first error is kept). Returns NULL on error
 * (message on ctx). */
te_schedule *te_schedule_create(te_ctx *ctx, int n_out, te_tensor *const *outs);
/* The context a schedule was made in. */
te_ctx *te_schedule_ctx(const te_schedule *s);
/* Stage computing tensor t, or NULL (with a message) if t is not computed in this schedule. */
te_stage *te_schedule_stage(te_schedule *s, const te_tensor *t);
/* Stage whose tensor is named `name`, or NULL. */
te_stage *te_schedule_stage_by_name(te_schedule *s, const char *name);
/* The tensor named `name` among the schedule's stages and the placeholders they read, or
 * NULL. */
te_tensor *te_schedule_tensor_by_name(te_schedule *s, const char *name);
/* Number of stages and the i-th one, producers before consumers. */
int te_schedule_nstages(const te_schedule *s);
te_stage *te_schedule_stage_at(const te_schedule *s, int i);
/* The trace of primitives applied so far, one per line. Owned by the schedule; valid until the
 * next primitive. */
const char *te_schedule_trace(te_schedule *s);
/* Prints every stage: attach point, loop order, annotations. */
void te_schedule_print(const te_schedule *s, FILE *f);

/* The tensor a stage computes. */
te_tensor *te_stage_tensor(const te_stage *st);
const char *te_stage_name(const te_stage *st);
/* Root data-parallel axis i (0 <= i < rank) and reduction axis i; NULL when out of range. */
te_iter *te_stage_axis(te_stage *st, int i);
te_iter *te_stage_reduce_axis(te_stage *st, int i);
int te_stage_nreduce(const te_stage *st);
/* Current loop order, outermost first. */
int te_stage_nleaves(const te_stage *st);
te_iter *te_stage_leaf(te_stage *st, int i);
/* Iterator of this stage named `name` ("i", "i_o", ...), or NULL. */
te_iter *te_stage_iter(te_stage *st, const char *name);
const char *te_iter_name(const te_iter *it);
int64_t te_iter_extent(const te_iter *it);
bool te_iter_is_reduce(const te_iter *it);

/* ---- Loop transformations ----------------------------------------------------------------
 * Split: x -> (outer, inner) with inner extent `factor`, outer = ceil(extent / factor); a
 * non-divisible split guards the tail. Names: "<x>_o" and "<x>_i". outer/inner may be NULL. */
int te_split(te_stage *st, te_iter *x, int64_t factor, te_iter **outer, te_iter **inner);
/* Split into `nparts` outer iterations: factor = ceil(extent / nparts). */
int te_split_nparts(te_stage *st, te_iter *x, int64_t nparts, te_iter **outer, te_iter **inner);
/* Tile two adjacent loops: split both and order (xo, yo, xi, yi). */
int te_tile(te_stage *st, te_iter *x, te_iter *y, int64_t x_factor, int64_t y_factor, te_iter **xo,
            te_iter **yo, te_iter **xi, te_iter **yi);
/* Fuse two adjacent leaf loops (outer directly outside inner) into one named "<o>_<i>_f". */
int te_fuse(te_stage *st, te_iter *outer, te_iter *inner, te_iter **fused);
/* Reorders the listed leaf loops among the positions they occupy; others stay put. */
int te_reorder(te_stage *st, int n, te_iter *const *order);

/* ---- Placement --------------------------------------------------------------------------
 * Compute this stage inside loop `at` of stage `parent`, for just the region that one
 * iteration of `at` needs. parent must (transitively) consume this stage. */
int te_compute_at(te_stage *st, te_stage *parent, te_iter *at);
/* Software pipelining by one iteration (TVM's software_pipeline_stage, with the stages' loops
 * fused as Halide's compute_with fuses them): serial loop x of stage st computes, in iteration
 * i, its producers computed at x for iteration i and st's own loops under x for iteration i-1,
 * the outermost of them fused into the outermost loop of extent > 1 of producer `with` (so
 * one row's output stores overlap the next row's first pass). Iteration 0 runs only the
 * producers, and st's last iteration follows the loop; the producers' buffers live across
 * iterations. `with` must be computed at x (call te_compute_at first); st must not be a
 * reduction. Lowering refuses, with the reason, when the fused loops differ in extent, or st
 * reads a buffer computed at x that is written before `with`'s loop ends (it would see the
 * next iteration's values), or x is parallel, vectorized or unrolled. */
int te_pipeline(te_stage *st, te_iter *x, te_stage *with);
/* Loop fusion of sibling stages (Halide's compute_with): st's loops from its outermost down to
 * the depth of `with`'s leaf loop x are fused with `with`'s loops down to x, level by level, and
 * in every iteration of the fused loops st's body runs after `with`'s. So a reduction over what
 * `with` just computed (the sum of softmax's exponentials, an attention block's row sums) reads
 * it while it is in registers instead of in a pass of its own. Both stages must be computed at
 * the same place (both at the root, or te_compute_at the same loop of the same stage), st after
 * `with` in the schedule, x one of `with`'s leaves. Checked when lowering, refused with the
 * reason (TE_ERR_SCHEDULE from te_lower / te_build): the fused loops must have the same extents
 * and be serial or unrolled in both (split them alike); `with`'s loops down to x must hold
 * nothing else; every element st reads of a buffer `with` writes must be one `with` writes in the
 * same iteration, at the same place of its loops under x (same extents there too), not under a
 * condition; st must write nothing `with` reads or writes; what st runs before its fused loops
 * (a reduction's initialization) must not read what `with` writes; stages computed between the
 * two must not write what st reads nor touch what it writes. Returns TE_OK, TE_ERR_ARG (NULL)
 * or TE_ERR_SCHEDULE (not the same place, x not a leaf of `with`, st already fused). */
int te_compute_with(te_stage *st, te_stage *with, te_iter *x);
/* Substitute this stage's expression into its consumers. Not for reductions or outputs. */
int te_compute_inline(te_stage *st);
/* Compute the whole tensor at the root, before its consumers (the default). */
int te_compute_root(te_stage *st);
/* Adds a stage that copies tensor t into a buffer of `scope` and makes `readers` (stages that
 * read t) read the copy. Returns the copy's tensor (named "<t>_<scope>"), NULL on error. */
te_tensor *te_cache_read(te_schedule *s, te_tensor *t, te_scope scope, int n_readers,
                         te_stage *const *readers);
/* Adds a stage that computes t into a buffer of `scope`; t's stage then copies from it.
 * Apply before other primitives on t's stage. Returns the new tensor ("<t>_<scope>"). */
te_tensor *te_cache_write(te_schedule *s, te_tensor *t, te_scope scope);
/* Factors a reduction: x is a reduction loop of t's stage made by splitting one reduction
 * axis k (k = k_o * f + k_i; x is k_o or k_i), or a root reduction axis itself. A new stage
 * "<t>_rf" computes partial results with x as an extra, last, data-parallel axis, reducing
 * over everything else; t's stage then reduces over that axis. With x = k_i the partial
 * results are independent across lanes, so the reduction vectorizes (and on GPUs spreads
 * across threads). Returns the new tensor, NULL on error. */
te_tensor *te_rfactor(te_schedule *s, te_tensor *t, te_iter *x);

/* ---- Annotations -------------------------------------------------------------------------
 * Vectorize the innermost leaf loop `x` (lanes = its extent after bound inference). Reads at
 * any constant stride become gathers; reads guarded by te_if_then_else (padding) become masked
 * gathers that never read out of bounds. The extent is a power of two up to 64 or, on C
 * targets, a multiple of the vector register's lanes up to 64 (48 = three AVX-512 registers:
 * split into register-wide parts). Where the body cannot be vectorized, or the extent is
 * neither, lowering keeps a scalar loop and says why (te_lowered_notes). */
int te_vectorize(te_stage *st, te_iter *x);
/* Fully unroll loop x. Loops longer than 1024 iterations after bound inference stay serial. */
int te_unroll(te_stage *st, te_iter *x);
/* Fold reduction loop x of stage st as a balanced tree: its iterations' values are bound to
 * locals, combined pairwise with the reducer's own combine (every component of a tuple
 * reducer), level by level, and the result once into the accumulator; x is unrolled away. A
 * fold of E values then waits on ceil(log2 E) + 1 dependent combines instead of E: the lane
 * folds of a row reduction (16 lanes, a Kahan step of four dependent adds each) shrink from a
 * chain as long as the row's pass to a few steps. The reduction is reassociated, as rfactor
 * reassociates it. x must be a reduction leaf of 2 to TE_REDUCE_TREE_MAX iterations with only
 * spatial loops inside it, one per stage. Lowering refuses, with the reason, when x was split
 * or reordered away from that since, has a guarded tail (its split does not divide), or has a
 * stage computed or a prefetch issued at or inside it. Trace line: `reduce_tree S x`. Returns
 * TE_OK, TE_ERR_ARG or TE_ERR_SCHEDULE (message on the schedule's context). */
#define TE_REDUCE_TREE_MAX 64
int te_reduce_tree(te_stage *st, te_iter *x);
/* Run the iterations of x in parallel (OpenMP). Not for reduction loops or loops nested in a
 * parallel loop. */
int te_parallel(te_stage *st, te_iter *x);
/* Unroll every innermost loop nest of this stage whose total constant trip count is at most
 * max_steps (TVM's auto_unroll_max_step). 0 turns it off. */
int te_pragma_unroll_max(te_stage *st, int max_steps);
/* Use non-temporal (streaming) stores for this stage's output. */
int te_stage_nontemporal(te_stage *st, bool on);
/* Software prefetch (TVM's prefetch): at the start of every iteration of st's leaf loop `at`,
 * prefetch the elements of `t` that st reads in that iteration, `dist` iterations of loop
 * `ahead` later (clamped to the loop's last iteration, so no address is out of bounds). `ahead`
 * is a leaf of st at or outside `at` (the same loop: the classic prefetch distance), or the loop
 * st is computed at (te_compute_at: the next row while this one is computed). Loops inside
 * `at` count from their first iteration, so one prefetch is issued per iteration of `at`: put
 * `at` where an iteration reads about a cache line of t (a vector chunk of a row). `t` is an
 * input of the kernel or a stage computed at the root, read by st; `at` is not vectorized;
 * dist in [1, 1024]. The C backend emits __builtin_prefetch; CUDA ignores it. Returns TE_OK,
 * TE_ERR_ARG (NULL or dist out of range) or TE_ERR_SCHEDULE (with the reason). */
int te_prefetch(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist);

/* te_prefetch into a chosen cache level: 1 = L1 and every level below (what te_prefetch does,
 * __builtin_prefetch locality 3), 2 = L2 and below (locality 2), 3 = the last level (locality 1).
 * A row prefetched into L2 does not evict what a pass keeps in L1 (a row of the input, gamma
 * and beta of layer norm, the exponentials of softmax: at 4096 floats each, three rows fill a
 * 48 KiB L1): on a 4096 x 4096 layer norm (Xeon, AMX generation) L2 gained 6-10% over L1. The
 * trace line gains the level as a last field when it is not 1. Returns what te_prefetch returns,
 * and TE_ERR_ARG for a level outside [1, 3]. */
int te_prefetch_level(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist,
                      int level);
/* te_prefetch_level with at most `lines` prefetches (cache lines) per iteration of `at`, in
 * [1, 8]: te_prefetch_level issues one for every line the innermost loop covers, up to 8. One
 * line per iteration of a pass that works from the cache spreads the next rows' fetch thinly
 * over it, so that memory stays busy without a burst that stalls the pass (a row reduction's
 * outer loop: each step reads 8 lines of a row from L2). The trace line gains the count as a
 * last field (after the level) when it is not 8. Returns what te_prefetch_level returns, and
 * TE_ERR_ARG for a count outside [1, 8]. */
int te_prefetch_lines(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist,
                      int level, int lines);
/* te_tensorize (a loop nest replaced by a tensor intrinsic: AMX, AVX-512 BF16 / VNNI, user
 * intrinsics) is declared in tessera/tensorize.h. */
/* Bind loop x to a GPU block or thread index (CUDA backend), or to a virtual thread (TE_VTHREAD):
 * a spatial loop of constant extent whose iterations lowering interleaves statement by statement
 * inside the loops below it. Buffers allocated inside whose contents differ between its
 * iterations (register tiles) get one copy per iteration; statements that do not depend on it
 * (cooperative copies into shared memory) run once instead of once per iteration. When that
 * reordering cannot be shown to keep the results (a statement run once would read or write what
 * the per-iteration statements write), the loop is kept as an ordinary serial loop, which is
 * always correct. Trace line: `bind S x vthread`. Returns TE_ERR_ARG for an unknown tag,
 * TE_ERR_SCHEDULE for a reduction loop (message on the schedule's context). */
int te_bind(te_stage *st, te_iter *x, te_thread_tag tag);

/* ---- GPU scheduling (schedule/gpu.c) -------------------------------------------------------
 * Primitives that only matter for GPU schedules. Like every primitive they validate first,
 * leave the schedule unchanged on refusal, and are recorded in the trace:
 *   storage_align <stage> <axis> <factor> <offset>
 *   double_buffer <stage>
 *   bind_reduce <stage> <iter> threadIdx.x
 * Lowering reads storage_align and double_buffer back from the trace.
 *
 * Pad the buffer of a cached stage so that the stride of `axis` (row-major over the stage's
 * region) is congruent to `offset` modulo `factor` (TVM's storage_align): a shared tile
 * [64][32] with (axis 0, factor 32, offset 1) gets rows of 33 elements, so threads reading a
 * column hit 32 different banks. `axis` must be the second-to-last axis of the stage. */
int te_storage_align(te_stage *st, int axis, int factor, int offset);
/* Give a shared-memory stage computed inside a loop two buffers used on alternate iterations
 * of that loop, so the next tile can be written while the current one is read: one barrier per
 * iteration instead of two. The stage must have TE_SCOPE_SHARED. */
int te_double_buffer(te_stage *st);
/* Cross-thread reduction: bind reduction loop x of st (usually the inner part of a split, or
 * the axis rfactor made) to a threadIdx axis. Each thread reduces its share; the partial results
 * are combined across the block (shared memory and warp shuffles) and every thread sees the
 * result. The loops inside x must all be reduction loops. Only threadIdx tags are allowed. */
int te_bind_reduce(te_stage *st, te_iter *x, te_thread_tag tag);

/* ---- Traces (schedule/trace.c) -----------------------------------------------------------
 * A trace is the text te_schedule_trace returns: one primitive per line, naming stages by the
 * tensor they compute (names are unique within a schedule) and iterators by te_stage_iter
 * names. Blank lines and lines starting with '#' are ignored.
 *
 * Applies every line of `trace` to schedule s (normally fresh, of the same tensor expression
 * the trace was recorded on), in order, through the public primitives. Returns TE_OK, or the
 * first failing line's status (TE_ERR_ARG for a malformed line, TE_ERR_NOT_FOUND for a stage
 * or iterator the schedule does not have, the primitive's own status otherwise) with a message
 * on the context naming the line number and text. The lines before the failing one stay
 * applied: replay onto a fresh schedule to retry. */
int te_schedule_apply_trace(te_schedule *s, const char *trace);
/* Writes C code (a block statement) that calls the public scheduling API to reproduce `trace`
 * on a schedule variable named `sched_var` ("s" when NULL or empty); placeholders that
 * cache_read names are referenced by C variables named like the tensors. Returns a malloc'd
 * string that the caller frees, or NULL when the trace has a line it cannot translate or
 * memory runs out. */
char *te_trace_to_c(const char *trace, const char *sched_var);

/* ---- Lowering (schedule/lower.c, the pass table in schedule/pipeline.c) ------------------- */

/* A lowered function (loop IR after every pass). Lives in the context's arena. */
typedef struct te_lowered te_lowered;

/* Lowers a schedule for a target: bound inference, loop nests, then the pass list. args lists
 * the placeholders read and the tensors written (the outputs of the schedule, last). Returns
 * NULL on error with a message on the schedule's context. */
te_lowered *te_lower(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                     const te_target *target);
/* Like te_lower, and writes the IR after each selected pass to out (stderr when NULL): dump is
 * "all" or a comma-separated list of pass names (te_lower_pass_name); NULL dumps nothing. A
 * name that is no pass is an error (NULL, TE_ERR_ARG, the message lists the passes). te_lower
 * itself reads the selection from the environment variable TESSERA_DUMP_IR. */
te_lowered *te_lower_dump(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                          const te_target *target, const char *dump, FILE *out);
/* The lowering pipeline, for documentation and tools: the number of steps, and for step i
 * (0-based, in the order they run) its name, when it runs ("always", "GPU schedules", "CUDA
 * target", "C target", "GPU schedules, C target") and a one-line description. Static strings;
 * NULL when i is out of range. */
int te_lower_pass_count(void);
const char *te_lower_pass_name(int i);
const char *te_lower_pass_when(int i);
const char *te_lower_pass_what(int i);
/* Prints lowered IR in readable form. */
void te_lowered_print(const te_lowered *f, FILE *out);
/* Why lowering did not do what the schedule asked, in program order: one note per loop that
 * te_vectorize marked and that stayed a scalar loop, "vectorize <loop>: kept scalar: <reason>"
 * (the lowered program carries the same text as a comment in front of the loop, which
 * te_lowered_print shows and the C backend writes as a C comment). Returns the number of notes
 * and stores the first min(count, max) in notes when notes is non-NULL; the strings live in the
 * context's arena. 0 for NULL. */
int te_lowered_notes(const te_lowered *f, const char **notes, int max);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_SCHEDULE_H */
