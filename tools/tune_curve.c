/* The tuning curve of a task as SVG (`tessera tune --curve FILE`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tune_extras.h"

/* ---- Tuning curve (SVG) -------------------------------------------------------------------- */

int te__tune_write_curve(const char *path, te_db *db, const te_tune_task_info *info,
                         const te_db_target *tgt, int64_t job_id, double baseline,
                         const char *baseline_name)
{
    te_db_trial_list *h = NULL;
    if (te_db_history(db, info->workload_key, tgt, 0, &h) != TE_OK)
        return 1;
    size_t n = 0;
    double *best = malloc(sizeof(double) * (h->n + 1)), *val = malloc(sizeof(double) * (h->n + 1));
    double b = 0, ymax = isfinite(baseline) ? baseline : 0;
    for (size_t i = 0; best && val && i < h->n; i++) {
        const te_db_trial *r = &h->items[i];
        if (r->job_id != job_id || r->from_system)
            continue;
        double g = r->status == TE_TRIAL_OK && isfinite(r->gflops) ? r->gflops : 0;
        if (g > b)
            b = g;
        val[n] = g;
        best[n++] = b;
        if (g > ymax)
            ymax = g;
    }
    te_db_trial_list_free(h);
    FILE *f = fopen(path, "w");
    if (!f || !best || !val || n == 0) {
        if (f)
            fclose(f);
        free(best);
        free(val);
        return 1;
    }
    const double W = 800, H = 480, L = 70, R = 20, T = 40, B = 60;
    double pw = W - L - R, ph = H - T - B;
    ymax = ymax > 0 ? ymax * 1.08 : 1;
    /* A round tick step. */
    double step = pow(10, floor(log10(ymax / 5)));
    if (ymax / step > 10)
        step *= 2;
    if (ymax / step > 10)
        step *= 2.5;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">Tuning curve: ",
            W / 2);
    for (const char *p = info->workload_key; *p; p++)
        fprintf(f, *p == '<' ? "&lt;" : *p == '&' ? "&amp;" : "%c", *p);
    fprintf(f, "</text>\n");
    for (double y = 0; y <= ymax + 1e-9; y += step) {
        double py = T + ph - y / ymax * ph;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, py, L + pw, py, L - 6, py + 4, y);
    }
    double xstep = pow(10, floor(log10((double)n / 5 > 1 ? (double)n / 5 : 1)));
    if ((double)n / xstep > 10)
        xstep *= 2;
    if ((double)n / xstep > 10)
        xstep *= 2.5;
    for (double x = 0; x <= (double)n; x += xstep) {
        double px = L + x / (double)n * pw;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                px, T, px, T + ph, px, T + ph + 18, x);
    }
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"black\"/>\n",
            L, T, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">trial</text>\n", L + pw / 2,
            H - 18);
    fprintf(f,
            "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
            "GFLOP/s</text>\n",
            T + ph / 2, T + ph / 2);
    for (size_t i = 0; i < n; i++)
        if (val[i] > 0)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"1.6\" fill=\"#9ab\"/>\n",
                    L + (double)(i + 1) / (double)n * pw, T + ph - val[i] / ymax * ph);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#c22\" stroke-width=\"2\" points=\"");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f ", L + (double)(i + 1) / (double)n * pw,
                T + ph - best[i] / ymax * ph);
    fprintf(f, "\"/>\n");
    double lx = L + pw - 250, ly = T + ph - 70;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c22\" "
            "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">best so far (%.1f GFLOP/s)</text>\n"
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"#9ab\"/><text x=\"%.1f\" "
            "y=\"%.1f\">each measured candidate</text>\n",
            lx, ly, lx + 24, ly, lx + 30, ly + 4, b, lx + 12, ly + 18, lx + 30, ly + 22);
    if (isfinite(baseline)) {
        double py = T + ph - baseline / ymax * ph;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#26a\" "
                "stroke-dasharray=\"6,4\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#26a\">%s "
                "%.1f GFLOP/s (same machine, same run)</text>\n",
                L, py, L + pw, py, L + 8, py - 6, baseline_name, baseline);
    }
    fprintf(f, "</svg>\n");
    fclose(f);
    free(best);
    free(val);
    return 0;
}
