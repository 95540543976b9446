/*
 * tessera/tuning_db.h: the tuning database, an SQLite file of measured schedules.
 *
 * Every candidate schedule the tuner measures becomes one append-only row in `trials`: which
 * workload (operator + shapes + dtypes), on which target (backend + full hardware/compiler
 * identity), the configuration as a replayable trace, its status and timings. "Best" is a query
 * over those rows, never a separate table that could drift. Jobs record what ran, so a user can
 * see it and a tuner can resume. docs/TUNING_DB.md documents the schema with example SQL.
 *
 * Two tiers: an optional read-only "system" database (pre-tuned records shipped with a release,
 * path from te_db_options.system_path or $TESSERA_SYSTEM_DB) and the user's database. Reads
 * consult the user's database first; writes only ever go to the user's database.
 *
 * A worked example:
 *
 *     te_db *db = NULL;
 *     if (te_db_open("tessera.db", NULL, &db) != TE_OK) {
 *         fprintf(stderr, "%s\n", te_db_errmsg(db));
 *         te_db_close(db);                       // the handle exists even on failure
 *         return 1;
 *     }
 *     te_db_target t = {.backend = "c", .arch = "x86_64", .device = "AMD EPYC",
 *                       .features = "avx512f,avx2,fma", .cores = 2, .compiler = "gcc 12.2.0"};
 *     te_db_trial r = {.workload = {.key = "matmul;k=1024,m=1024,n=1024;f32"},
 *                      .target = t, .trace = "split(i,32);...", .status = TE_TRIAL_OK,
 *                      .median_s = 1.5e-3, .spread_s = 2e-5, .repeats = 10, .gflops = 1431.6};
 *     te_db_record_trial(db, &r, NULL);
 *     te_db_trial_list *best = NULL;
 *     if (te_db_best(db, r.workload.key, &t, 0, &best) == TE_OK)
 *         printf("%s: %g s\n", best->items[0].trace, best->items[0].median_s);
 *     te_db_trial_list_free(best);
 *     te_db_close(db);
 *
 * Conventions. Every fallible call returns TE_OK (0) or a negative TE_ERR_* code and leaves a
 * message readable with te_db_errmsg(db) until the next call on that handle. Strings passed in
 * are copied; nothing the caller passes is kept or freed. Lists returned through `**out` are
 * allocated by the library and released with the matching *_free call, which accepts NULL; all
 * strings inside a list live exactly as long as the list. A te_db handle must be used by one
 * thread at a time; separate handles (in threads or processes) may write the same file
 * concurrently: writers wait for each other (BEGIN IMMEDIATE with a busy timeout and retries),
 * so SQLITE_BUSY does not reach the caller unless the wait exceeds the busy timeout.
 */
#ifndef TESSERA_TUNING_DB_H
#define TESSERA_TUNING_DB_H

#include <stdint.h>
#include <stdio.h>

#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema version this library writes (PRAGMA user_version). Older databases are migrated
 * forward on a read-write open; newer ones are refused with TE_ERR_VERSION and not touched. */
#define TE_DB_SCHEMA_VERSION 5
/* PRAGMA application_id of a Tessera database ("TESS"). */
#define TE_DB_APPLICATION_ID 0x54455353

typedef struct te_db te_db;

/* ---------------------------------------------------------------------------------------- */
/* Descriptors: plain structs of strings and ints, filled by the compiler core or by a user.  */

/* Where a kernel runs: backend plus the full identity that can change which schedule is fastest
 * or whether it runs at all. Unset strings (NULL) mean "". */
typedef struct te_db_target {
    /* Canonical key. NULL on input: derived by te_db_target_key from the fields below. On output
     * (lists) always set. Lookups match this key exactly. */
    const char *key;
    const char *backend;  /* "c" or "cuda" */
    const char *arch;     /* CPU: "x86_64", "aarch64"; CUDA: "sm_80" */
    const char *device;   /* CPU model name or GPU name */
    const char *features; /* CPU: ISA features, comma-separated ("avx512f,avx2,fma"); CUDA: "" */
    int32_t sm;           /* CUDA SM version (80 for sm_80); 0 for CPU targets */
    int32_t cores;        /* CPU cores used, or GPU multiprocessor count */
    const char *compiler; /* "gcc 12.2.0", "clang 14.0.6", "nvrtc 12.2" */
    const char *driver;   /* CUDA driver version ("12.2"); "" for CPU targets */
} te_db_target;

/* What is computed: one operator instance. */
typedef struct te_db_workload {
    /* Canonical text key, required: operator;shapes;dtypes[;parameters], e.g.
     * "matmul;k=1024,m=1024,n=1024;f32". Lookups match it exactly. */
    const char *key;
    const char *op;        /* operator name; NULL = the text of `key` before its first ';' */
    const char *expr_hash; /* hash of the tensor-expression structure (hex); NULL = "" */
    const char *shapes;    /* shapes as JSON text ({"m":1024,...}); must parse; NULL = "{}" */
    double flops;          /* floating-point operations of one run; 0 = unknown */
} te_db_workload;

/* Outcome of measuring one candidate. Stored as the lower-case text of the name ("ok",
 * "compile_error", ...) so the plain sqlite3 shell reads it. */
#define TE_TRIAL_STATUS_MAP(X)                                                                     \
    X(OK, "ok")                                                                                    \
    X(COMPILE_ERROR, "compile_error")                                                              \
    X(RUNTIME_ERROR, "runtime_error")                                                              \
    X(TIMEOUT, "timeout")                                                                          \
    X(WRONG_ANSWER, "wrong_answer")                                                                \
    X(INVALID_SCHEDULE, "invalid_schedule")                                                        \
    X(LOAD_ERROR, "load_error")                                                                    \
    X(OTHER_ERROR, "other_error")

typedef enum te_trial_status {
#define TE__TRIAL_ENUM(name, str) TE_TRIAL_##name,
    TE_TRIAL_STATUS_MAP(TE__TRIAL_ENUM)
#undef TE__TRIAL_ENUM
        TE_TRIAL_STATUS_COUNT
} te_trial_status;

/* "ok", "compile_error", ...; "?" for a value outside the enum. */
const char *te_trial_status_str(te_trial_status status);
/* Parses the text form into *out. Returns TE_OK or TE_ERR_ARG. */
int te_trial_status_parse(const char *text, te_trial_status *out);

/* One measured candidate. On input (record) the caller fills the fields marked "in"; on output
 * (lists) every field is set and the strings belong to the list. */
typedef struct te_db_trial {
    te_db_workload workload;     /* in: key required */
    te_db_target target;         /* in: key or backend required */
    const char *trace;           /* in, required: the configuration as a replayable trace */
    const char *trace_hash;      /* in: NULL = te_db_trace_hash(trace) */
    te_trial_status status;      /* in */
    const char *error;           /* in: error text for failed trials; NULL = "" */
    double median_s;             /* in: median run time in seconds; NAN = not measured */
    double spread_s;             /* in: spread of the repeats (std. deviation) in s; NAN = none */
    int32_t repeats;             /* in: number of timed runs */
    double gflops;               /* in: GFLOP/s at the median; NAN = unknown */
    int64_t created_us;          /* in: time stamp, microseconds since 1970 UTC; 0 = now */
    const char *tessera_version; /* in: NULL = te_version() */
    int64_t job_id;              /* in: job this trial belongs to (te_db_job_start); 0 = none */
    const char *uid;             /* in: stable unique id across databases; NULL = new UUIDv7 */
    int transient; /* in: 1 when a failure came from the environment (a compiler or run
                      timeout, out of memory), not from the configuration: a later job may
                      retry it (te_db_claim_traces); 0 for deterministic failures; an ok
                      trial with it set is refused (TE_ERR_ARG) */
    /* in: bytes one run of the measured kernel(s) moves, counted from its lowered IR
     * (te_kernel_count: every argument read or written once, whatever the schedule); NAN or 0 =
     * unknown (stored as NULL). Out: NAN when unknown, as for every trial recorded before
     * schema version 5. Printed beside gflops by `db show`/`db best`. */
    double bytes;
    /* Output only. */
    int64_t id;          /* row id in the database it came from */
    const char *job_uid; /* uid of its job, or NULL */
    int from_system;     /* 1 when the row came from the read-only system database */
    int exact_target;    /* 0 when a lookup fell back to a compatible target (see flags) */
} te_db_trial;

/* A list of trials returned by a lookup. Free with te_db_trial_list_free. */
typedef struct te_db_trial_list {
    size_t n;
    te_db_trial *items;
} te_db_trial_list;

/* Frees a list and every string in it. Accepts NULL. */
void te_db_trial_list_free(te_db_trial_list *list);

/* ---------------------------------------------------------------------------------------- */
/* Opening and closing.                                                                       */

enum {
    TE_DB_READONLY = 1 << 0,  /* open for queries only; never writes, never migrates */
    TE_DB_NO_CREATE = 1 << 1, /* fail with TE_ERR_NOT_FOUND rather than create a new file */
    TE_DB_NO_SYSTEM = 1 << 2, /* ignore $TESSERA_SYSTEM_DB */
    TE_DB_NO_WAL = 1 << 3     /* rollback journal instead of WAL (also $TESSERA_DB_NO_WAL=1) */
};

typedef struct te_db_options {
    int flags;               /* TE_DB_* bits */
    const char *system_path; /* read-only system database; NULL = $TESSERA_SYSTEM_DB if set */
    int busy_timeout_ms;     /* how long a writer waits for another; 0 = 10000 */
} te_db_options;

/* Opens (or creates) the user database at `path` (":memory:" for a private in-memory one) and
 * the optional system database. A new file gets the current schema; an older schema is migrated
 * forward inside one transaction. `opts` may be NULL (defaults).
 *
 * Refused, with the file left byte-for-byte unchanged: a file that is not SQLite (bad header),
 * a truncated file, an SQLite file that is not a Tessera database (TE_ERR_CORRUPT), a schema
 * newer than TE_DB_SCHEMA_VERSION (TE_ERR_VERSION), a read-only file or directory opened without
 * TE_DB_READONLY (TE_ERR_READONLY; mode bits without any write permission count as read-only
 * even for root), a missing directory (TE_ERR_IO), a missing file with TE_DB_NO_CREATE or
 * TE_DB_READONLY (TE_ERR_NOT_FOUND). A zero-length file counts as a new, empty database
 * (refused as TE_ERR_CORRUPT with TE_DB_NO_CREATE or TE_DB_READONLY, which never write).
 * A file in a directory this process cannot write is read-only too (SQLite keeps its journal
 * and WAL files beside the database). Refused files get no -wal, -shm or -journal file.
 *
 * A TE_DB_READONLY open never creates a file: a WAL-mode database in a directory it cannot
 * write, with no -shm file and no WAL content beside it, is opened with SQLite's immutable=1
 * (the main file is then its whole committed state), so a shared read-only copy can be queried
 * by any user.
 *
 * Like sqlite3_open, *out is set to a handle even when the call fails (unless memory ran out,
 * then NULL), so that te_db_errmsg can explain the failure; the caller must te_db_close it.
 * Returns TE_OK or the error code. */
int te_db_open(const char *path, const te_db_options *opts, te_db **out);

/* Closes the database and frees the handle. Accepts NULL. Returns TE_OK, or TE_ERR_DB if SQLite
 * reported a problem while closing (the handle is freed either way). */
int te_db_close(te_db *db);

/* The message of the last failure on this handle ("" after success). Owned by the handle, valid
 * until the next call on it. Accepts NULL ("out of memory"). */
const char *te_db_errmsg(const te_db *db);

/* ---------------------------------------------------------------------------------------- */
/* Recording.                                                                                 */

/* Appends one trial; the target and workload rows are created on first use (an existing row with
 * the same key is kept as is). *out_id (may be NULL) receives the new row id. Text fields must
 * be well-formed UTF-8 and a given uid a UUID (8-4-4-4-12 hex digits); invalid bytes in `error`
 * are stored as U+FFFD instead. Returns TE_OK,
 * TE_ERR_ARG for an invalid trial (message names the field), TE_ERR_READONLY on a read-only
 * handle, TE_ERR_BUSY if another writer held the file past the busy timeout, TE_ERR_DB. */
int te_db_record_trial(te_db *db, const te_db_trial *trial, int64_t *out_id);

/* Appends n trials in one transaction: all are stored or none. The fast path for a tuner (tens
 * of thousands of trials per second). Same errors as te_db_record_trial; the message of an
 * invalid trial names its index. */
int te_db_record_trials(te_db *db, const te_db_trial *trials, size_t n);

/* The time now, microseconds since 1970 UTC (the unit of every *_us field). */
int64_t te_db_now_us(void);

/* Writes the canonical key of `target` into buf (at most n bytes, NUL-terminated) and returns
 * the length the full key has (like snprintf), or TE_ERR_ARG if target or its backend is NULL.
 * CPU:  "c;x86_64;AMD EPYC;avx512f,avx2,fma;2 cores;gcc 12.2.0"
 * CUDA: "cuda;sm_80;NVIDIA A100;108 SMs;nvrtc 12.2;driver 12.2"
 * A ';' inside a field is written as ','. When target->key is set it is copied as is. */
int te_db_target_key(const te_db_target *target, char *buf, size_t n);

/* The default trace hash: 64-bit FNV-1a of the trace text as 16 lower-case hex digits + NUL. */
void te_db_trace_hash(const char *trace, char out[17]);

/* ---------------------------------------------------------------------------------------- */
/* Jobs: one per tuning run, for progress display and resume.                                 */

typedef enum te_job_status {
    TE_JOB_RUNNING,
    TE_JOB_FINISHED,
    TE_JOB_INTERRUPTED,
    TE_JOB_FAILED
} te_job_status;

/* "running", "finished", "interrupted", "failed"; "?" otherwise. */
const char *te_job_status_str(te_job_status status);

typedef struct te_db_job {
    int64_t id;
    const char *uid;              /* stable across export/merge */
    const char *command;          /* command line that started it */
    int64_t started_us, ended_us; /* ended_us 0 while running */
    int64_t trials_done, trials_planned;
    te_job_status status; /* a "running" job whose process (same host) is gone reads as
                             TE_JOB_INTERRUPTED */
    const char *host;
    int64_t pid;
} te_db_job;

typedef struct te_db_job_list {
    size_t n;
    te_db_job *items;
} te_db_job_list;

/* Frees a job list. Accepts NULL. */
void te_db_job_list_free(te_db_job_list *list);

/* Starts a job in state running with this process's host and pid; *out_id gets its id. Trials
 * recorded with .job_id = id count toward trials_done in the same transaction. */
int te_db_job_start(te_db *db, const char *command, int64_t trials_planned, int64_t *out_id);
/* Ends a job: sets its status (finished, interrupted or failed) and end time, and releases its
 * claims (te_db_claim_traces). TE_ERR_NOT_FOUND for an unknown id, TE_ERR_ARG for
 * TE_JOB_RUNNING. */
int te_db_job_finish(te_db *db, int64_t job_id, te_job_status status);
/* Marks an earlier job running again (this host/pid, no end time) so a tuner can continue it;
 * te_db_has_trace tells it what was already measured. TE_ERR_NOT_FOUND for an unknown id. */
int te_db_job_resume(te_db *db, int64_t job_id);
/* Lists the jobs of the user database, newest first; job_id > 0 selects one job
 * (TE_ERR_NOT_FOUND if it does not exist). *out is freed with te_db_job_list_free. */
int te_db_jobs(te_db *db, int64_t job_id, te_db_job_list **out);

/* ---------------------------------------------------------------------------------------- */
/* Lookups. The target argument needs its key (or the fields to derive it); workloads match
 * by key. By default only the exact target key matches. With TE_DB_FALLBACK, when no exact
 * record exists, the nearest compatible target is used instead: same backend and arch, and for
 * CPUs an ISA feature set contained in the requested one (most shared features first), for CUDA
 * the same SM major version and an SM not above the requested one (highest first); ties prefer
 * the same device, then the same compiler. The returned trials then have exact_target == 0 and
 * target.key names the target they were measured on. */
enum {
    TE_DB_FALLBACK = 1 << 0,  /* allow the nearest compatible target */
    TE_DB_USER_ONLY = 1 << 1, /* do not consult the system database */
};

/* The fastest ok trial for (workload, target): *out has one item. The user database is
 * consulted first, then the system database. TE_ERR_NOT_FOUND when there is none (*out NULL). */
int te_db_best(te_db *db, const char *workload_key, const te_db_target *target, int flags,
               te_db_trial_list **out);

/* The k fastest ok trials (distinct trace hashes), fastest first: the user's, then the system
 * database's to fill up to k. TE_ERR_NOT_FOUND when there is none. */
int te_db_top_k(te_db *db, const char *workload_key, const te_db_target *target, int k, int flags,
                te_db_trial_list **out);

/* Every trial (any status) of a workload, oldest first, on one target (target NULL = all),
 * at most `limit` (0 = no limit, keeps the newest): user's rows, then the system database's.
 * An empty history is TE_OK with n == 0. */
int te_db_history(te_db *db, const char *workload_key, const te_db_target *target, int64_t limit,
                  te_db_trial_list **out);

/* Sets *out_found to 1 when a trial with this trace hash (any status) was already recorded in
 * the user database for (workload, target), else 0. The tuner's resume uses it to skip work. */
int te_db_has_trace(te_db *db, const char *workload_key, const te_db_target *target,
                    const char *trace_hash, int *out_found);

/* Claims: concurrent jobs tuning one (workload, target) split the work. A job claims the trace
 * hashes it is about to measure; a hash is claimed only when no live claim of another job
 * holds it and the recorded trials do not settle it. Recording a trial of the hash releases
 * its claim; te_db_job_finish releases the job's others. */
#define TE_DB_CLAIM_STALE_US (3600LL * 1000000) /* default age after which a claim is stale */
typedef struct te_db_claim_options {
    /* A claim older than this is stale (its job is presumed dead) and may be taken over;
     * 0 = TE_DB_CLAIM_STALE_US. A claim of a job that is not running, or whose process on this
     * host is gone, is stale at once. */
    int64_t stale_us;
    /* A trace whose trials are only environmental failures (te_db_trial.transient) is claimed
     * again while it has at most this many of them (0: never retried). */
    int env_retries;
    /* Claim every trace without an ok trial, deterministic failures included. */
    int retry_failed;
} te_db_claim_options;

/* Claims trace_hashes[0..n) of (workload_key, target) for job_id (a job of this database), in
 * one transaction. claimed[i] receives 0 when hash i is not to be measured by this job (an ok
 * trial, a trial of this job, a deterministic failure unless retry_failed, more than
 * env_retries environmental failures, or a live claim of another job), else 1 + the number of
 * trials already recorded for it (1: never measured, 2: a first retry, ...). opts may be NULL
 * (defaults). Returns TE_OK, or an error with every claimed[i] 0 and nothing claimed. */
int te_db_claim_traces(te_db *db, const char *workload_key, const te_db_target *target,
                       int64_t job_id, const te_db_claim_options *opts, size_t n,
                       const char *const *trace_hashes, int *claimed);
/* Releases every claim of job_id (a job that stops measuring). TE_OK also when it had none. */
int te_db_release_claims(te_db *db, int64_t job_id);

/* One line of the overview: a (workload, target) pair with its counts and best time. */
typedef struct te_db_summary {
    const char *workload_key, *target_key;
    int64_t n_trials, n_ok;
    double best_median_s, best_gflops; /* NAN when no ok trial */
    int from_system;
} te_db_summary;

/* Calls cb for every (workload, target) pair of the user database, then (unless
 * TE_DB_USER_ONLY) of the system database, ordered by workload then target key. Strings are
 * valid during the call only. A nonzero return from cb stops the walk and is returned. */
int te_db_summary_foreach(te_db *db, int flags, int (*cb)(const te_db_summary *row, void *ud),
                          void *ud);

typedef struct te_db_info {
    const char *path, *system_path; /* system_path NULL when none */
    const char *journal_mode;
    int schema_version, readonly;
    int64_t n_targets, n_workloads, n_trials, n_ok, n_jobs;
    int64_t n_system_trials;
    int64_t file_bytes;
} te_db_info;

/* Fills *info with counts of the user database. Strings belong to the handle. */
int te_db_get_info(te_db *db, te_db_info *info);

/* ---------------------------------------------------------------------------------------- */
/* Maintenance.                                                                               */

typedef struct te_db_prune_options {
    int64_t older_than_us; /* delete trials created before this time stamp; 0 = any age */
    unsigned status_mask;  /* delete only these statuses (bit 1u << TE_TRIAL_*); 0 = any */
    int keep_best;         /* never delete the best ok trial of a (workload, target) */
    int dry_run;           /* count, do not delete */
} te_db_prune_options;

/* Deletes trials matching every given criterion, in one transaction; *n_deleted (may be NULL)
 * gets the count. At least one of older_than_us and status_mask must be set (TE_ERR_ARG
 * otherwise), so a forgotten option cannot empty the database. */
int te_db_prune(te_db *db, const te_db_prune_options *opts, int64_t *n_deleted);

/* Runs PRAGMA integrity_check, PRAGMA foreign_key_check, compares every schema object (table,
 * index, view, trigger) with the schema this library creates, and checks the rows for internal
 * consistency (timings vs GFLOP/s vs the workload's flops, target columns vs key, statuses vs
 * error text, ...). *report (may be NULL) receives a malloc'ed text the caller frees: "ok", or
 * every problem found, one per line, with its count and the ids of a few examples. Returns
 * TE_OK when all pass, TE_ERR_CORRUPT when any fails (TE_ERR_NOMEM when memory ran out). */
int te_db_check(te_db *db, char **report);

/* ---------------------------------------------------------------------------------------- */
/* Exchange: JSON lines (one trial per line with its workload, target and job) and merging.  */

typedef struct te_db_import_stats {
    int64_t lines;      /* non-blank lines read */
    int64_t imported;   /* trials added */
    int64_t duplicates; /* trials skipped because their uid was already present */
    int64_t error_line; /* 1-based line of the first error, 0 if none */
} te_db_import_stats;

/* Writes the user database's trials (optionally only one workload and/or target key; NULL =
 * all) as JSON lines to `out`, oldest first. Doubles are printed with %.17g so an import
 * reproduces them bit for bit. *n_written may be NULL. */
int te_db_export(te_db *db, FILE *out, const char *workload_key, const char *target_key,
                 int64_t *n_written);

/* Reads JSON lines and appends their trials. The whole import is one transaction: a malformed
 * line (bad JSON, invalid UTF-8, a trial or job uid that is not a UUID, ...) aborts it with
 * TE_ERR_CORRUPT, a message "line N: ..." and stats->error_line = N, and nothing from the input is
 * kept. Trials whose uid is already present are skipped (counted as duplicates), so importing the
 * same file twice changes nothing. stats may be NULL. */
int te_db_import(te_db *db, FILE *in, te_db_import_stats *stats);
/* Same as te_db_import, from memory (data need not be NUL-terminated). */
int te_db_import_buffer(te_db *db, const char *data, size_t size, te_db_import_stats *stats);

/* Folds the trials of another Tessera database (same schema version, opened read-only, left
 * unchanged) into this one in one transaction, skipping trials whose uid is already present.
 * stats->lines counts the source's trials. Merging a file into itself is TE_ERR_ARG. */
int te_db_merge(te_db *db, const char *other_path, te_db_import_stats *stats);

/* ---------------------------------------------------------------------------------------- */
/* Machine peaks: what a target can do at best, for roofline reports (`tessera target`).    */

/* One measured figure of a target (table target_peaks, schema version 4). */
typedef struct te_db_peak {
    const char *kind;    /* "fma": floating-point FMA throughput in GFLOP/s (an FMA is 2 flops);
                            "copy": copy bandwidth in GB/s, bytes read plus bytes written */
    const char *dtype;   /* "f32" or "f64" for "fma"; NULL = "" for "copy" */
    const char *isa;     /* vector ISA for "fma": "scalar", "sse", "avx2", "avx512"; NULL = ""
                            for "copy" */
    int32_t threads;     /* threads that ran it, >= 1 */
    double value;        /* GFLOP/s or GB/s; finite and > 0 */
    int64_t measured_us; /* when, microseconds since 1970 UTC; 0 on input = now */
} te_db_peak;

typedef struct te_db_peak_list {
    size_t n;
    te_db_peak *items;
} te_db_peak_list;

/* Records the n peaks of target (key or backend required, as for trials; the target row is
 * created when new), replacing every peak recorded for it before, in one transaction. A kind
 * other than "fma"/"copy", an fma without dtype f32/f64 or without an isa, threads < 1 or a
 * value that is not finite and positive is TE_ERR_ARG naming the entry; nothing is written. */
int te_db_record_peaks(te_db *db, const te_db_target *target, const te_db_peak *peaks, size_t n);
/* The peaks recorded for the target with key target_key, ordered by kind, dtype, isa, threads
 * (an empty list when there are none). *out is freed with te_db_peak_list_free. Returns TE_OK,
 * TE_ERR_ARG (NULL arguments) or a database error. */
int te_db_peaks(te_db *db, const char *target_key, te_db_peak_list **out);
/* Frees a list and its strings. Accepts NULL. */
void te_db_peak_list_free(te_db_peak_list *list);

/* JSON text as the database's exports write it (jansson), for tools that print JSON beside
 * them: a string with its quotes and escapes (valid UTF-8 passes through, bytes that are not
 * UTF-8 become U+FFFD; NULL writes null), and a number that reads back to the same double (17
 * significant digits, a whole number with ".0"; non-finite values write null). */
void te_db_json_write_str(FILE *f, const char *s);
void te_db_json_write_num(FILE *f, double x);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TUNING_DB_H */
