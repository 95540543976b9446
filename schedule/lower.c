/*
 * Lowering: from a schedule to one loop program.
 *
 *   1. inline       substitute inlined stages into their consumers
 *   2. extents      loop extents of every stage, from its region through split/fuse
 *   3. bounds       region of each compute_at stage: what one iteration of its attach loop
 *                   needs (consumers first, producers after)
 *   4. loop nests   one nest per stage, producers placed at their attach loops
 *   5. passes       te_lower's list below, in order
 */
#include <string.h>

#include "schedule/bound.h"
#include "schedule/passes.h"
#include "schedule/sched_impl.h"

typedef struct lstage {
    te_stage *st;
    te_expr *body;   /* after inlining, over the root variables */
    te_buf *buf;     /* NULL for inlined stages */
    te_expr *rmin[TE_MAX_DIMS]; /* region: first element along each axis */
    int64_t rext[TE_MAX_DIMS];  /* region extent */
    int64_t *ext;    /* lowered extent of st->iters[i] */
    te_expr **val;   /* value of st->iters[i] in terms of the leaf loop variables */
} lstage;

typedef struct lower_ctx {
    te_ctx *ctx;
    te_schedule *s;
    int n;
    lstage *ls;
    int n_args;
    te_tensor *const *args;
    te_buf **arg_bufs;
} lower_ctx;

#define LERR(L, code, ...) te_ctx_set_error((L)->ctx, code, __VA_ARGS__)

static int iter_index(const te_stage *st, const te_iter *it)
{
    for (int i = 0; i < st->iters.n; i++)
        if (st->iters.v[i] == it)
            return i;
    return -1;
}

static lstage *find_ls(lower_ctx *L, const te_tensor *t)
{
    for (int i = 0; i < L->n; i++)
        if (L->ls[i].st->tensor == t)
            return &L->ls[i];
    return NULL;
}

/* ---- 1. inline ------------------------------------------------------------------------- */

typedef struct {
    lower_ctx *L;
} inline_ctx;

static te_expr *inline_fn(te_ctx *ctx, te_expr *e, void *user)
{
    lower_ctx *L = ((inline_ctx *)user)->L;
    if (e->kind != TE_E_READ)
        return e;
    lstage *p = find_ls(L, e->u.read.t);
    if (!p || p->st->attach != TE_ATTACH_INLINE)
        return e;
    const te_expr *from[TE_MAX_DIMS];
    te_expr *to[TE_MAX_DIMS];
    for (int d = 0; d < p->st->ndim; d++) {
        from[d] = p->st->axes[d]->var;
        to[d] = e->u.read.idx[d];
    }
    te__subst m = {p->st->ndim, from, to};
    return te__substitute(ctx, p->body, &m);
}

static int do_inline(lower_ctx *L)
{
    inline_ctx ic = {L};
    for (int i = 0; i < L->n; i++) {
        L->ls[i].body = te__expr_mutate(L->ctx, L->ls[i].st->body, inline_fn, &ic);
        if (!L->ls[i].body)
            return te_ctx_errcode(L->ctx) ? te_ctx_errcode(L->ctx) : TE_ERR_NOMEM;
    }
    return TE_OK;
}

/* ---- 2. extents and iterator values ---------------------------------------------------- */

/* Forward: root extents (the region) through split/fuse to the leaves. */
static void compute_extents(lstage *l)
{
    te_stage *st = l->st;
    for (int d = 0; d < st->ndim; d++)
        l->ext[iter_index(st, st->axes[d])] = l->rext[d];
    for (int r = 0; r < st->nred; r++)
        l->ext[iter_index(st, st->raxes[r])] = st->raxes[r]->extent;
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        if (r->kind == TE_REL_SPLIT) {
            int64_t pe = l->ext[iter_index(st, r->parent)];
            l->ext[iter_index(st, r->inner)] = r->factor < pe ? r->factor : pe;
            l->ext[iter_index(st, r->outer)] = (pe + r->factor - 1) / r->factor;
        } else {
            l->ext[iter_index(st, r->fused)] =
                l->ext[iter_index(st, r->outer)] * l->ext[iter_index(st, r->inner)];
        }
    }
}

/* Backward: the value of every iterator in terms of the leaf loop variables. */
static int compute_values(lower_ctx *L, lstage *l)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    for (int i = 0; i < st->leaves.n; i++) {
        te_iter *it = st->leaves.v[i];
        l->val[iter_index(st, it)] = it->var;
    }
    for (int k = st->rels.n - 1; k >= 0; k--) {
        te_rel *r = st->rels.v[k];
        if (r->kind == TE_REL_SPLIT) {
            te_expr *o = l->val[iter_index(st, r->outer)], *i = l->val[iter_index(st, r->inner)];
            l->val[iter_index(st, r->parent)] = te_add(ctx, te_mul(ctx, o, te_int(ctx, r->factor)), i);
        } else {
            te_expr *f = l->val[iter_index(st, r->fused)];
            te_expr *ie = te_int(ctx, l->ext[iter_index(st, r->inner)]);
            l->val[iter_index(st, r->outer)] = te_floordiv(ctx, f, ie);
            l->val[iter_index(st, r->inner)] = te_floormod(ctx, f, ie);
        }
    }
    for (int d = 0; d < st->ndim; d++)
        if (!l->val[iter_index(st, st->axes[d])])
            return TE_ERR_NOMEM;
    return TE_OK;
}

/* ---- 3. bound inference ----------------------------------------------------------------- */

typedef struct {
    const te_tensor *t;
    te_expr *reads[256];
    int n;
} reads_of;

static bool reads_of_fn(const te_expr *e, void *user)
{
    reads_of *r = user;
    if (e->kind == TE_E_READ && e->u.read.t == r->t && r->n < 256)
        r->reads[r->n++] = (te_expr *)e;
    return true;
}

static int leaf_pos(const te_stage *st, const te_iter *it)
{
    for (int i = 0; i < st->leaves.n; i++)
        if (st->leaves.v[i] == it)
            return i;
    return -1;
}

/* Fills ve with every loop variable of every stage and its lowered extent. */
static void all_var_extents(lower_ctx *L, te__var_ext *ve)
{
    ve->n = 0;
    for (int i = 0; i < L->n; i++) {
        lstage *l = &L->ls[i];
        if (!l->ext)
            continue;
        for (int k = 0; k < l->st->leaves.n && ve->n < 256; k++) {
            te_iter *it = l->st->leaves.v[k];
            ve->vars[ve->n] = it->var;
            ve->ext[ve->n++] = l->ext[iter_index(l->st, it)];
        }
    }
}

static int infer_region(lower_ctx *L, lstage *p)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = p->st;
    te_stage *S = st->attach_stage;
    lstage *ls_S = find_ls(L, S->tensor);
    int at = leaf_pos(S, st->attach_iter);
    if (at < 0)
        return LERR(L, TE_ERR_SCHEDULE, "stage '%s' is computed at loop '%s' of '%s', which is "
                    "no longer a loop of that stage", st->tensor->name, st->attach_iter->name,
                    S->tensor->name);
    te__relax base = {0};
    for (int k = at + 1; k < S->leaves.n; k++) {
        te_iter *it = S->leaves.v[k];
        int64_t e = ls_S->ext[iter_index(S, it)];
        if (!te__relax_add(&base, it->var, te_int(ctx, 0), te_int(ctx, e - 1)))
            return LERR(L, TE_ERR_UNSUPPORTED, "bound inference: too many loops");
    }
    /* GPU: a shared buffer serves the whole block, so its region is the union over the
     * threads: every loop bound to threadIdx ranges over its extent. */
    if (st->scope == TE_SCOPE_SHARED) {
        for (int i = 0; i < L->n; i++) {
            lstage *o = &L->ls[i];
            for (int k = 0; o->ext && k < o->st->leaves.n; k++) {
                te_iter *it = o->st->leaves.v[k];
                if (it->ann == TE_ANN_BIND && it->tag >= TE_THREAD_X &&
                    !te__relax_add(&base, it->var, te_int(ctx, 0),
                                   te_int(ctx, o->ext[iter_index(o->st, it)] - 1)))
                    return LERR(L, TE_ERR_UNSUPPORTED, "bound inference: too many loops");
            }
        }
    }
    te__ival uni[TE_MAX_DIMS];
    bool have[TE_MAX_DIMS] = {false}, full[TE_MAX_DIMS] = {false};
    int nreads = 0;
    for (int c = 0; c < L->n; c++) {
        lstage *lc = &L->ls[c];
        if (lc->st->attach == TE_ATTACH_INLINE || lc == p)
            continue;
        reads_of ro = {.t = st->tensor};
        te__expr_visit(lc->body, reads_of_fn, &ro);
        if (!ro.n)
            continue;
        te__relax r = base;
        te_stage *C = lc->st;
        if (C != S) {
            bool inside = C->attach == TE_ATTACH_AT && C->attach_stage == S &&
                          leaf_pos(S, C->attach_iter) >= at;
            if (!inside)
                return LERR(L, TE_ERR_SCHEDULE, "stage '%s' is computed at '%s.%s' but stage '%s' "
                            "also reads it outside that loop; compute '%s' at the root or move "
                            "'%s' inside '%s.%s'", st->tensor->name, S->tensor->name,
                            st->attach_iter->name, C->tensor->name, st->tensor->name,
                            C->tensor->name, S->tensor->name, st->attach_iter->name);
        }
        /* Ranges of C's root variables as seen from S's loop `at`. */
        for (int d = 0; d < C->ndim; d++) {
            te_expr *v = te_add(ctx, lc->rmin[d], lc->val[iter_index(C, C->axes[d])]);
            te__relax inner = r;
            if (C != S) {
                for (int k = 0; k < C->leaves.n; k++) {
                    te_iter *it = C->leaves.v[k];
                    int64_t e = lc->ext[iter_index(C, it)];
                    te__relax_add(&inner, it->var, te_int(ctx, 0), te_int(ctx, e - 1));
                }
            }
            te__ival iv;
            if (!v || !te__eval_interval(ctx, v, &inner, &iv))
                return LERR(L, TE_ERR_LOWER, "bound inference failed for stage '%s' axis %d",
                            C->tensor->name, d);
            te__relax_add(&r, C->axes[d]->var, iv.lo, iv.hi);
        }
        for (int k = 0; k < C->nred; k++) {
            te_expr *v = lc->val[iter_index(C, C->raxes[k])];
            te__relax inner = r;
            for (int q = 0; q < C->leaves.n; q++) {
                te_iter *it = C->leaves.v[q];
                if (C != S || q > at) {
                    int64_t e = lc->ext[iter_index(C, it)];
                    te__relax_add(&inner, it->var, te_int(ctx, 0), te_int(ctx, e - 1));
                }
            }
            te__ival iv;
            if (!te__eval_interval(ctx, v, &inner, &iv))
                iv = (te__ival){te_int(ctx, 0), te_int(ctx, C->raxes[k]->extent - 1)};
            te__relax_add(&r, C->raxes[k]->var, iv.lo, iv.hi);
        }
        for (int q = 0; q < ro.n; q++, nreads++) {
            for (int d = 0; d < st->ndim; d++) {
                te__ival iv;
                if (full[d])
                    continue;
                if (!te__eval_interval(ctx, ro.reads[q]->u.read.idx[d], &r, &iv)) {
                    full[d] = true;
                    continue;
                }
                if (!have[d]) {
                    uni[d] = iv;
                    have[d] = true;
                } else {
                    uni[d].lo = te_min(ctx, uni[d].lo, iv.lo);
                    uni[d].hi = te_max(ctx, uni[d].hi, iv.hi);
                }
            }
        }
    }
    if (!nreads)
        return LERR(L, TE_ERR_SCHEDULE, "stage '%s' is computed at '%s.%s' but nothing there "
                    "reads it", st->tensor->name, S->tensor->name, st->attach_iter->name);
    te__var_ext ve;
    all_var_extents(L, &ve);
    for (int d = 0; d < st->ndim; d++) {
        int64_t shape = st->tensor->shape[d], ext;
        if (!full[d] && have[d]) {
            te_expr *lo = te__simplify_expr(ctx, uni[d].lo, NULL);
            te_expr *n = te__simplify_expr(ctx, te_add(ctx, te_sub(ctx, uni[d].hi, lo), te_int(ctx, 1)),
                                           NULL);
            if (lo && n && (te__is_const_int(n, &ext) || te__max_over_vars(n, &ve, &ext)) &&
                ext < shape) {
                p->rmin[d] = lo;
                p->rext[d] = ext < 1 ? 1 : ext;
                continue;
            }
        }
        p->rmin[d] = te_int(ctx, 0);
        p->rext[d] = shape;
    }
    return TE_OK;
}

/* ---- 4. loop nests ----------------------------------------------------------------------- */

static te_for_kind for_kind(const te_iter *it)
{
    switch (it->ann) {
    case TE_ANN_VECTORIZE:
        return TE_FOR_VECTORIZED;
    case TE_ANN_UNROLL:
        return TE_FOR_UNROLLED;
    case TE_ANN_PARALLEL:
        return TE_FOR_PARALLEL;
    case TE_ANN_BIND:
        return TE_FOR_THREAD;
    default:
        return TE_FOR_SERIAL;
    }
}

typedef struct {
    lower_ctx *L;
    int err;
} load_ctx;

/* READ of a tensor -> LOAD of its buffer, relative to the buffer's region. */
static te_expr *to_load_fn(te_ctx *ctx, te_expr *e, void *user)
{
    load_ctx *lc = user;
    if (e->kind != TE_E_READ || lc->err)
        return e;
    lower_ctx *L = lc->L;
    const te_tensor *t = e->u.read.t;
    for (int a = 0; a < L->n_args; a++)
        if (L->args[a] == t)
            return te__load(ctx, L->arg_bufs[a], e->u.read.n, e->u.read.idx);
    lstage *p = find_ls(L, t);
    if (!p || !p->buf) {
        lc->err = LERR(L, TE_ERR_ARG, "tensor '%s' is read but is neither computed by the "
                       "schedule nor among the kernel arguments", t->name);
        return e;
    }
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < e->u.read.n; d++)
        idx[d] = te_sub(ctx, e->u.read.idx[d], p->rmin[d]);
    return te__load(ctx, p->buf, e->u.read.n, idx);
}

static te_stmt *make_stage(lower_ctx *L, lstage *l);

/* Producers attached at leaf `pos` of stage S, wrapped around `rest`. */
static te_stmt *with_attached(lower_ctx *L, te_stage *S, int pos, te_stmt *rest)
{
    te_iter *it = S->leaves.v[pos];
    te_stmt *prod = NULL;
    te_buf *bufs[64];
    int nb = 0;
    for (int i = 0; i < L->n; i++) {
        lstage *p = &L->ls[i];
        if (p->st->attach != TE_ATTACH_AT || p->st->attach_iter != it)
            continue;
        te_stmt *ps = make_stage(L, p);
        if (!ps)
            return NULL;
        prod = te__seq2(L->ctx, prod, ps);
        if (nb < 64)
            bufs[nb++] = p->buf;
    }
    te_stmt *body = te__seq2(L->ctx, prod, rest);
    for (int b = nb - 1; b >= 0 && body; b--)
        body = te__alloc_stmt(L->ctx, bufs[b], body);
    return body;
}

static te_stmt *guard(te_ctx *ctx, te__vec *conds, te_stmt *s)
{
    te_expr *c = NULL;
    for (int i = 0; i < conds->n; i++)
        c = c ? te_and(ctx, c, conds->v[i]) : conds->v[i];
    return c ? te__if(ctx, c, s, NULL) : s;
}

static te_stmt *make_stage(lower_ctx *L, lstage *l)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    bool is_red = l->body->kind == TE_E_REDUCE;
    int nl = st->leaves.n;

    /* Substitutions: root variables -> global coordinates. */
    const te_expr *from[2 * TE_MAX_DIMS];
    te_expr *to[2 * TE_MAX_DIMS], *sidx[TE_MAX_DIMS];
    int nm = 0;
    for (int d = 0; d < st->ndim; d++) {
        sidx[d] = l->val[iter_index(st, st->axes[d])];
        from[nm] = st->axes[d]->var;
        to[nm++] = te_add(ctx, l->rmin[d], sidx[d]);
    }
    for (int r = 0; r < st->nred; r++) {
        from[nm] = st->raxes[r]->var;
        to[nm++] = l->val[iter_index(st, st->raxes[r])];
    }
    te__subst map = {nm, from, to};
    load_ctx lc = {L, 0};

    /* Guards: tails of non-divisible splits, and regions that overhang the tensor. */
    te__vec all = {0}, spatial = {0};
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        if (r->kind != TE_REL_SPLIT)
            continue;
        int64_t pe = l->ext[iter_index(st, r->parent)];
        if (pe % r->factor == 0 || r->factor >= pe)
            continue;
        te_expr *c = te_lt(ctx, l->val[iter_index(st, r->parent)], te_int(ctx, pe));
        te__vec_push(ctx, &all, c);
        if (!r->parent->reduce)
            te__vec_push(ctx, &spatial, c);
    }
    for (int d = 0; d < st->ndim; d++) {
        if (st->attach != TE_ATTACH_AT)
            continue;
        te_expr *c = te_lt(ctx, to[d], te_int(ctx, st->tensor->shape[d]));
        te__vec_push(ctx, &all, c);
        te__vec_push(ctx, &spatial, c);
    }

    te_expr *value = is_red ? l->body->u.red.src : l->body;
    value = te__expr_mutate(ctx, te__substitute(ctx, value, &map), to_load_fn, &lc);
    if (!value || lc.err)
        return NULL;
    te_stmt *update, *init = NULL;
    if (is_red) {
        te_expr *acc = te__load(ctx, l->buf, st->ndim, sidx);
        te_expr *comb = te__reduce_combine(ctx, l->body->u.red.rkind, l->body->u.red.custom, acc,
                                           value);
        update = te__store(ctx, l->buf, st->ndim, sidx, comb);
        te_expr *id = te__reduce_identity(ctx, l->body->u.red.rkind, l->body->u.red.custom,
                                          l->body->dtype);
        init = guard(ctx, &spatial, te__store(ctx, l->buf, st->ndim, sidx, id));
    } else {
        update = te__store(ctx, l->buf, st->ndim, sidx, value);
        if (update && st->nontemporal)
            update->u.store.nontemporal = true;
    }
    te_stmt *inner = guard(ctx, &all, update);
    if (!inner)
        return NULL;

    /* The first leaf that belongs to a reduction: the accumulator is initialized before it. */
    int p = nl;
    for (int k = 0; k < nl; k++)
        if (((te_iter *)st->leaves.v[k])->reduce) {
            p = k;
            break;
        }
    if (is_red) {
        for (int k = nl - 1; k >= p; k--) {
            te_iter *it = st->leaves.v[k];
            if (it->reduce)
                continue;
            init = te__for(ctx, it->var, te_int(ctx, 0), te_int(ctx, l->ext[iter_index(st, it)]),
                           for_kind(it), init);
        }
    }

    /* Loops whose whole nest is small get unrolled (te_pragma_unroll_max). */
    bool unroll[64] = {false};
    if (st->unroll_max > 0) {
        int64_t steps = 1;
        for (int k = nl - 1; k >= 0 && k < 64; k--) {
            te_iter *it = st->leaves.v[k];
            if (it->ann == TE_ANN_VECTORIZE)
                continue;
            int64_t e = l->ext[iter_index(st, it)];
            if (it->ann != TE_ANN_NONE || steps * e > st->unroll_max)
                break;
            steps *= e;
            unroll[k] = true;
        }
    }

    for (int k = nl - 1; k >= 0; k--) {
        te_iter *it = st->leaves.v[k];
        te_stmt *body = inner;
        if (is_red && k + 1 == p)
            body = te__seq2(ctx, init, body);
        body = with_attached(L, st, k, body);
        te_for_kind fk = unroll[k < 64 ? k : 0] && k < 64 ? TE_FOR_UNROLLED : for_kind(it);
        if (it->reduce && fk == TE_FOR_THREAD) /* GPU cross-thread reduction (te_bind_reduce) */
            inner = te__gpu_allreduce(ctx, it->var, l->ext[iter_index(st, it)], (int)it->tag, body,
                                      l->buf, st->ndim, sidx, l->body->u.red.rkind,
                                      l->body->u.red.custom, l->body->dtype);
        else
            inner = te__for(ctx, it->var, te_int(ctx, 0), te_int(ctx, l->ext[iter_index(st, it)]),
                            fk, body);
        if (!inner)
            return NULL;
        if (fk == TE_FOR_THREAD && inner->kind == TE_S_FOR)
            inner->u.loop.thread_tag = (int)it->tag;
    }
    if (is_red && p == 0)
        inner = te__seq2(ctx, init, inner);
    char note[160];
    snprintf(note, sizeof note, "compute %s", st->tensor->name);
    return te__seq2(ctx, te__comment(ctx, note), inner);
}

/* ---- Arguments and provenance ------------------------------------------------------------ */

static int check_args(lower_ctx *L)
{
    te_schedule *s = L->s;
    int seen_output = 0;
    for (int a = 0; a < L->n_args; a++) {
        te_tensor *t = L->args[a];
        if (!t)
            return LERR(L, TE_ERR_ARG, "te_lower: argument %d is NULL", a);
        for (int b = 0; b < a; b++)
            if (L->args[b] == t)
                return LERR(L, TE_ERR_ARG, "te_lower: tensor '%s' is listed twice", t->name);
        bool is_out = false;
        for (int o = 0; o < s->n_out; o++)
            is_out |= s->outs[o] == t;
        if (t->kind == TE_T_COMPUTE && !is_out)
            return LERR(L, TE_ERR_ARG, "te_lower: argument '%s' is computed but is not an output "
                        "of the schedule", t->name);
        if (is_out)
            seen_output++;
        else if (seen_output)
            return LERR(L, TE_ERR_ARG, "te_lower: input '%s' is listed after an output; list "
                        "inputs first, then outputs", t->name);
    }
    if (seen_output != s->n_out)
        return LERR(L, TE_ERR_ARG, "te_lower: every output of the schedule must be an argument "
                    "(%d of %d listed)", seen_output, s->n_out);
    return TE_OK;
}

static const char *make_header(lower_ctx *L, const char *name)
{
    te_ctx *ctx = L->ctx;
    char *h = te__sprintf(ctx, "kernel %s\n", name);
    const char *op = "";
    for (int o = 0; o < L->s->n_out; o++)
        if (L->s->outs[o]->tag && *L->s->outs[o]->tag)
            op = L->s->outs[o]->tag;
    if (*op)
        h = te__sprintf(ctx, "%soperator: %s\n", h, op);
    for (int a = 0; a < L->n_args && h; a++) {
        te_tensor *t = L->args[a];
        char shape[128] = "";
        int len = 0;
        for (int d = 0; d < t->ndim; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", d ? "x" : "",
                            (long long)t->shape[d]);
        h = te__sprintf(ctx, "%s%s %s: %s[%s]\n", h, a < L->n_args - L->s->n_out ? "input " : "output",
                        t->name, te_dtype_str(t->dtype), shape);
    }
    const char *trace = te_schedule_trace(L->s);
    return h ? te__sprintf(ctx, "%sschedule:\n%s", h, *trace ? trace : "  (default: no primitives)\n")
             : NULL;
}

/* ---- The pipeline ------------------------------------------------------------------------- */

static te_stmt *build_body(lower_ctx *L)
{
    te_ctx *ctx = L->ctx;
    int rc;
    if ((rc = do_inline(L)))
        return NULL;
    /* Regions: consumers before producers. Root stages cover their whole tensor. */
    for (int i = L->n - 1; i >= 0; i--) {
        lstage *l = &L->ls[i];
        te_stage *st = l->st;
        if (st->attach == TE_ATTACH_INLINE)
            continue;
        l->ext = te__alloc(ctx, sizeof(int64_t) * (size_t)st->iters.n);
        l->val = te__alloc(ctx, sizeof(te_expr *) * (size_t)st->iters.n);
        if (!l->ext || !l->val)
            return NULL;
        if (st->attach == TE_ATTACH_AT) {
            if (find_ls(L, st->attach_stage->tensor)->st->attach == TE_ATTACH_INLINE) {
                LERR(L, TE_ERR_SCHEDULE, "stage '%s' is computed at '%s', which is inlined",
                     st->tensor->name, st->attach_stage->tensor->name);
                return NULL;
            }
            if (infer_region(L, l))
                return NULL;
        } else {
            for (int d = 0; d < st->ndim; d++) {
                l->rmin[d] = te_int(ctx, 0);
                l->rext[d] = st->tensor->shape[d];
            }
        }
        compute_extents(l);
        if (compute_values(L, l))
            return NULL;
        /* The buffer: an argument for outputs, an allocation otherwise. */
        te_buf *b = NULL;
        for (int a = 0; a < L->n_args; a++)
            if (L->args[a] == st->tensor)
                b = L->arg_bufs[a];
        if (!b) {
            te_scope sc = st->scope;
            if (st->attach == TE_ATTACH_AT && sc == TE_SCOPE_GLOBAL)
                sc = TE_SCOPE_LOCAL; /* per-iteration scratch */
            b = te__buf_new(ctx, st->tensor->name, st->tensor->dtype, st->ndim, l->rext, sc);
            if (!b)
                return NULL;
            b->tensor = st->tensor;
            te__gpu_apply_layout(L->s, b); /* storage_align */
        }
        l->buf = b;
    }
    te_stmt *body = NULL;
    te_buf *root_bufs[256];
    int nroot = 0;
    for (int i = 0; i < L->n; i++) {
        lstage *l = &L->ls[i];
        if (l->st->attach != TE_ATTACH_ROOT)
            continue;
        te_stmt *s = make_stage(L, l);
        if (!s)
            return NULL;
        body = te__seq2(ctx, body, s);
        if (l->buf->arg_index < 0 && nroot < 256)
            root_bufs[nroot++] = l->buf;
    }
    for (int b = nroot - 1; b >= 0 && body; b--)
        body = te__alloc_stmt(ctx, root_bufs[b], body);
    return body;
}

te_lowered *te_lower(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                     const te_target *target)
{
    if (!s)
        return NULL;
    te_ctx *ctx = s->ctx;
    if (n_args <= 0 || !args || !name || !*name) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_lower: needs a name and at least one argument");
        return NULL;
    }
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
              (p != name && *p >= '0' && *p <= '9'))) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_lower: kernel name '%s' must be a C identifier",
                             name);
            return NULL;
        }
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    lower_ctx L = {ctx, s, s->stages.n, NULL, n_args, args, NULL};
    L.ls = te__alloc(ctx, sizeof(lstage) * (size_t)(L.n ? L.n : 1));
    L.arg_bufs = te__alloc(ctx, sizeof(te_buf *) * (size_t)n_args);
    if (!L.ls || !L.arg_bufs || check_args(&L))
        return NULL;
    for (int i = 0; i < L.n; i++)
        L.ls[i].st = s->stages.v[i];
    for (int a = 0; a < n_args; a++) {
        te_tensor *t = args[a];
        if (!(L.arg_bufs[a] = te__buf_new(ctx, t->name, t->dtype, t->ndim, t->shape,
                                          TE_SCOPE_GLOBAL)))
            return NULL;
        L.arg_bufs[a]->arg_index = a;
        L.arg_bufs[a]->tensor = t;
    }

    te_stmt *body = build_body(&L);
    /* GPU-scheduled programs (loops bound to blocks or threads) get the GPU passes; on a C
     * target they end with the thread split that makes them run on the CPU. */
    bool gpu = body && te__has_thread_loops(body);
    bool cuda = target->backend == TE_BACKEND_CUDA;
    /* The pass list, in order. */
    if (body)
        body = te__pass_simplify(ctx, body);
    if (body)
        body = te__pass_loop_partition(ctx, body);
    if (body)
        body = te__pass_simplify(ctx, body);
    if (body && gpu)
        body = te__pass_double_buffer(ctx, s, body);
    if (body && gpu)
        body = te__pass_hoist_shared(ctx, body);
    if (body)
        body = te__pass_storage_flatten(ctx, body);
    if (body && cuda)
        body = te__pass_gpu_vector_filter(ctx, body);
    if (body)
        body = te__pass_vectorize(ctx, body, target);
    if (body)
        body = te__pass_unroll(ctx, body);
    if (body)
        body = te__pass_simplify(ctx, body);
    if (body && gpu)
        body = te__pass_barrier(ctx, s, body);
    if (body && cuda)
        body = te__pass_gpu_check(ctx, body, target);
    if (body && gpu && !cuda)
        body = te__pass_thread_split(ctx, body);
    if (body && gpu && !cuda)
        body = te__pass_simplify(ctx, body);
    if (!body) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_LOWER, "te_lower: lowering '%s' failed", name);
        return NULL;
    }
    te_lowered *f = te__alloc(ctx, sizeof *f);
    if (!f)
        return NULL;
    f->name = te__strdup(ctx, name);
    f->n_args = n_args;
    f->args = L.arg_bufs;
    f->body = body;
    f->n_outputs = s->n_out;
    f->header = make_header(&L, name);
    return f;
}

void te_lowered_print(const te_lowered *f, FILE *out)
{
    if (!f)
        return;
    fprintf(out, "func %s(", f->name);
    for (int a = 0; a < f->n_args; a++)
        fprintf(out, "%s%s", a ? ", " : "", f->args[a]->name);
    fputs(") {\n", out);
    te__stmt_print(f->body, out, 2);
    fputs("}\n", out);
}
