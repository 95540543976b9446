/*
 * Lowering: from a schedule to one loop program. te_lower checks its arguments and runs the
 * pass table (schedule/pipeline.c); its first step, loop_nests, is here:
 *
 *   1. inline       substitute inlined stages into their consumers
 *   2. regions      consumers before producers: the region of each compute_at stage
 *                   (bound_infer.c), then extents and iterator values through split/fuse
 *                   (relations.c)
 *   3. loop nests   one nest per stage, producers placed at their attach loops
 */
#include <stdlib.h>
#include <string.h>

#include "schedule/lower_impl.h"
#include "schedule/tensorize_impl.h"

int te__iter_index(const te_stage *st, const te_iter *it)
{
    for (int i = 0; i < st->iters.n; i++)
        if (st->iters.v[i] == it)
            return i;
    return -1;
}

lstage *te__find_lstage(lower_ctx *L, const te_tensor *t)
{
    for (int i = 0; i < L->n; i++)
        if (te__tensor_same_stage(L->ls[i].st->tensor, t))
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
    lstage *p = te__find_lstage(L, e->u.read.t);
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
    case TE_ANN_VTHREAD:
        return TE_FOR_VTHREAD;
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
    lstage *p = te__find_lstage(L, t);
    if (!p || !p->buf) {
        lc->err = LERR(L, TE_ERR_ARG,
                       "tensor '%s' is read but is neither computed by the "
                       "schedule nor among the kernel arguments",
                       t->name);
        return e;
    }
    te_expr *idx[TE_MAX_DIMS];
    for (int d = 0; d < e->u.read.n; d++)
        idx[d] = te_sub(ctx, e->u.read.idx[d], p->rmin[d]);
    return te__load(ctx, p->st->ntuple ? p->bufs[t->tuple_index] : p->buf, e->u.read.n, idx);
}

te_expr *te__to_loads(lower_ctx *L, te_expr *e)
{
    load_ctx lc = {L, 0};
    te_expr *r = e ? te__expr_mutate(L->ctx, e, to_load_fn, &lc) : NULL;
    return lc.err ? NULL : r;
}

static te_stmt *make_stage(lower_ctx *L, lstage *l);

/* The producers attached at loop `it`, in order (make_stage of each), and their buffers. */
typedef struct {
    te_stmt *prod[64];
    const te_stage *st[64];
    int np;
    te_buf *bufs[64];
    int nb;
} attached;

static int collect_attached(lower_ctx *L, const te_iter *it, attached *a)
{
    a->np = a->nb = 0;
    for (int i = 0; i < L->n && a->np < 64; i++) {
        lstage *p = &L->ls[i];
        if (p->st->attach != TE_ATTACH_AT || p->st->attach_iter != it)
            continue;
        if (!(a->prod[a->np] = make_stage(L, p)))
            return -1;
        a->st[a->np++] = p->st;
        for (int k = 0; k < (p->st->ntuple ? p->st->ntuple : 1); k++)
            if (a->nb < 64)
                a->bufs[a->nb++] = p->st->ntuple ? p->bufs[k] : p->buf;
    }
    return te__fuse_siblings(L, a->prod, a->st, a->np);
}

/* body inside the allocations of a's buffers. */
static te_stmt *alloc_attached(lower_ctx *L, const attached *a, te_stmt *body)
{
    for (int b = a->nb - 1; b >= 0 && body; b--)
        body = te__alloc_stmt(L->ctx, a->bufs[b], body);
    return body;
}

/* Producers attached at leaf `pos` of stage S, wrapped around `rest`. */
static te_stmt *with_attached(lower_ctx *L, te_stage *S, int pos, te_stmt *rest)
{
    attached a;
    if (collect_attached(L, S->leaves.v[pos], &a))
        return NULL;
    te_stmt *prod = NULL;
    for (int q = 0; q < a.np; q++)
        prod = te__seq2(L->ctx, prod, a.prod[q]);
    return alloc_attached(L, &a, te__seq2(L->ctx, prod, rest));
}

static te_stmt *guard(te_ctx *ctx, te__vec *conds, te_stmt *s)
{
    te_expr *c = NULL;
    for (int i = 0; i < conds->n; i++)
        c = c ? te_and(ctx, c, conds->v[i]) : conds->v[i];
    return c ? te__if(ctx, c, s, NULL) : s;
}

typedef struct {
    const te_buf *buf;
    const te_expr *found[8];
    int n;
} pf_loads;

static bool pf_find(const te_expr *e, void *user)
{
    pf_loads *f = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == f->buf) {
        for (int i = 0; i < f->n; i++)
            if (f->found[i] == e)
                return true;
        if (f->n < 8)
            f->found[f->n++] = e;
    }
    return true;
}

/* te_prefetch at leaf k of l's stage: each load of the prefetched tensor in `value`, with the
 * loops inside leaf k at their first iteration and the `ahead` loop dist iterations later
 * (clamped to its last), becomes a prefetch let around the loop's body. */
static te_stmt *with_prefetches(lower_ctx *L, lstage *l, int k, te_expr *value, te_stmt *body)
{
    if (!l->st->prefetches.n)
        return body;
    /* A tuple reduction reads through its sources (value is the first alone). */
    te_expr *const *vals = &value;
    int nvals = 1;
    if (l->pf_nsrc > 0) {
        vals = l->pf_srcs;
        nvals = l->pf_nsrc;
    }
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    for (int q = 0; body && q < st->prefetches.n; q++) {
        te__prefetch *pf = st->prefetches.v[q];
        if (pf->at != st->leaves.v[k])
            continue;
        const te_buf *buf = NULL;
        for (int a = 0; a < L->n_args && !buf; a++)
            if (L->args[a] == pf->t)
                buf = L->arg_bufs[a];
        lstage *tp = buf ? NULL : te__find_lstage(L, pf->t);
        if (tp)
            buf = tp->buf;
        int64_t ahead_ext = 0;
        if (te__iter_index(st, pf->ahead) >= 0) {
            ahead_ext = l->ext[te__iter_index(st, pf->ahead)];
        } else {
            lstage *ap = te__find_lstage(L, st->attach_stage->tensor);
            if (ap && te__iter_index(ap->st, pf->ahead) >= 0)
                ahead_ext = ap->ext[te__iter_index(ap->st, pf->ahead)];
        }
        if (!buf || ahead_ext <= 0)
            continue;
        const te_expr *from[TE_MAX_DIMS * 4 + 1];
        te_expr *to[TE_MAX_DIMS * 4 + 1];
        int nm = 0, inner = -1;
        for (int j = k + 1; j < st->leaves.n && nm < TE_MAX_DIMS * 4; j++) {
            inner = nm;
            from[nm] = ((te_iter *)st->leaves.v[j])->var;
            to[nm++] = te_int(ctx, 0);
        }
        from[nm] = pf->ahead->var;
        to[nm++] = te_min(ctx, te_add(ctx, pf->ahead->var, te_int(ctx, pf->dist)),
                          te_int(ctx, ahead_ext - 1));
        te__subst map = {nm, from, to};
        pf_loads f = {buf, {0}, 0};
        for (int i = 0; i < nvals; i++)
            te__expr_visit(vals[i], pf_find, &f);
        /* One prefetch per cache line the innermost loop covers (its first iteration, then
         * every 64 bytes of it, at most pf->lines), each distinct address once. */
        int64_t in_ext =
            inner >= 0 ? l->ext[te__iter_index(st, st->leaves.v[st->leaves.n - 1])] : 1;
        int64_t step = 64 / (int64_t)te_dtype_size(pf->t->dtype);
        te_expr *done[64];
        int nd = 0;
        for (int i = 0; i < f.n && body; i++) {
            for (int64_t c = 0; c < in_ext && c < pf->lines * step && body;
                 c += step > 0 ? step : 1) {
                if (inner >= 0)
                    to[inner] = te_int(ctx, c);
                te_expr *ld = te__substitute(ctx, (te_expr *)f.found[i], &map);
                if (!ld)
                    return NULL;
                bool dup = false;
                for (int q2 = 0; q2 < nd && !dup; q2++)
                    dup = te__expr_equal(done[q2], ld);
                if (dup || nd == 64)
                    continue;
                done[nd++] = ld;
            }
        }
        for (int i = nd - 1; i >= 0 && body; i--) {
            te_expr *v = te__prefetch_var(ctx, "prefetch", pf->level);
            body = v ? te__let(ctx, v, done[i], body) : NULL;
        }
    }
    return body;
}

/* e with the loop variables of st->leaves[kt..] at 0 (last: at their last iteration). */
static te_expr *at_origin(lower_ctx *L, const lstage *l, int kt, te_expr *e, bool last)
{
    const te_stage *st = l->st;
    const te_expr *from[64];
    te_expr *to[64];
    int n = 0;
    for (int k = kt; k < st->leaves.n && n < 64; k++, n++) {
        const te_iter *it = st->leaves.v[k];
        from[n] = it->var;
        if (!(to[n] = te_int(L->ctx, last ? l->ext[te__iter_index(st, it)] - 1 : 0)))
            return NULL;
    }
    te__subst map = {n, from, to};
    return te__substitute(L->ctx, e, &map);
}

typedef struct find_load {
    const te_tensor *t;
    te_expr *found;
} find_load;

static bool find_load_fn(const te_expr *e, void *user)
{
    find_load *f = user;
    if (!f->found && e->kind == TE_E_LOAD && e->u.load.buf->tensor == f->t)
        f->found = (te_expr *)e;
    return !f->found;
}

/* te_tensorize: the loop nest of st->leaves[kt..] as one call of the stage's intrinsic (after
 * zeroing the nest's output when the whole reduction is in the nest and the intrinsic has no
 * overwrite form). When the stage has guards (a region overhanging its tensor, a split with a
 * tail), the call runs for the tiles whose last element passes them (every guard grows with
 * the nest's loops) and the plain loop nest for the others. `value` is the stage's lowered
 * value, sidx its output index, update the guarded update, init_one one element's
 * initialization and init the initialization nest over the leaves from p on (p: the first
 * reduction leaf).
 *
 * When part of the reduction is outside the nest (a K-blocked product: the k blocks outside
 * the tile loops, so a block of the operands stays in cache while the tiles go by), the call
 * in the first iteration of those outer reduction loops is the overwrite form and the others
 * the update form: every tile's first call writes its output instead of reading the zeros of
 * an initialization pass over the whole block (which cost a write and a read of the output
 * per block). *own_init is then set: the stage needs no initialization nest. Sets *top to
 * kt. NULL on error (message on the context). */
static te_stmt *tensorized_nest(lower_ctx *L, lstage *l, te_expr *const *sidx,
                                const te__vec *guards, te_stmt *update, te_stmt *init_one,
                                te_stmt *init, int p, int *top, bool *own_init)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    const te_tensor_intrin *in = st->tz;
    int kt = te__leaf_pos(st, st->tz_at), nl = st->leaves.n;
    if (kt < 0)
        return LERR(L, TE_ERR_SCHEDULE, "tensorize: '%s' is no longer a loop of stage '%s'",
                    st->tz_at->name, st->tensor->name),
               NULL;
    te__tz_match m;
    char why[400];
    if (te__tz_match_nest(st, l->body, kt, l->ext, in, &m, why, sizeof why))
        return LERR(L, TE_ERR_SCHEDULE, "tensorize: stage '%s' at '%s' no longer matches '%s': %s",
                    st->tensor->name, st->tz_at->name, in->name, why),
               NULL;
    te_expr *addr[TZ_MAX_OPS];
    int nfree[TZ_MAX_OPS], sdim[TZ_MAX_OPS * TE_MAX_DIMS];
    int64_t smul[TZ_MAX_OPS * TE_MAX_DIMS];
    addr[0] = te__load(ctx, l->buf, st->ndim, sidx);
    te_expr *value = update->kind == TE_S_STORE ? update->u.store.value : NULL;
    for (const te_stmt *u = update; !value && u && u->kind == TE_S_IF; u = u->u.cond.then_s)
        if (u->u.cond.then_s && u->u.cond.then_s->kind == TE_S_STORE)
            value = u->u.cond.then_s->u.store.value;
    for (int o = 1; o < m.nops; o++) {
        find_load f = {m.ops[o], NULL};
        if (value)
            te__expr_visit(value, find_load_fn, &f);
        if (!f.found)
            return LERR(L, TE_ERR_INTERNAL, "tensorize: no load of '%s' in stage '%s'",
                        m.ops[o]->name, st->tensor->name),
                   NULL;
        addr[o] = f.found;
    }
    for (int o = 0; o < m.nops; o++) {
        if (!addr[o] || !(addr[o] = at_origin(L, l, kt, addr[o], false)))
            return NULL;
        const te_buf *b = addr[o]->u.load.buf;
        const te_tensor *X = in->ops[o];
        if (b->ndim != m.ops[o]->ndim)
            return LERR(L, TE_ERR_SCHEDULE, "tensorize: buffer '%s' has rank %d", b->name, b->ndim),
                   NULL;
        for (int d = in->nfree[o] + 1; d < X->ndim; d++)
            if (b->shape[m.dim0[o] + d] != X->shape[d])
                return LERR(L, TE_ERR_SCHEDULE,
                            "tensorize: dimension %d of buffer '%s' has extent %lld; intrinsic "
                            "'%s' needs it dense (%lld)",
                            m.dim0[o] + d, b->name, (long long)b->shape[m.dim0[o] + d], in->name,
                            (long long)X->shape[d]),
                       NULL;
        nfree[o] = in->nfree[o];
        for (int f = 0; f < TE_MAX_DIMS; f++) {
            sdim[o * TE_MAX_DIMS + f] = f < nfree[o] ? m.dim0[o] + f : -1;
            smul[o * TE_MAX_DIMS + f] = m.smul[o][f];
        }
    }
    bool is_red = l->body->kind == TE_E_REDUCE;
    bool overwrite = is_red && m.whole_reduction && in->c_overwrite;
    te_stmt *call = te__intrin_call(ctx, in, in->name, overwrite, m.nops, addr, nfree, sdim, smul,
                                    m.var_extent);
    if (!call)
        return NULL;
    if (is_red && !m.whole_reduction && in->c_overwrite && !guards->n) {
        /* The first iteration of every serial reduction loop outside the nest overwrites. */
        te_expr *first = NULL;
        bool serial = true;
        for (int k = 0; k < kt && serial; k++) {
            te_iter *it = st->leaves.v[k];
            if (!it->reduce)
                continue;
            serial = it->ann == TE_ANN_NONE || it->ann == TE_ANN_UNROLL;
            te_expr *c = te_eq(ctx, it->var, te_int(ctx, 0));
            first = first ? te_and(ctx, first, c) : c;
        }
        if (serial && first) {
            te_stmt *ow = te__intrin_call(ctx, in, in->name, true, m.nops, addr, nfree, sdim, smul,
                                          m.var_extent);
            if (!ow || !(call = te__if(ctx, first, ow, call)))
                return NULL;
            *own_init = true;
        }
    }
    if (is_red && m.whole_reduction && !overwrite) {
        /* Zero the nest's output first, over its data-parallel loops. */
        te_stmt *z = init_one;
        for (int k = nl - 1; k >= kt; k--) {
            te_iter *it = st->leaves.v[k];
            if (!it->reduce)
                z = te__for(ctx, it->var, te_int(ctx, 0),
                            te_int(ctx, l->ext[te__iter_index(st, it)]), TE_FOR_SERIAL, z);
        }
        call = te__seq2(ctx, z, call);
    }
    *top = kt;
    if (!guards->n)
        return call;
    /* Tiles that fail a guard: the plain nest. */
    te_expr *cond = NULL;
    for (int q = 0; q < guards->n; q++) {
        te_expr *c = at_origin(L, l, kt, guards->v[q], true);
        cond = !c ? NULL : cond ? te_and(ctx, cond, c) : c;
        if (!cond)
            return NULL;
    }
    te_stmt *plain = update;
    for (int k = nl - 1; k >= kt; k--) {
        te_iter *it = st->leaves.v[k];
        te_stmt *body = plain;
        if (is_red && k + 1 == p)
            body = te__seq2(ctx, init, body);
        plain = te__for(ctx, it->var, te_int(ctx, 0), te_int(ctx, l->ext[te__iter_index(st, it)]),
                        TE_FOR_SERIAL, body);
    }
    if (is_red && p == kt)
        plain = te__seq2(ctx, init, plain);
    return plain ? te__if(ctx, cond, call, plain) : NULL;
}

/* ---- te_pipeline ---------------------------------------------------------------------- */

typedef struct {
    lower_ctx *L;
    const te_stmt *behind; /* the pipelined stage's loop nest, one iteration behind */
    const te_expr *var;    /* the variable of the loop to fuse into */
    bool done;
    bool failed; /* error (message on the context) */
} pipe_fuse;

static te_stmt *fuse_child(void *user, te_stmt *s);

/* s with loop pf->var (found through sequences, comments, allocations, lets and loops of
 * extent 1) given pf->behind's loop body first, that loop's variable standing for
 * pf->behind's. NULL with pf->failed on error. */
static te_stmt *fuse_into(te_stmt *s, pipe_fuse *pf)
{
    lower_ctx *L = pf->L;
    te_ctx *ctx = L->ctx;
    if (!s || pf->done || pf->failed)
        return s;
    if (s->kind == TE_S_SEQ || s->kind == TE_S_ALLOC || s->kind == TE_S_LET)
        return te__stmt_map_children(ctx, s, fuse_child, pf, &pf->failed);
    int64_t mn, ex, bmn, bex;
    if (s->kind != TE_S_FOR || !te__arith_const_int(s->u.loop.min, &mn) ||
        !te__arith_const_int(s->u.loop.extent, &ex))
        return s;
    if (s->u.loop.var != pf->var && ex != 1)
        return s;
    if (s->u.loop.var != pf->var) {
        te_stmt *b = fuse_into(s->u.loop.body, pf);
        te_stmt *f =
            b ? te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, s->u.loop.fkind, b)
              : NULL;
        if (f)
            f->u.loop.thread_tag = s->u.loop.thread_tag;
        pf->failed |= !f;
        return f;
    }
    pf->done = true;
    const te_stmt *n = pf->behind;
    bool nconst =
        te__arith_const_int(n->u.loop.min, &bmn) && te__arith_const_int(n->u.loop.extent, &bex);
    pf->failed = true;
    if (!nconst || bmn != mn || bex != ex)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: loop '%s' (%lld iterations) cannot be fused with loop '%s' (%s "
                    "iterations): split them alike",
                    s->u.loop.var->u.var.name, (long long)ex, n->u.loop.var->u.var.name,
                    nconst ? te__sprintf(ctx, "%lld", (long long)bex) : "a varying number of"),
               NULL;
    if (s->u.loop.fkind != TE_FOR_SERIAL || n->u.loop.fkind != TE_FOR_SERIAL)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: loops '%s' and '%s' must both be serial to be fused",
                    s->u.loop.var->u.var.name, n->u.loop.var->u.var.name),
               NULL;
    te__subst m = {1, (const te_expr *[]){n->u.loop.var}, (te_expr *[]){s->u.loop.var}};
    te_stmt *nb = te__stmt_substitute(ctx, n->u.loop.body, &m);
    te_stmt *b =
        nb ? te__seq2(ctx,
                      te__seq2(ctx, te__comment(ctx, "one iteration behind (te_pipeline)"), nb),
                      s->u.loop.body)
           : NULL;
    te_stmt *f =
        b ? te__for(ctx, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_SERIAL, b) : NULL;
    pf->failed = !f;
    return f;
}

static te_stmt *fuse_child(void *user, te_stmt *s) { return fuse_into(s, user); }

/* Loop k of l's stage pipelined (te_pipeline): the producers attached there for iteration 0,
 * then for iterations 1.. the producers with `rest` (the stage's loops under k) of the
 * iteration before fused into pipe_with's loop, then `rest` of the last iteration; the
 * producers' buffers allocated around all three. NULL on error (message on the context). */
static te_stmt *pipelined(lower_ctx *L, lstage *l, int k, te_expr *value, te_stmt *rest,
                          bool unrolled)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    te_iter *it = st->leaves.v[k];
    const char *nm = st->tensor->name;
    int64_t ext = l->ext[te__iter_index(st, it)];
    if (for_kind(it) != TE_FOR_SERIAL || unrolled)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: loop '%s' of '%s' is parallel, vectorized, unrolled or bound; "
                    "a pipelined loop runs its iterations in order (split it and pipeline the "
                    "inner part)",
                    it->name, nm),
               NULL;
    te_stage *w = st->pipe_with;
    if (w->attach != TE_ATTACH_AT || w->attach_stage != st || w->attach_iter != it)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: stage '%s' is no longer computed at loop '%s' of '%s'",
                    w->tensor->name, it->name, nm),
               NULL;
    if (rest->kind != TE_S_FOR)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: stage '%s' has no loop under '%s' to fuse into '%s'", nm,
                    it->name, w->tensor->name),
               NULL;
    attached a;
    if (collect_attached(L, it, &a))
        return NULL;
    te_stmt **prod = a.prod;
    int np = a.np, wi = -1;
    for (int q = 0; q < np; q++)
        if (a.st[q] == w)
            wi = q;
    if (wi < 0)
        return LERR(L, TE_ERR_INTERNAL, "te_pipeline: stage '%s' not among the producers at '%s'",
                    w->tensor->name, it->name),
               NULL;
    /* Iteration i-1 of rest runs inside w's loop of iteration i: nothing it reads may be
     * written by then in iteration i, and no producer may read what it writes. */
    te__bufs reads = {0}, writes = {0}, early = {0}, preads = {0};
    te__bufs_reads(rest, &reads);
    te__bufs_writes(rest, &writes);
    for (int q = 0; q < np; q++) {
        te__bufs_reads(prod[q], &preads);
        if (q <= wi)
            te__bufs_writes(prod[q], &early);
    }
    if (reads.full || writes.full || early.full || preads.full)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: '%s' and its producers use more than 128 buffers; their order "
                    "cannot be checked",
                    nm),
               NULL;
    for (int i = 0; i < reads.n; i++)
        if (te__bufs_has(&early, reads.v[i]))
            return LERR(L, TE_ERR_SCHEDULE,
                        "te_pipeline: '%s' reads '%s', which is written before the loop of '%s' "
                        "ends; one iteration behind, it would read the next iteration's values "
                        "(fuse into a producer that runs before '%s' is written)",
                        nm, reads.v[i]->name, w->tensor->name, reads.v[i]->name),
                   NULL;
    for (int i = 0; i < writes.n; i++)
        if (te__bufs_has(&preads, writes.v[i]))
            return LERR(L, TE_ERR_SCHEDULE,
                        "te_pipeline: a producer of '%s' reads '%s', which '%s' writes", nm,
                        writes.v[i]->name, nm),
                   NULL;
    te_expr *x = it->var;
    te__subst back = {1, (const te_expr *[]){x}, (te_expr *[]){te_sub(ctx, x, te_int(ctx, 1))}};
    /* w's outermost loop of more than one iteration */
    lstage *lw = te__find_lstage(L, w->tensor);
    const te_expr *wvar = NULL;
    for (int q = 0; lw && q < w->leaves.n && !wvar; q++)
        if (lw->ext[te__iter_index(w, w->leaves.v[q])] > 1)
            wvar = ((te_iter *)w->leaves.v[q])->var;
    pipe_fuse pf = {L, te__stmt_substitute(ctx, rest, &back), wvar, false, false};
    if (!pf.behind)
        return NULL;
    te_stmt *fw = fuse_into(prod[wi], &pf);
    if (pf.failed || !fw)
        return NULL;
    if (!pf.done)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: stage '%s' has no loop of more than one iteration (outside "
                    "conditions) for '%s' to fuse into",
                    w->tensor->name, nm),
               NULL;
    te_stmt *first = NULL, *steady = NULL;
    for (int q = 0; q < np; q++) {
        first = te__seq2(ctx, first, prod[q]);
        steady = te__seq2(ctx, steady, q == wi ? fw : prod[q]);
    }
    first = with_prefetches(L, l, k, value, first);
    steady = with_prefetches(L, l, k, value, steady);
    te__subst at0 = {1, (const te_expr *[]){x}, (te_expr *[]){te_int(ctx, 0)}};
    te__subst atn = {1, (const te_expr *[]){x}, (te_expr *[]){te_int(ctx, ext - 1)}};
    first = first ? te__stmt_substitute(ctx, first, &at0) : NULL;
    te_stmt *last = te__stmt_substitute(ctx, rest, &atn);
    te_stmt *loop =
        steady ? te__for(ctx, x, te_int(ctx, 1), te_int(ctx, ext - 1), TE_FOR_SERIAL, steady)
               : NULL;
    char n1[160], n2[160], n3[160];
    snprintf(n1, sizeof n1, "pipeline prologue: %s = 0 without %s", it->name, nm);
    snprintf(n2, sizeof n2, "pipeline: %s of %s - 1 inside %s's loop", nm, it->name,
             w->tensor->name);
    snprintf(n3, sizeof n3, "pipeline epilogue: %s of %s = %lld", nm, it->name,
             (long long)(ext - 1));
    te_stmt *body = te__seq2(ctx, te__comment(ctx, n1), first);
    body = te__seq2(ctx, body, te__seq2(ctx, te__comment(ctx, n2), loop));
    body = te__seq2(ctx, body, te__seq2(ctx, te__comment(ctx, n3), last));
    if (!first || !loop || !last)
        return NULL;
    return alloc_attached(L, &a, body);
}

/* The loop of leaf o->q inside the lets a tuple update computes outside it, under the
 * stage's guards at the loop nest's first point (leaves q.. at 0): every guard is an upper
 * bound of an index that grows with those loops, so when the first point is outside, all are,
 * and the lets' loads stay in bounds. */
static te_stmt *outer_lets(lower_ctx *L, const lstage *l, const te__tuple_outer *o,
                           const te__vec *all, te_stmt *loop)
{
    te_ctx *ctx = L->ctx;
    const te_stage *st = l->st;
    const te_expr *from[64];
    te_expr *to[64];
    int n = 0;
    for (int k = o->q; k < st->leaves.n && n < 64; k++) {
        from[n] = ((te_iter *)st->leaves.v[k])->var;
        if (!(to[n++] = te_int(ctx, 0)))
            return NULL;
    }
    te__subst z = {n, from, to};
    te__vec first = {0};
    for (int i = 0; i < all->n; i++) {
        te_expr *c = te__substitute(ctx, all->v[i], &z);
        if (!c || te__vec_push(ctx, &first, c))
            return NULL;
    }
    return guard(ctx, &first, te__tuple_outer_wrap(L, o, loop));
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
        sidx[d] = l->val[te__iter_index(st, st->axes[d])];
        from[nm] = st->axes[d]->var;
        to[nm++] = te_add(ctx, l->rmin[d], sidx[d]);
    }
    for (int r = 0; r < st->nred; r++) {
        from[nm] = st->raxes[r]->var;
        to[nm++] = l->val[te__iter_index(st, st->raxes[r])];
    }
    te__subst map = {nm, from, to};
    load_ctx lc = {L, 0};

    /* Guards: tails of non-divisible splits, and regions that overhang the tensor. */
    te__vec all = {0}, spatial = {0};
    for (int k = 0; k < st->rels.n; k++) {
        te_rel *r = st->rels.v[k];
        if (r->kind != TE_REL_SPLIT)
            continue;
        int64_t pe = l->ext[te__iter_index(st, r->parent)];
        if (pe % r->factor == 0 || r->factor >= pe)
            continue;
        te_expr *c = te_lt(ctx, l->val[te__iter_index(st, r->parent)], te_int(ctx, pe));
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
    l->pf_nsrc = 0;
    if (st->prefetches.n && te__is_tuple_reduce(l->body)) {
        /* what te_prefetch finds the prefetched tensor's loads in: every source */
        int ns = l->body->u.red.nsrc;
        if (!(l->pf_srcs = te__alloc(ctx, sizeof(te_expr *) * (size_t)ns)))
            return NULL;
        for (int i = 0; i < ns; i++) {
            l->pf_srcs[i] = te__expr_mutate(ctx, te__substitute(ctx, l->body->u.red.srcs[i], &map),
                                            to_load_fn, &lc);
            if (!l->pf_srcs[i] || lc.err)
                return NULL;
        }
        l->pf_nsrc = ns;
    }
    te_stmt *update, *init = NULL;
    te__tuple_outer tout = {nl, 0, {NULL}, {NULL}};
    int tpos = -1; /* te_reduce_tree: the leaf folded as a tree, no loop of its own */
    if (is_red && te__tree_check(L, l, &tpos))
        return NULL;
    if (tpos >= 0) {
        if (te__tree_update(L, l, &map, sidx, tpos, &update, &init))
            return NULL;
        init = guard(ctx, &spatial, init);
    } else if (te__is_tuple_reduce(l->body)) {
        if (te__tuple_update(L, l, &map, sidx, te__tuple_inner_from(L, l), &tout, &update, &init))
            return NULL;
        init = guard(ctx, &spatial, init);
    } else if (is_red) {
        te_expr *acc = te__load(ctx, l->buf, st->ndim, sidx);
        te_expr *comb =
            te__reduce_combine(ctx, l->body->u.red.rkind, l->body->u.red.custom, acc, value);
        update = te__store(ctx, l->buf, st->ndim, sidx, comb);
        te_expr *id =
            te__reduce_identity(ctx, l->body->u.red.rkind, l->body->u.red.custom, l->body->dtype);
        init = guard(ctx, &spatial, te__store(ctx, l->buf, st->ndim, sidx, id));
    } else {
        update = te__store(ctx, l->buf, st->ndim, sidx, value);
        if (update && st->nontemporal)
            update->u.store.nontemporal = true;
    }
    /* The first leaf that belongs to a reduction: the accumulator is initialized before it. */
    int p = nl;
    for (int k = 0; k < nl; k++)
        if (((te_iter *)st->leaves.v[k])->reduce) {
            p = k;
            break;
        }
    te_stmt *init_one = init; /* one element's initialization (guarded) */
    if (is_red && p <= nl) {
        for (int k = nl - 1; k >= p; k--) {
            te_iter *it = st->leaves.v[k];
            if (it->reduce)
                continue;
            init = te__for(ctx, it->var, te_int(ctx, 0),
                           te_int(ctx, l->ext[te__iter_index(st, it)]), for_kind(it), init);
        }
    }
    te_stmt *inner;
    int top = nl; /* loops st->leaves[0..top) are built; the rest is `inner` */
    if (!(inner = guard(ctx, &all, update)))
        return NULL;
    if (st->tz) {
        bool own_init = false;
        if (!(inner = tensorized_nest(L, l, sidx, &all, inner, init_one, init, p, &top, &own_init)))
            return NULL;
        if (is_red && (p >= top || own_init))
            p = nl + 1; /* the nest initializes its own output */
    }

    /* Loops whose whole nest is small get unrolled (te_pragma_unroll_max). */
    bool unroll[64] = {false};
    if (st->unroll_max > 0 && !st->tz) {
        int64_t steps = 1;
        for (int k = nl - 1; k >= 0 && k < 64; k--) {
            te_iter *it = st->leaves.v[k];
            if (it->ann == TE_ANN_VECTORIZE)
                continue;
            int64_t e = l->ext[te__iter_index(st, it)];
            if (it->ann != TE_ANN_NONE || steps * e > st->unroll_max)
                break;
            steps *= e;
            unroll[k] = true;
        }
    }

    if (st->pipe_at && te__leaf_pos(st, st->pipe_at) < 0)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_pipeline: loop '%s' of '%s' was split or fused after it was pipelined",
                    st->pipe_at->name, st->tensor->name),
               NULL;
    for (int k = top - 1; k >= 0; k--) {
        te_iter *it = st->leaves.v[k];
        if (k == tpos)
            continue; /* folded inside the update (a reduction leaf: the initialization is
                       * outside it, at leaf p - 1 or after the loops) */
        if (st->pipe_at == it && l->ext[te__iter_index(st, it)] > 1) {
            if (!(inner = pipelined(L, l, k, value, inner, unroll[k < 64 ? k : 0] && k < 64)))
                return NULL;
            continue;
        }
        te_stmt *body = inner;
        if (is_red && k + 1 == p)
            body = te__seq2(ctx, init, body);
        body = with_attached(L, st, k, body);
        body = with_prefetches(L, l, k, value, body);
        te_for_kind fk = unroll[k < 64 ? k : 0] && k < 64 ? TE_FOR_UNROLLED : for_kind(it);
        inner = te__for(ctx, it->var, te_int(ctx, 0), te_int(ctx, l->ext[te__iter_index(st, it)]),
                        fk, body);
        if (!inner)
            return NULL;
        if (k == tout.q && tout.n && !(inner = outer_lets(L, l, &tout, &all, inner)))
            return NULL;
        if (fk == TE_FOR_THREAD)
            inner->u.loop.thread_tag = (int)it->tag;
        if (fk == TE_FOR_THREAD && it->reduce) {
            /* te_bind_reduce: the cross_thread_reduce pass lowers it. */
            te__xreduce *x = te__alloc(ctx, sizeof *x);
            te_expr **xi = te__alloc(ctx, sizeof(te_expr *) * (size_t)(st->ndim ? st->ndim : 1));
            if (!x || !xi)
                return NULL;
            memcpy(xi, sidx, sizeof(te_expr *) * (size_t)st->ndim);
            *x = (te__xreduce){
                l->buf,         st->ndim,   xi,     l->body->u.red.rkind, l->body->u.red.custom,
                l->body->dtype, st->ntuple, l->bufs};
            inner->u.loop.xreduce = x;
        }
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
            return LERR(L, TE_ERR_ARG,
                        "te_lower: argument '%s' is computed but is not an output "
                        "of the schedule",
                        t->name);
        if (is_out)
            seen_output++;
        else if (seen_output)
            return LERR(L, TE_ERR_ARG,
                        "te_lower: input '%s' is listed after an output; list "
                        "inputs first, then outputs",
                        t->name);
    }
    if (seen_output != s->n_out)
        return LERR(L, TE_ERR_ARG,
                    "te_lower: every output of the schedule must be an argument "
                    "(%d of %d listed)",
                    seen_output, s->n_out);
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
        h = te__sprintf(ctx, "%s%s %s: %s[%s]\n", h,
                        a < L->n_args - L->s->n_out ? "input " : "output", t->name,
                        te_dtype_str(t->dtype), shape);
    }
    const char *trace = te_schedule_trace(L->s);
    return h ? te__sprintf(ctx, "%sschedule:\n%s", h,
                           *trace ? trace : "  (default: no primitives)\n")
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
            if (te__find_lstage(L, st->attach_stage->tensor)->st->attach == TE_ATTACH_INLINE) {
                LERR(L, TE_ERR_SCHEDULE, "stage '%s' is computed at '%s', which is inlined",
                     st->tensor->name, st->attach_stage->tensor->name);
                return NULL;
            }
            if (te__infer_region(L, l))
                return NULL;
        } else {
            for (int d = 0; d < st->ndim; d++) {
                l->rmin[d] = te_int(ctx, 0);
                l->rext[d] = st->tensor->shape[d];
            }
        }
        te__compute_extents(l);
        if (te__compute_values(L, l))
            return NULL;
        /* The buffer: an argument for outputs, an allocation otherwise; one per output of
         * a tuple stage. */
        for (int k = 0; k < (st->ntuple ? st->ntuple : 1); k++) {
            te_tensor *t = st->ntuple ? st->tuple[k] : st->tensor;
            te_buf *b = NULL;
            for (int a = 0; a < L->n_args; a++)
                if (L->args[a] == t)
                    b = L->arg_bufs[a];
            if (!b) {
                te_scope sc = st->scope;
                if (st->attach == TE_ATTACH_AT && sc == TE_SCOPE_GLOBAL)
                    sc = TE_SCOPE_LOCAL; /* per-iteration scratch */
                b = te__buf_new(ctx, t->name, t->dtype, st->ndim, l->rext, sc);
                if (!b)
                    return NULL;
                b->tensor = t;
                te__gpu_apply_layout(L->s, b); /* storage_align */
            }
            l->bufs[k] = b;
        }
        l->buf = l->bufs[0];
    }
    te_stmt *body = NULL, **prod = te__alloc(ctx, sizeof(te_stmt *) * (size_t)(L->n ? L->n : 1));
    const te_stage **pst = te__alloc(ctx, sizeof(te_stage *) * (size_t)(L->n ? L->n : 1));
    te_buf *root_bufs[256];
    int nroot = 0, np = 0;
    if (!prod || !pst)
        return NULL;
    for (int i = 0; i < L->n; i++) {
        lstage *l = &L->ls[i];
        if (l->st->attach != TE_ATTACH_ROOT)
            continue;
        if (!(prod[np] = make_stage(L, l)))
            return NULL;
        pst[np++] = l->st;
        for (int k = 0; k < (l->st->ntuple ? l->st->ntuple : 1); k++)
            if (l->bufs[k]->arg_index < 0 && nroot < 256)
                root_bufs[nroot++] = l->bufs[k];
    }
    if (te__fuse_siblings(L, prod, pst, np))
        return NULL;
    for (int q = 0; q < np; q++)
        body = te__seq2(ctx, body, prod[q]);
    for (int b = nroot - 1; b >= 0 && body; b--)
        body = te__alloc_stmt(ctx, root_bufs[b], body);
    return body;
}

te_stmt *te__pass_loop_nests(const te__pass_ctx *pc, te_stmt *unused)
{
    (void)unused;
    te_schedule *s = (te_schedule *)pc->sched;
    lower_ctx L = {pc->ctx, s, s->stages.n, NULL, pc->n_args, pc->args, (te_buf **)pc->arg_bufs};
    L.ls = te__alloc(pc->ctx, sizeof(lstage) * (size_t)(L.n ? L.n : 1));
    if (!L.ls)
        return NULL;
    for (int i = 0; i < L.n; i++)
        L.ls[i].st = s->stages.v[i];
    return build_body(&L);
}

te_lowered *te_lower_dump(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                          const te_target *target, const char *dump, FILE *out)
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
    L.arg_bufs = te__alloc(ctx, sizeof(te_buf *) * (size_t)n_args);
    if (!L.arg_bufs || check_args(&L))
        return NULL;
    for (int a = 0; a < n_args; a++) {
        te_tensor *t = args[a];
        if (!(L.arg_bufs[a] =
                  te__buf_new(ctx, t->name, t->dtype, t->ndim, t->shape, TE_SCOPE_GLOBAL)))
            return NULL;
        L.arg_bufs[a]->arg_index = a;
        L.arg_bufs[a]->tensor = t;
    }
    te__pass_ctx pc = {ctx, s, target, n_args, args, L.arg_bufs, name};
    te_stmt *body = te__pipeline_run(&pc, dump, out ? out : stderr);
    if (!body)
        return NULL;
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

te_lowered *te_lower(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                     const te_target *target)
{
    /* TESSERA_DUMP_IR=all|<pass>[,<pass>...]: the IR after those passes, on stderr. This is the
     * one place the library writes to stderr, and only when asked to. */
    const char *dump = getenv("TESSERA_DUMP_IR");
    return te_lower_dump(s, n_args, args, name, target, dump && *dump ? dump : NULL, stderr);
}

int te_lower_pass_count(void) { return te__pipeline_n; }

const char *te_lower_pass_name(int i)
{
    return i >= 0 && i < te__pipeline_n ? te__pipeline[i].name : NULL;
}

const char *te_lower_pass_when(int i)
{
    static const char *when[] = {"always", "GPU schedules", "CUDA target", "C target",
                                 "GPU schedules, C target"};
    return i >= 0 && i < te__pipeline_n ? when[te__pipeline[i].when] : NULL;
}

const char *te_lower_pass_what(int i)
{
    return i >= 0 && i < te__pipeline_n ? te__pipeline[i].what : NULL;
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

typedef struct notes_ctx {
    const char **notes;
    int max, n;
} notes_ctx;

static bool note_visit(const te_stmt *s, void *user)
{
    notes_ctx *nc = user;
    if (s->kind == TE_S_COMMENT && s->u.comment.text &&
        strncmp(s->u.comment.text, TE__VECTORIZE_NOTE, strlen(TE__VECTORIZE_NOTE)) == 0) {
        if (nc->notes && nc->n < nc->max)
            nc->notes[nc->n] = s->u.comment.text;
        nc->n++;
    }
    return true;
}

int te_lowered_notes(const te_lowered *f, const char **notes, int max)
{
    notes_ctx nc = {notes, max, 0};
    if (f && f->body)
        te__stmt_visit(f->body, note_visit, NULL, &nc);
    return nc.n;
}
