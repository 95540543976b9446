/*
 * schedule/placement.c: where a stage is computed. compute_at (inside a loop of a consumer,
 * for the region one iteration needs), compute_inline (substituted into its consumers) and
 * compute_root (the whole tensor before its consumers, the default).
 */
#include "schedule/sched_impl.h"

/* ---- Placement ---------------------------------------------------------------------------- */

/* Whether `a` (transitively) reads the tensor of `b`, i.e. b is a producer of a. */
static bool depends_on(te_schedule *s, te_stage *a, te_stage *b, int depth)
{
    if (depth > s->stages.n)
        return false;
    if (te__expr_reads(a->body, b->tensor))
        return true;
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *p = s->stages.v[i];
        if (p != a && te__expr_reads(a->body, p->tensor) && depends_on(s, p, b, depth + 1))
            return true;
    }
    return false;
}

/* Stages that use st's values, looking through inlined stages. */
static int effective_consumers(te_schedule *s, te_stage *st, te_stage **out, int max, int n)
{
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *c = s->stages.v[i];
        if (c == st || !te__expr_reads(c->body, st->tensor))
            continue;
        if (c->attach == TE_ATTACH_INLINE)
            n = effective_consumers(s, c, out, max, n);
        else if (n < max)
            out[n++] = c;
    }
    return n;
}

int te_compute_at(te_stage *st, te_stage *parent, te_iter *at)
{
    if (!st || !parent)
        return st ? TE__SERR(st->sched, TE_ERR_ARG, "te_compute_at: parent stage is NULL")
                  : TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (parent->sched != s)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_at: stage '%s' and '%s' are in different "
                        "schedules",
                        nm, parent->tensor->name);
    if (st == parent)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_at: stage '%s' cannot be computed at itself", nm);
    if (st->is_output)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_at: stage '%s' is an output of the "
                        "schedule; outputs are computed at the root",
                        nm);
    int rc = te__check_leaf(parent, at, "te_compute_at");
    if (rc)
        return rc;
    if (parent->attach == TE_ATTACH_INLINE)
        return TE__SERR(s, TE_ERR_SCHEDULE, "te_compute_at: parent stage '%s' is inlined",
                        parent->tensor->name);
    if (!depends_on(s, parent, st, 0))
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_at: stage '%s' does not consume '%s', so "
                        "loop '%s' is not an ancestor of any use of it",
                        parent->tensor->name, nm, at->name);
    te_stage *cons[64];
    int nc = effective_consumers(s, st, cons, 64, 0);
    for (int i = 0; i < nc && i < 64; i++) {
        te_stage *c = cons[i];
        if (c == parent)
            continue;
        /* Inside loop `at` of parent: attached there or deeper, directly or through the
         * stages it is attached in (a tile's local accumulator computed in a stage that is
         * itself computed inside that loop). */
        bool inside = false;
        for (te_stage *a = c; a && a->attach == TE_ATTACH_AT && !inside; a = a->attach_stage)
            inside = a->attach_stage == parent &&
                     te__leaf_pos(parent, a->attach_iter) >= te__leaf_pos(parent, at);
        if (inside)
            continue;
        return TE__SERR(
            s, TE_ERR_SCHEDULE,
            "te_compute_at: stage '%s' is also read by stage '%s', "
            "which is not computed inside loop '%s' of '%s'; compute '%s' at '%s' first "
            "or keep '%s' at the root",
            nm, c->tensor->name, at->name, parent->tensor->name, c->tensor->name,
            parent->tensor->name, nm);
    }
    /* parent must not itself be computed inside st (a cycle). */
    for (te_stage *p = parent; p && p->attach == TE_ATTACH_AT; p = p->attach_stage)
        if (p->attach_stage == st)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_compute_at: '%s' is computed inside '%s'; "
                            "this would make a cycle",
                            parent->tensor->name, nm);
    st->attach = TE_ATTACH_AT;
    st->attach_stage = parent;
    st->attach_iter = at;
    return te__trace_add(s, "compute_at %s %s %s", nm, parent->tensor->name, at->name);
}

int te_pipeline(te_stage *st, te_iter *x, te_stage *with)
{
    if (!st || !with)
        return st ? TE__SERR(st->sched, TE_ERR_ARG, "te_pipeline: stage `with` is NULL")
                  : TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    int rc = te__check_leaf(st, x, "te_pipeline");
    if (rc)
        return rc;
    if (with->sched != s || with == st)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_pipeline: stage '%s' is not a producer of '%s' in this schedule",
                        with->tensor->name, nm);
    if (st->nred || st->ntuple)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_pipeline: stage '%s' is a reduction; only an elementwise stage's "
                        "loops can run one iteration behind",
                        nm);
    if (x->reduce)
        return TE__SERR(s, TE_ERR_SCHEDULE, "te_pipeline: '%s' is a reduction loop", x->name);
    if (with->attach != TE_ATTACH_AT || with->attach_stage != st || with->attach_iter != x)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_pipeline: stage '%s' is not computed at loop '%s' of '%s' "
                        "(te_compute_at it there first)",
                        with->tensor->name, x->name, nm);
    if (st->pipe_at)
        return TE__SERR(s, TE_ERR_SCHEDULE, "te_pipeline: stage '%s' is already pipelined at '%s'",
                        nm, st->pipe_at->name);
    st->pipe_at = x;
    st->pipe_with = with;
    return te__trace_add(s, "pipeline %s %s %s", nm, x->name, with->tensor->name);
}

int te_compute_with(te_stage *st, te_stage *with, te_iter *x)
{
    if (!st || !with)
        return st ? TE__SERR(st->sched, TE_ERR_ARG, "te_compute_with: stage `with` is NULL")
                  : TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (with->sched != s || with == st)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_with: stage '%s' is not another stage of this schedule",
                        with->tensor->name);
    int rc = te__check_leaf(with, x, "te_compute_with");
    if (rc)
        return rc;
    if (with->nred || with->ntuple)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_with: '%s' is a reduction; a stage is fused after an "
                        "elementwise stage (mid-way through a reduction it would read partial "
                        "results)",
                        with->tensor->name);
    if (st->attach == TE_ATTACH_INLINE || with->attach == TE_ATTACH_INLINE)
        return TE__SERR(s, TE_ERR_SCHEDULE, "te_compute_with: '%s' is inlined",
                        st->attach == TE_ATTACH_INLINE ? nm : with->tensor->name);
    bool same = st->attach == with->attach &&
                (st->attach == TE_ATTACH_ROOT ||
                 (st->attach_stage == with->attach_stage && st->attach_iter == with->attach_iter));
    if (!same)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_with: '%s' and '%s' are not computed at the same place "
                        "(te_compute_at both at the same loop, or keep both at the root)",
                        nm, with->tensor->name);
    if (st->cw_with)
        return TE__SERR(s, TE_ERR_SCHEDULE, "te_compute_with: '%s' is already computed with '%s'",
                        nm, st->cw_with->tensor->name);
    for (te_stage *w = with; w; w = w->cw_with)
        if (w == st)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_compute_with: '%s' is computed with '%s'; this would make a cycle",
                            with->tensor->name, nm);
    st->cw_with = with;
    st->cw_at = x;
    return te__trace_add(s, "compute_with %s %s %s", nm, with->tensor->name, x->name);
}

int te_compute_inline(te_stage *st)
{
    if (!st)
        return TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (st->is_output)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_inline: stage '%s' is an output of the "
                        "schedule and must be stored",
                        nm);
    if (st->body->kind == TE_E_REDUCE)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_inline: stage '%s' is a reduction; "
                        "reductions cannot be inlined (use compute_at)",
                        nm);
    if (st->touched)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_compute_inline: stage '%s' has loop transformations "
                        "that inlining would discard",
                        nm);
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *o = s->stages.v[i];
        if (o->attach == TE_ATTACH_AT && o->attach_stage == st)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_compute_inline: stage '%s' is computed at a loop "
                            "of '%s'",
                            o->tensor->name, nm);
    }
    st->attach = TE_ATTACH_INLINE;
    st->attach_stage = NULL;
    st->attach_iter = NULL;
    return te__trace_add(s, "compute_inline %s", nm);
}

int te_compute_root(te_stage *st)
{
    if (!st)
        return TE_ERR_ARG;
    st->attach = TE_ATTACH_ROOT;
    st->attach_stage = NULL;
    st->attach_iter = NULL;
    return te__trace_add(st->sched, "compute_root %s", st->tensor->name);
}
