/*
 * tessera/tuner.h: the auto-tuner. It proposes schedules from a search space
 * (tessera/autotune.h), builds them in parallel, runs each batch in a child process with a
 * timeout, checks every result against a reference before timing it, and appends every
 * measured candidate to the tuning database (tessera/tuning_db.h) as soon as its batch ends.
 *
 *     te_db *db = NULL;
 *     te_db_open("tune.db", NULL, &db);
 *     te_tune_options o = te_tune_options_default();
 *     o.max_trials = 400;
 *     o.command = "tune matmul m=1024,n=1024,k=1024";   // job identity, for resume
 *     te_tuner *t = te_tuner_create(db, &o);
 *     if (te_tuner_add_op(t, "matmul", "m=1024,n=1024,k=1024") != TE_OK ||
 *         te_tuner_run(t) != TE_OK)
 *         fprintf(stderr, "%s\n", te_tuner_errmsg(t));
 *     te_tune_task_info info;
 *     te_tuner_task_info(t, 0, &info);
 *     printf("%s: %.1f GFLOP/s\n%s\n", info.workload_key, info.best_gflops, info.best_trace);
 *     te_tuner_free(t);
 *     te_db_close(db);
 *
 * Later, any program builds the operator with the best record:
 *
 *     te_schedule *s;
 *     te_tuner_best_schedule(ctx, db, key, 1, &C, &tgt, 0, &s, NULL);  // default if none
 *
 * Measurement (docs/TUNING.md has the details):
 *  - Candidates are lowered and emitted in this process, compiled by up to one compiler per
 *    core at once (the compile cache is shared with te_build), and run in a forked child
 *    process. A candidate that crashes is recorded as runtime_error, one that runs past the
 *    timeout as timeout (the parent kills the child), and the batch goes on in a new child.
 *    This process never runs OpenMP code itself, so every child starts with a clean OpenMP
 *    runtime.
 *  - Inputs are random, outputs are filled with NaN before the first run, and the outputs are
 *    compared with a reference: te_reference_eval (float64) when the workload is small, else the
 *    output of the default schedule (te_schedule_create with no primitive applied), which the
 *    test suite checks against te_reference_eval. Wrong results are recorded as wrong_answer
 *    and never ranked.
 *  - Timing: one warm-up, then repeats until both a minimum count and a minimum total time are
 *    reached; the median and the standard deviation are recorded.
 *
 * Errors: calls return TE_OK or a negative status, with a message from te_tuner_errmsg.
 */
#ifndef TESSERA_TUNER_H
#define TESSERA_TUNER_H

#include <signal.h>
#include <stdint.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/tuning_db.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct te_tuner te_tuner;

/* How candidates are proposed. */
typedef enum te_tune_strategy {
    TE_TUNE_RANDOM,       /* uniform samples of the space */
    TE_TUNE_GRID,         /* every configuration in order (enumerable spaces only) */
    TE_TUNE_EVOLUTIONARY, /* mutations of the best measured, ranked by the learned cost model */
} te_tune_strategy;

/* "random", "grid", "evolutionary"; "?" otherwise. */
const char *te_tune_strategy_str(te_tune_strategy s);
/* Parses the names above. TE_OK or TE_ERR_ARG. */
int te_tune_strategy_parse(const char *text, te_tune_strategy *out);

/* Measurement settings. Zero fields take the defaults named here. */
typedef struct te_measure_options {
    int build_jobs;     /* compilers running at once; 0 = one per core */
    double timeout_s;   /* run-time limit of one candidate (check + timing); 0 = 10 s */
    double min_time_s;  /* timed runs continue until their sum reaches this; 0 = 0.01 s */
    int min_repeats;    /* at least this many timed runs; 0 = 3 */
    int max_repeats;    /* at most this many; 0 = 200 */
    int flush_cache;    /* overwrite a buffer larger than the last-level cache before each run */
    double tolerance;   /* max |got - ref| / max(1, |ref|); 0 = automatic (docs/TUNING.md) */
    double slow_factor; /* a candidate whose probe (the check run, or the warm-up run after a
                           check run under 5 ms) is this many times slower than the best so far
                           (earlier batches and the batch's earlier candidates) is timed by that
                           run alone; 0 = 3, < 0 = never */
    double compile_timeout_s; /* a compiler run (one or several candidates) past this is a
                                 compile_error (environmental: retried by a later job); 0 =
                                 $TESSERA_CC_TIMEOUT when set, else 20 s times the machine's
                                 load per core (getloadavg) when above 1, at most 200 s */
    int max_stmts; /* a candidate whose lowered program has more statements than this is not
                      compiled: a compile_error "over the code budget", not retried (compile
                      time grows with code size: about 30 s for 4,500 lines of C, and one such
                      candidate holds up the 7 compiled with it); 0 = 3000, < 0 = no limit */
} te_measure_options;

/* Progress report, passed to te_tune_options.on_progress after every batch. */
typedef struct te_tune_progress {
    int task, n_tasks;        /* the task the batch belonged to */
    const char *workload_key; /* its workload */
    int64_t task_trials;      /* trials of this task in this job */
    int64_t task_errors;      /* of which not ok */
    double task_best_gflops;  /* best of this task (NAN when none yet) */
    double task_best_s;       /* its median time */
    int64_t trials_done;      /* trials of the whole job (including before a resume) */
    int64_t trials_planned;   /* 0 = no trial budget */
    int64_t errors;           /* failed trials in this run */
    int64_t skipped;          /* proposals skipped because already recorded */
    double elapsed_s;         /* this run so far */
    double time_budget_s;     /* 0 = none */
    int batch_n, batch_ok;    /* the batch just measured */
} te_tune_progress;

/* A synthetic runner for tests: returns the "run time" of a trace in seconds (<= 0 records
 * the trial as runtime_error, TE_TUNE_FAKE_TIMEOUT as a timeout: an environmental failure).
 * Candidates are still instantiated and lowered, never compiled or run. */
typedef double (*te_tune_fake_fn)(const char *trace, void *user);
#define TE_TUNE_FAKE_TIMEOUT (-1e300)

typedef struct te_tune_options {
    te_tune_strategy strategy; /* default TE_TUNE_EVOLUTIONARY */
    te_space_kind space;       /* default TE_SPACE_AUTO */
    int64_t max_trials;        /* job budget in trials (all tasks); 0 = none */
    double max_seconds;        /* budget in seconds of this run; 0 = none */
    int64_t early_stop;        /* a task stops after this many trials without a 1% gain; 0 = off */
    uint64_t seed;             /* same seed, same proposals (exact for random and grid) */
    int batch_size;            /* candidates built and run together; 0 = 16 */
    int warm_start;            /* evolutionary: seed population and model from the database */
    te_measure_options measure;
    /* Job identity: a tuning run with the same command as an interrupted job continues that
     * job (te_db_job_resume). NULL: "tune" plus the task keys. */
    const char *command;
    int new_job; /* never resume; always start a new job */
    /* Continue the newest job of the same command whatever its state, not only an
     * interrupted one: also one that still reads running on another host (its process was
     * killed there; a scheduler's retry of a task, `tessera tune --resume`) or failed, and a
     * finished one, which then measures nothing (its tasks are done). A job running on this
     * host is alive and never taken over. Give it only when no other machine runs the same
     * command on the database. Ignored with new_job. */
    int resume_always;
    volatile sig_atomic_t *stop; /* when it becomes nonzero, stop after the batch in flight */
    const te_target *target;     /* NULL = te_target_host() */
    void (*on_progress)(const te_tune_progress *p, void *user);
    /* Warnings and notes the job does not fail for (a space grid search cannot enumerate, a
     * task that could not be prepared, TESSERA_TUNE_PROFILE timings), one line each without a
     * newline. The library never prints; NULL drops them. */
    void (*on_warning)(const char *msg, void *user);
    void *user;                  /* passed to on_progress and on_warning */
    int quiet;                   /* do not call on_warning */
    te_tune_fake_fn fake_runner; /* tests only; NULL in real use */
    void *fake_user;
    /* Failures: a deterministic one (compile error with a diagnostic, crash, wrong answer) is
     * final; an environmental one (compiler or run timeout, out of memory; recorded with
     * te_db_trial.transient) is measured again by a later job while the configuration has at
     * most env_retries of them (0 = 1, < 0 = never), with its compile and run limits 4x larger
     * per earlier attempt. retry_failed: measure every configuration without an ok trial
     * again, once in this job (`tessera tune --retry-failed`). */
    int env_retries;
    int retry_failed;
    /* Concurrent jobs on one database claim candidates before measuring them
     * (te_db_claim_traces); a claim older than this is stale (0 = 1 h). A claim of a job whose
     * process is gone is stale at once. */
    double claim_stale_s;
} te_tune_options;

/* Defaults: evolutionary, auto space, batch 16, warm start, seed 1, no budget. */
te_tune_options te_tune_options_default(void);

/* Creates a tuner writing into db (which must stay open while the tuner exists). opts may be
 * NULL (defaults) and is copied. Returns NULL only when out of memory. */
te_tuner *te_tuner_create(te_db *db, const te_tune_options *opts);
/* Frees the tuner. Accepts NULL. */
void te_tuner_free(te_tuner *t);
/* Message of the last failure ("" when none). Owned by the tuner. */
const char *te_tuner_errmsg(const te_tuner *t);

/* Adds a library operator (te_op_lookup name, KEY=VAL parameters) as a task; weight >= 0
 * scales its share of the budget (0 = 1). The workload key is te_op_workload_key's.
 * TE_ERR_NOT_FOUND for an unknown operator, TE_ERR_ARG for bad parameters. */
int te_tuner_add_op(te_tuner *t, const char *op, const char *params, double weight);
/* Adds a user-defined tensor expression (outputs computed from placeholders `ins`) as a task.
 * The tensors stay owned by their context, which must outlive the tuner. `name` names the
 * workload; its key is te_tuner_expr_key's. Tuned with automatic sketches from the expression
 * alone (TE_SPACE_AUTO and TE_SPACE_SKETCH; with TE_SPACE_TEMPLATE the task fails: a user
 * expression has no template). */
int te_tuner_add_expr(te_tuner *t, const char *name, int n_in, te_tensor *const *ins, int n_out,
                      te_tensor *const *outs, double weight);
/* Marks inputs of the last task added as cold: bit i of mask set = input i is evicted from
 * every cache level before each timed run (clflush of its lines on x86; elsewhere the whole
 * cache is overwritten, as with flush_cache), the other arguments staying as the previous run
 * left them. That is how a model's weights meet a kernel at run time: a graph's constants are
 * read once per inference and are gone from the caches by the time the next inference comes,
 * while the activations were just written by the kernel before. The task's workload key gains
 * te_tuner_key_add_cold's suffix, so records measured hot and cold never mix. TE_OK, or
 * TE_ERR_ARG without a task or with bits beyond its inputs. */
int te_tuner_set_cold_inputs(te_tuner *t, uint32_t mask);
/* Appends ";cold=I.J..." (the set bits of mask, the input indices) to the workload key in buf
 * (size bytes), as te_tuner_set_cold_inputs does; nothing for mask 0. Returns the new length
 * like snprintf, or TE_ERR_ARG. */
int te_tuner_key_add_cold(char *buf, size_t size, uint32_t mask);
/* Adds every task of a JSON task list: [{"op": "matmul", "shape": "m=64,n=64,k=64",
 * "weight": 1}, ...] ("shape" may also be called "params"; "weight" is optional). With
 * shard_n > 1 only the tasks whose workload key falls in shard shard_i (te_tuner_shard_of)
 * are added, so the shards 0..shard_n-1 of one list partition it: every task in exactly one
 * shard, the same one on every machine, whatever the order of the list (shard_n <= 1: all).
 * Every entry is checked in every shard. *n_added (may be NULL) receives the count; a shard
 * may get no task at all. TE_ERR_IO when the file cannot be read, TE_ERR_ARG when it is
 * malformed or lists a workload twice (the message names the entry). */
int te_tuner_add_tasks_file(te_tuner *t, const char *path, int shard_i, int shard_n, int *n_added);
/* The hash that assigns a workload to a shard: 64-bit FNV-1a (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3) of the bytes of the workload key, without its NUL. It depends on the key
 * text alone, never on the machine, the process or the list's order, and is part of the
 * stable interface: it does not change between versions. NULL hashes as "". */
uint64_t te_tuner_shard_hash(const char *workload_key);
/* The shard of a workload among shard_n: te_tuner_shard_hash(key) % shard_n, in [0, shard_n).
 * TE_ERR_ARG (negative) when the key is NULL or shard_n < 1. */
int te_tuner_shard_of(const char *workload_key, int shard_n);
int te_tuner_ntasks(const te_tuner *t);

/* Runs the job until the budget is spent, every task has stopped early or exhausted its
 * space, or *opts.stop becomes nonzero. Returns TE_OK also when stopped or interrupted (see
 * te_tuner_interrupted); an error status when the job could not run at all (database, the
 * reference of a workload could not be computed, ...). */
int te_tuner_run(te_tuner *t);
/* 1 when the last run was stopped by opts.stop before its budget was spent. */
int te_tuner_interrupted(const te_tuner *t);
/* The database id of the job (0 before te_tuner_run), and whether it resumed an earlier one. */
int64_t te_tuner_job_id(const te_tuner *t, int *resumed);

typedef struct te_tune_task_info {
    const char *op; /* operator or expression name */
    const char *workload_key;
    const char *target_key;
    double flops;   /* floating-point operations of one run */
    int64_t trials; /* measured by this job (including before a resume) */
    int64_t n_by_status[TE_TRIAL_STATUS_COUNT]; /* trials of this run by status */
    int64_t skipped;                            /* proposals already in the database */
    const char *best_trace; /* fastest ok record for (workload, target) in the database,
                               this job's or earlier; NULL when none */
    double best_median_s, best_gflops;
    const char *space_kind;  /* "template" or "sketch" */
    const char *stop_reason; /* "budget", "early stop", "space exhausted", "interrupted",
                                "finished before" (resume_always: the job was done) */
} te_tune_task_info;

/* Information about task i after (or during) a run. Strings belong to the tuner. */
int te_tuner_task_info(te_tuner *t, int i, te_tune_task_info *out);

/* ---- Keys and helpers shared with the CLI and te_build users ------------------------------ */

/* Fills *out with the database identity of a target. C: backend "c", arch, device (CPU model),
 * ISA features, cores, compiler ("gcc 12.2.0"). CUDA: backend "cuda", arch "sm_XX", device (the
 * GPU's name), SM, and when the target was read from a device (te_cuda_target_device: its
 * cuda_driver is set) the multiprocessors and driver version; compiler "nvrtc X.Y" when NVRTC
 * loads. So `tessera tune --target cuda` records, and gen or te_tuner_best_record on the same
 * device and NVRTC look up, the same key. Strings point into `storage` (at least 512 bytes).
 * The key itself is left NULL (te_db_target_key derives it). TE_ERR_ARG, TE_ERR_OVERFLOW. */
int te_tuner_db_target(const te_target *target, te_db_target *out, char *storage, size_t size);

/* The workload key of a user-defined expression: "<name>;<input shapes>;<dtype>;expr=<hash>",
 * where the hash covers the structure of every stage (operations, constants, names, shapes,
 * dtypes), so a changed expression never matches old records. Returns the key's length like
 * snprintf, or a negative status. */
int te_tuner_expr_key(const char *name, int n_in, te_tensor *const *ins, int n_out,
                      te_tensor *const *outs, char *buf, size_t size);
/* 64-bit structural hash of the expressions computing outs (see te_tuner_expr_key). */
uint64_t te_tuner_expr_hash(int n_out, te_tensor *const *outs);
/* Arithmetic operations of one evaluation of the outputs: for every stage, the operations
 * (and math calls) on floating-point values in its body per element, times its elements
 * (times the reduction extents inside a reduction, plus one combine). Inside an integer
 * reduction the integer operations count too, so that an int8 matmul's multiply-adds are its
 * work (2 M N K, reported as GOP/s); index arithmetic never counts. */
double te_tuner_flops(int n_out, te_tensor *const *outs);

/* The one best-record lookup: the fastest ok record of (workload_key, target) in db
 * (te_db_best with `flags`, e.g. TE_DB_FALLBACK), its trace applied to a fresh schedule of
 * outs in ctx (target NULL: te_target_host()). Returns TE_OK with the schedule in *out and, when
 * record is not NULL, the record list in *record (items[0] is the record; the caller frees it
 * with te_db_trial_list_free). Otherwise *out and *record are NULL, nothing is printed, no
 * error is left on ctx, and why (may be NULL; why_size bytes) says what happened:
 * TE_ERR_NOT_FOUND when db or workload_key is NULL ("no database") or there is no record ("no
 * record for this target"), TE_ERR_SCHEDULE when the record's trace no longer applies ("its
 * best record (trial <uid>) no longer applies: <reason>"), TE_ERR_ARG for bad arguments. */
int te_tuner_best_record(te_ctx *ctx, te_db *db, const char *workload_key, int n_out,
                         te_tensor *const *outs, const te_target *target, int flags,
                         te_schedule **out, te_db_trial_list **record, char *why, size_t why_size);

/* te_tuner_best_record for the record of rank `rank` (0: the fastest, as te_tuner_best_record;
 * k: the (k+1)-th fastest of distinct traces, te_db_top_k): the same schedule, list (its
 * items[0] is the ranked record) and errors, with TE_ERR_NOT_FOUND ("fewer than k+1 records
 * for this target") when there are not that many, TE_ERR_ARG for a negative rank. */
int te_tuner_ranked_record(te_ctx *ctx, te_db *db, const char *workload_key, int rank, int n_out,
                           te_tensor *const *outs, const te_target *target, int flags,
                           te_schedule **out, te_db_trial_list **record, char *why,
                           size_t why_size);

/* A schedule for outs from the best database record of (workload_key, target): the schedule
 * te_tuner_best_record makes. When there is no record, or the trace no longer applies, *out
 * gets the default schedule (te_schedule_create), *from_db (may be NULL) is 0 and why (may be
 * NULL) says why, as te_tuner_best_record does; nothing is printed. db may be NULL (default
 * schedule). Returns TE_OK unless even the default schedule cannot be made. */
int te_tuner_best_schedule(te_ctx *ctx, te_db *db, const char *workload_key, int n_out,
                           te_tensor *const *outs, const te_target *target, te_schedule **out,
                           int *from_db, char *why, size_t why_size);

/* The default schedule of a workload nobody tuned, made without measuring anything: the
 * tuner's search space for it (op's template when op names a library operator whose template
 * fits, else sketches: multi-level tiling, register accumulation, vectorization, parallel
 * loops, unrolling, all sized from target) sampled with a seed fixed by the expression, each
 * candidate lowered and ranked by te_tune_default_cost on its features, the cheapest applied
 * to a fresh schedule of outs in ctx (target NULL: te_target_host(); its num_cores is the
 * thread count ranked for). About 50 lowerings: milliseconds to a fraction of a second.
 * On TE_OK, *out is the schedule (owned by ctx) and note (may be NULL; note_size bytes) says
 * which default was chosen: "default: sketch heuristic (tile 8x16x4, vec C.j_i, parallel
 * C.i_o; best of 49, est 1.2 Mcycles)". On error (TE_ERR_ARG for bad arguments, the space's
 * error, TE_ERR_SCHEDULE when no candidate lowers) *out is NULL and the message is on ctx;
 * callers fall back to te_schedule_create. */
int te_tune_default_schedule(te_ctx *ctx, const char *op, int n_in, te_tensor *const *ins,
                             int n_out, te_tensor *const *outs, const te_target *target,
                             te_schedule **out, char *note, size_t note_size);
/* The analytic cost of te_tune_default_schedule: estimated cycles of a lowered candidate from
 * its TE_NUM_FEATURES features f (te_features) on target with `threads` threads. Only a
 * ranking; INFINITY when f or target is NULL. */
double te_tune_default_cost(const float *f, const te_target *target, int threads);

/* Runs fn(user, out) in a forked child with a timeout, the way the tuner runs candidates: the
 * child writes its result into `out` (size bytes, shared with this process; may be NULL with
 * size 0), and a crash or hang in it cannot take this process down. For measurements that
 * must not start OpenMP in a process that forks (a baseline library timed beside a tuning
 * job). Returns TE_OK, TE_ERR_TIMEOUT (the child was killed) or TE_ERR_RUNTIME (it crashed
 * or could not start). */
int te_tune_run_isolated(void (*fn)(void *user, void *out), void *user, void *out, size_t size,
                         double timeout_s);

/* Parses a duration: "90", "90s", "15m", "8h", "1.5h". Returns seconds, or -1 when invalid. */
double te_tune_parse_duration(const char *text);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TUNER_H */
