/* The model commands through the real binaries, on the encoder layer examples/onnx_model.c
 * writes as ONNX: `tessera run MODEL.onnx` (--check, .npy inputs and outputs, seeded random
 * inputs said so, --bench at two thread counts, the errors: missing file, bad --input name, an
 * .npy of the wrong shape or dtype, --shape on a graph), `tessera tune MODEL.onnx` for a few
 * trials then `tessera run --db` using the records, and `tessera gen MODEL.onnx`: the runner it
 * writes is compiled with cc, run, and its output compared with `tessera run`'s. */
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

#include "tessera/npy.h"
#include "testutil.h"

static char g_dir[256], g_model[512];

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

static char *run_ok(const char *cmd)
{
    int st;
    char *out = run(cmd, &st);
    if (st != 0)
        fail_msg("'%s' exited %d:\n%s", cmd, st, out);
    return out;
}

static void expect(const char *cmd, int status, const char *needle)
{
    int st;
    char *out = run(cmd, &st);
    if (st != status || !strstr(out, needle))
        fail_msg("'%s': exit %d (want %d), output (want '%s'):\n%s", cmd, st, status, needle, out);
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
    if (tt_tmpdir_make(g_dir, sizeof g_dir, "model_cli"))
        return -1;
    snprintf(g_model, sizeof g_model, "%s/enc.onnx", g_dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -o %s --seq 8 --hidden 16", EXAMPLE_ONNX_MODEL, g_model);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return tt_tmpdir_remove(g_dir);
}

/* The input: f32[8, 16], random, never zero. */
static const char *write_input(const char *name, te_dtype dt, int nd, const int64_t *shape)
{
    static float data[8 * 16 * 2];
    tt_rng r;
    tt_rng_seed(&r, 5);
    tt_fill_f32(&r, data, sizeof data / sizeof data[0]);
    const char *path = tt_path_in(g_dir, name);
    char err[256];
    assert_int_equal(te_npy_write(path, dt, nd, shape, data, err, sizeof err), TE_OK);
    return path;
}

static te_npy_array read_npy(const char *path)
{
    te_npy_array a;
    char err[512];
    if (te_npy_read(path, &a, err, sizeof err))
        fail_msg("%s", err);
    return a;
}

/* The generated runner's output (got, under g_dir) equals tessera run's (want) within 1e-5. */
static void expect_same_output(const char *want_path, const char *got_path)
{
    te_npy_array want = read_npy(tt_path_in(g_dir, want_path));
    te_npy_array got = read_npy(tt_path_in(g_dir, got_path));
    assert_int_equal(got.nbytes, want.nbytes);
    double worst = tt_max_rel_diff_f32(got.data, want.data, (size_t)want.numel);
    te_npy_array_free(&want);
    te_npy_array_free(&got);
    if (!(worst <= 1e-5))
        fail_msg("the generated runner differs from tessera run by %g", worst);
}

static void test_run_model_checks_reads_npy_and_writes_npy(void **state)
{
    (void)state;
    char cmd[2048], in[512], outdir[512];
    snprintf(in, sizeof in, "%s", write_input("x.npy", TE_F32, 2, (int64_t[]){8, 16}));
    snprintf(outdir, sizeof outdir, "%s/out", g_dir);
    snprintf(cmd, sizeof cmd, "%s run %s --check --runs 2 --input x=%s --output-dir %s 2>&1",
             TESSERA_CLI, g_model, in, outdir);
    char *out = run_ok(cmd);
    assert_non_null(strstr(out, "model: "));
    assert_non_null(strstr(out, "every group output matches the reference"));
    assert_null(strstr(out, "random uniform")); /* the only input was given */
    assert_null(strstr(out, "MISMATCH"));
    te_npy_array y = read_npy(tt_path_in(outdir, "y.npy"));
    assert_int_equal(y.dtype, TE_F32);
    assert_int_equal(y.ndim, 2);
    assert_int_equal(y.shape[0], 8);
    assert_int_equal(y.shape[1], 16);
    for (int64_t i = 0; i < y.numel; i++)
        assert_true(isfinite(((float *)y.data)[i]));
    te_npy_array_free(&y);

    /* Without --input: random, seeded, and said so; the same seed gives the same output. */
    snprintf(cmd, sizeof cmd, "%s run %s --runs 1 --seed 9 --output-dir %s/r1 2>&1", TESSERA_CLI,
             g_model, g_dir);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "input 'x' f32[8,16]: random uniform in [-1, 1) (seed 9"));
    snprintf(cmd, sizeof cmd, "%s run %s --runs 1 --seed 9 --output-dir %s/r2 2>&1", TESSERA_CLI,
             g_model, g_dir);
    run_ok(cmd);
    te_npy_array a = read_npy(tt_path_in(g_dir, "r1/y.npy"));
    te_npy_array b = read_npy(tt_path_in(g_dir, "r2/y.npy"));
    assert_int_equal(a.nbytes, b.nbytes);
    assert_memory_equal(a.data, b.data, a.nbytes);
    te_npy_array_free(&a);
    te_npy_array_free(&b);

    /* --bench: both thread counts and the plan summary; --json carries them. */
    snprintf(cmd, sizeof cmd, "%s run %s --bench --threads 1,2 --runs 2 2>&1", TESSERA_CLI,
             g_model);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "bench: threads 1: "));
    assert_non_null(strstr(out, "bench: threads 2: "));
    assert_non_null(strstr(out, "peak intermediate memory"));
    assert_non_null(strstr(out, " groups, "));
    snprintf(cmd, sizeof cmd, "%s run %s --bench --check --json --runs 1 2>/dev/null", TESSERA_CLI,
             g_model);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "\"bench\": [{\"threads\": 1, "));
    assert_non_null(strstr(out, "{\"threads\": 2, "));
    assert_non_null(strstr(out, "\"check\": true"));
    assert_non_null(strstr(out, "\"pool_bytes\": "));
}

static void test_run_model_refuses_bad_files_names_and_shapes(void **state)
{
    (void)state;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s run %s/missing.onnx 2>&1", TESSERA_CLI, g_dir);
    expect(cmd, 1, "missing.onnx");
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s/missing.npy 2>&1", TESSERA_CLI, g_model,
             g_dir);
    expect(cmd, 1, "missing.npy: cannot open");
    snprintf(cmd, sizeof cmd, "%s run %s --input nope=%s 2>&1", TESSERA_CLI, g_model,
             write_input("x.npy", TE_F32, 2, (int64_t[]){8, 16}));
    expect(cmd, 1, "the model has no input 'nope' (inputs: x)");
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s 2>&1", TESSERA_CLI, g_model,
             write_input("wrong_shape.npy", TE_F32, 2, (int64_t[]){16, 8}));
    expect(cmd, 1, "holds f32[16,8] but input 'x' is f32[8,16]");
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s 2>&1", TESSERA_CLI, g_model,
             write_input("wrong_dtype.npy", TE_F64, 2, (int64_t[]){8, 16}));
    expect(cmd, 1, "holds f64[8,16] but input 'x' is f32[8,16]");
    /* A corrupt .npy */
    const char *bad = tt_path_in(g_dir, "corrupt.npy");
    FILE *f = fopen(bad, "wb");
    assert_non_null(f);
    fputs("\x93NUMPX", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s 2>&1", TESSERA_CLI, g_model, bad);
    expect(cmd, 1, "not a .npy file");
    /* Usage. */
    snprintf(cmd, sizeof cmd, "%s run %s --threads 1,2 2>&1", TESSERA_CLI, g_model);
    expect(cmd, 2, "a list with --bench");
    snprintf(cmd, sizeof cmd, "%s run %s --input =x.npy 2>&1", TESSERA_CLI, g_model);
    expect(cmd, 2, "--input takes NAME=FILE");
    snprintf(cmd, sizeof cmd, "%s run --help", TESSERA_CLI);
    expect(cmd, 0, "MODEL.onnx");
    snprintf(cmd, sizeof cmd, "%s tune --help", TESSERA_CLI);
    expect(cmd, 0, "MODEL.onnx");
    snprintf(cmd, sizeof cmd, "%s gen --help", TESSERA_CLI);
    expect(cmd, 0, "MODEL.onnx");
    /* --shape is for models. */
    const char *graph = tt_path_in(g_dir, "g.graph");
    f = fopen(graph, "w");
    assert_non_null(f);
    fputs("input x f32[4,4]\ny = relu(x)\noutput y\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s run %s --shape x=2x2 2>&1", TESSERA_CLI, graph);
    expect(cmd, 2, "--shape applies to ONNX models");
}

static void test_tune_model_then_run_and_gen_from_the_database(void **state)
{
    (void)state;
    char cmd[4096], db[512], kdir[512], in[512];
    snprintf(db, sizeof db, "%s/tune.db", g_dir);
    snprintf(kdir, sizeof kdir, "%s/kernels", g_dir);
    snprintf(in, sizeof in, "%s", write_input("x.npy", TE_F32, 2, (int64_t[]){8, 16}));
    snprintf(cmd, sizeof cmd, "%s tune %s --trials 8 --batch 4 --db %s 2>&1", TESSERA_CLI, g_model,
             db);
    char *out = run_ok(cmd);
    assert_non_null(strstr(out, "fused groups, "));
    snprintf(cmd, sizeof cmd,
             "%s run %s --db %s --check --runs 1 --input x=%s --output-dir %s/t 2>&1", TESSERA_CLI,
             g_model, db, in, g_dir);
    out = run_ok(cmd);
    /* the schedules of the model's fastest whole run (the selection after the tune) */
    assert_true(count(out, "database: whole-run trial ") >= 1);
    assert_non_null(strstr(out, "every group output matches the reference"));

    /* gen: kernels, weights, runner; compile the runner and compare with tessera run. */
    snprintf(cmd, sizeof cmd, "%s gen %s --db %s -o %s 2>&1", TESSERA_CLI, g_model, db, kdir);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "from database records"));
    assert_null(strstr(out, " 0 from database records"));
    snprintf(cmd, sizeof cmd,
             "cd %s && cc -O2 -std=c99 -Wall -Werror -o runner runner.c enc_k*.c -lm 2>&1 && "
             "./runner x=%s -o %s/g 2>&1",
             kdir, in, g_dir);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "wrote "));
    expect_same_output("t/y.npy", "g/y.npy");
    /* The runner's own errors. */
    snprintf(cmd, sizeof cmd, "%s/runner 2>&1", kdir);
    expect(cmd, 2, "no data for input 'x'");
    snprintf(cmd, sizeof cmd, "%s/runner x=%s 2>&1", kdir,
             write_input("wrong_shape.npy", TE_F32, 2, (int64_t[]){16, 8}));
    expect(cmd, 1, "of shape (8, 16) for 'x'");
    /* The Makefile builds it too. */
    snprintf(cmd, sizeof cmd, "make -s -C %s clean && make -s -C %s CFLAGS=-O1 2>&1", kdir, kdir);
    run_ok(cmd);
    /* Bad usage of gen on a model. */
    snprintf(cmd, sizeof cmd, "%s gen %s --target cuda -o %s 2>&1", TESSERA_CLI, g_model, kdir);
    expect(cmd, 2, "C target only");
}

/* A model whose products have more than 16 rows: its constant weights are packed into column
 * panels (docs/ARCHITECTURE.md); gen writes them as <w>_panels<nb>.npy and its runner, which
 * passes those, gives tessera run's output. */
static void test_gen_of_packed_weights_matches_run(void **state)
{
    (void)state;
    char cmd[4096], model[512], kdir[512], in[512];
    snprintf(model, sizeof model, "%s/enc32.onnx", g_dir);
    snprintf(kdir, sizeof kdir, "%s/k32", g_dir);
    snprintf(cmd, sizeof cmd, "%s -o %s --seq 24 --hidden 16", EXAMPLE_ONNX_MODEL, model);
    assert_int_equal(system(cmd), 0);
    static float data[24 * 16];
    tt_rng r;
    tt_rng_seed(&r, 6);
    tt_fill_f32(&r, data, 24 * 16);
    snprintf(in, sizeof in, "%s", tt_path_in(g_dir, "x24.npy"));
    char err[256];
    assert_int_equal(te_npy_write(in, TE_F32, 2, (int64_t[]){24, 16}, data, err, sizeof err),
                     TE_OK);
    snprintf(cmd, sizeof cmd, "%s run %s --check --runs 1 --input x=%s --output-dir %s/t24 2>&1",
             TESSERA_CLI, model, in, g_dir);
    char *out = run_ok(cmd);
    assert_non_null(strstr(out, "every group output matches the reference"));
    snprintf(cmd, sizeof cmd,
             "%s gen %s -o %s 2>&1 && ls %s/weights | grep -c _panels && cd %s && "
             "cc -O2 -std=c99 -Wall -Werror -o runner runner.c enc32_k*.c -lm 2>&1 && "
             "./runner x=%s -o %s/g24 2>&1",
             TESSERA_CLI, model, kdir, kdir, kdir, in, g_dir);
    out = run_ok(cmd);
    assert_non_null(strstr(out, "wrote "));
    expect_same_output("t24/y.npy", "g24/y.npy");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_of_packed_weights_matches_run),
        cmocka_unit_test(test_run_model_checks_reads_npy_and_writes_npy),
        cmocka_unit_test(test_run_model_refuses_bad_files_names_and_shapes),
        cmocka_unit_test(test_tune_model_then_run_and_gen_from_the_database),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
