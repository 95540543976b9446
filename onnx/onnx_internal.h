/* Private to onnx/: the importer's state while one model is converted. onnx_load.c reads the
 * ModelProto (initializers, inputs, opsets, node order); onnx_ops.c maps each node onto graph
 * operators. */
#ifndef TESSERA_ONNX_INTERNAL_H
#define TESSERA_ONNX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"
#include "tessera/graph.h"
#include "tessera/onnx.h"

/* What an ONNX tensor name stands for. */
typedef enum ox_kind {
    OX_UNDEF, /* not (yet) produced */
    OX_CONST, /* known while importing: host data (weights, shapes) */
    OX_GRAPH, /* a graph value gv (input, materialized constant, node output) */
    /* Graph values gv tagged as steps of the erf GELU of graph value x (see binary()): */
    OX_ERF,  /* gv = erf(x / sqrt 2), ref = x */
    OX_ERF1, /* gv = 1 + erf(x / sqrt 2), ref = x */
    OX_HALF, /* gv = 0.5 x, ref = x */
    OX_GELU2 /* gv = 2 gelu(x), ref = the gelu(x) value */
} ox_kind;

typedef struct ox_val {
    char *name; /* ONNX name (owned) */
    ox_kind kind;
    int gv;       /* graph value id (every kind but OX_UNDEF and OX_CONST), or -1 */
    int ref;      /* the tagged pattern's other graph value */
    int is_int;   /* OX_CONST: integer element type (int32/int64/bool) */
    int32_t elem; /* OX_CONST from a TensorProto: its ONNX data_type (0 for computed ones) */
    int ndim;     /* OX_CONST: 0 for a scalar */
    int64_t shape[TE_MAX_DIMS];
    int64_t numel;
    double *d; /* OX_CONST data, numel elements (owned) */
} ox_val;

typedef struct ox_ctx {
    te_graph *g;
    const Onnx__ModelProto *model;
    const char *label;
    const char *base_dir;
    int64_t opset;
    ox_val *vals;
    int nvals, capvals;
    char *err;
    size_t errsize;
    int rc;
    int uniq; /* counter for generated graph names */
} ox_ctx;

/* Records the first error ("label: message") and returns rc. */
int ox_fail(ox_ctx *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The value named `name`, created as OX_UNDEF when create; NULL otherwise or out of memory. */
ox_val *ox_lookup(ox_ctx *c, const char *name, int create);
/* A unique graph name derived from an ONNX name (C identifier, at most 40 characters). */
void ox_graph_name(ox_ctx *c, const char *onnx_name, char *buf, size_t size);
/* The graph value of v, adding a graph constant for OX_CONST values (rank 0 as [1]): as u8 / i8
 * when the tensor was uint8 / int8 (a value outside that range is refused), else as f32. */
int ox_materialize(ox_ctx *c, ox_val *v);
/* A graph constant of dtype dt (u8, i8, i32 or f32) holding OX_CONST v, which stays a constant;
 * values outside dt's range are refused naming the tensor. For a graph value, its id. */
int ox_materialize_as(ox_ctx *c, ox_val *v, te_dtype dt);
/* The graph dtype an ONNX element type is held in (TE_U8 for bool), or TE_DTYPE_COUNT. */
te_dtype ox_elem_dtype(int32_t elem);

/* An i64 graph constant holding OX_CONST v (Gather's indices); v itself stays a constant. For a
 * graph value, its id. */
int ox_materialize_i64(ox_ctx *c, ox_val *v);

/* Decodes a TensorProto (typed fields, raw_data or external data) into OX_CONST data of v. */
int ox_tensor_value(ox_ctx *c, const Onnx__TensorProto *t, ox_val *v);

/* ---- Helpers for the node converters (onnx_ops.c) ---- */

/* Records "node 'NAME' (OP): message" and returns rc. */
int ox_nfail(ox_ctx *c, const Onnx__NodeProto *n, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Input i of n (NULL when absent or empty). */
ox_val *ox_in(ox_ctx *c, const Onnx__NodeProto *n, size_t i);
/* Graph value of input i (materializing constants and pending patterns), or a negative status. */
int ox_in_gv(ox_ctx *c, const Onnx__NodeProto *n, size_t i);
/* A double from a constant as an integer: NaN is 0, the rest clamped to +-2^62 (no overflow). */
int64_t ox_i64(double d);
/* Attributes (integers clamped to +-2^30, so that arithmetic on them cannot overflow): integer,
 * float, string (NULL when absent), ints (count, or -1 when absent). */
int64_t ox_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def);
double ox_attr_f(const Onnx__NodeProto *n, const char *name, double def);
const char *ox_attr_s(const Onnx__NodeProto *n, const char *name, char *buf, size_t size);
int ox_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max);
/* Adds graph node `op` for ONNX node n, naming its output after n's output i (suffix appended
 * when given). Returns the value id or the recorded status. */
int ox_gnode(ox_ctx *c, const Onnx__NodeProto *n, const char *op, const char *attrs, int nin,
             const int *ins, const char *suffix);
/* Output i of n as graph value gv / as a fresh OX_CONST to fill (NULL on error). */
int ox_set_out(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int gv);
ox_val *ox_set_const(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int ndim, const int64_t *shape,
                     int is_int);
/* A reshape node of graph value x to shape (or x itself when the shape is unchanged). */
int ox_reshape(ox_ctx *c, const Onnx__NodeProto *n, int x, int ndim, const int64_t *shape,
               const char *suffix);
/* A graph constant holding one float (shape [1]). */
int ox_scalar(ox_ctx *c, double v);

/* The attribute named `name` of n, or NULL. */
const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name);
/* Shape of input i (graph value or constant): its rank, or a status. */
int ox_in_shape(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int64_t *shape);
/* Integers of constant input i (axes, shapes): their count, or a status. */
int ox_in_ints(ox_ctx *c, const Onnx__NodeProto *n, size_t i, int64_t *out, int max);
/* Output 0 of n means what src means (constants get shape ndim/shape, same element count). */
int ox_alias(ox_ctx *c, const Onnx__NodeProto *n, const ox_val *src, int ndim,
             const int64_t *shape);

/* Shape operators (onnx_shape.c), one per ONNX operator (Reshape, Flatten, Squeeze and
 * Unsqueeze share ox_reshape_like, told by op). */
int ox_shape_node(ox_ctx *c, const Onnx__NodeProto *n);
int ox_reshape_like(ox_ctx *c, const Onnx__NodeProto *n, const char *op);
int ox_fold_gather(ox_ctx *c, const Onnx__NodeProto *n);
int ox_fold_concat(ox_ctx *c, const Onnx__NodeProto *n);
int ox_fold_slice(ox_ctx *c, const Onnx__NodeProto *n);
int ox_fold_const_of_shape(ox_ctx *c, const Onnx__NodeProto *n);
int ox_transpose(ox_ctx *c, const Onnx__NodeProto *n);
int ox_split(ox_ctx *c, const Onnx__NodeProto *n);
int ox_where(ox_ctx *c, const Onnx__NodeProto *n);
int ox_expand(ox_ctx *c, const Onnx__NodeProto *n);

/* Neural-network operators (onnx_nn.c): Conv, pools, MatMul, Gemm, norms, softmax, reductions.
 * Returns 1 when op_type is one of them (having converted it or recorded an error), else 0. */
int ox_convert_nn(ox_ctx *c, const Onnx__NodeProto *n, const char *op);
/* Conv's attributes of node n (strides, dilations, pads / auto_pad, group) on graph values x
 * [n, c, h, w] and w [oc, c / group, kh, kw] as conv2d's attribute text into attrs; TE_OK or the
 * recorded status (a non-4-D operand, unequal strides or padding). ConvInteger and QLinearConv
 * (onnx_quant.c) read them the same way. */
int ox_conv_attrs(ox_ctx *c, const Onnx__NodeProto *n, int x, int w, char *attrs, size_t size);
/* Whether onnx_nn.c handles op_type. */
int ox_nn_supported(const char *op_type);

/* Quantized operators (onnx_quant.c): MatMulInteger, QLinearMatMul, QuantizeLinear,
 * DequantizeLinear. Returns 1 when op_type is one of them (converted or an error recorded). */
int ox_convert_quant(ox_ctx *c, const Onnx__NodeProto *n, const char *op);
/* Whether onnx_quant.c handles op_type. */
int ox_quant_supported(const char *op_type);

/* Whether onnx_ops.c maps op_type (default domain) onto graph operators. */
int ox_op_supported(const char *op_type);
/* Converts one node (inputs already defined). TE_OK or the status recorded with ox_fail. */
int ox_convert_node(ox_ctx *c, const Onnx__NodeProto *n);

#endif
