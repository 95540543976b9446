/*
 * schedule/dataflow.c: the primitives that add stages and rewrite stage bodies. cache_read
 * (a copy of a tensor that chosen readers read instead), cache_write (the stage computes into
 * a cache that it then copies out) and rfactor (a partial-result stage for one part of a
 * split reduction). Tensor expressions are never modified: only stage bodies change.
 */
#include <string.h>

#include "schedule/sched_impl.h"

/* ---- cache_read, cache_write ------------------------------------------------------------- */

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
    t->owner = te__ctx_id(ctx);
    t->home = ctx;
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
    memmove(&s->stages.v[at + 1], &s->stages.v[at],
            sizeof(void *) * (size_t)(s->stages.n - at - 1));
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
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_cache_read: tensor '%s': name at least one reader "
                         "stage",
                         t->name);
        return NULL;
    }
    int first = s->stages.n;
    for (int i = 0; i < n_readers; i++) {
        if (!readers[i] || readers[i]->sched != s) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_cache_read: reader %d of '%s' is not a stage of "
                             "this schedule",
                             i, t->name);
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
    for (int k = 1; te_schedule_tensor_by_name(s, name); k++)
        snprintf(name, sizeof name, "%s_%s%d", t->name, scope_str(scope), k);
    te_expr *axes[TE_MAX_DIMS];
    te_tensor *c = derived_tensor(s, t, name, axes);
    if (!c)
        return NULL;
    c->body = te_read(ctx, t, t->ndim, axes);
    te_stage *st = c->body ? te__new_stage(s, c, axes, c->body) : NULL;
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
    return te__trace_add(s, "%s", line) ? NULL : c;
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
    if (st->ntuple) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_cache_write: stage '%s' computes a tuple (te_compute_tuple) and "
                         "cannot be cached; use te_rfactor or compute_at its producers",
                         st->tensor->name);
        return NULL;
    }
    if (st->touched || st->attach != TE_ATTACH_ROOT) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_cache_write: stage '%s' was already "
                         "transformed; apply cache_write before other primitives",
                         t->name);
        return NULL;
    }
    char name[128];
    snprintf(name, sizeof name, "%s_%s", t->name, scope_str(scope));
    for (int k = 1; te_schedule_tensor_by_name(s, name); k++)
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
    /* te__new_stage wants reduction axes as TE_VAR_REDUCE nodes; the stage's loop variables serve
     * (te__new_stage replaces them by fresh ones). */
    c->body = cbody;
    te_stage *cs = te__new_stage(s, c, axes, cbody);
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
        int p = te__leaf_pos(st, st->raxes[r]);
        memmove(&st->leaves.v[p], &st->leaves.v[p + 1],
                sizeof(void *) * (size_t)(st->leaves.n - p - 1));
        st->leaves.n--;
        st->raxes[r]->is_leaf = false;
    }
    st->nred = 0;
    return te__trace_add(s, "cache_write %s %s", t->name, scope_str(scope)) ? NULL : c;
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

/* Commit of an rfactor on stage st: the old reduction loops and relations go, ri (over the
 * partial results) is the one reduction loop, nbody the body. TE_OK or TE_ERR_NOMEM. */
static int rfactor_commit(te_stage *st, te_rel *rel, te_iter *ri, te_expr *nbody)
{
    int nl = 0;
    for (int l = 0; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (it->reduce)
            it->is_leaf = false;
        else
            st->leaves.v[nl++] = it;
    }
    st->leaves.n = nl;
    if (te__vec_push(st->sched->ctx, &st->leaves, ri))
        return TE_ERR_NOMEM;
    int nrel = 0;
    for (int k = 0; k < st->rels.n; k++)
        if (st->rels.v[k] != rel)
            st->rels.v[nrel++] = st->rels.v[k];
    st->rels.n = nrel;
    st->raxes[0] = ri;
    st->nred = 1;
    st->body = nbody;
    return TE_OK;
}

typedef struct rfactor_tuple_ctx {
    te_schedule *s;
    te_stage *st;
    te_iter *x;
    te_rel *rel;
    const te__subst *map; /* st's root variables -> the partial stage's axes and its reduction */
    te_expr *guard;       /* the tail of a non-divisible split, or NULL */
    int nr;
    te_expr **raxes;    /* the partial stage's reduction axes (nr of them) */
    te_expr **rf_axes;  /* its data-parallel axes: st's and then x */
    const char *rfname; /* the name of its first output */
} rfactor_tuple_ctx;

/* rfactor of a tuple stage: the partial stage is itself a tuple compute (one output per
 * component, "<output>_rf"), reducing with the same reducer (its states combine with states),
 * and st reduces the tuple of partial results over x. When x is the whole reduction the
 * partial stage reduces over an axis of extent 1, so it stays one tuple stage. */
static te_tensor *rfactor_tuple(rfactor_tuple_ctx *c)
{
    te_schedule *s = c->s;
    te_ctx *ctx = s->ctx;
    te_stage *st = c->st;
    te_reducer *r = st->body->u.red.custom;
    int n = r->n;
    const char *names[TE_MAX_TUPLE];
    te_expr *srcs[TE_MAX_TUPLE];
    for (int i = 0; i < n; i++) {
        if (i == 0) {
            names[0] = c->rfname;
        } else {
            char name[128];
            snprintf(name, sizeof name, "%s_rf", st->tuple[i]->name);
            for (int k = 1; te_schedule_tensor_by_name(s, name); k++)
                snprintf(name, sizeof name, "%s_rf%d", st->tuple[i]->name, k);
            names[i] = te__strdup(ctx, name);
        }
        srcs[i] = te__substitute(ctx, st->body->u.red.srcs[i], c->map);
        if (srcs[i] && c->guard)
            srcs[i] = te_if_then_else(ctx, c->guard, srcs[i], r->identities[i]);
        if (!srcs[i] || !names[i])
            return NULL;
    }
    te_expr *one = NULL;
    if (!c->nr && !(one = te_reduce_axis(ctx, "rf1", 1)))
        return NULL;
    te_expr *rbody = te_reduce_tuple(ctx, r, n, srcs, c->nr ? c->nr : 1, c->nr ? c->raxes : &one);
    te_tensor *rf[TE_MAX_TUPLE];
    if (!rbody || te_compute_tuple(ctx, n, names, st->ndim + 1, c->rf_axes, rbody, rf))
        return NULL;
    for (int i = 0; i < n; i++)
        rf[i]->tag = st->tuple[i]->tag;
    te_stage *rs = te__new_stage(s, rf[0], rf[0]->axes, rf[0]->body);
    /* st now reduces the partial tuples over x. */
    te_expr *r_axis = te_reduce_axis(ctx, c->x->name, c->x->extent);
    te_expr *idx[TE_MAX_DIMS], *parts[TE_MAX_TUPLE];
    for (int d = 0; d < st->ndim; d++)
        idx[d] = st->axes[d]->var;
    idx[st->ndim] = r_axis;
    for (int i = 0; i < n; i++)
        if (!rs || !(parts[i] = te_read(ctx, rf[i], st->ndim + 1, idx)))
            return NULL;
    te_expr *whole = te_reduce_tuple(ctx, r, n, parts, 1, &r_axis);
    te_expr *nbody = whole ? te__alloc(ctx, sizeof *nbody) : NULL;
    if (!nbody)
        return NULL;
    *nbody = *whole; /* component 0: what a tuple stage's body is */
    nbody->u.red.comp = 0;
    nbody->u.red.src = parts[0];
    nbody->dtype = parts[0]->dtype;
    const char *rname = te__unique_iter_name(st, c->x->name);
    te_iter *ri = rname ? te__new_iter(st, rname, c->x->extent, true) : NULL;
    if (!ri)
        return NULL;
    te__subst rmap = {1, (const te_expr *[]){r_axis}, (te_expr *[]){ri->var}};
    if (!(nbody = te__substitute(ctx, nbody, &rmap)) || insert_stage(s, stage_index(s, st), rs))
        return NULL;
    if (rfactor_commit(st, c->rel, ri, nbody))
        return NULL;
    return te__trace_add(s, "rfactor %s %s", st->tensor->name, c->x->name) ? NULL : rf[0];
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
    if (te__check_leaf(st, x, "te_rfactor"))
        return NULL;
    if (!x->reduce || st->body->kind != TE_E_REDUCE) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_rfactor: loop '%s' of stage '%s' is not a "
                         "reduction loop",
                         x->name, nm);
        return NULL;
    }
    if (st->attach == TE_ATTACH_INLINE || st->ndim + 1 > TE_MAX_DIMS) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_rfactor: stage '%s' cannot be factored (it is "
                         "inlined or has %d axes)",
                         nm, st->ndim);
        return NULL;
    }
    /* x must come from one split of a root reduction axis, or be one. */
    te_rel *rel = reduce_split_of(st, x);
    int kx = -1;
    for (int r = 0; r < st->nred; r++)
        if (st->raxes[r] == (rel ? rel->parent : x))
            kx = r;
    if (kx < 0) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_rfactor: loop '%s' of stage '%s' must be a "
                         "reduction axis or one part of a single split of one",
                         x->name, nm);
        return NULL;
    }
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        bool red = r->kind == TE_REL_SPLIT ? r->parent->reduce : r->outer->reduce;
        if (red && r != rel) {
            te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                             "te_rfactor: stage '%s' has other transformed "
                             "reduction loops; rfactor first, then transform",
                             nm);
            return NULL;
        }
    }
    for (int l = 0; l < st->leaves.n; l++) {
        te_iter *it = st->leaves.v[l];
        if (it->reduce && te__check_not_attached(st, it, "te_rfactor"))
            return NULL;
    }
    /* The factored tensor: t's axes plus x, reducing over the other parts. */
    char name[128];
    snprintf(name, sizeof name, "%s_rf", nm);
    for (int k = 1; te_schedule_tensor_by_name(s, name); k++)
        snprintf(name, sizeof name, "%s_rf%d", nm, k);
    te_tensor *rf = te__alloc(ctx, sizeof *rf);
    if (!rf)
        return NULL;
    rf->kind = TE_T_COMPUTE;
    rf->owner = te__ctx_id(ctx);
    rf->home = ctx;
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
    if (st->ntuple) {
        rfactor_tuple_ctx rc = {s, st, x, rel, &map, guard, nr, raxes, rf->axes, name};
        return rfactor_tuple(&rc);
    }
    te_expr *src = te__substitute(ctx, st->body->u.red.src, &map);
    te_reduce_kind kind = st->body->u.red.rkind;
    te_reducer *custom = st->body->u.red.custom;
    if (src && guard) /* the tail of a non-divisible split contributes the identity */
        src = te_if_then_else(ctx, guard, src, te__reduce_identity(ctx, kind, custom, t->dtype));
    te_expr *rbody = nr ? te_reduce(ctx, kind, custom, src, nr, raxes) : src;
    if (!rbody)
        return NULL;
    rf->body = rbody;
    te_stage *rs = te__new_stage(s, rf, rf->axes, rbody);
    /* t's stage now reduces over x's partial results. */
    te_expr *r_axis = te_reduce_axis(ctx, x->name, x->extent);
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < st->ndim; d++)
        idx[d] = st->axes[d]->var;
    idx[st->ndim] = r_axis;
    te_expr *nbody =
        rs ? te_reduce(ctx, kind, custom, te_read(ctx, rf, rf->ndim, idx), 1, &r_axis) : NULL;
    const char *rname = nbody ? te__unique_iter_name(st, x->name) : NULL;
    te_iter *ri = rname ? te__new_iter(st, rname, x->extent, true) : NULL;
    if (!ri)
        return NULL;
    te__subst rmap = {1, (const te_expr *[]){r_axis}, (te_expr *[]){ri->var}};
    if (!(nbody = te__substitute(ctx, nbody, &rmap)) || insert_stage(s, stage_index(s, st), rs))
        return NULL;
    /* Commit: drop the old reduction loops and relations. */
    if (rfactor_commit(st, rel, ri, nbody))
        return NULL;
    return te__trace_add(s, "rfactor %s %s", nm, x->name) ? NULL : rf;
}
