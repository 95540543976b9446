/* Reading: best / top-k / history with the two tiers and the explicit target fallback, jobs,
 * the overview, info, prune and check. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuning_db/db_impl.h"

/* ---- lists --------------------------------------------------------------------------------- */

typedef struct {
    te_db_trial_list pub; /* first, so the public pointer is the struct's */
    size_t cap;
    te__arena arena;
} trial_list;

static trial_list *trial_list_new(void) { return calloc(1, sizeof(trial_list)); }

void te_db_trial_list_free(te_db_trial_list *list)
{
    if (!list)
        return;
    trial_list *l = (trial_list *)list;
    te__arena_free(&l->arena);
    free(l->pub.items);
    free(l);
}

static te_db_trial *trial_list_push(trial_list *l)
{
    if (l->pub.n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        te_db_trial *p = realloc(l->pub.items, cap * sizeof *p);
        if (!p)
            return NULL;
        l->pub.items = p;
        l->cap = cap;
    }
    te_db_trial *t = &l->pub.items[l->pub.n++];
    memset(t, 0, sizeof *t);
    return t;
}

static const char *col_text(trial_list *l, sqlite3_stmt *st, int i, int *oom)
{
    const unsigned char *z = sqlite3_column_text(st, i);
    if (!z)
        return sqlite3_column_type(st, i) == SQLITE_NULL ? NULL : "";
    char *p = te__arena_strdup(&l->arena, (const char *)z);
    if (!p)
        *oom = 1;
    return p;
}

static double col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Reads one row of te__trial_cols_sql into a new list item. */
static int read_trial(trial_list *l, sqlite3_stmt *st, int from_system, int exact)
{
    te_db_trial *t = trial_list_push(l);
    if (!t)
        return TE_ERR_NOMEM;
    int oom = 0;
    t->id = sqlite3_column_int64(st, 0);
    t->uid = col_text(l, st, 1, &oom);
    t->workload.key = col_text(l, st, 2, &oom);
    t->workload.op = col_text(l, st, 3, &oom);
    t->workload.expr_hash = col_text(l, st, 4, &oom);
    t->workload.shapes = col_text(l, st, 5, &oom);
    t->workload.flops = sqlite3_column_double(st, 6);
    t->target.key = col_text(l, st, 7, &oom);
    t->target.backend = col_text(l, st, 8, &oom);
    t->target.arch = col_text(l, st, 9, &oom);
    t->target.device = col_text(l, st, 10, &oom);
    t->target.features = col_text(l, st, 11, &oom);
    t->target.sm = sqlite3_column_int(st, 12);
    t->target.cores = sqlite3_column_int(st, 13);
    t->target.compiler = col_text(l, st, 14, &oom);
    t->target.driver = col_text(l, st, 15, &oom);
    t->trace = col_text(l, st, 16, &oom);
    t->trace_hash = col_text(l, st, 17, &oom);
    const char *status = (const char *)sqlite3_column_text(st, 18);
    if (te_trial_status_parse(status, &t->status) != TE_OK)
        t->status = TE_TRIAL_OTHER_ERROR;
    t->error = col_text(l, st, 19, &oom);
    t->median_s = col_real(st, 20);
    t->spread_s = col_real(st, 21);
    t->repeats = sqlite3_column_int(st, 22);
    t->gflops = col_real(st, 23);
    t->created_us = sqlite3_column_int64(st, 24);
    t->tessera_version = col_text(l, st, 25, &oom);
    t->job_id = sqlite3_column_int64(st, 26);
    t->job_uid = col_text(l, st, 27, &oom);
    t->transient = sqlite3_column_int(st, 28);
    t->bytes = col_real(st, 29);
    t->from_system = from_system;
    t->exact_target = exact;
    return oom ? TE_ERR_NOMEM : TE_OK;
}

/* Steps st to the end, appending rows (at most `max`, 0 = all) whose trace hash is not already
 * in the list when `distinct`. Resets st. */
static int collect(te_db *db, te__conn *c, sqlite3_stmt *st, trial_list *l, size_t max,
                   int distinct, int from_system, int exact)
{
    int rc = SQLITE_DONE, code = TE_OK;
    while ((max == 0 || l->pub.n < max) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (distinct) {
            const char *h = (const char *)sqlite3_column_text(st, 17);
            int seen = 0;
            for (size_t i = 0; i < l->pub.n && !seen; i++)
                seen = h && !strcmp(l->pub.items[i].trace_hash, h);
            if (seen)
                continue;
        }
        if ((code = read_trial(l, st, from_system, exact)))
            break;
    }
    if (!code && (max == 0 || l->pub.n < max) && rc != SQLITE_DONE)
        code = te__db_sqlerr(db, c, rc, "reading trials");
    sqlite3_reset(st);
    if (code == TE_ERR_NOMEM)
        te__db_err(db, code, "out of memory");
    return code;
}

static te__conn *tier(te_db *db, int i, int flags)
{
    if (i == 0)
        return &db->user;
    return db->has_sys && !(flags & TE_DB_USER_ONLY) ? &db->sys : NULL;
}

/* Fills l with up to k fastest distinct ok trials of (wkey, tkey): user's, then system's. */
static int topk_exact(te_db *db, const char *wkey, const char *tkey, size_t k, int flags,
                      trial_list *l, int exact)
{
    for (int i = 0; i < 2 && l->pub.n < k; i++) {
        te__conn *c = tier(db, i, flags);
        if (!c)
            continue;
        sqlite3_stmt *st = te__stmt(db, c, TE__ST_TOPK);
        if (!st)
            return TE_ERR_DB;
        sqlite3_bind_text(st, 1, wkey, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, tkey, -1, SQLITE_STATIC);
        int code = collect(db, c, st, l, k, 1, i == 1, exact);
        if (code)
            return code;
    }
    return TE_OK;
}

/* ---- fallback to a compatible target ------------------------------------------------------- */

static int feature_in(const char *list, const char *f, size_t n)
{
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t m = e ? (size_t)(e - p) : strlen(p);
        if (m == n && !strncmp(p, f, n))
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

static const char *nz(const char *s) { return s ? s : ""; }

/* How close `cand` is to the requested target: -1 when incompatible (its code may not run
 * here), else larger is closer. */
static long compat_score(const te_db_target *req, const te_db_target *cand)
{
    if (strcmp(nz(req->backend), nz(cand->backend)))
        return -1;
    long score;
    if (!strcmp(nz(req->backend), "cuda")) {
        if (req->sm <= 0 || cand->sm <= 0 || cand->sm / 10 != req->sm / 10 || cand->sm > req->sm)
            return -1;
        score = 1000L * cand->sm;
    } else {
        if (strcmp(nz(req->arch), nz(cand->arch)))
            return -1;
        long common = 0;
        for (const char *p = nz(cand->features); *p;) {
            const char *e = strchr(p, ',');
            size_t m = e ? (size_t)(e - p) : strlen(p);
            if (m) {
                if (!feature_in(nz(req->features), p, m))
                    return -1; /* it may use an instruction this CPU lacks */
                common++;
            }
            if (!e)
                break;
            p = e + 1;
        }
        score = 1000L * common;
    }
    score += 100 * !strcmp(nz(req->device), nz(cand->device));
    score += 10 * !strcmp(nz(req->compiler), nz(cand->compiler));
    score += !strcmp(nz(req->driver), nz(cand->driver));
    return score;
}

/* Picks the closest compatible target that has ok trials of wkey; *out is malloc'ed. */
static int nearest_target(te_db *db, const char *wkey, const te_db_target *req, const char *req_key,
                          int flags, char **out)
{
    static const char *sql =
        "SELECT t.key, t.backend, t.arch, t.device, t.features, t.sm, t.cores, t.compiler, "
        "t.driver FROM targets t WHERE t.backend = ?2 AND t.key <> ?3 AND EXISTS ("
        "SELECT 1 FROM trials tr JOIN workloads w ON w.id = tr.workload_id "
        "WHERE tr.target_id = t.id AND w.key = ?1 AND tr.status = 'ok' "
        "AND tr.median_s IS NOT NULL) ORDER BY t.key";
    long best = -1;
    *out = NULL;
    for (int i = 0; i < 2; i++) {
        te__conn *c = tier(db, i, flags);
        if (!c)
            continue;
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
            return te__db_sqlerr(db, c, rc, "looking for a compatible target");
        sqlite3_bind_text(st, 1, wkey, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, nz(req->backend), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, req_key, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            te_db_target cand = {
                .key = (const char *)sqlite3_column_text(st, 0),
                .backend = (const char *)sqlite3_column_text(st, 1),
                .arch = (const char *)sqlite3_column_text(st, 2),
                .device = (const char *)sqlite3_column_text(st, 3),
                .features = (const char *)sqlite3_column_text(st, 4),
                .sm = sqlite3_column_int(st, 5),
                .cores = sqlite3_column_int(st, 6),
                .compiler = (const char *)sqlite3_column_text(st, 7),
                .driver = (const char *)sqlite3_column_text(st, 8),
            };
            long s = compat_score(req, &cand);
            if (s > best) { /* strictly better: the user's tier wins ties */
                char *k = strdup(cand.key);
                if (!k) {
                    sqlite3_finalize(st);
                    return te__db_err(db, TE_ERR_NOMEM, "out of memory");
                }
                free(*out);
                *out = k;
                best = s;
            }
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) {
            free(*out);
            *out = NULL;
            return te__db_sqlerr(db, c, rc, "looking for a compatible target");
        }
    }
    return TE_OK;
}

static int lookup(te_db *db, const char *wkey, const te_db_target *target, size_t k, int flags,
                  te_db_trial_list **out, const char *what)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!out)
        return te__db_err(db, TE_ERR_ARG, "%s: out is NULL", what);
    *out = NULL;
    if (!wkey || !target)
        return te__db_err(db, TE_ERR_ARG, "%s: workload key and target are required", what);
    if (k == 0)
        return te__db_err(db, TE_ERR_ARG, "%s: k must be positive", what);
    char *tkey = te__target_key_dup(db, target);
    if (!tkey)
        return TE_ERR_ARG;
    trial_list *l = trial_list_new();
    if (!l) {
        free(tkey);
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    }
    int code = topk_exact(db, wkey, tkey, k, flags, l, 1);
    if (!code && l->pub.n == 0 && (flags & TE_DB_FALLBACK)) {
        te_db_target req = *target, parsed;
        char *storage = NULL;
        if (!req.backend) {
            if (!(storage = strdup(tkey)))
                code = te__db_err(db, TE_ERR_NOMEM, "out of memory");
            else {
                te__target_parse(storage, &parsed);
                req = parsed;
            }
        }
        char *near = NULL;
        if (!code)
            code = nearest_target(db, wkey, &req, tkey, flags, &near);
        if (!code && near)
            code = topk_exact(db, wkey, near, k, flags, l, 0);
        free(near);
        free(storage);
    }
    if (!code && l->pub.n == 0)
        code = te__db_err(db, TE_ERR_NOT_FOUND, "no ok trial of '%s' on target '%s'%s", wkey, tkey,
                          (flags & TE_DB_FALLBACK) ? " or a compatible one"
                                                   : " (TE_DB_FALLBACK/--fallback allows a "
                                                     "compatible target)");
    free(tkey);
    if (code) {
        te_db_trial_list_free(&l->pub);
        return code;
    }
    *out = &l->pub;
    return TE_OK;
}

int te_db_best(te_db *db, const char *workload_key, const te_db_target *target, int flags,
               te_db_trial_list **out)
{
    return lookup(db, workload_key, target, 1, flags, out, "te_db_best");
}

int te_db_top_k(te_db *db, const char *workload_key, const te_db_target *target, int k, int flags,
                te_db_trial_list **out)
{
    return lookup(db, workload_key, target, k > 0 ? (size_t)k : 0, flags, out, "te_db_top_k");
}

int te_db_history(te_db *db, const char *workload_key, const te_db_target *target, int64_t limit,
                  te_db_trial_list **out)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!out || !workload_key || limit < 0)
        return te__db_err(db, TE_ERR_ARG, "te_db_history: bad arguments");
    *out = NULL;
    char *tkey = NULL;
    if (target && !(tkey = te__target_key_dup(db, target)))
        return TE_ERR_ARG;
    trial_list *l = trial_list_new();
    char sql[2048];
    snprintf(sql, sizeof sql,
             "%sWHERE w.key = ?1 AND (?2 IS NULL OR t.key = ?2) "
             "ORDER BY tr.created_us DESC, tr.id DESC LIMIT ?3",
             te__trial_cols_sql);
    int code = l ? TE_OK : te__db_err(db, TE_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 2 && !code; i++) {
        te__conn *c = tier(db, i, 0);
        if (!c)
            continue;
        if (limit && (int64_t)l->pub.n >= limit)
            break;
        size_t first = l->pub.n;
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
        if (rc != SQLITE_OK) {
            code = te__db_sqlerr(db, c, rc, "reading the history");
            break;
        }
        sqlite3_bind_text(st, 1, workload_key, -1, SQLITE_STATIC);
        if (tkey)
            sqlite3_bind_text(st, 2, tkey, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, limit ? limit - (int64_t)l->pub.n : -1);
        code = collect(db, c, st, l, 0, 0, i == 1, 1);
        sqlite3_finalize(st);
        /* Newest-first from SQL (so LIMIT keeps the newest); each tier reads oldest first. */
        for (size_t a = first, b = l->pub.n; !code && b > a + 1; a++, b--) {
            te_db_trial tmp = l->pub.items[a];
            l->pub.items[a] = l->pub.items[b - 1];
            l->pub.items[b - 1] = tmp;
        }
    }
    free(tkey);
    if (code) {
        te_db_trial_list_free(l ? &l->pub : NULL);
        return code;
    }
    *out = &l->pub;
    return TE_OK;
}

int te_db_has_trace(te_db *db, const char *workload_key, const te_db_target *target,
                    const char *trace_hash, int *out_found)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!workload_key || !target || !trace_hash || !out_found)
        return te__db_err(db, TE_ERR_ARG, "te_db_has_trace: NULL argument");
    char *tkey = te__target_key_dup(db, target);
    if (!tkey)
        return TE_ERR_ARG;
    sqlite3_stmt *st = te__stmt(db, &db->user, TE__ST_HAS_TRACE);
    if (!st) {
        free(tkey);
        return TE_ERR_DB;
    }
    sqlite3_bind_text(st, 1, workload_key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, tkey, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, trace_hash, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    free(tkey);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return te__db_sqlerr(db, &db->user, rc, "looking up a trace");
    *out_found = rc == SQLITE_ROW;
    return TE_OK;
}

/* ---- overview and info --------------------------------------------------------------------- */

int te_db_summary_foreach(te_db *db, int flags, int (*cb)(const te_db_summary *row, void *ud),
                          void *ud)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!cb)
        return te__db_err(db, TE_ERR_ARG, "te_db_summary_foreach: no callback");
    static const char *sql = "SELECT w.key, t.key, count(*), total(tr.status = 'ok'), "
                             "min(CASE WHEN tr.status = 'ok' THEN tr.median_s END), "
                             "max(CASE WHEN tr.status = 'ok' THEN tr.gflops END) "
                             "FROM trials tr JOIN workloads w ON w.id = tr.workload_id "
                             "JOIN targets t ON t.id = tr.target_id "
                             "GROUP BY tr.workload_id, tr.target_id ORDER BY w.key, t.key";
    for (int i = 0; i < 2; i++) {
        te__conn *c = tier(db, i, flags);
        if (!c)
            continue;
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
            return te__db_sqlerr(db, c, rc, "summarizing");
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            te_db_summary row = {
                .workload_key = (const char *)sqlite3_column_text(st, 0),
                .target_key = (const char *)sqlite3_column_text(st, 1),
                .n_trials = sqlite3_column_int64(st, 2),
                .n_ok = (int64_t)sqlite3_column_double(st, 3),
                .best_median_s = col_real(st, 4),
                .best_gflops = col_real(st, 5),
                .from_system = i == 1,
            };
            int stop = cb(&row, ud);
            if (stop) {
                sqlite3_finalize(st);
                return stop;
            }
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return te__db_sqlerr(db, c, rc, "summarizing");
    }
    return TE_OK;
}

static int count(te_db *db, te__conn *c, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_OK ? TE_OK : te__db_sqlerr(db, c, rc, "counting");
}

int te_db_get_info(te_db *db, te_db_info *info)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!info)
        return te__db_err(db, TE_ERR_ARG, "te_db_get_info: info is NULL");
    memset(info, 0, sizeof *info);
    info->path = db->user.path;
    info->system_path = db->has_sys ? db->sys.path : NULL;
    info->schema_version = db->user.schema_version;
    info->readonly = db->user.readonly;
    if (!db->journal_mode[0]) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db->user.h, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            snprintf(db->journal_mode, sizeof db->journal_mode, "%s",
                     (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    info->journal_mode = db->journal_mode;
    int code = count(db, &db->user, "SELECT count(*) FROM targets", &info->n_targets);
    if (!code)
        code = count(db, &db->user, "SELECT count(*) FROM workloads", &info->n_workloads);
    if (!code)
        code = count(db, &db->user, "SELECT count(*) FROM trials", &info->n_trials);
    if (!code)
        code = count(db, &db->user, "SELECT count(*) FROM trials WHERE status = 'ok'", &info->n_ok);
    if (!code)
        code = count(db, &db->user, "SELECT count(*) FROM jobs", &info->n_jobs);
    if (!code && db->has_sys)
        code = count(db, &db->sys, "SELECT count(*) FROM trials", &info->n_system_trials);
    struct stat st;
    if (strcmp(db->user.path, ":memory:") && stat(db->user.path, &st) == 0)
        info->file_bytes = st.st_size;
    return code;
}

/* ---- jobs ---------------------------------------------------------------------------------- */

typedef struct {
    te_db_job_list pub;
    size_t cap;
    te__arena arena;
} job_list;

void te_db_job_list_free(te_db_job_list *list)
{
    if (!list)
        return;
    job_list *l = (job_list *)list;
    te__arena_free(&l->arena);
    free(l->pub.items);
    free(l);
}

int te_db_jobs(te_db *db, int64_t job_id, te_db_job_list **out)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!out)
        return te__db_err(db, TE_ERR_ARG, "te_db_jobs: out is NULL");
    *out = NULL;
    job_list *l = calloc(1, sizeof *l);
    if (!l)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h,
                                "SELECT id, uid, command, started_us, ended_us, trials_done, "
                                "trials_planned, status, host, pid FROM jobs "
                                "WHERE ?1 = 0 OR id = ?1 ORDER BY started_us DESC, id DESC",
                                -1, &st, NULL);
    int code = TE_OK;
    if (rc != SQLITE_OK)
        code = te__db_sqlerr(db, &db->user, rc, "listing jobs");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (!code)
        sqlite3_bind_int64(st, 1, job_id);
    while (!code && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (l->pub.n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 8;
            te_db_job *p = realloc(l->pub.items, cap * sizeof *p);
            if (!p) {
                code = te__db_err(db, TE_ERR_NOMEM, "out of memory");
                break;
            }
            l->pub.items = p;
            l->cap = cap;
        }
        te_db_job *j = &l->pub.items[l->pub.n++];
        j->id = sqlite3_column_int64(st, 0);
        j->uid = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 1));
        j->command = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 2));
        j->started_us = sqlite3_column_int64(st, 3);
        j->ended_us = sqlite3_column_int64(st, 4);
        j->trials_done = sqlite3_column_int64(st, 5);
        j->trials_planned = sqlite3_column_int64(st, 6);
        const char *s = (const char *)sqlite3_column_text(st, 7);
        j->status = TE_JOB_FAILED;
        for (int k = 0; k < 4; k++)
            if (s && !strcmp(s, te_job_status_str((te_job_status)k)))
                j->status = (te_job_status)k;
        j->host = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 8));
        j->pid = sqlite3_column_int64(st, 9);
        if (!j->uid || !j->command || !j->host) {
            code = te__db_err(db, TE_ERR_NOMEM, "out of memory");
            break;
        }
        /* A job whose process died without finishing it (SIGKILL, power loss) still says
         * running; on its own host we can tell. */
        if (j->status == TE_JOB_RUNNING && j->pid > 0 && !strcmp(j->host, host) &&
            kill((pid_t)j->pid, 0) != 0 && errno == ESRCH)
            j->status = TE_JOB_INTERRUPTED;
    }
    if (!code && rc != SQLITE_DONE)
        code = te__db_sqlerr(db, &db->user, rc, "listing jobs");
    sqlite3_finalize(st);
    if (!code && job_id > 0 && l->pub.n == 0)
        code = te__db_err(db, TE_ERR_NOT_FOUND, "no job %lld", (long long)job_id);
    if (code) {
        te_db_job_list_free(&l->pub);
        return code;
    }
    *out = &l->pub;
    return TE_OK;
}

/* ---- maintenance --------------------------------------------------------------------------- */

int te_db_prune(te_db *db, const te_db_prune_options *opts, int64_t *n_deleted)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!opts || (opts->older_than_us <= 0 && opts->status_mask == 0))
        return te__db_err(db, TE_ERR_ARG,
                          "prune: give an age and/or statuses; refusing to delete every trial");
    if (opts->status_mask >> TE_TRIAL_STATUS_COUNT)
        return te__db_err(db, TE_ERR_ARG, "prune: status_mask has bits beyond the statuses");
    int code = opts->dry_run ? TE_OK : te__check_writable(db);
    if (code)
        return code;
    te__sb where = {0};
    te__sb_puts(&where, "WHERE 1");
    if (opts->older_than_us > 0)
        te__sb_printf(&where, " AND created_us < %lld", (long long)opts->older_than_us);
    if (opts->status_mask) {
        te__sb_puts(&where, " AND status IN (");
        const char *sep = "";
        for (int s = 0; s < TE_TRIAL_STATUS_COUNT; s++)
            if (opts->status_mask & (1u << s)) {
                te__sb_printf(&where, "%s'%s'", sep, te_trial_status_str((te_trial_status)s));
                sep = ", ";
            }
        te__sb_puts(&where, ")");
    }
    if (opts->keep_best)
        te__sb_puts(&where, " AND id NOT IN (SELECT id FROM best)");
    te__sb sql = {0};
    te__sb_printf(&sql, "%s trials %s", opts->dry_run ? "SELECT count(*) FROM" : "DELETE FROM",
                  where.p ? where.p : "");
    te__sb_free(&where);
    if (sql.oom) {
        te__sb_free(&sql);
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    }
    int64_t n = 0;
    if (opts->dry_run) {
        code = count(db, &db->user, sql.p, &n);
    } else if (!(code = te__begin(db))) {
        code = te__exec(db, &db->user, sql.p);
        n = sqlite3_changes(db->user.h);
        if (code)
            te__rollback(db);
        else
            code = te__commit(db);
    }
    te__sb_free(&sql);
    if (!code && n_deleted)
        *n_deleted = n;
    return code;
}
