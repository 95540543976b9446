/*
 * The CUDA backend without (and with) a GPU: every GPU template at several configurations and
 * the GPU schedules of library operators
 *   - run on the CPU through the C backend (thread loops split at barriers) and match
 *     te_reference_eval;
 *   - compile through NVRTC for sm_80 and sm_90, with ptxas' register and shared-memory figures
 *     printed (skipped with a message when libnvrtc cannot be loaded);
 *   - run on the device and match the reference when a driver and device are present (skipped
 *     with a message otherwise).
 * Plus the GPU passes: barrier placement, double buffering, GPU check errors, clean
 * TE_ERR_NO_CUDA without a driver.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_testutil.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

static int g_dev = -1;

static bool have_nvrtc(void) { return tt_have_nvrtc(); }

static bool have_device(void)
{
    if (g_dev < 0) {
        g_dev = te_cuda_probe() == TE_OK;
        if (!g_dev && getenv("TESSERA_TEST_REQUIRE_DEVICE")) {
            /* test_cuda_emulated: a device that does not come up is a failure, not a skip */
            fprintf(stderr, "no device although TESSERA_TEST_REQUIRE_DEVICE is set: %s\n",
                    te_cuda_errmsg());
            exit(1);
        }
        if (!g_dev)
            printf("[  SKIP    ] device runs: %s\n", te_cuda_errmsg());
    }
    return g_dev;
}

/* A built operator: inputs, outputs and the reference. */
typedef struct opcase {
    te_ctx *ctx;
    int n_in, n_out;
    te_tensor *t[8];
    float *data[8];
    double *ref[4];
} opcase;

static void case_init(opcase *c, int n_in, int n_out)
{
    c->n_in = n_in;
    c->n_out = n_out;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(1234));
    for (int i = 0; i < n_in + n_out; i++) {
        size_t n = (size_t)te_tensor_numel(c->t[i]);
        c->data[i] = malloc(n * sizeof(float));
        assert_non_null(c->data[i]);
        if (i < n_in)
            tt_fill_f32(&r, c->data[i], n);
    }
    for (int o = 0; o < n_out; o++) {
        c->ref[o] = malloc((size_t)te_tensor_numel(c->t[n_in + o]) * sizeof(double));
        assert_non_null(c->ref[o]);
    }
    assert_int_equal(te_reference_eval(c->ctx, n_in, c->t, (const void *const *)c->data, n_out,
                                       c->t + n_in, c->ref),
                     TE_OK);
}

static void case_free(opcase *c)
{
    for (int i = 0; i < c->n_in + c->n_out; i++)
        free(c->data[i]);
    for (int o = 0; o < c->n_out; o++)
        free(c->ref[o]);
    te_ctx_free(c->ctx);
}

static void check_outputs(opcase *c, const char *what, double tol)
{
    for (int o = 0; o < c->n_out; o++) {
        size_t n = (size_t)te_tensor_numel(c->t[c->n_in + o]);
        double err = tt_max_rel_err_f32(c->data[c->n_in + o], c->ref[o], n);
        if (!(err <= tol))
            fail_msg("%s: output %d differs from the reference (max rel err %g)", what, o, err);
    }
}

typedef int (*sched_fn)(te_schedule *s, opcase *c, const te_cuda_knobs *k);

/* Schedules a fresh schedule of the case with fn, runs it on the CPU and checks; compiles it for
 * sm_80 and sm_90; runs it on a device when there is one. */
static void check_gpu_schedule(opcase *c, const char *name, sched_fn fn, const te_cuda_knobs *k,
                               double tol)
{
    te_ctx *ctx = c->ctx;
    te_tensor **outs = c->t + c->n_in;
    int nargs = c->n_in + c->n_out;
    /* 1. CPU run of the GPU schedule */
    te_schedule *s = te_schedule_create(ctx, c->n_out, outs);
    assert_non_null(s);
    if (fn(s, c, k) != TE_OK)
        fail_msg("%s: schedule failed: %s", name, te_ctx_errmsg(ctx));
    te_target host = te_target_host();
    te_module *m = NULL;
    if (te_build(s, nargs, c->t, name, &host, &m) != TE_OK)
        fail_msg("%s: CPU build failed: %s", name, te_ctx_errmsg(ctx));
    for (int o = 0; o < c->n_out; o++)
        tt_poison_f32(c->data[c->n_in + o], (size_t)te_tensor_numel(outs[o]));
    assert_int_equal(te_module_run(m, (void *const *)c->data), TE_OK);
    te_module_free(m);
    char what[200];
    snprintf(what, sizeof what, "%s (CPU)", name);
    check_outputs(c, what, tol);

    /* 2. CUDA source and NVRTC for two architectures */
    static const int sms[] = {80, 90};
    for (int i = 0; i < 2; i++) {
        te_schedule *s2 = te_schedule_create(ctx, c->n_out, outs);
        assert_int_equal(fn(s2, c, k), TE_OK);
        te_target tgt = te_target_cuda(sms[i]);
        te_lowered *f = te_lower(s2, nargs, c->t, name, &tgt);
        if (!f)
            fail_msg("%s: lowering for sm_%d failed: %s", name, sms[i], te_ctx_errmsg(ctx));
        const char *src = te_emit_cuda(ctx, f, &tgt);
        if (!src)
            fail_msg("%s: CUDA emission failed: %s", name, te_ctx_errmsg(ctx));
        assert_non_null(strstr(src, "extern \"C\" __global__ void __launch_bounds__("));
        assert_non_null(strstr(src, "generated by Tessera"));
        if (!have_nvrtc())
            continue;
        if (i == 0)
            have_device(); /* says once whether device runs are skipped */
        te_schedule *s3 = te_schedule_create(ctx, c->n_out, outs);
        assert_int_equal(fn(s3, c, k), TE_OK);
        te_cuda_module *cm = NULL;
        if (te_cuda_build(s3, nargs, c->t, name, &tgt, &cm) != TE_OK)
            fail_msg("%s: NVRTC for sm_%d failed: %s\n%s", name, sms[i], te_ctx_errmsg(ctx), src);
        for (int kk = 0; kk < te_cuda_module_nkernels(cm); kk++) {
            const te_cuda_kernel_info *ki = te_cuda_module_kernel(cm, kk);
            printf("  %-28s sm_%d %-22s grid %5d x %4d x %3d block %4d x %3d  regs %3d  smem %6d  "
                   "spill %d\n",
                   name, sms[i], ki->name, ki->grid[0], ki->grid[1], ki->grid[2], ki->block[0],
                   ki->block[1], ki->registers, ki->shared_bytes, ki->spill_bytes);
            assert_true(ki->registers > 0);
            assert_true(ki->shared_bytes >= 0);
        }
        te_cuda_module_free(cm);
    }
    /* 3. on the device, when there is one */
    te_target dev;
    if (!have_nvrtc() || !have_device() || te_cuda_target_device(0, &dev) != TE_OK)
        return;
    te_schedule *s4 = te_schedule_create(ctx, c->n_out, outs);
    assert_int_equal(fn(s4, c, k), TE_OK);
    te_cuda_module *cm = NULL;
    if (te_cuda_build(s4, nargs, c->t, name, &dev, &cm) != TE_OK)
        fail_msg("%s: build for the device failed: %s", name, te_ctx_errmsg(ctx));
    for (int o = 0; o < c->n_out; o++)
        tt_poison_f32(c->data[c->n_in + o], (size_t)te_tensor_numel(outs[o]));
    if (te_cuda_module_run(cm, (void *const *)c->data) != TE_OK)
        fail_msg("%s: device run failed: %s", name, te_cuda_module_errmsg(cm));
    snprintf(what, sizeof what, "%s (GPU)", name);
    check_outputs(c, what, tol);
    te_cuda_module_free(cm);
}

/* ---- Cases -------------------------------------------------------------------------------- */

static void matmul_case(opcase *c, int64_t M, int64_t N, int64_t K)
{
    c->ctx = te_ctx_create();
    te_tensor *A = te_placeholder(c->ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(c->ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    c->t[0] = A;
    c->t[1] = B;
    c->t[2] = te_op_matmul(c->ctx, A, B, 0, 0, "C");
    assert_non_null(c->t[2]);
    case_init(c, 2, 1);
}

static int sched_matmul(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_matmul(s, c->t[2], NULL, k);
}

static void test_matmul_template(void **state)
{
    (void)state;
    static const te_cuda_knobs cfgs[] = {
        /* tile_m tile_n tile_k thread_m thread_n threads vec pad dbuf unroll vthread_m vthread_n
           stage_input */
        {64, 64, 8, 4, 4, 0, 4, 0, 0, 1, 0, 0, 0}, {32, 64, 16, 2, 4, 0, 4, 1, 1, 1, 0, 0, 0},
        {16, 16, 4, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {64, 32, 8, 8, 2, 0, 2, 4, 1, 1, 0, 0, 0},
        {64, 64, 8, 4, 8, 0, 4, 0, 1, 1, 2, 2, 0}, /* 2 x 2 virtual threads */
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        opcase c = {0};
        matmul_case(&c, 128, 96, 64);
        char name[64];
        snprintf(name, sizeof name, "matmul_cfg%zu", i);
        check_gpu_schedule(&c, name, sched_matmul, &cfgs[i], 1e-4);
        case_free(&c);
    }
    /* sizes that are not multiples of the tiles */
    opcase c = {0};
    matmul_case(&c, 70, 50, 36);
    check_gpu_schedule(&c, "matmul_ragged", sched_matmul, &cfgs[0], 1e-4);
    case_free(&c);
}

static int sched_softmax(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_softmax(s, c->t[1], k);
}

static void test_softmax_template(void **state)
{
    (void)state;
    static const int threads[] = {32, 128, 100};
    for (int i = 0; i < 3; i++) {
        opcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){17, 300});
        c.t[1] = te_op_softmax(c.ctx, c.t[0], -1, "Y");
        assert_non_null(c.t[1]);
        case_init(&c, 1, 1);
        te_cuda_knobs k = te_cuda_knobs_default("softmax");
        k.threads = threads[i];
        char name[64];
        snprintf(name, sizeof name, "softmax_t%d", threads[i]);
        check_gpu_schedule(&c, name, sched_softmax, &k, 1e-5);
        case_free(&c);
    }
}

static int sched_layer_norm(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_layer_norm(s, c->t[3], k);
}

static void test_layer_norm_template(void **state)
{
    (void)state;
    static const int threads[] = {64, 256};
    for (int i = 0; i < 2; i++) {
        opcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){9, 512});
        c.t[1] = te_placeholder(c.ctx, "gamma", TE_F32, 1, (int64_t[]){512});
        c.t[2] = te_placeholder(c.ctx, "beta", TE_F32, 1, (int64_t[]){512});
        c.t[3] = te_op_layer_norm(c.ctx, c.t[0], c.t[1], c.t[2], 1e-5, -1, "Y");
        assert_non_null(c.t[3]);
        case_init(&c, 3, 1);
        te_cuda_knobs k = te_cuda_knobs_default("layer_norm");
        k.threads = threads[i];
        char name[64];
        snprintf(name, sizeof name, "layer_norm_t%d", threads[i]);
        check_gpu_schedule(&c, name, sched_layer_norm, &k, 1e-4);
        case_free(&c);
    }
}

static int sched_mlp(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_mlp_gate(s, c->t[3], k);
}

static void test_mlp_gate_template(void **state)
{
    (void)state;
    static const te_cuda_knobs cfgs[] = {
        {32, 32, 8, 2, 2, 0, 4, 0, 0, 1, 0, 0, 0},
        {64, 32, 16, 4, 4, 0, 4, 1, 1, 1, 0, 0, 0},
    };
    for (int i = 0; i < 2; i++) {
        opcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){64, 48});
        c.t[1] = te_placeholder(c.ctx, "W1", TE_F32, 2, (int64_t[]){48, 96});
        c.t[2] = te_placeholder(c.ctx, "W3", TE_F32, 2, (int64_t[]){48, 96});
        c.t[3] = te_op_mlp_gate(c.ctx, c.t[0], c.t[1], c.t[2], "Y");
        assert_non_null(c.t[3]);
        case_init(&c, 3, 1);
        char name[64];
        snprintf(name, sizeof name, "mlp_gate_cfg%d", i);
        check_gpu_schedule(&c, name, sched_mlp, &cfgs[i], 1e-4);
        case_free(&c);
    }
}

static int sched_conv(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_conv2d(s, c->t[2], k);
}

static void test_conv2d_template(void **state)
{
    (void)state;
    static const te_cuda_knobs cfgs[] = {
        {16, 8, 4, 2, 2, 0, 1, 0, 0, 1, 0, 0, 1}, /* the input tile staged too */
        {32, 16, 8, 4, 1, 0, 1, 0, 0, 0, 0, 0, 0},
    };
    for (int i = 0; i < 2; i++) {
        opcase c = {0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){2, 8, 12, 12});
        c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){32, 8, 3, 3});
        te_conv2d_params p = te_conv2d_params_default();
        p.pad_h = p.pad_w = 1;
        c.t[2] = te_op_conv2d(c.ctx, c.t[0], c.t[1], &p, "Y");
        assert_non_null(c.t[2]);
        case_init(&c, 2, 1);
        char name[64];
        snprintf(name, sizeof name, "conv2d_cfg%d", i);
        check_gpu_schedule(&c, name, sched_conv, &cfgs[i], 1e-4);
        case_free(&c);
    }
}

/* Every operator with a GPU template at its default knobs, through te_cuda_schedule_op: on the
 * CPU, through NVRTC for sm_80 and sm_90 (registers, spills), and on the device. */
static const char *g_op;

static int sched_op(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_op(s, g_op, c->n_out, c->t + c->n_in, k);
}

static void check_op(opcase *c, const char *op)
{
    g_op = op;
    te_cuda_knobs k = te_cuda_knobs_default(te_cuda_template_for(op, NULL));
    check_gpu_schedule(c, op, sched_op, &k, 1e-4);
}

static void test_operator_templates(void **state)
{
    (void)state;
    opcase c = {0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 3, (int64_t[]){4, 72, 40});
    c.t[1] = te_placeholder(c.ctx, "B", TE_F32, 3, (int64_t[]){4, 40, 96});
    c.t[2] = te_op_batch_matmul(c.ctx, c.t[0], c.t[1], 0, 0, "C");
    case_init(&c, 2, 1);
    check_op(&c, "batch_matmul");
    case_free(&c);

    c = (opcase){0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){64, 48});
    c.t[1] = te_placeholder(c.ctx, "Wq", TE_F32, 2, (int64_t[]){48, 64});
    c.t[2] = te_placeholder(c.ctx, "Wk", TE_F32, 2, (int64_t[]){48, 32});
    c.t[3] = te_placeholder(c.ctx, "Wv", TE_F32, 2, (int64_t[]){48, 32});
    assert_int_equal(te_op_qkv_projection(c.ctx, c.t[0], c.t[1], c.t[2], c.t[3], c.t + 4, NULL),
                     TE_OK);
    case_init(&c, 4, 3);
    check_op(&c, "qkv_projection");
    case_free(&c);

    c = (opcase){0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){1, 8, 12, 12});
    c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){16, 8, 3, 3});
    c.t[2] = te_placeholder(c.ctx, "scale", TE_F32, 1, (int64_t[]){16});
    c.t[3] = te_placeholder(c.ctx, "shift", TE_F32, 1, (int64_t[]){16});
    te_conv2d_params cp = te_conv2d_params_default();
    cp.pad_h = cp.pad_w = 1;
    c.t[4] = te_op_conv2d_bn_relu(c.ctx, c.t[0], c.t[1], c.t[2], c.t[3], &cp, "Y");
    case_init(&c, 4, 1);
    check_op(&c, "conv2d_bn_relu");
    case_free(&c);

    for (int v = 0; v < 3; v++) {
        c = (opcase){0};
        c.ctx = te_ctx_create();
        c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 4, (int64_t[]){2, 6, 15, 15});
        te_pool2d_params pp = {3, 3, 2, 2, 1, 1, 0};
        int n_in = 1;
        if (v < 2) {
            c.t[1] = te_op_pool2d(c.ctx, c.t[0], v ? TE_POOL_AVG : TE_POOL_MAX, &pp, "P");
        } else {
            c.t[1] = te_placeholder(c.ctx, "W", TE_F32, 4, (int64_t[]){6, 1, 3, 3});
            c.t[2] = te_op_depthwise_conv2d(c.ctx, c.t[0], c.t[1], &cp, "D");
            n_in = 2;
        }
        case_init(&c, n_in, 1);
        check_op(&c, v == 0 ? "max_pool2d" : v == 1 ? "avg_pool2d" : "depthwise_conv2d");
        case_free(&c);
    }

    c = (opcase){0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "X", TE_F32, 2, (int64_t[]){12, 500});
    c.t[1] = te_placeholder(c.ctx, "g", TE_F32, 1, (int64_t[]){500});
    c.t[2] = te_op_rms_norm(c.ctx, c.t[0], c.t[1], 1e-5, "R");
    case_init(&c, 2, 1);
    check_op(&c, "rms_norm");
    case_free(&c);
}

static int sched_elem(te_schedule *s, opcase *c, const te_cuda_knobs *k)
{
    return te_cuda_schedule_elementwise(s, c->t[2], k);
}

static void test_elementwise_template(void **state)
{
    (void)state;
    opcase c = {0};
    c.ctx = te_ctx_create();
    c.t[0] = te_placeholder(c.ctx, "A", TE_F32, 2, (int64_t[]){33, 70});
    c.t[1] = te_placeholder(c.ctx, "B", TE_F32, 1, (int64_t[]){70});
    te_tensor *s = te_op_binary(c.ctx, TE_ADD, c.t[0], c.t[1], "S");
    c.t[2] = te_op_gelu(c.ctx, s, "Y");
    assert_non_null(c.t[2]);
    case_init(&c, 2, 1);
    te_cuda_knobs k = te_cuda_knobs_default("elementwise");
    check_gpu_schedule(&c, "add_gelu", sched_elem, &k, 1e-5);
    k.threads = 64;
    k.vec = 4;
    check_gpu_schedule(&c, "add_gelu_v4", sched_elem, &k, 1e-5);
    case_free(&c);
}

/* ---- Passes ---------------------------------------------------------------------------------- */

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void test_barriers_exactly_where_needed(void **state)
{
    (void)state;
    for (int db = 0; db < 2; db++) {
        opcase c = {0};
        matmul_case(&c, 64, 64, 32);
        te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[2]);
        te_cuda_knobs k = te_cuda_knobs_default("matmul");
        k.double_buffer = db;
        assert_int_equal(te_cuda_schedule_matmul(s, c.t[2], NULL, &k), TE_OK);
        te_target tgt = te_target_cuda(80);
        te_lowered *f = te_lower(s, 3, c.t, "mm", &tgt);
        assert_non_null(f);
        const char *src = te_emit_cuda(c.ctx, f, &tgt);
        assert_non_null(src);
        /* one barrier before refilling the tiles and one before reading them per k-step;
         * double-buffered, the next k-step's tiles are fetched (cp.async on sm_80) while this
         * one's are read: one barrier after the first fetch and one per k-step, each after
         * waiting for the thread's copies */
        int n = count(src, "__syncthreads();");
        if (n != 2)
            fail_msg("double_buffer=%d: %d barriers, want 2:\n%s", db, n, src);
        assert_non_null(strstr(src, "__shared__"));
        if (db) {
            assert_non_null(strstr(src, "k_o % 2 * "));
            assert_non_null(strstr(src, "(k_o + 1) % 2 * "));
            assert_int_equal(count(src, "te_cp_async_wait();\n"), 2);
            assert_int_equal(count(src, "te_cp_async16((float4 *)&A_shared["), 2);
        } else {
            assert_int_equal(count(src, "te_cp_async16((float4 *)&"), 0);
        }
        assert_non_null(strstr(src, "float4"));
        /* a thread's rows of 4 results are stored as float4 */
        if (count(src, "*(float4 *)&C[") != 4)
            fail_msg("want the 4x4 register tile stored as 4 float4:\n%s", src);
        case_free(&c);
    }
}

static void test_gpu_check_errors(void **state)
{
    (void)state;
    opcase c = {0};
    matmul_case(&c, 64, 64, 32);
    te_target tgt = te_target_cuda(90);
    /* nothing bound */
    te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[2]);
    assert_null(te_lower(s, 3, c.t, "mm", &tgt));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "no loop bound to a GPU block or thread"));
    te_ctx_clear_error(c.ctx);
    /* too many threads */
    s = te_schedule_create(c.ctx, 1, &c.t[2]);
    te_cuda_knobs k = te_cuda_knobs_default("matmul");
    k.thread_m = k.thread_n = 1; /* 64 x 64 = 4096 threads */
    assert_int_not_equal(te_cuda_schedule_matmul(s, c.t[2], NULL, &k), TE_OK);
    te_ctx_clear_error(c.ctx);
    te_stage *sc = te_schedule_stage(s = te_schedule_create(c.ctx, 1, &c.t[2]), c.t[2]);
    te_iter *io, *jo, *ii, *ji;
    assert_int_equal(
        te_tile(sc, te_stage_axis(sc, 0), te_stage_axis(sc, 1), 32, 64, &io, &jo, &ii, &ji), TE_OK);
    te_bind(sc, io, TE_BLOCK_Y);
    te_bind(sc, jo, TE_BLOCK_X);
    te_bind(sc, ii, TE_THREAD_Y);
    te_bind(sc, ji, TE_THREAD_X);
    assert_null(te_lower(s, 3, c.t, "mm", &tgt));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "2048 threads per block"));
    te_ctx_clear_error(c.ctx);
    /* too much shared memory */
    case_free(&c);
    memset(&c, 0, sizeof c);
    matmul_case(&c, 256, 256, 128);
    s = te_schedule_create(c.ctx, 1, &c.t[2]);
    k = te_cuda_knobs_default("matmul");
    k.tile_m = 128, k.tile_n = 128, k.tile_k = 64, k.thread_m = 8, k.thread_n = 8;
    assert_int_equal(te_cuda_schedule_matmul(s, c.t[2], NULL, &k), TE_OK);
    assert_null(te_lower(s, 3, c.t, "mm", &tgt));
    assert_non_null(strstr(te_ctx_errmsg(c.ctx), "bytes of shared memory per block"));
    case_free(&c);
}

static void test_no_cuda_is_clean(void **state)
{
    (void)state;
    int rc = te_cuda_probe();
    assert_true(rc == TE_OK || rc == TE_ERR_NO_CUDA);
    if (rc == TE_ERR_NO_CUDA) {
        assert_true(strlen(te_cuda_errmsg()) > 10);
        uint64_t p = 0;
        assert_int_equal(te_cuda_malloc(&p, 16), TE_ERR_NO_CUDA);
        int n = -1;
        assert_int_equal(te_cuda_device_count(&n), TE_ERR_NO_CUDA);
        assert_int_equal(n, 0);
        te_target t;
        assert_int_equal(te_cuda_target_device(0, &t), TE_ERR_NO_CUDA);
        printf("  without a device: %s\n", te_cuda_errmsg());
    }
    /* a module built without a device reports TE_ERR_NO_CUDA when run */
    if (rc == TE_ERR_NO_CUDA && have_nvrtc()) {
        opcase c = {0};
        matmul_case(&c, 32, 32, 32);
        te_schedule *s = te_schedule_create(c.ctx, 1, &c.t[2]);
        te_cuda_knobs k = te_cuda_knobs_default("matmul");
        k.tile_m = k.tile_n = 32;
        assert_int_equal(te_cuda_schedule_matmul(s, c.t[2], NULL, &k), TE_OK);
        te_target tgt = te_target_cuda(90);
        te_cuda_module *m = NULL;
        assert_int_equal(te_cuda_build(s, 3, c.t, "mm", &tgt, &m), TE_OK);
        assert_int_equal(te_cuda_module_loaded(m), 0);
        assert_int_equal(te_cuda_module_run(m, (void *const *)c.data), TE_ERR_NO_CUDA);
        assert_true(strlen(te_cuda_module_errmsg(m)) > 10);
        te_cuda_module_free(m);
        case_free(&c);
    }
}

static void test_knob_space(void **state)
{
    (void)state;
    int n = 0;
    const te_cuda_knob_def *d = te_cuda_knob_space("matmul", &n);
    assert_non_null(d);
    assert_true(n >= 5);
    te_cuda_knobs k = te_cuda_knobs_default("matmul");
    for (int i = 0; i < n; i++)
        assert_int_equal(te_cuda_knobs_set(&k, d[i].name, d[i].values[0]), TE_OK);
    assert_int_equal(te_cuda_knobs_set(&k, "nope", 1), TE_ERR_ARG);
    assert_null(te_cuda_knob_space("nope", &n));
    assert_non_null(te_cuda_knob_space("softmax", &n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_cuda_is_clean),
        cmocka_unit_test(test_knob_space),
        cmocka_unit_test(test_barriers_exactly_where_needed),
        cmocka_unit_test(test_gpu_check_errors),
        cmocka_unit_test(test_matmul_template),
        cmocka_unit_test(test_softmax_template),
        cmocka_unit_test(test_layer_norm_template),
        cmocka_unit_test(test_mlp_gate_template),
        cmocka_unit_test(test_conv2d_template),
        cmocka_unit_test(test_elementwise_template),
        cmocka_unit_test(test_operator_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
