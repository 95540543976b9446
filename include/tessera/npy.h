/*
 * tessera/npy.h: NumPy .npy files in and out (inputs and outputs of `tessera run MODEL.onnx`).
 *
 * The .npy format (numpy.lib.format) is a 6-byte magic "\x93NUMPY", a major and minor version
 * byte (1.0, 2.0 and 3.0 are read; 1.0 is written),
 * the header's length (2 bytes little-endian in 1.0, 4 bytes in 2.0/3.0), the header (a Python
 * dict literal such as "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with
 * spaces to a multiple of 64 bytes and ended by '\n'), then the elements in C (row-major) order.
 *
 *     te_npy_array a;
 *     char err[256];
 *     if (te_npy_read("x.npy", &a, err, sizeof err)) {
 *         fprintf(stderr, "%s\n", err);   // "x.npy: Fortran-order arrays are not supported"
 *         return 1;
 *     }
 *     ... a.dtype, a.ndim, a.shape, a.data ...
 *     te_npy_write("y.npy", a.dtype, a.ndim, a.shape, a.data, err, sizeof err);
 *     te_npy_array_free(&a);
 *
 * Element types: '<f4' (TE_F32), '<f8' (TE_F64), '<i8' (TE_I64), '<i4' (TE_I32), '|b1'
 * (TE_BOOL), '|u1' (TE_U8), '|i1' (TE_I8). Big-endian data ('>f4'), Fortran-order arrays,
 * structured or object dtypes are refused with a message naming what was found; so are files
 * whose data is shorter or longer than the header's shape claims (checked before anything is
 * allocated, so a corrupt header never makes a huge allocation).
 *
 * Errors: calls return TE_OK or a negative status (TE_ERR_IO: the file cannot be opened, read
 * or written; TE_ERR_CORRUPT: not a valid .npy; TE_ERR_UNSUPPORTED: a valid .npy this module
 * does not read; TE_ERR_ARG; TE_ERR_NOMEM) and write "label: message" into err (errsize bytes;
 * err may be NULL). Nothing here prints.
 */
#ifndef TESSERA_NPY_H
#define TESSERA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An array read from a .npy file. */
typedef struct te_npy_array {
    te_dtype dtype;
    int ndim;                   /* 0 (a scalar) .. TE_MAX_DIMS */
    int64_t shape[TE_MAX_DIMS]; /* extents, row-major; entries past ndim are 0 */
    int64_t numel;              /* product of the extents (1 for a scalar) */
    size_t nbytes;              /* numel * te_dtype_size(dtype) */
    void *data; /* the elements, malloc'ed, owned by the caller (te_npy_array_free) */
} te_npy_array;

/* Reads the .npy file at path into *out (zeroed first). On error *out holds no data. */
int te_npy_read(const char *path, te_npy_array *out, char *err, size_t errsize);
/* Reads a .npy held in memory (size bytes at buf); label names it in messages (NULL:
 * "<buffer>"). A pure function of its arguments (fuzzed). */
int te_npy_read_buffer(const void *buf, size_t size, const char *label, te_npy_array *out,
                       char *err, size_t errsize);
/* Writes ndim extents (0 <= ndim <= TE_MAX_DIMS, extents >= 0) of row-major `data` of dtype
 * (one of the element types above) to path as .npy version 1.0.
 * The file is written whole or removed. */
int te_npy_write(const char *path, te_dtype dtype, int ndim, const int64_t *shape, const void *data,
                 char *err, size_t errsize);
/* Frees a->data and zeroes *a. Accepts NULL and an array without data. */
void te_npy_array_free(te_npy_array *a);
/* The .npy descr of dtype ("<f4"), or NULL for a dtype this module does not write. */
const char *te_npy_descr(te_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_NPY_H */
