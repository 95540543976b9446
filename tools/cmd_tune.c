/*
 * `tessera tune`: tune one operator (or a task list) into the tuning database.
 *
 *   tessera tune matmul --shape m=1024,n=1024,k=1024 --trials 400 --db tune.db
 *   tessera tune --tasks transformer.json --time 8h --shard 0/4 --db shard0.db
 *   tessera tune model.onnx --shape batch=1 --trials 200 --db tune.db   (its fused groups)
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
#include "tessera/tuning_db.h"
#include "tools/baselines.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"
#include "tools/tune_cuda.h"
#include "tools/tune_extras.h"

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
            "       tessera tune --tasks FILE [options]\n"
            "       tessera tune --graph GRAPH [options]\n"
            "       tessera tune MODEL.onnx [--shape NAME=N,...] [options]\n\n"
            "Searches schedules for an operator of the library (`tessera ops` lists them) and\n"
            "records every measured candidate in the tuning database as it goes. Rerunning the\n"
            "command of an interrupted job continues that job and never measures a\n"
            "configuration already recorded for the workload on this target.\n\n"
            "options:\n"
            "  --shape KEY=VAL,...   the operator's parameters (also --params); for a model,\n"
            "                        its symbolic dimensions or input shapes (batch=1,seq=128)\n"
            "  --tasks FILE          a JSON list of workloads tuned in one job:\n"
            "                        [{\"op\": \"matmul\", \"shape\": \"m=64,n=64,k=64\"}, ...]\n"
            "  --graph GRAPH         the fused groups of a graph (tessera fuse), one task per\n"
            "                        distinct workload, weighted by how often it occurs\n"
            "  --optimize            with --graph: run the graph passes first (as tessera run\n"
            "                        --optimize, so its groups are the ones run looks up)\n"
            "  --precision P         with --graph or a model: f32 (default) or bf16, its f32\n"
            "                        matmuls with constant weights on the CPU's bf16 dot\n"
            "                        products (as tessera run --precision bf16; an error without\n"
            "                        AVX-512 BF16 or AMX-BF16)\n"
            "  MODEL.onnx            the fused groups of an ONNX model (imported and optimized\n"
            "                        as tessera run MODEL.onnx does), as for --graph\n"
            "  --shard I/N           tune only shard I of N (0 <= I < N): the tasks whose\n"
            "                        workload key hashes to I (FNV-1a 64 modulo N)\n"
            "  --target cpu|cuda     where to measure (default cpu); cuda: one operator on\n"
            "                        GPU 0 (its GPU template's knobs or the GPU sketch rules;\n"
            "                        CUDA initialised only in forked children, each candidate\n"
            "                        checked against the reference, then timed with events;\n"
            "                        no device: exits 1 with the reason, see --dry-run)\n"
            "  --dry-run             with --target cuda: compile up to --trials distinct\n"
            "                        candidates with NVRTC (no GPU needed) and print ptxas's\n"
            "                        registers, spills and shared memory per SM and what the\n"
            "                        resource check prunes; nothing measured or recorded\n"
            "  --sm LIST             with --target cuda: SM versions to compile for (80,90)\n"
            "  --trials N            trial budget of the job (default 200 when no --time)\n"
            "  --time T              time budget of this run: 90, 90s, 15m, 8h\n"
            "  --early-stop N        stop a task after N trials without a 1%% improvement\n"
            "  --strategy S          random, grid or evolutionary (default)\n"
            "  --space K             auto (default), template or sketch\n"
            "  --seed S              seed of the proposals (default 1)\n"
            "  --batch N             candidates built and run together (default 16)\n"
            "  --timeout S           run-time limit of one candidate in seconds (default 10)\n"
            "  --compile-timeout S   a compiler run longer than S seconds is a compile error "
            "(20,\n"
            "                        times the load per core when above 1)\n"
            "  --max-stmts N         candidates whose lowered program has more than N\n"
            "                        statements are not compiled (a compile_error; default\n"
            "                        3000, 0 = no limit): such code takes 20 s and more\n"
            "  --min-time S          timed runs of a candidate add up to at least S (0.01)\n"
            "  --flush-cache         overwrite the caches before every timed run\n"
            "  --no-warm-start       do not seed the search from the database's records\n"
            "  --no-select           with --graph or a model: skip the in-model selection\n"
            "                        (after tuning, the whole run once per candidate: the\n"
            "                        defaults and each group's 1st-3rd best record; each\n"
            "                        kernel's time inside the runs is recorded under its\n"
            "                        in-model key, which tessera run --db then prefers)\n"
            "  --new-job             never resume; start a new job\n"
            "  --resume              continue this command's job whatever its state: one that\n"
            "                        reads running (killed on another machine) or finished\n"
            "                        (then nothing is measured); for a scheduler's retries\n"
            "                        (docs/CLUSTER.md); never give it while the command runs\n"
            "                        on another machine\n"
            "  --retry-failed        measure every failed configuration again (by default\n"
            "                        only timeouts and out-of-memory failures, once)\n"
            "  --plugin LIB.so       load the operators of a plugin (repeatable; also the\n"
            "                        colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
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
        snprintf(ratio, sizeof ratio, ", %.2fx %s", p->task_best_gflops / br->best,
                 te__tune_best_short(br));
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

/* ---- JSON helpers ---------------------------------------------------------------------------- */

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
    const char *graph = NULL;
    te_cli_graph_tasks *gtasks = NULL; /* owns the groups' expressions while tuners use them */
    int optimize = 0;                  /* --optimize: the graph passes first (--graph) */
    int no_select = 0;                 /* --no-select: no in-model selection after a graph */
    te_cli_precision prec = TE_CLI_PRECISION_F32; /* --precision (--graph) */
    int prec_given = 0;
    int json = 0, quiet = 0, shard_i = 0, shard_n = 1;
    int cuda = 0, dry_run = 0; /* --target cuda, --dry-run */
    const char *sms = NULL;    /* --sm 80,90 */
    te_tune_options o = te_tune_options_default();
    o.max_trials = -1;
    char cmdline[4096];
    size_t cl = (size_t)snprintf(cmdline, sizeof cmdline, "tessera tune");
    enum {
        O_HELP,
        O_JSON,
        O_QUIET,
        O_FLUSH,
        O_NO_WARM,
        O_NEW_JOB,
        O_RESUME,
        O_OPTIMIZE,
        O_RETRY,
        O_SHAPE,
        O_TASKS,
        O_GRAPH,
        O_DB,
        O_CURVE,
        O_TARGET,
        O_TRIALS,
        O_TIME,
        O_EARLY_STOP,
        O_SEED,
        O_BATCH,
        O_TIMEOUT,
        O_COMPILE_TIMEOUT,
        O_MAX_STMTS,
        O_MIN_TIME,
        O_STRATEGY,
        O_SPACE,
        O_SHARD,
        O_PRECISION,
        O_NO_SELECT,
        O_DRY_RUN,
        O_SM
    };
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"help", 'h', TE_CLI_FLAG, O_HELP},
                                      {"json", 0, TE_CLI_FLAG, O_JSON},
                                      {"quiet", 'q', TE_CLI_FLAG, O_QUIET},
                                      {"flush-cache", 0, TE_CLI_FLAG, O_FLUSH},
                                      {"no-warm-start", 0, TE_CLI_FLAG, O_NO_WARM},
                                      {"new-job", 0, TE_CLI_FLAG, O_NEW_JOB},
                                      {"resume", 0, TE_CLI_FLAG, O_RESUME},
                                      {"optimize", 0, TE_CLI_FLAG, O_OPTIMIZE},
                                      {"retry-failed", 0, TE_CLI_FLAG, O_RETRY},
                                      {"shape", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"params", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"tasks", 0, TE_CLI_VALUE, O_TASKS},
                                      {"graph", 0, TE_CLI_VALUE, O_GRAPH},
                                      {"db", 0, TE_CLI_VALUE, O_DB},
                                      {"curve", 0, TE_CLI_VALUE, O_CURVE},
                                      {"target", 0, TE_CLI_VALUE, O_TARGET},
                                      {"trials", 0, TE_CLI_VALUE, O_TRIALS},
                                      {"time", 0, TE_CLI_VALUE, O_TIME},
                                      {"early-stop", 0, TE_CLI_VALUE, O_EARLY_STOP},
                                      {"seed", 0, TE_CLI_VALUE, O_SEED},
                                      {"dry-run", 0, TE_CLI_FLAG, O_DRY_RUN},
                                      {"sm", 0, TE_CLI_VALUE, O_SM},
                                      {"batch", 0, TE_CLI_VALUE, O_BATCH},
                                      {"timeout", 0, TE_CLI_VALUE, O_TIMEOUT},
                                      {"compile-timeout", 0, TE_CLI_VALUE, O_COMPILE_TIMEOUT},
                                      {"max-stmts", 0, TE_CLI_VALUE, O_MAX_STMTS},
                                      {"min-time", 0, TE_CLI_VALUE, O_MIN_TIME},
                                      {"strategy", 0, TE_CLI_VALUE, O_STRATEGY},
                                      {"space", 0, TE_CLI_VALUE, O_SPACE},
                                      {"shard", 0, TE_CLI_VALUE, O_SHARD},
                                      {"precision", 0, TE_CLI_VALUE, O_PRECISION},
                                      {"no-select", 0, TE_CLI_FLAG, O_NO_SELECT},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    te_cli_parser cp;
    te_cli_parser_init(&cp, "tune", argc, argv, opts);
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        const char *v = cp.value;
        int64_t iv;
        double dv;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (op)
                return bad("unexpected argument '%s' (one operator per command; use --tasks "
                           "for several)",
                           v);
            op = v;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_JSON:
            json = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_FLUSH:
            o.measure.flush_cache = 1;
            break;
        case O_NO_WARM:
            o.warm_start = 0;
            break;
        case O_NO_SELECT:
            no_select = 1;
            break;
        case O_NEW_JOB:
            o.new_job = 1;
            break;
        case O_RESUME:
            o.resume_always = 1;
            break;
        case O_OPTIMIZE:
            optimize = 1;
            break;
        case O_PRECISION:
            if (te_cli_precision_parse("tune", v, &prec))
                return 2;
            prec_given = 1;
            break;
        case O_RETRY:
            o.retry_failed = 1;
            break;
        case O_SHAPE:
            shape = v;
            break;
        case O_TASKS:
            tasks = v;
            break;
        case O_GRAPH:
            graph = v;
            break;
        case O_DB:
            db_path = v;
            break;
        case O_CURVE:
            curve = v;
            break;
        case O_TARGET:
            cuda = !strcmp(v, "cuda") || !strcmp(v, "gpu");
            if (!cuda && strcmp(v, "cpu") && strcmp(v, "c"))
                return bad("--target must be cpu or cuda, not '%s'", v);
            break;
        case O_DRY_RUN:
            dry_run = 1;
            break;
        case O_SM:
            sms = v;
            break;
        case O_TRIALS:
            if (!parse_i64(v, 1, INT64_MAX / 2, &iv))
                return bad("--trials takes a positive integer, not '%s'", v);
            o.max_trials = iv;
            break;
        case O_TIME:
            dv = te_tune_parse_duration(v);
            if (!(dv > 0))
                return bad("--time takes a duration like 90s, 15m or 8h, not '%s'", v);
            o.max_seconds = dv;
            break;
        case O_EARLY_STOP:
            if (!parse_i64(v, 1, INT64_MAX / 2, &iv))
                return bad("--early-stop takes a positive integer, not '%s'", v);
            o.early_stop = iv;
            break;
        case O_SEED:
            if (!parse_i64(v, 0, INT64_MAX, &iv))
                return bad("--seed takes a non-negative integer, not '%s'", v);
            o.seed = (uint64_t)iv;
            break;
        case O_BATCH:
            if (!parse_i64(v, 1, 256, &iv))
                return bad("--batch takes an integer in [1, 256], not '%s'", v);
            o.batch_size = (int)iv;
            break;
        case O_TIMEOUT:
            if (!parse_pos_double(v, &dv))
                return bad("--timeout takes a positive number of seconds, not '%s'", v);
            o.measure.timeout_s = dv;
            break;
        case O_COMPILE_TIMEOUT:
            if (!parse_pos_double(v, &dv))
                return bad("--compile-timeout takes a positive number of seconds, not '%s'", v);
            o.measure.compile_timeout_s = dv;
            break;
        case O_MAX_STMTS:
            if (!parse_i64(v, 0, 10000000, &iv))
                return bad("--max-stmts takes an integer in [0, 10000000] (0: no limit), not '%s'",
                           v);
            o.measure.max_stmts = iv ? (int)iv : -1;
            break;
        case O_MIN_TIME:
            if (!parse_pos_double(v, &dv))
                return bad("--min-time takes a positive number of seconds, not '%s'", v);
            o.measure.min_time_s = dv;
            break;
        case O_STRATEGY:
            if (te_tune_strategy_parse(v, &o.strategy) != TE_OK)
                return bad("--strategy must be random, grid or evolutionary, not '%s'", v);
            break;
        case O_SPACE:
            if (!strcmp(v, "auto"))
                o.space = TE_SPACE_AUTO;
            else if (!strcmp(v, "template"))
                o.space = TE_SPACE_TEMPLATE;
            else if (!strcmp(v, "sketch"))
                o.space = TE_SPACE_SKETCH;
            else
                return bad("--space must be auto, template or sketch, not '%s'", v);
            break;
        case O_SHARD: {
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
            break;
        }
        }
        /* The job's identity: the command without display-only options. */
        if (c != O_JSON && c != O_QUIET && c != O_CURVE && c != O_RESUME && cl < sizeof cmdline) {
            if (cp.opt)
                cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", cp.word);
            if (v && cl < sizeof cmdline)
                cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", v);
        }
    }
    if (te_cli_plugins_load("tune", &plugins))
        return 1;
    const char *model_shapes = NULL; /* ONNX import options of a model */
    if (op && te_cli_is_model(op)) {
        if (graph || tasks)
            return bad("%s", "give one of a model, an operator, --tasks and --graph");
        graph = op, op = NULL;
    }
    if (graph && te_cli_is_model(graph))
        model_shapes = shape, shape = NULL;
    if (graph && shape)
        return bad("%s", "--shape applies to operators and ONNX models, not to a graph file");
    if (!op && !tasks && !graph)
        return bad("%s", "name an operator (tessera tune matmul --shape m=..,n=..,k=..) or a "
                         "MODEL.onnx, or give --tasks FILE or --graph GRAPH");
    if (!!op + !!tasks + !!graph > 1)
        return bad("%s", "give one of an operator, --tasks and --graph");
    if (op && !shape)
        return bad("operator '%s' needs --shape KEY=VAL,... (see tessera ops)", op);
    if (shard_n > 1 && !tasks)
        return bad("%s", "--shard splits a task list; it needs --tasks");
    if (prec_given && !graph)
        return bad("%s", "--precision applies to --graph GRAPH and MODEL.onnx");
    if ((dry_run || sms) && !cuda)
        return bad("%s", "--dry-run and --sm apply to --target cuda");
    if (cuda) {
        if (!op || te_cli_is_model(op))
            return bad("%s", "--target cuda tunes one operator (tessera tune matmul --shape ... "
                             "--target cuda --dry-run)");
        if (!dry_run && !db_path) {
            const char *env = getenv("TESSERA_DB");
            db_path = env && *env ? env : "tessera.db";
        }
        return te__tune_cuda(op, shape, o.max_trials > 0 ? o.max_trials : 200, sms, o.seed, dry_run,
                             json, dry_run ? NULL : db_path, o.measure.timeout_s, o.space);
    }
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
    if (graph) {
        gtasks = te_cli_graph_tasks_load_model("tune", graph, model_shapes, NULL, optimize, prec);
        rc = gtasks ? te_cli_graph_tasks_add(gtasks, t) : TE_ERR_ARG;
        if (rc != TE_OK) {
            int loaded = gtasks != NULL; /* else: the graph could not be read (message out) */
            if (loaded)
                fprintf(stderr, "tessera tune: %s\n", te_tuner_errmsg(t));
            te_cli_graph_tasks_free(gtasks);
            te_tuner_free(t);
            return loaded ? 2 : 1;
        }
        /* Views (reshapes sharing their input's storage) run no kernel: they are no task. */
        int nviews = te_cli_graph_tasks_views(gtasks);
        if (!quiet && nviews)
            fprintf(stderr,
                    "tune: %s: %d fused groups, %d distinct workloads (%d reshape view%s: no "
                    "kernel, not tuned)\n",
                    graph, te_cli_graph_tasks_groups(gtasks) - nviews,
                    te_cli_graph_tasks_distinct(gtasks), nviews, nviews == 1 ? "" : "s");
        else if (!quiet)
            fprintf(stderr, "tune: %s: %d fused groups, %d distinct workloads\n", graph,
                    te_cli_graph_tasks_groups(gtasks), te_cli_graph_tasks_distinct(gtasks));
    } else if (op) {
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
        te_cli_graph_tasks_free(gtasks);
        return 1;
    }
    int ntasks = 0;
    prog_state ps = {isatty(2) && !quiet, quiet, NULL, 0, o.max_trials, o.max_seconds, 0};
    o.on_progress = on_progress;
    o.on_warning = on_warning;
    o.user = &ps;
    t = te_tuner_create(db, &o);
    if (graph)
        te_cli_graph_tasks_add(gtasks, t);
    else if (op)
        te_tuner_add_op(t, op, shape, 1);
    else
        te_tuner_add_tasks_file(t, tasks, shard_i, shard_n, NULL);
    ntasks = te_tuner_ntasks(t);
    ps.baseline = calloc((size_t)ntasks + 1, sizeof *ps.baseline);
    if (!ps.baseline) {
        fprintf(stderr, "tessera tune: out of memory\n");
        te_tuner_free(t);
        te_db_close(db);
        te_cli_graph_tasks_free(gtasks);
        return 1;
    }
    for (int i = 0; i < ntasks; i++) {
        te_tune_task_info ti;
        te_tuner_task_info(t, i, &ti);
        te_bl_result *br = &ps.baseline[i];
        char params[512];
        te__tune_task_params(ti.workload_key, params, sizeof params);
        int has = 0;
        if (!o.measure.flush_cache) {
            has = te__tune_measure_baseline(ti.op, params, tgt.num_cores, br);
        } else {
            /* The baselines are timed with warm caches, as `tessera bench` times them: beside
             * candidates timed from cold caches the ratio would mean nothing. */
            memset(br, 0, sizeof *br);
            br->best = br->openblas = br->onednn = NAN;
            br->best_lib = -1;
            if (te__tune_baseline_shape(ti.op, params, &(te_bl_shape){0}))
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
                    !strcmp(ti.op, "mlp_gate") ? "2 products + silu pass, " : "",
                    TE_TUNE_BASELINE_REPS);
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
        te_db_json_write_str(stdout, db_path);
        printf(
            ", \"job\": %lld, \"resumed\": %s, \"interrupted\": %s, \"target\": ", (long long)job,
            resumed ? "true" : "false", te_tuner_interrupted(t) ? "true" : "false");
    }
    if (json) {
        te_db_json_write_str(stdout, tkey);
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
        te__tune_final fr;
        int has_final = 0;
        if (isfinite(base) && ti.best_trace && !te_tuner_interrupted(t)) {
            char params[512];
            te__tune_task_params(ti.workload_key, params, sizeof params);
            has_final = te__tune_measure_final(ti.op, params, ti.best_trace, tgt.num_cores, &fr);
        }
        if (json) {
            printf("%s\n  {\"workload\": ", i ? "," : "");
            te_db_json_write_str(stdout, ti.workload_key);
            printf(", \"space\": ");
            te_db_json_write_str(stdout, ti.space_kind);
            printf(", \"trials\": %lld, \"errors\": %lld, \"skipped\": %lld, \"status\": {",
                   (long long)ti.trials, (long long)errors, (long long)ti.skipped);
            for (int s = 0, first = 1; s < TE_TRIAL_STATUS_COUNT; s++)
                if (ti.n_by_status[s]) {
                    printf("%s\"%s\": %lld", first ? "" : ", ",
                           te_trial_status_str((te_trial_status)s), (long long)ti.n_by_status[s]);
                    first = 0;
                }
            printf("}, \"stop\": ");
            te_db_json_write_str(stdout, ti.stop_reason);
            printf(", \"best_gflops\": ");
            jnum(stdout, ti.best_gflops);
            printf(", \"best_ms\": ");
            jnum(stdout, ti.best_median_s * 1e3);
            printf(", \"openblas_gflops\": ");
            jnum(stdout, br->openblas);
            printf(", \"onednn_gflops\": ");
            jnum(stdout, br->onednn);
            printf(", \"baseline\": ");
            te_db_json_write_str(stdout,
                                 br->best_lib < 0 ? NULL : te_bl_lib_name((te_bl_lib)br->best_lib));
            printf(", \"baseline_impl\": ");
            te_db_json_write_str(stdout, br->best_lib < 0 ? NULL : br->impl[br->best_lib]);
            printf(", \"baseline_gflops\": ");
            jnum(stdout, base);
            printf(", \"side_by_side\": ");
            if (has_final) {
                printf("{\"gflops\": ");
                jnum(stdout, fr.ours);
                printf(", \"baseline\": ");
                te_db_json_write_str(stdout, te_bl_lib_name((te_bl_lib)fr.r.best_lib));
                printf(", \"baseline_impl\": ");
                te_db_json_write_str(stdout, fr.r.impl[fr.r.best_lib]);
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
            te_db_json_write_str(stdout, ti.best_trace);
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
                       TE_TUNE_BASELINE_REPS, fr.ours, fr.ours / fr.r.best,
                       fr.r.impl[fr.r.best_lib], fr.r.best);
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
            if (te__tune_write_curve(curve, db, &ti, &dbt, job, base,
                                     br->best_lib < 0 ? "" : br->impl[br->best_lib]) != 0)
                fprintf(stderr, "tessera tune: could not write the curve to '%s'\n", curve);
            else if (!json)
                printf("tuning curve: %s\n", curve);
        }
    }
    /* A graph's or a model's groups: the schedules that are fastest inside its run. */
    te_graph_select_result sr = {0};
    int selected = 0;
    if (graph && !no_select && status == 0 && !te_tuner_interrupted(t)) {
        const te_cli_fused *f = te_cli_graph_tasks_fused(gtasks);
        te_graph_select_opts so = {.target = &tgt, .reps = 11, .log = quiet ? NULL : stderr};
        if (!quiet)
            fprintf(stderr,
                    "tune: in-model selection: the whole run once per candidate (the "
                    "defaults, then each group's 1st, 2nd, 3rd best record), %d runs "
                    "each; per workload, ms per kernel inside the runs:\n",
                    so.reps);
        if (te_graph_select_in_context(f->g, f->plan, db, &so, &sr) != TE_OK) {
            fprintf(stderr, "tessera tune: in-model selection: %s\n", te_graph_errmsg(f->g));
            status = 1;
        } else {
            selected = sr.workloads > 0;
        }
    }
    if (json) {
        printf("\n], \"select\": ");
        if (selected) {
            printf("{\"workloads\": %d, \"changed\": %d, \"to_default\": %d, \"recorded\": %d, "
                   "\"ms_default\": ",
                   sr.workloads, sr.changed, sr.to_default, sr.recorded);
            jnum(stdout, sr.ms_default);
            printf(", \"ms_tuned\": ");
            jnum(stdout, sr.ms_tuned);
            printf(", \"ms_selected\": ");
            jnum(stdout, sr.ms_selected);
            printf(", \"whole_pick\": \"%s\"", sr.whole_pick == 0   ? "defaults"
                                               : sr.whole_pick == 1 ? "best_records"
                                                                    : "in_model");
            printf("}");
        } else {
            printf("null");
        }
        printf("}\n");
    } else {
        if (selected)
            printf("\nin-model selection (%d threads): %d workloads with a choice, %d chose "
                   "another schedule than their best record alone (%d the default); whole run "
                   "(median): defaults %.3f ms, best records alone %.3f ms, in-model choices "
                   "%.3f ms (%.2fx the defaults); %d in-model trials recorded; `tessera run` "
                   "compiles the fastest whole run: %s\n",
                   tgt.num_cores, sr.workloads, sr.changed, sr.to_default, sr.ms_default,
                   sr.ms_tuned, sr.ms_selected, sr.ms_default / sr.ms_selected, sr.recorded,
                   te_graph_whole_pick_name(sr.whole_pick));
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
    te_cli_graph_tasks_free(gtasks);
    if (te_db_close(db) != TE_OK && status == 0)
        status = 1;
    return status;
}
