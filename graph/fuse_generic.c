/* After the rules: rule-formed groups absorb their epilogues, TVM's kind-based fusion runs on
 * what is left, every other node is a group of its own, and the groups are ordered. */
#include <stdlib.h>
#include <string.h>

#include "graph/fuse_internal.h"

/* ---- Generic kind-based fusion (TVM's rules) ---------------------------------------------- */

/* The single consumer of node n's only output, or -1. */
static int sole_consumer(const fctx *f, int n)
{
    const te__gnode *nd = NODE(f, n);
    if (nd->n_out != 1 || VAL(f, nd->out[0])->is_output)
        return -1;
    int v = nd->out[0];
    if (f->ncons[v] < 1)
        return -1;
    for (int k = 1; k < f->ncons[v]; k++)
        if (f->cons[v][k] != f->cons[v][0])
            return -1;
    return f->cons[v][0];
}

/* Groups formed by rules absorb the elemwise/broadcast chains that follow their out_ewise
 * outputs (the bias adds after a horizontal QKV), as TVM fuses epilogues into any
 * out_ewise-fusable group. The group then no longer equals its `produces` operator. */
static void absorb_epilogues(fctx *f)
{
    for (int gi = 0; gi < f->ntmp; gi++) {
        fgroup *gr = &f->tmp[gi];
        mstate st = {.n = 0};
        for (int i = 0; i < gr->n && st.n < MAXM; i++)
            st.nodes[st.n++] = gr->nodes[i];
        int base = st.n;
        for (int i = 0; i < base; i++) {
            int n = st.nodes[i];
            if (NODE(f, n)->op->kind != TE_KIND_OUT_EWISE_FUSABLE)
                continue;
            /* Walk the chain after n through the group's own nodes, then take free ones. */
            for (int cur = n, c; (c = sole_consumer(f, cur)) >= 0; cur = c) {
                if (in_state(&st, c))
                    continue;
                if (!free_node(f, &st, c) || NODE(f, c)->op->kind > TE_KIND_BROADCAST)
                    break;
                st.nodes[st.n++] = c;
            }
        }
        if (st.n == base)
            continue;
        te__fuse_sort_state(&st);
        char rule[80];
        snprintf(rule, sizeof rule, "%s+epilogue", gr->rule);
        /* Free the group's nodes while the larger candidate is checked. */
        for (int i = 0; i < gr->n; i++)
            f->assigned[gr->nodes[i]] = -1;
        if (te__fuse_check_candidate(f, rule, 1, &st)) {
            int *nodes = realloc(gr->nodes, sizeof(int) * (size_t)st.n);
            int *outs = realloc(gr->outs, sizeof(int) * (size_t)(st.n * TE__G_MAXIO + 1));
            if (nodes)
                gr->nodes = nodes;
            if (outs)
                gr->outs = outs;
            if (nodes && outs) {
                memcpy(gr->nodes, st.nodes, sizeof(int) * (size_t)st.n);
                gr->n = st.n;
                snprintf(gr->rule, sizeof gr->rule, "%.63s", rule);
                gr->fused[0] = 0;
            }
        }
        for (int i = 0; i < gr->n; i++)
            f->assigned[gr->nodes[i]] = gi;
        gr->nout = 0;
        for (int i = 0; i < gr->n; i++) {
            const te__gnode *nd = NODE(f, gr->nodes[i]);
            for (int o = 0; o < nd->n_out; o++) {
                int v = nd->out[o], leaves = VAL(f, v)->is_output;
                for (int k = 0; k < f->ncons[v]; k++)
                    leaves |= f->assigned[f->cons[v][k]] != gi;
                if (leaves)
                    gr->outs[gr->nout++] = v;
            }
        }
    }
}

void te__fuse_generic(fctx *f)
{
    int nn = f->g->nn;
    absorb_epilogues(f);
    /* out_ewise + the elemwise/broadcast chain after it. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind != TE_KIND_OUT_EWISE_FUSABLE)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int c = sole_consumer(f, n);
             c >= 0 && free_node(f, &st, c) && NODE(f, c)->op->kind <= TE_KIND_BROADCAST;
             c = sole_consumer(f, c))
            st.nodes[st.n++] = c;
        if (st.n > 1 && te__fuse_check_candidate(f, "generic:out_ewise+elemwise", 0, &st))
            te__fuse_add_group(f, "generic:out_ewise+elemwise", "vertical", NULL, &st);
    }
    /* Reductions absorb their elemwise/broadcast/injective producers. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind != TE_KIND_REDUCTION)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int i = 0; i < st.n; i++) {
            const te__gnode *nd = NODE(f, st.nodes[i]);
            for (int in = 0; in < nd->n_in; in++) {
                int p = VAL(f, nd->in[in])->node;
                if (p >= 0 && free_node(f, &st, p) && NODE(f, p)->op->kind <= TE_KIND_INJECTIVE &&
                    sole_consumer(f, p) == st.nodes[i])
                    st.nodes[st.n++] = p;
            }
        }
        te__fuse_sort_state(&st);
        if (st.n > 1 && te__fuse_check_candidate(f, "generic:reduction+producers", 0, &st))
            te__fuse_add_group(f, "generic:reduction+producers", "vertical", NULL, &st);
    }
    /* Injective chains. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind > TE_KIND_INJECTIVE)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int c = sole_consumer(f, n);
             c >= 0 && free_node(f, &st, c) && NODE(f, c)->op->kind <= TE_KIND_INJECTIVE;
             c = sole_consumer(f, c))
            st.nodes[st.n++] = c;
        if (st.n > 1 && te__fuse_check_candidate(f, "generic:injective", 0, &st))
            te__fuse_add_group(f, "generic:injective", "vertical", NULL, &st);
    }
    /* The rest are groups of one node. A lone reshape whose output is not a graph output is a
     * view: our tensors are dense and row-major, so its output is its input's bytes under
     * another shape, and it runs no kernel (memplan.c and exec.c give it its input's storage).
     * A graph output keeps its own buffer, which the caller reads, so it stays a copy kernel. */
    for (int n = 0; n < nn; n++)
        if (f->assigned[n] < 0) {
            const te__gnode *nd = NODE(f, n);
            int view = !strcmp(nd->op->name, "reshape") && nd->n_in == 1 && nd->n_out == 1 &&
                       !VAL(f, nd->out[0])->is_output;
            mstate st = {.n = 1};
            st.nodes[0] = n;
            if (te__fuse_add_group(f, view ? "view" : "single", view ? "view" : "single", NULL,
                                   &st) == TE_OK)
                f->tmp[f->ntmp - 1].view = view;
        }
}

/* Orders groups so every group comes after the groups it reads from (Kahn, ties by first
 * node), and renumbers. */
int te__fuse_order_groups(fctx *f)
{
    int ng = f->ntmp, nn = f->g->nn;
    int *indeg = calloc((size_t)ng + 1, sizeof(int)), *done = calloc((size_t)ng + 1, sizeof(int));
    fgroup *out = malloc(sizeof *out * ((size_t)ng + 1));
    if (!indeg || !done || !out) {
        free(indeg), free(done), free(out);
        return TE_ERR_NOMEM;
    }
    for (int k = 0; k < ng; k++) {
        int placed = -1;
        for (int gi = 0; gi < ng && placed < 0; gi++) {
            if (done[gi])
                continue;
            int ready = 1;
            for (int i = 0; ready && i < f->tmp[gi].n; i++) {
                const te__gnode *nd = NODE(f, f->tmp[gi].nodes[i]);
                for (int in = 0; ready && in < nd->n_in; in++) {
                    int p = VAL(f, nd->in[in])->node;
                    ready = p < 0 || f->assigned[p] == gi || done[f->assigned[p]];
                }
            }
            if (ready && (placed < 0 || f->tmp[gi].nodes[0] < f->tmp[placed].nodes[0]))
                placed = gi;
        }
        /* Among the ready groups take the one with the earliest first node. */
        for (int gi = 0; gi < ng && placed >= 0; gi++) {
            if (done[gi] || gi == placed || f->tmp[gi].nodes[0] > f->tmp[placed].nodes[0])
                continue;
            int ready = 1;
            for (int i = 0; ready && i < f->tmp[gi].n; i++) {
                const te__gnode *nd = NODE(f, f->tmp[gi].nodes[i]);
                for (int in = 0; ready && in < nd->n_in; in++) {
                    int p = VAL(f, nd->in[in])->node;
                    ready = p < 0 || f->assigned[p] == gi || done[f->assigned[p]];
                }
            }
            if (ready)
                placed = gi;
        }
        if (placed < 0) {
            free(indeg), free(done), free(out);
            return TE_ERR_INTERNAL; /* a cycle between groups: the checks should prevent it */
        }
        done[placed] = 1;
        out[k] = f->tmp[placed];
        indeg[placed] = k; /* new index */
    }
    for (int n = 0; n < nn; n++)
        f->p->group_of[n] = indeg[f->assigned[n]];
    free(f->tmp);
    f->tmp = NULL;
    f->p->gr = out;
    f->p->ng = ng;
    f->ntmp = 0;
    free(indeg), free(done);
    return TE_OK;
}
