/*
 * backends/c/emit_impl.h (private): the C emitter's pieces, one file per job:
 *   emit_names.c    C names: kernel identifiers, unique names for buffers and variables, errors
 *   emit_prelude.c  types, the helper registry and the helpers' text (vector exp, log, ...),
 *                   the prelude before the first kernel
 *   emit_expr.c     expressions
 *   emit_stmt.c     statements (loops, stores, allocations, promoted buffers)
 *   emit_unit.c     a kernel's signature and packed entry; files of several kernels
 * It turns a lowered function into readable C99 (GNU C vector extensions, OpenMP).
 *
 * The emitted file has, in order:
 *   1. a comment header: the lowered function's provenance (operator, shapes, schedule trace)
 *      and the target key;
 *   2. a prelude: includes, then typedefs and inline helpers for exactly the vector types and
 *      operations the kernel uses (te_f32x16 and its unaligned twin te_f32x16u, te_load_*,
 *      te_store_*, te_blend_*, te_exp_*, ...);
 *   3. the kernel `int <name>(const float *restrict A, ..., float *restrict C)`, returning 0, or
 *      -1 when a heap allocation failed;
 *   4. the packed entry `int <name>_packed(void **args)`.
 *
 * Conventions of the generated code:
 *   - names: buffers and variables keep their IR names; a name that collides with another in
 *     the function, a C keyword, a libc/libm name or the prelude's te_ namespace gets "_<id>";
 *   - index arithmetic is int64_t; floordiv/floormod use te_floordiv_i64/te_floormod_i64
 *     unless both operands are provably non-negative (te__arith_nonneg over the ranges of the
 *     enclosing loops starting at >= 0 and of non-negative lets), where plain / and % are exact;
 *   - a vector of bools is an int32 mask vector (te_i32xL, -1 true, 0 false), whatever the
 *     width of the values compared;
 *   - register promotion (decided by the promote_registers pass, te__promotion on the ALLOC):
 *     a promoted buffer becomes variables: <buf>_v<k> for chunk k of L elements (te_f32xL) and
 *     <buf>_s<i> for a scalar element outside vector chunks; a scalar access inside a vector
 *     chunk reads or writes a lane (<buf>_v0[5]). This keeps micro-kernel accumulators in
 *     registers. Vectors arrive legalized to the target's register width (legalize_vectors);
 *   - streaming stores (store.nontemporal) of 16/32/64-byte vectors at an index provably a
 *     multiple of the lane count into an argument buffer use the ISA's streaming store
 *     (_mm512_stream_ps, ...; gcc has no __builtin_nontemporal_store) when the buffer is 64-byte
 *     aligned, which is tested once at entry (<buf>_nt), and ordinary stores otherwise; a
 *     parallel loop holding them becomes a parallel region with a `for nowait` whose threads
 *     each sfence once after their iterations, and an sfence ends the kernel.
 */
#ifndef TESSERA_BACKENDS_C_EMIT_IMPL_H
#define TESSERA_BACKENDS_C_EMIT_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/c/c_backend.h"
#include "backends/emit_common.h"
#include "schedule/passes.h"
#include "te/arith.h"
#include "te/internal.h"

/* ---- The emitter --------------------------------------------------------------------------- */

/* Helpers in emission order: a helper may only use helpers listed before it. */
typedef enum helper {
    H_SPLAT,
    H_BLEND,
    H_MIN,
    H_MAX,
    H_FLOORDIV,
    H_FLOORMOD,
    H_LOAD,
    H_STORE,
    H_STREAM,
    H_GATHER,
    H_GATHER_IDX,
    H_SCATTER,
    H_SCATTER_IDX,
    H_FABS,
    H_FLOOR,
    H_CEIL,
    H_RINT,
    H_SQRT,
    H_EXP,
    H_LOG,
    H_TANH,
    H_SIGMOID,
    H_ERF,
    H_POW,
    H_SFENCE,
    H_COUNT
} helper;

#define NLANES 7 /* lane counts 1, 2, 4, ..., 64 */

/* The bit of a lane count in the per-dtype masks of used types and helpers: log2(lanes). */
static inline int lane_slot(int lanes)
{
    int s = 0;
    while ((1 << s) < lanes)
        s++;
    return s;
}

/* A buffer the promote_registers pass put in registers, and its variables' name stems. */
typedef struct promo {
    const te_buf *buf;
    const te__promotion *pr; /* the pass's decision (te/internal.h) */
    const char *vname;       /* "<buf>_v" */
    const char *sname;       /* "<buf>_s" */
} promo;

/* The state of emitting one function; a unit's prelude is the union of its functions' needs
 * (vtypes, helpers, uses_*), merged into one more emitter. Heap-allocated by te__emit_c_unit;
 * names and texts live in ctx. */
typedef struct emitter {
    te_ctx *ctx;
    const te_lowered *f;
    const te_target *target; /* for the record: the passes already legalized for it */
    te__sb out;
    int indent;
    int err; /* first error status */

    te__name_table names; /* kinds: 0 variable (by id), 1 buffer, 2/3 a promoted buffer's
                           * vector/scalar stem (by pointer) */
    const char **used;    /* every C name taken in the function */
    int nused, capused;

    /* vector types used: bit lane_slot(lanes) per dtype; the unaligned twins separately */
    unsigned vtypes[TE_DTYPE_COUNT], vtypes_u[TE_DTYPE_COUNT];
    /* helpers used: bit lane_slot(lanes) per dtype (slot 0: the scalar helper) */
    unsigned helpers[H_COUNT][TE_DTYPE_COUNT];
    /* conversions used: bit lane_slot(lanes) per (destination, source value dtype) of the
     * casts that need a helper (te_cvt_*: float to integer, anything to f16/bf16, vectors of bytes
     * to or from 32-bit lanes) */
    unsigned casts[TE_DTYPE_COUNT][TE_DTYPE_COUNT];
    bool need_half; /* te_f16_to_f32, te_f32_to_f16, te_bf16_to_f32, te_f32_to_bf16 */
    bool need_immintrin;

    promo *promos;
    int npromos, cappromos;

    /* ranges of the variables of the enclosing loops and lets known to be >= 0 (te/arith.h) */
    te__range_map ranges;

    /* declarations of the current C block and its parents, for re-declaration checks */
    int decl[1024];
    int ndecl;
    int block_start[256];
    int nblocks;

    /* heap allocations live at this point (names, and their scratch sites or -1), for freeing
     * on an early return */
    const char *heap[64];
    int heap_site[64];
    int nheap;
    /* whole-call heap buffers kept between calls: sites te_scratch[0..nscratch) of the file
     * (the unit's count so far when a function starts) */
    int nscratch;
    int par_depth;
    bool uses_oom;
    bool uses_omp;    /* TE_OMP(...) pragmas */
    bool uses_unroll; /* TE_UNROLL(n) pragmas */
    bool uses_heap;   /* te_alloc64 / te_free64 */

    /* buffers used with streaming stores (argument buffers), and how many such stores */
    const te_buf *nt_bufs[64];
    const char *nt_flag[64];
    int n_nt;
    int nt_stores;

    /* tensor intrinsics called (te_tensorize), each once */
    const struct te_tensor_intrin *intrins[16];
    int n_intrins;
} emitter;

/* ---- emit_names.c ----
 * Records the first error of the emitter: status code and the message on the context ("te_emit_c
 * '<kernel>': ..."); later calls do nothing. */
void te__c_fail(emitter *em, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether C name z is taken in the function. */
bool te__c_name_used(const emitter *em, const char *z);
/* Takes name z (copied into the arena) and returns the copy ("oom" after a failure). */
const char *te__c_take_name(emitter *em, const char *z);
/* A fresh C name based on base (made valid and unique with "_<id>" or a counter), taken. */
const char *te__c_unique_name(emitter *em, const char *base, int id);
/* The C name of an entity: kind 0 a variable (by id), 1 a buffer, 2/3 a promoted buffer's
 * vector/scalar stem (by pointer); made from base the first time. Arena string. */
const char *te__c_lookup_name(emitter *em, int kind, int id, const void *ptr, const char *base);
/* The C names of a variable and of a buffer. */
const char *te__c_var_name(emitter *em, const te_expr *v);
const char *te__c_buf_name(emitter *em, const te_buf *b);

/* ---- emit_intrin.c ---- */
/* Emits a TE_S_INTRIN call, recording the intrinsic; fails when the target lacks its
 * features. */
void te__c_gen_intrin(emitter *em, const te_stmt *s);
/* Whether the intrinsics em recorded need AMX (the kernel then checks te_amx_permit()). */
bool te__c_unit_uses_amx(const emitter *em);
/* The features a recorded intrinsic needs ("amx_tile,amx_bf16"). */
const char *te__c_intrin_features(const struct te_tensor_intrin *in);
/* Appends the AMX runtime when needed, the intrinsics' preludes and their functions. */
void te__c_emit_intrins(const emitter *u, te__sb *o);

/* ---- emit_prelude.c ----
 * Short name of a dtype in type and helper names ("f32"; bools are "i32" masks). */
const char *te__c_dt_short(te_dtype d);
/* Element dtype of the vector type a value of dtype d is held in (bools are i32 masks). */
te_dtype te__c_vec_elem(te_dtype d);
/* Integer dtype of the same width (mask and bit-pattern type). */
te_dtype te__c_int_of(te_dtype d);
/* The vector typedef for lanes of dtype d ("te_f32x16"), marking it used. Arena string. */
const char *te__c_vtype(emitter *em, te_dtype d, int lanes);
/* The scalar C storage type of dtype d (uint16_t for f16 and bf16: their bits). */
static inline const char *te__c_ctype(te_dtype d) { return te_dtype_ctype(d); }
/* The C type of a scalar value of dtype d: its storage type, float for f16 and bf16 (loads
 * convert to float, stores round: the te_f16_to_f32 ... helpers of the prelude). */
static inline const char *te__c_value_ctype(te_dtype d)
{
    return te_dtype_ctype(te_dtype_compute(d));
}
/* The name of the prelude's conversion of half dtype d between storage and float (to_storage
 * 1: the rounding store), marking the conversions needed. */
const char *te__c_half_conv(emitter *em, te_dtype d, int to_storage);
/* The name of the conversion helper of a cast to `to` from a value of dtype `from` over lanes,
 * marking it needed, or NULL when a C cast (or __builtin_convertvector) is exact: casts from
 * floats to integers saturate (te_cvt_i32_f32), casts to f16/bf16 round (te_cvt_f16_f32). */
const char *te__c_cast_helper(emitter *em, te_dtype to, te_dtype from, int lanes);
/* Type name of a value: scalar C value type (float for f16/bf16) or vector typedef. */
const char *te__c_type_of(emitter *em, te_dtype d, int lanes);
/* Name of a helper for dtype/lanes ("te_exp_f32x16", "te_floordiv_i64"), marking it (and
 * what it uses) needed. Arena string. */
const char *te__c_helper_name(emitter *em, helper h, te_dtype d, int lanes);
/* Marks a helper (and the helpers, types and headers it uses) needed. */
void te__c_use_helper(emitter *em, helper h, te_dtype d, int lanes);
/* Appends the includes, macros, vector typedefs and helpers u recorded as needed: everything
 * before the first kernel. */
void te__c_emit_prelude(emitter *u, te__sb *o, bool standalone);

/* ---- emit_expr.c ---- */
/* Prints e, in parentheses when it binds looser than minp. */
void te__c_put(emitter *em, te__sb *o, const te_expr *e, int minp);
/* Prints e as a full vector of lanes (broadcasting scalars), for helper arguments. */
void te__c_put_vec(emitter *em, te__sb *o, const te_expr *e, int lanes);
/* The promoted variables of buffer b in the statements being emitted, or NULL. */
const promo *te__c_find_promo(const emitter *em, const te_buf *b);
/* Prints the flat index of an access with n indices. */
void te__c_put_index(emitter *em, te__sb *o, const te_buf *b, int n, te_expr *const *idx);
/* Prints the variable holding element i of a promoted buffer (a lane or a scalar). */
void te__c_put_promo_scalar(te__sb *o, const promo *p, int64_t i);
/* Text of an expression (te__c_put into the arena; "" after a failure). */
const char *te__c_expr_text(emitter *em, const te_expr *e, int minp);

/* ---- emit_stmt.c ----
 * Indented lines of the function body (em->out at em->indent). */
void te__c_line_start(emitter *em);
void te__c_line(emitter *em, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Enters and leaves a C block (indentation and the block's declarations). */
void te__c_block_open(emitter *em);
void te__c_block_close(emitter *em);
/* Emits statement s into em->out. */
void te__c_gen_stmt(emitter *em, const te_stmt *s);

#endif
