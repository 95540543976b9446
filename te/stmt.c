/* Lowered statement constructors and the generic statement rebuild. */
#include <string.h>

#include "te/internal.h"

static te_stmt *new_stmt(te_ctx *ctx, te_stmt_kind kind)
{
    te_stmt *s = te__alloc(ctx, sizeof *s);
    if (s)
        s->kind = kind;
    return s;
}

te_stmt *te__for(te_ctx *ctx, te_expr *var, te_expr *min, te_expr *extent, te_for_kind kind,
                 te_stmt *body)
{
    if (!var || !min || !extent || !body)
        return NULL;
    te_stmt *s = new_stmt(ctx, TE_S_FOR);
    if (s) {
        s->u.loop.var = var;
        s->u.loop.min = min;
        s->u.loop.extent = extent;
        s->u.loop.fkind = kind;
        s->u.loop.body = body;
    }
    return s;
}

te_stmt *te__seq(te_ctx *ctx, int n, te_stmt *const *v)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (v[i])
            m += v[i]->kind == TE_S_SEQ ? v[i]->u.seq.n : 1;
    if (m == 1) {
        for (int i = 0; i < n; i++)
            if (v[i])
                return v[i]->kind == TE_S_SEQ ? v[i]->u.seq.v[0] : v[i];
    }
    te_stmt *s = new_stmt(ctx, TE_S_SEQ);
    if (!s)
        return NULL;
    s->u.seq.v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(m ? m : 1));
    if (!s->u.seq.v)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (!v[i])
            continue;
        if (v[i]->kind == TE_S_SEQ) {
            for (int j = 0; j < v[i]->u.seq.n; j++)
                s->u.seq.v[s->u.seq.n++] = v[i]->u.seq.v[j];
        } else {
            s->u.seq.v[s->u.seq.n++] = v[i];
        }
    }
    return s;
}

te_stmt *te__seq2(te_ctx *ctx, te_stmt *a, te_stmt *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return te__seq(ctx, 2, (te_stmt *[]){a, b});
}

te_stmt *te__if(te_ctx *ctx, te_expr *cond, te_stmt *then_s, te_stmt *else_s)
{
    if (!cond || !then_s)
        return NULL;
    te_stmt *s = new_stmt(ctx, TE_S_IF);
    if (s) {
        s->u.cond.cond = cond;
        s->u.cond.then_s = then_s;
        s->u.cond.else_s = else_s;
    }
    return s;
}

te_stmt *te__store(te_ctx *ctx, te_buf *buf, int n, te_expr *const *idx, te_expr *value)
{
    if (!value)
        return NULL;
    te_stmt *s = new_stmt(ctx, TE_S_STORE);
    if (!s)
        return NULL;
    s->u.store.buf = buf;
    s->u.store.n = n;
    s->u.store.idx = te__alloc(ctx, sizeof(te_expr *) * (size_t)(n ? n : 1));
    if (!s->u.store.idx)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (!idx[i])
            return NULL;
        s->u.store.idx[i] = idx[i];
    }
    s->u.store.value = value;
    return s;
}

te_stmt *te__alloc_stmt(te_ctx *ctx, te_buf *buf, te_stmt *body)
{
    if (!body)
        return NULL;
    te_stmt *s = new_stmt(ctx, TE_S_ALLOC);
    if (s) {
        s->u.alloc.buf = buf;
        s->u.alloc.body = body;
    }
    return s;
}

te_stmt *te__let(te_ctx *ctx, te_expr *var, te_expr *value, te_stmt *body)
{
    if (!var || !value || !body)
        return NULL;
    te_stmt *s = new_stmt(ctx, TE_S_LET);
    if (s) {
        s->u.let.var = var;
        s->u.let.value = value;
        s->u.let.body = body;
    }
    return s;
}

te_stmt *te__comment(te_ctx *ctx, const char *text)
{
    te_stmt *s = new_stmt(ctx, TE_S_COMMENT);
    if (s)
        s->u.comment.text = te__strdup(ctx, text);
    return s;
}

te_stmt *te__intrin_call(te_ctx *ctx, const struct te_tensor_intrin *in, const char *name,
                         bool overwrite, int nops, te_expr *const *addr, const int *nfree,
                         const int *sdim, const int64_t *smul, int64_t n)
{
    te_stmt *s = new_stmt(ctx, TE_S_INTRIN);
    te_expr **a = te__alloc(ctx, sizeof(te_expr *) * (size_t)(nops > 0 ? nops : 1));
    int *nf = te__alloc(ctx, sizeof(int) * (size_t)(nops > 0 ? nops : 1));
    int *sd = te__alloc(ctx, sizeof(int) * (size_t)(nops > 0 ? nops : 1) * TE_MAX_DIMS);
    int64_t *sm = te__alloc(ctx, sizeof(int64_t) * (size_t)(nops > 0 ? nops : 1) * TE_MAX_DIMS);
    const char *nm = te__strdup(ctx, name);
    if (!s || !a || !nf || !sd || !sm || !nm)
        return NULL;
    for (int o = 0; o < nops; o++)
        if (!addr[o] || addr[o]->kind != TE_E_LOAD)
            return NULL;
    memcpy(a, addr, sizeof(te_expr *) * (size_t)nops);
    memcpy(nf, nfree, sizeof(int) * (size_t)nops);
    memcpy(sd, sdim, sizeof(int) * (size_t)nops * TE_MAX_DIMS);
    memcpy(sm, smul, sizeof(int64_t) * (size_t)nops * TE_MAX_DIMS);
    s->u.intrin.in = in;
    s->u.intrin.name = nm;
    s->u.intrin.overwrite = overwrite;
    s->u.intrin.nops = nops;
    s->u.intrin.addr = a;
    s->u.intrin.nfree = nf;
    s->u.intrin.sdim = sd;
    s->u.intrin.smul = sm;
    s->u.intrin.n = n;
    return s;
}

te_buf *te__buf_new(te_ctx *ctx, const char *name, te_dtype dtype, int ndim, const int64_t *shape,
                    te_scope scope)
{
    te_buf *b = te__alloc(ctx, sizeof *b);
    if (!b)
        return NULL;
    b->name = te__strdup(ctx, name);
    b->dtype = dtype;
    b->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        b->shape[d] = shape[d];
    b->scope = scope;
    b->arg_index = -1;
    b->id = te__next_id(ctx);
    b->prefetched = false;
    return b;
}

static te_expr *mut_e(te_ctx *ctx, te_expr *e, te__expr_mutator fe, void *user)
{
    return fe ? te__expr_mutate(ctx, e, fe, user) : e;
}

te_stmt *te__stmt_mutate(te_ctx *ctx, te_stmt *s, te__stmt_mutator fs, te__expr_mutator fe,
                         void *user)
{
    if (!s)
        return NULL;
    te_stmt *r = s;
    switch (s->kind) {
    case TE_S_FOR: {
        te_expr *mn = mut_e(ctx, s->u.loop.min, fe, user);
        te_expr *ex = mut_e(ctx, s->u.loop.extent, fe, user);
        te_stmt *b = te__stmt_mutate(ctx, s->u.loop.body, fs, fe, user);
        if (!mn || !ex || !b)
            return NULL;
        if (mn != s->u.loop.min || ex != s->u.loop.extent || b != s->u.loop.body) {
            if (!(r = new_stmt(ctx, TE_S_FOR)))
                return NULL;
            r->u.loop = s->u.loop;
            r->u.loop.min = mn;
            r->u.loop.extent = ex;
            r->u.loop.body = b;
        }
        break;
    }
    case TE_S_SEQ: {
        te_stmt **v = NULL;
        int n = s->u.seq.n;
        for (int i = 0; i < n; i++) {
            te_stmt *c = te__stmt_mutate(ctx, s->u.seq.v[i], fs, fe, user);
            if (!c && te_ctx_errcode(ctx) != TE_OK)
                return NULL;
            if (c != s->u.seq.v[i] && !v) {
                if (!(v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)n)))
                    return NULL;
                memcpy(v, s->u.seq.v, sizeof(te_stmt *) * (size_t)n);
            }
            if (v)
                v[i] = c;
        }
        if (v)
            r = te__seq(ctx, n, v); /* drops statements a mutator removed (NULL) */
        break;
    }
    case TE_S_IF: {
        te_expr *c = mut_e(ctx, s->u.cond.cond, fe, user);
        te_stmt *t = te__stmt_mutate(ctx, s->u.cond.then_s, fs, fe, user);
        te_stmt *e = s->u.cond.else_s ? te__stmt_mutate(ctx, s->u.cond.else_s, fs, fe, user) : NULL;
        if (!c || (!t && te_ctx_errcode(ctx) != TE_OK))
            return NULL;
        if (c != s->u.cond.cond || t != s->u.cond.then_s || e != s->u.cond.else_s) {
            if (!t && !e)
                return NULL;
            if (!(r = new_stmt(ctx, TE_S_IF)))
                return NULL;
            if (!t) { /* then branch vanished: negate */
                c = te_not(ctx, c);
                t = e;
                e = NULL;
            }
            r->u.cond.cond = c;
            r->u.cond.then_s = t;
            r->u.cond.else_s = e;
        }
        break;
    }
    case TE_S_STORE: {
        te_expr *v = mut_e(ctx, s->u.store.value, fe, user);
        bool changed = v != s->u.store.value;
        te_expr *idx[TE_MAX_DIMS];
        for (int i = 0; i < s->u.store.n; i++) {
            idx[i] = mut_e(ctx, s->u.store.idx[i], fe, user);
            if (!idx[i])
                return NULL;
            changed |= idx[i] != s->u.store.idx[i];
        }
        if (!v)
            return NULL;
        if (changed) {
            if (!(r = te__store(ctx, s->u.store.buf, s->u.store.n, idx, v)))
                return NULL;
            r->u.store.nontemporal = s->u.store.nontemporal;
        }
        break;
    }
    case TE_S_ALLOC: {
        te_stmt *b = te__stmt_mutate(ctx, s->u.alloc.body, fs, fe, user);
        if (!b)
            return NULL;
        if (b != s->u.alloc.body)
            r = te__alloc_stmt(ctx, s->u.alloc.buf, b);
        break;
    }
    case TE_S_LET: {
        te_expr *v = mut_e(ctx, s->u.let.value, fe, user);
        te_stmt *b = te__stmt_mutate(ctx, s->u.let.body, fs, fe, user);
        if (!v || !b)
            return NULL;
        if (v != s->u.let.value || b != s->u.let.body)
            r = te__let(ctx, s->u.let.var, v, b);
        break;
    }
    case TE_S_INTRIN: {
        te_expr *a[TE_INTRIN_STMT_MAX_OPS];
        bool changed = false;
        for (int o = 0; o < s->u.intrin.nops; o++) {
            if (!(a[o] = mut_e(ctx, s->u.intrin.addr[o], fe, user)))
                return NULL;
            if (a[o]->kind != TE_E_LOAD) /* an address stays an element of its buffer */
                return te_ctx_set_error(ctx, TE_ERR_INTERNAL,
                                        "intrinsic %s: an operand address was rewritten into a "
                                        "non-load",
                                        s->u.intrin.name),
                       NULL;
            changed |= a[o] != s->u.intrin.addr[o];
        }
        if (changed)
            r = te__intrin_call(ctx, s->u.intrin.in, s->u.intrin.name, s->u.intrin.overwrite,
                                s->u.intrin.nops, a, s->u.intrin.nfree, s->u.intrin.sdim,
                                s->u.intrin.smul, s->u.intrin.n);
        break;
    }
    case TE_S_BARRIER:
    case TE_S_COMMENT:
        break;
    }
    if (!r)
        return NULL;
    return fs ? fs(ctx, r, user) : r;
}

static te_expr *subst_e(te_ctx *ctx, te_expr *e, void *user)
{
    const te__subst *m = user;
    if (e->kind == TE_E_VAR) {
        for (int i = 0; i < m->n; i++)
            if (m->from[i] == e)
                return m->to[i];
    }
    (void)ctx;
    return e;
}

te_stmt *te__stmt_substitute(te_ctx *ctx, te_stmt *s, const te__subst *map)
{
    if (!map || !map->n)
        return s;
    return te__stmt_mutate(ctx, s, NULL, subst_e, (void *)map);
}

static void visit_e(const te_expr *e, te__expr_visitor fe, void *user)
{
    if (fe && e)
        te__expr_visit(e, fe, user);
}

void te__stmt_visit(const te_stmt *s, te__stmt_visitor fs, te__expr_visitor fe, void *user)
{
    if (!s || (fs && !fs(s, user)))
        return;
    switch (s->kind) {
    case TE_S_FOR:
        visit_e(s->u.loop.min, fe, user);
        visit_e(s->u.loop.extent, fe, user);
        te__stmt_visit(s->u.loop.body, fs, fe, user);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            te__stmt_visit(s->u.seq.v[i], fs, fe, user);
        break;
    case TE_S_IF:
        visit_e(s->u.cond.cond, fe, user);
        te__stmt_visit(s->u.cond.then_s, fs, fe, user);
        te__stmt_visit(s->u.cond.else_s, fs, fe, user);
        break;
    case TE_S_STORE:
        for (int i = 0; i < s->u.store.n; i++)
            visit_e(s->u.store.idx[i], fe, user);
        visit_e(s->u.store.value, fe, user);
        break;
    case TE_S_ALLOC:
        te__stmt_visit(s->u.alloc.body, fs, fe, user);
        break;
    case TE_S_LET:
        visit_e(s->u.let.value, fe, user);
        te__stmt_visit(s->u.let.body, fs, fe, user);
        break;
    case TE_S_INTRIN:
        for (int o = 0; o < s->u.intrin.nops; o++)
            visit_e(s->u.intrin.addr[o], fe, user);
        break;
    case TE_S_BARRIER:
    case TE_S_COMMENT:
        break;
    }
}

typedef struct {
    const te_buf *b;
    bool hit;
} loads_ctx;

static bool loads_fn(const te_expr *e, void *user)
{
    loads_ctx *c = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == c->b)
        c->hit = true;
    return !c->hit;
}

bool te__stmt_loads(const te_stmt *s, const te_buf *b)
{
    loads_ctx c = {b, false};
    te__stmt_visit(s, NULL, loads_fn, &c);
    return c.hit;
}

te_stmt *te__stmt_map_children(te_ctx *ctx, te_stmt *s, te__stmt_child_fn fn, void *user,
                               bool *failed)
{
    if (!s || *failed)
        return NULL;
    te_stmt *r = s;
    switch (s->kind) {
    case TE_S_SEQ: {
        int n = s->u.seq.n, left = 0;
        te_stmt **v = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(n ? n : 1));
        if (!v) {
            *failed = true;
            return NULL;
        }
        bool changed = false;
        for (int i = 0; i < n; i++) {
            v[i] = fn(user, s->u.seq.v[i]);
            if (*failed)
                return NULL;
            changed |= v[i] != s->u.seq.v[i];
            left += v[i] != NULL;
        }
        if (!changed)
            return s;
        if (!left)
            return NULL;
        r = te__seq(ctx, n, v);
        break;
    }
    case TE_S_IF: {
        te_stmt *t = fn(user, s->u.cond.then_s);
        te_stmt *e = *failed ? NULL : fn(user, s->u.cond.else_s);
        if (*failed)
            return NULL;
        if (t == s->u.cond.then_s && e == s->u.cond.else_s)
            return s;
        if (!t && !e)
            return NULL;
        te_expr *c = s->u.cond.cond;
        if (!t) { /* only the else branch is left: negate the condition */
            c = te_not(ctx, c);
            t = e;
            e = NULL;
        }
        r = te__if(ctx, c, t, e);
        break;
    }
    case TE_S_LET:
    case TE_S_ALLOC: {
        te_stmt *body = s->kind == TE_S_LET ? s->u.let.body : s->u.alloc.body;
        te_stmt *b = fn(user, body);
        if (*failed || !b)
            return NULL;
        if (b == body)
            return s;
        r = s->kind == TE_S_LET ? te__let(ctx, s->u.let.var, s->u.let.value, b)
                                : te__alloc_stmt(ctx, s->u.alloc.buf, b);
        break;
    }
    default:
        return s;
    }
    if (!r)
        *failed = true;
    return r;
}
