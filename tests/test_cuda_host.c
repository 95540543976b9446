/*
 * The emitted CUDA text executed on the CPU: every GPU template (and the GPU paths of row
 * operators, cross-thread and tuple reductions, attention) at several configurations, ragged
 * sizes included, is lowered for sm_80, emitted as CUDA C++, compiled as host C++ with
 * tests/cuda_shim/cuda_shim.h (one pthread per CUDA thread, __syncthreads a barrier, emulated
 * warp shuffles, alignment-checked vector types) under AddressSanitizer and
 * UndefinedBehaviorSanitizer, run on random inputs with NaN-poisoned outputs and compared with
 * te_reference_eval. A kernel whose __syncthreads() calls are deleted must be caught (wrong
 * results or a ThreadSanitizer report). Skipped (77) without a C++ compiler.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/cuda/cuda_impl.h"
#include "cuda_testutil.h"
#include "tessera/autotune.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

#ifndef TSH_CXX
#define TSH_CXX ""
#endif
#ifndef TSH_SHIM_DIR
#define TSH_SHIM_DIR ""
#endif

static char g_dir[512];
static int g_seq;
/* In the warm-up pass (a child process of main), the compile commands go here instead of
 * being run, so that main can run them two at a time before the real pass. */
static FILE *g_jobs;
static int g_recompiled; /* programs the real pass compiled itself */

/* A built operator: inputs, outputs, data and the float64 reference. */
typedef struct hcase {
    te_ctx *ctx;
    int n_in, n_out;
    te_tensor *t[8];
    void *data[8];
    double *ref[4];
} hcase;

static void hcase_init(hcase *c, int n_in, int n_out, uint64_t seed)
{
    c->n_in = n_in;
    c->n_out = n_out;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(seed));
    for (int i = 0; i < n_in + n_out; i++) {
        size_t n = (size_t)te_tensor_numel(c->t[i]);
        c->data[i] = malloc(n * 8);
        assert_non_null(c->data[i]);
        if (i < n_in)
            tt_fill_f32(&r, c->data[i], n);
        te_dtype dt = te_tensor_dtype(c->t[i]);
        if (i < n_in && (dt == TE_F16 || dt == TE_BF16)) /* half storage of the same values */
            for (size_t q = 0; q < n; q++) {
                float v = ((float *)c->data[i])[q];
                ((uint16_t *)c->data[i])[q] = dt == TE_F16 ? te_f32_to_f16(v) : te_f32_to_bf16(v);
            }
    }
    for (int o = 0; o < n_out; o++) {
        c->ref[o] = malloc((size_t)te_tensor_numel(c->t[n_in + o]) * sizeof(double));
        assert_non_null(c->ref[o]);
    }
    if (te_reference_eval(c->ctx, n_in, c->t, (const void *const *)c->data, n_out, c->t + n_in,
                          c->ref) != TE_OK)
        fail_msg("reference: %s", te_ctx_errmsg(c->ctx));
}

static void hcase_free(hcase *c)
{
    for (int i = 0; i < c->n_in + c->n_out; i++)
        free(c->data[i]);
    for (int o = 0; o < c->n_out; o++)
        free(c->ref[o]);
    te_ctx_free(c->ctx);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    if (p)
        p[n] = 0;
    fclose(f);
    return p;
}

/* Deletes every "__syncthreads();" of src in place. Returns how many. */
static int drop_barriers(char *src)
{
    int n = 0;
    const char *needle = "__syncthreads();";
    for (char *p = src; (p = strstr(p, needle)) != NULL; n++)
        memset(p, ' ', strlen(needle));
    return n;
}

typedef enum { H_ASAN, H_TSAN } hmode;

/* The outcome of one harness run. */
typedef struct hrun {
    int compiled, ran; /* compile and run exit statuses (0 good) */
    char log[4096];    /* the runner's stderr (sanitizer and shim reports), truncated */
    double err;        /* max relative error over the outputs (INFINITY when not run) */
} hrun;

/* Writes program p (emitted for the case's arguments) with the shim and a kernel table into a
 * .cpp file, compiles it in mode, runs it on the case's inputs (outputs NaN-poisoned, temps
 * 0xff), reads the outputs back into c->data and compares them with the reference. */
static hrun run_program(hcase *c, const te__cuda_program *p, const char *src, hmode mode)
{
    hrun r = {0};
    r.err = INFINITY;
    int id = g_seq++;
    char cpp[600], exe[600], in[600], out[600], log[600], cmd[4096];
    snprintf(cpp, sizeof cpp, "%s/k%d.cpp", g_dir, id);
    snprintf(exe, sizeof exe, "%s/k%d", g_dir, id);
    snprintf(in, sizeof in, "%s/k%d.in", g_dir, id);
    snprintf(out, sizeof out, "%s/k%d.out", g_dir, id);
    snprintf(log, sizeof log, "%s/k%d.log", g_dir, id);
    char *text = NULL;
    size_t text_n = 0;
    FILE *f = open_memstream(&text, &text_n);
    assert_non_null(f);
    tt_write_shim_program(f, src, p);
    fclose(f);
    /* the executable of the warm-up pass (main) when it was built from the same text */
    char *old = slurp(cpp);
    bool same = old && strcmp(old, text) == 0 && access(exe, X_OK) == 0;
    free(old);
    if (!same) {
        unlink(exe);
        f = fopen(cpp, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
    }
    free(text);
    snprintf(cmd, sizeof cmd,
             "'%s' -std=c++17 -O1 -g -w -pthread %s -fno-sanitize-recover=all "
             "-fno-omit-frame-pointer -I'%s' '%s' -o '%s' > '%s' 2>&1",
             TSH_CXX, mode == H_ASAN ? "-fsanitize=address,undefined" : "-fsanitize=thread",
             TSH_SHIM_DIR, cpp, exe, log);
    if (g_jobs) { /* the warm-up pass: compile later, in parallel */
        fprintf(g_jobs, "%s\n", cmd);
        r.err = 0;
        return r;
    }
    if (!same)
        g_recompiled++;
    r.compiled = same ? 0 : system(cmd);
    if (r.compiled != 0) {
        char *l = slurp(log);
        snprintf(r.log, sizeof r.log, "compile failed:\n%.3900s", l ? l : "");
        free(l);
        return r;
    }
    /* inputs */
    int nargs = c->n_in + c->n_out, nb = nargs + p->ntemps;
    assert_int_equal(p->n_args, nargs);
    f = fopen(in, "wb");
    assert_non_null(f);
    int32_t nb32 = nb;
    fwrite(&nb32, 4, 1, f);
    for (int a = 0; a < nb; a++) {
        uint64_t bytes =
            a < nargs ? (uint64_t)te_tensor_numel(c->t[a]) * te_dtype_size(te_tensor_dtype(c->t[a]))
                      : p->temp_bytes[a - nargs];
        fwrite(&bytes, 8, 1, f);
        unsigned char *buf = malloc(bytes ? bytes : 1);
        assert_non_null(buf);
        if (a < c->n_in)
            memcpy(buf, c->data[a], bytes);
        else
            memset(buf, 0xff, bytes); /* NaN in every float type, -1 in integers */
        fwrite(buf, 1, bytes, f);
        free(buf);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "ASAN_OPTIONS=detect_leaks=0 TSAN_OPTIONS='halt_on_error=1 report_signal_unsafe=0' "
             "'%s' '%s' '%s' > '%s' 2>&1",
             exe, in, out, log);
    r.ran = system(cmd);
    char *l = slurp(log);
    snprintf(r.log, sizeof r.log, "%.4000s", l ? l : "");
    free(l);
    if (r.ran != 0)
        return r;
    f = fopen(out, "rb");
    assert_non_null(f);
    int32_t got = 0;
    assert_int_equal(fread(&got, 4, 1, f), 1);
    assert_int_equal(got, nb);
    r.err = 0;
    for (int a = 0; a < nargs; a++) {
        uint64_t bytes = 0;
        assert_int_equal(fread(&bytes, 8, 1, f), 1);
        unsigned char *buf = malloc(bytes ? bytes : 1);
        assert_non_null(buf);
        assert_int_equal(fread(buf, 1, bytes, f), bytes);
        if (a >= c->n_in) {
            size_t n = (size_t)te_tensor_numel(c->t[a]);
            memcpy(c->data[a], buf, bytes);
            tt_output_as_f32(c->data[a], te_tensor_dtype(c->t[a]), n);
            double e = tt_max_rel_err_f32(c->data[a], c->ref[a - c->n_in], n);
            r.err = e > r.err || isnan(e) ? e : r.err;
        }
        free(buf);
    }
    fclose(f);
    return r;
}

typedef int (*hsched_fn)(te_schedule *s, hcase *c, const te_cuda_knobs *k);

/* Lowers the case's schedule for sm_80, emits it and runs the program in the harness. */
static hrun run_schedule(hcase *c, te_schedule *s, const char *name, hmode mode, bool no_barriers,
                         int *n_dropped)
{
    te_target tgt = te_target_cuda(80);
    te_lowered *f = te_lower(s, c->n_in + c->n_out, c->t, name, &tgt);
    if (!f)
        fail_msg("%s: lowering for sm_80: %s", name, te_ctx_errmsg(c->ctx));
    te__cuda_program p;
    if (te__cuda_emit_program(c->ctx, f, &tgt, &p) != TE_OK)
        fail_msg("%s: CUDA emission: %s", name, te_ctx_errmsg(c->ctx));
    char *src = strdup(p.source);
    assert_non_null(src);
    if (no_barriers)
        *n_dropped = drop_barriers(src);
    hrun r = run_program(c, &p, src, mode);
    if (getenv("TESSERA_TEST_VERBOSE"))
        fprintf(stderr, "---- %s\n%s\n", name, src);
    free(src);
    return r;
}

static void check_run(hcase *c, const char *name, te_schedule *s, double tol)
{
    hrun r = run_schedule(c, s, name, H_ASAN, false, NULL);
    if (g_jobs)
        return;
    if (r.compiled || r.ran || !(r.err <= tol))
        fail_msg("%s: %s (compile %d, run %d, max rel err %g)\n%s", name,
                 r.compiled ? "does not compile"
                 : r.ran    ? "the run failed"
                            : "wrong results",
                 r.compiled, r.ran, r.err, r.log);
    printf("  %-26s ok (max rel err %.2g)\n", name, r.err);
}

static void check_template(hcase *c, const char *name, hsched_fn fn, const te_cuda_knobs *k,
                           double tol)
{
    te_schedule *s = te_schedule_create(c->ctx, c->n_out, c->t + c->n_in);
    assert_non_null(s);
    if (fn(s, c, k) != TE_OK)
        fail_msg("%s: schedule: %s", name, te_ctx_errmsg(c->ctx));
    check_run(c, name, s, tol);
}

/* ---- The templates of backends/cuda/templates.c ----------------------------------------- */

static void matmul_case(hcase *c, int64_t M, int64_t N, int64_t K)
{
    c->ctx = te_ctx_create();
    c->t[0] = te_placeholder(c->ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    c->t[1] = te_placeholder(c->ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    c->t[2] = te_op_matmul(c->ctx, c->t[0], c->t[1], 0, 0, "C");
    assert_non_null(c->t[2]);
    hcase_init(c, 2, 1, 1234);
}

static int sched_matmul(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_matmul(s, c->t[2], NULL, k);
}

static const te_cuda_knobs mm_cfgs[] = {
    /* tile_m tile_n tile_k thread_m thread_n threads vec pad dbuf unroll vthread_m vthread_n
       stage_input */
    {64, 64, 8, 4, 4, 0, 4, 0, 0, 1, 0, 0, 0},
    {32, 64, 16, 2, 4, 0, 4, 1, 1, 1, 0, 0, 0},
    {16, 16, 4, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0},
    {64, 32, 8, 8, 2, 0, 2, 4, 1, 1, 0, 0, 0},
    /* virtual threads: 2 x 2 strided runs of 2 x 4, 1 x 2 runs of 4 x 2, double-buffered */
    {64, 64, 8, 4, 8, 0, 4, 0, 0, 1, 2, 2, 0},
    {32, 64, 16, 4, 4, 0, 4, 1, 1, 1, 1, 2, 0},
};

static void test_matmul_template_runs_in_the_harness(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof mm_cfgs / sizeof mm_cfgs[0]; i++) {
        hcase c = {0};
        matmul_case(&c, 64, 96, 32);
        char name[64];
        snprintf(name, sizeof name, "matmul_cfg%zu", i);
        check_template(&c, name, sched_matmul, &mm_cfgs[i], 1e-5);
        hcase_free(&c);
    }
    /* ragged: extents not multiples of the tiles */
    for (size_t i = 0; i < 2; i++) {
        hcase c = {0};
        matmul_case(&c, 70, 50, 36);
        char name[64];
        snprintf(name, sizeof name, "matmul_ragged_cfg%zu", i);
        check_template(&c, name, sched_matmul, &mm_cfgs[i], 1e-5);
        hcase_free(&c);
    }
}

/* Configurations drawn from a template's knob space (te_cuda_knob_space) on a ragged problem
 * made by mk; those the template or the GPU check refuses (too many threads, too much shared
 * memory) are skipped. TSH_SAMPLES sets how many are drawn (default want). */
static void sample_knob_space(const char *op, void (*mk)(hcase *c), hsched_fn fn, int want)
{
    int nk = 0;
    const te_cuda_knob_def *d = te_cuda_knob_space(op, &nk);
    assert_non_null(d);
    if (getenv("TSH_SAMPLES"))
        want = atoi(getenv("TSH_SAMPLES"));
    int ran = 0;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(99));
    for (int tries = 0; ran < want && tries < 20 * want; tries++) {
        te_cuda_knobs k = te_cuda_knobs_default(op);
        char name[160];
        int at = snprintf(name, sizeof name, "%s_s", op);
        for (int q = 0; q < nk; q++) {
            int v = d[q].values[tt_rng_int(&r, d[q].n)];
            assert_int_equal(te_cuda_knobs_set(&k, d[q].name, v), TE_OK);
            at += snprintf(name + at, sizeof name - (size_t)at, "_%d", v);
        }
        hcase c = {0};
        mk(&c);
        te_tensor **outs = c.t + c.n_in;
        te_schedule *s = te_schedule_create(c.ctx, c.n_out, outs);
        te_target tgt = te_target_cuda(80);
        te_lowered *f = NULL;
        if (fn(s, &c, &k) == TE_OK) {
            f = te_lower(s, c.n_in + c.n_out, c.t, "probe", &tgt);
            s = te_schedule_create(c.ctx, c.n_out, outs);
            assert_int_equal(fn(s, &c, &k), TE_OK);
        }
        if (f) {
            check_run(&c, name, s, 1e-5);
            ran++;
        }
        hcase_free(&c);
    }
    assert_true(ran > 0);
}

static void mk_matmul_ragged(hcase *c) { matmul_case(c, 70, 50, 36); }

static void test_matmul_knob_space_samples_run_in_the_harness(void **state)
{
    (void)state;
    sample_knob_space("matmul", mk_matmul_ragged, sched_matmul, 4);
}

static int sched_softmax(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_softmax(s, c->t[1], k);
}

static void test_softmax_template_runs_in_the_harness(void **state)
{
    (void)state;
    static const int threads[] = {32, 128, 100, 16};
    for (int i = 0; i < 4; i++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){5, 300});
        c.t[1] = te_op_softmax(c.ctx, c.t[0], -1, "Y");
        assert_non_null(c.t[1]);
        hcase_init(&c, 1, 1, 77);
        te_cuda_knobs k = te_cuda_knobs_default("softmax");
        k.threads = threads[i];
        char name[64];
        snprintf(name, sizeof name, "softmax_t%d", threads[i]);
        check_template(&c, name, sched_softmax, &k, 1e-5);
        hcase_free(&c);
    }
}

static int sched_layer_norm(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_layer_norm(s, c->t[3], k);
}

static void test_layer_norm_template_runs_in_the_harness(void **state)
{
    (void)state;
    static const int threads[] = {64, 256, 48};
    static const int64_t cols[] = {512, 300, 130};
    for (int i = 0; i < 3; i++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){3, cols[i]});
        c.t[1] = te_placeholder(c.ctx, "gamma", TE_F32, 1, (int64_t[]){cols[i]});
        c.t[2] = te_placeholder(c.ctx, "beta", TE_F32, 1, (int64_t[]){cols[i]});
        c.t[3] = te_op_layer_norm(c.ctx, c.t[0], c.t[1], c.t[2], 1e-5, -1, "Y");
        assert_non_null(c.t[3]);
        hcase_init(&c, 3, 1, 91);
        te_cuda_knobs k = te_cuda_knobs_default("layer_norm");
        k.threads = threads[i];
        char name[64];
        snprintf(name, sizeof name, "layer_norm_t%d_c%lld", threads[i], (long long)cols[i]);
        check_template(&c, name, sched_layer_norm, &k, 1e-5);
        hcase_free(&c);
    }
}

static void mk_softmax_cols(hcase *c, int64_t n)
{
    c->ctx = te_ctx_create();
    c->t[0] = te_placeholder(c->ctx, "X", TE_F32, 2, (int64_t[]){3, n});
    c->t[1] = te_op_softmax(c->ctx, c->t[0], -1, "Y");
    assert_non_null(c->t[1]);
    hcase_init(c, 1, 1, 78);
}

static void mk_softmax(hcase *c) { mk_softmax_cols(c, 333); }

static void mk_layer_norm_cols(hcase *c, int64_t n)
{
    c->ctx = te_ctx_create();
    c->t[0] = te_placeholder(c->ctx, "X", TE_F32, 2, (int64_t[]){3, n});
    c->t[1] = te_placeholder(c->ctx, "gamma", TE_F32, 1, (int64_t[]){n});
    c->t[2] = te_placeholder(c->ctx, "beta", TE_F32, 1, (int64_t[]){n});
    c->t[3] = te_op_layer_norm(c->ctx, c->t[0], c->t[1], c->t[2], 1e-5, -1, "Y");
    assert_non_null(c->t[3]);
    hcase_init(c, 3, 1, 92);
}

static void mk_layer_norm(hcase *c) { mk_layer_norm_cols(c, 333); }

static void test_row_op_knob_space_samples_run_in_the_harness(void **state)
{
    (void)state;
    sample_knob_space("softmax", mk_softmax, sched_softmax, 1);
    sample_knob_space("layer_norm", mk_layer_norm, sched_layer_norm, 1);
}

static int count_of(const char *s, const char *needle);
static const char *cuda_text(hcase *c, te_schedule *s, const char *name);

/* Row operations read and write their rows as float4 (float2) when the row length allows:
 * each thread's partial reductions load a whole vector once and combine its lanes, the output
 * is one wide load and one wide store per vector; a width that does not divide the row falls
 * back to the next that does. Every configuration runs in the harness (alignment checked). */
static void test_row_ops_use_wide_accesses(void **state)
{
    (void)state;
    static const struct {
        int64_t cols;
        int vec, threads;
        const char *load, *store; /* NULL: must not appear */
    } cases[] = {
        {256, 4, 32, "const float4 X_v4", "*(float4 *)&Y["},
        {300, 4, 64, "const float4 X_v4", "*(float4 *)&Y["}, /* 75 vectors: a guarded tail */
        {130, 4, 32, "const float2 X_v2", "*(float2 *)&Y["}, /* 130 = 2 x 65 */
        {256, 1, 32, NULL, NULL},
        {333, 4, 32, NULL, NULL}, /* odd: scalar */
    };
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        for (int op = 0; op < 2; op++) {
            hcase c = {0};
            int64_t n = cases[q].cols;
            if (op == 0)
                mk_softmax_cols(&c, n);
            else
                mk_layer_norm_cols(&c, n);
            te_cuda_knobs k = te_cuda_knobs_default(op == 0 ? "softmax" : "layer_norm");
            k.threads = cases[q].threads;
            k.vec = cases[q].vec;
            hsched_fn fn = op == 0 ? sched_softmax : sched_layer_norm;
            char name[64];
            snprintf(name, sizeof name, "%s_c%lld_v%d", op == 0 ? "softmax" : "layer_norm",
                     (long long)n, cases[q].vec);
            te_schedule *s = te_schedule_create(c.ctx, c.n_out, c.t + c.n_in);
            assert_int_equal(fn(s, &c, &k), TE_OK);
            const char *src = cuda_text(&c, s, name);
            const char *ld = cases[q].load, *stv = cases[q].store;
            if (ld) {
                /* max (or mean), sum (or var) and the output each read X as vectors */
                if (count_of(src, ld) < 3)
                    fail_msg("%s: expected 3 or more '%s' in\n%s", name, ld, src);
                if (!strstr(src, stv))
                    fail_msg("%s: expected '%s' in\n%s", name, stv, src);
            } else if (strstr(src, "float4") && strstr(src, "X_v")) {
                fail_msg("%s: no wide loads expected in\n%s", name, src);
            }
            check_template(&c, name, fn, &k, 1e-5);
            hcase_free(&c);
        }
    }
}

static int sched_rows_last(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_rows(s, c->t[c->n_in], k);
}

/* The generic row template ("rows") on the one-pass operators built on tuple reducers: the
 * online softmax (max, rescaled sum) and Welford's layer norm (count, mean, M2), cross-thread
 * tuple reductions; rows read as float4 where the length allows (tuple updates included),
 * ragged and odd lengths, thread counts that are not multiples of 32. An expression that is
 * not a row operation is refused with a message. */
static void test_rows_template_runs_tuple_row_ops(void **state)
{
    (void)state;
    static const struct {
        int64_t cols;
        int threads, vec;
    } cfg[] = {{256, 64, 4}, {300, 32, 4}, {130, 48, 4}, {333, 100, 2}, {64, 16, 1}};
    for (size_t q = 0; q < sizeof cfg / sizeof cfg[0]; q++)
        for (int op = 0; op < 2; op++) {
            hcase c = {0};
            int64_t n = cfg[q].cols;
            c.ctx = te_ctx_create();
            c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){3, n});
            if (op == 0) {
                c.t[1] = te_op_softmax_online(c.ctx, c.t[0], -1, "Y");
                assert_non_null(c.t[1]);
                hcase_init(&c, 1, 1, 81);
            } else {
                c.t[1] = te_placeholder(c.ctx, "gamma", TE_F32, 1, (int64_t[]){n});
                c.t[2] = te_placeholder(c.ctx, "beta", TE_F32, 1, (int64_t[]){n});
                c.t[3] = te_op_layer_norm_welford(c.ctx, c.t[0], c.t[1], c.t[2], 1e-5, -1, "Y");
                assert_non_null(c.t[3]);
                hcase_init(&c, 3, 1, 82);
            }
            te_cuda_knobs k = te_cuda_knobs_default("rows");
            k.threads = cfg[q].threads;
            k.vec = cfg[q].vec;
            char name[64];
            snprintf(name, sizeof name, "%s_c%lld_t%d_v%d", op ? "ln_welford" : "softmax_online",
                     (long long)n, k.threads, k.vec);
            if (n % 4 == 0 && k.vec == 4) {
                te_schedule *s = te_schedule_create(c.ctx, c.n_out, c.t + c.n_in);
                assert_int_equal(sched_rows_last(s, &c, &k), TE_OK);
                const char *src = cuda_text(&c, s, name);
                if (count_of(src, "const float4 X_v4") < 2)
                    fail_msg("%s: want the tuple reduction and the output to read float4:\n%s",
                             name, src);
            }
            check_template(&c, name, sched_rows_last, &k, 1e-5);
            hcase_free(&c);
        }

    /* not a row operation: a matmul */
    hcase c = {0};
    matmul_case(&c, 8, 8, 8);
    te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[2]);
    te_cuda_knobs k = te_cuda_knobs_default("rows");
    assert_int_equal(te_cuda_schedule_rows(s, c.t[2], &k), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "rows"));
    hcase_free(&c);
}

static int sched_mlp(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_mlp_gate(s, c->t[3], k);
}

static void test_mlp_gate_template_runs_in_the_harness(void **state)
{
    (void)state;
    static const te_cuda_knobs cfgs[] = {
        {32, 32, 8, 2, 2, 0, 4, 0, 0, 1, 0, 0, 0},
        {64, 32, 16, 4, 4, 0, 4, 1, 1, 1, 0, 0, 0},
    };
    static const int64_t rows[] = {64, 40};
    for (int i = 0; i < 2; i++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){rows[i], 48});
        c.t[1] = te_placeholder(c.ctx, "W1", TE_F32, 2, (int64_t[]){48, 72});
        c.t[2] = te_placeholder(c.ctx, "W3", TE_F32, 2, (int64_t[]){48, 72});
        c.t[3] = te_op_mlp_gate(c.ctx, c.t[0], c.t[1], c.t[2], "Y");
        assert_non_null(c.t[3]);
        hcase_init(&c, 3, 1, 5);
        char name[64];
        snprintf(name, sizeof name, "mlp_gate_cfg%d", i);
        check_template(&c, name, sched_mlp, &cfgs[i], 1e-5);
        hcase_free(&c);
    }
}

static int sched_conv(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_conv2d(s, c->t[2], k);
}

static void test_conv2d_template_runs_in_the_harness(void **state)
{
    (void)state;
    /* the input tile staged with its halo (stage_input) or read from global memory */
    static const te_cuda_knobs cfgs[] = {
        {16, 8, 4, 2, 2, 0, 1, 0, 0, 1, 0, 0, 1},
        {32, 16, 8, 4, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {8, 4, 4, 2, 2, 0, 1, 0, 0, 1, 0, 0, 1},
    };
    static const int64_t hw[] = {8, 7, 9};
    for (int i = 0; i < 3; i++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){1, 8, hw[i], hw[i]});
        c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){24, 8, 3, 3});
        te_conv2d_params cp = te_conv2d_params_default();
        cp.pad_h = cp.pad_w = 1;
        if (i == 2) /* strided and dilated: the halo is (tile_n - 1) * 2 + 2 * 2 + 1 wide */
            cp.stride_h = cp.stride_w = 2, cp.dilation_h = cp.dilation_w = 2;
        c.t[2] = te_op_conv2d(c.ctx, c.t[0], c.t[1], &cp, "Y");
        assert_non_null(c.t[2]);
        hcase_init(&c, 2, 1, 13);
        char name[64];
        snprintf(name, sizeof name, "conv2d_cfg%d", i);
        check_template(&c, name, sched_conv, &cfgs[i], 1e-5);
        hcase_free(&c);
    }
}

/* ---- Every operator with a GPU template, through te_cuda_schedule_op -------------------- */

static const char *g_op; /* the operator check_op schedules */

static int sched_op(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_op(s, g_op, c->n_out, c->t + c->n_in, k);
}

/* The operator's template at its default knobs and at `alt` (knob name, value pairs). */
static void check_op(hcase *c, const char *name, const char *op, const char *alt_knob, int alt)
{
    g_op = op;
    const char *tmpl = te_cuda_template_for(op, NULL);
    assert_non_null(tmpl);
    te_cuda_knobs k = te_cuda_knobs_default(tmpl);
    check_template(c, name, sched_op, &k, 1e-5);
    if (alt_knob) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s_%s%d", name, alt_knob, alt);
        assert_int_equal(te_cuda_knobs_set(&k, alt_knob, alt), TE_OK);
        check_template(c, nm, sched_op, &k, 1e-5);
    }
}

static void test_every_operator_template_runs_in_the_harness(void **state)
{
    (void)state;
    /* batch matmul: transposes, a broadcast batch, ragged tiles */
    for (int v = 0; v < 3; v++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        int ta = v == 1, tb = v == 2;
        int64_t b = 3, m = 37, n = 50, kk = 20;
        c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 3,
                                ta ? (int64_t[]){b, kk, m} : (int64_t[]){b, m, kk});
        c.t[1] = te_placeholder(c.ctx, "B", TE_F32, 3,
                                tb ? (int64_t[]){1, n, kk} : (int64_t[]){v == 0 ? 1 : b, kk, n});
        c.t[2] = te_op_batch_matmul(c.ctx, c.t[0], c.t[1], ta, tb, "C");
        assert_non_null(c.t[2]);
        hcase_init(&c, 2, 1, 21 + (uint64_t)v);
        char name[64];
        snprintf(name, sizeof name, "batch_matmul_v%d", v);
        check_op(&c, name, "batch_matmul", v == 0 ? "vthread_n" : NULL, 2);
        hcase_free(&c);
    }
    /* dense + bias and matmul + bias + GELU: the reduction in registers under the epilogue */
    for (int v = 0; v < 2; v++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){45, 24});
        c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 2, (int64_t[]){24, 70});
        c.t[2] = te_placeholder(c.ctx, "bias", TE_F32, 1, (int64_t[]){70});
        c.t[3] = v ? te_op_matmul_bias_act(c.ctx, c.t[0], c.t[1], c.t[2], TE_ACT_GELU, "Y")
                   : te_op_dense_bias(c.ctx, c.t[0], c.t[1], c.t[2], "Y");
        assert_non_null(c.t[3]);
        hcase_init(&c, 3, 1, 31 + (uint64_t)v);
        check_op(&c, v ? "matmul_bias_gelu" : "dense_bias", v ? "matmul_bias_act" : "dense_bias",
                 "double_buffer", 1);
        hcase_free(&c);
    }
    /* QKV: three outputs of different widths from one input */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){40, 32});
        c.t[1] = te_placeholder(c.ctx, "Wq", TE_F32, 2, (int64_t[]){32, 48});
        c.t[2] = te_placeholder(c.ctx, "Wk", TE_F32, 2, (int64_t[]){32, 16});
        c.t[3] = te_placeholder(c.ctx, "Wv", TE_F32, 2, (int64_t[]){32, 16});
        assert_int_equal(te_op_qkv_projection(c.ctx, c.t[0], c.t[1], c.t[2], c.t[3], c.t + 4, NULL),
                         TE_OK);
        hcase_init(&c, 4, 3, 41);
        check_op(&c, "qkv", "qkv_projection", "tile_n", 16);
        hcase_free(&c);
    }
    /* conv + BN + ReLU, padded, the input tile staged */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){2, 6, 9, 9});
        c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){12, 6, 3, 3});
        c.t[2] = te_placeholder(c.ctx, "scale", TE_F32, 1, (int64_t[]){12});
        c.t[3] = te_placeholder(c.ctx, "shift", TE_F32, 1, (int64_t[]){12});
        te_conv2d_params cp = te_conv2d_params_default();
        cp.pad_h = cp.pad_w = 1;
        c.t[4] = te_op_conv2d_bn_relu(c.ctx, c.t[0], c.t[1], c.t[2], c.t[3], &cp, "Y");
        assert_non_null(c.t[4]);
        hcase_init(&c, 4, 1, 51);
        check_op(&c, "conv_bn_relu", "conv2d_bn_relu", "stage_input", 0);
        hcase_free(&c);
    }
    /* window reductions: max and average pooling (padded, strided), depthwise convolution */
    for (int v = 0; v < 3; v++) {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){2, 5, 11, 13});
        int n_in = 1;
        const char *op;
        if (v < 2) {
            te_pool2d_params pp = {3, 3, 2, 2, 1, 1, 0};
            c.t[1] = te_op_pool2d(c.ctx, c.t[0], v ? TE_POOL_AVG : TE_POOL_MAX, &pp, "P");
            op = v ? "avg_pool2d" : "max_pool2d";
        } else {
            c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){5, 2, 3, 3});
            te_conv2d_params cp = te_conv2d_params_default();
            cp.pad_h = cp.pad_w = 1;
            c.t[2] = te_op_depthwise_conv2d(c.ctx, c.t[0], c.t[1], &cp, "D");
            n_in = 2;
            op = "depthwise_conv2d";
        }
        assert_non_null(c.t[n_in]);
        hcase_init(&c, n_in, 1, 61 + (uint64_t)v);
        check_op(&c, op, op, "threads", 32);
        hcase_free(&c);
    }
    /* RMS norm over rows that are not a multiple of the threads */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){9, 300});
        c.t[1] = te_placeholder(c.ctx, "g", TE_F32, 1, (int64_t[]){300});
        c.t[2] = te_op_rms_norm(c.ctx, c.t[0], c.t[1], 1e-5, "R");
        assert_non_null(c.t[2]);
        hcase_init(&c, 2, 1, 71);
        check_op(&c, "rms_norm", "rms_norm", "threads", 64);
        hcase_free(&c);
    }
}

/* ---- GPU sketches (autotune/sketch_gpu.c) on expressions with no template ----------------- */

/* Up to `want` distinct sketch configurations of the case's expression for sm_80 (a space
 * without an operator name: the expression alone), each run in the harness. */
static void check_sketches(hcase *c, const char *name, int want)
{
    te_target tgt = te_target_cuda(80);
    te_space *sp = te_space_create(c->ctx, NULL, c->n_in, c->t, c->n_out, c->t + c->n_in,
                                   TE_SPACE_SKETCH, &tgt);
    if (!sp)
        fail_msg("%s: sketch space: %s", name, te_ctx_errmsg(c->ctx));
    if (getenv("TSH_SAMPLES"))
        want = atoi(getenv("TSH_SAMPLES"));
    te_rng rng;
    te_rng_seed(&rng, tt_seed(7));
    const char *seen[64];
    int n = 0;
    for (int tries = 0; n < want && n < 64 && tries < 40 * want; tries++) {
        const char *tr = te_space_sample(sp, &rng);
        if (!tr)
            fail_msg("%s: no valid sketch configuration: %s", name, te_ctx_errmsg(c->ctx));
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(seen[i], tr);
        if (dup)
            continue;
        seen[n++] = tr;
        te_schedule *s = te_space_instantiate(sp, tr);
        if (!s)
            fail_msg("%s: the sampled trace does not replay: %s\n%s", name, te_ctx_errmsg(c->ctx),
                     tr);
        char nm[96];
        snprintf(nm, sizeof nm, "%s_sketch%d", name, n);
        check_run(c, nm, s, 1e-5);
    }
    assert_true(n > 0);
}

static void test_gpu_sketches_run_in_the_harness(void **state)
{
    (void)state;
    /* a product with a bias + ReLU epilogue written by hand (no operator name), ragged */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        te_ctx *x = c.ctx;
        c.t[0] = te_placeholder(x, "A", TE_F32, 2, (int64_t[]){45, 28});
        c.t[1] = te_placeholder(x, "B", TE_F32, 2, (int64_t[]){28, 70});
        c.t[2] = te_placeholder(x, "bias", TE_F32, 1, (int64_t[]){70});
        te_expr *i = te_axis(x, "i", 45), *j = te_axis(x, "j", 70), *k = te_reduce_axis(x, "k", 28);
        te_tensor *P =
            te_compute(x, "P", 2, (te_expr *[]){i, j},
                       te_sum(x, te_mul(x, TE_AT(x, c.t[0], i, k), TE_AT(x, c.t[1], k, j)), 1, &k));
        te_expr *i2 = te_axis(x, "i", 45), *j2 = te_axis(x, "j", 70);
        c.t[3] = te_compute(
            x, "Y", 2, (te_expr *[]){i2, j2},
            te_max(x, te_add(x, TE_AT(x, P, i2, j2), te_read(x, c.t[2], 1, &j2)), te_f32(x, 0.0)));
        assert_non_null(c.t[3]);
        hcase_init(&c, 3, 1, 81);
        check_sketches(&c, "user_gemm_relu", 6);
        hcase_free(&c);
    }
    /* a batched product as an output (cached to a local accumulator) */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 3, (int64_t[]){3, 20, 24});
        c.t[1] = te_placeholder(c.ctx, "B", TE_F32, 3, (int64_t[]){3, 24, 36});
        c.t[2] = te_op_batch_matmul(c.ctx, c.t[0], c.t[1], 0, 0, "C");
        hcase_init(&c, 2, 1, 82);
        check_sketches(&c, "bmm", 4);
        hcase_free(&c);
    }
    /* rows: softmax (cross-thread reductions at the row loop) */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){7, 300});
        c.t[1] = te_op_softmax(c.ctx, c.t[0], 1, "S");
        hcase_init(&c, 1, 1, 83);
        check_sketches(&c, "softmax", 3);
        hcase_free(&c);
    }
    /* reductions: average pooling (a sum read by an elementwise division) and a row sum */
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){1, 3, 9, 9});
        te_pool2d_params pp = {3, 3, 2, 2, 1, 1, 0};
        c.t[1] = te_op_pool2d(c.ctx, c.t[0], TE_POOL_AVG, &pp, "P");
        hcase_init(&c, 1, 1, 84);
        check_sketches(&c, "avg_pool", 3);
        hcase_free(&c);
    }
    {
        hcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){33, 200});
        c.t[1] = te_op_reduce(c.ctx, c.t[0], TE_RSUM, 1, (int[]){1}, 0, "R");
        hcase_init(&c, 1, 1, 85);
        check_sketches(&c, "row_sum", 4);
        hcase_free(&c);
    }
}

static int sched_elem(te_schedule *s, hcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_elementwise(s, c->t[2], k);
}

static void test_elementwise_template_runs_in_the_harness(void **state)
{
    (void)state;
    hcase c = {0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 2, (int64_t[]){33, 70});
    c.t[1] = te_placeholder(c.ctx, "B", TE_F32, 1, (int64_t[]){70});
    te_tensor *sum = te_op_binary(c.ctx, TE_ADD, c.t[0], c.t[1], "S");
    c.t[2] = te_op_gelu(c.ctx, sum, "Y");
    assert_non_null(c.t[2]);
    hcase_init(&c, 2, 1, 3);
    te_cuda_knobs k = te_cuda_knobs_default("elementwise");
    check_template(&c, "add_gelu", sched_elem, &k, 1e-5);
    k.threads = 64;
    k.vec = 4;
    check_template(&c, "add_gelu_v4", sched_elem, &k, 1e-5); /* 2310 elements: unrolled */
    hcase_free(&c);

    /* 32 x 64: the vectors tile the tensor, so the loop stays vectorized: float4 loads of A
     * and of the broadcast B, one float4 store */
    hcase d = {0};
    d.ctx = te_ctx_create();
    d.t[0] = te_placeholder(d.ctx, "A", TE_F32, 2, (int64_t[]){32, 64});
    d.t[1] = te_placeholder(d.ctx, "B", TE_F32, 1, (int64_t[]){64});
    d.t[2] = te_op_gelu(d.ctx, te_op_binary(d.ctx, TE_ADD, d.t[0], d.t[1], "S"), "Y");
    assert_non_null(d.t[2]);
    hcase_init(&d, 2, 1, 4);
    te_schedule *s = te_schedule_create(d.ctx, 1, &d.t[2]);
    assert_int_equal(sched_elem(s, &d, &k), TE_OK);
    const char *src = cuda_text(&d, s, "add_gelu_f4");
    if (!strstr(src, "const float4 A_v4") || !strstr(src, "const float4 B_v4") ||
        !strstr(src, "*(float4 *)&Y["))
        fail_msg("add + GELU over 32 x 64, vec 4: want float4 loads of A and B and a float4 "
                 "store:\n%s",
                 src);
    check_template(&d, "add_gelu_f4", sched_elem, &k, 1e-5);
    hcase_free(&d);
}

/* Loads under a lazy condition are never read ahead as wide loads: Y[i, j] = i < 7 ? A[i + 1,
 * j] : 0 would read past A's end in its last row (the lowering also clamps such a load's index,
 * and the emitter skips the branches of te_if_then_else); the store is still one float4, and
 * the run under AddressSanitizer is exact. Concat (indices clamped by selects) likewise. */
static void test_guarded_loads_are_not_read_ahead(void **state)
{
    (void)state;
    hcase c = {0};
    te_ctx *ctx = c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){8, 16});
    te_expr *i = te_axis(ctx, "i", 8), *j = te_axis(ctx, "j", 16);
    te_expr *next = TE_AT(ctx, c.t[0], te_add(ctx, i, te_int(ctx, 1)), j);
    c.t[1] = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                        te_if_then_else(ctx, te_lt(ctx, i, te_int(ctx, 7)), next, te_f32(ctx, 0)));
    assert_non_null(c.t[1]);
    hcase_init(&c, 1, 1, 5);
    te_cuda_knobs k = te_cuda_knobs_default("elementwise");
    k.threads = 32;
    k.vec = 4;
    te_schedule *s = te_schedule_create(ctx, 1, &c.t[1]);
    assert_int_equal(te_cuda_schedule_elementwise(s, c.t[1], &k), TE_OK);
    const char *src = cuda_text(&c, s, "shift_f4");
    if (strstr(src, "A_v4") || !strstr(src, "*(float4 *)&Y["))
        fail_msg("shifted rows, vec 4: want no wide load of the guarded A and a float4 store:\n%s",
                 src);
    s = te_schedule_create(ctx, 1, &c.t[1]);
    assert_int_equal(te_cuda_schedule_elementwise(s, c.t[1], &k), TE_OK);
    check_run(&c, "shift_f4", s, 0);
    hcase_free(&c);

    hcase d = {0};
    d.ctx = te_ctx_create();
    d.t[0] = te_placeholder(d.ctx, "A", TE_F32, 2, (int64_t[]){8, 8});
    d.t[1] = te_placeholder(d.ctx, "B", TE_F32, 2, (int64_t[]){8, 8});
    d.t[2] = te_op_concat(d.ctx, 2, d.t, 1, "Y");
    assert_non_null(d.t[2]);
    hcase_init(&d, 2, 1, 6);
    s = te_schedule_create(d.ctx, 1, &d.t[2]);
    assert_int_equal(sched_elem(s, &d, &k), TE_OK);
    if (!strstr(cuda_text(&d, s, "concat_f4"), "*(float4 *)&Y["))
        fail_msg("concat, vec 4: want a float4 store");
    check_template(&d, "concat_f4", sched_elem, &k, 0);
    hcase_free(&d);
}

/* ---- Cross-thread tuple reductions (tests/test_tuple_reduce_gpu.c's schedules) ------------ */

static void tuple_case(hcase *c, int which, int64_t M, int64_t K)
{
    te_ctx *ctx = c->ctx = te_ctx_create();
    c->t[0] = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_expr *v = TE_AT(ctx, c->t[0], i, k);
    te_reducer *red;
    te_expr *srcs[3];
    const char *names[3];
    int n;
    if (which == 0) {
        red = te_reducer_argmax(ctx, TE_F32, TE_I64);
        srcs[0] = v, srcs[1] = k, names[0] = "val", names[1] = "idx", n = 2;
    } else if (which == 1) {
        red = te_reducer_welford(ctx, TE_F32);
        srcs[0] = te_f32(ctx, 1), srcs[1] = v, srcs[2] = te_f32(ctx, 0);
        names[0] = "cnt", names[1] = "mean", names[2] = "m2", n = 3;
    } else {
        red = te_reducer_online_softmax(ctx, TE_F32);
        srcs[0] = v, srcs[1] = te_f32(ctx, 1), names[0] = "mx", names[1] = "sm", n = 2;
    }
    te_expr *body = te_reduce_tuple(ctx, red, n, srcs, 1, &k);
    if (te_compute_tuple(ctx, n, names, 1, &i, body, c->t + 1))
        fail_msg("%s", te_ctx_errmsg(ctx));
    hcase_init(c, 1, n, 51 + (uint64_t)which);
}

static te_schedule *tuple_schedule(hcase *c, int threads, bool rows_y)
{
    te_schedule *s = te_schedule_create(c->ctx, c->n_out, c->t + 1);
    te_stage *st = te_schedule_stage(s, c->t[1]);
    te_iter *ko, *kt, *bi, *ti;
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), threads, &ko, &kt), TE_OK);
    assert_int_equal(te_reorder(st, 2, (te_iter *[]){kt, ko}), TE_OK);
    if (rows_y) {
        assert_int_equal(te_split(st, te_stage_axis(st, 0), 4, &bi, &ti), TE_OK);
        assert_int_equal(te_bind(st, bi, TE_BLOCK_X), TE_OK);
        assert_int_equal(te_bind(st, ti, TE_THREAD_Y), TE_OK);
    } else {
        assert_int_equal(te_bind(st, te_stage_axis(st, 0), TE_BLOCK_X), TE_OK);
    }
    if (te_bind_reduce(st, kt, TE_THREAD_X))
        fail_msg("bind_reduce: %s", te_ctx_errmsg(c->ctx));
    return s;
}

static void test_tuple_reductions_run_in_the_harness(void **state)
{
    (void)state;
    static const char *names[] = {"argmax", "welford", "online_softmax"};
    static const struct {
        int threads;
        bool rows_y;
    } cfgs[] = {{32, false}, {64, false}, {16, false}, {32, true}};
    for (int w = 0; w < 3; w++)
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            hcase c = {0};
            tuple_case(&c, w, 8, 200);
            char name[80];
            snprintf(name, sizeof name, "%s_t%d%s", names[w], cfgs[i].threads,
                     cfgs[i].rows_y ? "_y" : "");
            check_run(&c, name, tuple_schedule(&c, cfgs[i].threads, cfgs[i].rows_y), 1e-5);
            hcase_free(&c);
        }
}

/* ---- Attention (autotune's "attention" template, GPU path) --------------------------------- */

static void test_attention_template_runs_in_the_harness(void **state)
{
    (void)state;
    static const int64_t lq[] = {37, 50}, lk[] = {45, 50}, dh[] = {32, 16};
    for (int form = 0; form < TE_ATTN_FORM_COUNT; form++)
        for (int i = 0; i < 2; i++) {
            hcase c = {0};
            c.ctx = te_ctx_create();
            c.t[0] = te_placeholder(c.ctx, "Q", TE_F32, 4, (int64_t[]){1, 2, lq[i], dh[i]});
            c.t[1] = te_placeholder(c.ctx, "K", TE_F32, 4, (int64_t[]){1, 2, lk[i], dh[i]});
            c.t[2] = te_placeholder(c.ctx, "V", TE_F32, 4, (int64_t[]){1, 2, lk[i], dh[i]});
            te_attention_params ap = te_attention_params_default();
            ap.form = (te_attn_form)form;
            ap.mask = i ? TE_ATTN_MASK_CAUSAL : TE_ATTN_MASK_NONE;
            c.t[3] = te_op_attention(c.ctx, c.t[0], c.t[1], c.t[2], NULL, &ap, "O");
            if (!c.t[3])
                fail_msg("attention: %s", te_ctx_errmsg(c.ctx));
            hcase_init(&c, 3, 1, 47);
            te_target tgt = te_target_cuda(80);
            te_space *sp =
                te_space_create(c.ctx, "attention", 3, c.t, 1, c.t + 3, TE_SPACE_TEMPLATE, &tgt);
            if (!sp)
                fail_msg("attention space: %s", te_ctx_errmsg(c.ctx));
            te_schedule *s = te_space_instantiate(sp, te_space_get(sp, 0));
            assert_non_null(s);
            char name[64];
            snprintf(name, sizeof name, "attention_%s_%s", form ? "two_pass" : "one_pass",
                     i ? "causal_50x50x16" : "37x45x32");
            check_run(&c, name, s, 1e-5);
            hcase_free(&c);
        }
}

/* ---- f16/bf16 storage ------------------------------------------------------------------------ */

/* tests/test_dtypes.c's half kernel: bf16 x bf16 -> f32 matmul, an f16 store, f16 -> i8
 * (saturating) and f16 -> bf16 casts, through the shim's cuda_fp16.h and cuda_bf16.h. */
static void test_half_storage_runs_in_the_harness(void **state)
{
    (void)state;
    enum { M = 8, N = 64, K = 16 };
    hcase c = {0};
    te_ctx *ctx = c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){M, K});
    c.t[1] = te_placeholder(ctx, "B", TE_BF16, 2, (int64_t[]){K, N});
    c.t[2] = te_op_matmul_mixed(ctx, c.t[0], c.t[1], 0, 0, TE_F32, "C");
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    c.t[3] =
        te_compute(ctx, "H", 2, (te_expr *[]){i, j},
                   te_cast(ctx, TE_F16, te_mul(ctx, TE_AT(ctx, c.t[2], i, j), te_f32(ctx, 3.0))));
    te_expr *i2 = te_axis(ctx, "i", M), *j2 = te_axis(ctx, "j", N);
    te_expr *h = TE_AT(ctx, c.t[3], i2, j2);
    c.t[4] = te_compute(
        ctx, "Q", 2, (te_expr *[]){i2, j2},
        te_add(ctx, te_cast(ctx, TE_F32, te_cast(ctx, TE_I8, h)),
               te_cast(ctx, TE_F32,
                       te_cast(ctx, TE_BF16, te_add(ctx, h, te_const(ctx, TE_F16, 0.5))))));
    assert_non_null(c.t[4]);
    hcase_init(&c, 2, 3, 21);
    te_schedule *s = te_schedule_create(ctx, 3, c.t + 2);
    for (int o = 0; o < 3; o++) {
        te_stage *st = te_schedule_stage(s, c.t[2 + o]);
        assert_int_equal(te_bind(st, te_stage_axis(st, 0), TE_BLOCK_X), TE_OK);
        assert_int_equal(te_bind(st, te_stage_axis(st, 1), TE_THREAD_X), TE_OK);
    }
    /* the tolerance of half storage (te_dtype_tolerance caps at 1e-2) */
    check_run(&c, "half_gpu", s, 1e-2);
    hcase_free(&c);
}

/* ---- The harness catches a missing barrier ------------------------------------------------ */

static void test_removed_barriers_are_caught(void **state)
{
    (void)state;
    /* the matmul's tiles in shared memory, single-buffered: two barriers per k step */
    hcase c = {0};
    matmul_case(&c, 32, 32, 64);
    te_cuda_knobs k = {32, 32, 8, 2, 2, 0, 1, 0, 0, 0, 0, 0, 0};
    te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[2]);
    assert_int_equal(sched_matmul(s, &c, &k), TE_OK);
    int dropped = 0;
    hrun r = run_schedule(&c, s, "mm_nobarrier", H_TSAN, true, &dropped);
    if (g_jobs) {
        s = te_schedule_create(c.ctx, 1, &c.t[2]);
        assert_int_equal(sched_matmul(s, &c, &k), TE_OK);
        run_schedule(&c, s, "mm_barrier", H_TSAN, false, &dropped);
        hcase_free(&c);
        return;
    }
    assert_true(dropped >= 1);
    assert_int_equal(r.compiled, 0);
    if (strstr(r.log, "FATAL: ThreadSanitizer")) { /* e.g. a kernel's mmap layout TSan rejects */
        printf("[  SKIP    ] ThreadSanitizer cannot run here:\n%.400s\n", r.log);
        hcase_free(&c);
        return;
    }
    bool race = strstr(r.log, "ThreadSanitizer: data race") != NULL;
    printf("  without its %d barriers: run status %d, %s, max rel err %g\n", dropped, r.ran,
           race ? "ThreadSanitizer reports a data race" : "no race report", r.err);
    if (!(race || r.err > 1e-5))
        fail_msg("the harness did not notice the deleted barriers:\n%s", r.log);
    assert_true(race);
    /* the same kernel with its barriers is clean under ThreadSanitizer */
    s = te_schedule_create(c.ctx, 1, &c.t[2]);
    assert_int_equal(sched_matmul(s, &c, &k), TE_OK);
    r = run_schedule(&c, s, "mm_barrier", H_TSAN, false, &dropped);
    if (r.compiled || r.ran || !(r.err <= 1e-5))
        fail_msg("with its barriers: compile %d run %d err %g\n%s", r.compiled, r.ran, r.err,
                 r.log);
    hcase_free(&c);
}

/* ---- Warp-first cross-thread reductions (backends/cuda/emit_cuda_stmt.c) ------------------- */

static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The CUDA text of schedule s of case c (sm_80). */
static const char *cuda_text(hcase *c, te_schedule *s, const char *name)
{
    te_target tgt = te_target_cuda(80);
    te_lowered *f = te_lower(s, c->n_in + c->n_out, c->t, name, &tgt);
    if (!f)
        fail_msg("%s: lowering for sm_80: %s", name, te_ctx_errmsg(c->ctx));
    const char *src = te_emit_cuda(c->ctx, f, &tgt);
    if (!src)
        fail_msg("%s: CUDA emission: %s", name, te_ctx_errmsg(c->ctx));
    return src;
}

/* Y[i, j] = X[i, j] - max_k X[i, k] over X[6, 200], `rows` rows per block in a serial loop,
 * the maximum of each row reduced by 64 threads (200 is not a multiple of 64: the last step of
 * each thread is guarded) and computed at the row loop. */
static void row_centre_case(hcase *c)
{
    c->ctx = te_ctx_create();
    te_ctx *ctx = c->ctx;
    c->t[0] = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){6, 200});
    te_tensor *M = te_op_reduce(ctx, c->t[0], TE_RMAX, 1, (int[]){1}, 0, "M");
    te_expr *i = te_axis(ctx, "i", 6), *j = te_axis(ctx, "j", 200);
    c->t[1] = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                         te_sub(ctx, TE_AT(ctx, c->t[0], i, j), TE_AT(ctx, M, i)));
    assert_non_null(c->t[1]);
    hcase_init(c, 1, 1, 55);
}

static te_schedule *row_centre_schedule(hcase *c, int rows)
{
    te_schedule *s = te_schedule_create(c->ctx, 1, &c->t[1]);
    te_stage *O = te_schedule_stage(s, c->t[1]);
    te_stage *M = te_schedule_stage_by_name(s, "M");
    assert_non_null(M);
    te_iter *io, *ii, *jo, *jt, *ko, *kt;
    assert_int_equal(te_split(O, te_stage_axis(O, 0), rows, &io, &ii), TE_OK);
    assert_int_equal(te_split(O, te_stage_axis(O, 1), 64, &jo, &jt), TE_OK);
    assert_int_equal(te_bind(O, io, TE_BLOCK_X), TE_OK);
    assert_int_equal(te_bind(O, jt, TE_THREAD_X), TE_OK);
    assert_int_equal(te_compute_at(M, O, ii), TE_OK);
    assert_int_equal(te_split(M, te_stage_reduce_axis(M, 0), 64, &ko, &kt), TE_OK);
    assert_int_equal(te_reorder(M, 2, (te_iter *[]){kt, ko}), TE_OK);
    assert_int_equal(te_bind_reduce(M, kt, TE_THREAD_X), TE_OK);
    return s;
}

/* A reduction over 64..1024 threads of a one-dimensional block is written warp first: shuffles
 * inside each warp, one barrier, a fold of the warps' results. A second barrier follows the
 * fold only when the shared array is written again before any other barrier (rows in a loop),
 * and deleting that one is a race ThreadSanitizer reports. */
static void test_warp_first_reductions_use_one_barrier_each(void **state)
{
    (void)state;
    /* softmax: max and sum, one barrier each (the tree had 1 + 7 + 1 per reduction) */
    hcase c = {0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){5, 300});
    c.t[1] = te_op_softmax(c.ctx, c.t[0], -1, "Y");
    hcase_init(&c, 1, 1, 79);
    te_cuda_knobs k = te_cuda_knobs_default("softmax");
    k.threads = 128;
    k.vec = 1; /* 300 scalars over 128 threads (with float4, 75 vectors: a block of 75) */
    te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[1]);
    assert_int_equal(te_cuda_schedule_softmax(s, c.t[1], &k), TE_OK);
    const char *src = cuda_text(&c, s, "sm_wf");
    if (count_of(src, "__syncthreads();") != 2 || count_of(src, "// warp first") != 2 ||
        strstr(src, "_s64"))
        fail_msg("softmax, 128 threads: want two warp-first reductions, one barrier each:\n%s",
                 src);
    check_template(&c, "softmax_warp_first_t128", sched_softmax, &k, 1e-5);
    hcase_free(&c);

    /* rows less their maximum: one row per block, then three rows per block in a serial loop
     * (where the barrier pass puts one more at the top of the loop body: the next row's
     * partial results must not overwrite this row's before every thread has folded them) */
    for (int rows = 1; rows <= 3; rows += 2) {
        row_centre_case(&c);
        s = row_centre_schedule(&c, rows);
        src = cuda_text(&c, s, "rowcentre");
        if (count_of(src, "__syncthreads();") != (rows == 1 ? 1 : 2) ||
            count_of(src, "// warp first") != 1 || strstr(src, "is written again")) {
            fprintf(stderr, "%s\n", src);
            fail_msg("rows less their maximum, %d rows per block: want %d barrier(s) (source "
                     "above)",
                     rows, rows == 1 ? 1 : 2);
        }
        char name[64];
        snprintf(name, sizeof name, "row_centre_warp_first_r%d", rows);
        check_run(&c, name, row_centre_schedule(&c, rows), 1e-5);
        hcase_free(&c);
    }

    /* without its barriers, the fold reads the warps' slots while lane 0s write them */
    row_centre_case(&c);
    int dropped = 0;
    hrun r =
        run_schedule(&c, row_centre_schedule(&c, 3), "rowcentre_nobarrier", H_TSAN, true, &dropped);
    if (g_jobs) {
        run_schedule(&c, row_centre_schedule(&c, 3), "rowcentre_barrier", H_TSAN, false, &dropped);
        hcase_free(&c);
        return;
    }
    assert_int_equal(dropped, 2);
    assert_int_equal(r.compiled, 0);
    if (strstr(r.log, "FATAL: ThreadSanitizer")) {
        printf("[  SKIP    ] ThreadSanitizer cannot run here:\n%.400s\n", r.log);
        hcase_free(&c);
        return;
    }
    bool race = strstr(r.log, "ThreadSanitizer: data race") != NULL;
    printf("  without its 2 barriers: %s\n",
           race ? "ThreadSanitizer reports a data race" : "no race report");
    if (!race)
        fail_msg("no race reported without the barriers:\n%s", r.log);
    r = run_schedule(&c, row_centre_schedule(&c, 3), "rowcentre_barrier", H_TSAN, false, &dropped);
    if (r.compiled || r.ran || !(r.err <= 1e-5))
        fail_msg("with the barriers: compile %d run %d err %g\n%s", r.compiled, r.ran, r.err,
                 r.log);
    hcase_free(&c);
}

/* ---- The shim's own checks ------------------------------------------------------------------ */

/* A hand-written kernel on A[64] -> Y[64] run in the harness; returns its outcome. */
static hrun run_handwritten(const char *src, int threads)
{
    hcase c = {0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 1, (int64_t[]){64});
    c.t[1] = te_op_gelu(c.ctx, c.t[0], "Y");
    assert_non_null(c.t[1]);
    hcase_init(&c, 1, 1, 9);
    te__cuda_kernel k = {"bad", {1, 1, 1}, {threads, 1, 1}, 2, {0, 1}};
    te__cuda_program p = {0};
    p.nkernels = 1;
    p.kernels = &k;
    p.n_args = 2;
    p.temp_bytes = NULL;
    hrun r = run_program(&c, &p, src, H_ASAN);
    hcase_free(&c);
    return r;
}

/* Whether log holds one of the '|'-separated reports. */
static bool has_report(const char *log, const char *reports)
{
    for (const char *r = reports; r && *r;) {
        const char *bar = strchr(r, '|');
        size_t len = bar ? (size_t)(bar - r) : strlen(r);
        char one[128];
        snprintf(one, sizeof one, "%.*s", (int)len, r);
        if (strstr(log, one))
            return true;
        r = bar ? bar + 1 : NULL;
    }
    return false;
}

static void test_shim_reports_misaligned_vectors_and_bad_masks(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int threads;
        const char *report; /* NULL: must run */
    } cases[] = {
        /* a float4 store at an address that is not a multiple of 16 bytes */
        {"    *(float4 *)&Y[threadIdx.x * 4 + 1] = *(const float4 *)&A[0];\n", 8,
         "misaligned address"},
        /* the same store aligned */
        {"    *(float4 *)&Y[threadIdx.x * 4] = *(const float4 *)&A[0];\n", 8, NULL},
        /* a full-warp mask in a block of 16 threads */
        {"    Y[threadIdx.x] = __shfl_down_sync(0xffffffffu, A[threadIdx.x], 1);\n", 16,
         "which this warp does not have"},
        /* the right mask; lane 15 reads lane 16, outside the mask: poison (NaN) */
        {"    float v = __shfl_down_sync(0x0000ffffu, A[threadIdx.x], 1);\n"
         "    if (threadIdx.x == 15 ? v == v : v != A[threadIdx.x + 1])\n"
         "        __builtin_trap();\n",
         16, NULL},
        /* a thread that leaves the kernel while the others wait at __syncthreads: the shim
         * reports it at the barrier or at the thread's exit, whichever the threads' timing
         * reaches first (cuda_shim.h; either report names the bug) */
        {"    if (threadIdx.x == 3)\n        return;\n    __syncthreads();\n"
         "    Y[threadIdx.x] = A[threadIdx.x];\n",
         8, "__syncthreads() not reached by every thread|left the kernel while other threads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "extern \"C\" __global__ void bad(const float *__restrict__ A, "
                 "float *__restrict__ Y)\n{\n%s}\n",
                 cases[i].body);
        hrun r = run_handwritten(src, cases[i].threads);
        if (g_jobs)
            continue;
        if (r.compiled)
            fail_msg("case %zu does not compile:\n%s", i, r.log);
        if (!cases[i].report && r.ran != 0)
            fail_msg("case %zu failed:\n%s\n%s", i, src, r.log);
        if (cases[i].report && (r.ran == 0 || !has_report(r.log, cases[i].report)))
            fail_msg("case %zu: no '%s' report:\n%s\n%s", i, cases[i].report, src, r.log);
    }
}

/* The warp-shuffle step of a reduction in a block narrower than a warp names only its lanes
 * (it named all 32: undefined behaviour, caught by the shim's mask check). */
static void test_warp_reduction_mask_covers_only_the_blocks_lanes(void **state)
{
    (void)state;
    static const struct {
        int threads;
        const char *mask;
    } cases[] = {{16, "__shfl_down_sync(0x0000ffffu,"},
                 {32, "__shfl_down_sync(0xffffffffu,"},
                 {128, "__shfl_down_sync(0xffffffffu,"}};
    for (int i = 0; i < 3; i++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){5, 300});
        te_tensor *Y = te_op_softmax(ctx, X, -1, "Y");
        te_schedule *s = te_schedule_create(ctx, 1, &Y);
        te_cuda_knobs k = te_cuda_knobs_default("softmax");
        k.threads = cases[i].threads;
        assert_int_equal(te_cuda_schedule_softmax(s, Y, &k), TE_OK);
        te_target tgt = te_target_cuda(80);
        te_lowered *f = te_lower(s, 2, (te_tensor *[]){X, Y}, "sm", &tgt);
        assert_non_null(f);
        const char *src = te_emit_cuda(ctx, f, &tgt);
        assert_non_null(src);
        if (!strstr(src, cases[i].mask))
            fail_msg("%d threads: no '%s' in\n%s", cases[i].threads, cases[i].mask, src);
        te_ctx_free(ctx);
    }
}

int main(void)
{
    if (!*TSH_CXX || access(TSH_CXX, X_OK) != 0) {
        printf("[  SKIP    ] no C++ compiler to run the emitted CUDA on the CPU (TSH_CXX '%s')\n",
               TSH_CXX);
        return 77;
    }
    if (tt_tmpdir_make(g_dir, sizeof g_dir, "cudahost") != 0) {
        printf("cannot make a temporary directory\n");
        return 1;
    }
    /* a compiler without the sanitizer runtimes (libasan, libubsan) cannot run the harness */
    char probe[4096];
    snprintf(probe, sizeof probe,
             "echo 'int main() { return 0; }' > '%s/probe.cpp' && '%s' -std=c++17 -pthread "
             "-fsanitize=address,undefined '%s/probe.cpp' -o '%s/probe' > '%s/probe.log' 2>&1 && "
             "'%s/probe'",
             g_dir, TSH_CXX, g_dir, g_dir, g_dir, g_dir);
    if (system(probe) != 0) {
        char *l = slurp(tt_path_in(g_dir, "probe.log"));
        printf("[  SKIP    ] %s cannot build AddressSanitizer programs:\n%.600s\n", TSH_CXX,
               l ? l : "");
        free(l);
        tt_tmpdir_remove(g_dir);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warp_reduction_mask_covers_only_the_blocks_lanes),
        cmocka_unit_test(test_shim_reports_misaligned_vectors_and_bad_masks),
        cmocka_unit_test(test_removed_barriers_are_caught),
        cmocka_unit_test(test_warp_first_reductions_use_one_barrier_each),
        cmocka_unit_test(test_matmul_template_runs_in_the_harness),
        cmocka_unit_test(test_matmul_knob_space_samples_run_in_the_harness),
        cmocka_unit_test(test_softmax_template_runs_in_the_harness),
        cmocka_unit_test(test_layer_norm_template_runs_in_the_harness),
        cmocka_unit_test(test_row_ops_use_wide_accesses),
        cmocka_unit_test(test_rows_template_runs_tuple_row_ops),
        cmocka_unit_test(test_guarded_loads_are_not_read_ahead),
        cmocka_unit_test(test_row_op_knob_space_samples_run_in_the_harness),
        cmocka_unit_test(test_mlp_gate_template_runs_in_the_harness),
        cmocka_unit_test(test_conv2d_template_runs_in_the_harness),
        cmocka_unit_test(test_elementwise_template_runs_in_the_harness),
        cmocka_unit_test(test_every_operator_template_runs_in_the_harness),
        cmocka_unit_test(test_gpu_sketches_run_in_the_harness),
        cmocka_unit_test(test_tuple_reductions_run_in_the_harness),
        cmocka_unit_test(test_attention_template_runs_in_the_harness),
        cmocka_unit_test(test_half_storage_runs_in_the_harness),
    };
    if (getenv("TSH_FILTER")) /* runs only the tests whose names match */
        cmocka_set_test_filter(getenv("TSH_FILTER"));
    /* Warm-up: a child runs the tests quietly, writing the programs and their compile commands;
     * the commands run two at a time; the real pass below reuses each executable whose source
     * it emits again unchanged (and compiles any other). */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(1);
        g_jobs = fopen(tt_path_in(g_dir, "jobs.txt"), "w");
        if (g_jobs) {
            (void)cmocka_run_group_tests(tests, NULL, NULL);
            fclose(g_jobs);
        }
        _exit(0);
    }
    if (pid > 0) {
        int st = 0;
        waitpid(pid, &st, 0);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "xargs -P 2 -d '\\n' -n 1 sh -c < '%s'",
                 tt_path_in(g_dir, "jobs.txt"));
        if (system(cmd) != 0)
            printf("  (some programs did not compile in the warm-up; the tests say which)\n");
    }
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("  %d programs run, %d compiled outside the warm-up\n", g_seq, g_recompiled);
    if (!getenv("TESSERA_TEST_KEEP"))
        tt_tmpdir_remove(g_dir);
    return rc;
}
