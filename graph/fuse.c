/* The fusion engine: rules matched most-specific first, each candidate checked for
 * feasibility and recorded as a decision with its reason (XLA's FusionDecision), then TVM's
 * kind-based fusion over what is left, then singletons. The target facts (L2, clock, cores)
 * are read at run time. */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/fuse_internal.h"
#include "tessera/backend.h"

/* ---- Target facts ------------------------------------------------------------------------- */

static long long read_sysfs_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    long long v = -1;
    if (fgets(buf, sizeof buf, f)) {
        char *end;
        v = strtoll(buf, &end, 10);
        if (end == buf)
            v = -1;
        else if (*end == 'K')
            v *= 1024;
        else if (*end == 'M')
            v *= 1024 * 1024;
    }
    fclose(f);
    return v;
}

int te_fuse_target_host(te_fuse_target *t)
{
    if (!t)
        return TE_ERR_ARG;
    memset(t, 0, sizeof *t);
    te_target h = te_target_host();
    snprintf(t->name, sizeof t->name, "cpu");
    snprintf(t->isa, sizeof t->isa, "%s", h.isa);
    t->cores = h.num_cores > 0 ? h.num_cores : 1;
    t->vector_bits = h.vector_bits > 0 ? h.vector_bits : 128;
    const char *l2src = NULL;
    for (int i = 0; i < 8 && !t->l2_bytes; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_sysfs_size(path) != 2)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        long long v = read_sysfs_size(path);
        if (v > 0) {
            t->l2_bytes = (size_t)v;
            l2src = "sysfs";
        }
    }
#ifdef _SC_LEVEL2_CACHE_SIZE
    if (!t->l2_bytes) {
        long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (v > 0) {
            t->l2_bytes = (size_t)v;
            l2src = "sysconf";
        }
    }
#endif
    double ghz = 0;
    const char *clksrc = "assumed 2.0 GHz";
    long long khz = read_sysfs_size("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    if (khz > 0) {
        ghz = (double)khz / 1e6;
        clksrc = "cpufreq";
    } else {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "cpu MHz", 7)) {
                const char *c = strchr(line, ':');
                if (c)
                    ghz = strtod(c + 1, NULL) / 1000.0;
                clksrc = "/proc/cpuinfo";
                break;
            }
        if (f)
            fclose(f);
    }
    if (!(ghz > 0))
        ghz = 2.0;
    t->peak_gflops = t->cores * ghz * (t->vector_bits / 32) * 2.0 * 2.0;
    const char *bw = getenv("TESSERA_MEM_GBPS");
    t->mem_gbps = bw && strtod(bw, NULL) > 0 ? strtod(bw, NULL) : 8.0 * t->cores;
    t->launch_us = 2.0;
    snprintf(t->source, sizeof t->source, "L2 from %s, clock %.2f GHz from %s, bandwidth %s",
             l2src ? l2src : "nowhere", ghz, clksrc, bw ? "$TESSERA_MEM_GBPS" : "estimated");
    return t->l2_bytes ? TE_OK : TE_ERR_IO;
}

/* ---- The plan ----------------------------------------------------------------------------- */

typedef struct fgroup {
    char rule[64];
    char cls[16];
    char fused[96];
    int n, *nodes;
    int nout, *outs;
} fgroup;

typedef struct fdec {
    int accepted;
    char rule[64];
    char check[12];
    char reason[512];
    int n, *nodes;
} fdec;

struct te_fuse_plan {
    const te_graph *g;
    te_fuse_target t;
    fgroup *gr;
    int ng;
    fdec *d;
    int nd, capd;
    int *group_of;
};

void te_fuse_plan_free(te_fuse_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->ng; i++)
        free(p->gr[i].nodes), free(p->gr[i].outs);
    for (int i = 0; i < p->nd; i++)
        free(p->d[i].nodes);
    free(p->gr);
    free(p->d);
    free(p->group_of);
    free(p);
}

/* ---- Engine state ------------------------------------------------------------------------- */

#define MAXM 64

typedef struct mstate {
    int nodes[MAXM];
    int n;
    int count[TE__R_ITEMS]; /* nodes matched per item (elements) */
    int multi;              /* some element matched other than once */
    int anchor_value;       /* siblings as the first item */
} mstate;

typedef struct fctx {
    te_graph *g;
    te_fuse_plan *p;
    const te_fuse_target *t;
    int **cons; /* consumers of each value (node ids) */
    int *ncons;
    int *assigned; /* group of each node, -1 */
    fgroup *tmp;   /* groups in creation order */
    int ntmp, captmp;
} fctx;

static const te__gnode *NODE(const fctx *f, int n) { return &f->g->n[n]; }
static const te__gvalue *VAL(const fctx *f, int v) { return &f->g->v[v]; }

static int in_state(const mstate *st, int n)
{
    for (int i = 0; i < st->n; i++)
        if (st->nodes[i] == n)
            return 1;
    return 0;
}

static int free_node(const fctx *f, const mstate *st, int n)
{
    return n >= 0 && f->assigned[n] < 0 && !in_state(st, n) && st->n < MAXM;
}

static int match_items(fctx *f, const te__rule *r, int item, int prev, int anchor, mstate *st);

/* Element item `item` matched `c` times so far, the last match being node prev. */
static int match_rep(fctx *f, const te__rule *r, int item, int c, int prev, int anchor, mstate *st)
{
    const te__pelem *e = &r->items[item].elem;
    if (c < e->max) {
        if (prev < 0 && item == 0) {
            if (free_node(f, st, anchor) && te__pelem_accepts(e, NODE(f, anchor)->op)) {
                st->nodes[st->n++] = anchor;
                if (match_rep(f, r, item, c + 1, anchor, anchor, st))
                    return 1;
                st->n--;
            }
        } else if (prev >= 0) {
            const te__gnode *pn = NODE(f, prev);
            for (int o = 0; o < pn->n_out; o++) {
                int v = pn->out[o];
                for (int k = 0; k < f->ncons[v]; k++) {
                    int cn = f->cons[v][k];
                    if (!free_node(f, st, cn) || !te__pelem_accepts(e, NODE(f, cn)->op))
                        continue;
                    st->nodes[st->n++] = cn;
                    if (match_rep(f, r, item, c + 1, cn, anchor, st))
                        return 1;
                    st->n--;
                }
            }
        }
    }
    if (c >= e->min) {
        int save = st->count[item];
        st->count[item] = c;
        if (match_items(f, r, item + 1, prev, anchor, st))
            return 1;
        st->count[item] = save;
    }
    return 0;
}

static int same_shape(const te__gvalue *a, const te__gvalue *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static int match_siblings(fctx *f, const te__rule *r, int item, int sv, mstate *st)
{
    const te__pelem *e = &r->items[item].elem;
    int got = 0, first = -1;
    for (int k = 0; k < f->ncons[sv] && got < e->max; k++) {
        int cn = f->cons[sv][k];
        const te__gnode *nd = NODE(f, cn);
        if (!free_node(f, st, cn) || nd->in[0] != sv || !te__pelem_accepts(e, nd->op))
            continue;
        if (r->same_shape && first >= 0 &&
            !same_shape(VAL(f, nd->out[0]), VAL(f, NODE(f, first)->out[0])))
            continue;
        if (first < 0)
            first = cn;
        st->nodes[st->n++] = cn;
        got++;
    }
    if (got < e->min) {
        st->n -= got;
        return 0;
    }
    st->count[item] = got;
    if (e->max < TE__R_INF && got != e->max)
        st->multi = 1;
    return 1;
}

/* Branch: path `which` (1 or 2) matched backward; element k has c matches; v is the value the
 * next match must produce. */
typedef struct bctx {
    const te__pitem *it;
    int item, join, in_a, in_b, src1;
} bctx;

static int branch_back(fctx *f, const te__rule *r, bctx *b, int which, int k, int c, int v,
                       mstate *st)
{
    const te__pelem *path = which == 1 ? b->it->p1 : b->it->p2;
    if (k < 0) {
        if (which == 1) {
            b->src1 = v;
            return branch_back(f, r, b, 2, b->it->n2 - 1, 0, b->in_b, st);
        }
        /* Both paths start at one value that the group does not produce. */
        if (v != b->src1 || (VAL(f, v)->node >= 0 && in_state(st, VAL(f, v)->node)))
            return 0;
        return match_items(f, r, b->item + 1, b->join, b->join, st);
    }
    const te__pelem *e = &path[k];
    if (c < e->max) {
        int p = VAL(f, v)->node;
        if (free_node(f, st, p) && te__pelem_accepts(e, NODE(f, p)->op)) {
            st->nodes[st->n++] = p;
            const te__gnode *pn = NODE(f, p);
            for (int i = 0; i < pn->n_in; i++) {
                if (VAL(f, pn->in[i])->kind == TE_GRAPH_CONST)
                    continue;
                if (branch_back(f, r, b, which, k, c + 1, pn->in[i], st))
                    return 1;
            }
            st->n--;
        }
    }
    if (c >= e->min) {
        if (c != 1)
            st->multi++;
        if (branch_back(f, r, b, which, k - 1, 0, v, st))
            return 1;
        if (c != 1)
            st->multi--;
    }
    return 0;
}

static int match_branch(fctx *f, const te__rule *r, int item, int join, mstate *st)
{
    const te__pitem *it = &r->items[item];
    const te__gnode *j = NODE(f, join);
    if (!free_node(f, st, join) || !te__pelem_accepts(&it->elem, j->op) || j->n_in < 2)
        return 0;
    st->nodes[st->n++] = join;
    for (int a = 0; a < j->n_in; a++)
        for (int b2 = 0; b2 < j->n_in; b2++) {
            if (a == b2)
                continue;
            bctx b = {it, item, join, j->in[a], j->in[b2], -1};
            int save_n = st->n, save_multi = st->multi;
            if (branch_back(f, r, &b, 1, it->n1 - 1, 0, j->in[a], st))
                return 1;
            st->n = save_n;
            st->multi = save_multi;
        }
    st->n--;
    return 0;
}

static int match_items(fctx *f, const te__rule *r, int item, int prev, int anchor, mstate *st)
{
    if (item == r->nitems)
        return 1;
    const te__pitem *it = &r->items[item];
    switch (it->type) {
    case TE__ITEM_ELEM:
        return match_rep(f, r, item, 0, prev, anchor, st);
    case TE__ITEM_SIBLINGS:
        return match_siblings(f, r, item, prev < 0 ? st->anchor_value : NODE(f, prev)->out[0], st);
    case TE__ITEM_BRANCH:
        return item == 0 && match_branch(f, r, item, anchor, st);
    }
    return 0;
}

/* ---- Decisions ---------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

__attribute__((format(printf, 6, 7))) static int add_decision(fctx *f, int accepted,
                                                              const char *rule, const char *check,
                                                              const mstate *st, const char *fmt,
                                                              ...)
{
    te_fuse_plan *p = f->p;
    for (int i = 0; i < p->nd; i++) /* the same candidate again: nothing new to say */
        if (!strcmp(p->d[i].rule, rule) && p->d[i].n == st->n &&
            !memcmp(p->d[i].nodes, st->nodes, sizeof(int) * (size_t)st->n))
            return TE_OK;
    if (p->nd == p->capd) {
        int cap = p->capd ? 2 * p->capd : 16;
        fdec *d = realloc(p->d, sizeof *d * (size_t)cap);
        if (!d)
            return TE_ERR_NOMEM;
        p->d = d;
        p->capd = cap;
    }
    fdec *d = &p->d[p->nd];
    memset(d, 0, sizeof *d);
    d->accepted = accepted;
    snprintf(d->rule, sizeof d->rule, "%s", rule);
    snprintf(d->check, sizeof d->check, "%s", check);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason, sizeof d->reason, fmt, ap);
    va_end(ap);
    d->nodes = malloc(sizeof(int) * (size_t)(st->n + 1));
    if (!d->nodes)
        return TE_ERR_NOMEM;
    memcpy(d->nodes, st->nodes, sizeof(int) * (size_t)st->n);
    d->n = st->n;
    p->nd++;
    return TE_OK;
}

static const char *vname(const fctx *f, int v) { return VAL(f, v)->name; }
static const char *nname(const fctx *f, int n) { return VAL(f, NODE(f, n)->out[0])->name; }

static double vbytes(const fctx *f, int v)
{
    const te__gvalue *x = VAL(f, v);
    double n = 1;
    for (int d = 0; d < x->ndim; d++)
        n *= (double)x->shape[d];
    return n * (double)te_dtype_size(x->dtype);
}

static void human_bytes(double b, char *buf, size_t n)
{
    if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.2f MiB", b / (1024.0 * 1024));
    else if (b >= 1024)
        snprintf(buf, n, "%.1f KiB", b / 1024);
    else
        snprintf(buf, n, "%.0f B", b);
}

/* Checks a candidate (st->nodes sorted) and records the decision. Returns 1 when accepted. */
static int check_candidate(fctx *f, const char *rule, int allow_escape, mstate *st)
{
    const te_graph *g = f->g;
    int nn = g->nn;
    char *in_s = calloc((size_t)nn + 1, 1);
    char *seen = calloc((size_t)nn + 1, 1);
    int *stack = malloc(sizeof(int) * ((size_t)nn + 1));
    if (!in_s || !seen || !stack) {
        free(in_s), free(seen), free(stack);
        return 0;
    }
    for (int i = 0; i < st->n; i++)
        in_s[st->nodes[i]] = 1;
    int ok = 1;
    /* 1. No path that leaves the group and comes back. */
    for (int i = 0; ok && i < st->n; i++) {
        const te__gnode *nd = NODE(f, st->nodes[i]);
        for (int o = 0; ok && o < nd->n_out; o++) {
            int v = nd->out[o];
            for (int k = 0; ok && k < f->ncons[v]; k++) {
                int start = f->cons[v][k];
                if (in_s[start] || seen[start])
                    continue;
                int sp = 0;
                stack[sp++] = start;
                seen[start] = 1;
                while (ok && sp) {
                    int x = stack[--sp];
                    const te__gnode *xn = NODE(f, x);
                    for (int xo = 0; ok && xo < xn->n_out; xo++)
                        for (int c = 0; ok && c < f->ncons[xn->out[xo]]; c++) {
                            int y = f->cons[xn->out[xo]][c];
                            if (in_s[y]) {
                                add_decision(f, 0, rule, "cycle", st,
                                             "'%s' leaves the group to '%s' (%s), whose result "
                                             "comes back into '%s': the fused kernel would "
                                             "depend on itself",
                                             vname(f, v), nname(f, start), NODE(f, start)->op->name,
                                             nname(f, y));
                                ok = 0;
                            } else if (!seen[y]) {
                                seen[y] = 1;
                                stack[sp++] = y;
                            }
                        }
                }
            }
        }
    }
    /* 2. Extra outputs: an intermediate also read outside the group. */
    for (int i = 0; ok && i < st->n; i++) {
        const te__gnode *nd = NODE(f, st->nodes[i]);
        for (int o = 0; ok && o < nd->n_out; o++) {
            int v = nd->out[o], inside = 0, outside = -1;
            for (int k = 0; k < f->ncons[v]; k++) {
                if (in_s[f->cons[v][k]])
                    inside = 1;
                else if (outside < 0)
                    outside = f->cons[v][k];
            }
            if (inside && (outside >= 0 || VAL(f, v)->is_output) && !allow_escape) {
                add_decision(f, 0, rule, "escape", st,
                             "'%s' (%s) is also read by %s%s%s outside the group; the rule does "
                             "not allow extra group outputs (where escape=1)",
                             vname(f, v), nd->op->name, outside >= 0 ? "'" : "the graph output",
                             outside >= 0 ? nname(f, outside) : "", outside >= 0 ? "'" : "");
                ok = 0;
            }
        }
    }
    /* 3. Register tile fit: matmuls/convolutions that read one input in one kernel keep one
     * accumulator tile each (r rows x 2 vectors) plus 2 vector loads and a broadcast; the
     * largest r in 4, 2, 1 that fits the target's vector registers is used. */
    char notes[256] = "";
    if (ok && strcmp(f->t->name, "cuda") != 0) {
        int k = 0, shared = -1;
        for (int i = 0; i < st->n; i++) {
            const te__gnode *a = NODE(f, st->nodes[i]);
            if (a->op->kind != TE_KIND_OUT_EWISE_FUSABLE)
                continue;
            int c = 0;
            for (int j = 0; j < st->n; j++) {
                const te__gnode *b = NODE(f, st->nodes[j]);
                c += b->op->kind == TE_KIND_OUT_EWISE_FUSABLE && b->in[0] == a->in[0];
            }
            if (c > k)
                k = c, shared = a->in[0];
        }
        if (k >= 2) {
            int nregs = strstr(f->t->isa, "avx512f") ? 32 : 16;
            int lanes = f->t->vector_bits / 32 > 0 ? f->t->vector_bits / 32 : 4, r = 4;
            while (r > 1 && k * r * 2 + 3 > nregs)
                r /= 2;
            int need = k * r * 2 + 3;
            if (need > nregs) {
                add_decision(f, 0, rule, "registers", st,
                             "%d matmul/conv nodes read '%s' in one kernel: %d accumulator tiles "
                             "of 1x%d need %d vector registers, the target has %d",
                             k, vname(f, shared), k, 2 * lanes, need, nregs);
                ok = 0;
            } else {
                snprintf(notes, sizeof notes,
                         "; %d accumulator tiles of %dx%d: %d of %d vector "
                         "registers",
                         k, r, 2 * lanes, need, nregs);
            }
        }
    }
    /* 4. Intermediates re-read by a reduction: staged in L2, or recomputed (roofline). */
    double recompute = 0;
    for (int i = 0; ok && i < st->n; i++) {
        const te__gnode *c = NODE(f, st->nodes[i]);
        if (c->op->kind < TE_KIND_REDUCTION)
            continue;
        for (int in = 0; ok && in < c->n_in; in++) {
            int v = c->in[in], p = VAL(f, v)->node;
            if (p < 0 || !in_s[p])
                continue;
            double reuse = c->op->kind == TE_KIND_REDUCTION
                               ? 3.0
                               : te_graph_node_flops(g, st->nodes[i]) /
                                     (2.0 * vbytes(f, v) / (double)te_dtype_size(VAL(f, v)->dtype));
            if (reuse < 1)
                reuse = 1;
            double b = vbytes(f, v);
            char hb[32], hl[32];
            human_bytes(b, hb, sizeof hb);
            human_bytes((double)f->t->l2_bytes, hl, sizeof hl);
            char key[64];
            snprintf(key, sizeof key, "'%s' (", vname(f, v));
            if (strstr(notes, key))
                continue; /* one note per intermediate */
            if (b <= (double)f->t->l2_bytes) {
                size_t len = strlen(notes);
                snprintf(notes + len, sizeof notes - len, "; '%s' (%s) staged in L2 (%s)",
                         vname(f, v), hb, hl);
            } else if (NODE(f, p)->op->kind <= TE_KIND_INJECTIVE) {
                recompute += te_graph_node_flops(g, p) * (reuse - 1);
                size_t len = strlen(notes);
                snprintf(notes + len, sizeof notes - len, "; '%s' (%s) recomputed %.0fx",
                         vname(f, v), NODE(f, p)->op->name, reuse);
            } else {
                add_decision(f, 0, rule, "l2", st,
                             "'%s' (%s, %s) is re-read %.0fx by '%s' (%s) and must be staged, "
                             "but the L2 holds %s",
                             vname(f, v), NODE(f, p)->op->name, hb, reuse, nname(f, st->nodes[i]),
                             c->op->name, hl);
                ok = 0;
            }
        }
    }
    /* 5. Roofline: estimated time of the nodes one by one against the fused kernel. */
    if (ok) {
        double P = f->t->peak_gflops * 1e9, BW = f->t->mem_gbps * 1e9, L = f->t->launch_us * 1e-6;
        double t_unf = 0, F = 0, B_unf = 0, B_f = 0;
        for (int i = 0; i < st->n; i++) {
            const te__gnode *nd = NODE(f, st->nodes[i]);
            double fl = te_graph_node_flops(g, st->nodes[i]), by = 0;
            for (int in = 0; in < nd->n_in; in++)
                by += vbytes(f, nd->in[in]);
            for (int o = 0; o < nd->n_out; o++)
                by += vbytes(f, nd->out[o]);
            double tc = fl / P, tm = by / BW;
            t_unf += (tc > tm ? tc : tm) + L;
            F += fl;
            B_unf += by;
            /* Fused traffic: values read from outside (once each) and values leaving. */
            for (int in = 0; in < nd->n_in; in++) {
                int v = nd->in[in], p = VAL(f, v)->node, dup = 0;
                if (p >= 0 && in_s[p])
                    continue;
                for (int j = 0; j < i && !dup; j++)
                    for (int jj = 0; jj < NODE(f, st->nodes[j])->n_in; jj++)
                        dup |= NODE(f, st->nodes[j])->in[jj] == v;
                for (int jj = 0; jj < in && !dup; jj++)
                    dup |= nd->in[jj] == v;
                if (!dup)
                    B_f += vbytes(f, v);
            }
            for (int o = 0; o < nd->n_out; o++) {
                int v = nd->out[o], leaves = VAL(f, v)->is_output;
                for (int k = 0; k < f->ncons[v]; k++)
                    leaves |= !in_s[f->cons[v][k]];
                if (leaves)
                    B_f += vbytes(f, v);
            }
        }
        double Ff = F + recompute, tc = Ff / P, tm = B_f / BW;
        double t_f = (tc > tm ? tc : tm) + L;
        char hu[32], hf[32];
        human_bytes(B_unf, hu, sizeof hu);
        human_bytes(B_f, hf, sizeof hf);
        double bal = P / BW;
        if (t_f >= t_unf) {
            add_decision(f, 0, rule, "roofline", st,
                         "fused %.1f us >= unfused %.1f us: %.3g FLOP (+%.3g recomputed) over %s "
                         "is %.1f FLOP/B against a balance of %.1f%s",
                         t_f * 1e6, t_unf * 1e6, F, recompute, hf, B_f > 0 ? Ff / B_f : 0, bal,
                         notes);
            ok = 0;
        } else {
            add_decision(f, 1, rule, "ok", st,
                         "%d nodes, %.3g FLOP; traffic %s -> %s, intensity %.2f -> %.2f FLOP/B "
                         "(balance %.1f); est. %.1f -> %.1f us%s",
                         st->n, Ff, hu, hf, B_unf > 0 ? F / B_unf : 0, B_f > 0 ? Ff / B_f : 0, bal,
                         t_unf * 1e6, t_f * 1e6, notes);
        }
    }
    free(in_s), free(seen), free(stack);
    return ok;
}

/* Records a group of st's nodes. */
static int add_group(fctx *f, const char *rule, const char *cls, const char *fused,
                     const mstate *st)
{
    if (f->ntmp == f->captmp) {
        int cap = f->captmp ? 2 * f->captmp : 16;
        fgroup *p = realloc(f->tmp, sizeof *p * (size_t)cap);
        if (!p)
            return TE_ERR_NOMEM;
        f->tmp = p;
        f->captmp = cap;
    }
    fgroup *gr = &f->tmp[f->ntmp];
    memset(gr, 0, sizeof *gr);
    snprintf(gr->rule, sizeof gr->rule, "%s", rule);
    snprintf(gr->cls, sizeof gr->cls, "%s", cls);
    snprintf(gr->fused, sizeof gr->fused, "%s", fused ? fused : "");
    gr->nodes = malloc(sizeof(int) * (size_t)(st->n + 1));
    gr->outs = malloc(sizeof(int) * (size_t)(st->n * TE__G_MAXIO + 1));
    if (!gr->nodes || !gr->outs)
        return TE_ERR_NOMEM;
    memcpy(gr->nodes, st->nodes, sizeof(int) * (size_t)st->n);
    gr->n = st->n;
    qsort(gr->nodes, (size_t)gr->n, sizeof(int), cmp_int);
    for (int i = 0; i < gr->n; i++)
        f->assigned[gr->nodes[i]] = f->ntmp;
    for (int i = 0; i < gr->n; i++) {
        const te__gnode *nd = NODE(f, gr->nodes[i]);
        for (int o = 0; o < nd->n_out; o++) {
            int v = nd->out[o], leaves = VAL(f, v)->is_output;
            for (int k = 0; k < f->ncons[v]; k++)
                leaves |= f->assigned[f->cons[v][k]] != f->ntmp;
            if (leaves)
                gr->outs[gr->nout++] = v;
        }
    }
    f->ntmp++;
    return TE_OK;
}

static int where_ok(fctx *f, const te__rule *r, mstate *st)
{
    const te__gvalue *o = VAL(f, NODE(f, st->nodes[0])->out[0]);
    char why[160] = "";
    if (r->dtype_mask && !(r->dtype_mask & (1u << o->dtype)))
        snprintf(why, sizeof why, "dtype %s is not allowed by the rule", te_dtype_str(o->dtype));
    else if (r->rank > 0 && o->ndim != r->rank)
        snprintf(why, sizeof why, "rank %d, the rule wants %d", o->ndim, r->rank);
    else if (r->min_rank > 0 && o->ndim < r->min_rank)
        snprintf(why, sizeof why, "rank %d, the rule wants >= %d", o->ndim, r->min_rank);
    else if (r->max_numel &&
             te_graph_value_numel(f->g, NODE(f, st->nodes[0])->out[0]) > r->max_numel)
        snprintf(why, sizeof why, "%lld elements, the rule allows %lld",
                 (long long)te_graph_value_numel(f->g, NODE(f, st->nodes[0])->out[0]),
                 (long long)r->max_numel);
    for (int i = 0; !why[0] && r->kernel_h && i < st->n; i++) {
        const te__gnode *nd = NODE(f, st->nodes[i]);
        if (strstr(nd->op->name, "conv2d") == NULL)
            continue;
        const te__gvalue *w = VAL(f, nd->in[1]);
        int nhwc = strstr(nd->attrs, "NHWC") != NULL;
        int64_t kh = nhwc ? w->shape[0] : w->shape[2], kw = nhwc ? w->shape[1] : w->shape[3];
        if (kh != r->kernel_h || kw != r->kernel_w)
            snprintf(why, sizeof why, "'%s' has a %lldx%lld kernel, the rule wants %dx%d",
                     nname(f, st->nodes[i]), (long long)kh, (long long)kw, r->kernel_h,
                     r->kernel_w);
    }
    if (why[0]) {
        add_decision(f, 0, r->name, "constraint", st, "%s", why);
        return 0;
    }
    return 1;
}

static int exact_match(const te__rule *r, const mstate *st)
{
    if (st->multi)
        return 0;
    for (int i = 0; i < r->nitems; i++) {
        const te__pitem *it = &r->items[i];
        if (it->type == TE__ITEM_ELEM && st->count[i] != 1)
            return 0;
        if (it->type == TE__ITEM_SIBLINGS &&
            (it->elem.max >= TE__R_INF || st->count[i] != it->elem.max))
            return 0;
    }
    return 1;
}

static int rule_cmp(const void *a, const void *b)
{
    const te__rule *x = *(const te__rule *const *)a, *y = *(const te__rule *const *)b;
    if (x->priority != y->priority)
        return y->priority - x->priority;
    if (x->specificity != y->specificity)
        return y->specificity - x->specificity;
    return x->order - y->order;
}

static void sort_state(mstate *st) { qsort(st->nodes, (size_t)st->n, sizeof(int), cmp_int); }

static void apply_rule(fctx *f, const te__rule *r)
{
    if (r->target[0] && strcmp(r->target, f->t->name))
        return;
    if (r->isa[0] && !strstr(f->t->isa, r->isa))
        return;
    int sib_first = r->items[0].type == TE__ITEM_SIBLINGS;
    int n_anchor = sib_first ? f->g->nv : f->g->nn;
    for (int a = 0; a < n_anchor; a++) {
        mstate st;
        memset(&st, 0, sizeof st);
        st.anchor_value = sib_first ? a : -1;
        if (!sib_first && f->assigned[a] >= 0)
            continue;
        if (!match_items(f, r, 0, -1, sib_first ? -1 : a, &st))
            continue;
        if (st.n < 2)
            continue; /* a single node is no fusion */
        int exact = exact_match(r, &st);
        sort_state(&st);
        if (!where_ok(f, r, &st) || !check_candidate(f, r->name, r->escape, &st))
            continue;
        char fused[160] = "";
        if (exact && r->produces[0])
            snprintf(fused, sizeof fused, "%s%s%s", r->produces, r->produces_attrs[0] ? " " : "",
                     r->produces_attrs);
        add_group(f, r->name, r->cls, fused[0] ? fused : NULL, &st);
    }
}

/* ---- Generic kind-based fusion (TVM's rules) ---------------------------------------------- */

/* The single consumer of node n's only output, or -1. */
static int sole_consumer(const fctx *f, int n)
{
    const te__gnode *nd = NODE(f, n);
    if (nd->n_out != 1 || VAL(f, nd->out[0])->is_output)
        return -1;
    int v = nd->out[0];
    if (f->ncons[v] < 1)
        return -1;
    for (int k = 1; k < f->ncons[v]; k++)
        if (f->cons[v][k] != f->cons[v][0])
            return -1;
    return f->cons[v][0];
}

/* Groups formed by rules absorb the elemwise/broadcast chains that follow their out_ewise
 * outputs (the bias adds after a horizontal QKV), as TVM fuses epilogues into any
 * out_ewise-fusable group. The group then no longer equals its `produces` operator. */
static void absorb_epilogues(fctx *f)
{
    for (int gi = 0; gi < f->ntmp; gi++) {
        fgroup *gr = &f->tmp[gi];
        mstate st = {.n = 0};
        for (int i = 0; i < gr->n && st.n < MAXM; i++)
            st.nodes[st.n++] = gr->nodes[i];
        int base = st.n;
        for (int i = 0; i < base; i++) {
            int n = st.nodes[i];
            if (NODE(f, n)->op->kind != TE_KIND_OUT_EWISE_FUSABLE)
                continue;
            /* Walk the chain after n through the group's own nodes, then take free ones. */
            for (int cur = n, c; (c = sole_consumer(f, cur)) >= 0; cur = c) {
                if (in_state(&st, c))
                    continue;
                if (!free_node(f, &st, c) || NODE(f, c)->op->kind > TE_KIND_BROADCAST)
                    break;
                st.nodes[st.n++] = c;
            }
        }
        if (st.n == base)
            continue;
        sort_state(&st);
        char rule[80];
        snprintf(rule, sizeof rule, "%s+epilogue", gr->rule);
        /* Free the group's nodes while the larger candidate is checked. */
        for (int i = 0; i < gr->n; i++)
            f->assigned[gr->nodes[i]] = -1;
        if (check_candidate(f, rule, 1, &st)) {
            int *nodes = realloc(gr->nodes, sizeof(int) * (size_t)st.n);
            int *outs = realloc(gr->outs, sizeof(int) * (size_t)(st.n * TE__G_MAXIO + 1));
            if (nodes)
                gr->nodes = nodes;
            if (outs)
                gr->outs = outs;
            if (nodes && outs) {
                memcpy(gr->nodes, st.nodes, sizeof(int) * (size_t)st.n);
                gr->n = st.n;
                snprintf(gr->rule, sizeof gr->rule, "%.63s", rule);
                gr->fused[0] = 0;
            }
        }
        for (int i = 0; i < gr->n; i++)
            f->assigned[gr->nodes[i]] = gi;
        gr->nout = 0;
        for (int i = 0; i < gr->n; i++) {
            const te__gnode *nd = NODE(f, gr->nodes[i]);
            for (int o = 0; o < nd->n_out; o++) {
                int v = nd->out[o], leaves = VAL(f, v)->is_output;
                for (int k = 0; k < f->ncons[v]; k++)
                    leaves |= f->assigned[f->cons[v][k]] != gi;
                if (leaves)
                    gr->outs[gr->nout++] = v;
            }
        }
    }
}

static void generic(fctx *f)
{
    int nn = f->g->nn;
    absorb_epilogues(f);
    /* out_ewise + the elemwise/broadcast chain after it. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind != TE_KIND_OUT_EWISE_FUSABLE)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int c = sole_consumer(f, n);
             c >= 0 && free_node(f, &st, c) && NODE(f, c)->op->kind <= TE_KIND_BROADCAST;
             c = sole_consumer(f, c))
            st.nodes[st.n++] = c;
        if (st.n > 1 && check_candidate(f, "generic:out_ewise+elemwise", 0, &st))
            add_group(f, "generic:out_ewise+elemwise", "vertical", NULL, &st);
    }
    /* Reductions absorb their elemwise/broadcast/injective producers. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind != TE_KIND_REDUCTION)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int i = 0; i < st.n; i++) {
            const te__gnode *nd = NODE(f, st.nodes[i]);
            for (int in = 0; in < nd->n_in; in++) {
                int p = VAL(f, nd->in[in])->node;
                if (p >= 0 && free_node(f, &st, p) && NODE(f, p)->op->kind <= TE_KIND_INJECTIVE &&
                    sole_consumer(f, p) == st.nodes[i])
                    st.nodes[st.n++] = p;
            }
        }
        sort_state(&st);
        if (st.n > 1 && check_candidate(f, "generic:reduction+producers", 0, &st))
            add_group(f, "generic:reduction+producers", "vertical", NULL, &st);
    }
    /* Injective chains. */
    for (int n = 0; n < nn; n++) {
        if (f->assigned[n] >= 0 || NODE(f, n)->op->kind > TE_KIND_INJECTIVE)
            continue;
        mstate st = {.n = 0};
        st.nodes[st.n++] = n;
        for (int c = sole_consumer(f, n);
             c >= 0 && free_node(f, &st, c) && NODE(f, c)->op->kind <= TE_KIND_INJECTIVE;
             c = sole_consumer(f, c))
            st.nodes[st.n++] = c;
        if (st.n > 1 && check_candidate(f, "generic:injective", 0, &st))
            add_group(f, "generic:injective", "vertical", NULL, &st);
    }
    for (int n = 0; n < nn; n++)
        if (f->assigned[n] < 0) {
            mstate st = {.n = 1};
            st.nodes[0] = n;
            add_group(f, "single", "single", NULL, &st);
        }
}

/* Orders groups so every group comes after the groups it reads from (Kahn, ties by first
 * node), and renumbers. */
static int order_groups(fctx *f)
{
    int ng = f->ntmp, nn = f->g->nn;
    int *indeg = calloc((size_t)ng + 1, sizeof(int)), *done = calloc((size_t)ng + 1, sizeof(int));
    fgroup *out = malloc(sizeof *out * ((size_t)ng + 1));
    if (!indeg || !done || !out) {
        free(indeg), free(done), free(out);
        return TE_ERR_NOMEM;
    }
    for (int k = 0; k < ng; k++) {
        int placed = -1;
        for (int gi = 0; gi < ng && placed < 0; gi++) {
            if (done[gi])
                continue;
            int ready = 1;
            for (int i = 0; ready && i < f->tmp[gi].n; i++) {
                const te__gnode *nd = NODE(f, f->tmp[gi].nodes[i]);
                for (int in = 0; ready && in < nd->n_in; in++) {
                    int p = VAL(f, nd->in[in])->node;
                    ready = p < 0 || f->assigned[p] == gi || done[f->assigned[p]];
                }
            }
            if (ready && (placed < 0 || f->tmp[gi].nodes[0] < f->tmp[placed].nodes[0]))
                placed = gi;
        }
        /* Among the ready groups take the one with the earliest first node. */
        for (int gi = 0; gi < ng && placed >= 0; gi++) {
            if (done[gi] || gi == placed || f->tmp[gi].nodes[0] > f->tmp[placed].nodes[0])
                continue;
            int ready = 1;
            for (int i = 0; ready && i < f->tmp[gi].n; i++) {
                const te__gnode *nd = NODE(f, f->tmp[gi].nodes[i]);
                for (int in = 0; ready && in < nd->n_in; in++) {
                    int p = VAL(f, nd->in[in])->node;
                    ready = p < 0 || f->assigned[p] == gi || done[f->assigned[p]];
                }
            }
            if (ready)
                placed = gi;
        }
        if (placed < 0) {
            free(indeg), free(done), free(out);
            return TE_ERR_INTERNAL; /* a cycle between groups: the checks should prevent it */
        }
        done[placed] = 1;
        out[k] = f->tmp[placed];
        indeg[placed] = k; /* new index */
    }
    for (int n = 0; n < nn; n++)
        f->p->group_of[n] = indeg[f->assigned[n]];
    free(f->tmp);
    f->tmp = NULL;
    f->p->gr = out;
    f->p->ng = ng;
    f->ntmp = 0;
    free(indeg), free(done);
    return TE_OK;
}

te_fuse_plan *te_graph_fuse(te_graph *g, const te_fuse_rules *rules, const te_fuse_target *t)
{
    if (!g)
        return NULL;
    te_fuse_plan *p = calloc(1, sizeof *p);
    if (!p) {
        te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->g = g;
    if (t)
        p->t = *t;
    else
        te_fuse_target_host(&p->t);
    fctx f = {g, p, &p->t, NULL, NULL, NULL, NULL, 0, 0};
    int nv = g->nv, nn = g->nn, rc = TE_OK;
    f.cons = calloc((size_t)nv + 1, sizeof *f.cons);
    f.ncons = calloc((size_t)nv + 1, sizeof *f.ncons);
    f.assigned = malloc(sizeof(int) * ((size_t)nn + 1));
    p->group_of = malloc(sizeof(int) * ((size_t)nn + 1));
    const te__rule **order = malloc(sizeof *order * ((size_t)(rules ? rules->n : 0) + 1));
    if (!f.cons || !f.ncons || !f.assigned || !p->group_of || !order)
        rc = TE_ERR_NOMEM;
    for (int n = 0; !rc && n < nn; n++) {
        f.assigned[n] = -1;
        for (int i = 0; i < g->n[n].n_in; i++)
            f.ncons[g->n[n].in[i]]++;
    }
    for (int v = 0; !rc && v < nv; v++) {
        f.cons[v] = malloc(sizeof(int) * ((size_t)f.ncons[v] + 1));
        if (!f.cons[v])
            rc = TE_ERR_NOMEM;
        f.ncons[v] = 0;
    }
    for (int n = 0; !rc && n < nn; n++)
        for (int i = 0; i < g->n[n].n_in; i++) {
            int v = g->n[n].in[i], dup = 0;
            for (int k = 0; k < f.ncons[v]; k++)
                dup |= f.cons[v][k] == n;
            if (!dup)
                f.cons[v][f.ncons[v]++] = n;
        }
    if (!rc && rules) {
        for (int i = 0; i < rules->n; i++)
            order[i] = &rules->r[i];
        qsort(order, (size_t)rules->n, sizeof *order, rule_cmp);
        for (int i = 0; i < rules->n; i++)
            apply_rule(&f, order[i]);
    }
    if (!rc) {
        generic(&f);
        rc = order_groups(&f);
    }
    for (int v = 0; f.cons && v < nv; v++)
        free(f.cons[v]);
    free(f.cons), free(f.ncons), free(f.assigned), free(order);
    if (f.tmp) {
        for (int i = 0; i < f.ntmp; i++)
            free(f.tmp[i].nodes), free(f.tmp[i].outs);
        free(f.tmp);
    }
    if (rc) {
        te__graph_error(g, rc, "fuse: %s", te_status_str(rc));
        te_fuse_plan_free(p);
        return NULL;
    }
    return p;
}

/* ---- Queries ------------------------------------------------------------------------------ */

int te_fuse_plan_group_count(const te_fuse_plan *p) { return p ? p->ng : 0; }

int te_fuse_plan_group(const te_fuse_plan *p, int i, te_fuse_group *out)
{
    if (!p || i < 0 || i >= p->ng || !out)
        return TE_ERR_ARG;
    const fgroup *gr = &p->gr[i];
    out->rule = gr->rule;
    out->cls = gr->cls;
    out->fused_op = gr->fused[0] ? gr->fused : NULL;
    out->n_nodes = gr->n;
    out->nodes = gr->nodes;
    out->n_outputs = gr->nout;
    out->outputs = gr->outs;
    return TE_OK;
}

int te_fuse_plan_group_of(const te_fuse_plan *p, int node)
{
    return p && node >= 0 && node < p->g->nn ? p->group_of[node] : -1;
}

int te_fuse_plan_decision_count(const te_fuse_plan *p) { return p ? p->nd : 0; }

int te_fuse_plan_decision(const te_fuse_plan *p, int i, te_fuse_decision *out)
{
    if (!p || i < 0 || i >= p->nd || !out)
        return TE_ERR_ARG;
    const fdec *d = &p->d[i];
    out->accepted = d->accepted;
    out->rule = d->rule;
    out->check = d->check;
    out->reason = d->reason;
    out->n_nodes = d->n;
    out->nodes = d->nodes;
    return TE_OK;
}

/* ---- Printing ----------------------------------------------------------------------------- */

static void print_nodes(const te_graph *g, int n, const int *nodes, FILE *f)
{
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s (%s)", i ? ", " : "", te_graph_node_name(g, nodes[i]),
                te_graph_node_op(g, nodes[i]));
}

/* Values a group reads from outside it, deduplicated, in first-use order. */
static int group_inputs(const te_fuse_plan *p, int gi, int *out, int cap)
{
    const te_graph *g = p->g;
    const fgroup *gr = &p->gr[gi];
    int n = 0;
    for (int i = 0; i < gr->n; i++)
        for (int k = 0; k < te_graph_node_ninputs(g, gr->nodes[i]); k++) {
            int v = te_graph_node_input(g, gr->nodes[i], k), prod = te_graph_value_producer(g, v);
            if (prod >= 0 && p->group_of[prod] == gi)
                continue;
            int dup = 0;
            for (int j = 0; j < n; j++)
                dup |= out[j] == v;
            if (!dup && n < cap)
                out[n++] = v;
        }
    return n;
}

/* Bytes of the intermediates written to memory: every node output that is not a graph output
 * when run node by node, every group output that is not one when fused. */
static void traffic_totals(const te_fuse_plan *p, double *unfused, double *fused)
{
    const te_graph *g = p->g;
    *unfused = *fused = 0;
    for (int n = 0; n < g->nn; n++)
        for (int o = 0; o < g->n[n].n_out; o++) {
            int v = g->n[n].out[o];
            if (!g->v[v].is_output)
                *unfused +=
                    (double)te_graph_value_numel(g, v) * (double)te_dtype_size(g->v[v].dtype);
        }
    for (int i = 0; i < p->ng; i++)
        for (int k = 0; k < p->gr[i].nout; k++) {
            int v = p->gr[i].outs[k];
            if (!g->v[v].is_output)
                *fused += (double)te_graph_value_numel(g, v) * (double)te_dtype_size(g->v[v].dtype);
        }
}

int te_fuse_plan_print(const te_fuse_plan *p, FILE *f)
{
    if (!p || !f)
        return TE_ERR_ARG;
    const te_graph *g = p->g;
    char hl[32];
    human_bytes((double)p->t.l2_bytes, hl, sizeof hl);
    int fused = 0, rejected = 0;
    for (int i = 0; i < p->ng; i++)
        fused += p->gr[i].n > 1;
    for (int i = 0; i < p->nd; i++)
        rejected += !p->d[i].accepted;
    fprintf(f, "fusion plan: %d nodes -> %d kernels (%d fused groups), %d candidates rejected\n",
            g->nn, p->ng, fused, rejected);
    double iu, ifu;
    char hu[32], hf[32];
    traffic_totals(p, &iu, &ifu);
    human_bytes(iu, hu, sizeof hu);
    human_bytes(ifu, hf, sizeof hf);
    fprintf(f, "intermediates written to memory: %s node by node -> %s fused\n", hu, hf);
    fprintf(f, "target: %s, %d cores, %d-bit vectors, L2 %s, peak %.0f GFLOP/s, %.0f GB/s (%s)\n\n",
            p->t.name, p->t.cores, p->t.vector_bits, hl, p->t.peak_gflops, p->t.mem_gbps,
            p->t.source);
    for (int i = 0; i < p->ng; i++) {
        const fgroup *gr = &p->gr[i];
        fprintf(f, "group %d: %s [%s]", i, gr->rule, gr->cls);
        if (gr->fused[0])
            fprintf(f, " = %s", gr->fused);
        fprintf(f, "\n  nodes:   ");
        print_nodes(g, gr->n, gr->nodes, f);
        int ins[64], nin = group_inputs(p, i, ins, 64);
        fprintf(f, "\n  inputs:  ");
        for (int k = 0; k < nin; k++)
            fprintf(f, "%s%s", k ? ", " : "", te_graph_value_name(g, ins[k]));
        fprintf(f, "\n  outputs: ");
        for (int k = 0; k < gr->nout; k++)
            fprintf(f, "%s%s", k ? ", " : "", te_graph_value_name(g, gr->outs[k]));
        fprintf(f, "\n");
        for (int d = 0; d < p->nd; d++)
            if (p->d[d].accepted && !strcmp(p->d[d].rule, gr->rule) && p->d[d].n == gr->n &&
                !memcmp(p->d[d].nodes, gr->nodes, sizeof(int) * (size_t)gr->n))
                fprintf(f, "  why:     %s\n", p->d[d].reason);
    }
    if (rejected) {
        fprintf(f, "\nrejected fusions:\n");
        for (int d = 0; d < p->nd; d++) {
            if (p->d[d].accepted)
                continue;
            fprintf(f, "  %s on [", p->d[d].rule);
            print_nodes(g, p->d[d].n, p->d[d].nodes, f);
            fprintf(f, "]\n    %s: %s\n", p->d[d].check, p->d[d].reason);
        }
    }
    return ferror(f) ? TE_ERR_IO : TE_OK;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_nodes(const te_graph *g, int n, const int *nodes, FILE *f)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s", i ? "," : "");
        json_str(f, te_graph_node_name(g, nodes[i]));
    }
    fputc(']', f);
}

int te_fuse_plan_print_json(const te_fuse_plan *p, FILE *f)
{
    if (!p || !f)
        return TE_ERR_ARG;
    const te_graph *g = p->g;
    fprintf(f, "{\"target\":{\"name\":");
    json_str(f, p->t.name);
    fprintf(f, ",\"cores\":%d,\"l2_bytes\":%zu,\"peak_gflops\":%.1f,\"mem_gbps\":%.1f},",
            p->t.cores, p->t.l2_bytes, p->t.peak_gflops, p->t.mem_gbps);
    double iu, ifu;
    traffic_totals(p, &iu, &ifu);
    fprintf(f,
            "\"nodes\":%d,\"intermediate_bytes_unfused\":%.0f,\"intermediate_bytes_fused\":%.0f,"
            "\"groups\":[",
            g->nn, iu, ifu);
    for (int i = 0; i < p->ng; i++) {
        const fgroup *gr = &p->gr[i];
        fprintf(f, "%s{\"rule\":", i ? "," : "");
        json_str(f, gr->rule);
        fprintf(f, ",\"class\":");
        json_str(f, gr->cls);
        fprintf(f, ",\"fused_op\":");
        if (gr->fused[0])
            json_str(f, gr->fused);
        else
            fprintf(f, "null");
        fprintf(f, ",\"nodes\":");
        json_nodes(g, gr->n, gr->nodes, f);
        fprintf(f, ",\"outputs\":[");
        for (int k = 0; k < gr->nout; k++) {
            fprintf(f, "%s", k ? "," : "");
            json_str(f, te_graph_value_name(g, gr->outs[k]));
        }
        fprintf(f, "]}");
    }
    fprintf(f, "],\"decisions\":[");
    for (int d = 0; d < p->nd; d++) {
        fprintf(f, "%s{\"accepted\":%s,\"rule\":", d ? "," : "",
                p->d[d].accepted ? "true" : "false");
        json_str(f, p->d[d].rule);
        fprintf(f, ",\"check\":");
        json_str(f, p->d[d].check);
        fprintf(f, ",\"reason\":");
        json_str(f, p->d[d].reason);
        fprintf(f, ",\"nodes\":");
        json_nodes(g, p->d[d].n, p->d[d].nodes, f);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    return ferror(f) ? TE_ERR_IO : TE_OK;
}

int te_fuse_plan_print_dot(const te_fuse_plan *p, FILE *f)
{
    if (!p || !f)
        return TE_ERR_ARG;
    const te_graph *g = p->g;
    fprintf(f, "digraph fused {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
    for (int v = 0; v < g->nv; v++)
        if (te_graph_value_kind_of(g, v) == TE_GRAPH_INPUT)
            fprintf(f, "  \"v_%s\" [label=\"%s\", shape=ellipse];\n", te_graph_value_name(g, v),
                    te_graph_value_name(g, v));
    for (int i = 0; i < p->ng; i++) {
        const fgroup *gr = &p->gr[i];
        fprintf(f, "  subgraph cluster_%d {\n    label=\"%d: %s%s%s\";\n    style=%s;\n", i, i,
                gr->rule, gr->fused[0] ? " = " : "", gr->fused, gr->n > 1 ? "filled" : "dashed");
        if (gr->n > 1)
            fprintf(f, "    fillcolor=\"#e8f0fe\";\n");
        for (int k = 0; k < gr->n; k++)
            fprintf(f, "    \"n_%s\" [label=\"%s\\n%s\"];\n", te_graph_node_name(g, gr->nodes[k]),
                    te_graph_node_name(g, gr->nodes[k]), te_graph_node_op(g, gr->nodes[k]));
        fprintf(f, "  }\n");
    }
    for (int n = 0; n < g->nn; n++)
        for (int k = 0; k < te_graph_node_ninputs(g, n); k++) {
            int v = te_graph_node_input(g, n, k), prod = te_graph_value_producer(g, v);
            if (prod >= 0)
                fprintf(f, "  \"n_%s\" -> \"n_%s\" [label=\"%s\"];\n", te_graph_node_name(g, prod),
                        te_graph_node_name(g, n), te_graph_value_name(g, v));
            else if (te_graph_value_kind_of(g, v) == TE_GRAPH_INPUT)
                fprintf(f, "  \"v_%s\" -> \"n_%s\";\n", te_graph_value_name(g, v),
                        te_graph_node_name(g, n));
        }
    fprintf(f, "}\n");
    return ferror(f) ? TE_ERR_IO : TE_OK;
}
