/* Roofline reports: flops and compulsory bytes counted from the lowered IR (te_kernel_count)
 * against hand-computed values for a matmul, an elementwise op and a reduction; the peaks
 * table (te_db_record_peaks / te_db_peaks, its argument checks, `db check`); the migration of
 * a version-3 database that keeps every record; and the CLI end to end: `tessera target
 * --measure --quick`, `tessera db roofline --svg` on a database with a few records, and the
 * SVG parsed as XML; fused graph groups tuned by `tessera tune --graph` reported from the flops
 * and bytes the tuner stored (schema 5), and a version-4 database that migrates, still reports
 * its library operators and says why it leaves a user expression out. */
#include "test_tuning_db_common.h"

#include <sqlite3.h>
#include <sys/wait.h>

#include "tessera/autotune.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/target.h"
#include "tessera/te.h"
#include "tessera/tuner.h"
#include "tuning_db/schema.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/roofline.cmake"
#endif

TDB_FIXTURE("roof.db", 0)

/* Builds op with params, lowers it for the host (optionally after `trace`) and counts it. */
static te_kernel_counts count(const char *op, const char *params, const char *trace)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO], *args[2 * TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    if (te_op_build(ctx, op, params, ins, &n_in, outs, &n_out) != TE_OK)
        fail_msg("%s %s: %s", op, params, te_ctx_errmsg(ctx));
    for (int i = 0; i < n_in; i++)
        args[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        args[n_in + i] = outs[i];
    te_schedule *s = te_schedule_create(ctx, n_out, outs);
    assert_non_null(s);
    if (trace && te_schedule_apply_trace(s, trace) != TE_OK)
        fail_msg("trace: %s", te_ctx_errmsg(ctx));
    te_target host = te_target_host();
    te_lowered *f = te_lower(s, n_in + n_out, args, op, &host);
    if (!f)
        fail_msg("lower: %s", te_ctx_errmsg(ctx));
    te_kernel_counts k;
    assert_int_equal(te_kernel_count(f, &k), TE_OK);
    te_ctx_free(ctx);
    return k;
}

static void test_matmul_counts_two_flops_per_product_and_its_three_matrices(void **state)
{
    (void)state;
    /* C[8,12] = A[8,16] B[16,12]: a multiply and an add per (i, j, k); the init store has no
     * flop. Bytes: A, B and C once each. */
    te_kernel_counts k = count("matmul", "m=8,n=12,k=16", NULL);
    assert_true(k.flops == 2.0 * 8 * 12 * 16);
    assert_true(k.bytes == 4.0 * (8 * 16 + 16 * 12 + 8 * 12));
    assert_true(fabs(k.intensity - 3072.0 / 1664.0) < 1e-12);
    /* f64 doubles the bytes, not the flops. */
    k = count("matmul", "m=8,n=12,k=16,dtype=f64", NULL);
    assert_true(k.flops == 3072.0);
    assert_true(k.bytes == 8.0 * (8 * 16 + 16 * 12 + 8 * 12));
    /* An exact split changes the loops, not the counts. */
    k = count("matmul", "m=8,n=12,k=16", "split matmul i 4\n");
    assert_true(k.flops == 3072.0);
    assert_true(k.bytes == 1664.0);
    /* The parallel width: 1 without a parallel loop, else the widest outermost one. */
    assert_true(k.parallel_width == 1.0);
    k = count("matmul", "m=8,n=12,k=16", "split matmul i 4\nparallel matmul i_o\n");
    assert_true(k.parallel_width == 2.0);
    k = count("matmul", "m=8,n=12,k=16", "parallel matmul i\n");
    assert_true(k.parallel_width == 8.0);
    k = count("matmul", "m=8,n=12,k=16", "fuse matmul i j\nparallel matmul i_j_f\n");
    assert_true(k.parallel_width == 96.0);
}

static void test_elementwise_and_reduction_counts(void **state)
{
    (void)state;
    /* relu: one max per element; X and Y. */
    te_kernel_counts k = count("relu", "m=6,n=10", NULL);
    assert_true(k.flops == 60.0);
    assert_true(k.bytes == 4.0 * 2 * 60);
    /* add: one add per element; A, B and C. */
    k = count("add", "m=6,n=10", NULL);
    assert_true(k.flops == 60.0);
    assert_true(k.bytes == 4.0 * 3 * 60);
    /* Row sums of X[5, 32]: one add per element of X; X and the 5 sums. */
    k = count("sum", "m=5,n=32", NULL);
    assert_true(k.flops == 160.0);
    assert_true(k.bytes == 4.0 * (160 + 5));
    assert_true(fabs(k.intensity - 160.0 / 660.0) < 1e-12);
    te_kernel_counts z;
    assert_int_equal(te_kernel_count(NULL, &z), TE_ERR_ARG);
    assert_true(z.flops == 0 && z.bytes == 0);
}

static te_db_target host_target(char *storage, size_t n, char *key, size_t kn)
{
    te_target host = te_target_host();
    te_db_target t;
    assert_int_equal(te_tuner_db_target(&host, &t, storage, n), TE_OK);
    te_db_target_key(&t, key, kn);
    t.key = key;
    return t;
}

static void test_peaks_record_replace_and_refuse_bad_entries(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_target t = {.key = "c;x86_64;test cpu;avx2,fma;2 cores;gcc 12.2.0"};
    te_db_peak p[3] = {{"fma", "f32", "avx2", 2, 100.0, 0},
                       {"fma", "f64", "scalar", 1, 5.0, 0},
                       {"copy", NULL, NULL, 2, 20.0, 0}};
    assert_int_equal(te_db_record_peaks(db, &t, p, 3), TE_OK);
    te_db_peak_list *l = NULL;
    assert_int_equal(te_db_peaks(db, t.key, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_string_equal(l->items[0].kind, "copy"); /* ordered by kind, dtype, isa */
    assert_string_equal(l->items[1].dtype, "f32");
    assert_true(l->items[1].value == 100.0);
    assert_true(l->items[1].measured_us > 0);
    te_db_peak_list_free(l);
    /* A new measurement replaces the old one. */
    assert_int_equal(te_db_record_peaks(db, &t, p, 1), TE_OK);
    assert_int_equal(te_db_peaks(db, t.key, &l), TE_OK);
    assert_int_equal(l->n, 1);
    te_db_peak_list_free(l);
    /* Bad entries: nothing is written, the message names the entry. */
    static const struct {
        te_db_peak p;
        const char *needle;
    } bad[] = {{{"fma", "f16", "avx2", 1, 1.0, 0}, "dtype f32 or f64"},
               {{"fma", "f32", NULL, 1, 1.0, 0}, "an isa"},
               {{"copy", "f32", NULL, 1, 1.0, 0}, "no dtype"},
               {{"flops", "", "", 1, 1.0, 0}, "not fma or copy"},
               {{"copy", "", "", 0, 1.0, 0}, "threads 0"},
               {{"copy", "", "", 1, -3.0, 0}, "not a positive"},
               {{"copy", "", "", 1, NAN, 0}, "not a positive"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        te_db_peak two[2] = {p[0], bad[i].p};
        assert_int_equal(te_db_record_peaks(db, &t, two, 2), TE_ERR_ARG);
        if (!strstr(te_db_errmsg(db), "peak 1:") || !strstr(te_db_errmsg(db), bad[i].needle))
            fail_msg("case %zu: '%s' lacks 'peak 1:' or '%s'", i, te_db_errmsg(db), bad[i].needle);
    }
    assert_int_equal(te_db_peaks(db, t.key, &l), TE_OK);
    assert_int_equal(l->n, 1);
    te_db_peak_list_free(l);
    assert_int_equal(te_db_peaks(db, "c;no such target", &l), TE_OK);
    assert_int_equal(l->n, 0);
    te_db_peak_list_free(l);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
    /* check finds a peak written around the API. */
    expect_corrupt_after(path,
                         "INSERT INTO target_peaks VALUES(1, 'fma', 'f32', '', 1, -1, 5, 'x')",
                         "1 target peaks that are not positive");
}

/* A version-3 file (the schema before target_peaks) keeps every trial, job and target, and can
 * record peaks afterwards. */
static void test_version_3_database_is_migrated_keeping_every_record(void **state)
{
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    for (int v = 0; v < 3; v++)
        assert_int_equal(sqlite3_exec(h, te__schema_migration(v), NULL, NULL, NULL), SQLITE_OK);
    char sql[1024];
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 3;"
             "INSERT INTO targets(key, backend) VALUES('c;x86_64;old', 'c');"
             "INSERT INTO workloads(key, op) VALUES('%s', 'matmul');"
             "INSERT INTO jobs(uid, command, started_us) VALUES('j1', 'tessera tune', 5);"
             "INSERT INTO trials(uid, workload_id, target_id, job_id, trace, trace_hash, status, "
             "median_s, created_us, tessera_version) VALUES"
             "('u1', 1, 1, 1, 't1', 'h1', 'ok', 0.5, 7, '0.0.1'),"
             "('u2', 1, 1, 1, 't2', 'h2', 'timeout', NULL, 8, '0.0.1'),"
             "('u3', 1, 1, NULL, 't3', 'h3', 'ok', 0.25, 9, '0.0.1');",
             TE_DB_APPLICATION_ID, TDB_MATMUL);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.schema_version, TE_DB_SCHEMA_VERSION);
    assert_int_equal(in.n_trials, 3);
    assert_int_equal(in.n_jobs, 1);
    assert_int_equal(in.n_targets, 1);
    te_db_target old = {.key = "c;x86_64;old"};
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, TDB_MATMUL, &old, 0, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_string_equal(l->items[0].uid, "u1");
    assert_string_equal(l->items[2].trace, "t3");
    te_db_trial_list_free(l);
    assert_int_equal(te_db_best(db, TDB_MATMUL, &old, 0, &l), TE_OK);
    assert_string_equal(l->items[0].uid, "u3");
    te_db_trial_list_free(l);
    te_db_peak p = {"copy", "", "", 1, 10.0, 0};
    assert_int_equal(te_db_record_peaks(db, &old, &p, 1), TE_OK);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
}

/* Runs the CLI in dir; returns its exit status, stdout in *out (malloc'ed). */
static int cli(char **out, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >out.txt 2>err.txt", dir, TESSERA_CLI, args);
    int ws = system(cmd);
    assert_true(WIFEXITED(ws));
    char p[400];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/out.txt", dir);
    char *text = (char *)tdb_slurp(p, &n);
    text = realloc(text, n + 1);
    text[n] = '\0';
    snprintf(p, sizeof p, "%s/err.txt", dir);
    size_t ne = 0;
    char *err = (char *)tdb_slurp(p, &ne);
    if (ne)
        fprintf(stderr, "[stderr of '%s']\n%.*s", args, (int)ne, err);
    free(err);
    *out = text;
    return WEXITSTATUS(ws);
}

static void record_best(te_db *db, const te_db_target *t, const char *op, const char *params,
                        double flops, double median_s)
{
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    char key[256];
    assert_int_equal(te_op_params_parse(ctx, params, &kv), TE_OK);
    assert_true(te_op_workload_key(ctx, te_op_lookup(op), &kv, key, sizeof key) > 0);
    te_db_trial tr = {.workload = {.key = key, .flops = flops},
                      .target = *t,
                      .trace = "# the default schedule\n",
                      .status = TE_TRIAL_OK,
                      .median_s = median_s,
                      .spread_s = 0,
                      .repeats = 3,
                      .gflops = flops / median_s * 1e-9};
    assert_int_equal(te_db_record_trial(db, &tr, NULL), TE_OK);
    te_ctx_free(ctx);
}

static void test_db_roofline_prints_the_table_and_a_well_formed_svg(void **state)
{
    (void)state;
    char *out = NULL;
    /* Without peaks: a clear failure that says how to get them. */
    char storage[1024], key[512];
    te_db_target t = host_target(storage, sizeof storage, key, sizeof key);
    te_db *db = tdb_open(path, 0);
    record_best(db, &t, "matmul", "m=64,n=64,k=64", 2.0 * 64 * 64 * 64, 2e-5);
    record_best(db, &t, "relu", "m=256,n=256", 65536, 4e-5);
    record_best(db, &t, "sum", "m=128,n=512", 65536, 1e-5);
    te_db_close(db);
    assert_int_equal(cli(&out, "db roofline --db roof.db"), 1);
    free(out);
    /* tessera target without --measure names the target and has no peaks yet. */
    assert_int_equal(cli(&out, "target --db roof.db"), 0);
    assert_non_null(strstr(out, key));
    assert_non_null(strstr(out, "none recorded"));
    free(out);
    assert_int_equal(cli(&out, "target --measure --quick --db roof.db"), 0);
    assert_non_null(strstr(out, "fma   f32"));
    assert_non_null(strstr(out, "fma   f64  scalar"));
    assert_non_null(strstr(out, "copy"));
    free(out);
    assert_int_equal(cli(&out, "target --quick"), 2); /* --quick needs --measure */
    free(out);

    assert_int_equal(cli(&out, "db roofline --db roof.db --svg plot.svg"), 0);
    assert_non_null(strstr(out, "matmul;k=64,m=64,n=64;f32"));
    assert_non_null(strstr(out, "relu;m=256,n=256;f32"));
    assert_non_null(strstr(out, "sum;m=128,n=512;f32"));
    assert_non_null(strstr(out, "fraction"));
    /* relu: 65536 maxes over 2 x 256 KiB: AI 0.125 (which roof bounds it depends on the
     * measured peaks, which --quick makes noise: not checked). */
    const char *relu = strstr(out, "relu;");
    const char *eol = strchr(relu, '\n');
    assert_non_null(strstr(relu, "0.125"));
    assert_true(strstr(relu, "0.125") < eol);
    free(out);
    assert_int_equal(cli(&out, "db roofline --db roof.db --workload matmul --json"), 0);
    assert_non_null(strstr(out, "\"flops\":524288.0"));
    assert_non_null(strstr(out, "\"bytes\":49152.0"));
    assert_null(strstr(out, "relu"));
    free(out);
    assert_int_equal(cli(&out, "db roofline --db roof.db --workload nothing"), 1);
    free(out);
    assert_int_equal(cli(&out, "db check --db roof.db"), 0);
    free(out);

    char svg[400];
    snprintf(svg, sizeof svg, "%s/plot.svg", dir);
    size_t n = 0;
    char *text = (char *)tdb_slurp(svg, &n);
    assert_non_null(text);
    text = realloc(text, n + 1);
    text[n] = '\0';
    assert_non_null(strstr(text, "<svg"));
    int circles = 0;
    for (const char *p = text; (p = strstr(p, "<circle")); p++)
        circles++;
    assert_int_equal(circles, 3);
    assert_non_null(strstr(text, "compute roof"));
    assert_non_null(strstr(text, "bandwidth roof"));
    free(text);
    /* Well-formed XML, by a real parser where python3 is installed. */
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import sys, xml.etree.ElementTree as E; "
                 "r = E.parse(sys.argv[1]).getroot(); "
                 "sys.exit(0 if r.tag.endswith(\"svg\") else 1)' '%s'",
                 svg);
        assert_int_equal(system(cmd), 0);
    } else {
        fprintf(stderr, "python3 not found: the SVG was not parsed as XML\n");
    }
}

/* The text of dir/name (malloc'ed, NUL-terminated; "" when missing). */
static char *slurp_text(const char *name)
{
    char p[400];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *text = (char *)tdb_slurp(p, &n);
    text = realloc(text, n + 1);
    text[n] = '\0';
    return text;
}

/* The number after "\"name\":" in the JSON line that starts at line; NAN when absent or null. */
static double json_num(const char *line, const char *name)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", name);
    const char *eol = strchr(line, '\n');
    const char *p = strstr(line, k);
    if (!p || (eol && p > eol))
        return NAN;
    char *end;
    double v = strtod(p + strlen(k), &end);
    return end == p + strlen(k) ? NAN : v;
}

/* The JSON line of `db roofline --json` output whose workload starts with prefix, or NULL. */
static const char *roof_line(const char *out, const char *prefix)
{
    char k[200];
    snprintf(k, sizeof k, "{\"workload\":\"%s", prefix);
    return strstr(out, k);
}

/* Peaks far above anything a kernel reaches here, so every fraction is small but positive
 * and does not depend on what a noisy quick measurement of a shared machine says. */
static void record_big_peaks(te_db *db, const te_db_target *t)
{
    te_db_peak p[2] = {{"fma", "f32", "scalar", 1, 1e5, 0}, {"copy", "", "", 1, 1e5, 0}};
    assert_int_equal(te_db_record_peaks(db, t, p, 2), TE_OK);
}

/* A graph of two fused groups (matmul + bias + relu, then a tanh) tuned into a fresh database:
 * every trial stores the bytes its lowered kernel moves, the workloads their flops, and `db
 * roofline` lists both groups, which no library operator can rebuild, with flops, bytes and a
 * fraction of the roof. A library operator tuned beside them stores the bytes te_kernel_count
 * finds for the trial's own trace. */
static void test_fused_graph_groups_get_flops_bytes_and_a_fraction(void **state)
{
    (void)state;
    char gpath[400];
    snprintf(gpath, sizeof gpath, "%s/g.graph", dir);
    static const char graph[] = "input x f32[8,16]\n"
                                "const w1 f32[16,16] random seed=1 lo=-0.5 hi=0.5\n"
                                "const b1 f32[16] random seed=2\n"
                                "h1 = matmul(x, w1)\nc1 = add(h1, b1)\ny1 = relu(c1)\n"
                                "t = tanh(y1)\n"
                                "output t, y1\n";
    tdb_write(gpath, graph, sizeof graph - 1);
    char *out = NULL;
    assert_int_equal(cli(&out, "tune --graph g.graph --trials 6 --batch 3 --db roof.db"), 0);
    free(out);
    assert_int_equal(cli(&out, "tune relu --shape m=6,n=10 --trials 3 --batch 3 --db roof.db"), 0);
    free(out);

    char storage[1024], key[512];
    te_db_target t = host_target(storage, sizeof storage, key, sizeof key);
    te_db *db = tdb_open(path, 0);
    record_big_peaks(db, &t);
    /* Compulsory bytes: every argument once. matmul_add_relu reads x (8x16), w1 (16x16) and
     * b1 (16) and writes 8x16; tanh reads and writes 8x16; all f32. */
    static const struct {
        const char *prefix;
        double flops, bytes;
    } groups[] = {
        {"graph_matmul_add_relu;", 2.0 * 8 * 16 * 16 + 128 + 128, 4.0 * (128 + 256 + 16 + 128)},
        {"graph_tanh;", 128, 4.0 * (128 + 128)}};
    char gkeys[2][256] = {"", ""}, relu_key[256] = "";
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, "relu;m=6,n=10;f32", NULL, 0, &l), TE_OK);
    assert_true(l->n >= 1);
    for (size_t i = 0; i < l->n; i++) {
        te_kernel_counts k = count("relu", "m=6,n=10", l->items[i].trace);
        if (l->items[i].bytes != k.bytes)
            fail_msg("relu trial %zu: stored bytes %g, te_kernel_count of its trace %g", i,
                     l->items[i].bytes, k.bytes);
        snprintf(relu_key, sizeof relu_key, "%s", l->items[i].workload.key);
    }
    te_db_trial_list_free(l);
    /* The group keys are user-expression keys (a fourth field expr=HASH): find them. */
    te_db_trial_list *all = NULL;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT key FROM workloads ORDER BY key", -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
        for (int g = 0; g < 2; g++)
            if (!strncmp((const char *)sqlite3_column_text(st, 0), groups[g].prefix,
                         strlen(groups[g].prefix)))
                snprintf(gkeys[g], sizeof gkeys[g], "%s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
    for (int g = 0; g < 2; g++) {
        if (!*gkeys[g])
            fail_msg("no workload %s... recorded", groups[g].prefix);
        assert_non_null(strstr(gkeys[g], ";expr="));
        assert_int_equal(te_db_history(db, gkeys[g], NULL, 0, &all), TE_OK);
        assert_true(all->n >= 1);
        for (size_t i = 0; i < all->n; i++) {
            assert_true(all->items[i].workload.flops == groups[g].flops);
            if (all->items[i].status == TE_TRIAL_OK && all->items[i].bytes != groups[g].bytes)
                fail_msg("%s trial %zu: bytes %g, expected %g", gkeys[g], i, all->items[i].bytes,
                         groups[g].bytes);
        }
        te_db_trial_list_free(all);
    }
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);

    assert_int_equal(cli(&out, "db roofline --db roof.db --json"), 0);
    char *err = slurp_text("err.txt");
    assert_null(strstr(err, "left out"));
    free(err);
    for (int g = 0; g < 3; g++) {
        const char *line = roof_line(out, g < 2 ? groups[g].prefix : "relu;");
        if (!line)
            fail_msg("no roofline row for %s in:\n%s", g < 2 ? groups[g].prefix : "relu", out);
        double flops = json_num(line, "flops"), bytes = json_num(line, "bytes"),
               fraction = json_num(line, "fraction");
        if (!(flops > 0 && bytes > 0 && fraction > 0 && fraction <= 1.5))
            fail_msg("row %d: flops %g bytes %g fraction %g", g, flops, bytes, fraction);
        if (g < 2) {
            assert_true(flops == groups[g].flops);
            assert_true(bytes == groups[g].bytes);
            assert_true(fabs(json_num(line, "intensity") - flops / bytes) < 1e-12 * flops);
        } else {
            assert_true(bytes == 4.0 * 2 * 60); /* relu 6x10: read once, written once */
        }
    }
    free(out);
    /* db best prints the stored bytes beside GFLOP/s, in JSON and in the table. */
    assert_int_equal(cli(&out, "db best --workload '%s' --db roof.db --json", gkeys[1]), 0);
    assert_non_null(strstr(out, "\"bytes\":1024.0"));
    free(out);
    assert_int_equal(cli(&out, "db best --workload '%s' --db roof.db", gkeys[0]), 0);
    assert_non_null(strstr(out, "BYTES"));
    assert_non_null(strstr(out, "2.1 KiB"));
    free(out);
}

/* A version-4 file (before trials.bytes) made by the old schema's SQL migrates keeping every
 * record, its trials reading bytes as unknown; `db roofline` still reports its library operator
 * (recounted from the key) and leaves the graph group out with a message that says why and how
 * to get it in. A later trial of that group, slower than the old best, supplies its bytes:
 * compulsory bytes do not depend on the schedule. */
static void test_schema_4_database_migrates_and_still_reports_library_ops(void **state)
{
    (void)state;
    char storage[1024], key[512];
    te_db_target t = host_target(storage, sizeof storage, key, sizeof key);
    static const char tanh_key[] = "graph_tanh;in0=8x16;f32;expr=5bf43801a8f06cb7";
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    for (int v = 0; v < 4; v++)
        assert_int_equal(sqlite3_exec(h, te__schema_migration(v), NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "INSERT INTO targets(key, backend, arch, device, features, "
                                        "cores, compiler) VALUES(?1, 'c', ?2, ?3, ?4, ?5, ?6)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, t.arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, t.device, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, t.features, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, t.cores);
    sqlite3_bind_text(st, 6, t.compiler, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    char sql[2048];
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 4;"
             "INSERT INTO workloads(key, op, flops) VALUES('relu;m=256,n=256;f32', 'relu', 65536),"
             "('%s', 'graph_tanh', 128);"
             "INSERT INTO target_peaks VALUES(1, 'fma', 'f32', 'scalar', 1, 1e5, 5, 'x'),"
             "(1, 'copy', '', '', 1, 1e5, 5, 'x');"
             "INSERT INTO trials(uid, workload_id, target_id, trace, trace_hash, status, "
             "median_s, gflops, created_us, tessera_version) VALUES"
             "('u1', 1, 1, '# the default schedule\n', 'h1', 'ok', 4e-5, 65536 / 4e-5 * 1e-9, 7, "
             "'0.0.1'),"
             "('u2', 2, 1, 'whatever', 'h2', 'ok', 1e-6, 128 / 1e-6 * 1e-9, 8, '0.0.1');",
             TE_DB_APPLICATION_ID, tanh_key);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);

    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.schema_version, 5);
    assert_int_equal(in.n_trials, 2);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, tanh_key, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 1);
    assert_string_equal(l->items[0].uid, "u2");
    assert_true(isnan(l->items[0].bytes));
    te_db_trial_list_free(l);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);

    char *out = NULL;
    assert_int_equal(cli(&out, "db roofline --db roof.db --json"), 0);
    const char *relu = roof_line(out, "relu;m=256,n=256;f32");
    assert_non_null(relu);
    assert_true(json_num(relu, "bytes") == 2.0 * 4 * 256 * 256);
    assert_true(json_num(relu, "flops") == 65536);
    assert_null(strstr(out, "graph_tanh"));
    free(out);
    char *err = slurp_text("err.txt");
    assert_non_null(strstr(err, "graph_tanh"));
    assert_non_null(strstr(err, "recorded before schema version 5"));
    assert_non_null(strstr(err, "tune it again"));
    free(err);

    /* A retune records a slower trial that knows its bytes: the old best now gets them. */
    db = tdb_open(path, 0);
    te_db_trial tr = {.workload = {.key = tanh_key, .flops = 128},
                      .target = t,
                      .trace = "another",
                      .status = TE_TRIAL_OK,
                      .median_s = 2e-6,
                      .repeats = 3,
                      .gflops = 128 / 2e-6 * 1e-9,
                      .bytes = 1024};
    assert_int_equal(te_db_record_trial(db, &tr, NULL), TE_OK);
    te_db_close(db);
    assert_int_equal(cli(&out, "db roofline --db roof.db --json --workload graph_"), 0);
    const char *g = roof_line(out, "graph_tanh;");
    assert_non_null(g);
    assert_true(json_num(g, "bytes") == 1024);
    assert_true(json_num(g, "flops") == 128);
    assert_true(json_num(g, "median_s") == 1e-6); /* still the old, faster best */
    free(out);

    /* check finds bytes written around the API that are not positive. */
    expect_corrupt_after(path,
                         "INSERT INTO trials(uid, workload_id, target_id, trace, trace_hash, "
                         "status, created_us, tessera_version, bytes) "
                         "VALUES('u9', 2, 1, 'x', 'h9', 'timeout', 9, 'x', -8)",
                         "1 trials whose bytes moved are not positive");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_counts_two_flops_per_product_and_its_three_matrices),
        cmocka_unit_test(test_elementwise_and_reduction_counts),
        cmocka_unit_test_setup_teardown(test_peaks_record_replace_and_refuse_bad_entries, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_version_3_database_is_migrated_keeping_every_record,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_db_roofline_prints_the_table_and_a_well_formed_svg,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_fused_graph_groups_get_flops_bytes_and_a_fraction,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_schema_4_database_migrates_and_still_reports_library_ops, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
