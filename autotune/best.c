/*
 * autotune/best.c: the one best-record lookup. te_tuner_best_record turns the fastest ok
 * database record of a workload on a target into a schedule; the generator (gen/) and the
 * users of te_tuner_best_schedule build on it.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <string.h>

#include "tessera/tuner.h"

int te_tuner_ranked_record(te_ctx *ctx, te_db *db, const char *workload_key, int rank, int n_out,
                           te_tensor *const *outs, const te_target *target, int flags,
                           te_schedule **out, te_db_trial_list **record, char *why, size_t why_size)
{
    if (out)
        *out = NULL;
    if (record)
        *record = NULL;
    if (why && why_size)
        why[0] = 0;
    if (!ctx || !out || n_out < 1 || !outs || rank < 0)
        return TE_ERR_ARG;
    if (!db || !workload_key) {
        if (why && why_size)
            snprintf(why, why_size, db ? "no record for this target" : "no database");
        return TE_ERR_NOT_FOUND;
    }
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    te_db_target dbt;
    char storage[1024];
    te_db_trial_list *l = NULL;
    int found = te_tuner_db_target(target, &dbt, storage, sizeof storage) == TE_OK;
    if (found)
        found = (rank == 0 ? te_db_best(db, workload_key, &dbt, flags, &l)
                           : te_db_top_k(db, workload_key, &dbt, rank + 1, flags, &l)) == TE_OK;
    if (!found || !l || l->n <= (size_t)rank) {
        te_db_trial_list_free(l);
        if (why && why_size)
            snprintf(why, why_size,
                     rank && found ? "fewer than %d records for this target"
                                   : "no record for this target",
                     rank + 1);
        return TE_ERR_NOT_FOUND;
    }
    if (rank) { /* the record first, as te_db_best returns it */
        te_db_trial tmp = l->items[0];
        l->items[0] = l->items[rank];
        l->items[rank] = tmp;
    }
    const te_db_trial *r = &l->items[0];
    te_schedule *s = te_schedule_create(ctx, n_out, outs);
    int rc = s ? te_schedule_apply_trace(s, r->trace) : TE_ERR_SCHEDULE;
    if (rc != TE_OK) {
        if (why && why_size)
            snprintf(why, why_size, "its %s record (trial %s) no longer applies: %s",
                     rank ? "ranked" : "best", r->uid ? r->uid : "?", te_ctx_errmsg(ctx));
        te_ctx_clear_error(ctx);
        te_db_trial_list_free(l);
        return TE_ERR_SCHEDULE;
    }
    *out = s;
    if (record)
        *record = l;
    else
        te_db_trial_list_free(l);
    return TE_OK;
}

int te_tuner_best_record(te_ctx *ctx, te_db *db, const char *workload_key, int n_out,
                         te_tensor *const *outs, const te_target *target, int flags,
                         te_schedule **out, te_db_trial_list **record, char *why, size_t why_size)
{
    return te_tuner_ranked_record(ctx, db, workload_key, 0, n_out, outs, target, flags, out, record,
                                  why, why_size);
}
