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
 * An elementwise epilogue of such products (mlp_gate with trans_b = 1: silu(X W1^T) * (X W3^T))
 * gets the same schedule for each product, its fold and its partial sums computed inside the
 * epilogue's block of n.
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
    int nprod;           /* 0: the output is the product itself */
    const char *prod[4]; /* else: the products an elementwise epilogue reads */
    int64_t M, N, K;
} gemv_data;

/* Whether R is a product of rank 2 with at most 16 rows whose weight is stored [n, k]. */
static bool gemv_product(const te_tensor *R)
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

/* Fills gd (when not NULL) from out: a product itself, or an elementwise epilogue of rank 2
 * whose every producer stage is such a product of its shape (mlp_gate with trans_b=1). */
static bool gemv_analyze(te_tensor *out, gemv_data *gd)
{
    gemv_data d = {out->name, 0, {NULL}, 0, 0, 0};
    const te_tensor *R0 = out;
    if (!gemv_product(out)) {
        if (out->kind != TE_T_COMPUTE || out->body->kind == TE_E_REDUCE || out->ndim != 2)
            return false;
        te_tensor *st[8];
        int ns = te_op_stages(out, st, 8);
        if (ns < 2 || ns > 5)
            return false;
        for (int q = 0; q < ns; q++) {
            if (st[q] == out)
                continue;
            if (!gemv_product(st[q]) || st[q]->shape[0] != out->shape[0] ||
                st[q]->shape[1] != out->shape[1])
                return false;
            d.prod[d.nprod++] = st[q]->name;
            R0 = st[q];
        }
    }
    d.M = R0->shape[0];
    d.N = R0->shape[1];
    d.K = R0->body->u.red.axes[0]->u.var.extent;
    if (gd)
        *gd = d;
    return true;
}

bool te__gemv_fits(te_tensor *out) { return out && gemv_analyze(out, NULL); }

static int gemv_init(te_space *sp)
{
    gemv_data *gd = te__alloc(sp->ctx, sizeof *gd);
    if (!gd)
        return TE_ERR_NOMEM;
    if (sp->n_out != 1 || !gemv_analyze(sp->outs[0], gd))
        return TERR(sp, "gemv template: one product with m <= 16 and B stored [n, k] (or an "
                        "epilogue of such products) expected");
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

/* Factors product stage P into kl lane-wise partial sums (k split by kl, rfactor); returns
 * the partial sums' tensor, NULL with g->err set on failure. */
static te_tensor *gemv_factor(te__gen *g, te_stage *P, int64_t kl)
{
    te_iter *ko, *ki;
    if (!TE__OK(g, te_split(P, te_stage_reduce_axis(P, 0), kl, &ko, &ki)))
        return NULL;
    te_tensor *R = te_rfactor(g->s, te_stage_tensor(P), ki);
    if (!R)
        te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    return R;
}

/* The partial sums R computed inside loop `at` of T, ordered (ko, j, i, lane): the rows of the
 * block and of A unrolled under one k step, k unrolled by ku, the lanes vectorized. */
static int gemv_partials(te__gen *g, te_tensor *R, te_stage *T, te_iter *at, int64_t ku)
{
    te_stage *sr = te_schedule_stage(g->s, R);
    if (!TE__OK(g, te_compute_at(sr, T, at)))
        return g->err;
    te_iter *pi = te_stage_axis(sr, 0), *pj = te_stage_axis(sr, 1), *pl = te_stage_axis(sr, 2);
    te_iter *pk = te_stage_reduce_axis(sr, 0), *pko = pk, *pki = NULL;
    if (ku > 1 && !TE__OK(g, te_split(sr, pk, ku, &pko, &pki)))
        return g->err;
    te_iter *ord[5];
    int n = 0;
    ord[n++] = pko;
    if (pki)
        ord[n++] = pki;
    ord[n++] = pj;
    ord[n++] = pi;
    ord[n++] = pl;
    if (!TE__OK(g, te_reorder(sr, n, ord)))
        return g->err;
    if (pki && !TE__OK(g, te_unroll(sr, pki)))
        return g->err;
    if (!TE__OK(g, te_unroll(sr, pj)) || !TE__OK(g, te_unroll(sr, pi)) ||
        !TE__OK(g, te_vectorize(sr, pl)))
        return g->err;
    return TE_OK;
}

static int gemv_apply(te__gen *g)
{
    gemv_data *gd = g->sp->tdata;
    int64_t nb = te__knob_val(g, 0), kl = te__knob_val(g, 1), ku = te__knob_val(g, 2);
    int64_t par = te__knob_val(g, 3);
    te_schedule *s = g->s;
    te_stage *T = te_schedule_stage_by_name(s, gd->out);
    te_stage *prods[4];
    te_tensor *R[4];
    int np = 0;
    if (!gd->nprod)
        prods[np++] = T;
    for (int q = 0; q < gd->nprod; q++)
        prods[np++] = te_schedule_stage_by_name(s, gd->prod[q]);
    for (int q = 0; q < np; q++)
        if (!(R[q] = gemv_factor(g, prods[q], kl)))
            return g->err;
    /* The output (the fold, or the epilogue): blocks of nb rows of W, the parallel loop. */
    te_iter *jo, *ji;
    if (!TE__OK(g, te_split(T, te_stage_axis(T, 1), nb, &jo, &ji)) ||
        !TE__OK(g, te_reorder(T, 3, (te_iter *[]){jo, te_stage_axis(T, 0), ji})))
        return g->err;
    if (par && !TE__OK(g, te__parallel(T, jo)))
        return g->err;
    for (int q = 0; q < np; q++) {
        if (prods[q] != T && !TE__OK(g, te_compute_at(prods[q], T, jo)))
            return g->err;
        int rc = gemv_partials(g, R[q], T, jo, ku);
        if (rc)
            return rc;
    }
    return TE_OK;
}

const te__template te__t_gemv = {"gemv", gemv_init, gemv_apply, false};
