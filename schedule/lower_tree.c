/*
 * Reductions folded as a balanced tree (te_reduce_tree), for make_stage in lower.c.
 *
 * Reduction loop k (E iterations) of a stage, with only spatial loops inside it, is unrolled
 * away: instead of E dependent steps acc = combine(acc, v_k), the update at the innermost loop
 * binds the E values and combines them pairwise, level by level, then once into the
 * accumulator:
 *
 *     let t0 = v_0; ...; let t{E-1} = v_{E-1};
 *     let u0 = combine(t0, t1); let u1 = combine(t2, t3); ...     (ceil(log2 E) levels)
 *     acc = combine(acc, root)
 *
 * The spatial loops that were inside k now hold the whole fold (each point's fold is
 * independent of the others', so moving k inside them keeps every result). A tuple reducer
 * folds every component with its own combine (te__reduce_combine_tuple), so a node of the tree
 * is a tuple of locals. The combines are the reducer's own: this reassociates the reduction,
 * which every reducer allows (rfactor and cross-thread folds rely on it too).
 */
#include <stdio.h>

#include "schedule/lower_impl.h"

/* The lets of a fold, in order (outermost first). */
typedef struct {
    te_expr *var[TE_REDUCE_TREE_MAX * 2 * TE_MAX_TUPLE];
    te_expr *val[TE_REDUCE_TREE_MAX * 2 * TE_MAX_TUPLE];
    int n;
} tree_lets;

/* e bound to a new let named <stage>_<what><k>_<component> (constants and variables are used
 * as they are). NULL on allocation failure. */
static te_expr *bind(te_ctx *ctx, tree_lets *t, const char *stage, const char *what, int k,
                     int comp, te_expr *e)
{
    if (!e)
        return NULL;
    if (e->kind == TE_E_INT || e->kind == TE_E_FLOAT || e->kind == TE_E_VAR)
        return e;
    if (t->n >= (int)(sizeof t->var / sizeof t->var[0]))
        return NULL;
    char nm[96];
    snprintf(nm, sizeof nm, "%s_%s%d_%d", stage, what, k, comp);
    te_expr *v = te_var(ctx, nm, e->dtype);
    if (!v)
        return NULL;
    t->var[t->n] = v;
    t->val[t->n++] = e;
    return v;
}

/* combine(a, b) of every component: out[0..n). */
static int combine(te_ctx *ctx, const lstage *l, int n, te_expr *const *a, te_expr *const *b,
                   te_expr **out)
{
    const te_expr *red = l->body;
    if (n == 1 && !red->u.red.nsrc) {
        out[0] = te__reduce_combine(ctx, red->u.red.rkind, red->u.red.custom, a[0], b[0]);
        return out[0] ? TE_OK : TE_ERR_NOMEM;
    }
    return te__reduce_combine_tuple(ctx, red->u.red.custom, a, b, out);
}

int te__tree_check(lower_ctx *L, const lstage *l, int *tpos)
{
    const te_stage *st = l->st;
    const te_iter *x = st->tree_at;
    const char *nm = st->tensor->name;
    *tpos = -1;
    if (!x)
        return TE_OK;
    int p = te__leaf_pos(st, x);
    if (p < 0)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_reduce_tree: loop '%s' of '%s' was split or fused after it was folded",
                    x->name, nm);
    if (st->tz || st->cw_with)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_reduce_tree: stage '%s' is tensorized or computed with another stage; "
                    "its loop '%s' cannot be folded as a tree",
                    nm, x->name);
    int64_t e = l->ext[te__iter_index(st, x)];
    if (e > TE_REDUCE_TREE_MAX)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_reduce_tree: loop '%s' of '%s' has %lld iterations after bound inference "
                    "(at most %d)",
                    x->name, nm, (long long)e, TE_REDUCE_TREE_MAX);
    for (int k = p; k < st->leaves.n; k++) {
        const te_iter *it = st->leaves.v[k];
        if (k > p && (it->reduce || (it->ann != TE_ANN_NONE && it->ann != TE_ANN_VECTORIZE &&
                                     it->ann != TE_ANN_UNROLL)))
            return LERR(L, TE_ERR_SCHEDULE,
                        "te_reduce_tree: loop '%s' inside '%s' of '%s' is a reduction, parallel "
                        "or bound loop; only plain spatial loops may be inside a tree fold",
                        it->name, x->name, nm);
        for (int i = 0; i < L->n; i++) {
            const te_stage *o = L->ls[i].st;
            if (o->attach == TE_ATTACH_AT && o->attach_stage == st && o->attach_iter == it)
                return LERR(L, TE_ERR_SCHEDULE,
                            "te_reduce_tree: stage '%s' is computed at loop '%s' of '%s', at or "
                            "inside the tree fold of '%s'",
                            o->tensor->name, it->name, nm, x->name);
        }
        for (int i = 0; i < st->prefetches.n; i++)
            if (((const te__prefetch *)st->prefetches.v[i])->at == it)
                return LERR(L, TE_ERR_SCHEDULE,
                            "te_reduce_tree: a prefetch is issued at loop '%s' of '%s', at or "
                            "inside the tree fold of '%s'",
                            it->name, nm, x->name);
    }
    /* A split whose tail is guarded along x: its iterations are not all real. */
    for (int k = 0; k < st->rels.n; k++) {
        const te_rel *r = st->rels.v[k];
        if (r->kind != TE_REL_SPLIT)
            continue;
        int64_t pe = l->ext[te__iter_index(st, r->parent)];
        if (pe % r->factor == 0 || r->factor >= pe)
            continue;
        if (te__expr_uses_var(l->val[te__iter_index(st, r->parent)], x->var))
            return LERR(L, TE_ERR_SCHEDULE,
                        "te_reduce_tree: loop '%s' of '%s' has a guarded tail (split of '%s' by "
                        "%lld does not divide %lld); fold a loop whose iterations are all real",
                        x->name, nm, r->parent->name, (long long)r->factor, (long long)pe);
    }
    *tpos = p;
    return TE_OK;
}

int te__tree_update(lower_ctx *L, lstage *l, const te__subst *map, te_expr *const *sidx, int tpos,
                    te_stmt **update, te_stmt **init)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    const te_expr *red = l->body;
    const te_iter *x = st->leaves.v[tpos];
    const char *nm = st->tensor->name;
    bool tuple = red->u.red.nsrc > 0;
    int n = tuple ? red->u.red.custom->n : 1;
    int64_t E = l->ext[te__iter_index(st, x)];
    te_buf *bufs[TE_MAX_TUPLE];
    for (int i = 0; i < n; i++)
        bufs[i] = tuple ? l->bufs[i] : l->buf;

    tree_lets *t = te__alloc(ctx, sizeof *t); /* the context's arena */
    if (!t)
        return TE_ERR_NOMEM;
    t->n = 0;
    /* Level 0: the value of every iteration of x. */
    te_expr *node[TE_REDUCE_TREE_MAX][TE_MAX_TUPLE];
    for (int64_t k = 0; k < E; k++) {
        te_expr *kv = te_int(ctx, k);
        te__subst at = {1, (const te_expr *[]){x->var}, (te_expr *[]){kv}};
        for (int j = 0; j < n; j++) {
            te_expr *src = tuple ? red->u.red.srcs[j] : red->u.red.src;
            te_expr *v = te__to_loads(L, te__substitute(ctx, te__substitute(ctx, src, map), &at));
            if (!v || !(node[k][j] = bind(ctx, t, nm, "t", (int)k, j, v)))
                return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
        }
    }
    /* Pairwise levels: node[i] = combine(node[2i], node[2i + 1]); an odd last one moves up. */
    int level = 0;
    for (int64_t cnt = E; cnt > 1; cnt = (cnt + 1) / 2, level++) {
        for (int64_t i = 0; i < cnt / 2; i++) {
            te_expr *out[TE_MAX_TUPLE];
            int rc = combine(ctx, l, n, node[2 * i], node[2 * i + 1], out);
            if (rc)
                return rc;
            for (int j = 0; j < n; j++) {
                char what[16];
                snprintf(what, sizeof what, "u%d_", level);
                if (!(node[i][j] = bind(ctx, t, nm, what, (int)i, j, out[j])))
                    return TE_ERR_NOMEM;
            }
        }
        if (cnt % 2)
            for (int j = 0; j < n; j++)
                node[cnt / 2][j] = node[cnt - 1][j];
    }
    /* Into the accumulator: every combine reads the accumulators before any is stored. When
     * x is the stage's only reduction loop, the accumulator holds the identity here and the
     * root is the result (combine(identity, v) = v): one dependent combine fewer. */
    bool only = true;
    for (int k = 0; k < st->leaves.n && only; k++)
        only = k == tpos || !((te_iter *)st->leaves.v[k])->reduce;
    te_expr *acc[TE_MAX_TUPLE], *out[TE_MAX_TUPLE], *nv[TE_MAX_TUPLE];
    for (int i = 0; i < n; i++) {
        out[i] = node[0][i];
        if (!only && !(acc[i] = te__load(ctx, bufs[i], st->ndim, sidx)))
            return TE_ERR_NOMEM;
    }
    int rc = only ? TE_OK : combine(ctx, l, n, acc, node[0], out);
    if (rc)
        return rc;
    te_stmt *stores = NULL, *inits = NULL;
    for (int i = 0; i < n; i++) {
        char vn[96];
        snprintf(vn, sizeof vn, "%s_next%d", nm, i);
        if (!(nv[i] = te_var(ctx, vn, out[i]->dtype)))
            return TE_ERR_NOMEM;
        te_expr *id =
            tuple ? red->u.red.custom->identities[i]
                  : te__reduce_identity(ctx, red->u.red.rkind, red->u.red.custom, red->dtype);
        stores = te__seq2(ctx, stores, te__store(ctx, bufs[i], st->ndim, sidx, nv[i]));
        inits = te__seq2(ctx, inits, te__store(ctx, bufs[i], st->ndim, sidx, id));
    }
    te_stmt *s = stores;
    for (int i = n - 1; i >= 0 && s; i--)
        s = te__let(ctx, nv[i], out[i], s);
    for (int i = t->n - 1; i >= 0 && s; i--)
        s = te__let(ctx, t->var[i], t->val[i], s);
    if (!s || !inits)
        return TE_ERR_NOMEM;
    *update = s;
    *init = inits;
    return TE_OK;
}
