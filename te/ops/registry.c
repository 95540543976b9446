/* The operator registry: KEY=VAL parsing, per-operator builders and canonical workload keys,
 * for the `tessera ops` CLI and the tuner. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/internal.h"
#include "te/ops/ops_internal.h"

/* ---- KEY=VAL parsing ----------------------------------------------------------------- */

static int parse_int(const char *z, int64_t *out)
{
    if (!*z)
        return 0;
    errno = 0;
    char *end;
    long long v = strtoll(z, &end, 10);
    if (*end || errno)
        return 0;
    *out = v;
    return 1;
}

int te_op_params_parse(te_ctx *ctx, const char *text, te_op_params *out)
{
    if (!ctx || !out)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    out->dtype = TE_F32;
    if (!text)
        return TE_OK;
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return TE_OK;
    for (bool last = false; !last;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        last = !end;
        char item[80];
        if (len >= sizeof item)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: item '%.20s...' is too long", p);
        memcpy(item, p, len);
        item[len] = 0;
        p = end ? end + 1 : p + len;
        /* Trim spaces. */
        char *a = item, *b = item + len;
        while (*a == ' ' || *a == '\t')
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            *--b = 0;
        if (!*a)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: empty item in '%s'", text);
        char *eq = strchr(a, '=');
        if (!eq)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: item '%s' is not KEY=VAL", a);
        *eq = 0;
        char *key = a, *val = eq + 1;
        for (char *q = eq; q > key && (q[-1] == ' ' || q[-1] == '\t');)
            *--q = 0;
        while (*val == ' ' || *val == '\t')
            val++;
        if (!*key || !*val)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: item '%s=%s' has an empty %s",
                                    key, val, *key ? "value" : "key");
        if (strlen(key) >= sizeof out->p[0].key || strlen(val) >= sizeof out->p[0].val)
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "parameters: key or value of '%s' is too "
                                    "long",
                                    key);
        if (strcmp(key, "dtype") == 0) {
            if (te_dtype_parse(val, &out->dtype) != TE_OK)
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "parameters: unknown dtype '%s' (use "
                                        "f32, f64, i32, ...)",
                                        val);
            continue;
        }
        for (int i = 0; i < out->n; i++)
            if (strcmp(out->p[i].key, key) == 0)
                return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: key '%s' is given twice",
                                        key);
        if (out->n == TE_OP_MAX_PARAMS)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "parameters: more than %d keys",
                                    TE_OP_MAX_PARAMS);
        te_op_param *e = &out->p[out->n++];
        strcpy(e->key, key);
        strcpy(e->val, val);
        e->is_int = parse_int(val, &e->ival);
    }
    return TE_OK;
}

/* ---- Resolving an operator's keys ------------------------------------------------------ */

typedef struct resolved {
    int64_t iv[TE_OP_MAX_PARAMS];
    const char *sv[TE_OP_MAX_PARAMS];
} resolved;

static bool word_in(const char *word, const char *choices)
{
    size_t n = strlen(word);
    for (const char *c = choices; c && *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, word, n) == 0)
            return true;
        c = bar ? bar + 1 : c + len;
    }
    return false;
}

static int resolve(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, resolved *r)
{
    if (!kv)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: parameters are NULL", op->name);
    for (int i = 0; i < kv->n; i++) {
        int k = 0;
        while (k < op->nkeys && strcmp(op->keys[k].name, kv->p[i].key) != 0)
            k++;
        if (k == op->nkeys) {
            char list[256] = "";
            for (int j = 0; j < op->nkeys; j++) {
                strncat(list, op->keys[j].name, sizeof list - strlen(list) - 1);
                if (j + 1 < op->nkeys)
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: unknown key '%s' (keys: %s)", op->name,
                                    kv->p[i].key, list);
        }
    }
    for (int k = 0; k < op->nkeys; k++) {
        const te_op_key *key = &op->keys[k];
        const char *val = key->dflt;
        int64_t iv = 0;
        int isint = val ? parse_int(val, &iv) : 0;
        for (int i = 0; i < kv->n; i++) {
            if (strcmp(kv->p[i].key, key->name) == 0) {
                val = kv->p[i].val;
                isint = kv->p[i].is_int;
                iv = kv->p[i].ival;
            }
        }
        if (!val)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: missing key '%s' (%s)", op->name,
                                    key->name, key->help);
        if (key->is_str) {
            if (!word_in(val, key->help))
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "%s: key '%s' has value '%s'; use one "
                                        "of %s",
                                        op->name, key->name, val, key->help);
        } else if (!isint) {
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "%s: key '%s' has value '%s', which is not "
                                    "an integer",
                                    op->name, key->name, val);
        } else if (key->is_bool && iv != 0 && iv != 1) {
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "%s: key '%s' is a flag and takes 0 or 1, not '%s'", op->name,
                                    key->name, val);
        }
        r->iv[k] = iv;
        r->sv[k] = val;
    }
    return TE_OK;
}

/* Resolved value of key `name` (the builders know their keys exist). */
static int64_t I(const te_op_info *op, const resolved *r, const char *name)
{
    for (int k = 0; k < op->nkeys; k++)
        if (strcmp(op->keys[k].name, name) == 0)
            return r->iv[k];
    return 0;
}

static const char *S(const te_op_info *op, const resolved *r, const char *name)
{
    for (int k = 0; k < op->nkeys; k++)
        if (strcmp(op->keys[k].name, name) == 0)
            return r->sv[k];
    return "";
}

/* Values that must fit the int32 parameter structs. */
static int check_i32(te_ctx *ctx, const te_op_info *op, const resolved *r)
{
    for (int k = 0; k < op->nkeys; k++)
        if (!op->keys[k].is_str && (r->iv[k] > INT32_MAX || r->iv[k] < INT32_MIN))
            return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: key '%s' value %lld is out of range",
                                    op->name, op->keys[k].name, (long long)r->iv[k]);
    return TE_OK;
}

#define PH(nm, ...)                                                                                \
    te_placeholder(ctx, nm, kv->dtype, TE__NARGS64(__VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define TE__NARGS64(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* Common prologue of a builder: find the op's table entry, resolve its keys. */
#define BUILD_BEGIN(opname)                                                                        \
    const te_op_info *op = te_op_lookup(opname);                                                   \
    resolved r;                                                                                    \
    if (!ctx || !op || !inputs || !n_in || !outputs || !n_out)                                     \
        return TE_ERR_ARG;                                                                         \
    *n_in = *n_out = 0;                                                                            \
    int rc_ = resolve(ctx, op, kv, &r);                                                            \
    if (!rc_)                                                                                      \
        rc_ = check_i32(ctx, op, &r);                                                              \
    if (rc_)                                                                                       \
        return rc_;

static int finish(te_ctx *ctx, te_tensor **inputs, int *n_in, te_tensor *const *ins, int nin,
                  te_tensor **outputs, int *n_out, te_tensor *const *outs, int nout)
{
    for (int i = 0; i < nin; i++)
        if (!ins[i])
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    for (int i = 0; i < nout; i++)
        if (!outs[i])
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    for (int i = 0; i < nin; i++)
        inputs[i] = ins[i];
    for (int i = 0; i < nout; i++)
        outputs[i] = outs[i];
    *n_in = nin;
    *n_out = nout;
    return TE_OK;
}

#define BUILD_ARGS                                                                                 \
    te_ctx *ctx, const te_op_params *kv, te_tensor **inputs, int *n_in, te_tensor **outputs,       \
        int *n_out
#define FINISH(ins, outs)                                                                          \
    finish(ctx, inputs, n_in, ins, (int)(sizeof ins / sizeof ins[0]), outputs, n_out, outs,        \
           (int)(sizeof outs / sizeof outs[0]))

/* A product's weight operand `nm`: a placeholder of its plain layout ([k, n], or [n, k] with
 * trans), or with key nb > 0 the view of weights packed once in column panels
 * (te_op_packed_view), whose placeholder "<nm>_panels" [n / nb, k, nb] is what the caller
 * passes (*arg). NULL with the error in ctx when nb does not divide n. */
static te_tensor *weight(te_ctx *ctx, const te_op_params *kv, const te_op_info *op,
                         const resolved *r, const char *nm, int64_t k, int64_t n, int trans,
                         te_tensor **arg)
{
    int64_t nb = I(op, r, "nb");
    if (nb < 0 || (nb && n % nb)) {
        te_ctx_set_error(ctx, TE_ERR_SHAPE,
                         "%s: nb = %lld does not divide n = %lld (nb: the width of the column "
                         "panels %s is packed in, a divisor of n; 0: %s in its plain layout)",
                         op->name, (long long)nb, (long long)n, nm, nm);
        return NULL;
    }
    if (nb)
        return te_op_packed_view(ctx, nm, NULL, kv->dtype, k, n, trans, nb, arg);
    return *arg = trans ? PH(nm, n, k) : PH(nm, k, n);
}

static int build_matmul(BUILD_ARGS)
{
    BUILD_BEGIN("matmul")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    int ta = I(op, &r, "trans_a") != 0, tb = I(op, &r, "trans_b") != 0;
    te_tensor *A = ta ? PH("A", k, m) : PH("A", m, k), *Barg = NULL;
    te_tensor *B = weight(ctx, kv, op, &r, "B", k, n, tb, &Barg);
    if (!B)
        return te_ctx_errcode(ctx);
    te_tensor *ins[] = {A, Barg}, *outs[] = {te_op_matmul(ctx, A, B, ta, tb, "matmul")};
    return FINISH(ins, outs);
}

/* Quantized matmuls (te/ops/quant.c): the inputs' dtypes are keys, not the params' dtype. */
static int build_matmul_integer(BUILD_ARGS)
{
    BUILD_BEGIN("matmul_integer")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    te_dtype da = strcmp(S(op, &r, "a_dtype"), "i8") ? TE_U8 : TE_I8;
    te_dtype db = strcmp(S(op, &r, "b_dtype"), "u8") ? TE_I8 : TE_U8;
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){m, k});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){k, n});
    te_tensor *ins[] = {A, B},
              *outs[] = {te_op_matmul_integer(ctx, A, B, (int32_t)I(op, &r, "a_zero"),
                                              (int32_t)I(op, &r, "b_zero"), "matmul_integer")};
    return FINISH(ins, outs);
}

static int build_qlinear_matmul(BUILD_ARGS)
{
    BUILD_BEGIN("qlinear_matmul")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    int64_t shift = I(op, &r, "shift");
    if (shift < 0 || shift > 30)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "qlinear_matmul: key 'shift' is %lld, not in "
                                "[0, 30]",
                                (long long)shift);
    te_dtype da = strcmp(S(op, &r, "a_dtype"), "i8") ? TE_U8 : TE_I8;
    te_dtype db = strcmp(S(op, &r, "b_dtype"), "u8") ? TE_I8 : TE_U8;
    te_dtype dy = strcmp(S(op, &r, "y_dtype"), "i8") ? TE_U8 : TE_I8;
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){m, k});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){k, n});
    te_tensor *ins[] = {A, B},
              *outs[] = {te_op_qlinear_matmul(ctx, A, 1.0, (int32_t)I(op, &r, "a_zero"), B, 1.0,
                                              (int32_t)I(op, &r, "b_zero"), ldexp(1.0, (int)shift),
                                              (int32_t)I(op, &r, "y_zero"), dy, "qlinear_matmul")};
    return FINISH(ins, outs);
}

/* Elementwise quantization (te/ops/quant.c) over X[m, n]; scales 2^-shift. */
static int build_quant_ew(const char *nm, BUILD_ARGS)
{
    BUILD_BEGIN(nm)
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), shift = I(op, &r, "shift");
    if (shift < 0 || shift > 30)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: key 'shift' is %lld, not in [0, 30]", nm,
                                (long long)shift);
    int32_t zero = (int32_t)I(op, &r, "zero");
    double sc = ldexp(1.0, -(int)shift);
    te_dtype to = strcmp(S(op, &r, "qtype"), "i8") ? TE_U8 : TE_I8;
    te_tensor *X, *Y;
    if (!strcmp(nm, "quantize_linear")) {
        X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){m, n});
        Y = te_op_quantize_linear(ctx, X, sc, zero, to, nm);
    } else if (!strcmp(nm, "requantize")) {
        X = te_placeholder(ctx, "X", TE_I32, 2, (int64_t[]){m, n});
        Y = te_op_requantize(ctx, X, sc, zero, to, nm);
    } else {
        X = te_placeholder(ctx, "X", to, 2, (int64_t[]){m, n});
        Y = te_op_dequantize_linear(ctx, X, sc, zero, nm);
    }
    te_tensor *ins[] = {X}, *outs[] = {Y};
    return FINISH(ins, outs);
}
#define QUANT_EW(op)                                                                               \
    static int build_##op(BUILD_ARGS)                                                              \
    {                                                                                              \
        return build_quant_ew(#op, ctx, kv, inputs, n_in, outputs, n_out);                         \
    }
QUANT_EW(quantize_linear)
QUANT_EW(dequantize_linear)
QUANT_EW(requantize)

/* Per-axis quantization (te/ops/quant.c) over X[m, n] along `axis`: the scales (multipliers)
 * are a small stage of their own, S[c] = 2^-shift for even c and 2^-(shift + 1) for odd c, so
 * that they differ along the axis and are powers of two (a division or product by them is exact
 * in f32 and in the float64 reference, which keeps the checker's integer comparison exact). The
 * zero points (key zero_point=1) are an input tensor of the quantized dtype along the axis. */
static te_tensor *axis_scales(te_ctx *ctx, int64_t c, int shift, const char *name)
{
    te_expr *i = te_axis(ctx, "c", c);
    te_expr *odd = te_eq(ctx, te_floormod(ctx, i, te_int(ctx, 2)), te_int(ctx, 1));
    te_expr *v =
        te_select(ctx, odd, te_f32(ctx, ldexp(1.0, -(shift + 1))), te_f32(ctx, ldexp(1.0, -shift)));
    return te_compute(ctx, name, 1, &i, v);
}

static int build_quant_axis(const char *nm, BUILD_ARGS)
{
    BUILD_BEGIN(nm)
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), shift = I(op, &r, "shift");
    int axis = (int)I(op, &r, "axis");
    if (shift < 0 || shift > 29)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: key 'shift' is %lld, not in [0, 29]", nm,
                                (long long)shift);
    if (axis < -2 || axis > 1)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: key 'axis' is %d, not in [-2, 1] (X is 2-D)",
                                nm, axis);
    const char *qt = S(op, &r, "qtype");
    te_dtype q = !strcmp(qt, "i8") ? TE_I8 : !strcmp(qt, "i32") ? TE_I32 : TE_U8;
    int64_t c = axis == 0 || axis == -2 ? m : n;
    bool has_z = !strcmp(nm, "requantize_axis") ? false : I(op, &r, "zero_point") != 0;
    if (q == TE_I32 && strcmp(nm, "dequantize_axis"))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "%s: qtype i32 is for dequantize_axis only", nm);
    te_tensor *Sc = axis_scales(ctx, c, (int)shift, "S");
    te_tensor *Z = has_z ? te_placeholder(ctx, "Z", q, 1, (int64_t[]){c}) : NULL;
    te_tensor *X, *Y;
    if (!strcmp(nm, "quantize_axis")) {
        X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){m, n});
        Y = te_op_quantize_axis(ctx, X, Sc, Z, axis, q, nm);
    } else if (!strcmp(nm, "requantize_axis")) {
        X = te_placeholder(ctx, "X", TE_I32, 2, (int64_t[]){m, n});
        Y = te_op_requantize_axis(ctx, X, Sc, axis, (int32_t)I(op, &r, "zero"), q, nm);
    } else {
        X = te_placeholder(ctx, "X", q, 2, (int64_t[]){m, n});
        Y = te_op_dequantize_axis(ctx, X, Sc, Z, axis, nm);
    }
    if (Z) {
        te_tensor *ins[] = {X, Z}, *outs[] = {Y};
        return FINISH(ins, outs);
    }
    te_tensor *ins[] = {X}, *outs[] = {Y};
    return FINISH(ins, outs);
}
#define QUANT_AXIS(op)                                                                             \
    static int build_##op(BUILD_ARGS)                                                              \
    {                                                                                              \
        return build_quant_axis(#op, ctx, kv, inputs, n_in, outputs, n_out);                       \
    }
QUANT_AXIS(quantize_axis)
QUANT_AXIS(dequantize_axis)
QUANT_AXIS(requantize_axis)

/* MatMulInteger with zero points as input tensors: za none | tensor ([1]) | row ([m]), zb none
 * | tensor ([1]) | column ([n]). */
static int build_matmul_integer_zp(BUILD_ARGS)
{
    BUILD_BEGIN("matmul_integer_zp")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    te_dtype da = strcmp(S(op, &r, "a_dtype"), "i8") ? TE_U8 : TE_I8;
    te_dtype db = strcmp(S(op, &r, "b_dtype"), "u8") ? TE_I8 : TE_U8;
    const char *za = S(op, &r, "za"), *zb = S(op, &r, "zb");
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){m, k});
    te_tensor *B = te_placeholder(ctx, "B", db, 2, (int64_t[]){k, n});
    te_tensor *Za = strcmp(za, "none")
                        ? te_placeholder(ctx, "Za", da, 1, (int64_t[]){strcmp(za, "row") ? 1 : m})
                        : NULL;
    te_tensor *Zb = strcmp(zb, "none") ? te_placeholder(ctx, "Zb", db, 1,
                                                        (int64_t[]){strcmp(zb, "column") ? 1 : n})
                                       : NULL;
    te_tensor *Y = te_op_matmul_integer_zp(ctx, A, B, Za, Zb, "matmul_integer_zp");
    te_tensor *all[4] = {A, B}, *outs[] = {Y};
    int nin = 2;
    if (Za)
        all[nin++] = Za;
    if (Zb)
        all[nin++] = Zb;
    return finish(ctx, inputs, n_in, all, nin, outputs, n_out, outs, 1);
}

/* DynamicQuantizeLinear of X[m, n]: the u8 tensor, its scale [1] and zero point [1]. */
static int build_dynamic_quantize(BUILD_ARGS)
{
    BUILD_BEGIN("dynamic_quantize")
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){I(op, &r, "m"), I(op, &r, "n")});
    te_tensor *sc = NULL, *zp = NULL;
    int rc = X ? te_op_dynamic_qparams(ctx, X, "y_zero_point", &sc, &zp) : TE_ERR_INTERNAL;
    if (rc)
        return rc;
    te_tensor *ins[] = {X},
              *outs[] = {te_op_quantize_axis(ctx, X, sc, zp, 0, TE_U8, "dynamic_quantize"), sc, zp};
    return FINISH(ins, outs);
}

/* VNNI packing and the matmul over it (te/ops/quant.c). */
static int build_pack_vnni(BUILD_ARGS)
{
    BUILD_BEGIN("pack_vnni")
    te_tensor *B = PH("B", I(op, &r, "k"), I(op, &r, "n"));
    te_tensor *ins[] = {B},
              *outs[] = {te_op_pack_vnni(ctx, B, (int)I(op, &r, "group"), "pack_vnni")};
    return FINISH(ins, outs);
}

static te_dtype vnni_dtype(const char *z)
{
    return !strcmp(z, "u8")     ? TE_U8
           : !strcmp(z, "i8")   ? TE_I8
           : !strcmp(z, "bf16") ? TE_BF16
           : !strcmp(z, "f16")  ? TE_F16
                                : TE_F32;
}

/* The keys a_dtype and b_dtype ("auto": i8 for byte inputs, else A's dtype). */
static void vnni_dtypes_of(const te_op_info *op, const resolved *r, te_dtype *da, te_dtype *db)
{
    *da = vnni_dtype(S(op, r, "a_dtype"));
    const char *zb = S(op, r, "b_dtype");
    *db = strcmp(zb, "auto") ? vnni_dtype(zb) : te_dtype_is_float(*da) ? *da : TE_I8;
}

static int build_matmul_vnni(BUILD_ARGS)
{
    BUILD_BEGIN("matmul_vnni")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k"), g = I(op, &r, "group");
    if (g < 1 || k % g)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "matmul_vnni: k = %lld is not a multiple of group = %lld (pad k "
                                "to one)",
                                (long long)k, (long long)g);
    te_dtype da, db;
    vnni_dtypes_of(op, &r, &da, &db);
    int64_t nb = I(op, &r, "nb");
    if (nb < 0 || (nb && n % nb))
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "matmul_vnni: nb = %lld does not divide n = %lld (0: unblocked "
                                "weights)",
                                (long long)nb, (long long)n);
    te_tensor *A = te_placeholder(ctx, "A", da, 2, (int64_t[]){m, k});
    te_tensor *Bp = nb ? te_placeholder(ctx, "Bp", db, 4, (int64_t[]){n / nb, k / g, nb, g})
                       : te_placeholder(ctx, "Bp", db, 3, (int64_t[]){k / g, n, g});
    te_tensor *ins[] = {A, Bp},
              *outs[] = {te_op_matmul_vnni(ctx, A, Bp, te_dtype_is_float(da) ? TE_F32 : TE_I32,
                                           "matmul_vnni")};
    return FINISH(ins, outs);
}

static int build_conv2d_vnni(BUILD_ARGS)
{
    BUILD_BEGIN("conv2d_vnni")
    int64_t n = I(op, &r, "n"), h = I(op, &r, "h"), w = I(op, &r, "w"), c = I(op, &r, "c");
    int64_t oc = I(op, &r, "oc"), kh = I(op, &r, "kh"), kw = I(op, &r, "kw");
    int64_t g = I(op, &r, "group"), st = I(op, &r, "stride");
    if (g < 1 || c % g)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "conv2d_vnni: c = %lld is not a multiple of group = %lld (pad the "
                                "channels to one)",
                                (long long)c, (long long)g);
    if (st < 1 || st > 64)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "conv2d_vnni: stride %lld is not in [1, 64]",
                                (long long)st);
    te_dtype da, db;
    vnni_dtypes_of(op, &r, &da, &db);
    te_tensor *X = te_placeholder(ctx, "X", da, 4, (int64_t[]){n, h, w, c});
    te_tensor *Wp = te_placeholder(ctx, "Wp", db, 5, (int64_t[]){kh, kw, c / g, oc, g});
    te_tensor *ins[] = {X, Wp},
              *outs[] = {te_op_conv2d_vnni(ctx, X, Wp, (int)st,
                                           te_dtype_is_float(da) ? TE_F32 : TE_I32, "conv2d_vnni")};
    return FINISH(ins, outs);
}

static int build_batch_matmul(BUILD_ARGS)
{
    BUILD_BEGIN("batch_matmul")
    int64_t b = I(op, &r, "b"), m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    int ta = I(op, &r, "trans_a") != 0, tb = I(op, &r, "trans_b") != 0;
    te_tensor *A = ta ? PH("A", b, k, m) : PH("A", b, m, k);
    te_tensor *B = tb ? PH("B", b, n, k) : PH("B", b, k, n);
    te_tensor *ins[] = {A, B}, *outs[] = {te_op_batch_matmul(ctx, A, B, ta, tb, "batch_matmul")};
    return FINISH(ins, outs);
}

static int build_dense_bias(BUILD_ARGS)
{
    BUILD_BEGIN("dense_bias")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    te_tensor *X = PH("X", m, k), *Warg = NULL, *W = weight(ctx, kv, op, &r, "W", k, n, 0, &Warg);
    if (!W)
        return te_ctx_errcode(ctx);
    te_tensor *b = PH("bias", n);
    te_tensor *ins[] = {X, Warg, b}, *outs[] = {te_op_dense_bias(ctx, X, W, b, "dense")};
    return FINISH(ins, outs);
}

static te_conv2d_params conv_params(const te_op_info *op, const resolved *r)
{
    te_conv2d_params p = te_conv2d_params_default();
    p.stride_h = p.stride_w = (int32_t)I(op, r, "stride");
    p.pad_h = p.pad_w = (int32_t)I(op, r, "pad");
    p.dilation_h = p.dilation_w = (int32_t)I(op, r, "dilation");
    p.groups = (int32_t)I(op, r, "groups");
    p.layout = strcmp(S(op, r, "layout"), "NHWC") == 0 ? TE_LAYOUT_NHWC : TE_LAYOUT_NCHW;
    return p;
}

/* Placeholders X and W of a (grouped) convolution. */
static void conv_inputs(te_ctx *ctx, const te_op_params *kv, const te_op_info *op,
                        const resolved *r, const te_conv2d_params *p, te_tensor **X, te_tensor **W)
{
    int64_t n = I(op, r, "n"), c = I(op, r, "c"), h = I(op, r, "h"), w = I(op, r, "w");
    int64_t oc = I(op, r, "oc"), kh = I(op, r, "kh"), kw = I(op, r, "kw");
    int64_t cg = p->groups > 0 ? c / p->groups : c;
    if (cg < 1)
        cg = 1;
    if (p->layout == TE_LAYOUT_NHWC) {
        *X = PH("X", n, h, w, c);
        *W = PH("W", kh, kw, cg, oc);
    } else {
        *X = PH("X", n, c, h, w);
        *W = PH("W", oc, cg, kh, kw);
    }
}

static int build_conv2d(BUILD_ARGS)
{
    BUILD_BEGIN("conv2d")
    te_conv2d_params p = conv_params(op, &r);
    te_tensor *X, *W;
    conv_inputs(ctx, kv, op, &r, &p, &X, &W);
    te_tensor *ins[] = {X, W}, *outs[] = {te_op_conv2d(ctx, X, W, &p, "conv2d")};
    return FINISH(ins, outs);
}

static int build_conv2d_bn_relu(BUILD_ARGS)
{
    BUILD_BEGIN("conv2d_bn_relu")
    te_conv2d_params p = conv_params(op, &r);
    te_tensor *X, *W;
    conv_inputs(ctx, kv, op, &r, &p, &X, &W);
    te_tensor *sc = PH("scale", I(op, &r, "oc")), *sh = PH("shift", I(op, &r, "oc"));
    te_tensor *ins[] = {X, W, sc, sh},
              *outs[] = {te_op_conv2d_bn_relu(ctx, X, W, sc, sh, &p, "conv2d_bn_relu")};
    return FINISH(ins, outs);
}

static int build_depthwise(BUILD_ARGS)
{
    BUILD_BEGIN("depthwise_conv2d")
    te_conv2d_params p = te_conv2d_params_default();
    p.stride_h = p.stride_w = (int32_t)I(op, &r, "stride");
    p.pad_h = p.pad_w = (int32_t)I(op, &r, "pad");
    p.dilation_h = p.dilation_w = (int32_t)I(op, &r, "dilation");
    int64_t c = I(op, &r, "c");
    te_tensor *X = PH("X", I(op, &r, "n"), c, I(op, &r, "h"), I(op, &r, "w"));
    te_tensor *W = PH("W", c, I(op, &r, "mult"), I(op, &r, "kh"), I(op, &r, "kw"));
    te_tensor *ins[] = {X, W}, *outs[] = {te_op_depthwise_conv2d(ctx, X, W, &p, "depthwise")};
    return FINISH(ins, outs);
}

static int build_pool(te_ctx *ctx, const te_op_params *kv, te_tensor **inputs, int *n_in,
                      te_tensor **outputs, int *n_out, te_pool_kind kind)
{
    BUILD_BEGIN(kind == TE_POOL_MAX ? "max_pool2d" : "avg_pool2d")
    te_pool2d_params p = {(int32_t)I(op, &r, "kh"),         (int32_t)I(op, &r, "kw"),
                          (int32_t)I(op, &r, "stride"),     (int32_t)I(op, &r, "stride"),
                          (int32_t)I(op, &r, "pad"),        (int32_t)I(op, &r, "pad"),
                          (int32_t)I(op, &r, "include_pad")};
    te_tensor *X = PH("X", I(op, &r, "n"), I(op, &r, "c"), I(op, &r, "h"), I(op, &r, "w"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_pool2d(ctx, X, kind, &p, op->name)};
    return FINISH(ins, outs);
}

static int build_max_pool(BUILD_ARGS)
{
    return build_pool(ctx, kv, inputs, n_in, outputs, n_out, TE_POOL_MAX);
}

static int build_avg_pool(BUILD_ARGS)
{
    return build_pool(ctx, kv, inputs, n_in, outputs, n_out, TE_POOL_AVG);
}

static int build_pad(BUILD_ARGS)
{
    BUILD_BEGIN("pad")
    int64_t pd = I(op, &r, "pad");
    te_tensor *X = PH("X", I(op, &r, "n"), I(op, &r, "c"), I(op, &r, "h"), I(op, &r, "w"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_pad(ctx, X, 4, (int64_t[]){0, 0, pd, pd},
                                                 (int64_t[]){0, 0, pd, pd}, 0.0, "pad")};
    return FINISH(ins, outs);
}

static int build_softmax(BUILD_ARGS)
{
    BUILD_BEGIN("softmax")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_softmax(ctx, X, -1, "softmax")};
    return FINISH(ins, outs);
}

static int build_layer_norm(BUILD_ARGS)
{
    BUILD_BEGIN("layer_norm")
    int64_t n = I(op, &r, "n");
    te_tensor *X = PH("X", I(op, &r, "m"), n), *g = PH("gamma", n), *b = PH("beta", n);
    te_tensor *ins[] = {X, g, b},
              *outs[] = {te_op_layer_norm(ctx, X, g, b, 1e-5, -1, "layer_norm")};
    return FINISH(ins, outs);
}

static int build_layer_norm_welford(BUILD_ARGS)
{
    BUILD_BEGIN("layer_norm_welford")
    int64_t n = I(op, &r, "n");
    te_tensor *X = PH("X", I(op, &r, "m"), n), *g = PH("gamma", n), *b = PH("beta", n);
    te_tensor *ins[] = {X, g, b},
              *outs[] = {te_op_layer_norm_welford(ctx, X, g, b, 1e-5, -1, "layer_norm_welford")};
    return FINISH(ins, outs);
}

static int build_softmax_online(BUILD_ARGS)
{
    BUILD_BEGIN("softmax_online")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_softmax_online(ctx, X, -1, "softmax_online")};
    return FINISH(ins, outs);
}

/* argmax/argmin over the rows: both outputs of the tuple stage, the index (i64) first. */
static int build_arg(te_ctx *ctx, const te_op_params *kv, te_tensor **inputs, int *n_in,
                     te_tensor **outputs, int *n_out, int is_max)
{
    BUILD_BEGIN(is_max ? "argmax" : "argmin")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *idx = te_op_arg_reduce(ctx, X, is_max, 1, 0, op->name);
    te_tensor *ins[] = {X}, *outs[] = {idx, idx ? te_tensor_tuple_member(idx, 0) : NULL};
    return FINISH(ins, outs);
}

static int build_argmax(BUILD_ARGS) { return build_arg(ctx, kv, inputs, n_in, outputs, n_out, 1); }
static int build_argmin(BUILD_ARGS) { return build_arg(ctx, kv, inputs, n_in, outputs, n_out, 0); }

static int build_rms_norm(BUILD_ARGS)
{
    BUILD_BEGIN("rms_norm")
    int64_t n = I(op, &r, "n");
    te_tensor *X = PH("X", I(op, &r, "m"), n), *g = PH("gamma", n);
    te_tensor *ins[] = {X, g}, *outs[] = {te_op_rms_norm(ctx, X, g, 1e-6, "rms_norm")};
    return FINISH(ins, outs);
}

#define BUILD_ACT(fn, opname, ACT)                                                                 \
    static int fn(BUILD_ARGS)                                                                      \
    {                                                                                              \
        BUILD_BEGIN(opname)                                                                        \
        te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));                                    \
        te_tensor *ins[] = {X}, *outs[] = {te_op_activation(ctx, X, ACT, opname)};                 \
        return FINISH(ins, outs);                                                                  \
    }
BUILD_ACT(build_relu, "relu", TE_ACT_RELU)
BUILD_ACT(build_gelu, "gelu", TE_ACT_GELU)
BUILD_ACT(build_gelu_tanh, "gelu_tanh", TE_ACT_GELU_TANH)
BUILD_ACT(build_silu, "silu", TE_ACT_SILU)
BUILD_ACT(build_sigmoid, "sigmoid", TE_ACT_SIGMOID)
BUILD_ACT(build_tanh, "tanh", TE_ACT_TANH)

#define BUILD_BIN(fn, opname, OP)                                                                  \
    static int fn(BUILD_ARGS)                                                                      \
    {                                                                                              \
        BUILD_BEGIN(opname)                                                                        \
        int64_t m = I(op, &r, "m"), n = I(op, &r, "n");                                            \
        te_tensor *A = PH("A", m, n);                                                              \
        te_tensor *B = I(op, &r, "bcast") ? PH("B", n) : PH("B", m, n);                            \
        te_tensor *ins[] = {A, B}, *outs[] = {te_op_binary(ctx, OP, A, B, opname)};                \
        return FINISH(ins, outs);                                                                  \
    }
BUILD_BIN(build_add, "add", TE_ADD)
BUILD_BIN(build_sub, "sub", TE_SUB)
BUILD_BIN(build_mul, "mul", TE_MUL)
BUILD_BIN(build_div, "div", TE_DIV)
BUILD_BIN(build_minimum, "minimum", TE_MIN)
BUILD_BIN(build_maximum, "maximum", TE_MAX)

static int build_transpose(BUILD_ARGS)
{
    BUILD_BEGIN("transpose")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_transpose(ctx, X, (int[]){1, 0}, "transpose")};
    return FINISH(ins, outs);
}

static int build_sum(BUILD_ARGS)
{
    BUILD_BEGIN("sum")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_reduce(ctx, X, TE_RSUM, 1, (int[]){1}, 0, "sum")};
    return FINISH(ins, outs);
}

static int build_matmul_bias_act(BUILD_ARGS)
{
    BUILD_BEGIN("matmul_bias_act")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    te_op_act act = TE_ACT_NONE;
    te_op_act_parse(S(op, &r, "act"), &act);
    te_tensor *X = PH("X", m, k), *Warg = NULL, *W = weight(ctx, kv, op, &r, "W", k, n, 0, &Warg);
    if (!W)
        return te_ctx_errcode(ctx);
    te_tensor *b = PH("bias", n);
    te_tensor *ins[] = {X, Warg, b},
              *outs[] = {te_op_matmul_bias_act(ctx, X, W, b, act, "matmul_bias_act")};
    return FINISH(ins, outs);
}

static int build_mlp_gate(BUILD_ARGS)
{
    BUILD_BEGIN("mlp_gate")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    int tb = I(op, &r, "trans_b") != 0;
    te_tensor *X = PH("X", m, k), *W1arg = NULL, *W3arg = NULL;
    te_tensor *W1 = weight(ctx, kv, op, &r, "W1", k, n, tb, &W1arg),
              *W3 = W1 ? weight(ctx, kv, op, &r, "W3", k, n, tb, &W3arg) : NULL;
    if (!W3)
        return te_ctx_errcode(ctx);
    te_tensor *ins[] = {X, W1arg, W3arg},
              *outs[] = {te_op_mlp_gate_tb(ctx, X, W1, W3, tb, "mlp_gate")};
    return FINISH(ins, outs);
}

static int build_qkv(BUILD_ARGS)
{
    BUILD_BEGIN("qkv_projection")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n"), k = I(op, &r, "k");
    te_tensor *X = PH("X", m, k), *Wq = PH("Wq", k, n), *Wk = PH("Wk", k, n), *Wv = PH("Wv", k, n);
    te_tensor *outs[3] = {NULL, NULL, NULL};
    if (X && Wq && Wk && Wv) {
        int rc = te_op_qkv_projection(ctx, X, Wq, Wk, Wv, outs, "qkv");
        if (rc)
            return rc;
    }
    te_tensor *ins[] = {X, Wq, Wk, Wv};
    return FINISH(ins, outs);
}

/* ---- Index operators and more reductions ------------------------------------------------- */

static int build_concat(BUILD_ARGS)
{
    BUILD_BEGIN("concat")
    int64_t m = I(op, &r, "m");
    te_tensor *A = PH("A", m, I(op, &r, "n")), *B = PH("B", m, I(op, &r, "k"));
    te_tensor *ins[] = {A, B}, *outs[] = {te_op_concat(ctx, 2, (te_tensor *[]){A, B}, 1, "concat")};
    return FINISH(ins, outs);
}

static int build_split(BUILD_ARGS)
{
    BUILD_BEGIN("split")
    int64_t parts = I(op, &r, "parts");
    if (parts < 1 || parts > TE_OP_MAX_IO)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "split: key 'parts' is %lld; use 1 to %d",
                                (long long)parts, TE_OP_MAX_IO);
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *o[TE_OP_MAX_IO] = {0};
    int rc = X ? te_op_split(ctx, X, 1, (int)parts, NULL, o, "split") : te_ctx_errcode(ctx);
    if (rc)
        return rc;
    return finish(ctx, inputs, n_in, ins, 1, outputs, n_out, o, (int)parts);
}

static int build_slice(BUILD_ARGS)
{
    BUILD_BEGIN("slice")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    int axis = 1;
    int64_t b = I(op, &r, "start"), e = I(op, &r, "end"), st = I(op, &r, "step");
    te_tensor *ins[] = {X}, *outs[] = {te_op_slice(ctx, X, 1, &axis, &b, &e, &st, "slice")};
    return FINISH(ins, outs);
}

static int build_gather(BUILD_ARGS)
{
    BUILD_BEGIN("gather")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *idx = te_placeholder(ctx, "I", TE_I32, 1, (int64_t[]){I(op, &r, "k")});
    te_tensor *ins[] = {X, idx}, *outs[] = {te_op_gather(ctx, X, idx, 0, "gather")};
    return FINISH(ins, outs);
}

static int build_where(BUILD_ARGS)
{
    BUILD_BEGIN("where")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n");
    te_tensor *C = te_placeholder(ctx, "C", TE_U8, 2, (int64_t[]){m, n});
    te_tensor *X = PH("X", m, n), *Y = PH("Y", n);
    te_tensor *ins[] = {C, X, Y}, *outs[] = {te_op_where(ctx, C, X, Y, "where")};
    return FINISH(ins, outs);
}

static int build_expand(BUILD_ARGS)
{
    BUILD_BEGIN("expand")
    int64_t m = I(op, &r, "m"), n = I(op, &r, "n");
    te_tensor *X = PH("X", 1, n);
    te_tensor *ins[] = {X}, *outs[] = {te_op_expand(ctx, X, 2, (int64_t[]){m, n}, "expand")};
    return FINISH(ins, outs);
}

static int build_log_softmax(BUILD_ARGS)
{
    BUILD_BEGIN("log_softmax")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_log_softmax(ctx, X, -1, "log_softmax")};
    return FINISH(ins, outs);
}

static int build_reduce_max(BUILD_ARGS)
{
    BUILD_BEGIN("reduce_max")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X},
              *outs[] = {te_op_reduce(ctx, X, TE_RMAX, 1, (int[]){1}, 0, "reduce_max")};
    return FINISH(ins, outs);
}

static int build_reduce_l2(BUILD_ARGS)
{
    BUILD_BEGIN("reduce_l2")
    te_tensor *X = PH("X", I(op, &r, "m"), I(op, &r, "n"));
    te_tensor *ins[] = {X}, *outs[] = {te_op_reduce_l2(ctx, X, 1, (int[]){1}, 0, "reduce_l2")};
    return FINISH(ins, outs);
}

static int build_attention(BUILD_ARGS)
{
    BUILD_BEGIN("attention")
    int64_t b = I(op, &r, "batch"), h = I(op, &r, "heads"), lq = I(op, &r, "lq");
    int64_t lk = I(op, &r, "lk"), dh = I(op, &r, "dh");
    const char *mk = S(op, &r, "mask");
    te_attention_params p = te_attention_params_default();
    p.form = !strcmp(S(op, &r, "form"), "twopass") ? TE_ATTN_TWO_PASS : TE_ATTN_ONE_PASS;
    p.block = (int32_t)I(op, &r, "block");
    p.mask = !strcmp(mk, "causal")     ? TE_ATTN_MASK_CAUSAL
             : !strcmp(mk, "explicit") ? TE_ATTN_MASK_EXPLICIT
                                       : TE_ATTN_MASK_NONE;
    te_tensor *Q = PH("Q", b, h, lq, dh), *K = PH("K", b, h, lk, dh), *V = PH("V", b, h, lk, dh);
    if (p.mask == TE_ATTN_MASK_EXPLICIT) {
        te_tensor *M = PH("mask", lq, lk);
        te_tensor *ins[] = {Q, K, V, M},
                  *outs[] = {te_op_attention(ctx, Q, K, V, M, &p, "attention")};
        return FINISH(ins, outs);
    }
    te_tensor *ins[] = {Q, K, V}, *outs[] = {te_op_attention(ctx, Q, K, V, NULL, &p, "attention")};
    return FINISH(ins, outs);
}

/* ---- The table ------------------------------------------------------------------------ */

#define K_REQ(nm, help)                                                                            \
    {                                                                                              \
        nm, NULL, 0, help, 0                                                                       \
    }
#define K_OPT(nm, dflt, help)                                                                      \
    {                                                                                              \
        nm, dflt, 0, help, 0                                                                       \
    }
/* A flag: an integer key that takes only 0 or 1. */
#define K_BOOL(nm, dflt, help)                                                                     \
    {                                                                                              \
        nm, dflt, 0, help, 1                                                                       \
    }
#define K_STR(nm, dflt, choices)                                                                   \
    {                                                                                              \
        nm, dflt, 1, choices, 0                                                                    \
    }

/* The products' weight layout (weight() above). */
#define K_NB                                                                                       \
    K_OPT("nb", "0",                                                                               \
          "weights packed once in column panels of nb (a divisor of n): pass <W>_panels [n/nb, "   \
          "k, nb] (te_op_pack_panels); 0: plain layout")

static const te_op_key keys_matmul[] = {K_REQ("m", "rows of C"),
                                        K_REQ("n", "columns of C"),
                                        K_REQ("k", "reduction extent"),
                                        K_BOOL("trans_a", "0", "1: A is [k, m]"),
                                        K_BOOL("trans_b", "0", "1: B is [n, k]"),
                                        K_NB};
static const te_op_key keys_matmul_integer[] = {K_REQ("m", "rows of Y"),
                                                K_REQ("n", "columns of Y"),
                                                K_REQ("k", "reduction extent"),
                                                K_STR("a_dtype", "u8", "u8|i8"),
                                                K_STR("b_dtype", "i8", "i8|u8"),
                                                K_OPT("a_zero", "0", "zero point of A"),
                                                K_OPT("b_zero", "0", "zero point of B")};
static const te_op_key keys_qlinear_matmul[] = {
    K_REQ("m", "rows of Y"),
    K_REQ("n", "columns of Y"),
    K_REQ("k", "reduction extent"),
    K_STR("a_dtype", "u8", "u8|i8"),
    K_STR("b_dtype", "i8", "i8|u8"),
    K_STR("y_dtype", "u8", "u8|i8"),
    K_OPT("a_zero", "0", "zero point of A"),
    K_OPT("b_zero", "0", "zero point of B"),
    K_OPT("y_zero", "0", "zero point of Y"),
    K_OPT("shift", "8", "requantization multiplier 2^-shift (scales 1, 1, 2^shift)")};
static const te_op_key keys_quant_ew[] = {
    K_REQ("m", "rows of X"), K_REQ("n", "columns of X"), K_STR("qtype", "u8", "u8|i8"),
    K_OPT("zero", "0", "zero point"), K_OPT("shift", "4", "scale (multiplier) 2^-shift")};
static const te_op_key keys_quant_axis[] = {
    K_REQ("m", "rows of X"),
    K_REQ("n", "columns of X"),
    K_OPT("axis", "1", "axis of the parameters (0: rows, 1 or -1: columns)"),
    K_STR("qtype", "u8", "u8|i8|i32"),
    K_BOOL("zero_point", "1", "1: zero points Z [extent of axis] as an input"),
    K_OPT("shift", "4", "scales 2^-shift (even indices), 2^-(shift + 1) (odd)")};
static const te_op_key keys_requant_axis[] = {
    K_REQ("m", "rows of X"),
    K_REQ("n", "columns of X"),
    K_OPT("axis", "1", "axis of the multipliers (0: rows, 1 or -1: columns)"),
    K_STR("qtype", "u8", "u8|i8"),
    K_OPT("zero", "0", "zero point of Y"),
    K_OPT("shift", "8", "multipliers 2^-shift (even indices), 2^-(shift + 1) (odd)")};
static const te_op_key keys_matmul_integer_zp[] = {K_REQ("m", "rows of Y"),
                                                   K_REQ("n", "columns of Y"),
                                                   K_REQ("k", "reduction extent"),
                                                   K_STR("a_dtype", "u8", "u8|i8"),
                                                   K_STR("b_dtype", "i8", "i8|u8"),
                                                   K_STR("za", "tensor", "none|tensor|row"),
                                                   K_STR("zb", "column", "none|tensor|column")};
static const te_op_key keys_pack_vnni[] = {
    K_REQ("k", "rows of B"), K_REQ("n", "columns of B"),
    K_OPT("group", "4", "k values per group (2 for bf16, 4 for int8)")};
static const te_op_key keys_matmul_vnni[] = {
    K_REQ("m", "rows of C"),
    K_REQ("n", "columns of C"),
    K_REQ("k", "reduction extent (a multiple of group)"),
    K_OPT(
        "group", "4",
        "VNNI group g: Bp is [k / g, n, g] (the matrix instructions: 2 for bf16/f16, 4 for u8/i8)"),
    K_STR("a_dtype", "u8", "u8|i8|bf16|f16|f32"),
    K_STR("b_dtype", "auto", "auto|i8|u8|bf16|f16|f32"),
    K_OPT("nb", "0",
          "weights in column blocks of nb: Bp is [n / nb, k / g, nb, g] (te_op_pack_vnni_blocked; "
          "nb = the tile's width keeps a tile's rows nb * g apart); 0: [k / g, n, g]")};
static const te_op_key keys_conv2d_vnni[] = {
    K_REQ("n", "batch"),
    K_REQ("h", "input rows (padded)"),
    K_REQ("w", "input columns (padded)"),
    K_REQ("c", "input channels (a multiple of group)"),
    K_REQ("oc", "output channels"),
    K_OPT("kh", "3", "kernel rows"),
    K_OPT("kw", "3", "kernel columns"),
    K_OPT("stride", "1", "stride of both spatial axes"),
    K_OPT("group", "2", "VNNI group g: Wp is [kh, kw, c / g, oc, g]"),
    K_STR("a_dtype", "bf16", "u8|i8|bf16|f16|f32"),
    K_STR("b_dtype", "auto", "auto|i8|u8|bf16|f16|f32")};
static const te_op_key keys_batch_matmul[] = {K_REQ("b", "batch"),
                                              K_REQ("m", "rows of C"),
                                              K_REQ("n", "columns of C"),
                                              K_REQ("k", "reduction extent"),
                                              K_BOOL("trans_a", "0", "1: A is [b, k, m]"),
                                              K_BOOL("trans_b", "0", "1: B is [b, n, k]")};
static const te_op_key keys_mnk[] = {K_REQ("m", "rows"), K_REQ("n", "output features"),
                                     K_REQ("k", "input features")};
static const te_op_key keys_dense[] = {K_REQ("m", "rows"), K_REQ("n", "output features"),
                                       K_REQ("k", "input features"), K_NB};
static const te_op_key keys_mlp_gate[] = {
    K_REQ("m", "rows"), K_REQ("n", "output features"), K_REQ("k", "input features"),
    K_BOOL("trans_b", "0", "1: W1 and W3 are [n, k] ([out][in])"), K_NB};
static const te_op_key keys_conv[] = {K_REQ("n", "batch"),
                                      K_REQ("c", "input channels"),
                                      K_REQ("h", "input height"),
                                      K_REQ("w", "input width"),
                                      K_REQ("oc", "output channels"),
                                      K_REQ("kh", "kernel height"),
                                      K_REQ("kw", "kernel width"),
                                      K_OPT("stride", "1", "stride (both axes)"),
                                      K_OPT("pad", "0", "padding (all sides)"),
                                      K_OPT("dilation", "1", "dilation (both axes)"),
                                      K_OPT("groups", "1", "channel groups"),
                                      K_STR("layout", "NCHW", "NCHW|NHWC")};
static const te_op_key keys_depthwise[] = {K_REQ("n", "batch"),
                                           K_REQ("c", "channels"),
                                           K_REQ("h", "input height"),
                                           K_REQ("w", "input width"),
                                           K_OPT("mult", "1", "channel multiplier"),
                                           K_REQ("kh", "kernel height"),
                                           K_REQ("kw", "kernel width"),
                                           K_OPT("stride", "1", "stride (both axes)"),
                                           K_OPT("pad", "0", "padding (all sides)"),
                                           K_OPT("dilation", "1", "dilation (both axes)")};
static const te_op_key keys_max_pool[] = {K_REQ("n", "batch"),
                                          K_REQ("c", "channels"),
                                          K_REQ("h", "input height"),
                                          K_REQ("w", "input width"),
                                          K_REQ("kh", "window height"),
                                          K_REQ("kw", "window width"),
                                          K_OPT("stride", "1", "stride (both axes)"),
                                          K_OPT("pad", "0", "padding (all sides)")};
static const te_op_key keys_avg_pool[] = {
    K_REQ("n", "batch"),
    K_REQ("c", "channels"),
    K_REQ("h", "input height"),
    K_REQ("w", "input width"),
    K_REQ("kh", "window height"),
    K_REQ("kw", "window width"),
    K_OPT("stride", "1", "stride (both axes)"),
    K_OPT("pad", "0", "padding (all sides)"),
    K_BOOL("include_pad", "0", "1: divide by the full window size")};
static const te_op_key keys_pad[] = {K_REQ("n", "batch"), K_REQ("c", "channels"),
                                     K_REQ("h", "height"), K_REQ("w", "width"),
                                     K_REQ("pad", "zero padding of h and w (all sides)")};
static const te_op_key keys_mn[] = {K_REQ("m", "rows"), K_REQ("n", "columns")};
static const te_op_key keys_bin[] = {K_REQ("m", "rows"), K_REQ("n", "columns"),
                                     K_BOOL("bcast", "0", "1: B is [n], broadcast over rows")};
static const te_op_key keys_mba[] = {
    K_REQ("m", "rows"), K_REQ("n", "output features"), K_REQ("k", "input features"),
    K_STR("act", "relu", "none|relu|gelu|gelu_tanh|silu|sigmoid|tanh"), K_NB};

static const te_op_key keys_concat[] = {K_REQ("m", "rows"), K_REQ("n", "columns of A"),
                                        K_REQ("k", "columns of B")};
static const te_op_key keys_split[] = {K_REQ("m", "rows"), K_REQ("n", "columns"),
                                       K_OPT("parts", "2", "outputs (columns split evenly)")};
static const te_op_key keys_slice[] = {K_REQ("m", "rows"), K_REQ("n", "columns"),
                                       K_OPT("start", "0", "first column (negative: from the end)"),
                                       K_OPT("end", "1000000000", "end column (clamped)"),
                                       K_OPT("step", "1", "column step (negative: backwards)")};
static const te_op_key keys_gather[] = {K_REQ("m", "rows of the table"), K_REQ("n", "columns"),
                                        K_REQ("k", "number of row indices")};
static const te_op_key keys_attention[] = {K_OPT("batch", "1", "batch"),
                                           K_OPT("heads", "1", "heads"),
                                           K_REQ("lq", "query length"),
                                           K_REQ("lk", "key length"),
                                           K_REQ("dh", "head dimension"),
                                           K_STR("mask", "none", "none|causal|explicit"),
                                           K_STR("form", "onepass", "onepass|twopass"),
                                           K_OPT("block", "0", "key block (one-pass; 0: auto)")};

#define NK(a) ((int)(sizeof a / sizeof a[0]))

/* Library entries leave the fields of registered operators (def, attrs, ...) zero. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const te_op_info op_table[] = {
    {"matmul", "C[m, n] = op(A) op(B), optional transposes", NK(keys_matmul), keys_matmul,
     build_matmul},
    {"batch_matmul", "C[b, m, n] = op(A[b]) op(B[b])", NK(keys_batch_matmul), keys_batch_matmul,
     build_batch_matmul},
    {"dense_bias", "Y[m, n] = X[m, k] W[k, n] + bias[n]", NK(keys_dense), keys_dense,
     build_dense_bias},
    {"conv2d", "2-D convolution, NCHW or NHWC, with stride/pad/dilation/groups", NK(keys_conv),
     keys_conv, build_conv2d},
    {"depthwise_conv2d", "depthwise 2-D convolution (NCHW), W[c, mult, kh, kw]", NK(keys_depthwise),
     keys_depthwise, build_depthwise},
    {"max_pool2d", "2-D max pooling (NCHW)", NK(keys_max_pool), keys_max_pool, build_max_pool},
    {"avg_pool2d", "2-D average pooling (NCHW)", NK(keys_avg_pool), keys_avg_pool, build_avg_pool},
    {"pad", "zero padding of the spatial axes of an NCHW tensor", NK(keys_pad), keys_pad,
     build_pad},
    {"softmax", "numerically stable softmax over the rows of X[m, n]", NK(keys_mn), keys_mn,
     build_softmax},
    {"layer_norm", "layer normalization over the rows of X[m, n] (eps 1e-5)", NK(keys_mn), keys_mn,
     build_layer_norm},
    {"rms_norm", "RMS normalization over the rows of X[m, n] (eps 1e-6)", NK(keys_mn), keys_mn,
     build_rms_norm},
    {"layer_norm_welford", "layer normalization, one-pass Welford statistics (eps 1e-5)",
     NK(keys_mn), keys_mn, build_layer_norm_welford},
    {"softmax_online", "softmax over the rows of X[m, n], online max+sum in one pass", NK(keys_mn),
     keys_mn, build_softmax_online},
    {"argmax", "index (i64) and value of the row maxima of X[m, n], ties to the smallest index",
     NK(keys_mn), keys_mn, build_argmax},
    {"argmin", "index (i64) and value of the row minima of X[m, n], ties to the smallest index",
     NK(keys_mn), keys_mn, build_argmin},
    {"relu", "max(x, 0) over X[m, n]", NK(keys_mn), keys_mn, build_relu},
    {"gelu", "GELU, erf form, over X[m, n]", NK(keys_mn), keys_mn, build_gelu},
    {"gelu_tanh", "GELU, tanh approximation, over X[m, n]", NK(keys_mn), keys_mn, build_gelu_tanh},
    {"silu", "x * sigmoid(x) over X[m, n]", NK(keys_mn), keys_mn, build_silu},
    {"sigmoid", "1 / (1 + exp(-x)) over X[m, n]", NK(keys_mn), keys_mn, build_sigmoid},
    {"tanh", "tanh(x) over X[m, n]", NK(keys_mn), keys_mn, build_tanh},
    {"add", "A + B with broadcasting", NK(keys_bin), keys_bin, build_add},
    {"sub", "A - B with broadcasting", NK(keys_bin), keys_bin, build_sub},
    {"mul", "A * B with broadcasting", NK(keys_bin), keys_bin, build_mul},
    {"div", "A / B with broadcasting", NK(keys_bin), keys_bin, build_div},
    {"minimum", "min(A, B) with broadcasting", NK(keys_bin), keys_bin, build_minimum},
    {"maximum", "max(A, B) with broadcasting", NK(keys_bin), keys_bin, build_maximum},
    {"transpose", "Y[n, m] = X[m, n]", NK(keys_mn), keys_mn, build_transpose},
    {"sum", "row sums of X[m, n]", NK(keys_mn), keys_mn, build_sum},
    {"matmul_bias_act", "act(X W + bias): matmul stage plus epilogue stage", NK(keys_mba), keys_mba,
     build_matmul_bias_act},
    {"mlp_gate", "silu(X W1) * (X W3): two matmul stages plus epilogue", NK(keys_mlp_gate),
     keys_mlp_gate, build_mlp_gate},
    {"conv2d_bn_relu", "relu(conv2d(X, W) * scale + shift): conv stage plus epilogue",
     NK(keys_conv), keys_conv, build_conv2d_bn_relu},
    {"qkv_projection", "X Wq, X Wk, X Wv: three matmuls sharing one input", NK(keys_mnk), keys_mnk,
     build_qkv},
    {"concat", "Y[m, n + k] = [A[m, n], B[m, k]] (along axis 1)", NK(keys_concat), keys_concat,
     build_concat},
    {"split", "X[m, n] into `parts` column blocks", NK(keys_split), keys_split, build_split},
    {"slice", "Y = X[:, start:end:step] (ONNX Slice clamping)", NK(keys_slice), keys_slice,
     build_slice},
    {"gather", "Y[k, n] = X[I[k], :] with i32 indices I", NK(keys_gather), keys_gather,
     build_gather},
    {"where", "Y = C ? X : Y[n] (u8 condition, broadcast)", NK(keys_mn), keys_mn, build_where},
    {"expand", "Y[m, n] = X[1, n] broadcast", NK(keys_mn), keys_mn, build_expand},
    {"log_softmax", "log-softmax over the rows of X[m, n]", NK(keys_mn), keys_mn,
     build_log_softmax},
    {"reduce_max", "row maxima of X[m, n]", NK(keys_mn), keys_mn, build_reduce_max},
    {"reduce_l2", "row L2 norms of X[m, n]", NK(keys_mn), keys_mn, build_reduce_l2},
    {"attention", "softmax(scale Q K^T + mask) V, fused (flash-attention structure)",
     NK(keys_attention), keys_attention, build_attention},
    {"matmul_integer", "ONNX MatMulInteger: i32 Y = (A - a_zero)(B - b_zero), A, B u8/i8",
     NK(keys_matmul_integer), keys_matmul_integer, build_matmul_integer},
    {"qlinear_matmul", "ONNX QLinearMatMul: matmul_integer requantized to u8/i8 (ties to even)",
     NK(keys_qlinear_matmul), keys_qlinear_matmul, build_qlinear_matmul},
    {"quantize_linear", "ONNX QuantizeLinear: u8/i8 Y = saturate(rne(X / scale) + zero)",
     NK(keys_quant_ew), keys_quant_ew, build_quantize_linear},
    {"dequantize_linear", "ONNX DequantizeLinear: f32 Y = (X - zero) * scale, X u8/i8",
     NK(keys_quant_ew), keys_quant_ew, build_dequantize_linear},
    {"requantize", "u8/i8 Y = saturate(rne(i32 X * mult) + zero), QLinearMatMul's epilogue",
     NK(keys_quant_ew), keys_quant_ew, build_requantize},
    {"quantize_axis",
     "ONNX QuantizeLinear per axis: u8/i8 Y = saturate(rne(X / S[c]) + Z[c]), c along axis",
     NK(keys_quant_axis), keys_quant_axis, build_quantize_axis},
    {"dequantize_axis", "ONNX DequantizeLinear per axis: f32 Y = (X - Z[c]) * S[c], X u8/i8/i32",
     NK(keys_quant_axis), keys_quant_axis, build_dequantize_axis},
    {"requantize_axis",
     "u8/i8 Y = saturate(rne(i32 X * M[c]) + zero): per-column / per-channel requantization",
     NK(keys_requant_axis), keys_requant_axis, build_requantize_axis},
    {"matmul_integer_zp",
     "MatMulInteger with zero points as tensors: i32 Y = (A - Za[i])(B - Zb[j]), A, B u8/i8",
     NK(keys_matmul_integer_zp), keys_matmul_integer_zp, build_matmul_integer_zp},
    {"dynamic_quantize",
     "ONNX DynamicQuantizeLinear of f32 X[m, n]: u8 Y, scale [1], zero point [1] (onnxruntime's)",
     NK(keys_mn), keys_mn, build_dynamic_quantize},
    {"pack_vnni", "Bp[ceil(k / g), n, g] = B[k, n] in VNNI layout (zero padding)",
     NK(keys_pack_vnni), keys_pack_vnni, build_pack_vnni},
    {"matmul_vnni",
     "C = A Bp with Bp VNNI-packed: bf16/f16/f32 -> f32, u8/i8 -> i32 (b_dtype auto: i8, or A's)",
     NK(keys_matmul_vnni), keys_matmul_vnni, build_matmul_vnni},
    {"conv2d_vnni",
     "NHWC conv2d against VNNI-packed weights Wp [kh, kw, c / g, oc, g], no padding (pad X)",
     NK(keys_conv2d_vnni), keys_conv2d_vnni, build_conv2d_vnni},
};
#pragma GCC diagnostic pop

static const te_op_info *registered_find(const char *name);

const te_op_info *te_op_lookup(const char *name)
{
    for (int i = 0; name && i < NK(op_table); i++)
        if (strcmp(op_table[i].name, name) == 0)
            return &op_table[i];
    return registered_find(name);
}

const te_op_info *te_op_list(int *n)
{
    if (n)
        *n = NK(op_table);
    return op_table;
}

static int registered_hash(te_ctx *ctx, const te_op_info *op, const te_op_params *kv,
                           uint64_t *out);

int te_op_workload_key(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, char *buf,
                       size_t size)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!op)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_op_workload_key: operator is NULL");
    resolved r;
    int rc = resolve(ctx, op, kv, &r);
    if (rc)
        return rc;
    int order[TE_OP_MAX_PARAMS];
    for (int k = 0; k < op->nkeys; k++)
        order[k] = k;
    for (int a = 1; a < op->nkeys; a++) /* insertion sort by key name */
        for (int b = a; b > 0 && strcmp(op->keys[order[b - 1]].name, op->keys[order[b]].name) > 0;
             b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    char tmp[1024];
    int len = snprintf(tmp, sizeof tmp, "%s;", op->name);
    int written = 0;
    for (int i = 0; i < op->nkeys && len < (int)sizeof tmp; i++) {
        int k = order[i];
        const te_op_key *key = &op->keys[k];
        /* Optional keys at their default are left out, so "stride=1" and no stride agree. */
        if (key->dflt) {
            int64_t dv;
            if (key->is_str ? strcmp(r.sv[k], key->dflt) == 0
                            : parse_int(key->dflt, &dv) && dv == r.iv[k])
                continue;
        }
        if (key->is_str)
            len += snprintf(tmp + len, sizeof tmp - (size_t)len, "%s%s=%s", written ? "," : "",
                            key->name, r.sv[k]);
        else
            len += snprintf(tmp + len, sizeof tmp - (size_t)len, "%s%s=%lld", written ? "," : "",
                            key->name, (long long)r.iv[k]);
        written++;
    }
    if (len < (int)sizeof tmp)
        len += snprintf(tmp + len, sizeof tmp - (size_t)len, ";%s", te_dtype_str(kv->dtype));
    if (op->def && len < (int)sizeof tmp) {
        /* The expression's structure: a changed definition is another workload. */
        uint64_t h = 0;
        rc = registered_hash(ctx, op, kv, &h);
        if (rc)
            return rc;
        len +=
            snprintf(tmp + len, sizeof tmp - (size_t)len, ";expr=%016llx", (unsigned long long)h);
    }
    if (len >= (int)sizeof tmp)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_op_workload_key: key for '%s' is too long",
                                op->name);
    if (buf && size)
        snprintf(buf, size, "%s", tmp);
    return len;
}

int te_op_build(te_ctx *ctx, const char *opname, const char *params, te_tensor **inputs, int *n_in,
                te_tensor **outputs, int *n_out)
{
    if (!ctx)
        return TE_ERR_ARG;
    const te_op_info *op = te_op_lookup(opname);
    if (!op)
        return te_ctx_set_error(ctx, TE_ERR_NOT_FOUND,
                                "unknown operator '%s' (see `tessera "
                                "ops`)",
                                opname ? opname : "(null)");
    te_op_params kv;
    int rc = te_op_params_parse(ctx, params, &kv);
    if (rc)
        return rc;
    return te_op_info_build(ctx, op, &kv, inputs, n_in, outputs, n_out);
}

/* ---- Registered operators (te_op_register) ----------------------------------------------------
 *
 * A process-wide table. Entries below n_regs are complete and never change, so readers take the
 * lock only to read the count; te_op_info pointers stay valid for the process. */

typedef struct reg_op {
    te_op_def def;
    te_op_key keys[TE_OP_MAX_PARAMS];
    char key_name[TE_OP_MAX_PARAMS][32];
    char key_dflt[TE_OP_MAX_PARAMS][32];
    char key_help[TE_OP_MAX_PARAMS][160];
    char name[40], description[200], inputs_decl[256], kind[16];
    char attrs[512], input_names[256], origin[512];
    int n_in;
    char in_name[TE_OP_MAX_IO][32];
    int in_ndim[TE_OP_MAX_IO];
    int in_key[TE_OP_MAX_IO][TE_MAX_DIMS]; /* key index, or -1: the literal */
    int64_t in_lit[TE_OP_MAX_IO][TE_MAX_DIMS];
} reg_op;

static reg_op regs[TE_OP_MAX_REGISTERED];
static te_op_info reg_info[TE_OP_MAX_REGISTERED];
static int n_regs;
static pthread_mutex_t regs_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local const char *reg_origin; /* set by te_plugin_load around a plugin's init */

void te__op_set_origin(const char *origin) { reg_origin = origin; }

static int reg_count(void)
{
    pthread_mutex_lock(&regs_lock);
    int n = n_regs;
    pthread_mutex_unlock(&regs_lock);
    return n;
}

static const te_op_info *registered_find(const char *name)
{
    int n = name ? reg_count() : 0;
    for (int i = 0; i < n; i++)
        if (strcmp(reg_info[i].name, name) == 0)
            return &reg_info[i];
    return NULL;
}

const te_op_info *te_op_list_registered(int *n)
{
    if (n)
        *n = reg_count();
    return reg_info;
}

const te_op_param *te_op_params_find(const te_op_params *kv, const char *key)
{
    for (int i = 0; kv && key && i < kv->n; i++)
        if (strcmp(kv->p[i].key, key) == 0)
            return &kv->p[i];
    return NULL;
}

static int build_registered_stub(BUILD_ARGS)
{
    (void)kv, (void)inputs, (void)n_in, (void)outputs, (void)n_out;
    return ctx ? te_ctx_set_error(ctx, TE_ERR_ARG,
                                  "registered operators are built with te_op_info_build")
               : TE_ERR_ARG;
}

static const reg_op *reg_of(const te_op_info *op)
{
    ptrdiff_t i = op - reg_info;
    return i >= 0 && i < TE_OP_MAX_REGISTERED ? &regs[i] : NULL;
}

int te_op_info_build(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, te_tensor **inputs,
                     int *n_in, te_tensor **outputs, int *n_out)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!op)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_op_info_build: operator is NULL");
    if (!op->def)
        return op->build(ctx, kv, inputs, n_in, outputs, n_out);
    const reg_op *g = reg_of(op);
    if (!g || !inputs || !n_in || !outputs || !n_out)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_op_info_build: bad arguments");
    *n_in = *n_out = 0;
    resolved r;
    int rc = resolve(ctx, op, kv, &r);
    if (rc)
        return rc;
    te_tensor *ins[TE_OP_MAX_IO];
    for (int i = 0; i < g->n_in; i++) {
        int64_t shape[TE_MAX_DIMS];
        for (int d = 0; d < g->in_ndim[i]; d++) {
            int k = g->in_key[i][d];
            shape[d] = k < 0 ? g->in_lit[i][d] : r.iv[k];
            if (shape[d] < 1)
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "%s: key '%s' is a dimension of input %s and must be "
                                        "positive, not %lld",
                                        op->name, op->keys[k].name, g->in_name[i],
                                        (long long)shape[d]);
        }
        ins[i] = te_placeholder(ctx, g->in_name[i], kv->dtype, g->in_ndim[i], shape);
        if (!ins[i])
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
    }
    te_op_params all;
    memset(&all, 0, sizeof all);
    all.dtype = kv->dtype;
    for (int k = 0; k < op->nkeys; k++) {
        te_op_param *e = &all.p[all.n++];
        snprintf(e->key, sizeof e->key, "%s", op->keys[k].name);
        snprintf(e->val, sizeof e->val, "%s", r.sv[k]);
        e->is_int = !op->keys[k].is_str;
        e->ival = e->is_int ? r.iv[k] : 0;
    }
    te_tensor *out[TE_OP_MAX_IO] = {NULL};
    rc = g->def.build(ctx, g->n_in, ins, &all, op->name, out, g->def.user);
    if (rc)
        return rc;
    if (!out[0])
        return te_ctx_errcode(ctx)
                   ? te_ctx_errcode(ctx)
                   : te_ctx_set_error(ctx, TE_ERR_INTERNAL,
                                      "%s: the build function returned no tensor", op->name);
    for (int i = 0; i < g->n_in; i++)
        inputs[i] = ins[i];
    outputs[0] = out[0];
    *n_in = g->n_in;
    *n_out = 1;
    return TE_OK;
}

static int registered_hash(te_ctx *ctx, const te_op_info *op, const te_op_params *kv, uint64_t *out)
{
    te_ctx *scratch = te_ctx_create();
    if (!scratch)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "out of memory");
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    int rc = te_op_info_build(scratch, op, kv, ins, &n_in, outs, &n_out);
    if (rc) {
        rc = te_ctx_set_error(ctx, rc, "%s", te_ctx_errmsg(scratch));
    } else {
        uint64_t h = te__expr_hash(n_out, outs);
        for (int i = 0; i < n_in; i++)
            h = te__tensor_sig_hash(h, ins[i]);
        *out = h;
    }
    te_ctx_free(scratch);
    return rc;
}

static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
{
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int is_ident(const char *z, size_t maxlen)
{
    size_t n = z ? strlen(z) : 0;
    if (n == 0 || n > maxlen || !(isalpha((unsigned char)z[0]) || z[0] == '_'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)z[i]) || z[i] == '_'))
            return 0;
    return 1;
}

/* Parses "X[m,k],W[k,n]" against g's keys into g->in_*. */
static int parse_inputs(reg_op *g, char *err, size_t errsize)
{
    const char *nm = g->name, *p = g->inputs_decl;
    g->n_in = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (g->n_in == TE_OP_MAX_IO)
            return fail(err, errsize, TE_ERR_ARG, "operator '%s': more than %d inputs", nm,
                        TE_OP_MAX_IO);
        int i = g->n_in;
        size_t len = 0;
        while (isalnum((unsigned char)p[len]) || p[len] == '_')
            len++;
        if (!len || len >= sizeof g->in_name[i] || isdigit((unsigned char)p[0]) || p[len] != '[')
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': inputs '%s': expected NAME[dim,...] at '%s'", nm,
                        g->inputs_decl, p);
        memcpy(g->in_name[i], p, len);
        g->in_name[i][len] = 0;
        for (int j = 0; j < i; j++)
            if (!strcmp(g->in_name[j], g->in_name[i]))
                return fail(err, errsize, TE_ERR_ARG, "operator '%s': input '%s' is given twice",
                            nm, g->in_name[i]);
        p += len + 1;
        int nd = 0;
        for (;;) {
            while (*p == ' ')
                p++;
            size_t dl = 0;
            while (isalnum((unsigned char)p[dl]) || p[dl] == '_')
                dl++;
            if (!dl)
                return fail(err, errsize, TE_ERR_ARG,
                            "operator '%s': input %s: expected a key or a positive integer at "
                            "'%s'",
                            nm, g->in_name[i], p);
            if (nd == TE_MAX_DIMS)
                return fail(err, errsize, TE_ERR_ARG,
                            "operator '%s': input %s has more than %d dimensions", nm,
                            g->in_name[i], TE_MAX_DIMS);
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)(dl < 63 ? dl : 63), p);
            int64_t lit;
            if (parse_int(word, &lit)) {
                if (lit < 1)
                    return fail(err, errsize, TE_ERR_ARG,
                                "operator '%s': input %s: dimension %lld is not positive", nm,
                                g->in_name[i], (long long)lit);
                g->in_key[i][nd] = -1;
                g->in_lit[i][nd] = lit;
            } else {
                int k = 0;
                while (k < g->def.nkeys && strcmp(g->key_name[k], word))
                    k++;
                if (k == g->def.nkeys)
                    return fail(err, errsize, TE_ERR_ARG,
                                "operator '%s': input %s: dimension '%s' is no key of the "
                                "operator",
                                nm, g->in_name[i], word);
                if (g->keys[k].is_str)
                    return fail(err, errsize, TE_ERR_ARG,
                                "operator '%s': input %s: dimension '%s' is a word key, not an "
                                "integer",
                                nm, g->in_name[i], word);
                g->in_key[i][nd] = k;
            }
            nd++;
            p += dl;
            while (*p == ' ')
                p++;
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p == ']') {
                p++;
                break;
            }
            return fail(err, errsize, TE_ERR_ARG, "operator '%s': input %s: expected ',' or ']'",
                        nm, g->in_name[i]);
        }
        g->in_ndim[i] = nd;
        g->n_in++;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        else if (*p)
            return fail(err, errsize, TE_ERR_ARG, "operator '%s': inputs: expected ',' at '%s'", nm,
                        p);
    }
    if (!g->n_in)
        return fail(err, errsize, TE_ERR_ARG,
                    "operator '%s': no inputs (declare them: .inputs = \"X[m,n]\")", nm);
    return TE_OK;
}

static int key_is_dim(const reg_op *g, int k)
{
    for (int i = 0; i < g->n_in; i++)
        for (int d = 0; d < g->in_ndim[i]; d++)
            if (g->in_key[i][d] == k)
                return 1;
    return 0;
}

/* Copies and checks def into *g (not yet visible). */
static int reg_fill(reg_op *g, const te_op_def *def, char *err, size_t errsize)
{
    static const char *const kinds[] = {"elemwise",  "broadcast", "injective",
                                        "reduction", "out_ewise", "opaque"};
    const char *nm = def->name ? def->name : "";
    if (!is_ident(nm, sizeof g->name - 1))
        return fail(err, errsize, TE_ERR_ARG,
                    "operator '%s': the name must be a C identifier of 1..%d characters", nm,
                    (int)sizeof g->name - 1);
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", nm);
    if (!def->build)
        return fail(err, errsize, TE_ERR_ARG, "operator '%s': no build function", nm);
    if (def->nkeys < 0 || def->nkeys > TE_OP_MAX_PARAMS || (def->nkeys && !def->keys))
        return fail(err, errsize, TE_ERR_ARG, "operator '%s': %d keys (0..%d, with a key array)",
                    nm, def->nkeys, TE_OP_MAX_PARAMS);
    if (def->description && strlen(def->description) >= sizeof g->description)
        return fail(err, errsize, TE_ERR_ARG, "operator '%s': the description is too long", nm);
    if (!def->inputs || strlen(def->inputs) >= sizeof g->inputs_decl)
        return fail(err, errsize, TE_ERR_ARG, "operator '%s': %s", nm,
                    def->inputs ? "the input list is too long"
                                : "no inputs (declare them: .inputs = \"X[m,n]\")");
    const char *kind = def->kind ? def->kind : "opaque";
    int kind_ok = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        kind_ok |= !strcmp(kinds[i], kind);
    if (!kind_ok)
        return fail(err, errsize, TE_ERR_ARG,
                    "operator '%s': kind '%s' is not elemwise, broadcast, injective, reduction, "
                    "out_ewise or opaque",
                    nm, kind);
    g->def = *def;
    snprintf(g->kind, sizeof g->kind, "%s", kind);
    snprintf(g->description, sizeof g->description, "%s", def->description ? def->description : "");
    snprintf(g->inputs_decl, sizeof g->inputs_decl, "%s", def->inputs);
    for (int k = 0; k < def->nkeys; k++) {
        const te_op_key *key = &def->keys[k];
        if (!is_ident(key->name, sizeof g->key_name[k] - 1) || !strcmp(key->name, "dtype"))
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': key %d ('%s') must be an identifier of 1..31 characters, "
                        "not 'dtype'",
                        nm, k, key->name ? key->name : "(null)");
        for (int j = 0; j < k; j++)
            if (!strcmp(g->key_name[j], key->name))
                return fail(err, errsize, TE_ERR_ARG, "operator '%s': key '%s' is given twice", nm,
                            key->name);
        if ((key->dflt && strlen(key->dflt) >= sizeof g->key_dflt[k]) ||
            (key->help && strlen(key->help) >= sizeof g->key_help[k]))
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': key '%s': default or description too long", nm, key->name);
        if (key->is_str && (!key->help || !*key->help))
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': word key '%s' lists its words in help (\"a|b\")", nm,
                        key->name);
        snprintf(g->key_name[k], sizeof g->key_name[k], "%s", key->name);
        snprintf(g->key_help[k], sizeof g->key_help[k], "%s", key->help ? key->help : "");
        if (key->dflt)
            snprintf(g->key_dflt[k], sizeof g->key_dflt[k], "%s", key->dflt);
        g->keys[k] = (te_op_key){g->key_name[k], key->dflt ? g->key_dflt[k] : NULL, key->is_str,
                                 g->key_help[k], key->is_bool};
        int64_t v;
        if (key->dflt &&
            (key->is_str ? !word_in(key->dflt, key->help)
                         : !parse_int(key->dflt, &v) || (key->is_bool && v != 0 && v != 1)))
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': key '%s': the default '%s' is not a valid value", nm,
                        key->name, key->dflt);
    }
    g->def.keys = g->keys;
    g->def.name = g->name;
    g->def.description = g->description;
    g->def.inputs = g->inputs_decl;
    g->def.kind = g->kind;
    int rc = parse_inputs(g, err, errsize);
    if (rc)
        return rc;
    size_t al = 0, il = 0;
    for (int k = 0; k < def->nkeys; k++) {
        if (key_is_dim(g, k))
            continue;
        if (!g->keys[k].dflt)
            return fail(err, errsize, TE_ERR_ARG,
                        "operator '%s': key '%s' is no input dimension, so it is an attribute "
                        "and needs a default",
                        nm, g->key_name[k]);
        al += (size_t)snprintf(g->attrs + al, sizeof g->attrs - al, "%s%s=%s", al ? "," : "",
                               g->key_name[k], g->key_dflt[k]);
        if (al >= sizeof g->attrs)
            return fail(err, errsize, TE_ERR_ARG, "operator '%s': attributes too long", nm);
    }
    for (int i = 0; i < g->n_in; i++)
        il += (size_t)snprintf(g->input_names + il, sizeof g->input_names - il, "%s%s",
                               i ? "," : "", g->in_name[i]);
    snprintf(g->origin, sizeof g->origin, "%s", reg_origin ? reg_origin : "te_op_register");
    return TE_OK;
}

int te_op_register(const te_op_def *def, char *err, size_t errsize)
{
    if (err && errsize)
        err[0] = 0;
    if (!def)
        return fail(err, errsize, TE_ERR_ARG, "te_op_register: no definition");
    reg_op *g = malloc(sizeof *g);
    if (!g)
        return fail(err, errsize, TE_ERR_NOMEM, "out of memory");
    int rc = reg_fill(g, def, err, errsize);
    if (!rc) {
        pthread_mutex_lock(&regs_lock);
        const te_op_info *old = NULL;
        for (int i = 0; i < NK(op_table) && !old; i++)
            if (!strcmp(op_table[i].name, g->name))
                old = &op_table[i];
        for (int i = 0; i < n_regs && !old; i++)
            if (!strcmp(reg_info[i].name, g->name))
                old = &reg_info[i];
        if (old)
            rc = fail(err, errsize, TE_ERR_ARG,
                      "operator '%s': the name is taken (by %s); rename the operator", g->name,
                      old->def ? old->origin : "the operator library");
        else if (n_regs == TE_OP_MAX_REGISTERED)
            rc = fail(err, errsize, TE_ERR_OVERFLOW, "operator '%s': %d are registered already",
                      g->name, TE_OP_MAX_REGISTERED);
        if (!rc) {
            int i = n_regs;
            regs[i] = *g;
            reg_op *e = &regs[i];
            /* The copy's pointers must point into the copy. */
            for (int k = 0; k < e->def.nkeys; k++)
                e->keys[k] = (te_op_key){e->key_name[k], e->keys[k].dflt ? e->key_dflt[k] : NULL,
                                         e->keys[k].is_str, e->key_help[k], e->keys[k].is_bool};
            e->def.keys = e->keys;
            e->def.name = e->name;
            e->def.description = e->description;
            e->def.inputs = e->inputs_decl;
            e->def.kind = e->kind;
            reg_info[i] = (te_op_info){
                e->name, e->description, e->def.nkeys,   e->keys, build_registered_stub,
                &e->def, e->attrs,       e->input_names, e->n_in, e->origin};
            n_regs++; /* published last, under the lock */
        }
        pthread_mutex_unlock(&regs_lock);
    }
    free(g);
    return rc;
}
