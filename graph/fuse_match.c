/* Rule pattern matching: elements with quantifiers along consumer edges, siblings reading one
 * value, branches matched backward from their join. Backtracking; nodes already in a group are
 * not free. */
#include <string.h>

#include "graph/fuse_internal.h"

/* Element item `item` matched `c` times so far, the last match being node prev. */
static int match_rep(fctx *f, const te__rule *r, int item, int c, int prev, int anchor, mstate *st)
{
    const te__pelem *e = &r->items[item].elem;
    if (c < e->max) {
        if (prev < 0 && item == 0) {
            if (free_node(f, st, anchor) && te__pelem_accepts(e, NODE(f, anchor)->op)) {
                st->nodes[st->n++] = anchor;
                if (match_rep(f, r, item, c + 1, anchor, anchor, st))
                    return 1;
                st->n--;
            }
        } else if (prev >= 0) {
            const te__gnode *pn = NODE(f, prev);
            for (int o = 0; o < pn->n_out; o++) {
                int v = pn->out[o];
                for (int k = 0; k < f->ncons[v]; k++) {
                    int cn = f->cons[v][k];
                    if (!free_node(f, st, cn) || !te__pelem_accepts(e, NODE(f, cn)->op))
                        continue;
                    st->nodes[st->n++] = cn;
                    if (match_rep(f, r, item, c + 1, cn, anchor, st))
                        return 1;
                    st->n--;
                }
            }
        }
    }
    if (c >= e->min) {
        int save = st->count[item];
        st->count[item] = c;
        if (te__fuse_match_items(f, r, item + 1, prev, anchor, st))
            return 1;
        st->count[item] = save;
    }
    return 0;
}

static int same_shape(const te__gvalue *a, const te__gvalue *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static int match_siblings(fctx *f, const te__rule *r, int item, int sv, mstate *st)
{
    const te__pelem *e = &r->items[item].elem;
    int got = 0, first = -1;
    for (int k = 0; k < f->ncons[sv] && got < e->max; k++) {
        int cn = f->cons[sv][k];
        const te__gnode *nd = NODE(f, cn);
        if (!free_node(f, st, cn) || nd->in[0] != sv || !te__pelem_accepts(e, nd->op))
            continue;
        if (r->same_shape && first >= 0 &&
            !same_shape(VAL(f, nd->out[0]), VAL(f, NODE(f, first)->out[0])))
            continue;
        if (first < 0)
            first = cn;
        st->nodes[st->n++] = cn;
        got++;
    }
    if (got < e->min) {
        st->n -= got;
        return 0;
    }
    st->count[item] = got;
    if (e->max < TE__R_INF && got != e->max)
        st->multi = 1;
    return 1;
}

/* Branch: path `which` (1 or 2) matched backward; element k has c matches; v is the value the
 * next match must produce. */
typedef struct bctx {
    const te__pitem *it;
    int item, join, in_a, in_b, src1;
} bctx;

static int branch_back(fctx *f, const te__rule *r, bctx *b, int which, int k, int c, int v,
                       mstate *st)
{
    const te__pelem *path = which == 1 ? b->it->p1 : b->it->p2;
    if (k < 0) {
        if (which == 1) {
            b->src1 = v;
            return branch_back(f, r, b, 2, b->it->n2 - 1, 0, b->in_b, st);
        }
        /* Both paths start at one value that the group does not produce. */
        if (v != b->src1 || (VAL(f, v)->node >= 0 && in_state(st, VAL(f, v)->node)))
            return 0;
        return te__fuse_match_items(f, r, b->item + 1, b->join, b->join, st);
    }
    const te__pelem *e = &path[k];
    if (c < e->max) {
        int p = VAL(f, v)->node;
        if (free_node(f, st, p) && te__pelem_accepts(e, NODE(f, p)->op)) {
            st->nodes[st->n++] = p;
            const te__gnode *pn = NODE(f, p);
            for (int i = 0; i < pn->n_in; i++) {
                if (VAL(f, pn->in[i])->kind == TE_GRAPH_CONST)
                    continue;
                if (branch_back(f, r, b, which, k, c + 1, pn->in[i], st))
                    return 1;
            }
            st->n--;
        }
    }
    if (c >= e->min) {
        if (c != 1)
            st->multi++;
        if (branch_back(f, r, b, which, k - 1, 0, v, st))
            return 1;
        if (c != 1)
            st->multi--;
    }
    return 0;
}

static int match_branch(fctx *f, const te__rule *r, int item, int join, mstate *st)
{
    const te__pitem *it = &r->items[item];
    const te__gnode *j = NODE(f, join);
    if (!free_node(f, st, join) || !te__pelem_accepts(&it->elem, j->op) || j->n_in < 2)
        return 0;
    st->nodes[st->n++] = join;
    for (int a = 0; a < j->n_in; a++)
        for (int b2 = 0; b2 < j->n_in; b2++) {
            if (a == b2)
                continue;
            bctx b = {it, item, join, j->in[a], j->in[b2], -1};
            int save_n = st->n, save_multi = st->multi;
            if (branch_back(f, r, &b, 1, it->n1 - 1, 0, j->in[a], st))
                return 1;
            st->n = save_n;
            st->multi = save_multi;
        }
    st->n--;
    return 0;
}

int te__fuse_match_items(fctx *f, const te__rule *r, int item, int prev, int anchor, mstate *st)
{
    if (item == r->nitems)
        return 1;
    const te__pitem *it = &r->items[item];
    switch (it->type) {
    case TE__ITEM_ELEM:
        return match_rep(f, r, item, 0, prev, anchor, st);
    case TE__ITEM_SIBLINGS:
        return match_siblings(f, r, item, prev < 0 ? st->anchor_value : NODE(f, prev)->out[0], st);
    case TE__ITEM_BRANCH:
        return item == 0 && match_branch(f, r, item, anchor, st);
    }
    return 0;
}
