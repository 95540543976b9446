/*
 * tessera/tensorize.h: tensor intrinsics and the tensorize primitive (DESIGN.md item 16).
 *
 * A tensor intrinsic is a small computation that a machine does with a few instructions (an AMX
 * tile dot product, an AVX-512 BF16 or VNNI dot-product micro-kernel, a CUDA mma fragment). It is
 * declared by
 *   - a description: a tensor expression of what it computes, over placeholders (shapes, dtypes,
 *     access pattern), built by a callback in the registry's own context;
 *   - an implementation: the body of a C (or CUDA) function with a fixed signature, below;
 *   - the target features it needs ("amx_tile,amx_bf16").
 * te_tensorize(stage, iter, intrinsic) replaces the loop nest at and under `iter` with one call
 * of the implementation when the nest computes exactly what the description does; otherwise it
 * refuses with the reason.
 *
 *     te_tensorize(sc, ii, te_tensor_intrin_find("amx_bf16_32x32"));
 *
 * The generated function. For an intrinsic named NAME whose description has output O and inputs
 * I1..In (placeholders, in the order the callback returns them), the implementation is the body
 * of
 *     static void NAME(Tout *O, int64_t O_s0, ..., const T1 *I1, int64_t I1_s0, ..., int64_t n)
 * where each operand X comes as a pointer to its element at the tile's origin (the description's
 * index 0, 0, ...) followed by one stride (in elements) per free dimension of X: X_s0 for its
 * first dimension, X_s1 for its second, ... up to `nfree` of them (the remaining dimensions of X
 * are dense: laid out exactly as in the description). T is the dtype's C storage type (uint16_t
 * for f16 and bf16). `n` is passed only when the description has a variable axis: the extent of
 * that reduction axis in this call, a positive multiple of its extent in the description.
 * Operand names are the description tensors' names, which must be C identifiers. A free
 * dimension of the stage's access may move a whole multiple of the described step (a strided
 * convolution's rows): the stride passed is then the buffer's times that multiple. An
 * intrinsic needing "amx_tile" may call te_amx_ready() (the C backend's AMX runtime: it loads
 * palette 1 with eight tiles of 16 rows x 64 bytes) before its first tile instruction.
 *
 * CUDA intrinsics (schedule/intrin_cuda.c: WMMA f16/bf16/tf32, mma.sync s8) are warp-collective:
 * bind the tile loops to blockIdx and threadIdx.y/z and nothing to threadIdx.x; the kernel then
 * runs with blockDim.x = 32, every lane calling with the same pointers (docs/TENSORIZE.md,
 * "CUDA"). Their feature "sm_80" means te_target.sm >= 80.
 *
 * Reductions. For a description that is a sum, `c_update` must compute O += description (the
 * accumulator holds a partial sum). When the whole reduction lies inside the tensorized nest and
 * `c_overwrite` is given, that form (O = description) is called instead of initializing O
 * first; without it the nest's output is set to zero by ordinary code before the call.
 */
#ifndef TESSERA_TENSORIZE_H
#define TESSERA_TENSORIZE_H

#include "tessera/schedule.h"
#include "tessera/target.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TE_TENSOR_INTRIN_MAX_OPERANDS 8

typedef struct te_tensor_intrin te_tensor_intrin;

/* Builds an intrinsic's description in ctx: stores up to TE_TENSOR_INTRIN_MAX_OPERANDS - 1 input
 * placeholders in ins (argument order) and returns how many, with *out the computed tensor; a
 * negative te_status on error (the message on ctx). */
typedef int (*te_tensor_intrin_describe_fn)(te_ctx *ctx, void *user, te_tensor **ins,
                                            te_tensor **out);

/* Declaration of a tensor intrinsic. Strings are copied by te_intrin_register. */
typedef struct te_tensor_intrin_desc {
    const char *name; /* C identifier, unique in the registry */
    te_tensor_intrin_describe_fn describe;
    void *user; /* passed to describe (only during te_intrin_register) */
    /* Per operand (output first, then the inputs): how many leading dimensions have a free
     * stride, passed to the function; the others must be dense. 0 in every entry (the
     * default) means rank - 1 for each operand. */
    int nfree[TE_TENSOR_INTRIN_MAX_OPERANDS];
    /* Index among the description's reduction axes of an axis whose extent may be any positive
     * multiple of its described extent (passed as `n`); -1 when there is none. */
    int var_axis;
    te_backend_kind backend; /* TE_BACKEND_C or TE_BACKEND_CUDA */
    const char *features;    /* comma-separated target features required ("" or NULL: none) */
    const char *c_update;    /* function body: output += what the description computes */
    const char *c_overwrite; /* optional (NULL): output = what the description computes */
    const char *c_prelude;   /* optional: code emitted once before the functions */
    const char *doc;         /* one line for listings */
} te_tensor_intrin_desc;

/* Registers an intrinsic for the whole process (thread-safe): calls d->describe once in the
 * registry's own context and checks the description (a compute over the returned
 * placeholders, C-identifier names, a sum when var_axis is set). Returns the intrinsic (owned
 * by the registry, alive until the process ends) or NULL with a message in *err (a static or
 * thread-local string; err may be NULL): a duplicate name, a bad description. */
const te_tensor_intrin *te_tensor_intrin_register(const te_tensor_intrin_desc *d, const char **err);

/* The registered intrinsic called `name` (built-in ones are registered on first use), or NULL. */
const te_tensor_intrin *te_tensor_intrin_find(const char *name);
/* How many intrinsics are registered, and the i-th of them (registration order; built-ins
 * first), NULL when out of range. */
int te_tensor_intrin_count(void);
const te_tensor_intrin *te_tensor_intrin_at(int i);

/* Facts about an intrinsic (strings owned by the registry). */
const char *te_tensor_intrin_name(const te_tensor_intrin *in);
const char *te_tensor_intrin_features(const te_tensor_intrin *in);
const char *te_tensor_intrin_doc(const te_tensor_intrin *in);
te_backend_kind te_tensor_intrin_backend(const te_tensor_intrin *in);
/* The description's computed tensor (in the registry's context: read it, never build on it). */
te_tensor *te_tensor_intrin_output(const te_tensor_intrin *in);
/* The index among the description's reduction axes of its variable axis, -1 when none; and
 * how many reduction axes the description has. */
int te_tensor_intrin_var_axis(const te_tensor_intrin *in);
int te_tensor_intrin_nreduce(const te_tensor_intrin *in);
/* Whether target t has every feature the intrinsic needs (its backend and ISA list). */
int te_tensor_intrin_supported(const te_tensor_intrin *in, const te_target *t);

/* Replaces the loop nest of stage st at and under its loop `at` with a call of `in`. The nest
 * must compute what the description does: every loop in it is the innermost piece of one
 * axis (stride 1, no fuse, splits that divide), their extents those of the description's axes
 * (the variable axis: a multiple), the stage's body the description's up to the tensors it
 * reads, whose accesses have the described strides along the nest's loops and whose trailing
 * dimensions are dense. No loop in the nest may be annotated or have a stage computed at it.
 * Returns TE_OK or TE_ERR_SCHEDULE / TE_ERR_ARG with the reason on the context. Recorded in the
 * trace as "tensorize STAGE at ITER NAME". */
int te_tensorize(te_stage *st, te_iter *at, const te_tensor_intrin *in);

/* Checks, without changing anything, whether te_tensorize(st, at, in) would be accepted:
 * TE_OK, or the error code with the reason in why (at most n bytes; may be NULL). */
int te_tensorize_check(te_stage *st, te_iter *at, const te_tensor_intrin *in, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TENSORIZE_H */
