/* Memory planning of a fused graph's intermediates: liveness over the plan's group order, then
 * every buffer placed in one pool, largest first, at the best-fitting gap among the buffers
 * whose lifetimes overlap its own (offsets and sizes multiples of TE_GRAPH_MEM_ALIGN). A view
 * group's output (a reshape, fuse_generic.c) has no buffer: it is its root's bytes, and every
 * reader of the view reads the root, so the root's lifetime covers them. */
#include <stdlib.h>
#include <string.h>

#include "graph/fuse_internal.h"

struct te_graph_memplan {
    te_graph_mem_stats st;
    te_graph_mem_buffer *b; /* in value order */
    int64_t *offset_of;     /* per value, -1 when not pooled (a view: its root's) */
    int *alias;             /* per value, the value whose storage it shares (itself, or a root) */
    int nv;
};

void te_graph_memplan_free(te_graph_memplan *m)
{
    if (!m)
        return;
    free(m->b);
    free(m->offset_of);
    free(m->alias);
    free(m);
}

static size_t value_bytes(const te_graph *g, int v)
{
    return (size_t)te_graph_value_numel(g, v) * te_dtype_size(g->v[v].dtype);
}

static size_t align_up(size_t x)
{
    return (x + TE_GRAPH_MEM_ALIGN - 1) / TE_GRAPH_MEM_ALIGN * TE_GRAPH_MEM_ALIGN;
}

static int overlaps(const te_graph_mem_buffer *a, const te_graph_mem_buffer *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* Order of placement: larger first, then earlier, then by value. */
static int placed_before(const te_graph_mem_buffer *a, const te_graph_mem_buffer *b)
{
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes;
    if (a->first != b->first)
        return a->first < b->first;
    return a->value < b->value;
}

static int by_offset(const void *x, const void *y)
{
    const te_graph_mem_buffer *a = *(const te_graph_mem_buffer *const *)x;
    const te_graph_mem_buffer *b = *(const te_graph_mem_buffer *const *)y;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Places buffer i among the placed buffers (placed[0..np)) that overlap it in time. */
static void place(te_graph_mem_buffer *b, int i, const te_graph_mem_buffer **placed, int np,
                  const te_graph_mem_buffer **tmp)
{
    int nt = 0;
    for (int k = 0; k < np; k++)
        if (overlaps(placed[k], &b[i]))
            tmp[nt++] = placed[k];
    qsort(tmp, (size_t)nt, sizeof *tmp, by_offset);
    size_t best = 0, best_gap = 0, at = 0;
    int found = 0;
    for (int k = 0; k <= nt; k++) {
        /* The gap [at, end) before tmp[k]; after the last buffer it is unbounded. */
        size_t end = k < nt ? tmp[k]->offset : (size_t)-1;
        if (end > at && end - at >= b[i].bytes && (!found || end - at < best_gap)) {
            best = at;
            best_gap = end - at;
            found = 1;
        }
        if (k < nt && tmp[k]->offset + tmp[k]->bytes > at)
            at = tmp[k]->offset + tmp[k]->bytes;
    }
    b[i].offset = best;
}

int te_graph_memplan_create(const te_fuse_plan *p, te_graph_memplan **out)
{
    return te_graph_memplan_create_steps(p, NULL, out);
}

int te_graph_memplan_create_steps(const te_fuse_plan *p, const int *step, te_graph_memplan **out)
{
    if (!out)
        return TE_ERR_ARG;
    *out = NULL;
    if (!p)
        return TE_ERR_ARG;
    for (int gi = 0; step && gi < p->ng; gi++)
        if (step[gi] < 0 || (gi > 0 && step[gi] < step[gi - 1]))
            return TE_ERR_ARG;
#define STEP(gi) (step ? step[gi] : (gi))
    const te_graph *g = p->g;
    te_graph_memplan *m = calloc(1, sizeof *m);
    if (!m)
        return TE_ERR_NOMEM;
    m->nv = g->nv;
    m->offset_of = malloc(sizeof(int64_t) * ((size_t)g->nv + 1));
    m->alias = malloc(sizeof(int) * ((size_t)g->nv + 1));
    m->b = calloc((size_t)g->nv + 1, sizeof *m->b);
    int *order = malloc(sizeof(int) * ((size_t)g->nv + 1));
    const te_graph_mem_buffer **placed = malloc(sizeof *placed * ((size_t)g->nv + 1));
    const te_graph_mem_buffer **tmp = malloc(sizeof *tmp * ((size_t)g->nv + 1));
    int *first = malloc(sizeof(int) * ((size_t)g->nv + 1));
    int *last = malloc(sizeof(int) * ((size_t)g->nv + 1));
    if (!m->offset_of || !m->alias || !m->b || !order || !placed || !tmp || !first || !last) {
        free(order), free(placed), free(tmp), free(first), free(last);
        te_graph_memplan_free(m);
        return TE_ERR_NOMEM;
    }
    for (int v = 0; v < g->nv; v++) {
        m->offset_of[v] = -1;
        m->alias[v] = te__fuse_view_root(p, v);
        first[v] = last[v] = -1;
        if (g->v[v].kind == TE_GRAPH_NODE_OUTPUT && !g->v[v].is_output)
            m->st.unfused_bytes += value_bytes(g, v);
    }
    /* Liveness: the writing group, then every group reading the value or a view of it (a
     * view writes nothing: its readers read its root). */
    for (int gi = 0; gi < p->ng; gi++)
        for (int k = 0; !p->gr[gi].view && k < p->gr[gi].nout; k++) {
            int v = p->gr[gi].outs[k];
            first[v] = last[v] = STEP(gi);
        }
    for (int n = 0; n < g->nn; n++)
        for (int i = 0; i < g->n[n].n_in; i++) {
            int v = m->alias[g->n[n].in[i]], gi = STEP(p->group_of[n]);
            if (first[v] >= 0 && gi > last[v])
                last[v] = gi;
        }
    int nb = 0;
    for (int v = 0; v < g->nv; v++) {
        if (first[v] < 0 || g->v[v].is_output)
            continue;
        m->st.fused_bytes += value_bytes(g, v);
        te_graph_mem_buffer *b = &m->b[nb];
        b->value = v;
        b->bytes = align_up(value_bytes(g, v) ? value_bytes(g, v) : 1);
        b->first = first[v];
        b->last = last[v];
        order[nb] = nb;
        nb++;
    }
    for (int k = 1; k < nb; k++) /* insertion sort: stable, no shared state */
        for (int j = k; j > 0 && placed_before(&m->b[order[j]], &m->b[order[j - 1]]); j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    for (int k = 0; k < nb; k++) {
        place(m->b, order[k], placed, k, tmp);
        placed[k] = &m->b[order[k]];
        size_t end = m->b[order[k]].offset + m->b[order[k]].bytes;
        if (end > m->st.pool_bytes)
            m->st.pool_bytes = end;
    }
    for (int gi = 0; p->ng && gi <= STEP(p->ng - 1); gi++) {
        size_t live = 0;
        for (int k = 0; k < nb; k++)
            if (m->b[k].first <= gi && gi <= m->b[k].last)
                live += m->b[k].bytes;
        if (live > m->st.live_bytes)
            m->st.live_bytes = live;
    }
    for (int k = 0; k < nb; k++)
        m->offset_of[m->b[k].value] = (int64_t)m->b[k].offset;
    for (int v = 0; v < g->nv; v++)
        m->offset_of[v] = m->offset_of[m->alias[v]];
    m->st.n_buffers = nb;
    free(order), free(placed), free(tmp), free(first), free(last);
    *out = m;
    return TE_OK;
#undef STEP
}

void te_graph_memplan_stats(const te_graph_memplan *m, te_graph_mem_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (m)
        *out = m->st;
}

int te_graph_memplan_buffer(const te_graph_memplan *m, int i, te_graph_mem_buffer *out)
{
    if (!m || !out || i < 0 || i >= m->st.n_buffers)
        return TE_ERR_ARG;
    *out = m->b[i];
    return TE_OK;
}

int64_t te_graph_memplan_offset(const te_graph_memplan *m, int v)
{
    return m && v >= 0 && v < m->nv ? m->offset_of[v] : -1;
}

int te_graph_memplan_alias(const te_graph_memplan *m, int v)
{
    return m && v >= 0 && v < m->nv ? m->alias[v] : -1;
}
