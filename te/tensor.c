/* Placeholders and computes, with the checks that make bad definitions fail early. */
#include <limits.h>
#include <string.h>

#include "te/arith.h"
#include "te/internal.h"

static bool check_name(te_ctx *ctx, const char *fn, const char *name)
{
    if (!name || !*name) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "%s: a tensor name is required", fn);
        return false;
    }
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (p != name && c >= '0' && c <= '9'))) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "%s: tensor name '%s' must be a C identifier", fn,
                             name);
            return false;
        }
    }
    if (strlen(name) > 48) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "%s: tensor name '%.20s...' is longer than 48 "
                         "characters",
                         fn, name);
        return false;
    }
    return true;
}

static bool check_shape(te_ctx *ctx, const char *fn, const char *name, int ndim,
                        const int64_t *shape)
{
    if (ndim < 0 || ndim > TE_MAX_DIMS) {
        te_ctx_set_error(ctx, TE_ERR_SHAPE,
                         "%s: tensor '%s' has rank %d; ranks 0 to %d are "
                         "supported",
                         fn, name, ndim, TE_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "%s: tensor '%s' needs a shape", fn, name);
        return false;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            te_ctx_set_error(ctx, TE_ERR_SHAPE,
                             "%s: tensor '%s' axis %d has non-positive extent "
                             "%lld",
                             fn, name, d, (long long)shape[d]);
            return false;
        }
        if (__builtin_mul_overflow(n, shape[d], &n)) {
            te_ctx_set_error(ctx, TE_ERR_OVERFLOW,
                             "%s: tensor '%s' element count overflows "
                             "int64 at axis %d",
                             fn, name, d);
            return false;
        }
    }
    if (__builtin_mul_overflow(n, (int64_t)8, &n)) {
        te_ctx_set_error(ctx, TE_ERR_OVERFLOW, "%s: tensor '%s' byte size overflows int64", fn,
                         name);
        return false;
    }
    return true;
}

te_tensor *te_placeholder(te_ctx *ctx, const char *name, te_dtype dtype, int ndim,
                          const int64_t *shape)
{
    if (!ctx || !check_name(ctx, "te_placeholder", name) ||
        !check_shape(ctx, "te_placeholder", name, ndim, shape))
        return NULL;
    if ((unsigned)dtype >= TE_DTYPE_COUNT) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_placeholder: tensor '%s' has invalid dtype %d", name,
                         (int)dtype);
        return NULL;
    }
    te_tensor *t = te__alloc(ctx, sizeof *t);
    if (!t)
        return NULL;
    t->kind = TE_T_PLACEHOLDER;
    t->owner = te__ctx_id(ctx);
    t->home = ctx;
    t->name = te__strdup(ctx, name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->id = te__next_id(ctx);
    return t;
}

/* ---- Validation of a compute body ------------------------------------------------------ */

typedef struct {
    te_ctx *ctx;
    const char *tname;
    int ndim;
    te_expr *const *axes;
    const te_expr *reduce; /* the top-level reduction, if any */
    te__range_map ranges;  /* every axis over [0, extent) */
    int err;
} check_ctx;

static void check_expr(check_ctx *c, const te_expr *e, bool guarded);

static void check_var(check_ctx *c, const te_expr *e)
{
    if (e->u.var.vkind == TE_VAR_AXIS) {
        for (int d = 0; d < c->ndim; d++)
            if (c->axes[d] == e)
                return;
        c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                  "compute '%s': axis '%s' is not one of "
                                  "its output axes",
                                  c->tname, e->u.var.name);
    } else if (e->u.var.vkind == TE_VAR_REDUCE) {
        if (c->reduce) {
            for (int a = 0; a < c->reduce->u.red.n; a++)
                if (c->reduce->u.red.axes[a] == e)
                    return;
        }
        c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                  "compute '%s': reduction axis '%s' is used "
                                  "outside a reduction over it",
                                  c->tname, e->u.var.name);
    } else if (e->u.var.vkind == TE_VAR_FREE) {
        c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                  "compute '%s': free variable '%s' is not "
                                  "bound by any axis",
                                  c->tname, e->u.var.name);
    }
}

static void check_read(check_ctx *c, const te_expr *e, bool guarded)
{
    const te_tensor *t = e->u.read.t;
    for (int d = 0; d < e->u.read.n && !c->err; d++) {
        check_expr(c, e->u.read.idx[d], guarded);
        int64_t lo, hi;
        if (!c->err && !guarded && te__expr_const_bounds(e->u.read.idx[d], &c->ranges, &lo, &hi) &&
            (lo < 0 || hi >= t->shape[d])) {
            c->err = te_ctx_set_error(c->ctx, TE_ERR_BOUNDS,
                                      "compute '%s': read of tensor '%s' axis %d spans [%lld, "
                                      "%lld] but the axis has extent %lld (guard it with "
                                      "te_if_then_else or pad the input)",
                                      c->tname, t->name, d, (long long)lo, (long long)hi,
                                      (long long)t->shape[d]);
        }
    }
}

static void check_expr(check_ctx *c, const te_expr *e, bool guarded)
{
    if (c->err)
        return;
    if (!te__ctx_may_use(c->ctx, e->owner)) {
        c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                  "compute '%s': its body uses an expression built in another "
                                  "context (te_ctx_create_child makes a context that may)",
                                  c->tname);
        return;
    }
    switch (e->kind) {
    case TE_E_VAR:
        check_var(c, e);
        break;
    case TE_E_READ:
        check_read(c, e, guarded);
        break;
    case TE_E_REDUCE:
        if (te__is_tuple_reduce(e))
            c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                      "compute '%s': a tuple reduction (te_reduce_tuple) is "
                                      "only valid as the whole body of te_compute_tuple",
                                      c->tname);
        else
            c->err = te_ctx_set_error(c->ctx, TE_ERR_ARG,
                                      "compute '%s': a reduction must be the "
                                      "whole body of a compute (put the rest in another "
                                      "compute)",
                                      c->tname);
        break;
    case TE_E_IF:
        check_expr(c, e->u.sel.c, guarded);
        check_expr(c, e->u.sel.t, true);
        check_expr(c, e->u.sel.f, true);
        break;
    case TE_E_BINARY:
        check_expr(c, e->u.bin.a, guarded);
        check_expr(c, e->u.bin.b, guarded);
        break;
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
        check_expr(c, e->u.un.a, guarded);
        break;
    case TE_E_SELECT:
        check_expr(c, e->u.sel.c, guarded);
        check_expr(c, e->u.sel.t, guarded);
        check_expr(c, e->u.sel.f, guarded);
        break;
    case TE_E_CALL:
        for (int i = 0; i < e->u.call.n; i++)
            check_expr(c, e->u.call.args[i], guarded);
        break;
    default:
        break;
    }
}

te_tensor *te_compute(te_ctx *ctx, const char *name, int ndim, te_expr *const *axes, te_expr *body)
{
    if (!ctx || !check_name(ctx, "te_compute", name))
        return NULL;
    if (!body) {
        /* Keeps the first error: a body that failed to build reports its own cause. */
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute: tensor '%s' has a NULL body", name);
        return NULL;
    }
    if (ndim < 0 || ndim > TE_MAX_DIMS || (ndim > 0 && !axes)) {
        te_ctx_set_error(ctx, TE_ERR_SHAPE,
                         "te_compute: tensor '%s' has rank %d; ranks 0 to %d "
                         "are supported",
                         name, ndim, TE_MAX_DIMS);
        return NULL;
    }
    int64_t shape[TE_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (!axes[d]) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute: output axis %d of '%s' is NULL", d,
                             name);
            return NULL;
        }
        if (axes[d]->kind != TE_E_VAR || axes[d]->u.var.vkind != TE_VAR_AXIS) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_compute: output axis %d of '%s' is not a "
                             "te_axis variable",
                             d, name);
            return NULL;
        }
        for (int e = 0; e < d; e++) {
            if (axes[e] == axes[d]) {
                te_ctx_set_error(ctx, TE_ERR_ARG,
                                 "te_compute: axis '%s' appears twice in the "
                                 "output axes of '%s'",
                                 axes[d]->u.var.name, name);
                return NULL;
            }
        }
        shape[d] = axes[d]->u.var.extent;
    }
    if (!check_shape(ctx, "te_compute", name, ndim, shape))
        return NULL;
    if (body->lanes != 1) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute '%s': body must be scalar", name);
        return NULL;
    }
    check_ctx c = {ctx, name, ndim, axes, NULL, {0, 0, NULL, NULL, NULL}, 0};
    for (int d = 0; d < ndim && !c.err; d++)
        c.err = te__ranges_push(ctx, &c.ranges, axes[d], 0, axes[d]->u.var.extent - 1);
    if (te__is_tuple_reduce(body) && body->u.red.comp < 0) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_compute '%s': a tuple reduction (te_reduce_tuple) is only valid "
                         "as the body of te_compute_tuple",
                         name);
        return NULL;
    }
    if (body->kind == TE_E_REDUCE) {
        c.reduce = body;
        for (int a = 0; a < body->u.red.n && !c.err; a++) {
            const te_expr *r = body->u.red.axes[a];
            if (r->kind == TE_E_VAR && r->u.var.extent > 0)
                c.err = te__ranges_push(ctx, &c.ranges, r, 0, r->u.var.extent - 1);
        }
        if (!c.err)
            check_expr(&c, body->u.red.src, false);
        for (int i = 0; i < body->u.red.nsrc && !c.err; i++)
            check_expr(&c, body->u.red.srcs[i], false);
    } else {
        check_expr(&c, body, false);
    }
    if (c.err)
        return NULL;
    te_tensor *t = te__alloc(ctx, sizeof *t);
    if (!t)
        return NULL;
    t->kind = TE_T_COMPUTE;
    t->owner = te__ctx_id(ctx);
    t->home = ctx;
    t->name = te__strdup(ctx, name);
    t->dtype = body->dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        t->axes[d] = axes[d];
    }
    t->body = body;
    t->id = te__next_id(ctx);
    return t;
}

te_tensor *te_compute_shape(te_ctx *ctx, const char *name, int ndim, const int64_t *shape,
                            te_compute_fn fn, void *user)
{
    if (!ctx)
        return NULL;
    if (!fn) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_compute_shape: '%s' needs a body function",
                         name ? name : "?");
        return NULL;
    }
    if (!check_name(ctx, "te_compute_shape", name) ||
        !check_shape(ctx, "te_compute_shape", name, ndim, shape))
        return NULL;
    te_expr *axes[TE_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        char nm[16];
        snprintf(nm, sizeof nm, "i%d", d);
        if (!(axes[d] = te_axis(ctx, nm, shape[d])))
            return NULL;
    }
    te_expr *body = fn(ctx, axes, user);
    return body ? te_compute(ctx, name, ndim, axes, body) : NULL;
}

const char *te_tensor_name(const te_tensor *t) { return t ? t->name : NULL; }
te_dtype te_tensor_dtype(const te_tensor *t) { return t ? t->dtype : TE_F32; }
int te_tensor_ndim(const te_tensor *t) { return t ? t->ndim : 0; }
const int64_t *te_tensor_shape(const te_tensor *t) { return t ? t->shape : NULL; }
int te_tensor_is_placeholder(const te_tensor *t) { return t && t->kind == TE_T_PLACEHOLDER; }

int64_t te_tensor_numel(const te_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; t && d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

void te_tensor_set_tag(te_ctx *ctx, te_tensor *t, const char *tag)
{
    if (ctx && t)
        t->tag = te__strdup(ctx, tag);
}

const char *te_tensor_tag(const te_tensor *t) { return t && t->tag ? t->tag : ""; }
