/* The fusion engine: rules matched most-specific first, each candidate checked for
 * feasibility and recorded as a decision with its reason (XLA's FusionDecision), then TVM's
 * kind-based fusion over what is left, then singletons. The target facts (L2, clock, cores)
 * are read at run time.
 *
 * This file drives the engine and answers queries; the parts are fuse_target.c (machine facts),
 * fuse_match.c (patterns), fuse_check.c (feasibility), fuse_generic.c (the kind-based
 * fallback and group order) and fuse_print.c (text, JSON, DOT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fuse_internal.h"

/* ---- The plan ----------------------------------------------------------------------------- */

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

/* Records a group of st's nodes. */
int te__fuse_add_group(fctx *f, const char *rule, const char *cls, const char *fused,
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
    qsort(gr->nodes, (size_t)gr->n, sizeof(int), te__fuse_cmp_int);
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
    else if (r->min_sm && f->t->sm <= 0)
        snprintf(why, sizeof why,
                 "the target's compute capability is not known (te_fuse_target.sm), the rule "
                 "wants sm_%d or newer",
                 r->min_sm);
    else if (r->min_sm && f->t->sm < r->min_sm)
        snprintf(why, sizeof why, "the target is sm_%d, the rule wants sm_%d or newer", f->t->sm,
                 r->min_sm);
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
        te__fuse_add_decision(f, 0, r->name, "constraint", st, "%s", why);
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

static void apply_rule(fctx *f, const te__rule *r)
{
    if (r->target[0] && strcmp(r->target, f->t->name))
        return;
    if (r->isa[0] && !strstr(f->t->isa, r->isa))
        return;
    if (r->min_sm && strcmp(f->t->name, "cuda")) /* a GPU rule: skipped on a CPU */
        return;
    int sib_first = r->items[0].type == TE__ITEM_SIBLINGS;
    int n_anchor = sib_first ? f->g->nv : f->g->nn;
    for (int a = 0; a < n_anchor; a++) {
        mstate st;
        memset(&st, 0, sizeof st);
        st.anchor_value = sib_first ? a : -1;
        if (!sib_first && f->assigned[a] >= 0)
            continue;
        if (!te__fuse_match_items(f, r, 0, -1, sib_first ? -1 : a, &st))
            continue;
        if (st.n < 2)
            continue; /* a single node is no fusion */
        int exact = exact_match(r, &st);
        te__fuse_sort_state(&st);
        if (!where_ok(f, r, &st) || !te__fuse_check_candidate(f, r->name, r->escape, &st))
            continue;
        char fused[160] = "";
        if (exact && r->produces[0])
            snprintf(fused, sizeof fused, "%s%s%s", r->produces, r->produces_attrs[0] ? " " : "",
                     r->produces_attrs);
        te__fuse_add_group(f, r->name, r->cls, fused[0] ? fused : NULL, &st);
    }
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
        te__fuse_generic(&f);
        rc = te__fuse_order_groups(&f);
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
    out->view = gr->view;
    return TE_OK;
}

int te__fuse_view_root(const te_fuse_plan *p, int v)
{
    const te_graph *g = p->g;
    /* Groups come after the groups they read, so the chain ends (at most one step per group). */
    for (int steps = 0; v >= 0 && v < g->nv && steps <= p->ng; steps++) {
        int n = g->v[v].node;
        if (n < 0 || !p->gr[p->group_of[n]].view)
            break;
        v = g->n[n].in[0];
    }
    return v;
}

int te__fuse_kernel_count(const te_fuse_plan *p)
{
    int nk = 0;
    for (int i = 0; p && i < p->ng; i++)
        nk += !p->gr[i].view;
    return nk;
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
