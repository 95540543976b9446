/* Compiling and running a fused graph: every group of the plan becomes one tensor expression
 * (its operators chained on placeholders for the values it reads, canonical names), built with
 * te_build and the default schedule or the database's best record; the intermediates live in
 * one pool planned by graph/memplan.c; the graph runs group by group in plan order. A view
 * group (a reshape, te_fuse_group.view) compiles and runs nothing: its output's buffer is its
 * root's (te_graph_memplan_alias). */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/fuse_internal.h"
#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/schedule.h"
#include "tessera/tuner.h"

typedef struct gkernel {
    te_ctx *ctx;
    te_module *mod;
    int nargs;
    int args[2 * TE_GRAPH_GROUP_MAXIO]; /* value ids: the group's inputs, then its outputs */
    te_graph_group_expr ge;             /* the group's expression, in ctx */
    char key[1024];
    char ctx_key[1100]; /* key + the run's context (te_graph_exec_group_context_key) */
    char *trace;        /* the schedule's trace (malloc'ed) */
    char note[320];
    int from_db;
    double seconds;
    double flops;
    double width;      /* the kernel's parallel width (te_kernel_counts.parallel_width) */
    int wave, threads; /* the schedule: its wave and the OpenMP threads its kernel uses */
    int rc;            /* the last run's status */
    int view;          /* a view group: no module, never run, 0 threads */
    float *packed[TE_GRAPH_GROUP_MAXIO]; /* per input: its constant packed (ge.packed_nb), owned */
} gkernel;

/* Sets k's note (cut to its size, which notes may be: they are for people). */
static void set_note(gkernel *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_note(gkernel *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->note, sizeof k->note, fmt, ap);
    va_end(ap);
}

/* Worker threads for the concurrent waves, started once per executable so that each keeps its
 * OpenMP team between runs: worker i runs kernel a + 1 + i of the wave's kernels [a, b) (indices
 * into the executable's run list; the calling thread runs kernel a). */
typedef struct wpool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t th[TE_GRAPH_MAX_WAVE];
    int n;       /* workers started */
    int gen;     /* wave generation: bumped to start the workers */
    int pending; /* workers not done with this generation */
    int quit;
    int a, b;
    struct te_graph_exec *e;
} wpool;

typedef struct wslot {
    wpool *pool;
    int i;
} wslot;

struct te_graph_exec {
    te_graph *g;
    wpool workers;
    wslot slots[TE_GRAPH_MAX_WAVE];
    int workers_ready; /* the mutex and conditions exist */
    int ng;            /* groups set up in k (all of the plan's once compiled) */
    int nkernels;      /* groups that are not views */
    gkernel *k;
    int threads; /* the run's thread budget */
    int nwaves;
    int *wave_start; /* first group of each wave (nwaves + 1 entries) */
    int *run;        /* the groups that run a kernel, in plan order */
    int *run_start;  /* first entry of run of each wave (nwaves + 1 entries) */
    te_graph_memplan *mp;
    unsigned char *pool;
    void **buf; /* per value: the pool, owned buffers for inputs and outputs, constants' data */
    char model_key[64]; /* the whole run's key (te_graph_exec_model_key) */
};

static void pool_stop(wpool *w)
{
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n; i++)
        pthread_join(w->th[i], NULL);
    w->n = 0;
}

void te_graph_exec_free(te_graph_exec *e)
{
    if (!e)
        return;
    if (e->workers_ready) {
        pool_stop(&e->workers);
        pthread_mutex_destroy(&e->workers.mu);
        pthread_cond_destroy(&e->workers.go);
        pthread_cond_destroy(&e->workers.done);
    }
    for (int i = 0; i < e->ng; i++) {
        te_module_free(e->k[i].mod);
        te_ctx_free(e->k[i].ctx);
        free(e->k[i].trace);
        for (int a = 0; a < TE_GRAPH_GROUP_MAXIO; a++)
            free(e->k[i].packed[a]);
    }
    /* Inputs and outputs own their buffers; constants, the pool and views (a root's) do not. */
    for (int v = 0; e->buf && v < e->g->nv; v++)
        if (e->g->v[v].kind != TE_GRAPH_CONST && te_graph_memplan_offset(e->mp, v) < 0 &&
            te_graph_memplan_alias(e->mp, v) == v)
            free(e->buf[v]);
    free(e->pool);
    free(e->wave_start);
    free(e->run);
    free(e->run_start);
    te_graph_memplan_free(e->mp);
    free(e->buf);
    free(e->k);
    free(e);
}

int te_graph_exec_kernel_count(const te_graph_exec *e) { return e ? e->nkernels : 0; }

const void *te_graph_exec_value(const te_graph_exec *e, int v)
{
    return e && v >= 0 && v < e->g->nv ? e->buf[v] : NULL;
}

int te_graph_exec_group_from_db(const te_graph_exec *e, int gi, const char **note)
{
    if (!e || gi < 0 || gi >= e->ng)
        return -1;
    if (note)
        *note = e->k[gi].note;
    return e->k[gi].from_db;
}

const char *te_graph_exec_group_key(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? e->k[gi].key : NULL;
}

const char *te_graph_exec_group_context_key(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? e->k[gi].ctx_key : NULL;
}

const char *te_graph_exec_group_trace(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? (e->k[gi].trace ? e->k[gi].trace : "") : NULL;
}

const te_graph_group_expr *te_graph_exec_group_expr(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng && !e->k[gi].view ? &e->k[gi].ge : NULL;
}

double te_graph_exec_group_seconds(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? e->k[gi].seconds : 0;
}

const te_graph_memplan *te_graph_exec_memplan(const te_graph_exec *e) { return e ? e->mp : NULL; }

static int64_t numel(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

int te_graph_pack_panels(const float *w, int64_t k, int64_t n, int trans, int64_t nb, float *dst)
{
    return te_op_pack_panels(w, k, n, trans, nb, dst);
}

/* Whether input slot `slot` of node nd is the right operand of a product that reads it in
 * column panels: its layout (*trans: stored [n, k]) and the product's rows (*m). */
static bool weight_slot(const te_graph *g, te_ctx *ctx, const te__gnode *nd, int slot, int *trans,
                        int64_t *m)
{
    const char *op = nd->op->name;
    te_op_params kv;
    *trans = 0;
    bool mm = !strcmp(op, "matmul");
    if (mm || !strcmp(op, "mlp_gate")) {
        if (te_op_params_parse(ctx, nd->attrs, &kv) != TE_OK) {
            te_ctx_clear_error(ctx); /* the node's build reports it */
            return false;
        }
        *trans = (int)te__gop_attr_int(nd->op, &kv, "trans_b");
        if (mm && te__gop_attr_int(nd->op, &kv, "trans_a"))
            return false;
    } else if (strcmp(op, "dense_bias") && strcmp(op, "qkv_projection")) {
        return false;
    }
    bool w = mm || !strcmp(op, "dense_bias") ? slot == 1
             : !strcmp(op, "mlp_gate")       ? slot == 1 || slot == 2
                                             : slot >= 1 && slot <= 3;
    const te__gvalue *a = &g->v[nd->in[0]];
    *m = 1;
    for (int d = 0; d + 1 < a->ndim; d++)
        *m *= a->shape[d];
    return w;
}

/* The panel width for constant v read in group gi, 0 when it stays as it is (see
 * te_graph_group_expr.packed_nb). */
static int64_t panel_width(const te_graph *g, const te_fuse_plan *p, int gi, int v, te_ctx *ctx,
                           int *trans)
{
    const te__gvalue *val = &g->v[v];
    if (val->kind != TE_GRAPH_CONST || val->dtype != TE_F32 || val->ndim != 2 || !val->data)
        return 0;
    const fgroup *gr = &p->gr[gi];
    int uses = 0, tr = -1;
    for (int i = 0; i < gr->n; i++) {
        const te__gnode *nd = &g->n[gr->nodes[i]];
        for (int j = 0; j < nd->n_in; j++) {
            if (nd->in[j] != v)
                continue;
            int t;
            int64_t m;
            if (!weight_slot(g, ctx, nd, j, &t, &m) || m <= 16 || (tr >= 0 && t != tr))
                return 0;
            tr = t;
            uses++;
        }
    }
    if (!uses)
        return 0;
    int64_t n = val->shape[tr ? 0 : 1];
    *trans = tr;
    return n % 64 == 0 ? 64 : n % 32 == 0 ? 32 : n % 16 == 0 ? 16 : 0;
}

int te_graph_group_expr_build(te_graph *g, const te_fuse_plan *p, int gi, te_ctx *ctx,
                              te_graph_group_expr *out)
{
    if (!g || !p || !ctx || !out || gi < 0 || gi >= p->ng)
        return g ? te__graph_error(g, TE_ERR_ARG, "group expression: bad arguments") : TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    const fgroup *gr = &p->gr[gi];
    te_tensor **t = calloc((size_t)g->nv + 1, sizeof *t);
    if (!t)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    int rc = TE_OK;
    size_t nl = (size_t)snprintf(out->name, sizeof out->name, "graph");
    for (int i = 0; i < gr->n && nl < sizeof out->name; i++)
        nl += (size_t)snprintf(out->name + nl, sizeof out->name - nl, "_%s",
                               g->n[gr->nodes[i]].op->name);
    /* Placeholders for every value read from outside the group, in first-use order. */
    for (int i = 0; !rc && i < gr->n; i++) {
        const te__gnode *nd = &g->n[gr->nodes[i]];
        for (int j = 0; j < nd->n_in && !rc; j++) {
            int v = nd->in[j];
            const te__gvalue *val = &g->v[v];
            if ((val->node >= 0 && p->group_of[val->node] == gi) || t[v])
                continue;
            if (out->n_in == TE_GRAPH_GROUP_MAXIO) {
                rc = TE_ERR_UNSUPPORTED;
                break;
            }
            char nm[16];
            snprintf(nm, sizeof nm, "in%d", out->n_in);
            int trans = 0;
            int64_t nb = panel_width(g, p, gi, v, ctx, &trans);
            te_tensor *ph = NULL;
            if (nb) {
                char vn[24];
                snprintf(vn, sizeof vn, "%s_v", nm);
                t[v] = te_op_packed_view(ctx, vn, nm, TE_F32, val->shape[trans ? 1 : 0],
                                         val->shape[trans ? 0 : 1], trans, nb, &ph);
                out->packed_nb[out->n_in] = (int)nb;
                out->packed_trans[out->n_in] = (unsigned char)trans;
            } else {
                t[v] = ph = te_placeholder(ctx, nm, val->dtype, val->ndim, val->shape);
            }
            if (!t[v])
                rc = te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
            out->in_values[out->n_in] = v;
            out->ins[out->n_in++] = ph;
        }
    }
    /* The group's operators, in order, on those tensors. */
    int next = 0;
    for (int i = 0; !rc && i < gr->n; i++) {
        const te__gnode *nd = &g->n[gr->nodes[i]];
        te_op_params kv;
        te_tensor *in[TE__G_MAXIO], *res[TE__G_MAXIO] = {0};
        char names[TE__G_MAXIO][16];
        const char *nm[TE__G_MAXIO + 1] = {0}; /* NULL after the last: split counts them */
        for (int j = 0; j < nd->n_in; j++)
            in[j] = t[nd->in[j]];
        for (int j = 0; j < nd->n_out; j++) {
            snprintf(names[j], sizeof names[j], "t%d", next++);
            nm[j] = names[j];
        }
        rc = te_op_params_parse(ctx, nd->attrs, &kv);
        if (!rc)
            rc = nd->op->apply(ctx, nd->op, &kv, nd->n_in, in, nm, res);
        for (int j = 0; !rc && j < nd->n_out; j++)
            t[nd->out[j]] = res[j];
    }
    for (int i = 0; !rc && i < gr->nout; i++) {
        if (out->n_out == TE_GRAPH_GROUP_MAXIO) {
            rc = TE_ERR_UNSUPPORTED;
            break;
        }
        out->out_values[out->n_out] = gr->outs[i];
        out->outs[out->n_out++] = t[gr->outs[i]];
    }
    for (int i = 0; i < out->n_in && i < 32; i++)
        if (g->v[out->in_values[i]].kind == TE_GRAPH_CONST)
            out->cold_inputs |= 1u << i;
    if (!rc && te_tuner_expr_key(out->name, out->n_in, out->ins, out->n_out, out->outs, out->key,
                                 sizeof out->key) < 0)
        rc = TE_ERR_OVERFLOW;
    if (!rc &&
        te_tuner_key_add_cold(out->key, sizeof out->key, out->cold_inputs) >= (int)sizeof out->key)
        rc = TE_ERR_OVERFLOW;
    if (rc)
        te__graph_error(g, rc, "group %d (%s, first node '%s'): %s", gi, gr->rule,
                        g->v[g->n[gr->nodes[0]].out[0]].name,
                        rc == TE_ERR_UNSUPPORTED ? "more than 32 inputs or outputs"
                        : te_ctx_errcode(ctx)    ? te_ctx_errmsg(ctx)
                                                 : te_status_str(rc));
    free(t);
    return rc;
}

int te_graph_group_expr_add_task(te_tuner *t, const te_graph_group_expr *ge, double weight)
{
    if (!t || !ge)
        return TE_ERR_ARG;
    int rc = te_tuner_add_expr(t, ge->name, ge->n_in, ge->ins, ge->n_out, ge->outs, weight);
    if (rc == TE_OK && ge->cold_inputs) /* weights measured cold, as a run meets them */
        rc = te_tuner_set_cold_inputs(t, ge->cold_inputs);
    return rc;
}

/* The default schedule of a group: the elementwise and injective stages that are not group
 * outputs are inlined into their readers (TVM's default for injective operators: no pass over
 * memory for a bias add or a reshape), the rest are computed at the root in order, each with
 * its outermost loop parallel when the run has several threads (fused with the next loop when
 * it has fewer iterations than threads, as a batch of 1 does), so an untuned kernel uses the
 * thread budget. A stage that refuses a step keeps the plain placement for it; when a
 * parallel loop is refused the whole schedule falls back to the plain one (messages cleared). */
static te_schedule *default_schedule(te_ctx *ctx, const te_graph_group_expr *ge, int threads)
{
    te_schedule *s = te_schedule_create(ctx, ge->n_out, ge->outs);
    if (!s)
        return NULL;
    int n = te_schedule_nstages(s);
    char *inlined = calloc((size_t)n + 1, 1);
    if (!inlined)
        return s;
    for (int i = 0; i < n; i++) {
        te_stage *st = te_schedule_stage_at(s, i);
        int is_out = 0;
        for (int j = 0; j < ge->n_out; j++)
            is_out |= te_stage_tensor(st) == ge->outs[j];
        if (is_out || te_stage_nreduce(st) > 0)
            continue;
        if (te_compute_inline(st) == TE_OK)
            inlined[i] = 1;
        else
            te_ctx_clear_error(ctx);
    }
    int ok = 1;
    for (int i = 0; ok && threads > 1 && i < n; i++) {
        te_stage *st = te_schedule_stage_at(s, i);
        te_iter *x = te_stage_axis(st, 0), *y = te_stage_axis(st, 1);
        if (inlined[i] || !x)
            continue;
        if (y && te_iter_extent(x) < threads)
            ok = te_fuse(st, x, y, &x) == TE_OK;
        ok = ok && te_parallel(st, x) == TE_OK;
    }
    free(inlined);
    if (ok)
        return s;
    te_ctx_clear_error(ctx);
    return te_schedule_create(ctx, ge->n_out, ge->outs);
}

/* Builds group gi's expression (phase one of compiling it: the keys of every group make the
 * run's context key before any is scheduled). */
static int build_group_expr(te_graph *g, const te_fuse_plan *p, int gi, gkernel *k)
{
    k->ctx = te_ctx_create();
    if (!k->ctx)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    int rc = te_graph_group_expr_build(g, p, gi, k->ctx, &k->ge);
    if (rc)
        return rc;
    snprintf(k->key, sizeof k->key, "%s", k->ge.key);
    k->nargs = 0;
    for (int i = 0; i < k->ge.n_in; i++)
        k->args[k->nargs++] = k->ge.in_values[i];
    for (int i = 0; i < k->ge.n_out; i++)
        k->args[k->nargs++] = k->ge.out_values[i];
    return TE_OK;
}

int te_graph_context_key(int n, const char *const *keys, const char *key, char *buf, size_t size)
{
    if (n < 0 || (n && !keys) || !key || (!buf && size))
        return TE_ERR_ARG;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        for (const char *c = keys[i] ? keys[i] : ""; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        h = (h ^ '\n') * 0x100000001b3ull;
    }
    return snprintf(buf, size, "%s;model=%016llx", key, (unsigned long long)h);
}

/* The in-model keys of the run's kernels (te_graph_context_key over their keys). */
static int set_context_keys(te_graph_exec *e)
{
    const char **keys = malloc(sizeof *keys * (size_t)(e->ng + 1));
    if (!keys)
        return TE_ERR_NOMEM;
    int n = 0;
    for (int gi = 0; gi < e->ng; gi++)
        if (!e->k[gi].view)
            keys[n++] = e->k[gi].key;
    int rc = TE_OK;
    for (int gi = 0; !rc && gi < e->ng; gi++)
        if (!e->k[gi].view &&
            te_graph_context_key(n, keys, e->k[gi].key, e->k[gi].ctx_key,
                                 sizeof e->k[gi].ctx_key) >= (int)sizeof e->k[gi].ctx_key)
            rc = TE_ERR_OVERFLOW;
    if (!rc &&
        te_graph_model_key(n, keys, e->model_key, sizeof e->model_key) >= (int)sizeof e->model_key)
        rc = TE_ERR_OVERFLOW;
    free(keys);
    return rc;
}

const char *te_graph_exec_model_key(const te_graph_exec *e) { return e ? e->model_key : NULL; }

int te_graph_model_key(int n, const char *const *keys, char *buf, size_t size)
{
    return te_graph_context_key(n, keys, "graph_model", buf, size);
}

/* ---- Whole-run records ------------------------------------------------------------------
 * The trace of a whole-run record (te_graph_select_in_context) holds every distinct workload's
 * schedule: for each, a line "@workload KEY" and then that schedule's trace (te_schedule_trace
 * lines, none of which starts with '@'). */

/* Whether group gi is the first kernel of its workload in e. */
static bool first_of_workload(const te_graph_exec *e, int gi)
{
    if (e->k[gi].view)
        return false;
    for (int q = 0; q < gi; q++)
        if (!e->k[q].view && !strcmp(e->k[q].key, e->k[gi].key))
            return false;
    return true;
}

char *te__graph_whole_trace(const te_graph_exec *e)
{
    size_t need = 1;
    for (int gi = 0; e && gi < e->ng; gi++)
        if (first_of_workload(e, gi))
            need += strlen(e->k[gi].key) + (e->k[gi].trace ? strlen(e->k[gi].trace) : 0) + 12;
    char *out = e ? malloc(need) : NULL, *w = out;
    if (!out)
        return NULL;
    *w = 0;
    for (int gi = 0; gi < e->ng; gi++) {
        if (!first_of_workload(e, gi))
            continue;
        const char *tr = e->k[gi].trace ? e->k[gi].trace : "";
        size_t n = strlen(tr);
        w += snprintf(w, need - (size_t)(w - out), "@workload %s\n%s%s", e->k[gi].key, tr,
                      n && tr[n - 1] != '\n' ? "\n" : "");
    }
    return out;
}

char *te_graph_whole_trace_section(const char *whole, const char *key)
{
    if (!whole || !key)
        return NULL;
    size_t kl = strlen(key);
    for (const char *l = whole; l && *l;) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        if (len == 10 + kl && !strncmp(l, "@workload ", 10) && !strncmp(l + 10, key, kl)) {
            const char *a = eol ? eol + 1 : l + len, *z = a;
            while (*z && *z != '@') {
                const char *nl = strchr(z, '\n');
                z = nl ? nl + 1 : z + strlen(z);
            }
            char *out = malloc((size_t)(z - a) + 1);
            if (out) {
                memcpy(out, a, (size_t)(z - a));
                out[z - a] = 0;
            }
            return out;
        }
        l = eol ? eol + 1 : l + len;
    }
    return NULL;
}

/* Packs the group's constants its expression reads in column panels (ge.packed_nb), once. */
static int pack_constants(te_graph *g, te_graph_exec *e, gkernel *k)
{
    for (int a = 0; a < k->ge.n_in; a++) {
        if (!k->ge.packed_nb[a])
            continue;
        int v = k->ge.in_values[a];
        const te__gvalue *w = &g->v[v];
        int tr = k->ge.packed_trans[a];
        int64_t kk = w->shape[tr ? 1 : 0], n = w->shape[tr ? 0 : 1];
        k->packed[a] = malloc(sizeof(float) * (size_t)(kk * n));
        if (!k->packed[a])
            return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        if (te_graph_pack_panels(e->buf[v], kk, n, tr, k->ge.packed_nb[a], k->packed[a]))
            return te__graph_error(g, TE_ERR_INTERNAL, "compile: packing '%s'", w->name);
    }
    return TE_OK;
}

/* Schedules and builds group gi (its expression built) as one kernel: by `pick`
 * (te_graph_compile_opts), the schedule of the model's fastest whole run (`whole`, NULL when
 * there is none), the in-model record or the database's best record when db has one that
 * applies, a ranked record, or the default schedule. */
static int compile_group(te_graph *g, const te_fuse_plan *p, int gi, const te_target *tgt,
                         te_db *db, int pick, const te_db_trial *whole, gkernel *k)
{
    int rc = TE_OK;
    te_graph_group_expr *ge = &k->ge;
    te_tensor *args[2 * TE_GRAPH_GROUP_MAXIO];
    int na = 0;
    for (int i = 0; i < ge->n_in; i++)
        args[na++] = ge->ins[i];
    for (int i = 0; i < ge->n_out; i++)
        args[na++] = ge->outs[i];
    te_schedule *s = NULL;
    char why[256] = "no database";
    if (pick == TE_GRAPH_PICK_DEFAULT)
        snprintf(why, sizeof why, "the default asked for");
    char *sec = whole ? te_graph_whole_trace_section(whole->trace, k->key) : NULL;
    if (sec) {
        /* The fastest whole run recorded for this model: its schedule of this workload. */
        s = te_schedule_create(k->ctx, ge->n_out, ge->outs);
        if (s && te_schedule_apply_trace(s, sec) == TE_OK) {
            k->from_db = 1;
            set_note(k, "database: whole-run trial %s, %.4f ms for the model's run",
                     whole->uid ? whole->uid : "?", whole->median_s * 1e3);
        } else {
            s = NULL; /* schedules live in the context's arena; the next path starts afresh */
            te_ctx_clear_error(k->ctx);
        }
        free(sec);
    }
    if (!s && db && pick != TE_GRAPH_PICK_DEFAULT) {
        te_db_trial_list *rec = NULL;
        if (pick == TE_GRAPH_PICK_BEST &&
            te_tuner_best_record(k->ctx, db, k->ctx_key, ge->n_out, ge->outs, tgt, 0, &s, &rec, why,
                                 sizeof why) == TE_OK) {
            k->from_db = 1;
            set_note(k, "database: trial %s, %.4f ms inside this model's run",
                     rec && rec->n ? rec->items[0].uid : "?",
                     rec && rec->n ? rec->items[0].median_s * 1e3 : 0.0);
        } else if (te_tuner_ranked_record(k->ctx, db, ge->key, pick > 0 ? pick - 1 : 0, ge->n_out,
                                          ge->outs, tgt, 0, &s, &rec, why, sizeof why) == TE_OK) {
            k->from_db = 1;
            set_note(k, "database: trial %s, %.4f ms when tuned",
                     rec && rec->n ? rec->items[0].uid : "?",
                     rec && rec->n ? rec->items[0].median_s * 1e3 : 0.0);
        }
        te_db_trial_list_free(rec);
    }
    if (!s) {
        /* Untuned: the tuner's heuristic default (its search space ranked by the analytic cost
         * model, nothing measured); the plain inline + parallel default when that fails. */
        const fgroup *gr = &p->gr[gi];
        const char *op = gr->n == 1 ? g->n[gr->nodes[0]].op->name : NULL;
        char dnote[256];
        if (te_tune_default_schedule(k->ctx, op, ge->n_in, ge->ins, ge->n_out, ge->outs, tgt, &s,
                                     dnote, sizeof dnote) == TE_OK) {
            set_note(k, "%s (%s)", dnote, why);
        } else {
            set_note(k, "default schedule: inline + parallel (%s; %s)", why, te_ctx_errmsg(k->ctx));
            te_ctx_clear_error(k->ctx);
            s = default_schedule(k->ctx, ge, tgt->num_cores);
        }
        if (!s)
            rc = te_ctx_errcode(k->ctx) ? te_ctx_errcode(k->ctx) : TE_ERR_INTERNAL;
    }
    if (!rc && !(k->trace = strdup(te_schedule_trace(s))))
        rc = TE_ERR_NOMEM;
    char name[64];
    snprintf(name, sizeof name, "group%d_%.40s", gi, g->v[g->n[p->gr[gi].nodes[0]].out[0]].name);
    te_lowered *f = NULL;
    if (!rc && !(f = te_lower(s, na, args, name, tgt)))
        rc = te_ctx_errcode(k->ctx) ? te_ctx_errcode(k->ctx) : TE_ERR_LOWER;
    /* How many threads the kernel's parallel loops can use, for the run's waves. */
    te_kernel_counts kc;
    if (!rc && (rc = te_kernel_count(f, &kc)) == TE_OK)
        k->width = kc.parallel_width;
    if (!rc)
        rc = te_build_lowered(k->ctx, f, name, tgt, &k->mod);
    if (rc)
        te__graph_error(g, rc, "compile: group %d (%s, first node '%s'): %s", gi, p->gr[gi].rule,
                        g->v[g->n[p->gr[gi].nodes[0]].out[0]].name,
                        rc == TE_ERR_NOMEM ? "out of memory" : te_ctx_errmsg(k->ctx));
    return rc;
}

/* The threads group k's kernel can use: its parallel width, the budget when that is unknown. */
static int thread_cap(const gkernel *k, int threads)
{
    return k->width >= 1 && k->width < threads ? (int)k->width : threads;
}

/* The schedule of the groups (pure: the plan, the groups' FLOPs, their kernels' parallel
 * widths and the options). Groups run in plan order, one wave after another. A wave is
 * consecutive independent groups (none reads another's output), at most one per thread, whose
 * needs fit the budget together: a small group (fewer FLOPs than threads x min_flops_per_thread:
 * a kernel that size gains little from more threads) needs one thread, a larger one as many as
 * its kernel's parallel loops can use (te_kernel_counts.parallel_width), so a large group whose
 * parallel loop is narrower than the budget shares its wave, and one as wide runs alone. The
 * threads are split among a wave's groups in proportion to their FLOPs, at least one each and
 * never more than a group's kernel can use, the shares summing to at most the budget (no
 * oversubscription). A view runs nothing: it joins the wave before it (or starts the first)
 * with no threads and no share of the wave's width, and a group reading a view depends on the
 * view's root's writer. */
static int plan_waves(const te_graph *g, const te_fuse_plan *p, gkernel *k, int threads,
                      double grain, int concurrent, int *wave_start)
{
    int nw = 0, start = 0, nreal = 0, need = 0; /* the current wave: first group, kernels, need */
    for (int gi = 0; gi < p->ng; gi++) {
        k[gi].threads = 0;
        if (k[gi].view) {
            if (nw == 0)
                wave_start[nw++] = start = gi;
            k[gi].wave = nw - 1;
            continue;
        }
        int mine = k[gi].flops < (double)threads * grain ? 1 : thread_cap(&k[gi], threads);
        /* A wave of views only takes any group; else the group must fit and be independent. */
        int join = nw > 0 && (nreal == 0 || (concurrent && threads > 1 && nreal < threads &&
                                             nreal < TE_GRAPH_MAX_WAVE && need + mine <= threads));
        const fgroup *gr = &p->gr[gi];
        for (int i = 0; join && nreal > 0 && i < gr->n; i++) {
            const te__gnode *nd = &g->n[gr->nodes[i]];
            for (int a = 0; join && a < nd->n_in; a++) {
                int prod = g->v[te__fuse_view_root(p, nd->in[a])].node;
                int pg = prod >= 0 ? p->group_of[prod] : -1;
                join = !(pg >= start && pg < gi);
            }
        }
        if (!join) {
            start = gi;
            wave_start[nw++] = gi;
            nreal = need = 0;
        }
        nreal++;
        need += mine;
        k[gi].wave = nw - 1;
    }
    wave_start[nw] = p->ng;
    for (int w = 0; w < nw; w++) {
        int a = wave_start[w], b = wave_start[w + 1], m = 0;
        double total = 0;
        for (int gi = a; gi < b; gi++)
            if (!k[gi].view)
                m++, total += k[gi].flops;
        int left = threads - m;
        for (int gi = a; gi < b; gi++) {
            if (k[gi].view)
                continue;
            int extra = m == 1 || total <= 0 ? (m == 1 ? left : 0)
                                             : (int)((double)(threads - m) * k[gi].flops / total);
            int cap = thread_cap(&k[gi], threads);
            if (1 + extra > cap)
                extra = cap - 1;
            k[gi].threads = 1 + extra;
            left -= extra;
        }
        /* The remainder, one thread at a time, to the groups that can still use one. */
        for (int more = 1; left > 0 && more;) {
            more = 0;
            for (int gi = a; gi < b && left > 0; gi++)
                if (!k[gi].view && k[gi].threads < thread_cap(&k[gi], threads))
                    k[gi].threads++, left--, more = 1;
        }
    }
    return nw;
}

int te_graph_compile_ex(te_graph *g, const te_fuse_plan *p, const te_graph_compile_opts *o,
                        te_graph_exec **out)
{
    if (!g || !p || !out)
        return g ? te__graph_error(g, TE_ERR_ARG, "compile: bad arguments") : TE_ERR_ARG;
    *out = NULL;
    te_graph_compile_opts dflt = {0};
    if (!o)
        o = &dflt;
    if (o->pick < TE_GRAPH_PICK_DEFAULT)
        return te__graph_error(g, TE_ERR_ARG, "compile: pick %d is not a choice", o->pick);
    if (o->threads < 0 || o->min_flops_per_thread < 0)
        return te__graph_error(g, TE_ERR_ARG,
                               "compile: threads %d and min_flops_per_thread %g "
                               "must be >= 0",
                               o->threads, o->min_flops_per_thread);
    if (te_graph_output_count(g) == 0)
        return te__graph_error(g, TE_ERR_ARG,
                               "compile: the graph has no outputs (its text form needs an "
                               "'output NAME[, NAME...]' line)");
    te_target tgt = o->target ? *o->target : te_target_host();
    int threads = o->threads ? o->threads : tgt.num_cores > 0 ? tgt.num_cores : 1;
    tgt.num_cores = threads; /* the kernels' schedules and database records are for this count */
    te_graph_exec *e = calloc(1, sizeof *e);
    if (!e)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    e->g = g;
    e->threads = threads;
    e->buf = calloc((size_t)g->nv + 1, sizeof *e->buf);
    e->k = calloc((size_t)p->ng + 1, sizeof *e->k);
    e->wave_start = calloc((size_t)p->ng + 2, sizeof *e->wave_start);
    e->run = calloc((size_t)p->ng + 1, sizeof *e->run);
    e->run_start = calloc((size_t)p->ng + 2, sizeof *e->run_start);
    int rc = !e->buf || !e->k || !e->wave_start || !e->run || !e->run_start ? TE_ERR_NOMEM : TE_OK;
    if (rc) {
        te_graph_exec_free(e);
        return te__graph_error(g, rc, "out of memory");
    }
    /* The kernels first: the waves need their parallel widths. */
    for (int gi = 0; !rc && gi < p->ng; gi++) {
        e->k[gi].view = p->gr[gi].view;
        e->nkernels += !e->k[gi].view;
        for (int i = 0; !e->k[gi].view && i < p->gr[gi].n; i++)
            e->k[gi].flops += te_graph_node_flops(g, p->gr[gi].nodes[i]);
        if (!e->k[gi].view)
            rc = build_group_expr(g, p, gi, &e->k[gi]);
        e->ng = gi + 1;
    }
    if (!rc && (rc = set_context_keys(e)) != TE_OK)
        te__graph_error(g, rc, "compile: the run's context keys: %s", te_status_str(rc));
    /* The fastest whole run of this model recorded for the target (in-model selection), whose
     * schedules come before every per-kernel record. */
    te_db_trial_list *whole = NULL;
    if (!rc && o->db && o->pick == TE_GRAPH_PICK_BEST) {
        te_db_target dbt;
        char storage[1024];
        if (te_tuner_db_target(&tgt, &dbt, storage, sizeof storage) != TE_OK ||
            te_db_best(o->db, e->model_key, &dbt, 0, &whole) != TE_OK || !whole->n) {
            te_db_trial_list_free(whole);
            whole = NULL;
        }
    }
    for (int i = 0; !rc && i < p->ng; i++)
        if (!e->k[i].view)
            rc = compile_group(g, p, i, &tgt, o->db, o->pick, whole ? &whole->items[0] : NULL,
                               &e->k[i]);
    te_db_trial_list_free(whole);
    if (rc) {
        te_graph_exec_free(e);
        return rc;
    }
    /* The schedule of the run, its memory plan, the buffers. */
    e->nwaves = plan_waves(g, p, e->k, threads,
                           o->min_flops_per_thread > 0 ? o->min_flops_per_thread
                                                       : TE_GRAPH_MIN_FLOPS_PER_THREAD,
                           !o->no_concurrency, e->wave_start);
    int nr = 0; /* the kernels each wave runs (its groups less its views) */
    for (int w = 0; w < e->nwaves; w++) {
        e->run_start[w] = nr;
        for (int gi = e->wave_start[w]; gi < e->wave_start[w + 1]; gi++)
            if (!e->k[gi].view)
                e->run[nr++] = gi;
    }
    e->run_start[e->nwaves] = nr;
    int *step = calloc((size_t)p->ng + 1, sizeof *step);
    for (int gi = 0; step && gi < p->ng; gi++)
        step[gi] = e->k[gi].wave;
    rc = step ? te_graph_memplan_create_steps(p, step, &e->mp) : TE_ERR_NOMEM;
    free(step);
    te_graph_mem_stats ms;
    te_graph_memplan_stats(e->mp, &ms);
    if (!rc) {
        e->pool = malloc(ms.pool_bytes ? ms.pool_bytes : 1);
        if (!e->pool)
            rc = TE_ERR_NOMEM;
        else
            memset(e->pool, 0xff, ms.pool_bytes); /* NaN for floats: unwritten data shows */
    }
    if (rc) {
        te_graph_exec_free(e);
        return te__graph_error(g, rc, "out of memory");
    }
    for (int v = 0; !rc && v < g->nv; v++) {
        int64_t off = te_graph_memplan_offset(e->mp, v);
        if (te_graph_memplan_alias(e->mp, v) != v) {
            continue; /* a view: its root's buffer, below */
        } else if (g->v[v].kind == TE_GRAPH_CONST) {
            e->buf[v] = g->v[v].data;
        } else if (off >= 0) {
            e->buf[v] = e->pool + off;
        } else if (g->v[v].kind == TE_GRAPH_INPUT || g->v[v].is_output) {
            size_t bytes = (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype);
            e->buf[v] = malloc(bytes ? bytes : 1);
            if (!e->buf[v])
                rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
            else
                memset(e->buf[v], 0xff, bytes);
        }
    }
    /* Views after every other buffer, so that a view of an input, a constant or an output
     * points at that value's buffer. */
    for (int v = 0; !rc && v < g->nv; v++)
        if (te_graph_memplan_alias(e->mp, v) != v)
            e->buf[v] = e->buf[te_graph_memplan_alias(e->mp, v)];
    for (int i = 0; !rc && i < p->ng; i++) {
        if (e->k[i].view) {
            int v = g->n[p->gr[i].nodes[0]].out[0];
            set_note(&e->k[i], "view of '%s' (reshape, no copy)",
                     g->v[te_graph_memplan_alias(e->mp, v)].name);
        } else {
            rc = pack_constants(g, e, &e->k[i]);
        }
    }
    if (rc) {
        te_graph_exec_free(e);
        return rc;
    }
    *out = e;
    return TE_OK;
}

int te_graph_compile_db(te_graph *g, const te_fuse_plan *p, const te_target *target, te_db *db,
                        te_graph_exec **out)
{
    te_graph_compile_opts o = {.target = target, .db = db};
    return te_graph_compile_ex(g, p, &o, out);
}

int te_graph_compile(te_graph *g, const te_fuse_plan *p, const te_target *target,
                     te_graph_exec **out)
{
    return te_graph_compile_db(g, p, target, NULL, out);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs group gi's kernel with its share of the threads (the OpenMP thread count is per
 * thread, so concurrent groups each get their own team of that size). */
static void run_group(te_graph_exec *e, int gi)
{
    gkernel *k = &e->k[gi];
    if (k->view) /* its output is its root's bytes: nothing to do */
        return;
    void *argv[2 * TE_GRAPH_GROUP_MAXIO];
    for (int a = 0; a < k->nargs; a++)
        argv[a] = a < k->ge.n_in && k->packed[a] ? (void *)k->packed[a] : e->buf[k->args[a]];
    omp_set_num_threads(k->threads);
    double t0 = now_s();
    k->rc = te_module_run(k->mod, argv);
    k->seconds = now_s() - t0;
}

static void *pool_worker(void *arg)
{
    wslot *sl = arg;
    wpool *w = sl->pool;
    pthread_mutex_lock(&w->mu);
    int seen = 0; /* gen is 0 until the first wave, which starts after every worker exists */
    for (;;) {
        while (!w->quit && w->gen == seen)
            pthread_cond_wait(&w->go, &w->mu);
        if (w->quit)
            break;
        seen = w->gen;
        int r = w->a + 1 + sl->i, b = w->b;
        pthread_mutex_unlock(&w->mu);
        if (r < b)
            run_group(w->e, w->e->run[r]);
        pthread_mutex_lock(&w->mu);
        if (--w->pending == 0)
            pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Starts the workers the widest wave needs (once; fewer when threads cannot start: the calling
 * thread then runs the rest of a wave itself, so the threads never exceed the budget). */
static void pool_start(te_graph_exec *e)
{
    wpool *w = &e->workers;
    int widest = 0; /* in kernels: views run nothing */
    for (int i = 0; i < e->nwaves; i++)
        if (e->run_start[i + 1] - e->run_start[i] > widest)
            widest = e->run_start[i + 1] - e->run_start[i];
    if (widest <= 1 || e->workers_ready)
        return;
    if (pthread_mutex_init(&w->mu, NULL))
        return;
    if (pthread_cond_init(&w->go, NULL)) {
        pthread_mutex_destroy(&w->mu);
        return;
    }
    if (pthread_cond_init(&w->done, NULL)) {
        pthread_cond_destroy(&w->go);
        pthread_mutex_destroy(&w->mu);
        return;
    }
    e->workers_ready = 1;
    w->e = e;
    for (int i = 0; i < widest - 1 && i < TE_GRAPH_MAX_WAVE; i++) {
        e->slots[i] = (wslot){w, i};
        if (pthread_create(&w->th[i], NULL, pool_worker, &e->slots[i]))
            break;
        w->n = i + 1;
    }
}

/* Runs the kernels run[a..b) of a wave: the workers take run[a+1..], this thread run[a] (and
 * any beyond the workers), then waits for them. Nothing for a wave of views only (a == b). */
static void run_wave(te_graph_exec *e, int a, int b)
{
    wpool *w = &e->workers;
    if (a >= b)
        return;
    int nw = b - a - 1 < w->n ? b - a - 1 : w->n;
    if (nw > 0) {
        pthread_mutex_lock(&w->mu);
        w->a = a;
        w->b = b;
        w->pending = w->n;
        w->gen++;
        pthread_cond_broadcast(&w->go);
        pthread_mutex_unlock(&w->mu);
    }
    run_group(e, e->run[a]);
    for (int r = a + 1 + nw; r < b; r++)
        run_group(e, e->run[r]);
    if (nw > 0) {
        pthread_mutex_lock(&w->mu);
        while (w->pending > 0)
            pthread_cond_wait(&w->done, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
}

int te_graph_run_each(te_graph_exec *e, const void *const *input_data, void *const *output_data,
                      void (*after)(te_graph_exec *e, int group, void *user), void *user)
{
    if (!e)
        return TE_ERR_ARG;
    te_graph *g = e->g;
    for (int i = 0, v; (v = te_graph_input_value(g, i)) >= 0; i++) {
        if (!input_data || !input_data[i])
            return te__graph_error(g, TE_ERR_ARG, "run: no data for input '%s'", g->v[v].name);
        memcpy(e->buf[v], input_data[i], (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype));
    }
    int saved = omp_get_max_threads(), rc = TE_OK;
    pool_start(e);
    for (int w = 0; !rc && w < e->nwaves; w++) {
        int a = e->wave_start[w], b = e->wave_start[w + 1];
        run_wave(e, e->run_start[w], e->run_start[w + 1]);
        for (int gi = a; gi < b; gi++) {
            if (e->k[gi].rc && !rc)
                rc = te__graph_error(g, e->k[gi].rc, "run: kernel %d failed", gi);
            if (!rc && after)
                after(e, gi, user);
        }
    }
    omp_set_num_threads(saved);
    if (rc)
        return rc;
    for (int j = 0, v; output_data && (v = te_graph_output_value(g, j)) >= 0; j++)
        if (output_data[j])
            memcpy(output_data[j], e->buf[v],
                   (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype));
    return TE_OK;
}

int te_graph_run(te_graph_exec *e, const void *const *input_data, void *const *output_data)
{
    return te_graph_run_each(e, input_data, output_data, NULL, NULL);
}

int te_graph_exec_threads(const te_graph_exec *e) { return e ? e->threads : 0; }

int te_graph_exec_wave_count(const te_graph_exec *e) { return e ? e->nwaves : 0; }

int te_graph_exec_group_wave(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? e->k[gi].wave : -1;
}

int te_graph_exec_group_threads(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng ? e->k[gi].threads : -1;
}

double te_graph_exec_group_width(const te_graph_exec *e, int gi)
{
    return e && gi >= 0 && gi < e->ng && !e->k[gi].view ? e->k[gi].width : 0;
}
