/*
 * `tessera import`: reads an ONNX model (include/tessera/onnx.h) and writes its graph in the
 * text form (include/tessera/graph.h) plus the weight files the text form names, then prints a
 * summary: the ONNX model's opset and node count, the graph's nodes and operators, its inputs
 * and outputs with their shapes.
 *
 *   tessera import model.onnx -o model.graph                 # weights in model.weights/
 *   tessera import bert.onnx --shape batch=1,seq=128 -o bert.graph
 *   tessera import cnn.onnx --shape input=1x3x224x224 -o cnn.graph --weights w/
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"
#include "tools/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera import MODEL.onnx [--shape NAME=N,...] -o GRAPH [--weights DIR]\n\n"
            "Imports an ONNX model as a graph of library operators: writes the graph's text\n"
            "form to GRAPH and its weights as raw files under DIR, then prints a summary.\n\n"
            "  --shape NAME=N,...   bind symbolic dimensions by name (batch=1,seq=128), or give\n"
            "                       an input's whole shape (input=1x3x224x224); repeatable\n"
            "  -o GRAPH             the graph text form to write ('-' for standard output)\n"
            "  --weights DIR        where the weight files go (default: GRAPH without its\n"
            "                       extension, plus .weights; 'weights' for -o -)\n");
}

static void print_value(const te_graph *g, int v)
{
    const int64_t *s = te_graph_value_shape(g, v);
    printf("  %s %s[", te_graph_value_name(g, v), te_dtype_str(te_graph_value_dtype(g, v)));
    for (int d = 0; d < te_graph_value_ndim(g, v); d++)
        printf("%s%lld", d ? "," : "", (long long)s[d]);
    printf("]\n");
}

static void summary(const te_graph *g, const char *model, const te_onnx_info *info, const char *out,
                    const char *wdir)
{
    printf("model    %s (%s%sIR %lld, opset %lld, %d ONNX nodes)\n", model, info->producer,
           info->producer[0] ? ", " : "", (long long)info->ir_version, (long long)info->opset,
           info->n_onnx_nodes);
    int nn = te_graph_node_count(g);
    printf("graph    %s: %d nodes\n", out, nn);
    printf("ops     ");
    for (int i = 0; i < te_graph_op_count(); i++) {
        const char *op = te_graph_op_name(i);
        int k = 0;
        for (int n = 0; n < nn; n++)
            k += !strcmp(te_graph_node_op(g, n), op);
        if (k)
            printf(" %s x%d", op, k);
    }
    printf("\n");
    int64_t bytes = 0, nconst = 0;
    for (int v = 0; v < te_graph_value_count(g); v++)
        if (te_graph_value_kind_of(g, v) == TE_GRAPH_CONST) {
            nconst++;
            bytes +=
                te_graph_value_numel(g, v) * (int64_t)te_dtype_size(te_graph_value_dtype(g, v));
        }
    printf("weights  %s: %lld constants, %lld bytes\n", wdir, (long long)nconst, (long long)bytes);
    printf("inputs\n");
    for (int i = 0; i < te_graph_input_count(g); i++)
        print_value(g, te_graph_input_value(g, i));
    printf("outputs\n");
    for (int i = 0; i < te_graph_output_count(g); i++)
        print_value(g, te_graph_output_value(g, i));
}

int te_cmd_import(int argc, char **argv)
{
    static const te_cli_opt opts[] = {{"shape", 0, TE_CLI_VALUE, 's'},
                                      {"output", 'o', TE_CLI_VALUE, 'o'},
                                      {"weights", 0, TE_CLI_VALUE, 'w'},
                                      {"help", 'h', TE_CLI_FLAG, 'h'},
                                      {0}};
    char shapes[2048] = "";
    const char *out = NULL, *wdir_opt = NULL;
    int c;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    te_cli_parser cp;
    te_cli_parser_init(&cp, "import", argc, argv, opts);
    while ((c = te_cli_next(&cp)) != TE_CLI_END) {
        const char *v = cp.value;
        switch (c) {
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (npos < 2)
                pos[npos] = v;
            npos++;
            break;
        case 's':
            if (strlen(shapes) + strlen(v) + 2 > sizeof shapes) {
                fprintf(stderr, "tessera import: --shape lists are too long\n");
                return 2;
            }
            if (shapes[0])
                strcat(shapes, ",");
            strcat(shapes, v);
            break;
        case 'o':
            out = v;
            break;
        case 'w':
            wdir_opt = v;
            break;
        case 'h':
            usage(stdout);
            return 0;
        }
    }
    if (npos != 1 || !out) {
        fprintf(stderr, "tessera import: %s\n\n",
                npos != 1 ? "give one MODEL.onnx" : "give -o GRAPH");
        usage(stderr);
        return 2;
    }
    const char *model = pos[0];
    char err[1024], wdir[1024];
    te_onnx_info info;
    te_graph *g = NULL;
    if (te_graph_from_onnx_ex(model, shapes, &g, &info, err, sizeof err)) {
        fprintf(stderr, "tessera import: %s\n", err);
        return 1;
    }
    if (wdir_opt)
        snprintf(wdir, sizeof wdir, "%s", wdir_opt);
    else if (!strcmp(out, "-"))
        snprintf(wdir, sizeof wdir, "weights");
    else {
        snprintf(wdir, sizeof wdir, "%s", out);
        char *dot = strrchr(wdir, '.'), *slash = strrchr(wdir, '/');
        if (dot && (!slash || dot > slash))
            *dot = 0;
        strncat(wdir, ".weights", sizeof wdir - strlen(wdir) - 1);
    }
    if (mkdir(wdir, 0777) && errno != EEXIST) {
        fprintf(stderr, "tessera import: cannot create %s: %s\n", wdir, strerror(errno));
        te_graph_free(g);
        return 1;
    }
    FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "tessera import: cannot write %s: %s\n", out, strerror(errno));
        te_graph_free(g);
        return 1;
    }
    fprintf(f, "# imported from %s by tessera import (opset %lld)\n", model, (long long)info.opset);
    int rc = te_graph_print(g, f, wdir);
    if (f != stdout && fclose(f))
        rc = rc ? rc : -1;
    if (rc) {
        fprintf(stderr, "tessera import: writing %s or the weights under %s failed\n", out, wdir);
        te_graph_free(g);
        return 1;
    }
    if (f != stdout)
        summary(g, model, &info, out, wdir);
    te_graph_free(g);
    return 0;
}
