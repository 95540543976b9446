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

/* Element data types. f16/bf16 are reserved for storage formats that come later. */
#define TE_DTYPE_MAP(X)                                                                            \
    X(BOOL, "bool", "bool", 1)                                                                     \
    X(I8, "i8", "int8_t", 1)                                                                       \
    X(U8, "u8", "uint8_t", 1)                                                                      \
    X(I32, "i32", "int32_t", 4)                                                                    \
    X(I64, "i64", "int64_t", 8)                                                                    \
    X(F32, "f32", "float", 4)                                                                      \
    X(F64, "f64", "double", 8)

typedef enum te_dtype {
#define TE__DTYPE_ENUM(name, str, ctype, size) TE_##name,
    TE_DTYPE_MAP(TE__DTYPE_ENUM)
#undef TE__DTYPE_ENUM
        TE_DTYPE_COUNT
} te_dtype;

/* Short name of a dtype ("f32"), or "?" for a value that is not a te_dtype. */
const char *te_dtype_str(te_dtype dtype);
/* C type name of a dtype ("float"), or NULL. */
const char *te_dtype_ctype(te_dtype dtype);
/* Size of one element in bytes, or 0 for a value that is not a te_dtype. */
size_t te_dtype_size(te_dtype dtype);
/* Parses "f32", "i64", ... into *out. Returns TE_OK or TE_ERR_ARG. */
int te_dtype_parse(const char *name, te_dtype *out);
/* 1 for f32/f64, else 0. */
int te_dtype_is_float(te_dtype dtype);
/* 1 for bool/i8/u8/i32/i64, else 0. */
int te_dtype_is_int(te_dtype dtype);

/* Returns the library's version, "MAJOR.MINOR.PATCH" (TE_VERSION in tessera/version.h is
 * the version of the headers a program was compiled with). */
const char *te_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_STATUS_H */
