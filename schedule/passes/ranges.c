/* Range maps: the known integer ranges of loop variables, kept as a stack while a pass walks
 * into loops. Lookups search from the top, so an inner binding shadows an outer one. */
#include <string.h>

#include "schedule/passes.h"

int te__ranges_push(te_ctx *ctx, te__range_map *m, const te_expr *var, int64_t lo, int64_t hi)
{
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 16;
        const te_expr **vars = te__alloc(ctx, sizeof(*vars) * (size_t)cap);
        int64_t *los = te__alloc(ctx, sizeof(int64_t) * (size_t)cap);
        int64_t *his = te__alloc(ctx, sizeof(int64_t) * (size_t)cap);
        if (!vars || !los || !his)
            return TE_ERR_NOMEM;
        if (m->n) {
            memcpy(vars, m->vars, sizeof(*vars) * (size_t)m->n);
            memcpy(los, m->lo, sizeof(int64_t) * (size_t)m->n);
            memcpy(his, m->hi, sizeof(int64_t) * (size_t)m->n);
        }
        m->vars = vars;
        m->lo = los;
        m->hi = his;
        m->cap = cap;
    }
    m->vars[m->n] = var;
    m->lo[m->n] = lo;
    m->hi[m->n] = hi;
    m->n++;
    return TE_OK;
}

void te__ranges_pop(te__range_map *m)
{
    assert(m->n > 0);
    m->n--;
}
