/*
 * te/arith.h (private): the arithmetic library. Integer reasoning shared by the tensor checks
 * (te/tensor.c), bound inference (schedule/bound.c), the lowering passes (schedule/passes/) and
 * the emitters (backends/): known ranges of variables, constant bounds of expressions, small
 * facts (non-negative, multiple of, constant value), linear forms, and the expression
 * simplifier (constant folding, canonical linear arithmetic, rules decided by ranges).
 *
 * Files: arith_bounds.c (range maps, constant bounds, facts, evaluation), arith_linear.c
 * (linear forms, canonical order, overflow proofs of rebuilt forms), arith_fold.c (constant
 * folding), arith_rewrite.c (the rewrite rules and te__simplify_expr / te__prove).
 *
 * Semantics. Integer expressions are evaluated in their dtype; a signed overflow is undefined
 * in the code the backends emit, so the library never *introduces* one: a rewrite of e is only
 * applied when, for every assignment of the variables (within their ranges) under which e
 * evaluates without overflow or division by zero, the result also evaluates without overflow
 * and gives the same value. Bounds are proven from the range map and from what e's own
 * evaluation implies (if e computes k * 32 without overflow, |k| <= INT64_MAX / 32).
 *
 * Nothing here allocates outside the context's arena except transient scratch that is freed
 * before returning; no function prints.
 */
#ifndef TESSERA_TE_ARITH_H
#define TESSERA_TE_ARITH_H

#include "te/internal.h"

/* ---- Range maps ------------------------------------------------------------------------ */

/* Known integer ranges of variables: [lo, hi] inclusive. Passes build these from the loops
 * that enclose an expression; the emitters from the loops they have opened. A zero-initialised
 * map is empty and valid. Storage lives in the context's arena (freed with it). */
typedef struct te__range_map {
    int n, cap;
    const te_expr **vars;
    int64_t *lo, *hi;
} te__range_map;

/* Pushes a variable range (stack discipline: an inner binding shadows an outer one of the same
 * variable). Returns TE_OK, or TE_ERR_NOMEM (recorded on ctx) with the map unchanged. */
int te__ranges_push(te_ctx *ctx, te__range_map *m, const te_expr *var, int64_t lo, int64_t hi);
/* Pops the most recent push; m must not be empty. */
void te__ranges_pop(te__range_map *m);
/* The innermost range of var in m (m may be NULL); false when var has none. */
bool te__ranges_lookup(const te__range_map *m, const te_expr *var, int64_t *lo, int64_t *hi);

/* ---- Constant bounds and facts ---------------------------------------------------------- */

/* Floor division and modulo of int64 values (b != 0, and not INT64_MIN / -1). */
int64_t te__arith_floordiv(int64_t a, int64_t b);
int64_t te__arith_floormod(int64_t a, int64_t b);

/* Constant bounds [*lo, *hi] of an integer expression (lane-wise for vectors) when its
 * variables range as in ranges (NULL: no known ranges). lo or hi may be NULL when that side is
 * not wanted; returns false when a wanted side is unknown (both when both are NULL). The
 * bounds hold for every evaluation without overflow. */
bool te__expr_const_bounds(const te_expr *e, const te__range_map *ranges, int64_t *lo, int64_t *hi);

/* Whether an integer expression is provably >= 0 under ranges (lane-wise for vectors; NULL
 * ranges: only constants and what the operations themselves imply, e.g. floormod(x, 8)). The
 * emitters use it to print C's / and % for floordiv/floormod; a variable they know to be
 * non-negative without a finite range is pushed with the range [0, INT64_MAX]. */
bool te__arith_nonneg(const te_expr *e, const te__range_map *ranges);

/* Whether integer expression e is provably a multiple of m (m > 0): constants, and sums,
 * differences, negations and products built from them (a product when either factor is), and
 * remainders (truncated or floored) of two such multiples. */
bool te__arith_multiple_of(const te_expr *e, int64_t m);

/* Value of a scalar integer expression made of constants only (negation, + - * / % floordiv
 * floormod min max, casts between integer types), computed in the expression's dtype. Casts
 * wrap to the target's width as C conversions do. Returns false for anything else (floats,
 * comparisons, variables, loads), on division by zero, and when an operation overflows its
 * dtype (the emitted code would be undefined there). */
bool te__arith_const_int(const te_expr *e, int64_t *out);

/* The constant flat index (row-major over b's shape; a single index is already flat) of an
 * access of b with n indices in *out. The late passes (legalize_vectors, promote_registers)
 * and the C emitter call it, and te__arith_const_int, so that they agree on which accesses
 * are constant. false when an index is not constant or the flat index overflows. */
bool te__const_flat_index(const te_buf *b, int n, te_expr *const *idx, int64_t *out);

/* Value of a scalar integer expression when variable vars[i] has value vals[i] (n of them).
 * Same operations and failures as te__arith_const_int; false when e uses another variable. */
bool te__arith_eval_int(const te_expr *e, int n, const te_expr *const *vars, const int64_t *vals,
                        int64_t *out);

/* ---- Linear forms ----------------------------------------------------------------------- */

/* Whether a - b (two scalar i64 expressions) is k * v + c for the variable v, as a linear form
 * over + - * by constants and unary minus (k may be 0). Fills *k and *c; false otherwise or on
 * overflow of the coefficients. */
bool te__arith_linear_in_var(const te_expr *a, const te_expr *b, const te_expr *v, int64_t *k,
                             int64_t *c);

/* ---- Simplifier ------------------------------------------------------------------------- */

/* Simplifies an expression: constant folding, canonical linear arithmetic over i64 (sums of
 * coefficient * term, constants last), floordiv/floormod of linear forms by constants when the
 * ranges make it exact, min/max/comparisons decided by ranges; every rewrite is checked not to
 * overflow (see the top of this file). ranges may be NULL. Returns the simplified expression
 * (sharing unchanged subtrees with e, never modifying e), or NULL on allocation failure (the
 * error is on ctx) or when ctx or e is NULL. */
te_expr *te__simplify_expr(te_ctx *ctx, te_expr *e, const te__range_map *ranges);

/* true when cond (TE_BOOL) is provably true under ranges; false when it is not provable or on
 * allocation failure. */
bool te__prove(te_ctx *ctx, te_expr *cond, const te__range_map *ranges);

#endif
