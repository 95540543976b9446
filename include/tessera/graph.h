/*
 * tessera/graph.h: graphs of library operators, graph passes and rule-driven fusion.
 *
 * A te_graph holds values (tensors with a name, dtype and shape) and nodes (one operator of the
 * library, by registry name, with KEY=VAL attributes). Values are graph inputs, constants (weights
 * whose data the graph owns) or node outputs; some values are marked as graph outputs. Every node
 * is checked when it is added: the operator exists, it gets the right number of inputs, all of one
 * dtype, and the operator accepts their shapes (the graph builds the operator's tensor expression
 * on its inputs' tensors, so the shape rules are exactly the library's).
 *
 *     te_graph *g = te_graph_create();
 *     int x = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){128, 768});
 *     int w = te_graph_const_random(g, "w", TE_F32, 2, (int64_t[]){768, 3072}, 1, -1, 1);
 *     int b = te_graph_const_random(g, "b", TE_F32, 1, (int64_t[]){3072}, 2, -1, 1);
 *     int h = te_graph_node(g, "matmul", NULL, 2, (int[]){x, w}, "h");
 *     int y = te_graph_node(g, "gelu", NULL, 1, (int[]){te_graph_node(g, "add", NULL, 2,
 *                           (int[]){h, b}, "hb")}, "y");
 *     te_graph_output(g, y);
 *     if (te_graph_errcode(g)) fprintf(stderr, "%s\n", te_graph_errmsg(g));
 *     te_graph_optimize(g, NULL);                     // dead nodes, CSE, constant folding,
 *                                                     // attention
 *     te_fuse_rules *rules = te_fuse_rules_load("rules/cpu.rules", err, sizeof err);
 *     te_fuse_target tgt;
 *     te_fuse_target_host(&tgt);
 *     te_fuse_plan *plan = te_graph_fuse(g, rules, &tgt);
 *     te_fuse_plan_print(plan, stdout);               // groups, rules, rejected fusions
 *     te_fuse_plan_free(plan);
 *     te_fuse_rules_free(rules);
 *     te_graph_free(g);
 *
 * The same graph as text (te_graph_parse, te_graph_load):
 *
 *     input x f32[128,768]
 *     const w f32[768,3072] random seed=1
 *     const b f32[3072] random seed=2
 *     h = matmul(x, w)
 *     hb = add(h, b)
 *     y = gelu(hb)
 *     output y
 *
 * Text form grammar (one statement per line; '#' starts a comment; blank lines are ignored):
 *
 *     stmt   := 'input' NAME TYPE
 *             | 'const' NAME TYPE INIT*
 *             | NAME {',' NAME} '=' OP '(' [NAME {',' NAME}] ')' [ATTRS]
 *             | 'output' NAME {',' NAME}
 *     TYPE   := DTYPE '[' INT {',' INT} ']'          e.g. f32[1,3,56,56]
 *     INIT   := 'random' | 'seed=' INT | 'lo=' NUM | 'hi=' NUM     (uniform in [lo, hi), never 0)
 *             | 'fill=' NUM                           (every element NUM)
 *             | 'file=' PATH                          (raw little-endian elements of DTYPE)
 *     ATTRS  := KEY=VAL {',' KEY=VAL}                 e.g. stride=1,pad=1
 *
 * NAME is a C identifier of at most 40 characters, unique in the graph. A constant without INIT
 * is `random seed=0`. An OP with several outputs (qkv_projection) names one value per output.
 * te_graph_op_attrs lists each operator's attributes and defaults (`tessera fuse --ops`).
 *
 * Ownership: the graph owns its values, nodes, constant data and every string it returns; they
 * stay valid until the next call that changes the graph (a node, a pass) or te_graph_free.
 * Values and nodes are small integer ids; passes renumber them (look values up by name with
 * te_graph_find after a pass). A te_fuse_plan reads its graph, which must outlive it unchanged.
 *
 * Errors are values: fallible calls return a status (TE_OK or a negative TE_ERR_*; calls that
 * make a value return its id >= 0 or a negative status) and leave a message on the graph
 * (te_graph_errmsg, like sqlite3_errmsg) naming the node, input or line at fault, e.g.
 * "node 'y' (conv2d): input 2 'w' has dtype f64 but input 1 'x' has f32". The first message is
 * kept until te_graph_clear_error; a call given the id of a failed call (a negative id) fails
 * without replacing it, so a whole graph can be built and checked once at the end. Nothing in
 * this module prints unless given a FILE.
 */
#ifndef TESSERA_GRAPH_H
#define TESSERA_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera/status.h"
#include "tessera/target.h"
#include "tessera/te.h"
#include "tessera/tuner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct te_graph te_graph;

/* ---- Graphs --------------------------------------------------------------------------- */

/* Creates an empty graph; NULL only when out of memory. Free with te_graph_free. */
te_graph *te_graph_create(void);
/* Frees the graph, its constants' data and everything it returned. Accepts NULL. */
void te_graph_free(te_graph *g);
/* Message of the first error since te_graph_clear_error ("" when none); owned by g. */
const char *te_graph_errmsg(const te_graph *g);
/* Status of that error (TE_OK when none). */
int te_graph_errcode(const te_graph *g);
void te_graph_clear_error(te_graph *g);

/* A graph input. Returns its value id, or a negative status (bad or duplicate name, rank outside
 * 1..TE_MAX_DIMS, extent < 1). */
int te_graph_input(te_graph *g, const char *name, te_dtype dtype, int ndim, const int64_t *shape);
/* A constant: the graph copies numel * te_dtype_size(dtype) bytes from data. Returns its id. */
int te_graph_const(te_graph *g, const char *name, te_dtype dtype, int ndim, const int64_t *shape,
                   const void *data);
/* A constant with uniform random elements in [lo, hi) from a fixed PRNG (splitmix64 seeded by
 * seed; zero is never produced, so tests never see an all-zero weight). f32, f64, i32, i64. */
int te_graph_const_random(te_graph *g, const char *name, te_dtype dtype, int ndim,
                          const int64_t *shape, uint64_t seed, double lo, double hi);
/* A node applying library operator `op` (a registry name, or a graph operator such as
 * batch_norm: te_graph_op_count) with attributes "k=v,..." (NULL or "" for the defaults) to
 * n_in input values. Returns the id of its (first) output value, named `name` (NULL: the
 * operator's name with a number). Errors name the node and the input at fault: an unknown
 * operator or attribute, the wrong number of inputs, mixed dtypes, shapes the operator refuses
 * (its message is kept after the node's name), a negative input id. The inputs of a node share
 * one dtype, except gather's indices (integers) and where's condition (any dtype). */
int te_graph_node(te_graph *g, const char *op, const char *attrs, int n_in, const int *inputs,
                  const char *name);
/* Like te_graph_node for operators with several outputs: names[n_out] and outs[n_out], n_out
 * equal to the operator's output count (split: any count from 1 to TE_OP_MAX_IO, one part
 * each). Returns TE_OK or a status. */
int te_graph_node_multi(te_graph *g, const char *op, const char *attrs, int n_in, const int *inputs,
                        int n_out, const char *const *names, int *outs);
/* Marks a value as a graph output (once; a second time is a no-op). TE_OK or a status. */
int te_graph_output(te_graph *g, int value);

/* Parses the text form (grammar above) and appends it to g. filename only labels messages
 * ("model.graph:3: ..."; NULL: "<string>"); file= paths are relative to the working directory.
 * TE_OK or a status; on error the graph may hold the statements before the bad line. */
int te_graph_parse(te_graph *g, const char *text, const char *filename);
/* Reads a file and parses it (TE_ERR_IO when it cannot be read). */
int te_graph_load(te_graph *g, const char *path);
/* Writes the text form. Constants are written as their INIT when they still hold it, otherwise
 * (folded constants) as "file=<data_dir>/<name>.bin" after writing the data there; without a
 * data_dir as "file=<name>.bin" with a comment, so that reading the text back fails rather than
 * inventing data. TE_OK or TE_ERR_IO. */
int te_graph_print(const te_graph *g, FILE *f, const char *data_dir);

/* ---- Inspecting a graph ---------------------------------------------------------------- */

typedef enum te_graph_value_kind {
    TE_GRAPH_INPUT,
    TE_GRAPH_CONST,
    TE_GRAPH_NODE_OUTPUT
} te_graph_value_kind;

int te_graph_value_count(const te_graph *g);
/* Id of the value named `name`, or TE_ERR_NOT_FOUND (no message). */
int te_graph_find(const te_graph *g, const char *name);
/* Accessors of value v; out-of-range ids give NULL / -1 / 0. Strings and arrays owned by g. */
const char *te_graph_value_name(const te_graph *g, int v);
te_dtype te_graph_value_dtype(const te_graph *g, int v);
int te_graph_value_ndim(const te_graph *g, int v);
const int64_t *te_graph_value_shape(const te_graph *g, int v);
int64_t te_graph_value_numel(const te_graph *g, int v);
te_graph_value_kind te_graph_value_kind_of(const te_graph *g, int v);
/* Constant data (row-major, the value's dtype) or NULL for a value that is not a constant. */
const void *te_graph_value_data(const te_graph *g, int v);
/* Node producing v, or -1 for inputs and constants. */
int te_graph_value_producer(const te_graph *g, int v);
/* Number of nodes reading v. */
int te_graph_value_use_count(const te_graph *g, int v);
int te_graph_value_is_output(const te_graph *g, int v);

/* Nodes are kept in a topological order: a node's inputs come before it. */
int te_graph_node_count(const te_graph *g);
const char *te_graph_node_op(const te_graph *g, int n);
/* The node's name: its first output's name. */
const char *te_graph_node_name(const te_graph *g, int n);
/* The node's attributes as given ("" for none). */
const char *te_graph_node_attrs(const te_graph *g, int n);
int te_graph_node_ninputs(const te_graph *g, int n);
int te_graph_node_input(const te_graph *g, int n, int i);
int te_graph_node_noutputs(const te_graph *g, int n);
int te_graph_node_output(const te_graph *g, int n, int i);
/* Estimated floating-point operations of the node (2 per multiply-add), for rooflines. */
double te_graph_node_flops(const te_graph *g, int n);

int te_graph_output_count(const te_graph *g);
int te_graph_output_value(const te_graph *g, int i);

/* The tensor of value v in the graph's own context (a placeholder for inputs and constants,
 * the operator's output otherwise), owned by g and valid until the graph changes. */
te_tensor *te_graph_value_tensor(te_graph *g, int v);

/* ---- Reference evaluation -------------------------------------------------------------- */

/* Evaluates n values of the graph in float64 with te_reference_eval. input_data[i] is the
 * row-major data of the i-th graph input (in the order they were added, in its dtype);
 * constants use their own data. out[j] receives te_graph_value_numel(values[j]) doubles. */
int te_graph_eval_reference(te_graph *g, const void *const *input_data, int n, const int *values,
                            double *const *out);
/* Number of graph inputs and the value id of the i-th. */
int te_graph_input_count(const te_graph *g);
int te_graph_input_value(const te_graph *g, int i);

/* ---- Operators and pattern kinds ------------------------------------------------------- */

/* Pattern kinds, ordered as TVM's OpPatternKind: a kind fuses into kinds above it. */
typedef enum te_op_kind {
    TE_KIND_ELEMWISE,  /* out[i] = f(in[i]), same shapes */
    TE_KIND_BROADCAST, /* out[i] = f(in[i], p[bcast(i)]): add with a bias, batch norm */
    TE_KIND_INJECTIVE, /* each output reads one input element: transpose, reshape, pad */
    TE_KIND_REDUCTION, /* reduces axes, or row ops built on reductions: sum, softmax, norms */
    TE_KIND_OUT_EWISE_FUSABLE, /* complex reduction whose output takes an elementwise epilogue:
                                  matmul, conv2d, pooling */
    TE_KIND_OPAQUE,            /* fuses with nothing (multi-output operators) */
    TE_KIND_COUNT
} te_op_kind;

/* "elemwise", "broadcast", "injective", "reduction", "out_ewise", "opaque"; NULL otherwise. */
const char *te_op_kind_name(te_op_kind kind);
/* Parses those names; TE_OK or TE_ERR_ARG. */
int te_op_kind_parse(const char *name, te_op_kind *out);
/* The pattern kind of operator `op`, or TE_ERR_NOT_FOUND for an operator the graph lacks. */
int te_graph_op_kind(const char *op);
/* Operators a graph node may use (every registry operator and the graph's own, batch_norm and
 * reshape): count, i-th name, its attributes with defaults ("stride=1,pad=0,..."), its input
 * names ("X,W" with optional inputs in brackets) and whether it comes from the registry. */
int te_graph_op_count(void);
const char *te_graph_op_name(int i);
const char *te_graph_op_attrs(const char *op);
const char *te_graph_op_inputs(const char *op);

/* ---- User operators ------------------------------------------------------------------- */

/*
 * A node may also apply a USER OPERATOR: a tensor expression the caller builds from the node's
 * input tensors and attributes. Once registered (process-wide, by name) it is used like a
 * library operator: te_graph_node(g, "my_op", "alpha=0.5", ...) and `y = my_op(x) alpha=0.5`
 * in the text form. Its pattern kind decides how it fuses (generic fusion and `@kind` rule
 * atoms; rule files may also name it once it is registered), and its expression is chained into
 * its group's kernel, tuned by `tune --graph` and checked against te_reference_eval like every
 * other node.
 *
 *     static int build_scaled_tanh(te_ctx *ctx, int n_in, te_tensor *const *in,
 *                                  const te_op_params *attrs, const char *name,
 *                                  te_tensor **out, void *user)
 *     {   // y = tanh(alpha * x), with te_compute_shape / te_read / te_call ...
 *         ...; out[0] = y; return y ? TE_OK : te_ctx_errcode(ctx);
 *     }
 *     te_graph_user_op op = {.name = "scaled_tanh", .kind = TE_KIND_ELEMWISE, .min_in = 1,
 *                            .max_in = 1, .inputs = "X", .attrs = "alpha=1",
 *                            .build = build_scaled_tanh};
 *     te_graph_op_register(&op, err, sizeof err);
 */
typedef struct te_op_params te_op_params;

/* Builds a user operator's output tensor on in[0..n_in) in ctx, names it `name` and stores it
 * in out[0]. attrs holds every attribute the operator declares: the node's value, else the
 * declared default (values as text in p[i].val; p[i].ival when is_int). Returns TE_OK, or a
 * status with a message on ctx (te_ctx_set_error) that the graph keeps after the node's name.
 * Called whenever the graph (re)builds the node: when it is added, after every pass, for every
 * group kernel and tuning task; it must be a pure function of its arguments. */
typedef int (*te_graph_op_build_fn)(te_ctx *ctx, int n_in, te_tensor *const *in,
                                    const te_op_params *attrs, const char *name, te_tensor **out,
                                    void *user);

typedef struct te_graph_user_op {
    const char *name;     /* a C identifier of at most 39 characters, no library operator's */
    te_op_kind kind;      /* its pattern kind (TE_KIND_OPAQUE: never fused) */
    int min_in, max_in;   /* input count, 1 <= min_in <= max_in <= TE_OP_MAX_IO */
    const char *inputs;   /* input names for messages ("X,W"); NULL: "X1,..." */
    const char *attrs;    /* attributes with defaults, "alpha=1,axis=0"; NULL or "": none */
    double flop_per_elem; /* cost per output element for the roofline (0: 1) */
    te_graph_op_build_fn build;
    void *user; /* passed to build; must outlive every graph using the operator */
} te_graph_user_op;

/* Registers a user operator for every graph of the process (thread-safe; the strings are
 * copied). Returns TE_OK, or with a message in err (errsize bytes; may be NULL) TE_ERR_ARG (a
 * bad or taken name, library or user, bad input counts or kind, no callback, attributes that
 * are not KEY=VAL,...) or TE_ERR_OVERFLOW (TE_GRAPH_MAX_USER_OPS already registered).
 * Operators cannot be unregistered. */
#define TE_GRAPH_MAX_USER_OPS 64
int te_graph_op_register(const te_graph_user_op *op, char *err, size_t errsize);

/* ---- Graph passes ---------------------------------------------------------------------- */

/* Removes nodes no graph output depends on and constants nobody reads. *removed (may be NULL)
 * receives the number of nodes removed. Graph inputs are kept. */
int te_graph_dce(te_graph *g, int *removed);
/* Merges nodes with the same operator, attributes and inputs (and constants with equal dtype,
 * shape and data) into the first; readers of the duplicate read the survivor. */
int te_graph_cse(te_graph *g, int *merged);
/* Folds weight-only subgraphs: a node whose inputs are all constants is evaluated (in float64,
 * stored in its dtype) and becomes a constant; batch_norm after conv2d (NCHW, groups=1) or after
 * matmul (trans_b=0) is folded into the weights plus a bias add when the batch norm's
 * parameters are constants and the convolution's output has no other reader. *folded receives
 * the number of nodes replaced. Runs te_graph_dce afterwards. */
int te_graph_fold_constants(te_graph *g, int *folded);
/* te_graph_dce, te_graph_cse, te_graph_fuse_qdq, te_graph_fold_constants, te_graph_cse,
 * te_graph_fuse_attention (attention chains become one flash-form attention node, whose
 * scores never reach memory), then te_graph_move_reshapes and te_graph_cse again. log (may be NULL)
 * gets one line per pass: "fold_constants: 2 nodes folded". */
int te_graph_optimize(te_graph *g, FILE *log);
/* Rewrites every attention chain into one `attention` node (te_op_attention, the fused
 * flash-structured kernel): batch_matmul(q, k) (trans_b=1, or k already transposed), an
 * optional reshape to [b, h, lq, lk] (ONNX's 4-D MatMul), an optional mul or div by a
 * one-element constant (the scale), an optional add of a mask that does not depend on the
 * head, softmax over the last axis, an optional reshape back to 3-D, batch_matmul(p, v). The
 * intermediates must have no other reader. q, k and v are viewed as [b, h, l, dh] (reshape,
 * and a transpose for a transposed k), the mask is broadcast to [b, 1, lq, lk] (adding a zero
 * constant when it is smaller), and the output is reshaped back to [b h, lq, dh]. Values
 * equal up to rounding (the fused kernel sums the softmax denominator once, in its own order).
 * *fused (may be NULL) receives the number of chains rewritten. Returns TE_OK or a status
 * with a message on g. The last pass of te_graph_optimize; call it before fusing. */
int te_graph_fuse_attention(te_graph *g, int *fused);
/* Moves reshapes and transposes out of the operators' way (graph/reshape_mover.c, after XLA's
 * ReshapeMover), so that a matmul meets its bias add and activation and layout changes meet
 * and cancel: a reshape sinks through an elementwise or broadcast operator, or a row operator
 * on the last axis (layer_norm, rms_norm, softmax, log_softmax), when it keeps the trailing
 * axes the other operands broadcast along (operands of the full shape must be reshapes of the
 * same shape, graph inputs or constants); reshape chains collapse, transposes compose (also
 * across a reshape that only adds or drops axes of extent 1), reshapes to the same shape and
 * identity transposes go (not when they write a graph output). Values are unchanged bit for
 * bit. *moved (may be NULL) receives the number of rewrites. Returns TE_OK or a status with a
 * message on g. Runs after te_graph_fuse_attention in te_graph_optimize (whose patterns are
 * written with the reshapes where the front ends put them). */
int te_graph_move_reshapes(te_graph *g, int *moved);

/* QDQ models (ONNX QuantizeLinear / DequantizeLinear around float operators, as onnxruntime's
 * quantize_static writes them) onto integer arithmetic (graph/lower_int8.c): a matmul (2-D, not
 * trans_a=0; trans_b=1 transposes the bytes, folded for a constant) of two dequantize_linear
 * outputs of u8 / i8 values (A's possibly reshaped, as the importer folds leading axes) becomes
 * matmul_integer of the bytes (the zero points as its attributes) and a dequantize_linear of the
 * i32 accumulator by scale_a * scale_b (in f32, as onnxruntime's MatMulIntegerToFloat); when the
 * product's only reader is a quantize_linear, the chain becomes one qlinear_matmul instead. Values
 * change by f32 rounding only (the float path summed dequantized products). Run before constant
 * folding (which would fold a constant weight's dequantize into floats): te_graph_optimize does.
 * log (may be NULL) gets a line per rewrite; *fused (may be NULL) the count. Returns TE_OK or a
 * status with a message on g. */
int te_graph_fuse_qdq(te_graph *g, FILE *log, int *fused);
/* 1 when the target has an int8 dot product that te_graph_lower_int8 lowers onto (AVX-512 VNNI
 * vpdpbusd or AMX tdpbusd: a built-in intrinsic of schedule/intrin_x86.c it supports), else 0. */
int te_graph_int8_supported(const te_target *tgt);
/* Lowers int8 matmuls onto the target's dot products (graph/lower_int8.c): every
 * matmul_integer and qlinear_matmul node (2-D) whose B is a constant, k a multiple of 4 and n a
 * multiple of 32 becomes matmul_vnni of A (u8; i8 shifted by +128 in one elementwise pass) and
 * B converted to s8 (u8 shifted by -128) and packed once into the blocked VNNI layout
 * [n / 32, k / 4, 32, 4] (the tiles' width), plus an add of a constant column correction for the
 * zero points, a row-sum correction when B's (shifted) zero point is not 0, and a requantize
 * epilogue for qlinear_matmul. The results are the same integers, bit for bit. The node's
 * output keeps its name. Nodes that do not qualify, or all of them when the target lacks the
 * instructions (te_graph_int8_supported), stay; log (may be NULL) gets one line per node with
 * what was done or why not. *rewritten (may be NULL) receives the number of nodes rewritten.
 * Returns TE_OK, TE_ERR_ARG for a NULL graph or target, or a status with a message on g. */
int te_graph_lower_int8(te_graph *g, const te_target *tgt, FILE *log, int *rewritten);

/* 1 when the target has a bf16 dot product that te_graph_lower_bf16 lowers onto (AVX-512 BF16
 * vdpbf16ps or AMX tdpbf16ps: a built-in avx512bf16_* or amx_bf16_* intrinsic of
 * schedule/intrin_x86.c that it supports), else 0 (also for NULL). */
int te_graph_bf16_supported(const te_target *tgt);
/* Lowers f32 matmuls onto the target's bf16 dot products (graph/lower_bf16.c). OPT-IN: the
 * results change by the rounding of the operands to bf16 (te_graph_bf16_tolerance), so no
 * other pass runs it (the CLI's `--precision bf16` does). Every matmul (trans_a=0, trans_b 0
 * or 1), dense_bias, matmul_bias_act and mlp_gate node with f32 inputs, 2-D, whose weights are
 * constants, k a multiple of 2 and n a multiple of 32, becomes cast(A, to=bf16) and
 * matmul_vnni on each weight rounded to bf16 (round to nearest even) and packed once into the
 * blocked VNNI layout [n / 32, k / 2, 32, 2] (a trans_b weight transposed while it is packed),
 * accumulated and output in f32; the epilogue becomes separate elementwise nodes that fusion
 * puts back into the product's group (dense_bias: add of the bias; matmul_bias_act: add, then
 * the activation; mlp_gate: silu of the first product times the second, both reading one
 * cast). The node's output keeps its name (the f32 weights are dropped once nothing reads
 * them). Nodes that do not qualify, or all of them when the target lacks the instructions
 * (te_graph_bf16_supported), stay; log (may be NULL) gets one line per matmul node with what
 * was done or why not. *rewritten (may be NULL) receives the number of nodes rewritten.
 * Returns TE_OK, TE_ERR_ARG for a NULL graph or target, or a status with a message on g. */
int te_graph_lower_bf16(te_graph *g, const te_target *tgt, FILE *log, int *rewritten);
/* The checker's tolerance (|got - ref| / max(1, |ref|), against the float64 reference of the
 * graph BEFORE te_graph_lower_bf16) for a product of reduction length k whose operands were
 * rounded to bf16 and accumulated in f32, and for the elementwise epilogues of slope at most
 * about 1 after it (bias, relu, gelu, silu, sigmoid, tanh): 3 sqrt(2/3) u sqrt(k) with
 * u = 2^-8, plus te_dtype_tolerance(TE_F32, k) for the accumulation (derivation in
 * docs/DTYPES.md, "bf16 lowering of graphs"). k < 1 is taken as 1. */
double te_graph_bf16_tolerance(int64_t k);
/* The tolerance of value v of a bf16-lowered graph against the f32 graph's reference: 0 when v
 * does not descend from a bf16 value (a cast to bf16 or a bf16 constant: the f32 checks apply),
 * else te_graph_bf16_tolerance of the longest bf16 product it descends from, with its sqrt(k)
 * term scaled by max(1, rms / sqrt(k)) (operands past [-1, 1): rms is ref_rms, the root mean
 * square of v's reference values, or its square root after a product of two bf16 products) and
 * by the number of bf16 products in series (a layer fed by another), the whole times
 * 1 + 2 sqrt(ref_rms) when two such values were multiplied on the way (the MLP gate
 * silu(x W1) * (x W3)). 0 for a bad graph or id (or out of memory). */
double te_graph_value_bf16_tolerance(const te_graph *g, int v, double ref_rms);

/* ---- Fusion rules ---------------------------------------------------------------------- */

/*
 * A rules file holds rules; each starts with `rule NAME`, has one directive per line and ends
 * with `end`. '#' starts a comment.
 *
 *     rule conv_bn_relu
 *       class     vertical           # vertical | horizontal | branch | composite
 *       pattern   conv2d add? batch_norm? relu
 *       where     dtype=f32 rank=4 target=cpu
 *       priority  100
 *       produces  conv2d_bn_relu     # optional: the library operator when matched exactly
 *     end
 *
 * Patterns:
 *     pattern  := item {['->'] item}
 *     item     := elem                       a node reading the previous item's output
 *              |  '(' [seq] ',' [seq] ')' elem
 *                                           branch: two paths from one shared input joined by
 *                                           elem (either input order); an empty path is the
 *                                           shared input itself (a residual)
 *              |  '[' elem ']'               siblings: nodes reading one value (the previous
 *                                           item's output, or any value when first), matched as
 *                                           many times as elem's quantifier allows (default 2+)
 *     elem     := atom {'|' atom} [quant]
 *     atom     := OPNAME-GLOB                'matmul', 'gelu*' ('*' matches any characters)
 *              |  '@' KIND                   '@elemwise', '@broadcast', ..., '@out_ewise'
 *              |  'any'                      any operator
 *     quant    := '?' | '+' | '{' N [',' [M]] '}'       ('{0,}' is zero or more)
 * `where` constraints (space-separated, all must hold; on the output of the group's first node
 * in graph order unless noted): dtype=D[|D], rank=N, min_rank=N, target=cpu|cuda, isa=FEATURE,
 * kernel=KHxKW (convolution weights of every conv in the group), same_shape=1 (siblings' outputs),
 * escape=1 (intermediates may be read outside the group: they become extra group outputs),
 * max_numel=N, min_sm=N (a CUDA target of compute capability N/10 or newer: sm_80 is 80;
the rule is skipped on a CPU target, and refused with a reason where the target's capability is
unknown or lower). `priority` is an integer (higher first; ties: more specific pattern first,
 * then file order). `produces` names a library operator (and attributes: `produces
 * matmul_bias_act act=gelu`) that the group equals when every element of the pattern matched
 * exactly one node (siblings: as many as the quantifier's maximum); otherwise the group is
 * generic and only the rule's name is reported.
 */
typedef struct te_fuse_rules te_fuse_rules;

/* Parses rules from a string: a pure function of its arguments (fuzzable). filename labels
 * messages. Returns the rules (free with te_fuse_rules_free) or NULL with "file:line: message"
 * written to err (errsize bytes; may be NULL). Malformed input is refused as a whole. */
te_fuse_rules *te_fuse_rules_parse(const char *text, const char *filename, char *err,
                                   size_t errsize);
/* Reads and parses a file. */
te_fuse_rules *te_fuse_rules_load(const char *path, char *err, size_t errsize);
/* Appends the rules of b to a (names must stay unique). TE_OK or TE_ERR_ARG with err. */
int te_fuse_rules_merge(te_fuse_rules *a, const te_fuse_rules *b, char *err, size_t errsize);
void te_fuse_rules_free(te_fuse_rules *r);
int te_fuse_rules_count(const te_fuse_rules *r);
/* Name, class, pattern text and priority of rule i; NULL / 0 when out of range. */
const char *te_fuse_rule_name(const te_fuse_rules *r, int i);
const char *te_fuse_rule_class(const te_fuse_rules *r, int i);
const char *te_fuse_rule_pattern(const te_fuse_rules *r, int i);
int te_fuse_rule_priority(const te_fuse_rules *r, int i);
const char *te_fuse_rule_produces(const te_fuse_rules *r, int i);

/* ---- Fusion ---------------------------------------------------------------------------- */

/* Facts of the machine fusion decides for, read at run time. */
typedef struct te_fuse_target {
    char name[8];       /* "cpu" or "cuda" */
    char isa[256];      /* "avx2,fma,..." (te_target's list) */
    int cores;          /* cores used for parallel loops */
    int vector_bits;    /* widest vector register */
    size_t l2_bytes;    /* L2 cache per core (sysfs cache/index*, else sysconf) */
    double peak_gflops; /* cores x GHz x FP32 lanes x 2 (FMA) x 2 (ports) */
    double mem_gbps;    /* DRAM bandwidth estimate ($TESSERA_MEM_GBPS, else 8 GB/s x cores) */
    double launch_us;   /* fixed cost of one kernel (parallel region or launch) */
    int sm;             /* cuda: compute capability x10 (80 for sm_80); 0: unknown (and cpu) */
    char source[160];   /* where l2_bytes and the clock came from, for the plan's header */
} te_fuse_target;

/* Fills *t for the host CPU (te_target_host plus sysfs/sysconf). TE_OK, or TE_ERR_IO when no
 * cache size could be read (l2_bytes is then 0 and the L2 check rejects staged intermediates). */
int te_fuse_target_host(te_fuse_target *t);

typedef struct te_fuse_plan te_fuse_plan;

/* Partitions g's nodes into fused groups: rules by priority (the most specific first), each
 * match checked for feasibility, in this order: the rule's `where` constraints; a dependency
 * cycle through the rest of the graph; intermediates read outside the group (escape); the
 * register tile of matmuls/convolutions sharing one input against the target's vector
 * registers (16, or 32 with avx512f); intermediates a reduction re-reads staged in the L2 (or,
 * for elemwise producers, recomputed); the roofline estimate of the fused kernel against the
 * nodes one by one. Then the generic kind-based fusion
 * (out_ewise + following elemwise/broadcast, injective chains, reductions absorbing elemwise
 * producers) over what is left; every other node is a group of its own (a lone reshape that is
 * not a graph output: a view, te_fuse_group.view). rules may be NULL
 * (generic fusion only); t NULL means te_fuse_target_host. Returns the plan (free with
 * te_fuse_plan_free; g must outlive it unchanged) or NULL with a message on g. */
te_fuse_plan *te_graph_fuse(te_graph *g, const te_fuse_rules *rules, const te_fuse_target *t);
void te_fuse_plan_free(te_fuse_plan *p);

typedef struct te_fuse_group {
    const char *rule;     /* the rule that formed it, "generic:<how>", "single" or "view" */
    const char *cls;      /* vertical | horizontal | branch | composite | single | view */
    const char *fused_op; /* library operator the group equals, or NULL */
    int n_nodes;
    const int *nodes; /* node ids in topological order */
    int n_outputs;
    const int *outputs; /* values the group writes for readers outside it */
    /* 1: the group is a reshape whose output shares its input's storage; it runs no kernel.
     * A `reshape` node left alone (no rule or generic step took it) whose output is not a
     * graph output is such a view (rule and class "view"): tensors are dense and row-major,
     * so the output is the input's bytes under another shape. A view stays a group (group
     * indices are the same with or without views) but is not counted as a kernel; a reshape
     * inside a larger group is part of that group's expression, and a reshape that is a
     * graph output is a copy kernel (the caller reads its buffer). */
    int view;
} te_fuse_group;

/* A checked candidate fusion, accepted or not (XLA's FusionDecision). */
typedef struct te_fuse_decision {
    int accepted;
    const char *rule;   /* rule or generic step that proposed it */
    const char *check;  /* "ok", "constraint", "cycle", "escape", "registers", "l2", "roofline" */
    const char *reason; /* one line with the numbers */
    int n_nodes;
    const int *nodes;
} te_fuse_decision;

int te_fuse_plan_group_count(const te_fuse_plan *p);
/* Fills *out with group i (pointers owned by the plan). TE_OK or TE_ERR_ARG. */
int te_fuse_plan_group(const te_fuse_plan *p, int i, te_fuse_group *out);
/* Group index of node n, or -1. */
int te_fuse_plan_group_of(const te_fuse_plan *p, int node);
int te_fuse_plan_decision_count(const te_fuse_plan *p);
int te_fuse_plan_decision(const te_fuse_plan *p, int i, te_fuse_decision *out);
/* The plan as text (the kernel count, which leaves out views, the bytes of intermediates
 * written to memory node by node and fused, the peak intermediate memory node by node, fused
 * and fused + planned (JSON: "memory"), the target facts, the groups with the reason each was
 * accepted (a view as "group N: view [view]" and the value whose storage it shares), then every
 * rejected candidate with its reason), as JSON ("kernels", "views", and "view" per group), or
 * as a Graphviz digraph of the fused graph (one cluster per group; views dotted). TE_OK or
 * TE_ERR_IO. */
int te_fuse_plan_print(const te_fuse_plan *p, FILE *f);
int te_fuse_plan_print_json(const te_fuse_plan *p, FILE *f);
int te_fuse_plan_print_dot(const te_fuse_plan *p, FILE *f);

/* ---- Memory planning ------------------------------------------------------------------ */

/*
 * The intermediates of a fused graph (group outputs that are not graph outputs; values inside
 * a group never reach memory) share one pool. Liveness runs over the plan's group order: a
 * buffer is live from the group that writes it to the last group that reads it, both
 * included, so a group's inputs and outputs never share memory. Buffers are placed largest
 * first, each at the best-fitting gap (the smallest that holds it) among the buffers already
 * placed whose lifetimes overlap its own; offsets and sizes are multiples of 64 bytes. Graph
 * inputs, constants and outputs are not in the pool.
 *
 * Views (te_fuse_group.view: a reshape) have no buffer of their own: a view's output shares
 * the storage of its ROOT, the value at the start of its chain of views (a pooled
 * intermediate, a graph input, a constant or a graph output; te_graph_memplan_alias). A
 * group reading a view reads the root, so the root stays live until the last reader of any
 * of its views. The only group whose input and output share bytes is a view, which writes
 * nothing.
 */
typedef struct te_graph_memplan te_graph_memplan;

#define TE_GRAPH_MEM_ALIGN 64

typedef struct te_graph_mem_buffer {
    int value;     /* the intermediate's value id */
    size_t offset; /* in the pool, a multiple of TE_GRAPH_MEM_ALIGN */
    size_t bytes;  /* numel x dtype size, rounded up to TE_GRAPH_MEM_ALIGN */
    /* Live from group `first` (its writer) to group `last` (its last reader, or the last
     * reader of one of its views). */
    int first, last;
} te_graph_mem_buffer;

typedef struct te_graph_mem_stats {
    size_t unfused_bytes; /* node by node, no reuse: every node output not a graph output */
    size_t fused_bytes;   /* fused, no reuse: every group output not a graph output nor a view */
    size_t pool_bytes;    /* fused and planned: the pool's size */
    size_t live_bytes;    /* the most bytes live at once: a lower bound on any pool */
    int n_buffers;        /* pooled intermediates (views are not buffers) */
} te_graph_mem_stats;

/* Plans the intermediates of p (which must outlive the plan unchanged). Stores the plan in
 * *out (free with te_graph_memplan_free). TE_OK, TE_ERR_ARG or TE_ERR_NOMEM. */
int te_graph_memplan_create(const te_fuse_plan *p, te_graph_memplan **out);
/* Like te_graph_memplan_create with liveness over steps instead of groups: group gi runs in
 * step step[gi] (one entry per group of p, nondecreasing from 0; NULL: step gi), and groups of one
 * step may run at once (te_graph_exec's waves), so a buffer is live from its writer's step to its
 * last reader's step and never shares bytes with a buffer of a concurrent group. first/last of the
 * buffers are then steps. TE_ERR_ARG for a decreasing or negative step. */
int te_graph_memplan_create_steps(const te_fuse_plan *p, const int *step, te_graph_memplan **out);
void te_graph_memplan_free(te_graph_memplan *m);
/* The figures above (zeros for a NULL plan). */
void te_graph_memplan_stats(const te_graph_memplan *m, te_graph_mem_stats *out);
/* Buffer i (0 <= i < n_buffers, in value order). TE_OK or TE_ERR_ARG. */
int te_graph_memplan_buffer(const te_graph_memplan *m, int i, te_graph_mem_buffer *out);
/* Offset of value v in the pool, or -1 when v is not pooled. A view's offset is its root's
 * (-1 when the root is a graph input, constant or graph output). */
int64_t te_graph_memplan_offset(const te_graph_memplan *m, int v);
/* The value whose storage v shares: the root of v's chain of views when v is a view's output
 * (te_fuse_group.view), else v itself; -1 for a NULL plan or an out-of-range v. */
int te_graph_memplan_alias(const te_graph_memplan *m, int v);

/* ---- Fused groups as tensor expressions ------------------------------------------------- */

#define TE_GRAPH_GROUP_MAXIO 32

/* One fused group built as a tensor expression (te_graph_group_expr). */
typedef struct te_graph_group_expr {
    char name[64];        /* workload name: "graph_" and the group's operators, '_'-joined */
    char key[1024];       /* te_tuner_expr_key of the expression, then te_tuner_key_add_cold's
                             suffix for cold_inputs: equal for equal work */
    int n_in, n_out;      /* placeholders read, tensors written */
    uint32_t cold_inputs; /* bit i: input i is a graph constant (weights), which a run of the
                             graph finds cold in the caches: the tuner measures it so
                             (te_tuner_set_cold_inputs) */
    /* The tensors (in the given ctx) and the graph values they stand for. */
    te_tensor *ins[TE_GRAPH_GROUP_MAXIO], *outs[TE_GRAPH_GROUP_MAXIO];
    int in_values[TE_GRAPH_GROUP_MAXIO], out_values[TE_GRAPH_GROUP_MAXIO];
    /* Constant weights read in column panels (Ansor's layout rewrite): when packed_nb[i] > 0,
     * input i is the f32 graph constant W = in_values[i] ([k, n], or [n, k] when
     * packed_trans[i]) packed by te_graph_pack_panels into ins[i] = [n / nb, k, nb], and the
     * operators read W through the view W[k, j] = ins[i][j / nb, k, j % nb] (a stage tagged
     * "packed_view"): the contiguous K x nb panels a gemm tile reads, packed once instead of
     * copied in every run. Done for the right operand of a matmul, dense_bias, mlp_gate or
     * qkv_projection with more than 16 rows, n a multiple of 16, when every reader in the
     * group is such a product. Whoever runs the expression passes the packed data. */
    int packed_nb[TE_GRAPH_GROUP_MAXIO];
    unsigned char packed_trans[TE_GRAPH_GROUP_MAXIO];
} te_graph_group_expr;

/* Packs an f32 matrix into column panels of nb: dst[jb][kk][j] = W[kk][jb * nb + j] for W
 * [k, n] (trans 0), = W[jb * nb + j][kk] for W [n, k] (trans 1); dst holds n * k floats, n a
 * multiple of nb (te_graph_group_expr's packed inputs). TE_ERR_ARG for NULL pointers or bad
 * sizes. */
int te_graph_pack_panels(const float *w, int64_t k, int64_t n, int trans, int64_t nb, float *dst);

/* Builds group gi of plan p (made from g) in ctx: a placeholder for every value the group
 * reads from outside it, in first-use order, named "in0", "in1", ...; then the group's
 * operators chained on them with the same te_op_* constructors as the graph, node outputs
 * named "t0", "t1", ... in group order. The names are canonical so that two groups doing the
 * same work on the same shapes (two layers of a model) have the same key: this is the
 * expression that `tessera tune --graph` tunes and te_graph_compile_db looks up. The tensors
 * belong to ctx. TE_OK, or a status with a message on g naming the group. */
int te_graph_group_expr_build(te_graph *g, const te_fuse_plan *p, int gi, te_ctx *ctx,
                              te_graph_group_expr *out);
/* Adds group expression ge to tuner t as a task (te_tuner_add_expr with its name and tensors,
 * then te_tuner_set_cold_inputs with its cold_inputs), so the task's workload key is ge->key
 * and te_graph_compile_db finds its records; weight as te_tuner_add_expr's. TE_OK or the
 * tuner's status (message on t). */
int te_graph_group_expr_add_task(te_tuner *t, const te_graph_group_expr *ge, double weight);

/* ---- Compiling and running a fused graph ------------------------------------------------ */

typedef struct te_target te_target;
typedef struct te_graph_exec te_graph_exec;
typedef struct te_db te_db;

/* Compiles every group of plan p (made from g) but views as one kernel: the group's expression
 * (te_graph_group_expr_build), scheduled with the tuner's heuristic default
 * (te_tune_default_schedule: its search space ranked by an analytic cost model, nothing
 * measured; when that fails, elementwise and injective intermediates inlined into their
 * readers, every other stage at the root with its outermost loop parallel when the target has
 * several cores) and built with te_build for target (NULL:
 * the host C target), which also sets the run's thread budget (te_graph_compile_ex). The
 * intermediates get one pool planned by te_graph_memplan_create_steps over the run's waves
 * (one allocation, filled with 0xff: NaN in floats). A view group (te_fuse_group.view)
 * compiles nothing and runs nothing: its output's buffer is its root's (te_graph_memplan_alias:
 * the pool, or the buffer of a graph input, constant or output). Stores the
 * executable in *out (free with te_graph_exec_free); g and p must outlive it unchanged. On
 * failure returns a status with a message on g naming the group. */
int te_graph_compile(te_graph *g, const te_fuse_plan *p, const te_target *target,
                     te_graph_exec **out);
/* te_graph_compile, with each group's schedule from the best record of its key in db
 * (te_tuner_best_record) when there is one that applies, else the default schedule; db NULL
 * is te_graph_compile. te_graph_exec_group_note says which, per group. */
int te_graph_compile_db(te_graph *g, const te_fuse_plan *p, const te_target *target, te_db *db,
                        te_graph_exec **out);
/* Options of te_graph_compile_ex; a zeroed struct is te_graph_compile's defaults. */
typedef struct te_graph_compile_opts {
    const te_target *target; /* NULL: the host C target (te_target_host) */
    te_db *db;               /* NULL: the default schedule for every group */
    /* The run's thread budget, used across the whole run (0: target's num_cores, which
     * te_target_host reads from $OMP_NUM_THREADS or the online CPUs). Kernels are built for it
     * (their database records are looked up for a target with this many cores). */
    int threads;
    /* A group with fewer FLOPs (te_graph_node_flops summed) than threads x this is too small
     * to use every thread; consecutive independent small groups (no group of them reads
     * another's output) then run at once, each on a share of the threads (0: the default
     * TE_GRAPH_MIN_FLOPS_PER_THREAD). */
    double min_flops_per_thread;
    int no_concurrency; /* 1: every group alone with all threads */
    /* Which schedule each group gets when db is given:
     * TE_GRAPH_PICK_BEST (0): the group's schedule in the fastest whole run recorded for
     *   this model (te_graph_exec_model_key) when there is one, else its in-model record
     *   (te_graph_select_in_context: the fastest measured inside this model's run,
     *   te_graph_exec_group_context_key), else the best record of its workload key, else the
     *   default;
     * k >= 1: the k-th fastest record of its workload key (1 = the fastest; in-model records
     *   ignored), else the default;
     * TE_GRAPH_PICK_DEFAULT (-1): the default schedule, db ignored. */
    int pick;
} te_graph_compile_opts;

#define TE_GRAPH_PICK_BEST 0
#define TE_GRAPH_PICK_DEFAULT (-1)

#define TE_GRAPH_MIN_FLOPS_PER_THREAD (1 << 21)
#define TE_GRAPH_MAX_WAVE 16 /* groups that may run at once */

/* Compiles like te_graph_compile_db, with the options above, and then plans the run's
 * schedule: groups in plan order, grouped into WAVES of up to min(threads, TE_GRAPH_MAX_WAVE)
 * consecutive independent groups that run concurrently. Each group needs one thread when it is
 * small (fewer FLOPs than threads x min_flops_per_thread), else as many as its kernel's
 * parallel loops can use (its parallel width, te_graph_exec_group_width); a wave holds groups
 * whose needs add up to at most the budget, so a group as wide as the budget runs alone and
 * large groups with narrow parallel loops (a reduction to one row, say) run side by side.
 * The threads are split among a wave's groups in proportion to their FLOPs, at least one each
 * and at most a group's width, the shares summing to at most the budget (never more threads
 * than the budget; a view joins the wave before it with 0 threads and takes no share). The
 * memory plan's liveness is over waves (te_graph_memplan_create_steps),
 * so concurrent groups never share pool bytes. Inspect the schedule with
 * te_graph_exec_group_wave / _group_threads. Returns TE_OK, or a status with a message on g
 * (TE_ERR_ARG for a negative thread count or grain). */
int te_graph_compile_ex(te_graph *g, const te_fuse_plan *p, const te_graph_compile_opts *o,
                        te_graph_exec **out);
/* ---- In-model selection (graph/select.c) ------------------------------------------------ */

/* Options of te_graph_select_in_context; a zeroed struct is the defaults. */
typedef struct te_graph_select_opts {
    const te_target *target; /* NULL: the host C target */
    int threads;             /* the run's thread budget (0: the target's num_cores) */
    int candidates;          /* records per workload tried besides the default (0: 3; at most 8) */
    int reps;                /* timed runs of each version (0: 11) */
    FILE *log;               /* one line per workload with a choice, and notes; NULL: silent */
} te_graph_select_opts;

/* What te_graph_select_in_context found. */
typedef struct te_graph_select_result {
    int workloads;  /* distinct workloads that had a choice (a record besides the default) */
    int recorded;   /* in-model trials recorded */
    int changed;    /* workloads whose in-model best is not their best record measured alone */
    int to_default; /* of those, the ones whose in-model best is the default schedule */
    /* Whole-run medians (ms) after the selection, measured in turn (3 x reps runs each,
     * interleaved): every group with its default schedule, with its best record measured alone, and
     * with its in-model choice (what te_graph_compile_db now compiles). */
    double ms_default, ms_tuned, ms_selected;
    /* Which of the three whole runs was fastest (0 the defaults, 1 the best records alone, 2
     * the in-model choices): recorded as whole-run trials of the model, the fastest is what
     * te_graph_compile_ex then compiles. */
    int whole_pick;
} te_graph_select_result;

/* Chooses each workload's schedule inside the model's run: compiles the whole run once with
 * every group's default schedule and once per rank k = 1..candidates with every group's k-th
 * best record of db (te_graph_compile_opts.pick; ranks no workload has are left out), runs the
 * versions in turn (reps times each, after a warm-up, on uniform random float inputs and
 * zeroed integer ones), and records in db, for every workload with two or more distinct
 * schedules, each schedule's median time per kernel inside those runs as a trial of its
 * in-model key (te_graph_exec_group_context_key: the workload key plus a hash of the run's
 * kernels) on the target with `threads` cores. Then times whole runs of the defaults, the
 * isolated best records and the choices (*out) and records them as trials of the model's
 * whole-run key (te_graph_exec_model_key). From then on te_graph_compile_db (pick
 * TE_GRAPH_PICK_BEST) compiles the fastest whole run recorded: the in-model choices when they
 * won, else the defaults or the isolated records (per-kernel times can mislead: a kernel's
 * schedule changes what the next one finds in the caches). Nothing already recorded changes. A plan
 * none of whose workloads has a record is TE_OK with *out zeroed (a note on log). Returns TE_OK, or
 * a status with a message on g (TE_ERR_ARG for db NULL or options out of range; compile and run
 * errors as te_graph_compile_ex / te_graph_run; the database's error when recording fails, nothing
 * recorded then). */
int te_graph_select_in_context(te_graph *g, const te_fuse_plan *p, te_db *db,
                               const te_graph_select_opts *o, te_graph_select_result *out);

/* Runs the kernels wave by wave (te_graph_compile_ex); the caller's OpenMP thread count is
 * restored afterwards. input_data[i] is the data of the i-th graph input (in
 * te_graph_input_value order); output_data[j] (may be NULL, or hold NULLs) receives the j-th
 * graph output (te_graph_output_value order), in its dtype. Records each kernel's time. */
int te_graph_run(te_graph_exec *e, const void *const *input_data, void *const *output_data);
/* te_graph_run, calling after(e, gi, user) once group gi's kernel has run (may be NULL; from
 * the calling thread, in group order, once gi's wave has finished; views too, whose output
 * then reads as its root's data). While
 * it runs, te_graph_exec_value gives group gi's outputs and inputs: intermediates share the
 * pool, so a value holds its data only until the last group reading it has run. */
int te_graph_run_each(te_graph_exec *e, const void *const *input_data, void *const *output_data,
                      void (*after)(te_graph_exec *e, int group, void *user), void *user);
/* The data of any value (intermediate, input, constant or output) in its dtype, owned by e;
 * NULL for an out-of-range id and for values inside a group (never written to memory). An
 * intermediate's data is its last writer's only while it is live (see te_graph_run_each); inputs,
 * constants and outputs stay valid after a run. A view's output is its root's buffer (the same
 * pointer), live as long as the root. */
const void *te_graph_exec_value(const te_graph_exec *e, int v);
/* Number of kernels: the groups that are not views (te_fuse_plan_group_count counts every
 * group, and is the bound of the group indices below). */
int te_graph_exec_kernel_count(const te_graph_exec *e);
/* Group gi: 1 when its schedule came from the database, 0 for the default schedule or a view;
 * *note (may be NULL; owned by e) says which record or why not ("default schedule: no record
 * for this target"; for a view, "view of 'x' (reshape, no copy)"). -1 for a bad index. */
int te_graph_exec_group_from_db(const te_graph_exec *e, int gi, const char **note);
/* Group gi's workload key (te_graph_group_expr's), owned by e; "" for a view, NULL for a bad
 * index. */
const char *te_graph_exec_group_key(const te_graph_exec *e, int gi);
/* The in-model key of workload `key` in a run whose kernels (views left out) have the workload
 * keys keys[0..n) in plan order: key + ";model=" + the 16 hex digits of an FNV-1a 64 hash of
 * those keys, each followed by a newline. Written to buf (size bytes; snprintf's truncation).
 * Returns the length it needs, like snprintf, or TE_ERR_ARG. */
int te_graph_context_key(int n, const char *const *keys, const char *key, char *buf, size_t size);
/* The whole-run key of a run whose kernels have the workload keys keys[0..n): what
 * te_graph_context_key gives for the key "graph_model" (te_graph_exec_model_key). Same
 * returns as te_graph_context_key. */
int te_graph_model_key(int n, const char *const *keys, char *buf, size_t size);
/* "the defaults", "the best records alone" or "the in-model choices" for a
 * te_graph_select_result.whole_pick of 0, 1 or 2 ("?" otherwise). */
const char *te_graph_whole_pick_name(int whole_pick);
/* Group gi's workload key with the run's context appended (";model=<16 hex digits>", an
 * FNV-1a hash of every kernel's key in plan order): the key of its in-model records
 * (te_graph_select_in_context), owned by e; "" for a view, NULL for a bad index. */
const char *te_graph_exec_group_context_key(const te_graph_exec *e, int gi);
/* The key of e's whole run: "graph_model;model=<16 hex digits>", the hash of
 * te_graph_exec_group_context_key over every kernel's workload key. Its records
 * (te_graph_select_in_context) are whole runs of the model, each trace holding one schedule per
 * distinct workload; te_graph_compile_ex (pick TE_GRAPH_PICK_BEST) compiles every group with
 * the fastest one's schedules before any per-kernel record. Owned by e; NULL for e NULL. */
const char *te_graph_exec_model_key(const te_graph_exec *e);
/* The schedule trace of workload `key` inside the trace of a whole-run record (lines "@workload
 * KEY", each followed by that workload's trace lines), malloc'ed (the caller frees it); NULL
 * when either is NULL, the record has no such workload, or memory ran out. */
char *te_graph_whole_trace_section(const char *whole_trace, const char *key);
/* The trace of group gi's schedule (te_schedule_trace: replayable on its expression), owned by
 * e; "" for a view, NULL for a bad index. */
const char *te_graph_exec_group_trace(const te_graph_exec *e, int gi);
/* Group gi's expression (te_graph_group_expr_build; its tensors live as long as e), owned by
 * e; NULL for a view or a bad index. */
const te_graph_group_expr *te_graph_exec_group_expr(const te_graph_exec *e, int gi);
/* Seconds group gi's kernel took in the last run (0 before one, for a view, or for a bad
 * index). */
double te_graph_exec_group_seconds(const te_graph_exec *e, int gi);
/* The run's thread budget. */
int te_graph_exec_threads(const te_graph_exec *e);
/* Number of waves of the schedule (te_graph_compile_ex). */
int te_graph_exec_wave_count(const te_graph_exec *e);
/* The wave group gi runs in (waves run in order; groups of one wave run at once), and the
 * OpenMP threads its kernel gets (0 for a view). -1 for a bad index. */
int te_graph_exec_group_wave(const te_graph_exec *e, int gi);
int te_graph_exec_group_threads(const te_graph_exec *e, int gi);
/* The most threads group gi's kernel can keep busy: the largest trip count of its outermost
 * parallel loops (1 when it has none; te_kernel_counts.parallel_width), which caps its share
 * of a wave. 0 for a view or a bad index. */
double te_graph_exec_group_width(const te_graph_exec *e, int gi);
/* The pool's plan (owned by e). */
const te_graph_memplan *te_graph_exec_memplan(const te_graph_exec *e);
void te_graph_exec_free(te_graph_exec *e);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_GRAPH_H */
