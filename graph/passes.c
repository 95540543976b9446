/* Graph passes before fusion: dead-node elimination, common subexpression elimination and
 * constant folding (weight-only subgraphs, batch norm into the preceding convolution or
 * matmul). Each pass edits the node list, then compacts and rebuilds the graph's tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

int te_graph_dce(te_graph *g, int *removed)
{
    if (!g)
        return TE_ERR_ARG;
    int before = g->nn;
    int rc = te__graph_compact(g, NULL);
    if (removed)
        *removed = before - g->nn;
    return rc;
}

static int64_t vnumel(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

static bool same_const(const te__gvalue *a, const te__gvalue *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return memcmp(a->data, b->data, (size_t)vnumel(a) * te_dtype_size(a->dtype)) == 0;
}

int te_graph_cse(te_graph *g, int *merged)
{
    if (!g)
        return TE_ERR_ARG;
    int count = 0;
    /* Equal constants first, so nodes reading them become equal too. */
    for (int a = 0; a < g->nv; a++) {
        if (g->v[a].kind != TE_GRAPH_CONST)
            continue;
        for (int b = a + 1; b < g->nv; b++)
            if (g->v[b].kind == TE_GRAPH_CONST && !g->v[b].is_output &&
                te_graph_value_use_count(g, b) > 0 && same_const(&g->v[a], &g->v[b]))
                te__graph_replace_uses(g, b, a);
    }
    bool *keep = malloc(sizeof *keep * ((size_t)g->nn + 1));
    if (!keep)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    for (int n = 0; n < g->nn; n++) {
        keep[n] = true;
        te__gnode *nd = &g->n[n];
        for (int m = 0; m < n; m++) {
            te__gnode *o = &g->n[m];
            if (!keep[m] || o->op != nd->op || o->n_in != nd->n_in || strcmp(o->attrs, nd->attrs))
                continue;
            if (memcmp(o->in, nd->in, sizeof(int) * (size_t)nd->n_in))
                continue;
            for (int i = 0; i < nd->n_out; i++)
                te__graph_replace_uses(g, nd->out[i], o->out[i]);
            keep[n] = false;
            count++;
            break;
        }
    }
    int rc = te__graph_compact(g, keep);
    free(keep);
    if (merged)
        *merged = count;
    return rc;
}

/* ---- Constant folding --------------------------------------------------------------------- */

/* Evaluates node n (all inputs constant) and turns its outputs into constants. */
static int fold_node(te_graph *g, int n)
{
    te__gnode *nd = &g->n[n];
    te_tensor *outs[TE__G_MAXIO];
    double *res[TE__G_MAXIO] = {0};
    /* Every constant placeholder: a folded input still has its computed tensor (until the
     * rebuild), which reads the original constants. */
    te_tensor **ins = malloc(sizeof *ins * ((size_t)g->nv + 1));
    const void **data = malloc(sizeof *data * ((size_t)g->nv + 1));
    int nin = 0, rc = TE_OK;
    if (!ins || !data)
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    for (int v = 0; !rc && v < g->nv; v++)
        if (g->v[v].kind == TE_GRAPH_CONST && te_tensor_is_placeholder(g->v[v].t)) {
            ins[nin] = g->v[v].t;
            data[nin++] = g->v[v].data;
        }
    for (int i = 0; i < nd->n_out && !rc; i++) {
        outs[i] = g->v[nd->out[i]].t;
        res[i] = malloc(sizeof(double) * (size_t)vnumel(&g->v[nd->out[i]]));
        if (!res[i])
            rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    }
    if (!rc) {
        rc = te_reference_eval(g->ctx, nin, ins, data, nd->n_out, outs, res);
        if (rc) {
            te__graph_error(g, rc, "fold_constants: node '%s' (%s): %s", g->v[nd->out[0]].name,
                            nd->op->name, te_ctx_errmsg(g->ctx));
            te_ctx_clear_error(g->ctx);
        }
    }
    for (int i = 0; i < nd->n_out && !rc; i++) {
        te__gvalue *v = &g->v[nd->out[i]];
        void *d = malloc((size_t)vnumel(v) * te_dtype_size(v->dtype));
        if (!d) {
            rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
            break;
        }
        te__from_f64(res[i], v->dtype, vnumel(v), d);
        v->kind = TE_GRAPH_CONST;
        v->data = d;
        v->init = TE__INIT_DATA;
        v->node = -1;
    }
    for (int i = 0; i < nd->n_out; i++)
        free(res[i]);
    free(ins);
    free(data);
    return rc;
}

static bool is_const(const te_graph *g, int v) { return g->v[v].kind == TE_GRAPH_CONST; }

/* A new constant of f64 values `src` converted to dtype. Returns its id. */
static int add_const(te_graph *g, const char *base, te_dtype dtype, int ndim, const int64_t *shape,
                     const double *src)
{
    char name[TE__G_NAME];
    te__graph_unique_name(g, base, name, sizeof name);
    int id = te__graph_add_value(g, name, dtype, ndim, shape, TE_GRAPH_CONST);
    if (id < 0)
        return id;
    te__gvalue *v = &g->v[id];
    v->data = malloc((size_t)vnumel(v) * te_dtype_size(dtype));
    if (!v->data) {
        g->nv--;
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    }
    te__from_f64(src, dtype, vnumel(v), v->data);
    v->init = TE__INIT_DATA;
    return id;
}

/* Folds batch norm node `bn` into its producer (conv2d or matmul with a constant weight) when
 * possible: W' = W * s on the output-channel axis, then bias = beta - mean * s added by a new
 * add node that replaces the batch norm. Returns 1 when folded, 0 when not applicable, <0 on
 * error. */
static int fold_bn(te_graph *g, int bn)
{
    te__gnode *b = &g->n[bn];
    for (int i = 1; i < 5; i++)
        if (!is_const(g, b->in[i]))
            return 0;
    int c = b->in[0], p = g->v[c].node;
    if (p < 0 || g->v[c].is_output || te_graph_value_use_count(g, c) != 1)
        return 0;
    te__gnode *prod = &g->n[p];
    int w = prod->in[1];
    if (!is_const(g, w) || te_graph_value_use_count(g, w) != 1)
        return 0;
    te_op_params kv;
    if (te_op_params_parse(g->ctx, b->attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return 0;
    }
    int axis = (int)te__gop_attr_int(b->op, &kv, "axis");
    double eps = te__gop_attr_f64(b->op, &kv, "eps");
    te_op_params pkv;
    if (te_op_params_parse(g->ctx, prod->attrs, &pkv)) {
        te_ctx_clear_error(g->ctx);
        return 0;
    }
    int nd = g->v[c].ndim;
    if (axis < 0)
        axis += nd;
    const te__gvalue wcopy = g->v[w]; /* g->v moves when constants are added */
    const te__gvalue *wv = &wcopy;
    int w_axis;    /* the weight axis that carries output channels */
    int64_t inner; /* elements after w_axis in the weight */
    char buf[16];
    if (!strcmp(prod->op->name, "conv2d")) {
        int nhwc = !strcmp(te__gop_attr_str(prod->op, &pkv, "layout", buf, sizeof buf), "NHWC");
        if (axis != (nhwc ? 3 : 1))
            return 0;
        w_axis = nhwc ? 3 : 0;
    } else if (!strcmp(prod->op->name, "matmul")) {
        if (te__gop_attr_int(prod->op, &pkv, "trans_a") || axis != nd - 1)
            return 0;
        w_axis = te__gop_attr_int(prod->op, &pkv, "trans_b") ? 0 : 1;
    } else {
        return 0;
    }
    int64_t oc = wv->shape[w_axis];
    inner = 1;
    for (int d = w_axis + 1; d < wv->ndim; d++)
        inner *= wv->shape[d];
    int64_t nw = vnumel(wv);
    double *wd = malloc(sizeof(double) * (size_t)nw);
    double *prm = malloc(sizeof(double) * (size_t)(4 * oc));
    double *s = malloc(sizeof(double) * (size_t)oc), *bias = malloc(sizeof(double) * (size_t)oc);
    int rc = 0;
    if (!wd || !prm || !s || !bias) {
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        goto out;
    }
    te__to_f64(wv->data, wv->dtype, nw, wd);
    for (int i = 0; i < 4; i++)
        te__to_f64(g->v[b->in[1 + i]].data, g->v[b->in[1 + i]].dtype, oc, prm + i * oc);
    for (int64_t o = 0; o < oc; o++) {
        /* gamma, beta, mean, var; the expression's rsqrt(var + eps) rounded like the op. */
        s[o] = prm[o] / sqrt(prm[3 * oc + o] + eps);
        bias[o] = prm[oc + o] - prm[2 * oc + o] * s[o];
    }
    for (int64_t e = 0; e < nw; e++)
        wd[e] *= s[(e / inner) % oc];
    char base[TE__G_NAME + 8];
    snprintf(base, sizeof base, "%.30s_bn", wv->name);
    int nwid = add_const(g, base, wv->dtype, wv->ndim, wv->shape, wd);
    int64_t bshape[TE_MAX_DIMS];
    int bnd = nd - axis; /* [oc, 1, 1] for NCHW so it broadcasts on the right */
    bshape[0] = oc;
    for (int d = 1; d < bnd; d++)
        bshape[d] = 1;
    snprintf(base, sizeof base, "%.30s_bias", g->v[b->out[0]].name);
    int bid = nwid < 0 ? nwid : add_const(g, base, g->v[c].dtype, bnd, bshape, bias);
    if (bid < 0) {
        rc = bid;
        goto out;
    }
    /* Pointers into g->v moved with add_const; index again. */
    g->n[p].in[1] = nwid;
    b = &g->n[bn];
    b->op = te__gop_find("add");
    b->attrs[0] = 0;
    b->n_in = 2;
    b->in[1] = bid;
    rc = 1;
out:
    free(wd), free(prm), free(s), free(bias);
    return rc;
}

/* Appends node (op, attrs, inputs) named after base; its output id or a status. */
int te__graph_add_node(te_graph *g, const char *op, const char *attrs, int n_in, const int *in,
                       const char *base, const char *suffix)
{
    char want[TE__G_NAME + 16], name[TE__G_NAME];
    snprintf(want, sizeof want, "%.28s_%s", base, suffix);
    te__graph_unique_name(g, want, name, sizeof name);
    return te_graph_node(g, op, attrs, n_in, in, name);
}

/* Moves nodes [from, nn) to just after node `after` (they only read values defined before
 * it) and renumbers the producers. */
int te__graph_move_tail(te_graph *g, int from, int after)
{
    int k = g->nn - from;
    if (k <= 0)
        return TE_OK;
    te__gnode *tmp = malloc(sizeof *tmp * (size_t)k);
    if (!tmp)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    memcpy(tmp, g->n + from, sizeof *tmp * (size_t)k);
    memmove(g->n + after + 1 + k, g->n + after + 1, sizeof *tmp * (size_t)(from - after - 1));
    memcpy(g->n + after + 1, tmp, sizeof *tmp * (size_t)k);
    free(tmp);
    for (int n = 0; n < g->nn; n++)
        for (int i = 0; i < g->n[n].n_out; i++)
            g->v[g->n[n].out[i]].node = n;
    return TE_OK;
}

int te__graph_take_place(te_graph *g, int old, int out, int first_new, int after,
                         const char *suffix)
{
    te__graph_replace_uses(g, old, out);
    char base[TE__G_NAME], tmp[TE__G_NAME + 16], fresh[TE__G_NAME];
    snprintf(base, sizeof base, "%s", g->v[old].name);
    snprintf(tmp, sizeof tmp, "%.30s_%s", base, suffix);
    te__graph_unique_name(g, tmp, fresh, sizeof fresh);
    snprintf(g->v[old].name, sizeof g->v[old].name, "%s", fresh);
    snprintf(g->v[out].name, sizeof g->v[out].name, "%s", base);
    return te__graph_move_tail(g, first_new, after);
}

int te_graph_fold_constants(te_graph *g, int *folded)
{
    if (!g)
        return TE_ERR_ARG;
    int count = 0, rc = TE_OK;
    bool *keep = malloc(sizeof *keep * ((size_t)g->nn + 1));
    if (!keep)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    for (int n = 0; n < g->nn && !rc; n++) {
        keep[n] = true;
        te__gnode *nd = &g->n[n];
        bool all = nd->n_in > 0;
        for (int i = 0; i < nd->n_in; i++)
            all = all && is_const(g, nd->in[i]);
        if (all) {
            rc = fold_node(g, n);
            keep[n] = false;
            count++;
        } else if (!strcmp(nd->op->name, "batch_norm")) {
            int r = fold_bn(g, n);
            if (r < 0)
                rc = r;
            count += r > 0;
        }
    }
    if (!rc)
        rc = te__graph_compact(g, keep);
    free(keep);
    if (!rc)
        rc = te__graph_compact(g, NULL);
    if (folded)
        *folded = count;
    return rc;
}

static int fuse_qdq_quiet(te_graph *g, int *n) { return te_graph_fuse_qdq(g, NULL, n); }

/* te_graph_optimize's passes in order, each with its log line ("%d": its count). */
static const struct {
    const char *name;
    int (*run)(te_graph *g, int *count);
    const char *what;
} k_passes[] = {
    {"dce", te_graph_dce, "nodes removed"},
    {"cse", te_graph_cse, "nodes merged"},
    {"fuse_qdq", fuse_qdq_quiet, "matmuls onto integer arithmetic"},
    {"fold_constants", te_graph_fold_constants, "nodes folded"},
    {"cse", te_graph_cse, "nodes merged"},
    {"fuse_attention", te_graph_fuse_attention, "chains rewritten"},
    {"move_reshapes", te_graph_move_reshapes, "reshapes and transposes moved or removed"},
    {"cse", te_graph_cse, "nodes merged"},
};

int te_graph_optimize(te_graph *g, FILE *log)
{
    int rc = TE_OK;
    for (size_t i = 0; !rc && i < sizeof k_passes / sizeof *k_passes; i++) {
        int n = 0;
        rc = k_passes[i].run(g, &n);
        if (!rc && log)
            fprintf(log, "%s: %d %s\n", k_passes[i].name, n, k_passes[i].what);
    }
    return rc;
}
