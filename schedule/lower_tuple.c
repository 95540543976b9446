/*
 * The update of a tuple stage (te_compute_tuple), for make_stage in lower.c.
 *
 * Every accumulator advances together:
 *
 *     let v_j = source j;  let n_i = combine_i(acc, v);  out_i[idx] = n_i (every i)
 *
 * so every combine reads the accumulators before any is stored (the lets are the tuple of
 * locals; the promote_registers pass keeps local accumulators in variables). Constant sources
 * are substituted rather than bound, so the combine simplifies.
 *
 * Components that stay the same along the innermost loops. When the stage's innermost loops
 * (leaves q..nl, te__tuple_inner_from) are spatial and a component's source does not depend on
 * them (neither on their variables nor on a stage computed inside them), and its combine reads
 * only such components, the component has the same value at every
 * point of those loops (the same identity, the same incoming values in the same order). The
 * online-softmax state of attention is the example: the running maximum and sum are per query
 * row, the accumulator per (row, d), all three stored at every d. Such a component is read
 * once per iteration of the loops outside (a snapshot at the inner loops' first point), its
 * combine is computed there, and so is every subexpression of the other combines that reads
 * only those values (attention's exp(min - max) rescaling factor): the inner loops keep the
 * per-element arithmetic and the stores. Reading before the inner loops is the tuple's rule
 * (every combine reads the accumulators before any is stored) at a coarser grain.
 */
#include <string.h>

#include "schedule/lower_impl.h"

/* Whether stage `other` is computed inside loop `it` of stage st: attached at it, or at a loop
 * of a stage that is (the chain of attach points passes through it). */
static bool computed_inside(const te_stage *other, const te_stage *st, const te_iter *it)
{
    for (int depth = 0; other && other->attach == TE_ATTACH_AT && depth < 64; depth++) {
        if (other->attach_stage == st && other->attach_iter == it)
            return true;
        other = other->attach_stage;
    }
    return false;
}

int te__tuple_inner_from(lower_ctx *L, const lstage *l)
{
    (void)L;
    const te_stage *st = l->st;
    int nl = st->leaves.n, q = nl;
    if (st->tz)
        return nl;
    /* Stages computed at these loops are allowed: te__tuple_update keeps a component whose
     * source reads one of them inside the loops. */
    for (int k = nl - 1; k >= 0; k--) {
        const te_iter *it = st->leaves.v[k];
        bool plain =
            it->ann == TE_ANN_NONE || it->ann == TE_ANN_VECTORIZE || it->ann == TE_ANN_UNROLL;
        if (it->reduce || !plain || it == st->pipe_at)
            break;
        q = k;
    }
    return q;
}

/* Whether expression e loads a buffer of a stage computed inside one of the loops
 * leaves[q..nl) of stage st (its value changes along them, whatever e's indices). */
typedef struct {
    const lower_ctx *L;
    const te_stage *st;
    int q;
    bool hit;
} inside_ctx;

static bool inside_fn(const te_expr *e, void *user)
{
    inside_ctx *c = user;
    if (c->hit || e->kind != TE_E_LOAD)
        return !c->hit;
    for (int i = 0; i < c->L->n && !c->hit; i++) {
        const lstage *o = &c->L->ls[i];
        bool mine = o->buf == e->u.load.buf;
        for (int t = 0; t < TE_MAX_TUPLE && !mine; t++)
            mine = o->bufs[t] && o->bufs[t] == e->u.load.buf;
        for (int k = c->q; mine && k < c->st->leaves.n && !c->hit; k++)
            c->hit = computed_inside(o->st, c->st, c->st->leaves.v[k]);
    }
    return !c->hit;
}

static bool reads_inner_stage(const lower_ctx *L, const te_stage *st, int q, const te_expr *e)
{
    inside_ctx c = {L, st, q, false};
    te__expr_visit(e, inside_fn, &c);
    return c.hit;
}

/* Whether e mentions one of vars[0..n). */
static bool uses_any(const te_expr *e, const te_expr *const *vars, int n)
{
    for (int i = 0; i < n; i++)
        if (te__expr_uses_var(e, vars[i]))
            return true;
    return false;
}

/* Whether e reads no memory and every variable in it is one of the outer lets. */
typedef struct {
    const te__tuple_outer *o;
    bool inner;
} outer_ctx;

static bool outer_fn(const te_expr *e, void *user)
{
    outer_ctx *c = user;
    if (c->inner)
        return false;
    if (e->kind == TE_E_LOAD || e->kind == TE_E_READ) {
        c->inner = true;
    } else if (e->kind == TE_E_VAR) {
        bool found = false;
        for (int i = 0; i < c->o->n && !found; i++)
            found = e == c->o->var[i];
        c->inner = !found;
    }
    return !c->inner;
}

static bool is_outer(const te_expr *e, const te__tuple_outer *o)
{
    outer_ctx c = {o, false};
    te__expr_visit(e, outer_fn, &c);
    return !c.inner;
}

static bool is_leaf(const te_expr *e)
{
    return e->kind == TE_E_VAR || e->kind == TE_E_INT || e->kind == TE_E_FLOAT;
}

/* The outer let whose value is e (structurally), -1 when none is. */
static int bound_index(const te__tuple_outer *o, const te_expr *e)
{
    for (int i = 0; i < o->n; i++)
        if (te__expr_equal(o->val[i], e))
            return i;
    return -1;
}

static int push_let(lower_ctx *L, te__tuple_outer *o, const char *stage, const char *what, int k,
                    te_expr *value)
{
    if (o->n >= TE__TUPLE_OUTER_MAX)
        return 1;
    char nm[96];
    snprintf(nm, sizeof nm, "%s_%s%d", stage, what, k);
    te_expr *v = te_var(L->ctx, nm, value->dtype);
    if (!v)
        return TE_ERR_NOMEM;
    o->var[o->n] = v;
    o->val[o->n++] = value;
    return TE_OK;
}

/* Maximal subexpressions of e that read only outer lets (and are not just a variable or a
 * constant), bound to outer lets. */
typedef struct {
    lower_ctx *L;
    te__tuple_outer *o;
    const char *stage;
    int err;
} hoist_ctx;

static bool hoist_fn(const te_expr *e, void *user)
{
    hoist_ctx *h = user;
    if (h->err || is_leaf(e) || !is_outer(e, h->o))
        return !h->err;
    if (h->o->n >= TE__TUPLE_OUTER_MAX - TE_MAX_TUPLE)
        return false; /* room for the new values; the rest stays inside */
    if (bound_index(h->o, e) >= 0)
        return false; /* already bound */
    int rc = push_let(h->L, h->o, h->stage, "h", h->o->n, (te_expr *)e);
    if (rc == TE_ERR_NOMEM)
        h->err = rc;
    return false;
}

/* e with its largest subexpressions that are bound by o's lets replaced by the lets'
 * variables: found top-down (te__expr_visit), then replaced bottom-up (te__expr_mutate, which
 * hands over a found node unchanged, since nothing inside it was found). */
typedef struct {
    const te__tuple_outer *o;
    const te_expr *hit[64];
    te_expr *to[64];
    int n;
} bound_ctx;

static bool find_bound(const te_expr *e, void *user)
{
    bound_ctx *b = user;
    if (is_leaf(e))
        return false;
    int i = bound_index(b->o, e);
    if (i < 0)
        return true;
    if (b->n < 64) {
        b->hit[b->n] = e;
        b->to[b->n++] = b->o->var[i];
    }
    return false;
}

static te_expr *put_bound(te_ctx *ctx, te_expr *e, void *user)
{
    (void)ctx;
    const bound_ctx *b = user;
    for (int i = 0; i < b->n; i++)
        if (e == b->hit[i])
            return b->to[i];
    return e;
}

static te_expr *use_bound(te_ctx *ctx, te_expr *e, const te__tuple_outer *o)
{
    bound_ctx b = {o, {NULL}, {NULL}, 0};
    te__expr_visit(e, find_bound, &b);
    return b.n ? te__expr_mutate(ctx, e, put_bound, &b) : e;
}

/* The invariant components' buffers, one element along every dimension whose index moves
 * only with the inner loops (leaves q..; the outer leaves of one iteration count as
 * constants): every point of those loops stores the same value there, and the update reads
 * the snapshot taken before them, so one element holds what the whole extent held (its
 * readers, at any index, read that value). Attention's running maximum and sum, which have
 * the output's head dimension, become one value per query row: 2 dh - 2 fewer stores a row
 * and block, and their buffers 1/dh of the size. Arguments (the kernel's outputs) and GPU
 * shared buffers keep their shape. */
static int collapse_invariant(lower_ctx *L, lstage *l, te_expr *const *sidx, int q, const bool *inv,
                              bool *collapsed, te_expr **first)
{
    te_ctx *ctx = L->ctx;
    const te_stage *st = l->st;
    const te_expr *var[64];
    te_expr *zero[64];
    int nv = 0;
    for (int k = 0; k < st->leaves.n && nv < 64; k++) {
        const te_iter *it = st->leaves.v[k];
        if (k < q && l->ext[te__iter_index(st, it)] != 1)
            continue;
        var[nv] = it->var;
        if (!(zero[nv++] = te_int(ctx, 0)))
            return TE_ERR_NOMEM;
    }
    te__subst z = {nv, var, zero};
    uint32_t dims = 0;
    for (int d = 0; d < st->ndim && d < 32; d++) {
        te_expr *at0 = te__substitute(ctx, sidx[d], &z);
        int64_t c;
        if (!at0)
            return TE_ERR_NOMEM;
        /* Only leaves q.. move it (the rest are constants), and it moves. */
        if (te__is_const_int(te__simplify_expr(ctx, at0, NULL), &c) &&
            !te__is_const_int(sidx[d], &c))
            dims |= 1u << d;
    }
    for (int i = 0; i < l->st->ntuple && dims; i++) {
        te_buf *b = l->bufs[i];
        if (!inv[i] || b->arg_index >= 0 || b->scope == TE_SCOPE_SHARED)
            continue;
        for (int d = 0; d < b->ndim && d < 32; d++)
            if (dims >> d & 1)
                b->shape[d] = 1;
        b->bcast_dims |= dims;
        collapsed[i] = true;
    }
    /* The point that stores the element: the first of every inner loop that moves a collapsed
     * index, except a vectorized one (its lanes store one scalar: passes/vectorize.c). After
     * unrolling the condition folds, so one store a row remains instead of one per copy. */
    *first = NULL;
    for (int k = q; k < st->leaves.n && dims; k++) {
        const te_iter *it = st->leaves.v[k];
        bool moves = false;
        for (int d = 0; d < st->ndim && d < 32 && !moves; d++)
            moves = (dims >> d & 1) && te__expr_uses_var(sidx[d], it->var);
        if (!moves || it->ann == TE_ANN_VECTORIZE)
            continue;
        te_expr *c = te_eq(ctx, it->var, te_int(ctx, 0));
        if (!c || (*first && !(c = te_and(ctx, *first, c))))
            return TE_ERR_NOMEM;
        *first = c;
    }
    return TE_OK;
}

int te__tuple_update(lower_ctx *L, lstage *l, const te__subst *map, te_expr *const *sidx, int q,
                     te__tuple_outer *o, te_stmt **update, te_stmt **init)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = l->st;
    const te_reducer *r = l->body->u.red.custom;
    const char *nm = st->tensor->name;
    int n = r->n, nl = st->leaves.n;
    te_expr *val[TE_MAX_TUPLE], *acc[TE_MAX_TUPLE], *nv[TE_MAX_TUPLE], *out[TE_MAX_TUPLE];
    te_expr *lv[TE_MAX_TUPLE] = {NULL}, *bound[TE_MAX_TUPLE] = {NULL};
    bool src_out[TE_MAX_TUPLE] = {false}, inv[TE_MAX_TUPLE] = {false};
    bool collapsed[TE_MAX_TUPLE] = {false};
    te_expr *first = NULL; /* where a collapsed component is stored (collapse_invariant) */
    memset(o, 0, sizeof *o);

    for (int j = 0; j < n; j++) {
        te_expr *v = te__to_loads(L, te__substitute(ctx, l->body->u.red.srcs[j], map));
        if (!v)
            return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
        if (v->kind == TE_E_INT || v->kind == TE_E_FLOAT) {
            val[j] = v;
        } else {
            char vn[96];
            snprintf(vn, sizeof vn, "%s_in%d", nm, j);
            if (!(lv[j] = te_var(ctx, vn, v->dtype)))
                return TE_ERR_NOMEM;
            val[j] = lv[j];
            bound[j] = v;
        }
    }

    /* The outermost q (from the first candidate in) at which some component is invariant
     * along leaves q..: its source does not read their variables and its combine reads only
     * invariant components (the largest such set: drop the others until none changes). */
    const te_expr *ivar[64];
    te_expr *zero[64];
    int ni = 0, ninv = 0;
    for (q = q < nl - 64 ? nl - 64 : q; q < nl && !ninv; q++) {
        ni = 0;
        for (int k = q; k < nl; k++)
            ivar[ni++] = ((te_iter *)st->leaves.v[k])->var;
        for (int j = 0; j < n; j++)
            ninv += inv[j] = src_out[j] = !bound[j] || (!uses_any(bound[j], ivar, ni) &&
                                                        !reads_inner_stage(L, st, q, bound[j]));
        for (bool changed = true; changed && ninv;) {
            changed = false;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n && inv[i]; j++)
                    if (!inv[j] && (te__expr_uses_var(r->combines[i], r->xs[j]) ||
                                    te__expr_uses_var(r->combines[i], r->ys[j]))) {
                        inv[i] = false;
                        ninv--;
                        changed = true;
                    }
        }
        if (ninv == n) /* all of them: the combine is the same at every point of the loops, */
            ninv = 0;  /* left inside (a broadcast; nothing to share) */
        if (ninv)
            break;
    }
    if (!ninv)
        memset(inv, 0, sizeof inv);
    for (int k = 0; k < ni; k++)
        if (!(zero[k] = te_int(ctx, 0)))
            return TE_ERR_NOMEM;
    if (ninv) {
        o->q = q;
        te__subst z = {ni, ivar, zero};
        te_expr *sidx0[TE_MAX_DIMS];
        for (int d = 0; d < st->ndim; d++)
            if (!(sidx0[d] = te__substitute(ctx, sidx[d], &z)))
                return TE_ERR_NOMEM;
        for (int j = 0; j < n; j++)
            if (lv[j] && src_out[j]) {
                o->var[o->n] = lv[j];
                o->val[o->n++] = bound[j];
            }
        for (int i = 0; i < n; i++)
            if (inv[i]) {
                te_expr *s = te__load(ctx, l->bufs[i], st->ndim, sidx0);
                if (!s || push_let(L, o, nm, "old", i, s))
                    return TE_ERR_NOMEM;
                acc[i] = o->var[o->n - 1];
            }
        int rc = collapse_invariant(L, l, sidx, q, inv, collapsed, &first);
        if (rc)
            return rc;
    } else {
        o->q = nl;
    }
    for (int i = 0; i < n; i++)
        if (!inv[i] && !(acc[i] = te__load(ctx, l->bufs[i], st->ndim, sidx)))
            return TE_ERR_NOMEM;
    int rc = te__reduce_combine_tuple(ctx, r, acc, val, out);
    if (rc)
        return rc;
    /* The other combines' outer parts first, then the invariant components' new values,
     * which reuse them (attention: the rescaling factor, computed once). */
    for (int i = 0; i < n && ninv; i++) {
        if (inv[i])
            continue;
        hoist_ctx h = {L, o, nm, 0};
        te__expr_visit(out[i], hoist_fn, &h);
        if (h.err || !(out[i] = use_bound(ctx, out[i], o)))
            return TE_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (!inv[i])
            continue;
        te_expr *v = use_bound(ctx, out[i], o);
        if (!v || (rc = push_let(L, o, nm, "next", i, v)))
            return v && rc == 1 ? TE_ERR_INTERNAL : TE_ERR_NOMEM;
        nv[i] = o->var[o->n - 1];
    }

    te_stmt *stores = NULL, *inits = NULL;
    for (int i = 0; i < n; i++) {
        if (!inv[i]) {
            char vn[96];
            snprintf(vn, sizeof vn, "%s_next%d", nm, i);
            if (!(nv[i] = te_var(ctx, vn, out[i]->dtype)))
                return TE_ERR_NOMEM;
        }
        te_stmt *put = te__store(ctx, l->bufs[i], st->ndim, sidx, nv[i]),
                *put0 = te__store(ctx, l->bufs[i], st->ndim, sidx, r->identities[i]);
        if (collapsed[i] && first)
            put = te__if(ctx, first, put, NULL), put0 = te__if(ctx, first, put0, NULL);
        stores = te__seq2(ctx, stores, put);
        inits = te__seq2(ctx, inits, put0);
    }
    te_stmt *s = stores;
    for (int i = n - 1; i >= 0 && s; i--)
        if (!inv[i])
            s = te__let(ctx, nv[i], out[i], s);
    for (int j = n - 1; j >= 0 && s; j--)
        if (lv[j] && !(ninv && src_out[j]))
            s = te__let(ctx, lv[j], bound[j], s);
    if (!s || !inits)
        return TE_ERR_NOMEM;
    *update = s;
    *init = inits;
    return TE_OK;
}

te_stmt *te__tuple_outer_wrap(lower_ctx *L, const te__tuple_outer *o, te_stmt *inner)
{
    for (int i = o->n - 1; i >= 0 && inner; i--)
        inner = te__let(L->ctx, o->var[i], o->val[i], inner);
    return inner;
}
