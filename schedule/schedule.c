/* Schedule construction and the scheduling primitives. Each primitive validates everything
 * first and changes the schedule only when the request is legal. */
#include <string.h>

#include "schedule/sched_impl.h"

#define SERR(s, code, ...) te_ctx_set_error((s)->ctx, code, __VA_ARGS__)

static int trace_add(te_schedule *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int trace_add(te_schedule *s, const char *fmt, ...)
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
    if (e->kind == TE_E_READ && e->u.read.t == r->t)
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

static te_iter *new_iter(te_stage *st, const char *name, int64_t extent, bool reduce)
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

/* Makes a stage for tensor t whose body is `body` over `axes` / reduction axes found in body;
 * fresh loop variables replace them so that no two stages share a variable. */
static te_stage *new_stage(te_schedule *s, te_tensor *t, te_expr *const *axes, te_expr *body)
{
    te_ctx *ctx = s->ctx;
    te_stage *st = te__alloc(ctx, sizeof *st);
    if (!st)
        return NULL;
    st->sched = s;
    st->tensor = t;
    st->ndim = t->ndim;
    const te_expr *from[2 * TE_MAX_DIMS];
    te_expr *to[2 * TE_MAX_DIMS];
    int nm = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (!(st->axes[d] = new_iter(st, axes[d]->u.var.name, t->shape[d], false)))
            return NULL;
        from[nm] = axes[d];
        to[nm++] = st->axes[d]->var;
    }
    if (body->kind == TE_E_REDUCE) {
        st->nred = body->u.red.n;
        for (int r = 0; r < st->nred; r++) {
            te_expr *ax = body->u.red.axes[r];
            if (!(st->raxes[r] = new_iter(st, ax->u.var.name, ax->u.var.extent, true)))
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
        if (((te_stage *)s->stages.v[i])->tensor == t)
            return TE_OK;
    if (depth > 10000)
        return SERR(s, TE_ERR_ARG, "te_schedule_create: dependency chain too deep");
    collect_ctx c = {s, TE_OK};
    te__expr_visit(t->body, collect_fn, &c);
    if (c.err)
        return c.err;
    te_stage *st = new_stage(s, t, t->axes, t->body);
    if (!st)
        return te_ctx_errcode(s->ctx) ? te_ctx_errcode(s->ctx) : TE_ERR_NOMEM;
    return te__vec_push(s->ctx, &s->stages, st);
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
        if (!outs[i])
            return NULL;
        if (outs[i]->kind != TE_T_COMPUTE) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_schedule_create: output '%s' is a placeholder; "
                             "outputs must be computed tensors", outs[i]->name);
            return NULL;
        }
        s->outs[i] = outs[i];
        if (collect(s, outs[i], 0))
            return NULL;
    }
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *st = s->stages.v[i];
        for (int o = 0; o < n_out; o++)
            st->is_output |= st->tensor == outs[o];
    }
    return s;
}

te_ctx *te_schedule_ctx(const te_schedule *s) { return s ? s->ctx : NULL; }

te_stage *te_schedule_stage(te_schedule *s, const te_tensor *t)
{
    if (!s)
        return NULL;
    for (int i = 0; t && i < s->stages.n; i++)
        if (((te_stage *)s->stages.v[i])->tensor == t)
            return s->stages.v[i];
    SERR(s, TE_ERR_ARG, "te_schedule_stage: tensor '%s' is not computed in this schedule%s",
         t ? t->name : "(null)", t && t->kind == TE_T_PLACEHOLDER ? " (it is a placeholder)" : "");
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
            fprintf(f, " %s(%lld%s%s)", it->name, (long long)it->extent, it->reduce ? " reduce" : "",
                    ann_name(it));
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
        SERR(st->sched, TE_ERR_ARG, "stage '%s' has %d axes; axis %d does not exist",
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
        SERR(st->sched, TE_ERR_ARG, "stage '%s' has %d reduction axes; reduction axis %d does "
             "not exist", st->tensor->name, st->nred, i);
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

static int leaf_pos(const te_stage *st, const te_iter *it)
{
    for (int i = 0; i < st->leaves.n; i++)
        if (st->leaves.v[i] == it)
            return i;
    return -1;
}

static bool check_stage(te_stage *st, const char *fn)
{
    if (!st)
        return false;
    (void)fn;
    return true;
}

/* x must be a current loop of st. */
static int check_leaf(te_stage *st, const te_iter *x, const char *fn)
{
    if (!x)
        return SERR(st->sched, TE_ERR_ARG, "%s: stage '%s': iterator is NULL", fn,
                    st->tensor->name);
    if (x->stage != st)
        return SERR(st->sched, TE_ERR_SCHEDULE, "%s: iterator '%s' belongs to stage '%s', not to "
                    "stage '%s'", fn, x->name, x->stage->tensor->name, st->tensor->name);
    if (!x->is_leaf || leaf_pos(st, x) < 0)
        return SERR(st->sched, TE_ERR_SCHEDULE, "%s: iterator '%s' of stage '%s' is not a "
                    "current loop (it was split or fused already)", fn, x->name,
                    st->tensor->name);
    return TE_OK;
}

static int check_not_attached(te_stage *st, const te_iter *x, const char *fn)
{
    te_schedule *s = st->sched;
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *o = s->stages.v[i];
        if (o->attach == TE_ATTACH_AT && o->attach_iter == x)
            return SERR(s, TE_ERR_SCHEDULE, "%s: stage '%s' is computed at loop '%s' of stage "
                        "'%s'; transform the loop before compute_at", fn, o->tensor->name,
                        x->name, st->tensor->name);
    }
    return TE_OK;
}

static const char *unique_name(te_stage *st, const char *base)
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

/* ---- Loop transformations --------------------------------------------------------------- */

static int do_split(te_stage *st, te_iter *x, int64_t factor, te_iter **outer, te_iter **inner)
{
    te_ctx *ctx = st->sched->ctx;
    char buf[160];
    snprintf(buf, sizeof buf, "%s_o", x->name);
    const char *on = unique_name(st, buf);
    snprintf(buf, sizeof buf, "%s_i", x->name);
    const char *in = unique_name(st, buf);
    if (!on || !in)
        return TE_ERR_NOMEM;
    int64_t inner_ext = factor < x->extent ? factor : x->extent;
    te_iter *o = new_iter(st, on, (x->extent + factor - 1) / factor, x->reduce);
    te_iter *i = new_iter(st, in, inner_ext, x->reduce);
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
    int p = leaf_pos(st, x);
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
    if (!check_stage(st, "te_split"))
        return TE_ERR_ARG;
    int rc = check_leaf(st, x, "te_split");
    if (rc)
        return rc;
    if (factor <= 0)
        return SERR(st->sched, TE_ERR_ARG, "te_split: stage '%s' iterator '%s': factor must be "
                    "positive, got %lld", st->tensor->name, x->name, (long long)factor);
    if ((rc = check_not_attached(st, x, "te_split")))
        return rc;
    if ((rc = do_split(st, x, factor, outer, inner)))
        return rc;
    return trace_add(st->sched, "split %s %s %lld", st->tensor->name, x->name, (long long)factor);
}

int te_split_nparts(te_stage *st, te_iter *x, int64_t nparts, te_iter **outer, te_iter **inner)
{
    if (!check_stage(st, "te_split_nparts"))
        return TE_ERR_ARG;
    int rc = check_leaf(st, x, "te_split_nparts");
    if (rc)
        return rc;
    if (nparts <= 0)
        return SERR(st->sched, TE_ERR_ARG, "te_split_nparts: stage '%s' iterator '%s': nparts "
                    "must be positive, got %lld", st->tensor->name, x->name, (long long)nparts);
    if ((rc = check_not_attached(st, x, "te_split_nparts")))
        return rc;
    int64_t factor = (x->extent + nparts - 1) / nparts;
    if ((rc = do_split(st, x, factor, outer, inner)))
        return rc;
    return trace_add(st->sched, "split_nparts %s %s %lld", st->tensor->name, x->name,
                     (long long)nparts);
}

int te_tile(te_stage *st, te_iter *x, te_iter *y, int64_t xf, int64_t yf, te_iter **xo,
            te_iter **yo, te_iter **xi, te_iter **yi)
{
    if (!check_stage(st, "te_tile"))
        return TE_ERR_ARG;
    int rc;
    if ((rc = check_leaf(st, x, "te_tile")) || (rc = check_leaf(st, y, "te_tile")))
        return rc;
    if (leaf_pos(st, y) != leaf_pos(st, x) + 1)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_tile: stage '%s': '%s' must be the loop "
                    "directly inside '%s'", st->tensor->name, y->name, x->name);
    if (xf <= 0 || yf <= 0)
        return SERR(st->sched, TE_ERR_ARG, "te_tile: stage '%s': factors must be positive, got "
                    "%lld and %lld", st->tensor->name, (long long)xf, (long long)yf);
    if ((rc = check_not_attached(st, x, "te_tile")) || (rc = check_not_attached(st, y, "te_tile")))
        return rc;
    te_iter *a, *b, *c, *d;
    if ((rc = do_split(st, x, xf, &a, &b)) || (rc = do_split(st, y, yf, &c, &d)))
        return rc;
    /* (a, b, c, d) -> (a, c, b, d) */
    int p = leaf_pos(st, b);
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
    return trace_add(st->sched, "tile %s %s %s %lld %lld", st->tensor->name, x->name, y->name,
                     (long long)xf, (long long)yf);
}

int te_fuse(te_stage *st, te_iter *outer, te_iter *inner, te_iter **fused)
{
    if (!check_stage(st, "te_fuse"))
        return TE_ERR_ARG;
    int rc;
    if ((rc = check_leaf(st, outer, "te_fuse")) || (rc = check_leaf(st, inner, "te_fuse")))
        return rc;
    if (leaf_pos(st, inner) != leaf_pos(st, outer) + 1)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_fuse: stage '%s': '%s' must be the loop "
                    "directly inside '%s'", st->tensor->name, inner->name, outer->name);
    if (outer->reduce != inner->reduce)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_fuse: stage '%s': cannot fuse reduction "
                    "loop with data-parallel loop ('%s', '%s')", st->tensor->name, outer->name,
                    inner->name);
    if (outer->extent > INT64_MAX / inner->extent)
        return SERR(st->sched, TE_ERR_OVERFLOW, "te_fuse: extent overflows");
    if ((rc = check_not_attached(st, outer, "te_fuse")) ||
        (rc = check_not_attached(st, inner, "te_fuse")))
        return rc;
    te_ctx *ctx = st->sched->ctx;
    char buf[200];
    snprintf(buf, sizeof buf, "%s_%s_f", outer->name, inner->name);
    const char *name = unique_name(st, buf);
    te_iter *f = name ? new_iter(st, name, outer->extent * inner->extent, outer->reduce) : NULL;
    te_rel *r = te__alloc(ctx, sizeof *r);
    if (!f || !r)
        return TE_ERR_NOMEM;
    r->kind = TE_REL_FUSE;
    r->outer = outer;
    r->inner = inner;
    r->fused = f;
    if (te__vec_push(ctx, &st->rels, r))
        return TE_ERR_NOMEM;
    int p = leaf_pos(st, outer);
    st->leaves.v[p] = f;
    memmove(&st->leaves.v[p + 1], &st->leaves.v[p + 2],
            sizeof(void *) * (size_t)(st->leaves.n - p - 2));
    st->leaves.n--;
    outer->is_leaf = inner->is_leaf = false;
    st->touched = true;
    if (fused)
        *fused = f;
    return trace_add(st->sched, "fuse %s %s %s", st->tensor->name, outer->name, inner->name);
}

int te_reorder(te_stage *st, int n, te_iter *const *order)
{
    if (!check_stage(st, "te_reorder"))
        return TE_ERR_ARG;
    if (n <= 0 || !order)
        return SERR(st->sched, TE_ERR_ARG, "te_reorder: stage '%s': needs at least one loop",
                    st->tensor->name);
    int pos[64];
    if (n > 64)
        return SERR(st->sched, TE_ERR_ARG, "te_reorder: too many loops");
    for (int i = 0; i < n; i++) {
        int rc = check_leaf(st, order[i], "te_reorder");
        if (rc)
            return rc;
        for (int j = 0; j < i; j++)
            if (order[j] == order[i])
                return SERR(st->sched, TE_ERR_SCHEDULE, "te_reorder: stage '%s': loop '%s' is "
                            "named twice", st->tensor->name, order[i]->name);
        pos[i] = leaf_pos(st, order[i]);
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
    return trace_add(st->sched, "%s", line);
}

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
    if (!check_stage(st, "te_compute_at") || !parent)
        return st ? SERR(st->sched, TE_ERR_ARG, "te_compute_at: parent stage is NULL")
                  : TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (parent->sched != s)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: stage '%s' and '%s' are in different "
                    "schedules", nm, parent->tensor->name);
    if (st == parent)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: stage '%s' cannot be computed at itself",
                    nm);
    if (st->is_output)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: stage '%s' is an output of the "
                    "schedule; outputs are computed at the root", nm);
    int rc = check_leaf(parent, at, "te_compute_at");
    if (rc)
        return rc;
    if (parent->attach == TE_ATTACH_INLINE)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: parent stage '%s' is inlined",
                    parent->tensor->name);
    if (!depends_on(s, parent, st, 0))
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: stage '%s' does not consume '%s', so "
                    "loop '%s' is not an ancestor of any use of it", parent->tensor->name, nm,
                    at->name);
    te_stage *cons[64];
    int nc = effective_consumers(s, st, cons, 64, 0);
    for (int i = 0; i < nc && i < 64; i++) {
        te_stage *c = cons[i];
        if (c == parent)
            continue;
        if (c->attach == TE_ATTACH_AT && c->attach_stage == parent &&
            leaf_pos(parent, c->attach_iter) >= leaf_pos(parent, at))
            continue;
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: stage '%s' is also read by stage '%s', "
                    "which is not computed inside loop '%s' of '%s'; compute '%s' at '%s' first "
                    "or keep '%s' at the root", nm, c->tensor->name, at->name,
                    parent->tensor->name, c->tensor->name, parent->tensor->name, nm);
    }
    /* parent must not itself be computed inside st (a cycle). */
    for (te_stage *p = parent; p && p->attach == TE_ATTACH_AT; p = p->attach_stage)
        if (p->attach_stage == st)
            return SERR(s, TE_ERR_SCHEDULE, "te_compute_at: '%s' is computed inside '%s'; "
                        "this would make a cycle", parent->tensor->name, nm);
    st->attach = TE_ATTACH_AT;
    st->attach_stage = parent;
    st->attach_iter = at;
    return trace_add(s, "compute_at %s %s %s", nm, parent->tensor->name, at->name);
}

int te_compute_inline(te_stage *st)
{
    if (!check_stage(st, "te_compute_inline"))
        return TE_ERR_ARG;
    te_schedule *s = st->sched;
    const char *nm = st->tensor->name;
    if (st->is_output)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_inline: stage '%s' is an output of the "
                    "schedule and must be stored", nm);
    if (st->body->kind == TE_E_REDUCE)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_inline: stage '%s' is a reduction; "
                    "reductions cannot be inlined (use compute_at)", nm);
    if (st->touched)
        return SERR(s, TE_ERR_SCHEDULE, "te_compute_inline: stage '%s' has loop transformations "
                    "that inlining would discard", nm);
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *o = s->stages.v[i];
        if (o->attach == TE_ATTACH_AT && o->attach_stage == st)
            return SERR(s, TE_ERR_SCHEDULE, "te_compute_inline: stage '%s' is computed at a loop "
                        "of '%s'", o->tensor->name, nm);
    }
    st->attach = TE_ATTACH_INLINE;
    st->attach_stage = NULL;
    st->attach_iter = NULL;
    return trace_add(s, "compute_inline %s", nm);
}

int te_compute_root(te_stage *st)
{
    if (!check_stage(st, "te_compute_root"))
        return TE_ERR_ARG;
    st->attach = TE_ATTACH_ROOT;
    st->attach_stage = NULL;
    st->attach_iter = NULL;
    return trace_add(st->sched, "compute_root %s", st->tensor->name);
}

static const char *scope_str(te_scope sc)
{
    return sc == TE_SCOPE_LOCAL ? "local" : sc == TE_SCOPE_SHARED ? "shared" : "global";
}

/* A new compute tensor `name` with fresh axes and body built by fn(axes). */
static te_tensor *derived_tensor(te_schedule *s, const te_tensor *like, const char *name,
                                 te_expr **axes)
{
    te_ctx *ctx = s->ctx;
    te_tensor *t = te__alloc(ctx, sizeof *t);
    if (!t)
        return NULL;
    t->kind = TE_T_COMPUTE;
    t->name = te__strdup(ctx, name);
    t->tag = like->tag;
    t->dtype = like->dtype;
    t->ndim = like->ndim;
    for (int d = 0; d < like->ndim; d++) {
        t->shape[d] = like->shape[d];
        const char *an = like->kind == TE_T_COMPUTE ? like->axes[d]->u.var.name : NULL;
        char buf[16];
        if (!an) {
            snprintf(buf, sizeof buf, "i%d", d);
            an = buf;
        }
        if (!(t->axes[d] = axes[d] = te_axis(ctx, an, like->shape[d])))
            return NULL;
    }
    t->id = te__next_id(ctx);
    return t;
}

static int stage_index(te_schedule *s, const te_stage *st)
{
    for (int i = 0; i < s->stages.n; i++)
        if (s->stages.v[i] == st)
            return i;
    return -1;
}

static int insert_stage(te_schedule *s, int at, te_stage *st)
{
    if (te__vec_push(s->ctx, &s->stages, NULL))
        return TE_ERR_NOMEM;
    memmove(&s->stages.v[at + 1], &s->stages.v[at], sizeof(void *) * (size_t)(s->stages.n - at - 1));
    s->stages.v[at] = st;
    return TE_OK;
}

typedef struct {
    const te_tensor *from;
    te_tensor *to;
} retarget_ctx;

static te_expr *retarget_fn(te_ctx *ctx, te_expr *e, void *user)
{
    retarget_ctx *r = user;
    if (e->kind == TE_E_READ && e->u.read.t == r->from) {
        te_expr *n = te__new_expr(ctx, TE_E_READ, e->dtype);
        if (!n)
            return NULL;
        n->u.read = e->u.read;
        n->u.read.t = r->to;
        return n;
    }
    return e;
}

te_tensor *te_cache_read(te_schedule *s, te_tensor *t, te_scope scope, int n_readers,
                         te_stage *const *readers)
{
    if (!s || !t)
        return NULL;
    te_ctx *ctx = s->ctx;
    if ((unsigned)scope > TE_SCOPE_SHARED) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_cache_read: invalid scope %d", (int)scope);
        return NULL;
    }
    if (n_readers <= 0 || !readers) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_cache_read: tensor '%s': name at least one reader "
                         "stage", t->name);
        return NULL;
    }
    int first = s->stages.n;
    for (int i = 0; i < n_readers; i++) {
        if (!readers[i] || readers[i]->sched != s) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_cache_read: reader %d of '%s' is not a stage of "
                             "this schedule", i, t->name);
            return NULL;
        }
        if (!te__expr_reads(readers[i]->body, t)) {
            te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_cache_read: stage '%s' does not read '%s'",
                             readers[i]->tensor->name, t->name);
            return NULL;
        }
        int idx = stage_index(s, readers[i]);
        first = idx < first ? idx : first;
    }
    char name[128];
    snprintf(name, sizeof name, "%s_%s", t->name, scope_str(scope));
    for (int k = 1; te_schedule_stage_by_name(s, name); k++)
        snprintf(name, sizeof name, "%s_%s%d", t->name, scope_str(scope), k);
    te_expr *axes[TE_MAX_DIMS];
    te_tensor *c = derived_tensor(s, t, name, axes);
    if (!c)
        return NULL;
    c->body = te_read(ctx, t, t->ndim, axes);
    te_stage *st = c->body ? new_stage(s, c, axes, c->body) : NULL;
    if (!st)
        return NULL;
    st->scope = scope;
    /* Rewrite the readers; nothing above can fail after this point except allocation. */
    retarget_ctx rc = {t, c};
    te_expr *bodies[64];
    if (n_readers > 64) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_cache_read: too many readers");
        return NULL;
    }
    for (int i = 0; i < n_readers; i++)
        if (!(bodies[i] = te__expr_mutate(ctx, readers[i]->body, retarget_fn, &rc)))
            return NULL;
    if (insert_stage(s, first, st))
        return NULL;
    char line[512];
    int len = snprintf(line, sizeof line, "cache_read %s %s", t->name, scope_str(scope));
    for (int i = 0; i < n_readers; i++) {
        readers[i]->body = bodies[i];
        if (len < (int)sizeof line)
            len += snprintf(line + len, sizeof line - (size_t)len, " %s", readers[i]->tensor->name);
    }
    return trace_add(s, "%s", line) ? NULL : c;
}

te_tensor *te_cache_write(te_schedule *s, te_tensor *t, te_scope scope)
{
    if (!s || !t)
        return NULL;
    te_ctx *ctx = s->ctx;
    te_stage *st = te_schedule_stage(s, t);
    if (!st)
        return NULL;
    if ((unsigned)scope > TE_SCOPE_SHARED) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_cache_write: invalid scope %d", (int)scope);
        return NULL;
    }
    if (st->touched || st->attach != TE_ATTACH_ROOT) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_cache_write: stage '%s' was already "
                         "transformed; apply cache_write before other primitives", t->name);
        return NULL;
    }
    char name[128];
    snprintf(name, sizeof name, "%s_%s", t->name, scope_str(scope));
    for (int k = 1; te_schedule_stage_by_name(s, name); k++)
        snprintf(name, sizeof name, "%s_%s%d", t->name, scope_str(scope), k);
    te_expr *axes[TE_MAX_DIMS];
    te_tensor *c = derived_tensor(s, t, name, axes);
    if (!c)
        return NULL;
    /* The cache computes the stage's current body over fresh axes. */
    const te_expr *from[TE_MAX_DIMS];
    te_expr *to[TE_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
        from[d] = st->axes[d]->var;
        to[d] = axes[d];
    }
    te__subst map = {t->ndim, from, to};
    te_expr *cbody = te__substitute(ctx, st->body, &map);
    if (!cbody)
        return NULL;
    /* new_stage wants reduction axes as TE_VAR_REDUCE nodes; the stage's loop variables serve
     * (new_stage replaces them by fresh ones). */
    c->body = cbody;
    te_stage *cs = new_stage(s, c, axes, cbody);
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        idx[d] = st->axes[d]->var;
    te_expr *copy = cs ? te_read(ctx, c, t->ndim, idx) : NULL;
    if (!copy || insert_stage(s, stage_index(s, st), cs))
        return NULL;
    cs->scope = scope;
    st->body = copy;
    /* The reduction loops move to the cache stage. */
    for (int r = 0; r < st->nred; r++) {
        int p = leaf_pos(st, st->raxes[r]);
        memmove(&st->leaves.v[p], &st->leaves.v[p + 1],
                sizeof(void *) * (size_t)(st->leaves.n - p - 1));
        st->leaves.n--;
        st->raxes[r]->is_leaf = false;
    }
    st->nred = 0;
    return trace_add(s, "cache_write %s %s", t->name, scope_str(scope)) ? NULL : c;
}

/* ---- Annotations ------------------------------------------------------------------------ */

/* Checks shared by the loop annotations: x is a current, unannotated loop of st. */
static int check_annotatable(te_stage *st, te_iter *x, const char *fn)
{
    if (!check_stage(st, fn))
        return TE_ERR_ARG;
    int rc = check_leaf(st, x, fn);
    if (rc)
        return rc;
    if (x->ann != TE_ANN_NONE)
        return SERR(st->sched, TE_ERR_SCHEDULE, "%s: loop '%s' of stage '%s' is already "
                    "annotated", fn, x->name, st->tensor->name);
    return TE_OK;
}

static int annotate(te_stage *st, te_iter *x, te_iter_ann ann, const char *verb)
{
    x->ann = ann;
    return trace_add(st->sched, "%s %s %s", verb, st->tensor->name, x->name);
}

int te_vectorize(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_vectorize");
    if (rc)
        return rc;
    if (leaf_pos(st, x) != st->leaves.n - 1)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_vectorize: loop '%s' of stage '%s' is not the "
                    "innermost loop (the innermost is '%s'); reorder first", x->name,
                    st->tensor->name, ((te_iter *)st->leaves.v[st->leaves.n - 1])->name);
    return annotate(st, x, TE_ANN_VECTORIZE, "vectorize");
}

int te_unroll(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_unroll");
    return rc ? rc : annotate(st, x, TE_ANN_UNROLL, "unroll");
}

int te_parallel(te_stage *st, te_iter *x)
{
    int rc = check_annotatable(st, x, "te_parallel");
    if (rc)
        return rc;
    if (x->reduce)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_parallel: loop '%s' of stage '%s' is a "
                    "reduction loop; running it in parallel would race on the accumulator",
                    x->name, st->tensor->name);
    for (int i = 0; i < st->leaves.n; i++) {
        te_iter *o = st->leaves.v[i];
        if (o->ann == TE_ANN_PARALLEL)
            return SERR(st->sched, TE_ERR_SCHEDULE, "te_parallel: stage '%s' already has a "
                        "parallel loop '%s'; fuse the loops and parallelize the fused one",
                        st->tensor->name, o->name);
    }
    return annotate(st, x, TE_ANN_PARALLEL, "parallel");
}

int te_pragma_unroll_max(te_stage *st, int max_steps)
{
    if (!check_stage(st, "te_pragma_unroll_max"))
        return TE_ERR_ARG;
    if (max_steps < 0 || max_steps > 4096)
        return SERR(st->sched, TE_ERR_ARG, "te_pragma_unroll_max: stage '%s': max_steps must be "
                    "in [0, 4096], got %d", st->tensor->name, max_steps);
    st->unroll_max = max_steps;
    return trace_add(st->sched, "unroll_max %s %d", st->tensor->name, max_steps);
}

int te_stage_nontemporal(te_stage *st, bool on)
{
    if (!check_stage(st, "te_stage_nontemporal"))
        return TE_ERR_ARG;
    if (on && !st->is_output)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_stage_nontemporal: stage '%s' is not an "
                    "output; streaming stores only pay off for results written to memory once",
                    st->tensor->name);
    st->nontemporal = on;
    return trace_add(st->sched, "nontemporal %s %d", st->tensor->name, on ? 1 : 0);
}

int te_bind(te_stage *st, te_iter *x, te_thread_tag tag)
{
    if (!check_stage(st, "te_bind"))
        return TE_ERR_ARG;
    int rc = check_leaf(st, x, "te_bind");
    if (rc)
        return rc;
    if ((unsigned)tag > TE_THREAD_Z)
        return SERR(st->sched, TE_ERR_ARG, "te_bind: invalid thread tag %d", (int)tag);
    if (x->reduce)
        return SERR(st->sched, TE_ERR_SCHEDULE, "te_bind: loop '%s' of stage '%s' is a reduction "
                    "loop (use rfactor for cross-thread reductions)", x->name, st->tensor->name);
    x->ann = TE_ANN_BIND;
    x->tag = tag;
    static const char *tags[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z",
                                 "threadIdx.x", "threadIdx.y", "threadIdx.z"};
    return trace_add(st->sched, "bind %s %s %s", st->tensor->name, x->name, tags[tag]);
}

/* ---- rfactor -------------------------------------------------------------------------- */

/* The split of a root reduction axis that produced x, or NULL. */
static te_rel *reduce_split_of(te_stage *st, const te_iter *x)
{
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        if (r->kind == TE_REL_SPLIT && (r->outer == x || r->inner == x))
            return r;
    }
    return NULL;
}

te_tensor *te_rfactor(te_schedule *s, te_tensor *t, te_iter *x)
{
    if (!s || !t)
        return NULL;
    te_ctx *ctx = s->ctx;
    te_stage *st = te_schedule_stage(s, t);
    if (!st)
        return NULL;
    const char *nm = t->name;
    if (check_leaf(st, x, "te_rfactor"))
        return NULL;
    if (!x->reduce || st->body->kind != TE_E_REDUCE) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_rfactor: loop '%s' of stage '%s' is not a "
                         "reduction loop", x->name, nm);
        return NULL;
    }
    if (st->attach == TE_ATTACH_INLINE || st->ndim + 1 > TE_MAX_DIMS) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_rfactor: stage '%s' cannot be factored (it is "
                         "inlined or has %d axes)", nm, st->ndim);
        return NULL;
    }
    /* x must come from one split of a root reduction axis, or be one. */
    te_rel *rel = reduce_split_of(st, x);
    int kx = -1;
    for (int r = 0; r < st->nred; r++)
        if (st->raxes[r] == (rel ? rel->parent : x))
            kx = r;
    if (kx < 0) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_rfactor: loop '%s' of stage '%s' must be a "
                         "reduction axis or one part of a single split of one", x->name, nm);
        return NULL;
    }
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        bool red = r->kind == TE_REL_SPLIT ? r->parent->reduce : r->outer->reduce;
        if (red && r != rel) {
            te_ctx_set_error(ctx, TE_ERR_SCHEDULE, "te_rfactor: stage '%s' has other transformed "
                             "reduction loops; rfactor first, then transform", nm);
            return NULL;
        }
    }
    for (int l = 0; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (it->reduce && check_not_attached(st, it, "te_rfactor"))
            return NULL;
    }
    /* The factored tensor: t's axes plus x, reducing over the other parts. */
    char name[128];
    snprintf(name, sizeof name, "%s_rf", nm);
    for (int k = 1; te_schedule_stage_by_name(s, name); k++)
        snprintf(name, sizeof name, "%s_rf%d", nm, k);
    te_tensor *rf = te__alloc(ctx, sizeof *rf);
    if (!rf)
        return NULL;
    rf->kind = TE_T_COMPUTE;
    rf->name = te__strdup(ctx, name);
    rf->tag = t->tag;
    rf->dtype = t->dtype;
    rf->ndim = st->ndim + 1;
    rf->id = te__next_id(ctx);
    const te_expr *from[2 * TE_MAX_DIMS];
    te_expr *to[2 * TE_MAX_DIMS], *raxes[TE_MAX_DIMS];
    int nm_ = 0, nr = 0;
    for (int d = 0; d < st->ndim; d++) {
        rf->shape[d] = t->shape[d];
        if (!(rf->axes[d] = te_axis(ctx, st->axes[d]->name, t->shape[d])))
            return NULL;
        from[nm_] = st->axes[d]->var;
        to[nm_++] = rf->axes[d];
    }
    te_expr *xa = te_axis(ctx, x->name, x->extent);
    rf->shape[st->ndim] = x->extent;
    rf->axes[st->ndim] = xa;
    te_expr *kval = xa, *guard = NULL;
    if (rel) {
        te_iter *other = rel->outer == x ? rel->inner : rel->outer;
        te_expr *oa = te_reduce_axis(ctx, other->name, other->extent);
        raxes[nr++] = oa;
        te_expr *ov = rel->outer == x ? xa : oa, *iv = rel->outer == x ? oa : xa;
        kval = te_add(ctx, te_mul(ctx, ov, te_int(ctx, rel->factor)), iv);
        if (rel->parent->extent % rel->factor)
            guard = te_lt(ctx, kval, te_int(ctx, rel->parent->extent));
    }
    from[nm_] = st->raxes[kx]->var;
    to[nm_++] = kval;
    for (int r = 0; r < st->nred; r++) {
        if (r == kx)
            continue;
        te_expr *ra = te_reduce_axis(ctx, st->raxes[r]->name, st->raxes[r]->extent);
        raxes[nr++] = ra;
        from[nm_] = st->raxes[r]->var;
        to[nm_++] = ra;
    }
    te__subst map = {nm_, from, to};
    te_expr *src = te__substitute(ctx, st->body->u.red.src, &map);
    te_reduce_kind kind = st->body->u.red.rkind;
    te_reducer *custom = st->body->u.red.custom;
    if (src && guard) /* the tail of a non-divisible split contributes the identity */
        src = te_if_then_else(ctx, guard, src, te__reduce_identity(ctx, kind, custom, t->dtype));
    te_expr *rbody = nr ? te_reduce(ctx, kind, custom, src, nr, raxes) : src;
    if (!rbody)
        return NULL;
    rf->body = rbody;
    te_stage *rs = new_stage(s, rf, rf->axes, rbody);
    /* t's stage now reduces over x's partial results. */
    te_expr *r_axis = te_reduce_axis(ctx, x->name, x->extent);
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < st->ndim; d++)
        idx[d] = st->axes[d]->var;
    idx[st->ndim] = r_axis;
    te_expr *nbody = rs ? te_reduce(ctx, kind, custom, te_read(ctx, rf, rf->ndim, idx), 1, &r_axis)
                        : NULL;
    const char *rname = nbody ? unique_name(st, x->name) : NULL;
    te_iter *ri = rname ? new_iter(st, rname, x->extent, true) : NULL;
    if (!ri)
        return NULL;
    te__subst rmap = {1, (const te_expr *[]){r_axis}, (te_expr *[]){ri->var}};
    if (!(nbody = te__substitute(ctx, nbody, &rmap)) || insert_stage(s, stage_index(s, st), rs))
        return NULL;
    /* Commit: drop the old reduction loops and relations. */
    int nl = 0;
    for (int l = 0; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (it->reduce)
            it->is_leaf = false;
        else
            st->leaves.v[nl++] = it;
    }
    st->leaves.n = nl;
    if (te__vec_push(ctx, &st->leaves, ri))
        return NULL;
    int nrel = 0;
    for (int k = 0; k < st->rels.n; k++)
        if (st->rels.v[k] != rel)
            st->rels.v[nrel++] = st->rels.v[k];
    st->rels.n = nrel;
    st->raxes[0] = ri;
    st->nred = 1;
    st->body = nbody;
    return trace_add(s, "rfactor %s %s", nm, x->name) ? NULL : rf;
}
