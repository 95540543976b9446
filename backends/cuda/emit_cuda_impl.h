/*
 * backends/cuda/emit_cuda_impl.h (private): the CUDA emitter's pieces, one file per job:
 *   emit_cuda_expr.c     names, types, the line writer, expressions, lanes of vector code
 *   emit_cuda_stmt.c     statements: loops (thread loops become threadIdx), stores (float4
 *                        copies), allocations, warp-shuffle reduction steps
 *   emit_cuda_kernels.c  kernels of a program (block loops, parameters, launch dimensions),
 *                        the file, te__cuda_emit_program / te__cuda_emit_kernels / te_emit_cuda
 *   emit_cuda_intrin.c   tensor intrinsic calls (te_tensorize) and their __device__ functions
 *   emit_cuda_vec.c      wide (float4/float2) loads and stores of code that is not a copy
 * Shared with the C emitter: backends/emit_common.h.
 *
 * The file has the C backend's provenance header, a short prelude (index type, floor division
 * helpers), then one `extern "C" __global__` kernel per kernel of the loop program (a root
 * statement whose outer loops are bound to blockIdx): the block loops become `const int
 * <var> = blockIdx.<d>;`, a loop bound to threadIdx.<d> becomes `const int <var> =
 * threadIdx.<d>;` (inside `if (threadIdx.<d> < extent)` when it is narrower than the block),
 * shared allocations become `__shared__` arrays, barriers `__syncthreads()`. Each kernel carries
 * __launch_bounds__(threads per block) and a comment with its launch dimensions.
 *
 * Conventions:
 *   - index arithmetic is `int` when every buffer has fewer than 2^31 elements (and no tensor
 *     holds i64 data), else `long long`;
 *   - a vector store whose value is a contiguous load (a cooperative copy after vectorize) is one
 *     float4/float2 (int4/int2) load and store when both indices are provably multiples of the
 *     lane count; in other vector stores and in runs of scalar stores (unrolled loops),
 *     contiguous aligned loads are read once as float4/float2 temporaries and a contiguous
 *     aligned vector store is one float4 store of its lanes (emit_cuda_vec.c); the rest lane
 *     by lane;
 *   - the steps of a cross-thread reduction tree (schedule/passes/allreduce.c) over 32 partial
 *     results or fewer become warp shuffles when the block is one-dimensional;
 *   - a kernel that calls a warp-collective tensor intrinsic (te_tensorize with a CUDA
 *     intrinsic) has no loop bound to threadIdx.x: it runs with blockDim.x = 32, one warp per
 *     (threadIdx.y, threadIdx.z), every lane calling the intrinsic with the same pointers
 *     between __syncwarp()s, and its ordinary stores done by lane 0 (docs/TENSORIZE.md,
 *     "CUDA").
 */
#ifndef TESSERA_BACKENDS_CUDA_EMIT_CUDA_IMPL_H
#define TESSERA_BACKENDS_CUDA_EMIT_CUDA_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cuda/cuda_impl.h"
#include "backends/emit_common.h"
#include "schedule/passes.h"

/* The emitter of one program. */
typedef struct cem {
    te_ctx *ctx;
    const te_lowered *f;
    te__sb *o;
    int indent;
    int err;
    bool small; /* int indices */
    int64_t dims[3];
    te__name_table names; /* kinds: 0 variable, 1 buffer, 2 the kernel name (by pointer) */
    /* ranges of the block and thread indices and of the variables of the enclosing loops and
     * lets known to be >= 0 (te/arith.h) */
    te__range_map ranges;
    /* buffers of the current kernel */
    const te_buf *used[TE__CUDA_MAX_PARAMS];
    int nused;
    bool uses_half; /* f16/bf16 storage: the file includes cuda_fp16.h and cuda_bf16.h */
    const te_target *target;
    /* Warp-collective tensor intrinsics (te_tensorize with a CUDA intrinsic): the ones the
     * program calls (their functions are written once, before the kernels), and whether the
     * current kernel calls one (it then runs with blockDim.x = 32 and its ordinary stores on
     * lane 0 only, emit_cuda_intrin.c). */
    const struct te_tensor_intrin *intrins[16];
    int n_intrins;
    bool warp;
    /* The current kernel fills prefetched shared tiles (te_buf.prefetched) with cp.async
     * (sm_80+): every barrier waits for the thread's copies first. */
    bool cp_async;
    /* A warp-first cross-thread reduction being emitted (emit_cuda_stmt.c): the publishing
     * store of its partial results to the shared array wf_R is written as a warp reduction
     * with the combine wf_comb of the variables wf_a, wf_b. */
    const te_stmt *wf_pub;
    /* Where the statement being emitted sits: for each enclosing sequence its position, for
     * each enclosing serial loop -1, for each enclosing if -2 (innermost last). */
    const te_stmt *path_s[64];
    int path_i[64];
    int npath;
    const te_buf *wf_R;
    te_expr *wf_comb, *wf_a, *wf_b;
    /* Wide loads emitted ahead of the statements that read their lanes (emit_cuda_vec.c): a
     * scalar load of buf at base + l (0 <= l < lanes) is written as component l of name. */
    struct {
        const te_buf *buf;
        te_expr *base;
        int lanes;
        const char *name;
    } vld[16];
    int nvld;
} cem;

/* ---- emit_cuda_expr.c ----
 * Records the first error ("te_emit_cuda '<kernel>': ..." on the context); later calls do
 * nothing. */
void te__cem_fail(cem *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The C++ name of an entity (kind 0 variable, 1 buffer, 2 the kernel; by pointer), made valid
 * and unique from base the first time. Arena string ("?" after a failure). */
const char *te__cem_lookup(cem *e, int kind, int id, const void *ptr, const char *base);
/* The names of a variable and of a buffer (te__cem_lookup). */
static inline const char *te__cem_var_name(cem *e, const te_expr *v)
{
    return te__cem_lookup(e, 0, v->u.var.id, v, v->u.var.name);
}
static inline const char *te__cem_buf_name(cem *e, const te_buf *b)
{
    return te__cem_lookup(e, 1, b->id, b, b->name);
}
/* The C++ storage type of dtype d (i64 is int when the program's indices fit in int; __half and
 * __nv_bfloat16 for f16 and bf16, marking the includes needed). */
const char *te__cem_ctype(cem *e, te_dtype d);
/* The C++ type of a value of dtype d: its storage type, float for f16 and bf16. */
const char *te__cem_value_ctype(cem *e, te_dtype d);
/* Appends one indented line to e->o. */
void te__cem_line(cem *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fails the emission when a range push (rc) ran out of memory. */
void te__cem_check_push(cem *e, int rc);
/* An expression as C++ text (arena string; "" after a failure). */
const char *te__cem_text(cem *e, const te_expr *x);
/* Lane l of a vector expression, as a scalar expression (NULL on failure, message on e). */
te_expr *te__cem_lane(cem *e, te_expr *x, int l);

/* ---- emit_cuda_intrin.c ----
 * Whether kernel body s calls a tensor intrinsic (TE_S_INTRIN). */
bool te__cem_has_intrin(const te_stmt *s);
/* Whether kernel body s, emitted for e's target, fills a prefetched shared tile with cp.async
 * (sm_80+ and a store to a te_buf.prefetched shared buffer). */
bool te__cem_uses_cp_async(const cem *e, const te_stmt *s);
/* Emits a TE_S_INTRIN call (inside a kernel with e->warp set), recording the intrinsic; fails
 * for a C intrinsic, a target without its features (sm), a local operand, or operands WMMA
 * cannot load (misaligned origin, row stride not a multiple of 16 bytes). */
void te__cem_gen_intrin(cem *e, const te_stmt *s);
/* Appends the prelude and the __device__ functions of the intrinsics e recorded to o (nothing
 * when none), each function under an include guard so that files joining several programs'
 * kernels define it once. */
void te__cem_emit_intrins(cem *e, te__sb *o);

/* ---- emit_cuda_vec.c ----
 * The component of a wide load emitted ahead that scalar load `load` reads ("X_v4.z"; arena
 * string), or NULL when none covers it. */
const char *te__cem_vload_lane(cem *e, const te_expr *load);
/* A vector store (not a plain copy) with its contiguous, aligned loads as float4/float2
 * temporaries and, when contiguous and aligned itself, written as one wide store. False (nothing
 * emitted) when nothing in it can be widened, or for cp.async fills and f16/bf16 stores. */
bool te__cem_gen_vector_store(cem *e, const te_stmt *s);
/* At position i of sequence seq: a run of straight-line scalar statements (lets and stores)
 * that reads all the lanes of aligned vectors of buffers the run does not write gets those
 * vectors loaded once ahead, then the run is emitted. Returns the position after the run, or i
 * (nothing emitted). */
int te__cem_widen_run(cem *e, const te_stmt *seq, int i);

/* ---- emit_cuda_stmt.c ----
 * Emits statement s (inside a kernel: block loops already taken off). */
void te__cem_gen_stmt(cem *e, const te_stmt *s);
/* Emits item i of sequence seq: a chain of lets that declares a variable an earlier item of the
 * sequence declared too (the copies of an unrolled body) goes into a block of its own. */
void te__cem_gen_seq_item(cem *e, const te_stmt *seq, int i);
/* "x", "y", "z". */
extern const char *const te__cem_dim_name[3];

#endif
