/* The fusion plan printed: as text (groups with the reason each was accepted, rejected
 * candidates with the check that failed), as JSON, and as a Graphviz digraph. */
#include <string.h>

#include "graph/fuse_internal.h"

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
 * when run node by node, every group output that is not one when fused (views write none). */
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
        for (int k = 0; !p->gr[i].view && k < p->gr[i].nout; k++) { /* a view writes nothing */
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
    te__fuse_human_bytes((double)p->t.l2_bytes, hl, sizeof hl);
    int fused = 0, rejected = 0, views = p->ng - te__fuse_kernel_count(p);
    for (int i = 0; i < p->ng; i++)
        fused += p->gr[i].n > 1;
    for (int i = 0; i < p->nd; i++)
        rejected += !p->d[i].accepted;
    fprintf(f, "fusion plan: %d nodes -> %d kernels (%d fused groups", g->nn,
            te__fuse_kernel_count(p), fused);
    if (views)
        fprintf(f, "; %d reshape view%s, no kernel", views, views == 1 ? "" : "s");
    fprintf(f, "), %d candidates rejected\n", rejected);
    double iu, ifu;
    char hu[32], hf[32];
    traffic_totals(p, &iu, &ifu);
    te__fuse_human_bytes(iu, hu, sizeof hu);
    te__fuse_human_bytes(ifu, hf, sizeof hf);
    fprintf(f, "intermediates written to memory: %s node by node -> %s fused\n", hu, hf);
    te_graph_memplan *mp = NULL;
    if (te_graph_memplan_create(p, &mp) == TE_OK) {
        te_graph_mem_stats ms;
        char hm[3][32];
        te_graph_memplan_stats(mp, &ms);
        te__fuse_human_bytes((double)ms.unfused_bytes, hm[0], sizeof hm[0]);
        te__fuse_human_bytes((double)ms.fused_bytes, hm[1], sizeof hm[1]);
        te__fuse_human_bytes((double)ms.pool_bytes, hm[2], sizeof hm[2]);
        fprintf(f,
                "peak intermediate memory: %s node by node (no reuse) -> %s fused -> %s fused "
                "and planned (%d buffer%s in one pool)\n",
                hm[0], hm[1], hm[2], ms.n_buffers, ms.n_buffers == 1 ? "" : "s");
        te_graph_memplan_free(mp);
    }
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
        if (gr->view)
            fprintf(f, "  why:     shares the storage of '%s' (a reshape of dense data: no copy)\n",
                    te_graph_value_name(g, te__fuse_view_root(p, g->n[gr->nodes[0]].out[0])));
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
            "\"nodes\":%d,\"kernels\":%d,\"views\":%d,\"intermediate_bytes_unfused\":%.0f,"
            "\"intermediate_bytes_fused\":%.0f,",
            g->nn, te__fuse_kernel_count(p), p->ng - te__fuse_kernel_count(p), iu, ifu);
    te_graph_memplan *mp = NULL;
    te_graph_mem_stats ms;
    te_graph_memplan_create(p, &mp);
    te_graph_memplan_stats(mp, &ms);
    te_graph_memplan_free(mp);
    fprintf(f,
            "\"memory\":{\"unfused_bytes\":%zu,\"fused_bytes\":%zu,\"pool_bytes\":%zu,"
            "\"live_bytes\":%zu,\"buffers\":%d},\"groups\":[",
            ms.unfused_bytes, ms.fused_bytes, ms.pool_bytes, ms.live_bytes, ms.n_buffers);
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
        fprintf(f, "],\"view\":%s", gr->view ? "true" : "false");
        if (gr->view) {
            fprintf(f, ",\"shares\":");
            json_str(f, te_graph_value_name(g, te__fuse_view_root(p, g->n[gr->nodes[0]].out[0])));
        }
        fprintf(f, "}");
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
    fprintf(f, "  labelloc=t;\n  label=\"%d nodes -> %d kernels (%d reshape views)\";\n", g->nn,
            te__fuse_kernel_count(p), p->ng - te__fuse_kernel_count(p));
    for (int v = 0; v < g->nv; v++)
        if (te_graph_value_kind_of(g, v) == TE_GRAPH_INPUT)
            fprintf(f, "  \"v_%s\" [label=\"%s\", shape=ellipse];\n", te_graph_value_name(g, v),
                    te_graph_value_name(g, v));
    for (int i = 0; i < p->ng; i++) {
        const fgroup *gr = &p->gr[i];
        /* Fused groups filled, single kernels dashed, views (no kernel) dotted. */
        fprintf(f, "  subgraph cluster_%d {\n    label=\"%d: %s%s%s\";\n    style=%s;\n", i, i,
                gr->rule, gr->fused[0] ? " = " : "", gr->fused,
                gr->view    ? "dotted"
                : gr->n > 1 ? "filled"
                            : "dashed");
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
