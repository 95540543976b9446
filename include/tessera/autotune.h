/*
 * tessera/autotune.h: search spaces of schedules, replayable traces, and the tuner.
 *
 * A configuration is a trace: the text of schedule primitives with their decisions, one per
 * line, exactly as te_schedule_trace prints them ("split C i 32", "compute_at C_local C j_o").
 * A trace replays onto a fresh schedule of the same tensor expression, so records stay valid
 * when a search space changes.
 *
 * A search space proposes traces for one workload: either a hand-written template with knobs
 * for a library operator, or sketches generated automatically from any tensor expression.
 */
#ifndef TESSERA_AUTOTUNE_H
#define TESSERA_AUTOTUNE_H

#include <stdint.h>
#include <stdio.h>

#include "tessera/backend.h"
#include "tessera/schedule.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Traces are replayed by te_schedule_apply_trace and printed as C by te_trace_to_c, both
 * declared in tessera/schedule.h (included above). */

/* ---- Search spaces ----------------------------------------------------------------------- */

typedef struct te_space te_space;

typedef enum te_space_kind {
    TE_SPACE_AUTO,     /* template when the operator has one, else sketches */
    TE_SPACE_TEMPLATE, /* the operator's hand-written template with knobs */
    TE_SPACE_SKETCH,   /* automatic sketches from the tensor expression alone */
} te_space_kind;

/* A deterministic random stream for sampling (splitmix64). */
typedef struct te_rng {
    uint64_t s;
} te_rng;
void te_rng_seed(te_rng *r, uint64_t seed);
uint64_t te_rng_next(te_rng *r);

/* Creates the search space of the schedule computing `outs` from `ins` for `target`. `op` is
 * the operator's registry name (for templates) or NULL for a user-defined expression. Lives
 * in ctx; returns NULL on error. */
te_space *te_space_create(te_ctx *ctx, const char *op, int n_in, te_tensor *const *ins, int n_out,
                          te_tensor *const *outs, te_space_kind kind, const te_target *target);
/* Kind actually used (AUTO resolves to TEMPLATE or SKETCH). */
te_space_kind te_space_kind_of(const te_space *sp);
/* Number of distinct configurations if enumerable (grid search), else -1. */
int64_t te_space_size(const te_space *sp);
/* The i-th configuration (0 <= i < size) as a trace. Arena string; NULL on error. */
const char *te_space_get(te_space *sp, int64_t i);
/* A random configuration as a trace. Arena string; NULL on error. */
const char *te_space_sample(te_space *sp, te_rng *rng);
/* A configuration near `trace` (one decision changed). Arena string; NULL on error. */
const char *te_space_mutate(te_space *sp, const char *trace, te_rng *rng);
/* A fresh schedule with `trace` applied. NULL on error (message on ctx). */
te_schedule *te_space_instantiate(te_space *sp, const char *trace);

/* Features of a lowered loop nest for the cost model: loop extents and kinds, arithmetic
 * intensity, bytes touched per buffer, vector widths, parallel extent, unrolled steps, ...
 * Fills up to n floats; returns the number of features (constant for a build). */
int te_features(const te_lowered *f, float *out, int n);
#define TE_NUM_FEATURES 64

/* What one run of a lowered kernel computes and moves, for roofline reports (`tessera db
 * roofline`, `tessera bench --roofline`; docs/PERFORMANCE.md "Roofline").
 *
 *   flops      floating-point lane-operations of the statements as lowered: add, sub, neg,
 *              mul, div, min, max, compare, and one per math intrinsic call (exp, sqrt, ...),
 *              each weighted by the trip counts of its enclosing loops (vector operations count
 *              their lanes; a loop whose extent is not a constant counts once). A multiply-add
 *              is 2. Integer index arithmetic is not counted.
 *   bytes      compulsory traffic: the sizes of the kernel's arguments (every input read once,
 *              every output written once), whatever the schedule's reuse; caches can only do
 *              worse, so flops / bytes bounds the arithmetic intensity from above.
 *   intensity  flops / bytes (FLOP per byte), 0 when bytes is 0. */
typedef struct te_kernel_counts {
    double flops;
    double bytes;
    double intensity;
    /* The most iterations one outermost parallel loop hands the threads (1 when the kernel
     * has no parallel loop, INFINITY when such a loop's extent is not a constant): more threads
     * than this idle in every parallel loop of the kernel. */
    double parallel_width;
} te_kernel_counts;

/* Counts f's flops and compulsory bytes into *out (zeroed first). Returns TE_OK, TE_ERR_ARG
 * for a NULL argument, or TE_ERR_NOMEM. The count walks the same IR as te_features. */
int te_kernel_count(const te_lowered *f, te_kernel_counts *out);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_AUTOTUNE_H */
