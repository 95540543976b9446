/*
 * graph/fuse_attention.c: the attention rewrite (te_graph_fuse_attention). A chain
 *
 *     s = batch_matmul(q, k) trans_b=1 | batch_matmul(q, kt)      [bh, lq, lk]
 *     (reshape to [b, h, lq, lk])?                                 (ONNX's 4-D MatMul)
 *     (mul(s, c) | div(s, c))?                                     c a one-element constant
 *     (add(., mask))?                                              mask broadcast to the scores
 *     p = softmax(.)                                               last axis
 *     (reshape to [bh, lq, lk])?
 *     o = batch_matmul(p, v)                                       [bh, lq, dh]
 *
 * whose intermediates nobody else reads becomes one `attention` node on 4-D views of q, k and
 * v (reshapes, and a transpose when k came transposed), with the mask made [lq, lk] or
 * [b, 1, lq, lk] (broadcast by adding zeros when it is smaller), followed by a reshape back to
 * o's shape. The new nodes take the place of the chain's last node, so the node list stays in
 * topological order; the chain is then dropped as dead code.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

static int64_t numel(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

/* The node producing value v when it applies `op`, else -1. */
static int producer_is(const te_graph *g, int v, const char *op)
{
    int n = g->v[v].node;
    if (g->v[v].kind != TE_GRAPH_NODE_OUTPUT || n < 0 || strcmp(g->n[n].op->name, op))
        return -1;
    return n;
}

/* v is an intermediate only the chain reads: one reader, not a graph output. */
static bool private_value(const te_graph *g, int v)
{
    return !g->v[v].is_output && te_graph_value_use_count(g, v) == 1;
}

/* The only node reading v, or -1. */
static int only_reader(const te_graph *g, int v)
{
    int found = -1;
    for (int n = 0; n < g->nn; n++)
        for (int i = 0; i < g->n[n].n_in; i++)
            if (g->n[n].in[i] == v) {
                if (found >= 0 && found != n)
                    return -1;
                found = n;
            }
    return found;
}

static int64_t attr_int(te_graph *g, int n, const char *key, int *ok)
{
    te_op_params kv;
    if (te_op_params_parse(g->ctx, g->n[n].attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        *ok = 0;
        return 0;
    }
    return te__gop_attr_int(g->n[n].op, &kv, key);
}

/* A one-element float constant's value. */
static bool scalar_const(const te_graph *g, int v, double *out)
{
    const te__gvalue *c = &g->v[v];
    if (c->kind != TE_GRAPH_CONST || numel(c) != 1 || !c->data)
        return false;
    te__to_f64(c->data, c->dtype, 1, out);
    return isfinite(*out) && *out != 0;
}

/* What the matcher found. */
typedef struct attn_match {
    int bmm1, bmm2; /* the two products */
    int q, k, v;    /* rank-3 operands: q [bh, lq, dh], k (or kt when !k_is_rows), v */
    bool k_rows;    /* k is [bh, lk, dh] (trans_b=1), else kt [bh, dh, lk] */
    int mask;       /* mask value or -1 */
    double scale;   /* applied to the scores (1 when there is no mul/div) */
    int64_t b, h;   /* the 4-D view: b x h = bh (b = 1 without a 4-D reshape) */
    int64_t bh, lq, lk, dh;
    int mask_rank4; /* the scores were 4-D where the mask was added */
} attn_match;

/* Matches the chain ending at softmax node sm. */
static bool match_chain(te_graph *g, int sm, attn_match *m)
{
    memset(m, 0, sizeof *m);
    m->mask = -1;
    m->scale = 1.0;
    int ok = 1;
    te__gnode *S = &g->n[sm];
    int x = S->in[0], nd = g->v[x].ndim;
    int64_t ax = attr_int(g, sm, "axis", &ok);
    if (!ok || (ax != -1 && ax != nd - 1) || !private_value(g, x))
        return false;
    /* Backwards: add (mask), mul/div (scale), reshape, batch_matmul. */
    int n;
    if ((n = producer_is(g, x, "add")) >= 0) {
        int a = g->n[n].in[0], b = g->n[n].in[1];
        /* The scores are the operand with the full score shape that comes from the chain. */
        int sc = -1;
        for (int t = 0; t < 2 && sc < 0; t++) {
            int cand = t ? b : a;
            if (g->v[cand].ndim == nd &&
                (producer_is(g, cand, "mul") >= 0 || producer_is(g, cand, "div") >= 0 ||
                 producer_is(g, cand, "batch_matmul") >= 0 || producer_is(g, cand, "reshape") >= 0))
                sc = cand;
        }
        if (sc < 0 || !private_value(g, sc))
            return false;
        m->mask = sc == a ? b : a;
        if (g->v[m->mask].ndim > nd)
            return false;
        x = sc;
    }
    int mdn = -1, ddn = -1;
    if ((mdn = producer_is(g, x, "mul")) >= 0 || (ddn = producer_is(g, x, "div")) >= 0) {
        int n2 = mdn >= 0 ? mdn : ddn;
        int a = g->n[n2].in[0], b = g->n[n2].in[1];
        double c;
        int sc;
        if (scalar_const(g, b, &c))
            sc = a;
        else if (mdn >= 0 && scalar_const(g, a, &c))
            sc = b;
        else
            return false;
        if (!private_value(g, sc) || g->v[sc].ndim != nd)
            return false;
        m->scale = mdn >= 0 ? c : 1.0 / c;
        x = sc;
    }
    m->mask_rank4 = nd == 4;
    if (nd == 4) {
        int r = producer_is(g, x, "reshape");
        if (r < 0)
            return false;
        m->b = g->v[x].shape[0];
        m->h = g->v[x].shape[1];
        x = g->n[r].in[0];
        if (!private_value(g, x) || g->v[x].ndim != 3 || g->v[x].shape[0] != m->b * m->h)
            return false;
    } else if (nd != 3) {
        return false;
    }
    m->bmm1 = producer_is(g, x, "batch_matmul");
    if (m->bmm1 < 0 || attr_int(g, m->bmm1, "trans_a", &ok) || !ok)
        return false;
    m->k_rows = attr_int(g, m->bmm1, "trans_b", &ok) != 0;
    m->q = g->n[m->bmm1].in[0];
    m->k = g->n[m->bmm1].in[1];
    const te__gvalue *qv = &g->v[m->q], *kv = &g->v[m->k];
    if (qv->ndim != 3 || kv->ndim != 3 || qv->shape[0] != kv->shape[0])
        return false; /* no broadcast batch */
    m->bh = qv->shape[0];
    m->lq = qv->shape[1];
    m->dh = qv->shape[2];
    m->lk = m->k_rows ? kv->shape[1] : kv->shape[2];
    if (nd == 3) {
        m->b = 1;
        m->h = m->bh;
    }
    /* Forwards: (reshape to 3-D)? then batch_matmul(p, v). */
    int p = S->out[0];
    if (!private_value(g, p))
        return false;
    int rd = only_reader(g, p);
    if (rd < 0)
        return false;
    if (!strcmp(g->n[rd].op->name, "reshape")) {
        p = g->n[rd].out[0];
        if (g->v[p].ndim != 3 || !private_value(g, p) || (rd = only_reader(g, p)) < 0)
            return false;
    }
    if (strcmp(g->n[rd].op->name, "batch_matmul") || g->n[rd].in[0] != p ||
        attr_int(g, rd, "trans_a", &ok) || attr_int(g, rd, "trans_b", &ok) || !ok)
        return false;
    m->bmm2 = rd;
    m->v = g->n[rd].in[1];
    const te__gvalue *vv = &g->v[m->v];
    if (vv->ndim != 3 || vv->shape[0] != m->bh || vv->shape[1] != m->lk || vv->shape[2] != m->dh)
        return false;
    if (g->v[p].shape[0] != m->bh || g->v[p].shape[1] != m->lq || g->v[p].shape[2] != m->lk)
        return false;
    /* The mask must not depend on the head: right-aligned shape [mb, 1, mq, lk] (4-D scores)
     * or [1, mq, lk] (3-D scores), with mq 1 or lq and mb 1 or b. */
    if (m->mask >= 0) {
        const te__gvalue *mv = &g->v[m->mask];
        int64_t s4[4] = {1, 1, 1, 1};
        for (int d = 0; d < mv->ndim; d++)
            s4[4 - mv->ndim + d] = mv->shape[d];
        if (nd == 3 && mv->ndim == 3)
            s4[0] = 1, s4[1] = mv->shape[0];
        if (s4[1] != 1 || (s4[0] != 1 && s4[0] != m->b) || (s4[2] != 1 && s4[2] != m->lq) ||
            (s4[3] != 1 && s4[3] != m->lk))
            return false;
    }
    return true;
}

static int reshape4(te_graph *g, int v, int64_t a, int64_t b, int64_t c, int64_t d,
                    const char *base, const char *suffix)
{
    char at[96];
    snprintf(at, sizeof at, "shape=%lld:%lld:%lld:%lld", (long long)a, (long long)b, (long long)c,
             (long long)d);
    return te__graph_add_node(g, "reshape", at, 1, &v, base, suffix);
}

/* Builds the replacement of match m; returns the value that replaces the chain's output. */
static int build_fused(te_graph *g, const attn_match *m)
{
    const char *base = g->v[g->n[m->bmm2].out[0]].name;
    char bname[TE__G_NAME];
    snprintf(bname, sizeof bname, "%s", base);
    int q4 = reshape4(g, m->q, m->b, m->h, m->lq, m->dh, bname, "q4");
    if (q4 < 0)
        return q4;
    int k3 = m->k;
    if (!m->k_rows) {
        k3 = te__graph_add_node(g, "transpose", "perm=0:2:1", 1, &m->k, bname, "k");
        if (k3 < 0)
            return k3;
    }
    int k4 = reshape4(g, k3, m->b, m->h, m->lk, m->dh, bname, "k4");
    int v4 = k4 < 0 ? k4 : reshape4(g, m->v, m->b, m->h, m->lk, m->dh, bname, "v4");
    if (v4 < 0)
        return v4;
    int in[4] = {q4, k4, v4, -1}, n_in = 3;
    if (m->mask >= 0) {
        /* The mask's right-aligned 4-D view [mb, 1, mq, mk] (match_chain checked it), made
         * [b, 1, lq, lk] by adding zeros when it is smaller. */
        const te__gvalue *mv = &g->v[m->mask];
        te_dtype mdt = mv->dtype;
        int64_t s4[4] = {1, 1, 1, 1}, full = m->b * m->lq * m->lk;
        for (int d = 0; d < mv->ndim; d++)
            s4[4 - mv->ndim + d] = mv->shape[d];
        if (!m->mask_rank4 && mv->ndim == 3)
            s4[0] = 1;
        int64_t mn = numel(mv);
        int mk = reshape4(g, m->mask, s4[0], 1, s4[2], s4[3], bname, "mask4");
        if (mk >= 0 && mn != full) {
            char zn[TE__G_NAME + 16], zname[TE__G_NAME];
            snprintf(zn, sizeof zn, "%.28s_zeros", bname);
            te__graph_unique_name(g, zn, zname, sizeof zname);
            int64_t zs[4] = {m->b, 1, m->lq, m->lk};
            void *zd = calloc((size_t)full, te_dtype_size(mdt)); /* all-zero bits: 0.0 */
            if (!zd)
                return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
            int z = te_graph_const(g, zname, mdt, 4, zs, zd);
            free(zd);
            if (z < 0)
                return z;
            int ab[2] = {mk, z};
            mk = te__graph_add_node(g, "add", "", 2, ab, bname, "mask");
        }
        if (mk < 0)
            return mk;
        in[3] = mk;
        n_in = 4;
    }
    char at[64];
    snprintf(at, sizeof at, "scale=%.17g", m->scale);
    int o4 = te__graph_add_node(g, "attention", at, n_in, in, bname, "attn");
    if (o4 < 0)
        return o4;
    char rs[96];
    snprintf(rs, sizeof rs, "shape=%lld:%lld:%lld", (long long)m->bh, (long long)m->lq,
             (long long)m->dh);
    return te__graph_add_node(g, "reshape", rs, 1, &o4, bname, "o3");
}

int te_graph_fuse_attention(te_graph *g, int *fused)
{
    if (!g)
        return TE_ERR_ARG;
    if (fused)
        *fused = 0;
    int count = 0, rc = TE_OK;
    for (int n = 0; n < g->nn && !rc; n++) {
        if (strcmp(g->n[n].op->name, "softmax"))
            continue;
        attn_match m;
        if (!match_chain(g, n, &m))
            continue;
        int first_new = g->nn, old_out = g->n[m.bmm2].out[0];
        int out = build_fused(g, &m);
        if (out < 0) {
            rc = out;
            break;
        }
        /* Readers of the chain's output read the new value, computed where the chain ended. */
        te__graph_replace_uses(g, old_out, out);
        rc = te__graph_move_tail(g, first_new, m.bmm2);
        count++;
    }
    if (!rc && count)
        rc = te__graph_compact(g, NULL);
    if (fused)
        *fused = count;
    return rc;
}
