/* Recording trials and jobs: validation, target/workload rows, the append itself. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuning_db/db_impl.h"
#include "tuning_db/json.h"

static const char *nz(const char *s) { return s ? s : ""; }

/* Appends field `s` to the key, with ';' (the key's separator) written as ','. */
static void key_field(te__sb *b, const char *s)
{
    for (const char *p = nz(s); *p; p++)
        te__sb_putn(b, *p == ';' ? "," : p, 1);
}

static int build_key(const te_db_target *t, te__sb *b)
{
    if (!t)
        return TE_ERR_ARG;
    if (t->key) {
        te__sb_puts(b, t->key);
        return TE_OK;
    }
    if (!t->backend)
        return TE_ERR_ARG;
    key_field(b, t->backend);
    if (!strcmp(t->backend, "cuda")) {
        te__sb_puts(b, ";");
        if (t->arch && *t->arch)
            key_field(b, t->arch);
        else
            te__sb_printf(b, "sm_%d", (int)t->sm);
        te__sb_puts(b, ";");
        key_field(b, t->device);
        te__sb_printf(b, ";%d SMs;", (int)t->cores);
        key_field(b, t->compiler);
        te__sb_puts(b, ";driver ");
        key_field(b, t->driver);
    } else {
        te__sb_puts(b, ";");
        key_field(b, t->arch);
        te__sb_puts(b, ";");
        key_field(b, t->device);
        te__sb_puts(b, ";");
        key_field(b, t->features);
        te__sb_printf(b, ";%d cores;", (int)t->cores);
        key_field(b, t->compiler);
    }
    return TE_OK;
}

int te_db_target_key(const te_db_target *target, char *buf, size_t n)
{
    te__sb b = {0};
    int code = build_key(target, &b);
    if (code || b.oom) {
        te__sb_free(&b);
        return code ? code : TE_ERR_NOMEM;
    }
    int len = (int)b.n;
    if (buf && n) {
        size_t k = b.n < n - 1 ? b.n : n - 1;
        memcpy(buf, b.p ? b.p : "", k);
        buf[k] = '\0';
    }
    te__sb_free(&b);
    return len;
}

char *te__target_key_dup(te_db *db, const te_db_target *t)
{
    te__sb b = {0};
    int code = build_key(t, &b);
    if (code) {
        te__sb_free(&b);
        te__db_err(db, TE_ERR_ARG, "target: neither a key nor a backend given");
        return NULL;
    }
    if (b.oom || !b.p) {
        te__sb_free(&b);
        te__db_err(db, b.oom ? TE_ERR_NOMEM : TE_ERR_ARG,
                   b.oom ? "out of memory" : "target: empty key");
        return NULL;
    }
    return b.p;
}

/* Splits a canonical key back into fields (for a target given by key only). `storage` is a
 * writable copy of the key that the fields point into. Fields that do not parse stay "". */
void te__target_parse(char *storage, te_db_target *out)
{
    char *f[6] = {0};
    int n = 0;
    for (char *p = storage; n < 6;) {
        f[n++] = p;
        p = strchr(p, ';');
        if (!p)
            break;
        *p++ = '\0';
    }
    memset(out, 0, sizeof *out);
    out->backend = f[0];
    out->arch = out->device = out->features = out->compiler = out->driver = "";
    if (!f[0])
        return;
    if (!strcmp(f[0], "cuda")) {
        out->arch = f[1] ? f[1] : "";
        if (f[1] && !strncmp(f[1], "sm_", 3))
            out->sm = atoi(f[1] + 3);
        out->device = f[2] ? f[2] : "";
        out->cores = f[3] ? atoi(f[3]) : 0;
        out->compiler = f[4] ? f[4] : "";
        out->driver = f[5] ? (strncmp(f[5], "driver ", 7) ? f[5] : f[5] + 7) : "";
    } else {
        out->arch = f[1] ? f[1] : "";
        out->device = f[2] ? f[2] : "";
        out->features = f[3] ? f[3] : "";
        out->cores = f[4] ? atoi(f[4]) : 0;
        out->compiler = f[5] ? f[5] : "";
    }
}

/* ---- validation ---------------------------------------------------------------------------- */

static int finite_or_nan(double x) { return isnan(x) || isfinite(x); }

int te__valid_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        int c = (unsigned char)s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return 0;
        }
    }
    return 1;
}

/* The first text field of t that is not well-formed UTF-8, or NULL. Every text column is
 * exported as JSON, which must be UTF-8. The error text is not checked but repaired on insert
 * (utf8_repair): it is a compiler's or the system's output, and a stray byte in it must not
 * cost the trial, or its whole batch. */
static const char *non_utf8_field(const te_db_trial *t)
{
    const struct {
        const char *name, *value;
    } f[] = {
        {"workload key", t->workload.key},
        {"workload op", t->workload.op},
        {"workload expr_hash", t->workload.expr_hash},
        {"workload shapes", t->workload.shapes},
        {"target key", t->target.key},
        {"target backend", t->target.backend},
        {"target arch", t->target.arch},
        {"target device", t->target.device},
        {"target features", t->target.features},
        {"target compiler", t->target.compiler},
        {"target driver", t->target.driver},
        {"trace", t->trace},
        {"trace_hash", t->trace_hash},
        {"tessera_version", t->tessera_version},
        {"uid", t->uid},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].value &&
            te__utf8_valid_prefix(f[i].value, strlen(f[i].value)) != strlen(f[i].value))
            return f[i].name;
    return NULL;
}

int te__validate_trial(te_db *db, const te_db_trial *t, size_t i)
{
    if (!t)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: NULL", i);
    if (!t->workload.key || !*t->workload.key)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: workload key missing", i);
    if (!t->target.key && !t->target.backend)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: target has neither key nor backend", i);
    if (t->target.backend && strcmp(t->target.backend, "c") && strcmp(t->target.backend, "cuda"))
        return te__db_err(db, TE_ERR_ARG, "trial %zu: target backend '%s' is not c or cuda", i,
                          t->target.backend);
    if (t->target.key && !*t->target.key)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: empty target key", i);
    if (!t->trace)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: trace missing", i);
    if ((unsigned)t->status >= TE_TRIAL_STATUS_COUNT)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: status %d is not a te_trial_status", i,
                          (int)t->status);
    if (t->status == TE_TRIAL_OK && t->transient)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: an ok trial cannot be transient", i);
    if (t->status == TE_TRIAL_OK && !(isfinite(t->median_s) && t->median_s >= 0))
        return te__db_err(db, TE_ERR_ARG,
                          "trial %zu: an ok trial needs a finite, non-negative median_s", i);
    if (!finite_or_nan(t->median_s) || !finite_or_nan(t->spread_s) || !finite_or_nan(t->gflops) ||
        !finite_or_nan(t->bytes) || !isfinite(t->workload.flops))
        return te__db_err(db, TE_ERR_ARG,
                          "trial %zu: median_s, spread_s, gflops, bytes and flops must be finite "
                          "(NAN = unknown)",
                          i);
    if (t->bytes < 0)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: bytes %g is negative (0 or NAN = unknown)", i,
                          t->bytes);
    if (t->repeats < 0 || t->created_us < 0 || t->job_id < 0)
        return te__db_err(db, TE_ERR_ARG,
                          "trial %zu: repeats, created_us and job_id must not be negative", i);
    if (t->trace_hash && !*t->trace_hash)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: empty trace_hash", i);
    if (t->uid && !*t->uid)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: empty uid", i);
    const char *bad = non_utf8_field(t);
    if (bad)
        return te__db_err(db, TE_ERR_ARG, "trial %zu: %s is not valid UTF-8", i, bad);
    if (t->workload.shapes && !te__json_valid(t->workload.shapes, strlen(t->workload.shapes)))
        return te__db_err(db, TE_ERR_ARG, "trial %zu: workload shapes are not valid JSON: %s", i,
                          t->workload.shapes);
    if (t->uid && !te__valid_uuid(t->uid))
        return te__db_err(db, TE_ERR_ARG,
                          "trial %zu: uid '%.40s' is not a UUID (8-4-4-4-12 hex digits)", i,
                          t->uid);
    return TE_OK;
}

/* ---- inserting ----------------------------------------------------------------------------- */

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    sqlite3_bind_text(st, i, nz(s), -1, SQLITE_STATIC);
}

static void bind_real(sqlite3_stmt *st, int i, double x)
{
    if (isnan(x))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, x);
}

/* Runs a statement that returns nothing; resets it. */
static int step_done(te_db *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return te__db_sqlerr(db, &db->user, rc, what);
    return TE_OK;
}

/* Runs a "SELECT id ... WHERE key = ?1" statement: *id, or 0 when absent. */
static int step_id(te_db *db, sqlite3_stmt *st, int64_t *id)
{
    int rc = sqlite3_step(st);
    *id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return te__db_sqlerr(db, &db->user, rc, "looking up a row id");
    return TE_OK;
}

static int cache_put(te_db *db, te__id_cache *c, const char *key, int64_t id)
{
    free(c->key);
    c->key = strdup(key);
    c->id = id;
    return c->key ? TE_OK : te__db_err(db, TE_ERR_NOMEM, "out of memory");
}

static int target_id(te_db *db, const te_db_target *t, const char *key, int64_t *id)
{
    if (db->target_cache.key && !strcmp(db->target_cache.key, key)) {
        *id = db->target_cache.id;
        return TE_OK;
    }
    te_db_target parsed;
    char *storage = NULL;
    if (!t->backend) {
        storage = strdup(key);
        if (!storage)
            return te__db_err(db, TE_ERR_NOMEM, "out of memory");
        te__target_parse(storage, &parsed);
        t = &parsed;
        if (strcmp(nz(t->backend), "c") && strcmp(nz(t->backend), "cuda")) {
            free(storage);
            return te__db_err(db, TE_ERR_ARG,
                              "target key '%s' does not start with a backend (c or cuda)", key);
        }
    }
    sqlite3_stmt *st = te__stmt(db, &db->user, TE__ST_TARGET_INSERT);
    int code = TE_ERR_DB;
    if (st) {
        bind_text(st, 1, key);
        bind_text(st, 2, t->backend);
        bind_text(st, 3, t->arch);
        bind_text(st, 4, t->device);
        bind_text(st, 5, t->features);
        sqlite3_bind_int(st, 6, t->sm);
        sqlite3_bind_int(st, 7, t->cores);
        bind_text(st, 8, t->compiler);
        bind_text(st, 9, t->driver);
        code = step_done(db, st, "adding a target");
    }
    free(storage);
    if (code)
        return code;
    if (!(st = te__stmt(db, &db->user, TE__ST_TARGET_ID)))
        return TE_ERR_DB;
    bind_text(st, 1, key);
    if ((code = step_id(db, st, id)))
        return code;
    return cache_put(db, &db->target_cache, key, *id);
}

static int workload_id(te_db *db, const te_db_workload *w, int64_t *id)
{
    if (db->workload_cache.key && !strcmp(db->workload_cache.key, w->key)) {
        *id = db->workload_cache.id;
        return TE_OK;
    }
    sqlite3_stmt *st = te__stmt(db, &db->user, TE__ST_WORKLOAD_INSERT);
    if (!st)
        return TE_ERR_DB;
    bind_text(st, 1, w->key);
    if (w->op)
        bind_text(st, 2, w->op);
    else {
        const char *semi = strchr(w->key, ';');
        sqlite3_bind_text(st, 2, w->key, semi ? (int)(semi - w->key) : -1, SQLITE_STATIC);
    }
    bind_text(st, 3, w->expr_hash);
    bind_text(st, 4, w->shapes ? w->shapes : "{}");
    sqlite3_bind_double(st, 5, w->flops);
    int code = step_done(db, st, "adding a workload");
    if (code)
        return code;
    if (!(st = te__stmt(db, &db->user, TE__ST_WORKLOAD_ID)))
        return TE_ERR_DB;
    bind_text(st, 1, w->key);
    if ((code = step_id(db, st, id)))
        return code;
    return cache_put(db, &db->workload_cache, w->key, *id);
}

/* A malloc'ed copy of s with every byte that is not part of a well-formed UTF-8 sequence
 * replaced by U+FFFD, or NULL when s is already valid or memory ran out (then *oom = 1). */
static char *utf8_repair(const char *s, int *oom)
{
    size_t n = s ? strlen(s) : 0, ok = te__utf8_valid_prefix(s ? s : "", n);
    if (ok == n)
        return NULL;
    char *out = malloc(3 * n + 1);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    out[te__utf8_repair_into(s, n, out)] = '\0';
    return out;
}

int te__target_id(te_db *db, const te_db_target *t, const char *key, int64_t *id)
{
    return target_id(db, t, key, id);
}

int te__insert_trial(te_db *db, const te_db_trial *t, int flags, int *inserted)
{
    char *key = te__target_key_dup(db, &t->target);
    if (!key)
        return TE_ERR_ARG;
    int64_t tid = 0, wid = 0;
    int code = target_id(db, &t->target, key, &tid);
    free(key);
    if (!code)
        code = workload_id(db, &t->workload, &wid);
    if (code)
        return code;
    char uid[37], hash[17];
    if (!t->uid)
        te__uuid(uid);
    if (!t->trace_hash)
        te_db_trace_hash(t->trace, hash);
    sqlite3_stmt *st =
        te__stmt(db, &db->user,
                 (flags & TE__INS_IGNORE_DUP) ? TE__ST_TRIAL_INSERT_IGNORE : TE__ST_TRIAL_INSERT);
    if (!st)
        return TE_ERR_DB;
    bind_text(st, 1, t->uid ? t->uid : uid);
    sqlite3_bind_int64(st, 2, wid);
    sqlite3_bind_int64(st, 3, tid);
    if (t->job_id > 0)
        sqlite3_bind_int64(st, 4, t->job_id);
    else
        sqlite3_bind_null(st, 4);
    bind_text(st, 5, t->trace);
    bind_text(st, 6, t->trace_hash ? t->trace_hash : hash);
    bind_text(st, 7, te_trial_status_str(t->status));
    int oom = 0;
    char *error = utf8_repair(t->error, &oom);
    if (oom)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    if (error)
        sqlite3_bind_text(st, 8, error, -1, free);
    else
        bind_text(st, 8, t->error);
    bind_real(st, 9, t->median_s);
    bind_real(st, 10, t->spread_s);
    sqlite3_bind_int(st, 11, t->repeats);
    bind_real(st, 12, t->gflops);
    sqlite3_bind_int64(st, 13, t->created_us ? t->created_us : te_db_now_us());
    bind_text(st, 14, t->tessera_version ? t->tessera_version : te_version());
    sqlite3_bind_int(st, 15, t->transient ? 1 : 0);
    bind_real(st, 16, t->bytes > 0 ? t->bytes : NAN); /* 0 = unknown, as NAN */
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
            return te__db_err(db, TE_ERR_ARG, "job %lld does not exist", (long long)t->job_id);
        if (rc == SQLITE_CONSTRAINT_UNIQUE)
            return te__db_err(db, TE_ERR_ARG, "a trial with uid %s already exists",
                              t->uid ? t->uid : uid);
        return te__db_sqlerr(db, &db->user, rc, "adding a trial");
    }
    int added = sqlite3_changes(db->user.h) > 0;
    if (inserted)
        *inserted = added;
    if (added) { /* the trial is recorded: whoever claimed its trace is done with it */
        char *tkey = te__target_key_dup(db, &t->target);
        if (!tkey)
            return TE_ERR_ARG;
        if (!(st = te__stmt(db, &db->user, TE__ST_CLAIM_RELEASE))) {
            free(tkey);
            return TE_ERR_DB;
        }
        bind_text(st, 1, t->workload.key);
        sqlite3_bind_text(st, 2, tkey, -1, free);
        bind_text(st, 3, t->trace_hash ? t->trace_hash : hash);
        if ((code = step_done(db, st, "releasing a claim")))
            return code;
    }
    if (added && t->job_id > 0 && !(flags & TE__INS_NO_JOB_COUNT)) {
        if (!(st = te__stmt(db, &db->user, TE__ST_JOB_COUNT)))
            return TE_ERR_DB;
        sqlite3_bind_int64(st, 1, t->job_id);
        sqlite3_bind_int64(st, 2, 1);
        return step_done(db, st, "counting a job's trials");
    }
    return TE_OK;
}

int te_db_record_trials(te_db *db, const te_db_trial *trials, size_t n)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    int code = te__check_writable(db);
    if (code)
        return code;
    if (!trials && n)
        return te__db_err(db, TE_ERR_ARG, "te_db_record_trials: trials is NULL");
    for (size_t i = 0; i < n; i++)
        if ((code = te__validate_trial(db, &trials[i], i)))
            return code;
    if ((code = te__begin(db)))
        return code;
    for (size_t i = 0; i < n && !code; i++)
        code = te__insert_trial(db, &trials[i], 0, NULL);
    if (code) {
        te__rollback(db);
        return te__db_wrap(db, code, NULL, " (nothing of this batch was recorded)");
    }
    return te__commit(db);
}

int te_db_record_trial(te_db *db, const te_db_trial *trial, int64_t *out_id)
{
    int code = te_db_record_trials(db, trial, trial ? 1 : 0);
    if (!code && !trial)
        code = te__db_err(db, TE_ERR_ARG, "te_db_record_trial: trial is NULL");
    if (!code && out_id)
        *out_id = sqlite3_last_insert_rowid(db->user.h);
    return code;
}

/* ---- jobs ---------------------------------------------------------------------------------- */

static int job_exec(te_db *db, const char *sql, int64_t a, int64_t b, const char *text,
                    const char *what, int64_t job_id)
{
    int code = te__check_writable(db);
    if (code)
        return code;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, &db->user, rc, what);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, a);
    sqlite3_bind_int64(st, 3, b);
    sqlite3_bind_text(st, 4, nz(text), -1, SQLITE_STATIC);
    if ((code = te__begin(db))) {
        sqlite3_finalize(st);
        return code;
    }
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        code = te__db_sqlerr(db, &db->user, rc, what);
        te__rollback(db);
        return code;
    }
    if (sqlite3_changes(db->user.h) == 0) {
        te__rollback(db);
        return te__db_err(db, TE_ERR_NOT_FOUND, "%s: no job %lld", what, (long long)job_id);
    }
    return te__commit(db);
}

int te_db_job_start(te_db *db, const char *command, int64_t trials_planned, int64_t *out_id)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (trials_planned < 0)
        return te__db_err(db, TE_ERR_ARG, "te_db_job_start: negative trials_planned");
    int code = te__check_writable(db);
    if (code)
        return code;
    char uid[37], host[256] = "";
    te__uuid(uid);
    gethostname(host, sizeof host - 1);
    sqlite3_stmt *st = te__stmt(db, &db->user, TE__ST_JOB_INSERT_IGNORE);
    if (!st)
        return TE_ERR_DB;
    if ((code = te__begin(db)))
        return code;
    bind_text(st, 1, uid);
    bind_text(st, 2, command);
    sqlite3_bind_int64(st, 3, te_db_now_us());
    sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, 0);
    sqlite3_bind_int64(st, 6, trials_planned);
    bind_text(st, 7, "running");
    bind_text(st, 8, host);
    sqlite3_bind_int64(st, 9, (int64_t)getpid());
    code = step_done(db, st, "starting a job");
    if (code) {
        te__rollback(db);
        return code;
    }
    int64_t id = sqlite3_last_insert_rowid(db->user.h);
    if ((code = te__commit(db)))
        return code;
    if (out_id)
        *out_id = id;
    return TE_OK;
}

int te_db_job_finish(te_db *db, int64_t job_id, te_job_status status)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (status != TE_JOB_FINISHED && status != TE_JOB_INTERRUPTED && status != TE_JOB_FAILED)
        return te__db_err(db, TE_ERR_ARG,
                          "te_db_job_finish: status must be finished, interrupted or failed");
    int code = job_exec(db, "UPDATE jobs SET status = ?4, ended_us = ?2 WHERE id = ?1",
                        te_db_now_us(), 0, te_job_status_str(status), "finishing a job", job_id);
    return code ? code : te_db_release_claims(db, job_id);
}

int te_db_job_resume(te_db *db, int64_t job_id)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    return job_exec(db,
                    "UPDATE jobs SET status = 'running', ended_us = NULL, pid = ?2, host = ?4 "
                    "WHERE id = ?1",
                    (int64_t)getpid(), 0, host, "resuming a job", job_id);
}
