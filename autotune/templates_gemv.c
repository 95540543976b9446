/*
 * Matrix-vector and skinny products: the gemm template's space for C[m, n] = A B with m <= 16
 * rows and B stored [n][k] (trans_b = 1, the [out][in] weight layout of inference engines), so
 * k is the contiguous axis of both operands.
 *
 * A register tile that vectorizes along n (the gemm template's) reads B with a stride of k
 * elements per lane there: a gather per vector. This space reduces along k instead:
 *
 *   C_rf[i, j, l] = sum_ko A[i, ko kl + l] B[j, ko kl + l]   (rfactor of k split by kl: kl
 *                                                           lane-wise partial sums, the lane
 *                                                           loop vectorized: contiguous loads)
 *   C[i, j]       = sum_l C_rf[i, j, l]                       (the final lane fold)
 *
 * with C_rf computed inside C's block of nb output rows (n), so the partial sums of a block
 * live in a small buffer; its loops are ordered (ko, j, i, l): nb rows of B and every row of A
 * are unrolled under one k step, so the m rows share each load of B. The blocks of n are the
 * parallel loop (never an axis of extent 1: with one block the kernel is serial).
 *
 * Knobs: nb (output rows per block, nb m <= 32), kl (lanes of partial sums: V or 2V), ku
 * (k steps unrolled), par (0 serial, 1 parallel over the n blocks; only 1 on a multi-core target
 * with at least two blocks).
 *
 * B stored [k][n] (trans_b = 0) keeps the gemm template's register tiles (vectorized along n,
 * which is contiguous there), restricted to column panels outside so the parallel loop runs
 * over blocks of n (see gemm_init in templates.c).
 */
#include "autotune/space_impl.h"
#include "tessera/ops.h"

#define TERR(sp, ...) te_ctx_set_error((sp)->ctx, TE_ERR_UNSUPPORTED, __VA_ARGS__)

typedef struct gemv_data {
    const char *out;
    int64_t M, N, K;
} gemv_data;

bool te__gemv_fits(const te_tensor *R)
{
    if (R->kind != TE_T_COMPUTE || R->body->kind != TE_E_REDUCE || R->body->u.red.n != 1 ||
        R->ndim != 2 || R->shape[0] > 16)
        return false;
    const te_expr *src = R->body->u.red.src, *kv = R->body->u.red.axes[0], *iv = R->axes[0];
    if (src->kind != TE_E_BINARY || src->u.bin.op != TE_MUL)
        return false;
    /* The weight: the read that does not use i and whose last index is exactly k. */
    const te_expr *ops[2] = {src->u.bin.a, src->u.bin.b};
    for (int q = 0; q < 2; q++) {
        const te_expr *r = ops[q];
        if (r->kind != TE_E_READ || r->u.read.n != 2)
            continue;
        bool uses_i = false;
        for (int d = 0; d < r->u.read.n; d++)
            uses_i |= te__expr_uses_var(r->u.read.idx[d], iv);
        if (!uses_i && r->u.read.idx[1] == kv)
            return true;
    }
    return false;
}

static int gemv_init(te_space *sp)
{
    if (sp->n_out != 1 || !te__gemv_fits(sp->outs[0]))
        return TERR(sp, "gemv template: one product with m <= 16 and B stored [n, k] expected");
    te_tensor *C = sp->outs[0];
    gemv_data *gd = te__alloc(sp->ctx, sizeof *gd);
    if (!gd)
        return TE_ERR_NOMEM;
    gd->out = C->name;
    gd->M = C->shape[0];
    gd->N = C->shape[1];
    gd->K = C->body->u.red.axes[0]->u.var.extent;
    sp->tdata = gd;
    int V = sp->lanes;
    bool multi = sp->target.num_cores > 1 && gd->N >= 2;
    int64_t v[TE__MAX_KVALS];
    /* Rows per block: nb m partial-sum vectors stay in registers; at least two blocks when the
     * blocks are the parallel loop. */
    int64_t nbmax = 32 / gd->M;
    if (multi && gd->N / 2 < nbmax)
        nbmax = gd->N / 2;
    if (gd->N < nbmax)
        nbmax = gd->N;
    static const int64_t nbs[] = {1, 2, 4, 8};
    te__knob_add(sp, "nb", te__filter_le(nbs, 4, nbmax, 1, v), v);
    int64_t kls[2] = {V, 2 * V};
    te__knob_add(sp, "kl", te__filter_le(kls, 2, gd->K, gd->K, v), v);
    static const int64_t kus[] = {1, 2, 4};
    te__knob_add(sp, "ku", te__filter_le(kus, 3, gd->K / V > 1 ? gd->K / V : 1, 1, v), v);
    te__knob_add(sp, "par", 1, (int64_t[]){multi ? 1 : 0});
    return TE_OK;
}

static int gemv_apply(te__gen *g)
{
    gemv_data *gd = g->sp->tdata;
    int64_t nb = te__knob_val(g, 0), kl = te__knob_val(g, 1), ku = te__knob_val(g, 2);
    int64_t par = te__knob_val(g, 3);
    te_schedule *s = g->s;
    te_stage *T = te_schedule_stage_by_name(s, gd->out);
    te_iter *ko, *ki;
    if (!TE__OK(g, te_split(T, te_stage_reduce_axis(T, 0), kl, &ko, &ki)))
        return g->err;
    te_tensor *R = te_rfactor(s, te_stage_tensor(T), ki);
    if (!R)
        return te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    /* The fold: blocks of nb output rows, the parallel loop. */
    te_iter *jo, *ji;
    if (!TE__OK(g, te_split(T, te_stage_axis(T, 1), nb, &jo, &ji)) ||
        !TE__OK(g, te_reorder(T, 3, (te_iter *[]){jo, te_stage_axis(T, 0), ji})))
        return g->err;
    if (par && !TE__OK(g, te__parallel(T, jo)))
        return g->err;
    /* The partial sums of one block: (ko, j, i, lane), rows unrolled, lanes vectorized. */
    te_stage *P = te_schedule_stage(s, R);
    if (!TE__OK(g, te_compute_at(P, T, jo)))
        return g->err;
    te_iter *pi = te_stage_axis(P, 0), *pj = te_stage_axis(P, 1), *pl = te_stage_axis(P, 2);
    te_iter *pk = te_stage_reduce_axis(P, 0), *pko = pk, *pki = NULL;
    if (ku > 1 && !TE__OK(g, te_split(P, pk, ku, &pko, &pki)))
        return g->err;
    te_iter *ord[5];
    int n = 0;
    ord[n++] = pko;
    if (pki)
        ord[n++] = pki;
    ord[n++] = pj;
    ord[n++] = pi;
    ord[n++] = pl;
    if (!TE__OK(g, te_reorder(P, n, ord)))
        return g->err;
    if (pki && !TE__OK(g, te_unroll(P, pki)))
        return g->err;
    if (!TE__OK(g, te_unroll(P, pj)) || !TE__OK(g, te_unroll(P, pi)) ||
        !TE__OK(g, te_vectorize(P, pl)))
        return g->err;
    return TE_OK;
}

const te__template te__t_gemv = {"gemv", gemv_init, gemv_apply};
