/* Shared by the graph commands: the shipped rules, loading and fusing a graph, the fused
 * groups as tuning tasks (tools/graph_cli.h). */
#include "tools/graph_cli.h"

#include "tessera/onnx.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int te_cli_default_rules(char *out, size_t n)
{
    const char *env = getenv("TESSERA_RULES");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 1;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return 0;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    const char *rel[] = {"/rules/cpu.rules", "/../rules/cpu.rules", "/../../rules/cpu.rules",
                         "/../share/tessera/rules/cpu.rules"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(out, n, "%s%s", exe, rel[i]);
        if (access(out, R_OK) == 0)
            return 1;
    }
    return 0;
}

void te_cli_fused_free(te_cli_fused *f)
{
    if (!f)
        return;
    te_fuse_plan_free(f->plan);
    te_graph_free(f->g);
    te_fuse_rules_free(f->rules);
    memset(f, 0, sizeof *f);
}

int te_cli_is_model(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcasecmp(path + n - 5, ".onnx");
}

int te_cli_precision_parse(const char *cmd, const char *value, te_cli_precision *out)
{
    if (value && !strcmp(value, "f32"))
        *out = TE_CLI_PRECISION_F32;
    else if (value && !strcmp(value, "bf16"))
        *out = TE_CLI_PRECISION_BF16;
    else {
        fprintf(stderr,
                "tessera %s: --precision takes f32 or bf16, not '%s'\n(see tessera %s --help)\n",
                cmd, value ? value : "", cmd);
        return 2;
    }
    return 0;
}

int te_cli_apply_precision(const char *cmd, te_graph *g, te_cli_precision prec, FILE *log)
{
    if (prec != TE_CLI_PRECISION_BF16)
        return 0;
    te_target host = te_target_host();
    if (!te_graph_bf16_supported(&host)) {
        fprintf(stderr,
                "tessera %s: --precision bf16: this CPU has no bf16 dot product (AVX-512 BF16 or "
                "AMX-BF16; its features: %s); run with --precision f32\n",
                cmd, host.isa);
        return 1;
    }
    int n = 0;
    if (te_graph_lower_bf16(g, &host, log, &n)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, te_graph_errmsg(g));
        return 1;
    }
    if (log)
        fprintf(log, "lower_bf16: %d matmul node%s lowered to bf16\n", n, n == 1 ? "" : "s");
    return 0;
}

int te_cli_fused_load(const char *cmd, const char *graph_path, const char *rules_path, int no_rules,
                      int optimize, te_cli_precision prec, te_cli_fused *out)
{
    return te_cli_fused_load_model(cmd, graph_path, NULL, rules_path, no_rules, optimize, prec,
                                   out);
}

int te_cli_graph_load(const char *cmd, const char *path, const char *shapes, int optimize,
                      FILE *log, te_graph **out)
{
    int rc;
    *out = NULL;
    if (te_cli_is_model(path)) {
        /* Imported models often carry weight-only subgraphs (transposed weights, folded
         * shapes): they are always optimized, by every command, so that `tessera tune` and
         * `tessera run` see the same groups. */
        char err[1024];
        if (te_graph_from_onnx(path, shapes, out, err, sizeof err)) {
            fprintf(stderr, "tessera %s: %s\n", cmd, err);
            return 1;
        }
        optimize = 1;
        rc = TE_OK;
    } else {
        *out = te_graph_create();
        rc = *out ? te_graph_load(*out, path) : TE_ERR_NOMEM;
    }
    if (!rc && optimize)
        rc = te_graph_optimize(*out, log);
    if (!rc && optimize) { /* int8 matmuls onto this CPU's dot products (exact) */
        te_target host = te_target_host();
        rc = te_graph_lower_int8(*out, &host, log, NULL);
    }
    if (rc) {
        fprintf(stderr, "tessera %s: %s\n", cmd, *out ? te_graph_errmsg(*out) : "out of memory");
        te_graph_free(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

int te_cli_fused_load_model(const char *cmd, const char *path, const char *shapes,
                            const char *rules_path, int no_rules, int optimize,
                            te_cli_precision prec, te_cli_fused *out)
{
    memset(out, 0, sizeof *out);
    int model = te_cli_is_model(path);
    if (!model && shapes && *shapes) {
        fprintf(stderr, "tessera %s: --shape applies to ONNX models (MODEL.onnx), not to %s\n", cmd,
                path);
        return 2;
    }
    if (!no_rules) {
        if (!rules_path && !te_cli_default_rules(out->rules_path, sizeof out->rules_path)) {
            fprintf(stderr,
                    "tessera %s: cannot find the shipped rules/cpu.rules; give --rules FILE or "
                    "set TESSERA_RULES\n",
                    cmd);
            return 1;
        }
        if (rules_path)
            snprintf(out->rules_path, sizeof out->rules_path, "%s", rules_path);
        char err[512];
        out->rules = te_fuse_rules_load(out->rules_path, err, sizeof err);
        if (!out->rules) {
            fprintf(stderr, "tessera %s: %s\n", cmd, err);
            return 1;
        }
    }
    if (te_cli_graph_load(cmd, path, shapes, optimize, NULL, &out->g) ||
        te_cli_apply_precision(cmd, out->g, prec, stderr)) {
        te_cli_fused_free(out);
        return 1;
    }
    te_fuse_target t;
    te_fuse_target_host(&t); /* without an L2 size every staged intermediate is refused */
    out->plan = te_graph_fuse(out->g, out->rules, &t);
    if (!out->plan) {
        fprintf(stderr, "tessera %s: %s\n", cmd,
                out->g ? te_graph_errmsg(out->g) : "out of memory");
        te_cli_fused_free(out);
        return 1;
    }
    return 0;
}

typedef struct gtask {
    te_ctx *ctx;
    te_graph_group_expr e;
    int weight; /* 0: a duplicate of an earlier task */
} gtask;

struct te_cli_graph_tasks {
    te_cli_fused f;
    gtask *t; /* one per group; a view's has weight 0 and no context */
    int n, distinct, views;
};

void te_cli_graph_tasks_free(te_cli_graph_tasks *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        te_ctx_free(l->t[i].ctx);
    free(l->t);
    te_cli_fused_free(&l->f);
    free(l);
}

te_cli_graph_tasks *te_cli_graph_tasks_load(const char *cmd, const char *graph_path,
                                            const char *rules_path)
{
    return te_cli_graph_tasks_load_model(cmd, graph_path, NULL, rules_path, 0,
                                         TE_CLI_PRECISION_F32);
}

te_cli_graph_tasks *te_cli_graph_tasks_load_model(const char *cmd, const char *path,
                                                  const char *shapes, const char *rules_path,
                                                  int optimize, te_cli_precision prec)
{
    te_cli_graph_tasks *l = calloc(1, sizeof *l);
    if (!l) {
        fprintf(stderr, "tessera %s: out of memory\n", cmd);
        return NULL;
    }
    if (te_cli_fused_load_model(cmd, path, shapes, rules_path, 0, optimize, prec, &l->f)) {
        free(l);
        return NULL;
    }
    int ng = te_fuse_plan_group_count(l->f.plan);
    l->t = calloc((size_t)ng + 1, sizeof *l->t);
    for (int i = 0; l->t && i < ng; i++, l->n++) {
        gtask *k = &l->t[i];
        te_fuse_group gr;
        if (te_fuse_plan_group(l->f.plan, i, &gr) == TE_OK && gr.view) {
            l->views++; /* a reshape sharing its input's storage: no kernel to tune */
            continue;
        }
        k->ctx = te_ctx_create();
        if (!k->ctx || te_graph_group_expr_build(l->f.g, l->f.plan, i, k->ctx, &k->e)) {
            l->n++;
            fprintf(stderr, "tessera %s: %s\n", cmd,
                    k->ctx ? te_graph_errmsg(l->f.g) : "out of memory");
            te_cli_graph_tasks_free(l);
            return NULL;
        }
        k->weight = 1;
        for (int j = 0; j < i; j++)
            if (l->t[j].weight && !strcmp(l->t[j].e.key, k->e.key)) {
                l->t[j].weight++;
                k->weight = 0;
                break;
            }
        l->distinct += k->weight > 0;
    }
    if (!l->t) {
        fprintf(stderr, "tessera %s: out of memory\n", cmd);
        te_cli_graph_tasks_free(l);
        return NULL;
    }
    return l;
}

int te_cli_graph_tasks_add(const te_cli_graph_tasks *l, te_tuner *t)
{
    for (int i = 0; i < l->n; i++) {
        const gtask *k = &l->t[i];
        if (!k->weight)
            continue;
        int rc = te_graph_group_expr_add_task(t, &k->e, k->weight);
        if (rc != TE_OK)
            return rc;
    }
    return TE_OK;
}

int te_cli_graph_tasks_groups(const te_cli_graph_tasks *l) { return l ? l->n : 0; }
const te_cli_fused *te_cli_graph_tasks_fused(const te_cli_graph_tasks *l)
{
    return l ? &l->f : NULL;
}
int te_cli_graph_tasks_views(const te_cli_graph_tasks *l) { return l ? l->views : 0; }
int te_cli_graph_tasks_distinct(const te_cli_graph_tasks *l) { return l ? l->distinct : 0; }

struct te_cli_refs {
    const te_graph *g;
    int nv;
    double **want; /* per value of g: its reference, or NULL */
};

void te_cli_refs_free(te_cli_refs *r)
{
    if (!r)
        return;
    for (int v = 0; v < r->nv; v++)
        free(r->want[v]);
    free(r->want);
    free(r);
}

/* Evaluates values vals[0..n) of graph rg into the buffers dst[0..n) in one pass. */
static int eval_refs(const char *cmd, te_graph *rg, const void *const *in, int n, const int *vals,
                     double **dst)
{
    if (!n)
        return 0;
    if (te_graph_eval_reference(rg, in, n, vals, dst)) {
        fprintf(stderr, "tessera %s: reference: %s\n", cmd, te_graph_errmsg(rg));
        return -1;
    }
    return 0;
}

te_cli_refs *te_cli_refs_create(const char *cmd, te_graph *g, te_graph *ref, const te_fuse_plan *p,
                                const void *const *in)
{
    int nv = te_graph_value_count(g);
    te_cli_refs *r = calloc(1, sizeof *r);
    int *own = malloc(sizeof(int) * ((size_t)nv + 1));
    int *theirs = malloc(sizeof(int) * ((size_t)nv + 1));
    double **own_dst = malloc(sizeof(double *) * ((size_t)nv + 1));
    double **map_dst = malloc(sizeof(double *) * ((size_t)nv + 1));
    int bad = !r || !own || !theirs || !own_dst || !map_dst;
    if (!bad) {
        r->g = g;
        r->nv = nv;
        r->want = calloc((size_t)nv + 1, sizeof *r->want);
        bad = !r->want;
    }
    int n_own = 0, n_map = 0;
    for (int gi = 0; !bad && gi < te_fuse_plan_group_count(p); gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        for (int k = 0; !bad && k < gr.n_outputs; k++) {
            int v = gr.outputs[k];
            if (r->want[v])
                continue;
            int64_t n = te_graph_value_numel(g, v);
            r->want[v] = malloc(sizeof(double) * (size_t)(n ? n : 1));
            bad = !r->want[v];
            int w = ref ? te_graph_find(ref, te_graph_value_name(g, v)) : -1;
            if (bad)
                break;
            if (w >= 0 && te_graph_value_numel(ref, w) == n) {
                theirs[n_map] = w;
                map_dst[n_map++] = r->want[v];
            } else {
                own[n_own] = v;
                own_dst[n_own++] = r->want[v];
            }
        }
    }
    if (bad)
        fprintf(stderr, "tessera %s: out of memory\n", cmd);
    else if (eval_refs(cmd, g, in, n_own, own, own_dst) ||
             eval_refs(cmd, ref, in, n_map, theirs, map_dst))
        bad = 1;
    free(own), free(theirs), free(own_dst), free(map_dst);
    if (bad) {
        te_cli_refs_free(r);
        return NULL;
    }
    return r;
}

int te_cli_refs_compare(const te_cli_refs *r, int v, const void *got, double *worst, double *rms)
{
    if (!r || v < 0 || v >= r->nv || !r->want[v] || !got)
        return TE_ERR_ARG;
    const double *want = r->want[v];
    te_dtype dt = te_graph_value_dtype(r->g, v);
    int64_t n = te_graph_value_numel(r->g, v);
    double w = 0, ss = 0;
    for (int64_t j = 0; j < n; j++) {
        double x = te_dtype_load(dt, got, (size_t)j); /* f32, bf16, u8 / i32 (quantized) */
        double d = fabs(x - want[j]) / fmax(1.0, fabs(want[j]));
        if (!(d <= w))
            w = isnan(d) ? INFINITY : d;
        ss += want[j] * want[j];
    }
    *worst = w;
    *rms = sqrt(ss / (double)(n ? n : 1));
    return TE_OK;
}

int te_cli_group_own_error(const char *cmd, te_graph *g, const te_fuse_plan *p, te_graph_exec *e,
                           int gi, double *worst)
{
    *worst = INFINITY;
    te_ctx *ctx = te_ctx_create();
    if (!ctx)
        return TE_ERR_NOMEM;
    te_graph_group_expr ge;
    int rc = te_graph_group_expr_build(g, p, gi, ctx, &ge);
    const void *in[TE_GRAPH_GROUP_MAXIO] = {0};
    float *packed[TE_GRAPH_GROUP_MAXIO] = {0};
    double *out[TE_GRAPH_GROUP_MAXIO] = {0};
    for (int i = 0; rc == TE_OK && i < ge.n_in + ge.n_out; i++) {
        te_tensor *t = i < ge.n_in ? ge.ins[i] : ge.outs[i - ge.n_in];
        int v = i < ge.n_in ? ge.in_values[i] : ge.out_values[i - ge.n_in];
        if (te_tensor_dtype(t) != TE_F32 || te_graph_value_dtype(g, v) != TE_F32)
            rc = TE_ERR_UNSUPPORTED;
    }
    for (int i = 0; rc == TE_OK && i < ge.n_in; i++) {
        int v = ge.in_values[i];
        const float *d = te_graph_exec_value(e, v);
        if (!d) {
            rc = TE_ERR_ARG;
            break;
        }
        in[i] = d;
        if (ge.packed_nb[i] > 0) { /* the weights as the kernel reads them: in panels */
            int nd = te_graph_value_ndim(g, v);
            const int64_t *sh = te_graph_value_shape(g, v);
            int64_t k = ge.packed_trans[i] ? sh[nd - 1] : sh[nd - 2];
            int64_t n = ge.packed_trans[i] ? sh[nd - 2] : sh[nd - 1];
            packed[i] = malloc(sizeof(float) * (size_t)(k * n));
            rc = packed[i]
                     ? te_graph_pack_panels(d, k, n, ge.packed_trans[i], ge.packed_nb[i], packed[i])
                     : TE_ERR_NOMEM;
            in[i] = packed[i];
        }
    }
    for (int o = 0; rc == TE_OK && o < ge.n_out; o++)
        if (!(out[o] = malloc(sizeof(double) * (size_t)te_tensor_numel(ge.outs[o]))))
            rc = TE_ERR_NOMEM;
    if (rc == TE_OK)
        rc = te_reference_eval(ctx, ge.n_in, ge.ins, in, ge.n_out, ge.outs, out);
    if (rc == TE_OK) {
        double w = 0;
        for (int o = 0; o < ge.n_out; o++) {
            const float *got = te_graph_exec_value(e, ge.out_values[o]);
            int64_t n = te_tensor_numel(ge.outs[o]);
            for (int64_t j = 0; got && j < n; j++) {
                double d = fabs((double)got[j] - out[o][j]) / fmax(1.0, fabs(out[o][j]));
                if (!(d <= w))
                    w = isnan(d) ? INFINITY : d;
            }
            if (!got)
                w = INFINITY;
        }
        *worst = w;
    } else if (rc != TE_ERR_UNSUPPORTED) {
        fprintf(stderr, "tessera %s: group %d: its own float64 reference: %s\n", cmd, gi,
                te_ctx_errmsg(ctx));
    }
    for (int i = 0; i < TE_GRAPH_GROUP_MAXIO; i++)
        free(packed[i]), free(out[i]);
    te_ctx_free(ctx);
    return rc;
}
