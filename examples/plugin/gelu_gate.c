/*
 * An example Tessera plugin: one fused operator, registered when the plugin is loaded.
 *
 *     gelu_gate   Y[m, n] = alpha * gelu(X[m, k] W[k, n]) * G[m, n]
 *
 * (a GELU-gated projection: the product, then one elementwise epilogue that the default and
 * tuned schedules fuse into it). Build it as a shared library that links against nothing of
 * Tessera (the loading program provides the symbols) and load it with
 *
 *     tessera ops --plugin ./libtessera_gelu_gate.so gelu_gate
 *     tessera tune --plugin ./libtessera_gelu_gate.so gelu_gate --shape m=64,n=64,k=64
 *     tessera gen --plugin ./libtessera_gelu_gate.so gelu_gate --shape m=64,n=64,k=64 -o out
 *
 * or TESSERA_PLUGINS=./libtessera_gelu_gate.so. In a graph it is a node like any other:
 * `y = gelu_gate(x, w, g) alpha=0.5`. CMakeLists.txt builds it (target tessera_gelu_gate).
 *
 * Compiled with -DGELU_GATE_VARIANT=1 it defines the same operator with tanh in place of erf:
 * the tests use it to check that a changed definition gets another workload key.
 */
#include <math.h>
#include <stdlib.h>

#include "tessera/ops.h"
#include "tessera/te.h"

#ifndef GELU_GATE_VARIANT
#define GELU_GATE_VARIANT 0
#endif

typedef struct epilogue {
    te_tensor *mm, *g;
    double alpha;
} epilogue;

/* alpha * gelu(mm[i, j]) * g[i, j], gelu(x) = x / 2 * (1 + erf(x / sqrt(2))). */
static te_expr *epilogue_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    const epilogue *e = user;
    te_dtype dt = te_tensor_dtype(e->mm);
    te_expr *x = te_read(ctx, e->mm, 2, axes);
    te_expr *u = te_mul(ctx, x, te_const(ctx, dt, 0.70710678118654752440));
    te_expr *t = te_call(ctx, GELU_GATE_VARIANT ? TE_TANH : TE_ERF, 1, &u);
    te_expr *gelu =
        te_mul(ctx, te_mul(ctx, te_const(ctx, dt, 0.5), x), te_add(ctx, te_const(ctx, dt, 1.0), t));
    te_expr *g = te_read(ctx, e->g, 2, axes);
    return te_mul(ctx, te_mul(ctx, te_const(ctx, dt, e->alpha), gelu), g);
}

static double attr(const te_op_params *kv, const char *key, double dflt)
{
    const te_op_param *p = te_op_params_find(kv, key);
    return p ? strtod(p->val, NULL) : dflt;
}

static int build_gelu_gate(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
                           const char *name, te_tensor **out, void *user)
{
    (void)user;
    if (n_in != 3)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "gelu_gate: takes X, W and G");
    epilogue e = {NULL, in[2], attr(attrs, "alpha", 1.0)};
    if (!isfinite(e.alpha))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "gelu_gate: alpha must be a finite number");
    /* The shapes come from the inputs (a graph gives its producers' tensors). */
    const int64_t *xs = te_tensor_shape(in[0]), *ws = te_tensor_shape(in[1]);
    const int64_t *gs = te_tensor_shape(in[2]);
    if (te_tensor_ndim(in[0]) != 2 || te_tensor_ndim(in[1]) != 2 || te_tensor_ndim(in[2]) != 2 ||
        xs[1] != ws[0] || gs[0] != xs[0] || gs[1] != ws[1])
        return te_ctx_set_error(ctx, TE_ERR_ARG, "gelu_gate: needs X[m, k], W[k, n] and G[m, n]");
    e.mm = te_op_matmul(ctx, in[0], in[1], 0, 0, "gelu_gate_mm");
    if (!e.mm)
        return te_ctx_errcode(ctx);
    out[0] = te_compute_shape(ctx, name, 2, (int64_t[]){xs[0], ws[1]}, epilogue_body, &e);
    return out[0] ? TE_OK : te_ctx_errcode(ctx);
}

static const te_op_key keys[] = {
    {"m", NULL, 0, "rows of X and Y", 0},
    {"n", NULL, 0, "columns of W and Y", 0},
    {"k", NULL, 0, "reduction extent", 0},
    {"alpha", "1", 0, "output scale (a number, given as an integer here: 1, 2, ...)", 0},
};

TE_PLUGIN_ABI_DECLARE

__attribute__((visibility("default"))) int tessera_plugin_init(int abi, char *err, size_t errsize);

int tessera_plugin_init(int abi, char *err, size_t errsize)
{
    (void)abi; /* the loader checked tessera_plugin_abi_version already */
    te_op_def d = {
        .name = "gelu_gate",
        .description = GELU_GATE_VARIANT
                           ? "alpha * gelu_tanh-variant(X W) * G (example plugin, variant)"
                           : "alpha * gelu(X W) * G: GELU-gated projection (example plugin)",
        .nkeys = (int)(sizeof keys / sizeof keys[0]),
        .keys = keys,
        .inputs = "X[m,k], W[k,n], G[m,n]",
        .build = build_gelu_gate,
        .kind = "opaque",
    };
    return te_op_register(&d, err, errsize);
}
