/* The baselines of `tessera bench` and `tessera tune` (tools/baselines.c): which OpenBLAS cores
 * fit which CPUs (a pure function), oneDNN missing is a note and not a failure, timing and
 * choosing helpers, and through the real binary (TESSERA_CLI) the JSON fields of `tessera bench`,
 * the re-exec path (forced with the TESSERA_TEST_OPENBLAS_CORE test hook) and the note for an
 * absent oneDNN. Nothing here sets OPENBLAS_CORETYPE for itself: only a benchmark process
 * sets it for itself (one test hands a generic one to a benchmark child, to see it replaced). */
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
#include "tools/bl_vec.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/baselines.cmake"
#endif

static const te_bl_cpu sse_cpu = {1, 0, 0, 0, 0, 0, 0, 0, 0};
static const te_bl_cpu avx_cpu = {1, 0, 1, 0, 0, 0, 0, 0, 0};
static const te_bl_cpu intel_avx2 = {1, 0, 1, 1, 1, 0, 0, 0, 0};
static const te_bl_cpu amd_avx2 = {0, 1, 1, 1, 1, 0, 0, 0, 0};
static const te_bl_cpu intel_avx512 = {1, 0, 1, 1, 1, 1, 0, 0, 0};
static const te_bl_cpu intel_avx512_bf16 = {1, 0, 1, 1, 1, 1, 1, 0, 0};
static const te_bl_cpu amd_avx512_bf16 = {0, 1, 1, 1, 1, 1, 1, 0, 0};

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
    /* Only what a loaded machine cannot change: sleeps last at least as long as asked (a
     * 200 us sleep may take longer than the 3 ms one on a busy machine, so the middle one is
     * bounded from below only), and the empty function gets many calls per sample. */
    assert_true(g_calls[0] > g_calls[2] && g_calls[0] >= g_calls[1]);
    assert_true(med[2] > med[0] && med[1] > med[0]);
    assert_true(med[2] >= 3e-3 && med[1] >= 2e-4);
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

/* ---- Low-precision products (oneDNN) ------------------------------------------------------ */

/* bf16 bits of x, rounded to nearest even (x finite). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t g_lcg = 0x2545f4914f6cdd1dull;

static uint32_t lcg(void)
{
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_lcg >> 33);
}

/* Checks one kind (plain or packed weights) on m x n x k against a naive loop; returns NULL or
 * a message. bf16: every element within the f32 accumulation bound k * 2^-24 * sum |a b|
 * (plus one rounding), which the error of any order of k - 1 f32 additions of exact products
 * respects; u8s8: exactly. */
static const char *check_lowp(te_bl_lowp_kind kind, int packed, int m, int n, int k, int a_hi,
                              char *impl_out, size_t isz, char *msg, size_t msz)
{
    int bf = kind == TE_BL_LOWP_BF16;
    size_t na = (size_t)m * k, nb = (size_t)k * n;
    void *a = malloc(na * (bf ? 2 : 1)), *b = malloc(nb * (bf ? 2 : 1));
    for (size_t i = 0; i < na; i++) {
        if (bf)
            ((uint16_t *)a)[i] = to_bf16(((float)(lcg() % 2000001) - 1e6f) * 1e-6f);
        else
            ((uint8_t *)a)[i] = (uint8_t)(lcg() % (uint32_t)(a_hi + 1));
    }
    for (size_t i = 0; i < nb; i++) {
        if (bf)
            ((uint16_t *)b)[i] = to_bf16(((float)(lcg() % 2000001) - 1e6f) * 1e-6f);
        else
            ((int8_t *)b)[i] = (int8_t)(uint8_t)lcg();
    }
    const char *why = NULL;
    te_bl_lowp *p = te_bl_lowp_create(kind, m, n, k, a, b, packed, &why);
    if (!p) {
        snprintf(msg, msz, "skip: %s", why ? why : "(no reason)");
        free(a);
        free(b);
        return msg;
    }
    const char *impl = te_bl_lowp_impl(p);
    snprintf(impl_out, isz, "%s", impl ? impl : "");
    if (!impl || strncmp(impl, "oneDNN ", 7) || strlen(impl) < 8) {
        snprintf(msg, msz, "implementation string '%s'", impl ? impl : "(null)");
        goto out;
    }
    te_bl_lowp_run(p);
    const void *c = te_bl_lowp_out(p);
    double worst = 0;
    msg[0] = 0;
    for (int i = 0; i < m && !msg[0]; i++)
        for (int j = 0; j < n && !msg[0]; j++) {
            if (bf) {
                double want = 0, mag = 0;
                for (int q = 0; q < k; q++) {
                    double x = from_bf16(((uint16_t *)a)[(size_t)i * k + q]) *
                               from_bf16(((uint16_t *)b)[(size_t)q * n + j]);
                    want += x;
                    mag += fabs(x);
                }
                double got = ((const float *)c)[(size_t)i * n + j];
                double bound = (k + 1) * ldexp(1, -24) * mag, e = fabs(got - want);
                worst = fmax(worst, mag > 0 ? e / mag : 0);
                if (!(e <= bound))
                    snprintf(msg, msz, "bf16 C[%d, %d] = %.9g, want %.9g (error %g > bound %g)", i,
                             j, got, want, e, bound);
            } else {
                int32_t want = 0;
                for (int q = 0; q < k; q++)
                    want += (int32_t)((uint8_t *)a)[(size_t)i * k + q] *
                            ((int8_t *)b)[(size_t)q * n + j];
                int32_t got = ((const int32_t *)c)[(size_t)i * n + j];
                if (got != want)
                    snprintf(msg, msz, "u8s8 C[%d, %d] = %d, want %d", i, j, got, want);
            }
        }
    if (!msg[0] && bf)
        fprintf(stderr, "  bf16 %s %dx%dx%d: %s; within the bound (worst error / sum|ab| %.3g)\n",
                packed ? "packed" : "plain ", m, n, k, impl, worst);
    else if (!msg[0])
        fprintf(stderr, "  u8s8 %s %dx%dx%d, A in [0, %d]: %s; exact\n",
                packed ? "packed" : "plain ", m, n, k, a_hi, impl);
out:
    te_bl_lowp_free(p);
    free(a);
    free(b);
    return msg[0] ? msg : NULL;
}

/* One run of 1024^3 on one thread (after a warm-up), in GFLOP/s. */
static double time_lowp(te_bl_lowp_kind kind, const char **impl)
{
    enum { S = 1024 };
    int bf = kind == TE_BL_LOWP_BF16;
    size_t es = bf ? 2 : 1;
    unsigned char *a = malloc((size_t)S * S * es), *b = malloc((size_t)S * S * es);
    for (size_t i = 0; i < (size_t)S * S * es; i++) {
        a[i] = (uint8_t)lcg();
        b[i] = (uint8_t)lcg();
    }
    if (bf) /* finite bf16 values: clear the exponent's top bit */
        for (size_t i = 0; i < (size_t)S * S; i++) {
            ((uint16_t *)a)[i] &= 0xbfffu;
            ((uint16_t *)b)[i] &= 0xbfffu;
        }
    te_bl_lowp *p = te_bl_lowp_create(kind, S, S, S, a, b, 1, NULL);
    double gf = NAN;
    if (p) {
        te_bl_run_fn fn = te_bl_lowp_run;
        void *arg = p;
        double med;
        if (te_bl_time_alternating(1, &fn, &arg, 1, &med) == 0)
            gf = 2.0 * S * S * S / med * 1e-9;
        static char buf[96];
        snprintf(buf, sizeof buf, "%s", te_bl_lowp_impl(p));
        *impl = buf;
    }
    te_bl_lowp_free(p);
    free(a);
    free(b);
    return gf;
}

/* Runs child() in a forked process (oneDNN then loads there only: later tests need it not
 * loaded in this one) and returns its exit status (0 passed, 77 skipped, 1 failed). */
static int in_child(int (*child)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child());
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    return WEXITSTATUS(ws);
}

/* Runs a oneDNN child (in_child) and expects it to pass; no oneDNN skips with a message. */
static void expect_onednn_child(int (*child)(void), const char *what)
{
    int rc = in_child(child);
    if (rc == 77)
        printf("SKIP %s: no oneDNN\n", what);
    else
        assert_int_equal(rc, 0);
}

/* Fills p[0..n) with uniform values in [-1, 1) from a linear congruential *seed. */
static void fill_uniform(float *p, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((*seed = *seed * 1664525u + 1013904223u) >> 9) / 8388608.0f - 1.0f;
}

/* The child of test_lowp_products_match_naive_loops: 0 passed, 77 skipped, 1 failed. */
static int lowp_child(void)
{
    const char *note = NULL;
    if (!te_bl_onednn_load(&note)) {
        fprintf(stderr, "skipped: %s\n", note);
        return 77;
    }
    te_bl_set_threads(1);
    te_bl_cpu cpu;
    te_bl_cpu_detect(&cpu);
    fprintf(stderr, "  %s; CPU avx512_bf16 %d avx512_vnni %d amx %d\n", note, cpu.avx512_bf16,
            cpu.avx512_vnni, cpu.amx);
    static const int shapes[][3] = {{37, 50, 70}, {64, 48, 256}, {1, 17, 3}};
    int ran = 0, skipped = 0;
    char msg[512];
    for (int kind = 0; kind < TE_BL_LOWP_NKINDS; kind++)
        for (int packed = 0; packed < 2; packed++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                char impl[128] = "";
                const int *sh = shapes[s];
                const char *bad = check_lowp((te_bl_lowp_kind)kind, packed, sh[0], sh[1], sh[2],
                                             255, impl, sizeof impl, msg, sizeof msg);
                /* Without VNNI (and AMX) oneDNN multiplies u8 x s8 with vpmaddubsw, which
                 * saturates each pair of adjacent products at s16: over the whole u8 range it
                 * is not exact (oneDNN's "int8 computation nuances"), with A below 128 it is. */
                if (bad && strncmp(bad, "skip: ", 6) && kind == TE_BL_LOWP_U8S8 &&
                    !strstr(impl, "vnni") && !strstr(impl, "amx")) {
                    fprintf(stderr,
                            "  note: %s (%s, no VNNI: s16 saturation); again with A below "
                            "128\n",
                            bad, impl);
                    bad = check_lowp((te_bl_lowp_kind)kind, packed, sh[0], sh[1], sh[2], 127, impl,
                                     sizeof impl, msg, sizeof msg);
                }
                if (bad && !strncmp(bad, "skip: ", 6)) {
                    /* oneDNN refused (expected without the instructions; with them, e.g.
                     * DNNL_MAX_CPU_ISA set lower: said loudly) */
                    fprintf(stderr, "  %s skipped%s: %s\n",
                            te_bl_lowp_kind_name((te_bl_lowp_kind)kind),
                            te_bl_lowp_native((te_bl_lowp_kind)kind, &cpu)
                                ? " although this CPU has its instructions"
                                : "",
                            bad + 6);
                    skipped++;
                    continue;
                }
                if (bad) {
                    fprintf(stderr, "%s %s %dx%dx%d (%s): %s\n",
                            te_bl_lowp_kind_name((te_bl_lowp_kind)kind),
                            packed ? "packed" : "plain", sh[0], sh[1], sh[2], impl, bad);
                    return 1;
                }
                /* AMX on a CPU with AMX: oneDNN picks it for these dtypes */
                if (cpu.amx && packed && s == 1 && !strstr(impl, "amx"))
                    fprintf(stderr, "  note: %s on a CPU with AMX\n", impl);
                ran++;
            }
    if (!ran)
        return 77;
    /* One quick measurement on one thread where the instructions are native (emulated it
     * would be slow and meaningless). */
    for (int kind = 0; kind < TE_BL_LOWP_NKINDS; kind++) {
        if (!te_bl_lowp_native((te_bl_lowp_kind)kind, &cpu))
            continue;
        const char *impl = "?";
        double gf = time_lowp((te_bl_lowp_kind)kind, &impl);
        fprintf(stderr, "  %s 1024x1024x1024, 1 thread: %.1f GFLOP/s (%s)\n",
                te_bl_lowp_kind_name((te_bl_lowp_kind)kind), gf, impl);
    }
    if (skipped)
        fprintf(stderr, "  %d of %d checks skipped\n", skipped, skipped + ran);
    return 0;
}

/* bf16 x bf16 -> f32 and u8 x s8 -> s32 through oneDNN, plain and packed weights, against naive
 * loops. In a child process: oneDNN's loader keeps its outcome per process, and
 * test_onednn_absent_is_a_note needs a process where it has not been loaded. Skipped when
 * oneDNN is absent or refuses the dtypes on a CPU without the instructions. */
static void test_lowp_products_match_naive_loops(void **state)
{
    (void)state;
    int rc = in_child(lowp_child);
    if (rc == 77)
        skip();
    assert_int_equal(rc, 0);
}

static void test_lowp_refuses_bad_arguments(void **state)
{
    (void)state;
    uint8_t a[4] = {1, 2, 3, 4};
    const char *why = NULL;
    assert_null(te_bl_lowp_create(TE_BL_LOWP_U8S8, 0, 2, 2, a, a, 0, &why));
    assert_non_null(why);
    assert_null(te_bl_lowp_create(TE_BL_LOWP_U8S8, 2, 2, 2, NULL, a, 0, &why));
    assert_non_null(strstr(why, "NULL inputs"));
    assert_null(te_bl_lowp_create((te_bl_lowp_kind)7, 2, 2, 2, a, a, 0, &why));
    assert_non_null(strstr(why, "unknown kind"));
    te_bl_lowp_free(NULL);
    assert_string_equal(te_bl_lowp_kind_name(TE_BL_LOWP_BF16), "bf16");
    assert_string_equal(te_bl_lowp_kind_name(TE_BL_LOWP_U8S8), "u8s8");
    te_bl_cpu none = {1, 0, 1, 1, 1, 1, 0, 0, 0}, vnni = {1, 0, 1, 1, 1, 1, 0, 1, 0};
    assert_false(te_bl_lowp_native(TE_BL_LOWP_BF16, &none));
    assert_false(te_bl_lowp_native(TE_BL_LOWP_U8S8, &none));
    assert_true(te_bl_lowp_native(TE_BL_LOWP_U8S8, &vnni));
    assert_false(te_bl_lowp_native(TE_BL_LOWP_BF16, &vnni));
    te_bl_cpu c;
    te_bl_cpu_detect(&c);
    assert_true(!c.avx512_vnni || c.avx512);
}

/* The unfused gate's vectorized silu * u pass against float64, with tails of every vector
 * width and more than one chunk, over large and small g (exp clamped, no NaN). */
static void test_silu_mul_matches_float64(void **state)
{
    (void)state;
    static const size_t ns[] = {1, 7, 15, 17, 37, 4096, 4100, 9001};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        float *g = malloc(n * sizeof *g), *u = malloc(n * sizeof *u), *y = malloc(n * sizeof *y);
        assert_true(g && u && y);
        unsigned seed = 11 + (unsigned)n;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            g[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (i % 5 == 0 ? 400.0f : 16.0f);
            seed = seed * 1664525u + 1013904223u;
            u[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
            y[i] = NAN; /* poison */
        }
        te_bl_silu_mul(y, g, u, n);
        for (size_t i = 0; i < n; i++) {
            double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            double e = fabs(y[i] - ref) / fmax(1e-30, fabs(ref));
            if (!(e < 1e-5) && !(fabs(y[i] - ref) < 1e-30))
                fail_msg("n %zu, i %zu: g %g u %g: %g, float64 %g", n, i, g[i], u[i], y[i], ref);
        }
        free(g), free(u), free(y);
    }
}

/* float64 forms of the activations of te_bl_activation. */
static double act64(te_bl_act a, double v)
{
    switch (a) {
    case TE_BL_RELU:
        return v > 0 ? v : 0;
    case TE_BL_GELU:
        return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case TE_BL_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    case TE_BL_TANH:
        return tanh(v);
    case TE_BL_SILU:
        return v / (1.0 + exp(-v));
    default:
        return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    }
}

/* The node-by-node executor's activations, softmax (with -inf entries and a fully masked
 * row) and layer norm against float64, with tails of every vector width. Absolute error
 * within 2e-6 of max(1, |ref|) (the erf of GELU is good to 1.5e-7; exp to a few ulp). */
static void test_vector_passes_match_float64(void **state)
{
    (void)state;
    static const int64_t ns[] = {1, 5, 16, 19, 33, 300, 4099};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        int64_t n = ns[t], R = 3;
        size_t sz = (size_t)(n * R);
        float *x = malloc(sz * sizeof *x), *y = malloc(sz * sizeof *y);
        float *g = malloc((size_t)n * sizeof *g), *b = malloc((size_t)n * sizeof *b);
        assert_true(x && y && g && b);
        unsigned seed = 5 + (unsigned)n;
        for (size_t i = 0; i < sz; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 12.0f;
        }
        for (int64_t j = 0; j < n; j++)
            g[j] = 0.5f + (float)(j % 7) * 0.25f, b[j] = (float)(j % 3) - 1.0f;
        for (int a = 0; a < TE_BL_NACTS; a++) {
            for (size_t i = 0; i < sz; i++)
                y[i] = NAN;
            te_bl_activation((te_bl_act)a, x, y, sz);
            for (size_t i = 0; i < sz; i++) {
                double ref = act64((te_bl_act)a, x[i]);
                if (!(fabs(y[i] - ref) <= 2e-6 * fmax(1.0, fabs(ref))))
                    fail_msg("act %d n %lld i %zu: x %g: %.9g, float64 %.9g", a, (long long)n, i,
                             x[i], y[i], ref);
            }
        }
        /* Softmax: row 1 has -inf entries, row 2 (when n > 1) is fully masked. */
        for (int64_t j = 0; j < n; j += 3)
            x[n + j] = -INFINITY;
        if (n > 1)
            for (int64_t j = 0; j < n; j++)
                x[2 * n + j] = -INFINITY;
        const float scale = 0.37f;
        for (size_t i = 0; i < sz; i++)
            y[i] = NAN;
        te_bl_softmax_rows(x, y, R, n, scale);
        for (int64_t r = 0; r < R; r++) {
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++)
                m = fmax(m, (double)x[r * n + j]);
            for (int64_t j = 0; j < n; j++)
                sum += m == -INFINITY ? 0 : exp(scale * ((double)x[r * n + j] - m));
            for (int64_t j = 0; j < n; j++) {
                double ref = m == -INFINITY ? 0 : exp(scale * ((double)x[r * n + j] - m)) / sum;
                if (!(fabs(y[r * n + j] - ref) <= 2e-6 * fmax(1e-3, ref)))
                    fail_msg("softmax n %lld row %lld j %lld: %.9g, float64 %.9g", (long long)n,
                             (long long)r, (long long)j, y[r * n + j], ref);
            }
        }
        /* Layer norm, in place, with and without gamma/beta. */
        for (size_t i = 0; i < sz; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = ((float)(seed >> 8) / 16777216.0f) * 4.0f + 3.0f;
        }
        memcpy(y, x, sz * sizeof *y);
        te_bl_layer_norm_rows(y, y, 2, n, 1e-5, g, b);
        te_bl_layer_norm_rows(x + 2 * n, y + 2 * n, 1, n, 1e-5, NULL, NULL);
        for (int64_t r = 0; r < R; r++) {
            double mean = 0, var = 0;
            for (int64_t j = 0; j < n; j++)
                mean += x[r * n + j];
            mean /= (double)n;
            for (int64_t j = 0; j < n; j++)
                var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
            double inv = 1.0 / sqrt(var / (double)n + 1e-5);
            for (int64_t j = 0; j < n; j++) {
                double ref = (x[r * n + j] - mean) * inv;
                if (r < 2)
                    ref = ref * g[j] + b[j];
                if (!(fabs(y[r * n + j] - ref) <= 1e-4 * fmax(1.0, fabs(ref))))
                    fail_msg("layer norm n %lld row %lld j %lld: %.9g, float64 %.9g", (long long)n,
                             (long long)r, (long long)j, y[r * n + j], ref);
            }
        }
        free(x), free(y), free(g), free(b);
    }
}

/* The child of test_bmm_matches_naive_loops (in_child): 0 passed, 77 skipped, 1 failed. */
static int bmm_child(void)
{
    const char *why = NULL;
    if (!te_bl_onednn_load(&why)) {
        fprintf(stderr, "skipped: %s\n", why);
        return 77;
    }
    enum { BATCH = 3, M = 17, N = 35, K = 9 };
    static float A[BATCH * M * K], B[BATCH * K * N], C[BATCH * M * N];
    unsigned seed = 7;
    fill_uniform(A, sizeof A / sizeof A[0], &seed);
    fill_uniform(B, sizeof B / sizeof B[0], &seed);
    /* batch, m, n, k, ta, tb, b_shared, pack_b: the attention's products, then weights (one B
     * for every batch, packed) with A stored either way, and a single packed product. */
    static const te_bl_bmm_desc cases[] = {
        {BATCH, M, N, K, 0, 0, 0, 0}, {BATCH, M, N, K, 0, 1, 0, 0}, {BATCH, M, N, K, 1, 0, 1, 1},
        {BATCH, M, N, K, 0, 1, 1, 1}, {1, M, N, K, 0, 0, 1, 1},     {1, M, N, K, 1, 1, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const te_bl_bmm_desc *d = &cases[c];
        for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
            C[i] = NAN; /* poison */
        te_bl_bmm *p = te_bl_bmm_create_desc(d, A, B, C, &why);
        if (!p || !strstr(te_bl_bmm_impl(p), "oneDNN ")) {
            fprintf(stderr, "case %zu: %s\n", c, why ? why : "no implementation string");
            return 1;
        }
        te_bl_bmm_run(p);
        double worst = 0;
        for (int b = 0; b < d->batch; b++)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double ref = 0, mag = 0;
                    const float *Bb = B + (d->b_shared ? 0 : b * K * N), *Ab = A + b * M * K;
                    for (int k = 0; k < K; k++) {
                        double x = d->ta ? Ab[k * M + i] : Ab[i * K + k];
                        double y = d->tb ? Bb[j * K + k] : Bb[k * N + j];
                        ref += x * y, mag += fabs(x * y);
                    }
                    double e = fabs(C[(b * M + i) * N + j] - ref) / (mag + 1e-30);
                    worst = isnan(e) ? INFINITY : fmax(worst, e);
                }
        fprintf(stderr,
                "  batched %dx%dx%dx%d ta %d tb %d shared %d packed %d: %s; worst error / "
                "sum|ab| %.3g\n",
                d->batch, M, N, K, d->ta, d->tb, d->b_shared, d->pack_b, te_bl_bmm_impl(p), worst);
        int packed_named = !d->pack_b || strstr(te_bl_bmm_impl(p), "packed weights");
        te_bl_bmm_free(p);
        if (!(worst < 1e-5) || !packed_named)
            return 1;
    }
    return 0;
}

/* The child of test_conv_matches_naive_loops: 0 passed, 77 skipped, 1 failed. */
static int conv_child(void)
{
    const char *why = NULL;
    if (!te_bl_onednn_load(&why)) {
        fprintf(stderr, "skipped: %s\n", why);
        return 77;
    }
    /* n, c, h, w, oc, kh, kw, stride, pad, dil: a ResNet 3x3, a strided and dilated one with
     * ragged sizes, a 1x1. */
    static const te_bl_conv_desc cases[] = {{2, 16, 9, 9, 32, 3, 3, 1, 1, 1},
                                            {1, 5, 13, 11, 7, 3, 2, 2, 2, 2},
                                            {1, 24, 6, 6, 16, 1, 1, 1, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const te_bl_conv_desc *d = &cases[c];
        int oh = (d->h + 2 * d->pad - d->dil * (d->kh - 1) - 1) / d->stride + 1;
        int ow = (d->w + 2 * d->pad - d->dil * (d->kw - 1) - 1) / d->stride + 1;
        size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->oc * d->c * d->kh * d->kw;
        size_t ny = (size_t)d->n * d->oc * oh * ow;
        float *X = malloc(nx * sizeof *X), *W = malloc(nw * sizeof *W), *Y = malloc(ny * sizeof *Y);
        float bias[64];
        unsigned seed = 11 + (unsigned)c;
        fill_uniform(X, nx, &seed);
        fill_uniform(W, nw, &seed);
        for (int i = 0; i < d->oc; i++)
            bias[i] = 0.25f * (float)(i % 5) - 0.5f;
        for (size_t i = 0; i < ny; i++)
            Y[i] = NAN; /* poison */
        te_bl_conv *p = te_bl_conv_create(d, X, W, c == 2 ? NULL : bias, Y, &why);
        if (!p) {
            fprintf(stderr, "case %zu: %s\n", c, why ? why : "?");
            free(X), free(W), free(Y);
            return 1;
        }
        te_bl_conv_run(p);
        double worst = 0;
        for (int n = 0; n < d->n; n++)
            for (int o = 0; o < d->oc; o++)
                for (int i = 0; i < oh; i++)
                    for (int j = 0; j < ow; j++) {
                        double ref = c == 2 ? 0 : bias[o], mag = fabs(ref);
                        for (int ci = 0; ci < d->c; ci++)
                            for (int a = 0; a < d->kh; a++)
                                for (int b = 0; b < d->kw; b++) {
                                    int y = i * d->stride - d->pad + a * d->dil;
                                    int x = j * d->stride - d->pad + b * d->dil;
                                    if (y < 0 || y >= d->h || x < 0 || x >= d->w)
                                        continue;
                                    double t = (double)X[((n * d->c + ci) * d->h + y) * d->w + x] *
                                               W[((o * d->c + ci) * d->kh + a) * d->kw + b];
                                    ref += t, mag += fabs(t);
                                }
                        double e =
                            fabs(Y[((n * d->oc + o) * oh + i) * ow + j] - ref) / (mag + 1e-30);
                        worst = isnan(e) ? INFINITY : fmax(worst, e);
                    }
        fprintf(stderr, "  conv case %zu: %s; worst error / sum|xw| %.3g\n", c, te_bl_conv_impl(p),
                worst);
        te_bl_conv_free(p);
        free(X), free(W), free(Y);
        if (!(worst < 1e-5))
            return 1;
    }
    return 0;
}

/* oneDNN's convolution over NCHW tensors (the node-by-node graph baseline), with and without
 * bias, strides, padding and dilation, against float64 loops; and its refusals. */
static void test_conv_matches_naive_loops(void **state)
{
    (void)state;
    const char *why = NULL;
    te_bl_conv_desc none = {1, 1, 2, 2, 1, 3, 3, 1, 0, 1}; /* a 3x3 window over 2x2: no output */
    assert_null(te_bl_conv_create(&none, NULL, NULL, NULL, NULL, &why));
    assert_non_null(strstr(why, "output"));
    te_bl_conv_free(NULL);
    expect_onednn_child(conv_child, "convolution");
}

/* oneDNN's batched product (the unfused attention baseline), both layouts of B, against
 * float64 loops; and its refusals. */
static void test_bmm_matches_naive_loops(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_null(te_bl_bmm_create(0, 2, 2, 2, 0, NULL, NULL, NULL, &why));
    assert_non_null(strstr(why, "positive"));
    te_bl_bmm_free(NULL);
    expect_onednn_child(bmm_child, "batched product");
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
    /* An AMX row names the tile variant kept by the selection before timing (with and without
     * software prefetches, tools/bench_lowp.c). */
    const char *amx = strstr(out, "\"note\": \"tessera: amx_");
    if (amx && !strstr(amx, "selection before timing"))
        fail_msg("an AMX row without its prefetch-variant selection:\n%s", out);
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

/* Runs the benchmark with `env` making OpenBLAS choose (or seem to choose) Prescott; on a CPU
 * with AVX or wider it must re-execute with the fitting OPENBLAS_CORETYPE and say so, naming
 * the caller's variable when `caller` (the " (OPENBLAS_CORETYPE=... set by the caller)" part of
 * the note) is not "". */
static void check_reexec(const char *env, const char *caller)
{
    te_bl_cpu cpu;
    te_bl_cpu_detect(&cpu);
    const char *want = NULL;
    te_bl_classify_core("Prescott", &cpu, &want);
    char *out, *err;
    int rc = run_bench(env, small, &out, &err);
    if (rc != 0)
        fail_msg("rc %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    if (want) {
        char line[256];
        snprintf(line, sizeof line,
                 "OpenBLAS: core Prescott%s is generic on this CPU (%s); re-ran with "
                 "OPENBLAS_CORETYPE=%s -> core %s",
                 caller,
                 cpu.avx512 ? "AVX-512"
                 : cpu.avx2 ? "AVX2"
                            : "AVX",
                 want, want);
        if (!strstr(out, line))
            fail_msg("no '%s' in\n%s", line, out);
        assert_non_null(strstr(out, "OpenBLAS core "));
    } else {
        assert_non_null(strstr(out, "OpenBLAS: core Prescott"));
    }
    free(out);
    free(err);
}

/* The test hook makes the first process believe OpenBLAS chose Prescott. */
static void test_bench_reexec_on_generic_core(void **state)
{
    (void)state;
    check_reexec("TESSERA_TEST_OPENBLAS_CORE=Prescott", "");
}

/* A machine may set OPENBLAS_CORETYPE for every process (for an OpenBLAS too old to know its
 * CPU), often to a core narrower than the CPU: the benchmark replaces it for itself and names
 * it. The variable is set here for the benchmark child only, as such a machine would. */
static void test_bench_replaces_a_callers_generic_core(void **state)
{
    (void)state;
    check_reexec("OPENBLAS_CORETYPE=Prescott", " (OPENBLAS_CORETYPE=Prescott set by the caller)");
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
        cmocka_unit_test(test_lowp_products_match_naive_loops), /* before any OpenMP region */
        cmocka_unit_test(test_lowp_refuses_bad_arguments),
        cmocka_unit_test(test_bmm_matches_naive_loops),
        cmocka_unit_test(test_conv_matches_naive_loops),
        cmocka_unit_test(test_silu_mul_matches_float64),
        cmocka_unit_test(test_vector_passes_match_float64),
        cmocka_unit_test(test_onednn_absent_is_a_note),
        cmocka_unit_test(test_bench_json_fields),
        cmocka_unit_test(test_bench_onednn_absent),
        cmocka_unit_test(test_bench_reexec_on_generic_core),
        cmocka_unit_test(test_bench_replaces_a_callers_generic_core),
        cmocka_unit_test(test_tune_json_baseline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
