/* Elementwise operators: activations and broadcasting binary arithmetic. */
#include <math.h>
#include <string.h>

#include "te/internal.h"
#include "te/ops/ops_internal.h"

static const char *const act_names[TE_ACT_COUNT] = {"none", "relu",    "gelu", "gelu_tanh",
                                                    "silu", "sigmoid", "tanh"};

const char *te_op_act_name(te_op_act act)
{
    return (unsigned)act < TE_ACT_COUNT ? act_names[act] : NULL;
}

int te_op_act_parse(const char *s, te_op_act *out)
{
    for (int a = 0; s && a < TE_ACT_COUNT; a++) {
        if (strcmp(s, act_names[a]) == 0) {
            *out = (te_op_act)a;
            return TE_OK;
        }
    }
    return TE_ERR_ARG;
}

te_expr *te_op_act_expr(te_ctx *ctx, te_op_act act, te_expr *x)
{
    if (!ctx || !x)
        return NULL;
    te_dtype dt = x->dtype;
    switch (act) {
    case TE_ACT_NONE:
        return x;
    case TE_ACT_RELU:
        return te_max(ctx, x, te_const(ctx, dt, 0));
    case TE_ACT_GELU: {
        te_expr *e = te_erf(ctx, te_mul(ctx, x, te_const(ctx, dt, M_SQRT1_2)));
        te_expr *h = te_mul(ctx, te_const(ctx, dt, 0.5), x);
        return te_mul(ctx, h, te_add(ctx, te_const(ctx, dt, 1), e));
    }
    case TE_ACT_GELU_TANH: {
        te_expr *x3 = te_mul(ctx, te_mul(ctx, x, x), x);
        te_expr *in = te_add(ctx, x, te_mul(ctx, te_const(ctx, dt, 0.044715), x3));
        te_expr *t = te_tanh(ctx, te_mul(ctx, te_const(ctx, dt, 0.7978845608028654), in));
        te_expr *h = te_mul(ctx, te_const(ctx, dt, 0.5), x);
        return te_mul(ctx, h, te_add(ctx, te_const(ctx, dt, 1), t));
    }
    case TE_ACT_SILU:
        return te_mul(ctx, x, te_sigmoid(ctx, x));
    case TE_ACT_SIGMOID:
        return te_sigmoid(ctx, x);
    case TE_ACT_TANH:
        return te_tanh(ctx, x);
    default:
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_op_act_expr: invalid activation %d", (int)act);
        return NULL;
    }
}

typedef struct {
    te_tensor *X;
    te_op_act act;
} act_user;

static te_expr *act_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    act_user *u = user;
    te_expr *x = te_read(ctx, u->X, te_tensor_ndim(u->X), axes);
    return te_op_act_expr(ctx, u->act, x);
}

te_tensor *te_op_activation(te_ctx *ctx, te_tensor *X, te_op_act act, const char *name)
{
    if (!ctx)
        return NULL;
    const char *an = te_op_act_name(act);
    op_site s = {ctx, an ? an : "activation", name ? name : an ? an : "activation"};
    if (!an)
        return op__fail(&s, TE_ERR_ARG, "invalid activation %d", (int)act);
    if (!op__need(&s, X, "input 'X'") || !op__same_dtype(&s, X, X, "input 'X'"))
        return NULL;
    if (act != TE_ACT_NONE && act != TE_ACT_RELU && !op__float(&s, X, "input 'X'"))
        return NULL;
    act_user u = {X, act};
    te_tensor *Y =
        te_compute_shape(ctx, s.name, te_tensor_ndim(X), te_tensor_shape(X), act_body, &u);
    return op__tag(ctx, Y, an);
}

te_tensor *te_op_relu(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_RELU, name);
}
te_tensor *te_op_gelu(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_GELU, name);
}
te_tensor *te_op_gelu_tanh(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_GELU_TANH, name);
}
te_tensor *te_op_silu(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_SILU, name);
}
te_tensor *te_op_sigmoid(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_SIGMOID, name);
}
te_tensor *te_op_tanh(te_ctx *ctx, te_tensor *X, const char *name)
{
    return te_op_activation(ctx, X, TE_ACT_TANH, name);
}

/* ---- Broadcasting binary ---------------------------------------------------------------- */

static const char *binary_tag(te_binop op)
{
    switch (op) {
    case TE_ADD:
        return "add";
    case TE_SUB:
        return "sub";
    case TE_MUL:
        return "mul";
    case TE_DIV:
        return "div";
    case TE_MIN:
        return "min";
    case TE_MAX:
        return "max";
    default:
        return NULL;
    }
}

/* Index list of operand T (rank r) for output axes (rank R): right-aligned, size-1 axes
 * read at 0. */
static void bcast_index(te_ctx *ctx, const te_tensor *T, int R, te_expr *const *axes,
                        const int64_t *oshape, te_expr **idx)
{
    int r = te_tensor_ndim(T);
    const int64_t *ts = te_tensor_shape(T);
    for (int d = 0; d < r; d++) {
        int od = d + R - r;
        idx[d] = ts[d] == 1 && oshape[od] != 1 ? te_int(ctx, 0) : axes[od];
    }
}

te_tensor *te_op_binary(te_ctx *ctx, te_binop op, te_tensor *A, te_tensor *B, const char *name)
{
    if (!ctx)
        return NULL;
    const char *tag = binary_tag(op);
    op_site s = {ctx, tag ? tag : "binary", name ? name : tag ? tag : "binary"};
    if (!tag)
        return op__fail(&s, TE_ERR_ARG,
                        "operator %d is not one of TE_ADD, TE_SUB, TE_MUL, "
                        "TE_DIV, TE_MIN, TE_MAX",
                        (int)op);
    if (!op__need(&s, A, "input 'A'") || !op__need(&s, B, "input 'B'") ||
        !op__same_dtype(&s, A, A, "input 'A'") || !op__same_dtype(&s, A, B, "input 'B'"))
        return NULL;
    int ra = te_tensor_ndim(A), rb = te_tensor_ndim(B), R = ra > rb ? ra : rb;
    const int64_t *as = te_tensor_shape(A), *bs = te_tensor_shape(B);
    int64_t shape[TE_MAX_DIMS];
    for (int od = 0; od < R; od++) {
        int da = od - (R - ra), db = od - (R - rb);
        int64_t ea = da >= 0 ? as[da] : 1, eb = db >= 0 ? bs[db] : 1;
        if (ea != eb && ea != 1 && eb != 1)
            return op__fail(&s, TE_ERR_SHAPE,
                            "cannot broadcast input 'A' ('%s') axis %d "
                            "(extent %lld) with input 'B' ('%s') axis %d (extent %lld): "
                            "extents must be equal or 1",
                            te_tensor_name(A), da, (long long)ea, te_tensor_name(B), db,
                            (long long)eb);
        shape[od] = ea > eb ? ea : eb;
    }
    te_expr *axes[TE_MAX_DIMS], *ia[TE_MAX_DIMS], *ib[TE_MAX_DIMS];
    if (!op__axes(ctx, R, shape, NULL, axes))
        return NULL;
    bcast_index(ctx, A, R, axes, shape, ia);
    bcast_index(ctx, B, R, axes, shape, ib);
    te_expr *body = te_binary(ctx, op, te_read(ctx, A, ra, ia), te_read(ctx, B, rb, ib));
    return op__tag(ctx, te_compute(ctx, s.name, R, axes, body), tag);
}
