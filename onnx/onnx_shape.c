/* ONNX shape operators (Shape, Reshape, Flatten, Squeeze, Unsqueeze, Gather, Concat, Slice,
 * ConstantOfShape, Transpose): evaluated while importing when their inputs are constants (shape
 * computations), reshape and transpose nodes otherwise. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

int ox_shape_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t s[TE_MAX_DIMS];
    int nd = ox_in_shape(c, n, 0, s);
    if (nd < 0)
        return nd;
    int64_t start = ox_attr_i(n, "start", 0), end = ox_attr_i(n, "end", nd);
    start = start < 0 ? start + nd : start;
    end = end < 0 ? end + nd : end;
    start = start < 0 ? 0 : start > nd ? nd : start;
    end = end < start ? start : end > nd ? nd : end;
    int64_t len = end - start;
    ox_val *o = ox_set_const(c, n, 0, 1, &len, 1);
    if (!o)
        return c->rc;
    for (int64_t i = 0; i < len; i++)
        o->d[i] = (double)s[start + i];
    return TE_OK;
}

/* Output shape for Reshape (0 copies, -1 inferred), Flatten, Squeeze, Unsqueeze. */
int ox_reshape_like(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    int64_t in[TE_MAX_DIMS], out[TE_MAX_DIMS + 1], ax[TE_MAX_DIMS + 1];
    int nd = ox_in_shape(c, n, 0, in), od = 0;
    if (nd < 0)
        return nd;
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= in[d];
    if (!strcmp(op, "Reshape")) {
        int k = ox_in_ints(c, n, 1, out, TE_MAX_DIMS + 1);
        if (k < 0)
            return k;
        if (k > TE_MAX_DIMS)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "rank %d is above %d", k, TE_MAX_DIMS);
        od = k;
        int infer = -1;
        int64_t known = 1;
        for (int d = 0; d < od; d++) {
            if (out[d] == 0 && !ox_attr_i(n, "allowzero", 0) && d < nd)
                out[d] = in[d];
            if (out[d] == -1 && infer < 0)
                infer = d;
            else if (out[d] < 1 || out[d] > ((int64_t)1 << 31) || known > ((int64_t)1 << 31))
                return ox_nfail(c, n, TE_ERR_SHAPE, "target extent %" PRId64, out[d]);
            else
                known *= out[d];
        }
        if (infer >= 0)
            out[infer] = known && numel % known == 0 ? numel / known : -1;
    } else if (!strcmp(op, "Flatten")) {
        int64_t axis = ox_attr_i(n, "axis", 1);
        if (axis < 0)
            axis += nd;
        if (axis < 0 || axis > nd)
            return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", axis, nd);
        out[0] = out[1] = 1;
        for (int d = 0; d < nd; d++)
            out[d < axis ? 0 : 1] *= in[d];
        od = 2;
    } else {
        int na = c->opset >= 13 ? (ox_in(c, n, 1) ? ox_in_ints(c, n, 1, ax, TE_MAX_DIMS + 1) : -1)
                                : ox_attr_ints(n, "axes", ax, TE_MAX_DIMS + 1);
        if (c->rc)
            return c->rc;
        int sq = !strcmp(op, "Squeeze"), rank = sq ? nd : nd + (na > 0 ? na : 0);
        char mark[TE_MAX_DIMS + 1] = {0};
        for (int i = 0; i < na; i++) {
            int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
            if (a < 0 || a >= rank || mark[a] || rank > TE_MAX_DIMS + 1)
                return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " is invalid", ax[i]);
            mark[a] = 1;
        }
        if (!sq && na < 1)
            return ox_nfail(c, n, TE_ERR_ARG, "needs axes");
        for (int d = 0, k = 0; d < rank; d++) {
            if (sq) {
                if ((na > 0 && mark[d]) || (na <= 0 && in[d] == 1)) {
                    if (in[d] != 1)
                        return ox_nfail(c, n, TE_ERR_SHAPE, "axis %d has extent %" PRId64, d,
                                        in[d]);
                    continue;
                }
                out[od++] = in[d];
            } else
                out[od++] = mark[d] ? 1 : in[k++];
        }
    }
    int64_t onumel = 1;
    for (int d = 0; d < od; d++)
        onumel *= out[d];
    if (onumel != numel || od > TE_MAX_DIMS)
        return ox_nfail(c, n, TE_ERR_SHAPE, "cannot reshape %" PRId64 " elements to rank %d", numel,
                        od);
    ox_val *x = ox_in(c, n, 0);
    if (x->kind == OX_CONST)
        return ox_alias(c, n, x, od, out);
    if (od == 0) /* a scalar: the graph keeps [1] */
        out[od++] = 1;
    int gx = ox_in_gv(c, n, 0);
    return gx < 0 ? gx : ox_set_out(c, n, 0, ox_reshape(c, n, gx, od, out, NULL));
}

/* Gather, Concat, Slice, ConstantOfShape on constants (shape computations). */
/* Gather at run time: a gather node of the data (a constant table is materialized) with i64
 * indices (constant indices become an i64 constant); a scalar index drops the axis. */
static int gather_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *xv = ox_in(c, n, 0), *iv = ox_in(c, n, 1);
    int scalar = iv->kind == OX_CONST && iv->ndim == 0;
    int x = ox_materialize(c, xv);
    if (x < 0)
        return x;
    iv = ox_in(c, n, 1); /* the table may have moved */
    int idx = ox_materialize_i64(c, iv);
    if (idx < 0)
        return idx;
    te_dtype idt = te_graph_value_dtype(c->g, idx);
    if (idt != TE_I64 && idt != TE_I32)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "indices '%s' are %s; Gather needs int64 or "
                        "int32 indices",
                        n->input[1], te_dtype_str(idt));
    int nd = te_graph_value_ndim(c->g, x);
    int64_t axis = ox_attr_i(n, "axis", 0);
    if (axis < -nd || axis >= nd)
        return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", axis, nd);
    if (axis < 0)
        axis += nd;
    char a[32];
    snprintf(a, sizeof a, "axis=%" PRId64, axis);
    int y = ox_gnode(c, n, "gather", a, 2, (int[]){x, idx}, scalar ? "g" : NULL);
    if (y < 0 || !scalar)
        return ox_set_out(c, n, 0, y);
    /* A scalar index: ONNX drops the axis (the graph keeps a scalar result as [1]). */
    int64_t s[TE_MAX_DIMS], od = 0;
    const int64_t *xs = te_graph_value_shape(c->g, x);
    for (int d = 0; d < nd; d++)
        if (d != axis)
            s[od++] = xs[d];
    if (!od)
        s[od++] = 1;
    return ox_set_out(c, n, 0, ox_reshape(c, n, y, (int)od, s, NULL));
}

/* Gather, Concat, Slice, ConstantOfShape on constants (shape computations), and nodes of the
 * graph's gather, concat and slice operators otherwise. */
int ox_fold_gather(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0), *idx = ox_in(c, n, 1);
    if (!x || !idx)
        return ox_nfail(c, n, TE_ERR_ARG, "needs data and indices");
    if (x->kind != OX_CONST || idx->kind != OX_CONST)
        return gather_node(c, n);
    int64_t axis = ox_attr_i(n, "axis", 0);
    if (axis < 0)
        axis += x->ndim;
    if (axis < 0 || axis >= x->ndim || x->ndim + idx->ndim - 1 > TE_MAX_DIMS)
        return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " is invalid", axis);
    int64_t s[TE_MAX_DIMS];
    int od = 0;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= (s[od++] = x->shape[d]);
    for (int d = 0; d < idx->ndim; d++)
        s[od++] = idx->shape[d];
    for (int d = (int)axis + 1; d < x->ndim; d++)
        inner *= (s[od++] = x->shape[d]);
    ox_val vx = *x, vi = *idx;
    ox_val *o = ox_set_const(c, n, 0, od, s, vx.is_int);
    if (!o)
        return c->rc;
    int64_t ext = vx.shape[axis];
    for (int64_t a = 0; a < outer; a++)
        for (int64_t k = 0; k < vi.numel; k++) {
            int64_t j = ox_i64(vi.d[k]);
            j = j < 0 ? j + ext : j;
            if (j < 0 || j >= ext)
                return ox_nfail(c, n, TE_ERR_BOUNDS, "index %" PRId64 " outside [0, %" PRId64 ")",
                                ox_i64(vi.d[k]), ext);
            memcpy(o->d + (a * vi.numel + k) * inner, vx.d + (a * ext + j) * inner,
                   (size_t)inner * sizeof *o->d);
        }
    return TE_OK;
}

/* Concat at run time: concat nodes of at most TE_GRAPH_MAX_IO inputs each (more are chained). */
static int concat_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    enum { MAXIN = 8 };
    int ins[MAXIN], k = 0, y = -1;
    int64_t axis = ox_attr_i(n, "axis", 0);
    for (size_t i = 0; i < n->n_input; i++) {
        int v = ox_in_gv(c, n, i);
        if (v < 0)
            return v;
        if (!i) {
            int nd = te_graph_value_ndim(c->g, v);
            if (axis < -nd || axis >= nd)
                return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", axis, nd);
            axis = axis < 0 ? axis + nd : axis;
        }
        ins[k++] = v;
        if (k == MAXIN || i + 1 == n->n_input) {
            char a[32];
            snprintf(a, sizeof a, "axis=%" PRId64, axis);
            y = k == 1 ? ins[0]
                       : ox_gnode(c, n, "concat", a, k, ins, i + 1 == n->n_input ? NULL : "part");
            if (y < 0)
                return y;
            ins[0] = y;
            k = 1;
        }
    }
    return ox_set_out(c, n, 0, y);
}

int ox_fold_concat(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t axis = ox_attr_i(n, "axis", 0), s[TE_MAX_DIMS];
    ox_val *first = ox_in(c, n, 0);
    for (size_t i = 0; i < n->n_input; i++) {
        ox_val *v = ox_in(c, n, i);
        if (!v)
            return ox_nfail(c, n, TE_ERR_ARG, "input %zu is missing", i + 1);
        if (v->kind != OX_CONST)
            return concat_node(c, n);
    }
    if (!first || first->ndim < 1)
        return ox_nfail(c, n, TE_ERR_ARG, "needs tensors of rank >= 1");
    if (axis < 0)
        axis += first->ndim;
    if (axis < 0 || axis >= first->ndim)
        return ox_nfail(c, n, TE_ERR_ARG, "axis is invalid");
    memcpy(s, first->shape, sizeof s);
    s[axis] = 0;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < first->ndim; d++)
        if (d < axis)
            outer *= s[d];
        else if (d > axis)
            inner *= s[d];
    for (size_t i = 0; i < n->n_input; i++) {
        ox_val *v = ox_in(c, n, i);
        if (v->ndim != first->ndim)
            return ox_nfail(c, n, TE_ERR_SHAPE, "inputs differ in rank");
        for (int d = 0; d < v->ndim; d++)
            if (d != axis && v->shape[d] != first->shape[d])
                return ox_nfail(c, n, TE_ERR_SHAPE, "inputs differ on axis %d", d);
        s[axis] += v->shape[axis];
    }
    int is_int = first->is_int;
    ox_val *o = ox_set_const(c, n, 0, first->ndim, s, is_int);
    if (!o)
        return c->rc;
    int64_t off = 0;
    for (size_t i = 0; i < n->n_input; i++) {
        ox_val *v = ox_in(c, n, i);
        o = ox_lookup(c, n->output[0], 0);
        int64_t w = v->shape[axis] * inner;
        for (int64_t a = 0; a < outer; a++)
            memcpy(o->d + a * s[axis] * inner + off, v->d + a * w, (size_t)w * sizeof *o->d);
        off += w;
    }
    return TE_OK;
}

/* The starts, ends, axes and steps of a Slice (attributes before opset 10, constant inputs
 * since): the number of sliced axes, or a status. axes default to 0 .. n-1, steps to 1. */
static int slice_params(ox_ctx *c, const Onnx__NodeProto *n, int64_t *st, int64_t *en, int64_t *ax,
                        int64_t *sp)
{
    int ns, ne, na = -1, np = -1;
    if (c->opset < 10) {
        ns = ox_attr_ints(n, "starts", st, TE_MAX_DIMS + 1);
        ne = ox_attr_ints(n, "ends", en, TE_MAX_DIMS + 1);
        na = ox_attr_ints(n, "axes", ax, TE_MAX_DIMS + 1);
    } else {
        ns = ox_in_ints(c, n, 1, st, TE_MAX_DIMS + 1);
        ne = c->rc ? -1 : ox_in_ints(c, n, 2, en, TE_MAX_DIMS + 1);
        if (!c->rc && ox_in(c, n, 3))
            na = ox_in_ints(c, n, 3, ax, TE_MAX_DIMS + 1);
        if (!c->rc && ox_in(c, n, 4))
            np = ox_in_ints(c, n, 4, sp, TE_MAX_DIMS + 1);
    }
    if (c->rc)
        return c->rc;
    if (ns < 1 || ns > TE_MAX_DIMS || ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns))
        return ox_nfail(c, n, TE_ERR_ARG,
                        "starts (%d), ends (%d), axes (%d) and steps (%d) must list the same "
                        "number of axes, 1 to %d",
                        ns, ne, na, np, TE_MAX_DIMS);
    for (int i = 0; i < ns; i++) {
        if (na < 0)
            ax[i] = i;
        if (np < 0)
            sp[i] = 1;
        if (sp[i] == 0)
            return ox_nfail(c, n, TE_ERR_ARG, "step %d is 0", i);
    }
    return ns;
}

/* Slice at run time: one slice node; bounds are clamped to [-dim - 1, dim + 1] first (same
 * meaning, short attributes). */
static int slice_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t st[TE_MAX_DIMS + 1], en[TE_MAX_DIMS + 1], ax[TE_MAX_DIMS + 1], sp[TE_MAX_DIMS + 1];
    int k = slice_params(c, n, st, en, ax, sp);
    if (k < 0)
        return k;
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x);
    const int64_t *xs = te_graph_value_shape(c->g, x);
    char a[256], *p = a;
    const char *key[4] = {"axes=", ",starts=", ",ends=", ",steps="};
    int64_t *list[4] = {ax, st, en, sp};
    for (int i = 0; i < k; i++) {
        if (ax[i] < -nd || ax[i] >= nd)
            return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", ax[i], nd);
        int64_t dim = xs[ax[i] < 0 ? ax[i] + nd : ax[i]];
        for (int q = 1; q <= 2; q++)
            list[q][i] = list[q][i] > dim + 1    ? dim + 1
                         : list[q][i] < -dim - 1 ? -dim - 1
                                                 : list[q][i];
        sp[i] = sp[i] > dim ? dim : sp[i] < -dim ? -dim : sp[i];
    }
    for (int q = 0; q < 4; q++) {
        p += snprintf(p, sizeof a - (size_t)(p - a), "%s", key[q]);
        for (int i = 0; i < k; i++)
            p += snprintf(p, sizeof a - (size_t)(p - a), "%s%" PRId64, i ? ":" : "", list[q][i]);
    }
    return ox_set_out(c, n, 0, ox_gnode(c, n, "slice", a, 1, &x, NULL));
}

int ox_fold_slice(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0);
    if (!x)
        return ox_nfail(c, n, TE_ERR_ARG, "needs an input");
    int64_t st[TE_MAX_DIMS + 1], en[TE_MAX_DIMS + 1], ax[TE_MAX_DIMS + 1], sp[TE_MAX_DIMS + 1];
    int k = slice_params(c, n, st, en, ax, sp);
    if (k < 0)
        return k;
    /* A unit-step slice of a 1-D constant is a shape computation: evaluate it here. */
    if (x->kind != OX_CONST || x->ndim != 1 || k != 1 || (ax[0] != 0 && ax[0] != -1) || sp[0] != 1)
        return slice_node(c, n);
    int64_t len = x->shape[0];
    int64_t b = st[0] < 0 ? st[0] + len : st[0], e = en[0] < 0 ? en[0] + len : en[0];
    b = b < 0 ? 0 : b > len ? len : b;
    e = e < b ? b : e > len ? len : e;
    int64_t olen = e - b;
    if (!olen)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "empty slice");
    ox_val vx = *x;
    ox_val *o = ox_set_const(c, n, 0, 1, &olen, vx.is_int);
    if (!o)
        return c->rc;
    memcpy(o->d, vx.d + b, (size_t)olen * sizeof *o->d);
    return TE_OK;
}

int ox_fold_const_of_shape(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t s[TE_MAX_DIMS + 1];
    int nd = ox_in_ints(c, n, 0, s, TE_MAX_DIMS);
    if (nd < 0)
        return nd;
    ox_val fill;
    memset(&fill, 0, sizeof fill);
    const Onnx__AttributeProto *a = ox_attr(n, "value");
    double v = 0;
    int is_int = 0;
    if (a && a->t) {
        fill.name = "value";
        if (ox_tensor_value(c, a->t, &fill))
            return c->rc;
        v = fill.d[0];
        is_int = fill.is_int;
        free(fill.d);
    }
    ox_val *o = ox_set_const(c, n, 0, nd, s, is_int);
    if (!o)
        return c->rc;
    for (int64_t i = 0; i < o->numel; i++)
        o->d[i] = v;
    return TE_OK;
}

int ox_transpose(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x);
    int64_t perm[TE_MAX_DIMS + 1];
    int k = ox_attr_ints(n, "perm", perm, TE_MAX_DIMS + 1);
    if (k < 0)
        for (k = 0; k < nd; k++)
            perm[k] = nd - 1 - k;
    if (k != nd)
        return ox_nfail(c, n, TE_ERR_ARG, "perm has %d axes for rank %d", k, nd);
    char a[128] = "perm=";
    for (int d = 0; d < nd; d++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? ":" : "", perm[d]);
    return ox_set_out(c, n, 0, ox_gnode(c, n, "transpose", a, 1, &x, NULL));
}

/* Split: one slice node per output, sizes from the `split` input (opset 13+) or attribute,
 * else equal parts (opset 18's num_outputs: ceil(dim / n) each, the rest in the last). */
int ox_split(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    int nd = te_graph_value_ndim(c->g, x), nout = (int)n->n_output;
    int64_t axis = ox_attr_i(n, "axis", 0), sizes[64];
    if (axis < -nd || axis >= nd)
        return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " outside rank %d", axis, nd);
    axis = axis < 0 ? axis + nd : axis;
    int64_t dim = te_graph_value_shape(c->g, x)[axis];
    if (nout < 1 || nout > 64)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "%d outputs (1 to 64 supported)", nout);
    int k = c->opset >= 13 ? (ox_in(c, n, 1) ? ox_in_ints(c, n, 1, sizes, 64) : -1)
                           : ox_attr_ints(n, "split", sizes, 64);
    if (c->rc)
        return c->rc;
    if (k >= 0 && k != nout)
        return ox_nfail(c, n, TE_ERR_ARG, "split lists %d sizes for %d outputs", k, nout);
    if (k < 0) {
        int64_t parts = ox_attr_i(n, "num_outputs", nout);
        if (parts != nout)
            return ox_nfail(c, n, TE_ERR_ARG, "num_outputs %" PRId64 " but %d outputs", parts,
                            nout);
        if (dim % nout && !(c->opset >= 18 && ox_attr(n, "num_outputs")))
            return ox_nfail(c, n, TE_ERR_SHAPE,
                            "axis %" PRId64 " (extent %" PRId64
                            ") does not split evenly into %d outputs",
                            axis, dim, nout);
        int64_t chunk = (dim + nout - 1) / nout;
        for (int i = 0; i < nout; i++)
            sizes[i] = i < nout - 1 ? chunk : dim - chunk * (nout - 1);
    }
    int64_t off = 0;
    for (int i = 0; i < nout; i++) {
        if (sizes[i] < 1 || sizes[i] > dim - off)
            return ox_nfail(c, n, TE_ERR_SHAPE,
                            "output %d would have %" PRId64 " elements of axis %" PRId64
                            " (extent %" PRId64 ", %" PRId64 " left); sizes must be >= 1 and "
                            "sum to the extent",
                            i + 1, sizes[i], axis, dim, dim - off);
        if (n->output[i] && *n->output[i]) {
            char a[128], nm[48];
            snprintf(a, sizeof a, "axes=%" PRId64 ",starts=%" PRId64 ",ends=%" PRId64, axis, off,
                     off + sizes[i]);
            ox_graph_name(c, n->output[i], nm, sizeof nm);
            int y = te_graph_node(c->g, "slice", a, 1, &x, nm);
            if (y < 0)
                return ox_nfail(c, n, y, "%s", te_graph_errmsg(c->g));
            int rc = ox_set_out(c, n, (size_t)i, y);
            if (rc)
                return rc;
        }
        off += sizes[i];
    }
    if (off != dim)
        return ox_nfail(c, n, TE_ERR_SHAPE,
                        "sizes sum to %" PRId64 " but axis %" PRId64 " has extent %" PRId64, off,
                        axis, dim);
    return TE_OK;
}

/* Where(condition, X, Y): a where node; a constant condition becomes a float 0/1 constant, a
 * bool input is u8, and any non-zero element selects X. */
int ox_where(ox_ctx *c, const Onnx__NodeProto *n)
{
    if (n->n_input != 3)
        return ox_nfail(c, n, TE_ERR_ARG, "needs three inputs (condition, X, Y)");
    int ins[3];
    for (size_t i = 0; i < 3; i++)
        if ((ins[i] = ox_in_gv(c, n, i)) < 0)
            return ins[i];
    return ox_set_out(c, n, 0, ox_gnode(c, n, "where", NULL, 3, ins, NULL));
}

/* Expand(X, shape): an expand node; the shape must be a constant (or a folded shape
 * computation). */
int ox_expand(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t s[TE_MAX_DIMS + 1];
    int k = ox_in_ints(c, n, 1, s, TE_MAX_DIMS + 1);
    if (k < 0)
        return k;
    if (k < 1 || k > TE_MAX_DIMS)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "target rank %d (1 to %d supported)", k,
                        TE_MAX_DIMS);
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    char a[200] = "shape=";
    for (int d = 0; d < k; d++) {
        if (s[d] < 1)
            return ox_nfail(c, n, TE_ERR_SHAPE, "target extent %" PRId64 " on axis %d", s[d], d);
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? ":" : "", s[d]);
    }
    return ox_set_out(c, n, 0, ox_gnode(c, n, "expand", a, 1, &x, NULL));
}
