/*
 * The CUDA vector filter: a vectorized loop stays vectorized only when its body is a single
 * store (a copy, which the CUDA backend emits as float4/float2 accesses); the others are
 * unrolled.
 */
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

static te_stmt *vf_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_VECTORIZED ||
        s->u.loop.body->kind == TE_S_STORE)
        return s;
    te_stmt *r = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_UNROLLED,
                         s->u.loop.body);
    return r;
}

te_stmt *te__pass_gpu_vector_filter(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    return te__stmt_mutate(ctx, s, vf_fn, NULL, NULL);
}
