/* ONNX quantized operators onto graph operators: MatMulInteger (matmul_integer, or
 * matmul_integer_zp with zero points as tensors) and QLinearMatMul (qlinear_matmul, or
 * matmul_integer + requantize_axis with per-column weight scales) with A's leading axes folded
 * into rows as MatMul's import does, QuantizeLinear / DequantizeLinear (quantize_linear /
 * dequantize_linear per tensor, quantize_axis / dequantize_axis along `axis`),
 * DynamicQuantizeLinear (dynamic_quantize), ConvInteger and QLinearConv (conv2d on
 * zero-point-shifted i32 operands, the bias added in i32, requantize_axis along the output
 * channels). Scales and zero points that the importer reads must be constants; per-tensor ones
 * go into attributes, per-axis ones become 1-D graph constants read along the axis. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* The ONNX name of input i of n, for messages. */
static const char *in_name(const Onnx__NodeProto *n, size_t i)
{
    return i < n->n_input && n->input[i] ? n->input[i] : "";
}

/* Constant input i (role names it), or NULL with a recorded status. */
static ox_val *const_in(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role)
{
    ox_val *v = ox_in(c, n, i);
    if (!v) {
        ox_nfail(c, n, TE_ERR_ARG, "input %zu (%s) is missing", i + 1, role);
        return NULL;
    }
    if (v->kind != OX_CONST) {
        ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                 "%s '%s' must be a constant (an initializer or a Constant node): the importer "
                 "reads its values",
                 role, in_name(n, i));
        return NULL;
    }
    return v;
}

/* Whether constant v holds several different values. */
static int several(const ox_val *v)
{
    for (int64_t k = 1; k < v->numel; k++)
        if (v->d[k] != v->d[0])
            return 1;
    return 0;
}

/* Checks that constant v of several values is 1-D with `extent` of them (extent 0: the input
 * is per tensor only, refused as such); per says what it means ("per-column"). */
static int per_axis_ok(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const ox_val *v,
                       const char *role, const char *per, int64_t extent, const char *what)
{
    if (!extent)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "%s '%s' has %" PRId64 " different values (%s quantization): only "
                        "per-tensor quantization is supported here",
                        role, in_name(n, i), v->numel, per);
    if (v->ndim != 1 || v->numel != extent)
        return ox_nfail(c, n, TE_ERR_SHAPE,
                        "%s '%s' has %" PRId64 " values (rank %d) but %s has %" PRId64
                        ": a %s parameter is 1-D with one value per index",
                        role, in_name(n, i), v->numel, v->ndim, what, extent, per);
    return TE_OK;
}

/* A scale: positive finite float32 constant(s). One value (or all equal) is per tensor: *s,
 * *gv = -1; several are per axis (extent of them, see per_axis_ok): *gv = an f32 graph constant
 * [extent] and *s its first value. */
static int scale_in(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                    const char *per, int64_t extent, const char *what, double *s, int *gv)
{
    *gv = -1;
    ox_val *v = const_in(c, n, i, role);
    if (!v)
        return c->rc;
    if (v->elem != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "%s '%s' has element type %d; float32 expected",
                        role, in_name(n, i), (int)v->elem);
    for (int64_t k = 0; k < v->numel; k++)
        if (!(v->d[k] > 0) || !isfinite(v->d[k])) {
            if (v->numel == 1)
                return ox_nfail(c, n, TE_ERR_ARG, "%s '%s' is %g; a scale is positive and finite",
                                role, in_name(n, i), v->d[k]);
            return ox_nfail(c, n, TE_ERR_ARG,
                            "%s '%s' element %" PRId64 " is %g; a scale is positive and finite",
                            role, in_name(n, i), k, v->d[k]);
        }
    if (!v->numel)
        return ox_nfail(c, n, TE_ERR_ARG, "%s '%s' is empty", role, in_name(n, i));
    *s = v->d[0];
    if (!several(v))
        return TE_OK;
    if (per_axis_ok(c, n, i, v, role, per, extent, what))
        return c->rc;
    *gv = ox_materialize_as(c, v, TE_F32);
    return *gv < 0 ? *gv : TE_OK;
}

/* A zero point for values of dtype dt (absent: 0), constant(s) of dt's element type inside its
 * range; per tensor or per axis as scale_in (*gv a graph constant of dtype dt). */
static int zero_in(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role, const char *per,
                   int64_t extent, const char *what, te_dtype dt, int32_t *out, int *gv)
{
    *out = 0, *gv = -1;
    if (!ox_in(c, n, i))
        return TE_OK;
    ox_val *v = const_in(c, n, i, role);
    if (!v)
        return c->rc;
    te_dtype zd = ox_elem_dtype(v->elem);
    if (zd != dt || v->elem == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
        return ox_nfail(c, n, TE_ERR_DTYPE,
                        "%s '%s' has element type %d but the values it applies to are %s (the "
                        "types must match)",
                        role, in_name(n, i), (int)v->elem, te_dtype_str(dt));
    double lo = dt == TE_U8 ? 0 : dt == TE_I8 ? -128 : INT32_MIN;
    double hi = dt == TE_U8 ? 255 : dt == TE_I8 ? 127 : INT32_MAX;
    for (int64_t k = 0; k < v->numel; k++)
        if (!(v->d[k] >= lo && v->d[k] <= hi))
            return ox_nfail(c, n, TE_ERR_ARG, "%s '%s' is %g, outside the range [%g, %g] of %s",
                            role, in_name(n, i), v->d[k], lo, hi, te_dtype_str(dt));
    if (!v->numel)
        return TE_OK;
    *out = (int32_t)v->d[0];
    if (!several(v))
        return TE_OK;
    if (per_axis_ok(c, n, i, v, role, per, extent, what))
        return c->rc;
    *gv = ox_materialize_as(c, v, dt);
    return *gv < 0 ? *gv : TE_OK;
}

/* The per-tensor forms of scale_in / zero_in: several values are refused. */
static int scale_of(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                    const char *per, double *out)
{
    int gv;
    return scale_in(c, n, i, role, per, 0, "", out, &gv);
}

static int zero_of(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role, const char *per,
                   te_dtype dt, int32_t *out)
{
    int gv;
    return zero_in(c, n, i, role, per, 0, "", dt, out, &gv);
}

/* A graph constant [count] of dtype dt (u8, i8, i32 or f32) from doubles; its id or a status. */
static int const_vec(ox_ctx *c, const Onnx__NodeProto *n, const char *base, te_dtype dt,
                     int64_t count, const double *vals)
{
    size_t es = te_dtype_size(dt);
    unsigned char *buf = malloc(es * (size_t)(count > 0 ? count : 1));
    if (!buf)
        return ox_nfail(c, n, TE_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < count; k++) {
        if (dt == TE_U8)
            buf[k] = (uint8_t)vals[k];
        else if (dt == TE_I8)
            ((int8_t *)buf)[k] = (int8_t)vals[k];
        else if (dt == TE_I32)
            ((int32_t *)buf)[k] = (int32_t)vals[k];
        else
            ((float *)buf)[k] = (float)vals[k];
    }
    char nm[48];
    ox_graph_name(c, base, nm, sizeof nm);
    int id = te_graph_const(c->g, nm, dt, 1, (int64_t[]){count}, buf);
    free(buf);
    return id < 0 ? ox_nfail(c, n, id, "%s", te_graph_errmsg(c->g)) : id;
}

/* A one-element graph constant of dtype dt holding v. */
static int const_one(ox_ctx *c, const Onnx__NodeProto *n, const char *base, te_dtype dt, double v)
{
    return const_vec(c, n, base, dt, 1, &v);
}

/* The extent of axis `axis` of graph value x (negative counts from the end) into *extent and
 * the normalized axis into *ax; a status for an axis outside x. */
static int axis_of(ox_ctx *c, const Onnx__NodeProto *n, int x, int64_t axis, int *ax,
                   int64_t *extent)
{
    int nd = te_graph_value_ndim(c->g, x);
    if (axis < -nd || axis >= nd)
        return ox_nfail(c, n, TE_ERR_ARG, "axis %" PRId64 " is outside the %d axes of input '%s'",
                        axis, nd, in_name(n, 0));
    *ax = (int)(axis < 0 ? axis + nd : axis);
    *extent = te_graph_value_shape(c->g, x)[*ax];
    return TE_OK;
}

/* Graph value of quantized operand i (u8 or i8), or a recorded status. */
static int quant_operand(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                         te_dtype *dt)
{
    int v = ox_in_gv(c, n, i);
    if (v < 0)
        return v;
    *dt = te_graph_value_dtype(c->g, v);
    if (*dt != TE_U8 && *dt != TE_I8)
        return ox_nfail(c, n, TE_ERR_DTYPE, "input %s '%s' is %s; uint8 or int8 expected", role,
                        in_name(n, i), te_dtype_str(*dt));
    return v;
}

/* op (matmul_integer, matmul_integer_zp or qlinear_matmul) on A [..., m, k] and B [k, n] (and
 * nextra more inputs: zero points), then requantize_axis by the multipliers m_gv along the
 * columns when m_gv >= 0 (epi: its attributes): A's leading axes folded into rows and restored
 * on the output. */
static int quant_matmul(ox_ctx *c, const Onnx__NodeProto *n, const char *op, const char *attrs,
                        int a, int b, int nextra, const int *extra, int m_gv, const char *epi)
{
    int na = te_graph_value_ndim(c->g, a), nb = te_graph_value_ndim(c->g, b);
    int64_t sa[TE_MAX_DIMS], so[TE_MAX_DIMS];
    memcpy(sa, te_graph_value_shape(c->g, a), (size_t)na * sizeof *sa);
    if (nb != 2)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "B has rank %d: only a 2-D B [k, n] is supported (no batched B)", nb);
    if (na < 2)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "1-D operands are not supported");
    int64_t rows = 1;
    for (int d = 0; d < na - 1; d++)
        rows *= sa[d];
    int a2 = na == 2 ? a : ox_reshape(c, n, a, 2, (int64_t[]){rows, sa[na - 1]}, "rows");
    int ins[4] = {a2, b, nextra > 0 ? extra[0] : -1, nextra > 1 ? extra[1] : -1};
    int last = na == 2 && m_gv < 0;
    int y = a2 < 0 ? a2 : ox_gnode(c, n, op, attrs, 2 + nextra, ins, last ? NULL : "mm");
    if (y >= 0 && m_gv >= 0)
        y = ox_gnode(c, n, "requantize_axis", epi, 2, (int[]){y, m_gv}, na == 2 ? NULL : "q");
    if (y < 0 || na == 2)
        return y;
    memcpy(so, sa, sizeof so);
    so[na - 1] = te_graph_value_shape(c->g, b)[1];
    return ox_reshape(c, n, y, na, so, NULL);
}

/* The column count of a 2-D B (0 otherwise: quant_matmul refuses it). */
static int64_t cols_of(ox_ctx *c, int b)
{
    return te_graph_value_ndim(c->g, b) == 2 ? te_graph_value_shape(c->g, b)[1] : 0;
}

/* A zero point of MatMulInteger computed in the graph (DynamicQuantizeLinear's): a graph value
 * of dtype dt with one element, or count of them (per column). Its id or a status. */
static int computed_zero(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                         te_dtype dt, int64_t count)
{
    int z = ox_in_gv(c, n, i);
    if (z < 0)
        return z;
    int64_t numel = 1;
    for (int d = 0; d < te_graph_value_ndim(c->g, z); d++)
        numel *= te_graph_value_shape(c->g, z)[d];
    if (te_graph_value_dtype(c->g, z) != dt)
        return ox_nfail(c, n, TE_ERR_DTYPE,
                        "%s '%s' is %s but the values it applies to are %s (the types must match)",
                        role, in_name(n, i), te_dtype_str(te_graph_value_dtype(c->g, z)),
                        te_dtype_str(dt));
    if (numel != 1 && (numel != count || te_graph_value_ndim(c->g, z) != 1))
        return ox_nfail(c, n, TE_ERR_SHAPE,
                        "%s '%s' has %" PRId64 " elements; a computed zero point has one%s", role,
                        in_name(n, i), numel, count > 1 ? " or one per column" : "");
    return numel == 1 && te_graph_value_ndim(c->g, z) != 1
               ? ox_reshape(c, n, z, 1, (int64_t[]){1}, role)
               : z;
}

/* MatMulInteger(A, B, a_zero_point, b_zero_point): int32 A B with zero points subtracted; per
 * tensor as attributes, per column (B's) or computed ones (DynamicQuantizeLinear's) as tensor
 * inputs of matmul_integer_zp. */
static int matmul_integer(ox_ctx *c, const Onnx__NodeProto *n)
{
    te_dtype da, db;
    int32_t za = 0, zb = 0;
    int zag = -1, zbg = -1;
    int a = quant_operand(c, n, 0, "A", &da);
    int b = a < 0 ? a : quant_operand(c, n, 1, "B", &db);
    if (b < 0)
        return c->rc;
    int64_t nc = cols_of(c, b);
    ox_val *av = ox_in(c, n, 2), *bv = ox_in(c, n, 3);
    if (av && av->kind != OX_CONST)
        zag = computed_zero(c, n, 2, "a_zero_point", da, 1);
    else if (zero_in(c, n, 2, "a_zero_point", "per-row", 0, "", da, &za, &zag))
        return c->rc;
    if (zag < -1 || c->rc)
        return c->rc;
    if (bv && bv->kind != OX_CONST)
        zbg = computed_zero(c, n, 3, "b_zero_point", db, nc);
    else if (zero_in(c, n, 3, "b_zero_point", "per-column", nc, "B's column count", db, &zb, &zbg))
        return c->rc;
    if (zbg < -1 || c->rc)
        return c->rc;
    if (zag < 0 && zbg < 0) {
        char at[64];
        snprintf(at, sizeof at, "a_zero=%d,b_zero=%d", (int)za, (int)zb);
        return ox_set_out(c, n, 0,
                          quant_matmul(c, n, "matmul_integer", at, a, b, 0, NULL, -1, NULL));
    }
    if (zag < 0)
        zag = const_one(c, n, "a_zero", da, za);
    if (zag >= 0 && zbg < 0)
        zbg = const_one(c, n, "b_zero", db, zb);
    if (zag < 0 || zbg < 0)
        return c->rc;
    return ox_set_out(
        c, n, 0,
        quant_matmul(c, n, "matmul_integer_zp", NULL, a, b, 2, (int[]){zag, zbg}, -1, NULL));
}

/* The requantization multipliers f32(sa) f32(sb[j]) / f32(sy) (onnxruntime's order and
 * precision) of count columns as an f32 graph constant; sbv the per-column scales, or NULL
 * for sb throughout. */
static int multipliers(ox_ctx *c, const Onnx__NodeProto *n, double sa, const ox_val *sbv, double sb,
                       double sy, int64_t count)
{
    double *m = malloc(sizeof *m * (size_t)(count > 0 ? count : 1));
    if (!m)
        return ox_nfail(c, n, TE_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < count; j++) {
        float f = (float)sa * (float)(sbv ? sbv->d[j] : sb) / (float)sy;
        if (!(f > 0) || !isfinite(f)) {
            free(m);
            return ox_nfail(c, n, TE_ERR_ARG,
                            "the requantization multiplier of column %" PRId64
                            " (scales %g x %g / %g) is %g, not a positive finite float",
                            j, sa, sbv ? sbv->d[j] : sb, sy, (double)f);
        }
        m[j] = f;
    }
    int id = const_vec(c, n, "mult", TE_F32, count, m);
    free(m);
    return id;
}

/* The output dtype *dy of a QLinear* node: its y_zero_point's (input i), uint8 when that is absent
 * or computed; a constant of another type is refused. */
static int output_dtype(ox_ctx *c, const Onnx__NodeProto *n, size_t i, te_dtype *dy)
{
    *dy = TE_U8;
    ox_val *yz = ox_in(c, n, i);
    if (yz && yz->kind == OX_CONST)
        *dy = ox_elem_dtype(yz->elem);
    if (*dy != TE_U8 && *dy != TE_I8)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "y_zero_point '%s' has element type %d: the output is uint8 or int8",
                        in_name(n, i), (int)yz->elem);
    return TE_OK;
}

/* QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
 * the output dtype is y_zero_point's. Per-tensor scales go into the attributes with 17 digits,
 * so that they are read back as the same double (and float); per-column b_scale / b_zero_point
 * ([n]) make it matmul_integer(_zp) + requantize_axis by per-column multipliers. */
static int qlinear_matmul(ox_ctx *c, const Onnx__NodeProto *n)
{
    te_dtype da, db, dy;
    int32_t za, zb, zy;
    double sa, sb, sy;
    int sbg, zbg;
    int rc = output_dtype(c, n, 7, &dy);
    if (rc)
        return rc;
    int a = quant_operand(c, n, 0, "a", &da);
    int b = a < 0 ? a : quant_operand(c, n, 3, "b", &db);
    if (b < 0)
        return c->rc;
    int64_t nc = cols_of(c, b);
    if (scale_of(c, n, 1, "a_scale", "per-row", &sa) ||
        zero_of(c, n, 2, "a_zero_point", "per-row", da, &za) ||
        scale_in(c, n, 4, "b_scale", "per-column", nc, "b's column count", &sb, &sbg) ||
        zero_in(c, n, 5, "b_zero_point", "per-column", nc, "b's column count", db, &zb, &zbg) ||
        scale_of(c, n, 6, "y_scale", "per-column", &sy) ||
        zero_of(c, n, 7, "y_zero_point", "per-column", dy, &zy))
        return c->rc;
    char at[256];
    if (sbg < 0 && zbg < 0) {
        snprintf(at, sizeof at,
                 "a_scale=%.17g,a_zero=%d,b_scale=%.17g,b_zero=%d,y_scale=%.17g,y_zero=%d,"
                 "y_dtype=%s",
                 sa, (int)za, sb, (int)zb, sy, (int)zy, te_dtype_str(dy));
        return ox_set_out(c, n, 0,
                          quant_matmul(c, n, "qlinear_matmul", at, a, b, 0, NULL, -1, NULL));
    }
    int mg = multipliers(c, n, sa, sbg >= 0 ? ox_in(c, n, 4) : NULL, sb, sy, nc);
    if (mg < 0)
        return mg;
    char epi[64];
    snprintf(epi, sizeof epi, "axis=-1,zero=%d,to=%s", (int)zy, te_dtype_str(dy));
    if (zbg < 0) {
        snprintf(at, sizeof at, "a_zero=%d,b_zero=%d", (int)za, (int)zb);
        return ox_set_out(c, n, 0,
                          quant_matmul(c, n, "matmul_integer", at, a, b, 0, NULL, mg, epi));
    }
    int zag = const_one(c, n, "a_zero", da, za);
    return zag < 0 ? zag
                   : ox_set_out(c, n, 0,
                                quant_matmul(c, n, "matmul_integer_zp", NULL, a, b, 2,
                                             (int[]){zag, zbg}, mg, epi));
}

/* Refuses opset 21's block quantization. */
static int per_tensor_attrs(ox_ctx *c, const Onnx__NodeProto *n)
{
    if (ox_attr_i(n, "block_size", 0))
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "block_size %" PRId64 ": blocked quantization is not supported",
                        ox_attr_i(n, "block_size", 0));
    return TE_OK;
}

/* Whether QuantizeLinear / DequantizeLinear node n has a constant scale or zero point of several
 * values, so that its axis attribute matters (it means nothing, and is not checked, otherwise). */
static int needs_axis(ox_ctx *c, const Onnx__NodeProto *n)
{
    for (size_t i = 1; i < 3; i++) {
        ox_val *v = ox_in(c, n, i);
        if (v && v->kind == OX_CONST && several(v))
            return 1;
    }
    return 0;
}

/* The node of QuantizeLinear / DequantizeLinear along axis ax once a scale or a zero point is
 * per axis (sg / zg >= 0, else the per-tensor s / z): quantize_axis or dequantize_axis with
 * 1-D scale (and zero point) inputs. */
static int axis_node(ox_ctx *c, const Onnx__NodeProto *n, const char *op, int x, int ax, int sg,
                     double s, int zg, int32_t z, te_dtype zdt, const char *to)
{
    if (sg < 0)
        sg = ox_scalar(c, s);
    if (sg >= 0 && zg < 0 && z)
        zg = const_one(c, n, "zero", zdt, z);
    if (sg < 0 || (z && zg < 0))
        return c->rc;
    char at[48];
    snprintf(at, sizeof at, "axis=%d%s%s", ax, to ? ",to=" : "", to ? to : "");
    return ox_gnode(c, n, op, at, zg >= 0 ? 3 : 2, (int[]){x, sg, zg}, NULL);
}

/* QuantizeLinear(x, y_scale, y_zero_point): y in y_zero_point's type (absent: opset 21's
 * output_dtype, else uint8); per tensor, or per axis (opset 13's axis, default 1) with 1-D
 * parameters as long as that axis. */
static int quantize_linear(ox_ctx *c, const Onnx__NodeProto *n)
{
    double s;
    int32_t z;
    int sg, zg, ax = 0;
    int64_t ext = 0;
    te_dtype to = TE_U8;
    ox_val *zv = ox_in(c, n, 2);
    int32_t od = (int32_t)ox_attr_i(n, "output_dtype", 0);
    if (zv && zv->kind == OX_CONST)
        to = ox_elem_dtype(zv->elem);
    else if (!zv && od)
        to = ox_elem_dtype(od);
    if ((to != TE_U8 && to != TE_I8) || (zv && zv->elem == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL))
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "output element type %d: QuantizeLinear is supported to uint8 and int8",
                        zv ? (int)zv->elem : (int)od);
    int x = ox_in_gv(c, n, 0);
    if (x < 0 || per_tensor_attrs(c, n))
        return c->rc;
    if (te_graph_value_dtype(c->g, x) != TE_F32)
        return ox_nfail(c, n, TE_ERR_DTYPE, "input x '%s' is %s; float32 expected", in_name(n, 0),
                        te_dtype_str(te_graph_value_dtype(c->g, x)));
    if (needs_axis(c, n) && axis_of(c, n, x, ox_attr_i(n, "axis", 1), &ax, &ext))
        return c->rc;
    if (scale_in(c, n, 1, "y_scale", "per-axis", ext, "the axis of x", &s, &sg) ||
        zero_in(c, n, 2, "y_zero_point", "per-axis", ext, "the axis of x", to, &z, &zg))
        return c->rc;
    if (sg >= 0 || zg >= 0)
        return ox_set_out(
            c, n, 0, axis_node(c, n, "quantize_axis", x, ax, sg, s, zg, z, to, te_dtype_str(to)));
    char at[96];
    snprintf(at, sizeof at, "scale=%.17g,zero=%d,to=%s", s, (int)z, te_dtype_str(to));
    return ox_set_out(c, n, 0, ox_gnode(c, n, "quantize_linear", at, 1, &x, NULL));
}

/* DequantizeLinear(x, x_scale, x_zero_point): float32 (x - zero) * scale of uint8, int8 or
 * int32 x (graph values or constants: quantized weights and int32 biases); per tensor or per
 * axis as QuantizeLinear. */
static int dequantize_linear(ox_ctx *c, const Onnx__NodeProto *n)
{
    double s;
    int32_t z;
    int sg, zg, ax = 0;
    int64_t ext = 0;
    ox_val *xv = ox_in(c, n, 0);
    if (!xv)
        return ox_nfail(c, n, TE_ERR_ARG, "input 1 (x) is missing");
    int x = xv->kind == OX_CONST && xv->elem == ONNX__TENSOR_PROTO__DATA_TYPE__INT32
                ? ox_materialize_as(c, xv, TE_I32)
                : ox_materialize(c, xv);
    if (x < 0)
        return x;
    te_dtype dt = te_graph_value_dtype(c->g, x);
    if ((dt != TE_U8 && dt != TE_I8 && dt != TE_I32) ||
        (xv->kind == OX_CONST && xv->elem == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL))
        return ox_nfail(c, n, TE_ERR_DTYPE, "input x '%s' is %s; uint8, int8 or int32 expected",
                        in_name(n, 0), te_dtype_str(dt));
    if (per_tensor_attrs(c, n))
        return c->rc;
    if (needs_axis(c, n) && axis_of(c, n, x, ox_attr_i(n, "axis", 1), &ax, &ext))
        return c->rc;
    if (scale_in(c, n, 1, "x_scale", "per-axis", ext, "the axis of x", &s, &sg) ||
        zero_in(c, n, 2, "x_zero_point", "per-axis", ext, "the axis of x", dt, &z, &zg))
        return c->rc;
    if (sg >= 0 || zg >= 0)
        return ox_set_out(c, n, 0,
                          axis_node(c, n, "dequantize_axis", x, ax, sg, s, zg, z, dt, NULL));
    char at[64];
    snprintf(at, sizeof at, "scale=%.17g,zero=%d", s, (int)z);
    return ox_set_out(c, n, 0, ox_gnode(c, n, "dequantize_linear", at, 1, &x, NULL));
}

/* DynamicQuantizeLinear(x) -> y (uint8), y_scale, y_zero_point: one dynamic_quantize node, the
 * parameters ([1] each) computed from x's range at run time. */
static int dynamic_quantize(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = ox_in_gv(c, n, 0);
    if (x < 0)
        return x;
    if (te_graph_value_dtype(c->g, x) != TE_F32)
        return ox_nfail(c, n, TE_ERR_DTYPE, "input x '%s' is %s; float32 expected", in_name(n, 0),
                        te_dtype_str(te_graph_value_dtype(c->g, x)));
    char nm[3][48], base[96];
    static const char *const sfx[3] = {"", "_scale", "_zero"};
    for (int i = 0; i < 3; i++) {
        snprintf(base, sizeof base, "%s%s", n->output[0], sfx[i]);
        ox_graph_name(
            c, (size_t)i < n->n_output && n->output[i] && *n->output[i] ? n->output[i] : base,
            nm[i], sizeof nm[i]);
    }
    int o[3];
    int rc = te_graph_node_multi(c->g, "dynamic_quantize", NULL, 1, &x, 3,
                                 (const char *const[]){nm[0], nm[1], nm[2]}, o);
    if (rc)
        return ox_nfail(c, n, rc, "%s", te_graph_errmsg(c->g));
    for (int i = 0; i < 3; i++)
        if (ox_set_out(c, n, (size_t)i, o[i]))
            return c->rc;
    return TE_OK;
}

/* A 1x1 ConvInteger (no padding, one group) with a constant w as a matmul over the
 * pixels (any stride: x sliced first): x [N, C, H, W] transposed to NHWC rows [N H W, C],
 * matmul_integer_zp by B [C, OC] = w's bytes transposed with x's zero point and w's (per tensor or
 * per output channel) as constants, back to [N, OC, H, W]: the same integers as the conv (no
 * padding to stand for x's zero point), in the form te_graph_lower_int8 puts on the int8 dot
 * products. wz: the zero point per tensor, or zv (per output channel) when not NULL. The output
 * value or a status. */
static int conv1x1_as_matmul(ox_ctx *c, const Onnx__NodeProto *n, int x, te_dtype dx, int32_t xz,
                             const ox_val *wv, int wg, te_dtype dw, int32_t wz, const ox_val *zv,
                             int64_t stride, const char *suffix)
{
    const int64_t *xs = te_graph_value_shape(c->g, x);
    int64_t nb = xs[0], ch = xs[1], h = xs[2], w = xs[3];
    if (stride > 1) { /* the pixels a strided 1x1 kernel reads: every stride-th row and column */
        char sl[128];
        snprintf(sl, sizeof sl,
                 "axes=2:3,starts=0:0,ends=%" PRId64 ":%" PRId64 ",steps=%" PRId64 ":%" PRId64, h,
                 w, stride, stride);
        x = ox_gnode(c, n, "slice", sl, 1, &x, "x_strided");
        if (x < 0)
            return x;
        h = (h - 1) / stride + 1, w = (w - 1) / stride + 1;
    }
    int64_t oc = te_graph_value_shape(c->g, wg)[0];
    const void *wd = wv->kind == OX_CONST ? NULL : te_graph_value_data(c->g, wg);
    uint8_t *bt = malloc((size_t)(ch * oc > 0 ? ch * oc : 1));
    double *zb = malloc(sizeof *zb * (size_t)(oc > 0 ? oc : 1));
    if (!bt || !zb) {
        free(bt), free(zb);
        return ox_nfail(c, n, TE_ERR_NOMEM, "out of memory");
    }
    for (int64_t o = 0; o < oc; o++) {
        zb[o] = zv ? zv->d[o] : wz;
        for (int64_t i = 0; i < ch; i++)
            bt[i * oc + o] =
                wd ? ((const uint8_t *)wd)[o * ch + i] : (uint8_t)(int32_t)wv->d[o * ch + i];
    }
    char raw[64], nm[64];
    snprintf(raw, sizeof raw, "%.40s_cols", te_graph_value_name(c->g, wg));
    ox_graph_name(c, raw, nm, sizeof nm);
    int b = te_graph_const(c->g, nm, dw, 2, (int64_t[]){ch, oc}, bt);
    free(bt);
    if (b < 0) {
        free(zb);
        return ox_nfail(c, n, b, "%s", te_graph_errmsg(c->g));
    }
    int zbg = const_vec(c, n, "w_zero", dw, oc, zb);
    free(zb);
    int zag = zbg < 0 ? zbg : const_one(c, n, "x_zero", dx, xz);
    int xt = zag < 0 ? zag : ox_gnode(c, n, "transpose", "perm=0:2:3:1", 1, &x, "x_nhwc");
    int xr = xt < 0 ? xt : ox_reshape(c, n, xt, 2, (int64_t[]){nb * h * w, ch}, "x_rows");
    int mm =
        xr < 0 ? xr
               : ox_gnode(c, n, "matmul_integer_zp", NULL, 4, (int[]){xr, b, zag, zbg}, "acc_rows");
    int y4 = mm < 0 ? mm : ox_reshape(c, n, mm, 4, (int64_t[]){nb, h, w, oc}, "acc_nhwc");
    return y4 < 0 ? y4 : ox_gnode(c, n, "transpose", "perm=0:3:1:2", 1, &y4, suffix);
}

/* ConvInteger / QLinearConv's accumulator: conv2d of i32(x) - x_zero and i32(w) - w_zero[oc]
 * (w a constant: shifted once here; a graph value: per-tensor zero only), in i32, the padding
 * zeros being x's zero point as onnxruntime pads. xi, wi, xzi, wzi: the inputs' positions;
 * suffix: of the conv's output name (NULL: the node's output itself). The conv's output value or
 * a status; *oc the output channels, *wzg_out / *wzv_out the per-channel zero points' graph
 * constant and ONNX value (-1 / NULL when per tensor). */
static int conv_acc(ox_ctx *c, const Onnx__NodeProto *n, size_t xi, size_t wi, size_t xzi,
                    size_t wzi, const char *suffix, int64_t *oc, int *wzg_out,
                    const ox_val **wzv_out)
{
    te_dtype dx, dw;
    int32_t xz, wz;
    int wzg;
    int x = quant_operand(c, n, xi, "x", &dx);
    int w = x < 0 ? x : quant_operand(c, n, wi, "w", &dw);
    if (w < 0)
        return c->rc;
    char at[128];
    if (ox_conv_attrs(c, n, x, w, at, sizeof at))
        return c->rc;
    const int64_t *ws = te_graph_value_shape(c->g, w);
    *oc = ws[0];
    if (zero_of(c, n, xzi, "x_zero_point", "per-channel", dx, &xz) ||
        zero_in(c, n, wzi, "w_zero_point", "per-output-channel", *oc,
                "w's output channels (axis 0)", dw, &wz, &wzg))
        return c->rc;
    *wzg_out = wzg;
    *wzv_out = wzg >= 0 ? ox_in(c, n, wzi) : NULL;
    ox_val *wv = ox_in(c, n, wi);
    bool wconst = wv->kind == OX_CONST || (te_graph_value_kind_of(c->g, w) == TE_GRAPH_CONST &&
                                           te_graph_value_data(c->g, w));
    long long st1 = 0, pad1 = -1, dil1 = 0, grp1 = 0; /* ox_conv_attrs' attributes */
    if (wconst && ws[2] == 1 && ws[3] == 1 && te_graph_value_ndim(c->g, x) == 4 &&
        sscanf(at, "stride=%lld,pad=%lld,dilation=%lld,groups=%lld", &st1, &pad1, &dil1, &grp1) ==
            4 &&
        pad1 == 0 && grp1 == 1 && st1 >= 1)
        return conv1x1_as_matmul(c, n, x, dx, xz, wv, w, dw, wz, *wzv_out, st1, suffix);
    int xs = ox_gnode(c, n, "cast", "to=i32", 1, &x, "x_i32");
    if (xs >= 0 && xz) {
        int k = const_one(c, n, "x_zero", TE_I32, xz);
        xs = k < 0 ? k : ox_gnode(c, n, "sub", NULL, 2, (int[]){xs, k}, "x_s");
    }
    if (xs < 0)
        return xs;
    int w32;
    if (wv->kind == OX_CONST) {
        const ox_val *zv = ox_in(c, n, wzi);
        int64_t per = wv->numel / (*oc > 0 ? *oc : 1);
        int32_t *d = malloc(sizeof *d * (size_t)(wv->numel > 0 ? wv->numel : 1));
        if (!d)
            return ox_nfail(c, n, TE_ERR_NOMEM, "out of memory");
        for (int64_t e = 0; e < wv->numel; e++)
            d[e] = (int32_t)wv->d[e] - (wzg >= 0 ? (int32_t)zv->d[e / per] : wz);
        char nm[48];
        ox_graph_name(c, in_name(n, wi), nm, sizeof nm);
        w32 = te_graph_const(c->g, nm, TE_I32, 4, ws, d);
        free(d);
        if (w32 < 0)
            return ox_nfail(c, n, w32, "%s", te_graph_errmsg(c->g));
    } else {
        if (wzg >= 0)
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                            "w_zero_point '%s' is per output channel but w '%s' is not a constant",
                            in_name(n, wzi), in_name(n, wi));
        w32 = ox_gnode(c, n, "cast", "to=i32", 1, &w, "w_i32");
        if (w32 >= 0 && wz) {
            int k = const_one(c, n, "w_zero", TE_I32, wz);
            w32 = k < 0 ? k : ox_gnode(c, n, "sub", NULL, 2, (int[]){w32, k}, "w_s");
        }
        if (w32 < 0)
            return w32;
    }
    return ox_gnode(c, n, "conv2d", at, 2, (int[]){xs, w32}, suffix);
}

/* ConvInteger(x, w, x_zero_point, w_zero_point): the i32 accumulator. */
static int conv_integer(ox_ctx *c, const Onnx__NodeProto *n)
{
    int64_t oc;
    int wzg;
    const ox_val *wzv;
    return ox_set_out(c, n, 0, conv_acc(c, n, 0, 1, 2, 3, NULL, &oc, &wzg, &wzv));
}

/* QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B):
 * the accumulator plus B (int32, per output channel), requantized along the output channels by
 * f32(x_scale) f32(w_scale[oc]) / f32(y_scale) (w_scale per tensor or per output channel). */
static int qlinear_conv(ox_ctx *c, const Onnx__NodeProto *n)
{
    te_dtype dy;
    int rc = output_dtype(c, n, 7, &dy);
    if (rc)
        return rc;
    int64_t oc;
    int wzg, swg;
    const ox_val *wzv;
    double sx, sw, sy;
    int32_t zy;
    if (scale_of(c, n, 1, "x_scale", "per-channel", &sx))
        return c->rc;
    int acc = conv_acc(c, n, 0, 3, 2, 5, "acc", &oc, &wzg, &wzv);
    if (acc < 0)
        return acc;
    if (scale_in(c, n, 4, "w_scale", "per-output-channel", oc, "w's output channels (axis 0)", &sw,
                 &swg) ||
        scale_of(c, n, 6, "y_scale", "per-channel", &sy) ||
        zero_of(c, n, 7, "y_zero_point", "per-channel", dy, &zy))
        return c->rc;
    ox_val *bv = ox_in(c, n, 8);
    if (bv) {
        if (bv->kind != OX_CONST || bv->elem != ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
            return ox_nfail(c, n, TE_ERR_DTYPE,
                            "B '%s' must be an int32 constant (one value per output channel)",
                            in_name(n, 8));
        if (bv->numel != oc)
            return ox_nfail(c, n, TE_ERR_SHAPE,
                            "B '%s' has %" PRId64 " values for %" PRId64 " output channels",
                            in_name(n, 8), bv->numel, oc);
        int b = ox_materialize_as(c, bv, TE_I32);
        b = b < 0 ? b : ox_reshape(c, n, b, 3, (int64_t[]){oc, 1, 1}, "bias");
        acc = b < 0 ? b : ox_gnode(c, n, "add", NULL, 2, (int[]){acc, b}, "acc_b");
        if (acc < 0)
            return acc;
    }
    int mg = multipliers(c, n, sx, swg >= 0 ? ox_in(c, n, 4) : NULL, sw, sy, oc);
    if (mg < 0)
        return mg;
    char epi[64];
    snprintf(epi, sizeof epi, "axis=1,zero=%d,to=%s", (int)zy, te_dtype_str(dy));
    return ox_set_out(c, n, 0, ox_gnode(c, n, "requantize_axis", epi, 2, (int[]){acc, mg}, NULL));
}

static const char *const quant_ops[] = {
    "MatMulInteger",         "QLinearMatMul", "QuantizeLinear", "DequantizeLinear",
    "DynamicQuantizeLinear", "ConvInteger",   "QLinearConv"};

int ox_quant_supported(const char *op_type)
{
    for (size_t i = 0; i < sizeof quant_ops / sizeof quant_ops[0]; i++)
        if (!strcmp(quant_ops[i], op_type))
            return 1;
    return 0;
}

int ox_convert_quant(ox_ctx *c, const Onnx__NodeProto *n, const char *op)
{
    if (!ox_quant_supported(op))
        return 0;
    if (!strcmp(op, "MatMulInteger"))
        matmul_integer(c, n);
    else if (!strcmp(op, "QLinearMatMul"))
        qlinear_matmul(c, n);
    else if (!strcmp(op, "QuantizeLinear"))
        quantize_linear(c, n);
    else if (!strcmp(op, "DequantizeLinear"))
        dequantize_linear(c, n);
    else if (!strcmp(op, "DynamicQuantizeLinear"))
        dynamic_quantize(c, n);
    else if (!strcmp(op, "ConvInteger"))
        conv_integer(c, n);
    else
        qlinear_conv(c, n);
    return 1;
}
