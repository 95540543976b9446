/*
 * autotune/claim.c: what a batch may measure, and which failures a later job retries.
 *
 * Before a batch is measured its traces are claimed in the database (te_db_claim_traces), in
 * one transaction with the check against the recorded trials, so concurrent jobs on one
 * workload split the work instead of measuring the same configurations. A failure caused by
 * the environment (a compiler or run timeout, out of memory) is recorded as transient, and a
 * later job measures it again (te_tune_options.env_retries times, with limits scaled by
 * TE__RETRY_SCALE per earlier attempt); with retry_failed, every failed trace is measured again.
 */
#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"

int te__cand_transient(const te__cand *x)
{
    switch (x->status) {
    case TE_TRIAL_TIMEOUT:
        return 1; /* the run limit, whatever the machine's load was */
    case TE_TRIAL_COMPILE_ERROR:
        return strstr(x->err, "compiler timed out") || strstr(x->err, "out of memory") ||
               strstr(x->err, "memory exhausted") || strstr(x->err, "Killed signal");
    case TE_TRIAL_RUNTIME_ERROR:
    case TE_TRIAL_LOAD_ERROR:
    case TE_TRIAL_OTHER_ERROR:
        /* SIGKILL from outside the runner is the kernel's out-of-memory killer. */
        return strstr(x->err, "out of memory") || strstr(x->err, "signal 9 ") ||
               strstr(x->err, "Cannot allocate memory");
    default:
        return 0;
    }
}

int te__tuner_claim(te__task *k, char **traces, int m, double *scale)
{
    te_tuner *t = k->tu;
    char(*hashes)[17] = calloc((size_t)m + 1, sizeof *hashes);
    const char **hp = calloc((size_t)m + 1, sizeof *hp);
    int *claimed = calloc((size_t)m + 1, sizeof *claimed);
    if (!hashes || !hp || !claimed) {
        free(hashes);
        free(hp);
        free(claimed);
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < m; i++) {
        te_db_trace_hash(traces[i], hashes[i]);
        hp[i] = hashes[i];
    }
    te_db_claim_options co = {0};
    co.stale_us = t->o.claim_stale_s > 0 ? (int64_t)(t->o.claim_stale_s * 1e6) : 0;
    co.env_retries = t->o.env_retries == 0 ? 1 : t->o.env_retries < 0 ? 0 : t->o.env_retries;
    co.retry_failed = t->o.retry_failed;
    int rc = te_db_claim_traces(t->db, k->key, &t->dbt, t->job_id, &co, (size_t)m, hp, claimed);
    if (rc != TE_OK) {
        rc = te__tuner_err(t, rc, "claiming candidates of %s: %s", k->key, te_db_errmsg(t->db));
        free(hashes);
        free(hp);
        free(claimed);
        return rc;
    }
    int n = 0;
    for (int i = 0; i < m; i++) {
        if (!claimed[i]) { /* recorded, or another job measures it now */
            te__tuner_mark_seen(k, hashes[i]);
            k->skipped++;
            t->skipped++;
            free(traces[i]);
            continue;
        }
        double s = 1;
        for (int a = 1; a < claimed[i] && s < 64; a++)
            s *= TE__RETRY_SCALE;
        scale[n] = s;
        traces[n++] = traces[i];
    }
    free(hashes);
    free(hp);
    free(claimed);
    return n;
}
