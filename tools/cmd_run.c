/*
 * `tessera run`: imports an ONNX model or reads a graph, compiles every fused group (from the
 * tuning database's best record when --db is given, else the default schedule, with a note per
 * group saying which), runs the graph on .npy inputs (or raw f32 files, or seeded random data,
 * said so), writes the outputs as .npy (--output-dir), and prints each group's time and the
 * end-to-end latency (medians of --runs runs). --check compares every group output with the
 * float64 reference of the unfused graph and exits 1 on a mismatch (--precision bf16: of the
 * f32 graph before the bf16 lowering, within te_graph_value_bf16_tolerance for the values that
 * descend from bf16 ones); --bench times the whole graph at several thread counts, each
 * compiled for its count.
 *
 *   tessera run block.graph --runs 20 --threads 2
 *   tessera tune --graph block.graph --trials 200 --db t.db && tessera run block.graph --db t.db
 *   tessera run bert.onnx --shape batch=1,seq=128 --input ids=ids.npy --output-dir out --check
 *   tessera run cnn.onnx --bench --threads 1,2 --db t.db
 *   tessera run mlp.graph --precision bf16 --check
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <omp.h>

#include "tessera/graph.h"
#include "tessera/npy.h"
#include "tessera/target.h"
#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera run GRAPH|MODEL.onnx [--shape NAME=N,...] [--input NAME=FILE]...\n"
            "                 [--output-dir DIR] [--db FILE] [--check] [--bench]\n"
            "                 [--threads N|N,M,...] [--runs N] [--seed S] [--json]\n"
            "                 [--rules FILE | --no-rules] [--optimize] [--precision f32|bf16]\n\n"
            "Imports the ONNX model (tessera import) or reads the graph, fuses it (as tessera\n"
            "fuse does), compiles every fused group and runs the graph; prints each group's time\n"
            "and the end-to-end latency. Models are always optimized (--optimize).\n\n"
            "  --shape NAME=N,...  bind a model's symbolic dimensions (batch=1,seq=128) or give\n"
            "                      an input's whole shape (x=1x3x32x32); repeatable\n"
            "  --db FILE           schedules from the tuning database's best record of each\n"
            "                      group's workload (tessera tune MODEL.onnx / --graph GRAPH);\n"
            "                      default schedule for groups without one (a note per group)\n"
            "  --input NAME=FILE   data of graph input NAME: a .npy file of the input's dtype\n"
            "                      and shape, or raw little-endian f32 (any other name);\n"
            "                      inputs not given are uniform random in [-1, 1), never 0,\n"
            "                      from --seed (a note says which)\n"
            "  --seed S            seed of the random inputs (default 1)\n"
            "  --output-dir DIR    write every graph output as DIR/NAME.npy (DIR is created),\n"
            "                      and the random inputs too, so the run can be repeated\n"
            "  --threads N         threads of the parallel loops (default: $OMP_NUM_THREADS or\n"
            "                      the online CPUs); with --bench a list: 1,2\n"
            "  --runs N            timed runs; times are medians (default 10)\n"
            "  --check             compare every group output with the float64 reference of\n"
            "                      the unfused graph (relative error <= 1e-5); exit 1 if not\n"
            "  --precision P       f32 (default) or bf16: after the passes, f32 matmuls with\n"
            "                      constant weights run on the CPU's bf16 dot products (inputs\n"
            "                      rounded to bf16, f32 accumulation; an error without AVX-512\n"
            "                      BF16 or AMX-BF16); --check then compares with the f32\n"
            "                      graph's reference within the bf16 bound of docs/DTYPES.md\n"
            "  --bench             the end-to-end median latency at each --threads count\n"
            "                      (default 1,2), compiled for that count, and the fusion plan's\n"
            "                      summary: groups, kernels, peak intermediate memory\n"
            "  --plugin LIB.so     load the operators of a plugin (repeatable; also the\n"
            "                      colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
            "  --json              the result as JSON\n"
            "  --rules FILE, --no-rules, --optimize   as for tessera fuse\n\n"
            "Exit status: 0 ok, 1 failed (files, import, compile, run, check), 2 bad usage.\n");
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
    te_graph *ref; /* --precision bf16: the f32 graph before the lowering, else NULL */
    const te_fuse_plan *p;
    const te_cli_refs *refs; /* the references of the group outputs, evaluated once */
    double *worst;           /* per group */
    double *tol;             /* per group: 1e-5, or the bf16 bound of its outputs */
    double *own;             /* per group: its own error when worst > tol (else NaN) */
    te_graph_exec *e;
    int failed;
} check_state;

/* Group k passes when its outputs match the whole-graph reference, or when only the rounding
 * it inherits does not (its own error, from the data it read, is within the bound). */
static int group_ok(const check_state *cs, int k)
{
    return cs->worst[k] <= cs->tol[k] || cs->own[k] <= cs->tol[k];
}

#define TE_RUN_F32_TOL 1e-5

/* After group gi ran: its outputs (live in the pool now) against the reference. */
static void check_group(te_graph_exec *e, int gi, void *user)
{
    check_state *cs = user;
    te_fuse_group gr;
    te_fuse_plan_group(cs->p, gi, &gr);
    cs->worst[gi] = 0;
    cs->tol[gi] = TE_RUN_F32_TOL;
    for (int k = 0; !cs->failed && k < gr.n_outputs; k++) {
        int v = gr.outputs[k];
        double worst, rms;
        if (te_cli_refs_compare(cs->refs, v, te_graph_exec_value(e, v), &worst, &rms)) {
            fprintf(stderr, "tessera run: no reference for '%s'\n", te_graph_value_name(cs->g, v));
            cs->failed = 1;
            return;
        }
        cs->worst[gi] = fmax(cs->worst[gi], worst);
        /* bf16: values descending from bf16 ones get the bf16 bound of docs/DTYPES.md. */
        if (cs->ref)
            cs->tol[gi] = fmax(cs->tol[gi], te_graph_value_bf16_tolerance(cs->g, v, rms));
    }
    cs->own[gi] = NAN;
    if (!cs->failed && !cs->ref && !(cs->worst[gi] <= cs->tol[gi])) {
        double own;
        int rc = te_cli_group_own_error("run", cs->g, cs->p, e, gi, &own);
        if (rc == TE_OK)
            cs->own[gi] = own;
        else if (rc != TE_ERR_UNSUPPORTED)
            cs->failed = 1;
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static void shape_str(te_dtype dt, int nd, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s[", te_dtype_str(dt));
    for (int d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* Input i: the file given for it (.npy, else raw f32), else random f32/f64 data. NULL after
 * printing why. */
static void *make_input(te_graph *g, int i, int n_files, char **files, uint64_t seed, int quiet,
                        char *is_random)
{
    int v = te_graph_input_value(g, i);
    const char *name = te_graph_value_name(g, v);
    int64_t n = te_graph_value_numel(g, v);
    te_dtype dt = te_graph_value_dtype(g, v);
    int nd = te_graph_value_ndim(g, v);
    const int64_t *shape = te_graph_value_shape(g, v);
    size_t bytes = (size_t)n * te_dtype_size(dt);
    char want[160];
    shape_str(dt, nd, shape, want, sizeof want);
    for (int k = 0; k < n_files; k++) {
        size_t len = strlen(name);
        if (strncmp(files[k], name, len) || files[k][len] != '=')
            continue;
        const char *path = files[k] + len + 1;
        if (ends_with(path, ".npy")) {
            te_npy_array a;
            char err[512];
            if (te_npy_read(path, &a, err, sizeof err)) {
                fprintf(stderr, "tessera run: --input %s: %s\n", files[k], err);
                return NULL;
            }
            int same = a.dtype == dt && a.ndim == nd;
            for (int d = 0; same && d < nd; d++)
                same = a.shape[d] == shape[d];
            if (!same) {
                char got[160];
                shape_str(a.dtype, a.ndim, a.shape, got, sizeof got);
                fprintf(stderr, "tessera run: --input %s: the file holds %s but input '%s' is %s\n",
                        files[k], got, name, want);
                te_npy_array_free(&a);
                return NULL;
            }
            return a.data; /* malloc'ed: freed like the other inputs */
        }
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) {
            fprintf(stderr, "tessera run: out of memory\n");
            return NULL;
        }
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(buf, 1, bytes, f) : 0;
        int extra = f && fgetc(f) != EOF;
        if (f)
            fclose(f);
        if (dt != TE_F32 || !f || got != bytes || extra) {
            fprintf(stderr,
                    "tessera run: --input %s: %s (input '%s' is %s: %zu bytes of raw f32, or a "
                    ".npy file)\n",
                    files[k],
                    dt != TE_F32 ? "only f32 inputs are read from raw files"
                    : !f         ? strerror(errno)
                                 : "wrong size",
                    name, want, bytes);
            free(buf);
            return NULL;
        }
        return buf;
    }
    if (dt != TE_F32 && dt != TE_F64) {
        fprintf(stderr, "tessera run: random inputs are f32/f64 only ('%s' is %s); give --input\n",
                name, te_dtype_str(dt));
        return NULL;
    }
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        fprintf(stderr, "tessera run: out of memory\n");
        return NULL;
    }
    /* xorshift64 from the seed and the input's index: the same data for the same command. */
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (seed * 0xBF58476D1CE4E5B9ull) ^ ((uint64_t)i << 32);
    if (!s)
        s = 1;
    for (int64_t j = 0; j < n; j++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double x = ((double)(s >> 11) / 9007199254740992.0) * 2 - 1;
        if (x == 0)
            x = 0.5;
        if (dt == TE_F32)
            ((float *)buf)[j] = (float)x;
        else
            ((double *)buf)[j] = x;
    }
    *is_random = 1;
    if (!quiet)
        fprintf(stderr,
                "run: input '%s' %s: random uniform in [-1, 1) (seed %llu; --input %s=FILE.npy "
                "to give data)\n",
                name, want, (unsigned long long)seed, name);
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

/* Compiles g for `threads` threads (the target key and the OpenMP team) with records from db. */
static int compile_for(te_cli_fused *f, te_db *db, int threads, te_target *tgt, te_graph_exec **e)
{
    if (threads) { /* read by te_target_host; the OpenMP team is set before each run */
        char buf[16];
        snprintf(buf, sizeof buf, "%d", threads);
        setenv("OMP_NUM_THREADS", buf, 1);
    }
    *tgt = te_target_host();
    omp_set_num_threads(tgt->num_cores);
    if (te_graph_compile_db(f->g, f->plan, tgt, db, e)) {
        fprintf(stderr, "tessera run: %s\n", te_graph_errmsg(f->g));
        return 1;
    }
    return 0;
}

/* The median end-to-end latency of `runs` runs after one warm-up; per-group medians of the ng
 * groups (views: 0) into g_med (may be NULL). 1 after printing the error. */
static int time_runs(te_graph_exec *e, te_graph *g, int ng, void **in, int runs, double *latency,
                     double *g_med)
{
    int nk = ng;
    double *t_all = calloc((size_t)runs, sizeof(double));
    double *t_grp = calloc((size_t)nk * (size_t)runs + 1, sizeof(double));
    int status = 0;
    if (!t_all || !t_grp) {
        fprintf(stderr, "tessera run: out of memory\n");
        status = 1;
    }
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
    for (int k = 0; !status && g_med && k < nk; k++)
        g_med[k] = median(t_grp + (size_t)k * (size_t)runs, runs);
    *latency = status ? 0 : median(t_all, runs);
    free(t_all), free(t_grp);
    return status;
}

/* Writes every graph output as dir/NAME.npy, and the inputs that were random (is_random[i]) so
 * that the run can be repeated elsewhere (a generated runner, another framework). */
static int write_outputs(te_graph *g, te_graph_exec *e, const char *dir, void **in,
                         const char *is_random, int quiet)
{
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "tessera run: --output-dir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (int i = 0; i < te_graph_input_count(g); i++) {
        int v = te_graph_input_value(g, i);
        char path[4096], err[4200];
        if (!is_random[i])
            continue;
        snprintf(path, sizeof path, "%s/%s.npy", dir, te_graph_value_name(g, v));
        if (te_npy_write(path, te_graph_value_dtype(g, v), te_graph_value_ndim(g, v),
                         te_graph_value_shape(g, v), in[i], err, sizeof err)) {
            fprintf(stderr, "tessera run: %s\n", err);
            return 1;
        }
        if (!quiet)
            fprintf(stderr, "run: wrote %s (the random input)\n", path);
    }
    for (int j = 0; j < te_graph_output_count(g); j++) {
        int v = te_graph_output_value(g, j);
        char path[4096], err[4200];
        snprintf(path, sizeof path, "%s/%s.npy", dir, te_graph_value_name(g, v));
        if (te_npy_write(path, te_graph_value_dtype(g, v), te_graph_value_ndim(g, v),
                         te_graph_value_shape(g, v), te_graph_exec_value(e, v), err, sizeof err)) {
            fprintf(stderr, "tessera run: %s\n", err);
            return 1;
        }
        if (!quiet)
            fprintf(stderr, "run: wrote %s\n", path);
    }
    return 0;
}

/* "1,2" into t[] (at most 16 counts in [1, 4096]); the count, or 0 when malformed. */
static int parse_threads(const char *s, int *t)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > 4096 || n == 16)
            return 0;
        t[n++] = (int)v;
    }
    return n;
}

int te_cmd_run(int argc, char **argv)
{
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"db", 0, TE_CLI_VALUE, 'D'},
                                      {"threads", 0, TE_CLI_VALUE, 't'},
                                      {"runs", 0, TE_CLI_VALUE, 'n'},
                                      {"input", 0, TE_CLI_VALUE, 'i'},
                                      {"shape", 0, TE_CLI_VALUE, 's'},
                                      {"output-dir", 0, TE_CLI_VALUE, 'o'},
                                      {"seed", 0, TE_CLI_VALUE, 'S'},
                                      {"bench", 0, TE_CLI_FLAG, 'b'},
                                      {"check", 0, TE_CLI_FLAG, 'c'},
                                      {"json", 0, TE_CLI_FLAG, 'j'},
                                      {"rules", 0, TE_CLI_VALUE, 'r'},
                                      {"no-rules", 0, TE_CLI_FLAG, 'R'},
                                      {"optimize", 0, TE_CLI_FLAG, 'O'},
                                      {"help", 'h', TE_CLI_FLAG, 'h'},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {"precision", 0, TE_CLI_VALUE, 'P'},
                                      {0}};
    te_cli_precision prec = TE_CLI_PRECISION_F32;
    const char *db_path = NULL, *rules_path = NULL, *out_dir = NULL, *threads_arg = NULL;
    int runs = 10, check = 0, json = 0, no_rules = 0, optimize = 0, bench = 0, c;
    unsigned long long seed = 1;
    char *files[64], shapes[2048] = "";
    int n_files = 0;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    te_cli_parser cp;
    te_cli_parser_init(&cp, "run", argc, argv, opts);
    while ((c = te_cli_next(&cp)) != TE_CLI_END) {
        char *end;
        char *v = (char *)cp.value; /* argv's words: --input keeps pointers to them */
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (npos < 2)
                pos[npos] = v;
            npos++;
            break;
        case 'D':
            db_path = v;
            break;
        case 't':
            threads_arg = v;
            break;
        case 'n': {
            long iv = strtol(v, &end, 10);
            if (*end || iv < 1 || iv > 4096)
                return bad("--runs takes an integer in [1, 4096], not '%s'", v);
            runs = (int)iv;
            break;
        }
        case 'S':
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (*end || errno || !*v || *v == '-')
                return bad("--seed takes a non-negative integer, not '%s'", v);
            break;
        case 'i':
            if (!strchr(v, '=') || n_files == 64)
                return bad("--input takes NAME=FILE (at most 64), not '%s'", v);
            files[n_files++] = v;
            break;
        case 's':
            if (strlen(shapes) + strlen(v) + 2 > sizeof shapes)
                return bad("%s", "--shape lists are too long");
            if (shapes[0])
                strcat(shapes, ",");
            strcat(shapes, v);
            break;
        case 'o':
            out_dir = v;
            break;
        case 'b':
            bench = 1;
            break;
        case 'c':
            check = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'r':
            rules_path = v;
            break;
        case 'R':
            no_rules = 1;
            break;
        case 'O':
            optimize = 1;
            break;
        case 'P':
            if (te_cli_precision_parse("run", v, &prec))
                return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        }
    }
    if (npos != 1)
        return bad("%s", npos == 0 ? "give one GRAPH file or MODEL.onnx"
                                   : "give only one GRAPH file or MODEL.onnx");
    if (te_cli_plugins_load("run", &plugins))
        return 1;
    int thr[16] = {0}, n_thr = 1;
    if (threads_arg) {
        n_thr = parse_threads(threads_arg, thr);
        if (!n_thr || (n_thr > 1 && !bench))
            return bad(bench ? "--threads takes counts in [1, 4096] such as 1,2, not '%s'"
                             : "--threads takes an integer in [1, 4096] (a list with --bench), "
                               "not '%s'",
                       threads_arg);
    } else if (bench) {
        thr[0] = 1, thr[1] = 2, n_thr = 2;
    }
    const char *path = pos[0];
    for (int k = 0; k < n_files; k++) { /* a name and a path before anything is imported */
        if (strchr(files[k], '=') == files[k] || !strchr(files[k], '=')[1])
            return bad("--input takes NAME=FILE, not '%s'", files[k]);
    }
    te_cli_fused f;
    int lrc =
        te_cli_fused_load_model("run", path, shapes, rules_path, no_rules, optimize, prec, &f);
    if (lrc)
        return lrc;
    te_graph *g = f.g;
    int status = 0;
    te_graph *ref = NULL; /* bf16 --check: the f32 graph, loaded as f was before the lowering */
    if (check && prec == TE_CLI_PRECISION_BF16)
        status = te_cli_graph_load("run", path, shapes, optimize, NULL, &ref);
    for (int k = 0; !status && k < n_files; k++) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(files[k], '=') - files[k]), files[k]);
        int v = te_graph_find(g, name);
        if (v < 0 || te_graph_value_kind_of(g, v) != TE_GRAPH_INPUT) {
            fprintf(stderr, "tessera run: --input %s: the %s has no input '%s' (inputs:", files[k],
                    te_cli_is_model(path) ? "model" : "graph", name);
            for (int i = 0; i < te_graph_input_count(g); i++)
                fprintf(stderr, " %s", te_graph_value_name(g, te_graph_input_value(g, i)));
            fprintf(stderr, ")\n");
            status = 1;
        }
    }
    int nin = te_graph_input_count(g);
    void **in = calloc((size_t)nin + 1, sizeof *in);
    if (!in && !status) {
        fprintf(stderr, "tessera run: out of memory\n");
        status = 1;
    }
    char *is_random = calloc((size_t)nin + 1, 1);
    if (!is_random && !status) {
        fprintf(stderr, "tessera run: out of memory\n");
        status = 1;
    }
    for (int i = 0; !status && i < nin; i++)
        if (!(in[i] = make_input(g, i, n_files, files, seed, json, &is_random[i])))
            status = 1;
    te_db *db = NULL;
    if (!status && db_path && te_db_open(db_path, NULL, &db) != TE_OK) {
        fprintf(stderr, "tessera run: %s: %s\n", db_path, te_db_errmsg(db));
        status = 1;
    }
    te_target tgt;
    te_graph_exec *e = NULL;
    if (!status)
        status = compile_for(&f, db, thr[0], &tgt, &e);
    /* Per group (views included: the numbering is the plan's); nk counts the kernels only. */
    int nk = e ? te_graph_exec_kernel_count(e) : 0, ng = te_fuse_plan_group_count(f.plan);
    double *g_med = calloc((size_t)ng + 1, sizeof(double));
    double *worst = calloc((size_t)ng + 1, sizeof(double));
    double *tol = calloc((size_t)ng + 1, sizeof(double));
    double *own = calloc((size_t)ng + 1, sizeof(double));
    double bench_ms[16] = {0};
    int bench_from_db[16] = {0};
    if (!status && (!g_med || !worst || !tol || !own)) {
        fprintf(stderr, "tessera run: out of memory\n");
        status = 1;
    }
    double latency = 0;
    if (!status)
        status = time_runs(e, g, ng, in, runs, &latency, g_med);
    bench_ms[0] = latency * 1e3;
    te_cli_refs *refs = NULL;
    if (!status && check &&
        !(refs = te_cli_refs_create("run", g, ref, f.plan, (const void *const *)in)))
        status = 1;
    check_state cs = {g, ref, f.plan, refs, worst, tol, own, e, 0};
    if (!status && check &&
        te_graph_run_each(e, (const void *const *)in, NULL, check_group, &cs) != TE_OK) {
        fprintf(stderr, "tessera run: %s\n", te_graph_errmsg(g));
        status = 1;
    }
    if (cs.failed)
        status = 1;
    int mismatches = 0;
    for (int k = 0; !status && k < ng; k++)
        mismatches += check && !group_ok(&cs, k);
    double worst_all = 0;
    for (int k = 0; !status && check && k < ng; k++)
        worst_all = fmax(worst_all, worst[k]);
    if (!status && out_dir)
        status = write_outputs(g, e, out_dir, in, is_random, json);
    int from_db = 0;
    for (int k = 0; k < ng; k++)
        from_db += te_graph_exec_group_from_db(e, k, NULL) == 1;
    bench_from_db[0] = from_db;
    int threads0 = e ? tgt.num_cores : 0;
    /* The other thread counts of --bench, each compiled for its count. */
    for (int b = 1; !status && b < n_thr; b++) {
        te_graph_exec *eb = NULL;
        te_target tb;
        double lb = 0;
        status = compile_for(&f, db, thr[b], &tb, &eb);
        if (!status)
            status = time_runs(eb, g, ng, in, runs, &lb, NULL);
        bench_ms[b] = lb * 1e3;
        for (int k = 0; eb && k < ng; k++)
            bench_from_db[b] += te_graph_exec_group_from_db(eb, k, NULL) == 1;
        te_graph_exec_free(eb);
    }
    te_db_close(db);
    te_graph_mem_stats ms = {0};
    te_graph_memplan_stats(te_graph_exec_memplan(e), &ms);
    if (!status && json) {
        printf("{\"graph\": ");
        json_str(path);
        printf(", \"nodes\": %d, \"n_groups\": %d, \"kernels\": %d, \"views\": %d, "
               "\"from_db\": %d, \"threads\": %d, \"runs\": %d, \"latency_ms\": %.6g, "
               "\"memory\": {\"unfused_bytes\": %zu, \"fused_bytes\": %zu, \"pool_bytes\": %zu, "
               "\"live_bytes\": %zu}, \"groups\": [",
               te_graph_node_count(g), ng, nk, ng - nk, from_db, threads0, runs, latency * 1e3,
               ms.unfused_bytes, ms.fused_bytes, ms.pool_bytes, ms.live_bytes);
        for (int k = 0; k < ng; k++) {
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
            printf(", \"view\": %s, \"from_db\": %s, \"note\": ", gr.view ? "true" : "false",
                   db_k == 1 ? "true" : "false");
            json_str(note);
            printf(", \"ms\": %.6g, \"wave\": %d, \"threads\": %d, \"parallel_width\": %.17g",
                   g_med[k] * 1e3, te_graph_exec_group_wave(e, k),
                   te_graph_exec_group_threads(e, k),
                   te_graph_exec_group_width(e, k) < 1e18 ? te_graph_exec_group_width(e, k) : -1.0);
            if (check)
                printf(", \"max_rel_err\": %.3g, \"tolerance\": %.3g, \"ok\": %s", worst[k], tol[k],
                       worst[k] <= tol[k] ? "true" : "false");
            printf("}");
        }
        printf("\n]");
        if (bench) {
            printf(", \"bench\": [");
            for (int b = 0; b < n_thr; b++)
                printf("%s{\"threads\": %d, \"latency_ms\": %.6g, \"from_db\": %d}", b ? ", " : "",
                       thr[b], bench_ms[b], bench_from_db[b]);
            printf("]");
        }
        printf(", \"check\": %s", !check ? "null" : mismatches ? "false" : "true");
        if (check)
            printf(", \"max_rel_err\": %.3g", worst_all);
        printf("}\n");
    } else if (!status) {
        char hu[32], hf[32], hp[32];
        human_bytes(ms.unfused_bytes, hu, sizeof hu);
        human_bytes(ms.fused_bytes, hf, sizeof hf);
        human_bytes(ms.pool_bytes, hp, sizeof hp);
        char views[64] = "";
        if (ng > nk)
            snprintf(views, sizeof views, "; %d reshape view%s, no kernel", ng - nk,
                     ng - nk == 1 ? "" : "s");
        printf("%s: %s, %d nodes -> %d kernels (%d from the database%s); intermediates %s "
               "node by node -> %s fused -> %s pool\n",
               te_cli_is_model(path) ? "model" : "graph", path, te_graph_node_count(g), nk, from_db,
               views, hu, hf, hp);
        for (int k = 0; k < ng; k++) {
            te_fuse_group gr;
            const char *note;
            te_graph_exec_group_from_db(e, k, &note);
            te_fuse_plan_group(f.plan, k, &gr);
            printf("group %2d %-32s %-14.14s %10.4f ms", k, gr.rule,
                   te_graph_node_name(g, gr.nodes[0]), g_med[k] * 1e3);
            if (!gr.view)
                printf("  wave %2d, %d thread%s", te_graph_exec_group_wave(e, k),
                       te_graph_exec_group_threads(e, k),
                       te_graph_exec_group_threads(e, k) == 1 ? " " : "s");
            if (check && tol[k] != TE_RUN_F32_TOL)
                printf("  err %.1e %s (bf16 bound %.1e)", worst[k],
                       worst[k] <= tol[k] ? "ok" : "MISMATCH", tol[k]);
            else if (check && !(worst[k] <= tol[k]) && !isnan(own[k]))
                printf("  err %.1e %s (inherited: the group alone %.1e)", worst[k],
                       group_ok(&cs, k) ? "ok" : "MISMATCH", own[k]);
            else if (check)
                printf("  err %.1e %s", worst[k], worst[k] <= tol[k] ? "ok" : "MISMATCH");
            printf("  %s\n", note);
        }
        printf("end to end: %.4f ms (median of %d runs, %d threads)\n", latency * 1e3, runs,
               threads0);
        if (check)
            printf("check: %s (worst relative error %.1e)\n",
                   mismatches ? "some group outputs differ from the reference"
                              : "every group output matches the reference",
                   worst_all);
        if (bench) {
            char hl[32];
            human_bytes(ms.live_bytes, hl, sizeof hl);
            printf("bench: %d nodes -> %d groups, %d kernels; peak intermediate memory %s "
                   "node by node, %s fused, %s pool (%s live at most)\n",
                   te_graph_node_count(g), te_fuse_plan_group_count(f.plan), nk, hu, hf, hp, hl);
            for (int b = 0; b < n_thr; b++)
                printf("bench: threads %d: %.4f ms (median of %d runs; %d of %d kernels from the "
                       "database)\n",
                       thr[b] ? thr[b] : threads0, bench_ms[b], runs, bench_from_db[b], nk);
        }
    }
    if (mismatches)
        status = 1;
    for (int i = 0; in && i < nin; i++)
        free(in[i]);
    free(in), free(is_random), free(g_med), free(worst), free(tol), free(own);
    te_cli_refs_free(refs);
    te_graph_exec_free(e);
    te_graph_free(ref);
    te_cli_fused_free(&f);
    return status;
}
