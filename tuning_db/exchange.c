/* JSON lines export/import and merging whole databases. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tuning_db/db_impl.h"
#include "tuning_db/json.h"

/* ---- export -------------------------------------------------------------------------------- */

static void put_key(FILE *f, const char *key, int first)
{
    if (!first)
        fputc(',', f);
    te__json_write_str(f, key);
    fputc(':', f);
}

static void put_text(FILE *f, const char *key, sqlite3_stmt *st, int col, int first)
{
    put_key(f, key, first);
    te__json_write_str(f, (const char *)sqlite3_column_text(st, col));
}

static void put_real(FILE *f, const char *key, sqlite3_stmt *st, int col)
{
    put_key(f, key, 0);
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        fputs("null", f);
    else
        te__json_write_num(f, sqlite3_column_double(st, col));
}

static void put_int(FILE *f, const char *key, sqlite3_stmt *st, int col)
{
    put_key(f, key, 0);
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        fputs("null", f);
    else
        fprintf(f, "%lld", (long long)sqlite3_column_int64(st, col));
}

int te_db_export(te_db *db, FILE *out, const char *workload_key, const char *target_key,
                 int64_t *n_written)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!out)
        return te__db_err(db, TE_ERR_ARG, "te_db_export: no output stream");
    static const char *sql = TE__TRIAL_SELECT
        ", j.command, j.started_us, j.ended_us, j.trials_done, "
        "j.trials_planned, j.status, j.host, j.pid" TE__TRIAL_FROM
        "WHERE (?1 IS NULL OR w.key = ?1) AND (?2 IS NULL OR t.key = ?2) ORDER BY tr.id";
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, &db->user, rc, "exporting");
    if (workload_key)
        sqlite3_bind_text(st, 1, workload_key, -1, SQLITE_STATIC);
    if (target_key)
        sqlite3_bind_text(st, 2, target_key, -1, SQLITE_STATIC);
    int64_t n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        fputc('{', out);
        put_text(out, "uid", st, 1, 1);
        put_key(out, "workload", 0);
        fputc('{', out);
        put_text(out, "key", st, 2, 1);
        put_text(out, "op", st, 3, 0);
        put_text(out, "expr_hash", st, 4, 0);
        put_key(out, "shapes", 0);
        const char *shapes = (const char *)sqlite3_column_text(st, 5);
        /* Written as the JSON value it is, so people can read it; a value that somehow is not
         * JSON (edited by hand) goes out as a string rather than breaking the line. */
        if (shapes && te__json_valid(shapes, strlen(shapes)))
            fputs(shapes, out);
        else
            te__json_write_str(out, shapes ? shapes : "{}");
        put_real(out, "flops", st, 6);
        fputs("},\"target\":{", out);
        static const char *const tnames[] = {"key", "backend", "arch",     "device", "features",
                                             "sm",  "cores",   "compiler", "driver"};
        for (int i = 0; i < 9; i++) {
            if (i == 5 || i == 6)
                put_int(out, tnames[i], st, 7 + i);
            else
                put_text(out, tnames[i], st, 7 + i, i == 0);
        }
        fputs("},\"job\":", out);
        if (sqlite3_column_type(st, 27) == SQLITE_NULL) {
            fputs("null", out);
        } else {
            fputc('{', out);
            put_text(out, "uid", st, 27, 1);
            put_text(out, "command", st, 30, 0);
            put_int(out, "started_us", st, 31);
            put_int(out, "ended_us", st, 32);
            put_int(out, "trials_done", st, 33);
            put_int(out, "trials_planned", st, 34);
            put_text(out, "status", st, 35, 0);
            put_text(out, "host", st, 36, 0);
            put_int(out, "pid", st, 37);
            fputc('}', out);
        }
        put_text(out, "trace", st, 16, 0);
        put_text(out, "trace_hash", st, 17, 0);
        put_text(out, "status", st, 18, 0);
        put_text(out, "error", st, 19, 0);
        put_real(out, "median_s", st, 20);
        put_real(out, "spread_s", st, 21);
        put_int(out, "repeats", st, 22);
        put_real(out, "gflops", st, 23);
        if (sqlite3_column_type(st, 29) != SQLITE_NULL) /* only when known, as transient */
            put_real(out, "bytes", st, 29);
        put_int(out, "created_us", st, 24);
        put_text(out, "tessera_version", st, 25, 0);
        if (sqlite3_column_int(st, 28)) /* only when set: older readers see the same lines */
            put_int(out, "transient", st, 28);
        fputs("}\n", out);
        n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return te__db_sqlerr(db, &db->user, rc, "exporting");
    if (ferror(out) || fflush(out) != 0)
        return te__db_err(db, TE_ERR_IO, "export: write error: %s", strerror(errno));
    if (n_written)
        *n_written = n;
    return TE_OK;
}

/* ---- import -------------------------------------------------------------------------------- */

typedef struct {
    te_db *db;
    te__json_doc *doc;
    const char *err; /* first problem found, static or in doc->err */
    char errbuf[160];
} line_ctx;

static int bad(line_ctx *lc, const char *fmt, const char *field)
{
    if (!lc->err) {
        snprintf(lc->errbuf, sizeof lc->errbuf, fmt, field);
        lc->err = lc->errbuf;
    }
    return 0;
}

/* Field readers: return 1 and set *out, or 0 with lc->err set. `required` fields must exist;
 * `nullable` ones may be null (NAN / NULL). */
static int get_str(line_ctx *lc, const te__json *obj, const char *key, int required,
                   const char **out)
{
    te__json *v = te__json_member(obj, key);
    if (!v || v->type == TE__JSON_NULL) {
        if (required)
            return bad(lc, "missing field '%s'", key);
        *out = NULL;
        return 1;
    }
    if (v->type != TE__JSON_STRING)
        return bad(lc, "field '%s' must be a string", key);
    *out = v->str;
    return 1;
}

static int get_real(line_ctx *lc, const te__json *obj, const char *key, double *out)
{
    te__json *v = te__json_member(obj, key);
    if (!v || v->type == TE__JSON_NULL) {
        *out = NAN;
        return 1;
    }
    if (v->type != TE__JSON_NUMBER || !isfinite(v->num))
        return bad(lc, "field '%s' must be a finite number or null", key);
    *out = v->num;
    return 1;
}

static int get_int(line_ctx *lc, const te__json *obj, const char *key, int64_t lo, int64_t hi,
                   int64_t *out)
{
    te__json *v = te__json_member(obj, key);
    if (!v || v->type == TE__JSON_NULL) {
        *out = 0;
        return 1;
    }
    if (v->type != TE__JSON_NUMBER || !v->is_int || v->i < lo || v->i > hi)
        return bad(lc, "field '%s' must be an integer in range", key);
    *out = v->i;
    return 1;
}

static int job_id_for(te_db *db, line_ctx *lc, const te__json *job, int64_t *out)
{
    const char *uid, *command, *status, *host;
    int64_t started, ended, done, planned, pid;
    if (!get_str(lc, job, "uid", 1, &uid) || !get_str(lc, job, "command", 0, &command) ||
        !get_str(lc, job, "status", 1, &status) || !get_str(lc, job, "host", 0, &host) ||
        !get_int(lc, job, "started_us", 0, INT64_MAX, &started) ||
        !get_int(lc, job, "ended_us", 0, INT64_MAX, &ended) ||
        !get_int(lc, job, "trials_done", 0, INT64_MAX, &done) ||
        !get_int(lc, job, "trials_planned", 0, INT64_MAX, &planned) ||
        !get_int(lc, job, "pid", 0, INT64_MAX, &pid))
        return TE_ERR_CORRUPT;
    if (!*uid)
        return bad(lc, "empty job %s", "uid"), TE_ERR_CORRUPT;
    int known = 0;
    for (int k = 0; k < 4; k++)
        known |= !strcmp(status, te_job_status_str((te_job_status)k));
    if (!known)
        return bad(lc, "job status '%s' is not running, finished, interrupted or failed", status),
               TE_ERR_CORRUPT;
    if (!te__valid_uuid(uid))
        return bad(lc, "job uid '%.40s' is not a UUID (8-4-4-4-12 hex digits)", uid),
               TE_ERR_CORRUPT;
    if (db->job_cache.key && !strcmp(db->job_cache.key, uid)) {
        *out = db->job_cache.id;
        return TE_OK;
    }
    sqlite3_stmt *st = te__stmt(db, &db->user, TE__ST_JOB_INSERT_IGNORE);
    if (!st)
        return TE_ERR_DB;
    sqlite3_bind_text(st, 1, uid, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, command ? command : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, started);
    if (ended)
        sqlite3_bind_int64(st, 4, ended);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, done);
    sqlite3_bind_int64(st, 6, planned);
    sqlite3_bind_text(st, 7, status, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, host ? host : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, pid);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return te__db_sqlerr(db, &db->user, rc, "importing a job");
    if (!(st = te__stmt(db, &db->user, TE__ST_JOB_ID_BY_UID)))
        return TE_ERR_DB;
    sqlite3_bind_text(st, 1, uid, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (rc != SQLITE_ROW)
        return te__db_sqlerr(db, &db->user, rc, "importing a job");
    free(db->job_cache.key);
    db->job_cache.key = strdup(uid);
    db->job_cache.id = *out;
    return db->job_cache.key ? TE_OK : te__db_err(db, TE_ERR_NOMEM, "out of memory");
}

/* Imports one line; returns TE_OK, TE_ERR_CORRUPT with lc->err, or a database error (message
 * on db). */
static int import_line(te_db *db, line_ctx *lc, const char *s, size_t n, int *inserted)
{
    te__json *root = te__json_parse(lc->doc, s, n);
    if (!root) {
        lc->err = lc->doc->err;
        return TE_ERR_CORRUPT;
    }
    if (root->type != TE__JSON_OBJECT)
        return bad(lc, "a line must hold one JSON object%s", ""), TE_ERR_CORRUPT;
    te__json *w = te__json_member(root, "workload"), *t = te__json_member(root, "target"),
             *job = te__json_member(root, "job");
    if (!w || w->type != TE__JSON_OBJECT)
        return bad(lc, "missing object '%s'", "workload"), TE_ERR_CORRUPT;
    if (!t || t->type != TE__JSON_OBJECT)
        return bad(lc, "missing object '%s'", "target"), TE_ERR_CORRUPT;
    if (job && job->type != TE__JSON_NULL && job->type != TE__JSON_OBJECT)
        return bad(lc, "field '%s' must be an object or null", "job"), TE_ERR_CORRUPT;

    te_db_trial tr = {0};
    const char *status = NULL;
    int64_t sm = 0, cores = 0, repeats = 0, created = 0, transient = 0;
    int ok = get_str(lc, root, "uid", 1, &tr.uid) && get_str(lc, w, "key", 1, &tr.workload.key) &&
             get_str(lc, w, "op", 0, &tr.workload.op) &&
             get_str(lc, w, "expr_hash", 0, &tr.workload.expr_hash) &&
             get_real(lc, w, "flops", &tr.workload.flops) &&
             get_str(lc, t, "key", 1, &tr.target.key) &&
             get_str(lc, t, "backend", 1, &tr.target.backend) &&
             get_str(lc, t, "arch", 0, &tr.target.arch) &&
             get_str(lc, t, "device", 0, &tr.target.device) &&
             get_str(lc, t, "features", 0, &tr.target.features) &&
             get_int(lc, t, "sm", INT32_MIN, INT32_MAX, &sm) &&
             get_int(lc, t, "cores", INT32_MIN, INT32_MAX, &cores) &&
             get_str(lc, t, "compiler", 0, &tr.target.compiler) &&
             get_str(lc, t, "driver", 0, &tr.target.driver) &&
             get_str(lc, root, "trace", 1, &tr.trace) &&
             get_str(lc, root, "trace_hash", 0, &tr.trace_hash) &&
             get_str(lc, root, "status", 1, &status) && get_str(lc, root, "error", 0, &tr.error) &&
             get_real(lc, root, "median_s", &tr.median_s) &&
             get_real(lc, root, "spread_s", &tr.spread_s) &&
             get_int(lc, root, "repeats", 0, INT32_MAX, &repeats) &&
             get_real(lc, root, "gflops", &tr.gflops) && get_real(lc, root, "bytes", &tr.bytes) &&
             get_int(lc, root, "created_us", 0, INT64_MAX, &created) &&
             get_str(lc, root, "tessera_version", 0, &tr.tessera_version) &&
             get_int(lc, root, "transient", 0, 1, &transient);
    if (!ok)
        return TE_ERR_CORRUPT;
    if (isnan(tr.workload.flops))
        tr.workload.flops = 0;
    tr.target.sm = (int32_t)sm;
    tr.target.cores = (int32_t)cores;
    tr.repeats = (int32_t)repeats;
    tr.transient = (int)transient;
    tr.created_us = created;
    if (te_trial_status_parse(status, &tr.status) != TE_OK)
        return bad(lc, "unknown trial status '%s'", status), TE_ERR_CORRUPT;
    te__json *shapes = te__json_member(w, "shapes");
    char *shapes_text = NULL;
    if (shapes && shapes->type == TE__JSON_STRING) {
        tr.workload.shapes = shapes->str;
    } else if (shapes && shapes->type != TE__JSON_NULL) {
        if (!(shapes_text = te__arena_alloc(&lc->doc->arena, shapes->raw_len + 1)))
            return te__db_err(db, TE_ERR_NOMEM, "out of memory");
        memcpy(shapes_text, shapes->raw, shapes->raw_len);
        shapes_text[shapes->raw_len] = '\0';
        tr.workload.shapes = shapes_text;
    }
    /* The job first: its own problems (status, uid) are named before the trial's uid. */
    if (job && job->type == TE__JSON_OBJECT) {
        int code = job_id_for(db, lc, job, &tr.job_id);
        if (code)
            return code;
    }
    if (te__validate_trial(db, &tr, 0) != TE_OK) {
        /* "trial 0: x" -> "x" */
        const char *m = strchr(db->errmsg, ':');
        m = m ? m + 2 : db->errmsg;
        size_t k = strlen(m) < sizeof lc->errbuf - 1 ? strlen(m) : sizeof lc->errbuf - 1;
        memcpy(lc->errbuf, m, k);
        lc->errbuf[k] = '\0';
        lc->err = lc->errbuf;
        return TE_ERR_CORRUPT;
    }
    return te__insert_trial(db, &tr, TE__INS_IGNORE_DUP | TE__INS_NO_JOB_COUNT, inserted);
}

int te_db_import_buffer(te_db *db, const char *data, size_t size, te_db_import_stats *stats)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    te_db_import_stats s = {0};
    if (stats)
        *stats = s;
    if (!data && size)
        return te__db_err(db, TE_ERR_ARG, "te_db_import_buffer: data is NULL");
    int code = te__check_writable(db);
    if (code || (code = te__begin(db)))
        return code;
    te__json_doc doc = {0};
    int64_t lineno = 0;
    for (size_t pos = 0; pos < size && !code;) {
        const char *line = data + pos;
        const char *nl = memchr(line, '\n', size - pos);
        size_t n = nl ? (size_t)(nl - line) : size - pos;
        pos += n + (nl != NULL);
        lineno++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n)
            continue; /* blank line */
        s.lines++;
        line_ctx lc = {.db = db, .doc = &doc};
        int inserted = 0;
        code = import_line(db, &lc, line, n, &inserted);
        te__json_doc_free(&doc);
        if (code == TE_ERR_CORRUPT && lc.err) {
            te__db_err(db, code, "line %lld: %s; nothing was imported", (long long)lineno, lc.err);
        } else if (code) {
            char prefix[40];
            snprintf(prefix, sizeof prefix, "line %lld: ", (long long)lineno);
            te__db_wrap(db, code, prefix, "; nothing was imported");
        }
        if (code)
            s.error_line = lineno;
        else if (inserted)
            s.imported++;
        else
            s.duplicates++;
    }
    if (code) {
        te__rollback(db); /* keeps the message */
        s.imported = s.duplicates = 0;
    } else {
        code = te__commit(db);
        if (code)
            s.imported = s.duplicates = 0;
    }
    if (stats)
        *stats = s;
    return code;
}

int te_db_import(te_db *db, FILE *in, te_db_import_stats *stats)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!in)
        return te__db_err(db, TE_ERR_ARG, "te_db_import: no input stream");
    te__sb b = {0};
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, in)) > 0)
        te__sb_putn(&b, chunk, k);
    if (ferror(in) || b.oom) {
        int oom = b.oom;
        te__sb_free(&b);
        return oom ? te__db_err(db, TE_ERR_NOMEM, "import: out of memory")
                   : te__db_err(db, TE_ERR_IO, "import: read error: %s", strerror(errno));
    }
    int code = te_db_import_buffer(db, b.p ? b.p : "", b.n, stats);
    te__sb_free(&b);
    return code;
}

/* ---- merge --------------------------------------------------------------------------------- */

static char *file_uri_ro(const char *path)
{
    te__sb b = {0};
    te__sb_puts(&b, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~/", *p))
            te__sb_putn(&b, (const char *)p, 1);
        else
            te__sb_printf(&b, "%%%02X", *p);
    }
    te__sb_puts(&b, "?mode=ro");
    if (b.oom) {
        te__sb_free(&b);
        return NULL;
    }
    return b.p;
}

int te_db_merge(te_db *db, const char *other_path, te_db_import_stats *stats)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    te_db_import_stats s = {0};
    if (stats)
        *stats = s;
    if (!other_path)
        return te__db_err(db, TE_ERR_ARG, "te_db_merge: no path");
    int code = te__check_writable(db);
    if (code)
        return code;
    struct stat a, b;
    if (strcmp(db->user.path, ":memory:") && stat(db->user.path, &a) == 0 &&
        stat(other_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return te__db_err(db, TE_ERR_ARG, "merge: %s is this database itself", other_path);
    /* Validate the source the same way as any open (header, identity, version), read-only. */
    te_db *other = NULL;
    te_db_options o = {.flags = TE_DB_READONLY | TE_DB_NO_SYSTEM};
    code = te_db_open(other_path, &o, &other);
    if (code) {
        te__db_err(db, code, "merge: %s", te_db_errmsg(other));
        te_db_close(other);
        return code;
    }
    te_db_close(other);

    char *uri = file_uri_ro(other_path);
    if (!uri)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h, "ATTACH ?1 AS te_src", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    free(uri);
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, &db->user, rc, "attaching the database to merge");

    int64_t before = 0, after = 0;
    code = te__begin(db);
    if (!code) {
        static const char *sql =
            "INSERT INTO targets(key, backend, arch, device, features, sm, cores, compiler, "
            "driver) SELECT key, backend, arch, device, features, sm, cores, compiler, driver "
            "FROM te_src.targets WHERE 1 ON CONFLICT(key) DO NOTHING;"
            "INSERT INTO workloads(key, op, expr_hash, shapes, flops) "
            "SELECT key, op, expr_hash, shapes, flops FROM te_src.workloads WHERE 1 "
            "ON CONFLICT(key) DO NOTHING;"
            "INSERT INTO jobs(uid, command, started_us, ended_us, trials_done, trials_planned, "
            "status, host, pid) SELECT uid, command, started_us, ended_us, trials_done, "
            "trials_planned, status, host, pid FROM te_src.jobs WHERE 1 "
            "ON CONFLICT(uid) DO NOTHING;"
            "INSERT INTO trials(uid, workload_id, target_id, job_id, trace, trace_hash, status, "
            "error, median_s, spread_s, repeats, gflops, created_us, tessera_version, transient, "
            "bytes) "
            "SELECT s.uid, w.id, t.id, j.id, s.trace, s.trace_hash, s.status, s.error, "
            "s.median_s, s.spread_s, s.repeats, s.gflops, s.created_us, s.tessera_version, "
            "s.transient, s.bytes "
            "FROM te_src.trials s "
            "JOIN te_src.workloads sw ON sw.id = s.workload_id "
            "JOIN main.workloads w ON w.key = sw.key "
            "JOIN te_src.targets st ON st.id = s.target_id "
            "JOIN main.targets t ON t.key = st.key "
            "LEFT JOIN te_src.jobs sj ON sj.id = s.job_id "
            "LEFT JOIN main.jobs j ON j.uid = sj.uid "
            "WHERE 1 ORDER BY s.id ON CONFLICT(uid) DO NOTHING;";
        sqlite3_stmt *c = NULL;
        if (sqlite3_prepare_v2(db->user.h, "SELECT count(*) FROM main.trials", -1, &c, NULL) ==
                SQLITE_OK &&
            sqlite3_step(c) == SQLITE_ROW)
            before = sqlite3_column_int64(c, 0);
        sqlite3_finalize(c);
        code = te__exec(db, &db->user, sql);
        if (!code) {
            c = NULL;
            rc = sqlite3_prepare_v2(db->user.h,
                                    "SELECT (SELECT count(*) FROM main.trials), "
                                    "(SELECT count(*) FROM te_src.trials)",
                                    -1, &c, NULL);
            if (rc == SQLITE_OK && (rc = sqlite3_step(c)) == SQLITE_ROW) {
                after = sqlite3_column_int64(c, 0);
                s.lines = sqlite3_column_int64(c, 1);
            } else {
                code = te__db_sqlerr(db, &db->user, rc, "merging");
            }
            sqlite3_finalize(c);
        }
        if (code)
            te__rollback(db);
        else
            code = te__commit(db);
    }
    sqlite3_exec(db->user.h, "DETACH te_src", NULL, NULL, NULL);
    if (code)
        return code;
    s.imported = after - before;
    s.duplicates = s.lines - s.imported;
    if (stats)
        *stats = s;
    return TE_OK;
}
