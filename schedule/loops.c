/*
 * schedule/loops.c: the loop primitives. split, split_nparts, tile, fuse and reorder change a
 * stage's loop order (the relations they record are replayed by lowering to derive each
 * iterator's value from the leaf loops); vectorize, unroll, parallel, unroll_max, nontemporal
 * and bind annotate loops or the stage. Each validates everything first, changes the schedule
 * only when the request is legal, and appends itself to the trace.
 */
#include <string.h>

#include "schedule/sched_impl.h"

/* ---- Loop transformations --------------------------------------------------------------- */

static int do_split(te_stage *st, te_iter *x, int64_t factor, te_iter **outer, te_iter **inner)
{
    te_ctx *ctx = st->sched->ctx;
    char buf[160];
    snprintf(buf, sizeof buf, "%s_o", x->name);
    const char *on = te__unique_iter_name(st, buf);
    snprintf(buf, sizeof buf, "%s_i", x->name);
    const char *in = te__unique_iter_name(st, buf);
    if (!on || !in)
        return TE_ERR_NOMEM;
    int64_t inner_ext = factor < x->extent ? factor : x->extent;
    /* Ceiling division that cannot overflow: factor may be as large as INT64_MAX. */
    te_iter *o = te__new_iter(st, on, x->extent / factor + (x->extent % factor != 0), x->reduce);
    te_iter *i = te__new_iter(st, in, inner_ext, x->reduce);
    te_rel *r = te__alloc(ctx, sizeof *r);
    if (!o || !i || !r)
        return TE_ERR_NOMEM;
    r->kind = TE_REL_SPLIT;
    r->parent = x;
    r->outer = o;
    r->inner = i;
    r->factor = factor;
    if (te__vec_push(ctx, &st->rels, r))
        return TE_ERR_NOMEM;
    /* Replace x by (o, i) in the leaf list. */
    int p = te__leaf_pos(st, x);
    if (te__vec_push(ctx, &st->leaves, NULL))
        return TE_ERR_NOMEM;
    memmove(&st->leaves.v[p + 2], &st->leaves.v[p + 1],
            sizeof(void *) * (size_t)(st->leaves.n - p - 2));
    st->leaves.v[p] = o;
    st->leaves.v[p + 1] = i;
    x->is_leaf = false;
    st->touched = true;
    if (outer)
        *outer = o;
    if (inner)
        *inner = i;
    return TE_OK;
}

int te_split(te_stage *st, te_iter *x, int64_t factor, te_iter **outer, te_iter **inner)
{
    if (!st)
        return TE_ERR_ARG;
    int rc = te__check_leaf(st, x, "te_split");
    if (rc)
        return rc;
    if (factor <= 0)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_split: stage '%s' iterator '%s': factor must be "
                        "positive, got %lld",
                        st->tensor->name, x->name, (long long)factor);
    if ((rc = te__check_not_attached(st, x, "te_split")))
        return rc;
    if ((rc = do_split(st, x, factor, outer, inner)))
        return rc;
    return te__trace_add(st->sched, "split %s %s %lld", st->tensor->name, x->name,
                         (long long)factor);
}

int te_split_nparts(te_stage *st, te_iter *x, int64_t nparts, te_iter **outer, te_iter **inner)
{
    if (!st)
        return TE_ERR_ARG;
    int rc = te__check_leaf(st, x, "te_split_nparts");
    if (rc)
        return rc;
    if (nparts <= 0)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_split_nparts: stage '%s' iterator '%s': nparts "
                        "must be positive, got %lld",
                        st->tensor->name, x->name, (long long)nparts);
    if ((rc = te__check_not_attached(st, x, "te_split_nparts")))
        return rc;
    int64_t factor = x->extent / nparts + (x->extent % nparts != 0); /* no overflow */
    if ((rc = do_split(st, x, factor, outer, inner)))
        return rc;
    return te__trace_add(st->sched, "split_nparts %s %s %lld", st->tensor->name, x->name,
                         (long long)nparts);
}

int te_tile(te_stage *st, te_iter *x, te_iter *y, int64_t xf, int64_t yf, te_iter **xo,
            te_iter **yo, te_iter **xi, te_iter **yi)
{
    if (!st)
        return TE_ERR_ARG;
    int rc;
    if ((rc = te__check_leaf(st, x, "te_tile")) || (rc = te__check_leaf(st, y, "te_tile")))
        return rc;
    if (te__leaf_pos(st, y) != te__leaf_pos(st, x) + 1)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_tile: stage '%s': '%s' must be the loop "
                        "directly inside '%s'",
                        st->tensor->name, y->name, x->name);
    if (xf <= 0 || yf <= 0)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_tile: stage '%s': factors must be positive, got "
                        "%lld and %lld",
                        st->tensor->name, (long long)xf, (long long)yf);
    if ((rc = te__check_not_attached(st, x, "te_tile")) ||
        (rc = te__check_not_attached(st, y, "te_tile")))
        return rc;
    te_iter *a, *b, *c, *d;
    if ((rc = do_split(st, x, xf, &a, &b)) || (rc = do_split(st, y, yf, &c, &d)))
        return rc;
    /* (a, b, c, d) -> (a, c, b, d) */
    int p = te__leaf_pos(st, b);
    st->leaves.v[p] = c;
    st->leaves.v[p + 1] = b;
    if (xo)
        *xo = a;
    if (yo)
        *yo = c;
    if (xi)
        *xi = b;
    if (yi)
        *yi = d;
    return te__trace_add(st->sched, "tile %s %s %s %lld %lld", st->tensor->name, x->name, y->name,
                         (long long)xf, (long long)yf);
}

int te_fuse(te_stage *st, te_iter *outer, te_iter *inner, te_iter **fused)
{
    if (!st)
        return TE_ERR_ARG;
    int rc;
    if ((rc = te__check_leaf(st, outer, "te_fuse")) || (rc = te__check_leaf(st, inner, "te_fuse")))
        return rc;
    if (te__leaf_pos(st, inner) != te__leaf_pos(st, outer) + 1)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_fuse: stage '%s': '%s' must be the loop "
                        "directly inside '%s'",
                        st->tensor->name, inner->name, outer->name);
    if (outer->reduce != inner->reduce)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_fuse: stage '%s': cannot fuse reduction "
                        "loop with data-parallel loop ('%s', '%s')",
                        st->tensor->name, outer->name, inner->name);
    if (outer->extent > INT64_MAX / inner->extent)
        return TE__SERR(st->sched, TE_ERR_OVERFLOW, "te_fuse: extent overflows");
    if ((rc = te__check_not_attached(st, outer, "te_fuse")) ||
        (rc = te__check_not_attached(st, inner, "te_fuse")))
        return rc;
    te_ctx *ctx = st->sched->ctx;
    char buf[200];
    snprintf(buf, sizeof buf, "%s_%s_f", outer->name, inner->name);
    const char *name = te__unique_iter_name(st, buf);
    te_iter *f = name ? te__new_iter(st, name, outer->extent * inner->extent, outer->reduce) : NULL;
    te_rel *r = te__alloc(ctx, sizeof *r);
    if (!f || !r)
        return TE_ERR_NOMEM;
    r->kind = TE_REL_FUSE;
    r->outer = outer;
    r->inner = inner;
    r->fused = f;
    if (te__vec_push(ctx, &st->rels, r))
        return TE_ERR_NOMEM;
    int p = te__leaf_pos(st, outer);
    st->leaves.v[p] = f;
    memmove(&st->leaves.v[p + 1], &st->leaves.v[p + 2],
            sizeof(void *) * (size_t)(st->leaves.n - p - 2));
    st->leaves.n--;
    outer->is_leaf = inner->is_leaf = false;
    st->touched = true;
    if (fused)
        *fused = f;
    return te__trace_add(st->sched, "fuse %s %s %s", st->tensor->name, outer->name, inner->name);
}

int te_reorder(te_stage *st, int n, te_iter *const *order)
{
    if (!st)
        return TE_ERR_ARG;
    if (n <= 0 || !order)
        return TE__SERR(st->sched, TE_ERR_ARG, "te_reorder: stage '%s': needs at least one loop",
                        st->tensor->name);
    int pos[64];
    if (n > 64)
        return TE__SERR(st->sched, TE_ERR_ARG, "te_reorder: too many loops");
    for (int i = 0; i < n; i++) {
        int rc = te__check_leaf(st, order[i], "te_reorder");
        if (rc)
            return rc;
        for (int j = 0; j < i; j++)
            if (order[j] == order[i])
                return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                                "te_reorder: stage '%s': loop '%s' is "
                                "named twice",
                                st->tensor->name, order[i]->name);
        pos[i] = te__leaf_pos(st, order[i]);
    }
    /* Sort the occupied positions, then fill them in the requested order. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
            int t = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = t;
        }
    char line[512];
    int len = snprintf(line, sizeof line, "reorder %s", st->tensor->name);
    for (int i = 0; i < n; i++) {
        st->leaves.v[pos[i]] = order[i];
        if (len < (int)sizeof line)
            len += snprintf(line + len, sizeof line - (size_t)len, " %s", order[i]->name);
    }
    st->touched = true;
    return te__trace_add(st->sched, "%s", line);
}

/* ---- Annotations ------------------------------------------------------------------------ */

/* Checks shared by the loop annotations: x is a current, unannotated loop of st. */
static int check_annotatable(te_stage *st, te_iter *x, const char *fn)
{
    if (!st)
        return TE_ERR_ARG;
    int rc = te__check_leaf(st, x, fn);
    if (rc)
        return rc;
    if (x->ann != TE_ANN_NONE)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "%s: loop '%s' of stage '%s' is already "
                        "annotated",
                        fn, x->name, st->tensor->name);
    return TE_OK;
}

static int annotate(te_stage *st, te_iter *x, te_iter_ann ann, const char *verb)
{
    x->ann = ann;
    return te__trace_add(st->sched, "%s %s %s", verb, st->tensor->name, x->name);
}

int te_vectorize(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_vectorize");
    if (rc)
        return rc;
    if (te__leaf_pos(st, x) != st->leaves.n - 1)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_vectorize: loop '%s' of stage '%s' is not the "
                        "innermost loop (the innermost is '%s'); reorder first",
                        x->name, st->tensor->name,
                        ((te_iter *)st->leaves.v[st->leaves.n - 1])->name);
    return annotate(st, x, TE_ANN_VECTORIZE, "vectorize");
}

int te_unroll(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_unroll");
    return rc ? rc : annotate(st, x, TE_ANN_UNROLL, "unroll");
}

int te_reduce_tree(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_reduce_tree");
    if (rc)
        return rc;
    const char *nm = st->tensor->name;
    if (!x->reduce)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_reduce_tree: loop '%s' of stage '%s' is not a reduction loop", x->name,
                        nm);
    if (x->extent < 2 || x->extent > TE_REDUCE_TREE_MAX)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_reduce_tree: loop '%s' of stage '%s' has %lld iterations; a tree "
                        "fold unrolls 2 to %d",
                        x->name, nm, (long long)x->extent, TE_REDUCE_TREE_MAX);
    if (st->tree_at)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_reduce_tree: stage '%s' already folds loop '%s' as a tree", nm,
                        st->tree_at->name);
    for (int k = te__leaf_pos(st, x) + 1; k < st->leaves.n; k++)
        if (((te_iter *)st->leaves.v[k])->reduce)
            return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                            "te_reduce_tree: reduction loop '%s' of stage '%s' is inside '%s'; "
                            "only spatial loops may be (reorder first)",
                            ((te_iter *)st->leaves.v[k])->name, nm, x->name);
    st->tree_at = x;
    return annotate(st, x, TE_ANN_UNROLL, "reduce_tree");
}

int te_parallel(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_parallel");
    if (rc)
        return rc;
    if (x->reduce)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_parallel: loop '%s' of stage '%s' is a "
                        "reduction loop; running it in parallel would race on the accumulator",
                        x->name, st->tensor->name);
    for (int i = 0; i < st->leaves.n; i++) {
        te_iter *o = st->leaves.v[i];
        if (o->ann == TE_ANN_PARALLEL)
            return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                            "te_parallel: stage '%s' already has a "
                            "parallel loop '%s'; fuse the loops and parallelize the fused one",
                            st->tensor->name, o->name);
    }
    return annotate(st, x, TE_ANN_PARALLEL, "parallel");
}

int te_pragma_unroll_max(te_stage *st, int max_steps)
{
    if (!st)
        return TE_ERR_ARG;
    if (max_steps < 0 || max_steps > 4096)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_pragma_unroll_max: stage '%s': max_steps must be "
                        "in [0, 4096], got %d",
                        st->tensor->name, max_steps);
    st->unroll_max = max_steps;
    return te__trace_add(st->sched, "unroll_max %s %d", st->tensor->name, max_steps);
}

int te_stage_nontemporal(te_stage *st, bool on)
{
    if (!st)
        return TE_ERR_ARG;
    if (on && !st->is_output)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_stage_nontemporal: stage '%s' is not an "
                        "output; streaming stores only pay off for results written to memory once",
                        st->tensor->name);
    st->nontemporal = on;
    return te__trace_add(st->sched, "nontemporal %s %d", st->tensor->name, on ? 1 : 0);
}

int te_prefetch(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist)
{
    return te_prefetch_level(st, at, t, ahead, dist, 1);
}

int te_prefetch_level(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist,
                      int level)
{
    return te_prefetch_lines(st, at, t, ahead, dist, level, TE__PREFETCH_MAX_LINES);
}

int te_prefetch_lines(te_stage *st, te_iter *at, te_tensor *t, te_iter *ahead, int64_t dist,
                      int level, int lines)
{
    if (!st || !at || !t || !ahead)
        return TE_ERR_ARG;
    if (lines < 1 || lines > TE__PREFETCH_MAX_LINES)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_prefetch: stage '%s': the lines per iteration must be in [1, %d], got "
                        "%d",
                        st->tensor->name, TE__PREFETCH_MAX_LINES, lines);
    if (level < 1 || level > 3)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_prefetch: stage '%s': the cache level must be 1, 2 or 3, got %d",
                        st->tensor->name, level);
    if (dist < 1 || dist > 1024)
        return TE__SERR(st->sched, TE_ERR_ARG,
                        "te_prefetch: stage '%s': the distance must be in [1, 1024], got %lld",
                        st->tensor->name, (long long)dist);
    int rc = te__check_leaf(st, at, "te_prefetch");
    if (rc)
        return rc;
    if (at->ann == TE_ANN_VECTORIZE)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_prefetch: stage '%s': loop '%s' is vectorized; prefetch at the loop "
                        "outside it",
                        st->tensor->name, at->name);
    int pos_at = -1, pos_ahead = -1;
    for (int k = 0; k < st->leaves.n; k++) {
        if (st->leaves.v[k] == at)
            pos_at = k;
        if (st->leaves.v[k] == ahead)
            pos_ahead = k;
    }
    bool outer = st->attach == TE_ATTACH_AT && ahead == st->attach_iter;
    if (!outer && (pos_ahead < 0 || pos_ahead > pos_at))
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_prefetch: stage '%s': loop '%s' is neither a loop of the stage at or "
                        "outside '%s' nor the loop the stage is computed at",
                        st->tensor->name, ahead->name, at->name);
    if (!st->body || !te__expr_reads(st->body, t))
        return TE__SERR(st->sched, TE_ERR_SCHEDULE, "te_prefetch: stage '%s' does not read '%s'",
                        st->tensor->name, t->name);
    if (t->kind == TE_T_COMPUTE) {
        te_stage *ts = te_schedule_stage(st->sched, t);
        if (ts && ts->attach != TE_ATTACH_ROOT)
            return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                            "te_prefetch: '%s' is not computed at the root; only inputs and "
                            "root stages live in memory for the whole kernel",
                            t->name);
    }
    te__prefetch *pf = te__alloc(st->sched->ctx, sizeof *pf);
    if (!pf)
        return TE_ERR_NOMEM;
    *pf = (te__prefetch){at, ahead, t, dist, level, lines};
    if (te__vec_push(st->sched->ctx, &st->prefetches, pf))
        return TE_ERR_NOMEM;
    char lv[16] = ""; /* level 1 keeps the line of traces recorded before levels existed */
    if (lines != TE__PREFETCH_MAX_LINES)
        snprintf(lv, sizeof lv, " %d %d", level, lines);
    else if (level != 1)
        snprintf(lv, sizeof lv, " %d", level);
    return te__trace_add(st->sched, "prefetch %s %s %s %s %s %lld%s", st->tensor->name, at->name,
                         t->name, outer ? st->attach_stage->tensor->name : st->tensor->name,
                         ahead->name, (long long)dist, lv);
}

int te_bind(te_stage *st, te_iter *x, te_thread_tag tag)
{
    if (!st)
        return TE_ERR_ARG;
    int rc = te__check_leaf(st, x, "te_bind");
    if (rc)
        return rc;
    if ((unsigned)tag > TE_VTHREAD)
        return TE__SERR(st->sched, TE_ERR_ARG, "te_bind: invalid thread tag %d", (int)tag);
    if (x->reduce)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "te_bind: loop '%s' of stage '%s' is a reduction "
                        "loop (use rfactor for cross-thread reductions)",
                        x->name, st->tensor->name);
    x->ann = tag == TE_VTHREAD ? TE_ANN_VTHREAD : TE_ANN_BIND;
    x->tag = tag;
    static const char *tags[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z", "threadIdx.x",
                                 "threadIdx.y", "threadIdx.z", "vthread"};
    return te__trace_add(st->sched, "bind %s %s %s", st->tensor->name, x->name, tags[tag]);
}
