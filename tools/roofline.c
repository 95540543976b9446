/*
 * Roofline reports: flops and bytes of each kernel from its lowered IR, the machine's roofs
 * from the peaks `tessera target --measure` recorded, a table and an SVG plot.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/target.h"
#include "tessera/tuner.h"
#include "tools/peak.h"
#include "tools/roofline.h"

/* ---- Counting ----------------------------------------------------------------------------- */

int te_roofline_count(te_ctx *ctx, const char *workload_key, const char *trace,
                      te_kernel_counts *out, char *dtype, const char **note)
{
    if (note)
        *note = NULL;
    memset(out, 0, sizeof *out);
    /* "op;params;dtype": a library operator. A fourth field (expr=..., a user expression)
     * cannot be rebuilt from the key. */
    char key[512], params[600];
    if (!workload_key || strlen(workload_key) >= sizeof key)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "workload key missing or too long");
    strcpy(key, workload_key);
    char *f[4] = {key, NULL, NULL, NULL};
    int nf = 1;
    for (char *p = key; *p && nf <= 3; p++)
        if (*p == ';') {
            *p = '\0';
            if (nf == 3)
                return te_ctx_set_error(ctx, TE_ERR_NOT_FOUND,
                                        "'%s' is not a library operator's workload key",
                                        workload_key);
            f[nf++] = p + 1;
        }
    if (nf != 3 || !te_op_lookup(f[0]))
        return te_ctx_set_error(ctx, TE_ERR_NOT_FOUND,
                                "'%s' is not a library operator's workload key", workload_key);
    snprintf(params, sizeof params, "%s%sdtype=%s", f[1], *f[1] ? "," : "", f[2]);
    if (dtype)
        snprintf(dtype, 8, "%s", f[2]);
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO], *args[2 * TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    int rc = te_op_build(ctx, f[0], params, ins, &n_in, outs, &n_out);
    if (rc != TE_OK)
        return rc;
    for (int i = 0; i < n_in; i++)
        args[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        args[n_in + i] = outs[i];
    te_target host = te_target_host();
    te_schedule *s = te_schedule_create(ctx, n_out, outs);
    te_lowered *low = NULL;
    if (s && trace && *trace) {
        if (te_schedule_apply_trace(s, trace) == TE_OK)
            low = te_lower(s, n_in + n_out, args, f[0], &host);
        if (!low) {
            if (note)
                *note = "the trace does not replay here; counted with the default schedule";
            s = te_schedule_create(ctx, n_out, outs);
        }
    }
    if (!low && s)
        low = te_lower(s, n_in + n_out, args, f[0], &host);
    if (!low)
        return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_ARG;
    return te_kernel_count(low, out);
}

void te_roofline_point_finish(te_roof_point *p, const te_roof_machine *m)
{
    p->gflops = p->seconds > 0 ? p->flops / p->seconds * 1e-9 : NAN;
    p->intensity = p->bytes > 0 ? p->flops / p->bytes : NAN;
    p->roof = NAN;
    if (m && isfinite(p->intensity))
        p->roof = fmin(m->peak_gflops, p->intensity * m->bw_gbps);
    p->bound = !(p->roof > 0)                               ? NULL
               : p->intensity * m->bw_gbps < m->peak_gflops ? "memory"
                                                            : "compute";
    p->fraction = p->roof > 0 ? p->gflops / p->roof : NAN;
}

/* ---- The machine -------------------------------------------------------------------------- */

int te_roofline_machine(te_db *db, const char *target_key, int threads, const char *dtype,
                        te_roof_machine *m, char *why, size_t why_size)
{
    memset(m, 0, sizeof *m);
    te_db_peak_list *l = NULL;
    int rc = te_db_peaks(db, target_key, &l);
    if (rc != TE_OK)
        return rc;
    const char *want = dtype && !strcmp(dtype, "f64") ? "f64" : "f32";
    static const char *const isas[] = {"avx512", "avx2", "sse", "scalar"};
    const te_db_peak *fma = NULL, *copy = NULL;
    /* The widest ISA; within it the requested thread count, else the most threads. */
    for (int k = 0; k < 4 && !fma; k++)
        for (size_t i = 0; i < l->n; i++) {
            const te_db_peak *p = &l->items[i];
            if (strcmp(p->kind, "fma") || strcmp(p->dtype, want) || strcmp(p->isa, isas[k]))
                continue;
            if (!fma || p->threads == threads ||
                (fma->threads != threads && p->threads > fma->threads))
                fma = p;
        }
    for (size_t i = 0; i < l->n; i++) {
        const te_db_peak *p = &l->items[i];
        if (strcmp(p->kind, "copy"))
            continue;
        if (!copy || p->threads == threads ||
            (copy->threads != threads && p->threads > copy->threads))
            copy = p;
    }
    if (!fma || !copy) {
        snprintf(why, why_size,
                 "no %s recorded for target '%s': run `tessera target --measure` with this "
                 "database on that machine",
                 !fma ? "FMA peak" : "copy bandwidth", target_key);
        te_db_peak_list_free(l);
        return TE_ERR_NOT_FOUND;
    }
    m->peak_gflops = fma->value;
    m->bw_gbps = copy->value;
    snprintf(m->peak_what, sizeof m->peak_what, "%s %s, %d thread%s", fma->dtype, fma->isa,
             (int)fma->threads, fma->threads == 1 ? "" : "s");
    snprintf(m->bw_what, sizeof m->bw_what, "copy, %d thread%s", (int)copy->threads,
             copy->threads == 1 ? "" : "s");
    te_db_peak_list_free(l);
    return TE_OK;
}

/* ---- The table ---------------------------------------------------------------------------- */

void te_roofline_print_table(FILE *f, const te_roof_point *p, int n)
{
    fprintf(f, "%-44s %10s %9s %10s %8s  %s\n", "kernel", "GFLOP/s", "AI", "roof", "fraction",
            "bound");
    for (int i = 0; i < n; i++) {
        const te_roof_point *q = &p[i];
        fprintf(f, "%-44.44s %10.2f %9.3f %10.2f %7.1f%%  %s\n", q->label, q->gflops, q->intensity,
                q->roof, 100 * q->fraction, q->bound ? q->bound : "-");
    }
}

/* ---- The plot ----------------------------------------------------------------------------- */

enum { W = 760, H = 520, ML = 80, MR = 30, MT = 50, MB = 64 };

typedef struct {
    double x0, x1, y0, y1; /* log10 of the axis ranges */
} axes;

static double px(const axes *a, double x)
{
    return ML + (log10(x) - a->x0) / (a->x1 - a->x0) * (W - ML - MR);
}

static double py(const axes *a, double y)
{
    return H - MB - (log10(y) - a->y0) / (a->y1 - a->y0) * (H - MT - MB);
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, f);
        }
    }
}

/* A tick label: 0.01, 0.1, 1, 10, ..., 1e+05. */
static void tick_label(char *buf, size_t n, int k)
{
    if (k >= -3 && k <= 4)
        snprintf(buf, n, "%g", pow(10, k));
    else
        snprintf(buf, n, "1e%+d", k);
}

int te_roofline_write_svg(const char *path, const te_roof_point *p, int n, const te_roof_machine *m,
                          const char *title)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "roofline: cannot write %s\n", path);
        return -1;
    }
    double ridge = m->peak_gflops / m->bw_gbps;
    double xmin = ridge, xmax = ridge, ymin = m->peak_gflops, ymax = m->peak_gflops;
    for (int i = 0; i < n; i++) {
        if (!(p[i].intensity > 0) || !(p[i].gflops > 0))
            continue;
        xmin = fmin(xmin, p[i].intensity);
        xmax = fmax(xmax, p[i].intensity);
        ymin = fmin(ymin, p[i].gflops);
        ymax = fmax(ymax, p[i].gflops);
    }
    axes a = {floor(log10(xmin / 2)), ceil(log10(xmax * 2)), floor(log10(ymin / 2)),
              ceil(log10(ymax * 2))};
    if (a.x1 - a.x0 < 2)
        a.x1 = a.x0 + 2;
    if (a.y1 - a.y0 < 2)
        a.y0 = a.y1 - 2;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fputs("<text x=\"380\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", f);
    xml_text(f, title && *title ? title : "Roofline");
    fputs("</text>\n", f);
    /* Grid, ticks and labels: a line per decade, minor ticks at 2..9. */
    fputs("<g stroke=\"#ddd\" stroke-width=\"1\">\n", f);
    for (int k = (int)a.x0; k <= (int)a.x1; k++) {
        double x = px(&a, pow(10, k));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, MT, x, H - MB);
    }
    for (int k = (int)a.y0; k <= (int)a.y1; k++) {
        double y = py(&a, pow(10, k));
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ML, y, W - MR, y);
    }
    fputs("</g>\n<g stroke=\"black\" stroke-width=\"1\">\n", f);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\"/>\n", ML, MT,
            W - ML - MR, H - MT - MB);
    for (int k = (int)a.x0; k <= (int)a.x1; k++)
        for (int j = 1; j <= 9 && (j == 1 || k < (int)a.x1); j++) {
            double x = px(&a, j * pow(10, k));
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, H - MB, x,
                    H - MB + (j == 1 ? 6 : 3));
        }
    for (int k = (int)a.y0; k <= (int)a.y1; k++)
        for (int j = 1; j <= 9 && (j == 1 || k < (int)a.y1); j++) {
            double y = py(&a, j * pow(10, k));
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n",
                    ML - (j == 1 ? 6 : 3), y, ML, y);
        }
    fputs("</g>\n", f);
    char lab[32];
    for (int k = (int)a.x0; k <= (int)a.x1; k++) {
        tick_label(lab, sizeof lab, k);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                px(&a, pow(10, k)), H - MB + 20, lab);
    }
    for (int k = (int)a.y0; k <= (int)a.y1; k++) {
        tick_label(lab, sizeof lab, k);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 9,
                py(&a, pow(10, k)) + 4, lab);
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte, "
            "compulsory traffic)</text>\n",
            ML + (W - ML - MR) / 2, H - 18);
    fprintf(f,
            "<text x=\"20\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">"
            "performance (GFLOP/s)</text>\n",
            MT + (H - MT - MB) / 2, MT + (H - MT - MB) / 2);
    /* The roofs: bandwidth x intensity up to the ridge, then the compute peak. */
    double xs = pow(10, a.x0), ylo = pow(10, a.y0);
    if (m->bw_gbps * xs < ylo)
        xs = ylo / m->bw_gbps;
    double xe = pow(10, a.x1);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" "
            "stroke-width=\"2.5\"/>\n",
            px(&a, xs), py(&a, m->bw_gbps * xs), px(&a, ridge), py(&a, m->peak_gflops));
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
            "stroke-width=\"2.5\"/>\n",
            px(&a, ridge), py(&a, m->peak_gflops), px(&a, xe), py(&a, m->peak_gflops));
    /* The legend, top left, where no kernel can be (high performance at low intensity). */
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"330\" height=\"44\" fill=\"white\" "
            "stroke=\"#bbb\"/>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
            "stroke-width=\"2.5\"/>\n"
            "<text x=\"%d\" y=\"%d\" font-size=\"11\">compute roof %.4g GFLOP/s (",
            ML + 8, MT + 8, ML + 16, MT + 22, ML + 40, MT + 22, ML + 46, MT + 26, m->peak_gflops);
    xml_text(f, m->peak_what);
    fprintf(f,
            ")</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" "
            "stroke-width=\"2.5\"/>\n"
            "<text x=\"%d\" y=\"%d\" font-size=\"11\">bandwidth roof %.4g GB/s x AI (",
            ML + 16, MT + 40, ML + 40, MT + 40, ML + 46, MT + 44, m->bw_gbps);
    xml_text(f, m->bw_what);
    fputs(")</text>\n", f);
    /* The kernels; a label that would cover an earlier one moves down a line (labels are
     * about 6 px per character at this size). */
    double *lx0 = malloc(sizeof *lx0 * (size_t)(n > 0 ? 3 * n : 1)), *lx1 = lx0 ? lx0 + n : NULL,
           *lys = lx0 ? lx0 + 2 * n : NULL;
    int nl = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i].intensity > 0) || !(p[i].gflops > 0) || !isfinite(p[i].intensity) ||
            !isfinite(p[i].gflops))
            continue;
        double x = px(&a, p[i].intensity), y = py(&a, p[i].gflops);
        if (!isfinite(x) || !isfinite(y))
            continue;
        fprintf(f,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#2ca02c\" stroke=\"black\" "
                "stroke-width=\"0.8\"/>\n",
                x, y);
        int right = x < W - MR - 200;
        double w = 6.0 * ((double)strlen(p[i].label) + 7);
        double x0 = right ? x + 7 : x - 7 - w, x1 = x0 + w, yl = y - 6;
        /* Each pass moves the label below one it covers; nl passes place it below all of
         * them, so the loop is bounded whatever the coordinates. */
        for (int moved = 1, pass = 0; moved && lx0 && pass <= nl; pass++) {
            moved = 0;
            for (int j = 0; j < nl; j++)
                if (x0 < lx1[j] && lx0[j] < x1 && fabs(yl - lys[j]) < 12) {
                    yl = lys[j] + 12;
                    moved = 1;
                }
        }
        if (lx0) {
            lx0[nl] = x0;
            lx1[nl] = x1;
            lys[nl++] = yl;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\"%s>", right ? x + 7 : x - 7, yl,
                right ? "" : " text-anchor=\"end\"");
        xml_text(f, p[i].label);
        fprintf(f, " (%.0f%%)</text>\n", 100 * p[i].fraction);
    }
    free(lx0);
    fputs("</svg>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "roofline: write error on %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- `tessera db roofline` ---------------------------------------------------------------- */

typedef struct {
    te_db *db;
    const char *workload, *target;
    te_roof_point *pts;
    char (*targets)[512];
    int n, cap;
    int failed;
} collect;

/* The cores field ("2c") of a C target key, or 0. */
static int key_cores(const char *key)
{
    for (const char *p = key; p && *p; p = strchr(p, ';') ? strchr(p, ';') + 1 : NULL) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end != p && *end == 'c' && (end[1] == ';' || end[1] == '\0') && v > 0)
            return (int)v;
    }
    return 0;
}

/* Field i (0-based) of a ';'-separated key into buf ("" when it has fewer fields). */
static void key_field(const char *key, int i, char *buf, size_t n)
{
    const char *p = key;
    for (int f = 0; f < i && p; f++)
        p = strchr(p, ';') ? strchr(p, ';') + 1 : NULL;
    size_t len = p ? strcspn(p, ";") : 0;
    snprintf(buf, n, "%.*s", (int)len, p ? p : "");
}

/* The bytes stored with the newest trial of (workload, target) that has them, or NAN. */
static double stored_bytes(te_db *db, const char *workload_key, const te_db_target *t)
{
    te_db_trial_list *h = NULL;
    double bytes = NAN;
    if (te_db_history(db, workload_key, t, 0, &h) == TE_OK)
        for (size_t i = h->n; i-- > 0 && !(bytes > 0);)
            if (h->items[i].bytes > 0)
                bytes = h->items[i].bytes;
    te_db_trial_list_free(h);
    return bytes;
}

static int collect_row(const te_db_summary *row, void *ud)
{
    collect *c = ud;
    if (row->n_ok == 0 || (c->workload && !strstr(row->workload_key, c->workload)) ||
        (c->target && !strstr(row->target_key, c->target)))
        return 0;
    if (strncmp(row->target_key, "c;", 2)) {
        fprintf(stderr, "roofline: %s on %s: only CPU targets have measured peaks; left out\n",
                row->workload_key, row->target_key);
        return 0;
    }
    te_db_target t = {.key = row->target_key};
    te_db_trial_list *best = NULL;
    if (te_db_best(c->db, row->workload_key, &t, 0, &best) != TE_OK || best->n == 0) {
        te_db_trial_list_free(best);
        return 0;
    }
    const te_db_trial *b = &best->items[0];
    te_ctx *ctx = te_ctx_create();
    te_kernel_counts k;
    const char *note = NULL;
    char dtype[8] = "";
    int rc =
        ctx ? te_roofline_count(ctx, row->workload_key, b->trace, &k, dtype, &note) : TE_ERR_NOMEM;
    /* A library operator is recounted (which also covers trials recorded before schema 5);
     * the bytes the tuner counted from the measured kernel's own lowered IR are the same
     * count and win when stored. Anything the key cannot rebuild (a user expression, a fused
     * graph group, an ONNX model's kernel, an operator of a plugin not loaded) uses what the
     * tuner stored: the workload's flops and the trial's bytes. Compulsory bytes are the
     * sizes of the kernel's arguments, whatever the schedule, so when the best trial predates
     * schema 5 any later trial of the workload on the target supplies them. */
    double bytes = b->bytes > 0 ? b->bytes : NAN;
    if (rc != TE_OK && rc != TE_ERR_NOMEM && !(bytes > 0))
        bytes = stored_bytes(c->db, row->workload_key, &t);
    int stored = 0;
    if (rc == TE_OK && bytes > 0) {
        k.bytes = bytes;
    } else if (rc != TE_OK && rc != TE_ERR_NOMEM && bytes > 0 && b->workload.flops > 0) {
        k.flops = b->workload.flops;
        k.bytes = bytes;
        key_field(row->workload_key, 2, dtype, sizeof dtype);
        stored = 1;
        rc = TE_OK;
    }
    if (rc != TE_OK) {
        if (rc == TE_ERR_NOMEM || !ctx)
            fprintf(stderr, "roofline: %s: left out: out of memory\n", row->workload_key);
        else if (!(b->workload.flops > 0))
            fprintf(stderr,
                    "roofline: %s: left out: %s, and the workload's flops are not "
                    "recorded\n",
                    row->workload_key, te_ctx_errmsg(ctx));
        else
            fprintf(stderr,
                    "roofline: %s: left out: %s, and its trials store no bytes moved (they "
                    "were recorded before schema version 5); tune it again with this Tessera "
                    "(the same `tessera tune` command: every new trial records its bytes) to "
                    "get it in\n",
                    row->workload_key, te_ctx_errmsg(ctx));
    } else {
        if (note && !stored)
            fprintf(stderr, "roofline: %s: %s\n", row->workload_key, note);
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 16;
            te_roof_point *np = realloc(c->pts, sizeof *np * (size_t)c->cap);
            char(*nt)[512] = realloc(c->targets, sizeof *nt * (size_t)c->cap);
            if (np)
                c->pts = np;
            if (nt)
                c->targets = nt;
            if (!np || !nt) {
                c->failed = 1;
                te_ctx_free(ctx);
                te_db_trial_list_free(best);
                return 1;
            }
        }
        te_roof_point *p = &c->pts[c->n];
        memset(p, 0, sizeof *p);
        snprintf(p->label, sizeof p->label, "%s", row->workload_key);
        snprintf(p->dtype, sizeof p->dtype, "%s", dtype);
        snprintf(c->targets[c->n], sizeof c->targets[0], "%s", row->target_key);
        p->flops = k.flops;
        p->bytes = k.bytes;
        p->seconds = b->median_s;
        c->n++;
    }
    te_ctx_free(ctx);
    te_db_trial_list_free(best);
    return 0;
}

int te_roofline_db_command(const char *db_path, const char *workload, const char *target,
                           const char *svg, int json)
{
    te_db *db = NULL;
    te_db_options o = {.flags = TE_DB_NO_CREATE};
    int rc = te_db_open(db_path, &o, &db);
    if (rc == TE_ERR_READONLY) {
        te_db_close(db);
        o.flags |= TE_DB_READONLY;
        rc = te_db_open(db_path, &o, &db);
    }
    if (rc != TE_OK) {
        fprintf(stderr, "tessera db roofline: %s\n", te_db_errmsg(db));
        te_db_close(db);
        return 1;
    }
    collect c = {.db = db, .workload = workload, .target = target};
    rc = te_db_summary_foreach(db, TE_DB_USER_ONLY, collect_row, &c);
    int status = 0;
    if (c.failed || (rc != TE_OK && rc != 1)) {
        fprintf(stderr, "tessera db roofline: %s\n", c.failed ? "out of memory" : te_db_errmsg(db));
        status = 1;
    } else if (c.n == 0) {
        fprintf(stderr, "tessera db roofline: no ok trial on a CPU target matches (or every "
                        "match was left out, as said above)\n");
        status = 1;
    }
    /* Each kernel under the roofs of its own target and dtype; the plot shows the first
     * kernel's target. */
    te_roof_machine plot_m = {0};
    int have_plot_m = 0, n_plot = 0;
    te_roof_point *plot = status ? NULL : malloc(sizeof *plot * (size_t)c.n);
    for (int i = 0; i < c.n && !status; i++) {
        te_roof_machine m;
        char why[512];
        int mrc = te_roofline_machine(db, c.targets[i], key_cores(c.targets[i]), c.pts[i].dtype, &m,
                                      why, sizeof why);
        if (mrc != TE_OK) {
            fprintf(stderr, "tessera db roofline: %s\n",
                    mrc == TE_ERR_NOT_FOUND ? why : te_db_errmsg(db));
            status = 1;
            break;
        }
        te_roofline_point_finish(&c.pts[i], &m);
        if (!have_plot_m) {
            plot_m = m;
            have_plot_m = 1;
        }
        if (plot && !strcmp(c.targets[i], c.targets[0]) &&
            fabs(m.peak_gflops - plot_m.peak_gflops) <= 1e-12 * plot_m.peak_gflops)
            plot[n_plot++] = c.pts[i];
    }
    if (!status) {
        if (json) {
            for (int i = 0; i < c.n; i++) {
                const te_roof_point *p = &c.pts[i];
                fputs("{\"workload\":", stdout);
                te_db_json_write_str(stdout, p->label);
                fputs(",\"target\":", stdout);
                te_db_json_write_str(stdout, c.targets[i]);
                const char *names[] = {"flops",     "bytes",       "median_s", "gflops",
                                       "intensity", "roof_gflops", "fraction"};
                double vals[] = {p->flops,     p->bytes, p->seconds, p->gflops,
                                 p->intensity, p->roof,  p->fraction};
                for (int k = 0; k < 7; k++) {
                    printf(",\"%s\":", names[k]);
                    te_db_json_write_num(stdout, vals[k]);
                }
                fputs("}\n", stdout);
            }
        } else {
            printf("roofs of %s: %.4g GFLOP/s (%s), %.4g GB/s (%s)\n", c.targets[0],
                   plot_m.peak_gflops, plot_m.peak_what, plot_m.bw_gbps, plot_m.bw_what);
            te_roofline_print_table(stdout, c.pts, c.n);
        }
        if (svg) {
            if (n_plot < c.n)
                fprintf(stderr,
                        "tessera db roofline: the plot shows the %d kernel(s) under the roofs of "
                        "%s (%s); use --target and --workload to plot the others\n",
                        n_plot, c.targets[0], plot_m.peak_what);
            char title[640];
            snprintf(title, sizeof title, "Roofline: %s", c.targets[0]);
            if (te_roofline_write_svg(svg, plot, n_plot, &plot_m, title) != 0)
                status = 1;
        }
    }
    free(plot);
    free(c.pts);
    free(c.targets);
    te_db_close(db);
    return status;
}

/* ---- `tessera bench --roofline` ----------------------------------------------------------- */

/* The roofs of the host at `threads` threads: recorded peaks when db has them, else measured. */
static void bench_machine(te_db *db, int threads, te_roof_machine *m)
{
    /* `tessera target --measure` records under the host's own key (all its threads), one
     * entry per thread count. */
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024], key[512], why[512];
    if (db && te_tuner_db_target(&tgt, &dbt, storage, sizeof storage) == TE_OK) {
        te_db_target_key(&dbt, key, sizeof key);
        if (te_roofline_machine(db, key, threads, "f32", m, why, sizeof why) == TE_OK)
            return;
    }
    fprintf(stderr,
            "tessera bench: no peaks recorded for %d thread(s) (tessera target --measure); "
            "measuring them now\n",
            threads);
    te_peak_isa isa = te_peak_widest_isa();
    m->peak_gflops = te_peak_fma(0, isa, threads, 0, 5);
    m->bw_gbps = te_peak_copy_gbps(threads, 0, 5);
    snprintf(m->peak_what, sizeof m->peak_what, "f32 %s, %d thread%s, measured now",
             te_peak_isa_name(isa), threads, threads == 1 ? "" : "s");
    snprintf(m->bw_what, sizeof m->bw_what, "copy, %d thread%s, measured now", threads,
             threads == 1 ? "" : "s");
}

int te_roofline_bench(const te_bench_row *rows, int n, const char *db_path, const char *svg,
                      FILE *out)
{
    if (!db_path) {
        const char *env = getenv("TESSERA_DB");
        db_path = env && *env ? env : "tessera.db";
    }
    te_db *db = NULL;
    te_db_options o = {.flags = TE_DB_READONLY | TE_DB_NO_CREATE};
    if (te_db_open(db_path, &o, &db) != TE_OK) {
        te_db_close(db);
        db = NULL;
    }
    te_roof_point *pts = calloc((size_t)(n > 0 ? n : 1), sizeof *pts);
    int *thr = calloc((size_t)(n > 0 ? n : 1), sizeof *thr);
    te_roof_machine ms[8];
    int mthreads[8], nm = 0, np = 0, maxt = 0;
    if (!pts || !thr) {
        fprintf(stderr, "tessera bench: out of memory\n");
        free(pts);
        free(thr);
        te_db_close(db);
        return 1;
    }
    for (int r = 0; r < n; r++) {
        const te_bench_row *w = &rows[r];
        if (!*w->op || !(w->seconds > 0))
            continue;
        int mi;
        for (mi = 0; mi < nm && mthreads[mi] != w->threads; mi++)
            ;
        if (mi == nm) {
            if (nm == 8)
                continue;
            bench_machine(db, w->threads, &ms[nm]);
            mthreads[nm++] = w->threads;
        }
        te_ctx *ctx = te_ctx_create();
        char key[200];
        snprintf(key, sizeof key, "%s;%s;f32", w->op, w->params);
        te_kernel_counts k;
        if (!ctx || te_roofline_count(ctx, key, NULL, &k, NULL, NULL) != TE_OK) {
            fprintf(stderr, "tessera bench: roofline: %s left out: %s\n", w->workload,
                    ctx ? te_ctx_errmsg(ctx) : "out of memory");
            te_ctx_free(ctx);
            continue;
        }
        te_ctx_free(ctx);
        te_roof_point *p = &pts[np];
        snprintf(p->label, sizeof p->label, "%s, %d thread%s", w->workload, w->threads,
                 w->threads == 1 ? "" : "s");
        snprintf(p->dtype, sizeof p->dtype, "f32");
        p->flops = k.flops;
        p->bytes = k.bytes;
        p->seconds = w->seconds;
        te_roofline_point_finish(p, &ms[mi]);
        thr[np++] = w->threads;
        if (w->threads > maxt)
            maxt = w->threads;
    }
    te_db_close(db);
    int status = 0;
    if (np == 0) {
        fprintf(stderr, "tessera bench: roofline: no row to place\n");
        status = 1;
    } else {
        fprintf(out, "\nroofline (flops and compulsory bytes from the lowered IR; "
                     "docs/PERFORMANCE.md):\n");
        for (int i = 0; i < nm; i++)
            fprintf(out, "  roofs at %d thread(s): %.4g GFLOP/s (%s), %.4g GB/s (%s)\n",
                    mthreads[i], ms[i].peak_gflops, ms[i].peak_what, ms[i].bw_gbps, ms[i].bw_what);
        te_roofline_print_table(out, pts, np);
        int mi = 0, k = 0;
        while (mthreads[mi] != maxt)
            mi++;
        for (int i = 0; i < np; i++)
            if (thr[i] == maxt)
                pts[k++] = pts[i];
        char title[128];
        snprintf(title, sizeof title, "Roofline: tessera bench, %d thread%s", maxt,
                 maxt == 1 ? "" : "s");
        if (te_roofline_write_svg(svg, pts, k, &ms[mi], title) != 0)
            status = 1;
        else
            fprintf(out, "roofline plot (%d thread%s): %s\n", maxt, maxt == 1 ? "" : "s", svg);
    }
    free(pts);
    free(thr);
    return status;
}
