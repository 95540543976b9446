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

/* Round half to even of x (f32), as an i32: the intrinsic rint, one instruction in vector code
 * (the float64 reference rounds the same values: every f32 is a double). */
static te_expr *round_half_even(te_ctx *ctx, te_expr *x)
{
    return te_cast(ctx, TE_I32, te_rint(ctx, x));
}

/* Checks a quantized output dtype and its zero point. */
static bool quant_output(const op_site *s, te_dtype to, int32_t zero)
{
    if (to != TE_I8 && to != TE_U8) {
        op__fail(s, TE_ERR_DTYPE, "output dtype %s: quantized outputs are i8 or u8",
                 te_dtype_str(to));
        return false;
    }
    int32_t lo = to == TE_I8 ? -128 : 0, hi = to == TE_I8 ? 127 : 255;
    if (zero < lo || zero > hi) {
        op__fail(s, TE_ERR_ARG, "output zero point %d is outside the range [%d, %d] of %s",
                 (int)zero, (int)lo, (int)hi, te_dtype_str(to));
        return false;
    }
    return true;
}

/* v rounded to f32 into *f when that is positive and finite, else false with an error. */
static bool positive_float(const op_site *s, double v, const char *what, float *f)
{
    *f = (float)v;
    if (*f > 0 && isfinite(*f))
        return true;
    op__fail(s, TE_ERR_ARG, "%s %g is not a positive finite float", what, v);
    return false;
}

/* The quantization parameters of one requantizing pass: a per-tensor multiplier (mult > 0)
 * or divisor (div), or a tensor S of them read along X's axis `axis` (S [C] or [1]; `divide`
 * says which), and a per-tensor zero point or a tensor Z of them (u8, i8 or i32) read alike. */
typedef struct qparam {
    float mult, div;
    te_tensor *S;
    bool divide;
    te_tensor *Z;
    int32_t zero;
    int axis;
} qparam;

/* T read at the element of X's axes ax that it goes with: T[0] for a one-element T, else
 * T[ax[axis]]. */
static te_expr *along(te_ctx *ctx, te_tensor *T, te_expr *const *ax, int axis)
{
    te_expr *i = te_tensor_shape(T)[0] == 1 ? te_int(ctx, 0) : ax[axis];
    return te_read(ctx, T, 1, &i);
}

/* Y = saturate(round_half_even(x) + zero) in `to` over every element of X, with x = f32(X) *
 * mult or f32(X) / div (QuantizeLinear divides, as onnxruntime does), both as q says. */
static te_tensor *requant_q(const op_site *s, te_tensor *X, const qparam *q, te_dtype to,
                            const char *tag)
{
    te_ctx *ctx = s->ctx;
    int nd = te_tensor_ndim(X);
    te_expr *ax[TE_MAX_DIMS];
    static const char *const ij[] = {"i", "j"}; /* a matmul's output axes keep their names */
    if (!op__axes(ctx, nd, te_tensor_shape(X), nd == 2 ? ij : NULL, ax))
        return NULL;
    te_expr *x = te_read(ctx, X, nd, ax);
    if (te_tensor_dtype(X) != TE_F32)
        x = te_cast(ctx, TE_F32, x);
    if (q->S) {
        te_expr *sv = along(ctx, q->S, ax, q->axis);
        x = q->divide ? te_div(ctx, x, sv) : te_mul(ctx, x, sv);
    } else
        x = q->mult > 0 ? te_mul(ctx, x, te_f32(ctx, q->mult))
                        : te_div(ctx, x, te_f32(ctx, q->div));
    int32_t lo = to == TE_I8 ? -128 : 0, hi = to == TE_I8 ? 127 : 255;
    te_expr *zi =
        q->Z ? te_cast(ctx, TE_I32, along(ctx, q->Z, ax, q->axis)) : te_const(ctx, TE_I32, q->zero);
    /* Values past the output range saturate anyway: clamp first so that x + 0.5 is exact. */
    if (q->Z) {
        te_expr *zf = te_cast(ctx, TE_F32, zi);
        x = te_min(ctx, te_max(ctx, x, te_sub(ctx, te_f32(ctx, lo - 1.0), zf)),
                   te_sub(ctx, te_f32(ctx, hi + 1.0), zf));
    } else
        x = te_min(ctx, te_max(ctx, x, te_f32(ctx, lo - q->zero - 1.0)),
                   te_f32(ctx, hi - q->zero + 1.0));
    te_expr *r = te_add(ctx, round_half_even(ctx, x), zi);
    r = te_min(ctx, te_max(ctx, r, te_const(ctx, TE_I32, lo)), te_const(ctx, TE_I32, hi));
    return op__tag(ctx, te_compute(ctx, s->name, nd, ax, te_cast(ctx, to, r)), tag);
}

/* requant_q with per-tensor parameters. */
static te_tensor *requant(const op_site *s, te_tensor *X, float mult, float div, int32_t zero,
                          te_dtype to, const char *tag)
{
    qparam q = {.mult = mult, .div = div, .zero = zero};
    return requant_q(s, X, &q, to, tag);
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
    if (!quant_output(&s, y_dtype, y_zero))
        return NULL;
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
    return requant(&s, acc, mult, 0, y_zero, y_dtype, "qlinear_matmul");
}

te_tensor *te_op_requantize(te_ctx *ctx, te_tensor *X, double mult, int32_t zero, te_dtype to,
                            const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "requantize", name ? name : "requantize"};
    if (!op__need(&s, X, "input 'X'") || !quant_output(&s, to, zero))
        return NULL;
    if (te_tensor_dtype(X) != TE_I32)
        return op__fail(&s, TE_ERR_DTYPE, "input 'X' ('%s') is %s; requantize takes i32",
                        te_tensor_name(X), te_dtype_str(te_tensor_dtype(X)));
    float m;
    if (!positive_float(&s, mult, "multiplier", &m))
        return NULL;
    return requant(&s, X, m, 0, zero, to, "requantize");
}

te_tensor *te_op_quantize_linear(te_ctx *ctx, te_tensor *X, double scale, int32_t zero, te_dtype to,
                                 const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "quantize_linear", name ? name : "quantize_linear"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") ||
        !quant_output(&s, to, zero))
        return NULL;
    float sc;
    if (!positive_float(&s, scale, "scale", &sc))
        return NULL;
    return requant(&s, X, 0, sc, zero, to, "quantize_linear");
}

/* Whether X's dtype is one dequantization takes (u8, i8, i32); false with an error otherwise. */
static bool dequant_dtype(const op_site *s, te_tensor *X)
{
    te_dtype d = te_tensor_dtype(X);
    if (d == TE_I8 || d == TE_U8 || d == TE_I32)
        return true;
    op__fail(s, TE_ERR_DTYPE, "input 'X' ('%s') is %s; dequantize takes u8, i8 or i32",
             te_tensor_name(X), te_dtype_str(d));
    return false;
}

te_tensor *te_op_dequantize_linear(te_ctx *ctx, te_tensor *X, double scale, int32_t zero,
                                   const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "dequantize_linear", name ? name : "dequantize_linear"};
    if (!op__need(&s, X, "input 'X'"))
        return NULL;
    te_dtype d = te_tensor_dtype(X);
    if (!dequant_dtype(&s, X))
        return NULL;
    if (d != TE_I32 && !quant_input(&s, X, "input 'X'", zero))
        return NULL;
    float sc;
    if (!positive_float(&s, scale, "scale", &sc))
        return NULL;
    int nd = te_tensor_ndim(X);
    te_expr *ax[TE_MAX_DIMS];
    if (!op__axes(ctx, nd, te_tensor_shape(X), NULL, ax))
        return NULL;
    /* As onnxruntime: the zero point subtracted in int32, the difference converted, scaled. */
    te_expr *v = te_cast(ctx, TE_I32, te_read(ctx, X, nd, ax));
    if (zero)
        v = te_sub(ctx, v, te_const(ctx, TE_I32, zero));
    te_expr *body = te_mul(ctx, te_cast(ctx, TE_F32, v), te_f32(ctx, sc));
    return op__tag(ctx, te_compute(ctx, s.name, nd, ax, body), "dequantize_linear");
}

/* ---- VNNI layout (the right operand of AMX / AVX-512 BF16 / VNNI dot products) ---------- */

te_tensor *te_op_pack_vnni(te_ctx *ctx, te_tensor *B, int group, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "pack_vnni", name ? name : "pack_vnni"};
    if (!op__need(&s, B, "input 'B'") || !op__rank(&s, B, "input 'B'", 2, "[k, n]"))
        return NULL;
    if (group < 1)
        return op__fail(&s, TE_ERR_ARG, "group %d: the VNNI group (k values per column) is >= 1",
                        group);
    const int64_t *bs = te_tensor_shape(B);
    int64_t k = bs[0], n = bs[1], ko = (k + group - 1) / group;
    te_expr *o = te_axis(ctx, "ko", ko), *j = te_axis(ctx, "n", n), *q = te_axis(ctx, "kk", group);
    te_expr *row = op__mad(ctx, o, group, q);
    te_expr *body = TE_AT(ctx, B, row, j);
    /* The last row group runs past k when group does not divide it: zeros there, the read
     * guarded so that nothing outside B is touched. */
    if (k % group)
        body = te_if_then_else(ctx, te_lt(ctx, row, te_int(ctx, k)), body,
                               op__c(ctx, te_tensor_dtype(B), 0));
    return op__tag(ctx, te_compute(ctx, s.name, 3, (te_expr *[]){o, j, q}, body), "pack_vnni");
}

te_tensor *te_op_pack_vnni_blocked(te_ctx *ctx, te_tensor *B, int group, int64_t nb,
                                   const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "pack_vnni_blocked", name ? name : "pack_vnni_blocked"};
    if (!op__need(&s, B, "input 'B'") || !op__rank(&s, B, "input 'B'", 2, "[k, n]"))
        return NULL;
    const int64_t *bs = te_tensor_shape(B);
    int64_t k = bs[0], n = bs[1], ko = (k + group - 1) / (group > 0 ? group : 1);
    if (group < 1)
        return op__fail(&s, TE_ERR_ARG, "group %d: the VNNI group (k values per column) is >= 1",
                        group);
    if (nb < 1 || n % nb)
        return op__fail(&s, TE_ERR_SHAPE,
                        "block of %lld columns: must be >= 1 and divide n = %lld of input 'B' "
                        "('%s')",
                        (long long)nb, (long long)n, te_tensor_name(B));
    te_expr *jb = te_axis(ctx, "jb", n / nb), *o = te_axis(ctx, "ko", ko);
    te_expr *j = te_axis(ctx, "n", nb), *q = te_axis(ctx, "kk", group);
    te_expr *row = op__mad(ctx, o, group, q);
    te_expr *body = TE_AT(ctx, B, row, op__mad(ctx, jb, nb, j));
    if (k % group)
        body = te_if_then_else(ctx, te_lt(ctx, row, te_int(ctx, k)), body,
                               op__c(ctx, te_tensor_dtype(B), 0));
    return op__tag(ctx, te_compute(ctx, s.name, 4, (te_expr *[]){jb, o, j, q}, body), "pack_vnni");
}

/* The dtype pairs the VNNI matmul takes: one float dtype accumulated in f32, or bytes in i32. */
static bool vnni_dtypes(const op_site *s, const te_tensor *A, const te_tensor *Bp, te_dtype acc)
{
    te_dtype da = te_tensor_dtype(A), db = te_tensor_dtype(Bp);
    bool fl = (da == TE_BF16 || da == TE_F16 || da == TE_F32) && db == da && acc == TE_F32;
    bool in = (da == TE_U8 || da == TE_I8) && (db == TE_U8 || db == TE_I8) && acc == TE_I32;
    if (fl || in)
        return true;
    op__fail(s, TE_ERR_DTYPE,
             "input 'A' ('%s') %s, packed 'Bp' ('%s') %s, accumulation %s: takes bf16, f16 or "
             "f32 (A and Bp alike) with f32 accumulation, or u8/i8 with i32",
             te_tensor_name(A), te_dtype_str(da), te_tensor_name(Bp), te_dtype_str(db),
             te_dtype_str(acc));
    return false;
}

te_tensor *te_op_matmul_vnni(te_ctx *ctx, te_tensor *A, te_tensor *Bp, te_dtype acc,
                             const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul_vnni", name ? name : "matmul_vnni"};
    if (!op__need(&s, A, "input 'A'") || !op__need(&s, Bp, "packed 'Bp'"))
        return NULL;
    bool blocked = te_tensor_ndim(Bp) == 4;
    if (!blocked && !op__rank(&s, Bp, "packed 'Bp'", 3,
                              "[k / g, n, g] (te_op_pack_vnni) or [n / nb, k / g, nb, g] "
                              "(te_op_pack_vnni_blocked)"))
        return NULL;
    int ra = te_tensor_ndim(A);
    if (ra < 2 || ra > TE_MAX_DIMS)
        return op__fail(&s, TE_ERR_SHAPE, "input 'A' ('%s') has rank %d; expected [..., m, k]",
                        te_tensor_name(A), ra);
    if (!vnni_dtypes(&s, A, Bp, acc))
        return NULL;
    const int64_t *as = te_tensor_shape(A), *ps = te_tensor_shape(Bp);
    int64_t m = as[ra - 2], k = as[ra - 1], ko = ps[0], n = ps[1], g = ps[2], nb = 0;
    if (blocked)
        nb = ps[2], ko = ps[1], g = ps[3], n = ps[0] * nb;
    if (k != ko * g)
        return op__fail(&s, TE_ERR_SHAPE,
                        "input 'A' ('%s') has k = %lld (axis %d) but packed 'Bp' ('%s') [%lld, "
                        "%lld, %lld] holds %lld x %lld = %lld rows of B; pad A's k with zeros "
                        "to %lld when the packer padded B",
                        te_tensor_name(A), (long long)k, ra - 1, te_tensor_name(Bp), (long long)ko,
                        (long long)n, (long long)g, (long long)ko, (long long)g,
                        (long long)(ko * g), (long long)(ko * g));
    te_expr *ax[TE_MAX_DIMS], *rd[TE_MAX_DIMS];
    for (int d = 0; d < ra - 2; d++) {
        char nm[16];
        snprintf(nm, sizeof nm, "b%d", d);
        ax[d] = te_axis(ctx, nm, as[d]);
    }
    te_expr *i = ax[ra - 2] = te_axis(ctx, "i", m), *j = ax[ra - 1] = te_axis(ctx, "j", n);
    te_expr *o = te_reduce_axis(ctx, "ko", ko), *q = te_reduce_axis(ctx, "kk", g);
    /* The body a tensorize matcher looks for: ko outer, kk inner, A[.., i, ko * g + kk]. */
    for (int d = 0; d < ra - 2; d++)
        rd[d] = ax[d];
    rd[ra - 2] = i;
    rd[ra - 1] = te_add(ctx, te_mul(ctx, o, te_int(ctx, g)), q);
    te_expr *a = te_read(ctx, A, ra, rd);
    te_expr *b = blocked ? TE_AT(ctx, Bp, te_floordiv(ctx, j, te_int(ctx, nb)), o,
                                 te_floormod(ctx, j, te_int(ctx, nb)), q)
                         : TE_AT(ctx, Bp, o, j, q);
    if (te_tensor_dtype(A) != acc)
        a = te_cast(ctx, acc, a);
    if (te_tensor_dtype(Bp) != acc)
        b = te_cast(ctx, acc, b);
    te_expr *body = te_sum(ctx, te_mul(ctx, a, b), 2, (te_expr *[]){o, q});
    return op__tag(ctx, te_compute(ctx, s.name, ra, ax, body), "matmul_vnni");
}

te_tensor *te_op_conv2d_vnni(te_ctx *ctx, te_tensor *X, te_tensor *Wp, int stride, te_dtype acc,
                             const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "conv2d_vnni", name ? name : "conv2d_vnni"};
    if (!op__need(&s, X, "input 'X'") || !op__need(&s, Wp, "packed 'Wp'") ||
        !op__rank(&s, X, "input 'X'", 4, "[n, h, w, c] (NHWC)"))
        return NULL;
    bool blocked = te_tensor_ndim(Wp) == 6;
    if (!blocked && !op__rank(&s, Wp, "packed 'Wp'", 5,
                              "[kh, kw, c / g, oc, g] or [oc / nb, kh, kw, c / g, nb, g]"))
        return NULL;
    if (stride < 1)
        return op__fail(&s, TE_ERR_ARG, "stride %d: must be >= 1", stride);
    if (!vnni_dtypes(&s, X, Wp, acc))
        return NULL;
    const int64_t *xs = te_tensor_shape(X), *ws = te_tensor_shape(Wp);
    int64_t kh, kw, ko, oc, g, nb = 0;
    if (blocked)
        nb = ws[4], kh = ws[1], kw = ws[2], ko = ws[3], g = ws[5], oc = ws[0] * nb;
    else
        kh = ws[0], kw = ws[1], ko = ws[2], oc = ws[3], g = ws[4];
    if (xs[3] != ko * g)
        return op__fail(&s, TE_ERR_SHAPE,
                        "input 'X' ('%s') has %lld channels but packed 'Wp' ('%s') holds %lld x "
                        "%lld; pad the channels with zeros when the packer padded them",
                        te_tensor_name(X), (long long)xs[3], te_tensor_name(Wp), (long long)ko,
                        (long long)g);
    if (xs[1] < kh || xs[2] < kw)
        return op__fail(&s, TE_ERR_SHAPE,
                        "input 'X' ('%s') is %lld x %lld, smaller than the %lld x %lld kernel "
                        "(pad it first: te_op_pad)",
                        te_tensor_name(X), (long long)xs[1], (long long)xs[2], (long long)kh,
                        (long long)kw);
    int64_t oh = (xs[1] - kh) / stride + 1, ow = (xs[2] - kw) / stride + 1;
    te_expr *b = te_axis(ctx, "b", xs[0]), *h = te_axis(ctx, "oh", oh), *w = te_axis(ctx, "ow", ow);
    te_expr *c = te_axis(ctx, "oc", oc);
    te_expr *ry = te_reduce_axis(ctx, "ry", kh), *rx = te_reduce_axis(ctx, "rx", kw);
    te_expr *o = te_reduce_axis(ctx, "ko", ko), *q = te_reduce_axis(ctx, "kk", g);
    te_expr *x = TE_AT(ctx, X, b, op__mad(ctx, h, stride, ry), op__mad(ctx, w, stride, rx),
                       op__mad(ctx, o, g, q));
    te_expr *wv = blocked ? te_read(ctx, Wp, 6,
                                    (te_expr *[]){te_floordiv(ctx, c, te_int(ctx, nb)), ry, rx, o,
                                                  te_floormod(ctx, c, te_int(ctx, nb)), q})
                          : te_read(ctx, Wp, 5, (te_expr *[]){ry, rx, o, c, q});
    if (te_tensor_dtype(X) != acc)
        x = te_cast(ctx, acc, x);
    if (te_tensor_dtype(Wp) != acc)
        wv = te_cast(ctx, acc, wv);
    te_expr *body = te_sum(ctx, te_mul(ctx, x, wv), 4, (te_expr *[]){ry, rx, o, q});
    return op__tag(ctx, te_compute(ctx, s.name, 4, (te_expr *[]){b, h, w, c}, body), "conv2d_vnni");
}

/* ---- Per-axis quantization: scales and zero points as tensors along one axis -------------- */

/* Checks that T (role) is a 1-D tensor of `dtype` (TE_DTYPE_COUNT: u8, i8 or i32) with one
 * element or as many as X's axis `axis`, which must exist; normalizes *axis. */
static bool axis_param(const op_site *s, const te_tensor *X, const te_tensor *T, const char *role,
                       te_dtype dtype, int *axis)
{
    int nd = te_tensor_ndim(X);
    if (*axis < -nd || *axis >= nd) {
        op__fail(s, TE_ERR_ARG, "axis %d is outside the %d axes of input 'X' ('%s')", *axis, nd,
                 te_tensor_name(X));
        return false;
    }
    if (*axis < 0)
        *axis += nd;
    if (!op__need(s, T, role))
        return false;
    te_dtype d = te_tensor_dtype(T);
    if (dtype == TE_DTYPE_COUNT ? (d != TE_U8 && d != TE_I8 && d != TE_I32) : d != dtype) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') is %s; expected %s", role, te_tensor_name(T),
                 te_dtype_str(d), dtype == TE_DTYPE_COUNT ? "u8, i8 or i32" : te_dtype_str(dtype));
        return false;
    }
    int64_t c = te_tensor_shape(X)[*axis];
    if (te_tensor_ndim(T) != 1 || (te_tensor_shape(T)[0] != 1 && te_tensor_shape(T)[0] != c)) {
        op__fail(s, TE_ERR_SHAPE,
                 "%s ('%s') must be 1-D with 1 or %lld elements (axis %d of input 'X' ('%s'))",
                 role, te_tensor_name(T), (long long)c, *axis, te_tensor_name(X));
        return false;
    }
    return true;
}

te_tensor *te_op_dequantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *S, te_tensor *Z, int axis,
                                 const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "dequantize_axis", name ? name : "dequantize_axis"};
    if (!op__need(&s, X, "input 'X'"))
        return NULL;
    te_dtype d = te_tensor_dtype(X);
    if (!dequant_dtype(&s, X))
        return NULL;
    if (!axis_param(&s, X, S, "scale 'S'", TE_F32, &axis) ||
        (Z && !axis_param(&s, X, Z, "zero point 'Z'", d, &axis)))
        return NULL;
    int nd = te_tensor_ndim(X);
    te_expr *ax[TE_MAX_DIMS];
    static const char *const ij[] = {"i", "j"};
    if (!op__axes(ctx, nd, te_tensor_shape(X), nd == 2 ? ij : NULL, ax))
        return NULL;
    te_expr *v = te_cast(ctx, TE_I32, te_read(ctx, X, nd, ax));
    if (Z)
        v = te_sub(ctx, v, te_cast(ctx, TE_I32, along(ctx, Z, ax, axis)));
    te_expr *body = te_mul(ctx, te_cast(ctx, TE_F32, v), along(ctx, S, ax, axis));
    return op__tag(ctx, te_compute(ctx, s.name, nd, ax, body), "dequantize_axis");
}

te_tensor *te_op_quantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *S, te_tensor *Z, int axis,
                               te_dtype to, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "quantize_axis", name ? name : "quantize_axis"};
    if (!op__need(&s, X, "input 'X'") || !op__float(&s, X, "input 'X'") || !quant_output(&s, to, 0))
        return NULL;
    if (!axis_param(&s, X, S, "scale 'S'", TE_F32, &axis) ||
        (Z && !axis_param(&s, X, Z, "zero point 'Z'", to, &axis)))
        return NULL;
    qparam q = {.S = S, .divide = true, .Z = Z, .axis = axis};
    return requant_q(&s, X, &q, to, "quantize_axis");
}

te_tensor *te_op_requantize_axis(te_ctx *ctx, te_tensor *X, te_tensor *M, int axis, int32_t zero,
                                 te_dtype to, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "requantize_axis", name ? name : "requantize_axis"};
    if (!op__need(&s, X, "input 'X'") || !quant_output(&s, to, zero))
        return NULL;
    if (te_tensor_dtype(X) != TE_I32)
        return op__fail(&s, TE_ERR_DTYPE, "input 'X' ('%s') is %s; requantize takes i32",
                        te_tensor_name(X), te_dtype_str(te_tensor_dtype(X)));
    if (!axis_param(&s, X, M, "multiplier 'M'", TE_F32, &axis))
        return NULL;
    qparam q = {.S = M, .divide = false, .zero = zero, .axis = axis};
    return requant_q(&s, X, &q, to, "requantize_axis");
}

te_tensor *te_op_matmul_integer_zp(te_ctx *ctx, te_tensor *A, te_tensor *B, te_tensor *Za,
                                   te_tensor *Zb, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "matmul_integer_zp", name ? name : "matmul_integer_zp"};
    int64_t m, k, n;
    if (!quant_input(&s, A, "input 'A'", 0) || !quant_input(&s, B, "input 'B'", 0) ||
        !mm_shapes(&s, A, B, 0, 0, &m, &k, &n))
        return NULL;
    /* Za goes with A's rows (axis 0 of [m, k]), Zb with B's columns (axis 1 of [k, n]). */
    int a0 = 0, b1 = 1;
    if ((Za && !axis_param(&s, A, Za, "zero point 'Za'", te_tensor_dtype(A), &a0)) ||
        (Zb && !axis_param(&s, B, Zb, "zero point 'Zb'", te_tensor_dtype(B), &b1)))
        return NULL;
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *kk = te_reduce_axis(ctx, "k", k);
    te_expr *a = te_cast(ctx, TE_I32, TE_AT(ctx, A, i, kk));
    te_expr *b = te_cast(ctx, TE_I32, TE_AT(ctx, B, kk, j));
    te_expr *ia[2] = {i, kk}, *jb[2] = {kk, j};
    if (Za)
        a = te_sub(ctx, a, te_cast(ctx, TE_I32, along(ctx, Za, ia, 0)));
    if (Zb)
        b = te_sub(ctx, b, te_cast(ctx, TE_I32, along(ctx, Zb, jb, 1)));
    te_expr *body = te_sum(ctx, te_mul(ctx, a, b), 1, &kk);
    return op__tag(ctx, te_compute(ctx, s.name, 2, (te_expr *[]){i, j}, body), "matmul_integer");
}

int te_op_dynamic_qparams(te_ctx *ctx, te_tensor *X, const char *name, te_tensor **scale,
                          te_tensor **zero)
{
    if (!ctx || !scale || !zero)
        return TE_ERR_ARG;
    *scale = *zero = NULL;
    op_site s = {ctx, "dynamic_qparams", name ? name : "dynamic_qparams"};
    if (!op__need(&s, X, "input 'X'"))
        return te_ctx_errcode(ctx);
    if (te_tensor_dtype(X) != TE_F32) {
        op__fail(&s, TE_ERR_DTYPE, "input 'X' ('%s') is %s; f32 expected", te_tensor_name(X),
                 te_dtype_str(te_tensor_dtype(X)));
        return te_ctx_errcode(ctx);
    }
    int nd = te_tensor_ndim(X), axes[TE_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        axes[d] = d;
    te_tensor *lo = te_op_reduce(ctx, X, TE_RMIN, nd, axes, 0, op__stage_name(ctx, s.name, "min"));
    te_tensor *hi =
        lo ? te_op_reduce(ctx, X, TE_RMAX, nd, axes, 0, op__stage_name(ctx, s.name, "max")) : NULL;
    if (!hi)
        return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    /* As onnxruntime's DynamicQuantizeLinear: the range widened to hold 0, scale (max - min) /
     * 255 in f32 (1 for an all-zero range), zero point rne(clamp(0 - min / scale, 0, 255)). */
    te_expr *o = te_axis(ctx, "o", 1);
    te_expr *z0 = te_int(ctx, 0);
    te_expr *mn =
        te_min(ctx, te_read(ctx, lo, te_tensor_ndim(lo), (te_expr *[]){z0}), te_f32(ctx, 0));
    te_expr *mx =
        te_max(ctx, te_read(ctx, hi, te_tensor_ndim(hi), (te_expr *[]){z0}), te_f32(ctx, 0));
    te_expr *sc = te_select(ctx, te_eq(ctx, mx, mn), te_f32(ctx, 1),
                            te_div(ctx, te_sub(ctx, mx, mn), te_f32(ctx, 255)));
    te_tensor *S = te_compute(ctx, op__stage_name(ctx, s.name, "scale"), 1, &o, sc);
    te_expr *o2 = te_axis(ctx, "o", 1);
    te_expr *sv = TE_AT(ctx, S, te_int(ctx, 0));
    te_expr *mn2 = te_min(ctx, te_read(ctx, lo, te_tensor_ndim(lo), (te_expr *[]){te_int(ctx, 0)}),
                          te_f32(ctx, 0));
    te_expr *iz = te_sub(ctx, te_f32(ctx, 0), te_div(ctx, mn2, sv));
    iz = te_min(ctx, te_max(ctx, iz, te_f32(ctx, 0)), te_f32(ctx, 255));
    te_tensor *Z = te_compute(ctx, s.name, 1, &o2, te_cast(ctx, TE_U8, round_half_even(ctx, iz)));
    if (!S || !Z)
        return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    *scale = op__tag(ctx, S, "dynamic_qparams");
    *zero = op__tag(ctx, Z, "dynamic_qparams");
    return TE_OK;
}
