/* The graph commands through the real binary: `tessera run` (default schedules, --check,
 * --json, --input files, bad usage), `tessera tune --graph` (one task per distinct workload:
 * two identical layers tune once) for a few real trials on tiny shapes into a temporary
 * database, then `tessera run --db` reporting groups compiled from that database;
 * `--precision bf16` on run (--check within the bf16 bound of the f32 graph), fuse and tune, the
 * error on a bad value and on a CPU without bf16 dot products; reshape views (no kernel) through
 * fuse, run --check, tune --graph (no task) and gen --graph (a runner that compiles and gives
 * tessera run's outputs). */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/graph.h"
#include "tessera/npy.h"
#include "tessera/target.h"
#include "testutil.h"

/* Two identical layers (matmul + bias + relu on 8x16 by 16x16), then a tanh (the second
 * layer is also an output, so the tanh stays a group of its own). */
static const char k_graph[] = "input x f32[8,16]\n"
                              "const w1 f32[16,16] random seed=1 lo=-0.5 hi=0.5\n"
                              "const b1 f32[16] random seed=2\n"
                              "const w2 f32[16,16] random seed=3 lo=-0.5 hi=0.5\n"
                              "const b2 f32[16] random seed=4\n"
                              "h1 = matmul(x, w1)\nc1 = add(h1, b1)\ny1 = relu(c1)\n"
                              "h2 = matmul(y1, w2)\nc2 = add(h2, b2)\ny2 = relu(c2)\n"
                              "t = tanh(y2)\n"
                              "output t, y2\n";

/* A dense layer (matmul + bias + gelu) into an MLP gate: both lowered by --precision bf16. */
static const char k_bf16_graph[] = "input x f32[16,64]\n"
                                   "const w1 f32[64,64] random seed=1\n"
                                   "const b1 f32[64] random seed=2\n"
                                   "const wg f32[64,32] random seed=3\n"
                                   "const wu f32[64,32] random seed=4\n"
                                   "h = matmul(x, w1)\nhb = add(h, b1)\ny = gelu(hb)\n"
                                   "g = mlp_gate(y, wg, wu)\n"
                                   "output g\n";

/* Lone reshapes: of the intermediate h (read twice), of the input x and of the constant c. */
static const char k_views_graph[] = "input x f32[8,16]\n"
                                    "const w f32[16,16] random seed=1 lo=-0.5 hi=0.5\n"
                                    "const c f32[16,8] random seed=2 lo=-0.5 hi=0.5\n"
                                    "h = matmul(x, w)\n"
                                    "hr = reshape(h) shape=16:8\n"
                                    "s = softmax(hr)\n"
                                    "t = tanh(hr)\n"
                                    "y = add(s, t)\n"
                                    "xr = reshape(x) shape=16:8\n"
                                    "cr = reshape(c) shape=8:16\n"
                                    "m = matmul(xr, cr)\n"
                                    "output y, m\n";

static char g_dir[64], g_graph[128], g_bf16[128], g_views[128];

static char *run(const char *cmd, int *status)
{
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    static char out[1 << 17];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_graph_cli_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_graph, sizeof g_graph, "%s/two_layers.graph", g_dir);
    FILE *f = fopen(g_graph, "w");
    if (!f)
        return -1;
    fputs(k_graph, f);
    fclose(f);
    snprintf(g_bf16, sizeof g_bf16, "%s/mlp.graph", g_dir);
    f = fopen(g_bf16, "w");
    if (!f)
        return -1;
    fputs(k_bf16_graph, f);
    fclose(f);
    snprintf(g_views, sizeof g_views, "%s/views.graph", g_dir);
    f = fopen(g_views, "w");
    if (!f)
        return -1;
    fputs(k_views_graph, f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_run_checks_every_group(void **state)
{
    (void)state;
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "%s run %s --rules %s/cpu.rules --check --runs 3 2>&1", TESSERA_CLI,
             g_graph, TE_RULES_DIR);
    char *out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "end to end: "));
    assert_non_null(strstr(out, "(median of 3 runs"));
    assert_non_null(strstr(out, "every group output matches the reference"));
    /* Untuned: the tuner's heuristic default (te_tune_default_schedule), and why. */
    assert_int_equal(count(out, "default: "), 3);
    assert_int_equal(count(out, " heuristic ("), 3);
    assert_int_equal(count(out, "(no database)"), 3);
    assert_int_equal(count(out, " ok  "), 3);
    assert_null(strstr(out, "MISMATCH"));

    snprintf(cmd, sizeof cmd, "%s run %s --rules %s/cpu.rules --check --json --runs 2 2>&1",
             TESSERA_CLI, g_graph, TE_RULES_DIR);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"kernels\": 3"));
    assert_non_null(strstr(out, "\"check\": true"));
    assert_int_equal(count(out, "\"from_db\": false"), 3);
}

static void test_run_reads_inputs_and_refuses_bad_ones(void **state)
{
    (void)state;
    char path[160], cmd[1024];
    snprintf(path, sizeof path, "%s/x.f32", g_dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 8 * 16; i++) {
        float x = (float)((i % 7) - 3) * 0.25f + 0.1f;
        fwrite(&x, sizeof x, 1, f);
    }
    fclose(f);
    int st;
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s --check --runs 1 2>&1", TESSERA_CLI, g_graph,
             path);
    char *out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    snprintf(cmd, sizeof cmd, "%s run %s --input nope=%s 2>&1", TESSERA_CLI, g_graph, path);
    out = run(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "no input 'nope'"));
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s 2>&1", TESSERA_CLI, g_graph, g_graph);
    out = run(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "wrong size"));
    snprintf(cmd, sizeof cmd, "%s run 2>&1", TESSERA_CLI);
    out = run(cmd, &st);
    assert_int_equal(st, 2);
    snprintf(cmd, sizeof cmd, "%s run %s --threads 0 2>&1", TESSERA_CLI, g_graph);
    out = run(cmd, &st);
    assert_int_equal(st, 2);
}

static void test_tune_graph_then_run_from_the_database(void **state)
{
    (void)state;
    char db[160], cmd[1024];
    snprintf(db, sizeof db, "%s/tune.db", g_dir);
    int st;
    snprintf(cmd, sizeof cmd, "%s tune --graph %s --trials 8 --batch 4 --db %s 2>&1", TESSERA_CLI,
             g_graph, db);
    char *out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    /* The two layers are one workload: 3 groups, 2 tasks. */
    assert_non_null(strstr(out, "3 fused groups, 2 distinct workloads"));
    assert_non_null(strstr(out, "graph_matmul_add_relu;"));
    snprintf(cmd, sizeof cmd, "%s run %s --db %s --check --runs 2 2>&1", TESSERA_CLI, g_graph, db);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    /* Both layers compile from the database: the model's fastest whole run (the selection
     * recorded it), which holds the one tuned workload's schedule for both. */
    assert_true(count(out, "database: whole-run trial ") >= 2);
    assert_non_null(strstr(out, "every group output matches the reference"));
    snprintf(cmd, sizeof cmd, "%s tune --graph %s/missing.graph --db %s 2>&1", TESSERA_CLI, g_dir,
             db);
    out = run(cmd, &st);
    assert_int_equal(st, 1);
    snprintf(cmd, sizeof cmd, "%s tune matmul --graph %s --db %s 2>&1", TESSERA_CLI, g_graph, db);
    out = run(cmd, &st);
    assert_int_equal(st, 2);
}

static void test_precision_bf16_runs_checks_and_refuses(void **state)
{
    (void)state;
    char cmd[1024];
    int st;
    te_target host = te_target_host();
    int has = te_graph_bf16_supported(&host);
    snprintf(cmd, sizeof cmd,
             "%s run %s --rules %s/cpu.rules --precision bf16 --check --runs 2 2>&1", TESSERA_CLI,
             g_bf16, TE_RULES_DIR);
    char *out = run(cmd, &st);
    if (!has) { /* a clear error, not a silent f32 run */
        assert_int_equal(st, 1);
        assert_non_null(strstr(out, "--precision bf16: this CPU has no bf16 dot product"));
    } else {
        if (st != 0)
            fail_msg("exit %d:\n%s", st, out);
        assert_non_null(strstr(out, "lower_bf16: h (matmul 16x64x64) -> cast to bf16"));
        assert_non_null(strstr(out, "lower_bf16: g (mlp_gate 16x64x32)"));
        assert_non_null(strstr(out, "lower_bf16: 2 matmul nodes lowered to bf16"));
        /* checked against the f32 graph within the bf16 bound, on the bf16 intrinsics */
        assert_true(count(out, "(bf16 bound ") >= 2);
        assert_true(count(out, "tensorize avx512bf16_") + count(out, "amx_bf16") >= 2);
        assert_non_null(strstr(out, "mlp_gate_vnni"));
        assert_non_null(strstr(out, "every group output matches the reference"));
        assert_null(strstr(out, "MISMATCH"));
    }
    /* f32 (the default, and given) lowers nothing */
    snprintf(cmd, sizeof cmd, "%s run %s --precision f32 --runs 1 2>&1", TESSERA_CLI, g_bf16);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_null(strstr(out, "lower_bf16"));
    /* the same on a CPU that lacks the instructions ($TESSERA_ISA_EXCLUDE) */
    snprintf(cmd, sizeof cmd,
             "TESSERA_ISA_EXCLUDE=avx512_bf16,amx_bf16 %s run %s --precision bf16 --runs 1 2>&1",
             TESSERA_CLI, g_bf16);
    out = run(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "--precision bf16: this CPU has no bf16 dot product"));
    /* bad values are usage errors naming the option, for every command */
    static const char *const cmds[] = {"run %s", "fuse %s", "tune --graph %s", "gen --graph %s",
                                       "bench --graph %s"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, cmds[i], g_bf16);
        snprintf(cmd, sizeof cmd, "%s %s --precision fp16 2>&1", TESSERA_CLI, sub);
        out = run(cmd, &st);
        if (st != 2 || !strstr(out, "--precision takes f32 or bf16, not 'fp16'"))
            fail_msg("%s: exit %d:\n%s", cmd, st, out);
    }
    snprintf(cmd, sizeof cmd, "%s tune matmul --shape m=8,n=8,k=8 --precision bf16 2>&1",
             TESSERA_CLI);
    out = run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "--precision applies to --graph GRAPH and MODEL.onnx"));
    if (!has)
        return;
    /* fuse: the lowering's log, then the plan of the lowered graph */
    snprintf(cmd, sizeof cmd, "%s fuse %s --rules %s/cpu.rules --precision bf16 2>&1", TESSERA_CLI,
             g_bf16, TE_RULES_DIR);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "lower_bf16: g (mlp_gate"));
    assert_non_null(strstr(out, "group 2: mlp_gate_vnni [branch]"));
    assert_non_null(strstr(out, "h (matmul_vnni), hb (add), y (gelu)"));
    snprintf(cmd, sizeof cmd, "%s fuse %s --rules %s/cpu.rules --precision bf16 --check 2>&1",
             TESSERA_CLI, g_bf16, TE_RULES_DIR);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_true(count(out, "(bf16 bound ") >= 2);
    assert_non_null(strstr(out, "all outputs match"));
}

static te_npy_array read_npy(const char *dir, const char *name)
{
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    te_npy_array a;
    if (te_npy_read(path, &a, err, sizeof err))
        fail_msg("%s", err);
    return a;
}

static void test_reshape_views_run_tune_and_generate_without_kernels(void **state)
{
    (void)state;
    char cmd[2048];
    int st;
    /* fuse: 4 kernels, 3 views, each saying whose storage it shares */
    snprintf(cmd, sizeof cmd, "%s fuse %s --rules %s/cpu.rules 2>&1", TESSERA_CLI, g_views,
             TE_RULES_DIR);
    char *out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "fusion plan: 8 nodes -> 4 kernels"));
    assert_non_null(strstr(out, "3 reshape views, no kernel"));
    assert_int_equal(count(out, ": view [view]"), 3);
    assert_non_null(strstr(out, "shares the storage of 'x'"));
    assert_non_null(strstr(out, "shares the storage of 'c'"));
    assert_non_null(strstr(out, "shares the storage of 'h'"));
    snprintf(cmd, sizeof cmd, "%s fuse %s --json 2>&1", TESSERA_CLI, g_views);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"kernels\":4,\"views\":3"));
    assert_int_equal(count(out, "\"view\":true"), 3);
    snprintf(cmd, sizeof cmd, "%s fuse %s --dot 2>&1", TESSERA_CLI, g_views);
    out = run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "-> 4 kernels (3 reshape views)"));
    assert_int_equal(count(out, "style=dotted"), 3);
    snprintf(cmd, sizeof cmd, "%s fuse %s --check 2>&1", TESSERA_CLI, g_views);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "check: 4 kernels, all outputs match"));

    /* run --check: every group output, views read through their roots, matches */
    snprintf(cmd, sizeof cmd, "%s run %s --check --runs 2 --output-dir %s/vt 2>&1", TESSERA_CLI,
             g_views, g_dir);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "8 nodes -> 4 kernels (0 from the database; 3 reshape views"));
    assert_non_null(strstr(out, "every group output matches the reference"));
    assert_int_equal(count(out, "(reshape, no copy)"), 3);
    assert_null(strstr(out, "MISMATCH"));
    snprintf(cmd, sizeof cmd, "%s run %s --check --json --runs 1 --threads 2 2>&1", TESSERA_CLI,
             g_views);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "\"kernels\": 4, \"views\": 3"));
    assert_int_equal(count(out, "\"view\": true"), 3);
    assert_non_null(strstr(out, "\"check\": true"));

    /* tune: the views are no task */
    snprintf(cmd, sizeof cmd, "%s tune --graph %s --trials 4 --batch 4 --db %s/views.db 2>&1",
             TESSERA_CLI, g_views, g_dir);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(
        strstr(out, "4 fused groups, 4 distinct workloads (3 reshape views: no kernel"));
    assert_null(strstr(out, "graph_reshape"));

    /* gen: 4 kernels, the views as V_VIEW entries; the runner gives tessera run's outputs */
    snprintf(cmd, sizeof cmd, "%s gen --graph %s --name vw -o %s/vk 2>&1", TESSERA_CLI, g_views,
             g_dir);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "4 kernels for 7 fused groups"));
    snprintf(cmd, sizeof cmd,
             "cd %s/vk && grep -c 'V_VIEW, ' runner.c && grep -c '/\\* group [0-9]*: view of ' "
             "runner.c && cc -O2 -std=c99 -Wall -Werror -o runner runner.c vw_k*.c -lm 2>&1 && "
             "./runner x=%s/vt/x.npy -o %s/vg 2>&1",
             g_dir, g_dir, g_dir);
    out = run(cmd, &st);
    if (st != 0)
        fail_msg("exit %d:\n%s", st, out);
    assert_true(!strncmp(out, "3\n3\n", 4));
    char vt[128], vg[128];
    snprintf(vt, sizeof vt, "%s/vt", g_dir);
    snprintf(vg, sizeof vg, "%s/vg", g_dir);
    static const char *const outs[] = {"y", "m"};
    for (int i = 0; i < 2; i++) {
        te_npy_array want = read_npy(vt, outs[i]), got = read_npy(vg, outs[i]);
        assert_int_equal(got.numel, want.numel);
        double worst = tt_max_rel_diff_f32(got.data, want.data, (size_t)want.numel);
        te_npy_array_free(&want);
        te_npy_array_free(&got);
        if (!(worst <= 1e-5))
            fail_msg("the runner's '%s' differs from tessera run's by %g", outs[i], worst);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_checks_every_group),
        cmocka_unit_test(test_run_reads_inputs_and_refuses_bad_ones),
        cmocka_unit_test(test_tune_graph_then_run_from_the_database),
        cmocka_unit_test(test_precision_bf16_runs_checks_and_refuses),
        cmocka_unit_test(test_reshape_views_run_tune_and_generate_without_kernels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
