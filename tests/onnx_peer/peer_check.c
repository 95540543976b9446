/* The ONNX peer check's C side: for every model listed in DIR/list.txt ("NAME NIN NOUT" per
 * line, then optionally the outputs' dtypes "f32", "i32", "u8", "i8"; float32 where they are
 * not given; written by make_models.py with onnxruntime's outputs), imports DIR/NAME.onnx with
 * te_graph_from_onnx, runs it compiled (te_graph_fuse + te_graph_compile + te_graph_run) on
 * DIR/NAME.in<i>.bin and compares with onnxruntime's DIR/NAME.out<j>.bin (raw, in the output's
 * dtype). Prints one line per model and the worst case; exit 1 when any model fails, differs
 * by more than 1e-4 relative (|a - b| / max(1, |b|)) on a float output, or differs at all on an
 * integer one (the quantized operators' int32 accumulations and requantized u8 / i8 values).
 * Inputs are read in the graph inputs' dtypes (float32, int64, int32, bool and uint8 as u8,
 * int8). $TESSERA_PEER_JOBS worker processes (default 2) share the models.
 *
 *   onnx_peer_check DIR */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"

/* n elements of esize bytes from DIR/NAME.<kind><i>.bin (the file must hold exactly that). */
static void *read_bin(const char *dir, const char *name, const char *kind, int i, size_t n,
                      size_t esize)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.%s%d.bin", dir, name, kind, i);
    FILE *f = fopen(p, "rb");
    char *d = malloc((n ? n : 1) * esize);
    size_t got = f && d ? fread(d, esize, n, f) : 0;
    int extra = f ? fgetc(f) != EOF : 1;
    if (f)
        fclose(f);
    if (got != n || extra) {
        fprintf(stderr, "%s: expected %zu elements of %zu bytes\n", p, n, esize);
        free(d);
        return NULL;
    }
    return d;
}

/* Element k of an integer output of dtype dt, as a double. */
static double int_elem(const void *p, te_dtype dt, size_t k)
{
    switch (dt) {
    case TE_U8:
        return ((const uint8_t *)p)[k];
    case TE_I8:
        return ((const int8_t *)p)[k];
    case TE_I32:
        return ((const int32_t *)p)[k];
    default:
        return (double)((const int64_t *)p)[k];
    }
}

/* Worst relative error of one model's float outputs, 1 + the largest difference when an
 * integer output differs anywhere, or a negative value when it could not run. want[j]: the
 * dtype onnxruntime wrote output j in. */
static double check_model(const char *dir, const char *name, int nin, int nout,
                          const te_dtype *want_dt)
{
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    te_graph *g = NULL;
    if (te_graph_from_onnx(path, NULL, &g, err, sizeof err)) {
        printf("%-28s FAIL import: %s\n", name, err);
        return -1;
    }
    /* What `tessera run` runs: the graph passes (QDQ onto integers, constant folding,
     * attention), then int8 matmuls onto this CPU's dot products. */
    te_target host = te_target_host();
    if (te_graph_optimize(g, NULL) || te_graph_lower_int8(g, &host, NULL, NULL)) {
        printf("%-28s FAIL optimize: %s\n", name, te_graph_errmsg(g));
        te_graph_free(g);
        return -1;
    }
    double worst = -1;
    void *in[16] = {0};
    void *out[16] = {0};
    te_fuse_plan *p = NULL;
    te_graph_exec *e = NULL;
    int n_int = 0;
    if (nin != te_graph_input_count(g) || nout != te_graph_output_count(g) || nin > 16 ||
        nout > 16) {
        printf("%-28s FAIL: %d inputs / %d outputs, onnxruntime had %d / %d\n", name,
               te_graph_input_count(g), te_graph_output_count(g), nin, nout);
        goto done;
    }
    for (int i = 0; i < nin; i++) {
        int v = te_graph_input_value(g, i);
        if (!(in[i] = read_bin(dir, name, "in", i, (size_t)te_graph_value_numel(g, v),
                               te_dtype_size(te_graph_value_dtype(g, v)))))
            goto done;
    }
    for (int j = 0; j < nout; j++) {
        te_dtype dt = te_graph_value_dtype(g, te_graph_output_value(g, j));
        if (dt != want_dt[j]) {
            printf("%-28s FAIL: output %d is %s, onnxruntime's is %s\n", name, j, te_dtype_str(dt),
                   te_dtype_str(want_dt[j]));
            goto done;
        }
        n_int += dt != TE_F32;
    }
    for (int j = 0; j < nout; j++) {
        int v = te_graph_output_value(g, j);
        out[j] =
            malloc((size_t)te_graph_value_numel(g, v) * te_dtype_size(te_graph_value_dtype(g, v)));
    }
    if (!(p = te_graph_fuse(g, NULL, NULL)) || te_graph_compile(g, p, NULL, &e) ||
        te_graph_run(e, (const void *const *)in, (void *const *)out)) {
        printf("%-28s FAIL run: %s\n", name, te_graph_errmsg(g));
        goto done;
    }
    worst = 0;
    for (int j = 0; j < nout; j++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_output_value(g, j));
        te_dtype dt = want_dt[j];
        void *want = read_bin(dir, name, "out", j, n, te_dtype_size(dt));
        if (!want) {
            worst = -1;
            goto done;
        }
        if (dt == TE_F32) {
            const float *a = out[j], *b = want;
            for (size_t k = 0; k < n; k++) {
                double d = fabs((double)a[k] - b[k]) / fmax(1.0, fabs((double)b[k]));
                worst = d > worst || isnan(d) ? d : worst;
            }
        } else {
            size_t ndiff = 0, first = 0;
            double maxd = 0;
            for (size_t k = 0; k < n; k++) {
                double d = fabs(int_elem(out[j], dt, k) - int_elem(want, dt, k));
                if (d > 0 && !ndiff++)
                    first = k;
                maxd = d > maxd ? d : maxd;
            }
            if (ndiff) {
                printf("%-28s output %d (%s): %zu of %zu elements differ (max |diff| %g; first "
                       "at %zu: %g, onnxruntime %g)\n",
                       name, j, te_dtype_str(dt), ndiff, n, maxd, first,
                       int_elem(out[j], dt, first), int_elem(want, dt, first));
                worst = fmax(worst, 1 + maxd);
            }
        }
        free(want);
    }
    printf("%-28s %s rel err %.3g%s (%d nodes, %d kernels)\n", name,
           worst <= 1e-4 ? "ok  " : "FAIL", worst,
           n_int ? (worst == 0 ? ", integer outputs exact" : "") : "", te_graph_node_count(g),
           te_graph_exec_kernel_count(e));
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

/* What one worker found. */
typedef struct summary {
    int n, failed;
    double worst;
    char worst_name[256];
} summary;

/* Checks the models of DIR/list.txt whose position is worker (mod nworkers). */
static int check_list(const char *dir, int worker, int nworkers, summary *sum)
{
    char lp[1024], name[256];
    snprintf(lp, sizeof lp, "%s/list.txt", dir);
    FILE *f = fopen(lp, "r");
    if (!f) {
        fprintf(stderr, "onnx_peer_check: cannot open %s\n", lp);
        return 2;
    }
    char line[1024];
    memset(sum, 0, sizeof *sum);
    for (int k = 0; fgets(line, sizeof line, f);) {
        int nin, nout, used = 0;
        if (sscanf(line, "%255s %d %d%n", name, &nin, &nout, &used) != 3)
            continue;
        /* The outputs' dtypes follow (lists written before them have none: float32). */
        te_dtype dts[16];
        char tok[16];
        const char *q = line + used;
        for (int j = 0; j < 16; j++) {
            int adv = 0;
            dts[j] = TE_F32;
            if (sscanf(q, "%15s%n", tok, &adv) == 1) {
                q += adv;
                if (te_dtype_parse(tok, &dts[j]) != TE_OK) {
                    fprintf(stderr, "onnx_peer_check: %s: dtype '%s' of %s\n", lp, tok, name);
                    fclose(f);
                    return 2;
                }
            }
        }
        if (k++ % nworkers != worker)
            continue;
        double w = check_model(dir, name, nin, nout, dts);
        fflush(stdout);
        sum->n++;
        if (w < 0 || !(w <= 1e-4))
            sum->failed++;
        if (w > sum->worst || isnan(w)) {
            sum->worst = w;
            snprintf(sum->worst_name, sizeof sum->worst_name, "%s", name);
        }
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_peer_check DIR\n");
        return 2;
    }
    /* Models are independent: TESSERA_PEER_JOBS worker processes (default 2) take every
     * N-th one and report their summary through a pipe. */
    const char *jobs = getenv("TESSERA_PEER_JOBS");
    int nw = jobs && atoi(jobs) > 0 ? atoi(jobs) : 2;
    if (nw > 16)
        nw = 16;
    int fds[16][2];
    pid_t pids[16];
    fflush(stdout);
    for (int w = 0; w < nw; w++) {
        if (pipe(fds[w]) || (pids[w] = fork()) < 0) {
            perror("onnx_peer_check");
            return 2;
        }
        if (pids[w] == 0) {
            close(fds[w][0]);
            summary sum;
            int rc = check_list(argv[1], w, nw, &sum);
            if (!rc && write(fds[w][1], &sum, sizeof sum) != (ssize_t)sizeof sum)
                rc = 2;
            _exit(rc);
        }
        close(fds[w][1]);
    }
    summary all = {0, 0, 0, ""};
    int bad = 0;
    for (int w = 0; w < nw; w++) {
        summary sum;
        ssize_t got = read(fds[w][0], &sum, sizeof sum);
        close(fds[w][0]);
        int st = 0;
        waitpid(pids[w], &st, 0);
        if (got != (ssize_t)sizeof sum || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "onnx_peer_check: worker %d failed (status %d)\n", w, st);
            bad = 1;
            continue;
        }
        all.n += sum.n;
        all.failed += sum.failed;
        if (sum.worst > all.worst || isnan(sum.worst)) {
            all.worst = sum.worst;
            snprintf(all.worst_name, sizeof all.worst_name, "%s", sum.worst_name);
        }
    }
    printf("onnx peer check: %d models, %d failed, worst rel err %.3g (%s) against onnxruntime\n",
           all.n, all.failed, all.worst, all.worst_name);
    return bad || all.failed || !all.n;
}
