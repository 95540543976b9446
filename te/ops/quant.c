/*
 * te/ops/quant.c: matmuls whose inputs are narrower than their arithmetic: mixed precision
 * (f16/bf16 inputs, f32 accumulation and output) and quantized int8/uint8 ones as ONNX
 * defines them (MatMulInteger: int32 accumulation of zero-point-shifted products;
 * QLinearMatMul: the same, requantized with round half to even, a zero point and saturation).
 */
#include <math.h>

#include "te/ops/ops_internal.h"

/* Checks a 2-D matmul pair and returns m, k, n; false with an error otherwise. */
static bool mm_shapes(const op_site *s, te_tensor *A, te_tensor *B, int ta, int tb, int64_t *m,
                      int64_t *k, int64_t *n)
{
    if (!op__rank(s, A, "input 'A'", 2, ta ? "[k, m] (trans_a)" : "[m, k]") ||
        !op__rank(s, B, "input 'B'", 2, tb ? "[n, k] (trans_b)" : "[k, n]"))
        return false;
    const int64_t *as = te_tensor_shape(A), *bs = te_tensor_shape(B);
    int ak = ta ? 0 : 1, bk = tb ? 1 : 0;
    *m = as[1 - ak], *k = as[ak], *n = bs[1 - bk];
    if (bs[bk] != *k) {
        op__fail(s, TE_ERR_SHAPE,
                 "reduction extent k differs: input 'A' ('%s') axis %d has %lld but input 'B' "
                 "('%s') axis %d has %lld",
                 te_tensor_name(A), ak, (long long)*k, te_tensor_name(B), bk, (long long)bs[bk]);
        return false;
    }
    return true;
}

/* C[i, j] = sum_k f(op(A)[i, k]) g(op(B)[k, j]) with f, g: cast to acc, minus a zero point. */
static te_tensor *mm_cast(const op_site *s, te_tensor *A, te_tensor *B, int ta, int tb,
                          te_dtype acc, int32_t a_zero, int32_t b_zero, const char *stage,
                          const char *tag)
{
    te_ctx *ctx = s->ctx;
    int64_t m, k, n;
    if (!mm_shapes(s, A, B, ta, tb, &m, &k, &n))
        return NULL;
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *kk = te_reduce_axis(ctx, "k", k);
    te_expr *a = te_cast(ctx, acc, ta ? TE_AT(ctx, A, kk, i) : TE_AT(ctx, A, i, kk));
    te_expr *b = te_cast(ctx, acc, tb ? TE_AT(ctx, B, j, kk) : TE_AT(ctx, B, kk, j));
    if (a_zero)
        a = te_sub(ctx, a, te_const(ctx, acc, a_zero));
    if (b_zero)
        b = te_sub(ctx, b, te_const(ctx, acc, b_zero));
    te_expr *body = te_sum(ctx, te_mul(ctx, a, b), 1, &kk);
    return op__tag(ctx, te_compute(ctx, stage, 2, (te_expr *[]){i, j}, body), tag);
}

te_tensor *te_op_matmul_mixed(te_ctx *ctx, te_tensor *A, te_tensor *B, int trans_a, int trans_b,
                              te_dtype acc, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul_mixed", name ? name : "matmul_mixed"};
    if (!op__need(&s, A, "input 'A'") || !op__need(&s, B, "input 'B'"))
        return NULL;
    te_dtype da = te_tensor_dtype(A), db = te_tensor_dtype(B);
    if (da != db)
        return op__fail(&s, TE_ERR_DTYPE, "inputs 'A' (%s) and 'B' (%s) must share a dtype",
                        te_dtype_str(da), te_dtype_str(db));
    if (!te_dtype_is_float(da) || !te_dtype_is_float(acc) || te_dtype_is_half(acc) ||
        te_dtype_size(acc) < te_dtype_size(da))
        return op__fail(&s, TE_ERR_DTYPE,
                        "accumulation dtype %s for %s inputs: needs f32 or f64, at least as wide "
                        "as the inputs (for integer inputs use matmul_integer)",
                        te_dtype_str(acc), te_dtype_str(da));
    return mm_cast(&s, A, B, trans_a, trans_b, acc, 0, 0, s.name, "matmul");
}

/* Checks that A is i8 or u8 and its zero point in its range. */
static bool quant_input(const op_site *s, const te_tensor *A, const char *role, int32_t zero)
{
    if (!op__need(s, A, role))
        return false;
    te_dtype d = te_tensor_dtype(A);
    if (d != TE_I8 && d != TE_U8) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') is %s; quantized inputs are i8 or u8", role,
                 te_tensor_name(A), te_dtype_str(d));
        return false;
    }
    int32_t lo = d == TE_I8 ? -128 : 0, hi = d == TE_I8 ? 127 : 255;
    if (zero < lo || zero > hi) {
        op__fail(s, TE_ERR_ARG, "zero point %d of %s is outside the range [%d, %d] of %s",
                 (int)zero, role, (int)lo, (int)hi, te_dtype_str(d));
        return false;
    }
    return true;
}

te_tensor *te_op_matmul_integer(te_ctx *ctx, te_tensor *A, te_tensor *B, int32_t a_zero,
                                int32_t b_zero, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul_integer", name ? name : "matmul_integer"};
    if (!quant_input(&s, A, "input 'A'", a_zero) || !quant_input(&s, B, "input 'B'", b_zero))
        return NULL;
    return mm_cast(&s, A, B, 0, 0, TE_I32, a_zero, b_zero, s.name, "matmul_integer");
}

/* Round half to even of x in f32 arithmetic, for |x| < 2^22 (x + 0.5 exact): floor(x + 0.5),
 * one less where x was a tie and that is odd. */
static te_expr *round_half_even(te_ctx *ctx, te_expr *x)
{
    te_expr *t = te_add(ctx, x, te_f32(ctx, 0.5));
    te_expr *r = te_floor(ctx, t);
    te_expr *ri = te_cast(ctx, TE_I32, r);
    te_expr *odd =
        te_eq(ctx, te_floormod(ctx, ri, te_const(ctx, TE_I32, 2)), te_const(ctx, TE_I32, 1));
    te_expr *tie = te_and(ctx, te_eq(ctx, r, t), odd);
    return te_select(ctx, tie, te_sub(ctx, ri, te_const(ctx, TE_I32, 1)), ri);
}

te_tensor *te_op_qlinear_matmul(te_ctx *ctx, te_tensor *A, double a_scale, int32_t a_zero,
                                te_tensor *B, double b_scale, int32_t b_zero, double y_scale,
                                int32_t y_zero, te_dtype y_dtype, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "qlinear_matmul", name ? name : "qlinear_matmul"};
    if (!quant_input(&s, A, "input 'A'", a_zero) || !quant_input(&s, B, "input 'B'", b_zero))
        return NULL;
    if (y_dtype != TE_I8 && y_dtype != TE_U8)
        return op__fail(&s, TE_ERR_DTYPE, "output dtype %s: quantized outputs are i8 or u8",
                        te_dtype_str(y_dtype));
    int32_t lo = y_dtype == TE_I8 ? -128 : 0, hi = y_dtype == TE_I8 ? 127 : 255;
    if (y_zero < lo || y_zero > hi)
        return op__fail(&s, TE_ERR_ARG, "output zero point %d is outside the range [%d, %d] of %s",
                        (int)y_zero, (int)lo, (int)hi, te_dtype_str(y_dtype));
    if (!(a_scale > 0 && b_scale > 0 && y_scale > 0 && isfinite(a_scale) && isfinite(b_scale) &&
          isfinite(y_scale)))
        return op__fail(&s, TE_ERR_ARG, "scales must be positive and finite (a %g, b %g, y %g)",
                        a_scale, b_scale, y_scale);
    /* The multiplier as onnxruntime computes it: in float, (a_scale * b_scale) / y_scale. */
    float mult = (float)a_scale * (float)b_scale / (float)y_scale;
    if (!(mult > 0) || !isfinite(mult))
        return op__fail(&s, TE_ERR_ARG, "scale multiplier a * b / y = %g is not a positive float",
                        (double)mult);
    te_tensor *acc = mm_cast(&s, A, B, 0, 0, TE_I32, a_zero, b_zero,
                             op__stage_name(ctx, s.name, "acc"), "matmul_integer");
    if (!acc)
        return NULL;
    const int64_t *sh = te_tensor_shape(acc);
    te_expr *i = te_axis(ctx, "i", sh[0]), *j = te_axis(ctx, "j", sh[1]);
    te_expr *x = te_mul(ctx, te_cast(ctx, TE_F32, TE_AT(ctx, acc, i, j)), te_f32(ctx, mult));
    /* Values past the output range saturate anyway: clamp first so that x + 0.5 is exact. */
    x = te_min(ctx, te_max(ctx, x, te_f32(ctx, lo - y_zero - 1.0)), te_f32(ctx, hi - y_zero + 1.0));
    te_expr *q = te_add(ctx, round_half_even(ctx, x), te_const(ctx, TE_I32, y_zero));
    q = te_min(ctx, te_max(ctx, q, te_const(ctx, TE_I32, lo)), te_const(ctx, TE_I32, hi));
    return op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){i, j}, te_cast(ctx, y_dtype, q)),
                   "qlinear_matmul");
}
