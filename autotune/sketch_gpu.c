/*
 * autotune/sketch_gpu.c: sketch rules for a CUDA target (Ansor's GPU rules), so that any tensor
 * expression, not only the library's operators with a template, tunes on the GPU. Stages are
 * visited consumers first, as on the CPU (sketch.c), and every choice is a te__decide decision.
 *
 *  G1 inline     an elementwise stage that is not an output is inlined.
 *  G2 tiling     a reduction with data reuse (matmul, conv, batched products) under its
 *                elementwise epilogue (sketch.c's rule 2 criteria), or an output one cached to
 *                a local accumulator: the output's axes are tiled in four levels, block /
 *                virtual thread / thread / register run (Ansor's SSSRRSRS with R0 R1 around the
 *                staging): the block loops fused onto blockIdx.x, the virtual-thread loops bound
 *                to TE_VTHREAD (the last two axes, a decision), the thread loops fused onto
 *                threadIdx.x, the register runs unrolled. The reduction is computed at the
 *                thread loop, its axes split in two levels; each input it reads without one of
 *                its axes is staged in shared memory at the last outer reduction loop by all
 *                threads (a decision per input; the copy vectorized by 4 where the row allows,
 *                a decision; double-buffered, a decision).
 *  G3 rows       an elementwise stage that reads a reduction over its last axis (softmax and
 *                norms): leading axes fused onto blockIdx.x, the last split by the threads
 *                (a decision) onto threadIdx.x.
 *  G4 flat       any other elementwise stage: all axes fused and split by the threads.
 *  G5 at host    a reduction every user of which is a G3 or G4 stage (or computed at its loop):
 *                computed at that loop, its one reduction axis split by the row's threads and
 *                reduced across them (G3), or reduced by each thread (G4).
 *  G6 root       any other reduction: one thread per output element (accumulating in a local
 *                copy) or, with one reduction axis, one block per element reducing across its
 *                threads (a decision).
 *
 * A configuration the GPU check refuses (threads or shared memory over the target's limits) is
 * an invalid draw: the space draws again.
 */
#include <stdlib.h>
#include <string.h>

#include "autotune/sketch_impl.h"

#define G_MAX_THREADS 1024

/* A power of two in [lo, hi] (a decision); lo when the range is empty. */
static int64_t pick_pow2_in(sk_run *r, int64_t lo, int64_t hi)
{
    int64_t c[12];
    int n = 0;
    for (int64_t p = lo; p <= hi && n < 12; p *= 2)
        c[n++] = p;
    return n ? c[te__decide(r->g, n)] : lo;
}

static int64_t round_pow2_up(int64_t x)
{
    int64_t p = 1;
    while (p < x && p < G_MAX_THREADS)
        p *= 2;
    return p;
}

/* Cooperative copy of cached stage t by the block's nt threads along threadIdx.x: all axes
 * fused (the last split by 4 and vectorized first, a decision, where its extent allows). */
static int coop_copy(sk_run *r, te_tensor *t, int64_t nt)
{
    te__gen *g = r->g;
    te_stage *st = te_schedule_stage(g->s, t);
    if (!st)
        return te__gen_fail(g, TE_ERR_INTERNAL);
    int nd = te_tensor_ndim(t);
    te_iter *last = te_stage_axis(st, nd - 1), *v = NULL;
    if (te_tensor_shape(t)[nd - 1] % 4 == 0 && te__decide(g, 2) &&
        !TE__OK(g, te_split(st, last, 4, &last, &v)))
        return g->err;
    te_iter *f = te_stage_leaf(st, 0);
    for (int d = 1; d < nd; d++)
        if (!TE__OK(g, te_fuse(st, f, te_stage_leaf(st, 1), &f)))
            return g->err;
    te_iter *rest, *tx;
    if (!TE__OK(g, te_split(st, f, nt, &rest, &tx)) || !TE__OK(g, te_bind(st, tx, TE_THREAD_X)))
        return g->err;
    if (v && !TE__OK(g, te_vectorize(st, v)))
        return g->err;
    return TE_OK;
}

/* G2: output stage O (axes as the reductions') over producers R[0..np), each a reduction with
 * data reuse computed in registers at O's thread loop. */
static int gpu_tiling(sk_run *r, te_stage *O, te_stage **R, const sk_stage **Ri, int np)
{
    te__gen *g = r->g;
    int nd = Ri[0]->nd;
    if (nd < 1 || nd > TE_MAX_DIMS)
        return te__gen_fail(g, TE_ERR_UNSUPPORTED);
    te_iter *b[TE_MAX_DIMS], *vt[TE_MAX_DIMS], *t[TE_MAX_DIMS], *in[TE_MAX_DIMS];
    int64_t threads = 1;
    for (int d = 0; d < nd; d++) {
        int64_t e = Ri[0]->ext[d];
        int64_t run = pick_pow2_in(r, 1, e >= 4 ? 4 : e >= 2 ? 2 : 1);
        int64_t th = pick_pow2_in(
            r, 1,
            round_pow2_up((e + run - 1) / run) < 32 ? round_pow2_up((e + run - 1) / run) : 32);
        int64_t v = d >= nd - 2 && e >= 2 * th * run && te__decide(g, 2) ? 2 : 1;
        int64_t tile = v * th * run;
        te_iter *rest;
        if (!TE__OK(g, te_split(O, te_stage_axis(O, d), tile, &b[d], &rest)))
            return g->err;
        vt[d] = NULL;
        if (v > 1 && !TE__OK(g, te_split(O, rest, tile / v, &vt[d], &rest)))
            return g->err;
        if (!TE__OK(g, te_split(O, rest, run, &t[d], &in[d])))
            return g->err;
        threads *= th;
    }
    if (threads > G_MAX_THREADS)
        return te__gen_fail(g, TE_ERR_SCHEDULE);
    te_iter *order[4 * TE_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < nd; d++)
        order[n++] = b[d];
    for (int d = 0; d < nd; d++)
        if (vt[d])
            order[n++] = vt[d];
    for (int d = 0; d < nd; d++)
        order[n++] = t[d];
    for (int d = 0; d < nd; d++)
        order[n++] = in[d];
    if (!TE__OK(g, te_reorder(O, n, order)))
        return g->err;
    te_iter *bx = b[0], *tx = t[0];
    for (int d = 1; d < nd; d++)
        if (!TE__OK(g, te_fuse(O, bx, b[d], &bx)) || !TE__OK(g, te_fuse(O, tx, t[d], &tx)))
            return g->err;
    if (!TE__OK(g, te_bind(O, bx, TE_BLOCK_X)) || !TE__OK(g, te_bind(O, tx, TE_THREAD_X)))
        return g->err;
    for (int d = 0; d < nd; d++) {
        if (vt[d] && !TE__OK(g, te_bind(O, vt[d], TE_VTHREAD)))
            return g->err;
        if (!TE__OK(g, te_unroll(O, in[d])))
            return g->err;
    }
    /* the reductions: computed at the thread loop, reduction axes split R0 R1 (the same factors
     * for every product), staged inputs at the last R0 loop */
    int nr = Ri[0]->nr;
    int64_t rf[TE_MAX_DIMS];
    for (int k = 0; k < nr; k++)
        rf[k] = pick_pow2_in(r, 1, Ri[0]->rext[k] >= 32 ? 32 : round_pow2_up(Ri[0]->rext[k]));
    bool dbuf = te__decide(g, 2);
    for (int p = 0; p < np; p++) {
        te_stage *A = R[p];
        if (!TE__OK(g, te_compute_at(A, O, tx)))
            return g->err;
        te_iter *ro[TE_MAX_DIMS], *ri[TE_MAX_DIMS], *ord[3 * TE_MAX_DIMS];
        for (int k = 0; k < nr; k++)
            if (!TE__OK(g, te_split(A, te_stage_reduce_axis(A, k), rf[k], &ro[k], &ri[k])))
                return g->err;
        int m = 0;
        for (int k = 0; k < nr; k++)
            ord[m++] = ro[k];
        for (int k = 0; k < nr; k++)
            ord[m++] = ri[k];
        for (int d = 0; d < nd; d++)
            ord[m++] = te_stage_axis(A, d);
        if (!TE__OK(g, te_reorder(A, m, ord)))
            return g->err;
        for (int d = 0; d < nd; d++)
            if (!TE__OK(g, te_unroll(A, te_stage_axis(A, d))))
                return g->err;
        te_tensor *in_t[8];
        int nin = te__expr_tensors_read(A->body, in_t, 8);
        for (int q = 0; q < nin && q < 8; q++) {
            if (!te__decide(g, 2))
                continue; /* read from global memory (through L1) */
            te_tensor *sh = te_cache_read(g->s, in_t[q], TE_SCOPE_SHARED, 1, &A);
            if (!sh)
                return te__gen_fail(g, TE_ERR_SCHEDULE);
            te_stage *ss = te_schedule_stage(g->s, sh);
            if (!ss || !TE__OK(g, te_compute_at(ss, A, ro[nr - 1])))
                return g->err ? g->err : te__gen_fail(g, TE_ERR_INTERNAL);
            int rc = coop_copy(r, sh, threads);
            if (rc)
                return rc;
            if (dbuf && !TE__OK(g, te_double_buffer(ss)))
                return g->err;
        }
    }
    return TE_OK;
}

/* G3 / G4: elementwise stage i, rows (cross-thread reductions at the row loop) or flat. */
static int gpu_elementwise(sk_run *r, int i, te_stage *st, bool rows)
{
    te__gen *g = r->g;
    const sk_stage *X = &r->sd->st[i];
    int nd = X->nd;
    te_iter *f = te_stage_axis(st, 0), *bo, *tx;
    if (rows && nd >= 2) {
        for (int d = 1; d < nd - 1; d++)
            if (!TE__OK(g, te_fuse(st, f, te_stage_leaf(st, 1), &f)))
                return g->err;
        int64_t T = pick_pow2_in(r, 32, G_MAX_THREADS);
        te_iter *jo;
        if (!TE__OK(g, te_split(st, te_stage_leaf(st, 1), T, &jo, &tx)) ||
            !TE__OK(g, te_bind(st, f, TE_BLOCK_X)) || !TE__OK(g, te_bind(st, tx, TE_THREAD_X)))
            return g->err;
        r->row[i] = f;
        r->threads[i] = (int)T;
        return TE_OK;
    }
    for (int d = 1; d < nd; d++)
        if (!TE__OK(g, te_fuse(st, f, te_stage_leaf(st, 1), &f)))
            return g->err;
    int64_t T = pick_pow2_in(r, 32, G_MAX_THREADS);
    if (!TE__OK(g, te_split(st, f, T, &bo, &tx)) || !TE__OK(g, te_bind(st, bo, TE_BLOCK_X)) ||
        !TE__OK(g, te_bind(st, tx, TE_THREAD_X)))
        return g->err;
    r->row[i] = tx; /* a reduction at this loop is one element per thread */
    r->threads[i] = 0;
    return TE_OK;
}

/* Whether elementwise stage i reads a reduction over its last axis that keeps its leading
 * axes (softmax's sum, a norm's statistics). */
static bool reads_row_reduction(sk_run *r, int i)
{
    const sk_stage *X = &r->sd->st[i];
    if (X->nd < 2)
        return false;
    for (int q = 0; q < i; q++) {
        const sk_stage *P = &r->sd->st[q];
        if (!P->red || P->mlt || P->out || P->nd != X->nd || P->ext[X->nd - 1] != 1)
            continue;
        bool lead = true;
        for (int d = 0; d + 1 < X->nd; d++)
            lead &= P->ext[d] == X->ext[d];
        if (lead && te__expr_reads(X->t->body, P->t))
            return true;
    }
    return false;
}

/* G6: reduction X at the root. */
static int gpu_reduction_root(sk_run *r, te_stage *st, const sk_stage *X)
{
    te__gen *g = r->g;
    int nd = X->nd;
    bool block = X->nr == 1 && te__decide(g, 2);
    if (block) {
        te_iter *f = te_stage_axis(st, 0), *ko, *kt;
        for (int d = 1; d < nd; d++)
            if (!TE__OK(g, te_fuse(st, f, te_stage_leaf(st, 1), &f)))
                return g->err;
        int64_t T = pick_pow2_in(r, 32, G_MAX_THREADS);
        if (!TE__OK(g, te_split(st, te_stage_reduce_axis(st, 0), T, &ko, &kt)) ||
            !TE__OK(g, te_reorder(st, 3, (te_iter *[]){f, kt, ko})) ||
            !TE__OK(g, te_bind(st, f, TE_BLOCK_X)) ||
            !TE__OK(g, te_bind_reduce(st, kt, TE_THREAD_X)))
            return g->err;
        return TE_OK;
    }
    /* one thread per output element, accumulating in a register copy (not for tuples) */
    te_stage *O = st, *acc = st;
    if (!X->t->tuple_n) {
        te_tensor *L = te_cache_write(g->s, X->t, TE_SCOPE_LOCAL);
        if (!L)
            return te__gen_fail(g, TE_ERR_SCHEDULE);
        acc = te_schedule_stage(g->s, L);
        O = te_schedule_stage(g->s, X->t);
    }
    te_iter *f = te_stage_axis(O, 0), *bo, *tx;
    for (int d = 1; d < nd; d++)
        if (!TE__OK(g, te_fuse(O, f, te_stage_leaf(O, 1), &f)))
            return g->err;
    int64_t T = pick_pow2_in(r, 32, G_MAX_THREADS);
    if (!TE__OK(g, te_split(O, f, T, &bo, &tx)) || !TE__OK(g, te_bind(O, bo, TE_BLOCK_X)) ||
        !TE__OK(g, te_bind(O, tx, TE_THREAD_X)))
        return g->err;
    if (acc != O && !TE__OK(g, te_compute_at(acc, O, tx)))
        return g->err;
    return TE_OK;
}

int te__sketch_apply_gpu(sk_run *r)
{
    te__gen *g = r->g;
    sk_data *sd = r->sd;
    int rc = TE_OK;
    for (int i = sd->n - 1; i >= 0 && !rc && !g->err; i--) {
        if (r->done[i])
            continue;
        sk_stage *X = &sd->st[i];
        te_stage *st = te__sk_stage_of(r, i);
        if (!st)
            return te__gen_fail(g, TE_ERR_INTERNAL);
        /* G1 */
        if (!X->out && !X->red && te__sk_try_ok(r, te_compute_inline(st)))
            continue;
        if (!X->red) {
            /* G2 under an epilogue, else G3 / G4 */
            te_stage *prods[8];
            const sk_stage *pinfo[8];
            int np = te__sk_epilogue_producers(r, i, prods, pinfo);
            rc = np ? gpu_tiling(r, st, prods, pinfo, np)
                    : gpu_elementwise(r, i, st, reads_row_reduction(r, i));
            continue;
        }
        /* G5 */
        int h = X->out ? -1 : te__sk_row_host(r, st);
        if (h >= 0 && (r->threads[h] == 0 || X->nr == 1) &&
            te__sk_try_ok(r, te_compute_at(st, te__sk_stage_of(r, h), r->row[h]))) {
            if (r->threads[h] > 0) {
                te_iter *ko, *kt;
                if (!TE__OK(g,
                            te_split(st, te_stage_reduce_axis(st, 0), r->threads[h], &ko, &kt)) ||
                    !TE__OK(g, te_reorder(st, 2, (te_iter *[]){kt, ko})) ||
                    !TE__OK(g, te_bind_reduce(st, kt, TE_THREAD_X)))
                    rc = g->err;
            }
            continue;
        }
        /* G2 for an output product cached to a local accumulator, else G6 */
        if (X->mlt && X->out && !X->t->tuple_n) {
            te_tensor *L = te_cache_write(g->s, X->t, TE_SCOPE_LOCAL);
            if (!L)
                return te__gen_fail(g, TE_ERR_SCHEDULE);
            te_stage *ls = te_schedule_stage(g->s, L);
            const sk_stage *pi[1] = {X};
            rc = gpu_tiling(r, te__sk_stage_of(r, i), &ls, pi, 1);
            continue;
        }
        rc = gpu_reduction_root(r, st, X);
    }
    if (!rc && !g->err)
        rc = te__gen_lowers(g); /* the GPU check: an invalid draw otherwise */
    return rc ? rc : g->err;
}
