/*
 * tessera/onnx.h: ONNX models in, as graphs (tessera/graph.h).
 *
 * te_graph_from_onnx reads an ONNX ModelProto (protobuf, decoded with protobuf-c from the C that
 * the build generates from Debian's onnx.proto) and builds a te_graph of library operators:
 *
 *     te_graph *g = NULL;
 *     char err[512];
 *     if (te_graph_from_onnx("bert.onnx", "batch=1,seq=128", &g, err, sizeof err)) {
 *         fprintf(stderr, "%s\n", err);   // "bert.onnx: 1 unsupported node: LSTM (node 'l0')"
 *         return 1;
 *     }
 *     te_graph_print(g, stdout, "weights");  // the text form, weights as files under weights/
 *     te_graph_free(g);
 *
 * What is read: initializers (raw_data or the typed fields float_data, int32_data, int64_data,
 * double_data; external data files next to the model, `location` relative to the model's
 * directory, never absolute or through ".."), Constant nodes, graph inputs (float32; int64 and
 * int32 as i64 / i32 values for Gather indices; bool as u8, one byte each, for Where; uint8 and
 * int8 as u8 / i8 quantized activations) with static shapes: a symbolic dimension takes the value
 * bound to its name in `options`, a whole input shape can be given as NAME=AxBxC. Shapes are
 * inferred node by node by the graph itself (each node is checked as it is added); a declared
 * value_info or output shape that disagrees is an error. Chains that only compute shapes (Shape,
 * Gather, Concat, Unsqueeze, Squeeze, Reshape, Slice, Cast, integer Add/Sub/Mul/Div,
 * ConstantOfShape) are evaluated while importing, so Reshape gets a constant target shape; on
 * run-time tensors Gather, Concat, Slice, Split, Where and Expand become the graph's index
 * operators. The exporters' erf GELU (x * 0.5 * (1 + erf(x / sqrt 2))) becomes one gelu node. uint8
 * / int8 initializers stay u8 / i8 constants; MatMulInteger, QLinearMatMul, QuantizeLinear and
 * DequantizeLinear map onto the graph's matmul_integer, qlinear_matmul, quantize_linear and
 * dequantize_linear, whose scales and zero points are attributes: they must be per-tensor constants
 * (a per-axis one, or one computed at run time, is refused naming the node and the input). The
 * operators and their mapping are listed in onnx/README.md.
 *
 * A model is imported whole or not at all: an opset outside 7..21, an operator or attribute
 * that has no mapping onto the library (all listed with their node names before anything is
 * built: "2 unsupported nodes: NonZero (node 'z3'), LSTM (node 'l0')"), a missing initializer, a
 * cycle, a shape mismatch, a tensor whose data is shorter than its dims claim: each returns a
 * negative status with a message and no graph. Nothing here prints.
 */
#ifndef TESSERA_ONNX_H
#define TESSERA_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/graph.h"
#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Facts of an imported model, filled by te_graph_from_onnx_ex. */
typedef struct te_onnx_info {
    int64_t ir_version;
    int64_t opset;     /* version of the default ("ai.onnx") operator set */
    int n_onnx_nodes;  /* nodes in the model's graph */
    char producer[64]; /* producer_name producer_version */
} te_onnx_info;

/* Imports the ONNX model at `path`. options: "NAME=N,..." binds symbolic dimensions by name;
 * "INPUT=AxBxC" sets a graph input's whole shape (NULL or "" for none). On success stores the
 * graph in *out (free with te_graph_free) and returns TE_OK; otherwise returns a negative
 * TE_ERR_* (TE_ERR_IO: unreadable file; TE_ERR_CORRUPT: not a valid model; TE_ERR_UNSUPPORTED:
 * opset or operators; TE_ERR_SHAPE; TE_ERR_ARG: bad options), sets *out to NULL and writes
 * "path: message" to err (errsize bytes; may be NULL). */
int te_graph_from_onnx(const char *path, const char *options, te_graph **out, char *err,
                       size_t errsize);

/* Like te_graph_from_onnx, also filling *info (may be NULL). */
int te_graph_from_onnx_ex(const char *path, const char *options, te_graph **out, te_onnx_info *info,
                          char *err, size_t errsize);

/* Imports a model held in memory (size bytes at data); base_dir is where external data files
 * are looked up (NULL: external data is refused); label names the model in messages. A pure
 * function of its arguments when the model has no external data (fuzzed). */
int te_graph_from_onnx_buffer(const void *data, size_t size, const char *base_dir,
                              const char *label, const char *options, te_graph **out,
                              te_onnx_info *info, char *err, size_t errsize);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_ONNX_H */
