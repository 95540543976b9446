/*
 * schedule/passes.h (private): the lowering passes, each a function from statement to
 * statement in its own file under schedule/passes/, with its own test. te_lower (lower.c)
 * runs them in order; read that function for the table of contents.
 *
 * Conventions: a pass never mutates its input (statements and expressions are rebuilt where
 * they change and shared where they do not); it returns NULL only on error, with a message on
 * the context.
 */
#ifndef TESSERA_SCHEDULE_PASSES_H
#define TESSERA_SCHEDULE_PASSES_H

#include "tessera/backend.h"
#include "te/internal.h"

/* Known integer ranges of variables: [lo, hi] inclusive. Passes build these from the loops
 * that enclose an expression. */
typedef struct te__range_map {
    int n, cap;
    const te_expr **vars;
    int64_t *lo, *hi;
} te__range_map;

/* Pushes/pops a variable range (stack discipline). Push returns TE_OK or TE_ERR_NOMEM. */
int te__ranges_push(te_ctx *ctx, te__range_map *m, const te_expr *var, int64_t lo, int64_t hi);
void te__ranges_pop(te__range_map *m);

/* ---- simplify.c ----
 * Simplifies an expression: constant folding, canonical linear arithmetic (sums of
 * coefficient * term, constants last), floordiv/floormod of linear forms by constants when the
 * ranges make it exact, min/max/comparisons decided by ranges. ranges may be NULL. */
te_expr *te__simplify_expr(te_ctx *ctx, te_expr *e, const te__range_map *ranges);
/* Constant bounds of an integer expression under ranges; false when unknown. */
bool te__expr_const_bounds(const te_expr *e, const te__range_map *ranges, int64_t *lo,
                           int64_t *hi);
/* true when cond (TE_BOOL) is provably true under ranges. */
bool te__prove(te_ctx *ctx, te_expr *cond, const te__range_map *ranges);
/* Simplifies every expression of a statement using the ranges of enclosing loops; removes
 * loops of extent 1 (substituting their min), loops of extent <= 0, and ifs whose condition is
 * provably true (keeps the then-branch) or false (keeps the else-branch). */
te_stmt *te__pass_simplify(te_ctx *ctx, te_stmt *s);
/* Simplifies statement s under the ranges of the loops that enclose it (ranges is updated
 * while walking and restored on return). *failed is set on error. */
te_stmt *te__simplify_stmt_in(te_ctx *ctx, te_stmt *s, te__range_map *ranges, bool *failed);

/* ---- loop_partition.c ----
 * Splits a loop whose body is guarded by a condition linear in the loop variable (the tail
 * guard of a non-divisible split, `if (i_o * 32 + i_i < 100)`) into a main part where the guard
 * is provably true (and removed) and a tail part that keeps it, so hot loops carry no guard. */
te_stmt *te__pass_loop_partition(te_ctx *ctx, te_stmt *s);

/* ---- storage_flatten.c ----
 * Rewrites every multi-dimensional LOAD/STORE into one flat index (row-major over the
 * buffer's shape), so backends see n == 1. */
te_stmt *te__pass_storage_flatten(te_ctx *ctx, te_stmt *s);

/* ---- vectorize.c ----
 * Turns each TE_FOR_VECTORIZED loop of constant extent L into straight-line vector code:
 * the loop variable becomes RAMP(min, 1, L); loads/stores whose flat index is linear in it
 * with coefficient 1 become contiguous vector accesses, coefficient 0 broadcasts, other
 * strides gathers/scatters; scalar operands are broadcast. When the body cannot be vectorized
 * (a store whose index does not depend on the lane, a condition that depends on the lane, a
 * nested loop, an unsupported op), the loop is left as a serial loop (scalar fallback). */
te_stmt *te__pass_vectorize(te_ctx *ctx, te_stmt *s, const te_target *target);

/* ---- unroll.c ----
 * Expands TE_FOR_UNROLLED loops of constant extent into copies of their body with the loop
 * variable replaced by each value. */
te_stmt *te__pass_unroll(te_ctx *ctx, te_stmt *s);

#endif
