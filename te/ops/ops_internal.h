/*
 * te/ops/ops_internal.h (private): helpers shared by the operator library's files. Every
 * operator checks its inputs with these and reports like "<op> '<name>': ...".
 */
#ifndef TESSERA_TE_OPS_INTERNAL_H
#define TESSERA_TE_OPS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/ops.h"

/* Who is reporting: the operator's name and its output's name. */
typedef struct op_site {
    te_ctx *ctx;
    const char *op;
    const char *name;
} op_site;

/* Records an error prefixed with "<op> '<name>': " and returns NULL. */
void *op__fail(const op_site *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, returning the status. */
int op__failc(const op_site *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks that t is not NULL (role names it in the message: "input 'A'"). */
bool op__need(const op_site *s, const te_tensor *t, const char *role);
/* Checks rank; what describes the expected layout ("[m, k]"). */
bool op__rank(const op_site *s, const te_tensor *t, const char *role, int ndim, const char *what);
/* Checks a float dtype (for operators using transcendental functions). */
bool op__float(const op_site *s, const te_tensor *t, const char *role);
/* Checks that t has a non-bool dtype equal to ref's. */
bool op__same_dtype(const op_site *s, const te_tensor *ref, const te_tensor *t, const char *role);
/* Normalizes a possibly negative axis; false (with an error) when out of range. */
bool op__axis(const op_site *s, const te_tensor *t, int *axis);

/* "<name>_<suffix>" in the arena. */
const char *op__stage_name(te_ctx *ctx, const char *name, const char *suffix);
/* Tags t with `tag` and returns it (NULL passes through). */
te_tensor *op__tag(te_ctx *ctx, te_tensor *t, const char *tag);

/* Data-parallel axes for a shape; names[d] or "i<d>". */
bool op__axes(te_ctx *ctx, int ndim, const int64_t *shape, const char *const *names,
              te_expr **axes);

/* Shorthands for index math. */
static inline te_expr *op__i(te_ctx *ctx, int64_t v) { return te_int(ctx, v); }
/* a * s + b, skipping trivial terms. */
te_expr *op__mad(te_ctx *ctx, te_expr *a, int64_t s, te_expr *b);
/* Constant of t's dtype. */
te_expr *op__c(te_ctx *ctx, te_dtype dt, double v);

/* Pads the spatial axes (ax_h, ax_w) of a rank-4 tensor by ph, pw on both sides with value;
 * returns X itself when ph == pw == 0. Stage "<name>_pad", tag "<tag>_pad". */
te_tensor *op__pad_hw(const op_site *s, te_tensor *X, int ax_h, int ax_w, int64_t ph, int64_t pw,
                      double value, const char *tag);

/* Matmul reduction C[i, j] = sum_k op(A)[i, k] op(B)[k, j] named `stage`, with shape checks
 * reported through s. */
te_tensor *op__matmul(const op_site *s, te_tensor *A, te_tensor *B, int ta, int tb,
                      const char *stage, const char *tag);
/* Validates conv2d parameters (NULL gives the defaults) into *out. */
bool op__conv_params(const op_site *s, const te_conv2d_params *p, te_conv2d_params *out);
/* Conv2d reduction named `stage` (padding stage "<name>_pad"). */
te_tensor *op__conv2d(const op_site *s, te_tensor *X, te_tensor *W, const te_conv2d_params *p,
                      const char *stage, const char *tag);

/* The origin recorded with operators registered by this thread from now on (te_op_info's
 * origin): te_plugin_load sets the plugin's path around its init, then NULL. */
void te__op_set_origin(const char *origin);

#endif
