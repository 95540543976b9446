/*
 * te_compute_with in lowering (Halide's compute_with): the loop nest of a stage fused, level by
 * level, into the nest of a sibling stage computed at the same place.
 *
 *     for x0 { W(x0) }              for x0 {
 *     S.init                  ->      for x1 { W.body(x0, x1); S.body(x0, x1) } }
 *     for x0 { for x1 { S } }
 *
 * `with`'s nest W must be perfect down to the fused depth (comments only beside each loop); what
 * S runs beside its loops (a reduction's initialization before them, anything after them) goes
 * before W's loop and after the fused loop of that level. Every change of order is checked on the
 * buffers: S's body now runs before W's later iterations and before the stages computed between
 * the two, its prefix before all of W. A read of W's output must be of an element W writes in the
 * same iteration, at the same place of its inner loops (proved equal by the simplifier after S's
 * inner loop variables are renamed to W's, level by level), so it never sees a value W has not
 * written yet. The fused statement then reads a value the line before stored, which the C
 * compiler keeps in its register: the pass S made over W's output is gone.
 */
#include <string.h>

#include "schedule/lower_impl.h"
#include "te/arith.h"

static void bufs_add(te__bufs *b, const te_buf *x)
{
    if (te__bufs_has(b, x))
        return;
    if (b->n < 128)
        b->v[b->n++] = x;
    else
        b->full = true;
}

bool te__bufs_has(const te__bufs *b, const te_buf *x)
{
    for (int i = 0; i < b->n; i++)
        if (b->v[i] == x)
            return true;
    return false;
}

static bool reads_fn(const te_expr *e, void *user)
{
    if (e->kind == TE_E_LOAD)
        bufs_add(user, e->u.load.buf);
    return true;
}

static bool writes_fn(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_STORE)
        bufs_add(user, s->u.store.buf);
    else if (s->kind == TE_S_INTRIN && s->u.intrin.nops > 0)
        bufs_add(user, s->u.intrin.addr[0]->u.load.buf);
    return true;
}

void te__bufs_reads(const te_stmt *s, te__bufs *b)
{
    if (s)
        te__stmt_visit(s, NULL, reads_fn, b);
}

void te__bufs_writes(const te_stmt *s, te__bufs *b)
{
    if (s)
        te__stmt_visit(s, writes_fn, NULL, b);
}

/* The name of the first buffer in both sets; NULL when none; a note when a set overflowed (the
 * caller refuses either way). */
static const char *common(const te__bufs *a, const te__bufs *b)
{
    if (a->full || b->full)
        return "(too many buffers to check)";
    for (int i = 0; i < a->n; i++)
        if (te__bufs_has(b, a->v[i]))
            return a->v[i]->name;
    return NULL;
}

/* s's items, nested sequences flattened. */
static int flatten(const te_stmt *s, const te_stmt **out, int n, int cap)
{
    if (!s)
        return n;
    if (s->kind != TE_S_SEQ) {
        if (n < cap)
            out[n] = s;
        return n + 1;
    }
    for (int i = 0; i < s->u.seq.n; i++)
        n = flatten(s->u.seq.v[i], out, n, cap);
    return n;
}

enum { MAX_ITEMS = 64, MAX_LOOPS = 32 };

/* The loops of s in pre-order (up to MAX_LOOPS; *n counts all). */
static bool loops_fn(const te_stmt *s, void *user)
{
    struct {
        const te_stmt *v[MAX_LOOPS];
        int n;
    } *l = user;
    if (s->kind == TE_S_FOR) {
        if (l->n < MAX_LOOPS)
            l->v[l->n] = s;
        l->n++;
    }
    return true;
}

typedef struct {
    lower_ctx *L;
    const char *st, *with;    /* names, for the messages */
    te__bufs wreads, wwrites; /* of the whole of W's nest */
    const te_expr *from[2 * MAX_LOOPS];
    te_expr *to[2 * MAX_LOOPS];
    int nmap;
    bool failed;
} cw_ctx;

/* Whether loops a (W's) and b (S's) run the same iterations the same way. */
static bool same_loop(const te_stmt *a, const te_stmt *b)
{
    int64_t am, ae, bm, be;
    return te__arith_const_int(a->u.loop.min, &am) && te__arith_const_int(a->u.loop.extent, &ae) &&
           te__arith_const_int(b->u.loop.min, &bm) && te__arith_const_int(b->u.loop.extent, &be) &&
           am == bm && ae == be && a->u.loop.fkind == b->u.loop.fkind &&
           a->u.loop.thread_tag == b->u.loop.thread_tag;
}

/* The stores of buffer b in s (under conditions too). */
typedef struct {
    const te_buf *b;
    const te_stmt *v[64];
    int n;
    bool by_intrin; /* a tensor intrinsic writes b */
} store_list;

static void stores_of(const te_stmt *s, store_list *l)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            stores_of(s->u.seq.v[i], l);
        return;
    case TE_S_FOR:
        stores_of(s->u.loop.body, l);
        return;
    case TE_S_IF:
        stores_of(s->u.cond.then_s, l);
        stores_of(s->u.cond.else_s, l);
        return;
    case TE_S_ALLOC:
        stores_of(s->u.alloc.body, l);
        return;
    case TE_S_LET:
        stores_of(s->u.let.body, l);
        return;
    case TE_S_STORE:
        /* A store under a condition (a guard of a region or of a split's tail) matches too:
         * `with` computes each element once per instance of its nest (it is no reduction), so
         * where the condition is false it never writes that element, and S reads there what it
         * read unfused. */
        if (s->u.store.buf == l->b && l->n < 64)
            l->v[l->n++] = s;
        return;
    case TE_S_INTRIN:
        if (s->u.intrin.nops > 0 && s->u.intrin.addr[0]->u.load.buf == l->b)
            l->by_intrin = true; /* an intrinsic's output region is not compared */
        return;
    default:
        return;
    }
}

typedef struct {
    cw_ctx *c;
    const te_stmt *wbody; /* W's body at the fused depth */
} load_check;

/* Every load in S's fused body of a buffer W writes reads what W stored there in this
 * iteration. */
static bool check_load_fn(const te_expr *e, void *user)
{
    load_check *k = user;
    cw_ctx *c = k->c;
    if (c->failed || e->kind != TE_E_LOAD || !te__bufs_has(&c->wwrites, e->u.load.buf))
        return true;
    te_ctx *ctx = c->L->ctx;
    store_list l = {e->u.load.buf, {NULL}, 0, false};
    stores_of(k->wbody, &l);
    for (int i = 0; i < l.n; i++) {
        const te_stmt *st = l.v[i];
        bool eq = st->u.store.n == e->u.load.n;
        for (int d = 0; eq && d < e->u.load.n; d++) {
            te_expr *a = te__simplify_expr(ctx, e->u.load.idx[d], NULL);
            te_expr *b = te__simplify_expr(ctx, st->u.store.idx[d], NULL);
            eq = a && b && te__prove(ctx, te_eq(ctx, a, b), NULL);
        }
        if (eq)
            return true;
    }
    c->failed = true;
    LERR(c->L, TE_ERR_SCHEDULE,
         "te_compute_with: '%s' reads '%s' where '%s' does not write it in the same iteration%s "
         "(split and order the two stages' loops alike, so that each element is read where it "
         "is written)",
         c->st, e->u.load.buf->name, c->with, l.by_intrin ? " (a tensor intrinsic writes it)" : "");
    return false;
}

/* W (with's statement at this level) and S (st's, its fused variables already renamed) fused
 * down to `left` more levels below this one. NULL with c->failed on error. */
static te_stmt *fuse_level(cw_ctx *c, const te_stmt *W, te_stmt *S, int left)
{
    te_ctx *ctx = c->L->ctx;
    const te_stmt *wi[MAX_ITEMS], *si[MAX_ITEMS];
    int nw = flatten(W, wi, 0, MAX_ITEMS), ns = flatten(S, si, 0, MAX_ITEMS);
    int wl = -1, sl = -1;
    bool wbad = false; /* W has more than its loop and comments at this level */
    for (int i = 0; i < nw && i < MAX_ITEMS; i++) {
        if (wi[i]->kind == TE_S_FOR && wl < 0)
            wl = i;
        else if (wi[i]->kind != TE_S_COMMENT)
            wbad = true;
    }
    if (wbad)
        wl = -2;
    /* S's own loop is its last: what make_stage puts before it (a reduction's
     * initialization, stages computed at this level) is its prefix. */
    for (int i = 0; i < ns && i < MAX_ITEMS; i++)
        if (si[i]->kind == TE_S_FOR)
            sl = i;
    if (nw > MAX_ITEMS || ns > MAX_ITEMS || wl < 0 || sl < 0) {
        c->failed = true;
        return LERR(c->L, TE_ERR_SCHEDULE,
                    "te_compute_with: %s's statements at a fused level are not one loop%s",
                    wl < 0 ? c->with : c->st,
                    wl < 0 ? " (a stage computed inside its fused loops, or a loop split with a "
                             "tail, is not fused)"
                           : ""),
               NULL;
    }
    const te_stmt *wf = wi[wl], *sf = si[sl];
    /* A loop of one iteration orders nothing: the other side's nest goes on inside it (a
     * reduction's kept axis of extent 1 against an elementwise stage's split row). */
    int64_t we = 0, se = 0;
    te__arith_const_int(wf->u.loop.extent, &we);
    te__arith_const_int(sf->u.loop.extent, &se);
    if (se == 1 && we != 1) {
        te__subst one = {1, (const te_expr *[]){sf->u.loop.var}, (te_expr *[]){sf->u.loop.min}};
        te_stmt *peeled = NULL, *b = te__stmt_substitute(ctx, sf->u.loop.body, &one);
        if (!b)
            return c->failed = true, NULL;
        for (int i = 0; i < ns; i++)
            peeled = te__seq2(ctx, peeled, i == sl ? b : (te_stmt *)si[i]);
        return fuse_level(c, W, peeled, left);
    }
    if (we == 1 && se != 1) {
        if (left == 0) {
            c->failed = true;
            return LERR(c->L, TE_ERR_SCHEDULE,
                        "te_compute_with: loop '%s' of '%s' has one iteration; fuse at a loop "
                        "that '%s' has too",
                        wf->u.loop.var->u.var.name, c->with, c->st),
                   NULL;
        }
        te_stmt *b = fuse_level(c, wf->u.loop.body, S, left - 1), *out = NULL;
        te_stmt *f =
            b ? te__for(ctx, wf->u.loop.var, wf->u.loop.min, wf->u.loop.extent, wf->u.loop.fkind, b)
              : NULL;
        if (!f)
            return c->failed = true, NULL;
        f->u.loop.thread_tag = wf->u.loop.thread_tag;
        for (int i = 0; i < nw; i++)
            out = te__seq2(ctx, out, i == wl ? f : (te_stmt *)wi[i]);
        return out;
    }
    if (!same_loop(wf, sf)) {
        c->failed = true;
        return LERR(c->L, TE_ERR_SCHEDULE,
                    "te_compute_with: loop '%s' of '%s' and loop '%s' of '%s' do not run the same "
                    "iterations the same way (split them alike; both serial or both unrolled)",
                    sf->u.loop.var->u.var.name, c->st, wf->u.loop.var->u.var.name, c->with),
               NULL;
    }
    if (wf->u.loop.fkind != TE_FOR_SERIAL && wf->u.loop.fkind != TE_FOR_UNROLLED) {
        c->failed = true;
        return LERR(c->L, TE_ERR_SCHEDULE,
                    "te_compute_with: loop '%s' of '%s' is parallel, vectorized or bound; only "
                    "serial and unrolled loops are fused (their iterations run in order)",
                    wf->u.loop.var->u.var.name, c->with),
               NULL;
    }
    /* What S runs beside its loop moves: before W's loop, or after the fused one (where W's
     * iterations of the loops outside have not all run). */
    te__bufs pre_r = {0}, pre_w = {0}, post_r = {0};
    for (int i = 0; i < sl; i++)
        te__bufs_reads(si[i], &pre_r), te__bufs_writes(si[i], &pre_w);
    for (int i = sl + 1; i < ns; i++)
        te__bufs_reads(si[i], &post_r);
    const char *b0 = common(&post_r, &c->wwrites);
    if (b0) {
        c->failed = true;
        return LERR(c->L, TE_ERR_SCHEDULE,
                    "te_compute_with: what '%s' computes after its fused loops reads '%s', which "
                    "'%s' writes",
                    c->st, b0, c->with),
               NULL;
    }
    const char *b1 = common(&pre_r, &c->wwrites), *b2 = common(&pre_w, &c->wreads),
               *b3 = common(&pre_w, &c->wwrites);
    if (b1 || b2 || b3) {
        c->failed = true;
        return LERR(c->L, TE_ERR_SCHEDULE,
                    "te_compute_with: what '%s' computes before its fused loops %s '%s', which "
                    "'%s' %s",
                    c->st, b1 ? "reads" : "writes",
                    b1   ? b1
                    : b2 ? b2
                         : b3,
                    c->with,
                    b1   ? "writes"
                    : b2 ? "reads"
                         : "writes"),
               NULL;
    }
    te__subst m = {1, (const te_expr *[]){sf->u.loop.var}, (te_expr *[]){wf->u.loop.var}};
    te_stmt *sbody = te__stmt_substitute(ctx, sf->u.loop.body, &m);
    te_stmt *body;
    if (!sbody)
        return c->failed = true, NULL;
    if (left == 0) {
        /* The inner loops of both, in pre-order, renamed level by level where they match. */
        struct {
            const te_stmt *v[MAX_LOOPS];
            int n;
        } lw = {{NULL}, 0}, ls = {{NULL}, 0};
        te__stmt_visit(wf->u.loop.body, loops_fn, NULL, &lw);
        te__stmt_visit(sbody, loops_fn, NULL, &ls);
        int nm = 0;
        const te_expr *from[MAX_LOOPS];
        te_expr *to[MAX_LOOPS];
        for (int i = 0; i < ls.n && i < lw.n && i < MAX_LOOPS && same_loop(lw.v[i], ls.v[i]); i++) {
            from[nm] = ls.v[i]->u.loop.var;
            to[nm++] = lw.v[i]->u.loop.var;
        }
        te__subst inner = {nm, from, to};
        te_stmt *chk = te__stmt_substitute(ctx, sbody, &inner);
        if (!chk)
            return c->failed = true, NULL;
        load_check k = {c, wf->u.loop.body};
        te__stmt_visit(chk, NULL, check_load_fn, &k);
        if (c->failed)
            return NULL;
        body = te__seq2(ctx, wf->u.loop.body, sbody);
    } else {
        body = fuse_level(c, wf->u.loop.body, sbody, left - 1);
    }
    te_stmt *f = body ? te__for(ctx, wf->u.loop.var, wf->u.loop.min, wf->u.loop.extent,
                                wf->u.loop.fkind, body)
                      : NULL;
    if (!f)
        return c->failed = true, NULL;
    f->u.loop.thread_tag = wf->u.loop.thread_tag;
    /* W's comments before its loop, S's prefix, the fused loop, then both suffixes. */
    te_stmt *out = NULL;
    for (int i = 0; i < wl; i++)
        out = te__seq2(ctx, out, (te_stmt *)wi[i]);
    for (int i = 0; i < sl; i++)
        out = te__seq2(ctx, out, (te_stmt *)si[i]);
    out = te__seq2(ctx, out, f);
    for (int i = wl + 1; i < nw; i++)
        out = te__seq2(ctx, out, (te_stmt *)wi[i]);
    for (int i = sl + 1; i < ns; i++)
        out = te__seq2(ctx, out, (te_stmt *)si[i]);
    if (!out)
        c->failed = true;
    return out;
}

te_stmt *te__compute_with_fuse(lower_ctx *L, const te_stage *st, te_stmt *s, te_stmt *w,
                               te_stmt *const *between, int nbetween)
{
    const te_stage *with = st->cw_with;
    cw_ctx c = {L,
                st->tensor->name,
                with->tensor->name,
                {{NULL}, 0, false},
                {{NULL}, 0, false},
                {NULL},
                {NULL},
                0,
                false};
    int depth = te__leaf_pos((te_stage *)with, st->cw_at);
    if (depth < 0)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_compute_with: loop '%s' of '%s' was split or fused after '%s' was "
                    "computed with it",
                    st->cw_at->name, with->tensor->name, st->tensor->name),
               NULL;
    te__bufs_reads(w, &c.wreads);
    te__bufs_writes(w, &c.wwrites);
    te__bufs sr = {0}, sw = {0};
    te__bufs_reads(s, &sr);
    te__bufs_writes(s, &sw);
    const char *b = common(&sw, &c.wreads);
    if (!b)
        b = common(&sw, &c.wwrites);
    if (b)
        return LERR(L, TE_ERR_SCHEDULE,
                    "te_compute_with: '%s' writes '%s', which '%s' %s; fused, '%s' would see "
                    "'%s''s writes",
                    c.st, b, c.with, common(&sw, &c.wreads) ? "reads" : "writes", c.with, c.st),
               NULL;
    for (int q = 0; q < nbetween; q++) {
        if (!between[q])
            continue;
        te__bufs br = {0}, bw = {0};
        te__bufs_reads(between[q], &br);
        te__bufs_writes(between[q], &bw);
        const char *x = common(&bw, &sr), *y = common(&br, &sw), *z = common(&bw, &sw);
        if (x || y || z)
            return LERR(L, TE_ERR_SCHEDULE,
                        "te_compute_with: a stage computed between '%s' and '%s' %s '%s', which "
                        "'%s' %s; fused, '%s' would run before it",
                        c.with, c.st,
                        x   ? "writes"
                        : y ? "reads"
                            : "writes",
                        x   ? x
                        : y ? y
                            : z,
                        c.st, x ? "reads" : "writes", c.st),
                   NULL;
    }
    /* Both nests start with their "compute" comments; the fusion sees through them. */
    te_stmt *f = fuse_level(&c, w, s, depth);
    return c.failed ? NULL : f;
}

int te__fuse_siblings(lower_ctx *L, te_stmt **prod, const te_stage *const *st, int np)
{
    for (int q = 0; q < np; q++) {
        const te_stage *S = st[q];
        if (!S->cw_with)
            continue;
        int w = -1;
        for (int r = 0; r < q; r++)
            if (st[r] == S->cw_with)
                w = r;
        if (w < 0 || !prod[w]) {
            LERR(L, TE_ERR_SCHEDULE,
                 w < 0 ? "te_compute_with: '%s' is not computed before '%s' at the same place "
                         "(te_compute_at both at the same loop, or keep both at the root; a "
                         "stage is computed after the stages it reads)"
                       : "te_compute_with: '%s' is itself computed with another stage; '%s' "
                         "cannot be fused into that fusion (compute both with the first)",
                 S->cw_with->tensor->name, S->tensor->name);
            return -1;
        }
        te_stmt *f = te__compute_with_fuse(L, S, prod[q], prod[w], prod + w + 1, q - w - 1);
        if (!f)
            return -1;
        prod[w] = f;
        prod[q] = NULL;
    }
    return 0;
}
