/*
 * The conv2d template (conv2d, conv2d_bn_relu, depthwise_conv2d; NCHW and NHWC).
 *
 * The output is tiled over (oh, the register axis, the vector axis): the vector axis is the
 * innermost, contiguous one (ow for NCHW, oc for NHWC) and the register axis the other of
 * (oc, ow), whose values share one broadcast operand (a weight for NCHW, an input pixel for
 * NHWC). The convolution's accumulator tile, hb x rb x vb, is computed at the output's last
 * tile loop (cache_write when the convolution is the output, compute_at under the batch-norm
 * epilogue), with the reduction loops (rc, ry, rx) outside the tile, the tile's loops unrolled
 * and vectorized. The padding stage is inlined or computed once at the root. Elementwise
 * epilogue steps between the convolution and the output (a fused graph group's bias, residual
 * add, activation) are inlined into the output.
 *
 * Knobs: rb (register block), vb (vector block), hb (rows of oh), rxu (unroll rx 0/1),
 * pad (0 inline, 1 root; a single value without padding), par (0 none; 1 batch and the
 * first tile loop fused, parallel; 2 the first two tile loops too).
 */
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/ops.h"

typedef struct conv_data {
    const char *out, *conv, *pad;
    int ninl;
    const char *inl[8]; /* elementwise epilogue steps between the convolution and the output */
    bool role_a;
    int vax, rax, hax; /* axis positions: vector, register, rows */
    int nred;
} conv_data;

static int axis_named(const te_tensor *t, const char *name)
{
    for (int d = 0; d < t->ndim; d++)
        if (!strcmp(t->axes[d]->u.var.name, name))
            return d;
    return -1;
}

typedef struct {
    const te_tensor *R;
    const conv_data *cd;
    bool hit;
} reads_ctx;

static bool reads_fn(const te_expr *e, void *user)
{
    reads_ctx *c = user;
    if (e->kind != TE_E_READ)
        return true;
    if (e->u.read.t == c->R)
        c->hit = true;
    for (int q = 0; q < c->cd->ninl; q++)
        if (!strcmp(e->u.read.t->name, c->cd->inl[q]))
            c->hit = true;
    return true;
}

/* Whether t reads R or one of the epilogue steps found so far. */
static bool conv_reads_any(const te_tensor *t, const te_tensor *R, const conv_data *cd)
{
    reads_ctx c = {R, cd, false};
    if (t->kind == TE_T_COMPUTE)
        te__expr_visit(t->body, reads_fn, &c);
    return c.hit;
}

static int conv_init(te_space *sp)
{
    if (sp->n_out != 1)
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED, "conv2d template: one output");
    te_tensor *O = sp->outs[0], *st[16];
    int ns = te_op_stages(O, st, 16);
    if (ns > 16)
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED, "conv2d template: too many stages");
    conv_data *cd = te__alloc(sp->ctx, sizeof *cd);
    if (!cd)
        return TE_ERR_NOMEM;
    /* Stages come producers first: the padding (read by the convolution), the convolution,
     * then the epilogue steps that read it (a fused group's bias, residual add, activation),
     * which are inlined into the output as the library's conv2d_bn_relu writes them. */
    te_tensor *R = NULL;
    for (int q = 0; q < ns; q++) {
        te_tensor *t = st[q];
        if (t->body->kind == TE_E_REDUCE && t->ndim == 4) {
            if (R)
                return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                                        "conv2d template: two reductions");
            R = t;
        } else if (t->body->kind == TE_E_REDUCE) {
            return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                                    "conv2d template: reduction '%s' is not a convolution",
                                    t->name);
        } else if (t != O && R) {
            if (cd->ninl == 8 || !conv_reads_any(t, R, cd))
                return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                                        "conv2d template: unexpected stage '%s'", t->name);
            cd->inl[cd->ninl++] = t->name;
        } else if (t != O) {
            if (cd->pad)
                return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                                        "conv2d template: unexpected stage '%s'", t->name);
            cd->pad = t->name;
        }
    }
    if (!R)
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED, "conv2d template: no convolution");
    if (R != O && (O->body->kind == TE_E_REDUCE || O->ndim != 4))
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED, "conv2d template: bad epilogue");
    int oc = axis_named(R, "oc"), oh = axis_named(R, "oh"), ow = axis_named(R, "ow");
    if (oc < 0 || oh < 0 || ow < 0 || axis_named(R, "n") != 0)
        return te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                                "conv2d template: axes of '%s' are "
                                "not (n, oc, oh, ow) in some layout",
                                R->name);
    cd->out = O->name;
    cd->conv = R->name;
    cd->role_a = R == O;
    cd->vax = 3;
    cd->rax = ow == 3 ? oc : ow;
    cd->hax = oh;
    cd->nred = R->body->u.red.n;
    sp->tdata = cd;
    int V = sp->lanes;
    int64_t v[TE__MAX_KVALS];
    static const int64_t rbs[] = {1, 2, 4, 6, 8};
    te__knob_add(sp, "rb", te__filter_le(rbs, 5, R->shape[cd->rax], 1, v), v);
    int64_t E = R->shape[cd->vax];
    int64_t vbs[3] = {V / 2 > 0 ? V / 2 : 1, V, 2 * V};
    int nv = te__filter_le(vbs, 3, (E + V - 1) / V * V, E, v);
    te__knob_add(sp, "vb", nv, v);
    static const int64_t hbs[] = {1, 2, 4};
    te__knob_add(sp, "hb", te__filter_le(hbs, 3, R->shape[cd->hax], 1, v), v);
    int64_t kw = R->body->u.red.axes[R->body->u.red.n - 1]->u.var.extent;
    te__knob_add(sp, "rxu", kw > 1 && kw <= 16 ? 2 : 1, (int64_t[]){0, 1});
    te__knob_add(sp, "pad", cd->pad ? 2 : 1, (int64_t[]){0, 1});
    if (sp->target.num_cores > 1)
        te__knob_add(sp, "par", 2, (int64_t[]){1, 2});
    else
        te__knob_add(sp, "par", 1, (int64_t[]){0});
    return TE_OK;
}

static int conv_apply(te__gen *g)
{
    conv_data *cd = g->sp->tdata;
    te_schedule *s = g->s;
    int64_t rb = te__knob_val(g, 0), vb = te__knob_val(g, 1), hb = te__knob_val(g, 2);
    int64_t rxu = te__knob_val(g, 3), pad = te__knob_val(g, 4), par = te__knob_val(g, 5);
    for (int q = 0; q < cd->ninl; q++) {
        te_stage *e = te_schedule_stage_by_name(s, cd->inl[q]);
        if (!e || !TE__OK(g, te_compute_inline(e)))
            return e ? g->err : te__gen_fail(g, TE_ERR_SCHEDULE);
    }
    te_stage *T = te_schedule_stage_by_name(s, cd->out), *R;
    if (cd->role_a) {
        te_tensor *L = te_cache_write(s, te_stage_tensor(T), TE_SCOPE_LOCAL);
        if (!L)
            return te__gen_fail(g, TE_ERR_SCHEDULE);
        R = te_schedule_stage(s, L);
    } else {
        R = te_schedule_stage_by_name(s, cd->conv);
    }
    int64_t fac[4] = {1, 1, 1, 1};
    fac[cd->vax] = vb;
    fac[cd->rax] = rb;
    fac[cd->hax] = hb;
    /* T: n, then the outer parts of axes 1..3, then the inner parts (rows, register, vector). */
    te_iter *outer[4], *inner[4];
    outer[0] = te_stage_axis(T, 0);
    for (int d = 1; d < 4; d++)
        if (!TE__OK(g, te_split(T, te_stage_axis(T, d), fac[d], &outer[d], &inner[d])))
            return g->err;
    te_iter *ord[7] = {outer[0],       outer[1],       outer[2],      outer[3],
                       inner[cd->hax], inner[cd->rax], inner[cd->vax]};
    if (!TE__OK(g, te_reorder(T, 7, ord)))
        return g->err;
    te_iter *at = outer[3];
    if (par >= 1) {
        te_iter *f;
        if (!TE__OK(g, te_fuse(T, outer[0], outer[1], &f)))
            return g->err;
        if (par == 2) {
            te_iter *f2;
            if (!TE__OK(g, te_fuse(T, f, outer[2], &f2)))
                return g->err;
            f = f2;
        }
        if (!TE__OK(g, te__parallel(T, f)))
            return g->err;
    }
    if (!TE__OK(g, te_unroll(T, inner[cd->rax])) || !TE__OK(g, te_vectorize(T, inner[cd->vax])))
        return g->err;
    if (!TE__OK(g, te_compute_at(R, T, at)))
        return g->err;
    /* R: the tile (hb x rb x vb) inside the reduction loops. Split the tile axes by their
     * block so that the unrolled loops have small extents. */
    te_iter *ro[4], *ri[4];
    for (int d = 1; d < 4; d++)
        if (!TE__OK(g, te_split(R, te_stage_axis(R, d), fac[d], &ro[d], &ri[d])))
            return g->err;
    te_iter *o2[16];
    int n = 0;
    o2[n++] = te_stage_axis(R, 0);
    for (int d = 1; d < 4; d++)
        o2[n++] = ro[d];
    for (int r = 0; r < cd->nred; r++)
        o2[n++] = te_stage_reduce_axis(R, r);
    o2[n++] = ri[cd->hax];
    o2[n++] = ri[cd->rax];
    o2[n++] = ri[cd->vax];
    if (!TE__OK(g, te_reorder(R, n, o2)))
        return g->err;
    if (rxu && !TE__OK(g, te_unroll(R, te_stage_reduce_axis(R, cd->nred - 1))))
        return g->err;
    if (hb > 1 && !TE__OK(g, te_unroll(R, ri[cd->hax])))
        return g->err;
    if (!TE__OK(g, te_unroll(R, ri[cd->rax])) || !TE__OK(g, te_vectorize(R, ri[cd->vax])))
        return g->err;
    if (cd->pad) {
        te_stage *P = te_schedule_stage_by_name(s, cd->pad);
        if (!pad) {
            if (!TE__OK(g, te_compute_inline(P)))
                return g->err;
        } else {
            /* Computed once at the root: parallel over its first two axes, last vectorized. */
            int nd = te_tensor_ndim(te_stage_tensor(P));
            te_iter *f;
            if (g->sp->target.num_cores > 1 &&
                (!TE__OK(g, te_fuse(P, te_stage_axis(P, 0), te_stage_axis(P, 1), &f)) ||
                 !TE__OK(g, te__parallel(P, f))))
                return g->err;
            te_iter *a, *b;
            if (!TE__OK(g, te_split(P, te_stage_axis(P, nd - 1), g->sp->lanes, &a, &b)) ||
                !TE__OK(g, te_vectorize(P, b)))
                return g->err;
        }
    }
    return TE_OK;
}

const te__template te__t_conv = {"conv2d", conv_init, conv_apply, false};
