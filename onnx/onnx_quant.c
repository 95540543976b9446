/* ONNX quantized operators onto graph operators: MatMulInteger (matmul_integer) and
 * QLinearMatMul (qlinear_matmul) with A's leading axes folded into rows as MatMul's import does,
 * QuantizeLinear (quantize_linear) and DequantizeLinear (dequantize_linear). Scales and zero
 * points are per tensor and must be constants, since the graph operators take them as
 * attributes: a 1-D one of several different values (per row, per column, per axis) is refused
 * naming the node and the input; one whose values are all equal is per tensor. */
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

/* The one value of constant input i (a scalar, or all elements equal): TE_OK with *out, or a
 * recorded status. what: "scale" or "zero point"; role names the input ("a_scale"); per: what
 * a 1-D tensor of different values would mean ("per-row", "per-axis"). */
static int per_tensor(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                      const char *per, double *out)
{
    ox_val *v = ox_in(c, n, i);
    if (!v)
        return ox_nfail(c, n, TE_ERR_ARG, "input %zu (%s) is missing", i + 1, role);
    if (v->kind != OX_CONST)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "%s '%s' must be a constant (an initializer or a Constant node): the graph "
                        "operator takes it as an attribute",
                        role, in_name(n, i));
    for (int64_t k = 1; k < v->numel; k++)
        if (v->d[k] != v->d[0])
            return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                            "%s '%s' has %" PRId64 " different values (%s quantization): only "
                            "per-tensor quantization is supported",
                            role, in_name(n, i), v->numel, per);
    *out = v->d[0];
    return TE_OK;
}

/* A scale: a positive finite float32 constant. */
static int scale_of(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role,
                    const char *per, double *out)
{
    int rc = per_tensor(c, n, i, role, per, out);
    if (rc)
        return rc;
    const ox_val *v = ox_in(c, n, i);
    if (v->elem != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "%s '%s' has element type %d; float32 expected",
                        role, in_name(n, i), (int)v->elem);
    if (!(*out > 0) || !isfinite(*out))
        return ox_nfail(c, n, TE_ERR_ARG, "%s '%s' is %g; a scale is positive and finite", role,
                        in_name(n, i), *out);
    return TE_OK;
}

/* A zero point for values of dtype dt (absent: 0). Its element type must be dt's and its value
 * inside dt's range. */
static int zero_of(ox_ctx *c, const Onnx__NodeProto *n, size_t i, const char *role, const char *per,
                   te_dtype dt, int32_t *out)
{
    *out = 0;
    if (!ox_in(c, n, i))
        return TE_OK;
    double z;
    int rc = per_tensor(c, n, i, role, per, &z);
    if (rc)
        return rc;
    const ox_val *v = ox_in(c, n, i);
    te_dtype zd = ox_elem_dtype(v->elem);
    if (zd != dt || v->elem == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
        return ox_nfail(c, n, TE_ERR_DTYPE,
                        "%s '%s' has element type %d but the values it applies to are %s (the "
                        "types must match)",
                        role, in_name(n, i), (int)v->elem, te_dtype_str(dt));
    double lo = dt == TE_U8 ? 0 : dt == TE_I8 ? -128 : INT32_MIN;
    double hi = dt == TE_U8 ? 255 : dt == TE_I8 ? 127 : INT32_MAX;
    if (!(z >= lo && z <= hi))
        return ox_nfail(c, n, TE_ERR_ARG, "%s '%s' is %g, outside the range [%g, %g] of %s", role,
                        in_name(n, i), z, lo, hi, te_dtype_str(dt));
    *out = (int32_t)z;
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

/* op (matmul_integer or qlinear_matmul) on A [..., m, k] and B [k, n]: A's leading axes
 * folded into rows and restored on the output. */
static int quant_matmul(ox_ctx *c, const Onnx__NodeProto *n, const char *op, const char *attrs,
                        int a, int b)
{
    int na = te_graph_value_ndim(c->g, a), nb = te_graph_value_ndim(c->g, b);
    int64_t sa[TE_MAX_DIMS], so[TE_MAX_DIMS];
    memcpy(sa, te_graph_value_shape(c->g, a), (size_t)na * sizeof *sa);
    if (nb != 2)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "B has rank %d: only a 2-D B [k, n] is supported (no batched B)", nb);
    if (na < 2)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED, "1-D operands are not supported");
    if (na == 2)
        return ox_gnode(c, n, op, attrs, 2, (int[]){a, b}, NULL);
    int64_t rows = 1;
    for (int d = 0; d < na - 1; d++)
        rows *= sa[d];
    int a2 = ox_reshape(c, n, a, 2, (int64_t[]){rows, sa[na - 1]}, "rows");
    int y = a2 < 0 ? a2 : ox_gnode(c, n, op, attrs, 2, (int[]){a2, b}, "mm");
    if (y < 0)
        return y;
    memcpy(so, sa, sizeof so);
    so[na - 1] = te_graph_value_shape(c->g, b)[1];
    return ox_reshape(c, n, y, na, so, NULL);
}

/* MatMulInteger(A, B, a_zero_point, b_zero_point): int32 A B with zero points subtracted. */
static int matmul_integer(ox_ctx *c, const Onnx__NodeProto *n)
{
    te_dtype da, db;
    int32_t za, zb;
    int a = quant_operand(c, n, 0, "A", &da);
    int b = a < 0 ? a : quant_operand(c, n, 1, "B", &db);
    if (b < 0 || zero_of(c, n, 2, "a_zero_point", "per-row", da, &za) ||
        zero_of(c, n, 3, "b_zero_point", "per-column", db, &zb))
        return c->rc;
    char at[64];
    snprintf(at, sizeof at, "a_zero=%d,b_zero=%d", (int)za, (int)zb);
    return ox_set_out(c, n, 0, quant_matmul(c, n, "matmul_integer", at, a, b));
}

/* QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
 * the output dtype is y_zero_point's. Scales go into the attributes with 17 digits, so that
 * they are read back as the same double (and float). */
static int qlinear_matmul(ox_ctx *c, const Onnx__NodeProto *n)
{
    te_dtype da, db, dy = TE_U8;
    int32_t za, zb, zy;
    double sa, sb, sy;
    ox_val *yz = ox_in(c, n, 7);
    if (yz && yz->kind == OX_CONST)
        dy = ox_elem_dtype(yz->elem);
    if (dy != TE_U8 && dy != TE_I8)
        return ox_nfail(c, n, TE_ERR_UNSUPPORTED,
                        "y_zero_point '%s' has element type %d: the output is uint8 or int8",
                        in_name(n, 7), (int)yz->elem);
    int a = quant_operand(c, n, 0, "a", &da);
    int b = a < 0 ? a : quant_operand(c, n, 3, "b", &db);
    if (b < 0 || scale_of(c, n, 1, "a_scale", "per-row", &sa) ||
        zero_of(c, n, 2, "a_zero_point", "per-row", da, &za) ||
        scale_of(c, n, 4, "b_scale", "per-column", &sb) ||
        zero_of(c, n, 5, "b_zero_point", "per-column", db, &zb) ||
        scale_of(c, n, 6, "y_scale", "per-column", &sy) ||
        zero_of(c, n, 7, "y_zero_point", "per-column", dy, &zy))
        return c->rc;
    char at[256];
    snprintf(at, sizeof at,
             "a_scale=%.17g,a_zero=%d,b_scale=%.17g,b_zero=%d,y_scale=%.17g,y_zero=%d,y_dtype=%s",
             sa, (int)za, sb, (int)zb, sy, (int)zy, te_dtype_str(dy));
    return ox_set_out(c, n, 0, quant_matmul(c, n, "qlinear_matmul", at, a, b));
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

/* QuantizeLinear(x, y_scale, y_zero_point): y in y_zero_point's type (absent: opset 21's
 * output_dtype, else uint8). An axis attribute is accepted with a per-tensor scale, where it
 * means nothing. */
static int quantize_linear(ox_ctx *c, const Onnx__NodeProto *n)
{
    double s;
    int32_t z;
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
    if (x < 0 || per_tensor_attrs(c, n) || scale_of(c, n, 1, "y_scale", "per-axis", &s) ||
        zero_of(c, n, 2, "y_zero_point", "per-axis", to, &z))
        return c->rc;
    if (te_graph_value_dtype(c->g, x) != TE_F32)
        return ox_nfail(c, n, TE_ERR_DTYPE, "input x '%s' is %s; float32 expected", in_name(n, 0),
                        te_dtype_str(te_graph_value_dtype(c->g, x)));
    char at[96];
    snprintf(at, sizeof at, "scale=%.17g,zero=%d,to=%s", s, (int)z, te_dtype_str(to));
    return ox_set_out(c, n, 0, ox_gnode(c, n, "quantize_linear", at, 1, &x, NULL));
}

/* DequantizeLinear(x, x_scale, x_zero_point): float32 (x - zero) * scale of uint8, int8 or
 * int32 x (graph values or constants: quantized weights and int32 biases). */
static int dequantize_linear(ox_ctx *c, const Onnx__NodeProto *n)
{
    double s;
    int32_t z;
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
    if (per_tensor_attrs(c, n) || scale_of(c, n, 1, "x_scale", "per-axis", &s) ||
        zero_of(c, n, 2, "x_zero_point", "per-axis", dt, &z))
        return c->rc;
    char at[64];
    snprintf(at, sizeof at, "scale=%.17g,zero=%d", s, (int)z);
    return ox_set_out(c, n, 0, ox_gnode(c, n, "dequantize_linear", at, 1, &x, NULL));
}

static const char *const quant_ops[] = {"MatMulInteger", "QLinearMatMul", "QuantizeLinear",
                                        "DequantizeLinear"};

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
    else
        dequantize_linear(c, n);
    return 1;
}
