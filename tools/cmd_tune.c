/*
 * `tessera tune`: tune one operator (or a task list) into the tuning database.
 *
 *   tessera tune matmul --shape m=1024,n=1024,k=1024 --trials 400 --db tune.db
 *   tessera tune --tasks transformer.json --time 8h --shard 0/4 --db shard0.db
 *
 * The job is the library's (autotune/tuner.c); this file parses options, shows progress (a
 * progress line on a terminal, log lines otherwise), measures the strongest baseline for matmul
 * and the MLP gate the way `tessera bench` does (tools/baselines.c: OpenBLAS with the kernels that
 * fit the CPU, oneDNN plain and packed, alternating, medians, the tuning target's thread count; in
 * a child, since this process must not run OpenMP) so the best result can be read as a ratio,
 * re-measures the job's best beside the baselines at the end (same discipline), handles SIGINT
 * (stop after the batch in flight), and prints
 * the best schedule, as a trace and as C, at the end.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "tools/baselines.h"
#include "tools/cli.h"

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
    (void)sig;
    if (g_stop) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    g_stop = 1;
    static const char msg[] =
        "\ntessera tune: stopping after the batch in flight (Ctrl-C again to abort)\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera tune OP --shape KEY=VAL,... [options]\n"
            "       tessera tune --tasks FILE [options]\n\n"
            "Searches schedules for an operator of the library (`tessera ops` lists them) and\n"
            "records every measured candidate in the tuning database as it goes. Rerunning the\n"
            "command of an interrupted job continues that job and never measures a\n"
            "configuration already recorded for the workload on this target.\n\n"
            "options:\n"
            "  --shape KEY=VAL,...   the operator's parameters (also --params)\n"
            "  --tasks FILE          a JSON list of workloads tuned in one job:\n"
            "                        [{\"op\": \"matmul\", \"shape\": \"m=64,n=64,k=64\"}, ...]\n"
            "  --shard I/N           tune only tasks I, I+N, I+2N, ... of the list (0 <= I < N)\n"
            "  --target cpu|cuda     where to measure (default cpu)\n"
            "  --trials N            trial budget of the job (default 200 when no --time)\n"
            "  --time T              time budget of this run: 90, 90s, 15m, 8h\n"
            "  --early-stop N        stop a task after N trials without a 1%% improvement\n"
            "  --strategy S          random, grid or evolutionary (default)\n"
            "  --space K             auto (default), template or sketch\n"
            "  --seed S              seed of the proposals (default 1)\n"
            "  --batch N             candidates built and run together (default 16)\n"
            "  --timeout S           run-time limit of one candidate in seconds (default 10)\n"
            "  --compile-timeout S   a compiler run longer than S seconds is a compile error "
            "(20)\n"
            "  --min-time S          timed runs of a candidate add up to at least S (0.01)\n"
            "  --flush-cache         overwrite the caches before every timed run\n"
            "  --no-warm-start       do not seed the search from the database's records\n"
            "  --new-job             never resume; start a new job\n"
            "  --db FILE             the database (default: $TESSERA_DB, else ./tessera.db)\n"
            "  --curve FILE.svg      draw this job's tuning curve (trial vs best GFLOP/s)\n"
            "  --json                print the result as JSON on stdout\n"
            "  --quiet               no progress output\n\n"
            "Exit status: 0 done (budget spent, early stop, or space exhausted), 1 failed or\n"
            "interrupted, 2 bad usage.\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera tune: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see tessera tune --help)\n");
    return 2;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s)
        return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int parse_pos_double(const char *s, double *out)
{
    if (!s || !*s)
        return 0;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || errno || !(v > 0) || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

/* ---- Baselines (in a child: this process must not start OpenMP threads) ------------------ */

/* Repetitions of each baseline: `tessera bench`'s default. */
#define BASELINE_REPS 9

typedef struct {
    te_bl_shape shape;
    int threads;
} baseline_job;

static void baseline_child(void *user, void *out)
{
    baseline_job *j = user;
    te_bl_result *r = out;
    if (te_bl_measure(&j->shape, j->threads, BASELINE_REPS, r) != 0)
        r->best_lib = -1;
}

/* Fills *shape from a matmul or mlp_gate task's parameters; 0 for other tasks (no baseline). */
static int baseline_shape(const char *op, const char *params, te_bl_shape *shape)
{
    int gate = !strcmp(op, "mlp_gate");
    if (strcmp(op, "matmul") && !gate)
        return 0;
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    int ok = 0;
    memset(shape, 0, sizeof *shape);
    shape->gate = gate;
    if (ctx && te_op_params_parse(ctx, params, &kv) == TE_OK && kv.dtype == TE_F32) {
        for (int i = 0; i < kv.n; i++) {
            int v = (int)kv.p[i].ival;
            if (!strcmp(kv.p[i].key, "m"))
                shape->m = v;
            else if (!strcmp(kv.p[i].key, "n"))
                shape->n = v;
            else if (!strcmp(kv.p[i].key, "k"))
                shape->k = v;
            else if (!strcmp(kv.p[i].key, "trans_a"))
                shape->ta = v;
            else if (!strcmp(kv.p[i].key, "trans_b"))
                shape->tb = v;
        }
        ok = shape->m > 0 && shape->n > 0 && shape->k > 0 && !(gate && (shape->ta || shape->tb));
    }
    te_ctx_free(ctx);
    return ok;
}

/* The strongest baseline for a task measured in a child; 0 when there is none. */
static int measure_baseline(const char *op, const char *params, int threads, te_bl_result *r)
{
    baseline_job j;
    memset(r, 0, sizeof *r);
    r->best = NAN;
    r->best_lib = -1;
    if (!baseline_shape(op, params, &j.shape))
        return 0;
    j.threads = threads;
    if (te_tune_run_isolated(baseline_child, &j, r, sizeof *r, 300) != TE_OK) {
        memset(r, 0, sizeof *r);
        r->best = NAN;
        r->best_lib = -1;
        snprintf(r->notes, sizeof r->notes, "the baseline measurement failed; no ratio");
    }
    r->notes[sizeof r->notes - 1] = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        r->impl[l][sizeof r->impl[l] - 1] = 0;
    /* The tuner counts the task's floating-point operations its own way (te_tuner_flops counts
     * the gate's elementwise work too): the baseline's figures in the same units, so that the
     * ratio of two GFLOP/s figures is the ratio of the two times. */
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    double scale = NAN;
    if (ctx && te_op_build(ctx, op, params, in, &n_in, outs, &n_out) == TE_OK)
        scale = te_tuner_flops(n_out, outs) / te_bl_shape_flops(&j.shape);
    te_ctx_free(ctx);
    if (!(scale > 0)) {
        snprintf(r->notes, sizeof r->notes, "the task's flop count is unknown; no ratio");
        r->best = NAN;
        r->best_lib = -1;
    }
    for (int l = 0; l < TE_BL_NLIBS; l++)
        r->gflops[l] *= scale;
    r->openblas *= scale;
    r->onednn *= scale;
    r->best *= scale;
    return r->best_lib >= 0;
}

/* The parameters part of a workload key ("matmul;k=64,m=64,n=64;f32" -> "k=64,m=64,n=64"). */
static void task_params(const char *key, char *buf, size_t n)
{
    const char *sc = strchr(key, ';');
    snprintf(buf, n, "%s", sc ? sc + 1 : "");
    char *end = strchr(buf, ';');
    if (end)
        *end = 0;
}

/* ---- The best schedule beside the baselines, at the end of the job (in a child) ------------ */

typedef struct {
    const char *op, *params, *trace;
    te_bl_shape shape;
    int threads;
} final_job;

typedef struct {
    int ok;
    double ours, err; /* GFLOP/s (the tuner's flop count), error against OpenBLAS */
    te_bl_result r;
} final_result;

typedef struct {
    te_packed_fn fn;
    void **args;
} kernel_run;

static void run_kernel(void *p)
{
    kernel_run *k = p;
    k->fn(k->args);
}

/* Builds the best schedule (its trace), and times it beside every baseline the way
 * `tessera bench` does: one process, a warm-up, BASELINE_REPS alternating rounds, medians. */
static void final_child(void *user, void *out)
{
    final_job *j = user;
    final_result *fr = out;
    memset(fr, 0, sizeof *fr);
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO], *args[2 * TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    te_module *m = NULL;
    te_schedule *s = NULL;
    te_target tgt = te_target_host();
    tgt.num_cores = j->threads;
    if (!ctx || te_op_build(ctx, j->op, j->params, in, &n_in, outs, &n_out) != TE_OK ||
        n_in < (j->shape.gate ? 3 : 2) || !(s = te_schedule_create(ctx, n_out, outs)) ||
        te_schedule_apply_trace(s, j->trace) != TE_OK) {
        te_ctx_free(ctx);
        return;
    }
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    for (int q = 0; q < n_out; q++)
        args[n_in + q] = outs[q];
    double flop = te_tuner_flops(n_out, outs);
    if (te_build(s, n_in + n_out, args, j->op, &tgt, &m) != TE_OK) {
        te_ctx_free(ctx);
        return;
    }
    void *bufs[2 * TE_OP_MAX_IO] = {0};
    unsigned seed = 777;
    int ok = 1;
    for (int q = 0; q < n_in + n_out; q++) {
        size_t n = (size_t)te_tensor_numel(args[q]);
        float *b = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        ok = ok && b;
        for (size_t i = 0; b && i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            b[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
        }
        bufs[q] = b;
    }
    if (ok) {
        te_bl_set_threads(j->threads);
        te_bl_set set;
        te_bl_set_create(&set, &j->shape, bufs[0], bufs[1], j->shape.gate ? bufs[2] : NULL, &fr->r);
        kernel_run kr = {te_module_entry(m), bufs};
        te_bl_run_fn fn[TE_BL_NLIBS + 1] = {run_kernel};
        void *arg[TE_BL_NLIBS + 1] = {&kr};
        int n = 1 + te_bl_set_fns(&set, fn + 1, arg + 1);
        double med[TE_BL_NLIBS + 1];
        const float *ref = te_bl_set_reference(&set);
        if (n > 1 && te_bl_time_alternating(n, fn, arg, BASELINE_REPS, med) == 0) {
            te_bl_set_result(&set, med + 1, flop, &fr->r);
            fr->ours = flop / med[0] * 1e-9;
            fr->err = ref ? te_bl_rel_err(bufs[n_in], ref, (size_t)te_tensor_numel(outs[0])) : 0;
            fr->ok = ref == NULL || fr->err < 1e-2;
        }
        te_bl_set_free(&set);
    }
    for (int q = 0; q < n_in + n_out; q++)
        free(bufs[q]);
    te_module_free(m);
    te_ctx_free(ctx);
}

/* The best schedule of a task re-measured beside the baselines; 0 when not possible. */
static int measure_final(const char *op, const char *params, const char *trace, int threads,
                         final_result *fr)
{
    final_job j = {op, params, trace, {0}, threads};
    memset(fr, 0, sizeof *fr);
    if (!trace || !baseline_shape(op, params, &j.shape) ||
        te_tune_run_isolated(final_child, &j, fr, sizeof *fr, 300) != TE_OK || !fr->ok)
        return 0;
    fr->r.notes[sizeof fr->r.notes - 1] = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        fr->r.impl[l][sizeof fr->r.impl[l] - 1] = 0;
    return fr->r.best_lib >= 0;
}

/* "oneDNN" or "OpenBLAS": how the progress line names the strongest baseline. */
static const char *best_short(const te_bl_result *r)
{
    return r->best_lib == TE_BL_OPENBLAS ? "OpenBLAS" : "oneDNN";
}

/* ---- Progress ------------------------------------------------------------------------------ */

typedef struct {
    int tty, quiet;
    te_bl_result *baseline; /* per task; best NAN when none */
    int64_t trials0;        /* job trials before this run (resume) */
    int64_t planned;
    double time_budget;
    int line_open;
} prog_state;

static void fmt_dur(double s, char *buf, size_t n)
{
    if (!(s >= 0) || !isfinite(s))
        snprintf(buf, n, "?");
    else if (s < 90)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* The tuner's warnings (it never prints itself), on their own line. */
static void on_warning(const char *msg, void *user)
{
    prog_state *ps = user;
    if (ps->line_open) {
        fputc('\n', stderr);
        ps->line_open = 0;
    }
    fprintf(stderr, "tessera tune: %s\n", msg);
}

static void on_progress(const te_tune_progress *p, void *user)
{
    prog_state *ps = user;
    if (ps->quiet)
        return;
    char best[96] = "none yet", left[48] = "", ratio[48] = "";
    if (isfinite(p->task_best_gflops))
        snprintf(best, sizeof best, "%.1f GFLOP/s (%.3f ms)", p->task_best_gflops,
                 p->task_best_s * 1e3);
    else if (isfinite(p->task_best_s))
        snprintf(best, sizeof best, "%.3f ms", p->task_best_s * 1e3);
    const te_bl_result *br = ps->baseline ? &ps->baseline[p->task] : NULL;
    if (br && isfinite(br->best) && isfinite(p->task_best_gflops))
        snprintf(ratio, sizeof ratio, ", %.2fx %s", p->task_best_gflops / br->best, best_short(br));
    double rem = INFINITY;
    int64_t done_now = p->trials_done - ps->trials0;
    if (p->trials_planned > 0 && done_now > 0)
        rem = p->elapsed_s / (double)done_now * (double)(p->trials_planned - p->trials_done);
    if (p->time_budget_s > 0 && p->time_budget_s - p->elapsed_s < rem)
        rem = p->time_budget_s - p->elapsed_s;
    if (rem < 0)
        rem = 0;
    char l[32];
    fmt_dur(rem, l, sizeof l);
    snprintf(left, sizeof left, "%s left", isfinite(rem) ? l : "?");
    char trials[64];
    if (p->trials_planned > 0)
        snprintf(trials, sizeof trials, "%lld/%lld", (long long)p->trials_done,
                 (long long)p->trials_planned);
    else
        snprintf(trials, sizeof trials, "%lld", (long long)p->trials_done);
    char task[64] = "";
    if (p->n_tasks > 1)
        snprintf(task, sizeof task, "[task %d/%d] ", p->task + 1, p->n_tasks);
    if (ps->tty) {
        fprintf(stderr, "\r\033[K%strials %s, errors %lld | best %s%s | %.1f trials/s | %s", task,
                trials, (long long)p->errors, best, ratio,
                done_now > 0 ? (double)done_now / p->elapsed_s : 0.0, left);
        ps->line_open = 1;
    } else {
        fprintf(stderr, "tune: %s%s trials %s (batch %d, %d ok), errors %lld, best %s%s, %s\n",
                task, p->workload_key, trials, p->batch_n, p->batch_ok, (long long)p->errors, best,
                ratio, left);
    }
    fflush(stderr);
}

/* ---- Tuning curve (SVG) -------------------------------------------------------------------- */

static int write_curve(const char *path, te_db *db, const te_tune_task_info *info,
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

/* ---- JSON helpers ---------------------------------------------------------------------------- */

static void jstr(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void jnum(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fputs("null", f);
}

/* ---- The command -------------------------------------------------------------------------- */

int te_cmd_tune(int argc, char **argv)
{
    const char *op = NULL, *shape = NULL, *tasks = NULL, *db_path = NULL, *curve = NULL;
    int json = 0, quiet = 0, shard_i = 0, shard_n = 1;
    te_tune_options o = te_tune_options_default();
    o.max_trials = -1;
    char cmdline[4096];
    size_t cl = (size_t)snprintf(cmdline, sizeof cmdline, "tessera tune");
    for (int a = 1; a < argc; a++) {
        const char *x = argv[a];
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        int takes = 0;
        int64_t iv;
        double dv;
        if (!strcmp(x, "--help") || !strcmp(x, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(x, "--json")) {
            json = 1;
        } else if (!strcmp(x, "--quiet") || !strcmp(x, "-q")) {
            quiet = 1;
        } else if (!strcmp(x, "--flush-cache")) {
            o.measure.flush_cache = 1;
        } else if (!strcmp(x, "--no-warm-start")) {
            o.warm_start = 0;
        } else if (!strcmp(x, "--new-job")) {
            o.new_job = 1;
        } else if (x[0] != '-') {
            if (op)
                return bad("unexpected argument '%s' (one operator per command; use --tasks "
                           "for several)",
                           x);
            op = x;
        } else if (!v) {
            return bad("option '%s' needs a value or is unknown", x);
        } else {
            takes = 1;
            if (!strcmp(x, "--shape") || !strcmp(x, "--params")) {
                shape = v;
            } else if (!strcmp(x, "--tasks")) {
                tasks = v;
            } else if (!strcmp(x, "--db")) {
                db_path = v;
            } else if (!strcmp(x, "--curve")) {
                curve = v;
            } else if (!strcmp(x, "--target")) {
                if (!strcmp(v, "cuda") || !strcmp(v, "gpu")) {
                    fprintf(stderr, "tessera tune: the CUDA tuner is not available in this build "
                                    "(only --target cpu measures)\n");
                    return 1;
                }
                if (strcmp(v, "cpu") && strcmp(v, "c"))
                    return bad("--target must be cpu or cuda, not '%s'", v);
            } else if (!strcmp(x, "--trials")) {
                if (!parse_i64(v, 1, INT64_MAX / 2, &iv))
                    return bad("--trials takes a positive integer, not '%s'", v);
                o.max_trials = iv;
            } else if (!strcmp(x, "--time")) {
                dv = te_tune_parse_duration(v);
                if (!(dv > 0))
                    return bad("--time takes a duration like 90s, 15m or 8h, not '%s'", v);
                o.max_seconds = dv;
            } else if (!strcmp(x, "--early-stop")) {
                if (!parse_i64(v, 1, INT64_MAX / 2, &iv))
                    return bad("--early-stop takes a positive integer, not '%s'", v);
                o.early_stop = iv;
            } else if (!strcmp(x, "--seed")) {
                if (!parse_i64(v, 0, INT64_MAX, &iv))
                    return bad("--seed takes a non-negative integer, not '%s'", v);
                o.seed = (uint64_t)iv;
            } else if (!strcmp(x, "--batch")) {
                if (!parse_i64(v, 1, 256, &iv))
                    return bad("--batch takes an integer in [1, 256], not '%s'", v);
                o.batch_size = (int)iv;
            } else if (!strcmp(x, "--timeout")) {
                if (!parse_pos_double(v, &dv))
                    return bad("--timeout takes a positive number of seconds, not '%s'", v);
                o.measure.timeout_s = dv;
            } else if (!strcmp(x, "--compile-timeout")) {
                if (!parse_pos_double(v, &dv))
                    return bad("--compile-timeout takes a positive number of seconds, not '%s'", v);
                o.measure.compile_timeout_s = dv;
            } else if (!strcmp(x, "--min-time")) {
                if (!parse_pos_double(v, &dv))
                    return bad("--min-time takes a positive number of seconds, not '%s'", v);
                o.measure.min_time_s = dv;
            } else if (!strcmp(x, "--strategy")) {
                if (te_tune_strategy_parse(v, &o.strategy) != TE_OK)
                    return bad("--strategy must be random, grid or evolutionary, not '%s'", v);
            } else if (!strcmp(x, "--space")) {
                if (!strcmp(v, "auto"))
                    o.space = TE_SPACE_AUTO;
                else if (!strcmp(v, "template"))
                    o.space = TE_SPACE_TEMPLATE;
                else if (!strcmp(v, "sketch"))
                    o.space = TE_SPACE_SKETCH;
                else
                    return bad("--space must be auto, template or sketch, not '%s'", v);
            } else if (!strcmp(x, "--shard")) {
                int64_t si, sn;
                char buf[64];
                snprintf(buf, sizeof buf, "%s", v);
                char *slash = strchr(buf, '/');
                if (slash)
                    *slash = 0;
                if (!slash || !parse_i64(buf, 0, 1 << 20, &si) ||
                    !parse_i64(slash + 1, 1, 1 << 20, &sn) || si >= sn)
                    return bad("--shard takes I/N with 0 <= I < N, not '%s'", v);
                shard_i = (int)si;
                shard_n = (int)sn;
            } else {
                return bad("unknown option '%s'", x);
            }
        }
        /* The job's identity: the command without display-only options. */
        if (strcmp(x, "--json") && strcmp(x, "--quiet") && strcmp(x, "-q") &&
            strcmp(x, "--curve") && cl < sizeof cmdline) {
            cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", x);
            if (takes && cl < sizeof cmdline)
                cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", v);
        }
        a += takes;
    }
    if (!op && !tasks)
        return bad("%s", "name an operator (tessera tune matmul --shape m=..,n=..,k=..) or give "
                         "--tasks FILE");
    if (op && tasks)
        return bad("%s", "give either an operator or --tasks, not both");
    if (op && !shape)
        return bad("operator '%s' needs --shape KEY=VAL,... (see tessera ops)", op);
    if (shard_n > 1 && !tasks)
        return bad("%s", "--shard splits a task list; it needs --tasks");
    if (o.max_trials < 0)
        o.max_trials = o.max_seconds > 0 ? 0 : 200;
    if (!db_path) {
        const char *env = getenv("TESSERA_DB");
        db_path = env && *env ? env : "tessera.db";
    }
    /* Tasks first: bad operators and shapes are usage errors, before any file is touched. */
    te_target tgt = te_target_host();
    o.target = &tgt;
    o.stop = &g_stop;
    o.command = cmdline;
    o.quiet = quiet;
    te_tuner *t = te_tuner_create(NULL, &o);
    if (!t) {
        fprintf(stderr, "tessera tune: out of memory\n");
        return 1;
    }
    int rc;
    if (op) {
        rc = te_tuner_add_op(t, op, shape, 1);
        if (rc != TE_OK) {
            fprintf(stderr, "tessera tune: %s\n", te_tuner_errmsg(t));
            te_tuner_free(t);
            return 2;
        }
    } else {
        int added = 0;
        rc = te_tuner_add_tasks_file(t, tasks, shard_i, shard_n, &added);
        if (rc != TE_OK) {
            fprintf(stderr, "tessera tune: %s\n", te_tuner_errmsg(t));
            te_tuner_free(t);
            return rc == TE_ERR_IO || rc == TE_ERR_NOMEM ? 1 : 2;
        }
        if (added == 0) {
            fprintf(stderr, "tessera tune: no task in '%s'%s\n", tasks,
                    shard_n > 1 ? " for this shard" : "");
            te_tuner_free(t);
            return shard_n > 1 ? 0 : 2;
        }
    }
    /* A task with a baseline: OpenBLAS must run the kernels that fit this CPU, chosen before
     * it loads (this may re-execute the command with OPENBLAS_CORETYPE set, see baselines.c). */
    int any_baseline = 0;
    for (int i = 0; i < te_tuner_ntasks(t); i++) {
        te_tune_task_info ti;
        te_tuner_task_info(t, i, &ti);
        any_baseline |= !strcmp(ti.op, "matmul") || !strcmp(ti.op, "mlp_gate");
    }
    te_tuner_free(t);
    if (any_baseline) {
        te_bl_openblas_select(te_cli_argv);
        if (!quiet)
            fprintf(stderr, "tune: %s\n", te_bl_openblas_note());
        if (!quiet && *te_bl_load_note())
            fprintf(stderr, "tune: %s\n", te_bl_load_note());
    }
    te_db *db = NULL;
    rc = te_db_open(db_path, NULL, &db);
    if (rc != TE_OK) {
        fprintf(stderr, "tessera tune: %s: %s\n", db_path, te_db_errmsg(db));
        te_db_close(db);
        return 1;
    }
    int ntasks = 0;
    prog_state ps = {isatty(2) && !quiet, quiet, NULL, 0, o.max_trials, o.max_seconds, 0};
    o.on_progress = on_progress;
    o.on_warning = on_warning;
    o.user = &ps;
    t = te_tuner_create(db, &o);
    if (op)
        te_tuner_add_op(t, op, shape, 1);
    else
        te_tuner_add_tasks_file(t, tasks, shard_i, shard_n, NULL);
    ntasks = te_tuner_ntasks(t);
    ps.baseline = calloc((size_t)ntasks + 1, sizeof *ps.baseline);
    if (!ps.baseline) {
        fprintf(stderr, "tessera tune: out of memory\n");
        te_tuner_free(t);
        te_db_close(db);
        return 1;
    }
    for (int i = 0; i < ntasks; i++) {
        te_tune_task_info ti;
        te_tuner_task_info(t, i, &ti);
        te_bl_result *br = &ps.baseline[i];
        char params[512];
        task_params(ti.workload_key, params, sizeof params);
        int has = 0;
        if (!o.measure.flush_cache) {
            has = measure_baseline(ti.op, params, tgt.num_cores, br);
        } else {
            /* The baselines are timed with warm caches, as `tessera bench` times them: beside
             * candidates timed from cold caches the ratio would mean nothing. */
            memset(br, 0, sizeof *br);
            br->best = br->openblas = br->onednn = NAN;
            br->best_lib = -1;
            if (baseline_shape(ti.op, params, &(te_bl_shape){0}))
                snprintf(br->notes, sizeof br->notes,
                         "no baseline ratio with --flush-cache (baselines are timed with warm "
                         "caches, as tessera bench does)");
        }
        if (quiet)
            continue;
        fprintf(stderr, "tune: %s on %d core(s)", ti.workload_key, tgt.num_cores);
        if (has) {
            fprintf(stderr, ", baseline %s %.1f GFLOP/s (%smedians of %d alternating runs",
                    br->impl[br->best_lib], br->best,
                    !strcmp(ti.op, "mlp_gate") ? "2 products + silu pass, " : "", BASELINE_REPS);
            if (br->best_lib != TE_BL_OPENBLAS && isfinite(br->openblas))
                fprintf(stderr, "; %s %.1f", br->impl[TE_BL_OPENBLAS], br->openblas);
            else if (br->best_lib == TE_BL_OPENBLAS && isfinite(br->onednn))
                fprintf(stderr, "; %s %.1f", br->impl[br->onednn_lib], br->onednn);
            fputc(')', stderr);
        }
        fputc('\n', stderr);
        for (const char *q = br->notes; *q;) {
            const char *e = strchr(q, '\n');
            int len = e ? (int)(e - q) : (int)strlen(q);
            fprintf(stderr, "tune: %.*s\n", len, q);
            q += len + (e ? 1 : 0);
        }
    }
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    rc = te_tuner_run(t);
    sigaction(SIGINT, &old, NULL);
    if (ps.line_open)
        fputc('\n', stderr);
    int resumed = 0;
    int64_t job = te_tuner_job_id(t, &resumed);
    int status = 0;
    if (rc != TE_OK) {
        fprintf(stderr, "tessera tune: %s\n", te_tuner_errmsg(t));
        status = 1;
    }
    te_db_target dbt;
    char storage[1024], tkey[512];
    te_tuner_db_target(&tgt, &dbt, storage, sizeof storage);
    te_db_target_key(&dbt, tkey, sizeof tkey);
    dbt.key = tkey;
    if (json) {
        printf("{\"db\": ");
        jstr(stdout, db_path);
        printf(
            ", \"job\": %lld, \"resumed\": %s, \"interrupted\": %s, \"target\": ", (long long)job,
            resumed ? "true" : "false", te_tuner_interrupted(t) ? "true" : "false");
    }
    if (json) {
        jstr(stdout, tkey);
        printf(", \"tasks\": [");
    }
    for (int i = 0; i < ntasks; i++) {
        te_tune_task_info ti;
        te_tuner_task_info(t, i, &ti);
        int64_t errors = 0;
        for (int s = 1; s < TE_TRIAL_STATUS_COUNT; s++)
            errors += ti.n_by_status[s];
        const te_bl_result *br = &ps.baseline[i];
        double base = br->best;
        if (ti.stop_reason && !strcmp(ti.stop_reason, "failed"))
            status = 1; /* the task could not be tuned (its message went to stderr) */
        /* The job's best beside the baselines, alternating in one process as `tessera bench`
         * does: the best of many noisy candidates against one baseline figure from the job's
         * start would flatter the best. */
        final_result fr;
        int has_final = 0;
        if (isfinite(base) && ti.best_trace && !te_tuner_interrupted(t)) {
            char params[512];
            task_params(ti.workload_key, params, sizeof params);
            has_final = measure_final(ti.op, params, ti.best_trace, tgt.num_cores, &fr);
        }
        if (json) {
            printf("%s\n  {\"workload\": ", i ? "," : "");
            jstr(stdout, ti.workload_key);
            printf(", \"space\": ");
            jstr(stdout, ti.space_kind);
            printf(", \"trials\": %lld, \"errors\": %lld, \"skipped\": %lld, \"status\": {",
                   (long long)ti.trials, (long long)errors, (long long)ti.skipped);
            for (int s = 0, first = 1; s < TE_TRIAL_STATUS_COUNT; s++)
                if (ti.n_by_status[s]) {
                    printf("%s\"%s\": %lld", first ? "" : ", ",
                           te_trial_status_str((te_trial_status)s), (long long)ti.n_by_status[s]);
                    first = 0;
                }
            printf("}, \"stop\": ");
            jstr(stdout, ti.stop_reason);
            printf(", \"best_gflops\": ");
            jnum(stdout, ti.best_gflops);
            printf(", \"best_ms\": ");
            jnum(stdout, ti.best_median_s * 1e3);
            printf(", \"openblas_gflops\": ");
            jnum(stdout, br->openblas);
            printf(", \"onednn_gflops\": ");
            jnum(stdout, br->onednn);
            printf(", \"baseline\": ");
            jstr(stdout, br->best_lib < 0 ? NULL : te_bl_lib_name((te_bl_lib)br->best_lib));
            printf(", \"baseline_impl\": ");
            jstr(stdout, br->best_lib < 0 ? NULL : br->impl[br->best_lib]);
            printf(", \"baseline_gflops\": ");
            jnum(stdout, base);
            printf(", \"side_by_side\": ");
            if (has_final) {
                printf("{\"gflops\": ");
                jnum(stdout, fr.ours);
                printf(", \"baseline\": ");
                jstr(stdout, te_bl_lib_name((te_bl_lib)fr.r.best_lib));
                printf(", \"baseline_impl\": ");
                jstr(stdout, fr.r.impl[fr.r.best_lib]);
                printf(", \"baseline_gflops\": ");
                jnum(stdout, fr.r.best);
                printf(", \"ratio\": ");
                jnum(stdout, fr.ours / fr.r.best);
                printf(", \"openblas_gflops\": ");
                jnum(stdout, fr.r.openblas);
                printf(", \"onednn_gflops\": ");
                jnum(stdout, fr.r.onednn);
                printf("}");
            } else {
                printf("null");
            }
            printf(", \"best_trace\": ");
            jstr(stdout, ti.best_trace);
            printf("}");
        } else {
            printf("\n%s: %lld trials this job (%lld failed", ti.workload_key, (long long)ti.trials,
                   (long long)errors);
            for (int s = 1; s < TE_TRIAL_STATUS_COUNT; s++)
                if (ti.n_by_status[s])
                    printf(", %lld %s", (long long)ti.n_by_status[s],
                           te_trial_status_str((te_trial_status)s));
            printf("), %s space, stopped: %s\n", ti.space_kind ? ti.space_kind : "?",
                   ti.stop_reason ? ti.stop_reason : "?");
            if (!ti.best_trace) {
                printf("no valid schedule recorded yet\n");
                continue;
            }
            printf("best: %.4f ms", ti.best_median_s * 1e3);
            if (isfinite(ti.best_gflops))
                printf(", %.1f GFLOP/s", ti.best_gflops);
            if (isfinite(base) && isfinite(ti.best_gflops)) {
                printf(" (%.2fx %s at %.1f GFLOP/s", ti.best_gflops / base, br->impl[br->best_lib],
                       base);
                if (br->best_lib != TE_BL_OPENBLAS && isfinite(br->openblas))
                    printf("; %.2fx %s", ti.best_gflops / br->openblas, br->impl[TE_BL_OPENBLAS]);
                else if (br->best_lib == TE_BL_OPENBLAS && isfinite(br->onednn))
                    printf("; %.2fx %s", ti.best_gflops / br->onednn, br->impl[br->onednn_lib]);
                printf(")");
            }
            if (has_final) {
                printf("\nbeside the baselines at the end (medians of %d alternating runs): %.1f "
                       "GFLOP/s, %.2fx %s at %.1f",
                       BASELINE_REPS, fr.ours, fr.ours / fr.r.best, fr.r.impl[fr.r.best_lib],
                       fr.r.best);
                if (fr.r.best_lib != TE_BL_OPENBLAS && isfinite(fr.r.openblas))
                    printf("; %.2fx %s", fr.ours / fr.r.openblas, fr.r.impl[TE_BL_OPENBLAS]);
                else if (fr.r.best_lib == TE_BL_OPENBLAS && isfinite(fr.r.onednn))
                    printf("; %.2fx %s", fr.ours / fr.r.onednn, fr.r.impl[fr.r.onednn_lib]);
            }
            printf("\ntrace:\n");
            for (const char *p = ti.best_trace; *p;) {
                const char *e = strchr(p, '\n');
                int len = e ? (int)(e - p) : (int)strlen(p);
                printf("    %.*s\n", len, p);
                p += len + (e ? 1 : 0);
            }
            char *code = te_trace_to_c(ti.best_trace, "s");
            if (code) {
                printf("as C (te_schedule *s = te_schedule_create(...)):\n%s", code);
                if (code[0] && code[strlen(code) - 1] != '\n')
                    putchar('\n');
                free(code);
            }
        }
        if (curve && i == 0) {
            if (write_curve(curve, db, &ti, &dbt, job, base,
                            br->best_lib < 0 ? "" : br->impl[br->best_lib]) != 0)
                fprintf(stderr, "tessera tune: could not write the curve to '%s'\n", curve);
            else if (!json)
                printf("tuning curve: %s\n", curve);
        }
    }
    if (json) {
        printf("\n]}\n");
    } else {
        te_tune_task_info ti0;
        te_tuner_task_info(t, 0, &ti0);
        printf("\nstored in %s (job %lld%s); see: tessera db best --workload '%s' --db %s\n",
               db_path, (long long)job, resumed ? ", resumed" : "",
               ntasks == 1 ? ti0.workload_key : "KEY", db_path);
    }
    if (te_tuner_interrupted(t)) {
        fprintf(stderr, "tessera tune: interrupted; rerun the same command to resume job %lld\n",
                (long long)job);
        status = 1;
    }
    free(ps.baseline);
    te_tuner_free(t);
    if (te_db_close(db) != TE_OK && status == 0)
        status = 1;
    return status;
}
