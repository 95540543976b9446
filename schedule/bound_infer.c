/*
 * Bound inference: the region of a stage computed at a loop of another stage (compute_at),
 * from the reads of its consumers evaluated as symbolic intervals (schedule/bound.c). For a
 * stage computed at loop L of stage S: loops of S outside L (and L) stay symbols, loops inside L
 * (and the loops of consumers that are themselves computed inside L) range over their extents.
 * The union of the reads gives the region's first element (an expression of the outer loops)
 * and its extent (a constant; when interval reasoning fails, the whole tensor).
 */
#include "schedule/lower_impl.h"

typedef struct {
    const te_tensor *t;
    te_expr *reads[256];
    int n;
} reads_of;

static bool reads_of_fn(const te_expr *e, void *user)
{
    reads_of *r = user;
    if (e->kind == TE_E_READ && te__tensor_same_stage(e->u.read.t, r->t) && r->n < 256)
        r->reads[r->n++] = (te_expr *)e;
    return true;
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
            ve->ext[ve->n++] = l->ext[te__iter_index(l->st, it)];
        }
    }
}

int te__infer_region(lower_ctx *L, lstage *p)
{
    te_ctx *ctx = L->ctx;
    te_stage *st = p->st;
    te_stage *S = st->attach_stage;
    lstage *ls_S = te__find_lstage(L, S->tensor);
    int at = te__leaf_pos(S, st->attach_iter);
    if (at < 0)
        return LERR(L, TE_ERR_SCHEDULE,
                    "stage '%s' is computed at loop '%s' of '%s', which is "
                    "no longer a loop of that stage",
                    st->tensor->name, st->attach_iter->name, S->tensor->name);
    te__relax base = {0};
    for (int k = at + 1; k < S->leaves.n; k++) {
        te_iter *it = S->leaves.v[k];
        int64_t e = ls_S->ext[te__iter_index(S, it)];
        if (!te__relax_add(&base, it->var, te_int(ctx, 0), te_int(ctx, e - 1)))
            return LERR(L, TE_ERR_UNSUPPORTED, "bound inference: too many loops");
    }
    /* GPU: a shared buffer serves the whole block, so its region is the union over the
     * threads: every loop bound to threadIdx or to a virtual thread ranges over its extent. */
    if (st->scope == TE_SCOPE_SHARED) {
        for (int i = 0; i < L->n; i++) {
            lstage *o = &L->ls[i];
            for (int k = 0; o->ext && k < o->st->leaves.n; k++) {
                te_iter *it = o->st->leaves.v[k];
                if (((it->ann == TE_ANN_BIND && it->tag >= TE_THREAD_X) ||
                     it->ann == TE_ANN_VTHREAD) &&
                    !te__relax_add(&base, it->var, te_int(ctx, 0),
                                   te_int(ctx, o->ext[te__iter_index(o->st, it)] - 1)))
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
            /* C is inside S's loop `at` when it is attached there or deeper, directly or
             * through stages attached inside it (a tile's local accumulator computed in a
             * stage computed in S): their loops then all run inside `at`, over their whole
             * extents as far as this region is concerned. */
            bool inside = false;
            for (te_stage *a = C; a && a->attach == TE_ATTACH_AT && !inside; a = a->attach_stage) {
                inside = a->attach_stage == S && te__leaf_pos(S, a->attach_iter) >= at;
                if (inside || !a->attach_stage)
                    break;
                lstage *lx = te__find_lstage(L, a->attach_stage->tensor);
                for (int k = 0; lx && lx->ext && k < lx->st->leaves.n; k++) {
                    te_iter *it = lx->st->leaves.v[k];
                    if (!te__relax_add(&r, it->var, te_int(ctx, 0),
                                       te_int(ctx, lx->ext[te__iter_index(lx->st, it)] - 1)))
                        return LERR(L, TE_ERR_UNSUPPORTED, "bound inference: too many loops");
                }
            }
            if (!inside)
                return LERR(L, TE_ERR_SCHEDULE,
                            "stage '%s' is computed at '%s.%s' but stage '%s' "
                            "also reads it outside that loop; compute '%s' at the root or move "
                            "'%s' inside '%s.%s'",
                            st->tensor->name, S->tensor->name, st->attach_iter->name,
                            C->tensor->name, st->tensor->name, C->tensor->name, S->tensor->name,
                            st->attach_iter->name);
        }
        /* Ranges of C's root variables as seen from S's loop `at`. */
        for (int d = 0; d < C->ndim; d++) {
            te_expr *v = te_add(ctx, lc->rmin[d], lc->val[te__iter_index(C, C->axes[d])]);
            te__relax inner = r;
            if (C != S) {
                for (int k = 0; k < C->leaves.n; k++) {
                    te_iter *it = C->leaves.v[k];
                    int64_t e = lc->ext[te__iter_index(C, it)];
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
            te_expr *v = lc->val[te__iter_index(C, C->raxes[k])];
            te__relax inner = r;
            for (int q = 0; q < C->leaves.n; q++) {
                te_iter *it = C->leaves.v[q];
                if (C != S || q > at) {
                    int64_t e = lc->ext[te__iter_index(C, it)];
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
        return LERR(L, TE_ERR_SCHEDULE,
                    "stage '%s' is computed at '%s.%s' but nothing there "
                    "reads it",
                    st->tensor->name, S->tensor->name, st->attach_iter->name);
    te__var_ext ve;
    all_var_extents(L, &ve);
    for (int d = 0; d < st->ndim; d++) {
        int64_t shape = st->tensor->shape[d], ext;
        if (!full[d] && have[d]) {
            te_expr *lo = te__simplify_expr(ctx, uni[d].lo, NULL);
            te_expr *n = te__simplify_expr(
                ctx, te_add(ctx, te_sub(ctx, uni[d].hi, lo), te_int(ctx, 1)), NULL);
            /* a region smaller than the tensor, or one element of an axis of extent 1 (whose
             * first element then cancels from the index: a register tile indexed by constants
             * even where the axis comes from a fused loop such as blockIdx.z = n * blocks) */
            if (lo && n && (te__is_const_int(n, &ext) || te__max_over_vars(n, &ve, &ext)) &&
                (ext < shape || ext == 1)) {
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
