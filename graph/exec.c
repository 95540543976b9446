/* Compiling and running a fused graph: every group of the plan becomes one tensor expression
 * (its operators chained on placeholders for the values it reads), built with te_build and the
 * default schedule; the graph runs group by group in plan order. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "tessera/backend.h"
#include "tessera/schedule.h"

typedef struct gkernel {
    te_ctx *ctx;
    te_module *mod;
    int nargs;
    int *args; /* value ids: the group's inputs, then its outputs */
} gkernel;

struct te_graph_exec {
    te_graph *g;
    int nk;
    gkernel *k;
    void **buf; /* per value: owned buffers for node outputs; constants point at their data */
};

void te_graph_exec_free(te_graph_exec *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nk; i++) {
        te_module_free(e->k[i].mod);
        te_ctx_free(e->k[i].ctx);
        free(e->k[i].args);
    }
    for (int v = 0; v < e->g->nv; v++)
        if (e->g->v[v].kind != TE_GRAPH_CONST)
            free(e->buf[v]);
    free(e->buf);
    free(e->k);
    free(e);
}

int te_graph_exec_kernel_count(const te_graph_exec *e) { return e ? e->nk : 0; }

const void *te_graph_exec_value(const te_graph_exec *e, int v)
{
    return e && v >= 0 && v < e->g->nv ? e->buf[v] : NULL;
}

static int64_t numel(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

/* Builds group gi as one kernel. */
static int compile_group(te_graph *g, const te_fuse_plan *p, int gi, const te_target *tgt,
                         gkernel *k)
{
    te_fuse_group gr;
    te_fuse_plan_group(p, gi, &gr);
    k->ctx = te_ctx_create();
    int *tens_of = malloc(sizeof(int) * ((size_t)g->nv + 1));
    te_tensor **t = calloc((size_t)g->nv + 1, sizeof *t);
    k->args = malloc(sizeof(int) * ((size_t)g->nv + 1));
    te_tensor **args = malloc(sizeof *args * ((size_t)g->nv + 1));
    int rc = TE_OK;
    if (!k->ctx || !tens_of || !t || !k->args || !args)
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    char *in_group = calloc((size_t)g->nn + 1, 1);
    if (!in_group)
        rc = TE_ERR_NOMEM;
    for (int i = 0; !rc && i < gr.n_nodes; i++)
        in_group[gr.nodes[i]] = 1;
    k->nargs = 0;
    /* Placeholders for every value read from outside the group. */
    for (int i = 0; !rc && i < gr.n_nodes; i++) {
        const te__gnode *nd = &g->n[gr.nodes[i]];
        for (int j = 0; j < nd->n_in && !rc; j++) {
            int v = nd->in[j];
            const te__gvalue *val = &g->v[v];
            if ((val->node >= 0 && in_group[val->node]) || t[v])
                continue;
            t[v] = te_placeholder(k->ctx, val->name, val->dtype, val->ndim, val->shape);
            if (!t[v])
                rc = te_ctx_errcode(k->ctx);
            k->args[k->nargs] = v;
            args[k->nargs++] = t[v];
        }
    }
    /* The group's operators, in order, on those tensors. */
    for (int i = 0; !rc && i < gr.n_nodes; i++) {
        const te__gnode *nd = &g->n[gr.nodes[i]];
        te_op_params kv;
        te_tensor *in[TE__G_MAXIO], *out[TE__G_MAXIO] = {0};
        const char *nm[TE__G_MAXIO];
        for (int j = 0; j < nd->n_in; j++)
            in[j] = t[nd->in[j]];
        for (int j = 0; j < nd->n_out; j++)
            nm[j] = g->v[nd->out[j]].name;
        rc = te_op_params_parse(k->ctx, nd->attrs, &kv);
        if (!rc)
            rc = nd->op->apply(k->ctx, nd->op, &kv, nd->n_in, in, nm, out);
        for (int j = 0; !rc && j < nd->n_out; j++)
            t[nd->out[j]] = out[j];
    }
    int n_in = k->nargs;
    for (int i = 0; !rc && i < gr.n_outputs; i++) {
        k->args[k->nargs] = gr.outputs[i];
        args[k->nargs++] = t[gr.outputs[i]];
    }
    te_schedule *s = NULL;
    if (!rc) {
        s = te_schedule_create(k->ctx, k->nargs - n_in, args + n_in);
        if (!s)
            rc = te_ctx_errcode(k->ctx) ? te_ctx_errcode(k->ctx) : TE_ERR_INTERNAL;
    }
    if (!rc) {
        char name[64];
        snprintf(name, sizeof name, "group%d_%.40s", gi, g->v[g->n[gr.nodes[0]].out[0]].name);
        rc = te_build(s, k->nargs, args, name, tgt, &k->mod);
    }
    if (rc)
        te__graph_error(g, rc, "compile: group %d (%s, first node '%s'): %s", gi, gr.rule,
                        g->v[g->n[gr.nodes[0]].out[0]].name,
                        k->ctx ? te_ctx_errmsg(k->ctx) : "out of memory");
    free(tens_of), free(t), free(args), free(in_group);
    return rc;
}

int te_graph_compile(te_graph *g, const te_fuse_plan *p, const te_target *target,
                     te_graph_exec **out)
{
    if (!g || !p || !out)
        return g ? te__graph_error(g, TE_ERR_ARG, "compile: bad arguments") : TE_ERR_ARG;
    *out = NULL;
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    te_graph_exec *e = calloc(1, sizeof *e);
    if (!e)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    e->g = g;
    e->buf = calloc((size_t)g->nv + 1, sizeof *e->buf);
    e->k = calloc((size_t)te_fuse_plan_group_count(p) + 1, sizeof *e->k);
    if (!e->buf || !e->k) {
        free(e->buf), free(e->k), free(e);
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    }
    int rc = TE_OK;
    for (int v = 0; !rc && v < g->nv; v++) {
        if (g->v[v].kind == TE_GRAPH_CONST) {
            e->buf[v] = g->v[v].data;
            continue;
        }
        size_t bytes = (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype);
        e->buf[v] = malloc(bytes ? bytes : 1);
        if (!e->buf[v])
            rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        else
            memset(e->buf[v], 0xff, bytes); /* NaN for floats: a value no kernel wrote shows */
    }
    for (int i = 0; !rc && i < te_fuse_plan_group_count(p); i++) {
        rc = compile_group(g, p, i, target, &e->k[i]);
        e->nk = i + 1;
    }
    if (rc) {
        te_graph_exec_free(e);
        return rc;
    }
    *out = e;
    return TE_OK;
}

int te_graph_run(te_graph_exec *e, const void *const *input_data, void *const *output_data)
{
    if (!e)
        return TE_ERR_ARG;
    te_graph *g = e->g;
    for (int i = 0, v; (v = te_graph_input_value(g, i)) >= 0; i++) {
        if (!input_data || !input_data[i])
            return te__graph_error(g, TE_ERR_ARG, "run: no data for input '%s'", g->v[v].name);
        memcpy(e->buf[v], input_data[i], (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype));
    }
    void *argv[2 * TE__G_MAXIO * 8 + 64];
    for (int i = 0; i < e->nk; i++) {
        gkernel *k = &e->k[i];
        if (k->nargs > (int)(sizeof argv / sizeof argv[0]))
            return te__graph_error(g, TE_ERR_UNSUPPORTED, "run: kernel %d has too many arguments",
                                   i);
        for (int a = 0; a < k->nargs; a++)
            argv[a] = e->buf[k->args[a]];
        int rc = te_module_run(k->mod, argv);
        if (rc)
            return te__graph_error(g, rc, "run: kernel %d failed", i);
    }
    for (int j = 0, v; output_data && (v = te_graph_output_value(g, j)) >= 0; j++)
        if (output_data[j])
            memcpy(output_data[j], e->buf[v],
                   (size_t)numel(&g->v[v]) * te_dtype_size(g->v[v].dtype));
    return TE_OK;
}
