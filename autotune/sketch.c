/*
 * Sketches: schedules generated from any tensor expression with no user code (Ansor's CPU
 * rules). Stages are visited consumers first; each rule calls the public primitives and takes
 * its choices through te__decide, so a sampled configuration is a decision vector and its
 * trace.
 *
 * Rules, in the order they are tried on a stage X:
 *
 *  1. inline      X is elementwise (no reduction) and not an output: compute_inline, unless
 *                 it is expensive (calls exp/erf/...) and read by several stages, where the
 *                 choice inline / keep is a decision (kept: a buffer, usually computed at a
 *                 consumer's row loop by rule 6).
 *  2. fused MLT   X is elementwise and not inlined, and some of its producers are reductions
 *                 with data reuse (an input read without one of the spatial axes: matmul,
 *                 conv) that only X reads, with X's shape and X's own axes as indices (the
 *                 epilogue of the MLP gate, bias + activation, batch-norm + ReLU). X's axes
 *                 are tiled in the outer levels (S0, or S0 S1: a decision), the S0 loops fused
 *                 and parallel, the innermost tile vectorized; every such producer is computed
 *                 at X's last outer level (a register accumulator) and tiled in the remaining
 *                 levels: S1 R0 S2 R1 S3 (or R0 S2 R1 S3), S3 of the last axis vectorized,
 *                 unroll pragma (0/16/64/512, a decision). With two outer levels, inputs read
 *                 without one of the spatial axes (the weights) may be packed (a decision):
 *                 cache_read computed at the parallel S0 loop, a contiguous panel that every
 *                 S1 iteration reuses.
 *  3. MLT output  X is a reduction with data reuse and an output: cache_write to a local
 *                 accumulator (a decision) and then rule 2 with the copy stage as consumer;
 *                 without it, rule 4.
 *  4. MLT at root a reduction with data reuse whose consumer cannot take it: SSRSRS tiling,
 *                 S0 S1 R0 S2 R1 S3, spatial axes in 4 levels and reduction axes in 2, S0 loops
 *                 fused and parallel, S3 of the last axis vectorized, unroll pragma.
 *  5. row         X is elementwise (kept, or an output) and rule 2 did not apply: the leading
 *                 axes fused into one row loop (parallel), the last axis split by the vector
 *                 width (a decision) and vectorized; streaming stores on/off for outputs.
 *  6. at row      X is not an output and every stage that uses it (looking through inlined
 *                 stages) is a stage C with a row loop, or is computed at that loop: X is
 *                 computed at C's row loop (a decision; softmax, norms). Elementwise stages
 *                 there get their last axis vectorized; one-axis reductions may be rfactored
 *                 across the vector lanes (a decision), the partial stage at the row loop too.
 *  7. reduction   any other reduction (sum, pooling, tuple reductions such as argmax and
 *                 Welford): spatial axes fused and parallel, and
 *                 optionally (a decision) the last spatial axis split by the vector width with
 *                 its inner part moved inside the reduction loops and vectorized, or else
 *                 (a decision) an rfactor across the lanes computed at the fused loop. With
 *                 fewer output elements than cores and one long reduction axis, the threads
 *                 split the reduction instead: the axis in cores x 1/4/16 parts (a decision),
 *                 an rfactor over the parts (a parallel partial stage, its lanes rfactored
 *                 as above), the stage folding the parts.
 *
 * A tuple compute (te_compute_tuple) is one stage, named after its first output, and its
 * consumers are the stages that read any of its outputs; rfactor gives it a tuple partial
 * stage, and it is never cached (rule 3 falls back to rule 4).
 *
 * Split factors are random factorizations of the extents (te__split_candidates: divisors,
 * powers of two and multiples of the vector lanes, so non-divisible splits are sampled too).
 */
#include <stdlib.h>
#include <string.h>

#include "autotune/sketch_impl.h"

/* ---- Analysis ------------------------------------------------------------------------------ */

static bool has_call_fn(const te_expr *e, void *user)
{
    if (e->kind == TE_E_CALL)
        *(bool *)user = true;
    return !*(bool *)user;
}

typedef struct {
    const te_tensor *t;
    bool found;
} rd_ctx;

static bool reads_t_fn(const te_expr *e, void *user)
{
    rd_ctx *r = user;
    if (e->kind == TE_E_READ && te__tensor_same_stage(e->u.read.t, r->t))
        r->found = true; /* any output of a tuple stage */
    return !r->found;
}

static bool reads_t(const te_tensor *c, const te_tensor *t)
{
    rd_ctx r = {t, false};
    if (c->kind == TE_T_COMPUTE)
        te__expr_visit(c->body, reads_t_fn, &r);
    return r.found;
}

/* Data reuse: some read of the body leaves out a spatial axis with extent > 1. */
typedef struct {
    const te_tensor *t;
    bool reuse;
} reuse_ctx;

static bool reuse_fn(const te_expr *e, void *user)
{
    reuse_ctx *r = user;
    if (e->kind != TE_E_READ)
        return true;
    for (int d = 0; d < r->t->ndim; d++) {
        if (r->t->shape[d] <= 1)
            continue;
        bool used = false;
        for (int q = 0; q < e->u.read.n && !used; q++)
            used = te__expr_uses_var(e->u.read.idx[q], r->t->axes[d]);
        if (!used)
            r->reuse = true;
    }
    return true;
}

/* Reads of `t` in consumer c's body all use exactly c's axes as indices. */
typedef struct {
    const te_tensor *t, *c;
    bool ok;
} ident_ctx;

static bool ident_fn(const te_expr *e, void *user)
{
    ident_ctx *r = user;
    if (e->kind == TE_E_READ && te__tensor_same_stage(e->u.read.t, r->t)) {
        if (e->u.read.n != r->c->ndim)
            r->ok = false;
        for (int d = 0; d < e->u.read.n && r->ok; d++)
            if (e->u.read.idx[d] != r->c->axes[d])
                r->ok = false;
    }
    return true;
}

typedef struct {
    sk_stage *k;
    const te_tensor *t;
} pack_ctx;

static bool pack_fn(const te_expr *e, void *user)
{
    pack_ctx *p = user;
    if (e->kind != TE_E_READ || e->u.read.n < 2 || p->k->npack == 2)
        return true;
    const te_tensor *t = p->t;
    if (e->u.read.idx[e->u.read.n - 1] != t->axes[t->ndim - 1])
        return true;
    bool misses = false;
    for (int d = 0; d + 1 < t->ndim; d++) {
        if (t->shape[d] <= 1)
            continue;
        bool used = false;
        for (int q = 0; q < e->u.read.n && !used; q++)
            used = te__expr_uses_var(e->u.read.idx[q], t->axes[d]);
        misses |= !used;
    }
    for (int q = 0; q < p->k->npack; q++)
        if (p->k->pack[q] == e->u.read.t)
            return true;
    if (misses)
        p->k->pack[p->k->npack++] = e->u.read.t;
    return true;
}

int te__sketch_init(te_space *sp)
{
    sk_data *sd = te__alloc(sp->ctx, sizeof *sd);
    if (!sd)
        return TE_ERR_NOMEM;
    te_ctx *scratch = te_ctx_create_child(sp->ctx);
    te_schedule *s = scratch ? te_schedule_create(scratch, sp->n_out, sp->outs) : NULL;
    if (!s) {
        te_ctx_free(scratch);
        return TE_ERR_NOMEM;
    }
    int n = te_schedule_nstages(s);
    if (n > SK_MAX) {
        te_ctx_free(scratch);
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED, "sketch: more than %d stages", SK_MAX);
    }
    sd->n = n;
    for (int i = 0; i < n; i++) {
        te_stage *st = te_schedule_stage_at(s, i);
        sk_stage *k = &sd->st[i];
        k->t = st->tensor;
        k->name = st->tensor->name;
        k->out = st->is_output;
        k->red = st->tensor->body->kind == TE_E_REDUCE;
        k->nd = st->tensor->ndim;
        for (int d = 0; d < k->nd; d++)
            k->ext[d] = st->tensor->shape[d];
        if (k->red) {
            k->nr = st->tensor->body->u.red.n;
            for (int r = 0; r < k->nr; r++)
                k->rext[r] = st->tensor->body->u.red.axes[r]->u.var.extent;
            reuse_ctx rc = {st->tensor, false};
            te__expr_visit(st->tensor->body, reuse_fn, &rc);
            k->mlt = rc.reuse;
            if (k->mlt && k->nd >= 2) {
                pack_ctx pc = {k, st->tensor};
                te__expr_visit(st->tensor->body, pack_fn, &pc);
            }
        }
        bool call = false;
        te__expr_visit(st->tensor->body, has_call_fn, &call);
        k->expensive = call;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (reads_t(sd->st[j].t, sd->st[i].t))
                sd->st[i].cons[sd->st[i].ncons++] = j;
    te_ctx_free(scratch);
    sp->sdata = sd;
    return TE_OK;
}

/* ---- Generation helpers ------------------------------------------------------------------- */

te_stage *te__sk_stage_of(sk_run *r, int i)
{
    return te_schedule_stage_by_name(r->g->s, r->sd->st[i].name);
}

/* An optional primitive: a refusal is forgotten. */
bool te__sk_try_ok(sk_run *r, int rc)
{
    if (rc != TE_OK)
        te_ctx_clear_error(r->g->ctx);
    return rc == TE_OK;
}

/* Picks one of the candidate split factors of `extent` that are <= cap (a decision). */
static int64_t pick_factor(sk_run *r, int64_t extent, int64_t cap)
{
    int64_t c[40], f[40];
    int n = te__split_candidates(extent, r->lanes, c, 40), k = 0;
    for (int i = 0; i < n; i++)
        if (c[i] <= cap)
            f[k++] = c[i];
    if (!k)
        return 1;
    return f[te__decide(r->g, k)];
}

/* A power of two <= cap (and < 2 extent): the vector tile of the last axis. */
static int64_t pick_pow2(sk_run *r, int64_t extent, int64_t cap)
{
    int64_t c[8];
    int n = 0;
    for (int64_t p = 1; p <= cap && n < 8 && (p < 2 * extent); p *= 2)
        c[n++] = p;
    return n ? c[te__decide(r->g, n)] : 1;
}

static int pick_unroll(sk_run *r)
{
    static const int v[] = {0, 16, 64, 512};
    return v[te__decide(r->g, 4)];
}

/* Vector split of a last axis: lanes/2, lanes, 2 lanes or 4 lanes (<= extent). */
static int64_t pick_vec(sk_run *r, int64_t extent)
{
    int64_t c[4], k = 0;
    int64_t base[4] = {r->lanes / 2 > 0 ? r->lanes / 2 : 1, r->lanes, 2 * r->lanes, 4 * r->lanes};
    for (int i = 0; i < 4; i++)
        if (base[i] <= extent)
            c[k++] = base[i];
    if (!k)
        return extent;
    return c[te__decide(r->g, (int)k)];
}

/* Tile sizes of a multi-level tiling: f[d][0..3] per spatial axis (f[d][0] the rest), rf[r]
 * the inner factor per reduction axis. */
typedef struct {
    int64_t f[TE_MAX_DIMS][4];
    int64_t rf[TE_MAX_DIMS];
} tiles;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void pick_tiles(sk_run *r, const sk_stage *R, tiles *t)
{
    for (int d = 0; d < R->nd; d++) {
        int64_t E = R->ext[d];
        if (E <= 1) {
            t->f[d][0] = t->f[d][1] = t->f[d][2] = t->f[d][3] = 1;
            continue;
        }
        bool last = d == R->nd - 1;
        int64_t f3 = last ? pick_pow2(r, E, 64) : pick_factor(r, E, 16);
        int64_t rem = cdiv(E, f3);
        int64_t f2 = pick_factor(r, rem, rem);
        rem = cdiv(rem, f2);
        int64_t f1 = pick_factor(r, rem, rem);
        t->f[d][3] = f3;
        t->f[d][2] = f2;
        t->f[d][1] = f1;
        t->f[d][0] = cdiv(rem, f1);
    }
    for (int q = 0; q < R->nr; q++)
        t->rf[q] = R->rext[q] > 1 ? pick_factor(r, R->rext[q], 64) : 1;
}

/* Fuses a run of adjacent loops (in order); returns the fused loop (or the only one). */
static te_iter *fuse_run(sk_run *r, te_stage *st, te_iter **v, int n)
{
    if (n <= 0)
        return NULL;
    te_iter *f = v[0];
    for (int i = 1; i < n; i++) {
        te_iter *nf;
        if (!TE__OK(r->g, te_fuse(st, f, v[i], &nf)))
            return NULL;
        f = nf;
    }
    return f;
}

/* Splits the reduction axes of st by t->rf into outer (ro) and inner (ri) loops. */
static bool split_reduce(sk_run *r, te_stage *st, const sk_stage *R, const tiles *t, te_iter **ro,
                         int *nro, te_iter **ri, int *nri)
{
    *nro = *nri = 0;
    for (int q = 0; q < R->nr; q++) {
        te_iter *k = te_stage_reduce_axis(st, q), *a, *b;
        if (!k)
            return false;
        if (R->rext[q] <= 1 || t->rf[q] <= 1 || t->rf[q] >= R->rext[q]) {
            /* No split: the whole axis inner (small) or outer. */
            if (t->rf[q] >= R->rext[q] && R->rext[q] > 1)
                ri[(*nri)++] = k;
            else
                ro[(*nro)++] = k;
            continue;
        }
        if (!TE__OK(r->g, te_split(st, k, t->rf[q], &a, &b)))
            return false;
        ro[(*nro)++] = a;
        ri[(*nri)++] = b;
    }
    return true;
}

/* ---- Rules -------------------------------------------------------------------------------- */

/* Rule 4: SSRSRS at the root. */
static int mlt_root(sk_run *r, te_stage *st, const sk_stage *R)
{
    te__gen *g = r->g;
    tiles t;
    pick_tiles(r, R, &t);
    te_iter *lv[4][TE_MAX_DIMS], *triv[TE_MAX_DIMS];
    int nl = 0, nt = 0;
    for (int d = 0; d < R->nd; d++) {
        te_iter *x = te_stage_axis(st, d);
        if (R->ext[d] <= 1) {
            triv[nt++] = x;
            continue;
        }
        te_iter *a, *b, *c;
        if (!TE__OK(g, te_split(st, x, t.f[d][3], &a, &lv[3][nl])) ||
            !TE__OK(g, te_split(st, a, t.f[d][2], &b, &lv[2][nl])) ||
            !TE__OK(g, te_split(st, b, t.f[d][1], &c, &lv[1][nl])))
            return g->err;
        lv[0][nl++] = c;
    }
    te_iter *ro[TE_MAX_DIMS], *ri[TE_MAX_DIMS];
    int nro, nri;
    if (!split_reduce(r, st, R, &t, ro, &nro, ri, &nri))
        return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    te_iter *ord[64];
    int n = 0;
    for (int i = 0; i < nt; i++)
        ord[n++] = triv[i];
    for (int i = 0; i < nl; i++)
        ord[n++] = lv[0][i];
    for (int i = 0; i < nl; i++)
        ord[n++] = lv[1][i];
    for (int i = 0; i < nro; i++)
        ord[n++] = ro[i];
    for (int i = 0; i < nl; i++)
        ord[n++] = lv[2][i];
    for (int i = 0; i < nri; i++)
        ord[n++] = ri[i];
    for (int i = 0; i < nl; i++)
        ord[n++] = lv[3][i];
    if (n > 1 && !TE__OK(g, te_reorder(st, n, ord)))
        return g->err;
    /* Parallel over the fused outer spatial loops (trivial axes and S0). */
    te_iter *outer[2 * TE_MAX_DIMS];
    int no = 0;
    for (int i = 0; i < nt; i++)
        outer[no++] = triv[i];
    for (int i = 0; i < nl; i++)
        outer[no++] = lv[0][i];
    if (r->cores > 1 && no) {
        te_iter *f = fuse_run(r, st, outer, no);
        if (!f || !TE__OK(g, te_parallel(st, f)))
            return g->err;
    }
    if (nl && R->ext[R->nd - 1] > 1)
        te__sk_try_ok(r, te_vectorize(st, lv[3][nl - 1]));
    int u = pick_unroll(r);
    if (u && !TE__OK(g, te_pragma_unroll_max(st, u)))
        return g->err;
    return TE_OK;
}

/* Rule 2: consumer C (elementwise, at the root) takes the products prods[] at its tile loop. */
static int mlt_fused(sk_run *r, te_stage *C, te_stage **prods, const sk_stage **pinfo, int np)
{
    te__gen *g = r->g;
    const sk_stage *R = pinfo[0];
    tiles t;
    pick_tiles(r, R, &t);
    int L = 1 + te__decide(g, 2); /* outer levels kept in C: S0, or S0 S1 */
    int nd = R->nd;
    te_iter *s0[TE_MAX_DIMS], *s1[TE_MAX_DIMS], *in[TE_MAX_DIMS], *triv[TE_MAX_DIMS];
    int n0 = 0, n1 = 0, nin = 0, ntr = 0;
    int last_in = -1;
    for (int d = 0; d < nd; d++) {
        te_iter *x = te_stage_axis(C, d), *o, *i;
        if (R->ext[d] <= 1) {
            triv[ntr++] = x;
            continue;
        }
        int64_t T = 1;
        for (int l = L; l < 4; l++)
            T *= t.f[d][l];
        if (!TE__OK(g, te_split(C, x, T, &o, &i)))
            return g->err;
        if (L == 2) {
            te_iter *a, *b;
            if (!TE__OK(g, te_split(C, o, t.f[d][1], &a, &b)))
                return g->err;
            s0[n0++] = a;
            s1[n1++] = b;
        } else {
            s0[n0++] = o;
        }
        if (d == nd - 1)
            last_in = nin;
        in[nin++] = i;
    }
    te_iter *ord[64];
    int n = 0;
    for (int i = 0; i < ntr; i++)
        ord[n++] = triv[i];
    for (int i = 0; i < n0; i++)
        ord[n++] = s0[i];
    for (int i = 0; i < n1; i++)
        ord[n++] = s1[i];
    for (int i = 0; i < nin; i++)
        ord[n++] = in[i];
    if (n > 1 && !TE__OK(g, te_reorder(C, n, ord)))
        return g->err;
    te_iter *outer[2 * TE_MAX_DIMS];
    int no = 0;
    for (int i = 0; i < ntr; i++)
        outer[no++] = triv[i];
    for (int i = 0; i < n0; i++)
        outer[no++] = s0[i];
    te_iter *f = NULL;
    if (no) {
        f = fuse_run(r, C, outer, no);
        if (!f)
            return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        if (r->cores > 1 && !TE__OK(g, te_parallel(C, f)))
            return g->err;
    }
    te_iter *at = n1 ? s1[n1 - 1] : f;
    if (!at)
        return te__gen_fail(g, TE_ERR_SCHEDULE);
    if (last_in >= 0 && last_in == nin - 1) {
        te_iter *a, *b;
        if (!TE__OK(g, te_split(C, in[last_in], t.f[nd - 1][3], &a, &b)))
            return g->err;
        te__sk_try_ok(r, te_vectorize(C, b));
    }
    /* Packing: inputs read without one of the spatial axes are copied, per iteration of the
     * parallel S0 loop, into a contiguous buffer that the S1 iterations reuse (a decision;
     * only with two outer levels, else every tile would pack its own panel). */
    bool any_pack = false;
    for (int p = 0; p < np; p++)
        any_pack |= pinfo[p]->npack > 0;
    bool pack = L == 2 && f && any_pack && te__decide(g, 2);
    for (int p = 0; p < np; p++) {
        te_stage *st = prods[p];
        if (!TE__OK(g, te_compute_at(st, C, at)))
            return g->err;
        for (int q = 0; pack && q < pinfo[p]->npack; q++) {
            te_tensor *P = te_cache_read(g->s, pinfo[p]->pack[q], TE_SCOPE_GLOBAL, 1, &st);
            if (!P)
                return te__gen_fail(g, TE_ERR_SCHEDULE);
            te_stage *ps = te_schedule_stage(g->s, P);
            int pd = te_tensor_ndim(P);
            te_iter *a, *b;
            if (!TE__OK(g, te_compute_at(ps, C, f)) ||
                !TE__OK(g, te_split(ps, te_stage_axis(ps, pd - 1), r->lanes, &a, &b)))
                return g->err;
            te__sk_try_ok(r, te_vectorize(ps, b));
        }
        te_iter *l1[TE_MAX_DIMS], *l2[TE_MAX_DIMS], *l3[TE_MAX_DIMS], *tv[TE_MAX_DIMS];
        int m = 0, mt = 0;
        for (int d = 0; d < nd; d++) {
            te_iter *x = te_stage_axis(st, d), *a;
            if (R->ext[d] <= 1) {
                tv[mt++] = x;
                continue;
            }
            if (!TE__OK(g, te_split(st, x, t.f[d][3], &a, &l3[m])))
                return g->err;
            if (L == 1) {
                if (!TE__OK(g, te_split(st, a, t.f[d][2], &l1[m], &l2[m])))
                    return g->err;
            } else {
                l2[m] = a;
            }
            m++;
        }
        te_iter *ro[TE_MAX_DIMS], *ri[TE_MAX_DIMS];
        int nro, nri;
        if (!split_reduce(r, st, R, &t, ro, &nro, ri, &nri))
            return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        n = 0;
        for (int i = 0; i < mt; i++)
            ord[n++] = tv[i];
        if (L == 1)
            for (int i = 0; i < m; i++)
                ord[n++] = l1[i];
        for (int i = 0; i < nro; i++)
            ord[n++] = ro[i];
        for (int i = 0; i < m; i++)
            ord[n++] = l2[i];
        for (int i = 0; i < nri; i++)
            ord[n++] = ri[i];
        for (int i = 0; i < m; i++)
            ord[n++] = l3[i];
        if (n > 1 && !TE__OK(g, te_reorder(st, n, ord)))
            return g->err;
        if (m && R->ext[nd - 1] > 1)
            te__sk_try_ok(r, te_vectorize(st, l3[m - 1]));
        int u = pick_unroll(r);
        if (u && !TE__OK(g, te_pragma_unroll_max(st, u)))
            return g->err;
    }
    return TE_OK;
}

/* Rule 5: row loop, vectorized last axis. Records the row loop. */
static int row_rule(sk_run *r, int idx, te_stage *st, bool attached)
{
    te__gen *g = r->g;
    const sk_stage *X = &r->sd->st[idx];
    int nd = te_tensor_ndim(te_stage_tensor(st));
    te_iter *row = NULL;
    if (nd >= 2 && !attached) {
        te_iter *ax[TE_MAX_DIMS];
        for (int d = 0; d + 1 < nd; d++)
            ax[d] = te_stage_axis(st, d);
        row = fuse_run(r, st, ax, nd - 1);
        if (!row)
            return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    }
    int64_t E = X->ext[nd - 1];
    te_iter *jo = NULL;
    if (E > 1) {
        int64_t v = pick_vec(r, E);
        te_iter *ji;
        if (v < E) {
            if (!TE__OK(g, te_split(st, te_stage_axis(st, nd - 1), v, &jo, &ji)))
                return g->err;
        } else {
            ji = te_stage_axis(st, nd - 1);
        }
        te__sk_try_ok(r, te_vectorize(st, ji));
    }
    if (!attached) {
        te_iter *p = row ? row : jo;
        if (r->cores > 1 && p && !TE__OK(g, te_parallel(st, p)))
            return g->err;
        if (X->out && te__decide(g, 2) && !TE__OK(g, te_stage_nontemporal(st, true)))
            return g->err;
        r->row[idx] = row;
    }
    return TE_OK;
}

/* Rfactor across the vector lanes (a decision, for one-axis reductions of >= 2 lanes): the
 * partial-result stage reduces the outer part with the lanes innermost and vectorized. Must run
 * before the stage's reduction loops are transformed. Returns the partial stage or NULL. */
static te_stage *maybe_rfactor(sk_run *r, te_stage *st, const sk_stage *X)
{
    if (X->nr != 1 || X->rext[0] < 2 * r->lanes || !te__decide(r->g, 2))
        return NULL;
    te_stage *sr = te__split_rfactor(r->g, st, r->lanes, false);
    if (!sr)
        return NULL;
    te_iter *lane = te_stage_axis(sr, te_tensor_ndim(te_stage_tensor(sr)) - 1);
    if (!TE__OK(r->g, te_reorder(sr, 2, (te_iter *[]){te_stage_reduce_axis(sr, 0), lane})))
        return NULL;
    te__sk_try_ok(r, te_vectorize(sr, lane));
    return sr;
}

/* Rule 7 when the spatial axes give the threads too little work (fewer output elements than
 * cores: a sum of a whole vector) and the one reduction axis is long: the threads split the
 * reduction (Ansor's rfactor rule). The axis is split into P parts (P = cores x 1, 4 or 16:
 * a decision) and factored over them: the partial stage, its P x outputs parallel, each
 * reducing its part (vectorized through a lane rfactor, a decision), and the stage itself
 * folding the P partial results. Returns whether it applied (false: nothing changed). */
static bool thread_rfactor(sk_run *r, te_stage *st, const sk_stage *X)
{
    te__gen *g = r->g;
    int64_t spatial = 1;
    for (int d = 0; d < X->nd; d++)
        spatial *= X->ext[d];
    if (r->cores < 2 || X->nr != 1 || spatial >= r->cores ||
        X->rext[0] < (int64_t)r->cores * r->lanes * 64)
        return false;
    static const int per_core[] = {1, 4, 16};
    int64_t parts = (int64_t)r->cores * per_core[te__decide(g, 3)];
    te_stage *sr = te__split_rfactor(g, st, (X->rext[0] + parts - 1) / parts, true);
    if (!sr)
        return false;
    te_iter *sp[TE_MAX_DIMS + 1];
    int ns = 0, nd = te_tensor_ndim(te_stage_tensor(sr));
    sp[ns++] = te_stage_axis(sr, nd - 1); /* the part outermost, then the output's axes */
    for (int d = 0; d < nd - 1; d++)
        sp[ns++] = te_stage_axis(sr, d);
    if (ns > 1 && !TE__OK(g, te_reorder(sr, ns, sp)))
        return false;
    te_iter *f = fuse_run(r, sr, sp, ns);
    if (!f || !TE__OK(g, te_parallel(sr, f)))
        return false;
    sk_stage part = *X; /* the partial stage reduces one part of the axis */
    part.rext[0] = (X->rext[0] + parts - 1) / parts;
    te_stage *lanes = maybe_rfactor(r, sr, &part);
    if (lanes)
        te__gen_fail(g, te_compute_at(lanes, sr, f));
    return !g->err;
}

/* Rule 7: a reduction at the root without reuse. */
static int red_rule(sk_run *r, te_stage *st, const sk_stage *X)
{
    te__gen *g = r->g;
    if (thread_rfactor(r, st, X) || g->err)
        return g->err;
    int nd = X->nd;
    te_iter *sp[TE_MAX_DIMS + 1];
    int ns = 0;
    bool vec = nd >= 1 && X->ext[nd - 1] >= r->lanes && te__decide(g, 2);
    te_iter *vi = NULL;
    for (int d = 0; d < nd; d++) {
        te_iter *x = te_stage_axis(st, d);
        if (d == nd - 1 && vec) {
            te_iter *a;
            if (!TE__OK(g, te_split(st, x, pick_vec(r, X->ext[d]), &a, &vi)))
                return g->err;
            x = a;
        }
        sp[ns++] = x;
    }
    if (vi) {
        te_iter *ord[2 * TE_MAX_DIMS + 1];
        int n = 0;
        for (int i = 0; i < ns; i++)
            ord[n++] = sp[i];
        for (int q = 0; q < X->nr; q++)
            ord[n++] = te_stage_reduce_axis(st, q);
        ord[n++] = vi;
        if (!TE__OK(g, te_reorder(st, n, ord)))
            return g->err;
        te__sk_try_ok(r, te_vectorize(st, vi));
    }
    te_iter *f = ns ? fuse_run(r, st, sp, ns) : NULL;
    if (ns && !f)
        return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    if (r->cores > 1 && f && !TE__OK(g, te_parallel(st, f)))
        return g->err;
    /* Without the vector split: lane-wise partial results per output element. */
    te_stage *rf = !vi && f ? maybe_rfactor(r, st, X) : NULL;
    if (g->err)
        return g->err;
    if (rf && !TE__OK(g, te_compute_at(rf, st, f)))
        return g->err;
    int u = pick_unroll(r);
    if (u && !TE__OK(g, te_pragma_unroll_max(st, u)))
        return g->err;
    return TE_OK;
}

/* Stages that use st's values, looking through inlined stages. */
int te__sk_eff_consumers(te_schedule *s, te_stage *st, te_stage **out, int max, int n)
{
    for (int i = 0; i < s->stages.n; i++) {
        te_stage *c = s->stages.v[i];
        if (c == st || !te__expr_reads(c->body, st->tensor))
            continue;
        if (c->attach == TE_ATTACH_INLINE)
            n = te__sk_eff_consumers(s, c, out, max, n);
        else if (n < max)
            out[n++] = c;
    }
    return n;
}

/* Rule 6: the consumer with a row loop that can host st, or -1. */
int te__sk_row_host(sk_run *r, te_stage *st)
{
    te_stage *cs[SK_MAX];
    int n = te__sk_eff_consumers(r->g->s, st, cs, SK_MAX, 0);
    if (n <= 0 || n > SK_MAX)
        return -1;
    int host = -1;
    te_stage *hs = NULL;
    for (int i = 0; i < n; i++) {
        te_stage *c = cs[i];
        te_stage *h = c->attach == TE_ATTACH_AT ? c->attach_stage : c;
        int hi = -1;
        for (int q = 0; q < r->sd->n; q++)
            if (h->tensor == r->sd->st[q].t)
                hi = q;
        if (hi < 0 || !r->row[hi])
            return -1;
        if (c->attach == TE_ATTACH_AT && c->attach_iter != r->row[hi])
            return -1;
        if (hs && hs != h)
            return -1;
        hs = h;
        host = hi;
    }
    return host;
}

int te__sk_epilogue_producers(sk_run *r, int i, te_stage **prods, const sk_stage **pinfo)
{
    sk_data *sd = r->sd;
    const sk_stage *X = &sd->st[i];
    int np = 0;
    for (int q = 0; q < i && np < 8; q++) {
        sk_stage *P = &sd->st[q];
        if (r->done[q] || !P->red || !P->mlt || P->out || P->ncons != 1 || P->cons[0] != i ||
            P->nd != X->nd)
            continue;
        bool same = true;
        for (int d = 0; d < X->nd; d++)
            same &= P->ext[d] == X->ext[d];
        ident_ctx ic = {P->t, X->t, true};
        te__expr_visit(X->t->body, ident_fn, &ic);
        if (!same || !ic.ok)
            continue;
        /* All products share the first one's tiling: same reduction extents. */
        if (np && (P->nr != pinfo[0]->nr ||
                   memcmp(P->rext, pinfo[0]->rext, sizeof(int64_t) * (size_t)P->nr)))
            continue;
        prods[np] = te__sk_stage_of(r, q);
        pinfo[np++] = P;
        r->done[q] = true;
    }
    return np;
}

int te__sketch_apply(te__gen *g)
{
    sk_run *r = calloc(1, sizeof *r);
    if (!r)
        return TE_ERR_NOMEM;
    r->g = g;
    r->sd = g->sp->sdata;
    r->lanes = g->sp->lanes;
    r->cores = g->sp->target.num_cores;
    if (g->sp->target.backend == TE_BACKEND_CUDA) {
        int rc = te__sketch_apply_gpu(r);
        free(r);
        return rc ? rc : g->err;
    }
    sk_data *sd = r->sd;
    int rc = TE_OK;
    for (int i = sd->n - 1; i >= 0 && !rc && !g->err; i--) {
        if (r->done[i])
            continue;
        sk_stage *X = &sd->st[i];
        te_stage *st = te__sk_stage_of(r, i);
        if (!st) {
            rc = te__gen_fail(g, TE_ERR_INTERNAL);
            break;
        }
        /* Rule 1. */
        if (!X->out && !X->red) {
            bool keep = X->expensive && X->ncons > 1 && te__decide(g, 2);
            if (!keep && te__sk_try_ok(r, te_compute_inline(st)))
                continue;
        }
        /* Rule 6. */
        if (!X->out && !(X->red && X->mlt)) {
            int h = te__sk_row_host(r, st);
            if (h >= 0 && te__decide(g, 2) &&
                te__sk_try_ok(r, te_compute_at(st, te__sk_stage_of(r, h), r->row[h]))) {
                if (!X->red) {
                    rc = row_rule(r, i, st, true);
                } else {
                    te_stage *rf = maybe_rfactor(r, st, X);
                    if (rf)
                        rc = te__gen_fail(g, te_compute_at(rf, te__sk_stage_of(r, h), r->row[h]));
                }
                continue;
            }
        }
        if (!X->red) {
            /* Rule 2: products only this stage reads, with its shape and axes. */
            te_stage *prods[8];
            const sk_stage *pinfo[8];
            int np = te__sk_epilogue_producers(r, i, prods, pinfo);
            if (np) {
                rc = mlt_fused(r, st, prods, pinfo, np);
                int u = pick_unroll(r);
                if (!rc && u && X->out)
                    rc = te__gen_fail(g, te_pragma_unroll_max(st, u > 16 ? 16 : u));
                if (!rc && X->out && te__decide(g, 2))
                    rc = te__gen_fail(g, te_stage_nontemporal(st, true));
            } else {
                rc = row_rule(r, i, st, false);
            }
            continue;
        }
        if (X->mlt) {
            /* Rule 3 / 4 (a tuple stage cannot be cached: rule 4). */
            if (X->out && !X->t->tuple_n && te__decide(g, 2)) {
                te_tensor *L = te_cache_write(g->s, X->t, TE_SCOPE_LOCAL);
                if (!L) {
                    rc = te__gen_fail(g, TE_ERR_SCHEDULE);
                    break;
                }
                te_stage *ls = te_schedule_stage(g->s, L);
                const sk_stage *pi[1] = {X};
                rc = mlt_fused(r, st, &ls, pi, 1);
            } else {
                rc = mlt_root(r, st, X);
            }
            continue;
        }
        rc = red_rule(r, st, X);
    }
    free(r);
    return rc ? rc : g->err;
}
