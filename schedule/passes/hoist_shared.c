/*
 * Hoisting shared allocations: every shared buffer of a kernel is allocated once per block, at
 * the top of the block body, instead of once per thread or per loop iteration.
 */
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

typedef struct {
    te_buf *bufs[64];
    int n;
    bool overflow;
} hoist_ctx;

static te_stmt *hoist_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    hoist_ctx *h = user;
    (void)ctx;
    if (s->kind != TE_S_ALLOC || s->u.alloc.buf->scope != TE_SCOPE_SHARED)
        return s;
    for (int i = 0; i < h->n; i++)
        if (h->bufs[i] == s->u.alloc.buf)
            return s->u.alloc.body;
    if (h->n == 64) {
        h->overflow = true;
        return s;
    }
    h->bufs[h->n++] = s->u.alloc.buf;
    return s->u.alloc.body;
}

static te_stmt *hoist_block(te_ctx *ctx, te_stmt *body, void *user)
{
    (void)user;
    hoist_ctx h = {.n = 0};
    te_stmt *b = te__stmt_mutate(ctx, body, hoist_fn, NULL, &h);
    if (!b)
        return NULL;
    if (h.overflow) {
        te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED, "more than 64 shared buffers in one kernel");
        return NULL;
    }
    for (int i = h.n - 1; i >= 0 && b; i--)
        b = te__alloc_stmt(ctx, h.bufs[i], b);
    return b;
}

te_stmt *te__pass_hoist_shared(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    return te__gpu_map_blocks(ctx, s, hoist_block, NULL);
}
