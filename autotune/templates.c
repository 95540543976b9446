/*
 * Hand-written templates with knobs for the operator library (AutoTVM style).
 *
 * A template recognizes the structure of the operator's expression (it finds its stages by
 * looking at the tensors, not by trusting names) and declares knobs with fixed candidate
 * lists; applying a configuration calls the public scheduling primitives, so the result is an
 * ordinary trace.
 *
 *   gemm     matmul, batch_matmul, dense_bias, matmul_bias_act, mlp_gate, qkv_projection:
 *            an mr x nr register tile (nr a multiple of the vector lanes) of every product,
 *            accumulated in a local stage computed inside the output's tile loop (cache_write
 *            for a product that is an output, compute_at of the product itself under an
 *            epilogue), k split and unrolled, loop order (column panels outside or rows
 *            outside), B packed per column panel (cache_read computed at the panel loop: a
 *            contiguous K x nr copy reused by every row tile), parallel axis.
 *            Knobs: mr, nr, ku, order (0 panels outside, 1 panels outside + packed B,
 *            2 rows outside, 3 skinny only: rows of B streamed into an L1 block of 32 nr
 *            columns), par (0 none, 1 outer loop, 2 outer two loops fused).
 *            Stages the products read (a fused group's layer norm before its matmul) are a
 *            prologue computed whole at the root, rows in parallel.
 *            Skinny products (m <= 16): with B stored [n, k] (trans_b, or mlp_gate's weights
 *            [out][in]) the gemv space of templates_gemv.c (k reduced in vector lanes, blocks of
 *            n parallel); with B [k, n] the tiles above, column panels outside, no packing, mr
 *            up to m. No template makes a loop of extent 1 parallel (te__parallel).
 *   conv2d   conv2d, conv2d_bn_relu, depthwise_conv2d (see templates_conv.c).
 *   rowop    softmax, layer_norm, rms_norm: every producer computed inside the output's row
 *            loop (parallel). Knobs: vec (split of the last axis, vectorized), inline
 *            (elementwise producers inlined or kept as a row buffer), nt (streaming stores),
 *            rf (row reductions rfactored into 1, 2 or 4 vectors of partial results, so
 *            they vectorize and run that many dependency chains at once, the vectors and
 *            then the lanes folded as trees, te_reduce_tree; 0 none), pf (the
 *            next row prefetched into L1 or L2 from the last pass before the output (1, 2)
 *            or from the output pass (3, 4), or not (0)), pipe (1: rows in chunks, the
 *            chunks parallel, each row's output pass one row behind inside the next row's
 *            first partial reduction, te_pipeline; offered with rf >= 2 vectors).
 *   eltwise  activations, broadcasting binaries, transpose, pad: producers inlined, rows
 *            fused, last axis split and vectorized. Knobs: vec, par (0 none, 1 rows, 2 rows
 *            and column blocks fused), unroll (unroll_max 0 or 16), nt.
 */
#include <stdlib.h>
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/ops.h"

#define TERR(sp, ...) te_ctx_set_error((sp)->ctx, TE_ERR_UNSUPPORTED, __VA_ARGS__)

#define knob te__knob_add
#define filter_le te__filter_le

static bool is_reduce(const te_tensor *t)
{
    return t->kind == TE_T_COMPUTE && t->body->kind == TE_E_REDUCE;
}

/* Computed tensors that t's body reads directly. */
typedef struct {
    te_tensor *v[16];
    int n;
} tlist;

static tlist reads_of(const te_tensor *t)
{
    tlist l = {{0}, 0};
    if (t->kind == TE_T_COMPUTE)
        l.n = te__expr_tensors_read(t->body, l.v, 16);
    if (l.n > 16)
        l.n = 16;
    return l;
}

/* All computed stages that out depends on, producers first (te_op_stages). */
static int stages_of(te_tensor *out, te_tensor **v, int cap)
{
    int n = te_op_stages(out, v, cap);
    return n > cap ? -1 : n;
}

/* ---- gemm -------------------------------------------------------------------------------- */

typedef struct gemm_out {
    const char *out; /* output tensor name */
    bool role_a;     /* the output is the product itself (cache_write) */
    int nprod;
    const char *prod[4]; /* product stages (role B) */
    te_tensor *prod_t[4];
    int batch;              /* 1 when the axes are (b, i, j) */
    te_tensor *packable[4]; /* per product: the input read without i, packable by panels */
    int ninl;
    const char *inl[8]; /* elementwise stages between the products and the output: inlined */
} gemm_out;

typedef struct gemm_data {
    int nout;
    gemm_out o[8];
    int npro;
    const char *pro[16]; /* stages the products read (a fused group's layer norm): at the root */
    int nview;
    const char *view[8]; /* packed weights' views (te_graph_group_expr.packed_nb): inlined */
    int64_t panel;       /* the narrowest panel of those (0: none); nr divides it */
} gemm_data;

/* Adds name to list[0..*n) (cap entries) unless it is there: false when the list is full. */
static bool add_once(const char **list, int *n, int cap, const char *name)
{
    for (int q = 0; q < *n; q++)
        if (!strcmp(list[q], name))
            return true;
    if (*n == cap)
        return false;
    list[(*n)++] = name;
    return true;
}

/* A view of weights packed in column panels (a fused group's constant, tag "packed_view"):
 * inlined, the product then reads the panels directly. Records it; false when t is none. */
static bool add_view(gemm_data *gd, const te_tensor *t)
{
    if (!t->tag || strcmp(t->tag, "packed_view") || t->kind != TE_T_COMPUTE ||
        t->body->kind != TE_E_READ || t->body->u.read.t->ndim != 3 ||
        !add_once(gd->view, &gd->nview, 8, t->name))
        return false;
    int64_t nb = t->body->u.read.t->shape[2];
    if (!gd->panel || nb < gd->panel)
        gd->panel = nb;
    return true;
}

/* Whether t is a matrix product (a sum over one axis of a product of two reads): never a
 * prologue, which is computed whole at the root without a tile (the scores of an attention
 * group before its softmax are one). */
static bool is_matrix_product(const te_tensor *t)
{
    if (!is_reduce(t) || t->body->u.red.n != 1 || t->ndim < 2)
        return false;
    const te_expr *src = t->body->u.red.src;
    return src->kind == TE_E_BINARY && src->u.bin.op == TE_MUL && src->u.bin.a->kind == TE_E_READ &&
           src->u.bin.b->kind == TE_E_READ;
}

/* Records prologue stage t once (outputs may share it). */
static bool add_prologue(gemm_data *gd, const te_tensor *t)
{
    return !is_matrix_product(t) && add_once(gd->pro, &gd->npro, 16, t->name);
}

static bool is_output(const te_space *sp, const te_tensor *t)
{
    for (int o = 0; o < sp->n_out; o++)
        if (sp->outs[o] == t)
            return true;
    return false;
}

/* Whether t reads one of g's products or inlined epilogue steps found so far (stages come
 * producers first): a step after the products, never one that feeds them. */
static bool reads_product(const gemm_out *g, const te_tensor *t)
{
    tlist l = reads_of(t);
    for (int r = 0; r < l.n; r++) {
        for (int q = 0; q < g->nprod; q++)
            if (l.v[r] == g->prod_t[q])
                return true;
        for (int q = 0; q < g->ninl; q++)
            if (!strcmp(l.v[r]->name, g->inl[q]))
                return true;
    }
    return false;
}

/* Whether R is a product over one reduction axis with axes (i, j) or (b, i, j); fills the
 * packable input (read without i, its last index exactly j). */
static bool gemm_product(te_tensor *R, int *batch, te_tensor **packable)
{
    if (!is_reduce(R) || R->body->u.red.n != 1 || (R->ndim != 2 && R->ndim != 3))
        return false;
    *batch = R->ndim == 3;
    te_expr *iv = R->axes[R->ndim - 2], *jv = R->axes[R->ndim - 1];
    *packable = NULL;
    tlist l = reads_of(R);
    if (l.n < 1 || l.n > 2)
        return false;
    /* The packable input: the one whose read does not use i and ends in exactly j. */
    const te_expr *src = R->body->u.red.src;
    if (src->kind != TE_E_BINARY || src->u.bin.op != TE_MUL)
        return false;
    const te_expr *ops[2] = {src->u.bin.a, src->u.bin.b};
    for (int q = 0; q < 2; q++) {
        const te_expr *r = ops[q];
        if (r->kind != TE_E_READ)
            continue;
        bool uses_i = false;
        for (int d = 0; d < r->u.read.n; d++)
            uses_i |= te__expr_uses_var(r->u.read.idx[d], iv);
        const te_expr *last = r->u.read.idx[r->u.read.n - 1];
        if (!uses_i && last == jv)
            *packable = r->u.read.t;
    }
    return true;
}

static int gemm_init(te_space *sp)
{
    gemm_data *gd = te__alloc(sp->ctx, sizeof *gd);
    if (!gd)
        return TE_ERR_NOMEM;
    if (sp->n_out > 8)
        return TERR(sp, "gemm template: too many outputs");
    if (sp->n_out == 1 && te__gemv_fits(sp->outs[0])) {
        /* A matrix-vector or skinny product with B stored [n, k]: reduce along k instead. */
        sp->tmpl = &te__t_gemv;
        return te__t_gemv.init(sp);
    }
    int64_t M = 0, N = 0, K = 0;
    for (int o = 0; o < sp->n_out; o++) {
        te_tensor *O = sp->outs[o];
        gemm_out *g = &gd->o[gd->nout++];
        g->out = O->name;
        te_tensor *st[64];
        int ns = stages_of(O, st, 64);
        if (ns < 0)
            return TERR(sp, "gemm template: too many stages");
        te_tensor *R0 = NULL;
        if (gemm_product(O, &g->batch, &g->packable[0])) {
            g->role_a = true;
            R0 = O;
            /* Everything else the product reads is a prologue, computed at the root. */
            for (int q = 0; q < ns; q++)
                if (st[q] != O && !add_view(gd, st[q]) && !add_prologue(gd, st[q]))
                    return TERR(sp,
                                "gemm template: stage '%s' before '%s' is a product or one "
                                "too many",
                                st[q]->name, O->name);
        } else {
            if (is_reduce(O) || (O->ndim != 2 && O->ndim != 3))
                return TERR(sp, "gemm template: '%s' is neither a product nor an epilogue",
                            O->name);
            for (int q = 0; q < ns; q++) {
                if (st[q] == O || add_view(gd, st[q]))
                    continue;
                int b;
                te_tensor *pk;
                if (!is_reduce(st[q]) && !is_output(sp, st[q]) && g->ninl < 8 &&
                    reads_product(g, st[q])) {
                    /* An elementwise or injective step of the epilogue (a fused group's bias
                     * add before its activation): inlined into its readers, as the library's
                     * matmul_bias_act writes it in one expression. */
                    g->inl[g->ninl++] = st[q]->name;
                    continue;
                }
                bool prod = gemm_product(st[q], &b, &pk) && st[q]->ndim == O->ndim;
                for (int d = 0; prod && d < O->ndim; d++)
                    prod = st[q]->shape[d] == O->shape[d];
                if (!prod && reads_product(g, st[q]))
                    return TERR(sp,
                                "gemm template: stage '%s' after the products is neither "
                                "elementwise nor a product",
                                st[q]->name);
                if (!prod) {
                    /* A stage before the products (a fused group's layer norm feeding the
                     * matmul): computed whole at the root, as its own kernel would. */
                    if (!add_prologue(gd, st[q]))
                        return TERR(sp,
                                    "gemm template: stage '%s' before the products is a "
                                    "product or one too many",
                                    st[q]->name);
                    continue;
                }
                if (g->nprod == 4)
                    return TERR(sp, "gemm template: more than four products in '%s'", O->name);
                g->batch = b;
                g->packable[g->nprod] = pk;
                g->prod_t[g->nprod] = st[q];
                g->prod[g->nprod++] = st[q]->name;
                R0 = st[q];
            }
            if (!g->nprod)
                return TERR(sp, "gemm template: '%s' reads no product", O->name);
        }
        if (o == 0) {
            M = R0->shape[R0->ndim - 2];
            N = R0->shape[R0->ndim - 1];
            K = R0->body->u.red.axes[0]->u.var.extent;
        }
    }
    sp->tdata = gd;
    int V = sp->lanes;
    int64_t v[TE__MAX_KVALS];
    static const int64_t mrs[] = {1, 2, 3, 4, 6, 8};
    int nm = filter_le(mrs, 6, M, M, v);
    if (M <= 16 && v[nm - 1] < M)
        v[nm++] = M; /* skinny: every row under one load of B */
    knob(sp, "mr", nm, v);
    /* A view's packed read is never packed again (its panels are contiguous already). */
    for (int o = 0; o < gd->nout; o++)
        for (int q = 0; q < 4; q++)
            for (int w = 0; gd->o[o].packable[q] && w < gd->nview; w++)
                if (!strcmp(gd->o[o].packable[q]->name, gd->view[w]))
                    gd->o[o].packable[q] = NULL;
    int64_t nrs[4] = {V, 2 * V, 3 * V, 4 * V};
    int nnr = 4;
    if (gd->panel) {
        /* Tiles inside one panel: nr divides the panel width, so that a tile's columns are
         * contiguous in it (j / nb is the same for all its lanes). */
        nnr = 0;
        for (int q = 0; q < 4; q++)
            if (gd->panel % ((q + 1) * V) == 0)
                nrs[nnr++] = (q + 1) * V;
        if (!nnr)
            return TERR(sp,
                        "gemm template: packed panels of %lld columns, narrower than a "
                        "vector",
                        (long long)gd->panel);
    }
    int nn = N < V ? 0 : filter_le(nrs, nnr, (N + V - 1) / V * V, V, v);
    if (!nn) {
        v[0] = N;
        nn = 1;
    }
    knob(sp, "nr", nn, v);
    static const int64_t kus[] = {1, 2, 4, 8};
    knob(sp, "ku", filter_le(kus, 4, K, 1, v), v);
    bool any_pack = false;
    for (int o = 0; o < gd->nout; o++)
        for (int q = 0; q < (gd->o[o].role_a ? 1 : gd->o[o].nprod); q++)
            any_pack |= gd->o[o].packable[q] != NULL;
    if (M <= 16)
        /* Skinny: B is read once, so no packing; column panels outside, so the parallel loop
         * runs over blocks of n (rows outside would parallelize a loop of one or two tiles).
         * Order 3 streams the rows of B instead: k outside a block of 32 nr columns whose
         * partial sums stay in L1, so every k reads a contiguous row segment of B (a register
         * tile's column panel reads B a row apart at every step). */
        knob(sp, "order", 2, (int64_t[]){0, 3});
    else if (any_pack)
        knob(sp, "order", 3, (int64_t[]){0, 1, 2});
    else
        knob(sp, "order", 2, (int64_t[]){0, 2});
    if (sp->target.num_cores > 1 && (M > 1 || N > V))
        knob(sp, "par", 2, (int64_t[]){1, 2});
    else
        knob(sp, "par", 1, (int64_t[]){0});
    return TE_OK;
}

int te__parallel(te_stage *st, te_iter *x)
{
    if (x && te_iter_extent(x) <= 1)
        return TE_OK;
    return te_parallel(st, x);
}

/* The register tile of product stage `ps` computed at loop `at` of T. */
static int gemm_tile(te__gen *g, te_stage *ps, te_stage *T, te_iter *at, int64_t mr, int64_t nr,
                     int64_t ku, te_tensor *pack, te_iter *pack_at)
{
    if (!TE__OK(g, te_compute_at(ps, T, at)))
        return g->err;
    te_schedule *s = g->s;
    if (pack && pack_at) {
        te_tensor *P = te_cache_read(s, pack, TE_SCOPE_GLOBAL, 1, &ps);
        if (!P)
            return te__gen_fail(g,
                                te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
        te_stage *pst = te_schedule_stage(s, P);
        if (!TE__OK(g, te_compute_at(pst, T, pack_at)))
            return g->err;
        int nd = te_tensor_ndim(P);
        te_iter *pj = te_stage_axis(pst, nd - 1), *pjo, *pji;
        if (!TE__OK(g, te_split(pst, pj, nr, &pjo, &pji)) || !TE__OK(g, te_vectorize(pst, pji)))
            return g->err;
    }
    int nd = te_tensor_ndim(te_stage_tensor(ps));
    te_iter *i = te_stage_axis(ps, nd - 2), *j = te_stage_axis(ps, nd - 1);
    te_iter *k = te_stage_reduce_axis(ps, 0);
    te_iter *io, *ii, *jo, *ji, *ko = k, *ki = NULL;
    if (!TE__OK(g, te_split(ps, i, mr, &io, &ii)) || !TE__OK(g, te_split(ps, j, nr, &jo, &ji)))
        return g->err;
    if (ku > 1 && !TE__OK(g, te_split(ps, k, ku, &ko, &ki)))
        return g->err;
    te_iter *order[5] = {io, jo, ko, ki, ii};
    int n = 0;
    te_iter *ord[6];
    for (int q = 0; q < 5; q++)
        if (order[q])
            ord[n++] = order[q];
    ord[n++] = ji;
    if (!TE__OK(g, te_reorder(ps, n, ord)))
        return g->err;
    if (ki && !TE__OK(g, te_unroll(ps, ki)))
        return g->err;
    if (!TE__OK(g, te_unroll(ps, ii)) || !TE__OK(g, te_vectorize(ps, ji)))
        return g->err;
    return TE_OK;
}

/* Order 3 (skinny products, B [k][n]): the product `ps` computed at T's loop `at` (one block
 * of columns), its loops (ko, i, jo, ki, ji): k split by ku and unrolled inside the column
 * vectors jo (a load and a store of each partial sum per ku multiply-adds, ku rows of B
 * streamed at once), ji vectorized. */
static int gemm_rows_streamed(te__gen *g, te_stage *ps, te_stage *T, te_iter *at, int64_t ku)
{
    if (!TE__OK(g, te_compute_at(ps, T, at)))
        return g->err;
    int nd = te_tensor_ndim(te_stage_tensor(ps));
    te_iter *i = te_stage_axis(ps, nd - 2), *j = te_stage_axis(ps, nd - 1);
    te_iter *k = te_stage_reduce_axis(ps, 0), *ko = k, *ki = NULL, *jo, *ji;
    if (!TE__OK(g, te_split(ps, j, g->sp->lanes, &jo, &ji)))
        return g->err;
    if (ku > 1 && !TE__OK(g, te_split(ps, k, ku, &ko, &ki)))
        return g->err;
    te_iter *ord[5] = {ko, i, jo, ki, ji};
    int n = 0;
    te_iter *o2[5];
    for (int q = 0; q < 5; q++)
        if (ord[q])
            o2[n++] = ord[q];
    if (!TE__OK(g, te_reorder(ps, n, o2)) || (ki && !TE__OK(g, te_unroll(ps, ki))) ||
        !TE__OK(g, te_vectorize(ps, ji)))
        return g->err;
    return TE_OK;
}

static int gemm_apply(te__gen *g)
{
    te_space *sp = g->sp;
    gemm_data *gd = sp->tdata;
    int64_t mr = te__knob_val(g, 0), nr = te__knob_val(g, 1), ku = te__knob_val(g, 2);
    int64_t order = te__knob_val(g, 3), par = te__knob_val(g, 4);
    te_schedule *s = g->s;
    for (int q = 0; q < gd->nview; q++) {
        te_stage *w = te_schedule_stage_by_name(s, gd->view[q]);
        if (!w || !TE__OK(g, te_compute_inline(w)))
            return w ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    }
    for (int q = 0; q < gd->npro; q++) {
        /* A prologue stage stays at the root; its rows run in parallel with the products'. */
        te_stage *P = te_schedule_stage_by_name(s, gd->pro[q]);
        if (!P)
            return te__gen_fail(g, TE_ERR_SCHEDULE);
        if (par && te_tensor_ndim(te_stage_tensor(P)) > 0 &&
            !TE__OK(g, te__parallel(P, te_stage_axis(P, 0))))
            return g->err;
    }
    for (int o = 0; o < gd->nout; o++) {
        gemm_out *go = &gd->o[o];
        for (int q = 0; q < go->ninl; q++) {
            bool done = false; /* a step shared with an earlier output is inlined once */
            for (int p = 0; p < o; p++)
                for (int r = 0; r < gd->o[p].ninl; r++)
                    done |= !strcmp(gd->o[p].inl[r], go->inl[q]);
            if (done)
                continue;
            te_stage *e = te_schedule_stage_by_name(s, go->inl[q]);
            if (!e || !TE__OK(g, te_compute_inline(e)))
                return e ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        }
        te_stage *T = te_schedule_stage_by_name(s, go->out);
        te_stage *ps[4];
        te_tensor *pk[4];
        int np = 0;
        if (go->role_a) {
            te_tensor *L = te_cache_write(s, te_stage_tensor(T), TE_SCOPE_LOCAL);
            if (!L)
                return te__gen_fail(g, TE_ERR_SCHEDULE);
            ps[np] = te_schedule_stage(s, L);
            pk[np++] = go->packable[0];
        } else {
            for (int q = 0; q < go->nprod; q++) {
                ps[np] = te_schedule_stage_by_name(s, go->prod[q]);
                pk[np++] = go->packable[q];
            }
        }
        int nd = te_tensor_ndim(te_stage_tensor(T));
        te_iter *io, *jo, *ii, *ji;
        if (order == 3) {
            /* Rows of B streamed: every row of the output, blocks of 32 nr columns. */
            int64_t M = te_tensor_shape(te_stage_tensor(T))[nd - 2];
            int64_t N = te_tensor_shape(te_stage_tensor(T))[nd - 1], nb = 32 * nr;
            if (nb > N)
                nb = N;
            te_iter *jvo, *jvi;
            if (!TE__OK(g, te_tile(T, te_stage_axis(T, nd - 2), te_stage_axis(T, nd - 1), M, nb,
                                   &io, &jo, &ii, &ji)) ||
                !TE__OK(g, te_reorder(T, 2, (te_iter *[]){jo, io})) ||
                (par && !TE__OK(g, te__parallel(T, jo))) ||
                !TE__OK(g, te_split(T, ji, g->sp->lanes, &jvo, &jvi)) ||
                !TE__OK(g, te_vectorize(T, jvi)))
                return g->err;
            for (int q = 0; q < np; q++) {
                int rc = gemm_rows_streamed(g, ps[q], T, io, ku);
                if (rc)
                    return rc;
            }
            continue;
        }
        if (!TE__OK(g, te_tile(T, te_stage_axis(T, nd - 2), te_stage_axis(T, nd - 1), mr, nr, &io,
                               &jo, &ii, &ji)))
            return g->err;
        bool panels = order != 2;
        te_iter *outer = panels ? jo : io, *inner = panels ? io : jo;
        if (panels && !TE__OK(g, te_reorder(T, 2, (te_iter *[]){jo, io})))
            return g->err;
        te_iter *b = go->batch ? te_stage_axis(T, 0) : NULL;
        te_iter *at = inner, *pack_at = order == 1 ? outer : NULL;
        if (par == 1) {
            if (!TE__OK(g, te__parallel(T, b ? b : outer)))
                return g->err;
        } else if (par == 2) {
            te_iter *f;
            if (b) {
                if (!TE__OK(g, te_fuse(T, b, outer, &f)) || !TE__OK(g, te__parallel(T, f)))
                    return g->err;
                if (pack_at)
                    pack_at = f;
            } else if (pack_at) {
                /* Fusing would pack per tile: keep the panel loop. */
                if (!TE__OK(g, te__parallel(T, outer)))
                    return g->err;
            } else {
                if (!TE__OK(g, te_fuse(T, outer, inner, &f)) || !TE__OK(g, te__parallel(T, f)))
                    return g->err;
                at = f;
            }
        }
        if (!TE__OK(g, te_unroll(T, ii)) || !TE__OK(g, te_vectorize(T, ji)))
            return g->err;
        for (int q = 0; q < np; q++) {
            int rc = gemm_tile(g, ps[q], T, at, mr, nr, ku, pk[q], pack_at);
            if (rc)
                return rc;
        }
    }
    return TE_OK;
}

/* ---- rowop -------------------------------------------------------------------------------- */

typedef struct row_data {
    const char *out;
    int nst;
    const char *st[16];
    bool red[16];
    int64_t last[16]; /* last extent of each producer */
    int64_t rext[16]; /* extent of the reduction axis (one-axis reductions), else 0 */
    bool has_elem;
} row_data;

static int row_init(te_space *sp)
{
    if (sp->n_out != 1)
        return TERR(sp, "rowop template: one output expected");
    te_tensor *O = sp->outs[0];
    if (is_reduce(O) || O->ndim < 2)
        return TERR(sp, "rowop template: output '%s' must be elementwise of rank >= 2", O->name);
    row_data *rd = te__alloc(sp->ctx, sizeof *rd);
    if (!rd)
        return TE_ERR_NOMEM;
    te_tensor *st[32];
    int ns = stages_of(O, st, 32);
    if (ns < 0 || ns > 16)
        return TERR(sp, "rowop template: too many stages");
    bool any_red = false;
    rd->out = O->name;
    for (int q = 0; q < ns; q++) {
        if (st[q] == O)
            continue;
        if (st[q]->ndim != O->ndim)
            return TERR(sp, "rowop template: stage '%s' has another rank", st[q]->name);
        for (int d = 0; d + 1 < O->ndim; d++)
            if (st[q]->shape[d] != O->shape[d])
                return TERR(sp, "rowop template: stage '%s' has other rows", st[q]->name);
        rd->red[rd->nst] = is_reduce(st[q]);
        any_red |= rd->red[rd->nst];
        rd->has_elem |= !rd->red[rd->nst];
        rd->last[rd->nst] = st[q]->shape[st[q]->ndim - 1];
        if (rd->red[rd->nst] && st[q]->body->u.red.n == 1)
            rd->rext[rd->nst] = st[q]->body->u.red.axes[0]->u.var.extent;
        rd->st[rd->nst++] = st[q]->name;
    }
    if (!any_red)
        return TERR(sp, "rowop template: no row reduction");
    sp->tdata = rd;
    int V = sp->lanes;
    int64_t N = O->shape[O->ndim - 1], v[TE__MAX_KVALS];
    int64_t vs[4] = {V / 2 > 0 ? V / 2 : 1, V, 2 * V, 4 * V};
    knob(sp, "vec", filter_le(vs, 4, N, N, v), v);
    if (rd->has_elem)
        knob(sp, "inline", 2, (int64_t[]){0, 1});
    else
        knob(sp, "inline", 1, (int64_t[]){0});
    knob(sp, "nt", 2, (int64_t[]){0, 1});
    /* rf: partial results of the row reductions in rf vectors of lanes (rfactor), 0 for none.
     * More than one vector breaks the chain of dependent adds (4 cycles each): with one, the
     * Kahan-compensated mean of layer norm is latency-bound, not memory-bound. A Kahan step is
     * a chain of four dependent operations (16 cycles), so four vectors still wait on it: eight
     * took layer norm over 4096 x 4096 from 0.62-0.68 to 0.71-0.78 of the streaming copy on a
     * Xeon (two cores). */
    int64_t rext = 0, rfs[5] = {0, 1, 2, 4, 8};
    for (int q = 0; q < rd->nst; q++)
        rext = rd->rext[q] > rext ? rd->rext[q] : rext;
    int nrf = 1;
    while (nrf < 5 && rext >= 2 * V * rfs[nrf])
        nrf++;
    knob(sp, "rf", nrf, rfs);
    /* Prefetch of the next row (te_prefetch_level) from the last pass over a row before the
     * output, into L2 (2) or L1 (1), or none (0): first where the input is larger than a private
     * L2 (it streams from memory), else last. Measured with the bench's schedule, 4096 x 4096
     * on one core: softmax 0.56 -> 0.72-0.79 of memcpy, layer norm 0.58 -> 0.60-0.71 (into L1);
     * into L2, where it does not evict the row a pass works on, layer norm gained another
     * 6-10% (Xeon with AMX, 48 KiB L1). */
    double in_bytes = 0;
    for (int i = 0; i < sp->n_in; i++)
        in_bytes += (double)te_tensor_numel(sp->ins[i]) * (double)te_dtype_size(sp->ins[i]->dtype);
    /* 3 and 4: L1 and L2 from the output pass (row_prefetch's out_first), offered where the
     * output pass reads an input (layer norm; softmax's reads only the exponentials). */
    bool rows = O->shape[0] > 1, out_reads = false;
    for (int i = 0; i < sp->n_in; i++)
        out_reads |= O->body && te__expr_reads(O->body, sp->ins[i]);
    if (rows && in_bytes > 1024.0 * 1024.0 && out_reads)
        knob(sp, "pf", 5, (int64_t[]){4, 2, 1, 0, 3});
    else if (rows && in_bytes > 1024.0 * 1024.0)
        knob(sp, "pf", 3, (int64_t[]){2, 1, 0});
    else if (rows)
        knob(sp, "pf", out_reads ? 5 : 3, (int64_t[]){0, 2, 1, 4, 3});
    else
        knob(sp, "pf", 1, (int64_t[]){0});
    /* pipe: each row's output stores overlap the next row's first pass instead of draining
     * alone at the end of the row (te_pipeline): softmax 4096 x 4096 went from 0.75-0.80 to
     * 0.84-0.89 of the streaming copy stand-alone on a Xeon. It needs rows to chunk and the
     * first reduction's steps to match the output's (rf of two vectors or more). */
    int64_t R = 1;
    for (int d = 0; d + 1 < O->ndim; d++)
        R *= O->shape[d];
    bool pipe = R >= 8 && nrf >= 3 && N % (2 * V) == 0;
    knob(sp, "pipe", pipe ? 2 : 1, (int64_t[]){0, 1});
    /* pfr: the reductions' passes prefetch too (stats_prefetch), where rows stream from memory
     * and a row prefetch is offered. Without it, memory idles while a row's statistics are
     * computed from the cache. The bench's schedules, generated kernels side by side on one
     * core of a Xeon: the Welford layer norm over 4096 x 4096 0.82-0.85 -> 0.86-0.88 of the
     * streaming copy, the Kahan one within noise, the pipelined softmax slower (0.89 -> 0.65-
     * 0.82): so a knob, measured per workload. */
    knob(sp, "pfr", rows && in_bytes > 1024.0 * 1024.0 ? 2 : 1, (int64_t[]){0, 1});
    return TE_OK;
}

/* Fuses the leading n loops of T (its first axes); returns the fused loop. */
static te_iter *fuse_leading(te__gen *g, te_stage *T, int n)
{
    te_iter *f = te_stage_axis(T, 0);
    for (int d = 1; d < n && f; d++) {
        te_iter *nf;
        if (!TE__OK(g, te_fuse(T, f, te_stage_axis(T, d), &nf)))
            return NULL;
        f = nf;
    }
    return f;
}

/* The next row of an input, prefetched into cache `level` from the last stage that reads one,
 * at its innermost loop that is not vectorized (so the prefetches overlap that pass's work):
 * with out_first, T itself when it reads an input (layer norm's output pass: the next row's
 * reads then overlap this row's streaming stores, which otherwise drain alone; 12.3 -> 13.7
 * GB/s on one core of a Xeon), else the last stage before T. A stage that cannot take it (a
 * loop too short, no input read) is passed over; nothing is prefetched when none can. */
static void row_prefetch(te__gen *g, te_stage *T, te_iter *row, int level, bool out_first)
{
    int n = te_schedule_nstages(g->s);
    for (int q = out_first ? n : n - 1; q >= -1; q--) {
        te_stage *P = q == n || q < 0 ? T : te_schedule_stage_at(g->s, q);
        if (q >= 0 && q < n && (P == T || P->attach != TE_ATTACH_AT || P->attach_iter != row))
            continue;
        if (q < 0 && out_first)
            break; /* T was tried first */
        int nl = te_stage_nleaves(P);
        te_iter *at = nl >= 2 ? te_stage_leaf(P, nl - 2) : NULL;
        for (int i = 0; at && at != row && i < g->sp->n_in; i++) {
            if (te_prefetch_level(P, at, g->sp->ins[i], row, 1, level) == TE_OK)
                return;
            te_ctx_clear_error(g->ctx);
        }
    }
}

/* A share of the next rows prefetched into L2 from the row reductions' passes over the input:
 * one cache line per step of the outer reduction loop of each stage of partial results at least
 * a line wide (a reduction rfactored into vectors: each step covers several lines), the first
 * such stage's from the next row, the second's from the row after, and so on, so that no two passes
 * fetch the same lines. The output pass prefetches the rest (row_prefetch); between them memory
 * stays busy while a row's statistics are computed from the cache, which otherwise is time the
 * memory idles. */
static void stats_prefetch(te__gen *g, te_iter *row)
{
    int64_t dist = 1;
    for (int q = 0; q < te_schedule_nstages(g->s); q++) {
        te_stage *P = te_schedule_stage_at(g->s, q);
        const te_tensor *pt = te_stage_tensor(P);
        int nd = te_tensor_ndim(pt);
        if (P->attach != TE_ATTACH_AT || P->attach_iter != row || te_stage_nreduce(P) == 0 ||
            te_tensor_shape(pt)[nd - 1] * (int64_t)te_dtype_size(te_tensor_dtype(pt)) < 64)
            continue; /* not a stage of partial results a cache line wide or more */
        for (int i = 0; i < g->sp->n_in; i++) {
            if (te_prefetch_lines(P, te_stage_reduce_axis(P, 0), g->sp->ins[i], row, dist, 2, 1) ==
                TE_OK) {
                dist++;
                break;
            }
            te_ctx_clear_error(g->ctx);
        }
    }
}

/* The reduction of P split by `width` and its inner part rfactored: a stage of `width` partial
 * results (its last axis, vectorized), reduced over the outer part. NULL with g's error. */
static te_stage *rf_lanes(te__gen *g, te_stage *P, int64_t width)
{
    te_stage *sr = te__split_rfactor(g, P, width, false);
    if (!sr)
        return NULL;
    te_iter *lane = te_stage_axis(sr, te_tensor_ndim(te_stage_tensor(sr)) - 1);
    if (!TE__OK(g, te_reorder(sr, 2, (te_iter *[]){te_stage_reduce_axis(sr, 0), lane})))
        return NULL;
    if (width > 64) {
        /* wider than one vector loop can be: 64-lane parts, unrolled */
        te_iter *lo, *li;
        if (!TE__OK(g, te_split(sr, lane, 64, &lo, &li)) || !TE__OK(g, te_unroll(sr, lo)))
            return NULL;
        lane = li;
    }
    if (!TE__OK(g, te_vectorize(sr, lane)))
        return NULL;
    return sr;
}

/* The width of the partial results of row reduction q (rf vectors, halved while the row has
 * fewer than two steps of it), 0 where it is not rfactored. */
static int64_t row_rf_width(const row_data *rd, int q, int64_t rf, int lanes)
{
    if (!rf || !rd->red[q] || rd->rext[q] < 2 * lanes)
        return 0;
    int64_t width = lanes * rf; /* at least two steps per partial result */
    while (width > lanes && rd->rext[q] < 2 * width)
        width /= 2;
    return width;
}

static int row_apply(te__gen *g)
{
    row_data *rd = g->sp->tdata;
    int64_t vec = te__knob_val(g, 0), inl = te__knob_val(g, 1), nt = te__knob_val(g, 2);
    int64_t rf = te__knob_val(g, 3), pipe = te__knob_val(g, 5);
    int lanes = g->sp->lanes;
    te_stage *T = te_schedule_stage_by_name(g->s, rd->out);
    const te_tensor *O = te_stage_tensor(T);
    int nd = te_tensor_ndim(O);
    int64_t N = te_tensor_shape(O)[nd - 1], R = 1, first_w = 0;
    for (int d = 0; d + 1 < nd; d++)
        R *= te_tensor_shape(O)[d];
    for (int q = 0; q < rd->nst && !first_w; q++)
        first_w = row_rf_width(rd, q, rf, lanes);
    /* Pipelined (te_pipeline below): rows in chunks (at least 4 per core, at most 64 rows
     * each), the chunks in parallel, the output's columns in steps of the first reduction's
     * width so that its loop fuses with that reduction's. */
    pipe = pipe && first_w > vec && first_w % vec == 0 && N % first_w == 0;
    te_iter *row = fuse_leading(g, T, nd - 1), *jo, *ji, *chunk = NULL;
    if (!row)
        return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    if (pipe) {
        int64_t ch = 64, cores = g->sp->target.num_cores > 1 ? g->sp->target.num_cores : 1;
        while (ch > 2 && R / ch < 4 * cores)
            ch /= 2;
        te_iter *jm;
        if (!TE__OK(g, te_split(T, row, ch, &chunk, &row)) ||
            !TE__OK(g, te_split(T, te_stage_axis(T, nd - 1), first_w, &jo, &jm)) ||
            !TE__OK(g, te_split(T, jm, vec, &jm, &ji)) || !TE__OK(g, te_unroll(T, jm)))
            return g->err;
    } else if (!TE__OK(g, te_split(T, te_stage_axis(T, nd - 1), vec, &jo, &ji))) {
        return g->err;
    }
    if (!TE__OK(g, te_vectorize(T, ji)))
        return g->err;
    if (g->sp->target.num_cores > 1 && !TE__OK(g, te__parallel(T, chunk ? chunk : row)))
        return g->err;
    if (nt && !TE__OK(g, te_stage_nontemporal(T, true)))
        return g->err;
    /* Row reductions: partial results across the vector lanes (rfactor), reduced lane-wise. */
    te_stage *first_rf = NULL;
    for (int q = 0; q < rd->nst; q++) {
        int64_t width = row_rf_width(rd, q, rf, lanes);
        if (!width)
            continue;
        te_stage *P = te_schedule_stage_by_name(g->s, rd->st[q]);
        te_stage *sr = rf_lanes(g, P, width);
        if (!sr)
            return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        first_rf = first_rf ? first_rf : sr;
        if (width != lanes) {
            /* Several vectors of partial results fold lane-wise first (a second rfactor), then
             * the lanes of one: folding all of them one after the other is a chain of
             * dependent steps as long as the pass (4 operations a step for the Kahan pairs of
             * layer norm). */
            te_stage *s2 = rf_lanes(g, P, lanes);
            if (!s2 || !TE__OK(g, te_reduce_tree(s2, te_stage_reduce_axis(s2, 0))))
                return g->err ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        }
        /* The lanes fold as a tree: log2(lanes) + 1 dependent steps instead of lanes. */
        if (!TE__OK(g, te_reduce_tree(P, te_stage_reduce_axis(P, 0))))
            return g->err;
    }
    /* Every producer inside the row loop, consumers first (rfactor stages included). */
    for (int q = te_schedule_nstages(g->s) - 1; q >= 0; q--) {
        te_stage *P = te_schedule_stage_at(g->s, q);
        if (P == T)
            continue;
        bool red = te_stage_nreduce(P) > 0;
        if (!red && inl) {
            if (!TE__OK(g, te_compute_inline(P)))
                return g->err;
            continue;
        }
        if (!TE__OK(g, te_compute_at(P, T, row)))
            return g->err;
        te_tensor *pt = te_stage_tensor(P);
        if (!red && te_tensor_ndim(pt) == nd && te_tensor_shape(pt)[nd - 1] > 1) {
            te_iter *a, *b;
            if (!TE__OK(g, te_split(P, te_stage_axis(P, nd - 1), vec, &a, &b)) ||
                !TE__OK(g, te_vectorize(P, b)))
                return g->err;
        }
    }
    if (pipe && !TE__OK(g, te_pipeline(T, row, first_rf)))
        return g->err;
    int64_t pf = te__knob_val(g, 4);
    if (pf)
        row_prefetch(g, T, row, (int)(pf > 2 ? pf - 2 : pf), pf > 2);
    if (pf && te__knob_val(g, 6))
        stats_prefetch(g, row);
    return TE_OK;
}

/* ---- eltwise ------------------------------------------------------------------------------ */

static int elt_init(te_space *sp)
{
    if (sp->n_out != 1)
        return TERR(sp, "eltwise template: one output expected");
    te_tensor *O = sp->outs[0], *st[32];
    int ns = stages_of(O, st, 32);
    if (ns < 0)
        return TERR(sp, "eltwise template: too many stages");
    for (int q = 0; q < ns; q++)
        if (is_reduce(st[q]))
            return TERR(sp, "eltwise template: stage '%s' is a reduction", st[q]->name);
    int V = sp->lanes;
    int64_t N = O->shape[O->ndim - 1], v[TE__MAX_KVALS];
    int64_t vs[4] = {V / 2 > 0 ? V / 2 : 1, V, 2 * V, 4 * V};
    knob(sp, "vec", filter_le(vs, 4, N, N, v), v);
    if (sp->target.num_cores > 1)
        knob(sp, "par", 2, (int64_t[]){1, 2});
    else
        knob(sp, "par", 1, (int64_t[]){0});
    knob(sp, "unroll", 2, (int64_t[]){0, 16});
    knob(sp, "nt", 2, (int64_t[]){0, 1});
    return TE_OK;
}

static int elt_apply(te__gen *g)
{
    te_space *sp = g->sp;
    int64_t vec = te__knob_val(g, 0), par = te__knob_val(g, 1), unr = te__knob_val(g, 2);
    int64_t nt = te__knob_val(g, 3);
    te_stage *T = te_schedule_stage(g->s, sp->outs[0]);
    for (int q = te_schedule_nstages(g->s) - 1; q >= 0; q--) {
        te_stage *P = te_schedule_stage_at(g->s, q);
        if (P != T && !TE__OK(g, te_compute_inline(P)))
            return g->err;
    }
    int nd = te_tensor_ndim(te_stage_tensor(T));
    te_iter *row = nd > 1 ? fuse_leading(g, T, nd - 1) : NULL, *jo, *ji;
    if (g->err)
        return g->err;
    if (!TE__OK(g, te_split(T, te_stage_axis(T, nd - 1), vec, &jo, &ji)) ||
        !TE__OK(g, te_vectorize(T, ji)))
        return g->err;
    if (par == 2 && row) {
        te_iter *f;
        if (!TE__OK(g, te_fuse(T, row, jo, &f)) || !TE__OK(g, te__parallel(T, f)))
            return g->err;
    } else if (par >= 1) {
        if (!TE__OK(g, te__parallel(T, row ? row : jo)))
            return g->err;
    }
    if (unr && !TE__OK(g, te_pragma_unroll_max(T, (int)unr)))
        return g->err;
    if (nt && !TE__OK(g, te_stage_nontemporal(T, true)))
        return g->err;
    return TE_OK;
}

/* ---- Shared helpers ------------------------------------------------------------------------ */

void te__knob_add(te_space *sp, const char *name, int n, const int64_t *v)
{
    if (sp->nknobs >= TE__MAX_KNOBS)
        return;
    te__knob *k = &sp->knobs[sp->nknobs++];
    k->name = name;
    k->n = n > TE__MAX_KVALS ? TE__MAX_KVALS : n < 1 ? 1 : n;
    if (n < 1)
        k->v[0] = 0;
    else
        memcpy(k->v, v, sizeof(int64_t) * (size_t)k->n);
}

int te__filter_le(const int64_t *cand, int n, int64_t limit, int64_t fallback, int64_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (cand[i] <= limit)
            out[k++] = cand[i];
    if (!k)
        out[k++] = fallback;
    return k;
}

/* ---- Registry ----------------------------------------------------------------------------- */

static const te__template t_gemm = {"gemm", gemm_init, gemm_apply, false};
static const te__template t_row = {"rowop", row_init, row_apply, false};
static const te__template t_elt = {"eltwise", elt_init, elt_apply, false};
extern const te__template te__t_conv;
extern const te__template te__t_attention;
extern const te__template te__t_tensorize;

int te__templates_by_structure(const te__template **out, int cap)
{
    const te__template *all[] = {&te__t_attention, &te__t_tensorize, &t_gemm, &te__t_conv};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < cap; i++)
        out[n++] = all[i];
    return n;
}

const te__template *te__template_for(const char *op)
{
    static const struct {
        const char *op;
        const te__template *t;
    } table[] = {
        {"matmul", &t_gemm},
        {"batch_matmul", &t_gemm},
        {"dense_bias", &t_gemm},
        {"matmul_bias_act", &t_gemm},
        {"mlp_gate", &t_gemm},
        {"qkv_projection", &t_gemm},
        {"matmul_vnni", &te__t_tensorize},
        {"conv2d_vnni", &te__t_tensorize},
        {"attention", &te__t_attention},
        {"softmax", &t_row},
        {"layer_norm", &t_row},
        {"rms_norm", &t_row},
        {"conv2d", &te__t_conv},
        {"conv2d_bn_relu", &te__t_conv},
        {"depthwise_conv2d", &te__t_conv},
        {"relu", &t_elt},
        {"gelu", &t_elt},
        {"gelu_tanh", &t_elt},
        {"silu", &t_elt},
        {"sigmoid", &t_elt},
        {"tanh", &t_elt},
        {"add", &t_elt},
        {"sub", &t_elt},
        {"mul", &t_elt},
        {"div", &t_elt},
        {"minimum", &t_elt},
        {"maximum", &t_elt},
        {"transpose", &t_elt},
        {"pad", &t_elt},
        {"elementwise", &t_elt},
    };
    for (size_t i = 0; op && i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].op, op))
            return table[i].t;
    return NULL;
}
