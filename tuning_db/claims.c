/* Claims: concurrent tuning jobs on one database split the work.
 *
 * A job claims the trace hashes of a batch before measuring them, in one transaction with the
 * check against the recorded trials, so two jobs never measure the same configuration: the
 * second sees the first's claim (or its recorded trial) and skips it. Recording the trial
 * releases its claim (record.c), ending the job releases the rest (te_db_job_finish). A claim
 * older than the stale limit, or of a job that no longer runs (finished, or its process on this
 * host is gone), is stale and taken over. */
#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuning_db/db_impl.h"

/* 1 when the claim of job_id (taken at claimed_us) still holds against `me`. */
static int claim_live(te_db *db, int64_t job_id, int64_t claimed_us, int64_t stale_us,
                      const char *host)
{
    if (claimed_us < te_db_now_us() - stale_us)
        return 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->user.h, "SELECT status, host, pid FROM jobs WHERE id = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return 1; /* cannot tell: respect it until it is stale */
    sqlite3_bind_int64(st, 1, job_id);
    int live = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        const char *jhost = (const char *)sqlite3_column_text(st, 1);
        int64_t pid = sqlite3_column_int64(st, 2);
        live = status && !strcmp(status, "running");
        if (live && pid > 0 && jhost && !strcmp(jhost, host) && kill((pid_t)pid, 0) != 0 &&
            errno == ESRCH)
            live = 0; /* killed: its claims expire now */
    }
    sqlite3_finalize(st);
    return live;
}

int te_db_claim_traces(te_db *db, const char *workload_key, const te_db_target *target,
                       int64_t job_id, const te_db_claim_options *opts, size_t n,
                       const char *const *trace_hashes, int *claimed)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!workload_key || !target || job_id <= 0 || (n && (!trace_hashes || !claimed)))
        return te__db_err(db, TE_ERR_ARG, "te_db_claim_traces: bad argument");
    int code = te__check_writable(db);
    if (code)
        return code;
    te_db_claim_options o = {0};
    if (opts)
        o = *opts;
    if (o.stale_us <= 0)
        o.stale_us = TE_DB_CLAIM_STALE_US;
    if (o.env_retries < 0)
        o.env_retries = 0;
    char *tkey = te__target_key_dup(db, target);
    if (!tkey)
        return TE_ERR_ARG;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    sqlite3_stmt *hist = NULL, *cur = NULL, *put = NULL;
    int rc = sqlite3_prepare_v2(db->user.h,
                                "SELECT coalesce(sum(tr.status = 'ok'), 0), "
                                "coalesce(sum(tr.status <> 'ok' AND tr.transient = 0), 0), "
                                "coalesce(sum(tr.status <> 'ok' AND tr.transient <> 0), 0), "
                                "coalesce(sum(tr.job_id = ?4), 0), count(*) "
                                "FROM trials tr JOIN workloads w ON w.id = tr.workload_id "
                                "JOIN targets t ON t.id = tr.target_id "
                                "WHERE w.key = ?1 AND t.key = ?2 AND tr.trace_hash = ?3",
                                -1, &hist, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db->user.h,
                                "SELECT job_id, claimed_us FROM claims WHERE workload = ?1 AND "
                                "target = ?2 AND trace_hash = ?3",
                                -1, &cur, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db->user.h,
                                "INSERT OR REPLACE INTO claims(workload, target, trace_hash, "
                                "job_id, claimed_us) VALUES(?1, ?2, ?3, ?4, ?5)",
                                -1, &put, NULL);
    if (rc != SQLITE_OK) {
        code = te__db_sqlerr(db, &db->user, rc, "claiming traces");
        goto out;
    }
    if ((code = te__begin(db)))
        goto out;
    for (size_t i = 0; i < n && !code; i++) {
        claimed[i] = 0;
        sqlite3_stmt *sts[3] = {hist, cur, put};
        for (int s = 0; s < 3; s++) {
            sqlite3_reset(sts[s]);
            sqlite3_bind_text(sts[s], 1, workload_key, -1, SQLITE_STATIC);
            sqlite3_bind_text(sts[s], 2, tkey, -1, SQLITE_STATIC);
            sqlite3_bind_text(sts[s], 3, trace_hashes[i], -1, SQLITE_STATIC);
        }
        sqlite3_bind_int64(hist, 4, job_id);
        if ((rc = sqlite3_step(hist)) != SQLITE_ROW) {
            code = te__db_sqlerr(db, &db->user, rc, "claiming traces");
            break;
        }
        int64_t n_ok = sqlite3_column_int64(hist, 0), n_det = sqlite3_column_int64(hist, 1);
        int64_t n_env = sqlite3_column_int64(hist, 2), n_mine = sqlite3_column_int64(hist, 3);
        int64_t n_all = sqlite3_column_int64(hist, 4);
        int done =
            n_ok > 0 || n_mine > 0 || (!o.retry_failed && (n_det > 0 || n_env > o.env_retries));
        if (done)
            continue;
        rc = sqlite3_step(cur);
        if (rc == SQLITE_ROW) {
            int64_t owner = sqlite3_column_int64(cur, 0), at = sqlite3_column_int64(cur, 1);
            if (owner != job_id && claim_live(db, owner, at, o.stale_us, host))
                continue;
        } else if (rc != SQLITE_DONE) {
            code = te__db_sqlerr(db, &db->user, rc, "claiming traces");
            break;
        }
        sqlite3_bind_int64(put, 4, job_id);
        sqlite3_bind_int64(put, 5, te_db_now_us());
        if ((rc = sqlite3_step(put)) != SQLITE_DONE) {
            code = te__db_sqlerr(db, &db->user, rc, "claiming traces");
            break;
        }
        claimed[i] = (int)(n_all < 1000 ? n_all + 1 : 1000);
    }
    if (code)
        te__rollback(db);
    else
        code = te__commit(db);
out:
    sqlite3_finalize(hist);
    sqlite3_finalize(cur);
    sqlite3_finalize(put);
    free(tkey);
    if (code)
        for (size_t i = 0; i < n; i++)
            claimed[i] = 0;
    return code;
}

int te_db_release_claims(te_db *db, int64_t job_id)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    int code = te__check_writable(db);
    if (code)
        return code;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h, "DELETE FROM claims WHERE job_id = ?1", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, &db->user, rc, "releasing claims");
    sqlite3_bind_int64(st, 1, job_id);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? TE_OK : te__db_sqlerr(db, &db->user, rc, "releasing claims");
}
