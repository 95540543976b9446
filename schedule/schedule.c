/*
 * schedule/schedule.c: the shared core of schedules. Building a schedule from its outputs
 * (one stage per computed tensor), looking up stages, tensors and iterators, the trace every
 * accepted primitive appends to, printing, and the validation helpers the primitives share.
 *
 * The primitives themselves live by job: loops.c (split, fuse, reorder, tile and the loop
 * annotations), placement.c (compute_at, compute_inline, compute_root), dataflow.c
 * (cache_read, cache_write, rfactor) and gpu.c (GPU-only primitives). Each validates
 * everything first and changes the schedule only when the request is legal.
 */
#include <stdarg.h>
#include <string.h>

#include "schedule/sched_impl.h"

int te__trace_add(te_schedule *s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *line = te__strdup(s->ctx, buf);
    s->trace_text = NULL;
    return line ? te__vec_push(s->ctx, &s->trace, line) : TE_ERR_NOMEM;
}

/* ---- Graph ---------------------------------------------------------------------------- */

typedef struct {
    const te_tensor *t;
    bool found;
} reads_ctx;

static bool reads_fn(const te_expr *e, void *user)
{
    reads_ctx *r = user;
    if (e->kind == TE_E_READ && te__tensor_same_stage(e->u.read.t, r->t))
        r->found = true;
    return !r->found;
}

bool te__expr_reads(const te_expr *e, const te_tensor *t)
{
    reads_ctx r = {t, false};
    te__expr_visit(e, reads_fn, &r);
    return r.found;
}

int te__stage_readers(te_schedule *s, const te_tensor *t, te_stage **out, int max)
{
    int n = 0;
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *st = s->stages.v[i];
        if (te__expr_reads(st->body, t)) {
            if (n < max)
                out[n] = st;
            n++;
        }
    }
    return n;
}

te_iter *te__new_iter(te_stage *st, const char *name, int64_t extent, bool reduce)
{
    te_ctx *ctx = st->sched->ctx;
    te_iter *it = te__alloc(ctx, sizeof *it);
    if (!it)
        return NULL;
    it->name = te__strdup(ctx, name);
    it->var = te__loop_var(ctx, name, extent);
    it->extent = extent;
    it->reduce = reduce;
    it->is_leaf = true;
    it->stage = st;
    if (!it->name || !it->var || te__vec_push(ctx, &st->iters, it))
        return NULL;
    return it;
}

te_stage *te__new_stage(te_schedule *s, te_tensor *t, te_expr *const *axes, te_expr *body)
{
    te_ctx *ctx = s->ctx;
    te_stage *st = te__alloc(ctx, sizeof *st);
    if (!st)
        return NULL;
    st->sched = s;
    st->tensor = t;
    st->ntuple = t->tuple_n;
    st->tuple = t->tuple;
    st->ndim = t->ndim;
    const te_expr *from[2 * TE_MAX_DIMS];
    te_expr *to[2 * TE_MAX_DIMS];
    int nm = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (!(st->axes[d] = te__new_iter(st, axes[d]->u.var.name, t->shape[d], false)))
            return NULL;
        from[nm] = axes[d];
        to[nm++] = st->axes[d]->var;
    }
    if (body->kind == TE_E_REDUCE) {
        st->nred = body->u.red.n;
        for (int r = 0; r < st->nred; r++) {
            te_expr *ax = body->u.red.axes[r];
            if (!(st->raxes[r] = te__new_iter(st, ax->u.var.name, ax->u.var.extent, true)))
                return NULL;
            from[nm] = ax;
            to[nm++] = st->raxes[r]->var;
        }
    }
    te__subst map = {nm, from, to};
    st->body = te__substitute(ctx, body, &map);
    if (!st->body)
        return NULL;
    for (int d = 0; d < st->ndim; d++)
        if (te__vec_push(ctx, &st->leaves, st->axes[d]))
            return NULL;
    for (int r = 0; r < st->nred; r++)
        if (te__vec_push(ctx, &st->leaves, st->raxes[r]))
            return NULL;
    st->scope = TE_SCOPE_GLOBAL;
    return st;
}

typedef struct {
    te_schedule *s;
    int err;
} collect_ctx;

static int collect(te_schedule *s, te_tensor *t, int depth);

static bool collect_fn(const te_expr *e, void *user)
{
    collect_ctx *c = user;
    if (!c->err && e->kind == TE_E_READ && e->u.read.t->kind == TE_T_COMPUTE)
        c->err = collect(c->s, e->u.read.t, 1);
    return !c->err;
}

static int collect(te_schedule *s, te_tensor *t, int depth)
{
    for (int i = 0; i < s->stages.n; i++)
        if (te__tensor_same_stage(((te_stage *)s->stages.v[i])->tensor, t))
            return TE_OK;
    if (depth > 10000)
        return TE__SERR(s, TE_ERR_ARG, "te_schedule_create: dependency chain too deep");
    collect_ctx c = {s, TE_OK};
    te__expr_visit(t->body, collect_fn, &c);
    if (c.err)
        return c.err;
    /* A tuple compute: one stage for all its outputs, named after the first. */
    t = te__tuple_primary(t);
    te_stage *st = te__new_stage(s, t, t->axes, t->body);
    if (!st)
        return te_ctx_errcode(s->ctx) ? te_ctx_errcode(s->ctx) : TE_ERR_NOMEM;
    return te__vec_push(s->ctx, &s->stages, st);
}

/* Traces, lowering and the emitted code address tensors by name, so every tensor of a
 * schedule (each stage's and each placeholder a stage reads) must have its own. */
typedef struct {
    te_schedule *s;
    te__vec seen; /* te_tensor*, distinct */
    int err;
} names_ctx;

static int name_seen(names_ctx *c, te_tensor *t)
{
    for (int i = 0; i < c->seen.n; i++) {
        te_tensor *o = c->seen.v[i];
        if (o == t)
            return TE_OK;
        if (!strcmp(o->name, t->name)) {
            bool p1 = o->kind == TE_T_PLACEHOLDER, p2 = t->kind == TE_T_PLACEHOLDER;
            return TE__SERR(c->s, TE_ERR_ARG,
                            "te_schedule_create: %s named '%s'; tensor names must be unique "
                            "within a schedule (traces and generated code address tensors by "
                            "name)",
                            p1 && p2   ? "two placeholders are"
                            : p1 || p2 ? "a placeholder and a compute are both"
                                       : "two computes are",
                            t->name);
        }
    }
    return te__vec_push(c->s->ctx, &c->seen, t);
}

static bool names_fn(const te_expr *e, void *user)
{
    names_ctx *c = user;
    if (!c->err && e->kind == TE_E_READ)
        c->err = name_seen(c, e->u.read.t);
    return !c->err;
}

static int check_unique_names(te_schedule *s)
{
    names_ctx c = {s, {0}, TE_OK};
    for (int i = 0; i < s->stages.n && !c.err; i++) {
        te_stage *st = s->stages.v[i];
        c.err = name_seen(&c, st->tensor);
        for (int k = 1; k < st->ntuple && !c.err; k++)
            c.err = name_seen(&c, st->tuple[k]);
    }
    for (int i = 0; i < s->stages.n && !c.err; i++)
        te__expr_visit(((te_stage *)s->stages.v[i])->body, names_fn, &c);
    return c.err;
}

te_schedule *te_schedule_create(te_ctx *ctx, int n_out, te_tensor *const *outs)
{
    if (!ctx)
        return NULL;
    if (n_out <= 0 || !outs) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_schedule_create: needs at least one output");
        return NULL;
    }
    te_schedule *s = te__alloc(ctx, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->n_out = n_out;
    s->outs = te__alloc(ctx, sizeof(te_tensor *) * (size_t)n_out);
    if (!s->outs)
        return NULL;
    for (int i = 0; i < n_out; i++) {
        if (!outs[i]) {
            /* Keeps the first error: a NULL from a failed te_compute reports its cause. */
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_schedule_create: output %d of %d is NULL", i,
                             n_out);
            return NULL;
        }
        if (outs[i]->kind != TE_T_COMPUTE) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_schedule_create: output '%s' is a placeholder; "
                             "outputs must be computed tensors",
                             outs[i]->name);
            return NULL;
        }
        s->outs[i] = outs[i];
        if (collect(s, outs[i], 0))
            return NULL;
    }
    if (check_unique_names(s))
        return NULL;
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *st = s->stages.v[i];
        for (int o = 0; o < n_out; o++)
            st->is_output |= te__tensor_same_stage(st->tensor, outs[o]);
    }
    return s;
}

te_ctx *te_schedule_ctx(const te_schedule *s) { return s ? s->ctx : NULL; }

te_stage *te_schedule_stage(te_schedule *s, const te_tensor *t)
{
    if (!s)
        return NULL;
    for (int i = 0; t && i < s->stages.n; i++)
        if (te__tensor_same_stage(((te_stage *)s->stages.v[i])->tensor, t))
            return s->stages.v[i];
    TE__SERR(s, TE_ERR_ARG, "te_schedule_stage: tensor '%s' is not computed in this schedule%s",
             t ? t->name : "(null)",
             t && t->kind == TE_T_PLACEHOLDER ? " (it is a placeholder)" : "");
    return NULL;
}

te_stage *te_schedule_stage_by_name(te_schedule *s, const char *name)
{
    for (int i = 0; s && name && i < s->stages.n; i++)
        if (!strcmp(((te_stage *)s->stages.v[i])->tensor->name, name))
            return s->stages.v[i];
    return NULL;
}

typedef struct {
    const char *name;
    te_tensor *found;
} find_ph;

static bool find_ph_fn(const te_expr *e, void *user)
{
    find_ph *f = user;
    if (e->kind == TE_E_READ && !strcmp(e->u.read.t->name, f->name))
        f->found = e->u.read.t;
    return !f->found;
}

te_tensor *te_schedule_tensor_by_name(te_schedule *s, const char *name)
{
    te_stage *st = te_schedule_stage_by_name(s, name);
    if (st || !s || !name)
        return st ? st->tensor : NULL;
    for (int i = 0; i < s->stages.n; i++) { /* the other outputs of a tuple compute */
        te_stage *o = s->stages.v[i];
        for (int k = 1; k < o->ntuple; k++)
            if (!strcmp(o->tuple[k]->name, name))
                return o->tuple[k];
    }
    find_ph f = {name, NULL};
    for (int i = 0; i < s->stages.n && !f.found; i++)
        te__expr_visit(((te_stage *)s->stages.v[i])->body, find_ph_fn, &f);
    return f.found;
}

int te_schedule_nstages(const te_schedule *s) { return s ? s->stages.n : 0; }

te_stage *te_schedule_stage_at(const te_schedule *s, int i)
{
    return s && i >= 0 && i < s->stages.n ? s->stages.v[i] : NULL;
}

const char *te_schedule_trace(te_schedule *s)
{
    if (!s)
        return "";
    if (s->trace_text)
        return s->trace_text;
    size_t n = 1;
    for (int i = 0; i < s->trace.n; i++)
        n += strlen(s->trace.v[i]) + 1;
    char *p = te__alloc(s->ctx, n);
    if (!p)
        return "";
    for (int i = 0; i < s->trace.n; i++) {
        strcat(p, s->trace.v[i]);
        strcat(p, "\n");
    }
    return s->trace_text = p;
}

static const char *ann_name(const te_iter *it)
{
    static const char *names[] = {"", " vectorized", " unrolled", " parallel", " bound"};
    return names[it->ann];
}

void te_schedule_print(const te_schedule *s, FILE *f)
{
    for (int i = 0; s && i < s->stages.n; i++) {
        const te_stage *st = s->stages.v[i];
        fprintf(f, "stage %s", st->tensor->name);
        if (st->attach == TE_ATTACH_INLINE)
            fputs(" inline", f);
        else if (st->attach == TE_ATTACH_AT)
            fprintf(f, " at %s.%s", st->attach_stage->tensor->name, st->attach_iter->name);
        else
            fputs(" root", f);
        fputs(":", f);
        for (int l = 0; l < st->leaves.n; l++) {
            const te_iter *it = st->leaves.v[l];
            fprintf(f, " %s(%lld%s%s)", it->name, (long long)it->extent,
                    it->reduce ? " reduce" : "", ann_name(it));
        }
        fputc('\n', f);
    }
}

/* ---- Stage accessors -------------------------------------------------------------------- */

te_tensor *te_stage_tensor(const te_stage *st) { return st ? st->tensor : NULL; }
const char *te_stage_name(const te_stage *st) { return st ? st->tensor->name : NULL; }
te_iter *te_stage_axis(te_stage *st, int i)
{
    if (!st)
        return NULL;
    if (i < 0 || i >= st->ndim) {
        TE__SERR(st->sched, TE_ERR_ARG, "stage '%s' has %d axes; axis %d does not exist",
                 st->tensor->name, st->ndim, i);
        return NULL;
    }
    return st->axes[i];
}
te_iter *te_stage_reduce_axis(te_stage *st, int i)
{
    if (!st)
        return NULL;
    if (i < 0 || i >= st->nred) {
        TE__SERR(st->sched, TE_ERR_ARG,
                 "stage '%s' has %d reduction axes; reduction axis %d does "
                 "not exist",
                 st->tensor->name, st->nred, i);
        return NULL;
    }
    return st->raxes[i];
}
int te_stage_nreduce(const te_stage *st) { return st ? st->nred : 0; }
int te_stage_nleaves(const te_stage *st) { return st ? st->leaves.n : 0; }
te_iter *te_stage_leaf(te_stage *st, int i)
{
    return st && i >= 0 && i < st->leaves.n ? st->leaves.v[i] : NULL;
}
te_iter *te_stage_iter(te_stage *st, const char *name)
{
    for (int i = 0; st && name && i < st->iters.n; i++)
        if (!strcmp(((te_iter *)st->iters.v[i])->name, name))
            return st->iters.v[i];
    return NULL;
}
const char *te_iter_name(const te_iter *it) { return it ? it->name : NULL; }
int64_t te_iter_extent(const te_iter *it) { return it ? it->extent : 0; }
bool te_iter_is_reduce(const te_iter *it) { return it && it->reduce; }

/* ---- Validation helpers ---------------------------------------------------------------- */

int te__leaf_pos(const te_stage *st, const te_iter *it)
{
    for (int i = 0; i < st->leaves.n; i++)
        if (st->leaves.v[i] == it)
            return i;
    return -1;
}

int te__check_leaf(te_stage *st, const te_iter *x, const char *fn)
{
    if (!x)
        return TE__SERR(st->sched, TE_ERR_ARG, "%s: stage '%s': iterator is NULL", fn,
                        st->tensor->name);
    if (x->stage != st)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "%s: iterator '%s' belongs to stage '%s', not to "
                        "stage '%s'",
                        fn, x->name, x->stage->tensor->name, st->tensor->name);
    if (!x->is_leaf || te__leaf_pos(st, x) < 0)
        return TE__SERR(st->sched, TE_ERR_SCHEDULE,
                        "%s: iterator '%s' of stage '%s' is not a "
                        "current loop (it was split or fused already)",
                        fn, x->name, st->tensor->name);
    return TE_OK;
}

int te__check_not_attached(te_stage *st, const te_iter *x, const char *fn)
{
    te_schedule *s = st->sched;
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *o = s->stages.v[i];
        if (o->attach == TE_ATTACH_AT && o->attach_iter == x)
            return TE__SERR(s, TE_ERR_SCHEDULE,
                            "%s: stage '%s' is computed at loop '%s' of stage "
                            "'%s'; transform the loop before compute_at",
                            fn, o->tensor->name, x->name, st->tensor->name);
    }
    return TE_OK;
}

const char *te__unique_iter_name(te_stage *st, const char *base)
{
    te_ctx *ctx = st->sched->ctx;
    if (!te_stage_iter(st, base))
        return te__strdup(ctx, base);
    for (int k = 1;; k++) {
        char *n = te__sprintf(ctx, "%s%d", base, k);
        if (!n || !te_stage_iter(st, n))
            return n;
    }
}
