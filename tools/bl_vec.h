/*
 * tools/bl_vec.h: the vectorized elementwise and row passes of the baselines (the unfused MLP
 * gate's silu * u, the unfused attention's softmax, the node-by-node graph executor's
 * activations, softmax and layer norm). A baseline that ran these as scalar loops around
 * library matmuls would flatter the fused kernels it is compared with, so each runs on the
 * widest vectors the CPU has (AVX-512, else AVX2 + FMA, else scalar C, chosen at run time)
 * and splits its work over the OpenMP threads in effect. Every function is total: n or rows
 * of 0 do nothing; the output may be the input (in place).
 */
#ifndef TESSERA_TOOLS_BL_VEC_H
#define TESSERA_TOOLS_BL_VEC_H

#include <stddef.h>
#include <stdint.h>

/* y[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u over n floats. */
void te_bl_silu_mul(float *y, const float *g, const float *u, size_t n);

/* The activations of te_bl_activation. */
typedef enum {
    TE_BL_RELU,      /* max(x, 0) */
    TE_BL_GELU,      /* x/2 (1 + erf(x / sqrt 2)); erf to 1.5e-7 absolute (Abramowitz-Stegun
                        7.1.26) */
    TE_BL_SIGMOID,   /* 1 / (1 + exp(-x)) */
    TE_BL_TANH,      /* tanh x = 1 - 2 / (exp(2x) + 1) */
    TE_BL_SILU,      /* x / (1 + exp(-x)) */
    TE_BL_GELU_TANH, /* x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    TE_BL_NACTS
} te_bl_act;

/* y[i] = act(x[i]) over n floats; an unknown act copies x. */
void te_bl_activation(te_bl_act act, const float *x, float *y, size_t n);

/* Softmax of each of `rows` rows of n floats, o[r] = softmax(scale x[r]) (scale > 0): row
 * maximum, exp(scale (x - max)), sum, scale by the reciprocal. A row that is entirely -inf
 * (fully masked) gives zeros, as te_op_attention defines it. */
void te_bl_softmax_rows(const float *x, float *o, int64_t rows, int64_t n, float scale);

/* Layer norm of each of `rows` rows of n floats: o = (x - mean) / sqrt(var + eps) * g + b,
 * with the biased variance; g and b (n floats each) may be NULL (1 and 0). */
void te_bl_layer_norm_rows(const float *x, float *o, int64_t rows, int64_t n, double eps,
                           const float *g, const float *b);

/* Copies n bytes with streaming (non-temporal) stores where the CPU has AVX-512 or AVX and both
 * pointers are aligned to the vector, memcpy otherwise (and for the tail). The copy bandwidth
 * the row operations and skinny products are compared with is the faster of this and memcpy:
 * glibc's memcpy streams only above a threshold set from the last-level cache size, which a
 * virtual machine may report as hundreds of MiB, and a cached copy then moves 1.5 times the
 * bytes (every destination line is read before it is written). _par splits the bytes over the
 * OpenMP threads in effect, in blocks of 64 KiB; te_bl_stream_copy runs in the calling thread. */
void te_bl_stream_copy(void *dst, const void *src, size_t n);
void te_bl_stream_copy_par(void *dst, const void *src, size_t n);

#endif
