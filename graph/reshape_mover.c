/* Moving reshapes and transposes out of the way (te_graph_move_reshapes), after XLA's
 * ReshapeMover. Front ends write layout changes between the operators that matter: the ONNX
 * importer folds a 3-D MatMul's leading axes into rows (reshape, matmul, reshape back), and
 * attention splits heads with reshape + transpose and merges them again. A reshape sitting
 * between a matmul and its bias add keeps the add (and the activation after it) out of the
 * matmul's kernel, and every reshape left between two groups is a copy. This pass sinks
 * reshapes through elementwise operators and row operators on the last axis, so they meet and
 * cancel, and composes what is left:
 *
 *   reshape(reshape(x))               -> reshape(x)
 *   reshape(x) to x's own shape       -> x            (and a transpose by the identity)
 *   transpose(transpose(x, p), q)     -> transpose(x, p o q)
 *   transpose(unit reshape(t))        -> reshape(transpose'(t)) when t is a transpose, so the
 *                                        two transposes compose (a unit reshape only adds or
 *                                        drops axes of extent 1)
 *   op(reshape(x), c, ...)            -> reshape(op(x, c', ...)) for an elementwise or
 *                                        broadcast op, or a row op (layer norm, RMS norm,
 *                                        softmax, log softmax) on the last axis, when the
 *                                        reshape keeps x's trailing axes that the other
 *                                        operands broadcast along; an operand of the full shape
 *                                        must itself be a reshape of x's shape, or a graph
 *                                        input or constant (reshaped too)
 *
 * Each rule moves a reshape towards the outputs or removes a node, so the rewriting ends; it
 * is applied one rewrite at a time until none applies (a bounded number of rounds). Values are
 * unchanged bit for bit: the rewritten graph computes the same elements in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

static int producer(const te_graph *g, int v)
{
    return g->v[v].kind == TE_GRAPH_NODE_OUTPUT ? g->v[v].node : -1;
}

static bool is_op(const te_graph *g, int n, const char *name)
{
    return n >= 0 && !strcmp(g->n[n].op->name, name);
}

static bool same_shape(const te__gvalue *a, const te__gvalue *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

/* Node n's transpose permutation (te_op_transpose's: output axis i is input axis perm[i]);
 * false when its attribute does not parse (the node was built, so it does). */
static bool transpose_perm(te_graph *g, int n, int *perm)
{
    int nd = g->v[g->n[n].in[0]].ndim;
    te_op_params kv;
    if (te_op_params_parse(g->ctx, g->n[n].attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return false;
    }
    char buf[96];
    const char *s = te__gop_attr_str(g->n[n].op, &kv, "perm", buf, sizeof buf);
    for (int d = 0; d < nd; d++)
        perm[d] = d;
    if (!*s) {
        if (nd >= 2)
            perm[nd - 1] = nd - 2, perm[nd - 2] = nd - 1;
        return true;
    }
    for (int d = 0; d < nd; d++) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x >= nd)
            return false;
        perm[d] = (int)x;
        s = *end == ':' ? end + 1 : end;
    }
    return true;
}

static void perm_attrs(const int *perm, int nd, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "perm=");
    for (int d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%d", d ? ":" : "", perm[d]);
}

static void shape_attrs(const te__gvalue *v, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "shape=");
    for (int d = 0; d < v->ndim && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? ":" : "", (long long)v->shape[d]);
}

/* A row operator normalizing along its input's last axis, or NULL: the attribute that names
 * the axis ("" when the operator has none and always uses the last). */
static const char *row_op_axis_key(te_graph *g, int n)
{
    static const char *const with_axis[] = {"layer_norm", "layer_norm_welford", "softmax",
                                            "softmax_online", "log_softmax"};
    if (is_op(g, n, "rms_norm"))
        return "";
    for (size_t i = 0; i < sizeof with_axis / sizeof *with_axis; i++)
        if (is_op(g, n, with_axis[i])) {
            te_op_params kv;
            if (te_op_params_parse(g->ctx, g->n[n].attrs, &kv)) {
                te_ctx_clear_error(g->ctx);
                return NULL;
            }
            int64_t ax = te__gop_attr_int(g->n[n].op, &kv, "axis");
            int nd = g->v[g->n[n].in[0]].ndim;
            return ax == -1 || ax == nd - 1 ? "axis" : NULL;
        }
    return NULL;
}

/* attrs with key set to val (appended when absent). */
static void set_attr(const char *attrs, const char *key, const char *val, char *out, size_t n)
{
    size_t k = 0, kl = strlen(key);
    int found = 0;
    out[0] = 0;
    for (const char *p = attrs; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        if (len > kl && !strncmp(p, key, kl) && (p[kl] == '=' || p[kl] == ' ')) {
            k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s%s=%s", k ? "," : "", key, val);
            found = 1;
        } else if (len) {
            k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s%.*s", k ? "," : "", (int)len, p);
        }
        p = e ? e + 1 : p + len;
    }
    if (!found)
        snprintf(out + k, k < n ? n - k : 0, "%s%s=%s", k ? "," : "", key, val);
}

/* The elementwise and broadcast operators a reshape commutes with: their output element
 * depends on the operands' elements at the same (broadcast) index only; batch_norm (a channel
 * axis) and expand (a target shape) have attributes about the shape, user operators are not
 * known. */
static bool pointwise(const te_graph *g, int n)
{
    const te__gop *op = g->n[n].op;
    if (te__gop_is_user(op) || (op->kind != TE_KIND_ELEMWISE && op->kind != TE_KIND_BROADCAST))
        return false;
    return !strstr(op->attrs, "axis") && !strstr(op->attrs, "shape");
}

/* Number of trailing axes on which a and b agree. */
static int common_suffix(const te__gvalue *a, const te__gvalue *b)
{
    int k = 0;
    while (k < a->ndim && k < b->ndim && a->shape[a->ndim - 1 - k] == b->shape[b->ndim - 1 - k])
        k++;
    return k;
}

/* Rank of v without its leading axes of extent 1. */
static int stripped_rank(const te__gvalue *v)
{
    int d = 0;
    while (d < v->ndim && v->shape[d] == 1)
        d++;
    return v->ndim - d;
}

static bool movable_operand(const te_graph *g, int v)
{
    return g->v[v].kind == TE_GRAPH_INPUT || g->v[v].kind == TE_GRAPH_CONST;
}

/* The end of a rewrite of node n whose new nodes start at first_new and compute value y in
 * another shape: a reshape of y to n's output shape takes the place of n's output (its
 * readers and name). 1, or a status. */
static int reshape_into_place(te_graph *g, int n, int y, int first_new)
{
    char attrs[TE__G_ATTRS], base[TE__G_NAME];
    snprintf(base, sizeof base, "%s", g->v[g->n[n].out[0]].name);
    shape_attrs(&g->v[g->n[n].out[0]], attrs, sizeof attrs);
    int z = te__graph_add_node(g, "reshape", attrs, 1, &y, base, "view");
    if (z < 0)
        return z;
    int rc = te__graph_take_place(g, g->n[n].out[0], z, first_new, n, "pre");
    return rc ? rc : 1;
}

/* Rewrites node n = op(reshape(x), ...) into reshape(op(x, ...)) when it may (see the file's
 * comment). 1 when rewritten, 0 when not, or a status. */
static int sink_through(te_graph *g, int n)
{
    te__gnode *nd = &g->n[n];
    const char *axis_key = NULL;
    if (nd->n_out != 1 || (!pointwise(g, n) && !(axis_key = row_op_axis_key(g, n))))
        return 0;
    const te__gvalue *out = &g->v[nd->out[0]];
    int src = -1; /* a reshape input's source value: the shape S the op moves to */
    for (int i = 0; i < nd->n_in; i++) {
        int r = producer(g, nd->in[i]);
        if (is_op(g, r, "reshape") && same_shape(&g->v[nd->in[i]], out)) {
            int x = g->n[r].in[0];
            if (src < 0)
                src = x;
            else if (!same_shape(&g->v[x], &g->v[src]))
                return 0;
        }
    }
    if (src < 0)
        return 0;
    const te__gvalue *S = &g->v[src];
    int k = common_suffix(S, out);
    if (axis_key && k < 1) /* the normalized axis must stay the last one */
        return 0;
    /* Each operand: its source (x), the graph input or constant reshaped to S (-2), or
     * itself (broadcast along the trailing axes S and the output share). */
    int plan[TE__G_MAXIO];
    for (int i = 0; i < nd->n_in; i++) {
        const te__gvalue *c = &g->v[nd->in[i]];
        int r = producer(g, nd->in[i]);
        if (same_shape(c, out)) {
            if (is_op(g, r, "reshape") && same_shape(&g->v[g->n[r].in[0]], S))
                plan[i] = g->n[r].in[0];
            else if (movable_operand(g, nd->in[i]))
                plan[i] = -2;
            else
                return 0;
        } else {
            if (stripped_rank(c) > k || c->ndim > S->ndim)
                return 0;
            plan[i] = nd->in[i];
        }
    }
    int first_new = g->nn, ins[TE__G_MAXIO];
    char attrs[TE__G_ATTRS], base[TE__G_NAME];
    snprintf(base, sizeof base, "%s", out->name);
    shape_attrs(S, attrs, sizeof attrs);
    for (int i = 0; i < nd->n_in; i++) {
        ins[i] = plan[i];
        if (plan[i] == -2) {
            int in_i = g->n[n].in[i];
            ins[i] = te__graph_add_node(g, "reshape", attrs, 1, &in_i, g->v[in_i].name, "rs");
            if (ins[i] < 0)
                return ins[i];
        }
    }
    char op_attrs[TE__G_ATTRS];
    snprintf(op_attrs, sizeof op_attrs, "%s", g->n[n].attrs);
    if (axis_key && *axis_key)
        set_attr(g->n[n].attrs, axis_key, "-1", op_attrs, sizeof op_attrs);
    int y = te__graph_add_node(g, g->n[n].op->name, op_attrs, g->n[n].n_in, ins, base, "rs");
    return y < 0 ? y : reshape_into_place(g, n, y, first_new);
}

/* transpose(reshape(t)) with t a transpose and the reshape adding or dropping unit axes only:
 * reshape(transpose'(t)). 1 when rewritten, 0 when not, or a status. */
static int lift_transpose(te_graph *g, int n)
{
    int r = producer(g, g->n[n].in[0]);
    if (!is_op(g, r, "reshape") || !is_op(g, producer(g, g->n[r].in[0]), "transpose"))
        return 0;
    const te__gvalue *t = &g->v[g->n[r].in[0]], *rv = &g->v[g->n[r].out[0]];
    /* The non-unit axes of t and of the reshape's output, in order, must be the same. */
    int tmap[TE_MAX_DIMS], nt = 0, rmap[TE_MAX_DIMS], nr = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1)
            tmap[nt++] = d;
    for (int d = 0; d < rv->ndim; d++)
        if (rv->shape[d] != 1)
            rmap[nr++] = d;
    if (nt != nr)
        return 0;
    int t_of_r[TE_MAX_DIMS]; /* reshape output axis -> t's axis (-1 for a unit axis) */
    for (int d = 0; d < rv->ndim; d++)
        t_of_r[d] = -1;
    for (int i = 0; i < nt; i++) {
        if (t->shape[tmap[i]] != rv->shape[rmap[i]])
            return 0;
        t_of_r[rmap[i]] = tmap[i];
    }
    int p[TE_MAX_DIMS], q[TE_MAX_DIMS], nq = 0;
    if (!transpose_perm(g, n, p))
        return 0;
    for (int d = 0; d < t->ndim; d++) /* t's unit axes first: they do not move any element */
        if (t->shape[d] == 1)
            q[nq++] = d;
    for (int i = 0; i < rv->ndim; i++)
        if (t_of_r[p[i]] >= 0)
            q[nq++] = t_of_r[p[i]];
    int first_new = g->nn, tin = g->n[r].in[0];
    char attrs[TE__G_ATTRS], base[TE__G_NAME];
    snprintf(base, sizeof base, "%s", g->v[g->n[n].out[0]].name);
    perm_attrs(q, t->ndim, attrs, sizeof attrs);
    int y = te__graph_add_node(g, "transpose", attrs, 1, &tin, base, "lift");
    return y < 0 ? y : reshape_into_place(g, n, y, first_new);
}

/* The rewrites that need no new node: chains collapse, identities go. 1 when node n was
 * rewritten, else 0. */
static int collapse(te_graph *g, int n)
{
    te__gnode *nd = &g->n[n];
    int in = nd->in[0], r = producer(g, in);
    bool reshape = is_op(g, n, "reshape"), transpose = is_op(g, n, "transpose");
    if (!reshape && !transpose)
        return 0;
    if (reshape && is_op(g, r, "reshape")) {
        nd->in[0] = g->n[r].in[0];
        return 1;
    }
    int p[TE_MAX_DIMS], nd_in = g->v[in].ndim;
    if (transpose && !transpose_perm(g, n, p))
        return 0;
    if (transpose && is_op(g, r, "transpose")) {
        int p0[TE_MAX_DIMS], q[TE_MAX_DIMS];
        if (!transpose_perm(g, r, p0))
            return 0;
        for (int d = 0; d < nd_in; d++) /* out[i] = mid[p[i]] = x[p0[p[i]]] */
            q[d] = p0[p[d]];
        nd->in[0] = g->n[r].in[0];
        perm_attrs(q, nd_in, nd->attrs, sizeof nd->attrs);
        return 1;
    }
    bool identity = reshape && same_shape(&g->v[in], &g->v[nd->out[0]]);
    if (transpose) {
        identity = true;
        for (int d = 0; d < nd_in; d++)
            identity = identity && p[d] == d;
    }
    /* An output keeps its node: its name is what the user asks for. */
    if (!identity || g->v[nd->out[0]].is_output)
        return 0;
    te__graph_replace_uses(g, nd->out[0], in);
    return 1;
}

int te_graph_move_reshapes(te_graph *g, int *moved)
{
    if (!g)
        return TE_ERR_ARG;
    int count = 0, rc = TE_OK;
    for (int round = 0, limit = 4 * g->nn + 16; !rc && round < limit; round++) {
        int done = 0;
        for (int n = 0; !done && n < g->nn; n++) {
            done = collapse(g, n);
            if (!done && is_op(g, n, "transpose"))
                done = lift_transpose(g, n);
            if (!done)
                done = sink_through(g, n);
            if (done < 0)
                rc = done;
        }
        if (rc || !done)
            break;
        count++;
        rc = te__graph_compact(g, NULL);
    }
    if (moved)
        *moved = count;
    return rc;
}
