/*
 * autotune/tune_impl.h (private): the pieces of the tuner, shared by the autotune sources and the
 * tests: the measurer (builder + runner, measure.c), the cost model (cost_model.c) and the
 * search strategies (search.c). tuner.c drives them.
 */
#ifndef TESSERA_AUTOTUNE_TUNE_IMPL_H
#define TESSERA_AUTOTUNE_TUNE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"

/* ---- Candidates ---------------------------------------------------------------------------- */

#define TE__ERR_LEN 1024

/* One proposed configuration on its way through the measurer. */
typedef struct te__cand {
    char *trace;               /* malloc'ed */
    char hash[17];             /* te_db_trace_hash(trace) */
    const char *source;        /* source text to compile alone, as given (owned elsewhere); NULL: */
    const te_lowered *lowered; /* the lowered function (named "cand", owned elsewhere), which
                                  the backend emits together with other candidates */
    float feat[TE_NUM_FEATURES];
    int has_feat;
    double pred; /* cost model score (higher is better) */
    int done;    /* status already final (invalid schedule, ...): do not build */
    te_trial_status status;
    char err[TE__ERR_LEN];
    double median_s, spread_s, max_err;
    int repeats;
} te__cand;

void te__cand_clear(te__cand *c);

/* ---- Measurer: reference, builder and runner ------------------------------------------------ */

typedef struct te__measurer te__measurer;

/* A measurer for the kernel computing outs from ins (kernel arguments: ins, then outs).
 * Allocates random inputs and output buffers. NULL when out of memory or on bad arguments
 * (message in err). */
te__measurer *te__measurer_create(int n_in, te_tensor *const *ins, int n_out,
                                  te_tensor *const *outs, const te_target *target,
                                  const te_measure_options *o, char *err, size_t errsize);
void te__measurer_free(te__measurer *m);
/* Computes the reference output once: te_reference_eval (float64) when the workload's
 * operation count is at most interp_limit (<= 0: 4e7, or $TESSERA_TUNE_INTERP_LIMIT), else
 * the default schedule, built in ctx and run in a child process. Returns TE_OK or an error
 * with a message in err. */
int te__measurer_reference(te__measurer *m, te_ctx *ctx, double interp_limit, char *err,
                           size_t errsize);
/* How the reference was computed: "te_reference_eval" or "default schedule". */
const char *te__measurer_ref_kind(const te__measurer *m);
double te__measurer_tolerance(const te__measurer *m);
/* Best median known so far (for the slow-candidate cut); 0 = none. */
void te__measurer_set_best(te__measurer *m, double best_s);
/* Builds (through the backend table: several lowered candidates per compiler run, a source
 * alone) and runs (forked child, timeout) every candidate with a source or a lowered function
 * and done == 0; sets status, err, median_s, spread_s, repeats, max_err, and done = 1. The
 * kernels must be named "cand" (te_lower's name). */
void te__measure_batch(te__measurer *m, te__cand *c, int n);
/* Wall time of the last batch's compile and run phases. */
void te__measurer_times(const te__measurer *m, double *compile_s, double *run_s);
/* Number of bytes the kernel arguments take (inputs + outputs), for GB/s figures. */
double te__measurer_bytes(const te__measurer *m);

/* Runs fn(user) in a forked child (measure_child.c) with a timeout, child's result written into
 * `out` (size bytes, shared memory). Used for measurements that must not run OpenMP in this process
 * (the OpenBLAS baseline). Returns TE_OK, TE_ERR_TIMEOUT or TE_ERR_RUNTIME. */
int te__run_in_child(void (*fn)(void *user, void *out), void *user, void *out, size_t size,
                     double timeout_s);

/* ---- Cost model ------------------------------------------------------------------------------ */

/* Gradient-boosted regression trees on feature vectors (cost_model.c). */
typedef struct te__gbt te__gbt;

te__gbt *te__gbt_create(int n_features);
void te__gbt_free(te__gbt *g);
/* Adds a training sample (feature vector x, target y, weight w > 0). */
int te__gbt_add(te__gbt *g, const float *x, double y, double w);
int te__gbt_nsamples(const te__gbt *g);
/* Changes the target of every sample: y *= scale (for renormalization). */
void te__gbt_scale_targets(te__gbt *g, double scale);
/* Fits the model from scratch on all samples. */
int te__gbt_fit(te__gbt *g);
/* Prediction for x (the mean of the targets before the first fit). */
double te__gbt_predict(const te__gbt *g, const float *x);
int te__gbt_trained(const te__gbt *g);

/* ---- Search strategies -------------------------------------------------------------------- */

/* A strategy proposes traces; the tuner measures them and reports back. */
typedef struct te__search te__search;

/* Asks the tuner whether a trace (by hash) was already measured or proposed. */
typedef int (*te__seen_fn)(const char *hash, void *user);
/* Lowers a trace and fills features (0 when it cannot be lowered). */
typedef int (*te__featurize_fn)(const char *trace, float *feat, void *user);

te__search *te__search_create(te_tune_strategy strategy, te_space *sp, uint64_t seed);
void te__search_free(te__search *s);
/* The space changes when the tuner recycles its work context; traces stay valid. */
void te__search_set_space(te__search *s, te_space *sp);
/* Proposes up to n new traces (malloc'ed strings in out[]). Returns the count; 0 when the
 * space is exhausted. */
int te__search_propose(te__search *s, int n, char **out, te__seen_fn seen,
                       te__featurize_fn featurize, void *user);
/* Reports a measured trace: gflops > 0 for ok, 0 for failures; feat may be NULL. */
void te__search_update(te__search *s, const char *trace, const float *feat, double gflops);
/* Seeds the population from earlier records (warm start). */
void te__search_seed(te__search *s, const char *trace, const float *feat, double gflops);

/* ---- Expression utilities (tuner.c) ------------------------------------------------------ */

/* Longest reduction (product of the reduction extents) in any stage computing outs. */
int64_t te__max_reduction(int n_out, te_tensor *const *outs);

#endif
