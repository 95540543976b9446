/* Feasibility of a candidate fusion, checked in order (dependency cycle, escaping
 * intermediates, register tile fit, L2 staging or recomputation, roofline) and recorded as a
 * decision with its numbers (XLA's FusionDecision). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fuse_internal.h"

/* ---- Decisions ---------------------------------------------------------------------------- */

int te__fuse_cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int te__fuse_add_decision(fctx *f, int accepted, const char *rule, const char *check,
                          const mstate *st, const char *fmt, ...)
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

static double vbytes(const fctx *f, int v)
{
    const te__gvalue *x = VAL(f, v);
    double n = 1;
    for (int d = 0; d < x->ndim; d++)
        n *= (double)x->shape[d];
    return n * (double)te_dtype_size(x->dtype);
}

void te__fuse_human_bytes(double b, char *buf, size_t n)
{
    if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.2f MiB", b / (1024.0 * 1024));
    else if (b >= 1024)
        snprintf(buf, n, "%.1f KiB", b / 1024);
    else
        snprintf(buf, n, "%.0f B", b);
}

/* Checks a candidate (st->nodes sorted) and records the decision. Returns 1 when accepted. */
int te__fuse_check_candidate(fctx *f, const char *rule, int allow_escape, mstate *st)
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
                                te__fuse_add_decision(
                                    f, 0, rule, "cycle", st,
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
                te__fuse_add_decision(
                    f, 0, rule, "escape", st,
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
                te__fuse_add_decision(
                    f, 0, rule, "registers", st,
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
            te__fuse_human_bytes(b, hb, sizeof hb);
            te__fuse_human_bytes((double)f->t->l2_bytes, hl, sizeof hl);
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
                te__fuse_add_decision(
                    f, 0, rule, "l2", st,
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
        te__fuse_human_bytes(B_unf, hu, sizeof hu);
        te__fuse_human_bytes(B_f, hf, sizeof hf);
        double bal = P / BW;
        if (t_f >= t_unf) {
            te__fuse_add_decision(
                f, 0, rule, "roofline", st,
                "fused %.1f us >= unfused %.1f us: %.3g FLOP (+%.3g recomputed) over %s "
                "is %.1f FLOP/B against a balance of %.1f%s",
                t_f * 1e6, t_unf * 1e6, F, recompute, hf, B_f > 0 ? Ff / B_f : 0, bal, notes);
            ok = 0;
        } else {
            te__fuse_add_decision(
                f, 1, rule, "ok", st,
                "%d nodes, %.3g FLOP; traffic %s -> %s, intensity %.2f -> %.2f FLOP/B "
                "(balance %.1f); est. %.1f -> %.1f us%s",
                st->n, Ff, hu, hf, B_unf > 0 ? F / B_unf : 0, B_f > 0 ? Ff / B_f : 0, bal,
                t_unf * 1e6, t_f * 1e6, notes);
        }
    }
    free(in_s), free(seen), free(stack);
    return ok;
}
