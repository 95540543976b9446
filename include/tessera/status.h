/*
 * tessera/status.h: status codes and data types shared by every Tessera module.
 *
 * Every fallible Tessera call returns an int status (TE_OK == 0, a negative TE_ERR_* code on
 * failure) or a pointer that is NULL on failure. The human-readable message that goes with a
 * failure is kept by the object the call was made on (te_ctx_errmsg, te_db_errmsg, ...).
 */
#ifndef TESSERA_STATUS_H
#define TESSERA_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One table generates the codes and their strings (libuv's habit). */
#define TE_STATUS_MAP(X)                                                                           \
    X(OK, 0, "ok")                                                                                 \
    X(ERR_NOMEM, -1, "out of memory")                                                              \
    X(ERR_ARG, -2, "invalid argument")                                                             \
    X(ERR_SHAPE, -3, "shape mismatch")                                                             \
    X(ERR_DTYPE, -4, "data type mismatch")                                                         \
    X(ERR_BOUNDS, -5, "index out of bounds")                                                       \
    X(ERR_SCHEDULE, -6, "illegal schedule")                                                        \
    X(ERR_LOWER, -7, "lowering failed")                                                            \
    X(ERR_COMPILE, -8, "compilation failed")                                                       \
    X(ERR_LOAD, -9, "loading a compiled module failed")                                            \
    X(ERR_RUNTIME, -10, "kernel run failed")                                                       \
    X(ERR_IO, -11, "input/output error")                                                           \
    X(ERR_DB, -12, "database error")                                                               \
    X(ERR_NO_CUDA, -13, "CUDA driver or device not available")                                     \
    X(ERR_UNSUPPORTED, -14, "not supported")                                                       \
    X(ERR_OVERFLOW, -15, "integer overflow")                                                       \
    X(ERR_NOT_FOUND, -16, "not found")                                                             \
    X(ERR_CORRUPT, -17, "file is corrupt or not a Tessera database")                               \
    X(ERR_VERSION, -18, "file was written by a newer version")                                     \
    X(ERR_BUSY, -19, "resource busy")                                                              \
    X(ERR_READONLY, -20, "read-only")                                                              \
    X(ERR_TIMEOUT, -21, "timed out")                                                               \
    X(ERR_WRONG_ANSWER, -22, "result differs from the reference")                                  \
    X(ERR_INTERNAL, -23, "internal error")

typedef enum te_status {
#define TE__STATUS_ENUM(name, code, str) TE_##name = code,
    TE_STATUS_MAP(TE__STATUS_ENUM)
#undef TE__STATUS_ENUM
} te_status;

/* Returns a static string describing status code `status` ("unknown status" if not a code). */
const char *te_status_str(int status);

/* Element data types: one row each, and every fact about a dtype lives in its row (DESIGN.md
 * item 15), so that a new dtype arrives once:
 *   name   short name, used in database keys, .npy headers, messages ("f32");
 *   ctype  C storage type: the C API, generated C and `tessera gen` headers (f16 and bf16 are
 *          their IEEE bit patterns in a uint16_t);
 *   cutype CUDA storage type in generated CUDA (__half and __nv_bfloat16 of cuda_fp16.h and
 *          cuda_bf16.h);
 *   size   bytes per element;
 *   kind   TE_DKIND_BOOL, _SINT, _UINT or _FLOAT;
 *   prec   significand bits of a float, the implicit one included (unit roundoff 2^-prec),
 *          0 for the others;
 *   comp   the dtype arithmetic on values of this dtype is done in: f16 and bf16 values are
 *          converted to f32 when loaded, computed in f32 and rounded (to nearest, ties to even)
 *          when stored or cast;
 *   cload/cstore, cuload/custore  the generated C and CUDA functions converting storage to
 *          `comp` and back (NULL where storage is the value).
 * New dtypes go at the end: the enum values are hashed into workload keys (autotune/workload.c),
 * so existing values must not move. */
#define TE_DTYPE_MAP(X)                                                                            \
    X(BOOL, "bool", "bool", "bool", 1, BOOL, 0, BOOL, NULL, NULL, NULL, NULL)                      \
    X(I8, "i8", "int8_t", "signed char", 1, SINT, 0, I8, NULL, NULL, NULL, NULL)                   \
    X(U8, "u8", "uint8_t", "unsigned char", 1, UINT, 0, U8, NULL, NULL, NULL, NULL)                \
    X(I32, "i32", "int32_t", "int", 4, SINT, 0, I32, NULL, NULL, NULL, NULL)                       \
    X(I64, "i64", "int64_t", "long long", 8, SINT, 0, I64, NULL, NULL, NULL, NULL)                 \
    X(F32, "f32", "float", "float", 4, FLOAT, 24, F32, NULL, NULL, NULL, NULL)                     \
    X(F64, "f64", "double", "double", 8, FLOAT, 53, F64, NULL, NULL, NULL, NULL)                   \
    X(F16, "f16", "uint16_t", "__half", 2, FLOAT, 11, F32, "te_f16_to_f32", "te_f32_to_f16",       \
      "__half2float", "__float2half_rn")                                                           \
    X(BF16, "bf16", "uint16_t", "__nv_bfloat16", 2, FLOAT, 8, F32, "te_bf16_to_f32",               \
      "te_f32_to_bf16", "__bfloat162float", "__float2bfloat16_rn")

typedef enum te_dtype {
#define TE__DTYPE_ENUM(name, str, ctype, cutype, size, kind, prec, comp, cl, cs, cul, cus)         \
    TE_##name,
    TE_DTYPE_MAP(TE__DTYPE_ENUM)
#undef TE__DTYPE_ENUM
        TE_DTYPE_COUNT
} te_dtype;

/* The kind column of TE_DTYPE_MAP. */
typedef enum te_dtype_kind {
    TE_DKIND_BOOL,
    TE_DKIND_SINT,
    TE_DKIND_UINT,
    TE_DKIND_FLOAT
} te_dtype_kind;

/* Short name of a dtype ("f32"), or "?" for a value that is not a te_dtype. */
const char *te_dtype_str(te_dtype dtype);
/* C storage type name of a dtype ("float"; "uint16_t" for f16 and bf16), or NULL. */
const char *te_dtype_ctype(te_dtype dtype);
/* CUDA storage type name of a dtype ("float", "__half", "__nv_bfloat16"), or NULL. */
const char *te_dtype_cuda_type(te_dtype dtype);
/* Size of one element in bytes, or 0 for a value that is not a te_dtype. */
size_t te_dtype_size(te_dtype dtype);
/* Parses "f32", "i64", "bf16", ... into *out. Returns TE_OK or TE_ERR_ARG. */
int te_dtype_parse(const char *name, te_dtype *out);
/* 1 for f16/bf16/f32/f64, else 0. */
int te_dtype_is_float(te_dtype dtype);
/* 1 for bool/i8/u8/i32/i64, else 0. */
int te_dtype_is_int(te_dtype dtype);
/* 1 for the storage-only floats (f16, bf16), whose arithmetic is done in f32, else 0. */
int te_dtype_is_half(te_dtype dtype);
/* The kind of a dtype (TE_DKIND_BOOL for a value that is not a te_dtype). */
te_dtype_kind te_dtype_kind_of(te_dtype dtype);
/* The dtype arithmetic on dtype's values is computed in: TE_F32 for f16 and bf16, dtype itself
 * otherwise (dtype itself for a value that is not a te_dtype). */
te_dtype te_dtype_compute(te_dtype dtype);
/* Unit roundoff of a float dtype, 2^-prec (f64 2^-53, f32 2^-24, f16 2^-11, bf16 2^-8); 0 for
 * the integer dtypes, whose arithmetic is exact. */
double te_dtype_unit_roundoff(te_dtype dtype);
/* Generated-code spelling of the conversions between a dtype's storage and its compute dtype:
 * cuda 0 for generated C ("te_f16_to_f32", "te_f32_to_f16", defined in the generated file's
 * prelude), 1 for generated CUDA ("__half2float", "__float2half_rn"); to_storage 1 for the
 * conversion that stores. NULL for dtypes stored as their values. Static strings. */
const char *te_dtype_conv_fn(te_dtype dtype, int cuda, int to_storage);

/* ---- Conversions (the software reference of casts and stores) ------------------------------
 * Rounding of te_cast and of stores, everywhere (te_reference_eval, generated C and CUDA):
 *   - float to narrower float (f64->f32, f32->f16, f32->bf16, f16<->bf16): round to nearest,
 *     ties to even; values beyond the largest finite one become +-infinity (f16: |x| >= 65520;
 *     bf16: |x| >= 0x1.ffp127 rounded, i.e. past 3.3961e38); f16 subnormals (below 2^-14, steps
 *     of 2^-24) are produced and read; +-0 and +-inf keep their sign; a NaN stays a NaN, quiet
 *     (quiet bit set), with its sign and the top bits of its payload. f64 -> f16/bf16 and
 *     i32/i64 -> f16/bf16 round to f32 first, then to the half type (two roundings; exact for
 *     every integer f16 can hold, and for integers up to 2^24 into bf16);
 *   - widening float conversions (f16/bf16 -> f32/f64, f32 -> f64) are exact;
 *   - float to integer (u8, i8, i32, i64): truncation toward zero, saturated to the integer
 *     type's range, NaN -> 0 (C leaves these undefined; Tessera defines them);
 *   - float to bool: x != 0 (a NaN is true), as C;
 *   - integer to integer: two's-complement wrap-around to the narrower width, as C on every
 *     target Tessera supports; bool is 0 or 1;
 *   - integer to f32/f64: round to nearest, ties to even (C's conversion).
 */

/* f16 (IEEE binary16) bits to f32: exact. */
float te_f16_to_f32(uint16_t bits);
/* f32 to f16 bits: round to nearest even, overflow to infinity, subnormals, quiet NaNs. */
uint16_t te_f32_to_f16(float x);
/* bf16 bits to f32: exact (the high 16 bits of an f32). */
float te_bf16_to_f32(uint16_t bits);
/* f32 to bf16 bits: round to nearest even, overflow to infinity, quiet NaNs. */
uint16_t te_f32_to_bf16(float x);
/* The value of te_cast(to, x) for an x of dtype `from` whose value is v (a double holds every
 * value of every dtype but i64 beyond 2^53). Returns NAN for a value that is not a te_dtype. */
double te_dtype_convert(double v, te_dtype from, te_dtype to);
/* Element i of an array of dtype at p, as a double (NAN for a value that is not a te_dtype). */
double te_dtype_load(te_dtype dtype, const void *p, size_t i);
/* Stores v (a value of f64 semantics) as element i of an array of dtype at p, converted as
 * te_dtype_convert(v, TE_F64, dtype) does. Does nothing for a value that is not a te_dtype. */
void te_dtype_store(te_dtype dtype, void *p, size_t i, double v);
/* Relative tolerance with which outputs of dtype computed by a reduction of length
 * `reduction_len` (1 for none) are compared with the float64 reference, relative to
 * max(1, |reference|) (docs/DTYPES.md derives it): 0 for integers (exact), for f32 and f64 the
 * checker's 1e-5 * max(1, k^0.75) capped at 1e-2, for f16 and bf16 2 (k u + u) with their unit
 * roundoff u (they may accumulate at storage precision), plus the f32 term. */
double te_dtype_tolerance(te_dtype dtype, int64_t reduction_len);

/* Returns the library's version, "MAJOR.MINOR.PATCH" (TE_VERSION in tessera/version.h is
 * the version of the headers a program was compiled with). */
const char *te_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_STATUS_H */
