/*
 * tessera/te.h: tensor expressions.
 *
 * A te_ctx is an arena that owns every expression, tensor and schedule object built in it;
 * te_ctx_free releases them all at once. Expressions are immutable once built.
 *
 *     te_ctx *ctx = te_ctx_create();
 *     te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
 *     te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
 *     te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
 *     te_expr *k = te_reduce_axis(ctx, "k", K);
 *     te_expr *prod = te_mul(ctx, TE_AT(ctx, A, i, k), TE_AT(ctx, B, k, j));
 *     te_tensor *C = te_compute(ctx, "C", 2, (te_expr *[]){i, j}, te_sum(ctx, prod, 1, &k));
 *     if (!C) fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));
 *
 * Errors: constructors return NULL on bad input and leave a message on the context that
 * names the tensor, axis or argument at fault. A constructor given a NULL operand returns NULL
 * without replacing the first message, so a whole expression can be built and checked once.
 *
 * Index arithmetic is in i64: axes and integer constants made with te_int are TE_I64.
 */
#ifndef TESSERA_TE_H
#define TESSERA_TE_H

#include <stdint.h>
#include <stdio.h>

#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct te_ctx te_ctx;
typedef struct te_expr te_expr;
typedef struct te_tensor te_tensor;
typedef struct te_reducer te_reducer;

/* Largest rank of a tensor. */
#define TE_MAX_DIMS 8

/* ---- Context ------------------------------------------------------------------------ */

/* Creates an empty context. Returns NULL only when out of memory. Free with te_ctx_free. */
te_ctx *te_ctx_create(void);
/* Creates a context whose expressions and schedules may use the tensors and expressions of
 * `parent` and of its ancestors (at most 8 levels), for short-lived work over a longer-lived
 * computation: a scratch context per tuning batch. A plain context refuses operands built in
 * any other context (TE_ERR_ARG), since freeing that one would leave dangling pointers; the
 * caller of this function promises to free the child before the parent. Returns NULL when out
 * of memory, parent is NULL or nested too deep. */
te_ctx *te_ctx_create_child(te_ctx *parent);
/* Frees the context and every object built in it. Accepts NULL. */
void te_ctx_free(te_ctx *ctx);
/* Message of the first error since the last te_ctx_clear_error ("" when none). Owned by ctx. */
const char *te_ctx_errmsg(const te_ctx *ctx);
/* Status code of that error (TE_OK when none). */
int te_ctx_errcode(const te_ctx *ctx);
/* Forgets the current error so the next failure records its own message. */
void te_ctx_clear_error(te_ctx *ctx);
/* Records an error on ctx (printf-style) unless one is already recorded; returns `code`.
 * Useful for code built on top of the library (operator libraries) to report like it does. */
int te_ctx_set_error(te_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Expressions ----------------------------------------------------------------------- */

/* Binary operators. DIV and MOD follow C (truncate toward zero) on integers; FLOORDIV and
 * FLOORMOD round toward negative infinity. Comparisons and AND/OR produce TE_BOOL. */
typedef enum te_binop {
    TE_ADD,
    TE_SUB,
    TE_MUL,
    TE_DIV,
    TE_MOD,
    TE_FLOORDIV,
    TE_FLOORMOD,
    TE_MIN,
    TE_MAX,
    TE_EQ,
    TE_NE,
    TE_LT,
    TE_LE,
    TE_GT,
    TE_GE,
    TE_AND,
    TE_OR
} te_binop;

/* Math intrinsics on floating-point values. POW takes two arguments, the rest one. RINT rounds
 * to the nearest integer, ties to even (the IEEE default rounding, C's rint). */
typedef enum te_intrin {
    TE_EXP,
    TE_LOG,
    TE_SQRT,
    TE_RSQRT,
    TE_TANH,
    TE_ERF,
    TE_SIGMOID,
    TE_FABS,
    TE_FLOOR,
    TE_CEIL,
    TE_POW,
    TE_RINT,
    TE_INTRIN_COUNT
} te_intrin;

/* Constants. te_const converts `v` to dtype; te_int makes an i64; te_f32 an f32. */
te_expr *te_const(te_ctx *ctx, te_dtype dtype, double v);
te_expr *te_int(te_ctx *ctx, int64_t v);
te_expr *te_f32(te_ctx *ctx, double v);

/* A data-parallel axis with range [0, extent), used as the output axes of te_compute. */
te_expr *te_axis(te_ctx *ctx, const char *name, int64_t extent);
/* A reduction axis with range [0, extent), valid only inside te_reduce over that axis. */
te_expr *te_reduce_axis(te_ctx *ctx, const char *name, int64_t extent);
/* A free scalar variable (for user-defined reducers). */
te_expr *te_var(te_ctx *ctx, const char *name, te_dtype dtype);

/* Binary operation. Operands must have the same dtype, except that a constant operand is
 * converted to the other operand's dtype. */
te_expr *te_binary(te_ctx *ctx, te_binop op, te_expr *a, te_expr *b);
te_expr *te_add(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_sub(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_mul(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_div(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_mod(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_floordiv(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_floormod(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_min(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_max(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_eq(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_ne(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_lt(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_le(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_gt(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_ge(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_and(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_or(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_not(te_ctx *ctx, te_expr *a);
te_expr *te_neg(te_ctx *ctx, te_expr *a);

/* select evaluates both branches (like a vector blend); if_then_else evaluates only the taken
 * one, so it may guard an access that would be out of bounds (padding). `cond` is TE_BOOL and
 * the branches have one dtype. */
te_expr *te_select(te_ctx *ctx, te_expr *cond, te_expr *t, te_expr *f);
te_expr *te_if_then_else(te_ctx *ctx, te_expr *cond, te_expr *t, te_expr *f);
/* Converts a value to dtype (C conversion rules). */
te_expr *te_cast(te_ctx *ctx, te_dtype dtype, te_expr *a);
/* Math intrinsic; args must be floating point; nargs must match (2 for POW, else 1). */
te_expr *te_call(te_ctx *ctx, te_intrin fn, int nargs, te_expr *const *args);
te_expr *te_exp(te_ctx *ctx, te_expr *a);
te_expr *te_log(te_ctx *ctx, te_expr *a);
te_expr *te_sqrt(te_ctx *ctx, te_expr *a);
te_expr *te_rsqrt(te_ctx *ctx, te_expr *a);
te_expr *te_tanh(te_ctx *ctx, te_expr *a);
te_expr *te_erf(te_ctx *ctx, te_expr *a);
te_expr *te_sigmoid(te_ctx *ctx, te_expr *a);
te_expr *te_fabs(te_ctx *ctx, te_expr *a);
te_expr *te_floor(te_ctx *ctx, te_expr *a);
te_expr *te_ceil(te_ctx *ctx, te_expr *a);
te_expr *te_pow(te_ctx *ctx, te_expr *a, te_expr *b);
te_expr *te_rint(te_ctx *ctx, te_expr *a); /* nearest integer, ties to even */
/* Name of an intrinsic ("exp"), or "?" */
const char *te_intrin_name(te_intrin fn);

/* Element of a tensor: t[idx[0], ..., idx[n-1]]. n must equal the tensor's rank and each
 * index must be an integer expression. When every index has a constant range (axes and
 * constants), an index that can leave [0, shape) is an error naming the tensor and axis;
 * accesses guarded by if_then_else are checked at run time by the reference instead. */
te_expr *te_read(te_ctx *ctx, te_tensor *t, int n, te_expr *const *idx);
#define TE__NARGS(...) ((int)(sizeof((te_expr *[]){__VA_ARGS__}) / sizeof(te_expr *)))
/* TE_AT(ctx, T, i, j) is te_read(ctx, T, 2, (te_expr *[]){i, j}). */
#define TE_AT(ctx, t, ...) te_read((ctx), (t), TE__NARGS(__VA_ARGS__), (te_expr *[]){__VA_ARGS__})

/* ---- Reductions ------------------------------------------------------------------------ */

/* Where a buffer of the lowered program lives (te_cache_read/te_cache_write choose it). */
typedef enum te_scope {
    TE_SCOPE_GLOBAL, /* function arguments and root-level intermediates (heap) */
    TE_SCOPE_LOCAL,  /* per-thread scratch: stack arrays, promoted to registers when small */
    TE_SCOPE_SHARED, /* GPU shared memory (the CUDA backend) */
} te_scope;

typedef enum te_reduce_kind { TE_RSUM, TE_RMAX, TE_RMIN, TE_RPROD, TE_RCUSTOM } te_reduce_kind;

/* A user-defined commutative, associative reducer: combine(x, y) over free variables x and y
 * (made with te_var, both of dtype `identity`'s dtype) and its identity element. */
te_reducer *te_reducer_create(te_ctx *ctx, const char *name, te_expr *x, te_expr *y,
                              te_expr *combine, te_expr *identity);
/* Reduction of `src` over reduction axes. A reduction must be the whole body of a compute. */
te_expr *te_reduce(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_expr *src, int naxes,
                   te_expr *const *axes);
te_expr *te_sum(te_ctx *ctx, te_expr *src, int naxes, te_expr *const *axes);
te_expr *te_rmax(te_ctx *ctx, te_expr *src, int naxes, te_expr *const *axes);
te_expr *te_rmin(te_ctx *ctx, te_expr *src, int naxes, te_expr *const *axes);
te_expr *te_prod(te_ctx *ctx, te_expr *src, int naxes, te_expr *const *axes);

/* ---- Tuple reductions ------------------------------------------------------------------- */

/* Reducers over tuples of values (TVM's comm_reducer over tuples): one reduction that carries
 * several accumulators, each combined from all of them, yielding several outputs from one
 * pass over the data (argmax needs the value and its index; Welford the count, mean and M2;
 * an online softmax the running max and the sum rescaled to it).
 *
 *     te_reducer *r = te_reducer_argmax(ctx, TE_F32, TE_I64);
 *     te_expr *k = te_reduce_axis(ctx, "k", K), *i = te_axis(ctx, "i", M);
 *     te_expr *red = te_reduce_tuple(ctx, r, 2, (te_expr *[]){TE_AT(ctx, A, i, k), k}, 1, &k);
 *     te_tensor *out[2];
 *     int rc = te_compute_tuple(ctx, 2, (const char *[]){"val", "idx"}, 1, &i, red, out);
 *
 * The outputs are ordinary tensors (read them, schedule them, pass them to te_lower), but a
 * schedule gives all of them one stage: te_schedule_stage of any of them returns it, and the
 * stage is named after the first output. Every schedule primitive applies to the whole tuple;
 * one that cannot (te_cache_write, te_compute_inline of a tuple stage) is refused with
 * TE_ERR_SCHEDULE. All reducers must be commutative and associative up to rounding, since
 * schedules reorder the combination (vector lanes, rfactor, GPU threads). */

/* Most components of a tuple reducer. */
#define TE_MAX_TUPLE 8

/* A reducer over n-tuples (1 <= n <= TE_MAX_TUPLE): combine[i] is an expression of the free
 * variables x[0..n) (the accumulator) and y[0..n) (the incoming value), identity[i] the
 * identity element; x[i], y[i], combine[i] and identity[i] share one dtype (component i's).
 * The incoming value of a te_reduce_tuple is the tuple of its sources, so y has the shape of
 * the accumulator (a Welford element is (1, v, 0)). Owned by ctx. NULL on error (TE_ERR_ARG for
 * bad or repeated variables, TE_ERR_DTYPE for mixed dtypes within a component). */
te_reducer *te_reducer_create_tuple(te_ctx *ctx, const char *name, int n, te_expr *const *x,
                                    te_expr *const *y, te_expr *const *combine,
                                    te_expr *const *identity);
/* Components of a reducer (1 for scalar reducers) and the dtype of component i. */
int te_reducer_ncomp(const te_reducer *r);
te_dtype te_reducer_dtype(const te_reducer *r, int i);

/* Built-in tuple reducers, made once per context and cached (the same pointer every call).
 * NULL with TE_ERR_DTYPE for dtypes they do not support.
 *
 * argmax / argmin: (value, index), sources (v, index expression, e.g. the reduction axis);
 *   ties go to the smallest index in any combination order; identity (lowest / highest value,
 *   largest index). value is any non-bool dtype, index an integer dtype (TE_I64 usually).
 * welford: (count, mean, M2) in dt (float), sources (1, v, 0); the variance is M2 / count.
 *   Chan's parallel combine, safe on two empty states.
 * online_softmax: (max m, sum s) in dt (float), sources (v, 1): combine M = max(m1, m2),
 *   s = s1 * exp(m1 - M) + s2 * exp(m2 - M), computed with one exp (the smaller max's sum is
 *   scaled by exp(min - max), and equal maxima scale by 1), so two -inf states give
 *   (-inf, s1 + s2) and never NaN; identity (-inf, 0).
 *   sum(exp(v - m)) over the row is s, without overflow for large v.
 * kahan: compensated summation, (sum s, compensation c) in dt (float), sources (v, 0). The
 *   true sum of a state is s - c (s alone is the classic Kahan result); merging two states
 *   adds s2 - c1 - c2 to s1 with a compensated step. The C backend compiles without
 *   -ffast-math, so the compiler keeps the compensation. */
te_reducer *te_reducer_argmax(te_ctx *ctx, te_dtype value, te_dtype index);
te_reducer *te_reducer_argmin(te_ctx *ctx, te_dtype value, te_dtype index);
te_reducer *te_reducer_welford(te_ctx *ctx, te_dtype dt);
te_reducer *te_reducer_online_softmax(te_ctx *ctx, te_dtype dt);
te_reducer *te_reducer_kahan(te_ctx *ctx, te_dtype dt);

/* Reduction of the tuple srcs[0..n) with tuple reducer r over reduction axes; n must equal
 * the reducer's component count and srcs[i] have component i's dtype. The result is valid
 * only as the body of te_compute_tuple (te_compute and every other constructor refuse it).
 * NULL on error. */
te_expr *te_reduce_tuple(te_ctx *ctx, te_reducer *r, int n, te_expr *const *srcs, int naxes,
                         te_expr *const *axes);
/* A compute with n outputs from one tuple reduction: outs[i][axes] = component i, named
 * names[i] (distinct), of component i's dtype. Fills outs[0..n) (tensors owned by ctx) and
 * returns TE_OK, or returns an error (outs NULL) when body is not a te_reduce_tuple result,
 * n differs from its component count, or a te_compute check fails. */
int te_compute_tuple(te_ctx *ctx, int n, const char *const *names, int ndim, te_expr *const *axes,
                     te_expr *body, te_tensor **outs);
/* Outputs in t's te_compute_tuple (0 for other tensors), and output i of it (NULL if none). */
int te_tensor_tuple_size(const te_tensor *t);
te_tensor *te_tensor_tuple_member(const te_tensor *t, int i);

/* ---- Tensors --------------------------------------------------------------------------- */

/* An input tensor of constant shape. Extents must be positive and the element count must fit
 * in int64 (TE_ERR_OVERFLOW otherwise). */
te_tensor *te_placeholder(te_ctx *ctx, const char *name, te_dtype dtype, int ndim,
                          const int64_t *shape);
/* A computed tensor: out[axes] = body. axes are distinct te_axis variables, in order; the
 * shape is their extents. body may use only these axes, and reduction axes only inside its
 * top-level reduction. */
te_tensor *te_compute(te_ctx *ctx, const char *name, int ndim, te_expr *const *axes, te_expr *body);
/* Like te_compute, but the axes are created (named i0, i1, ...) and passed to fn, which
 * returns the body (or NULL on error). */
typedef te_expr *(*te_compute_fn)(te_ctx *ctx, te_expr *const *axes, void *user);
te_tensor *te_compute_shape(te_ctx *ctx, const char *name, int ndim, const int64_t *shape,
                            te_compute_fn fn, void *user);

const char *te_tensor_name(const te_tensor *t);
te_dtype te_tensor_dtype(const te_tensor *t);
int te_tensor_ndim(const te_tensor *t);
/* Shape array of ndim entries, owned by the context. */
const int64_t *te_tensor_shape(const te_tensor *t);
/* Number of elements. */
int64_t te_tensor_numel(const te_tensor *t);
/* 1 for placeholders, 0 for computed tensors. */
int te_tensor_is_placeholder(const te_tensor *t);
/* Attaches a free-form operator tag ("matmul") used in provenance comments; copied. */
void te_tensor_set_tag(te_ctx *ctx, te_tensor *t, const char *tag);
const char *te_tensor_tag(const te_tensor *t);

/* Prints an expression in readable infix form. */
void te_expr_print(const te_expr *e, FILE *f);
/* Prints a tensor's definition: "C[i, j] = sum(A[i, k] * B[k, j], k)". */
void te_tensor_print(const te_tensor *t, FILE *f);

/* ---- Reference interpreter ------------------------------------------------------------- */

/* Evaluates output tensors directly from their definitions, in float64: the oracle every
 * schedule and backend is checked against. in_data[i] points at the contiguous row-major data
 * of inputs[i], in that placeholder's dtype. out_data[i] receives te_tensor_numel(outputs[i])
 * doubles. Every placeholder the outputs depend on must be among inputs. Returns TE_OK, or an
 * error (missing input, out-of-bounds read at run time, integer division by zero) with a
 * message naming the tensor and axis. */
int te_reference_eval(te_ctx *ctx, int n_in, te_tensor *const *inputs, const void *const *in_data,
                      int n_out, te_tensor *const *outputs, double *const *out_data);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TE_H */
