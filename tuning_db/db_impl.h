/* Private to tuning_db/: the handle, prepared statements and helpers shared by its files. */
#ifndef TESSERA_TUNING_DB_IMPL_H
#define TESSERA_TUNING_DB_IMPL_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "te/internal.h"
#include "tessera/tuning_db.h"

/* Prepared statements cached per connection, named by an enum so each is prepared once. */
typedef enum {
    TE__ST_TARGET_INSERT,
    TE__ST_TARGET_ID,
    TE__ST_WORKLOAD_INSERT,
    TE__ST_WORKLOAD_ID,
    TE__ST_TRIAL_INSERT,
    TE__ST_TRIAL_INSERT_IGNORE,
    TE__ST_JOB_COUNT,
    TE__ST_JOB_INSERT_IGNORE,
    TE__ST_JOB_ID_BY_UID,
    TE__ST_HAS_TRACE,
    TE__ST_TOPK,
    TE__ST_CLAIM_RELEASE,
    TE__ST_COUNT
} te__stmt_id;

/* One SQLite connection: the user's database or the system one. */
typedef struct te__conn {
    sqlite3 *h;
    sqlite3_stmt *st[TE__ST_COUNT];
    char *path;
    int readonly;
    int schema_version;
} te__conn;

/* A small cache of key -> row id so a batch does not look up its target and workload for every
 * trial. Invalidated on rollback, because the rows it names may have been rolled back. */
typedef struct {
    char *key;
    int64_t id;
} te__id_cache;

struct te_db {
    te__conn user;
    te__conn sys; /* sys.h == NULL when there is no system database */
    int has_sys;
    int busy_timeout_ms;
    int in_txn;
    te__id_cache target_cache, workload_cache, job_cache;
    char journal_mode[16];
    char errmsg[1024];
};

/* Sets the handle's message (printf-style) and returns `code`. */
int te__db_err(te_db *db, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sets the message to "<what>: <sqlite message>" and returns the TE code for SQLite's `rc`. */
int te__db_sqlerr(te_db *db, te__conn *c, int rc, const char *what);
/* Maps an SQLite result code to a TE status. */
int te__status_from_sqlite(int rc);
void te__db_clear_err(te_db *db);
/* Rewrites the current message as prefix + message + suffix (either may be NULL); returns code. */
int te__db_wrap(te_db *db, int code, const char *prefix, const char *suffix);

/* Returns the cached statement `id` on connection c (prepared on first use, reset and with
 * bindings cleared), or NULL with the message set. */
sqlite3_stmt *te__stmt(te_db *db, te__conn *c, te__stmt_id id);

/* Runs SQL without results. Returns TE_OK or an error with the message set. */
int te__exec(te_db *db, te__conn *c, const char *sql);
/* BEGIN IMMEDIATE with retries on SQLITE_BUSY beyond the busy handler; COMMIT; ROLLBACK. */
int te__begin(te_db *db);
int te__commit(te_db *db);
void te__rollback(te_db *db);
/* Refuses writes on a read-only handle with TE_ERR_READONLY. */
int te__check_writable(te_db *db);

/* Internal insert used by record and import. flags: */
enum {
    TE__INS_IGNORE_DUP = 1,  /* skip a trial whose uid exists (sets *inserted = 0) */
    TE__INS_NO_JOB_COUNT = 2 /* do not add to jobs.trials_done (import: the count came along) */
};
/* 1 when s is a UUID in text form: 8-4-4-4-12 hex digits (either case). */
int te__valid_uuid(const char *s);
/* Validates trial i (index in messages). */
int te__validate_trial(te_db *db, const te_db_trial *t, size_t i);
/* Inserts inside an open transaction. */
int te__insert_trial(te_db *db, const te_db_trial *t, int flags, int *inserted);
void te__cache_reset(te_db *db);

/* The row id of the target with canonical key `key` (fields from t, or parsed from the key
 * when t->backend is NULL), inserting the row when it is new; inside an open transaction. */
int te__target_id(te_db *db, const te_db_target *t, const char *key, int64_t *id);
/* Derives the target key into a malloc'ed string, or NULL (message set). */
char *te__target_key_dup(te_db *db, const te_db_target *t);
/* Splits a canonical target key (a writable copy, which the fields then point into) back into
 * fields; fields that do not parse are "". */
void te__target_parse(char *storage, te_db_target *out);
/* The columns and joins that read a full trial row (query.c reads them by position). */
#define TE__TRIAL_SELECT                                                                           \
    "SELECT tr.id, tr.uid, w.key, w.op, w.expr_hash, w.shapes, w.flops, t.key, t.backend, "        \
    "t.arch, t.device, t.features, t.sm, t.cores, t.compiler, t.driver, tr.trace, "                \
    "tr.trace_hash, tr.status, tr.error, tr.median_s, tr.spread_s, tr.repeats, tr.gflops, "        \
    "tr.created_us, tr.tessera_version, tr.job_id, j.uid, tr.transient, tr.bytes"
#define TE__TRIAL_FROM                                                                             \
    " FROM trials tr JOIN workloads w ON w.id = tr.workload_id "                                   \
    "JOIN targets t ON t.id = tr.target_id LEFT JOIN jobs j ON j.id = tr.job_id "
extern const char *const te__trial_cols_sql; /* TE__TRIAL_SELECT TE__TRIAL_FROM */

/* A fresh UUID, version 7 (time-ordered, random tail), as text (36 chars + NUL). */
void te__uuid(char out[37]);

/* Block arena that owns the strings of a returned list. */
typedef struct te__arena_block te__arena_block;
typedef struct {
    te__arena_block *head;
} te__arena;
void *te__arena_alloc(te__arena *a, size_t n);
char *te__arena_strdup(te__arena *a, const char *s);
void te__arena_free(te__arena *a);

#endif
