/* In-model selection (te_graph_select_in_context): a tuner ranks each fused group's schedules
 * alone, in a loop, with its weights flushed; inside a model the kernel before it has just
 * left its own data in the caches and the next weights are streaming in, and a ranking made in
 * isolation does not always survive (docs/TUNING.md, "In-model selection"). So the whole model
 * is compiled once per candidate (the default schedule, then the 1st, 2nd, ... best record of
 * every group's workload), each version is run in turn, and every kernel's time inside those
 * runs is recorded in the database under its in-model key (te_graph_exec_group_context_key).
 * te_graph_compile_db then picks, per workload, the schedule that was fastest in the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph_internal.h"
#include "tessera/schedule.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"

#define MAX_CAND 8 /* candidates per workload besides the default */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median and standard deviation of x[0..n) (sorts x). */
static double median_of(double *x, int n, double *sd)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += x[i] / n;
    for (int i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean) / (n > 1 ? n - 1 : 1);
    if (sd)
        *sd = sqrt(var);
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Timing inputs: floats uniform in [-1, 1) and never 0, everything else zero bytes (valid
 * indices and masks; the values do not change a kernel's time). NULL when memory ran out. */
static void **make_inputs(te_graph *g, int *n_out)
{
    int n = te_graph_input_count(g);
    void **in = calloc((size_t)n + 1, sizeof *in);
    if (!in)
        return NULL;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        int v = te_graph_input_value(g, i);
        int64_t numel = te_graph_value_numel(g, v);
        te_dtype dt = te_graph_value_dtype(g, v);
        in[i] = calloc((size_t)(numel > 0 ? numel : 1), te_dtype_size(dt));
        if (!in[i]) {
            for (int j = 0; j < i; j++)
                free(in[j]);
            free(in);
            return NULL;
        }
        for (int64_t j = 0; (dt == TE_F32 || dt == TE_F64) && j < numel; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            double x = ((double)(s >> 11) / 9007199254740992.0) * 2 - 1;
            x = x == 0 ? 0.5 : x;
            if (dt == TE_F32)
                ((float *)in[i])[j] = (float)x;
            else
                ((double *)in[i])[j] = x;
        }
    }
    *n_out = n;
    return in;
}

typedef struct sel {
    te_graph *g;
    const te_fuse_plan *p;
    int nc; /* versions: [0] the defaults, [c] every workload's c-th record */
    te_graph_exec *e[MAX_CAND + 2];
    int nw;            /* distinct workloads */
    int *wk;           /* per group: its workload, -1 for a view */
    int *first, *inst; /* per workload: its first group, its instances */
    double *t;         /* t[(c * nw + w) * reps + r]: workload w's kernels in run r of c */
    int reps;
} sel;

static void sel_free(sel *s)
{
    for (int c = 0; c < MAX_CAND + 2; c++)
        te_graph_exec_free(s->e[c]);
    free(s->wk), free(s->first), free(s->inst), free(s->t);
}

/* The distinct workloads of the plan's kernels (keys of version 0). */
static int sel_workloads(sel *s)
{
    int ng = te_fuse_plan_group_count(s->p);
    s->wk = malloc(sizeof *s->wk * (size_t)(ng + 1));
    s->first = malloc(sizeof *s->first * (size_t)(ng + 1));
    s->inst = calloc((size_t)ng + 1, sizeof *s->inst);
    if (!s->wk || !s->first || !s->inst)
        return TE_ERR_NOMEM;
    for (int gi = 0; gi < ng; gi++) {
        const char *key = te_graph_exec_group_key(s->e[0], gi);
        s->wk[gi] = -1;
        if (!key || !*key)
            continue;
        for (int w = 0; w < s->nw && s->wk[gi] < 0; w++)
            if (!strcmp(te_graph_exec_group_key(s->e[0], s->first[w]), key))
                s->wk[gi] = w;
        if (s->wk[gi] < 0)
            s->first[s->nw] = gi, s->wk[gi] = s->nw++;
        s->inst[s->wk[gi]]++;
    }
    return TE_OK;
}

/* Runs every version reps times, in turn (the order rotating, so that drift spreads evenly),
 * after one warm-up run each; accumulates each workload's kernel seconds per run. */
static int sel_measure(sel *s, void **in)
{
    int ng = te_fuse_plan_group_count(s->p);
    s->t = calloc((size_t)s->nc * (size_t)s->nw * (size_t)s->reps + 1, sizeof *s->t);
    if (!s->t)
        return te__graph_error(s->g, TE_ERR_NOMEM, "out of memory");
    for (int c = 0; c < s->nc; c++) {
        int rc = te_graph_run(s->e[c], (const void *const *)in, NULL);
        if (rc)
            return rc;
    }
    for (int r = 0; r < s->reps; r++)
        for (int q = 0; q < s->nc; q++) {
            int c = (q + r) % s->nc;
            int rc = te_graph_run(s->e[c], (const void *const *)in, NULL);
            if (rc)
                return rc;
            for (int gi = 0; gi < ng; gi++)
                if (s->wk[gi] >= 0)
                    s->t[((size_t)c * s->nw + s->wk[gi]) * s->reps + r] +=
                        te_graph_exec_group_seconds(s->e[c], gi);
        }
    return TE_OK;
}

/* The first version whose kernel for workload w has the same schedule as version c's. */
static int same_as(const sel *s, int w, int c)
{
    const char *tr = te_graph_exec_group_trace(s->e[c], s->first[w]);
    for (int d = 0; d < c; d++)
        if (!strcmp(te_graph_exec_group_trace(s->e[d], s->first[w]), tr))
            return d;
    return c;
}

/* Medians of whole runs of the n executables e[0..n), run in turn reps times after a warm-up
 * each (interleaved, so that the machine's drift reaches all alike), in ms[0..n). */
static int run_medians(te_graph_exec *const *e, int n, void **in, int reps, double *ms)
{
    double *x = malloc(sizeof *x * (size_t)(reps * n + 1));
    if (!x)
        return TE_ERR_NOMEM;
    int rc = TE_OK;
    for (int i = 0; !rc && i < n; i++)
        rc = te_graph_run(e[i], (const void *const *)in, NULL);
    for (int r = 0; !rc && r < reps; r++)
        for (int i = 0; !rc && i < n; i++) {
            double t0 = now_s();
            rc = te_graph_run(e[i], (const void *const *)in, NULL);
            x[i * reps + r] = now_s() - t0;
        }
    for (int i = 0; !rc && i < n; i++)
        ms[i] = median_of(x + i * reps, reps, NULL) * 1e3;
    free(x);
    return rc;
}

/* The text of key before its first ';' (the group's operators), for log lines. */
static void key_name(const char *key, char *buf, size_t n)
{
    size_t len = strcspn(key, ";");
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), key);
}

/* "default" for version 0, "#c" for the c-th record. */
static const char *cand_name(int c, char *buf, size_t n)
{
    if (c == 0)
        return "default";
    snprintf(buf, n, "#%d", c);
    return buf;
}

/* The compulsory bytes of a group's kernel: its inputs and outputs, each moved once. */
static double group_bytes(const te_graph_group_expr *ge)
{
    double bytes = 0;
    for (int i = 0; i < ge->n_in + ge->n_out; i++) {
        te_tensor *t = i < ge->n_in ? ge->ins[i] : ge->outs[i - ge->n_in];
        bytes += (double)te_tensor_numel(t) * (double)te_dtype_size(te_tensor_dtype(t));
    }
    return bytes;
}

/* Records every version's in-model time of each workload that has a choice (two or more
 * distinct schedules), in one transaction, and logs the choices. */
static int sel_record(sel *s, te_db *db, const te_target *tgt, FILE *log,
                      te_graph_select_result *res)
{
    te_db_target dbt;
    char storage[1024];
    int rc = te_tuner_db_target(tgt, &dbt, storage, sizeof storage);
    if (rc)
        return te__graph_error(s->g, rc, "select: the target has no database key");
    te_db_trial *tr = calloc((size_t)s->nc * (size_t)s->nw + 1, sizeof *tr);
    double *x = malloc(sizeof *x * (size_t)s->reps);
    if (!tr || !x) {
        free(tr), free(x);
        return te__graph_error(s->g, TE_ERR_NOMEM, "out of memory");
    }
    size_t n = 0;
    for (int w = 0; w < s->nw; w++) {
        int distinct = 0, best = -1;
        double med[MAX_CAND + 2], sd[MAX_CAND + 2];
        for (int c = 0; c < s->nc; c++) {
            med[c] = NAN;
            if (same_as(s, w, c) != c)
                continue;
            distinct++;
            memcpy(x, &s->t[((size_t)c * s->nw + w) * s->reps], sizeof *x * (size_t)s->reps);
            med[c] = median_of(x, s->reps, &sd[c]) / s->inst[w];
            sd[c] /= s->inst[w];
            if (best < 0 || med[c] < med[best])
                best = c;
        }
        if (distinct < 2)
            continue;                 /* no record: the default is the only choice */
        int first = same_as(s, w, 1); /* the best record alone (maybe the default's schedule) */
        res->workloads++;
        res->changed += best != first;
        res->to_default += best == 0 && first != 0;
        const char *ctx_key = te_graph_exec_group_context_key(s->e[0], s->first[w]);
        /* FLOPs and compulsory bytes as the tuner records them for the workload. */
        const te_graph_group_expr *ge = te_graph_exec_group_expr(s->e[0], s->first[w]);
        double flops = te_tuner_flops(ge->n_out, ge->outs), bytes = group_bytes(ge);
        for (int c = 0; c < s->nc; c++) {
            if (isnan(med[c]))
                continue;
            tr[n++] = (te_db_trial){
                .workload = {.key = ctx_key, .flops = flops},
                .target = dbt,
                .trace = te_graph_exec_group_trace(s->e[c], s->first[w]),
                .status = TE_TRIAL_OK,
                .median_s = med[c],
                .spread_s = sd[c],
                .repeats = s->reps,
                .gflops = flops > 0 ? flops / med[c] * 1e-9 : NAN,
                .bytes = bytes,
            };
        }
        if (log) {
            char name[96], who[16];
            key_name(ctx_key, name, sizeof name);
            fprintf(log, "select: %s x%d:", name, s->inst[w]);
            for (int c = 0; c < s->nc; c++)
                if (!isnan(med[c]))
                    fprintf(log, " %s %.4f", cand_name(c, who, sizeof who), med[c] * 1e3);
                else
                    fprintf(log, " #%d=%s", c, cand_name(same_as(s, w, c), who, sizeof who));
            fprintf(log, " ms -> %s%s\n", cand_name(best, who, sizeof who),
                    best == first ? "" : " (the isolated ranking did not hold)");
        }
    }
    free(x);
    rc = n ? te_db_record_trials(db, tr, n) : TE_OK;
    if (rc)
        te__graph_error(s->g, rc, "select: recording the in-model times: %s", te_db_errmsg(db));
    res->recorded = rc ? 0 : (int)n;
    free(tr);
    return rc;
}

/* Records the whole runs of the versions e[0..3) (medians ms[i], reps runs each) as trials of
 * the model's key (te_graph_exec_model_key), each trace holding the version's schedule of every
 * workload: te_graph_compile_ex then compiles the fastest whole run measured, so a choice made
 * kernel by kernel never stands when the model as a whole ran slower with it. */
static int record_whole(te_graph *g, const te_fuse_plan *p, te_db *db, const te_target *tgt,
                        te_graph_exec *const e[3], const double ms[3], int reps)
{
    te_db_target dbt;
    char storage[1024];
    if (te_tuner_db_target(tgt, &dbt, storage, sizeof storage))
        return te__graph_error(g, TE_ERR_ARG, "select: the target has no database key");
    /* FLOPs and compulsory bytes of the whole run: every kernel's, summed. */
    double flops = 0, bytes = 0;
    for (int gi = 0; gi < te_fuse_plan_group_count(p); gi++) {
        const te_graph_group_expr *ge = te_graph_exec_group_expr(e[0], gi);
        if (ge) {
            flops += te_tuner_flops(ge->n_out, ge->outs);
            bytes += group_bytes(ge);
        }
    }
    te_db_trial tr[3];
    char *text[3] = {0};
    int rc = TE_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        if (!(text[i] = te__graph_whole_trace(e[i])))
            rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        tr[i] = (te_db_trial){
            .workload = {.key = te_graph_exec_model_key(e[0]), .flops = flops},
            .target = dbt,
            .trace = text[i],
            .status = TE_TRIAL_OK,
            .median_s = ms[i] * 1e-3,
            .spread_s = NAN,
            .repeats = reps,
            .gflops = flops > 0 ? flops / (ms[i] * 1e-3) * 1e-9 : NAN,
            .bytes = bytes,
        };
    }
    if (!rc && (rc = te_db_record_trials(db, tr, 3)) != TE_OK)
        te__graph_error(g, rc, "select: recording the whole runs: %s", te_db_errmsg(db));
    for (int i = 0; i < 3; i++)
        free(text[i]);
    return rc;
}

const char *te_graph_whole_pick_name(int whole_pick)
{
    static const char *const names[] = {"the defaults", "the best records alone",
                                        "the in-model choices"};
    return whole_pick >= 0 && whole_pick < 3 ? names[whole_pick] : "?";
}

int te_graph_select_in_context(te_graph *g, const te_fuse_plan *p, te_db *db,
                               const te_graph_select_opts *o, te_graph_select_result *out)
{
    if (!g || !p || !db || !out)
        return g ? te__graph_error(g, TE_ERR_ARG, "select: bad arguments (no database?)")
                 : TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    te_graph_select_opts dflt = {0};
    if (!o)
        o = &dflt;
    if (o->candidates < 0 || o->candidates > MAX_CAND || o->reps < 0 || o->threads < 0)
        return te__graph_error(g, TE_ERR_ARG,
                               "select: candidates %d (0..%d), reps %d and threads %d must be "
                               "in range",
                               o->candidates, MAX_CAND, o->reps, o->threads);
    te_target tgt = o->target ? *o->target : te_target_host();
    if (o->threads)
        tgt.num_cores = o->threads;
    if (tgt.num_cores < 1)
        tgt.num_cores = 1;
    int ncand = o->candidates ? o->candidates : 3;
    sel s = {.g = g, .p = p, .reps = o->reps ? o->reps : 11};
    te_graph_compile_opts co = {.target = &tgt, .db = db, .threads = tgt.num_cores};
    int rc = TE_OK;
    /* Version c uses every workload's c-th record; past the last rank any workload has, the
     * versions would all be the defaults again. */
    for (int c = 0; !rc && c <= ncand; c++) {
        co.pick = c == 0 ? TE_GRAPH_PICK_DEFAULT : c;
        rc = te_graph_compile_ex(g, p, &co, &s.e[c]);
        int any = c == 0;
        for (int gi = 0; !rc && !any && gi < te_fuse_plan_group_count(p); gi++)
            any = te_graph_exec_group_from_db(s.e[c], gi, NULL) == 1;
        if (!rc && !any) {
            te_graph_exec_free(s.e[c]);
            s.e[c] = NULL;
            break;
        }
        if (!rc)
            s.nc = c + 1;
    }
    if (!rc && s.nc < 2) {
        sel_free(&s);
        if (o->log)
            fprintf(o->log, "select: no group of this model has a record for this target\n");
        return TE_OK;
    }
    if (!rc)
        rc = sel_workloads(&s);
    int nin = 0;
    void **in = rc ? NULL : make_inputs(g, &nin);
    if (!rc && !in)
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = sel_measure(&s, in);
    if (!rc)
        rc = sel_record(&s, db, &tgt, o->log, out);
    /* The check: whole runs with the defaults, the isolated best records, the choices. */
    te_graph_exec *chosen = NULL;
    if (!rc) {
        co.pick = TE_GRAPH_PICK_BEST;
        rc = te_graph_compile_ex(g, p, &co, &chosen);
    }
    double ms[3];
    if (!rc &&
        !(rc = run_medians((te_graph_exec *[]){s.e[0], s.e[1], chosen}, 3, in, 3 * s.reps, ms))) {
        out->ms_default = ms[0];
        out->ms_tuned = ms[1];
        out->ms_selected = ms[2];
        out->whole_pick = ms[0] <= ms[1] && ms[0] <= ms[2] ? 0 : ms[1] <= ms[2] ? 1 : 2;
        rc = record_whole(g, p, db, &tgt, (te_graph_exec *[]){s.e[0], s.e[1], chosen}, ms,
                          3 * s.reps);
        if (!rc && o->log)
            fprintf(o->log,
                    "select: whole runs: defaults %.4f, best records alone %.4f, in-model "
                    "choices %.4f ms -> %s (recorded as the model's whole-run trials)\n",
                    ms[0], ms[1], ms[2], te_graph_whole_pick_name(out->whole_pick));
    }
    te_graph_exec_free(chosen);
    for (int i = 0; in && i < nin; i++)
        free(in[i]);
    free(in);
    sel_free(&s);
    return rc;
}
