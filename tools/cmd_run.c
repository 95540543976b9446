/*
 * `tessera run`: compiles every fused group of a graph (from the tuning database's best record
 * when --db is given, else the default schedule, with a note per group saying which), runs the
 * graph on random inputs (or raw f32 files), and prints each group's time and the end-to-end
 * latency (medians of --runs runs). --check compares every group output with the float64
 * reference of the unfused graph and exits 1 on a mismatch.
 *
 *   tessera run block.graph --runs 20 --threads 2
 *   tessera tune --graph block.graph --trials 200 --db t.db && tessera run block.graph --db t.db
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/graph.h"
#include "tessera/target.h"
#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera run GRAPH [--db FILE] [--threads N] [--runs N] [--check] [--json]\n"
            "                 [--input NAME=FILE]... [--rules FILE | --no-rules] [--optimize]\n\n"
            "Fuses the graph (as tessera fuse does), compiles every fused group and runs the\n"
            "graph; prints each group's time and the end-to-end latency.\n\n"
            "  --db FILE          schedules from the tuning database's best record of each\n"
            "                     group's workload (tessera tune --graph); default schedule\n"
            "                     for groups without one (a note per group says which)\n"
            "  --threads N        threads of the parallel loops (default: $OMP_NUM_THREADS or\n"
            "                     the online CPUs)\n"
            "  --runs N           timed runs; times are medians (default 10)\n"
            "  --input NAME=FILE  raw little-endian f32 data of graph input NAME (default:\n"
            "                     uniform random in [-1, 1), never 0)\n"
            "  --check            compare every group output with the float64 reference of\n"
            "                     the unfused graph (relative error <= 1e-5); exit 1 if not\n"
            "  --json             the result as JSON\n"
            "  --rules FILE, --no-rules, --optimize   as for tessera fuse\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see tessera run --help)\n");
    return 2;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n ? (n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2])) : 0;
}

typedef struct check_state {
    te_graph *g;
    const te_fuse_plan *p;
    const void *const *in;
    double *worst; /* per group */
    int failed;
} check_state;

/* After group gi ran: its outputs (live in the pool now) against the reference. */
static void check_group(te_graph_exec *e, int gi, void *user)
{
    check_state *cs = user;
    te_fuse_group gr;
    te_fuse_plan_group(cs->p, gi, &gr);
    cs->worst[gi] = 0;
    for (int k = 0; !cs->failed && k < gr.n_outputs; k++) {
        int v = gr.outputs[k];
        int64_t n = te_graph_value_numel(cs->g, v);
        double *want = malloc(sizeof(double) * (size_t)n);
        if (!want || te_graph_eval_reference(cs->g, cs->in, 1, &v, &want)) {
            fprintf(stderr, "tessera run: %s\n", want ? te_graph_errmsg(cs->g) : "out of memory");
            free(want);
            cs->failed = 1;
            return;
        }
        const void *got = te_graph_exec_value(e, v);
        int f32 = te_graph_value_dtype(cs->g, v) == TE_F32;
        for (int64_t j = 0; j < n; j++) {
            double x = f32 ? ((const float *)got)[j] : ((const double *)got)[j];
            double d = fabs(x - want[j]) / fmax(1.0, fabs(want[j]));
            if (!(d <= cs->worst[gi]))
                cs->worst[gi] = d;
        }
        free(want);
    }
}

/* Input i: the file given for it, else random f32/f64 data. NULL after printing why. */
static void *make_input(te_graph *g, int i, int n_files, char **files, uint64_t *s)
{
    int v = te_graph_input_value(g, i);
    const char *name = te_graph_value_name(g, v);
    int64_t n = te_graph_value_numel(g, v);
    te_dtype dt = te_graph_value_dtype(g, v);
    size_t bytes = (size_t)n * te_dtype_size(dt);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        fprintf(stderr, "tessera run: out of memory\n");
        return NULL;
    }
    for (int k = 0; k < n_files; k++) {
        size_t len = strlen(name);
        if (strncmp(files[k], name, len) || files[k][len] != '=')
            continue;
        const char *path = files[k] + len + 1;
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(buf, 1, bytes, f) : 0;
        int extra = f && fgetc(f) != EOF;
        if (f)
            fclose(f);
        if (dt != TE_F32 || !f || got != bytes || extra) {
            fprintf(stderr, "tessera run: --input %s: %s (input '%s' needs %zu bytes of raw f32)\n",
                    files[k],
                    dt != TE_F32 ? "only f32 inputs are read from files"
                    : !f         ? strerror(errno)
                                 : "wrong size",
                    name, bytes);
            free(buf);
            return NULL;
        }
        return buf;
    }
    if (dt != TE_F32 && dt != TE_F64) {
        fprintf(stderr, "tessera run: random inputs are f32/f64 only ('%s' is %s)\n", name,
                te_dtype_str(dt));
        free(buf);
        return NULL;
    }
    for (int64_t j = 0; j < n; j++) {
        *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
        double x = ((double)(*s >> 11) / 9007199254740992.0) * 2 - 1;
        if (x == 0)
            x = 0.5;
        if (dt == TE_F32)
            ((float *)buf)[j] = (float)x;
        else
            ((double *)buf)[j] = x;
    }
    return buf;
}

static void human_bytes(size_t b, char *buf, size_t n)
{
    if (b >= 1024 * 1024)
        snprintf(buf, n, "%.2f MiB", (double)b / (1024.0 * 1024));
    else if (b >= 1024)
        snprintf(buf, n, "%.1f KiB", (double)b / 1024);
    else
        snprintf(buf, n, "%zu B", b);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

int te_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, NULL, 'D'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"runs", required_argument, NULL, 'n'},
                                         {"input", required_argument, NULL, 'i'},
                                         {"check", no_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"rules", required_argument, NULL, 'r'},
                                         {"no-rules", no_argument, NULL, 'R'},
                                         {"optimize", no_argument, NULL, 'O'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *db_path = NULL, *rules_path = NULL;
    int threads = 0, runs = 10, check = 0, json = 0, no_rules = 0, optimize = 0, c;
    char *files[64];
    int n_files = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'D':
            db_path = optarg;
            break;
        case 't':
        case 'n': {
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 4096)
                return bad(c == 't' ? "--threads takes an integer in [1, 4096], not '%s'"
                                    : "--runs takes an integer in [1, 4096], not '%s'",
                           optarg);
            *(c == 't' ? &threads : &runs) = (int)v;
            break;
        }
        case 'i':
            if (!strchr(optarg, '=') || n_files == 64)
                return bad("--input takes NAME=FILE (at most 64), not '%s'", optarg);
            files[n_files++] = optarg;
            break;
        case 'c':
            check = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'r':
            rules_path = optarg;
            break;
        case 'R':
            no_rules = 1;
            break;
        case 'O':
            optimize = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1)
        return bad("%s", optind >= argc ? "give one GRAPH file" : "give only one GRAPH file");
    if (threads) { /* read by te_target_host and by the kernels' OpenMP runtime */
        char buf[16];
        snprintf(buf, sizeof buf, "%d", threads);
        setenv("OMP_NUM_THREADS", buf, 1);
    }
    te_cli_fused f;
    if (te_cli_fused_load("run", argv[optind], rules_path, no_rules, optimize, &f))
        return 1;
    te_graph *g = f.g;
    te_db *db = NULL;
    if (db_path && te_db_open(db_path, NULL, &db) != TE_OK) {
        fprintf(stderr, "tessera run: %s: %s\n", db_path, te_db_errmsg(db));
        te_db_close(db);
        te_cli_fused_free(&f);
        return 1;
    }
    te_target tgt = te_target_host();
    te_graph_exec *e = NULL;
    int rc = te_graph_compile_db(g, f.plan, &tgt, db, &e);
    te_db_close(db);
    if (rc) {
        fprintf(stderr, "tessera run: %s\n", te_graph_errmsg(g));
        te_cli_fused_free(&f);
        return 1;
    }
    int nin = te_graph_input_count(g), nk = te_graph_exec_kernel_count(e), status = 0;
    void **in = calloc((size_t)nin + 1, sizeof *in);
    double *t_all = calloc((size_t)runs, sizeof(double));
    double *t_grp = calloc((size_t)nk * (size_t)runs + 1, sizeof(double));
    double *g_med = calloc((size_t)nk + 1, sizeof(double));
    double *worst = calloc((size_t)nk + 1, sizeof(double));
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    if (!in || !t_all || !t_grp || !g_med || !worst) {
        fprintf(stderr, "tessera run: out of memory\n");
        status = 1;
    }
    for (int i = 0; !status && i < nin; i++)
        if (!(in[i] = make_input(g, i, n_files, files, &seed)))
            status = 1;
    for (int k = 0; !status && k < n_files; k++) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(files[k], '=') - files[k]), files[k]);
        int v = te_graph_find(g, name);
        if (v < 0 || te_graph_value_kind_of(g, v) != TE_GRAPH_INPUT) {
            fprintf(stderr, "tessera run: --input %s: the graph has no input '%s'\n", files[k],
                    name);
            status = 1;
        }
    }
    /* One warm-up run, then the timed runs. */
    for (int r = -1; !status && r < runs; r++) {
        double t0 = now_s();
        if (te_graph_run(e, (const void *const *)in, NULL)) {
            fprintf(stderr, "tessera run: %s\n", te_graph_errmsg(g));
            status = 1;
            break;
        }
        if (r < 0)
            continue;
        t_all[r] = now_s() - t0;
        for (int k = 0; k < nk; k++)
            t_grp[(size_t)k * (size_t)runs + (size_t)r] = te_graph_exec_group_seconds(e, k);
    }
    check_state cs = {g, f.plan, (const void *const *)in, worst, 0};
    if (!status && check &&
        te_graph_run_each(e, (const void *const *)in, NULL, check_group, &cs) != TE_OK) {
        fprintf(stderr, "tessera run: %s\n", te_graph_errmsg(g));
        status = 1;
    }
    if (cs.failed)
        status = 1;
    int mismatches = 0;
    for (int k = 0; !status && k < nk; k++) {
        g_med[k] = median(t_grp + (size_t)k * (size_t)runs, runs);
        mismatches += check && !(worst[k] <= 1e-5);
    }
    double latency = status ? 0 : median(t_all, runs);
    te_graph_mem_stats ms;
    te_graph_memplan_stats(te_graph_exec_memplan(e), &ms);
    int from_db = 0;
    for (int k = 0; k < nk; k++)
        from_db += te_graph_exec_group_from_db(e, k, NULL) == 1;
    if (!status && json) {
        printf("{\"graph\": ");
        json_str(argv[optind]);
        printf(", \"nodes\": %d, \"kernels\": %d, \"from_db\": %d, \"threads\": %d, \"runs\": %d, "
               "\"latency_ms\": %.6g, \"memory\": {\"unfused_bytes\": %zu, \"fused_bytes\": %zu, "
               "\"pool_bytes\": %zu}, \"groups\": [",
               te_graph_node_count(g), nk, from_db, tgt.num_cores, runs, latency * 1e3,
               ms.unfused_bytes, ms.fused_bytes, ms.pool_bytes);
        for (int k = 0; k < nk; k++) {
            te_fuse_group gr;
            const char *note;
            int db_k = te_graph_exec_group_from_db(e, k, &note);
            te_fuse_plan_group(f.plan, k, &gr);
            printf("%s\n  {\"group\": %d, \"rule\": ", k ? "," : "", k);
            json_str(gr.rule);
            printf(", \"first_node\": ");
            json_str(te_graph_node_name(g, gr.nodes[0]));
            printf(", \"workload\": ");
            json_str(te_graph_exec_group_key(e, k));
            printf(", \"from_db\": %s, \"note\": ", db_k == 1 ? "true" : "false");
            json_str(note);
            printf(", \"ms\": %.6g", g_med[k] * 1e3);
            if (check)
                printf(", \"max_rel_err\": %.3g, \"ok\": %s", worst[k],
                       worst[k] <= 1e-5 ? "true" : "false");
            printf("}");
        }
        printf("\n], \"check\": %s}\n", !check ? "null" : mismatches ? "false" : "true");
    } else if (!status) {
        char hu[32], hf[32], hp[32];
        human_bytes(ms.unfused_bytes, hu, sizeof hu);
        human_bytes(ms.fused_bytes, hf, sizeof hf);
        human_bytes(ms.pool_bytes, hp, sizeof hp);
        printf("graph: %s, %d nodes -> %d kernels (%d from the database); intermediates %s "
               "node by node -> %s fused -> %s pool\n",
               argv[optind], te_graph_node_count(g), nk, from_db, hu, hf, hp);
        for (int k = 0; k < nk; k++) {
            te_fuse_group gr;
            const char *note;
            te_graph_exec_group_from_db(e, k, &note);
            te_fuse_plan_group(f.plan, k, &gr);
            printf("group %2d %-32s %-14.14s %10.4f ms", k, gr.rule,
                   te_graph_node_name(g, gr.nodes[0]), g_med[k] * 1e3);
            if (check)
                printf("  err %.1e %s", worst[k], worst[k] <= 1e-5 ? "ok" : "MISMATCH");
            printf("  %s\n", note);
        }
        printf("end to end: %.4f ms (median of %d runs, %d threads)\n", latency * 1e3, runs,
               tgt.num_cores);
        if (check)
            printf("check: %s\n", mismatches ? "some group outputs differ from the reference"
                                             : "every group output matches the reference");
    }
    if (mismatches)
        status = 1;
    for (int i = 0; in && i < nin; i++)
        free(in[i]);
    free(in), free(t_all), free(t_grp), free(g_med), free(worst);
    te_graph_exec_free(e);
    te_cli_fused_free(&f);
    return status;
}
