/* A target's measured peaks (table target_peaks): te_db_record_peaks and te_db_peaks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuning_db/db_impl.h"

static const char *nz(const char *s) { return s ? s : ""; }

static int peak_invalid(te_db *db, const te_db_peak *p, size_t i)
{
    const char *kind = nz(p->kind), *dtype = nz(p->dtype), *isa = nz(p->isa);
    if (strcmp(kind, "fma") && strcmp(kind, "copy"))
        return te__db_err(db, TE_ERR_ARG, "peak %zu: kind '%s' is not fma or copy", i, kind);
    if (!strcmp(kind, "fma") && ((strcmp(dtype, "f32") && strcmp(dtype, "f64")) || !*isa))
        return te__db_err(db, TE_ERR_ARG,
                          "peak %zu: an fma peak needs dtype f32 or f64 and an isa (got '%s', "
                          "'%s')",
                          i, dtype, isa);
    if (!strcmp(kind, "copy") && (*dtype || *isa))
        return te__db_err(db, TE_ERR_ARG, "peak %zu: a copy peak has no dtype or isa", i);
    if (p->threads < 1)
        return te__db_err(db, TE_ERR_ARG, "peak %zu: threads %d is not positive", i,
                          (int)p->threads);
    if (!isfinite(p->value) || !(p->value > 0) || p->value >= 1e300)
        return te__db_err(db, TE_ERR_ARG, "peak %zu: value %g is not a positive number", i,
                          p->value);
    if (p->measured_us < 0)
        return te__db_err(db, TE_ERR_ARG, "peak %zu: negative time stamp", i);
    return TE_OK;
}

int te_db_record_peaks(te_db *db, const te_db_target *target, const te_db_peak *peaks, size_t n)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!target || (!peaks && n))
        return te__db_err(db, TE_ERR_ARG, "te_db_record_peaks: target or peaks is NULL");
    for (size_t i = 0; i < n; i++)
        if (peak_invalid(db, &peaks[i], i))
            return TE_ERR_ARG;
    int code = te__check_writable(db);
    if (code)
        return code;
    char *key = te__target_key_dup(db, target);
    if (!key)
        return TE_ERR_ARG;
    if ((code = te__begin(db))) {
        free(key);
        return code;
    }
    int64_t tid = 0;
    sqlite3_stmt *del = NULL, *ins = NULL;
    code = te__target_id(db, target, key, &tid);
    int rc = SQLITE_OK;
    if (!code) {
        rc = sqlite3_prepare_v2(db->user.h, "DELETE FROM target_peaks WHERE target_id = ?1", -1,
                                &del, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(db->user.h,
                                    "INSERT INTO target_peaks(target_id, kind, dtype, isa, "
                                    "threads, value, measured_us, tessera_version) "
                                    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                                    -1, &ins, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(del, 1, tid);
            rc = sqlite3_step(del) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db->user.h);
        }
        int64_t now = te_db_now_us();
        for (size_t i = 0; i < n && rc == SQLITE_OK; i++) {
            const te_db_peak *p = &peaks[i];
            sqlite3_reset(ins);
            sqlite3_bind_int64(ins, 1, tid);
            sqlite3_bind_text(ins, 2, nz(p->kind), -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 3, nz(p->dtype), -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 4, nz(p->isa), -1, SQLITE_STATIC);
            sqlite3_bind_int(ins, 5, p->threads);
            sqlite3_bind_double(ins, 6, p->value);
            sqlite3_bind_int64(ins, 7, p->measured_us ? p->measured_us : now);
            sqlite3_bind_text(ins, 8, te_version(), -1, SQLITE_STATIC);
            rc = sqlite3_step(ins) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db->user.h);
        }
        if (rc != SQLITE_OK)
            code = te__db_sqlerr(db, &db->user, rc, "recording peaks");
    }
    sqlite3_finalize(del);
    sqlite3_finalize(ins);
    free(key);
    if (code) {
        te__rollback(db);
        return code;
    }
    return te__commit(db);
}

typedef struct {
    te_db_peak_list pub; /* first: the public pointer is this struct's */
    te__arena arena;
} peak_list;

void te_db_peak_list_free(te_db_peak_list *list)
{
    if (!list)
        return;
    peak_list *l = (peak_list *)list;
    te__arena_free(&l->arena);
    free(l->pub.items);
    free(l);
}

int te_db_peaks(te_db *db, const char *target_key, te_db_peak_list **out)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (!out || !target_key)
        return te__db_err(db, TE_ERR_ARG, "te_db_peaks: target_key or out is NULL");
    *out = NULL;
    peak_list *l = calloc(1, sizeof *l);
    if (!l)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->user.h,
                                "SELECT p.kind, p.dtype, p.isa, p.threads, p.value, "
                                "p.measured_us FROM target_peaks p JOIN targets t ON "
                                "t.id = p.target_id WHERE t.key = ?1 "
                                "ORDER BY p.kind, p.dtype, p.isa, p.threads",
                                -1, &st, NULL);
    size_t cap = 0;
    int code = TE_OK;
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, target_key, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (l->pub.n == cap) {
                cap = cap ? 2 * cap : 16;
                te_db_peak *v = realloc(l->pub.items, cap * sizeof *v);
                if (!v) {
                    code = te__db_err(db, TE_ERR_NOMEM, "out of memory");
                    break;
                }
                l->pub.items = v;
            }
            te_db_peak *p = &l->pub.items[l->pub.n];
            p->kind = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 0));
            p->dtype = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 1));
            p->isa = te__arena_strdup(&l->arena, (const char *)sqlite3_column_text(st, 2));
            p->threads = sqlite3_column_int(st, 3);
            p->value = sqlite3_column_double(st, 4);
            p->measured_us = sqlite3_column_int64(st, 5);
            if (!p->kind || !p->dtype || !p->isa) {
                code = te__db_err(db, TE_ERR_NOMEM, "out of memory");
                break;
            }
            l->pub.n++;
        }
    }
    if (!code && rc != SQLITE_DONE)
        code = te__db_sqlerr(db, &db->user, rc, "reading peaks");
    sqlite3_finalize(st);
    if (code) {
        te_db_peak_list_free(&l->pub);
        return code;
    }
    *out = &l->pub;
    return TE_OK;
}
