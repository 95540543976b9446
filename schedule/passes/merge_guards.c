/*
 * The merge_guards pass: guards as a person writes them. Loop partitioning leaves the tail of
 * a split loop behind a test, and unrolling then copies that test onto every statement of the
 * copied body:
 *
 *     if (b % 19 < 18) m[52] = -inf;          if (b % 19 < 18) {
 *     if (b % 19 < 18) a[3328..] = 0;   ->        m[52] = -inf;
 *     if (b % 19 < 18) a[3344..] = 0;             a[3328..] = 0;
 *                                                 a[3344..] = 0;
 *                                             }
 *
 * Two rewrites, bottom-up:
 *   - adjacent ifs without else whose conditions are equal become one if;
 *   - a serial loop whose whole body is an if without else, on a condition the loop does not
 *     move, runs inside that if (`for i: if (c) S` -> `if (c) for i: S`: loop unswitching
 *     with nothing in the else branch), so it can join its neighbours.
 * Both only for conditions that read no buffer: index arithmetic over loop and let variables,
 * which no statement between the tests can change. Parallel, GPU-bound and virtual-thread
 * loops keep their shape (their emitters give them one).
 */
#include "schedule/passes.h"

/* An if without else whose condition no store can change. */
static bool plain_guard(const te_stmt *s)
{
    return s && s->kind == TE_S_IF && !s->u.cond.else_s && !te__expr_has_load(s->u.cond.cond);
}

static te_stmt *merge_seq(te_ctx *ctx, te_stmt *s)
{
    int n = s->u.seq.n;
    bool any = false;
    for (int i = 0; i + 1 < n && !any; i++)
        any = plain_guard(s->u.seq.v[i]) && plain_guard(s->u.seq.v[i + 1]) &&
              te__expr_equal(s->u.seq.v[i]->u.cond.cond, s->u.seq.v[i + 1]->u.cond.cond);
    if (!any)
        return s;
    te_stmt **out = te__alloc(ctx, sizeof(te_stmt *) * (size_t)n);
    te_stmt **run = te__alloc(ctx, sizeof(te_stmt *) * (size_t)n);
    if (!out || !run)
        return NULL;
    int m = 0;
    for (int i = 0; i < n;) {
        te_stmt *a = s->u.seq.v[i];
        int j = i + 1;
        if (plain_guard(a))
            while (j < n && plain_guard(s->u.seq.v[j]) &&
                   te__expr_equal(a->u.cond.cond, s->u.seq.v[j]->u.cond.cond))
                j++;
        if (j == i + 1) {
            out[m++] = a;
            i = j;
            continue;
        }
        for (int k = i; k < j; k++)
            run[k - i] = s->u.seq.v[k]->u.cond.then_s;
        te_stmt *body = te__seq(ctx, j - i, run);
        if (!body || !(out[m++] = te__if(ctx, a->u.cond.cond, body, NULL)))
            return NULL;
        i = j;
    }
    return te__seq(ctx, m, out);
}

static te_stmt *unswitch(te_ctx *ctx, te_stmt *s)
{
    te_stmt *b = s->u.loop.body;
    if ((s->u.loop.fkind != TE_FOR_SERIAL && s->u.loop.fkind != TE_FOR_VECTORIZED) ||
        s->u.loop.xreduce || !plain_guard(b) || te__expr_uses_var(b->u.cond.cond, s->u.loop.var))
        return s;
    te_stmt *loop = te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind,
                            b->u.cond.then_s);
    if (!loop)
        return NULL;
    loop->u.loop.thread_tag = s->u.loop.thread_tag;
    return te__if(ctx, b->u.cond.cond, loop, NULL);
}

static te_stmt *merge_fn(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    if (s->kind == TE_S_SEQ)
        return merge_seq(ctx, s);
    if (s->kind == TE_S_FOR)
        return unswitch(ctx, s);
    return s;
}

te_stmt *te__pass_merge_guards(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    te_stmt *r = te__stmt_mutate(ctx, s, merge_fn, NULL, NULL);
    if (!r) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_NOMEM, "merge_guards: out of memory");
        return NULL;
    }
    return r;
}
