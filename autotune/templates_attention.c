/*
 * The attention template (te_op_attention), for both of its forms (docs/ATTENTION.md).
 *
 * One-pass form (the default): batch x heads x query blocks of qb rows are one fused loop
 * (parallel when par = 1); the online tuple stage (m, l, a: qb x dh, vectorized over dh by
 * vec) reduces over the expression's key blocks, and at its key-block loop the block's scores
 * (a register tile), maximum, weights (exp vectorized), their sum and P V (vectorized over dh)
 * are computed. Knobs: qb, vec, par. On CUDA: a block per (batch x heads, qt query rows), a
 * thread per row, the key block of K^T and of V shared-memory tiles (knob qt).
 *
 * Two-pass form: the output's rows are tiled by query blocks of qb rows; batch, heads and
 * query blocks are fused into one loop (parallel when par = 1). Inside one iteration of that
 * loop:
 *   - the row maxima ("_max", qb values) reduce over key blocks of kb keys: the scores of one
 *     block ("_s1", qb x kb) are computed at the key-block loop, a register tile (Q row
 *     broadcast times a contiguous block of K transposed, the block split into vectors);
 *   - the accumulator ("_acc", qb x (dh + 1): P V and the denominator) reduces over key
 *     blocks the same way: the block's scores ("_s2") and weights ("_p", exp vectorized over
 *     the block) are computed at its key-block loop, then every weight row times the block
 *     of V (with its column of ones) is added, vectorized over the head dimension by vec;
 *   - the output divides the accumulator by its last column, vectorized by vec.
 * So only qb x kb scores are alive at a time and the lq x lk matrix is never allocated. K
 * transposed ("_kt") and V with ones ("_vx") are computed once at the root (vectorized,
 * parallel over batch x heads).
 *
 * Two-pass knobs (first value: the default configuration): qb (query block: 4, 2, 8, 1), kb (key
 * block: 2, 1 or 4 times the vector lanes), vec (vector width over the head dimension: the
 * lanes, half, twice), par (1 parallel fused loop, 0 serial; only 0 on one core).
 *
 * The stages are recognised by the operator tags te_op_attention sets ("attention_s1",
 * "attention_online", ...); an expression with any other stage is refused, except a layout
 * epilogue after the attention output (a fused group's head merge: reshapes and a transpose,
 * on the CPU): the attention is then computed at the root and the epilogue, inlined, is one
 * parallel loop over its output.
 */
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/ops.h"

#define TERR(sp, ...) te_ctx_set_error((sp)->ctx, TE_ERR_UNSUPPORTED, __VA_ARGS__)

/* Stage roles, in the order te_op_attention builds them. */
/* The default query block: of 48 rows and the other multiples of the register tile's 6 rows
 * near it, the one that pads lq least (the last block's row tiles are computed whole; their
 * stores are guarded), 48 on ties. At lq 1024, 54 rows compute 1026 rows instead of 1056
 * (measured: 1.49-1.57x -> 1.57-1.60x the unfused path, one and two threads). */
static int64_t default_query_block(int64_t lq)
{
    static const int64_t cand[] = {48, 42, 54, 36, 60};
    int64_t best = cand[0], pad = INT64_MAX;
    for (int c = 0; c < 5; c++) {
        int64_t p = (lq + cand[c] - 1) / cand[c] * cand[c];
        if (p < pad)
            best = cand[c], pad = p;
    }
    return best;
}

enum { A_KT, A_VX, A_S1, A_MAX, A_S2, A_P, A_ACC, A_NROLES };
static const char *const role_tag[A_NROLES] = {"attention_kt",  "attention_vx", "attention_s1",
                                               "attention_max", "attention_s2", "attention_p",
                                               "attention_acc"};

/* Stage roles of the one-pass form. */
enum { O_KT, O_VP, O_S, O_BMAX, O_P, O_BSUM, O_BPV, O_ONLINE, O_NROLES };
static const char *const one_tag[O_NROLES] = {"attention_kt",   "attention_vp",    "attention_s",
                                              "attention_bmax", "attention_p",     "attention_bsum",
                                              "attention_bpv",  "attention_online"};

typedef struct attn_data {
    const char *out;     /* the te_op_attention output */
    const char *epi_out; /* the expression's output when a layout epilogue follows, or NULL */
    int nepi;
    const char *epi[8]; /* the epilogue's steps before epi_out (reshapes, transposes): inlined */
    bool one_pass;
    const char *st[8]; /* A_NROLES or O_NROLES roles */
    int64_t lq, lk, dh;
    bool vp_copy; /* one-pass: V padded to whole key blocks (lk is not a multiple of them) */
} attn_data;

/* Recognises the one-pass form's stages (the online tuple stage named after its first
 * output); false when a stage does not fit. */
static bool init_one_pass(attn_data *ad, te_tensor *const *st, int ns, const te_tensor *O)
{
    for (int q = 0; q < ns; q++) {
        if (st[q] == O)
            continue;
        int role = -1;
        for (int r = 0; r < O_NROLES; r++)
            if (st[q]->tag && !strcmp(st[q]->tag, one_tag[r]))
                role = r;
        if (role < 0)
            return false;
        if (role == O_ONLINE && ad->st[role])
            continue; /* the tuple's other outputs: one stage */
        if (ad->st[role])
            return false;
        /* A tuple's stage is named after its first output. */
        const te_tensor *t0 = role == O_ONLINE ? te_tensor_tuple_member(st[q], 0) : st[q];
        if (!t0)
            return false;
        ad->st[role] = t0->name;
        if (role == O_VP) { /* padded when its key axis is longer than V's */
            te_tensor *v[2];
            ad->vp_copy = te__expr_tensors_read(st[q]->body, v, 2) != 1 || v[0]->ndim != 4 ||
                          v[0]->shape[2] != st[q]->shape[2];
        }
    }
    for (int r = 0; r < O_NROLES; r++)
        if (!ad->st[r])
            return false;
    return true;
}

/* GPU knobs (a CUDA target): threads per block (one query row each) and the key block. */
static void attn_init_gpu(te_space *sp, const attn_data *ad)
{
    int64_t v[TE__MAX_KVALS];
    static const int64_t qts[] = {64, 32, 128};
    if (ad->lq < 32) /* one block of lq threads: a wider one would leave threads out of the */
        te__knob_add(sp, "qt", 1, (int64_t[]){ad->lq}); /* barriers (lowering refuses it) */
    else
        te__knob_add(sp, "qt", te__filter_le(qts, 3, ad->lq, 32, v), v);
    static const int64_t kbs[] = {32, 16, 64};
    te__knob_add(sp, "kb", te__filter_le(kbs, 3, ad->lk < 16 ? 16 : ad->lk, 16, v), v);
}

static int attn_init(te_space *sp)
{
    if (sp->n_out != 1)
        return TERR(sp, "attention template: one output expected");
    te_tensor *O = sp->outs[0], *st[16];
    attn_data *ad = te__alloc(sp->ctx, sizeof *ad);
    if (!ad)
        return TE_ERR_NOMEM;
    if (!O->tag || strcmp(O->tag, "attention") || O->ndim != 4) {
        /* A layout epilogue (a fused group's head merge: reshape, transpose, reshape) after
         * the attention output: the attention is scheduled as usual at the root, the
         * epilogue inlined into one parallel loop that reads it. */
        te_tensor *all[32];
        int na = te_op_stages(O, all, 32);
        te_tensor *A = NULL;
        for (int q = 0; q < na && q < 32; q++)
            if (all[q]->tag && !strcmp(all[q]->tag, "attention") && all[q]->ndim == 4)
                A = all[q];
        if (!A || sp->target.backend == TE_BACKEND_CUDA)
            return TERR(sp, "attention template: '%s' is not a te_op_attention output", O->name);
        bool after = false;
        for (int q = 0; q < na && q < 32; q++) {
            if (all[q] == A) {
                after = true;
                continue;
            }
            if (!after)
                continue;
            if (all[q]->body->kind == TE_E_REDUCE)
                return TERR(sp, "attention template: '%s' after the attention is a reduction",
                            all[q]->name);
            if (all[q] != O) {
                if (ad->nepi == 8)
                    return TERR(sp, "attention template: epilogue too long");
                ad->epi[ad->nepi++] = all[q]->name;
            }
        }
        ad->epi_out = O->name;
        O = A;
    }
    int ns = te_op_stages(O, st, 16);
    if (ns < 0 || ns > 16)
        return TERR(sp, "attention template: too many stages");
    ad->out = O->name;
    bool one = false;
    for (int q = 0; q < ns; q++)
        one |= st[q]->tag && !strcmp(st[q]->tag, "attention_online");
    if (one) {
        ad->one_pass = true;
        if (!init_one_pass(ad, st, ns, O))
            return TERR(sp, "attention template: '%s' is not te_op_attention's one-pass form",
                        O->name);
        ad->lq = O->shape[2];
        ad->dh = O->shape[3];
        sp->tdata = ad;
        if (sp->target.backend == TE_BACKEND_CUDA) {
            int64_t v[TE__MAX_KVALS];
            static const int64_t qts[] = {64, 32, 128};
            if (ad->lq < 32) /* one block of lq threads (see attn_init_gpu) */
                te__knob_add(sp, "qt", 1, (int64_t[]){ad->lq});
            else
                te__knob_add(sp, "qt", te__filter_le(qts, 3, ad->lq, 32, v), v);
            return TE_OK;
        }
        int V = sp->lanes;
        int64_t v[TE__MAX_KVALS];
        /* Two query rows first: the register tiles are then 2 rows x 4 vectors (fewer loads a
         * multiply-add than 4 x 2; about 5% faster at lq 512). */
        static const int64_t qbs[] = {6, 2, 4, 8, 1};
        te__knob_add(sp, "qb", te__filter_le(qbs, 5, ad->lq, 1, v), v);
        int64_t vs[3] = {V, V / 2 > 0 ? V / 2 : 1, 2 * V};
        te__knob_add(sp, "vec", te__filter_le(vs, 3, ad->dh, ad->dh, v), v);
        if (sp->target.num_cores > 1)
            te__knob_add(sp, "par", 2, (int64_t[]){1, 0});
        else
            te__knob_add(sp, "par", 1, (int64_t[]){0});
        /* The query block: rows that share each key block while it is in L1 (the register
         * tiles sweep it qb rows at a time). With 16 rows a head's K^T and V (2 lk dh floats)
         * are streamed once per 16 rows, 8 flops a byte; with qb rows alone (session 4) once
         * per 2 rows, which made the kernel wait on L2 and L3. */
        int64_t qblks[6] = {default_query_block(ad->lq)}, others[] = {48, 16, 32, 8, 64};
        int nq = 1;
        for (int q = 0; q < 5; q++)
            if (others[q] != qblks[0])
                qblks[nq++] = others[q];
        te__knob_add(sp, "qblk", te__filter_le(qblks, nq, ad->lq, ad->lq, v), v);
        /* fold: the block's P V computed per row tile of the combine (pv_in_combine), or
         * stored and combined in a second pass over the rows. */
        te__knob_add(sp, "fold", 2, (int64_t[]){1, 0});
        return TE_OK;
    }
    for (int q = 0; q < ns; q++) {
        if (st[q] == O)
            continue;
        int role = -1;
        for (int r = 0; r < A_NROLES; r++)
            if (st[q]->tag && !strcmp(st[q]->tag, role_tag[r]))
                role = r;
        if (role < 0 || ad->st[role])
            return TERR(sp, "attention template: unexpected stage '%s'", st[q]->name);
        ad->st[role] = st[q]->name;
    }
    for (int r = 0; r < A_NROLES; r++)
        if (!ad->st[r])
            return TERR(sp, "attention template: no '%s' stage", role_tag[r]);
    ad->lq = O->shape[2];
    ad->dh = O->shape[3];
    for (int q = 0; q < ns; q++)
        if (st[q]->tag && !strcmp(st[q]->tag, "attention_kt"))
            ad->lk = st[q]->shape[3];
    sp->tdata = ad;
    if (sp->target.backend == TE_BACKEND_CUDA) {
        attn_init_gpu(sp, ad);
        return TE_OK;
    }
    int V = sp->lanes;
    int64_t v[TE__MAX_KVALS];
    /* The first value of every knob is the default configuration (te_space_get(sp, 0)). */
    static const int64_t qbs[] = {4, 2, 8, 1};
    te__knob_add(sp, "qb", te__filter_le(qbs, 4, ad->lq, 1, v), v);
    int64_t kbs[3] = {2 * V, V, 4 * V};
    te__knob_add(sp, "kb", te__filter_le(kbs, 3, ad->lk < V ? V : ad->lk, V, v), v);
    int64_t vs[3] = {V, V / 2 > 0 ? V / 2 : 1, 2 * V};
    te__knob_add(sp, "vec", te__filter_le(vs, 3, ad->dh, ad->dh, v), v);
    if (sp->target.num_cores > 1)
        te__knob_add(sp, "par", 2, (int64_t[]){1, 0});
    else
        te__knob_add(sp, "par", 1, (int64_t[]){0});
    return TE_OK;
}

/* The one-pass form's query block: qblk rounded up to a multiple of the register tile's qb
 * rows (at least qb). */
static int64_t query_block(int64_t qb, int64_t qblk)
{
    return qblk > qb ? (qblk + qb - 1) / qb * qb : qb;
}

static te_stage *stage_of(te__gen *g, const char *name)
{
    return te_schedule_stage_by_name(g->s, name);
}

/* Vectors per row of a qb-row register tile over at most `cols` columns: the largest power of
 * two (at most 8) that keeps the tile within about 24 accumulators of 32 vector registers (12
 * of 16). */
static int64_t tile_vectors(int lanes, int64_t qb, int64_t cols)
{
    int64_t nv = 1, budget = lanes >= 16 ? 24 : 12;
    while (nv * 2 * qb <= budget && nv < 8 && lanes * nv * 2 <= cols)
        nv *= 2;
    return nv;
}

/* A register-tiled block product at loop `at` of `parent`: rows (axis 2) times columns (axis
 * jax) reducing over reduction axis 0; the columns in chunks of nv vectors, and per chunk the
 * reduction outside, the rows unrolled and the chunk's vectors unrolled, so the qb x nv vector
 * tile stays in registers (about 12 of them with 16 vector registers, 24 with 32), and a chunk
 * no wider than the `cols` columns computed at `at`. Used for the
 * score block (qb x kb dot products along dh) and for the block's P V (qb x dh, along the
 * block's keys). */
static int reg_tile(te__gen *g, te_stage *S, te_stage *parent, te_iter *at, int lanes, int jax,
                    int64_t cols)
{
    /* The tile accumulates in a local copy computed per column chunk (cache_write, which
     * comes before any other primitive on S), whose indices are constants once its loops are
     * unrolled, so it lives in registers; S then copies the chunk out. (Accumulating in S's
     * own block buffer, indexed by the chunk loop, kept every partial sum in memory: a load
     * and a store per FMA.) */
    te_tensor *L = te_cache_write(g->s, te_stage_tensor(S), TE_SCOPE_LOCAL);
    if (!L)
        return te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    if (!TE__OK(g, te_compute_at(S, parent, at)))
        return g->err;
    te_iter *i = te_stage_axis(S, 2), *j = te_stage_axis(S, jax);
    int64_t qb = 1, qblk = 0;
    for (const te__knob *kn = g->sp->knobs; kn < g->sp->knobs + g->sp->nknobs; kn++) {
        if (!strcmp(kn->name, "qb"))
            qb = te__knob_val(g, (int)(kn - g->sp->knobs));
        if (!strcmp(kn->name, "qblk"))
            qblk = te__knob_val(g, (int)(kn - g->sp->knobs));
    }
    if (qblk > 0)
        qblk = query_block(qb, qblk);
    int64_t nv = tile_vectors(lanes, qb, cols);
    te_stage *A = te_schedule_stage(g->s, L);
    te_iter *jc, *jr, *jo, *ji;
    if (!TE__OK(g, te_split(S, j, lanes * nv, &jc, &jr)) ||
        !TE__OK(g, te_split(S, jr, lanes, &jo, &ji)))
        return g->err;
    if (qblk > qb) {
        /* A query block of qblk rows swept qb rows at a time: per column chunk (its slice of
         * K^T or V stays in L1) every row tile, the tile's local copy per row tile. */
        te_iter *io, *ii;
        if (!TE__OK(g, te_split(S, i, qb, &io, &ii)) ||
            !TE__OK(g, te_reorder(S, 5, (te_iter *[]){jc, io, ii, jo, ji})) ||
            !TE__OK(g, te_unroll(S, ii)) || !TE__OK(g, te_unroll(S, jo)) ||
            !TE__OK(g, te_vectorize(S, ji)) || !TE__OK(g, te_compute_at(A, S, io)))
            return g->err;
    } else if (!TE__OK(g, te_reorder(S, 4, (te_iter *[]){jc, i, jo, ji})) ||
               !TE__OK(g, te_unroll(S, i)) || !TE__OK(g, te_unroll(S, jo)) ||
               !TE__OK(g, te_vectorize(S, ji)) || !TE__OK(g, te_compute_at(A, S, jc)))
        return g->err;
    te_iter *ai = te_stage_axis(A, 2), *aj = te_stage_axis(A, jax),
            *ak = te_stage_reduce_axis(A, 0);
    te_iter *ajo, *aji;
    if (!TE__OK(g, te_split(A, aj, lanes, &ajo, &aji)) ||
        !TE__OK(g, te_reorder(A, 4, (te_iter *[]){ak, ai, ajo, aji})) ||
        !TE__OK(g, te_unroll(A, ai)) || !TE__OK(g, te_unroll(A, ajo)) ||
        !TE__OK(g, te_vectorize(A, aji)))
        return g->err;
    return TE_OK;
}

static int score_tile(te__gen *g, te_stage *S, te_stage *parent, te_iter *at, int lanes,
                      int64_t cols)
{
    return reg_tile(g, S, parent, at, lanes, 3, cols);
}

/* A row reduction R (the block's maxima or weight sums) over its one reduction axis made
 * lane-wise: the axis split by lanes and factored (te_rfactor) into vector partials computed
 * at loop `at` of `parent` (reduction outside, lanes vectorized); R then reduces the lanes.
 * Without it the reduction is a scalar dependence chain (a maximum or a float sum does not
 * vectorize without reassociation). */
static int lane_partials(te__gen *g, te_stage *R, te_stage *parent, te_iter *at, int lanes)
{
    te_iter *ko, *ki;
    if (!TE__OK(g, te_split(R, te_stage_reduce_axis(R, 0), lanes, &ko, &ki)))
        return g->err;
    te_tensor *rf = te_rfactor(g->s, te_stage_tensor(R), ki);
    if (!rf)
        return te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    te_stage *sr = te_schedule_stage(g->s, rf);
    if (!TE__OK(g, te_compute_at(sr, parent, at)))
        return g->err;
    te_iter *lane = te_stage_axis(sr, te_tensor_ndim(rf) - 1), *k = te_stage_reduce_axis(sr, 0);
    if (!TE__OK(g, te_reorder(sr, 2, (te_iter *[]){k, lane})) || !TE__OK(g, te_vectorize(sr, lane)))
        return g->err;
    /* The lanes fold as a tree (log2(lanes) dependent steps instead of lanes), where R's lane
     * loop has only spatial loops inside it; else as a chain. */
    if (te_reduce_tree(R, te_stage_reduce_axis(R, 0)))
        te_ctx_clear_error(g->ctx);
    return TE_OK;
}

/* The block's P V folded into the online combine: the online stage T's update (at its
 * key-block loop tjo) runs over row tiles of qb rows and column chunks of nv vectors, and the
 * P V stage B is computed per tile, at the chunk loop, as a register tile (the block's keys
 * outside, rows and vectors unrolled). B's buffer is then the tile itself, indexed by
 * constants once unrolled, so it stays in registers and the combine (a' = a e1 + P V e2)
 * is the tile's epilogue: the block's qb x dh products never go through memory and there
 * is no second pass over the rows (FlashAttention-2's rescale-then-accumulate, with the
 * block's maximum as the reference). Sets *done, or leaves everything as it was where the
 * tile's chunks do not divide the head dimension. */
static int pv_in_combine(te__gen *g, te_stage *B, te_stage *T, te_iter *tjo, int lanes, int64_t qb,
                         int64_t dh, bool *done)
{
    int64_t nv = tile_vectors(lanes, qb, dh);
    if (dh % (lanes * nv))
        return TE_OK;
    te_iter *tio, *tii, *tdc, *tdr, *tdo, *tdi, *bdo, *bdi;
    if (!TE__OK(g, te_split(T, te_stage_axis(T, 2), qb, &tio, &tii)) ||
        !TE__OK(g, te_split(T, te_stage_axis(T, 3), lanes * nv, &tdc, &tdr)) ||
        !TE__OK(g, te_split(T, tdr, lanes, &tdo, &tdi)) ||
        !TE__OK(g, te_reorder(T, 6, (te_iter *[]){tjo, tio, tdc, tii, tdo, tdi})) ||
        !TE__OK(g, te_unroll(T, tii)) || !TE__OK(g, te_unroll(T, tdo)) ||
        !TE__OK(g, te_vectorize(T, tdi)) || !TE__OK(g, te_compute_at(B, T, tdc)) ||
        !TE__OK(g, te_split(B, te_stage_axis(B, 4), lanes, &bdo, &bdi)) ||
        !TE__OK(g, te_reorder(
                       B, 4,
                       (te_iter *[]){te_stage_reduce_axis(B, 0), te_stage_axis(B, 2), bdo, bdi})) ||
        !TE__OK(g, te_unroll(B, te_stage_axis(B, 2))) || !TE__OK(g, te_unroll(B, bdo)) ||
        !TE__OK(g, te_vectorize(B, bdi)))
        return g->err;
    *done = true;
    return TE_OK;
}

/* Last axis of an elementwise stage split by v and vectorized. */
static int vec_last(te__gen *g, te_stage *P, int64_t v)
{
    int nd = te_tensor_ndim(te_stage_tensor(P));
    te_iter *a, *b;
    if (!TE__OK(g, te_split(P, te_stage_axis(P, nd - 1), v, &a, &b)) ||
        !TE__OK(g, te_vectorize(P, b)))
        return g->err;
    return TE_OK;
}

/* K transposed, [.., dh, lk]: vectorized along the keys (a gather of v rows of K, dh apart),
 * with the key blocks outside the head dimension, so the v rows that one block gathers stay in
 * L1 while every k reads its element of them (the other order reads all lk rows per k: 64 KiB
 * of lines at lk 1024, more than L1, each line fetched dh / 16 times; measured at lk 1024,
 * 12 heads, one thread: 1.04 ms -> 0.47 ms). */
static int transpose_copy(te__gen *g, te_stage *P, int64_t v)
{
    if (vec_last(g, P, v))
        return g->err;
    int nl = te_stage_nleaves(P);
    te_iter *k = te_stage_leaf(P, nl - 3), *jo = te_stage_leaf(P, nl - 2);
    return TE__OK(g, te_reorder(P, 2, (te_iter *[]){jo, k})) ? TE_OK : g->err;
}

/* A shared-memory copy of `t` for reader R computed at R's loop `at`, copied cooperatively by
 * the block's nt threads (every axis fused, split by nt, bound to threadIdx.x). */
static int shared_tile(te__gen *g, te_tensor *t, te_stage *R, te_stage *parent, te_iter *at,
                       int64_t nt)
{
    te_tensor *sh = te_cache_read(g->s, t, TE_SCOPE_SHARED, 1, &R);
    if (!sh)
        return te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    te_stage *ss = te_schedule_stage(g->s, sh);
    if (!TE__OK(g, te_compute_at(ss, parent, at)))
        return g->err;
    int nd = te_tensor_ndim(sh);
    te_iter *f = te_stage_leaf(ss, 0), *rest, *tx;
    for (int d = 1; d < nd; d++)
        if (!TE__OK(g, te_fuse(ss, f, te_stage_leaf(ss, 1), &f)))
            return g->err;
    if (!TE__OK(g, te_split(ss, f, nt, &rest, &tx)) || !TE__OK(g, te_bind(ss, tx, TE_THREAD_X)))
        return g->err;
    return TE_OK;
}

/* The GPU schedule: one block per (batch x heads, qt query rows), one thread per query row.
 * K transposed and V with ones are small kernels of their own at the root; the blocks of them
 * every thread of the block reads are shared-memory tiles (kb keys x dh) loaded cooperatively
 * at the key-block loops; each thread keeps its row's maximum, kb scores, weights and dh + 1
 * accumulators in local memory. */
/* A rank-4 helper stage (K transposed, V with ones) as one small kernel at the root: its
 * loops fused and split into blocks of 256 threads. */
static int flat_gpu_kernel(te__gen *g, te_stage *P)
{
    te_iter *f = te_stage_leaf(P, 0), *bo, *tx;
    for (int d = 1; d < 4; d++)
        if (!TE__OK(g, te_fuse(P, f, te_stage_leaf(P, 1), &f)))
            return g->err;
    if (!TE__OK(g, te_split(P, f, 256, &bo, &tx)) || !TE__OK(g, te_bind(P, bo, TE_BLOCK_X)) ||
        !TE__OK(g, te_bind(P, tx, TE_THREAD_X)))
        return g->err;
    return TE_OK;
}

static int attn_apply_gpu(te__gen *g)
{
    attn_data *ad = g->sp->tdata;
    int64_t qt = te__knob_val(g, 0), kb = te__knob_val(g, 1);
    te_stage *st[A_NROLES];
    for (int r = 0; r < A_NROLES; r++)
        st[r] = stage_of(g, ad->st[r]);
    te_stage *O = stage_of(g, ad->out);
    /* K transposed and V with ones: one small kernel each at the root (256 threads a block). */
    for (int r = A_KT; r <= A_VX; r++) {
        if (flat_gpu_kernel(g, st[r]))
            return g->err;
    }
    te_iter *bh, *io, *ii;
    if (!TE__OK(g, te_fuse(O, te_stage_axis(O, 0), te_stage_axis(O, 1), &bh)) ||
        !TE__OK(g, te_split(O, te_stage_axis(O, 2), qt, &io, &ii)) ||
        !TE__OK(g, te_bind(O, bh, TE_BLOCK_Y)) || !TE__OK(g, te_bind(O, io, TE_BLOCK_X)) ||
        !TE__OK(g, te_bind(O, ii, TE_THREAD_X)))
        return g->err;
    te_stage *A = st[A_ACC];
    if (!TE__OK(g, te_compute_at(A, O, ii)))
        return g->err;
    te_iter *ajo, *aji;
    if (!TE__OK(g, te_split(A, te_stage_reduce_axis(A, 0), kb, &ajo, &aji)) ||
        !TE__OK(g, te_reorder(A, 3, (te_iter *[]){ajo, aji, te_stage_axis(A, 3)})))
        return g->err;
    if (!TE__OK(g, te_compute_at(st[A_P], A, ajo)) || !TE__OK(g, te_compute_at(st[A_S2], A, ajo)))
        return g->err;
    te_stage *M = st[A_MAX];
    if (!TE__OK(g, te_compute_at(M, A, te_stage_axis(A, 1))))
        return g->err;
    te_iter *mjo, *mji;
    if (!TE__OK(g, te_split(M, te_stage_reduce_axis(M, 0), kb, &mjo, &mji)) ||
        !TE__OK(g, te_compute_at(st[A_S1], M, mjo)))
        return g->err;
    /* Shared tiles: a block of K (transposed) for each pass's scores, of V for the
     * accumulator. */
    te_tensor *KT = te_stage_tensor(st[A_KT]), *VX = te_stage_tensor(st[A_VX]);
    if (shared_tile(g, KT, st[A_S2], A, ajo, qt) || shared_tile(g, KT, st[A_S1], M, mjo, qt) ||
        shared_tile(g, VX, A, A, ajo, qt))
        return g->err;
    return TE_OK;
}

/* The one-pass CPU schedule: per query block, the online tuple stage reduces over key blocks;
 * at its key-block loop the block's scores (register tile), maximum, weights (exp vectorized),
 * weight sum and P V (vectorized over the head dimension) are computed, then combined into the
 * running (m, l, a), vectorized over the head dimension. */
static int attn_apply_one_pass(te__gen *g)
{
    attn_data *ad = g->sp->tdata;
    int64_t qb = te__knob_val(g, 0), vec = te__knob_val(g, 1), par = te__knob_val(g, 2);
    int64_t qblk = te__knob_val(g, 3), fold = te__knob_val(g, 4);
    int lanes = g->sp->lanes;
    te_stage *st[O_NROLES];
    for (int r = 0; r < O_NROLES; r++)
        st[r] = stage_of(g, ad->st[r]);
    te_stage *O = stage_of(g, ad->out);
    te_iter *bh, *io, *ii, *f;
    if (!TE__OK(g, te_fuse(O, te_stage_axis(O, 0), te_stage_axis(O, 1), &bh)) ||
        !TE__OK(g, te_split(O, te_stage_axis(O, 2), query_block(qb, qblk), &io, &ii)) ||
        !TE__OK(g, te_fuse(O, bh, io, &f)))
        return g->err;
    if (vec_last(g, O, vec))
        return g->err;
    if (par && !TE__OK(g, te_parallel(O, f)))
        return g->err;
    te_stage *T = st[O_ONLINE];
    if (!TE__OK(g, te_compute_at(T, O, f)))
        return g->err;
    te_iter *tjo = te_stage_reduce_axis(T, 0), *tdo, *tdi;
    bool folded = false;
    if (fold && vec == lanes && qb > 1 &&
        pv_in_combine(g, st[O_BPV], T, tjo, lanes, qb, ad->dh, &folded))
        return g->err;
    if (!folded) {
        if (!TE__OK(g, te_split(T, te_stage_axis(T, 3), vec, &tdo, &tdi)) ||
            !TE__OK(g, te_reorder(T, 4, (te_iter *[]){tjo, te_stage_axis(T, 2), tdo, tdi})) ||
            !TE__OK(g, te_vectorize(T, tdi)))
            return g->err;
        /* P V of the block: a register tile (rows x vectors of the head dim) accumulated
         * along the block's keys, stored, then combined row by row. */
        if (reg_tile(g, st[O_BPV], T, tjo, lanes, 4, ad->dh))
            return g->err;
    }
    if (!TE__OK(g, te_compute_at(st[O_BSUM], T, tjo)) ||
        lane_partials(g, st[O_BSUM], T, tjo, lanes) || !TE__OK(g, te_compute_at(st[O_P], T, tjo)) ||
        vec_last(g, st[O_P], lanes) || !TE__OK(g, te_compute_at(st[O_BMAX], T, tjo)) ||
        lane_partials(g, st[O_BMAX], T, tjo, lanes))
        return g->err;
    /* The expression's key block: the scores' padded key axis over the number of blocks. */
    int64_t kblk = te_tensor_shape(te_stage_tensor(st[O_S]))[3] /
                   te_tensor_shape(te_stage_tensor(st[O_BMAX]))[3];
    if (score_tile(g, st[O_S], T, tjo, lanes, kblk))
        return g->err;
    for (int r = O_KT; r <= O_VP; r++) {
        te_stage *P = st[r];
        te_iter *pf;
        if (r == O_VP && !ad->vp_copy) {
            /* V needs no padding (whole key blocks): P V reads V itself, no copy. */
            if (!TE__OK(g, te_compute_inline(P)))
                return g->err;
            continue;
        }
        if (par && (!TE__OK(g, te_fuse(P, te_stage_axis(P, 0), te_stage_axis(P, 1), &pf)) ||
                    !TE__OK(g, te_parallel(P, pf))))
            return g->err;
        if (r == O_KT ? transpose_copy(g, P, lanes) : vec_last(g, P, lanes))
            return g->err;
    }
    return TE_OK;
}

/* The one-pass GPU schedule: a block per (batch x heads, qt query rows), a thread per row;
 * each thread's online state (m, l, a) and its block's scores, weights, sums and P V in local
 * memory; the key block of K^T and of V (the block size is the expression's) shared tiles
 * loaded cooperatively at the key-block loop. */
/* Static shared memory per block that every CUDA device allows (lowering's GPU check). */
#define GPU_SHARED_BYTES (48 * 1024)

/* Bytes of one key block's tile of K^T or of V (a [batch, heads, ...] stage over nblk blocks). */
static int64_t tile_bytes(te_tensor *t, int64_t nblk)
{
    const int64_t *sh = te_tensor_shape(t);
    int64_t per = te_tensor_numel(t) / (sh[0] * sh[1]);
    return (per + nblk - 1) / (nblk > 0 ? nblk : 1) * (int64_t)te_dtype_size(te_tensor_dtype(t));
}

static int attn_apply_one_pass_gpu(te__gen *g)
{
    attn_data *ad = g->sp->tdata;
    int64_t qt = te__knob_val(g, 0);
    te_stage *st[O_NROLES];
    for (int r = 0; r < O_NROLES; r++)
        st[r] = stage_of(g, ad->st[r]);
    te_stage *O = stage_of(g, ad->out);
    for (int r = O_KT; r <= O_VP; r++) {
        if (flat_gpu_kernel(g, st[r]))
            return g->err;
    }
    te_iter *bh, *io, *ii;
    if (!TE__OK(g, te_fuse(O, te_stage_axis(O, 0), te_stage_axis(O, 1), &bh)) ||
        !TE__OK(g, te_split(O, te_stage_axis(O, 2), qt, &io, &ii)) ||
        !TE__OK(g, te_bind(O, bh, TE_BLOCK_Y)) || !TE__OK(g, te_bind(O, io, TE_BLOCK_X)) ||
        !TE__OK(g, te_bind(O, ii, TE_THREAD_X)))
        return g->err;
    te_stage *T = st[O_ONLINE];
    if (!TE__OK(g, te_compute_at(T, O, ii)))
        return g->err;
    te_iter *tjo = te_stage_reduce_axis(T, 0), *td = te_stage_axis(T, 3);
    if (!TE__OK(g, te_reorder(T, 2, (te_iter *[]){tjo, td})))
        return g->err;
    /* The block's P V per element of d, inside T's d loop: one running sum in a register
     * instead of a dh-long local array beside the accumulator (at dh 128 the two did not fit
     * 255 registers); the maximum and sum are still combined once per block (lower_tuple.c). */
    if (!TE__OK(g, te_compute_at(st[O_BPV], T, td)) ||
        !TE__OK(g, te_compute_at(st[O_BSUM], T, tjo)) ||
        !TE__OK(g, te_compute_at(st[O_P], T, tjo)) ||
        !TE__OK(g, te_compute_at(st[O_BMAX], T, tjo)) || !TE__OK(g, te_compute_at(st[O_S], T, tjo)))
        return g->err;
    /* The key block's tiles of K^T and of V, as long as they fit the 48 KiB of static shared
     * memory (at head dimension 64 the operator's default 128-key block needs 32 KiB each): V's
     * is read from global memory (through L1) when both do not fit, K^T's too when it alone
     * does not. */
    int64_t nblk = te_iter_extent(tjo), kt_b = tile_bytes(te_stage_tensor(st[O_KT]), nblk),
            vp_b = tile_bytes(te_stage_tensor(st[O_VP]), nblk);
    if (kt_b <= GPU_SHARED_BYTES && shared_tile(g, te_stage_tensor(st[O_KT]), st[O_S], T, tjo, qt))
        return g->err;
    if (kt_b + vp_b <= GPU_SHARED_BYTES &&
        shared_tile(g, te_stage_tensor(st[O_VP]), st[O_BPV], T, tjo, qt))
        return g->err;
    return TE_OK;
}

/* The layout epilogue: its steps inlined into its output, whose leading two axes are fused
 * and parallel, the last vectorized when it is a multiple of the lanes. */
static int apply_epilogue(te__gen *g)
{
    attn_data *ad = g->sp->tdata;
    for (int q = 0; q < ad->nepi; q++)
        if (!TE__OK(g, te_compute_inline(stage_of(g, ad->epi[q]))))
            return g->err;
    te_stage *E = stage_of(g, ad->epi_out);
    int nd = te_tensor_ndim(te_stage_tensor(E));
    te_iter *f = te_stage_axis(E, 0);
    if (nd > 2 && !TE__OK(g, te_fuse(E, f, te_stage_axis(E, 1), &f)))
        return g->err;
    if (g->sp->target.num_cores > 1 && !TE__OK(g, te__parallel(E, f)))
        return g->err;
    int lanes = g->sp->lanes;
    if (nd >= 2 && te_tensor_shape(te_stage_tensor(E))[nd - 1] % lanes == 0) {
        te_iter *o, *i;
        if (!TE__OK(g, te_split(E, te_stage_axis(E, nd - 1), lanes, &o, &i)) ||
            !TE__OK(g, te_vectorize(E, i)))
            return g->err;
    }
    return TE_OK;
}

static int attn_apply_core(te__gen *g);

static int attn_apply(te__gen *g)
{
    int rc = attn_apply_core(g);
    if (rc == TE_OK && ((attn_data *)g->sp->tdata)->epi_out)
        rc = apply_epilogue(g);
    return rc;
}

static int attn_apply_core(te__gen *g)
{
    if (((attn_data *)g->sp->tdata)->one_pass)
        return g->sp->target.backend == TE_BACKEND_CUDA ? attn_apply_one_pass_gpu(g)
                                                        : attn_apply_one_pass(g);
    if (g->sp->target.backend == TE_BACKEND_CUDA)
        return attn_apply_gpu(g);
    attn_data *ad = g->sp->tdata;
    int64_t qb = te__knob_val(g, 0), kb = te__knob_val(g, 1), vec = te__knob_val(g, 2);
    int64_t par = te__knob_val(g, 3);
    int lanes = g->sp->lanes;
    te_stage *st[A_NROLES];
    for (int r = 0; r < A_NROLES; r++)
        st[r] = stage_of(g, ad->st[r]);
    te_stage *O = stage_of(g, ad->out);
    /* Output: (batch x heads x query blocks) fused, rows of the block, head dim vectorized. */
    te_iter *bh, *io, *ii, *f;
    if (!TE__OK(g, te_fuse(O, te_stage_axis(O, 0), te_stage_axis(O, 1), &bh)) ||
        !TE__OK(g, te_split(O, te_stage_axis(O, 2), qb, &io, &ii)) ||
        !TE__OK(g, te_fuse(O, bh, io, &f)))
        return g->err;
    if (vec_last(g, O, vec))
        return g->err;
    if (par && !TE__OK(g, te_parallel(O, f)))
        return g->err;
    /* Pass 2: the accumulator over key blocks, scores and weights per block. */
    te_stage *A = st[A_ACC];
    if (!TE__OK(g, te_compute_at(A, O, f)))
        return g->err;
    te_iter *ai = te_stage_axis(A, 2), *ad_ = te_stage_axis(A, 3), *aj = te_stage_reduce_axis(A, 0);
    te_iter *ajo, *aji, *ado, *adi;
    if (!TE__OK(g, te_split(A, aj, kb, &ajo, &aji)) ||
        !TE__OK(g, te_split(A, ad_, vec, &ado, &adi)) ||
        !TE__OK(g, te_reorder(A, 5, (te_iter *[]){ajo, ai, aji, ado, adi})) ||
        !TE__OK(g, te_vectorize(A, adi)))
        return g->err;
    if (!TE__OK(g, te_compute_at(st[A_P], A, ajo)) || vec_last(g, st[A_P], lanes))
        return g->err;
    if (score_tile(g, st[A_S2], A, ajo, lanes, kb))
        return g->err;
    /* Pass 1: row maxima over key blocks, at the accumulator's (extent-1) head loop, i.e. per
     * query block before the accumulator's key blocks (the weights read them there). */
    te_stage *M = st[A_MAX];
    if (!TE__OK(g, te_compute_at(M, A, te_stage_axis(A, 1))))
        return g->err;
    te_iter *mi = te_stage_axis(M, 2), *mj = te_stage_reduce_axis(M, 0), *mjo, *mji;
    if (!TE__OK(g, te_split(M, mj, kb, &mjo, &mji)) ||
        !TE__OK(g, te_reorder(M, 3, (te_iter *[]){mjo, mi, mji})))
        return g->err;
    if (score_tile(g, st[A_S1], M, mjo, lanes, kb))
        return g->err;
    /* K transposed and V with ones: once, at the root. */
    for (int r = A_KT; r <= A_VX; r++) {
        te_stage *P = st[r];
        te_iter *pf;
        if (par && (!TE__OK(g, te_fuse(P, te_stage_axis(P, 0), te_stage_axis(P, 1), &pf)) ||
                    !TE__OK(g, te_parallel(P, pf))))
            return g->err;
        if (r == A_KT && transpose_copy(g, P, lanes))
            return g->err;
    }
    return TE_OK;
}

const te__template te__t_attention = {"attention", attn_init, attn_apply, true};
