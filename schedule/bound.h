/*
 * schedule/bound.h (private): interval arithmetic for bound inference.
 *
 * A symbolic interval [lo, hi] has expression bounds in the variables that stay fixed (loops
 * outside the attach point); the relaxed variables (loops inside it) are replaced by their
 * ranges. For the affine index expressions schedules produce, hi - lo is a constant.
 */
#ifndef TESSERA_SCHEDULE_BOUND_H
#define TESSERA_SCHEDULE_BOUND_H

#include "te/internal.h"

typedef struct te__ival {
    te_expr *lo, *hi;
} te__ival;

/* Variables whose values range over an interval. */
typedef struct te__relax {
    int n;
    const te_expr *vars[128];
    te__ival iv[128];
} te__relax;

/* Adds var -> [lo, hi]. Returns false when full. */
bool te__relax_add(te__relax *r, const te_expr *var, te_expr *lo, te_expr *hi);

/* Interval of integer expression e when the variables in r range over their intervals and
 * all others are fixed. Returns false when e is not analysable (loads, products of ranges,
 * division by non-constants); the caller then falls back to the whole tensor. */
bool te__eval_interval(te_ctx *ctx, te_expr *e, const te__relax *r, te__ival *out);

/* Variable extents for numeric evaluation: var i takes values in [0, ext[i]). */
typedef struct te__var_ext {
    int n;
    const te_expr *vars[256];
    int64_t ext[256];
} te__var_ext;

/* An upper bound of integer expression e over all values of its variables (each in
 * [0, extent) from ve): the largest value when the space is small enough to enumerate (at most
 * 65536 points), else a constant bound proven by the arithmetic library (te/arith.h) over the
 * variables' ranges. Returns false when it cannot bound e (a variable not in ve, an overflow);
 * the caller then uses the whole tensor. */
bool te__max_over_vars(const te_expr *e, const te__var_ext *ve, int64_t *out);

#endif
