/* te_op_attention (the fused, flash-structured attention) against an unfused float64
 * reference written here (scores, softmax, P V): the reference interpreter's value of the
 * expression, the default schedule compiled, the "attention" template's random
 * configurations, and its GPU configuration run on the C backend. Shapes include lengths that
 * are not multiples of the key block, causal and explicit masks with fully masked rows, and
 * logits of 1e4 scale. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/c/c_backend.h"
#include "space_testlib.h"
#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

/* One attention workload: shapes, mask, data, and the unfused float64 reference. */
typedef struct acase {
    const char *label;
    int64_t b, h, lq, lk, dh;
    te_attn_mask mask;
    int mask_4d;     /* explicit mask [b, 1, lq, lk] instead of [lq, lk] */
    int masked_rows; /* explicit mask: every third query row fully masked (-inf) */
    double scale;    /* 0: 1 / sqrt(dh) */
    double in_scale; /* when set: Q and K integers in (-in_scale, in_scale), so the logits
                      * (up to dh in_scale^2) are exact in f32 and only overflow is tested */
    int block;       /* one-pass key block; 0: 16 */
} acase;

/* softmax(scale Q K^T + mask) V in float64, one (b, h) at a time; fully masked rows give 0. */
static void unfused_ref(const acase *c, const float *Q, const float *K, const float *V,
                        const float *M, double *O)
{
    double scale = c->scale ? c->scale : 1.0 / sqrt((double)c->dh);
    double *s = malloc(sizeof(double) * (size_t)c->lk);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < c->lq; i++) {
                const float *q = Q + ((b * c->h + h) * c->lq + i) * c->dh;
                double mx = -INFINITY;
                for (int64_t j = 0; j < c->lk; j++) {
                    const float *k = K + ((b * c->h + h) * c->lk + j) * c->dh;
                    double d = 0;
                    for (int64_t t = 0; t < c->dh; t++)
                        d += (double)q[t] * (double)k[t];
                    d *= scale;
                    if (c->mask == TE_ATTN_MASK_CAUSAL && j > i)
                        d = -INFINITY;
                    if (c->mask == TE_ATTN_MASK_EXPLICIT)
                        d += M[c->mask_4d ? (b * c->lq + i) * c->lk + j : i * c->lk + j];
                    s[j] = d;
                    mx = fmax(mx, d);
                }
                double l = 0;
                for (int64_t j = 0; j < c->lk; j++) {
                    s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx);
                    l += s[j];
                }
                double *o = O + ((b * c->h + h) * c->lq + i) * c->dh;
                for (int64_t t = 0; t < c->dh; t++) {
                    double a = 0;
                    for (int64_t j = 0; j < c->lk; j++)
                        a += s[j] * V[((b * c->h + h) * c->lk + j) * c->dh + t];
                    o[t] = l > 0 ? a / l : 0;
                }
            }
    free(s);
}

/* The form the tests build (both are checked: every test runs once per form). */
static te_attn_form g_form = TE_ATTN_ONE_PASS;

/* Builds the case's operator into a tcase (inputs Q, K, V[, mask], output O) with data and
 * the unfused reference as c.ref[0]. */

static void acase_build(const acase *a, tcase *c, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = a->label;
    c->ctx = te_ctx_create();
    te_ctx *ctx = c->ctx;
    te_tensor *Q = te_placeholder(ctx, "Q", TE_F32, 4, (int64_t[]){a->b, a->h, a->lq, a->dh});
    te_tensor *K = te_placeholder(ctx, "K", TE_F32, 4, (int64_t[]){a->b, a->h, a->lk, a->dh});
    te_tensor *V = te_placeholder(ctx, "V", TE_F32, 4, (int64_t[]){a->b, a->h, a->lk, a->dh});
    te_tensor *M = NULL;
    if (a->mask == TE_ATTN_MASK_EXPLICIT)
        M = a->mask_4d ? te_placeholder(ctx, "mask", TE_F32, 4, (int64_t[]){a->b, 1, a->lq, a->lk})
                       : te_placeholder(ctx, "mask", TE_F32, 2, (int64_t[]){a->lq, a->lk});
    te_attention_params p = te_attention_params_default();
    p.mask = a->mask;
    p.scale = a->scale;
    p.form = g_form;
    p.block = a->block ? a->block : 16;
    te_tensor *O = te_op_attention(ctx, Q, K, V, M, &p, "attn");
    if (!O)
        fail_msg("%s: %s", a->label, te_ctx_errmsg(ctx));
    c->in[0] = Q, c->in[1] = K, c->in[2] = V;
    c->n_in = M ? 4 : 3;
    if (M)
        c->in[3] = M;
    c->out[0] = O;
    c->n_out = 1;
    for (int i = 0; i < c->n_in; i++) {
        size_t n = (size_t)te_tensor_numel(c->in[i]);
        float *d = malloc(sizeof(float) * n);
        tt_fill_f32(r, d, n);
        if (i < 2 && a->in_scale)
            for (size_t q = 0; q < n; q++)
                d[q] = (float)nearbyint(d[q] * a->in_scale);
        if (i == 3) {
            /* Additive mask: about a quarter of the keys masked out, some large negative
             * finite values, and (masked_rows) every third row masked entirely. */
            int64_t rows = n / (size_t)a->lk;
            for (int64_t row = 0; row < rows; row++)
                for (int64_t j = 0; j < a->lk; j++) {
                    float *v = &d[row * a->lk + j];
                    int64_t qi = row % a->lq;
                    if (a->masked_rows && qi % 3 == 1)
                        *v = -INFINITY;
                    else if (tt_rng_int(r, 4) == 0)
                        *v = -INFINITY;
                    else if (tt_rng_int(r, 8) == 0)
                        *v = -1e4f;
                }
        }
        c->in_data[i] = d;
    }
    c->ref[0] = malloc(sizeof(double) * (size_t)te_tensor_numel(O));
    unfused_ref(a, c->in_data[0], c->in_data[1], c->in_data[2], M ? c->in_data[3] : NULL,
                c->ref[0]);
}

/* Kernels of one case to check: schedules (each lowered for the host) and what each is, for
 * the failure message. */
enum { KB_MAX = 16 };
typedef struct kbatch {
    tcase c;
    int n;
    te_schedule *s[KB_MAX];
    const char *what[KB_MAX]; /* the trace, or a description */
} kbatch;

/* Lowers every kernel of every batch, emits each batch as one C unit (kernels k0, k1, ...),
 * compiles the units in one parallel compiler run (one compiler call per case, not per
 * kernel: this test's time is mostly the compiler's), runs each kernel on the case's poisoned
 * output and fails, naming the kernel, when it differs from the unfused reference by tol or
 * more. Frees the cases. */
static void kbatch_check(int nb, kbatch *bs, double tol)
{
    te_target tgt = te_target_host();
    const char **srcs = calloc((size_t)nb, sizeof *srcs);
    te__cc_lib **libs = calloc((size_t)nb, sizeof *libs);
    int *res = calloc((size_t)nb, sizeof *res);
    char **errs = calloc((size_t)nb, sizeof *errs);
    for (int b = 0; b < nb; b++) {
        kbatch *k = &bs[b];
        te_tensor *args[2 * TE_OP_MAX_IO];
        tcase_args(&k->c, args);
        const te_lowered *fs[KB_MAX];
        for (int i = 0; i < k->n; i++) {
            char name[16];
            snprintf(name, sizeof name, "k%d", i);
            if (!k->s[i])
                fail_msg("%s: no schedule: %s\n%s", k->c.label, te_ctx_errmsg(k->c.ctx),
                         k->what[i]);
            fs[i] = te_lower(k->s[i], k->c.n_in + k->c.n_out, args, name, &tgt);
            if (!fs[i])
                fail_msg("%s: lowering failed: %s\n%s", k->c.label, te_ctx_errmsg(k->c.ctx),
                         k->what[i]);
        }
        srcs[b] = te__emit_c_unit(k->c.ctx, k->n, fs, &tgt, NULL, NULL);
        if (!srcs[b])
            fail_msg("%s: emission failed: %s", k->c.label, te_ctx_errmsg(k->c.ctx));
        errs[b] = malloc(4096);
    }
    /* These kernels are checked, not timed: -O1 (several times faster to compile than the
     * target's -O3, and still optimizing enough to expose undefined behaviour) for the one-pass
     * form, the default; -O0 (about three times faster again) for the two-pass form. */
    te__cc_opts opts = {NULL, NULL, NULL};
    if (!getenv("TESSERA_CFLAGS"))
        opts.flags = g_form == TE_ATTN_ONE_PASS
                         ? "-O1 -march=native -fPIC -shared -fopenmp -std=gnu11"
                         : "-O0 -march=native -fPIC -shared -fopenmp -std=gnu11";
    te__cc_build_many(nb, srcs, &opts, 0, libs, res, errs, 4096);
    for (int b = 0; b < nb; b++) {
        kbatch *k = &bs[b];
        tcase *c = &k->c;
        if (res[b] != TE_OK)
            fail_msg("%s: generated code did not compile:\n%s", c->label, errs[b]);
        size_t ne = (size_t)te_tensor_numel(c->out[0]);
        float *o = malloc(sizeof(float) * ne);
        for (int i = 0; i < k->n; i++) {
            char name[32];
            snprintf(name, sizeof name, "k%d_packed", i);
            te_packed_fn fn = (te_packed_fn)te__cc_lib_sym(libs[b], name);
            if (!fn)
                fail_msg("%s: no symbol %s in %s", c->label, name, te__cc_lib_source_path(libs[b]));
            void *a[2 * TE_OP_MAX_IO];
            memcpy(a, c->in_data, sizeof(void *) * (size_t)c->n_in);
            tt_poison_f32(o, ne);
            a[c->n_in] = o;
            assert_int_equal(fn(a), 0);
            double err = tt_max_rel_err_f32(o, c->ref[0], ne);
            if (!(err < tol))
                fail_msg("%s: kernel k%d max relative error %g (source %s):\n%s", c->label, i, err,
                         te__cc_lib_source_path(libs[b]), k->what[i]);
        }
        free(o);
        te__cc_lib_free(libs[b]);
        free(errs[b]);
        tcase_free(c);
    }
    free(srcs);
    free(libs);
    free(res);
    free(errs);
}

static const acase cases_small[] = {
    {"plain 1x2x5x7x4", 1, 2, 5, 7, 4, TE_ATTN_MASK_NONE, 0, 0, 0, 0, 0},
    {"causal 2x1x9x9x8", 2, 1, 9, 9, 8, TE_ATTN_MASK_CAUSAL, 0, 0, 0, 0, 0},
    {"causal lq<lk 1x2x6x11x4", 1, 2, 6, 11, 4, TE_ATTN_MASK_CAUSAL, 0, 0, 0, 0, 0},
    {"explicit, masked rows 1x2x7x10x4", 1, 2, 7, 10, 4, TE_ATTN_MASK_EXPLICIT, 0, 1, 0, 0, 0},
    {"explicit 4d 2x2x5x6x4", 2, 2, 5, 6, 4, TE_ATTN_MASK_EXPLICIT, 1, 1, 0.3, 0, 0},
    {"logits 1e4 1x1x6x9x8", 1, 1, 6, 9, 8, TE_ATTN_MASK_NONE, 0, 0, 1, 100, 0},
    {"logits 1e4 causal 1x2x5x5x4", 1, 2, 5, 5, 4, TE_ATTN_MASK_CAUSAL, 0, 0, 0, 100, 0},
};
#define NSMALL ((int)(sizeof cases_small / sizeof cases_small[0]))

/* Cases for compiled schedules: lengths that are not multiples of the blocks the template
 * offers (16, 32, 64) and a head dimension of a few vectors. */
static const acase cases_tiled[] = {
    {"plain 1x2x37x45x32", 1, 2, 37, 45, 32, TE_ATTN_MASK_NONE, 0, 0, 0, 0, 0},
    {"causal 1x3x50x50x16", 1, 3, 50, 50, 16, TE_ATTN_MASK_CAUSAL, 0, 0, 0, 0, 0},
    {"explicit, masked rows 2x1x33x70x16", 2, 1, 33, 70, 16, TE_ATTN_MASK_EXPLICIT, 1, 1, 0, 0, 0},
    /* A key block that is not a multiple of the vector width (lane-wise block maxima). */
    {"logits 1e4, block 12 1x2x40x29x16", 1, 2, 40, 29, 16, TE_ATTN_MASK_NONE, 0, 0, 1, 100, 12},
    /* Keys in whole blocks (64): no padded copy of V, P V reads V itself. */
    {"causal, whole key blocks 1x2x20x64x32", 1, 2, 20, 64, 32, TE_ATTN_MASK_CAUSAL, 0, 0, 0, 0, 0},
};
#define NTILED ((int)(sizeof cases_tiled / sizeof cases_tiled[0]))

static void test_expression_matches_unfused_reference(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(41));
    for (int k = 0; k < NSMALL; k++) {
        tcase c;
        acase_build(&cases_small[k], &c, &r);
        size_t n = (size_t)te_tensor_numel(c.out[0]);
        double *got = malloc(sizeof(double) * n);
        if (te_reference_eval(c.ctx, c.n_in, c.in, (const void *const *)c.in_data, 1, c.out, &got))
            fail_msg("%s: %s", c.label, te_ctx_errmsg(c.ctx));
        for (size_t q = 0; q < n; q++) {
            double e = fabs(got[q] - c.ref[0][q]) / fmax(1.0, fabs(c.ref[0][q]));
            /* Not exact: the scale is a constant of the operator's dtype (rounded to f32). */
            if (!(e < 1e-6))
                fail_msg("%s: element %zu is %g, unfused reference %g", c.label, q, got[q],
                         c.ref[0][q]);
        }
        free(got);
        tcase_free(&c);
    }
}

static void test_fully_masked_rows_give_zeros(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(42));
    kbatch b;
    acase_build(&cases_small[3], &b.c, &r);
    /* Row 1 of every head is fully masked: the reference is 0 there, and so is the kernel. */
    te_target tgt = te_target_host();
    te_space *sp = te_space_create(b.c.ctx, "attention", b.c.n_in, b.c.in, b.c.n_out, b.c.out,
                                   TE_SPACE_TEMPLATE, &tgt);
    assert_non_null(sp);
    b.n = 1;
    b.what[0] = te_space_get(sp, 0);
    assert_non_null(b.what[0]);
    b.s[0] = te_space_instantiate(sp, b.what[0]);
    for (int64_t t = 0; t < 4; t++)
        assert_true(b.c.ref[0][1 * 4 + t] == 0.0);
    kbatch_check(1, &b, 1e-5);
}

/* The default schedule (every stage at the root) compiled, for the small cases. */
static void test_default_schedule_compiled(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(43));
    kbatch bs[NSMALL];
    for (int k = 0; k < NSMALL; k++) {
        acase_build(&cases_small[k], &bs[k].c, &r);
        bs[k].n = 1;
        bs[k].s[0] = te_schedule_create(bs[k].c.ctx, 1, bs[k].c.out);
        bs[k].what[0] = "the default schedule";
    }
    /* The public path (te_build, the target's flags) once, for the first case. */
    tcase *c = &bs[0].c;
    te_tensor *args[TE_OP_MAX_IO * 2];
    tcase_args(c, args);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(te_schedule_create(c->ctx, 1, c->out), c->n_in + 1, args, "attn", &tgt, &m))
        fail_msg("%s: %s", c->label, te_ctx_errmsg(c->ctx));
    size_t n = (size_t)te_tensor_numel(c->out[0]);
    float *o = malloc(sizeof(float) * n);
    tt_poison_f32(o, n);
    void *data[TE_OP_MAX_IO * 2];
    memcpy(data, c->in_data, sizeof(void *) * (size_t)c->n_in);
    data[c->n_in] = o;
    assert_int_equal(te_module_run(m, data), TE_OK);
    double e = tt_max_rel_err_f32(o, c->ref[0], n);
    if (!(e < 1e-5))
        fail_msg("%s: max relative error %g", c->label, e);
    free(o);
    te_module_free(m);
    kbatch_check(NSMALL, bs, 1e-5);
}

/* Random configurations of the template (query block, key block, vector width, parallel
 * loop) compiled and run for every tiled case. */
static void test_template_random_configurations(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(44));
    /* Six per case in the one-pass form (the default, the tuner's); the two-pass form's space
     * is the same knobs on other stages, four per case. */
    int ns = g_form == TE_ATTN_ONE_PASS ? 6 : 4;
    kbatch bs[NTILED];
    for (int k = 0; k < NTILED; k++) {
        tcase *c = &bs[k].c;
        acase_build(&cases_tiled[k], c, &r);
        te_target tgt = te_target_host();
        te_space *sp = te_space_create(c->ctx, "attention", c->n_in, c->in, c->n_out, c->out,
                                       TE_SPACE_TEMPLATE, &tgt);
        if (!sp)
            fail_msg("%s: %s", c->label, te_ctx_errmsg(c->ctx));
        assert_int_equal(te_space_kind_of(sp), TE_SPACE_TEMPLATE);
        te_rng g;
        te_rng_seed(&g, 100 + (uint64_t)k);
        bs[k].n = ns;
        for (int q = 0; q < ns; q++) {
            bs[k].what[q] = te_space_sample(sp, &g);
            if (!bs[k].what[q])
                fail_msg("%s: sample: %s", c->label, te_ctx_errmsg(c->ctx));
            bs[k].s[q] = te_space_instantiate(sp, bs[k].what[q]);
        }
    }
    kbatch_check(NTILED, bs, 1e-5);
}

/* The template's traces keep the scores blocked: no stage allocates lq x lk scores. */
static void test_template_never_materializes_scores(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(45));
    tcase c;
    acase_build(&cases_tiled[0], &c, &r);
    te_target tgt = te_target_host();
    te_space *sp =
        te_space_create(c.ctx, "attention", c.n_in, c.in, c.n_out, c.out, TE_SPACE_TEMPLATE, &tgt);
    assert_non_null(sp);
    te_rng g;
    te_rng_seed(&g, 7);
    for (int q = 0; q < 8; q++) {
        const char *t = te_space_sample(sp, &g);
        assert_non_null(t);
        if (g_form == TE_ATTN_TWO_PASS) {
            assert_true(trace_has(t, "compute_at attn_s1 attn_max"));
            assert_true(trace_has(t, "compute_at attn_s2 attn_acc"));
            assert_true(trace_has(t, "compute_at attn_p attn_acc"));
        } else {
            /* At the online stage's key-block loop ("jo"). */
            assert_true(trace_has(t, "compute_at attn_s attn_m jo"));
            assert_true(trace_has(t, "compute_at attn_p attn_m jo"));
            /* P V at the key-block loop, or folded into the combine: at its chunk loop
             * inside the key-block loop. */
            assert_true(trace_has(t, "compute_at attn_bpv attn_m jo") ||
                        trace_has(t, "compute_at attn_bpv attn_m d_o"));
        }
    }
    if (g_form == TE_ATTN_ONE_PASS) {
        /* The default: a query block of several register tiles (16 rows here, lq 37, swept
         * 6 rows at a time with AVX2), each block product split into row tiles. */
        const char *d = te_space_get(sp, 0);
        assert_non_null(d);
        assert_true(trace_has(d, "split attn_s i "));
        /* P V's row tiles: its own, or (folded) the online stage's. */
        assert_true(trace_has(d, "split attn_bpv i ") || trace_has(d, "split attn_m i "));
    }
    tcase_free(&c);
}

/* The GPU configurations (blocks of query rows, one thread per row, shared tiles of K and
 * V per key block) lowered for the C backend, which runs GPU-scheduled IR on the CPU. */
static void test_gpu_schedule_on_c_backend(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(46));
    kbatch bs[NTILED];
    for (int k = 0; k < NTILED; k++) {
        tcase *c = &bs[k].c;
        acase_build(&cases_tiled[k], c, &r);
        te_target gpu = te_target_cuda(80);
        te_space *sp = te_space_create(c->ctx, "attention", c->n_in, c->in, c->n_out, c->out,
                                       TE_SPACE_TEMPLATE, &gpu);
        if (!sp)
            fail_msg("%s: %s", c->label, te_ctx_errmsg(c->ctx));
        int64_t n = te_space_size(sp);
        assert_true(n >= 1);
        /* Every configuration for the first case; the default and two others, rotating,
         * for the rest (together they cover the space). */
        int nt = 0;
        for (int64_t q = 0; q < n && nt < 9 && (k == 0 || nt < 3); q++) {
            int64_t qi = k == 0 || q == 0 ? q : 1 + (q - 1 + 2 * k) % (n - 1 > 0 ? n - 1 : 1);
            if (qi >= n)
                continue;
            const char *t = te_space_get(sp, qi);
            if (!t)
                fail_msg("%s: configuration %d: %s", c->label, (int)qi, te_ctx_errmsg(c->ctx));
            assert_true(trace_has(t, "bind"));
            bs[k].what[nt] = t;
            bs[k].s[nt] = te_space_instantiate(sp, t);
            nt++;
        }
        bs[k].n = nt;
    }
    kbatch_check(NTILED, bs, 1e-5);
}

/* The default GPU configuration lowered for CUDA (gpu_check: threads and shared memory within
 * the limits) and emitted for sm_80 and sm_90; compiled by NVRTC (sm_80 for each mask kind,
 * sm_90 for the first case) when libnvrtc loads, and run on a device against the unfused reference
 * when there is one (else skipped with a note). */
static void test_gpu_schedule_cuda_source_nvrtc_and_device(void **state)
{
    (void)state;
    tt_rng r;
    tt_rng_seed(&r, tt_seed(47));
    int nvrtc = te_nvrtc_probe() == TE_OK;
    if (!nvrtc)
        printf("[  SKIP    ] NVRTC checks: %s\n", te_cuda_errmsg());
    for (int k = 0; k < NTILED; k++) {
        tcase c;
        acase_build(&cases_tiled[k], &c, &r);
        te_tensor *args[TE_OP_MAX_IO * 2];
        tcase_args(&c, args);
        static const int sms[] = {80, 90};
        for (int i = 0; i < 2; i++) {
            te_target tgt = te_target_cuda(sms[i]);
            te_space *sp = te_space_create(c.ctx, "attention", c.n_in, c.in, c.n_out, c.out,
                                           TE_SPACE_TEMPLATE, &tgt);
            assert_non_null(sp);
            const char *tr = te_space_get(sp, 0);
            assert_non_null(tr);
            te_schedule *s = te_space_instantiate(sp, tr);
            assert_non_null(s);
            te_lowered *f = te_lower(s, c.n_in + 1, args, "attn", &tgt);
            if (!f)
                fail_msg("%s: lowering for sm_%d: %s", c.label, sms[i], te_ctx_errmsg(c.ctx));
            const char *src = te_emit_cuda(c.ctx, f, &tgt);
            if (!src)
                fail_msg("%s: CUDA emission: %s", c.label, te_ctx_errmsg(c.ctx));
            assert_non_null(strstr(src, "__shared__"));
            /* NVRTC (over a second a kernel): sm_80 for each mask kind (the last case is the
             * first's code with other constants), sm_90 (the same source but for the
             * architecture) for the first. */
            if (!nvrtc || (i > 0 && k > 0) || k == NTILED - 1)
                continue;
            te_cuda_module *cm = NULL;
            s = te_space_instantiate(sp, tr);
            if (te_cuda_build(s, c.n_in + 1, args, "attn", &tgt, &cm) != TE_OK)
                fail_msg("%s: NVRTC for sm_%d: %s\n%s", c.label, sms[i], te_ctx_errmsg(c.ctx), src);
            te_cuda_module_free(cm);
        }
        te_target dev;
        if (nvrtc && te_cuda_probe() == TE_OK && te_cuda_target_device(0, &dev) == TE_OK) {
            te_space *sp = te_space_create(c.ctx, "attention", c.n_in, c.in, c.n_out, c.out,
                                           TE_SPACE_TEMPLATE, &dev);
            assert_non_null(sp);
            te_schedule *s = te_space_instantiate(sp, te_space_get(sp, 0));
            te_cuda_module *cm = NULL;
            if (te_cuda_build(s, c.n_in + 1, args, "attn", &dev, &cm) != TE_OK)
                fail_msg("%s: build for the device: %s", c.label, te_ctx_errmsg(c.ctx));
            size_t n = (size_t)te_tensor_numel(c.out[0]);
            float *o = malloc(sizeof(float) * n);
            tt_poison_f32(o, n);
            void *data[TE_OP_MAX_IO * 2];
            memcpy(data, c.in_data, sizeof(void *) * (size_t)c.n_in);
            data[c.n_in] = o;
            if (te_cuda_module_run(cm, data) != TE_OK)
                fail_msg("%s: device run: %s", c.label, te_cuda_module_errmsg(cm));
            double e = tt_max_rel_err_f32(o, c.ref[0], n);
            printf("  %s on the device: max relative error %.3g\n", c.label, e);
            if (!(e < 1e-5))
                fail_msg("%s (GPU): max relative error %g", c.label, e);
            free(o);
            te_cuda_module_free(cm);
        } else if (k == 0) {
            printf("[  SKIP    ] device runs: %s\n", te_cuda_errmsg());
        }
        tcase_free(&c);
    }
}

static void test_bad_inputs_are_named(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *Q = te_placeholder(ctx, "Q", TE_F32, 4, (int64_t[]){1, 2, 5, 4});
    te_tensor *K = te_placeholder(ctx, "K", TE_F32, 4, (int64_t[]){1, 2, 6, 4});
    te_tensor *V3 = te_placeholder(ctx, "V3", TE_F32, 4, (int64_t[]){1, 2, 6, 3});
    assert_null(te_op_attention(ctx, Q, K, V3, NULL, NULL, "a"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "value 'V' ('V3') axis 3 (dh)"));
    te_ctx_free(ctx);
    ctx = te_ctx_create();
    Q = te_placeholder(ctx, "Q", TE_F32, 4, (int64_t[]){1, 2, 5, 4});
    K = te_placeholder(ctx, "K", TE_F32, 4, (int64_t[]){1, 2, 6, 4});
    te_tensor *M = te_placeholder(ctx, "M", TE_F32, 2, (int64_t[]){5, 7});
    te_attention_params p = te_attention_params_default();
    p.mask = TE_ATTN_MASK_EXPLICIT;
    assert_null(te_op_attention(ctx, Q, K, K, M, &p, "a"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "mask ('M') axis 1 (lk) has 7"));
    te_ctx_free(ctx);
    ctx = te_ctx_create();
    Q = te_placeholder(ctx, "Q", TE_F32, 4, (int64_t[]){1, 2, 5, 4});
    p = te_attention_params_default();
    p.mask = TE_ATTN_MASK_EXPLICIT;
    assert_null(te_op_attention(ctx, Q, Q, Q, NULL, &p, "a"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "mask is NULL"));
    te_ctx_free(ctx);
    ctx = te_ctx_create();
    te_tensor *Qi = te_placeholder(ctx, "Qi", TE_I32, 4, (int64_t[]){1, 2, 5, 4});
    assert_null(te_op_attention(ctx, Qi, Qi, Qi, NULL, NULL, "a"));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_DTYPE);
    te_ctx_free(ctx);
    ctx = te_ctx_create();
    Q = te_placeholder(ctx, "Q", TE_F32, 4, (int64_t[]){1, 2, 5, 4});
    p = te_attention_params_default();
    p.lq = 6;
    assert_null(te_op_attention(ctx, Q, Q, Q, NULL, &p, "a"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "axis 2 (lq) has 5 but 6 is expected"));
    te_ctx_free(ctx);
}

static void test_registry_builds_attention(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "attention", "batch=1,heads=12,lq=33,lk=33,dh=64,mask=causal",
                                 in, &ni, out, &no),
                     TE_OK);
    assert_int_equal(ni, 3);
    assert_int_equal(no, 1);
    assert_int_equal(te_tensor_shape(out[0])[1], 12);
    assert_int_equal(
        te_op_build(ctx, "attention", "lq=3,lk=4,dh=2,mask=explicit", in, &ni, out, &no), TE_OK);
    assert_int_equal(ni, 4);
    assert_int_not_equal(
        te_op_build(ctx, "attention", "lq=3,lk=4,dh=2,mask=sliding", in, &ni, out, &no), TE_OK);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expression_matches_unfused_reference),
        cmocka_unit_test(test_default_schedule_compiled),
        cmocka_unit_test(test_fully_masked_rows_give_zeros),
        cmocka_unit_test(test_template_random_configurations),
        cmocka_unit_test(test_template_never_materializes_scores),
        cmocka_unit_test(test_gpu_schedule_on_c_backend),
        cmocka_unit_test(test_gpu_schedule_cuda_source_nvrtc_and_device),
        cmocka_unit_test(test_bad_inputs_are_named),
        cmocka_unit_test(test_registry_builds_attention),
    };
    g_form = TE_ATTN_ONE_PASS;
    int rc = cmocka_run_group_tests_name("one-pass form", tests, NULL, NULL);
    g_form = TE_ATTN_TWO_PASS;
    rc += cmocka_run_group_tests_name("two-pass form", tests, NULL, NULL);
    return rc;
}
