/* Helpers shared by the operator files, and the stage walker (te_op_find, te_op_stages). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/internal.h"
#include "te/ops/ops_internal.h"

static int vfail(const op_site *s, int code, const char *fmt, va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return te_ctx_set_error(s->ctx, code, "%s '%s': %s", s->op, s->name ? s->name : "?", msg);
}

void *op__fail(const op_site *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(s, code, fmt, ap);
    va_end(ap);
    return NULL;
}

int op__failc(const op_site *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(s, code, fmt, ap);
    va_end(ap);
    return rc;
}

bool op__need(const op_site *s, const te_tensor *t, const char *role)
{
    if (!t) {
        op__fail(s, TE_ERR_ARG, "%s is NULL", role);
        return false;
    }
    return true;
}

bool op__rank(const op_site *s, const te_tensor *t, const char *role, int ndim, const char *what)
{
    if (!op__need(s, t, role))
        return false;
    if (te_tensor_ndim(t) != ndim) {
        op__fail(s, TE_ERR_SHAPE, "%s ('%s') has rank %d but must have rank %d %s", role,
                 te_tensor_name(t), te_tensor_ndim(t), ndim, what);
        return false;
    }
    return true;
}

bool op__float(const op_site *s, const te_tensor *t, const char *role)
{
    if (!te_dtype_is_float(te_tensor_dtype(t))) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') has dtype %s but the operator needs f32 or f64", role,
                 te_tensor_name(t), te_dtype_str(te_tensor_dtype(t)));
        return false;
    }
    return true;
}

bool op__same_dtype(const op_site *s, const te_tensor *ref, const te_tensor *t, const char *role)
{
    if (te_tensor_dtype(t) == TE_BOOL) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') has dtype bool; arithmetic needs a numeric dtype",
                 role, te_tensor_name(t));
        return false;
    }
    if (te_tensor_dtype(t) != te_tensor_dtype(ref)) {
        op__fail(s, TE_ERR_DTYPE, "%s ('%s') has dtype %s but '%s' has %s (cast first)", role,
                 te_tensor_name(t), te_dtype_str(te_tensor_dtype(t)), te_tensor_name(ref),
                 te_dtype_str(te_tensor_dtype(ref)));
        return false;
    }
    return true;
}

bool op__axis(const op_site *s, const te_tensor *t, int *axis)
{
    int nd = te_tensor_ndim(t), a = *axis;
    if (a < -nd || a >= nd || nd == 0) {
        op__fail(s, TE_ERR_ARG, "axis %d is out of range for input '%s' of rank %d", a,
                 te_tensor_name(t), nd);
        return false;
    }
    *axis = a < 0 ? a + nd : a;
    return true;
}

const char *op__stage_name(te_ctx *ctx, const char *name, const char *suffix)
{
    return te__sprintf(ctx, "%s_%s", name, suffix);
}

te_tensor *op__tag(te_ctx *ctx, te_tensor *t, const char *tag)
{
    if (t)
        te_tensor_set_tag(ctx, t, tag);
    return t;
}

bool op__axes(te_ctx *ctx, int ndim, const int64_t *shape, const char *const *names, te_expr **axes)
{
    for (int d = 0; d < ndim; d++) {
        char nm[16];
        snprintf(nm, sizeof nm, "i%d", d);
        if (!(axes[d] = te_axis(ctx, names && names[d] ? names[d] : nm, shape[d])))
            return false;
    }
    return true;
}

te_expr *op__mad(te_ctx *ctx, te_expr *a, int64_t s, te_expr *b)
{
    te_expr *p = s == 1 ? a : te_mul(ctx, a, te_int(ctx, s));
    if (!b)
        return p;
    return te_add(ctx, p, b);
}

te_expr *op__c(te_ctx *ctx, te_dtype dt, double v) { return te_const(ctx, dt, v); }

te_tensor *op__pad_hw(const op_site *s, te_tensor *X, int ax_h, int ax_w, int64_t ph, int64_t pw,
                      double value, const char *tag)
{
    if (ph == 0 && pw == 0)
        return X;
    te_ctx *ctx = s->ctx;
    const int64_t *xs = te_tensor_shape(X);
    int64_t shape[4] = {xs[0], xs[1], xs[2], xs[3]};
    shape[ax_h] += 2 * ph;
    shape[ax_w] += 2 * pw;
    static const char *const names_nchw[4] = {"n", "c", "y", "x"};
    static const char *const names_nhwc[4] = {"n", "y", "x", "c"};
    te_expr *ax[4];
    if (!op__axes(ctx, 4, shape, ax_h == 2 ? names_nchw : names_nhwc, ax))
        return NULL;
    te_expr *idx[4] = {ax[0], ax[1], ax[2], ax[3]};
    te_expr *y = ax[ax_h], *x = ax[ax_w];
    idx[ax_h] = te_sub(ctx, y, te_int(ctx, ph));
    idx[ax_w] = te_sub(ctx, x, te_int(ctx, pw));
    te_expr *cond = te_and(
        ctx, te_and(ctx, te_ge(ctx, y, te_int(ctx, ph)), te_lt(ctx, y, te_int(ctx, ph + xs[ax_h]))),
        te_and(ctx, te_ge(ctx, x, te_int(ctx, pw)), te_lt(ctx, x, te_int(ctx, pw + xs[ax_w]))));
    te_expr *body = te_if_then_else(ctx, cond, te_read(ctx, X, 4, idx),
                                    te_const(ctx, te_tensor_dtype(X), value));
    te_tensor *P = te_compute(ctx, op__stage_name(ctx, s->name, "pad"), 4, ax, body);
    return op__tag(ctx, P, te__sprintf(ctx, "%s_pad", tag));
}

/* ---- Stage walker ------------------------------------------------------------------- */

typedef struct walk {
    te_tensor **seen;
    int n, cap;
    te_tensor **out; /* post-order list of computes */
    int nout, capout;
    bool oom;
} walk;

static bool seen_add(walk *w, te_tensor *t)
{
    for (int i = 0; i < w->n; i++)
        if (w->seen[i] == t)
            return false;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        te_tensor **p = realloc(w->seen, sizeof *p * (size_t)cap);
        if (!p) {
            w->oom = true;
            return false;
        }
        w->seen = p;
        w->cap = cap;
    }
    w->seen[w->n++] = t;
    return true;
}

static void walk_tensor(walk *w, te_tensor *t);

static bool visit_read(const te_expr *e, void *user)
{
    if (e->kind == TE_E_READ)
        walk_tensor(user, e->u.read.t);
    return true;
}

static void walk_tensor(walk *w, te_tensor *t)
{
    if (!t || t->kind != TE_T_COMPUTE || !seen_add(w, t))
        return;
    te__expr_visit(t->body, visit_read, w);
    if (w->nout == w->capout) {
        int cap = w->capout ? 2 * w->capout : 16;
        te_tensor **p = realloc(w->out, sizeof *p * (size_t)cap);
        if (!p) {
            w->oom = true;
            return;
        }
        w->out = p;
        w->capout = cap;
    }
    w->out[w->nout++] = t;
}

te_tensor *te_op_find(te_tensor *out, const char *name)
{
    if (!out || !name)
        return NULL;
    walk w = {0};
    walk_tensor(&w, out);
    te_tensor *found = NULL;
    for (int i = 0; i < w.nout && !found; i++) {
        if (strcmp(w.out[i]->name, name) == 0)
            found = w.out[i];
        /* the other outputs of a tuple compute (argmax's value, Welford's count) */
        for (int k = 0; k < w.out[i]->tuple_n && !found; k++)
            if (strcmp(w.out[i]->tuple[k]->name, name) == 0)
                found = w.out[i]->tuple[k];
    }
    free(w.seen);
    free(w.out);
    return found;
}

int te_op_stages(te_tensor *out, te_tensor **stages, int cap)
{
    if (!out)
        return 0;
    walk w = {0};
    walk_tensor(&w, out);
    for (int i = 0; i < w.nout && i < cap; i++)
        stages[i] = w.out[i];
    int n = w.nout;
    free(w.seen);
    free(w.out);
    return n;
}
