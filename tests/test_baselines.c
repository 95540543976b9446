/* The baselines of `tessera bench` and `tessera tune` (tools/baselines.c): which OpenBLAS cores
 * fit which CPUs (a pure function), oneDNN missing is a note and not a failure, timing and
 * choosing helpers, and through the real binary (TESSERA_CLI) the JSON fields of `tessera bench`,
 * the re-exec path (forced with the TESSERA_TEST_OPENBLAS_CORE test hook) and the note for an
 * absent oneDNN. Nothing here sets OPENBLAS_CORETYPE: only a benchmark process sets it for
 * itself. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tools/baselines.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/baselines.cmake"
#endif

static const te_bl_cpu sse_cpu = {1, 0, 0, 0, 0, 0, 0};
static const te_bl_cpu avx_cpu = {1, 0, 1, 0, 0, 0, 0};
static const te_bl_cpu intel_avx2 = {1, 0, 1, 1, 1, 0, 0};
static const te_bl_cpu amd_avx2 = {0, 1, 1, 1, 1, 0, 0};
static const te_bl_cpu intel_avx512 = {1, 0, 1, 1, 1, 1, 0};
static const te_bl_cpu intel_avx512_bf16 = {1, 0, 1, 1, 1, 1, 1};
static const te_bl_cpu amd_avx512_bf16 = {0, 1, 1, 1, 1, 1, 1};

static void expect(const char *core, const te_bl_cpu *cpu, te_bl_core_class k, const char *want)
{
    const char *w = "unset";
    te_bl_core_class got = te_bl_classify_core(core, cpu, &w);
    if (got != k || (want ? !w || strcmp(w, want) : w != NULL))
        fail_msg("core %s: class %d want %s, expected class %d want %s", core ? core : "(null)",
                 (int)got, w ? w : "(null)", (int)k, want ? want : "(null)");
}

static void test_classify_generic_cores(void **state)
{
    (void)state;
    /* The trap of ANCHORS.md: a recent Xeon with AVX-512 and BF16 gets Prescott. */
    expect("Prescott", &intel_avx512_bf16, TE_BL_CORE_GENERIC, "Cooperlake");
    expect("Prescott", &intel_avx512, TE_BL_CORE_GENERIC, "SkylakeX");
    expect("Core2", &intel_avx2, TE_BL_CORE_GENERIC, "Haswell");
    expect("Nehalem", &amd_avx2, TE_BL_CORE_GENERIC, "Zen");
    expect("Sandybridge", &intel_avx2, TE_BL_CORE_GENERIC, "Haswell");
    expect("Haswell", &intel_avx512, TE_BL_CORE_GENERIC, "SkylakeX");
    expect("Zen", &amd_avx512_bf16, TE_BL_CORE_GENERIC, "Cooperlake");
    expect("Barcelona", &avx_cpu, TE_BL_CORE_GENERIC, "Sandybridge");
    expect("prescott", &intel_avx2, TE_BL_CORE_GENERIC, "Haswell"); /* case-insensitive */
}

static void test_classify_fitting_and_unknown_cores(void **state)
{
    (void)state;
    expect("Cooperlake", &intel_avx512_bf16, TE_BL_CORE_FITS, NULL);
    expect("SkylakeX", &intel_avx512_bf16, TE_BL_CORE_FITS, NULL);
    expect("SapphireRapids", &intel_avx512_bf16, TE_BL_CORE_FITS, NULL);
    expect("Zen", &amd_avx2, TE_BL_CORE_FITS, NULL);
    expect("Haswell", &amd_avx2, TE_BL_CORE_FITS, NULL);
    expect("SkylakeX", &intel_avx2, TE_BL_CORE_FITS, NULL); /* wider than needed: not generic */
    expect("Sandybridge", &avx_cpu, TE_BL_CORE_FITS, NULL);
    expect("Prescott", &sse_cpu, TE_BL_CORE_FITS, NULL); /* nothing wider on this CPU */
    expect("Frobnicator", &intel_avx512, TE_BL_CORE_UNKNOWN, NULL);
    expect(NULL, &intel_avx512, TE_BL_CORE_UNKNOWN, NULL);
    assert_int_equal(te_bl_core_level("Zen"), TE_BL_LEVEL_AVX2);
    assert_int_equal(te_bl_cpu_level(&intel_avx512_bf16), TE_BL_LEVEL_AVX512);
    /* want may be NULL */
    assert_int_equal(te_bl_classify_core("Prescott", &amd_avx2, NULL), TE_BL_CORE_GENERIC);
}

static void test_cpu_detect_consistent(void **state)
{
    (void)state;
    te_bl_cpu c;
    te_bl_cpu_detect(&c);
    assert_false(c.intel && c.amd);
    assert_true(!c.avx512 || c.avx2);
    assert_true(!c.avx2 || (c.avx && c.fma));
    assert_true(!c.avx512_bf16 || c.avx512);
}

static int g_calls[3];

static void count0(void *arg)
{
    (void)arg;
    g_calls[0]++;
}

static void count1(void *arg)
{
    (void)arg;
    g_calls[1]++;
    usleep(200);
}

static void count2(void *arg)
{
    (void)arg;
    g_calls[2]++;
    usleep(3000); /* longer than TE_BL_MIN_SAMPLE_S: one call per sample */
}

static void test_time_alternating_and_choose(void **state)
{
    (void)state;
    te_bl_run_fn fn[3] = {count0, count1, count2};
    void *arg[3] = {NULL, NULL, NULL};
    double med[3];
    assert_int_equal(te_bl_time_alternating(3, fn, arg, 5, med), 0);
    /* warm-up (TE_BL_WARMUP_CALLS calls and TE_BL_WARMUP_S at least), calibration, 5
     * samples of k calls each, k > 1 for the short ones */
    for (int i = 0; i < 3; i++)
        assert_true(g_calls[i] >= TE_BL_WARMUP_CALLS + 1 + 5);
    assert_true(g_calls[0] > g_calls[1] && g_calls[1] > g_calls[2]);
    assert_true(med[1] > med[0] && med[2] > med[1]);
    assert_true(med[2] >= 3e-3 && med[1] >= 2e-4 && med[1] < 3e-3);
    float a[3] = {1, 2, 3}, b[3] = {1, 2, NAN};
    assert_true(isinf(te_bl_rel_err(b, a, 3)) || isnan(te_bl_rel_err(b, a, 3)) ||
                te_bl_rel_err(b, a, 3) > 1e30);
    assert_true(te_bl_rel_err(a, a, 3) == 0);

    te_bl_result r;
    memset(&r, 0, sizeof r);
    r.gflops[TE_BL_OPENBLAS] = 100;
    r.gflops[TE_BL_ONEDNN] = 90;
    r.gflops[TE_BL_ONEDNN_PACKED] = 120;
    te_bl_result_choose(&r); /* no te_bl_openblas_select in this process: OpenBLAS trusted */
    assert_int_equal(r.best_lib, TE_BL_ONEDNN_PACKED);
    assert_true(r.best == 120 && r.onednn == 120 && r.openblas == 100);
    r.gflops[TE_BL_ONEDNN] = r.gflops[TE_BL_ONEDNN_PACKED] = NAN;
    te_bl_result_choose(&r);
    assert_int_equal(r.best_lib, TE_BL_OPENBLAS);
    assert_true(isnan(r.onednn));
}

/* oneDNN pointed at a library that does not exist: a note, OpenBLAS alone measures. */
static void test_onednn_absent_is_a_note(void **state)
{
    (void)state;
    setenv("TESSERA_ONEDNN_LIB", "libtessera-test-no-such-onednn.so.2", 1);
    const char *note = NULL;
    assert_int_equal(te_bl_onednn_load(&note), 0);
    assert_non_null(note);
    assert_non_null(strstr(note, "oneDNN"));
    assert_non_null(strstr(note, "no oneDNN baseline"));
    te_bl_shape sh = {32, 48, 16, 0, 0, 0};
    float A[32 * 16], B[16 * 48];
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        A[i] = (float)(i % 7) * 0.25f;
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
        B[i] = (float)(i % 5) * 0.5f;
    const char *why = NULL;
    assert_null(te_bl_product_create(TE_BL_ONEDNN, &sh, A, B, NULL, &why));
    assert_non_null(why);
    te_bl_product *p = te_bl_product_create(TE_BL_OPENBLAS, &sh, A, B, NULL, &why);
    assert_non_null(p);
    te_bl_product_run(p);
    /* C[0][1] = sum_k A[0][k] B[k][1] */
    double c01 = 0;
    for (int k = 0; k < 16; k++)
        c01 += (double)A[k] * B[k * 48 + 1];
    assert_true(fabs(te_bl_product_out(p)[1] - c01) < 1e-3);
    assert_non_null(strstr(te_bl_product_impl(p), "OpenBLAS core "));
    te_bl_product_free(p);
    te_bl_result r;
    te_bl_shape gate = {16, 64, 32, 0, 0, 1};
    assert_int_equal(te_bl_measure(&gate, 1, 3, &r), 0);
    assert_int_equal(r.best_lib, TE_BL_OPENBLAS);
    assert_true(r.best > 0 && isnan(r.onednn));
    assert_non_null(strstr(r.notes, "oneDNN"));
    unsetenv("TESSERA_ONEDNN_LIB");
}

/* ---- Through the CLI -------------------------------------------------------------------- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (s)
        s[got] = 0;
    return s;
}

/* Runs `env tessera CMD ARGS`; returns the exit status, stdout and stderr in *out, *err. */
static int run_cli(const char *env, const char *cmd_args, char **out, char **err)
{
    char o[] = "/tmp/te_bl_out_XXXXXX", e[] = "/tmp/te_bl_err_XXXXXX";
    int fo = mkstemp(o), fe = mkstemp(e);
    assert_true(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE -u TESSERA_BASELINE_REEXEC %s '%s' %s >'%s' 2>'%s'", env,
             TESSERA_CLI, cmd_args, o, e);
    int ws = system(cmd);
    *out = slurp(o);
    *err = slurp(e);
    unlink(o);
    unlink(e);
    assert_non_null(*out);
    assert_non_null(*err);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* Runs `env tessera bench ARGS` (see run_cli). */
static int run_bench(const char *env, const char *args, char **out, char **err)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bench %s", args);
    return run_cli(env, cmd, out, err);
}

static const char *const small = "--only matmul --reps 1 --threads 1";

static void test_bench_json_fields(void **state)
{
    (void)state;
    char *out, *err;
    int rc = run_bench("", "--only matmul --reps 1 --threads 1 --json", &out, &err);
    if (rc != 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    static const char *fields[] = {"\"workload\": \"matmul 1024x1024x1024\"",
                                   "\"baseline\": ",
                                   "\"baseline_impl\": \"",
                                   "\"baseline_gflops\": ",
                                   "\"ratio\": ",
                                   "\"max_rel_err\": "};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strstr(out, fields[i]))
            fail_msg("no %s in\n%s", fields[i], out);
    assert_non_null(strstr(err, "OpenBLAS: core "));
    if (strstr(err, "oneDNN: not")) {
        assert_null(strstr(out, "\"ratio_onednn\""));
    } else {
        /* oneDNN loaded: both ratios, and its implementation string when it is the best. */
        assert_non_null(strstr(out, "\"ratio_openblas\": "));
        assert_non_null(strstr(out, "\"ratio_onednn\": "));
        assert_non_null(strstr(out, "\"onednn_gflops\": "));
        assert_non_null(strstr(out, "\"onednn_impl\": \"oneDNN "));
        assert_non_null(strstr(out, "\"openblas_impl\": \"OpenBLAS core "));
    }
    free(out);
    free(err);
}

static void test_bench_onednn_absent(void **state)
{
    (void)state;
    char *out, *err;
    int rc = run_bench("TESSERA_ONEDNN_LIB=libtessera-test-no-such-onednn.so.2", small, &out, &err);
    if (rc != 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    if (!strstr(out, "oneDNN: not available"))
        fail_msg("no note in\n%s", out);
    assert_non_null(strstr(out, "OpenBLAS core "));
    assert_non_null(strstr(out, "matmul 1024x1024x1024"));
    free(out);
    free(err);
}

/* The test hook makes the first process believe OpenBLAS chose Prescott: on a CPU with AVX or
 * wider it re-executes with the fitting OPENBLAS_CORETYPE and says so. */
static void test_bench_reexec_on_generic_core(void **state)
{
    (void)state;
    te_bl_cpu cpu;
    te_bl_cpu_detect(&cpu);
    const char *want = NULL;
    te_bl_classify_core("Prescott", &cpu, &want);
    char *out, *err;
    int rc = run_bench("TESSERA_TEST_OPENBLAS_CORE=Prescott", small, &out, &err);
    if (rc != 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    if (want) {
        char line[160];
        snprintf(line, sizeof line,
                 "OpenBLAS: core Prescott is generic on this CPU (%s); re-ran with "
                 "OPENBLAS_CORETYPE=%s -> core %s",
                 cpu.avx512 ? "AVX-512"
                 : cpu.avx2 ? "AVX2"
                            : "AVX",
                 want, want);
        if (!strstr(out, line))
            fail_msg("no '%s' in\n%s", line, out);
    } else {
        assert_non_null(strstr(out, "OpenBLAS: core Prescott fits this CPU (SSE)"));
    }
    free(out);
    free(err);
}

/* `tessera tune --json` reports the strongest baseline and which kernels it ran. */
static void test_tune_json_baseline(void **state)
{
    (void)state;
    char dir[] = "/tmp/te_bl_tune_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char args[512], *out, *err;
    snprintf(args, sizeof args,
             "tune matmul --shape m=48,n=64,k=32 --trials 2 --batch 2 --json --db '%s/t.db'", dir);
    int rc = run_cli("", args, &out, &err);
    if (rc != 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    static const char *fields[] = {"\"baseline\": \"",      "\"baseline_impl\": \"",
                                   "\"baseline_gflops\": ", "\"openblas_gflops\": ",
                                   "\"onednn_gflops\": ",   "\"side_by_side\": "};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strstr(out, fields[i]))
            fail_msg("no %s in\n%s", fields[i], out);
    assert_non_null(strstr(err, "tune: OpenBLAS: core "));
    assert_non_null(strstr(err, ", baseline "));
    free(out);
    free(err);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    assert_int_equal(system(args), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify_generic_cores),
        cmocka_unit_test(test_classify_fitting_and_unknown_cores),
        cmocka_unit_test(test_cpu_detect_consistent),
        cmocka_unit_test(test_time_alternating_and_choose),
        cmocka_unit_test(test_onednn_absent_is_a_note),
        cmocka_unit_test(test_bench_json_fields),
        cmocka_unit_test(test_bench_onednn_absent),
        cmocka_unit_test(test_bench_reexec_on_generic_core),
        cmocka_unit_test(test_tune_json_baseline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
