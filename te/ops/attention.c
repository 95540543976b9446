/* Fused scaled dot-product attention (flash-attention structure) as tensor expressions.
 *
 * Two expressions, both of which let a schedule keep only a block of scores alive:
 *  - the one-pass form (default, attention_body_onepass): key blocks of B keys; per block the
 *    maximum, the weights, their sum and P V are stages with the block index as an axis, and
 *    one tuple reduction over the blocks (te_reducer_create_tuple) combines the running
 *    (max, sum, accumulator) with the online-softmax rescaling, so the scores are computed
 *    once;
 *  - the two-pass form (attention_body): pass 1 finds the row maxima, pass 2 sums exp(score -
 *    max) V and exp(score - max) in one reduction (V gets a column of ones, so the last
 *    column of the accumulator is the denominator); each pass has its own score stage
 *    ("_s1", "_s2") computed where it is used, so the scores are computed twice but the
 *    blocking is entirely the schedule's.
 * autotune/templates_attention.c schedules both. */
#include <math.h>
#include <string.h>

#include "te/ops/ops_internal.h"

te_attention_params te_attention_params_default(void)
{
    te_attention_params p;
    memset(&p, 0, sizeof p);
    p.mask = TE_ATTN_MASK_NONE;
    return p;
}

const char *te_attn_mask_name(te_attn_mask m)
{
    switch (m) {
    case TE_ATTN_MASK_NONE:
        return "none";
    case TE_ATTN_MASK_CAUSAL:
        return "causal";
    case TE_ATTN_MASK_EXPLICIT:
        return "explicit";
    default:
        return NULL;
    }
}

/* The shape facts every stage uses. */
typedef struct attn_shape {
    int64_t b, h, lq, lk, dh;
    double scale;
    te_attn_mask mask;
    te_tensor *M; /* the explicit mask or NULL */
    bool mask_4d; /* M is [batch, 1, lq, lk] */
    te_dtype dt;
} attn_shape;

/* scale * s + mask at (b, i, j), where s is the raw dot product; -inf where masked out. */
static te_expr *masked_score(te_ctx *ctx, const attn_shape *a, te_expr *s, te_expr *b, te_expr *i,
                             te_expr *j)
{
    te_expr *v = te_mul(ctx, op__c(ctx, a->dt, a->scale), s);
    if (a->mask == TE_ATTN_MASK_CAUSAL)
        return te_select(ctx, te_le(ctx, j, i), v, op__c(ctx, a->dt, -INFINITY));
    if (a->mask == TE_ATTN_MASK_EXPLICIT)
        return te_add(
            ctx, v, a->mask_4d ? TE_AT(ctx, a->M, b, op__i(ctx, 0), i, j) : TE_AT(ctx, a->M, i, j));
    return v;
}

/* Q K^T without scale or mask: [b, h, lq, lk], reduction "k" over dh. */
static te_tensor *dot_stage(te_ctx *ctx, const attn_shape *a, te_tensor *Q, te_tensor *KT,
                            const char *stage, const char *tag)
{
    te_expr *b = te_axis(ctx, "b", a->b), *h = te_axis(ctx, "h", a->h);
    te_expr *i = te_axis(ctx, "i", a->lq), *j = te_axis(ctx, "j", a->lk);
    te_expr *k = te_reduce_axis(ctx, "k", a->dh);
    te_expr *body =
        te_sum(ctx, te_mul(ctx, TE_AT(ctx, Q, b, h, i, k), TE_AT(ctx, KT, b, h, k, j)), 1, &k);
    return op__tag(ctx, te_compute(ctx, stage, 4, (te_expr *[]){b, h, i, j}, body), tag);
}

/* Every stage of the two-pass form; returns the output. */
static te_tensor *attention_body(const op_site *s, const attn_shape *a, te_tensor *Q, te_tensor *K,
                                 te_tensor *V)
{
    te_ctx *ctx = s->ctx;
    const char *nm = s->name;
    /* K transposed: a block of keys is then contiguous along the block. */
    te_expr *b = te_axis(ctx, "b", a->b), *h = te_axis(ctx, "h", a->h);
    te_expr *k = te_axis(ctx, "k", a->dh), *j = te_axis(ctx, "j", a->lk);
    te_tensor *KT = op__tag(ctx,
                            te_compute(ctx, op__stage_name(ctx, nm, "kt"), 4,
                                       (te_expr *[]){b, h, k, j}, TE_AT(ctx, K, b, h, j, k)),
                            "attention_kt");
    /* V with a column of ones: acc[.., dh] is then the softmax denominator. */
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    j = te_axis(ctx, "j", a->lk);
    te_expr *d = te_axis(ctx, "d", a->dh + 1);
    te_tensor *VX =
        op__tag(ctx,
                te_compute(ctx, op__stage_name(ctx, nm, "vx"), 4, (te_expr *[]){b, h, j, d},
                           te_if_then_else(ctx, te_lt(ctx, d, op__i(ctx, a->dh)),
                                           TE_AT(ctx, V, b, h, j, d), op__c(ctx, a->dt, 1.0))),
                "attention_vx");
    if (!KT || !VX)
        return NULL;
    /* Pass 1: row maxima of the masked scores. */
    te_tensor *S1 = dot_stage(ctx, a, Q, KT, op__stage_name(ctx, nm, "s1"), "attention_s1");
    if (!S1)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    te_expr *i = te_axis(ctx, "i", a->lq), *rj = te_reduce_axis(ctx, "j", a->lk);
    te_expr *sc = masked_score(ctx, a, TE_AT(ctx, S1, b, h, i, rj), b, i, rj);
    te_tensor *MX = op__tag(ctx,
                            te_compute(ctx, op__stage_name(ctx, nm, "max"), 3,
                                       (te_expr *[]){b, h, i}, te_rmax(ctx, sc, 1, &rj)),
                            "attention_max");
    /* Pass 2: weights exp(score - max), 0 for masked scores and fully masked rows. */
    te_tensor *S2 = dot_stage(ctx, a, Q, KT, op__stage_name(ctx, nm, "s2"), "attention_s2");
    if (!MX || !S2)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), j = te_axis(ctx, "j", a->lk);
    sc = masked_score(ctx, a, TE_AT(ctx, S2, b, h, i, j), b, i, j);
    te_expr *mx = TE_AT(ctx, MX, b, h, i);
    te_expr *w = te_select(ctx, te_eq(ctx, mx, op__c(ctx, a->dt, -INFINITY)),
                           op__c(ctx, a->dt, 0.0), te_exp(ctx, te_sub(ctx, sc, mx)));
    te_tensor *P =
        op__tag(ctx, te_compute(ctx, op__stage_name(ctx, nm, "p"), 4, (te_expr *[]){b, h, i, j}, w),
                "attention_p");
    if (!P)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), d = te_axis(ctx, "d", a->dh + 1);
    rj = te_reduce_axis(ctx, "j", a->lk);
    te_expr *pv = te_mul(ctx, TE_AT(ctx, P, b, h, i, rj), TE_AT(ctx, VX, b, h, rj, d));
    te_tensor *ACC = op__tag(ctx,
                             te_compute(ctx, op__stage_name(ctx, nm, "acc"), 4,
                                        (te_expr *[]){b, h, i, d}, te_sum(ctx, pv, 1, &rj)),
                             "attention_acc");
    if (!ACC)
        return NULL;
    /* O = acc / denominator; a fully masked row has denominator 0 and gives zeros. */
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), d = te_axis(ctx, "d", a->dh);
    te_expr *den = TE_AT(ctx, ACC, b, h, i, op__i(ctx, a->dh));
    te_expr *o = te_select(ctx, te_gt(ctx, den, op__c(ctx, a->dt, 0.0)),
                           te_div(ctx, TE_AT(ctx, ACC, b, h, i, d), den), op__c(ctx, a->dt, 0.0));
    return op__tag(ctx, te_compute(ctx, nm, 4, (te_expr *[]){b, h, i, d}, o), "attention");
}

/* The default key block: 128 keys (half the per-block work of 64: the online rescaling, the
 * block maxima and sums; about 10% faster at lk 512), unless 64 pads lk to fewer keys (lk 300:
 * 320 keys rather than 384). */
static int64_t default_block(int64_t lk)
{
    int64_t p128 = (lk + 127) / 128 * 128, p64 = (lk + 63) / 64 * 64;
    return p64 < p128 ? 64 : 128;
}

/* The one-pass form: key blocks of B keys (j = jo B + ji, the last block padded with -inf
 * scores and zero values); per block the maximum, the weights, their sum and P V; then one
 * tuple reduction over the blocks combines (m, l, a) with the online-softmax rescaling. */
static te_reducer *online_attn_reducer(te_ctx *ctx, te_dtype dt)
{
    te_expr *x[3], *y[3], *c[3], *id[3];
    static const char *const xn[3] = {"m1", "l1", "a1"}, *const yn[3] = {"m2", "l2", "a2"};
    for (int q = 0; q < 3; q++) {
        x[q] = te_var(ctx, xn[q], dt);
        y[q] = te_var(ctx, yn[q], dt);
    }
    /* The side with the smaller maximum is scaled by e = exp(min - max), one exp per
     * component; equal maxima (two -inf sides included) give e = 1, never NaN. */
    te_expr *ge = te_ge(ctx, x[0], y[0]);
    te_expr *e =
        te_select(ctx, te_eq(ctx, x[0], y[0]), op__c(ctx, dt, 1.0),
                  te_exp(ctx, te_sub(ctx, te_min(ctx, x[0], y[0]), te_max(ctx, x[0], y[0]))));
    c[0] = te_max(ctx, x[0], y[0]);
    for (int q = 1; q < 3; q++)
        c[q] = te_select(ctx, ge, te_add(ctx, x[q], te_mul(ctx, y[q], e)),
                         te_add(ctx, te_mul(ctx, x[q], e), y[q]));
    id[0] = op__c(ctx, dt, -INFINITY);
    id[1] = op__c(ctx, dt, 0.0);
    id[2] = op__c(ctx, dt, 0.0);
    return te_reducer_create_tuple(ctx, "online_attention", 3, x, y, c, id);
}

/* Where key j' of the padded key axis is real (j' < lk): the padded blocks' scores are -inf. */
static te_expr *key_ok(te_ctx *ctx, const attn_shape *a, te_expr *j)
{
    return te_lt(ctx, j, op__i(ctx, a->lk));
}

/* The masked score at a padded key index j (mask reads guarded, -inf past lk). */
static te_expr *padded_score(te_ctx *ctx, const attn_shape *a, te_expr *s, te_expr *b, te_expr *i,
                             te_expr *j)
{
    te_expr *v = te_mul(ctx, op__c(ctx, a->dt, a->scale), s);
    if (a->mask == TE_ATTN_MASK_CAUSAL)
        v = te_select(ctx, te_le(ctx, j, i), v, op__c(ctx, a->dt, -INFINITY));
    if (a->mask == TE_ATTN_MASK_EXPLICIT)
        return te_if_then_else(
            ctx, key_ok(ctx, a, j),
            te_add(ctx, v,
                   a->mask_4d ? TE_AT(ctx, a->M, b, op__i(ctx, 0), i, j) : TE_AT(ctx, a->M, i, j)),
            op__c(ctx, a->dt, -INFINITY));
    return te_select(ctx, key_ok(ctx, a, j), v, op__c(ctx, a->dt, -INFINITY));
}

static te_tensor *attention_body_onepass(const op_site *s, const attn_shape *a, te_tensor *Q,
                                         te_tensor *K, te_tensor *V, int64_t B)
{
    te_ctx *ctx = s->ctx;
    const char *nm = s->name;
    int64_t nb = (a->lk + B - 1) / B, lp = nb * B;
    te_expr *zero = op__c(ctx, a->dt, 0.0);
    /* K transposed and V, both padded to whole blocks with zeros. */
    te_expr *b = te_axis(ctx, "b", a->b), *h = te_axis(ctx, "h", a->h);
    /* K^T's rows are 16 keys longer than the padded key axis: a row stride of a power of two
     * (lp 512: 2 KiB) puts a score tile's dh rows of K^T into two sets of a 32 KiB L1, and
     * each tile reloads them from L2. */
    te_expr *k = te_axis(ctx, "k", a->dh), *j = te_axis(ctx, "j", lp + 16);
    te_tensor *KT = op__tag(
        ctx,
        te_compute(ctx, op__stage_name(ctx, nm, "kt"), 4, (te_expr *[]){b, h, k, j},
                   te_if_then_else(ctx, key_ok(ctx, a, j), TE_AT(ctx, K, b, h, j, k), zero)),
        "attention_kt");
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    j = te_axis(ctx, "j", lp);
    te_expr *d = te_axis(ctx, "d", a->dh);
    te_tensor *VP = op__tag(
        ctx,
        te_compute(ctx, op__stage_name(ctx, nm, "vp"), 4, (te_expr *[]){b, h, j, d},
                   te_if_then_else(ctx, key_ok(ctx, a, j), TE_AT(ctx, V, b, h, j, d), zero)),
        "attention_vp");
    if (!KT || !VP)
        return NULL;
    /* Scores over the padded keys. */
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    te_expr *i = te_axis(ctx, "i", a->lq);
    j = te_axis(ctx, "j", lp);
    te_expr *rk = te_reduce_axis(ctx, "k", a->dh);
    te_tensor *S = op__tag(
        ctx,
        te_compute(ctx, op__stage_name(ctx, nm, "s"), 4, (te_expr *[]){b, h, i, j},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, Q, b, h, i, rk), TE_AT(ctx, KT, b, h, rk, j)),
                          1, &rk)),
        "attention_s");
    if (!S)
        return NULL;
    /* Per key block jo: the maximum, the weights, their sum and P V. */
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq);
    te_expr *jo = te_axis(ctx, "jo", nb), *ji = te_reduce_axis(ctx, "ji", B);
    te_expr *jj = op__mad(ctx, jo, B, ji);
    te_tensor *BM =
        op__tag(ctx,
                te_compute(ctx, op__stage_name(ctx, nm, "bmax"), 4, (te_expr *[]){b, h, i, jo},
                           te_rmax(ctx, padded_score(ctx, a, TE_AT(ctx, S, b, h, i, jj), b, i, jj),
                                   1, &ji)),
                "attention_bmax");
    if (!BM)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), j = te_axis(ctx, "j", lp);
    te_expr *bmx = TE_AT(ctx, BM, b, h, i, te_floordiv(ctx, j, op__i(ctx, B)));
    te_expr *sc = padded_score(ctx, a, TE_AT(ctx, S, b, h, i, j), b, i, j);
    te_tensor *P =
        op__tag(ctx,
                te_compute(ctx, op__stage_name(ctx, nm, "p"), 4, (te_expr *[]){b, h, i, j},
                           te_select(ctx, te_eq(ctx, bmx, op__c(ctx, a->dt, -INFINITY)), zero,
                                     te_exp(ctx, te_sub(ctx, sc, bmx)))),
                "attention_p");
    if (!P)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), jo = te_axis(ctx, "jo", nb), ji = te_reduce_axis(ctx, "ji", B);
    jj = op__mad(ctx, jo, B, ji);
    te_tensor *BL =
        op__tag(ctx,
                te_compute(ctx, op__stage_name(ctx, nm, "bsum"), 4, (te_expr *[]){b, h, i, jo},
                           te_sum(ctx, TE_AT(ctx, P, b, h, i, jj), 1, &ji)),
                "attention_bsum");
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), jo = te_axis(ctx, "jo", nb), ji = te_reduce_axis(ctx, "ji", B);
    d = te_axis(ctx, "d", a->dh);
    jj = op__mad(ctx, jo, B, ji);
    te_tensor *BA = op__tag(
        ctx,
        te_compute(ctx, op__stage_name(ctx, nm, "bpv"), 5, (te_expr *[]){b, h, i, jo, d},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, P, b, h, i, jj), TE_AT(ctx, VP, b, h, jj, d)),
                          1, &ji)),
        "attention_bpv");
    if (!BL || !BA)
        return NULL;
    /* The blocks combined: (m, l, a) with the online-softmax rescaling. */
    te_reducer *r = online_attn_reducer(ctx, a->dt);
    if (!r)
        return NULL;
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), d = te_axis(ctx, "d", a->dh);
    te_expr *rjo = te_reduce_axis(ctx, "jo", nb);
    te_expr *red =
        te_reduce_tuple(ctx, r, 3,
                        (te_expr *[]){TE_AT(ctx, BM, b, h, i, rjo), TE_AT(ctx, BL, b, h, i, rjo),
                                      TE_AT(ctx, BA, b, h, i, rjo, d)},
                        1, &rjo);
    te_tensor *ml[3];
    if (!red || te_compute_tuple(ctx, 3,
                                 (const char *[]){op__stage_name(ctx, nm, "m"),
                                                  op__stage_name(ctx, nm, "l"),
                                                  op__stage_name(ctx, nm, "a")},
                                 4, (te_expr *[]){b, h, i, d}, red, ml))
        return NULL;
    for (int q = 0; q < 3; q++)
        op__tag(ctx, ml[q], "attention_online");
    /* O = a / l; a fully masked row has l = 0 and gives zeros. */
    b = te_axis(ctx, "b", a->b), h = te_axis(ctx, "h", a->h);
    i = te_axis(ctx, "i", a->lq), d = te_axis(ctx, "d", a->dh);
    te_expr *den = TE_AT(ctx, ml[1], b, h, i, d);
    te_expr *o = te_select(ctx, te_gt(ctx, den, zero),
                           te_div(ctx, TE_AT(ctx, ml[2], b, h, i, d), den), zero);
    return op__tag(ctx, te_compute(ctx, nm, 4, (te_expr *[]){b, h, i, d}, o), "attention");
}

/* Checks that t's axis `ax` has `want` (or records want when it is 0). */
static bool attn_extent(const op_site *s, const te_tensor *t, const char *role, int ax,
                        const char *what, int64_t *want)
{
    int64_t e = te_tensor_shape(t)[ax];
    if (*want && e != *want) {
        op__fail(s, TE_ERR_SHAPE, "%s ('%s') axis %d (%s) has %lld but %lld is expected", role,
                 te_tensor_name(t), ax, what, (long long)e, (long long)*want);
        return false;
    }
    *want = e;
    return true;
}

te_tensor *te_op_attention(te_ctx *ctx, te_tensor *Q, te_tensor *K, te_tensor *V, te_tensor *mask,
                           const te_attention_params *p, const char *name)
{
    if (!ctx)
        return NULL;
    op_site s = {ctx, "attention", name ? name : "attention"};
    te_attention_params q = p ? *p : te_attention_params_default();
    if (!te_attn_mask_name(q.mask))
        return op__fail(&s, TE_ERR_ARG, "invalid mask kind %d", (int)q.mask);
    if (q.batch < 0 || q.heads < 0 || q.lq < 0 || q.lk < 0 || q.dh < 0 || q.block < 0)
        return op__fail(&s, TE_ERR_ARG,
                        "extents and block must be >= 0 (0: from the tensors), got batch %d "
                        "heads %d lq %d lk %d dh %d block %d",
                        q.batch, q.heads, q.lq, q.lk, q.dh, q.block);
    if ((unsigned)q.form >= TE_ATTN_FORM_COUNT)
        return op__fail(&s, TE_ERR_ARG, "invalid form %d", (int)q.form);
    if (!isfinite(q.scale))
        return op__fail(&s, TE_ERR_ARG, "scale %g is not finite", q.scale);
    if (!op__rank(&s, Q, "query 'Q'", 4, "[batch, heads, lq, dh]") ||
        !op__rank(&s, K, "key 'K'", 4, "[batch, heads, lk, dh]") ||
        !op__rank(&s, V, "value 'V'", 4, "[batch, heads, lk, dh]") ||
        !op__float(&s, Q, "query 'Q'") || !op__same_dtype(&s, Q, K, "key 'K'") ||
        !op__same_dtype(&s, Q, V, "value 'V'"))
        return NULL;
    attn_shape a = {q.batch, q.heads, q.lq, q.lk,  q.dh,
                    q.scale, q.mask,  NULL, false, te_tensor_dtype(Q)};
    const te_tensor *kv[2] = {K, V};
    const char *roles[2] = {"key 'K'", "value 'V'"};
    if (!attn_extent(&s, Q, "query 'Q'", 0, "batch", &a.b) ||
        !attn_extent(&s, Q, "query 'Q'", 1, "heads", &a.h) ||
        !attn_extent(&s, Q, "query 'Q'", 2, "lq", &a.lq) ||
        !attn_extent(&s, Q, "query 'Q'", 3, "dh", &a.dh))
        return NULL;
    for (int t = 0; t < 2; t++)
        if (!attn_extent(&s, kv[t], roles[t], 0, "batch", &a.b) ||
            !attn_extent(&s, kv[t], roles[t], 1, "heads", &a.h) ||
            !attn_extent(&s, kv[t], roles[t], 2, "lk", &a.lk) ||
            !attn_extent(&s, kv[t], roles[t], 3, "dh", &a.dh))
            return NULL;
    if (q.mask == TE_ATTN_MASK_EXPLICIT) {
        if (!op__need(&s, mask, "mask") || !op__same_dtype(&s, Q, mask, "mask"))
            return NULL;
        int nd = te_tensor_ndim(mask);
        if (nd != 2 && nd != 4)
            return op__fail(&s, TE_ERR_SHAPE,
                            "mask ('%s') has rank %d but must be [lq, lk] or [batch, 1, lq, lk]",
                            te_tensor_name(mask), nd);
        int64_t one = 1;
        if (nd == 4 && (!attn_extent(&s, mask, "mask", 0, "batch", &a.b) ||
                        !attn_extent(&s, mask, "mask", 1, "heads (broadcast)", &one)))
            return NULL;
        if (!attn_extent(&s, mask, "mask", nd - 2, "lq", &a.lq) ||
            !attn_extent(&s, mask, "mask", nd - 1, "lk", &a.lk))
            return NULL;
        a.M = mask;
        a.mask_4d = nd == 4;
    } else if (mask) {
        return op__fail(&s, TE_ERR_ARG, "mask tensor '%s' given but the mask kind is '%s'",
                        te_tensor_name(mask), te_attn_mask_name(q.mask));
    }
    if (a.scale == 0)
        a.scale = 1.0 / sqrt((double)a.dh);
    if (q.form == TE_ATTN_TWO_PASS)
        return attention_body(&s, &a, Q, K, V);
    return attention_body_onepass(&s, &a, Q, K, V, q.block ? q.block : default_block(a.lk));
}
