/*
 * autotune/cost_model.c: gradient-boosted regression trees (squared loss) on the features of
 * lowered loop nests (te_features), trained online: the tuner adds every measured candidate
 * and refits after each batch, then ranks unmeasured candidates by the prediction.
 *
 * The fit is the histogram method of LightGBM/XGBoost's "hist" in miniature: every feature is
 * cut into at most 32 quantile bins once per fit, and each tree node finds its best split from
 * per-bin sums of gradients and weights. With a few thousand samples and 64 features a full
 * refit (up to 80 trees of depth 5) takes a few tens of milliseconds, small beside compiling
 * one batch, so the model is simply refit from scratch after every batch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"

#define NBINS 32
#define MAX_DEPTH 5
#define MAX_TREES 80
#define LEARNING_RATE 0.15
#define LAMBDA 1.0
#define MIN_LEAF 2

typedef struct {
    int feature; /* -1 for a leaf */
    float thr;   /* go left when x <= thr */
    int left, right;
    float value;
} node;

typedef struct {
    int n;
    node nodes[1 << (MAX_DEPTH + 1)];
} tree;

struct te__gbt {
    int nf;
    int n, cap;
    float *x; /* n x nf */
    double *y, *w;
    double base;
    int ntrees;
    tree *trees;
    int trained;
};

te__gbt *te__gbt_create(int n_features)
{
    if (n_features <= 0)
        return NULL;
    te__gbt *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->nf = n_features;
    g->trees = calloc(MAX_TREES, sizeof *g->trees);
    if (!g->trees) {
        free(g);
        return NULL;
    }
    return g;
}

void te__gbt_free(te__gbt *g)
{
    if (!g)
        return;
    free(g->x);
    free(g->y);
    free(g->w);
    free(g->trees);
    free(g);
}

int te__gbt_add(te__gbt *g, const float *x, double y, double w)
{
    if (!g || !x || !(w > 0) || !isfinite(y))
        return TE_ERR_ARG;
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        float *nx = realloc(g->x, sizeof(float) * (size_t)cap * (size_t)g->nf);
        if (!nx)
            return TE_ERR_NOMEM;
        g->x = nx;
        double *ny = realloc(g->y, sizeof(double) * (size_t)cap);
        if (!ny)
            return TE_ERR_NOMEM;
        g->y = ny;
        double *nw = realloc(g->w, sizeof(double) * (size_t)cap);
        if (!nw)
            return TE_ERR_NOMEM;
        g->w = nw;
        g->cap = cap;
    }
    float *row = g->x + (size_t)g->n * (size_t)g->nf;
    for (int f = 0; f < g->nf; f++)
        row[f] = isfinite(x[f]) ? x[f] : 0.0f;
    g->y[g->n] = y;
    g->w[g->n] = w;
    g->n++;
    if (!g->trained) {
        double s = 0, sw = 0;
        for (int i = 0; i < g->n; i++) {
            s += g->w[i] * g->y[i];
            sw += g->w[i];
        }
        g->base = sw > 0 ? s / sw : 0;
    }
    return TE_OK;
}

int te__gbt_nsamples(const te__gbt *g) { return g ? g->n : 0; }
int te__gbt_trained(const te__gbt *g) { return g ? g->trained : 0; }

void te__gbt_scale_targets(te__gbt *g, double scale)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        g->y[i] *= scale;
    g->base *= scale;
    for (int t = 0; t < g->ntrees; t++)
        for (int k = 0; k < g->trees[t].n; k++)
            g->trees[t].nodes[k].value = (float)(g->trees[t].nodes[k].value * scale);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    te__gbt *g;
    int nf;
    float *edges;        /* nf x (NBINS - 1): upper bounds of bins 0 .. nb-2 */
    int *nedges;         /* per feature */
    uint8_t *bins;       /* n x nf */
    double *grad;        /* residuals */
    double *gsum, *wsum; /* histogram scratch: NBINS */
    int *idx, *tmp;
} fitter;

/* Builds the subtree for samples idx[lo..hi) at depth d; returns its node index. */
static int grow(fitter *F, tree *t, int lo, int hi, int depth)
{
    te__gbt *g = F->g;
    int me = t->n++;
    node *nd = &t->nodes[me];
    double G = 0, H = 0;
    for (int k = lo; k < hi; k++) {
        int i = F->idx[k];
        G += g->w[i] * F->grad[i];
        H += g->w[i];
    }
    nd->feature = -1;
    nd->value = (float)(LEARNING_RATE * G / (H + LAMBDA));
    if (depth >= MAX_DEPTH || hi - lo < 2 * MIN_LEAF ||
        t->n + 2 > (int)(sizeof t->nodes / sizeof t->nodes[0]))
        return me;
    double parent = G * G / (H + LAMBDA), best_gain = 1e-12;
    int best_f = -1, best_b = -1;
    for (int f = 0; f < F->nf; f++) {
        int ne = F->nedges[f];
        if (ne == 0)
            continue;
        memset(F->gsum, 0, sizeof(double) * NBINS);
        memset(F->wsum, 0, sizeof(double) * NBINS);
        for (int k = lo; k < hi; k++) {
            int i = F->idx[k];
            int b = F->bins[(size_t)i * (size_t)F->nf + (size_t)f];
            F->gsum[b] += g->w[i] * F->grad[i];
            F->wsum[b] += g->w[i];
        }
        double GL = 0, HL = 0;
        for (int b = 0; b < ne; b++) {
            GL += F->gsum[b];
            HL += F->wsum[b];
            double GR = G - GL, HR = H - HL;
            if (HL <= 0 || HR <= 0)
                continue;
            double gain = GL * GL / (HL + LAMBDA) + GR * GR / (HR + LAMBDA) - parent;
            if (gain > best_gain) {
                best_gain = gain;
                best_f = f;
                best_b = b;
            }
        }
    }
    if (best_f < 0)
        return me;
    /* Partition idx[lo..hi) by bin <= best_b. */
    int m = lo;
    for (int k = lo; k < hi; k++) {
        int i = F->idx[k];
        if (F->bins[(size_t)i * (size_t)F->nf + (size_t)best_f] <= best_b)
            F->tmp[m++ - lo] = i;
    }
    int nl = m - lo;
    for (int k = lo; k < hi; k++) {
        int i = F->idx[k];
        if (F->bins[(size_t)i * (size_t)F->nf + (size_t)best_f] > best_b)
            F->tmp[m++ - lo] = i;
    }
    memcpy(F->idx + lo, F->tmp, sizeof(int) * (size_t)(hi - lo));
    if (nl < MIN_LEAF || hi - lo - nl < MIN_LEAF)
        return me;
    nd->feature = best_f;
    nd->thr = F->edges[(size_t)best_f * (NBINS - 1) + (size_t)best_b];
    int l = grow(F, t, lo, lo + nl, depth + 1);
    int r = grow(F, t, lo + nl, hi, depth + 1);
    nd->left = l;
    nd->right = r;
    return me;
}

static double tree_predict(const tree *t, const float *x)
{
    int k = 0;
    while (t->nodes[k].feature >= 0)
        k = x[t->nodes[k].feature] <= t->nodes[k].thr ? t->nodes[k].left : t->nodes[k].right;
    return t->nodes[k].value;
}

int te__gbt_fit(te__gbt *g)
{
    if (!g || g->n < 2)
        return TE_ERR_ARG;
    int n = g->n, nf = g->nf;
    fitter F = {g, nf, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    F.edges = malloc(sizeof(float) * (size_t)nf * (NBINS - 1));
    F.nedges = calloc((size_t)nf, sizeof(int));
    F.bins = malloc((size_t)n * (size_t)nf);
    F.grad = malloc(sizeof(double) * (size_t)n);
    F.gsum = malloc(sizeof(double) * NBINS);
    F.wsum = malloc(sizeof(double) * NBINS);
    F.idx = malloc(sizeof(int) * (size_t)n);
    F.tmp = malloc(sizeof(int) * (size_t)(n > NBINS ? n : NBINS));
    float *col = malloc(sizeof(float) * (size_t)n);
    double *pred = malloc(sizeof(double) * (size_t)n);
    int rc = TE_OK;
    if (!F.edges || !F.nedges || !F.bins || !F.grad || !F.gsum || !F.wsum || !F.idx || !F.tmp ||
        !col || !pred) {
        rc = TE_ERR_NOMEM;
        goto out;
    }
    /* Quantile bin edges per feature: midpoints between distinct sorted values. */
    for (int f = 0; f < nf; f++) {
        for (int i = 0; i < n; i++)
            col[i] = g->x[(size_t)i * (size_t)nf + (size_t)f];
        qsort(col, (size_t)n, sizeof(float), cmp_float);
        int nd = 0;
        for (int i = 0; i < n; i++)
            if (i == 0 || col[i] != col[i - 1])
                col[nd++] = col[i];
        float *e = F.edges + (size_t)f * (NBINS - 1);
        int ne = 0;
        if (nd <= NBINS) {
            for (int i = 0; i + 1 < nd; i++)
                e[ne++] = 0.5f * (col[i] + col[i + 1]);
        } else {
            for (int b = 1; b < NBINS; b++) {
                int i = (int)((int64_t)b * nd / NBINS);
                float v = 0.5f * (col[i - 1] + col[i]);
                if (ne == 0 || v > e[ne - 1])
                    e[ne++] = v;
            }
        }
        F.nedges[f] = ne;
        for (int i = 0; i < n; i++) {
            float v = g->x[(size_t)i * (size_t)nf + (size_t)f];
            int lo = 0, hi = ne; /* first edge >= v */
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (e[mid] < v)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            F.bins[(size_t)i * (size_t)nf + (size_t)f] = (uint8_t)lo;
        }
    }
    double s = 0, sw = 0;
    for (int i = 0; i < n; i++) {
        s += g->w[i] * g->y[i];
        sw += g->w[i];
    }
    g->base = sw > 0 ? s / sw : 0;
    for (int i = 0; i < n; i++)
        pred[i] = g->base;
    int ntrees = n < 64 ? 20 : n < 512 ? 50 : MAX_TREES;
    g->ntrees = 0;
    for (int t = 0; t < ntrees; t++) {
        for (int i = 0; i < n; i++) {
            F.grad[i] = g->y[i] - pred[i];
            F.idx[i] = i;
        }
        tree *tr = &g->trees[t];
        tr->n = 0;
        grow(&F, tr, 0, n, 0);
        g->ntrees = t + 1;
        for (int i = 0; i < n; i++)
            pred[i] += tree_predict(tr, g->x + (size_t)i * (size_t)nf);
    }
    g->trained = 1;
out:
    free(F.edges);
    free(F.nedges);
    free(F.bins);
    free(F.grad);
    free(F.gsum);
    free(F.wsum);
    free(F.idx);
    free(F.tmp);
    free(col);
    free(pred);
    return rc;
}

double te__gbt_predict(const te__gbt *g, const float *x)
{
    if (!g || !x)
        return 0;
    double p = g->base;
    float xs[TE_NUM_FEATURES * 4];
    const float *v = x;
    if (g->nf <= (int)(sizeof xs / sizeof xs[0])) {
        for (int f = 0; f < g->nf; f++)
            xs[f] = isfinite(x[f]) ? x[f] : 0.0f;
        v = xs;
    }
    for (int t = 0; t < g->ntrees; t++)
        p += tree_predict(&g->trees[t], v);
    return p;
}
