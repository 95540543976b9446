/* ONNX nodes onto graph operators: the helpers, elementwise operators (with the exporters' erf
 * GELU recognized as one gelu node) and the shape operators, which are evaluated while
 * importing when their inputs are known (shape computations) and become reshape nodes
 * otherwise. onnx_nn.c holds the neural-network operators. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* ---- Helpers ---------------------------------------------------------------------------- */

int ox_nfail(ox_ctx *c, const Onnx__NodeProto *n, int rc, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ox_fail(c, rc, "node '%s' (%s): %s", n->name ? n->name : "", n->op_type, msg);
}

ox_val *ox_in(ox_ctx *c, const Onnx__NodeProto *n, size_t i)
{
    if (i >= n->n_input || !n->input[i] || !*n->input[i])
        return NULL;
    return ox_lookup(c, n->input[i], 0);
}

int ox_scalar(ox_ctx *c, double v)
{
    float f = (float)v;
    char nm[48];
    ox_graph_name(c, "k", nm, sizeof nm);
    int id = te_graph_const(c->g, nm, TE_F32, 1, (int64_t[]){1}, &f);
    if (id < 0)
        return ox_fail(c, id, "constant: %s", te_graph_errmsg(c->g));
    return id;
}

int ox_in_gv(ox_ctx *c, const Onnx__NodeProto *n, size_t i)
{
    ox_val *v = ox_in(c, n, i);
    if (!v)
        return ox_nfail(c, n, TE_ERR_ARG, "input %zu is missing", i + 1);
    return ox_materialize(c, v);
}

const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name))
            return n->attribute[i];
    return NULL;
}

#define OX_ATTR_MAX ((int64_t)1 << 30)

static int64_t clamp_attr(int64_t v)
{
    return v > OX_ATTR_MAX ? OX_ATTR_MAX : v < -OX_ATTR_MAX ? -OX_ATTR_MAX : v;
}

int64_t ox_i64(double d)
{
    const double lim = 4611686018427387904.0; /* 2^62 */
    return d != d ? 0 : d > lim ? (int64_t)1 << 62 : d < -lim ? -((int64_t)1 << 62) : (int64_t)d;
}

int64_t ox_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    return a && a->has_i ? clamp_attr(a->i) : def;
}

double ox_attr_f(const Onnx__NodeProto *n, const char *name, double def)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    return a && a->has_f && a->f == a->f ? a->f : def;
}

const char *ox_attr_s(const Onnx__NodeProto *n, const char *name, char *buf, size_t size)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    if (!a || !a->has_s)
        return NULL;
    snprintf(buf, size, "%.*s", (int)(a->s.len < size ? a->s.len : size - 1),
             (const char *)a->s.data);
    return buf;
}

int ox_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max)
{
    const Onnx__AttributeProto *a = ox_attr(n, name);
    if (!a)
        return -1;
    int k = 0;
    for (size_t i = 0; i < a->n_ints && k < max; i++)
        out[k++] = clamp_attr(a->ints[i]);
    return a->n_ints > (size_t)max ? max + 1 : k;
}

int ox_gnode(ox_ctx *c, const Onnx__NodeProto *n, const char *op, const char *attrs, int nin,
             const int *ins, const char *suffix)
{
    char base[96], nm[48];
    snprintf(base, sizeof base, "%s%s%s",
             n->n_output && n->output[0] && *n->output[0] ? n->output[0] : op, suffix ? "_" : "",
             suffix ? suffix : "");
    ox_graph_name(c, base, nm, sizeof nm);
    int id = te_graph_node(c->g, op, attrs, nin, ins, nm);
    if (id < 0)
        return ox_nfail(c, n, id, "%s", te_graph_errmsg(c->g));
    return id;
}

int ox_set_out(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int gv)
{
    if (gv < 0)
        return gv;
    if (i >= n->n_output || !n->output[i] || !*n->output[i])
        return TE_OK;
    ox_val *v = ox_lookup(c, n->output[i], 1);
    if (!v)
        return c->rc;
    v->kind = OX_GRAPH;
    v->gv = gv;
    return TE_OK;
}

ox_val *ox_set_const(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int ndim, const int64_t *shape,
                     int is_int)
{
    if (i >= n->n_output || !n->output[i] || !*n->output[i]) {
        ox_nfail(c, n, TE_ERR_ARG, "output %zu has no name", i + 1);
        return NULL;
    }
    ox_val *v = ox_lookup(c, n->output[i], 1);
    if (!v)
        return NULL;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && numel > ((int64_t)1 << 26) / shape[d])) {
            ox_nfail(c, n, TE_ERR_SHAPE, "computed tensor is too large");
            return NULL;
        }
        numel *= shape[d];
        v->shape[d] = shape[d];
    }
    free(v->d);
    v->d = calloc((size_t)(numel ? numel : 1), sizeof *v->d);
    if (!v->d) {
        ox_fail(c, TE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->kind = OX_CONST;
    v->ndim = ndim;
    v->numel = numel;
    v->is_int = is_int;
    v->elem = 0;
    v->gv = -1;
    return v;
}

static void shape_str(int nd, const int64_t *s, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < nd && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, d ? ":" : "", s[d]);
}

int ox_reshape(ox_ctx *c, const Onnx__NodeProto *n, int x, int ndim, const int64_t *shape,
               const char *suffix)
{
    int xn = te_graph_value_ndim(c->g, x);
    const int64_t *xs = te_graph_value_shape(c->g, x);
    if (xn == ndim && !memcmp(xs, shape, (size_t)ndim * sizeof *shape))
        return x;
    char a[200], s[180];
    shape_str(ndim, shape, s, sizeof s);
    snprintf(a, sizeof a, "shape=%s", s);
    return ox_gnode(c, n, "reshape", a, 1, &x, suffix);
}

/* Shape of input i: from the graph value or the constant. Returns its rank or a status. */
int ox_in_shape(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int64_t *shape)
{
    ox_val *v = ox_in(c, n, i);
    if (!v)
        return ox_nfail(c, n, TE_ERR_ARG, "input %zu is missing", i + 1);
    if (v->kind == OX_CONST) {
        memcpy(shape, v->shape, (size_t)v->ndim * sizeof *shape);
        return v->ndim;
    }
    int gv = v->gv;
    int nd = te_graph_value_ndim(c->g, gv);
    const int64_t *sh = te_graph_value_shape(c->g, gv);
    if (nd < 0 || (nd > 0 && !sh)) /* a value of the importer's own (a shape) is no tensor */
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "input %zu ('%s') is not a tensor of the graph",
                        i + 1, n->input[i]);
    if (nd > 0)
        memcpy(shape, sh, (size_t)nd * sizeof *shape);
    return nd;
}

/* Integer list from a constant input (axes, shapes); count or a status. */
int ox_in_ints(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int64_t *out, int max)
{
    ox_val *v = ox_in(c, n, i);
    if (!v || v->kind != OX_CONST)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "input %zu must be a constant (computed shapes are not supported)", i + 1);
    if (v->numel > max)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "input %zu has %" PRId64 " elements", i + 1,
                        v->numel);
    for (int64_t k = 0; k < v->numel; k++)
        out[k] = ox_i64(v->d[k]);
    return (int)v->numel;
}

/* Copies v into output i under the same meaning (Identity, Dropout, reshapes of constants). */
int ox_alias(ox_ctx *c, const Onnx__NodeProto *n, const ox_val *src, int ndim, const int64_t *shape)
{
    if (src->kind == OX_CONST) {
        ox_val s = *src; /* the table may move */
        ox_val *o = ox_set_const(c, n, 0, ndim, shape, s.is_int);
        if (!o)
            return c->rc;
        if (o->numel != s.numel)
            return ox_nfail(c, n, TE_ERR_SHAPE, "%" PRId64 " elements cannot take %" PRId64,
                            s.numel, o->numel);
        memcpy(o->d, s.d, (size_t)s.numel * sizeof *s.d);
        o->elem = s.elem; /* uint8 / int8 weights stay bytes */
        return TE_OK;
    }
    ox_val s = *src;
    ox_val *o = ox_lookup(c, n->output[0], 1);
    if (!o)
        return c->rc;
    o->kind = s.kind;
    o->gv = s.gv;
    o->ref = s.ref;
    return TE_OK;
}

/* ---- Elementwise ------------------------------------------------------------------------ */

/* 1 when v is the one-element constant x (within tol): an initializer not yet in the graph,
 * or one an earlier node already made a graph constant (models share initializers such as the
 * GELU's 1 and 0.5 across layers, so only the first reader sees them unmaterialized). */
static int is_scalar(const ox_ctx *c, const ox_val *v, double x, double tol)
{
    if (v && v->kind == OX_CONST)
        return v->numel == 1 && fabs(v->d[0] - x) <= tol;
    if (!v || v->kind != OX_GRAPH || v->gv < 0 ||
        te_graph_value_kind_of(c->g, v->gv) != TE_GRAPH_CONST ||
        te_graph_value_dtype(c->g, v->gv) != TE_F32 || te_graph_value_numel(c->g, v->gv) != 1)
        return 0;
    const float *d = te_graph_value_data(c->g, v->gv);
    return d && fabs(d[0] - x) <= tol;
}

/* Broadcast shape of a and b (numpy); rank or a status. */
static int bcast(ox_ctx *c, const Onnx__NodeProto *n, int na, const int64_t *a, int nb,
                 const int64_t *b, int64_t *out)
{
    int nd = na > nb ? na : nb;
    for (int d = 0; d < nd; d++) {
        int64_t x = d < nd - na ? 1 : a[d - (nd - na)], y = d < nd - nb ? 1 : b[d - (nd - nb)];
        if (x != y && x != 1 && y != 1)
            return ox_nfail(c, n, TE_ERR_SHAPE,
                            "shapes do not broadcast on axis %d (%" PRId64 " vs %" PRId64 ")", d, x,
                            y);
        out[d] = x == 1 ? y : x;
    }
    return nd;
}

static double fold_bin(char op, double x, double y)
{
    switch (op) {
    case '+':
        return x + y;
    case '-':
        return x - y;
    case '*':
        return x * y;
    default:
        return y != 0 ? trunc(x / y) : 0;
    }
}

/* The elements of a and b that element i of their broadcast (shape s, nd dims) reads. */
static void bcast_src(int nd, const int64_t *s, const ox_val *a, const ox_val *b, int64_t i,
                      int64_t *ia, int64_t *ib)
{
    int64_t rem = i, sa = 1, sb = 1;
    *ia = *ib = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t idx = rem % s[d];
        rem /= s[d];
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        if (da >= 0) {
            *ia += (a->shape[da] == 1 ? 0 : idx) * sa;
            sa *= a->shape[da];
        }
        if (db >= 0) {
            *ib += (b->shape[db] == 1 ? 0 : idx) * sb;
            sb *= b->shape[db];
        }
    }
}

/* Integer arithmetic on constants (shape math), with broadcasting. */
static int fold_binary(ox_ctx *c, const Onnx__NodeProto *n, char op, ox_val *a, ox_val *b)
{
    int64_t s[TE_MAX_DIMS];
    int nd = bcast(c, n, a->ndim, a->shape, b->ndim, b->shape, s);
    if (nd < 0)
        return nd;
    ox_val va = *a, vb = *b;
    ox_val *o = ox_set_const(c, n, 0, nd, s, 1);
    if (!o)
        return c->rc;
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t ia, ib;
        bcast_src(nd, s, &va, &vb, i, &ia, &ib);
        o->d[i] = fold_bin(op, va.d[ia], vb.d[ib]);
    }
    return TE_OK;
}

/* The producer of graph value x is `op` reading (y, constant k): returns y, else -1. */
static int produced_by_const_op(ox_ctx *c, int x, const char *op, double k, double tol)
{
    int p = te_graph_value_producer(c->g, x);
    if (p < 0 || strcmp(te_graph_node_op(c->g, p), op) || te_graph_node_ninputs(c->g, p) != 2)
        return -1;
    int y = te_graph_node_input(c->g, p, 0), kv = te_graph_node_input(c->g, p, 1);
    const float *d = te_graph_value_data(c->g, kv);
    if (!d || te_graph_value_numel(c->g, kv) != 1 || fabs(d[0] - k) > tol)
        return -1;
    return y;
}

static int binary(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    ox_val *a = ox_in(c, n, 0), *b = ox_in(c, n, 1);
    if (!a || !b)
        return ox_nfail(c, n, TE_ERR_ARG, "needs two inputs");
    char sym = op[0] == 'a' ? '+' : op[0] == 's' ? '-' : op[0] == 'm' ? '*' : '/';
    if (!strcmp(op, "minimum") || !strcmp(op, "maximum"))
        sym = 0;
    if (sym && a->kind == OX_CONST && b->kind == OX_CONST && a->is_int && b->is_int)
        return fold_binary(c, n, sym, a, b);
    /* The erf GELU: erf(x/sqrt2) + 1, then * x and * 0.5 in either order. Every step is also
     * built as written (so any other reader gets the exact value); the nodes the final gelu
     * replaces are left without readers and removed at the end. */
    ox_kind tag = OX_GRAPH;
    int ref = -1;
    if (sym == '+' && (a->kind == OX_ERF || b->kind == OX_ERF) &&
        (is_scalar(c, a, 1, 1e-6) || is_scalar(c, b, 1, 1e-6))) {
        tag = OX_ERF1;
        ref = (a->kind == OX_ERF ? a : b)->ref;
    }
    if (sym == '*' && (a->kind == OX_ERF1 || b->kind == OX_ERF1)) {
        ox_val *e = a->kind == OX_ERF1 ? a : b, *y = e == a ? b : a;
        int x = e->ref;
        if ((y->kind == OX_GRAPH && y->gv == x) || (y->kind == OX_HALF && y->ref == x)) {
            int g = ox_gnode(c, n, "gelu", NULL, 1, &x, y->kind == OX_HALF ? NULL : "gelu");
            if (g < 0 || y->kind == OX_HALF)
                return ox_set_out(c, n, 0, g);
            tag = OX_GELU2; /* 2 gelu(x), built as gelu * 2 below */
            ref = g;
        }
    }
    if (sym == '*' && (a->kind == OX_GELU2 || b->kind == OX_GELU2) &&
        (is_scalar(c, a, 0.5, 1e-7) || is_scalar(c, b, 0.5, 1e-7)))
        return ox_set_out(c, n, 0, (a->kind == OX_GELU2 ? a : b)->ref);
    if (tag == OX_GRAPH && sym == '*' &&
        (is_scalar(c, a, 0.5, 1e-7) || is_scalar(c, b, 0.5, 1e-7))) {
        ox_val *x = is_scalar(c, b, 0.5, 1e-7) ? a : b;
        if (x->kind == OX_GRAPH) {
            tag = OX_HALF;
            ref = x->gv;
        }
    }
    int id;
    if (tag == OX_GELU2) {
        int two = ox_scalar(c, 2.0);
        id = two < 0 ? two : ox_gnode(c, n, "mul", NULL, 2, (int[]){ref, two}, NULL);
    } else {
        int ia = ox_in_gv(c, n, 0);
        int ib = ia < 0 ? ia : ox_in_gv(c, n, 1);
        id = ib < 0 ? ib : ox_gnode(c, n, op, NULL, 2, (int[]){ia, ib}, NULL);
    }
    int rc = ox_set_out(c, n, 0, id);
    if (!rc && tag != OX_GRAPH) {
        ox_val *o = ox_lookup(c, n->output[0], 0);
        o->kind = tag;
        o->ref = ref;
    }
    return rc;
}

static int erf_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *a = ox_in(c, n, 0);
    int x = -1;
    if (a && a->kind == OX_GRAPH) {
        x = produced_by_const_op(c, a->gv, "div", sqrt(2.0), 1e-4);
        if (x < 0)
            x = produced_by_const_op(c, a->gv, "mul", sqrt(0.5), 1e-4);
    }
    int in = ox_in_gv(c, n, 0);
    int rc = in < 0 ? in : ox_set_out(c, n, 0, ox_gnode(c, n, "erf", NULL, 1, &in, NULL));
    if (!rc && x >= 0) { /* maybe the start of an erf GELU */
        ox_val *o = ox_lookup(c, n->output[0], 0);
        o->kind = OX_ERF;
        o->ref = x;
    }
    return rc;
}

static int unary(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    int x = ox_in_gv(c, n, 0);
    return x < 0 ? x : ox_set_out(c, n, 0, ox_gnode(c, n, op, NULL, 1, &x, NULL));
}

/* max(min(x, hi), lo) and friends with constant bounds. */
static int clamp(ox_ctx *c, const Onnx__NodeProto *n, const char *op, int x, double k,
                 const char *suffix)
{
    int kv = ox_scalar(c, k);
    return kv < 0 ? kv : ox_gnode(c, n, op, NULL, 2, (int[]){x, kv}, suffix);
}

static int clip(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    double lo = -INFINITY, hi = INFINITY;
    if (c->opset < 11) {
        lo = ox_attr_f(n, "min", lo);
        hi = ox_attr_f(n, "max", hi);
    } else {
        for (size_t i = 1; i < 3; i++) {
            ox_val *v = ox_in(c, n, i);
            if (!v)
                continue;
            if (v->kind != OX_CONST || v->numel != 1)
                return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "bounds must be constant scalars");
            *(i == 1 ? &lo : &hi) = v->d[0];
        }
    }
    if (lo > -INFINITY && (x = clamp(c, n, "maximum", x, lo, hi < INFINITY ? "lo" : NULL)) < 0)
        return x;
    if (hi < INFINITY && (x = clamp(c, n, "minimum", x, hi, NULL)) < 0)
        return x;
    return ox_set_out(c, n, 0, x);
}

static int leaky_relu(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    double alpha = ox_attr_f(n, "alpha", 0.01);
    if (x < 0)
        return x;
    if (alpha < 0 || alpha > 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "alpha %g outside [0, 1]", alpha);
    int ax = clamp(c, n, "mul", x, alpha, "ax");
    return ax < 0 ? ax
                  : ox_set_out(c, n, 0, ox_gnode(c, n, "maximum", NULL, 2, (int[]){x, ax}, NULL));
}

static int pow_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *e = ox_in(c, n, 1);
    if (!is_scalar(c, e, 2.0, 0) && !is_scalar(c, e, 1.0, 0))
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "only exponents 1 and 2 are supported");
    int x = ox_in_gv(c, n, 0);
    if (x < 0 || is_scalar(c, e, 1.0, 0))
        return x < 0 ? x : ox_set_out(c, n, 0, x);
    return ox_set_out(c, n, 0, ox_gnode(c, n, "mul", NULL, 2, (int[]){x, x}, NULL));
}

/* ---- Comparison and logic --------------------------------------------------------------- */

/* Folds a comparison / logic operator on constants (shape computations): 0 / 1 results. */
static double fold_cmp(const char *op, double x, double y)
{
    int r = !strcmp(op, "equal")           ? x == y
            : !strcmp(op, "less")          ? x < y
            : !strcmp(op, "less_equal")    ? x <= y
            : !strcmp(op, "greater")       ? x > y
            : !strcmp(op, "greater_equal") ? x >= y
            : !strcmp(op, "and")           ? (x != 0) && (y != 0)
            : !strcmp(op, "or")            ? (x != 0) || (y != 0)
                                           : (x != 0) != (y != 0);
    return r;
}

/* Graph value of input i in dtype dt: constants are made in dt when it is i64 or u8, else f32;
 * graph values keep theirs (the graph node reports a mismatch). */
static int in_gv_as(ox_ctx *c, const Onnx__NodeProto *n, size_t i, te_dtype dt)
{
    ox_val *v = ox_in(c, n, i);
    if (!v)
        return ox_nfail(c, n, TE_ERR_ARG, "input %zu is missing", i + 1);
    if (v->kind != OX_CONST || (dt != TE_I64 && dt != TE_U8))
        return ox_materialize(c, v);
    if (dt == TE_I64)
        return ox_materialize_i64(c, v);
    uint8_t *d = malloc((size_t)(v->numel ? v->numel : 1));
    if (!d)
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < v->numel; k++)
        d[k] = v->d[k] != 0;
    char nm[48];
    int64_t one = 1;
    ox_graph_name(c, v->name, nm, sizeof nm);
    int id = te_graph_const(c->g, nm, TE_U8, v->ndim ? v->ndim : 1, v->ndim ? v->shape : &one, d);
    free(d);
    if (id < 0)
        return ox_fail(c, id, "constant '%s': %s", v->name, te_graph_errmsg(c->g));
    return id;
}

/* Equal, Less, ..., And, Or, Xor: graph operator op with u8 0 / 1 output. A constant operand
 * takes the other operand's dtype (Equal(ids, 0) on int64 ids); both constant folds. */
static int compare(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    if (n->n_input != 2)
        return ox_nfail(c, n, TE_ERR_ARG, "needs two inputs");
    ox_val *a = ox_in(c, n, 0), *b = ox_in(c, n, 1);
    if (!a || !b)
        return ox_nfail(c, n, TE_ERR_ARG, "needs two inputs");
    if (a->kind == OX_CONST && b->kind == OX_CONST) {
        int64_t s[TE_MAX_DIMS];
        int nd = bcast(c, n, a->ndim, a->shape, b->ndim, b->shape, s);
        if (nd < 0)
            return nd;
        ox_val va = *a, vb = *b;
        ox_val *o = ox_set_const(c, n, 0, nd, s, 1);
        if (!o)
            return c->rc;
        for (int64_t i = 0; i < o->numel; i++) {
            int64_t ia, ib;
            bcast_src(nd, s, &va, &vb, i, &ia, &ib);
            o->d[i] = fold_cmp(op, va.d[ia], vb.d[ib]);
        }
        return TE_OK;
    }
    int logic = !strcmp(op, "and") || !strcmp(op, "or") || !strcmp(op, "xor");
    te_dtype dt = logic ? TE_U8 : te_graph_value_dtype(c->g, (a->kind == OX_CONST ? b : a)->gv);
    int ia = in_gv_as(c, n, 0, dt);
    int ib = ia < 0 ? ia : in_gv_as(c, n, 1, dt);
    return ib < 0 ? ib : ox_set_out(c, n, 0, ox_gnode(c, n, op, NULL, 2, (int[]){ia, ib}, NULL));
}

/* Not: of a constant folds, else a not node. */
static int not_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0);
    if (!x)
        return ox_nfail(c, n, TE_ERR_ARG, "needs an input");
    if (x->kind == OX_CONST) {
        ox_val v = *x;
        ox_val *o = ox_set_const(c, n, 0, v.ndim, v.shape, 1);
        if (!o)
            return c->rc;
        for (int64_t i = 0; i < o->numel; i++)
            o->d[i] = v.d[i] == 0;
        return TE_OK;
    }
    return unary(c, n, "not");
}

/* Max / Min with one or more inputs: a chain of binary nodes (one input is an alias). */
static int variadic(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    if (n->n_input < 1)
        return ox_nfail(c, n, TE_ERR_ARG, "needs at least one input");
    if (n->n_input == 2)
        return binary(c, n, op);
    int acc = ox_in_gv(c, n, 0);
    for (size_t i = 1; acc >= 0 && i < n->n_input; i++) {
        int x = ox_in_gv(c, n, i);
        char sfx[24];
        snprintf(sfx, sizeof sfx, "%d", (int)i);
        acc = x < 0 ? x
                    : ox_gnode(c, n, op, NULL, 2, (int[]){acc, x}, i + 1 < n->n_input ? sfx : NULL);
    }
    return ox_set_out(c, n, 0, acc);
}

/* ---- Constants and shapes --------------------------------------------------------------- */

static int constant(ox_ctx *c, const Onnx__NodeProto *n)
{
    const Onnx__AttributeProto *a = ox_attr(n, "value");
    ox_val *o;
    if (a && a->t) {
        o = ox_lookup(c, n->output[0], 1);
        return o ? ox_tensor_value(c, a->t, o) : c->rc;
    }
    if ((a = ox_attr(n, "value_float")) || (a = ox_attr(n, "value_int"))) {
        if (!(o = ox_set_const(c, n, 0, 0, NULL, a->has_i)))
            return c->rc;
        o->d[0] = a->has_i ? (double)a->i : a->f;
        return TE_OK;
    }
    if ((a = ox_attr(n, "value_floats")) || (a = ox_attr(n, "value_ints"))) {
        int64_t len = (int64_t)(a->n_ints ? a->n_ints : a->n_floats);
        if (!len || !(o = ox_set_const(c, n, 0, 1, &len, a->n_ints > 0)))
            return c->rc ? c->rc : ox_nfail(c, n, TE_ERR_UNSUPPORTED, "empty constant");
        for (int64_t i = 0; i < len; i++)
            o->d[i] = a->n_ints ? (double)a->ints[i] : a->floats[i];
        return TE_OK;
    }
    return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "needs a value, value_float(s) or value_int(s)");
}

/* A one-element graph constant 0 of dtype dt (an integer or float one). */
static int zero_of_dtype(ox_ctx *c, const Onnx__NodeProto *n, te_dtype dt)
{
    static const unsigned char zeros[16];
    char nm[48];
    ox_graph_name(c, "zero", nm, sizeof nm);
    int id = te_graph_const(c->g, nm, dt, 1, (int64_t[]){1}, zeros);
    return id < 0 ? ox_nfail(c, n, id, "%s", te_graph_errmsg(c->g)) : id;
}

/* Whether graph value x holds integers. */
static int int_value(ox_ctx *c, int x)
{
    te_dtype dt = te_graph_value_dtype(c->g, x);
    return dt == TE_U8 || dt == TE_I8 || dt == TE_I32 || dt == TE_I64;
}

/* Neg and Abs of integer x: 0 - x and max(x, 0 - x), wrapping as onnxruntime's do (-(-128) is
 * -128 in int8). */
static int int_neg_abs(ox_ctx *c, const Onnx__NodeProto *n, int x, int abs)
{
    int z = zero_of_dtype(c, n, te_graph_value_dtype(c->g, x));
    int ng = z < 0 ? z : ox_gnode(c, n, "sub", NULL, 2, (int[]){z, x}, abs ? "neg" : NULL);
    if (ng < 0 || !abs)
        return ng;
    return ox_gnode(c, n, "maximum", NULL, 2, (int[]){x, ng}, NULL);
}

static int cast(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0);
    int64_t to = ox_attr_i(n, "to", 0);
    int to_int =
        to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    if (!x)
        return ox_nfail(c, n, TE_ERR_ARG, "needs an input");
    if (x->kind == OX_CONST && (to_int || to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)) {
        int rc = ox_alias(c, n, x, x->ndim, x->shape);
        ox_val *o = ox_lookup(c, n->output[0], 0);
        if (!rc && o) {
            o->is_int = to_int;
            o->elem = (int32_t)to;
            for (int64_t i = 0; to_int && i < o->numel; i++)
                o->d[i] = trunc(o->d[i]);
        }
        return rc;
    }
    te_dtype dt = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT   ? TE_F32
                  : to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? TE_I64
                  : to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? TE_I32
                                                               : TE_BOOL;
    if (dt == TE_BOOL && to != ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "Cast of a computed tensor to type %" PRId64
                        " (float, int64, int32 and bool only)",
                        to);
    if (dt == TE_BOOL) { /* non-zero is true: u8 0 / 1, as the comparisons give */
        int in = ox_in_gv(c, n, 0);
        int z = in < 0 ? in : zero_of_dtype(c, n, te_graph_value_dtype(c->g, in));
        return z < 0 ? z
                     : ox_set_out(c, n, 0,
                                  ox_gnode(c, n, "not_equal", NULL, 2, (int[]){in, z}, NULL));
    }
    if (x->kind != OX_GRAPH || te_graph_value_dtype(c->g, x->gv) == dt)
        return ox_alias(c, n, x, 0, NULL); /* the GELU steps are f32 */
    char a[16];
    snprintf(a, sizeof a, "to=%s", te_dtype_str(dt));
    int in = x->gv;
    return ox_set_out(c, n, 0, ox_gnode(c, n, "cast", a, 1, &in, NULL));
}

/* ---- Dispatch --------------------------------------------------------------------------- */

static const char *const ops_here[] = {"Add",         "Sub",        "Mul",
                                       "Div",         "Max",        "Min",
                                       "Relu",        "Sigmoid",    "Tanh",
                                       "Exp",         "Log",        "Sqrt",
                                       "Abs",         "Reciprocal", "Erf",
                                       "Gelu",        "Clip",       "LeakyRelu",
                                       "Pow",         "Neg",        "Identity",
                                       "Dropout",     "Constant",   "Shape",
                                       "Cast",        "Reshape",    "Flatten",
                                       "Squeeze",     "Unsqueeze",  "Gather",
                                       "Concat",      "Slice",      "ConstantOfShape",
                                       "Transpose",   "Split",      "Where",
                                       "Expand",      "Equal",      "Less",
                                       "LessOrEqual", "Greater",    "GreaterOrEqual",
                                       "Not",         "And",        "Or",
                                       "Xor",         "Floor",      "Ceil",
                                       "Sign",        "Mod",        "Round"};

int ox_op_supported(const char *op_type)
{
    for (size_t i = 0; i < sizeof ops_here / sizeof ops_here[0]; i++)
        if (!strcmp(ops_here[i], op_type))
            return 1;
    return ox_nn_supported(op_type) || ox_quant_supported(op_type);
}

int ox_convert_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    const char *op = n->op_type ? n->op_type : "";
    if (!n->n_output || !n->output[0] || !*n->output[0])
        return ox_nfail(c, n, TE_ERR_CORRUPT, "has no output");
    if (ox_convert_nn(c, n, op) || ox_convert_quant(c, n, op))
        return c->rc;
    if (!strcmp(op, "Max") || !strcmp(op, "Min"))
        return variadic(c, n, op[1] == 'a' ? "maximum" : "minimum");
    static const char *const cmp[][2] = {{"Equal", "equal"},
                                         {"Less", "less"},
                                         {"LessOrEqual", "less_equal"},
                                         {"Greater", "greater"},
                                         {"GreaterOrEqual", "greater_equal"},
                                         {"And", "and"},
                                         {"Or", "or"},
                                         {"Xor", "xor"}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (!strcmp(op, cmp[i][0]))
            return compare(c, n, cmp[i][1]);
    if (!strcmp(op, "Not"))
        return not_node(c, n);
    if (!strcmp(op, "Mod")) {
        char a[16];
        snprintf(a, sizeof a, "fmod=%d", ox_attr_i(n, "fmod", 0) ? 1 : 0);
        if (n->n_input != 2)
            return ox_nfail(c, n, TE_ERR_ARG, "needs two inputs");
        ox_val *x = ox_in(c, n, 0), *y = ox_in(c, n, 1);
        if (!x || !y)
            return ox_nfail(c, n, TE_ERR_ARG, "needs two inputs");
        te_dtype dt = x->kind == OX_CONST && y->kind == OX_CONST
                          ? TE_F32
                          : te_graph_value_dtype(c->g, (x->kind == OX_CONST ? y : x)->gv);
        int ia = in_gv_as(c, n, 0, dt);
        int ib = ia < 0 ? ia : in_gv_as(c, n, 1, dt);
        return ib < 0 ? ib
                      : ox_set_out(c, n, 0, ox_gnode(c, n, "mod", a, 2, (int[]){ia, ib}, NULL));
    }
    static const char *const bin[][2] = {
        {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i][0])) {
            if (n->n_input != 2)
                return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "needs exactly two inputs");
            return binary(c, n, bin[i][1]);
        }
    if (!strcmp(op, "Relu") || !strcmp(op, "Sigmoid") || !strcmp(op, "Tanh")) {
        char low[16];
        snprintf(low, sizeof low, "%s", op);
        low[0] = (char)(low[0] - 'A' + 'a');
        return unary(c, n, low);
    }
    static const char *const un[][2] = {{"Exp", "exp"},   {"Log", "log"},     {"Sqrt", "sqrt"},
                                        {"Abs", "abs"},   {"Floor", "floor"}, {"Ceil", "ceil"},
                                        {"Sign", "sign"}, {"Round", "round"}};
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i][0])) {
            if (!strcmp(op, "Abs")) {
                int x = ox_in_gv(c, n, 0);
                if (x < 0)
                    return x;
                if (int_value(c, x))
                    return ox_set_out(c, n, 0, int_neg_abs(c, n, x, 1));
            }
            return unary(c, n, un[i][1]);
        }
    if (!strcmp(op, "Reciprocal")) {
        int x = ox_in_gv(c, n, 0), one = x < 0 ? x : ox_scalar(c, 1.0);
        return one < 0 ? one
                       : ox_set_out(c, n, 0, ox_gnode(c, n, "div", NULL, 2, (int[]){one, x}, NULL));
    }
    if (!strcmp(op, "Gelu")) {
        char buf[16];
        const char *ap = ox_attr_s(n, "approximate", buf, sizeof buf);
        return unary(c, n, ap && !strcmp(ap, "tanh") ? "gelu_tanh" : "gelu");
    }
    if (!strcmp(op, "Neg")) {
        int x = ox_in_gv(c, n, 0);
        if (x >= 0 && int_value(c, x))
            return ox_set_out(c, n, 0, int_neg_abs(c, n, x, 0));
        return x < 0 ? x : ox_set_out(c, n, 0, clamp(c, n, "mul", x, -1.0, NULL));
    }
    if (!strcmp(op, "Erf"))
        return erf_node(c, n);
    if (!strcmp(op, "Clip"))
        return clip(c, n);
    if (!strcmp(op, "LeakyRelu"))
        return leaky_relu(c, n);
    if (!strcmp(op, "Pow"))
        return pow_node(c, n);
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout")) {
        ox_val *x = ox_in(c, n, 0);
        return x ? ox_alias(c, n, x, x->ndim, x->shape) : ox_nfail(c, n, TE_ERR_ARG, "no input");
    }
    if (!strcmp(op, "Constant"))
        return constant(c, n);
    if (!strcmp(op, "Shape"))
        return ox_shape_node(c, n);
    if (!strcmp(op, "Cast"))
        return cast(c, n);
    if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
        !strcmp(op, "Unsqueeze"))
        return ox_reshape_like(c, n, op);
    if (!strcmp(op, "Gather"))
        return ox_fold_gather(c, n);
    if (!strcmp(op, "Concat"))
        return ox_fold_concat(c, n);
    if (!strcmp(op, "Slice"))
        return ox_fold_slice(c, n);
    if (!strcmp(op, "ConstantOfShape"))
        return ox_fold_const_of_shape(c, n);
    if (!strcmp(op, "Transpose"))
        return ox_transpose(c, n);
    if (!strcmp(op, "Split"))
        return ox_split(c, n);
    if (!strcmp(op, "Where"))
        return ox_where(c, n);
    if (!strcmp(op, "Expand"))
        return ox_expand(c, n);
    return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "operator is not supported");
}
