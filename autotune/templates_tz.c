/*
 * autotune/templates_tz.c: the tensorize template: products that a tensor intrinsic of the
 * target computes (tessera/tensorize.h: AMX tiles, AVX-512 BF16 / VNNI micro-kernels, user
 * intrinsics), with an optional elementwise epilogue (te_op_matmul_vnni, a bf16 MLP gate).
 *
 * init tries every registered intrinsic the target supports on a trial schedule (the
 * product's last two axes split by the intrinsic's tile, the reduction inside, te_tensorize
 * _check), so that every configuration's intrinsic matches. Knobs:
 *   intrin  the matching intrinsics (by index into the template's list; the tile size)
 *   order   0: row tiles outside, column tiles inside; 1: column tiles outside
 *   kc      0: the whole reduction in one call (the accumulators stay in the intrinsic's
 *           registers, the output is written once: the overwrite form); else the variable
 *           axis split by kc. For a product that is the output, the k blocks go outside the
 *           two tile loops (inside the column block and the parallel loop), so that a block
 *           of a row panel stays in L1 while the column tiles go by; each tile's call in the
 *           first block writes its output, the others accumulate (schedule/lower.c). Under an
 *           epilogue the k blocks stay inside the tile.
 *   par     0 serial, 1 the outer tile loop parallel, 2 the two outer loops fused, parallel,
 *           3 a band of row tiles per thread outermost (each thread sweeps every column
 *           block over its own rows: its rows of A stay in its L2)
 *   nc      0, or column blocks of nc (256, 512): loops (block, rows, columns in the block), so
 *           that a block of the packed weights stays in L2 while the row tiles go by
 * A product that is the output is tiled itself; products under an elementwise epilogue are
 * computed at the epilogue's inner tile loop (a tile-sized buffer each), the epilogue's
 * elementwise steps inlined and its columns vectorized. Other stages (a cast of the input) stay
 * at the root, rows in parallel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/ops.h"
#include "tessera/tensorize.h"

#define TERR(sp, ...) te_ctx_set_error((sp)->ctx, TE_ERR_UNSUPPORTED, __VA_ARGS__)
#define TZ_MAX_CAND TE__MAX_KVALS

typedef struct tz_data {
    const char *out;
    bool role_a; /* the output is the product */
    int nprod;
    const char *prod[4];
    int ninl;
    const char *inl[8]; /* elementwise steps between the products and the output */
    bool tile[8];       /* inl[q] is read more than once by a reader: a tile buffer, not inlined */
    int npro;
    const char *pro[8]; /* stages before the products: root */
    int ncand;
    const te_tensor_intrin *cand[TZ_MAX_CAND];
    int64_t tm[TZ_MAX_CAND], tn[TZ_MAX_CAND];
    int var_red;    /* index of the products' reduction axis the intrinsics vary, -1 none */
    int64_t kvar;   /* its extent */
    int nouter_red; /* the products' leading reduction axes, outside the intrinsic's nest */
} tz_data;

static bool is_reduce(const te_tensor *t)
{
    return t->kind == TE_T_COMPUTE && t->body->kind == TE_E_REDUCE;
}

/* The intrinsic's tile (its output's extents) and the extent of its variable axis. */
static void intrin_tile(const te_tensor_intrin *in, int64_t *tm, int64_t *tn)
{
    te_tensor *o = te_tensor_intrin_output(in);
    int nd = te_tensor_ndim(o);
    const int64_t *sh = te_tensor_shape(o);
    *tm = nd >= 2 ? sh[nd - 2] : 1;
    *tn = nd >= 1 ? sh[nd - 1] : 1;
}

/* Whether `in` computes product P of sp's expression, on a trial schedule: its last two axes
 * split by the tile, the leading ones and the reduction axes beyond the intrinsic's outside,
 * the intrinsic's reduction axes (the last ones) inside. */
static bool trial(te_space *sp, const te_tensor *P, const te_tensor_intrin *in, int64_t tm,
                  int64_t tn)
{
    int nd = P->ndim;
    const te_tensor *o = te_tensor_intrin_output(in);
    int nr = is_reduce(P) ? P->body->u.red.n : 0, ni = te_tensor_intrin_nreduce(in);
    if (nd < 2 || P->shape[nd - 2] % tm || P->shape[nd - 1] % tn || o->dtype != P->dtype ||
        o->body->kind != P->body->kind || nr < ni)
        return false;
    te_schedule *s = te_schedule_create(sp->ctx, sp->n_out, sp->outs);
    te_stage *st = s ? te_schedule_stage(s, P) : NULL;
    if (!st)
        return false;
    te_iter *io, *jo, *ii, *ji;
    if (te_split(st, te_stage_axis(st, nd - 2), tm, &io, &ii) ||
        te_split(st, te_stage_axis(st, nd - 1), tn, &jo, &ji))
        return false;
    te_iter *order[4 + 2 * TE_MAX_DIMS];
    int n = 0;
    for (int a = 0; a < nd - 2; a++)
        order[n++] = te_stage_axis(st, a);
    order[n++] = io, order[n++] = jo;
    for (int r = 0; r < nr - ni; r++)
        order[n++] = te_stage_reduce_axis(st, r);
    order[n++] = ii, order[n++] = ji;
    for (int r = nr - ni; r < nr; r++)
        order[n++] = te_stage_reduce_axis(st, r);
    if (te_reorder(st, n, order))
        return false;
    char why[512];
    int rc = te_tensorize_check(st, ii, in, why, sizeof why);
    if (rc && getenv("TESSERA_DEFAULT_DEBUG"))
        fprintf(stderr, "tz trial %s: %s\n", te_tensor_intrin_name(in), why);
    return rc == TE_OK;
}

typedef struct read_count {
    const te_tensor *t;
    int n;
} read_count;

static bool count_read(const te_expr *e, void *user)
{
    read_count *rc = user;
    if (e->kind == TE_E_READ && e->u.read.t == rc->t)
        rc->n++;
    return true;
}

/* Whether some stage of st[0..ns) reads t more than once in its body: inlining t there
 * would copy its whole expression per read (a requantize rounds its input with several
 * reads of it; two of them in a row made a 25-fold expression). */
static bool read_twice(te_tensor *const *st, int ns, const te_tensor *t)
{
    for (int q = 0; q < ns; q++) {
        read_count rc = {t, 0};
        if (st[q]->body)
            te__expr_visit(st[q]->body, count_read, &rc);
        if (rc.n > 1)
            return true;
    }
    return false;
}

static int tz_init(te_space *sp)
{
    if (sp->n_out != 1)
        return TERR(sp, "tensorize template: one output only");
    tz_data *d = te__alloc(sp->ctx, sizeof *d);
    if (!d)
        return TE_ERR_NOMEM;
    memset(d, 0, sizeof *d);
    te_tensor *O = sp->outs[0];
    d->out = O->name;
    te_tensor *st[64], *prod[4];
    int ns = te_op_stages(O, st, 64);
    if (ns < 0 || ns > 64)
        return TERR(sp, "tensorize template: too many stages");
    if (is_reduce(O)) {
        d->role_a = true;
        prod[d->nprod] = O;
        d->prod[d->nprod++] = O->name;
    }
    for (int q = 0; q < ns; q++) {
        te_tensor *t = st[q];
        if (t == O)
            continue;
        if (is_reduce(t) && !d->role_a) {
            if (d->nprod == 4)
                return TERR(sp, "tensorize template: more than four products");
            prod[d->nprod] = t;
            d->prod[d->nprod++] = t->name;
        } else if (d->nprod && !is_reduce(t) && !d->role_a) {
            if (d->ninl == 8 || t->ndim != O->ndim)
                return TERR(sp, "tensorize template: '%s' is not an elementwise epilogue step",
                            t->name);
            d->tile[d->ninl] = read_twice(st, ns, t);
            d->inl[d->ninl++] = t->name;
        } else if (!is_reduce(t)) {
            if (d->npro == 8)
                return TERR(sp, "tensorize template: too many stages before the products");
            d->pro[d->npro++] = t->name;
        } else {
            return TERR(sp, "tensorize template: reduction '%s' is not a product of the output",
                        t->name);
        }
    }
    if (!d->nprod)
        return TERR(sp, "tensorize template: no product");
    for (int q = 0; q < d->nprod; q++) {
        bool same = prod[q]->ndim == O->ndim && O->ndim >= 2;
        for (int x = 0; same && x < O->ndim; x++)
            same = prod[q]->shape[x] == O->shape[x];
        if (!same)
            return TERR(sp, "tensorize template: the products and the output must have one shape");
    }
    /* Every intrinsic the target has that computes every product. */
    for (int i = 0; i < te_tensor_intrin_count() && d->ncand < TZ_MAX_CAND; i++) {
        const te_tensor_intrin *in = te_tensor_intrin_at(i);
        /* The schedules below are CPU schedules: CUDA intrinsics need warps (bindings). */
        if (te_tensor_intrin_backend(in) != TE_BACKEND_C ||
            !te_tensor_intrin_supported(in, &sp->target))
            continue;
        int64_t tm, tn;
        intrin_tile(in, &tm, &tn);
        bool all = true;
        for (int q = 0; q < d->nprod && all; q++)
            all = trial(sp, prod[q], in, tm, tn);
        if (!all)
            continue;
        d->cand[d->ncand] = in;
        d->tm[d->ncand] = tm;
        d->tn[d->ncand++] = tn;
    }
    te_ctx_clear_error(sp->ctx);
    /* Largest tiles first (the first value is the untuned default when the cost model rates
     * them alike), but a vector micro-kernel's accumulators past 16 of the 32 registers leave
     * too few for the operands: 8x32 before 4x64 (same area, more reuse of B) before 12x32. */
    for (int i = 1; i < d->ncand; i++)
        for (int j = i; j > 0; j--) {
            int64_t a0 = d->tm[j - 1] * d->tn[j - 1], a1 = d->tm[j] * d->tn[j];
            bool amx0 = strncmp(te_tensor_intrin_name(d->cand[j - 1]), "amx", 3) == 0;
            bool amx1 = strncmp(te_tensor_intrin_name(d->cand[j]), "amx", 3) == 0;
            double k0 = amx0 ? 1e9 + a0 : a0 > 256 ? a0 / 4.0 : a0;
            double k1 = amx1 ? 1e9 + a1 : a1 > 256 ? a1 / 4.0 : a1;
            if (k1 < k0 || (k1 == k0 && d->tm[j] <= d->tm[j - 1]))
                break;
            const te_tensor_intrin *ti = d->cand[j];
            int64_t tm = d->tm[j], tn = d->tn[j];
            d->cand[j] = d->cand[j - 1], d->tm[j] = d->tm[j - 1], d->tn[j] = d->tn[j - 1];
            d->cand[j - 1] = ti, d->tm[j - 1] = tm, d->tn[j - 1] = tn;
        }
    if (!d->ncand)
        return TERR(sp, "tensorize template: no tensor intrinsic of the target (%s) computes '%s'",
                    sp->target.isa, d->prod[0]);
    /* The reduction axes the intrinsics take are the product's last ones; the others stay
     * outside the nest (a convolution's ry, rx). The variable one is split by kc. */
    const te_expr *red = prod[0]->body;
    int ni = te_tensor_intrin_nreduce(d->cand[0]), va = te_tensor_intrin_var_axis(d->cand[0]);
    d->nouter_red = red->u.red.n - ni;
    d->var_red = va >= 0 ? d->nouter_red + va : -1;
    d->kvar = va >= 0 ? red->u.red.axes[d->var_red]->u.var.extent : 0;
    sp->tdata = d;
    int64_t v[TE__MAX_KVALS];
    for (int i = 0; i < d->ncand; i++)
        v[i] = i;
    te__knob_add(sp, "intrin", d->ncand, v);
    /* The first value of each knob is the untuned default (the cost model does not see the
     * intrinsic's reuse): when the weights (n x k) outgrow half of L2 and the rows (m x k) are
     * the smaller operand, column tiles outside (each weight panel read once, the rows from
     * L2); 5.6 -> 3 ms on a 128 x 768 x 3072 int8 product. */
    int64_t M = O->shape[O->ndim - 2], N0 = O->shape[O->ndim - 1], K = 1;
    for (int a = 0; a < red->u.red.n; a++)
        K *= red->u.red.axes[a]->u.var.extent;
    bool cols_out = (double)N0 * (double)K > 512.0 * 1024 && M * 4 <= N0;
    te__knob_add(sp, "order", 2, cols_out ? (int64_t[]){1, 0} : (int64_t[]){0, 1});
    int nk = 0;
    v[nk++] = 0;
    static const int64_t kcs[] = {128, 192, 256};
    for (int i = 0; i < 3 && d->var_red >= 0; i++)
        if (kcs[i] < d->kvar && d->kvar % kcs[i] == 0)
            v[nk++] = kcs[i];
    te__knob_add(sp, "kc", nk, v);
    if (sp->target.num_cores > 1)
        te__knob_add(sp, "par", 3, (int64_t[]){1, 2, 3});
    else
        te__knob_add(sp, "par", 1, (int64_t[]){0});
    /* Column blocks (0: none): every candidate tile width divides 256 and 512. */
    int64_t N = O->shape[O->ndim - 1], tnmax = 0;
    for (int i = 0; i < d->ncand; i++)
        tnmax = d->tn[i] > tnmax ? d->tn[i] : tnmax;
    nk = 0;
    v[nk++] = 0;
    static const int64_t ncs[] = {256, 512};
    for (int i = 0; i < 2; i++)
        if (ncs[i] < N && N % ncs[i] == 0 && ncs[i] % tnmax == 0)
            v[nk++] = ncs[i];
    te__knob_add(sp, "nc", nk, v);
    return TE_OK;
}

/* Tensorizes product stage P, whose data-parallel loops are (i, j) (a tile, or the whole
 * stage at its leaves) after the loops `outer`: the leading reduction axes stay outside the
 * nest, the variable axis is split by kc when kc > 0. */
static int tz_product(te__gen *g, te_stage *P, te_iter *i, te_iter *j, const tz_data *d,
                      const te_tensor_intrin *in, int64_t kc, te_iter *const *outer, int nouter,
                      int kat)
{
    te_iter *order[5 + 3 * TE_MAX_DIMS];
    int n = 0;
    te_iter *koi = d->var_red >= 0 ? te_stage_reduce_axis(P, d->var_red) : NULL, *koo = NULL;
    if (kc > 0 && koi && !TE__OK(g, te_split(P, koi, kc, &koo, &koi)))
        return g->err;
    for (int q = 0; q < nouter; q++) {
        if (koo && q == kat)
            order[n++] = koo;
        order[n++] = outer[q];
    }
    for (int r = 0; r < d->nouter_red; r++)
        order[n++] = te_stage_reduce_axis(P, r);
    if (koo && kat >= nouter)
        order[n++] = koo;
    order[n++] = i, order[n++] = j;
    for (int r = d->nouter_red; r < te_stage_nreduce(P); r++)
        order[n++] = r == d->var_red ? koi : te_stage_reduce_axis(P, r);
    if (!TE__OK(g, te_reorder(P, n, order)) || !TE__OK(g, te_tensorize(P, i, in)))
        return g->err;
    return TE_OK;
}

static int tz_apply(te__gen *g)
{
    te_space *sp = g->sp;
    const tz_data *d = sp->tdata;
    int64_t ci = te__knob_val(g, 0), order = te__knob_val(g, 1), kc = te__knob_val(g, 2);
    int64_t par = te__knob_val(g, 3), nc = te__knob_val(g, 4);
    const te_tensor_intrin *in = d->cand[ci];
    int64_t tm = d->tm[ci], tn = d->tn[ci];
    te_schedule *s = g->s;
    for (int q = 0; q < d->npro; q++) {
        te_stage *P = te_schedule_stage_by_name(s, d->pro[q]);
        if (!P)
            return te__gen_fail(g, TE_ERR_SCHEDULE);
        if (par && te_tensor_ndim(te_stage_tensor(P)) > 0 &&
            !TE__OK(g, te__parallel(P, te_stage_axis(P, 0))))
            return g->err;
    }
    for (int q = 0; q < d->ninl; q++) {
        te_stage *e = te_schedule_stage_by_name(s, d->inl[q]);
        if (!e || (!d->tile[q] && !TE__OK(g, te_compute_inline(e))))
            return e ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    }
    te_stage *T = te_schedule_stage_by_name(s, d->out);
    if (!T)
        return te__gen_fail(g, TE_ERR_SCHEDULE);
    int nd = te_tensor_ndim(te_stage_tensor(T));
    te_iter *io, *jo, *ii, *ji;
    if (!TE__OK(g, te_tile(T, te_stage_axis(T, nd - 2), te_stage_axis(T, nd - 1), tm, tn, &io, &jo,
                           &ii, &ji)))
        return g->err;
    /* The tile loops, outermost first: (io, jo) or (jo, io); with column blocks of nc,
     * (jb, io, jm) or (jb, jm, io): a block of B stays in L2 while the rows go by. */
    te_iter *outs[4 + TE_MAX_DIMS];
    int nouter = 0, ppos = -1;       /* ppos: the parallel loop's place in outs */
    for (int a = 0; a < nd - 2; a++) /* leading axes (a batch, a convolution's rows) */
        outs[nouter++] = te_stage_axis(T, a);
    if (par == 3) {
        /* A band of row tiles per thread, outermost (after the leading axes). */
        int64_t rows = te_iter_extent(io), nt = sp->target.num_cores > 0 ? sp->target.num_cores : 1;
        te_iter *ip;
        if (!TE__OK(g, te_split(T, io, (rows + nt - 1) / nt, &ip, &io)) ||
            !TE__OK(g, te__parallel(T, ip)))
            return g->err;
        ppos = nouter;
        outs[nouter++] = ip;
    }
    if (nc > 0) {
        te_iter *jb, *jm;
        if (!TE__OK(g, te_split(T, jo, nc / tn, &jb, &jm)))
            return g->err;
        outs[nouter++] = jb;
        outs[nouter++] = order ? jm : io;
        outs[nouter++] = order ? io : jm;
    } else {
        outs[nouter++] = order ? jo : io;
        outs[nouter++] = order ? io : jo;
    }
    if (!TE__OK(g, te_reorder(T, nouter, outs)))
        return g->err;
    if (par == 2) {
        te_iter *f;
        if (!TE__OK(g, te_fuse(T, outs[0], outs[1], &f)) || !TE__OK(g, te__parallel(T, f)))
            return g->err;
        outs[0] = f;
        for (int q = 1; q + 1 < nouter; q++)
            outs[q] = outs[q + 1];
        nouter--;
        ppos = 0;
    } else if (par == 1) {
        int q = 0; /* the first loop with more than one iteration (a batch of 1 is not) */
        while (q + 1 < nouter && te_iter_extent(outs[q]) <= 1)
            q++;
        if (!TE__OK(g, te__parallel(T, outs[q])))
            return g->err;
        ppos = q;
    }
    te_iter *inner = outs[nouter - 1];
    /* The k blocks: before the two tile loops, inside the parallel loop. */
    int kat = nouter - 2 > ppos + 1 ? nouter - 2 : ppos + 1;
    if (d->role_a)
        return tz_product(g, T, ii, ji, d, in, kc, outs, nouter, kat);
    /* An epilogue: each product computed per tile, the columns vectorized. */
    te_iter *jvo, *jvi;
    /* Lanes of the widest of the product and the output (a requantized u8 output would ask
     * for 64, more than a tile's 32 columns: the epilogue then ran scalar, 5x slower). */
    te_stage *P0 = te_schedule_stage_by_name(s, d->prod[0]);
    te_dtype od = te_tensor_dtype(te_stage_tensor(T));
    te_dtype pd = P0 ? te_tensor_dtype(te_stage_tensor(P0)) : od;
    int lanes = te__lanes(sp, te_dtype_size(pd) > te_dtype_size(od) ? pd : od);
    if (tn % lanes == 0 && lanes > 1) {
        if (!TE__OK(g, te_split(T, ji, lanes, &jvo, &jvi)) || !TE__OK(g, te_vectorize(T, jvi)))
            return g->err;
    }
    /* Steps read more than once: a tile buffer each, computed at the tile, vectorized
     * (readers first: a stage goes inside the tile after everything that reads it). */
    for (int q = d->ninl - 1; q >= 0; q--) {
        te_stage *e = d->tile[q] ? te_schedule_stage_by_name(s, d->inl[q]) : NULL;
        if (!e)
            continue;
        if (!TE__OK(g, te_compute_at(e, T, inner)))
            return g->err;
        te_iter *eo, *ei;
        te_iter *last = te_stage_axis(e, nd - 1);
        if (lanes > 1 && te_iter_extent(last) % lanes == 0 &&
            (!TE__OK(g, te_split(e, last, lanes, &eo, &ei)) || !TE__OK(g, te_vectorize(e, ei))))
            return g->err;
    }
    for (int q = 0; q < d->nprod; q++) {
        te_stage *P = te_schedule_stage_by_name(s, d->prod[q]);
        if (!P || !TE__OK(g, te_compute_at(P, T, inner)))
            return P ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
        te_iter *lead[TE_MAX_DIMS];
        for (int a = 0; a < nd - 2; a++)
            lead[a] = te_stage_axis(P, a);
        int rc = tz_product(g, P, te_stage_axis(P, nd - 2), te_stage_axis(P, nd - 1), d, in, kc,
                            lead, nd - 2, nd - 2);
        if (rc)
            return rc;
    }
    return TE_OK;
}

const te__template te__t_tensorize = {"tensorize", tz_init, tz_apply, false};
