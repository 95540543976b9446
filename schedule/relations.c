/*
 * Split/fuse propagation: extents flow forward from a stage's root axes through its relations
 * (in the order the primitives created them) to the loops; values flow backward from the loop
 * variables to every iterator, so that a stage's body can be written over its loops.
 */
#include "schedule/lower_impl.h"

/* Forward: root extents (the region) through split/fuse to the leaves. */
void te__compute_extents(lstage *l)
{
    te_stage *st = l->st;
    for (int d = 0; d < st->ndim; d++)
        l->ext[te__iter_index(st, st->axes[d])] = l->rext[d];
    for (int r = 0; r < st->nred; r++)
        l->ext[te__iter_index(st, st->raxes[r])] = st->raxes[r]->extent;
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        if (r->kind == TE_REL_SPLIT) {
            int64_t pe = l->ext[te__iter_index(st, r->parent)];
            l->ext[te__iter_index(st, r->inner)] = r->factor < pe ? r->factor : pe;
            l->ext[te__iter_index(st, r->outer)] = pe / r->factor + (pe % r->factor != 0);
        } else {
            l->ext[te__iter_index(st, r->fused)] =
                l->ext[te__iter_index(st, r->outer)] * l->ext[te__iter_index(st, r->inner)];
        }
    }
}

/* Backward: the value of every iterator in terms of the leaf loop variables. */
int te__compute_values(lower_ctx *L, lstage *l)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    for (int i = 0; i < st->leaves.n; i++) {
        te_iter *it = st->leaves.v[i];
        l->val[te__iter_index(st, it)] = it->var;
    }
    for (int k = st->rels.n - 1; k >= 0; k--) {
        te_rel *r = st->rels.v[k];
        if (r->kind == TE_REL_SPLIT) {
            te_expr *o = l->val[te__iter_index(st, r->outer)],
                    *i = l->val[te__iter_index(st, r->inner)];
            l->val[te__iter_index(st, r->parent)] =
                te_add(ctx, te_mul(ctx, o, te_int(ctx, r->factor)), i);
        } else {
            te_expr *f = l->val[te__iter_index(st, r->fused)];
            te_expr *ie = te_int(ctx, l->ext[te__iter_index(st, r->inner)]);
            l->val[te__iter_index(st, r->outer)] = te_floordiv(ctx, f, ie);
            l->val[te__iter_index(st, r->inner)] = te_floormod(ctx, f, ie);
        }
    }
    for (int d = 0; d < st->ndim; d++)
        if (!l->val[te__iter_index(st, st->axes[d])])
            return TE_ERR_NOMEM;
    return TE_OK;
}
