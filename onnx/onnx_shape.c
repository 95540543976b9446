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
int ox_fold_gather(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0), *idx = ox_in(c, n, 1);
    if (!x || !idx || x->kind != OX_CONST || idx->kind != OX_CONST)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "Gather is supported on constants and shapes only");
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

int ox_fold_concat(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t axis = ox_attr_i(n, "axis", 0), s[TE_MAX_DIMS];
    ox_val *first = ox_in(c, n, 0);
    for (size_t i = 0; i < n->n_input; i++) {
        ox_val *v = ox_in(c, n, i);
        if (!v || v->kind != OX_CONST)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                            "Concat is supported on constants and shapes only");
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

int ox_fold_slice(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *x = ox_in(c, n, 0);
    if (!x || x->kind != OX_CONST || x->ndim != 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "Slice is supported on 1-D constants and shapes only");
    int64_t st[1], en[1], ax[1] = {0}, sp[1] = {1};
    int ns, ne;
    if (c->opset < 10) {
        ns = ox_attr_ints(n, "starts", st, 1);
        ne = ox_attr_ints(n, "ends", en, 1);
    } else {
        ns = ox_in_ints(c, n, 1, st, 1);
        ne = c->rc ? -1 : ox_in_ints(c, n, 2, en, 1);
        if (!c->rc && ox_in(c, n, 3))
            ox_in_ints(c, n, 3, ax, 1);
        if (!c->rc && ox_in(c, n, 4))
            ox_in_ints(c, n, 4, sp, 1);
    }
    if (c->rc)
        return c->rc;
    if (ns != 1 || ne != 1 || (ax[0] != 0 && ax[0] != -1) || sp[0] != 1)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "only unit-step slices of one axis");
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
