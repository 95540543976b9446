/*
 * autotune/tune_impl.h (private): the pieces of the tuner, shared by the autotune sources and the
 * tests: the measurer (builder + runner, measure.c), the cost model (cost_model.c) and the
 * search strategies (search.c). The job loop (tuner.c) drives them, over the task set that
 * tasks.c builds; faults.c injects faulty candidates for the tests.
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
    double bytes; /* bytes one run moves, counted from the lowered IR (te_kernel_count) when
                     it was lowered; 0 = unknown. Recorded as te_db_trial.bytes */
    int repeats;
    int64_t stmts;      /* statements of the lowered program (te__lowered_stmts), 0 = unknown */
    double limit_scale; /* > 1: a retry of an environmental failure; its compile and run
                           limits are multiplied by this (0 or 1: the configured limits) */
} te__cand;

void te__cand_clear(te__cand *c);

/* Statements of a lowered program (loops, stores, lets, conditions, intrinsic calls; after the
 * unroll pass, so unrolled copies count): about the lines of C it becomes, which is what a
 * compiler's time grows with. */
int64_t te__lowered_stmts(const te_lowered *f);

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
/* Inputs (bit i: input i) evicted from the caches before each timed run. */
void te__measurer_set_cold(te__measurer *m, uint32_t mask);
/* Builds (through the backend table: several lowered candidates per compiler run, a source
 * alone) and runs (forked child, timeout) every candidate with a source or a lowered function
 * and done == 0; sets status, err, median_s, spread_s, repeats, max_err, and done = 1. The
 * kernels must be named "cand" (te_lower's name). */
void te__measure_batch(te__measurer *m, te__cand *c, int n);
/* Wall time of the last batch's compile and run phases. */
void te__measurer_times(const te__measurer *m, double *compile_s, double *run_s);
/* Number of bytes the kernel arguments take (inputs + outputs), for GB/s figures. */
double te__measurer_bytes(const te__measurer *m);

/* te_tune_run_isolated (tuner.h) is the forked-child runner; measure_child.c has it. */

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
/* Makes `trace` (copied) the next proposal, before the strategy's own (once; skipped when seen). */
void te__search_first(te__search *s, const char *trace);
int te__search_propose(te__search *s, int n, char **out, te__seen_fn seen,
                       te__featurize_fn featurize, void *user);
/* Reports a measured trace: gflops > 0 for ok, 0 for failures; feat may be NULL. */
void te__search_update(te__search *s, const char *trace, const float *feat, double gflops);
/* Seeds the population from earlier records (warm start). */
void te__search_seed(te__search *s, const char *trace, const float *feat, double gflops);

/* ---- Expression utilities (tuner.c) ------------------------------------------------------ */

/* Longest reduction (product of the reduction extents) in any stage computing outs. */
int64_t te__max_reduction(int n_out, te_tensor *const *outs);

/* ---- The tuner: task sets (tasks.c), the job loop (tuner.c), fault injection (faults.c) ----- */

#define TE__TUNE_MAX_IO 32 /* arguments (inputs + outputs) of one task */

/* An open-addressing set of nonzero 64-bit hashes (trace hashes already measured). */
typedef struct te__u64set {
    uint64_t *v;
    size_t n, cap;
} te__u64set;

/* A candidate lowered within the current batch: its features, and the lowered function when
 * it is kept for emission. */
typedef struct te__lcache_ent {
    char hash[17];
    te_lowered *f;
    float feat[TE_NUM_FEATURES];
    double bytes; /* bytes one run moves (te_kernel_count of the lowered IR); 0 = unknown */
    int ok;
} te__lcache_ent;

/* One workload of the job and its search state. */
typedef struct te__task {
    struct te_tuner *tu;
    int index;
    char *op;     /* operator name, or the expression's name */
    char *params; /* library operators */
    int is_expr;
    te_tensor *u_ins[TE__TUNE_MAX_IO], *u_outs[TE__TUNE_MAX_IO];
    double weight;
    char *key, *shapes_json;
    uint32_t cold_mask; /* inputs evicted before each timed run (te_tuner_set_cold_inputs) */
    char expr_hash[17];
    double flops;
    /* Prepared state. */
    int prepared, failed;
    te_ctx *tctx; /* the tensors the measurer uses (library operators) */
    te_tensor *ins[TE__TUNE_MAX_IO], *outs[TE__TUNE_MAX_IO];
    int n_in, n_out;
    te_ctx *wctx; /* the space (and the operator's tensors it schedules); rebuilt now and then */
    te_ctx *bctx; /* one batch: schedules, lowered candidates, sources */
    te_tensor *w_args[2 * TE__TUNE_MAX_IO];
    te_space *sp;
    int64_t w_lowered;
    te__measurer *meas;
    te__search *search;
    te__u64set seen;
    te__lcache_ent *lc;
    int nlc;
    /* Statistics. */
    int64_t trials, skipped, since_improve;
    int64_t n_by_status[TE_TRIAL_STATUS_COUNT];
    double best_s;       /* best median of this job (INFINITY when none) */
    double db_best_s;    /* best in the database, any job */
    double hist_best[4]; /* best_s after each of the last batches, for the scheduler */
    int nbatches;
    int done;
    const char *stop_reason;
    char *best_trace;
    double best_median_s, best_gflops;
    const char *space_kind;
    int injected;
} te__task;

/* The tuner: its options, target, task set and job. */
struct te_tuner {
    te_db *db;
    te_tune_options o;
    te_target target;
    te_db_target dbt;
    char dbt_storage[1024];
    char target_key[512];
    te__task *tasks;
    int ntasks, cap;
    char err[2048];
    int64_t job_id;
    int resumed, interrupted;
    int finished_before; /* resume_always continued a finished job: nothing to measure */
    int64_t job_trials;  /* trials_done of the job, including before a resume */
    int64_t errors, skipped;
    double t0;
};

/* Formats the tuner's error message (t->err) and returns `code`. */
int te__tuner_err(te_tuner *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Passes a warning (printf-formatted, no newline) to the job's on_warning callback, unless the
 * options say quiet or there is no callback. The library never prints. */
void te__tuner_warn(const te_tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees a task's job state (measurer, search, contexts, seen set, lowering cache); its
 * description (op, params, key, ...) stays. Safe on a task that was never prepared. */
void te__task_release(te__task *k);
/* Adds a trace hash to the task's seen set (never proposed again in this job). */
void te__tuner_mark_seen(te__task *k, const char *hash);

/* ---- Claims and retries (claim.c) --------------------------------------------------------- */

#define TE__RETRY_SCALE 4.0 /* limits of a retry, per earlier attempt */
/* 1 when candidate x failed because of the environment (compiler or run timeout, out of
 * memory), not because of its configuration. */
int te__cand_transient(const te__cand *x);
/* Claims traces[0..m) for the task's job (te_db_claim_traces): the refused ones are freed and
 * marked seen, the others compacted to the front with their limit scale in scale[] (1 for a
 * first measurement). Returns their count, or a negative status (message set). */
int te__tuner_claim(te__task *k, char **traces, int m, double *scale);
/* Test hook: with TESSERA_TUNE_INJECT=segv,hang,wrong,compile, replaces the sources of the
 * first not-yet-final candidates of the task's first batch (c[0..n)) by faulty kernels; the
 * sources live in the task's batch context. Does nothing without the variable or after the
 * task's first batch. */
void te__inject_faults(te__task *k, te__cand *c, int n);

/* The ranking of te_tune_default_schedule (autotune/default_schedule.c): te_tune_default_cost
 * of the features plus the register-tile cycles of s's reduction stages. */
double te__default_score(te_schedule *s, const float *feat, const te_target *tgt, int threads);

#endif
