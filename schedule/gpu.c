/*
 * schedule/gpu.c: scheduling primitives that only GPU schedules use (storage_align,
 * double_buffer, bind_reduce), and the lookups lowering uses to read them back.
 *
 * storage_align and double_buffer change how a stage's buffer is laid out, not which loops run,
 * so they need no field in te_stage: the schedule's trace records them ("storage_align AS 0 32
 * 1") and lowering reads the last such line for a stage. The trace stays the single source of
 * truth, and replaying it reproduces them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/passes.h"
#include "schedule/sched_impl.h"

int te_storage_align(te_stage *st, int axis, int factor, int offset)
{
    if (!st)
        return TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (st->ndim < 2 || axis != st->ndim - 2)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_storage_align: stage '%s' has %d axes; only the "
                        "second-to-last axis (%d) can be aligned, got %d",
                        nm, st->ndim, st->ndim - 2, axis);
    if (factor <= 0 || offset < 0 || offset >= factor)
        return TE__SERR(s, TE_ERR_ARG,
                        "te_storage_align: stage '%s': need factor > 0 and 0 <= "
                        "offset < factor, got factor %d offset %d",
                        nm, factor, offset);
    if (st->is_output)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_storage_align: stage '%s' is an output; its layout is "
                        "the caller's row-major array",
                        nm);
    return te__trace_add(s, "storage_align %s %d %d %d", nm, axis, factor, offset);
}

int te_double_buffer(te_stage *st)
{
    if (!st)
        return TE_ERR_ARG;
    te_schedule *s = st->sched;
    if (st->scope != TE_SCOPE_SHARED)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_double_buffer: stage '%s' is not in shared memory "
                        "(make it with te_cache_read(..., TE_SCOPE_SHARED, ...))",
                        st->tensor->name);
    if (st->attach != TE_ATTACH_AT)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_double_buffer: stage '%s' must be computed inside a "
                        "loop (te_compute_at) whose iterations alternate between the two buffers",
                        st->tensor->name);
    return te__trace_add(s, "double_buffer %s", st->tensor->name);
}

int te_bind_reduce(te_stage *st, te_iter *x, te_thread_tag tag)
{
    if (!st)
        return TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (!x || x->stage != st || !x->is_leaf || te__leaf_pos(st, x) < 0)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_bind_reduce: '%s' is not a current loop of stage "
                        "'%s'",
                        x ? x->name : "(null)", nm);
    if (!x->reduce)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_bind_reduce: loop '%s' of stage '%s' is not a "
                        "reduction loop (use te_bind)",
                        x->name, nm);
    if (tag < TE_THREAD_X || tag > TE_THREAD_Z)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_bind_reduce: loop '%s' of stage '%s': a cross-thread "
                        "reduction needs a threadIdx axis",
                        x->name, nm);
    if (x->ann != TE_ANN_NONE)
        return TE__SERR(s, TE_ERR_SCHEDULE,
                        "te_bind_reduce: loop '%s' of stage '%s' is already "
                        "annotated",
                        x->name, nm);
    for (int l = te__leaf_pos(st, x) + 1; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (!it->reduce)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_bind_reduce: stage '%s': loop '%s' inside '%s' "
                            "is not a reduction loop; move the data-parallel loops outside first",
                            nm, it->name, x->name);
        if (it->ann == TE_ANN_BIND)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_bind_reduce: stage '%s': only one reduction loop "
                            "can be bound to threads",
                            nm);
    }
    for (int l = 0; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (it->reduce && it->ann == TE_ANN_BIND)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "te_bind_reduce: stage '%s': loop '%s' is already "
                            "bound; only one reduction loop can be bound to threads",
                            nm, it->name);
    }
    x->ann = TE_ANN_BIND;
    x->tag = tag;
    static const char *tags[] = {"threadIdx.x", "threadIdx.y", "threadIdx.z"};
    return te__trace_add(s, "bind_reduce %s %s %s", nm, x->name, tags[tag - TE_THREAD_X]);
}

/* ---- Reading the annotations back ------------------------------------------------------- */

/* The last trace line "<verb> <stage> ..." for this stage, or NULL. */
static const char *last_line(const te_schedule *s, const char *verb, const char *stage)
{
    size_t nv = strlen(verb), ns = strlen(stage);
    for (int i = s->trace.n - 1; i >= 0; i--) {
        const char *l = s->trace.v[i];
        if (strncmp(l, verb, nv) == 0 && l[nv] == ' ' && strncmp(l + nv + 1, stage, ns) == 0 &&
            (l[nv + 1 + ns] == ' ' || l[nv + 1 + ns] == 0))
            return l + nv + 1 + ns;
    }
    return NULL;
}

bool te__gpu_storage_align_of(const te_schedule *s, const char *stage, int *axis, int *factor,
                              int *offset)
{
    if (!s || !stage)
        return false;
    const char *rest = last_line(s, "storage_align", stage);
    return rest && sscanf(rest, "%d %d %d", axis, factor, offset) == 3;
}

bool te__gpu_is_double_buffered(const te_schedule *s, const char *stage)
{
    return s && stage && last_line(s, "double_buffer", stage) != NULL;
}

void te__gpu_apply_layout(const te_schedule *s, te_buf *b)
{
    int axis, factor, offset;
    if (!b || !b->tensor || !te__gpu_storage_align_of(s, b->tensor->name, &axis, &factor, &offset))
        return;
    if (axis != b->ndim - 2 || axis < 0)
        return;
    int64_t stride = b->shape[b->ndim - 1];
    int64_t pad = ((offset - stride) % factor + factor) % factor;
    b->shape[b->ndim - 1] = stride + pad;
}
