/*
 * `tessera bench --graph GRAPH`: the fused graph (one kernel per group, schedules from --db
 * where `tessera tune --graph` left records, the intermediates in one planned pool, the run's
 * threads across the groups) against the SAME graph run node by node: each product node on the
 * faster of OpenBLAS and oneDNN (measured side by side before each thread count's runs:
 * cblas_sgemm or a oneDNN matmul with packed constant weights for matmul and batch_matmul,
 * im2col + cblas_sgemm or oneDNN's convolution for conv2d), the vectorized passes of tools/bl_vec.c
 * for the activations, softmax and layer norm, plain C loops (OpenMP over rows) for the
 * elementwise, broadcast, batch norm, transpose and reshape nodes, every
 * node's output materialized in a buffer of its own. Both run in one process, alternating,
 * for each thread count; times are medians. Also: the kernel count (nodes against groups) and
 * the peak intermediate memory node by node (every node output kept, no reuse) against fused
 * and planned (the pool). The graph outputs of both paths must agree within 1e-4 (max |a-b| /
 * max |b| per output), else the command exits 1.
 *
 *   tessera tune --graph block.graph --db t.db --trials 200   (with OMP_NUM_THREADS=T per T)
 *   tessera bench --graph block.graph --db t.db --threads 1,2 --json
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/graph.h"
#include "tessera/target.h"
#include "tessera/tuning_db.h"
#include "tools/baselines.h"
#include "tools/bench_graph.h"
#include "tools/bl_vec.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera bench --graph GRAPH [--db FILE] [--threads LIST] [--reps N] "
            "[--json]\n"
            "                     [--rules FILE | --no-rules] [--optimize] [--precision f32|bf16]\n"
            "                     [--products fastest|openblas|onednn]\n\n"
            "The fused graph (tuned groups from --db) against the same graph run node by\n"
            "node (each matmul, conv2d and attention product on the faster of OpenBLAS and\n"
            "oneDNN, measured per node and printed; vectorized activations, softmax and layer\n"
            "norm, plain loops for the rest; every output materialized),\n"
            "alternating, medians over --reps runs, for each thread count; kernels and peak\n"
            "intermediate memory before and after fusion + planning. Exits 1 when the outputs\n"
            "differ by more than 1e-4 (relative to the largest magnitude).\n\n"
            "  --plugin LIB.so load the operators of a plugin (repeatable; also the\n"
            "                  colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
            "  --db FILE       tuned records (tessera tune --graph GRAPH --db FILE, run with\n"
            "                  OMP_NUM_THREADS set to each thread count benched)\n"
            "  --threads LIST  comma-separated thread counts (default 1,2)\n"
            "  --products LIB  fastest (default: per node, the faster of OpenBLAS and\n"
            "                  oneDNN, measured), openblas, or onednn (where it can)\n"
            "  --reps N        timed runs of each path (default 9)\n"
            "  --optimize      run the graph passes first (both paths; tuned keys then come\n"
            "                  from the optimized graph)\n"
            "  --precision P   f32 (default) or bf16: f32 matmuls with constant weights on\n"
            "                  the CPU's bf16 dot products (both paths; an error without\n"
            "                  AVX-512 BF16 or AMX-BF16; docs/DTYPES.md)\n");
}

/* ---- The node-by-node executor ------------------------------------------------------------- */

/* A product node's oneDNN alternative (matmul and batch_matmul: a batched matmul with packed
 * constant weights; conv2d: a convolution; attention: Q K^T and P V as batched matmuls over the
 * heads), timed against the OpenBLAS one before each thread count's runs; the faster runs. */
typedef struct nbn_prod {
    te_bl_bmm *mm, *pv; /* pv: attention's second product (mm is its Q K^T) */
    te_bl_conv *cv;
    float *S;          /* attention: the scores of every head, materialized */
    int use_dn;        /* 1 when the oneDNN alternative measured faster */
    double ob_s, dn_s; /* the two medians of the last choice */
} nbn_prod;

typedef struct nbn {
    const te_graph *g;
    float **buf; /* per value: inputs (owned copies), constants (the graph's), node outputs */
    int *owned;
    float *scratch; /* im2col */
    size_t scratch_n;
    nbn_prod *prod; /* per node */
} nbn;

static int64_t attr_int(const char *attrs, const char *key, int64_t dflt)
{
    size_t kl = strlen(key);
    for (const char *p = attrs; p && *p;) {
        if (!strncmp(p, key, kl) && p[kl] == '=')
            return strtoll(p + kl + 1, NULL, 10);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return dflt;
}

static double attr_f64(const char *attrs, const char *key, double dflt)
{
    size_t kl = strlen(key);
    for (const char *p = attrs; p && *p;) {
        if (!strncmp(p, key, kl) && p[kl] == '=')
            return strtod(p + kl + 1, NULL);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return dflt;
}

static int attr_list(const char *attrs, const char *key, int64_t *out, int cap)
{
    size_t kl = strlen(key);
    for (const char *p = attrs; p && *p;) {
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            int n = 0;
            for (const char *s = p + kl + 1; *s && *s != ',' && n < cap;) {
                char *end;
                out[n++] = strtoll(s, &end, 10);
                if (end == s)
                    return -1;
                s = *end == ':' ? end + 1 : end;
            }
            return n;
        }
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

/* Broadcast binary op over out's shape: inputs right-aligned, extent-1 axes repeat. The last
 * axis runs as an inner loop with stride 0 or 1. */
static void binary(const te_graph *g, int op, int va, int vb, int vo, const float *A,
                   const float *B, float *O)
{
    int nd = te_graph_value_ndim(g, vo);
    const int64_t *os = te_graph_value_shape(g, vo);
    int64_t sa[8] = {0}, sb[8] = {0};
    const int vs[2] = {va, vb};
    int64_t *st[2] = {sa, sb};
    for (int k = 0; k < 2; k++) {
        int n = te_graph_value_ndim(g, vs[k]);
        const int64_t *s = te_graph_value_shape(g, vs[k]);
        int64_t stride = 1;
        for (int d = n - 1; d >= 0; d--) {
            int od = nd - n + d;
            st[k][od] = s[d] == 1 ? 0 : stride;
            stride *= s[d];
        }
    }
    int64_t inner = os[nd - 1], outer = te_graph_value_numel(g, vo) / inner;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < outer; r++) {
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % os[d];
            rem /= os[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        const float *a = A + oa, *b = B + ob;
        float *o = O + r * inner;
        int64_t ia = sa[nd - 1], ib = sb[nd - 1];
        switch (op) {
        case 0:
            for (int64_t j = 0; j < inner; j++)
                o[j] = a[j * ia] + b[j * ib];
            break;
        case 1:
            for (int64_t j = 0; j < inner; j++)
                o[j] = a[j * ia] - b[j * ib];
            break;
        case 2:
            for (int64_t j = 0; j < inner; j++)
                o[j] = a[j * ia] * b[j * ib];
            break;
        default:
            for (int64_t j = 0; j < inner; j++)
                o[j] = a[j * ia] / b[j * ib];
        }
    }
}

static void transpose(const te_graph *g, int vi, int vo, const int64_t *perm, const float *X,
                      float *O)
{
    int nd = te_graph_value_ndim(g, vi);
    const int64_t *is = te_graph_value_shape(g, vi), *os = te_graph_value_shape(g, vo);
    int64_t istride[8], s = 1;
    for (int d = nd - 1; d >= 0; d--)
        istride[d] = s, s *= is[d];
    int64_t inner = os[nd - 1], outer = te_graph_value_numel(g, vo) / inner;
    int64_t step = istride[perm[nd - 1]];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < outer; r++) {
        int64_t off = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % os[d]) * istride[perm[d]];
            rem /= os[d];
        }
        float *o = O + r * inner;
        for (int64_t j = 0; j < inner; j++)
            o[j] = X[off + j * step];
    }
}

static void conv2d(nbn *x, const char *attrs, int vi, int vw, int vo, const float *X,
                   const float *W, float *O)
{
    const te_graph *g = x->g;
    const int64_t *is = te_graph_value_shape(g, vi), *ws = te_graph_value_shape(g, vw),
                  *os = te_graph_value_shape(g, vo);
    int64_t N = is[0], C = is[1], H = is[2], Wd = is[3], OC = ws[0], KH = ws[2], KW = ws[3];
    int64_t OH = os[2], OW = os[3];
    int64_t st = attr_int(attrs, "stride", 1), pad = attr_int(attrs, "pad", 0),
            dil = attr_int(attrs, "dilation", 1);
    int64_t K = C * KH * KW, P = OH * OW;
    float *col = x->scratch;
    for (int64_t n = 0; n < N; n++) {
        const float *xn = X + n * C * H * Wd;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < K; r++) {
            int64_t c = r / (KH * KW), kh = r / KW % KH, kw = r % KW;
            float *dst = col + r * P;
            for (int64_t oh = 0; oh < OH; oh++) {
                int64_t ih = oh * st - pad + kh * dil;
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t iw = ow * st - pad + kw * dil;
                    dst[oh * OW + ow] =
                        ih >= 0 && ih < H && iw >= 0 && iw < Wd ? xn[(c * H + ih) * Wd + iw] : 0.0f;
                }
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)OC, (int)P, (int)K, 1.0f, W,
                    (int)K, col, (int)P, 0.0f, O + n * OC * P, (int)P);
    }
}

/* Row operations over the last axis: softmax (max-subtracted) and layer norm, vectorized
 * (tools/bl_vec.c). */
static void rows(int which, int64_t R, int64_t n, double eps, const float *X, const float *G,
                 const float *B, float *O)
{
    if (which == 0)
        te_bl_softmax_rows(X, O, R, n, 1.0f);
    else
        te_bl_layer_norm_rows(X, O, R, n, eps, G, B);
}

/* The scores of nbh (batch, head) pairs, each [lq, lk] and unscaled: s = scale s + mask (pair
 * p's batch b = p / heads reads mask + b * mask_b: mask_b is 0 for a mask the batch shares),
 * the keys after the query masked when causal, then softmax over each row (a fully masked row
 * gives zeros). */
static void scores_mask_softmax(float *S, int64_t nbh, int64_t heads, int64_t Lq, int64_t Lk,
                                float scale, const float *mask, int64_t mask_b, int causal)
{
    if (!mask && !causal) {
        te_bl_softmax_rows(S, S, nbh * Lq, Lk, scale);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < nbh * Lq; r++) {
        int64_t i = r % Lq;
        float *srow = S + r * Lk;
        const float *mrow = mask ? mask + mask_b * (r / Lq / heads) + i * Lk : NULL;
        for (int64_t j = 0; j < Lk; j++) {
            srow[j] = srow[j] * scale + (mrow ? mrow[j] : 0.0f);
            if (causal && j > i)
                srow[j] = -INFINITY;
        }
    }
    te_bl_softmax_rows(S, S, nbh * Lq, Lk, 1.0f);
}

/* The attention node unfused, as the graph before te_graph_fuse_attention ran it: per batch
 * and head, S = scale Q K^T by sgemm (materialized), the mask added, softmax rows (a fully
 * masked row gives zeros, as te_op_attention), O = P V by sgemm; or, with dn, the same on
 * oneDNN's batched matmul over every head at once. mask may be NULL; causal masks the keys
 * after the query. */
static void attention_unfused(const te_graph *g, const char *attrs, int vq, int vk, int vmask,
                              const float *Q, const float *K, const float *V, const float *mask,
                              float *O, const nbn_prod *dn)
{
    const int64_t *qs = te_graph_value_shape(g, vq), *ks = te_graph_value_shape(g, vk);
    int64_t B = qs[0], H = qs[1], Lq = qs[2], D = qs[3], Lk = ks[2];
    double sc = attr_f64(attrs, "scale", 0.0);
    float scale = sc != 0.0 ? (float)sc : 1.0f / sqrtf((float)D);
    int causal = (int)attr_int(attrs, "causal", 0) != 0;
    /* An explicit mask is [lq, lk] or [b, 1, lq, lk]. */
    int64_t mask_b = mask && te_graph_value_numel(g, vmask) > Lq * Lk ? Lq * Lk : 0;
    if (dn) { /* oneDNN: every head's unscaled scores at once */
        te_bl_bmm_run(dn->mm);
        scores_mask_softmax(dn->S, B * H, H, Lq, Lk, scale, mask, mask_b, causal);
        te_bl_bmm_run(dn->pv);
        return;
    }
    float *S = malloc(sizeof(float) * (size_t)(Lq * Lk));
    if (!S)
        return;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const float *q = Q + (b * H + h) * Lq * D, *k = K + (b * H + h) * Lk * D;
            const float *v = V + (b * H + h) * Lk * D;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Lq, (int)Lk, (int)D, scale, q,
                        (int)D, k, (int)D, 0.0f, S, (int)Lk);
            scores_mask_softmax(S, 1, 1, Lq, Lk, 1.0f, mask ? mask + b * mask_b : NULL, 0, causal);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Lq, (int)D, (int)Lk, 1.0f,
                        S, (int)Lk, v, (int)D, 0.0f, O + (b * H + h) * Lq * D, (int)D);
        }
    free(S);
}

/* A matmul or batch_matmul node's products: batch of them, each M x N x K, A and B stepping
 * a_b and b_b floats per product (0: shared by all). */
typedef struct mm_dims {
    int64_t M, N, K, batch, a_b, b_b;
    int ta, tb;
} mm_dims;

static void mm_dims_of(const te_graph *g, int nd, mm_dims *d)
{
    const char *attrs = te_graph_node_attrs(g, nd);
    int va = te_graph_node_input(g, nd, 0), vb = te_graph_node_input(g, nd, 1);
    int vo = te_graph_node_output(g, nd, 0), od = te_graph_value_ndim(g, vo);
    int na = te_graph_value_ndim(g, va);
    const int64_t *as = te_graph_value_shape(g, va), *os = te_graph_value_shape(g, vo);
    d->ta = (int)attr_int(attrs, "trans_a", 0);
    d->tb = (int)attr_int(attrs, "trans_b", 0);
    d->M = os[od - 2], d->N = os[od - 1], d->K = d->ta ? as[na - 2] : as[na - 1];
    d->batch = te_graph_value_numel(g, vo) / (d->M * d->N);
    d->a_b = te_graph_value_numel(g, va) == d->M * d->K ? 0 : d->M * d->K;
    d->b_b = te_graph_value_numel(g, vb) == d->K * d->N ? 0 : d->K * d->N;
}

/* The conv2d nodes the baseline runs (groups 1, NCHW). */
static int conv_plain(const char *op, const char *attrs)
{
    return !strcmp(op, "conv2d") && attr_int(attrs, "groups", 1) == 1 && !strstr(attrs, "NHWC");
}

/* Runs node nd; 0, or 1 after printing why the baseline cannot. */
static int run_node(nbn *x, int nd)
{
    const te_graph *g = x->g;
    const char *op = te_graph_node_op(g, nd), *attrs = te_graph_node_attrs(g, nd);
    int nin = te_graph_node_ninputs(g, nd), vo = te_graph_node_output(g, nd, 0);
    int vi[8];
    const float *in[8];
    for (int i = 0; i < nin && i < 8; i++) {
        vi[i] = te_graph_node_input(g, nd, i);
        in[i] = x->buf[vi[i]];
    }
    float *o = x->buf[vo];
    int64_t n = te_graph_value_numel(g, vo);
    int od = te_graph_value_ndim(g, vo);
    const int64_t *os = te_graph_value_shape(g, vo);
    const nbn_prod *dn = x->prod && x->prod[nd].use_dn ? &x->prod[nd] : NULL;
    if (!strcmp(op, "matmul") || !strcmp(op, "batch_matmul")) {
        if (dn) {
            te_bl_bmm_run(dn->mm);
            return 0;
        }
        mm_dims d;
        mm_dims_of(g, nd, &d);
        for (int64_t b = 0; b < d.batch; b++)
            cblas_sgemm(CblasRowMajor, d.ta ? CblasTrans : CblasNoTrans,
                        d.tb ? CblasTrans : CblasNoTrans, (int)d.M, (int)d.N, (int)d.K, 1.0f,
                        in[0] + b * d.a_b, d.ta ? (int)d.M : (int)d.K, in[1] + b * d.b_b,
                        d.tb ? (int)d.K : (int)d.N, 0.0f, o + b * d.M * d.N, (int)d.N);
    } else if (conv_plain(op, attrs)) {
        if (dn) {
            te_bl_conv_run(dn->cv);
            return 0;
        }
        conv2d(x, attrs, vi[0], vi[1], vo, in[0], in[1], o);
        if (nin > 2)
            binary(g, 0, vo, vi[2], vo, o, in[2], o);
    } else if (!strcmp(op, "add") || !strcmp(op, "sub") || !strcmp(op, "mul") ||
               !strcmp(op, "div")) {
        int k = !strcmp(op, "add") ? 0 : !strcmp(op, "sub") ? 1 : !strcmp(op, "mul") ? 2 : 3;
        binary(g, k, vi[0], vi[1], vo, in[0], in[1], o);
    } else if (!strcmp(op, "relu") || !strcmp(op, "gelu") || !strcmp(op, "sigmoid") ||
               !strcmp(op, "tanh") || !strcmp(op, "silu") || !strcmp(op, "gelu_tanh")) {
        /* in te_bl_act's order */
        static const char *const acts[] = {"relu", "gelu", "sigmoid", "tanh", "silu", "gelu_tanh"};
        int k = 0;
        while (strcmp(acts[k], op) != 0)
            k++;
        te_bl_activation((te_bl_act)k, in[0], o, (size_t)n);
    } else if (!strcmp(op, "softmax") || !strcmp(op, "layer_norm")) {
        if (attr_int(attrs, "axis", -1) != -1 && attr_int(attrs, "axis", -1) != od - 1) {
            fprintf(stderr,
                    "tessera bench --graph: node '%s': the baseline runs %s over the "
                    "last axis only\n",
                    te_graph_node_name(g, nd), op);
            return 1;
        }
        int ln = op[0] == 'l';
        rows(ln, n / os[od - 1], os[od - 1], attr_f64(attrs, "eps", 1e-5), in[0],
             ln && nin > 1 ? in[1] : NULL, ln && nin > 2 ? in[2] : NULL, o);
    } else if (!strcmp(op, "batch_norm")) {
        int64_t C = os[1], inner = 1;
        for (int d = 2; d < od; d++)
            inner *= os[d];
        double eps = attr_f64(attrs, "eps", 1e-5);
        const float *X = in[0], *G = in[1], *B = in[2], *Mn = in[3], *V = in[4];
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n / inner; r++) {
            int64_t c = r % C;
            float s = G[c] / sqrtf(V[c] + (float)eps), t = B[c] - Mn[c] * s;
            for (int64_t j = 0; j < inner; j++)
                o[r * inner + j] = X[r * inner + j] * s + t;
        }
    } else if (!strcmp(op, "reshape")) {
        memcpy(o, in[0], (size_t)n * sizeof(float));
    } else if (!strcmp(op, "transpose")) {
        int64_t perm[8];
        int np = attr_list(attrs, "perm", perm, 8);
        if (np == 0) {
            for (int d = 0; d < od; d++)
                perm[d] = d;
            perm[od - 1] = od - 2, perm[od - 2] = od - 1;
        }
        transpose(g, vi[0], vo, perm, in[0], o);
    } else if (!strcmp(op, "attention") && te_graph_value_ndim(g, vi[0]) == 4) {
        attention_unfused(g, attrs, vi[0], vi[1], nin > 3 ? vi[3] : -1, in[0], in[1], in[2],
                          nin > 3 ? in[3] : NULL, o, dn);
    } else {
        fprintf(stderr, "tessera bench --graph: node '%s': the node-by-node baseline has no %s%s\n",
                te_graph_node_name(g, nd), op,
                !strcmp(op, "conv2d") ? " with these attributes" : "");
        return 1;
    }
    return 0;
}

static void nbn_products_free(nbn *x)
{
    for (int nd = 0; x->prod && nd < te_graph_node_count(x->g); nd++) {
        nbn_prod *p = &x->prod[nd];
        te_bl_bmm_free(p->mm);
        te_bl_bmm_free(p->pv);
        te_bl_conv_free(p->cv);
        free(p->S);
        memset(p, 0, sizeof *p);
    }
}

static void nbn_free(nbn *x)
{
    nbn_products_free(x);
    free(x->prod);
    for (int v = 0; x->buf && v < te_graph_value_count(x->g); v++)
        if (x->owned[v])
            free(x->buf[v]);
    free(x->buf);
    free(x->owned);
    free(x->scratch);
}

/* Every input and node output gets a buffer of its own (no reuse: each node's output is
 * materialized); constants are read in place. 0, or 1 after a message. */
static int nbn_init(nbn *x, const te_graph *g)
{
    memset(x, 0, sizeof *x);
    x->g = g;
    int nv = te_graph_value_count(g);
    x->buf = calloc((size_t)nv + 1, sizeof *x->buf);
    x->owned = calloc((size_t)nv + 1, sizeof *x->owned);
    x->prod = calloc((size_t)te_graph_node_count(g) + 1, sizeof *x->prod);
    if (!x->buf || !x->owned || !x->prod)
        return 1;
    for (int v = 0; v < nv; v++) {
        if (te_graph_value_dtype(g, v) != TE_F32) {
            fprintf(stderr, "tessera bench --graph: value '%s' is not f32\n",
                    te_graph_value_name(g, v));
            return 1;
        }
        if (te_graph_value_kind_of(g, v) == TE_GRAPH_CONST) {
            x->buf[v] = (float *)te_graph_value_data(g, v);
        } else {
            x->buf[v] = malloc(sizeof(float) * (size_t)te_graph_value_numel(g, v));
            x->owned[v] = 1;
            if (!x->buf[v])
                return 1;
            for (int64_t i = 0; i < te_graph_value_numel(g, v); i++)
                x->buf[v][i] = NAN;
        }
    }
    for (int nd = 0; nd < te_graph_node_count(g); nd++) {
        if (strcmp(te_graph_node_op(g, nd), "conv2d") != 0)
            continue;
        const int64_t *ws = te_graph_value_shape(g, te_graph_node_input(g, nd, 1));
        const int64_t *os = te_graph_value_shape(g, te_graph_node_output(g, nd, 0));
        size_t need = (size_t)(ws[1] * ws[2] * ws[3] * os[2] * os[3]);
        if (need > x->scratch_n)
            x->scratch_n = need;
    }
    if (x->scratch_n && !(x->scratch = malloc(sizeof(float) * x->scratch_n)))
        return 1;
    return 0;
}

static double now_s(void);

typedef struct nbn_run {
    nbn *x;
    const float *const *in;
    int failed;
    double *node_s; /* per node: seconds in the last run */
} nbn_run;

static void nbn_run_all(nbn_run *r)
{
    const te_graph *g = r->x->g;
    for (int i = 0; i < te_graph_input_count(g); i++) {
        int v = te_graph_input_value(g, i);
        memcpy(r->x->buf[v], r->in[i], sizeof(float) * (size_t)te_graph_value_numel(g, v));
    }
    for (int nd = 0; !r->failed && nd < te_graph_node_count(g); nd++) {
        double t0 = now_s();
        r->failed = run_node(r->x, nd);
        r->node_s[nd] = now_s() - t0;
    }
}

/* Creates the oneDNN alternative of every product node, for the OpenMP thread count in effect
 * (oneDNN sizes its parallel split when it creates a primitive). A node oneDNN cannot run (or
 * no oneDNN) keeps OpenBLAS. Returns how many nodes have one. */
static int nbn_products_create(nbn *x)
{
    nbn_products_free(x);
    const te_graph *g = x->g;
    int made = 0;
    for (int nd = 0; nd < te_graph_node_count(g); nd++) {
        const char *op = te_graph_node_op(g, nd), *attrs = te_graph_node_attrs(g, nd);
        int nin = te_graph_node_ninputs(g, nd), vo = te_graph_node_output(g, nd, 0);
        int v0 = te_graph_node_input(g, nd, 0), v1 = nin > 1 ? te_graph_node_input(g, nd, 1) : -1;
        nbn_prod *p = &x->prod[nd];
        if (!strcmp(op, "matmul") || !strcmp(op, "batch_matmul")) {
            mm_dims m;
            mm_dims_of(g, nd, &m);
            if (m.batch > 1 && m.a_b == 0) /* a shared A: OpenBLAS only */
                continue;
            te_bl_bmm_desc d = {
                (int)m.batch, (int)m.M,
                (int)m.N,     (int)m.K,
                m.ta,         m.tb,
                m.b_b == 0,   m.b_b == 0 && te_graph_value_kind_of(g, v1) == TE_GRAPH_CONST};
            p->mm = te_bl_bmm_create_desc(&d, x->buf[v0], x->buf[v1], x->buf[vo], NULL);
        } else if (conv_plain(op, attrs)) {
            const int64_t *is = te_graph_value_shape(g, v0), *ws = te_graph_value_shape(g, v1);
            te_bl_conv_desc d = {(int)is[0],
                                 (int)is[1],
                                 (int)is[2],
                                 (int)is[3],
                                 (int)ws[0],
                                 (int)ws[2],
                                 (int)ws[3],
                                 (int)attr_int(attrs, "stride", 1),
                                 (int)attr_int(attrs, "pad", 0),
                                 (int)attr_int(attrs, "dilation", 1)};
            const float *bias = nin > 2 ? x->buf[te_graph_node_input(g, nd, 2)] : NULL;
            p->cv = te_bl_conv_create(&d, x->buf[v0], x->buf[v1], bias, x->buf[vo], NULL);
        } else if (!strcmp(op, "attention") && te_graph_value_ndim(g, v0) == 4) {
            const int64_t *qs = te_graph_value_shape(g, v0), *ks = te_graph_value_shape(g, v1);
            int bh = (int)(qs[0] * qs[1]), lq = (int)qs[2], d = (int)qs[3], lk = (int)ks[2];
            p->S = malloc(sizeof(float) * (size_t)bh * (size_t)lq * (size_t)lk);
            p->mm = p->S ? te_bl_bmm_create(bh, lq, lk, d, 1, x->buf[v0], x->buf[v1], p->S, NULL)
                         : NULL;
            p->pv = p->mm
                        ? te_bl_bmm_create(bh, lq, d, lk, 0, p->S,
                                           x->buf[te_graph_node_input(g, nd, 2)], x->buf[vo], NULL)
                        : NULL;
            if (!p->pv) {
                te_bl_bmm_free(p->mm);
                free(p->S);
                memset(p, 0, sizeof *p);
            }
        }
        made += p->mm || p->cv;
    }
    return made;
}

typedef struct nbn_one {
    nbn *x;
    int nd, dn;
} nbn_one;

static void nbn_run_one(void *arg)
{
    nbn_one *o = arg;
    o->x->prod[o->nd].use_dn = o->dn;
    run_node(o->x, o->nd);
}

/* Times each product node's oneDNN alternative against its OpenBLAS one (alternating, medians
 * of 7; the node's inputs hold a full run's values, so run the graph once first) and keeps the
 * faster for the runs that follow; force 0 or 1 takes OpenBLAS or oneDNN untimed instead. */
static void nbn_products_choose(nbn *x, int force)
{
    for (int nd = 0; nd < te_graph_node_count(x->g); nd++) {
        nbn_prod *p = &x->prod[nd];
        if (!p->mm && !p->cv)
            continue;
        if (force >= 0) {
            p->ob_s = p->dn_s = NAN;
            p->use_dn = force;
            continue;
        }
        nbn_one one[2] = {{x, nd, 0}, {x, nd, 1}};
        te_bl_run_fn fn[2] = {nbn_run_one, nbn_run_one};
        void *arg[2] = {&one[0], &one[1]};
        double med[2] = {0, 0};
        if (te_bl_time_alternating(2, fn, arg, 7, med) != 0)
            med[1] = INFINITY;
        p->ob_s = med[0], p->dn_s = med[1];
        p->use_dn = med[1] < med[0];
    }
}

/* ---- The benchmark --------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* max |a - b| / max |b| (NaN anywhere: infinity). */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return m > 0 ? d / m : d;
}

/* One product node's choice, as measured before a thread count's runs. */
typedef struct prod_info {
    int node, dn;        /* dn: oneDNN ran it */
    double ob_ms, dn_ms; /* the two medians */
    char impl[128];      /* oneDNN's kernels */
} prod_info;

typedef struct result {
    int threads;
    int nprod, nprod_dn; /* product nodes with a oneDNN alternative; those it won */
    prod_info *prod;
    double fused_ms, nbn_ms, speedup, max_rel;
    int from_db, waves;
    size_t pool_bytes; /* the pool of this thread count's schedule (waves change liveness) */
    double *group_ms, *group_nbn_ms; /* per group: its kernel, and its nodes node by node */
} result;

int te_cmd_bench_graph(int argc, char **argv)
{
    const char *path = NULL, *db_path = NULL, *rules_path = NULL;
    int json = 0, reps = 9, no_rules = 0, optimize = 0, nthreads = 2, threads[8] = {1, 2};
    int products = -1; /* -1: the faster per node; 0: OpenBLAS; 1: oneDNN where it can */
    enum {
        O_HELP,
        O_JSON,
        O_NO_RULES,
        O_OPTIMIZE,
        O_DB,
        O_RULES,
        O_REPS,
        O_THREADS,
        O_PRECISION,
        O_PRODUCTS
    };
    te_cli_precision prec = TE_CLI_PRECISION_F32;
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"help", 'h', TE_CLI_FLAG, O_HELP},
                                      {"json", 0, TE_CLI_FLAG, O_JSON},
                                      {"no-rules", 0, TE_CLI_FLAG, O_NO_RULES},
                                      {"optimize", 0, TE_CLI_FLAG, O_OPTIMIZE},
                                      {"db", 0, TE_CLI_VALUE, O_DB},
                                      {"rules", 0, TE_CLI_VALUE, O_RULES},
                                      {"reps", 0, TE_CLI_VALUE, O_REPS},
                                      {"threads", 0, TE_CLI_VALUE, O_THREADS},
                                      {"precision", 0, TE_CLI_VALUE, O_PRECISION},
                                      {"products", 0, TE_CLI_VALUE, O_PRODUCTS},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    te_cli_parser cp;
    te_cli_parser_init(&cp, "bench --graph", argc, argv, opts);
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        const char *v = cp.value;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (path)
                return te_cli_usage_error(&cp, "unexpected argument '%s'", v);
            path = v;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_JSON:
            json = 1;
            break;
        case O_NO_RULES:
            no_rules = 1;
            break;
        case O_OPTIMIZE:
            optimize = 1;
            break;
        case O_DB:
            db_path = v;
            break;
        case O_RULES:
            rules_path = v;
            break;
        case O_PRODUCTS:
            products = !strcmp(v, "fastest")    ? -1
                       : !strcmp(v, "openblas") ? 0
                       : !strcmp(v, "onednn")   ? 1
                                                : -2;
            if (products == -2)
                return te_cli_usage_error(&cp,
                                          "--products takes fastest, openblas or onednn, not "
                                          "'%s'",
                                          v);
            break;
        case O_PRECISION:
            if (te_cli_precision_parse("bench --graph", v, &prec))
                return 2;
            break;
        case O_REPS:
            reps = atoi(v);
            if (reps < 1 || reps > 1000) {
                fprintf(stderr, "tessera bench --graph: --reps takes 1..1000\n");
                return 2;
            }
            break;
        case O_THREADS:
            nthreads = 0;
            for (const char *q = v; *q && nthreads < 8;) {
                char *end;
                long t = strtol(q, &end, 10);
                if (end == q || t < 1 || t > 1024) {
                    fprintf(stderr, "tessera bench --graph: bad --threads list '%s'\n", v);
                    return 2;
                }
                threads[nthreads++] = (int)t;
                q = *end == ',' ? end + 1 : end;
            }
            break;
        }
    }
    if (te_cli_plugins_load("bench --graph", &plugins))
        return 1;
    if (!path) {
        usage(stderr);
        return 2;
    }
    te_bl_openblas_select(te_cli_argv);
    const char *dn_note = NULL;
    te_bl_onednn_load(&dn_note);
    te_cli_fused f;
    if (te_cli_fused_load("bench --graph", path, rules_path, no_rules, optimize, prec, &f))
        return 1;
    te_graph *g = f.g;
    /* bf16: the node-by-node path (f32 kernels only) runs the f32 graph, the baseline the bf16
     * lowering is meant to beat; outputs are matched by name. */
    te_graph *g32 = NULL;
    if (prec == TE_CLI_PRECISION_BF16 &&
        te_cli_graph_load("bench --graph", path, NULL, optimize, NULL, &g32)) {
        te_cli_fused_free(&f);
        return 1;
    }
    te_graph *gn = g32 ? g32 : g;
    te_db *db = NULL;
    if (db_path && te_db_open(db_path, NULL, &db) != TE_OK) {
        fprintf(stderr, "tessera bench --graph: %s: %s\n", db_path, te_db_errmsg(db));
        te_db_close(db);
        te_graph_free(g32);
        te_cli_fused_free(&f);
        return 1;
    }
    int nin = te_graph_input_count(g), nout = te_graph_output_count(g), status = 0;
    float **in = calloc((size_t)nin + 1, sizeof *in), **out = calloc((size_t)nout + 1, sizeof *out);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int i = 0; in && i < nin; i++) {
        int64_t n = te_graph_value_numel(g, te_graph_input_value(g, i));
        in[i] = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; in[i] && k < n; k++) { /* uniform in [-1, 1), never 0 */
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            float u = (float)((double)(z >> 11) / 9007199254740992.0 * 2 - 1);
            in[i][k] = u == 0 ? 0.5f : u;
        }
    }
    for (int j = 0; out && j < nout; j++)
        out[j] =
            malloc(sizeof(float) * (size_t)te_graph_value_numel(g, te_graph_output_value(g, j)));
    nbn x = {0};
    if (!in || !out || nbn_init(&x, gn)) {
        fprintf(stderr, "tessera bench --graph: out of memory or unsupported graph\n");
        status = 1;
    }
    result res[8];
    int nres = 0, nk = 0;
    te_graph_mem_stats ms = {0};
    double *tf = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
    int ng = te_fuse_plan_group_count(f.plan), nn = te_graph_node_count(gn);
    double *node_s = calloc((size_t)nn + 1, sizeof(double));
    double *tg = calloc((size_t)ng * (size_t)reps + 1, sizeof(double));
    double *tn = calloc((size_t)ng * (size_t)reps + 1, sizeof(double));
    if (!tf || !tb || !node_s || !tg || !tn)
        status = 1;
    for (int t = 0; !status && t < nthreads; t++) {
        te_bl_set_threads(threads[t]);
        te_graph_compile_opts o = {.db = db, .threads = threads[t]};
        te_graph_exec *e = NULL;
        if (te_graph_compile_ex(g, f.plan, &o, &e)) {
            fprintf(stderr, "tessera bench --graph: %s\n", te_graph_errmsg(g));
            status = 1;
            break;
        }
        result *r = &res[nres++];
        memset(r, 0, sizeof *r);
        r->threads = threads[t];
        r->group_ms = calloc((size_t)ng + 1, sizeof(double));
        r->group_nbn_ms = calloc((size_t)ng + 1, sizeof(double));
        r->prod = calloc((size_t)nn + 1, sizeof *r->prod);
        if (!r->group_ms || !r->group_nbn_ms || !r->prod) {
            status = 1;
            te_graph_exec_free(e);
            break;
        }
        /* The node-by-node products: OpenBLAS or oneDNN, whichever runs each node faster. */
        nbn_run nr = {&x, (const float *const *)in, 0, node_s};
        if (nbn_products_create(&x) > 0) {
            nbn_run_all(&nr); /* the inputs of every node */
            nbn_products_choose(&x, products);
        }
        for (int nd = 0; nd < nn; nd++) {
            const nbn_prod *p = &x.prod[nd];
            if (!p->mm && !p->cv)
                continue;
            prod_info *pi = &r->prod[r->nprod++];
            pi->node = nd, pi->dn = p->use_dn, pi->ob_ms = p->ob_s * 1e3, pi->dn_ms = p->dn_s * 1e3;
            snprintf(pi->impl, sizeof pi->impl, "%s",
                     p->cv ? te_bl_conv_impl(p->cv) : te_bl_bmm_impl(p->mm));
            r->nprod_dn += p->use_dn;
        }
        r->waves = te_graph_exec_wave_count(e);
        nk = te_graph_exec_kernel_count(e); /* views (reshapes sharing storage) are no kernel */
        for (int gi = 0; gi < ng; gi++)
            r->from_db += te_graph_exec_group_from_db(e, gi, NULL) == 1;
        te_graph_memplan_stats(te_graph_exec_memplan(e), &ms);
        r->pool_bytes = ms.pool_bytes;
        /* A warm-up run of each, then alternating timed runs. */
        for (int k = -1; !status && k < reps; k++) {
            te_bl_set_threads(threads[t]);
            double t0 = now_s();
            nbn_run_all(&nr);
            double t1 = now_s();
            int rc = te_graph_run(e, (const void *const *)in, (void *const *)out);
            double t2 = now_s();
            if (nr.failed || rc) {
                if (rc)
                    fprintf(stderr, "tessera bench --graph: %s\n", te_graph_errmsg(g));
                status = 1;
            } else if (k >= 0) {
                tb[k] = t1 - t0;
                tf[k] = t2 - t1;
                for (int gi = 0; gi < ng; gi++) {
                    te_fuse_group gr;
                    te_fuse_plan_group(f.plan, gi, &gr);
                    double sn = 0; /* bf16: the f32 graph's nodes are not the groups' */
                    for (int i = 0; !g32 && i < gr.n_nodes; i++)
                        sn += node_s[gr.nodes[i]];
                    tn[gi * reps + k] = sn;
                    tg[gi * reps + k] = te_graph_exec_group_seconds(e, gi);
                }
            }
        }
        double tol = 1e-4;
        for (int j = 0; !status && j < nout; j++) {
            int v = te_graph_output_value(g, j);
            int w = g32 ? te_graph_find(g32, te_graph_value_name(g, v)) : v;
            int64_t n = te_graph_value_numel(g, v);
            if (w < 0 || te_graph_value_numel(gn, w) != n) {
                fprintf(stderr, "tessera bench --graph: output '%s' is not in the f32 graph\n",
                        te_graph_value_name(g, v));
                status = 1;
                break;
            }
            double d = rel_diff(out[j], x.buf[w], n);
            r->max_rel = d > r->max_rel ? d : r->max_rel;
            if (g32) { /* the bf16 bound (docs/DTYPES.md), normwise here: looser still */
                double ss = 0;
                for (int64_t i = 0; i < n; i++)
                    ss += (double)x.buf[w][i] * x.buf[w][i];
                tol = fmax(tol, te_graph_value_bf16_tolerance(g, v, sqrt(ss / (double)n)));
            }
        }
        if (!status) {
            r->fused_ms = median(tf, reps) * 1e3;
            r->nbn_ms = median(tb, reps) * 1e3;
            r->speedup = r->nbn_ms / r->fused_ms;
            for (int gi = 0; gi < ng; gi++) {
                r->group_ms[gi] = median(tg + gi * reps, reps) * 1e3;
                r->group_nbn_ms[gi] = median(tn + gi * reps, reps) * 1e3;
            }
            if (!(r->max_rel <= tol)) {
                fprintf(stderr,
                        "tessera bench --graph: %d threads: the fused and node-by-node outputs "
                        "differ by %g (> %g)\n",
                        r->threads, r->max_rel, tol);
                status = 1;
            }
        }
        te_graph_exec_free(e);
    }
    if (nres) {
        int nodes = te_graph_node_count(g);
        double mem_saving = ms.unfused_bytes ? 1.0 - (double)ms.pool_bytes / ms.unfused_bytes : 0;
        if (json) {
            printf(
                "{\"graph\": \"%s\", \"nodes\": %d, \"kernels_node_by_node\": %d, "
                "\"kernels_fused\": %d, \"views\": %d, \"intermediate_bytes_node_by_node\": %zu, "
                "\"intermediate_bytes_fused\": %zu, \"intermediate_bytes_planned\": %zu, "
                "\"intermediate_saving\": %.4f, \"openblas\": \"%s\", \"onednn\": \"%s\", "
                "\"reps\": %d, \"runs\": [",
                path, nodes, nodes, nk, ng - nk, ms.unfused_bytes, ms.fused_bytes, ms.pool_bytes,
                mem_saving, te_bl_openblas_core(), dn_note, reps);
            for (int i = 0; i < nres; i++) {
                printf("%s{\"threads\": %d, \"fused_ms\": %.4f, \"node_by_node_ms\": %.4f, "
                       "\"speedup\": %.3f, \"max_rel_diff\": %.3g, \"groups_from_db\": %d, "
                       "\"waves\": %d, \"pool_bytes\": %zu, \"groups\": [",
                       i ? ", " : "", res[i].threads, res[i].fused_ms, res[i].nbn_ms,
                       res[i].speedup, res[i].max_rel, res[i].from_db, res[i].waves,
                       res[i].pool_bytes);
                for (int gi = 0; gi < ng; gi++) {
                    te_fuse_group gr;
                    te_fuse_plan_group(f.plan, gi, &gr);
                    printf("%s{\"rule\": \"%s\", \"first\": \"%s\", \"nodes\": %d, "
                           "\"fused_ms\": %.4f, \"node_by_node_ms\": %.4f}",
                           gi ? ", " : "", gr.rule, te_graph_node_name(g, gr.nodes[0]), gr.n_nodes,
                           res[i].group_ms[gi], res[i].group_nbn_ms[gi]);
                }
                printf("], \"products\": [");
                for (int k = 0; k < res[i].nprod; k++) {
                    const prod_info *pi = &res[i].prod[k];
                    printf("%s{\"node\": \"%s\", \"openblas_ms\": ", k ? ", " : "",
                           te_graph_node_name(gn, pi->node));
                    printf(isfinite(pi->ob_ms) ? "%.4f" : "null", pi->ob_ms);
                    printf(", \"onednn_ms\": ");
                    printf(isfinite(pi->dn_ms) ? "%.4f" : "null", pi->dn_ms);
                    printf(", \"onednn_impl\": \"%s\", \"ran\": \"%s\"}", pi->impl,
                           pi->dn ? "oneDNN" : "OpenBLAS");
                }
                printf("]}");
            }
            printf("]}\n");
        } else {
            printf("graph %s: %d nodes; %s; %s\n", path, nodes, te_bl_openblas_note(), dn_note);
            printf("kernels: %d node by node, %d fused", nodes, nk);
            if (ng > nk)
                printf(" (and %d reshape view%s, no kernel)", ng - nk, ng - nk == 1 ? "" : "s");
            printf("\n");
            printf("peak intermediate memory: %.2f MiB node by node (every output kept), %.2f "
                   "MiB fused, %.2f MiB fused + planned (%.0f%% less; the last thread count's "
                   "schedule)\n",
                   ms.unfused_bytes / 1048576.0, ms.fused_bytes / 1048576.0,
                   ms.pool_bytes / 1048576.0, 100 * mem_saving);
            printf("%8s %12s %16s %8s %12s %10s\n", "threads", "fused ms", "node-by-node ms",
                   "speedup", "max rel diff", "tuned");
            for (int i = 0; i < nres; i++)
                printf("%8d %12.3f %16.3f %7.2fx %12.2g %6d/%d\n", res[i].threads, res[i].fused_ms,
                       res[i].nbn_ms, res[i].speedup, res[i].max_rel, res[i].from_db, nk);
            printf("(medians of %d alternating runs; node by node: each product on %s, below;\n"
                   " vectorized activations and row ops, plain loops for the rest)\n",
                   reps,
                   products < 0    ? "the faster of OpenBLAS and oneDNN"
                   : products == 0 ? "OpenBLAS"
                                   : "oneDNN where it can");
            for (int i = 0; i < nres; i++) {
                if (!res[i].nprod)
                    continue;
                printf("\n%d thread(s), node-by-node products (%d of %d on oneDNN; %s):\n"
                       "  %-16s %12s %12s  %-8s %s\n",
                       res[i].threads, res[i].nprod_dn, res[i].nprod,
                       products < 0 ? "medians of 7, alternating" : "as --products says, untimed",
                       "node", "OpenBLAS ms", "oneDNN ms", "ran", "oneDNN kernels");
                for (int k = 0; k < res[i].nprod; k++) {
                    const prod_info *pi = &res[i].prod[k];
                    const char *impl = pi->impl; /* "oneDNN brg:...": the column says oneDNN */
                    impl += strncmp(impl, "oneDNN ", 7) ? 0 : 7;
                    char ob[32] = "-", dn[32] = "-";
                    if (isfinite(pi->ob_ms))
                        snprintf(ob, sizeof ob, "%.3f", pi->ob_ms);
                    if (isfinite(pi->dn_ms))
                        snprintf(dn, sizeof dn, "%.3f", pi->dn_ms);
                    printf("  %-16.16s %12s %12s  %-8s %s\n", te_graph_node_name(gn, pi->node), ob,
                           dn, pi->dn ? "oneDNN" : "OpenBLAS", impl);
                }
            }
            for (int i = 0; i < nres; i++) {
                printf("\n%d thread(s), per group: %-28s %10s %16s\n", res[i].threads, "rule",
                       "fused ms", "its nodes ms");
                for (int gi = 0; gi < ng; gi++) {
                    te_fuse_group gr;
                    te_fuse_plan_group(f.plan, gi, &gr);
                    char label[64];
                    snprintf(label, sizeof label, "%.30s (%s...)", gr.rule,
                             te_graph_node_name(g, gr.nodes[0]));
                    printf("  group %2d %-42s %10.3f %16.3f\n", gi, label, res[i].group_ms[gi],
                           res[i].group_nbn_ms[gi]);
                }
            }
        }
    }
    if (x.g)
        nbn_free(&x);
    for (int i = 0; in && i < nin; i++)
        free(in[i]);
    for (int j = 0; out && j < nout; j++)
        free(out[j]);
    for (int i = 0; i < nres; i++)
        free(res[i].group_ms), free(res[i].group_nbn_ms), free(res[i].prod);
    free(in), free(out), free(tf), free(tb), free(node_s), free(tg), free(tn);
    te_db_close(db);
    te_graph_free(g32);
    te_cli_fused_free(&f);
    return status;
}
