/* The ONNX peer check's C side: for every model listed in DIR/list.txt ("NAME NIN NOUT" per
 * line, written by make_models.py with onnxruntime's outputs), imports DIR/NAME.onnx with
 * te_graph_from_onnx, runs it compiled (te_graph_fuse + te_graph_compile + te_graph_run) on
 * DIR/NAME.in<i>.bin and compares with onnxruntime's DIR/NAME.out<j>.bin (raw float32).
 * Prints one line per model and the worst case; exit 1 when any model fails or differs by
 * more than 1e-4 relative (|a - b| / max(1, |b|)).
 *
 *   onnx_peer_check DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"

static float *read_bin(const char *dir, const char *name, const char *kind, int i, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.%s%d.bin", dir, name, kind, i);
    FILE *f = fopen(p, "rb");
    float *d = malloc((n ? n : 1) * sizeof *d);
    size_t got = f && d ? fread(d, sizeof *d, n, f) : 0;
    int extra = f ? fgetc(f) != EOF : 1;
    if (f)
        fclose(f);
    if (got != n || extra) {
        fprintf(stderr, "%s: expected %zu floats\n", p, n);
        free(d);
        return NULL;
    }
    return d;
}

/* Worst relative error of one model, or a negative value when it could not run. */
static double check_model(const char *dir, const char *name, int nin, int nout)
{
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    te_graph *g = NULL;
    if (te_graph_from_onnx(path, NULL, &g, err, sizeof err)) {
        printf("%-28s FAIL import: %s\n", name, err);
        return -1;
    }
    double worst = -1;
    float *in[16] = {0}, *out[16] = {0};
    te_fuse_plan *p = NULL;
    te_graph_exec *e = NULL;
    if (nin != te_graph_input_count(g) || nout != te_graph_output_count(g) || nin > 16 ||
        nout > 16) {
        printf("%-28s FAIL: %d inputs / %d outputs, onnxruntime had %d / %d\n", name,
               te_graph_input_count(g), te_graph_output_count(g), nin, nout);
        goto done;
    }
    for (int i = 0; i < nin; i++)
        if (!(in[i] = read_bin(dir, name, "in", i,
                               (size_t)te_graph_value_numel(g, te_graph_input_value(g, i)))))
            goto done;
    for (int j = 0; j < nout; j++)
        out[j] =
            malloc((size_t)te_graph_value_numel(g, te_graph_output_value(g, j)) * sizeof(float));
    if (!(p = te_graph_fuse(g, NULL, NULL)) || te_graph_compile(g, p, NULL, &e) ||
        te_graph_run(e, (const void *const *)in, (void *const *)out)) {
        printf("%-28s FAIL run: %s\n", name, te_graph_errmsg(g));
        goto done;
    }
    worst = 0;
    for (int j = 0; j < nout; j++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_output_value(g, j));
        float *want = read_bin(dir, name, "out", j, n);
        if (!want) {
            worst = -1;
            goto done;
        }
        for (size_t k = 0; k < n; k++) {
            double d = fabs((double)out[j][k] - want[k]) / fmax(1.0, fabs((double)want[k]));
            worst = d > worst || isnan(d) ? d : worst;
        }
        free(want);
    }
    printf("%-28s %s rel err %.3g (%d nodes, %d kernels)\n", name, worst <= 1e-4 ? "ok  " : "FAIL",
           worst, te_graph_node_count(g), te_graph_exec_kernel_count(e));
done:
    for (int i = 0; i < 16; i++) {
        free(in[i]);
        free(out[i]);
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
    return worst;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_peer_check DIR\n");
        return 2;
    }
    char lp[1024], name[256];
    snprintf(lp, sizeof lp, "%s/list.txt", argv[1]);
    FILE *f = fopen(lp, "r");
    if (!f) {
        fprintf(stderr, "onnx_peer_check: cannot open %s\n", lp);
        return 2;
    }
    int nin, nout, n = 0, failed = 0;
    double worst = 0;
    char worst_name[256] = "";
    while (fscanf(f, "%255s %d %d", name, &nin, &nout) == 3) {
        double w = check_model(argv[1], name, nin, nout);
        n++;
        if (w < 0 || !(w <= 1e-4))
            failed++;
        if (w > worst) {
            worst = w;
            snprintf(worst_name, sizeof worst_name, "%s", name);
        }
    }
    fclose(f);
    printf("onnx peer check: %d models, %d failed, worst rel err %.3g (%s) against onnxruntime\n",
           n, failed, worst, worst_name);
    return failed || !n;
}
