/*
 * tessera/ops.h: the operator library (TVM's topi, for Tessera).
 *
 * Every operator here is built only from the public tensor-expression API (tessera/te.h): it
 * checks its inputs, then returns the output te_tensor of one or more te_compute stages, all
 * owned by the context. Nothing is computed; evaluate the result with te_reference_eval or
 * schedule, lower and build it like any hand-written expression.
 *
 *     te_ctx *ctx = te_ctx_create();
 *     te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){128, 256});
 *     te_tensor *W = te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){256, 512});
 *     te_tensor *b = te_placeholder(ctx, "b", TE_F32, 1, (int64_t[]){512});
 *     te_tensor *Y = te_op_matmul_bias_act(ctx, X, W, b, TE_ACT_GELU, "Y");
 *     if (!Y) fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));
 *     te_tensor *mm = te_op_find(Y, "Y_mm");   // the matmul stage, to tile it
 *
 * Conventions shared by every operator:
 *
 *  - Errors. On bad input an operator returns NULL (or a negative status) and leaves a message
 *    on the context (te_ctx_errmsg) that names the operator, the output, the input tensor and
 *    the axis at fault, e.g. "conv2d 'Y': input 'X' channel axis 1 has 3 channels but weight
 *    'W' axis 1 expects 4 (= 8 channels / 2 groups)". Shape errors are TE_ERR_SHAPE, bad
 *    parameters TE_ERR_ARG, dtype errors TE_ERR_DTYPE. A NULL tensor argument is an error too
 *    ("matmul 'C': input 'A' is NULL"); as in te.h, an earlier message is never replaced, so a
 *    chain of operators can be built and checked once at the end.
 *  - Names. `name` is the output tensor's name (a C identifier of at most 48 characters;
 *    NULL picks the operator's name, e.g. "matmul"). Intermediate stages are named
 *    "<name>_<suffix>"; each operator documents its suffixes, and te_op_find finds them. Give
 *    operators in one graph distinct names.
 *  - Tags. Every tensor an operator produces is tagged (te_tensor_set_tag) with the operator's
 *    name ("matmul", "conv2d", ...); intermediate stages get "<op>_<suffix>" ("softmax_max").
 *  - Dtypes. Outputs have the inputs' dtype; all tensor inputs of one operator must share it.
 *    Arithmetic operators accept any non-bool dtype; operators using exp/erf/sqrt (softmax,
 *    norms, gelu, silu, sigmoid, tanh, avg pooling) need f32 or f64. Floating-point constants
 *    (eps, 1/sqrt(2), ...) are constants of the operator's dtype, i.e. rounded to f32 for f32.
 *  - Reductions are whole stages (te_compute whose body is a te_reduce); epilogues (bias,
 *    activation, scaling) are separate elementwise stages so a schedule can compute_at or
 *    inline them. Padding is a separate stage "<name>_pad" whose reads are guarded with
 *    te_if_then_else, created only when some padding is non-zero.
 *  - Negative axis arguments count from the end (-1 is the last axis).
 */
#ifndef TESSERA_OPS_H
#define TESSERA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Linear algebra ------------------------------------------------------------------- */

/* C = op(A) op(B), where op(A) is A (trans_a == 0, A[m, k]) or A transposed (A[k, m]), and
 * op(B) is B ([k, n]) or B transposed ([n, k]). Returns C[m, n], one reduction stage over
 * "k" with output axes "i", "j". Tag "matmul". */
te_tensor *te_op_matmul(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                        const char *name);

/* Mixed-precision matmul: C[i, j] = sum_k A'[i, k] B'[k, j] with A' and B' the inputs (f16,
 * bf16, f32, f64; one dtype) converted to `acc` (f32 or f64, at least as wide), computed and
 * output in acc. Layouts and axes as te_op_matmul. Tag "matmul". TE_ERR_DTYPE for integer or
 * mixed inputs or a narrower accumulation. */
te_tensor *te_op_matmul_mixed(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                              te_dtype acc, const char *name);

/* ONNX MatMulInteger: Y[i, j] = sum_k (A[i, k] - a_zero) (B[k, j] - b_zero) in i32, with A
 * [m, k] and B [k, n] i8 or u8 (each its own) and per-tensor zero points in their input's
 * range (0 for none). Tag "matmul_integer". TE_ERR_DTYPE for other input dtypes, TE_ERR_ARG
 * for a zero point out of range. */
te_tensor *te_op_matmul_integer(te_ctx *ctx, te_tensor *A, te_tensor *B, int32_t a_zero,
                                int32_t b_zero, const char *name);

/* ONNX QLinearMatMul with per-tensor scales and zero points: acc = MatMulInteger(A, B, a_zero,
 * b_zero) (stage "<name>_acc"), then Y = saturate(round_half_even(acc * M) + y_zero) in
 * y_dtype (i8 or u8), M = (a_scale * b_scale) / y_scale computed in float as onnxruntime does,
 * the product acc * M in f32. Tag "qlinear_matmul". TE_ERR_ARG for a scale that is not positive
 * and finite or a zero point out of range, TE_ERR_DTYPE for other dtypes. */
te_tensor *te_op_qlinear_matmul(te_ctx *ctx, te_tensor *A, double a_scale, int32_t a_zero,
                                te_tensor *B, double b_scale, int32_t b_zero, double y_scale,
                                int32_t y_zero, te_dtype y_dtype, const char *name);

/* Requantization of an i32 accumulator, the epilogue of QLinearMatMul: Y =
 * saturate(round_half_even(f32(X) * mult) + zero) in `to` (i8 or u8), elementwise over X of any
 * rank, mult rounded to f32 first. Tag "requantize". TE_ERR_DTYPE when X is not i32 or `to` not
 * i8 / u8, TE_ERR_ARG for a multiplier that is not a positive finite float or a zero point out
 * of `to`'s range. */
te_tensor *te_op_requantize(te_ctx *ctx, te_tensor *X, double mult, int32_t zero, te_dtype to,
                            const char *name);

/* ONNX QuantizeLinear with a per-tensor scale and zero point: Y = saturate(round_half_even(
 * f32(X) / scale) + zero) in `to` (i8 or u8), X any float dtype and rank, the division in f32 as
 * onnxruntime does it. Tag "quantize_linear". TE_ERR_DTYPE for an integer X or another `to`,
 * TE_ERR_ARG for a scale that is not a positive finite float or a zero point out of range. */
te_tensor *te_op_quantize_linear(te_ctx *ctx, te_tensor *X, double scale, int32_t zero, te_dtype to,
                                 const char *name);

/* ONNX DequantizeLinear with a per-tensor scale and zero point: Y = f32(i32(X) - zero) * scale,
 * X u8, i8 or i32 of any rank (the zero point subtracted in i32, as onnxruntime does). Tag
 * "dequantize_linear". TE_ERR_DTYPE for other dtypes, TE_ERR_ARG for a scale that is not a
 * positive finite float or a zero point out of an 8-bit input's range. */
te_tensor *te_op_dequantize_linear(te_ctx *ctx, te_tensor *X, double scale, int32_t zero,
                                   const char *name);

/* Per-axis (per-channel) quantization: scales and zero points as 1-D tensors read along one
 * axis of X, the index of an output element along `axis` (negative counts from the end) picking
 * its parameter; a one-element tensor is per tensor (a scale computed at run time, say). The
 * results are new tensors owned by ctx; NULL with the error in ctx: TE_ERR_DTYPE for a scale that
 * is not f32 or a zero point not of the quantized operand's dtype, TE_ERR_SHAPE for a parameter
 * that is not 1-D with 1 or extent(X, axis) elements, TE_ERR_ARG for an axis outside X. The
 * values themselves are not checked (they may be computed): constant ones are checked where
 * they are read, by the ONNX importer. */

/* DequantizeLinear along `axis`: Y = f32(i32(X) - i32(Z[c])) * S[c], X u8, i8 or i32, S f32,
 * Z NULL (zero) or of X's dtype. Tag "dequantize_axis". */
te_tensor *te_op_dequantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *S, te_tensor *Z, int axis,
                                 const char *name);
/* QuantizeLinear along `axis`: Y = saturate(round_half_even(f32(X) / S[c]) + Z[c]) in `to` (u8 or
 * i8), X float, S f32, Z NULL (zero) or of dtype `to`. Tag "quantize_axis". */
te_tensor *te_op_quantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *S, te_tensor *Z, int axis,
                               te_dtype to, const char *name);
/* Requantization with a multiplier per index of `axis` (QLinearMatMul's and QLinearConv's
 * per-column / per-output-channel epilogue): Y = saturate(round_half_even(f32(X) * M[c]) + zero)
 * in `to`, X i32, M f32. TE_ERR_ARG as well for a zero point outside `to`'s range. Tag
 * "requantize_axis". */
te_tensor *te_op_requantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *M, int axis, int32_t zero,
                                 te_dtype to, const char *name);
/* MatMulInteger with zero points as tensors: Y[i, j] = sum_k (A[i, k] - Za[i]) (B[k, j] -
 * Zb[j]) in i32, A [m, k] and B [k, n] u8 or i8, Za NULL (0), [1] or [m] of A's dtype, Zb NULL,
 * [1] or [n] of B's (per-row / per-column zero points, or ones computed at run time: those of
 * DynamicQuantizeLinear). Tag "matmul_integer". */
te_tensor *te_op_matmul_integer_zp(te_ctx *ctx, te_tensor *A, te_tensor *B, te_tensor *Za,
                                   te_tensor *Zb, const char *name);
/* The parameters ONNX DynamicQuantizeLinear computes from f32 X (any rank), as onnxruntime
 * does: lo = min(min(X), 0), hi = max(max(X), 0), *scale = f32 [1] (hi - lo) / 255 (1 when hi
 * == lo), *zero = u8 [1] round_half_even(clamp(0 - lo / scale, 0, 255)). Stages "<name>_min",
 * "<name>_max", "<name>_scale" (*scale) and <name> (*zero); te_op_quantize_axis(X, *scale,
 * *zero, 0, TE_U8) is the quantized tensor. Both owned by ctx. Returns TE_OK, TE_ERR_ARG for a
 * NULL argument, TE_ERR_DTYPE for X not f32 (then both are NULL, the message in ctx). */
int te_op_dynamic_qparams(te_ctx *ctx, te_tensor *X, const char *name, te_tensor **scale,
                          te_tensor **zero);

/* VNNI packing of a matmul's right operand, the layout AMX and the AVX-512 BF16 / VNNI dot
 * products read: groups of `group` consecutive k values of one column are adjacent (2 for
 * bf16, 4 for int8). B is [k, n] of any dtype; returns Bp[ceil(k / group), n, group] with
 * Bp[ko, j, kk] = B[ko * group + kk, j], and zeros where ko * group + kk >= k (those reads
 * are guarded with te_if_then_else, so nothing outside B is read). Output axes "ko", "n",
 * "kk"; B's dtype; one stage. Tag "pack_vnni". TE_ERR_SHAPE when B is not 2-D, TE_ERR_ARG for
 * group < 1. */
te_tensor *te_op_pack_vnni(te_ctx *ctx, te_tensor *B, int group, const char *name);
/* VNNI packing in column blocks of nb: Bp[n / nb, ceil(k / group), nb, group] with
 * Bp[jb, ko, j, kk] = B[ko * group + kk, jb * nb + j] (zeros past k, as te_op_pack_vnni): one
 * block of a tile's columns is contiguous over k, so an AMX tile load of a block reads rows
 * nb * group elements apart (te_op_pack_vnni's rows are n * group apart: with n = 1024 bf16
 * every row of a tile falls into one L1 set, 1.4x slower measured). Output axes "jb", "ko",
 * "n", "kk"; tag "pack_vnni". TE_ERR_SHAPE when B is not 2-D or nb does not divide n,
 * TE_ERR_ARG for group < 1. */
te_tensor *te_op_pack_vnni_blocked(te_ctx *ctx, te_tensor *B, int group, int64_t nb,
                                   const char *name);

/* Matmul against a VNNI-packed right operand (te_op_pack_vnni): A is [..., m, k] (leading
 * axes "b0", "b1", ... are batch axes; Bp is shared by all of them), Bp is [k / g, n, g] with
 * g its last extent, and C[..., i, j] = sum over ko (extent k / g) and kk (extent g) of
 * acc(A[..., i, ko * g + kk]) * acc(Bp[ko, j, kk]) in `acc`. A blocked Bp [n / nb, k / g, nb,
 * g] (te_op_pack_vnni_blocked) is read as Bp[j / nb, ko, j % nb, kk]. Dtypes: A and Bp both bf16,
 * f16 or f32 with acc TE_F32, or A and Bp each u8 or i8 with acc TE_I32 (no zero points: shift the
 * inputs with te_op_matmul_integer when there are). The output has dtype acc and axes "i", "j"
 * (after the batch axes); it is one reduction stage whose body is exactly sum(cast(acc, A[..., i,
 * ko * g + kk]) * cast(acc, Bp[ko, j, kk]), ko, kk), the reduction axes in that order (ko outer, kk
 * inner) and the casts left out for an operand already of dtype acc: the form a tensorize matcher
 * recognizes. k must equal g * extent(Bp, 0): when the packer padded B (k not a multiple of g), pad
 * A's k axis with zeros to the same length (te_op_pad), which leaves the product unchanged. Tag
 * "matmul_vnni". TE_ERR_SHAPE for ranks (A below 2, Bp not 3) or mismatched k, TE_ERR_DTYPE for
 * other dtype combinations. */
te_tensor *te_op_matmul_vnni(te_ctx *ctx, te_tensor *A, te_tensor *Bp, te_dtype acc,
                             const char *name);

/* 2-D convolution in NHWC against VNNI-packed weights: X [n, h, w, c] (pad it first:
 * te_op_pad), Wp [kh, kw, c / g, oc, g] with Wp[ry, rx, ko, o, kk] = W[o, ko * g + kk, ry, rx]
 * (or blocked [oc / nb, kh, kw, c / g, nb, g]), and Y[b, oh, ow, o] = sum over (ry, rx, ko, kk)
 * of acc(X[b, oh * stride + ry, ow * stride + rx, ko * g + kk]) * acc(Wp[ry, rx, ko, o, kk]),
 * the reduction axes in that order: for every (ry, rx), a matmul of the output's row of ow
 * positions (rows `stride * c` elements apart) by a channel block, which the built-in tensor
 * intrinsics compute (the tensorize template). Dtypes as te_op_matmul_vnni. Output
 * [n, (h - kh) / stride + 1, (w - kw) / stride + 1, oc], axes "b", "oh", "ow", "oc"; tag
 * "conv2d_vnni". TE_ERR_SHAPE for ranks, channel counts or a kernel larger than the input,
 * TE_ERR_ARG for stride < 1, TE_ERR_DTYPE for other dtypes. */
te_tensor *te_op_conv2d_vnni(te_ctx *ctx, te_tensor *X, te_tensor *Wp, int stride, te_dtype acc,
                             const char *name);

/* Batched matmul: C[b, m, n] = op(A[b]) op(B[b]) with A [ba, m, k] (or [ba, k, m] when
 * trans_a) and B [bb, k, n] (or [bb, n, k] when trans_b). The batch extents ba and bb must be
 * equal, or one of them 1 (broadcast). One reduction stage. Tag "batch_matmul". */
te_tensor *te_op_batch_matmul(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                              const char *name);

/* Fully connected layer with bias: Y[m, n] = sum_k X[m, k] * W[k, n] + bias[n].
 * Layout: the weight is input-major, W[k, n] (the transpose of PyTorch's Linear.weight);
 * bias has n elements. Stages: "<name>_mm" (the reduction) and <name> (bias add).
 * Tag "dense". */
te_tensor *te_op_dense_bias(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *bias,
                            const char *name);

/* ---- Convolution and pooling --------------------------------------------------------- */

typedef enum te_op_layout { TE_LAYOUT_NCHW, TE_LAYOUT_NHWC } te_op_layout;

/* Parameters of a 2-D convolution. Padding is symmetric: pad_h rows on top and on the bottom,
 * pad_w columns on the left and on the right. Strides and dilations must be >= 1, paddings
 * >= 0, groups >= 1 and must divide both the input and the output channels. A zeroed struct
 * is invalid (stride 0); start from te_conv2d_params_default(). */
typedef struct te_conv2d_params {
    int32_t stride_h, stride_w;
    int32_t pad_h, pad_w;
    int32_t dilation_h, dilation_w;
    int32_t groups;
    te_op_layout layout;
} te_conv2d_params;

/* Stride 1, no padding, dilation 1, one group, NCHW. */
te_conv2d_params te_conv2d_params_default(void);

/* 2-D convolution (cross-correlation, as in every deep-learning framework).
 *   NCHW: X[n, c, h, w], W[oc, c / groups, kh, kw] -> Y[n, oc, oh, ow]
 *   NHWC: X[n, h, w, c], W[kh, kw, c / groups, oc] -> Y[n, oh, ow, oc]
 * with oh = (h + 2 pad_h - dilation_h (kh - 1) - 1) / stride_h + 1 (likewise ow), which must
 * be >= 1. Stages: "<name>_pad" (only when pad_h or pad_w > 0: the zero-padded input, reads
 * guarded by te_if_then_else) and <name>, a reduction over "rc" (input channels of the
 * group), "ry", "rx" (kernel rows and columns). Output axes are named "n", "oc", "oh", "ow"
 * (in layout order). p == NULL means te_conv2d_params_default(). Tag "conv2d". */
te_tensor *te_op_conv2d(te_ctx *ctx, te_tensor *X, te_tensor *W, const te_conv2d_params *p,
                        const char *name);

/* Depthwise 2-D convolution, NCHW only: X[n, c, h, w], W[c, mult, kh, kw] ->
 * Y[n, c * mult, oh, ow], output channel oc = ic * mult + m reads input channel ic with
 * W[ic, m]. Uses stride, pad and dilation from p; p->groups and p->layout must be left at 1
 * and TE_LAYOUT_NCHW. Stages as te_op_conv2d ("<name>_pad", <name> reducing "ry", "rx").
 * Tag "depthwise_conv2d". */
te_tensor *te_op_depthwise_conv2d(te_ctx *ctx, te_tensor *X, te_tensor *W,
                                  const te_conv2d_params *p, const char *name);

typedef enum te_pool_kind { TE_POOL_MAX, TE_POOL_AVG } te_pool_kind;

/* Parameters of 2-D pooling: window kernel_h x kernel_w (>= 1), stride >= 1, symmetric
 * padding 0 <= pad < kernel (so every window holds at least one real element). For average
 * pooling, count_include_pad != 0 divides by kernel_h * kernel_w, else by the number of
 * window elements inside the unpadded input (PyTorch's count_include_pad). */
typedef struct te_pool2d_params {
    int32_t kernel_h, kernel_w;
    int32_t stride_h, stride_w;
    int32_t pad_h, pad_w;
    int32_t count_include_pad;
} te_pool2d_params;

/* 2-D pooling over NCHW X[n, c, h, w] -> Y[n, c, oh, ow], oh = (h + 2 pad_h - kernel_h) /
 * stride_h + 1. Max pooling pads with -infinity (the dtype's lowest value for integers), average
 * pooling with 0 and needs a float dtype. Stages: "<name>_pad" (only with padding); for max,
 * <name> is the max reduction over "ry", "rx"; for avg, "<name>_sum" is the sum reduction and
 * <name> divides it by the window count. Tag "max_pool2d" or "avg_pool2d". */
te_tensor *te_op_pool2d(te_ctx *ctx, te_tensor *X, te_pool_kind kind, const te_pool2d_params *p,
                        const char *name);

/* ---- Normalization and softmax -------------------------------------------------------- */

/* Numerically stable softmax along `axis` of X (any rank). Four stages, each with X's shape
 * except that the reductions keep the softmax axis with extent 1:
 *   "<name>_max" = max over the axis (reduction axis "k"),
 *   "<name>_exp" = exp(X - max),
 *   "<name>_sum" = sum of exp over the axis (reduction axis "k"),
 *   <name>       = exp / sum.
 * Needs a float dtype. Tag "softmax". */
te_tensor *te_op_softmax(te_ctx *ctx, te_tensor *X, int axis, const char *name);

/* Layer normalization over one axis of X (pass -1 for the usual last axis):
 *   Y = (X - mean) / sqrt(var + eps) * gamma + beta
 * where gamma and beta have one axis with X's extent on `axis` (either may be NULL: scale 1,
 * shift 0), eps >= 0. Two-pass statistics, each a reduction keeping the axis with extent 1:
 *   "<name>_mean" = sum(X / N), "<name>_var" = sum((X - mean)^2 / N), then <name>.
 * Rows of TE_OP_KAHAN_MIN_ROW elements or more sum with Kahan compensation (the two
 * statistics stages are then tuple computes, see TE_OP_KAHAN_MIN_ROW).
 * Needs a float dtype. Tag "layer_norm". */
te_tensor *te_op_layer_norm(te_ctx *ctx, te_tensor *X, te_tensor *gamma, te_tensor *beta,
                            double eps, int axis, const char *name);

/* RMS normalization over the last axis: Y = X / sqrt(mean(X^2) + eps) * gamma, gamma with
 * the last axis' extent (NULL: no scale). Stages "<name>_ms" = sum(X * X / N) (keeps the axis
 * with extent 1) and <name>; rows of TE_OP_KAHAN_MIN_ROW elements or more sum with Kahan
 * compensation. Needs a float dtype. Tag "rms_norm". */
te_tensor *te_op_rms_norm(te_ctx *ctx, te_tensor *X, te_tensor *gamma, double eps,
                          const char *name);

/* Rows of at least this many elements are summed with compensated (Kahan) summation by
 * te_op_layer_norm and te_op_rms_norm: their statistics stages ("<name>_mean", "<name>_var",
 * "<name>_ms") become tuple computes (te_reducer_kahan) with a second output
 * "<stage>_c" holding the compensation. fp32 loses about n * 2^-24 relative accuracy in a
 * plain sum of n terms; at 4096 terms that reaches 1e-4 on adversarial rows. */
#define TE_OP_KAHAN_MIN_ROW 4096

/* Index of the largest (argmax) / smallest (argmin) element of X along `axis` (negative counts
 * from the end), ties to the smallest index, as an i64 tensor <name>. keepdims != 0 keeps the
 * axis with extent 1, else it is dropped (a 1-D X then gives shape [1]). One tuple stage
 * (te_reducer_argmax) with two outputs: "<name>_val" (the extreme value, X's dtype; te_op_find
 * finds it) and <name>. Any non-bool dtype. Tag "argmax" / "argmin". te_op_arg_reduce is both:
 * is_max selects. */
te_tensor *te_op_argmax(te_ctx *ctx, te_tensor *X, int axis, int keepdims, const char *name);
te_tensor *te_op_argmin(te_ctx *ctx, te_tensor *X, int axis, int keepdims, const char *name);
te_tensor *te_op_arg_reduce(te_ctx *ctx, te_tensor *X, int is_max, int axis, int keepdims,
                            const char *name);

/* Layer normalization like te_op_layer_norm with one-pass statistics: a Welford tuple stage
 * (te_reducer_welford) with outputs "<name>_cnt", "<name>_mean", "<name>_m2" (the axis kept
 * with extent 1) reads X once, then <name> = (X - mean) * rsqrt(m2 / N + eps) * gamma + beta.
 * One read of X fewer than the two-pass form, at the price of a division per element in the
 * reduction. Needs a float dtype. Tag "layer_norm_welford". The registry's "layer_norm" stays
 * the two-pass te_op_layer_norm (its plain sums vectorize with the compiler's reduction
 * support and existing tuning records refer to it); this one is "layer_norm_welford". */
te_tensor *te_op_layer_norm_welford(te_ctx *ctx, te_tensor *X, te_tensor *gamma, te_tensor *beta,
                                    double eps, int axis, const char *name);

/* Softmax along `axis` in two passes over X instead of three: an online max+sum tuple stage
 * (te_reducer_online_softmax) with outputs "<name>_max" and "<name>_sum" (the axis kept with
 * extent 1), then <name> = exp(X - max) / sum. Rows whose elements are all -inf (fully
 * masked) give 0 everywhere, never NaN; large values do not overflow. Needs a float dtype.
 * Tag "softmax_online". */
te_tensor *te_op_softmax_online(te_ctx *ctx, te_tensor *X, int axis, const char *name);

/* Reduction of X over naxes distinct axes with a built-in reducer (TE_RSUM, TE_RMAX, TE_RMIN,
 * TE_RPROD). keepdims != 0 keeps the reduced axes with extent 1, else they are dropped (a
 * full reduction then gives shape [1]). One stage; reduction axes are named "k0", "k1", ...
 * Tag "sum", "max", "min" or "prod". */
te_tensor *te_op_reduce(te_ctx *ctx, te_tensor *X, te_reduce_kind kind, int naxes, const int *axes,
                        int keepdims, const char *name);

/* Mean over axes: "<name>_sum" (te_op_reduce with TE_RSUM) then <name> = sum / count.
 * Needs a float dtype. Tag "mean". */
te_tensor *te_op_mean(te_ctx *ctx, te_tensor *X, int naxes, const int *axes, int keepdims,
                      const char *name);

/* ---- Elementwise ---------------------------------------------------------------------- */

/* Activation functions, used by the activation operators and the fused epilogues. */
typedef enum te_op_act {
    TE_ACT_NONE,      /* identity */
    TE_ACT_RELU,      /* max(x, 0) */
    TE_ACT_GELU,      /* 0.5 x (1 + erf(x / sqrt(2))) */
    TE_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    TE_ACT_SILU,      /* x sigmoid(x) */
    TE_ACT_SIGMOID,   /* 1 / (1 + exp(-x)) */
    TE_ACT_TANH,      /* tanh(x) */
    TE_ACT_COUNT
} te_op_act;

/* Name of an activation ("gelu"), or NULL for a value that is not one. */
const char *te_op_act_name(te_op_act act);
/* Parses "none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh". TE_OK or TE_ERR_ARG. */
int te_op_act_parse(const char *s, te_op_act *out);
/* The activation as a scalar expression of x (for writing custom epilogues). RELU works for
 * every non-bool dtype, the others need a float dtype. */
te_expr *te_op_act_expr(te_ctx *ctx, te_op_act act, te_expr *x);

/* Y = act(X), elementwise over any rank; one stage. Tagged with the activation's name. */
te_tensor *te_op_activation(te_ctx *ctx, te_tensor *X, te_op_act act, const char *name);
te_tensor *te_op_relu(te_ctx *ctx, te_tensor *X, const char *name);
te_tensor *te_op_gelu(te_ctx *ctx, te_tensor *X, const char *name);
te_tensor *te_op_gelu_tanh(te_ctx *ctx, te_tensor *X, const char *name);
te_tensor *te_op_silu(te_ctx *ctx, te_tensor *X, const char *name);
te_tensor *te_op_sigmoid(te_ctx *ctx, te_tensor *X, const char *name);
te_tensor *te_op_tanh(te_ctx *ctx, te_tensor *X, const char *name);

/* Broadcasting binary operator with numpy rules: shapes are aligned on the right, and on each
 * axis the extents must be equal or one of them 1 (that operand is repeated). The output has
 * the larger rank. op is one of TE_ADD, TE_SUB, TE_MUL, TE_DIV, TE_MIN, TE_MAX (TE_DIV follows
 * te_div: C truncation on integers). One stage; tag "add", "sub", "mul", "div", "min" or
 * "max". */
te_tensor *te_op_binary(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name);

/* ---- Comparison, logic and mod (te/ops/compare.c) --------------------------------------- */
/* Truth values are TE_U8 tensors holding 0 or 1 (how the graph and ONNX store bool). Each
 * operator is one stage; on bad input they return NULL with the error recorded on ctx, naming
 * the operator, its output and the input at fault. */

/* Y = (A op B) ? 1 : 0 as TE_U8, with te_op_binary's broadcasting. A and B share a numeric
 * (non-bool) dtype; op is one of TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE. Tag "equal",
 * "not_equal", "less", "less_equal", "greater" or "greater_equal". */
te_tensor *te_op_compare(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name);

/* Y = (A op B) ? 1 : 0 as TE_U8 on truth values, broadcasting: A and B are TE_BOOL or TE_U8
 * (non-zero is true; their dtypes may differ). op is TE_AND, TE_OR, or TE_NE for exclusive or.
 * Tag "and", "or" or "xor". */
te_tensor *te_op_logic(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name);

/* Y = X ? 0 : 1 as TE_U8; X is TE_BOOL or TE_U8 (non-zero is true). Tag "not". */
te_tensor *te_op_not(te_ctx *ctx, te_tensor *X, const char *name);

/* Y = -1, 0 or 1 by the sign of X, in X's (numeric) dtype; NaN gives 0. Tag "sign". */
te_tensor *te_op_sign(te_ctx *ctx, te_tensor *X, const char *name);

/* Remainder with te_op_binary's broadcasting, in A's dtype (A and B share a numeric one), as
 * ONNX Mod: fmod = 0 takes the divisor's sign (te_floormod, integers only), fmod = 1 the
 * dividend's (C fmod; integers by te_mod, floats as a - b trunc(a / b)). An integer divisor of
 * 0 or -1 gives 0 (compiled code cannot trap). Tag "mod". */
te_tensor *te_op_mod(te_ctx *ctx, te_tensor *A, te_tensor *B, int fmod, const char *name);

/* ---- Layout --------------------------------------------------------------------------- */

/* Constant padding: Y has extent pad_before[d] + X.shape[d] + pad_after[d] on axis d, X's
 * values inside and `value` (converted to X's dtype) around. ndim must equal X's rank and
 * pads must be >= 0. Reads are guarded with te_if_then_else. One stage; tag "pad". */
te_tensor *te_op_pad(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *pad_before,
                     const int64_t *pad_after, double value, const char *name);

/* Permutes axes: Y.shape[d] = X.shape[perm[d]], Y[i_0, ...] = X[j] with j[perm[d]] = i_d.
 * perm holds each of 0 .. rank-1 once. One stage; tag "transpose". */
te_tensor *te_op_transpose(te_ctx *ctx, te_tensor *X, const int *perm, const char *name);

/* Row-major reshape to ndim (1 .. TE_MAX_DIMS) extents; one extent may be -1 (inferred). The
 * element counts must match. Index math uses floordiv/floormod of the flat index. One stage;
 * tag "reshape". */
te_tensor *te_op_reshape(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *shape,
                         const char *name);

/* Weights packed once in column panels (Ansor's layout rewrite; what oneDNN calls packed
 * weights): a placeholder P `[n / nb, k, nb]` of dtype dt named `panels_name` (NULL:
 * "<name>_panels"), and a view of it named `name` with the weight's logical shape, `[k, n]` (trans
 * 0) or `[n, k]` (trans 1): W[kk, j] = P[j / nb, kk, j % nb]. A product that reads the view reads
 * contiguous K x nb panels; the gemm template inlines such a view (tag "packed_view") and never
 * copies the operand again. Data for P comes from te_op_pack_panels. Returns the view and sets
 * *panels to P (both owned by ctx); NULL when k, n or nb is not positive or nb does not
 * divide n (TE_ERR_SHAPE, the message in ctx). */
te_tensor *te_op_packed_view(te_ctx *ctx, const char *name, const char *panels_name, te_dtype dt,
                             int64_t k, int64_t n, int trans, int64_t nb, te_tensor **panels);

/* Packs an f32 matrix for te_op_packed_view: dst[jb][kk][j] = W[kk][jb * nb + j] for W
 * [k, n] (trans 0), = W[jb * nb + j][kk] for W [n, k] (trans 1). dst holds n * k floats
 * (caller-owned); n must be a multiple of nb. TE_OK, or TE_ERR_ARG for NULL pointers or bad
 * sizes. */
int te_op_pack_panels(const float *w, int64_t k, int64_t n, int trans, int64_t nb, float *dst);

/* ---- Indexing (te/ops/index.c) -------------------------------------------------------- */
/* Each of these is one stage whose element reads one input element at an index computed from
 * the output's axes, so they fuse as injective (broadcast for where and expand) operators. They
 * move any numeric dtype (not bool); the inputs of one call share it. */

/* Most inputs of te_op_concat. */
#define TE_OP_CONCAT_MAX 64

/* Joins n (1 .. TE_OP_CONCAT_MAX) tensors along `axis`: every extent but the axis' must be
 * equal; the output's extent on the axis is the sum. The body is a chain of te_if_then_else
 * reads. Tag "concat". */
te_tensor *te_op_concat(te_ctx *ctx, int n, te_tensor *const *X, int axis, const char *name);

/* Strided slice with ONNX Slice semantics. For each of the n listed axes (axes NULL: 0 .. n-1;
 * negative axes count from the end; each axis at most once), starts[i] / ends[i] count from
 * the end when negative and are clamped to the axis ([0, dim] for a positive step, [-1, dim - 1]
 * for a negative one), and the output has ceil((end - start) / step) elements on that axis:
 * X[start], X[start + step], ... (steps NULL: all 1; a step must be non-zero, negative steps
 * walk backwards). Axes not listed are kept whole. An empty result is TE_ERR_SHAPE (extents
 * are positive). One stage; tag "slice". */
te_tensor *te_op_slice(te_ctx *ctx, te_tensor *X, int n, const int *axes, const int64_t *starts,
                       const int64_t *ends, const int64_t *steps, const char *name);

/* Splits X along `axis` into n parts written to out[0 .. n-1]: sizes[i] elements each (they
 * must be >= 1 and sum to the axis' extent), or with sizes NULL ceil(dim / n) elements each and
 * the rest in the last (ONNX Split's num_outputs rule). Each part is a slice stage named
 * "<name>_<i>" (name NULL: "split"), tag "split". Returns TE_OK, or an error status with out[]
 * set to NULL. */
int te_op_split(te_ctx *ctx, te_tensor *X, int axis, int n, const int64_t *sizes, te_tensor **out,
                const char *name);

/* Gathers slices of X along `axis` at the integer `indices` (any integer dtype but bool, any
 * rank): Y has shape X.shape[:axis] + indices.shape + X.shape[axis+1:] and
 * Y[a.., i.., b..] = X[a.., indices[i..], b..]. A negative index counts from the end (ONNX); an
 * index outside [-dim, dim) is clamped to the nearest element (compiled code cannot report it). One
 * stage reading the indices' data for X's index; tag "gather". */
te_tensor *te_op_gather(te_ctx *ctx, te_tensor *X, te_tensor *indices, int axis, const char *name);

/* Y = C ? X : Y elementwise with numpy broadcasting of all three (te_op_binary's rules). C is
 * TE_BOOL or any numeric dtype (non-zero is true); X and Y share a numeric dtype, the output's.
 * One stage with te_select; tag "where". */
te_tensor *te_op_where(te_ctx *ctx, te_tensor *C, te_tensor *X, te_tensor *Y, const char *name);

/* Broadcasts X to `shape` (ONNX Expand): the output shape is the numpy broadcast of X's shape
 * and shape (so an extent 1 in shape keeps X's extent, and shape may have a lower rank). Extents
 * must be >= 1. One stage; tag "expand". */
te_tensor *te_op_expand(te_ctx *ctx, te_tensor *X, int ndim, const int64_t *shape,
                        const char *name);

/* ---- More reductions (te/ops/reduce_more.c) ------------------------------------------- */

/* Numerically stable log-softmax along `axis`: Y = X - max - log(sum(exp(X - max))). Stages
 * "<name>_max" (max over the axis, kept with extent 1; reduction axis "k"), "<name>_sum" (sum
 * of exp(X - max), same shape) and <name>. Needs a float dtype. Tag "log_softmax". */
te_tensor *te_op_log_softmax(te_ctx *ctx, te_tensor *X, int axis, const char *name);

/* L2 norm over axes: Y = sqrt(sum(X * X)) with te_op_reduce's axes and keepdims rules. Stages
 * "<name>_sq" (X * X, elementwise), "<name>_sum" (the sum) and <name> (the square root). Needs
 * a float dtype. Tag "reduce_l2". (The max over axes is te_op_reduce with TE_RMAX.) */
te_tensor *te_op_reduce_l2(te_ctx *ctx, te_tensor *X, int naxes, const int *axes, int keepdims,
                           const char *name);

/* ---- Fused operators ------------------------------------------------------------------ */

/* Y[m, n] = act(sum_k X[m, k] W[k, n] + bias[n]); bias may be NULL. Stages "<name>_mm" (the
 * matmul reduction) and <name> (the epilogue). Tag "matmul_bias_act". */
te_tensor *te_op_matmul_bias_act(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *bias,
                                 te_op_act act, const char *name);

/* Gated MLP (SwiGLU): Y[m, n] = silu(X W1) * (X W3), X[m, k], W1 and W3 [k, n]. Stages
 * "<name>_gate" (X W1), "<name>_up" (X W3) and <name>. Needs a float dtype. Tag "mlp_gate". */
te_tensor *te_op_mlp_gate(te_ctx *ctx, te_tensor *X, te_tensor *W1, te_tensor *W3,
                          const char *name);
/* te_op_mlp_gate with the weights' layout: trans_b = 0 stores W1 and W3 [k, n] (in, out),
 * trans_b = 1 stores them [n, k] ([out][in], the layout of inference engines' weight files, whose
 * k axis is contiguous). Any other trans_b is TE_ERR_ARG; NULL on error (message in ctx). */
te_tensor *te_op_mlp_gate_tb(te_ctx *ctx, te_tensor *X, te_tensor *W1, te_tensor *W3, int trans_b,
                             const char *name);

/* Convolution with folded batch norm and ReLU: Y = max(conv2d(X, W) * scale[oc] + shift[oc],
 * 0), scale and shift with oc elements, the conv as te_op_conv2d (either layout). Stages
 * "<name>_pad" (only with padding), "<name>_conv" and <name>. Tag "conv2d_bn_relu". */
te_tensor *te_op_conv2d_bn_relu(te_ctx *ctx, te_tensor *X, te_tensor *W, te_tensor *scale,
                                te_tensor *shift, const te_conv2d_params *p, const char *name);

/* Q, K and V projections sharing one input: out[0] = X Wq, out[1] = X Wk, out[2] = X Wv with
 * X[m, k] and each W [k, n_i] (the n_i may differ, as with grouped-query attention). Three
 * reduction stages named "<name>_q", "<name>_k", "<name>_v" (name NULL: "qkv"). Returns
 * TE_OK, or an error status with out[] set to NULL. Tag "qkv_projection". */
int te_op_qkv_projection(te_ctx *ctx, te_tensor *X, te_tensor *Wq, te_tensor *Wk, te_tensor *Wv,
                         te_tensor *out[3], const char *name);

/* ---- Attention ------------------------------------------------------------------------ */

/* Which mask te_op_attention adds to the scaled scores. */
typedef enum te_attn_mask {
    TE_ATTN_MASK_NONE,     /* no mask */
    TE_ATTN_MASK_CAUSAL,   /* query i sees keys j <= i (top-left aligned, as PyTorch's SDPA) */
    TE_ATTN_MASK_EXPLICIT, /* an additive mask tensor, [lq, lk] or [batch, 1, lq, lk] */
    TE_ATTN_MASK_COUNT
} te_attn_mask;

/* Which expression te_op_attention builds (both never need the L x L scores in memory). */
typedef enum te_attn_form {
    TE_ATTN_ONE_PASS, /* key blocks combined by an online-softmax tuple reduction (default) */
    TE_ATTN_TWO_PASS, /* row maxima first, then weights; the scores computed twice */
    TE_ATTN_FORM_COUNT
} te_attn_form;

/* Parameters of te_op_attention. The extents (batch, heads, lq, lk, dh) may be left 0: they
 * are then taken from the tensors; a non-zero extent must match them. scale 0 means
 * 1 / sqrt(dh); it must be finite. block (>= 0; 0: 128, or 64 where that pads lk to fewer
 * keys) is the key-block size of the one-pass form, where key blocks are part of the definition
 * (the two-pass form leaves blocking to the schedule and ignores it). form picks the expression
 * (TE_ATTN_ONE_PASS by default). Start from te_attention_params_default(). */
typedef struct te_attention_params {
    int32_t batch, heads, lq, lk, dh;
    double scale;
    te_attn_mask mask;
    int32_t block;
    te_attn_form form;
} te_attention_params;

/* Everything 0 (extents from the tensors, scale 1 / sqrt(dh)), no mask. */
te_attention_params te_attention_params_default(void);

/* Name of a mask kind ("none", "causal", "explicit"), or NULL for a value that is not one. */
const char *te_attn_mask_name(te_attn_mask m);

/* Fused scaled dot-product attention with the flash-attention structure:
 *   O[b, h, i, d] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:] + mask[i, j]) V[b,h,j,d]
 * with Q [batch, heads, lq, dh], K and V [batch, heads, lk, dh], mask (only with
 * TE_ATTN_MASK_EXPLICIT, else it must be NULL) [lq, lk] or [batch, 1, lq, lk], additive
 * (-infinity masks a key out). Needs f32 or f64. A fully masked row (every score -infinity)
 * gives zeros, never NaN; very large logits do not overflow (maxima are subtracted first).
 * The L x L score matrix is never a stage a schedule has to materialize (docs/ATTENTION.md;
 * autotune's "attention" template schedules both forms for CPUs and CUDA). Stages (suffixes of
 * name, NULL: "attention"; tags "attention_<suffix>", the output "attention"):
 *
 * One-pass form (TE_ATTN_ONE_PASS): key blocks of B = block keys, lk padded to nb = ceil(lk /
 * B) blocks (padded scores -infinity, padded values 0):
 *   "_kt"   [b, h, dh, nb B]    K transposed, padded;  "_vp" [b, h, nb B, dh] V padded,
 *   "_s"    [b, h, lq, nb B]    Q K^T (reduction "k"),
 *   "_bmax" [b, h, lq, nb]      per-block maxima of scale s + mask (reduction "ji"),
 *   "_p"    [b, h, lq, nb B]    exp(score - block maximum), 0 where masked,
 *   "_bsum" [b, h, lq, nb]      per-block sums of p;  "_bpv" [b, h, lq, nb, dh] per-block P V,
 *   "_m", "_l", "_a" [b, h, lq, dh]  one tuple reduction over the blocks ("jo") combining
 *                               (max, sum, accumulator) with the online-softmax rescaling (tag
 *                               "attention_online"; one stage, named "<name>_m"),
 *   <name>  [b, h, lq, dh]      a / l.
 *
 * Two-pass form (TE_ATTN_TWO_PASS): maxima first, then the weights; the scores are computed
 * twice so that each pass computes them per key block of the schedule's choosing:
 *   "_kt" [b, h, dh, lk] K transposed;  "_vx" [b, h, lk, dh+1] V with a column of ones,
 *   "_s1" [b, h, lq, lk] Q K^T;  "_max" [b, h, lq] row maxima (reduction "j"),
 *   "_s2" [b, h, lq, lk] Q K^T again;  "_p" [b, h, lq, lk] exp(score - max), 0 where masked,
 *   "_acc" [b, h, lq, dh+1] sum_j p vx: P V and, in the last column, sum_j p (reduction "j"),
 *   <name> [b, h, lq, dh] acc / acc[.., dh].
 * Returns NULL with a message on ctx on bad input. */
te_tensor *te_op_attention(te_ctx *ctx, te_tensor *Q, te_tensor *K, te_tensor *V, te_tensor *mask,
                           const te_attention_params *p, const char *name);

/* ---- Finding stages ------------------------------------------------------------------- */

/* Walks the producers of `out` (out itself, then every tensor its definition reads,
 * transitively) and returns the computed tensor named `name`, or NULL when there is none.
 * Placeholders are never returned. Typical use: te_op_find(Y, "Y_pad") to inline padding. */
te_tensor *te_op_find(te_tensor *out, const char *name);

/* Fills stages[] (capacity cap) with the computed tensors out depends on, producers before
 * consumers, out last. Returns the total number of such stages (which may exceed cap). */
int te_op_stages(te_tensor *out, te_tensor **stages, int cap);

/* ---- Registry (for the `tessera ops` CLI and the tuner) -------------------------------- */

#define TE_OP_MAX_PARAMS 24
#define TE_OP_MAX_IO 8

/* A parsed KEY=VAL list: "m=1024,n=1024,k=1024". Values are kept as text; is_int says the
 * value is a decimal integer (ival holds it). The special key "dtype" sets `dtype` instead of
 * adding an entry (default TE_F32). A struct filled by hand must set dtype itself (a zeroed
 * struct means TE_BOOL, which every operator rejects). */
typedef struct te_op_param {
    char key[32];
    char val[32];
    int64_t ival;
    int is_int;
} te_op_param;

typedef struct te_op_params {
    int n;
    te_op_param p[TE_OP_MAX_PARAMS];
    te_dtype dtype;
} te_op_params;

/* Parses "k1=v1,k2=v2" (spaces around items allowed; empty string gives no entries) into
 * *out. Errors (TE_ERR_ARG with a message on ctx): an item without '=', an empty key or
 * value, a key or value too long, a repeated key, too many entries, an unknown dtype. */
int te_op_params_parse(te_ctx *ctx, const char *text, te_op_params *out);

/* One key an operator takes. dflt == NULL means the key is required. Integer keys must be
 * integers; string keys (is_str) take one of the words listed in help; boolean keys (is_bool,
 * integer keys too) take only 0 or 1. */
typedef struct te_op_key {
    const char *name;
    const char *dflt;
    int is_str;
    const char *help;
    int is_bool;
} te_op_key;

/* Makes placeholders and the operator from parsed parameters. inputs and outputs must hold
 * TE_OP_MAX_IO entries; *n_in and *n_out receive the counts. Placeholders are named as in the
 * operator's documentation ("A", "B"; "X", "W", ...) and outputs after the operator. Unknown
 * keys, missing required keys and non-integer values are TE_ERR_ARG errors naming the key. */
typedef int (*te_op_build_fn)(te_ctx *ctx, const te_op_params *kv, te_tensor **inputs, int *n_in,
                              te_tensor **outputs, int *n_out);

struct te_op_def;

typedef struct te_op_info {
    const char *name;        /* "matmul" */
    const char *description; /* one line */
    int nkeys;
    const te_op_key *keys;
    /* Builds the operator; for registered operators a stub that fails: build any operator with
     * te_op_info_build, which works for both. */
    te_op_build_fn build;
    /* Registered operators only (te_op_register); NULL / 0 for the library's: */
    const struct te_op_def *def; /* the definition, strings copied */
    const char *attrs;           /* keys that are no input dimension, with defaults ("alpha=1"): the
                                    attributes a graph node of the operator takes */
    const char *inputs;          /* input names, "X,W" */
    int n_in;                    /* their count */
    const char *origin;          /* the plugin file that registered it, or "te_op_register" */
} te_op_info;

/* The operator named `name` (the library's, then the registered ones), or NULL. Entries never
 * change or move once visible; nothing to free. */
const te_op_info *te_op_lookup(const char *name);
/* The operator library; *n receives its count. Registered operators are not in it
 * (te_op_list_registered). */
const te_op_info *te_op_list(int *n);
/* The operators registered so far (te_op_register, te_plugin_load), in registration order;
 * *n receives their count. Thread-safe; later registrations append. */
const te_op_info *te_op_list_registered(int *n);

/* Builds op (library or registered) from parsed parameters: op->build for the library's; for a
 * registered operator its keys are resolved (defaults, checks as te_op_build), its inputs made
 * as placeholders of the declared shapes and dtype kv->dtype, and its build function called.
 * inputs and outputs hold TE_OP_MAX_IO entries. TE_OK or a status with a message on ctx. */
int te_op_info_build(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, te_tensor **inputs,
                     int *n_in, te_tensor **outputs, int *n_out);

/* The entry of `key` in kv, or NULL. */
const te_op_param *te_op_params_find(const te_op_params *kv, const char *key);

/* Checks kv against op's keys (unknown, missing, non-integer) and writes the canonical
 * workload key "matmul;k=1024,m=1024,n=1024;f32": the operator's name; its keys sorted by
 * name, integers in decimal, leaving out optional keys whose value equals their default (so
 * "stride=1" and no stride give one key); then the dtype. A registered operator's key ends
 * with the structural hash of the expression it builds (";expr=0123456789abcdef", the hash
 * te_tuner_expr_hash computes, over its stages and its placeholders' shapes), so a plugin whose
 * definition changed never finds the records of the old one. Returns the key's length (like
 * snprintf; the text is truncated to size) or a negative status with a message on ctx. */
int te_op_workload_key(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, char *buf,
                       size_t size);

/* Looks the operator up, parses `params` and builds it: te_op_lookup + te_op_params_parse +
 * op->build. Returns TE_OK or an error status with a message on ctx (TE_ERR_NOT_FOUND for an
 * unknown operator). */
int te_op_build(te_ctx *ctx, const char *op, const char *params, te_tensor **inputs, int *n_in,
                te_tensor **outputs, int *n_out);

/* ---- User operators and plugins ------------------------------------------------------------
 *
 * An operator defined outside the library, registered once per process, is used like a library
 * operator everywhere: te_op_lookup / te_op_build / te_op_workload_key, the tuner
 * (te_tuner_add_op), `tessera ops|tune|gen|lower`, and as a graph node by name (`y =
 * gelu_gate(x, w) alpha=0.5` in the text form; its pattern kind decides how it fuses). The
 * definition is declarative except for the expression: parameters with defaults and
 * descriptions (te_op_key), inputs with shapes in those parameters, and one function that
 * builds the output from the input tensors (the same function serves the standalone operator
 * and the graph node):
 *
 *     static int build(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
 *                      const char *name, te_tensor **out, void *user)
 *     {   // shapes from the inputs; attributes from attrs (te_op_params_find)
 *         ...; out[0] = y; return y ? TE_OK : te_ctx_errcode(ctx);
 *     }
 *     static const te_op_key keys[] = {{"m", NULL, 0, "rows", 0}, {"n", NULL, 0, "cols", 0},
 *                                      {"alpha", "1", 0, "scale", 0}};
 *     te_op_def d = {.name = "scaled_tanh", .description = "tanh(alpha x)", .nkeys = 3,
 *                    .keys = keys, .inputs = "X[m,n]", .build = build, .kind = "elemwise"};
 *     te_op_register(&d, err, sizeof err);
 *
 * A plugin is a shared library that registers its operators from one function the loader calls
 * (te_plugin_load, `--plugin LIB.so` and $TESSERA_PLUGINS in the CLI):
 *
 *     TE_PLUGIN_ABI_DECLARE
 *     int tessera_plugin_init(int abi, char *err, size_t errsize)
 *     {
 *         return te_op_register(&d, err, errsize);
 *     }
 *
 * It links against nothing of Tessera: the symbols come from the program that loads it (the
 * CLI exports them). examples/plugin/ is a complete one with its CMake lines.
 */

/* Builds a registered operator's output from its inputs in[0..n_in) (placeholders of the
 * declared shapes standalone; the producers' tensors in a graph) and stores it in out[0], named
 * `name`. attrs holds every key that is no input dimension, at the given value else its
 * default (values as text in p[i].val, p[i].ival when is_int; standalone it also holds the
 * dimension keys). The dtype of the inputs is attrs->dtype. Returns TE_OK, or a status with a
 * message on ctx (te_ctx_set_error). Must be a pure function of its arguments: it runs whenever
 * an operator or graph node is (re)built. The same type as te_graph_op_build_fn. */
typedef int (*te_op_expr_fn)(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
                             const char *name, te_tensor **out, void *user);

typedef struct te_op_def {
    const char *name;        /* a C identifier of at most 39 characters, no other operator's */
    const char *description; /* one line for `tessera ops` (NULL: none) */
    int nkeys;               /* 0..TE_OP_MAX_PARAMS */
    const te_op_key *keys;   /* parameters; keys that are no input dimension need a default */
    /* Inputs and their shapes: "X[m,k],W[k,n],bias[n]", each dimension an integer key or a
     * positive literal; 1..TE_OP_MAX_IO inputs of at most TE_MAX_DIMS dimensions. */
    const char *inputs;
    te_op_expr_fn build;
    /* Pattern kind in graphs: "elemwise", "broadcast", "injective", "reduction", "out_ewise"
     * or "opaque" (NULL: "opaque", never fused). */
    const char *kind;
    double flop_per_elem; /* cost per output element for the graph's roofline (0: 1) */
    void *user;           /* passed to build; must outlive the process's use of the operator */
} te_op_def;

/* Most registered operators per process. */
#define TE_OP_MAX_REGISTERED 64

/* Registers def for the whole process (thread-safe; strings and keys are copied). Returns
 * TE_OK, or with a message in err (errsize bytes; may be NULL): TE_ERR_ARG (a bad name, a name
 * a library or registered operator has, bad keys or defaults, an input list that does not
 * parse or names no key, a dimension key that is a word key, an attribute without a default,
 * an unknown kind, no build function) or TE_ERR_OVERFLOW (TE_OP_MAX_REGISTERED reached).
 * Operators cannot be unregistered. Only the operator library's names are checked here: in
 * graphs, a graph operator of the same name (batch_norm, reshape: te_graph_op_name) or one of
 * te_graph_op_register wins, so pick names neither uses (the CLI refuses the first kind). */
int te_op_register(const te_op_def *def, char *err, size_t errsize);

/* The plugin ABI this library implements. A plugin built against another one is refused. */
#define TE_PLUGIN_ABI_VERSION 1

/* What a plugin defines beside tessera_plugin_init: the ABI it was built for. */
#define TE_PLUGIN_ABI_DECLARE                                                                      \
    __attribute__((visibility("default"))) const int tessera_plugin_abi_version =                  \
        TE_PLUGIN_ABI_VERSION;

/* The function every plugin defines: registers its operators (te_op_register), passing err and
 * errsize on. abi is the loader's TE_PLUGIN_ABI_VERSION. Returns TE_OK or the failing status
 * with err filled. */
typedef int (*te_plugin_init_fn)(int abi, char *err, size_t errsize);

/* Loads the plugin at path (dlopen; a name without '/' is searched the dlopen way), checks its
 * tessera_plugin_abi_version against TE_PLUGIN_ABI_VERSION and calls its tessera_plugin_init.
 * Loading the same file again does nothing. Returns TE_OK, or with a message in err: TE_ERR_IO
 * (the file cannot be loaded: missing, not a shared library, undefined symbols; dlerror's
 * text), TE_ERR_NOT_FOUND (no tessera_plugin_init or tessera_plugin_abi_version symbol),
 * TE_ERR_UNSUPPORTED (another ABI version) or the status tessera_plugin_init returned (a
 * duplicate operator name is TE_ERR_ARG naming it). A plugin whose init ran stays loaded even
 * when it failed (operators it registered point into it). Thread-safe. */
int te_plugin_load(const char *path, char *err, size_t errsize);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_OPS_H */
