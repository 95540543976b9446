/* Generic traversal of expressions: mutate (rebuild), visit, substitute, compare. */
#include <string.h>

#include "te/internal.h"

static te_expr *clone(te_ctx *ctx, const te_expr *e)
{
    te_expr *c = te__alloc(ctx, sizeof *c);
    if (c)
        *c = *e;
    return c;
}

static te_expr **clone_list(te_ctx *ctx, te_expr **v, int n)
{
    te_expr **c = te__alloc(ctx, sizeof(te_expr *) * (size_t)(n ? n : 1));
    if (c && n)
        memcpy(c, v, sizeof(te_expr *) * (size_t)n);
    return c;
}

/* Mutates a list; returns a new array if anything changed, the old one otherwise, NULL on
 * failure. */
static te_expr **mutate_list(te_ctx *ctx, te_expr **v, int n, te__expr_mutator fn, void *user)
{
    te_expr **out = v;
    for (int i = 0; i < n; i++) {
        te_expr *m = te__expr_mutate(ctx, v[i], fn, user);
        if (!m)
            return NULL;
        if (m != v[i]) {
            if (out == v && !(out = clone_list(ctx, v, n)))
                return NULL;
            out[i] = m;
        }
    }
    return out;
}

static int max_lanes(int a, int b) { return a > b ? a : b; }

te_expr *te__expr_mutate(te_ctx *ctx, te_expr *e, te__expr_mutator fn, void *user)
{
    if (!e)
        return NULL;
    te_expr *r = e;
    switch (e->kind) {
    case TE_E_INT:
    case TE_E_FLOAT:
    case TE_E_VAR:
        break;
    case TE_E_BINARY: {
        te_expr *a = te__expr_mutate(ctx, e->u.bin.a, fn, user);
        te_expr *b = te__expr_mutate(ctx, e->u.bin.b, fn, user);
        if (!a || !b)
            return NULL;
        if (a != e->u.bin.a || b != e->u.bin.b) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.bin.a = a;
            r->u.bin.b = b;
            r->lanes = max_lanes(a->lanes, b->lanes);
        }
        break;
    }
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST: {
        te_expr *a = te__expr_mutate(ctx, e->u.un.a, fn, user);
        if (!a)
            return NULL;
        if (a != e->u.un.a) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.un.a = a;
            if (e->kind != TE_E_BCAST)
                r->lanes = a->lanes;
        }
        break;
    }
    case TE_E_SELECT:
    case TE_E_IF: {
        te_expr *c = te__expr_mutate(ctx, e->u.sel.c, fn, user);
        te_expr *t = te__expr_mutate(ctx, e->u.sel.t, fn, user);
        te_expr *f = te__expr_mutate(ctx, e->u.sel.f, fn, user);
        if (!c || !t || !f)
            return NULL;
        if (c != e->u.sel.c || t != e->u.sel.t || f != e->u.sel.f) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.sel.c = c;
            r->u.sel.t = t;
            r->u.sel.f = f;
            r->lanes = max_lanes(c->lanes, max_lanes(t->lanes, f->lanes));
        }
        break;
    }
    case TE_E_CALL: {
        te_expr *a[2] = {NULL, NULL};
        bool changed = false;
        for (int i = 0; i < e->u.call.n; i++) {
            if (!(a[i] = te__expr_mutate(ctx, e->u.call.args[i], fn, user)))
                return NULL;
            changed |= a[i] != e->u.call.args[i];
        }
        if (changed) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.call.args[0] = a[0];
            r->u.call.args[1] = a[1];
            r->lanes = max_lanes(a[0]->lanes, a[1] ? a[1]->lanes : 1);
        }
        break;
    }
    case TE_E_READ: {
        te_expr **idx = mutate_list(ctx, e->u.read.idx, e->u.read.n, fn, user);
        if (!idx)
            return NULL;
        if (idx != e->u.read.idx) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.read.idx = idx;
        }
        break;
    }
    case TE_E_LOAD: {
        te_expr **idx = mutate_list(ctx, e->u.load.idx, e->u.load.n, fn, user);
        if (!idx)
            return NULL;
        if (idx != e->u.load.idx) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.load.idx = idx;
            r->lanes = 1;
            for (int i = 0; i < e->u.load.n; i++)
                r->lanes = max_lanes(r->lanes, idx[i]->lanes);
        }
        break;
    }
    case TE_E_REDUCE: {
        if (e->u.red.nsrc > 0) {
            /* A tuple reduction: every source, src being one of them. */
            te_expr **srcs = mutate_list(ctx, e->u.red.srcs, e->u.red.nsrc, fn, user);
            te_expr **axes = srcs ? mutate_list(ctx, e->u.red.axes, e->u.red.n, fn, user) : NULL;
            if (!srcs || !axes)
                return NULL;
            if (srcs != e->u.red.srcs || axes != e->u.red.axes) {
                if (!(r = clone(ctx, e)))
                    return NULL;
                r->u.red.srcs = srcs;
                r->u.red.src = srcs[e->u.red.comp > 0 ? e->u.red.comp : 0];
                r->u.red.axes = axes;
            }
            break;
        }
        te_expr *src = te__expr_mutate(ctx, e->u.red.src, fn, user);
        te_expr **axes = src ? mutate_list(ctx, e->u.red.axes, e->u.red.n, fn, user) : NULL;
        if (!src || !axes)
            return NULL;
        if (src != e->u.red.src || axes != e->u.red.axes) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.red.src = src;
            r->u.red.axes = axes;
        }
        break;
    }
    case TE_E_RAMP: {
        te_expr *b = te__expr_mutate(ctx, e->u.ramp.base, fn, user);
        if (!b)
            return NULL;
        if (b != e->u.ramp.base) {
            if (!(r = clone(ctx, e)))
                return NULL;
            r->u.ramp.base = b;
        }
        break;
    }
    }
    return fn ? fn(ctx, r, user) : r;
}

void te__expr_visit(const te_expr *e, te__expr_visitor fn, void *user)
{
    if (!e || !fn(e, user))
        return;
    switch (e->kind) {
    case TE_E_INT:
    case TE_E_FLOAT:
    case TE_E_VAR:
        break;
    case TE_E_BINARY:
        te__expr_visit(e->u.bin.a, fn, user);
        te__expr_visit(e->u.bin.b, fn, user);
        break;
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        te__expr_visit(e->u.un.a, fn, user);
        break;
    case TE_E_SELECT:
    case TE_E_IF:
        te__expr_visit(e->u.sel.c, fn, user);
        te__expr_visit(e->u.sel.t, fn, user);
        te__expr_visit(e->u.sel.f, fn, user);
        break;
    case TE_E_CALL:
        for (int i = 0; i < e->u.call.n; i++)
            te__expr_visit(e->u.call.args[i], fn, user);
        break;
    case TE_E_READ:
        for (int i = 0; i < e->u.read.n; i++)
            te__expr_visit(e->u.read.idx[i], fn, user);
        break;
    case TE_E_LOAD:
        for (int i = 0; i < e->u.load.n; i++)
            te__expr_visit(e->u.load.idx[i], fn, user);
        break;
    case TE_E_REDUCE:
        if (e->u.red.nsrc > 0)
            for (int i = 0; i < e->u.red.nsrc; i++)
                te__expr_visit(e->u.red.srcs[i], fn, user);
        else
            te__expr_visit(e->u.red.src, fn, user);
        for (int i = 0; i < e->u.red.n; i++)
            te__expr_visit(e->u.red.axes[i], fn, user);
        break;
    case TE_E_RAMP:
        te__expr_visit(e->u.ramp.base, fn, user);
        break;
    }
}

static te_expr *subst_fn(te_ctx *ctx, te_expr *e, void *user)
{
    (void)ctx;
    const te__subst *m = user;
    if (e->kind == TE_E_VAR) {
        for (int i = 0; i < m->n; i++)
            if (m->from[i] == e)
                return m->to[i];
    }
    return e;
}

te_expr *te__substitute(te_ctx *ctx, te_expr *e, const te__subst *map)
{
    if (!map || map->n == 0)
        return e;
    return te__expr_mutate(ctx, e, subst_fn, (void *)map);
}

typedef struct {
    const te_expr *v;
    bool found;
} uses_ctx;

static bool uses_fn(const te_expr *e, void *user)
{
    uses_ctx *u = user;
    if (e == u->v)
        u->found = true;
    return !u->found;
}

bool te__expr_uses_var(const te_expr *e, const te_expr *v)
{
    uses_ctx u = {v, false};
    te__expr_visit(e, uses_fn, &u);
    return u.found;
}

static bool load_fn(const te_expr *e, void *user)
{
    bool *found = user;
    if (e->kind == TE_E_LOAD)
        *found = true;
    return !*found;
}

bool te__expr_has_load(const te_expr *e)
{
    bool found = false;
    te__expr_visit(e, load_fn, &found);
    return found;
}

typedef struct {
    te_tensor **out;
    int n, max;
} tensors_ctx;

static bool tensors_fn(const te_expr *e, void *user)
{
    tensors_ctx *c = user;
    if (e->kind != TE_E_READ)
        return true;
    for (int i = 0; i < c->n && i < c->max; i++)
        if (c->out[i] == e->u.read.t)
            return true;
    if (c->n < c->max)
        c->out[c->n] = e->u.read.t;
    c->n++;
    return true;
}

int te__expr_tensors_read(const te_expr *e, te_tensor **out, int max)
{
    tensors_ctx c = {out, 0, max};
    te__expr_visit(e, tensors_fn, &c);
    return c.n;
}

bool te__expr_equal(const te_expr *a, const te_expr *b)
{
    if (a == b)
        return true;
    if (!a || !b || a->kind != b->kind || a->dtype != b->dtype || a->lanes != b->lanes)
        return false;
    switch (a->kind) {
    case TE_E_INT:
        return a->u.i == b->u.i;
    case TE_E_FLOAT:
        return a->u.f == b->u.f;
    case TE_E_VAR:
        return false; /* distinct variable nodes */
    case TE_E_BINARY:
        return a->u.bin.op == b->u.bin.op && te__expr_equal(a->u.bin.a, b->u.bin.a) &&
               te__expr_equal(a->u.bin.b, b->u.bin.b);
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        return te__expr_equal(a->u.un.a, b->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        return te__expr_equal(a->u.sel.c, b->u.sel.c) && te__expr_equal(a->u.sel.t, b->u.sel.t) &&
               te__expr_equal(a->u.sel.f, b->u.sel.f);
    case TE_E_CALL:
        if (a->u.call.fn != b->u.call.fn)
            return false;
        for (int i = 0; i < a->u.call.n; i++)
            if (!te__expr_equal(a->u.call.args[i], b->u.call.args[i]))
                return false;
        return true;
    case TE_E_READ:
        if (a->u.read.t != b->u.read.t)
            return false;
        for (int i = 0; i < a->u.read.n; i++)
            if (!te__expr_equal(a->u.read.idx[i], b->u.read.idx[i]))
                return false;
        return true;
    case TE_E_LOAD:
        if (a->u.load.buf != b->u.load.buf || a->u.load.n != b->u.load.n)
            return false;
        for (int i = 0; i < a->u.load.n; i++)
            if (!te__expr_equal(a->u.load.idx[i], b->u.load.idx[i]))
                return false;
        return true;
    case TE_E_REDUCE:
        return false;
    case TE_E_RAMP:
        return a->u.ramp.stride == b->u.ramp.stride &&
               te__expr_equal(a->u.ramp.base, b->u.ramp.base);
    }
    return false;
}
