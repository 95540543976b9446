/* Graphs of library operators: values, nodes, checking on construction, reference
 * evaluation. Every value's tensor lives in the graph's own context, so a node is checked by
 * building its operator on its inputs' tensors and the whole graph evaluates with
 * te_reference_eval. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

int te__graph_error(te_graph *g, int code, const char *fmt, ...)
{
    if (g && !g->code) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->msg, sizeof g->msg, fmt, ap);
        va_end(ap);
        g->code = code;
    }
    return code;
}

te_graph *te_graph_create(void)
{
    te_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->ctx = te_ctx_create();
    if (!g->ctx) {
        free(g);
        return NULL;
    }
    return g;
}

void te_graph_free(te_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nv; i++)
        free(g->v[i].data);
    free(g->v);
    free(g->n);
    te_ctx_free(g->ctx);
    free(g);
}

const char *te_graph_errmsg(const te_graph *g) { return g ? g->msg : "graph is NULL"; }
int te_graph_errcode(const te_graph *g) { return g ? g->code : TE_ERR_ARG; }

void te_graph_clear_error(te_graph *g)
{
    if (g) {
        g->code = TE_OK;
        g->msg[0] = 0;
    }
}

/* ---- Values ------------------------------------------------------------------------------- */

static int valid_name(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (!(isalnum((unsigned char)s[n]) || s[n] == '_'))
            return 0;
    return n < TE__G_NAME;
}

int te_graph_find(const te_graph *g, const char *name)
{
    for (int i = 0; g && name && i < g->nv; i++)
        if (strcmp(g->v[i].name, name) == 0)
            return i;
    return TE_ERR_NOT_FOUND;
}

void te__graph_unique_name(const te_graph *g, const char *base, char *out, size_t n)
{
    snprintf(out, n, "%.30s", base);
    for (int k = 1; te_graph_find(g, out) >= 0; k++)
        snprintf(out, n, "%.30s_%d", base, k);
}

int te__graph_add_value(te_graph *g, const char *name, te_dtype dtype, int ndim,
                        const int64_t *shape, te_graph_value_kind kind)
{
    if (g->nv == g->capv) {
        int cap = g->capv ? 2 * g->capv : 16;
        te__gvalue *p = realloc(g->v, sizeof *p * (size_t)cap);
        if (!p)
            return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        g->v = p;
        g->capv = cap;
    }
    te__gvalue *v = &g->v[g->nv];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->dtype = dtype;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        v->shape[d] = shape[d];
    v->kind = kind;
    v->node = -1;
    return g->nv++;
}

static int64_t numel_of(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

/* Checks a new leaf value (input or constant) and makes its placeholder. */
static int new_leaf(te_graph *g, const char *what, const char *name, te_dtype dtype, int ndim,
                    const int64_t *shape, te_graph_value_kind kind)
{
    if (!g)
        return TE_ERR_ARG;
    if (!valid_name(name))
        return te__graph_error(g, TE_ERR_ARG,
                               "%s '%s': a name is a C identifier of at most %d characters", what,
                               name ? name : "(null)", TE__G_NAME - 1);
    if (te_graph_find(g, name) >= 0)
        return te__graph_error(g, TE_ERR_ARG, "%s '%s': the name is already used", what, name);
    if (ndim < 1 || ndim > TE_MAX_DIMS || !shape)
        return te__graph_error(g, TE_ERR_SHAPE, "%s '%s': rank %d is outside 1..%d", what, name,
                               ndim, TE_MAX_DIMS);
    if ((unsigned)dtype >= TE_DTYPE_COUNT || dtype == TE_BOOL)
        return te__graph_error(g, TE_ERR_DTYPE, "%s '%s': dtype %d is not a value dtype", what,
                               name, (int)dtype);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return te__graph_error(g, TE_ERR_SHAPE, "%s '%s': extent %lld of axis %d is < 1", what,
                                   name, (long long)shape[d], d);
        if (n > INT64_MAX / shape[d])
            return te__graph_error(g, TE_ERR_OVERFLOW, "%s '%s': too many elements", what, name);
        n *= shape[d];
    }
    te_tensor *t = te_placeholder(g->ctx, name, dtype, ndim, shape);
    if (!t) {
        int rc = te__graph_error(g, te_ctx_errcode(g->ctx), "%s '%s': %s", what, name,
                                 te_ctx_errmsg(g->ctx));
        te_ctx_clear_error(g->ctx);
        return rc;
    }
    int id = te__graph_add_value(g, name, dtype, ndim, shape, kind);
    if (id >= 0)
        g->v[id].t = t;
    return id;
}

int te_graph_input(te_graph *g, const char *name, te_dtype dtype, int ndim, const int64_t *shape)
{
    return new_leaf(g, "input", name, dtype, ndim, shape, TE_GRAPH_INPUT);
}

int te_graph_const(te_graph *g, const char *name, te_dtype dtype, int ndim, const int64_t *shape,
                   const void *data)
{
    if (g && !data)
        return te__graph_error(g, TE_ERR_ARG, "const '%s': data is NULL", name ? name : "");
    int id = new_leaf(g, "const", name, dtype, ndim, shape, TE_GRAPH_CONST);
    if (id < 0)
        return id;
    size_t bytes = (size_t)numel_of(&g->v[id]) * te_dtype_size(dtype);
    g->v[id].data = malloc(bytes ? bytes : 1);
    if (!g->v[id].data) {
        g->nv--;
        return te__graph_error(g, TE_ERR_NOMEM, "const '%s': out of memory (%zu bytes)", name,
                               bytes);
    }
    memcpy(g->v[id].data, data, bytes);
    g->v[id].init = TE__INIT_DATA;
    return id;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void te__to_f64(const void *src, te_dtype dtype, int64_t n, double *dst)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dtype) {
        case TE_F32:
            dst[i] = ((const float *)src)[i];
            break;
        case TE_F64:
            dst[i] = ((const double *)src)[i];
            break;
        case TE_I32:
            dst[i] = ((const int32_t *)src)[i];
            break;
        case TE_I64:
            dst[i] = (double)((const int64_t *)src)[i];
            break;
        case TE_I8:
            dst[i] = ((const int8_t *)src)[i];
            break;
        case TE_U8:
            dst[i] = ((const uint8_t *)src)[i];
            break;
        default:
            dst[i] = ((const uint8_t *)src)[i] != 0;
            break;
        }
    }
}

void te__from_f64(const double *src, te_dtype dtype, int64_t n, void *dst)
{
    for (int64_t i = 0; i < n; i++) {
        double x = src[i];
        switch (dtype) {
        case TE_F32:
            ((float *)dst)[i] = (float)x;
            break;
        case TE_F64:
            ((double *)dst)[i] = x;
            break;
        case TE_I32:
            ((int32_t *)dst)[i] = (int32_t)llround(x);
            break;
        case TE_I64:
            ((int64_t *)dst)[i] = (int64_t)llround(x);
            break;
        case TE_I8:
            ((int8_t *)dst)[i] = (int8_t)llround(x);
            break;
        case TE_U8:
            ((uint8_t *)dst)[i] = (uint8_t)llround(x);
            break;
        default:
            ((uint8_t *)dst)[i] = x != 0;
            break;
        }
    }
}

int te__fill_random(void *data, te_dtype dtype, int64_t n, uint64_t seed, double lo, double hi)
{
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    int is_int = dtype != TE_F32 && dtype != TE_F64;
    for (int64_t i = 0; i < n; i++) {
        double x;
        do {
            double u = (double)(splitmix(&s) >> 11) * (1.0 / 9007199254740992.0);
            x = lo + (hi - lo) * u;
            if (is_int)
                x = floor(x);
            if (dtype == TE_F32)
                x = (float)x;
        } while (x == 0 && (lo != 0 || hi != 0) && !(is_int && hi - lo <= 1));
        te__from_f64(&x, dtype, 1, (char *)data + (size_t)i * te_dtype_size(dtype));
    }
    return TE_OK;
}

int te_graph_const_random(te_graph *g, const char *name, te_dtype dtype, int ndim,
                          const int64_t *shape, uint64_t seed, double lo, double hi)
{
    if (!g)
        return TE_ERR_ARG;
    if (dtype == TE_BOOL || !(lo < hi))
        return te__graph_error(g, TE_ERR_ARG, "const '%s': random needs lo < hi and a value dtype",
                               name ? name : "");
    int id = new_leaf(g, "const", name, dtype, ndim, shape, TE_GRAPH_CONST);
    if (id < 0)
        return id;
    int64_t n = numel_of(&g->v[id]);
    g->v[id].data = malloc((size_t)n * te_dtype_size(dtype));
    if (!g->v[id].data) {
        g->nv--;
        return te__graph_error(g, TE_ERR_NOMEM, "const '%s': out of memory", name);
    }
    te__fill_random(g->v[id].data, dtype, n, seed, lo, hi);
    g->v[id].init = TE__INIT_RANDOM;
    g->v[id].seed = seed;
    g->v[id].lo = lo;
    g->v[id].hi = hi;
    return id;
}

/* ---- Nodes -------------------------------------------------------------------------------- */

/* Builds node n's operator on its inputs' tensors in g->ctx, writing the output tensors. On
 * failure the message names the node and (where the operator's message does) the input. */
static int apply_node(te_graph *g, te__gnode *nd, const char *const *names, te_tensor **outs)
{
    const te__gop *op = nd->op;
    te_op_params kv;
    te_tensor *in[TE__G_MAXIO];
    int rc = te_op_params_parse(g->ctx, nd->attrs, &kv);
    if (!rc)
        rc = te__gop_check_attrs(g->ctx, op, &kv);
    if (!rc) {
        for (int i = 0; i < nd->n_in; i++)
            in[i] = g->v[nd->in[i]].t;
        const char *nm[TE__G_MAXIO + 1] = {0}; /* NULL after the last: split counts them */
        for (int i = 0; i < nd->n_out; i++)
            nm[i] = names[i];
        rc = op->apply(g->ctx, op, &kv, nd->n_in, in, nm, outs);
    }
    if (rc) {
        te__graph_error(g, rc, "node '%s' (%s): %s", names[0], op->name, te_ctx_errmsg(g->ctx));
        te_ctx_clear_error(g->ctx);
    }
    return rc;
}

int te_graph_node_multi(te_graph *g, const char *opname, const char *attrs, int n_in,
                        const int *inputs, int n_out, const char *const *names, int *outs)
{
    if (!g)
        return TE_ERR_ARG;
    if (g->code && n_in > 0 && inputs)
        for (int i = 0; i < n_in; i++)
            if (inputs[i] < 0)
                return g->code; /* an earlier failure: keep its message */
    char auto_name[TE__G_NAME];
    const char *nm0 = n_out > 0 && names && names[0] ? names[0] : NULL;
    if (!nm0) {
        te__graph_unique_name(g, opname && valid_name(opname) ? opname : "node", auto_name,
                              sizeof auto_name);
        nm0 = auto_name;
    }
    const te__gop *op = te__gop_find(opname);
    if (!op)
        return te__graph_error(g, TE_ERR_NOT_FOUND,
                               "node '%s': unknown operator '%s' (see `tessera fuse --ops`)", nm0,
                               opname ? opname : "(null)");
    if (op->n_out == 0 && (n_out < 1 || n_out > TE__G_MAXIO || !outs))
        return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): takes 1 to %d outputs, %d given",
                               nm0, op->name, TE__G_MAXIO, n_out);
    if ((op->n_out && n_out != op->n_out) || !outs)
        return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): has %d outputs, %d names given", nm0,
                               op->name, op->n_out, n_out);
    if (n_in < op->min_in || n_in > op->max_in || (n_in && !inputs))
        return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): takes %s, %d inputs given", nm0,
                               op->name, op->inputs, n_in);
    int ref = 0; /* the first input whose dtype the others share */
    while (ref + 1 < n_in && te__gop_input_any_dtype(op, ref))
        ref++;
    for (int i = 0; i < n_in; i++) {
        if (inputs[i] < 0 || inputs[i] >= g->nv)
            return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): input %d is not a value (id %d)",
                                   nm0, op->name, i + 1, inputs[i]);
        if (g->v[inputs[i]].dtype != g->v[inputs[ref]].dtype && !te__gop_input_any_dtype(op, i))
            return te__graph_error(g, TE_ERR_DTYPE,
                                   "node '%s' (%s): input %d '%s' has dtype %s but input %d '%s' "
                                   "has %s",
                                   nm0, op->name, i + 1, g->v[inputs[i]].name,
                                   te_dtype_str(g->v[inputs[i]].dtype), ref + 1,
                                   g->v[inputs[ref]].name, te_dtype_str(g->v[inputs[ref]].dtype));
    }
    const char *nm[TE__G_MAXIO + 1] = {0}; /* NULL after the last: split counts them */
    char autos[TE__G_MAXIO][TE__G_NAME];
    for (int i = 0; i < n_out; i++) {
        nm[i] = i == 0 ? nm0 : names && names[i] ? names[i] : NULL;
        if (!nm[i]) {
            snprintf(autos[i], sizeof autos[i], "%.27s_%d", nm0, i); /* 27 + 1 + 11 < TE__G_NAME */
            nm[i] = autos[i];
        }
        if (!valid_name(nm[i]))
            return te__graph_error(g, TE_ERR_ARG,
                                   "node '%s' (%s): output name '%s' is not a C identifier of at "
                                   "most %d characters",
                                   nm0, op->name, nm[i], TE__G_NAME - 1);
        if (te_graph_find(g, nm[i]) >= 0)
            return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): the name '%s' is already used",
                                   nm0, op->name, nm[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(nm[i], nm[j]) == 0)
                return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): output name '%s' twice", nm0,
                                       op->name, nm[i]);
    }
    te__gnode nd = {0};
    nd.op = op;
    if (attrs && strlen(attrs) >= sizeof nd.attrs)
        return te__graph_error(g, TE_ERR_ARG, "node '%s' (%s): attributes are too long", nm0,
                               op->name);
    snprintf(nd.attrs, sizeof nd.attrs, "%s", attrs ? attrs : "");
    nd.n_in = n_in;
    for (int i = 0; i < n_in; i++)
        nd.in[i] = inputs[i];
    nd.n_out = n_out;
    te_tensor *ts[TE__G_MAXIO] = {0};
    int rc = apply_node(g, &nd, nm, ts);
    if (rc)
        return rc;
    if (g->nn == g->capn) {
        int cap = g->capn ? 2 * g->capn : 16;
        te__gnode *p = realloc(g->n, sizeof *p * (size_t)cap);
        if (!p)
            return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        g->n = p;
        g->capn = cap;
    }
    int node = g->nn;
    nd.n_out = n_out;
    for (int i = 0; i < n_out; i++) {
        int v = te__graph_add_value(g, nm[i], te_tensor_dtype(ts[i]), te_tensor_ndim(ts[i]),
                                    te_tensor_shape(ts[i]), TE_GRAPH_NODE_OUTPUT);
        if (v < 0) {
            g->nv -= i;
            return v;
        }
        g->v[v].node = node;
        g->v[v].slot = i;
        g->v[v].t = ts[i];
        nd.out[i] = v;
        outs[i] = v;
    }
    g->n[g->nn++] = nd;
    return TE_OK;
}

int te_graph_node(te_graph *g, const char *op, const char *attrs, int n_in, const int *inputs,
                  const char *name)
{
    const te__gop *o = te__gop_find(op);
    if (g && o && o->n_out > 1)
        return te__graph_error(g, TE_ERR_ARG,
                               "node '%s' (%s): has %d outputs; use te_graph_node_multi",
                               name ? name : op, op, o->n_out);
    int out = -1;
    int rc = te_graph_node_multi(g, op, attrs, n_in, inputs, 1, (const char *[]){name}, &out);
    return rc ? rc : out;
}

int te_graph_output(te_graph *g, int value)
{
    if (!g)
        return TE_ERR_ARG;
    if (value < 0 && g->code)
        return g->code;
    if (value < 0 || value >= g->nv)
        return te__graph_error(g, TE_ERR_ARG, "output: %d is not a value", value);
    g->v[value].is_output = 1;
    return TE_OK;
}

/* ---- Rebuilding and editing --------------------------------------------------------------- */

int te__graph_rebuild(te_graph *g)
{
    te_ctx *old = g->ctx, *ctx = te_ctx_create();
    if (!ctx)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    g->ctx = ctx;
    for (int i = 0; i < g->nv; i++) {
        te__gvalue *v = &g->v[i];
        v->t = NULL;
        if (v->kind != TE_GRAPH_NODE_OUTPUT)
            v->t = te_placeholder(ctx, v->name, v->dtype, v->ndim, v->shape);
    }
    for (int n = 0; n < g->nn; n++) {
        te__gnode *nd = &g->n[n];
        const char *nm[TE__G_MAXIO + 1] = {0}; /* NULL after the last: split counts them */
        te_tensor *ts[TE__G_MAXIO] = {0};
        for (int i = 0; i < nd->n_out; i++)
            nm[i] = g->v[nd->out[i]].name;
        int rc = apply_node(g, nd, nm, ts);
        if (rc) {
            te_ctx_free(old);
            return rc;
        }
        for (int i = 0; i < nd->n_out; i++) {
            te__gvalue *v = &g->v[nd->out[i]];
            v->t = ts[i];
            v->ndim = te_tensor_ndim(ts[i]);
            memcpy(v->shape, te_tensor_shape(ts[i]), sizeof(int64_t) * (size_t)v->ndim);
        }
    }
    te_ctx_free(old);
    return TE_OK;
}

void te__graph_replace_uses(te_graph *g, int from, int to)
{
    for (int n = 0; n < g->nn; n++)
        for (int i = 0; i < g->n[n].n_in; i++)
            if (g->n[n].in[i] == from)
                g->n[n].in[i] = to;
    if (g->v[from].is_output) {
        g->v[from].is_output = 0;
        g->v[to].is_output = 1;
    }
}

int te__graph_compact(te_graph *g, const bool *keep_node_in)
{
    bool *keep = calloc((size_t)g->nn + 1, sizeof *keep);
    bool *live = calloc((size_t)g->nv + 1, sizeof *live);
    int *vmap = malloc(sizeof(int) * ((size_t)g->nv + 1));
    int *nmap = malloc(sizeof(int) * ((size_t)g->nn + 1));
    if (!keep || !live || !vmap || !nmap) {
        free(keep), free(live), free(vmap), free(nmap);
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    }
    if (keep_node_in) {
        memcpy(keep, keep_node_in, sizeof *keep * (size_t)g->nn);
    } else {
        for (int v = 0; v < g->nv; v++)
            live[v] = g->v[v].is_output;
        for (int n = g->nn - 1; n >= 0; n--) {
            for (int i = 0; i < g->n[n].n_out; i++)
                keep[n] = keep[n] || live[g->n[n].out[i]];
            if (keep[n])
                for (int i = 0; i < g->n[n].n_in; i++)
                    live[g->n[n].in[i]] = true;
        }
    }
    /* Values stay when they are inputs, outputs of kept nodes or constants read by kept nodes. */
    memset(live, 0, sizeof *live * (size_t)g->nv);
    for (int n = 0; n < g->nn; n++)
        if (keep[n]) {
            for (int i = 0; i < g->n[n].n_in; i++)
                live[g->n[n].in[i]] = true;
            for (int i = 0; i < g->n[n].n_out; i++)
                live[g->n[n].out[i]] = true;
        }
    int nv = 0;
    for (int v = 0; v < g->nv; v++) {
        te__gvalue *val = &g->v[v];
        bool k = val->kind == TE_GRAPH_INPUT || live[v] ||
                 (val->is_output && val->kind == TE_GRAPH_CONST);
        if (!k) {
            free(val->data);
            vmap[v] = -1;
            continue;
        }
        vmap[v] = nv;
        g->v[nv++] = *val;
    }
    int nn = 0;
    for (int n = 0; n < g->nn; n++) {
        if (!keep[n]) {
            nmap[n] = -1;
            continue;
        }
        nmap[n] = nn;
        te__gnode nd = g->n[n];
        for (int i = 0; i < nd.n_in; i++)
            nd.in[i] = vmap[nd.in[i]];
        for (int i = 0; i < nd.n_out; i++)
            nd.out[i] = vmap[nd.out[i]];
        g->n[nn++] = nd;
    }
    g->nv = nv;
    g->nn = nn;
    for (int v = 0; v < nv; v++)
        if (g->v[v].node >= 0)
            g->v[v].node = nmap[g->v[v].node];
    free(keep), free(live), free(vmap), free(nmap);
    return te__graph_rebuild(g);
}

/* ---- Inspection --------------------------------------------------------------------------- */

#define VOK(g, v) ((g) && (v) >= 0 && (v) < (g)->nv)
#define NOK(g, n) ((g) && (n) >= 0 && (n) < (g)->nn)

int te_graph_value_count(const te_graph *g) { return g ? g->nv : 0; }
const char *te_graph_value_name(const te_graph *g, int v)
{
    return VOK(g, v) ? g->v[v].name : NULL;
}
te_dtype te_graph_value_dtype(const te_graph *g, int v)
{
    return VOK(g, v) ? g->v[v].dtype : TE_DTYPE_COUNT;
}
int te_graph_value_ndim(const te_graph *g, int v) { return VOK(g, v) ? g->v[v].ndim : -1; }
const int64_t *te_graph_value_shape(const te_graph *g, int v)
{
    return VOK(g, v) ? g->v[v].shape : NULL;
}
int64_t te_graph_value_numel(const te_graph *g, int v)
{
    return VOK(g, v) ? numel_of(&g->v[v]) : 0;
}
te_graph_value_kind te_graph_value_kind_of(const te_graph *g, int v)
{
    return VOK(g, v) ? g->v[v].kind : TE_GRAPH_INPUT;
}
const void *te_graph_value_data(const te_graph *g, int v)
{
    return VOK(g, v) && g->v[v].kind == TE_GRAPH_CONST ? g->v[v].data : NULL;
}
int te_graph_value_producer(const te_graph *g, int v) { return VOK(g, v) ? g->v[v].node : -1; }
int te_graph_value_use_count(const te_graph *g, int v)
{
    int c = 0;
    for (int n = 0; VOK(g, v) && n < g->nn; n++)
        for (int i = 0; i < g->n[n].n_in; i++)
            c += g->n[n].in[i] == v;
    return c;
}
int te_graph_value_is_output(const te_graph *g, int v) { return VOK(g, v) && g->v[v].is_output; }
te_tensor *te_graph_value_tensor(te_graph *g, int v) { return VOK(g, v) ? g->v[v].t : NULL; }

int te_graph_node_count(const te_graph *g) { return g ? g->nn : 0; }
const char *te_graph_node_op(const te_graph *g, int n)
{
    return NOK(g, n) ? g->n[n].op->name : NULL;
}
const char *te_graph_node_name(const te_graph *g, int n)
{
    return NOK(g, n) ? g->v[g->n[n].out[0]].name : NULL;
}
const char *te_graph_node_attrs(const te_graph *g, int n)
{
    return NOK(g, n) ? g->n[n].attrs : NULL;
}
int te_graph_node_ninputs(const te_graph *g, int n) { return NOK(g, n) ? g->n[n].n_in : -1; }
int te_graph_node_input(const te_graph *g, int n, int i)
{
    return NOK(g, n) && i >= 0 && i < g->n[n].n_in ? g->n[n].in[i] : -1;
}
int te_graph_node_noutputs(const te_graph *g, int n) { return NOK(g, n) ? g->n[n].n_out : -1; }
int te_graph_node_output(const te_graph *g, int n, int i)
{
    return NOK(g, n) && i >= 0 && i < g->n[n].n_out ? g->n[n].out[i] : -1;
}

double te_graph_node_flops(const te_graph *g, int n)
{
    if (!NOK(g, n))
        return 0;
    const te__gnode *nd = &g->n[n];
    const char *op = nd->op->name;
    double out = 0;
    for (int i = 0; i < nd->n_out; i++)
        out += (double)numel_of(&g->v[nd->out[i]]);
    const te__gvalue *a = &g->v[nd->in[0]];
    if (nd->op->kind != TE_KIND_OUT_EWISE_FUSABLE && nd->op->kind != TE_KIND_OPAQUE) {
        double in = (double)numel_of(a);
        double base = nd->op->kind == TE_KIND_REDUCTION ? in : out;
        return base * (nd->op->flop_per_elem > 0 ? nd->op->flop_per_elem : 1);
    }
    if (!strcmp(op, "conv2d") || !strcmp(op, "conv2d_bn_relu") || !strcmp(op, "depthwise_conv2d")) {
        const te__gvalue *w = &g->v[nd->in[1]];
        int depthwise = !strcmp(op, "depthwise_conv2d");
        int64_t oc = depthwise ? w->shape[0] * w->shape[1] : w->shape[0];
        char buf[16];
        te_op_params kv;
        int nhwc = strstr(nd->attrs, "NHWC") != NULL;
        (void)buf, (void)kv;
        if (nhwc)
            oc = w->shape[3];
        double per = (double)numel_of(w) / (double)oc;
        if (depthwise)
            per = (double)(w->shape[2] * w->shape[3]);
        return 2.0 * out * per;
    }
    if (!strcmp(op, "max_pool2d") || !strcmp(op, "avg_pool2d")) {
        int64_t k = 2;
        const char *p = strstr(nd->attrs, "kernel=");
        if (p)
            k = strtoll(p + 7, NULL, 10);
        return out * (double)(k * k);
    }
    /* Matmul-like: the reduction extent is A's last axis (or first with trans_a). */
    int64_t kext = a->shape[a->ndim - 1];
    if (strstr(nd->attrs, "trans_a=1"))
        kext = a->shape[a->ndim - 2];
    double f = 2.0 * out * (double)kext;
    if (!strcmp(op, "mlp_gate"))
        f *= 2;
    return f;
}

int te_graph_output_count(const te_graph *g)
{
    int c = 0;
    for (int v = 0; g && v < g->nv; v++)
        c += g->v[v].is_output;
    return c;
}

int te_graph_output_value(const te_graph *g, int i)
{
    for (int v = 0; g && v < g->nv; v++)
        if (g->v[v].is_output && i-- == 0)
            return v;
    return -1;
}

int te_graph_input_count(const te_graph *g)
{
    int c = 0;
    for (int v = 0; g && v < g->nv; v++)
        c += g->v[v].kind == TE_GRAPH_INPUT;
    return c;
}

int te_graph_input_value(const te_graph *g, int i)
{
    for (int v = 0; g && v < g->nv; v++)
        if (g->v[v].kind == TE_GRAPH_INPUT && i-- == 0)
            return v;
    return -1;
}

/* ---- Reference evaluation ----------------------------------------------------------------- */

int te_graph_eval_reference(te_graph *g, const void *const *input_data, int n, const int *values,
                            double *const *out)
{
    if (!g || n < 0 || (n && (!values || !out)))
        return g ? te__graph_error(g, TE_ERR_ARG, "eval: bad arguments") : TE_ERR_ARG;
    int nleaf = 0;
    for (int v = 0; v < g->nv; v++)
        nleaf += g->v[v].kind != TE_GRAPH_NODE_OUTPUT;
    te_tensor **ins = malloc(sizeof *ins * (size_t)(nleaf + 1));
    const void **data = malloc(sizeof *data * (size_t)(nleaf + 1));
    te_tensor **outs = malloc(sizeof *outs * (size_t)(n + 1));
    if (!ins || !data || !outs) {
        free(ins), free(data), free(outs);
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    }
    int k = 0, ki = 0, rc = TE_OK;
    for (int v = 0; v < g->nv; v++) {
        if (g->v[v].kind == TE_GRAPH_NODE_OUTPUT)
            continue;
        ins[k] = g->v[v].t;
        data[k] =
            g->v[v].kind == TE_GRAPH_CONST ? g->v[v].data : (input_data ? input_data[ki] : NULL);
        if (g->v[v].kind == TE_GRAPH_INPUT)
            ki++;
        if (!data[k])
            rc = te__graph_error(g, TE_ERR_ARG, "eval: no data for input '%s'", g->v[v].name);
        k++;
    }
    for (int j = 0; j < n && !rc; j++) {
        if (!VOK(g, values[j]))
            rc = te__graph_error(g, TE_ERR_ARG, "eval: %d is not a value", values[j]);
        else
            outs[j] = g->v[values[j]].t;
    }
    if (!rc) {
        rc = te_reference_eval(g->ctx, k, ins, data, n, outs, out);
        if (rc) {
            te__graph_error(g, rc, "eval: %s", te_ctx_errmsg(g->ctx));
            te_ctx_clear_error(g->ctx);
        }
    }
    free(ins), free(data), free(outs);
    return rc;
}
