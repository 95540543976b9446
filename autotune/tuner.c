/*
 * autotune/tuner.c: the tuning job. For every task of the tuner's task set (tasks.c: a library
 * operator or a user-defined expression) it keeps a search strategy (search.c), a measurer
 * (measure.c) and the set of trace hashes already measured; batch by batch it proposes candidates,
 * lowers and emits them, measures them and appends them to the database in one transaction. Between
 * batches it checks the budgets (trials, time), early stopping and the stop flag (SIGINT), and
 * picks the task whose next batch promises the most.
 *
 * Resume: a job is identified by its command. Rerunning the command of an interrupted job
 * marks that job running again (te_db_job_resume) and continues its trial count (with
 * resume_always also a job that reads running or failed, and a finished one, which then
 * measures nothing); whatever was
 * already recorded for (workload, target), by this job or any other, is never measured again
 * (the seen set starts from te_db_history, and every batch is claimed in the database before it
 * is measured, claim.c, which also lets concurrent jobs split the work and retries
 * environmental failures).
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autotune/tune_impl.h"
#include "te/internal.h"
#include "tessera/ops.h"

#define LCACHE 1024        /* lowered candidates remembered within one batch */
#define RECYCLE_AFTER 5000 /* lowered candidates before the space's context is rebuilt */

/* ---- Small helpers -------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Seen traces ------------------------------------------------------------------------- */

static uint64_t hex_u64(const char *hex)
{
    uint64_t h = 0;
    for (const char *p = hex; *p; p++)
        h = h * 16 + (uint64_t)(*p <= '9' ? *p - '0' : (*p | 32) - 'a' + 10);
    return h ? h : 1;
}

static int u64set_has(const te__u64set *s, uint64_t x)
{
    if (!s->cap)
        return 0;
    for (size_t i = x & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i] == x)
            return 1;
        if (!s->v[i])
            return 0;
    }
}

static int u64set_add(te__u64set *s, uint64_t x)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        uint64_t *v = calloc(cap, sizeof *v);
        if (!v)
            return -1;
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i])
                for (size_t j = s->v[i] & (cap - 1);; j = (j + 1) & (cap - 1))
                    if (!v[j]) {
                        v[j] = s->v[i];
                        break;
                    }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    for (size_t i = x & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i] == x)
            return 0;
        if (!s->v[i]) {
            s->v[i] = x;
            s->n++;
            return 1;
        }
    }
}

void te__tuner_mark_seen(te__task *k, const char *hash) { u64set_add(&k->seen, hex_u64(hash)); }

void te__task_release(te__task *k)
{
    te__measurer_free(k->meas);
    k->meas = NULL;
    te__search_free(k->search);
    k->search = NULL;
    te_ctx_free(k->bctx);
    k->bctx = NULL;
    te_ctx_free(k->wctx);
    k->wctx = NULL;
    te_ctx_free(k->tctx);
    k->tctx = NULL;
    free(k->seen.v);
    memset(&k->seen, 0, sizeof k->seen);
    free(k->lc);
    k->lc = NULL;
}

/* ---- Preparing a task --------------------------------------------------------------------- */

static int rebuild_work(te__task *k)
{
    te_tuner *t = k->tu;
    /* The batch context and its lowered functions refer to the work context: gone first. */
    te_ctx_free(k->bctx);
    k->bctx = NULL;
    te_ctx_free(k->wctx);
    /* A user expression's tensors live in the user's context: the work context is its child. */
    k->wctx = k->is_expr ? te_ctx_create_child(te__tensor_ctx(k->outs[0])) : te_ctx_create();
    k->sp = NULL;
    k->w_lowered = 0;
    if (!k->wctx)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    te_tensor *ins[TE__TUNE_MAX_IO], *outs[TE__TUNE_MAX_IO];
    int n_in = k->n_in, n_out = k->n_out;
    if (k->is_expr) {
        memcpy(ins, k->ins, sizeof ins);
        memcpy(outs, k->outs, sizeof outs);
    } else {
        int rc = te_op_build(k->wctx, k->op, k->params, ins, &n_in, outs, &n_out);
        if (rc != TE_OK)
            return te__tuner_err(t, rc, "%s: %s", k->key, te_ctx_errmsg(k->wctx));
    }
    for (int i = 0; i < n_in; i++)
        k->w_args[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        k->w_args[n_in + i] = outs[i];
    k->sp = te_space_create(k->wctx, k->is_expr ? NULL : k->op, n_in, ins, n_out, outs, t->o.space,
                            &t->target);
    if (!k->sp)
        return te__tuner_err(t, te_ctx_errcode(k->wctx) ? te_ctx_errcode(k->wctx) : TE_ERR_ARG,
                             "%s: no search space: %s", k->key, te_ctx_errmsg(k->wctx));
    k->space_kind = te_space_kind_of(k->sp) == TE_SPACE_TEMPLATE ? "template" : "sketch";
    if (k->search)
        te__search_set_space(k->search, k->sp);
    return TE_OK;
}

static te__lcache_ent *lc_find(te__task *k, const char *hash)
{
    for (int i = 0; i < k->nlc; i++)
        if (!strcmp(k->lc[i].hash, hash))
            return &k->lc[i];
    return NULL;
}

/* Instantiates and lowers a trace (remembered for the batch). With keep, the lowered function
 * is made in the batch context and kept for emission; without, only its features are kept and
 * the lowering happens in a scratch context freed at once (the evolutionary search scores
 * several times more candidates than it measures, and a lowered nest can take megabytes). The
 * schedule is made from the space's tensors, so nothing a candidate allocates outlives its
 * batch; the space keeps only its memo of generated traces. */
static te__lcache_ent *lower_trace(te__task *k, const char *trace, const char *hash, int keep)
{
    te__lcache_ent *e = lc_find(k, hash);
    if (e && (!keep || e->f || !e->ok))
        return e;
    if (!e) {
        if (k->nlc == LCACHE)
            k->nlc = 0; /* forget the oldest; only the current batch matters */
        e = &k->lc[k->nlc++];
        memset(e, 0, sizeof *e);
        snprintf(e->hash, sizeof e->hash, "%s", hash);
    }
    k->w_lowered++;
    te_ctx *ctx = keep ? k->bctx : te_ctx_create_child(k->wctx);
    if (!ctx)
        return e;
    te_ctx_clear_error(ctx);
    te_lowered *f = NULL;
    te_schedule *s = te_schedule_create(ctx, k->n_out, k->w_args + k->n_in);
    if (s && te_schedule_apply_trace(s, trace) == TE_OK)
        f = te_lower(s, k->n_in + k->n_out, k->w_args, "cand", &k->tu->target);
    if (f) {
        te_features(f, e->feat, TE_NUM_FEATURES);
        /* Kept with the candidate for its record (roofline reports of any workload). */
        te_kernel_counts kc;
        e->bytes = te_kernel_count(f, &kc) == TE_OK ? kc.bytes : 0;
        e->ok = 1;
        if (keep)
            e->f = f;
    } else {
        e->ok = 0;
        if (!keep) /* keep the message for the record, on the batch context */
            te_ctx_set_error(k->bctx, te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_LOWER,
                             "%s", te_ctx_errmsg(ctx));
    }
    if (!keep)
        te_ctx_free(ctx);
    return e;
}

/* Starts a new batch context (the previous batch's candidates are gone). */
static int new_batch_ctx(te__task *k)
{
    te_ctx_free(k->bctx);
    k->nlc = 0;
    k->bctx = te_ctx_create_child(k->wctx);
    return k->bctx ? TE_OK : te__tuner_err(k->tu, TE_ERR_NOMEM, "out of memory");
}

static int seen_cb(const char *hash, void *user)
{
    te__task *k = user;
    /* What other jobs recorded or claimed since is refused when the batch is claimed. */
    return u64set_has(&k->seen, hex_u64(hash));
}

static int featurize_cb(const char *trace, float *feat, void *user)
{
    te__task *k = user;
    char hash[17];
    te_db_trace_hash(trace, hash);
    te__lcache_ent *e = lower_trace(k, trace, hash, 0);
    if (!e->ok) {
        u64set_add(&k->seen, hex_u64(hash)); /* invalid: never propose it again */
        return 0;
    }
    memcpy(feat, e->feat, sizeof e->feat);
    return 1;
}

static void set_best_from_db(te__task *k)
{
    te_tuner *t = k->tu;
    te_db_trial_list *l = NULL;
    if (te_db_best(t->db, k->key, &t->dbt, TE_DB_USER_ONLY, &l) == TE_OK && l && l->n) {
        free(k->best_trace);
        k->best_trace = strdup(l->items[0].trace);
        k->best_median_s = l->items[0].median_s;
        k->best_gflops = k->flops > 0 ? k->flops / l->items[0].median_s * 1e-9 : NAN;
        k->db_best_s = l->items[0].median_s;
    }
    te_db_trial_list_free(l);
}

typedef struct {
    double s;
    const char *trace;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    double x = ((const ranked *)a)->s, y = ((const ranked *)b)->s;
    return (x > y) - (x < y);
}

static int prepare_task(te__task *k)
{
    te_tuner *t = k->tu;
    char err[1024] = "";
    if (!k->is_expr) {
        k->tctx = te_ctx_create();
        if (!k->tctx)
            return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
        int rc = te_op_build(k->tctx, k->op, k->params, k->ins, &k->n_in, k->outs, &k->n_out);
        if (rc != TE_OK)
            return te__tuner_err(t, rc, "%s: %s", k->key, te_ctx_errmsg(k->tctx));
    } else {
        memcpy(k->ins, k->u_ins, sizeof k->ins);
        memcpy(k->outs, k->u_outs, sizeof k->outs);
    }
    k->lc = calloc(LCACHE, sizeof *k->lc);
    if (!k->lc)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    int rc = rebuild_work(k);
    if (rc == TE_OK)
        rc = new_batch_ctx(k);
    if (rc != TE_OK)
        return rc;
    uint64_t seed = t->o.seed * 0x9e3779b97f4a7c15ull + (uint64_t)k->index * 0x632be59bd9b4e019ull;
    k->search = te__search_create(t->o.strategy, k->sp, seed);
    if (!k->search)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    if (t->o.strategy == TE_TUNE_GRID && te_space_size(k->sp) < 0)
        te__tuner_warn(t,
                       "%s: the %s space is not enumerable; grid search samples it at random "
                       "instead",
                       k->key, k->space_kind);
    if (!t->o.fake_runner) {
        k->meas = te__measurer_create(k->n_in, k->ins, k->n_out, k->outs, &t->target, &t->o.measure,
                                      err, sizeof err);
        if (!k->meas)
            return te__tuner_err(t, TE_ERR_NOMEM, "%s: %s", k->key, err);
        te__measurer_set_cold(k->meas, k->cold_mask);
        te_ctx *rctx = k->is_expr ? te_ctx_create_child(te__tensor_ctx(k->outs[0])) : k->tctx;
        rc = rctx ? te__measurer_reference(k->meas, rctx, 0, err, sizeof err) : TE_ERR_NOMEM;
        if (k->is_expr)
            te_ctx_free(rctx);
        if (rc != TE_OK)
            return te__tuner_err(t, rc, "%s: %s", k->key, err);
    }
    /* What the database already holds for (workload, target): never measured again; this
     * job's earlier trials count toward its statistics; the best ones seed the search. */
    te_db_trial_list *h = NULL;
    rc = te_db_history(t->db, k->key, &t->dbt, 0, &h);
    if (rc != TE_OK)
        return te__tuner_err(t, rc, "%s: %s", k->key, te_db_errmsg(t->db));
    ranked *rk = calloc(h->n + 1, sizeof *rk);
    int nrk = 0;
    for (size_t i = 0; i < h->n; i++) {
        const te_db_trial *r = &h->items[i];
        if (r->from_system)
            continue;
        /* Failures a later job may retry are left to the claim (claim.c). */
        if (r->status == TE_TRIAL_OK || (t->job_id && r->job_id == t->job_id) ||
            (!r->transient && !t->o.retry_failed))
            u64set_add(&k->seen, hex_u64(r->trace_hash));
        if (t->job_id && r->job_id == t->job_id) {
            k->trials++;
            if (r->status == TE_TRIAL_OK && r->median_s < k->best_s)
                k->best_s = r->median_s;
        }
        if (r->status == TE_TRIAL_OK && rk)
            rk[nrk++] = (ranked){r->median_s, r->trace};
    }
    if (rk && nrk && t->o.warm_start && t->o.strategy == TE_TUNE_EVOLUTIONARY) {
        qsort(rk, (size_t)nrk, sizeof *rk, cmp_ranked);
        for (int i = 0; i < nrk && i < 64; i++) {
            char hash[17];
            te_db_trace_hash(rk[i].trace, hash);
            te__lcache_ent *e = lower_trace(k, rk[i].trace, hash, 0);
            te__search_seed(k->search, rk[i].trace, e->ok ? e->feat : NULL, 1.0 / rk[i].s);
        }
    }
    free(rk);
    /* The untuned default schedule is the first proposal unless it is recorded (or failed
     * for good), so that a tune never ends with a record slower than running untuned. */
    if (k->search && t->o.space == TE_SPACE_AUTO) {
        te_schedule *ds = NULL;
        char note[8];
        if (te_tune_default_schedule(k->wctx, k->is_expr ? NULL : k->op, k->n_in, k->w_args,
                                     k->n_out, k->w_args + k->n_in, &t->target, &ds, note,
                                     sizeof note) == TE_OK &&
            ds)
            te__search_first(k->search, te_schedule_trace(ds));
        te_ctx_clear_error(k->wctx);
    }
    te_db_trial_list_free(h);
    set_best_from_db(k);
    if (k->best_s < INFINITY)
        te__measurer_set_best(k->meas, k->best_s);
    else if (k->db_best_s < INFINITY)
        te__measurer_set_best(k->meas, k->db_best_s);
    k->prepared = 1;
    return TE_OK;
}

/* ---- One batch ------------------------------------------------------------------------------ */

static void progress(te_tuner *t, te__task *k, int batch_n, int batch_ok)
{
    if (!t->o.on_progress)
        return;
    te_tune_progress p;
    memset(&p, 0, sizeof p);
    p.task = k->index;
    p.n_tasks = t->ntasks;
    p.workload_key = k->key;
    p.task_trials = k->trials;
    p.task_errors = 0;
    for (int s = 1; s < TE_TRIAL_STATUS_COUNT; s++)
        p.task_errors += k->n_by_status[s];
    double b = fmin(k->best_s, k->db_best_s);
    p.task_best_s = b < INFINITY ? b : NAN;
    p.task_best_gflops = b < INFINITY && k->flops > 0 ? k->flops / b * 1e-9 : NAN;
    p.trials_done = t->job_trials;
    p.trials_planned = t->o.max_trials;
    p.errors = t->errors;
    p.skipped = t->skipped;
    p.elapsed_s = now_s() - t->t0;
    p.time_budget_s = t->o.max_seconds;
    p.batch_n = batch_n;
    p.batch_ok = batch_ok;
    t->o.on_progress(&p, t->o.user);
}

static int run_batch(te__task *k, int n)
{
    te_tuner *t = k->tu;
    if (k->w_lowered > RECYCLE_AFTER) {
        int rc = rebuild_work(k);
        if (rc != TE_OK)
            return rc;
    }
    int brc = new_batch_ctx(k);
    if (brc != TE_OK)
        return brc;
    char **traces = calloc((size_t)n, sizeof *traces);
    te__cand *c = calloc((size_t)n, sizeof *c);
    te_db_trial *rec = calloc((size_t)n, sizeof *rec);
    double *scale = calloc((size_t)n, sizeof *scale);
    if (!traces || !c || !rec || !scale) {
        free(traces);
        free(c);
        free(rec);
        free(scale);
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    }
    double tp0 = now_s();
    int m = te__search_propose(k->search, n, traces, seen_cb, featurize_cb, k);
    double tp1 = now_s();
    if (m == 0) {
        k->done = 1;
        k->stop_reason = "space exhausted";
        free(traces);
        free(c);
        free(rec);
        free(scale);
        return TE_OK;
    }
    m = te__tuner_claim(k, traces, m, scale);
    if (m <= 0) { /* an error, or every proposal was recorded or claimed by another job */
        free(traces);
        free(c);
        free(rec);
        free(scale);
        return m < 0 ? m : TE_OK;
    }
    for (int i = 0; i < m; i++) {
        te__cand *x = &c[i];
        x->trace = traces[i];
        x->limit_scale = scale[i];
        te_db_trace_hash(x->trace, x->hash);
        u64set_add(&k->seen, hex_u64(x->hash));
        te__lcache_ent *e = lower_trace(k, x->trace, x->hash, !t->o.fake_runner);
        if (!e->ok) {
            x->done = 1;
            x->status = TE_TRIAL_INVALID_SCHEDULE;
            snprintf(x->err, sizeof x->err, "%s", te_ctx_errmsg(k->bctx));
            te_ctx_clear_error(k->bctx);
            continue;
        }
        memcpy(x->feat, e->feat, sizeof x->feat);
        x->has_feat = 1;
        x->bytes = e->bytes;
        if (t->o.fake_runner)
            continue;
        x->lowered = e->f; /* the backend emits the batch several kernels per unit */
    }
    double tp2 = now_s();
    if (t->o.fake_runner) {
        for (int i = 0; i < m; i++) {
            if (c[i].done)
                continue;
            double s = t->o.fake_runner(c[i].trace, t->o.fake_user);
            c[i].done = 1;
            if (s == TE_TUNE_FAKE_TIMEOUT) {
                c[i].status = TE_TRIAL_TIMEOUT;
                snprintf(c[i].err, sizeof c[i].err, "fake runner timeout");
            } else if (s > 0) {
                c[i].status = TE_TRIAL_OK;
                c[i].median_s = s;
                c[i].spread_s = 0;
                c[i].repeats = 1;
            } else {
                c[i].status = TE_TRIAL_RUNTIME_ERROR;
                snprintf(c[i].err, sizeof c[i].err, "fake runner failure");
            }
        }
    } else {
        te__inject_faults(k, c, m);
        te__measure_batch(k->meas, c, m);
    }
    if (getenv("TESSERA_TUNE_PROFILE")) {
        double cs = 0, rs = 0;
        te__measurer_times(k->meas, &cs, &rs);
        te__tuner_warn(t, "profile: propose %.3f s, lower+emit %.3f s, compile %.3f s, run %.3f s",
                       tp1 - tp0, tp2 - tp1, cs, rs);
        char line[1024];
        int len = 0;
        for (int i = 0; i < m && len < (int)sizeof line - 40; i++)
            len +=
                snprintf(line + len, sizeof line - (size_t)len, " %lld:%.1f", (long long)c[i].stmts,
                         c[i].status == TE_TRIAL_OK ? c[i].median_s * 1e3 : -1.0);
        te__tuner_warn(t, "profile: statements:ms%s", line);
    }
    /* Record the batch in one transaction. */
    int ok = 0;
    double prev_best = k->best_s;
    for (int i = 0; i < m; i++) {
        te__cand *x = &c[i];
        te_db_trial *r = &rec[i];
        r->workload.key = k->key;
        r->workload.op = k->op;
        r->workload.expr_hash = k->expr_hash;
        r->workload.shapes = k->shapes_json;
        r->workload.flops = k->flops;
        r->target = t->dbt;
        r->trace = x->trace;
        r->trace_hash = x->hash;
        r->status = x->status;
        r->error = x->err;
        r->transient = x->status != TE_TRIAL_OK && te__cand_transient(x);
        int good = x->status == TE_TRIAL_OK && x->median_s > 0;
        r->median_s = good ? x->median_s : NAN;
        r->spread_s = good ? x->spread_s : NAN;
        r->repeats = good ? x->repeats : 0;
        r->gflops = good && k->flops > 0 ? k->flops / x->median_s * 1e-9 : NAN;
        r->bytes = x->bytes > 0 ? x->bytes : NAN; /* every lowered candidate, any status */
        r->job_id = t->job_id;
    }
    int rc = te_db_record_trials(t->db, rec, (size_t)m);
    if (rc != TE_OK) {
        rc = te__tuner_err(t, rc, "recording trials of %s: %s", k->key, te_db_errmsg(t->db));
        goto out;
    }
    for (int i = 0; i < m; i++) {
        te__cand *x = &c[i];
        int good = x->status == TE_TRIAL_OK && x->median_s > 0;
        k->trials++;
        t->job_trials++;
        k->n_by_status[x->status]++;
        if (!good)
            t->errors++;
        ok += good;
        te__search_update(k->search, x->trace, x->has_feat ? x->feat : NULL,
                          good ? 1.0 / x->median_s : 0);
        if (good && x->median_s < k->best_s * 0.99) {
            k->since_improve = 0;
        } else {
            k->since_improve++;
        }
        if (good && x->median_s < k->best_s)
            k->best_s = x->median_s;
    }
    (void)prev_best;
    if (k->best_s < k->db_best_s) {
        k->db_best_s = k->best_s;
        te__measurer_set_best(k->meas, k->best_s);
    }
    for (int i = 3; i > 0; i--)
        k->hist_best[i] = k->hist_best[i - 1];
    k->hist_best[0] = k->best_s;
    k->nbatches++;
    if (t->o.early_stop > 0 && k->since_improve >= t->o.early_stop) {
        k->done = 1;
        k->stop_reason = "early stop";
    }
    progress(t, k, m, ok);
out:
    for (int i = 0; i < m; i++)
        free(c[i].trace);
    free(traces);
    free(c);
    free(rec);
    free(scale);
    return rc;
}

/* ---- Scheduling tasks ---------------------------------------------------------------------- */

/* The next task: round robin until every task has two batches, then the one whose recent
 * relative gain times its share of the total run time (weight x best time) is largest. */
static te__task *pick_task(te_tuner *t)
{
    te__task *best = NULL;
    int running = 0;
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        if (k->done || !k->prepared)
            continue;
        running++;
        if (k->nbatches < 2 && (!best || k->nbatches < best->nbatches))
            best = k;
    }
    if (best)
        return best;
    double total = 0;
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        if (!k->done && k->prepared && k->best_s < INFINITY)
            total += k->weight * k->best_s;
    }
    double best_score = -1;
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        if (k->done || !k->prepared)
            continue;
        double score;
        if (!(k->best_s < INFINITY)) {
            /* Nothing valid yet: below every task that works; tried again when they stop. */
            score = 0.02 / running;
        } else {
            double old = k->hist_best[3] < INFINITY ? k->hist_best[3] : k->hist_best[1];
            double gain = old < INFINITY && old > 0 ? (old - k->best_s) / old : 1;
            if (gain < 0.02)
                gain = 0.02;
            double share = total > 0 ? k->weight * k->best_s / total : 1;
            score = gain * share;
        }
        /* Ties go to the task with fewer batches. */
        if (score > best_score || (score == best_score && best && k->nbatches < best->nbatches)) {
            best_score = score;
            best = k;
        }
    }
    return best;
}

/* ---- The job -------------------------------------------------------------------------------- */

static int start_job(te_tuner *t)
{
    char cmd[4096];
    if (t->o.command) {
        snprintf(cmd, sizeof cmd, "%s", t->o.command);
    } else {
        size_t len =
            (size_t)snprintf(cmd, sizeof cmd, "tune --strategy %s --seed %llu",
                             te_tune_strategy_str(t->o.strategy), (unsigned long long)t->o.seed);
        for (int i = 0; i < t->ntasks && len < sizeof cmd; i++)
            len += (size_t)snprintf(cmd + len, sizeof cmd - len, " %s", t->tasks[i].key);
    }
    if (!t->o.new_job) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        te_db_job_list *l = NULL;
        if (te_db_jobs(t->db, 0, &l) == TE_OK) {
            for (size_t i = 0; i < l->n; i++) {
                const te_db_job *j = &l->items[i];
                if (!j->command || strcmp(j->command, cmd))
                    continue;
                /* resume_always: the caller knows no other process runs this command, so a
                 * job that reads running on another host is dead too (killed there), and a
                 * finished one is continued with nothing left to do (a retried cluster task).
                 * One running on this host is alive (te_db_jobs reads a dead one as
                 * interrupted) and is left alone. */
                if (t->o.resume_always && j->status == TE_JOB_RUNNING && j->host &&
                    !strcmp(j->host, host))
                    continue;
                if (j->status == TE_JOB_INTERRUPTED || t->o.resume_always) {
                    if (te_db_job_resume(t->db, j->id) == TE_OK) {
                        t->job_id = j->id;
                        t->job_trials = j->trials_done;
                        t->resumed = 1;
                        t->finished_before = j->status == TE_JOB_FINISHED;
                    }
                    break;
                }
            }
        }
        te_db_job_list_free(l);
    }
    if (t->job_id)
        return TE_OK;
    int rc = te_db_job_start(t->db, cmd, t->o.max_trials, &t->job_id);
    if (rc != TE_OK)
        return te__tuner_err(t, rc, "starting a job: %s", te_db_errmsg(t->db));
    return TE_OK;
}

int te_tuner_run(te_tuner *t)
{
    if (!t)
        return TE_ERR_ARG;
    if (!t->db)
        return te__tuner_err(t, TE_ERR_ARG, "te_tuner_run: no database");
    if (t->ntasks == 0)
        return te__tuner_err(t, TE_ERR_ARG, "te_tuner_run: no task to tune");
    if (t->target.backend != TE_BACKEND_C)
        return te__tuner_err(t, TE_ERR_UNSUPPORTED,
                             "the tuner measures C targets only in this build (no CUDA runner)");
    t->t0 = now_s();
    t->interrupted = 0;
    int rc = te_tuner_db_target(&t->target, &t->dbt, t->dbt_storage, sizeof t->dbt_storage);
    if (rc != TE_OK)
        return te__tuner_err(t, rc, "cannot describe the target");
    te_db_target_key(&t->dbt, t->target_key, sizeof t->target_key);
    t->dbt.key = t->target_key;
    rc = start_job(t);
    if (rc != TE_OK)
        return rc;
    if (t->finished_before) {
        /* Its tasks were done: report their best records and measure nothing. */
        for (int i = 0; i < t->ntasks; i++) {
            te__task *k = &t->tasks[i];
            te_db_trial_list *h = NULL;
            if (te_db_history(t->db, k->key, &t->dbt, 0, &h) == TE_OK)
                for (size_t j = 0; j < h->n; j++)
                    k->trials += !h->items[j].from_system && h->items[j].job_id == t->job_id;
            te_db_trial_list_free(h);
            set_best_from_db(k);
            k->stop_reason = "finished before";
        }
        te_db_job_finish(t->db, t->job_id, TE_JOB_FINISHED);
        return TE_OK;
    }
    int n_ready = 0;
    char first_err[2048] = "";
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        if (k->prepared)
            continue;
        rc = prepare_task(k);
        if (rc != TE_OK) {
            k->failed = 1;
            k->done = 1;
            k->stop_reason = "failed";
            if (!first_err[0])
                snprintf(first_err, sizeof first_err, "%s", t->err);
            te__tuner_warn(t, "%s", t->err);
            te__task_release(k);
            continue;
        }
        n_ready++;
    }
    if (n_ready == 0) {
        te_db_job_finish(t->db, t->job_id, TE_JOB_FAILED);
        return te__tuner_err(t, TE_ERR_RUNTIME, "%s", first_err);
    }
    int job_rc = TE_OK;
    for (;;) {
        if (t->o.stop && *t->o.stop) {
            t->interrupted = 1;
            break;
        }
        int64_t left = t->o.max_trials > 0 ? t->o.max_trials - t->job_trials : INT64_MAX;
        if (left <= 0 || (t->o.max_seconds > 0 && now_s() - t->t0 >= t->o.max_seconds))
            break;
        te__task *k = pick_task(t);
        if (!k)
            break;
        int n = t->o.batch_size;
        if (left < n)
            n = (int)left;
        rc = run_batch(k, n);
        if (rc != TE_OK) {
            job_rc = rc;
            break;
        }
    }
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        if (k->prepared)
            set_best_from_db(k);
        if (!k->stop_reason)
            k->stop_reason = t->interrupted ? "interrupted" : "budget";
    }
    te_db_job_finish(t->db, t->job_id,
                     job_rc != TE_OK  ? TE_JOB_FAILED
                     : t->interrupted ? TE_JOB_INTERRUPTED
                                      : TE_JOB_FINISHED);
    return job_rc;
}

/* ---- Using the database's best record ------------------------------------------------------- */

int te_tuner_best_schedule(te_ctx *ctx, te_db *db, const char *workload_key, int n_out,
                           te_tensor *const *outs, const te_target *target, te_schedule **out,
                           int *from_db, char *why, size_t why_size)
{
    if (from_db)
        *from_db = 0;
    if (why && why_size)
        why[0] = 0;
    if (!ctx || !out || n_out < 1 || !outs)
        return TE_ERR_ARG;
    int rc = te_tuner_best_record(ctx, db, workload_key, n_out, outs, target, 0, out, NULL, why,
                                  why_size);
    if (rc == TE_OK) {
        if (from_db)
            *from_db = 1;
        return TE_OK;
    }
    if (rc == TE_ERR_ARG)
        return rc;
    *out = te_schedule_create(ctx, n_out, outs);
    return *out ? TE_OK : (te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE);
}
