/* te_tensorize and tensor intrinsics: VNNI-packed matmuls tensorized with the built-in AMX,
 * AVX-512 BF16 and VNNI intrinsics (run against a float64 / exact integer reference where the
 * CPU has the instructions, emitted and refused at build where it does not), a user-declared
 * intrinsic run on any machine, the matcher's refusals with their reasons, trace replay. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tensorize.h"
#include "testutil.h"

/* C[i, j] = sum(acc(A[i, ko*g + kk]) * acc(B[ko, j, kk])) over (ko, kk): the form the
 * built-in intrinsics describe (and te_op_matmul_vnni builds). */
typedef struct mm {
    te_ctx *ctx;
    te_tensor *A, *B, *C;
    te_schedule *s;
    te_stage *sc;
    int m, n, ko, g;
    te_dtype ta, tb, acc;
} mm;

static void mm_build(mm *p, int m, int n, int ko, int g, te_dtype ta, te_dtype tb, te_dtype acc)
{
    memset(p, 0, sizeof *p);
    p->ctx = te_ctx_create();
    p->m = m, p->n = n, p->ko = ko, p->g = g, p->ta = ta, p->tb = tb, p->acc = acc;
    te_ctx *c = p->ctx;
    p->A = te_placeholder(c, "A", ta, 2, (int64_t[]){m, (int64_t)ko * g});
    p->B = te_placeholder(c, "B", tb, 3, (int64_t[]){ko, n, g});
    te_expr *i = te_axis(c, "i", m), *j = te_axis(c, "j", n);
    te_expr *rk = te_reduce_axis(c, "ko", ko), *rg = te_reduce_axis(c, "kk", g);
    te_expr *a = te_read(c, p->A, 2, (te_expr *[]){i, te_add(c, te_mul(c, rk, te_int(c, g)), rg)});
    te_expr *b = te_read(c, p->B, 3, (te_expr *[]){rk, j, rg});
    if (ta != acc)
        a = te_cast(c, acc, a);
    if (tb != acc)
        b = te_cast(c, acc, b);
    p->C = te_compute(c, "C", 2, (te_expr *[]){i, j},
                      te_reduce(c, TE_RSUM, NULL, te_mul(c, a, b), 2, (te_expr *[]){rk, rg}));
    assert_non_null(p->C);
    p->s = te_schedule_create(c, 1, &p->C);
    p->sc = te_schedule_stage(p->s, p->C);
}

/* Tiles C by tm x tn (io, jo outside), splits ko by kin when kin > 0 (koo outside the tile
 * loops), and returns the tile's first loop ii. */
static te_iter *mm_tile(mm *p, int tm, int tn, int kin, te_iter **io_out)
{
    te_stage *sc = p->sc;
    te_iter *io, *ii, *jo, *ji, *koo = NULL, *koi = te_stage_reduce_axis(sc, 0);
    assert_int_equal(te_split(sc, te_stage_axis(sc, 0), tm, &io, &ii), TE_OK);
    assert_int_equal(te_split(sc, te_stage_axis(sc, 1), tn, &jo, &ji), TE_OK);
    te_iter *kk = te_stage_reduce_axis(sc, 1);
    if (kin > 0) {
        assert_int_equal(te_split(sc, te_stage_reduce_axis(sc, 0), kin, &koo, &koi), TE_OK);
        assert_int_equal(te_reorder(sc, 7, (te_iter *[]){io, jo, koo, ii, ji, koi, kk}), TE_OK);
    } else {
        assert_int_equal(te_reorder(sc, 6, (te_iter *[]){io, jo, ii, ji, koi, kk}), TE_OK);
    }
    if (io_out)
        *io_out = io;
    return ii;
}

static uint16_t to_bf16(float x) { return te_f32_to_bf16(x); }

/* Runs the built schedule on random inputs and compares with the float64 (or exact integer)
 * product. */
static void mm_run_check(mm *p, te_module *mod)
{
    int K = p->ko * p->g;
    size_t na = (size_t)p->m * K, nb = (size_t)p->ko * p->n * p->g, nc = (size_t)p->m * p->n;
    void *A = malloc(na * 2), *B = malloc(nb * 2), *C = malloc(nc * 4);
    double *want = malloc(nc * sizeof *want), *bound = malloc(nc * sizeof *bound);
    assert_true(A && B && C && want && bound);
    tt_rng r;
    tt_rng_seed(&r, tt_seed(7));
    double *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    for (size_t x = 0; x < na; x++) {
        if (p->ta == TE_BF16) {
            ((uint16_t *)A)[x] = to_bf16((float)tt_rng_uniform(&r, -1, 1));
            a[x] = te_bf16_to_f32(((uint16_t *)A)[x]);
        } else if (p->ta == TE_U8) {
            ((uint8_t *)A)[x] = (uint8_t)tt_rng_int(&r, 256);
            a[x] = ((uint8_t *)A)[x];
        } else {
            ((int8_t *)A)[x] = (int8_t)(tt_rng_int(&r, 256) - 128);
            a[x] = ((int8_t *)A)[x];
        }
    }
    for (size_t x = 0; x < nb; x++) {
        if (p->tb == TE_BF16) {
            ((uint16_t *)B)[x] = to_bf16((float)tt_rng_uniform(&r, -1, 1));
            b[x] = te_bf16_to_f32(((uint16_t *)B)[x]);
        } else {
            ((int8_t *)B)[x] = (int8_t)(tt_rng_int(&r, 256) - 128);
            b[x] = ((int8_t *)B)[x];
        }
    }
    for (int i = 0; i < p->m; i++)
        for (int j = 0; j < p->n; j++) {
            double s = 0, abs_s = 0;
            for (int ko = 0; ko < p->ko; ko++)
                for (int kk = 0; kk < p->g; kk++) {
                    double v =
                        a[(size_t)i * K + ko * p->g + kk] * b[((size_t)ko * p->n + j) * p->g + kk];
                    s += v, abs_s += fabs(v);
                }
            want[(size_t)i * p->n + j] = s;
            /* f32 accumulation of K exact products (bf16 x bf16 fits f32): (K + 2) u sum|ab| */
            bound[(size_t)i * p->n + j] = (K + 2) * ldexp(1.0, -24) * abs_s;
        }
    memset(C, 0xff, nc * 4); /* poison: NaN / -1 */
    assert_int_equal(te_module_run(mod, (void *[]){A, B, C}), TE_OK);
    for (size_t x = 0; x < nc; x++) {
        if (p->acc == TE_F32) {
            double got = ((float *)C)[x];
            if (!(fabs(got - want[x]) <= bound[x]))
                fail_msg("C[%zu] = %.9g, want %.9g (bound %.3g)", x, got, want[x], bound[x]);
        } else if (((int32_t *)C)[x] != (int32_t)want[x]) {
            fail_msg("C[%zu] = %d, want %.0f", x, ((int32_t *)C)[x], want[x]);
        }
    }
    free(A), free(B), free(C), free(want), free(bound), free(a), free(b);
}

/* Builds; when the host has the intrinsic's features, runs and checks; else expects the build
 * to be refused with the features named. */
static void mm_build_and_check(mm *p, const te_tensor_intrin *in, const char *what)
{
    te_target t = te_target_host();
    te_module *mod = NULL;
    int rc = te_build(p->s, 3, (te_tensor *[]){p->A, p->B, p->C}, "tz", &t, &mod);
    if (!te_tensor_intrin_supported(in, &t)) {
        assert_int_equal(rc, TE_ERR_UNSUPPORTED);
        assert_non_null(strstr(te_ctx_errmsg(p->ctx), "needs the CPU features"));
        printf("SKIP %s: this CPU lacks %s (build refused as expected)\n", what,
               te_tensor_intrin_features(in));
        return;
    }
    if (rc)
        fail_msg("%s: %s", what, te_ctx_errmsg(p->ctx));
    if (getenv("TZ_DEBUG"))
        puts(te_module_source(mod));
    mm_run_check(p, mod);
    te_module_free(mod);
}

static const te_tensor_intrin *intrin(const char *name)
{
    const te_tensor_intrin *in = te_tensor_intrin_find(name);
    if (!in)
        fail_msg("no intrinsic %s", name);
    return in;
}

static void test_amx_bf16_update(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 64, 64, 128, 2, TE_BF16, TE_BF16, TE_F32);
    te_iter *io;
    te_iter *ii = mm_tile(&p, 32, 32, 32, &io); /* ko split: the call accumulates */
    assert_int_equal(te_parallel(p.sc, io), TE_OK);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_bf16_32x32")), TE_OK);
    assert_non_null(strstr(te_schedule_trace(p.s), "tensorize C i_i amx_bf16_32x32"));
    mm_build_and_check(&p, intrin("amx_bf16_32x32"), "amx_bf16_32x32 (update, parallel)");
    te_ctx_free(p.ctx);
    mm_build(&p, 64, 64, 128, 2, TE_BF16, TE_BF16, TE_F32);
    ii = mm_tile(&p, 32, 32, 32, &io);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_bf16_32x32_nopf")), TE_OK);
    mm_build_and_check(&p, intrin("amx_bf16_32x32_nopf"), "amx_bf16_32x32_nopf (update)");
    te_ctx_free(p.ctx);
}

static void test_amx_bf16_overwrite(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 48, 32, 64, 2, TE_BF16, TE_BF16, TE_F32);
    te_iter *ii = mm_tile(&p, 16, 16, 0, NULL); /* the whole reduction in the call */
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_bf16_16x16")), TE_OK);
    te_lowered *f = te_lower(p.s, 3, (te_tensor *[]){p.A, p.B, p.C}, "tz", NULL);
    assert_non_null(f);
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    te_lowered_print(f, mf);
    fclose(mf);
    assert_non_null(strstr(txt, "amx_bf16_16x16[overwrite](&C["));
    /* The cost model and the roofline count the intrinsic's multiply-adds: 2 m n k. */
    te_kernel_counts kc;
    assert_int_equal(te_kernel_count(f, &kc), TE_OK);
    assert_true(kc.flops == 2.0 * 48 * 32 * 128);
    assert_null(strstr(txt, "= 0")); /* no initialization loop */
    free(txt);
    te_target t = te_target_host();
    const char *src = te_emit_c(p.ctx, f, NULL);
    assert_non_null(src);
    assert_non_null(strstr(src, "__attribute__((target(\"amx-tile,amx-bf16\")))"));
    assert_non_null(strstr(src, "if (te_amx_permit())"));
    assert_non_null(strstr(src, "_tile_dpbf16ps(0, 4, 6);"));
    (void)t;
    mm_build_and_check(&p, intrin("amx_bf16_16x16"), "amx_bf16_16x16 (overwrite)");
    te_ctx_free(p.ctx);
}

/* The lowered program of p's schedule as text (free() it). */
static char *lowered_text(mm *p)
{
    te_lowered *f = te_lower(p->s, 3, (te_tensor *[]){p->A, p->B, p->C}, "tz", NULL);
    if (!f)
        fail_msg("lowering: %s", te_ctx_errmsg(p->ctx));
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    te_lowered_print(f, mf);
    fclose(mf);
    return txt;
}

/* K blocks outside the tile loops (koo, io, jo, ii, ji, koi, kk): each tile's call in the
 * first k block is the overwrite form, the others the update form, and there is no pass that
 * zeroes C first (a stage with guards, whose overhanging tiles run the plain nest, keeps the
 * zeroing: schedule/lower.c). */
static void test_k_blocks_outside_tiles(void **state)
{
    (void)state;
    static const char *const names[] = {"amx_bf16_32x32", "amx_bf16_32x32_nopf", "avx512bf16_4x32"};
    for (int q = 0; q < 3; q++) {
        const te_tensor_intrin *in = intrin(names[q]);
        int tm = q < 2 ? 32 : 4;
        mm p;
        mm_build(&p, 64, 64, 96, 2, TE_BF16, TE_BF16, TE_F32);
        te_stage *sc = p.sc;
        te_iter *io, *ii, *jo, *ji, *koo, *koi, *kk = te_stage_reduce_axis(sc, 1);
        assert_int_equal(te_split(sc, te_stage_axis(sc, 0), tm, &io, &ii), TE_OK);
        assert_int_equal(te_split(sc, te_stage_axis(sc, 1), 32, &jo, &ji), TE_OK);
        assert_int_equal(te_split(sc, te_stage_reduce_axis(sc, 0), 32, &koo, &koi), TE_OK);
        assert_int_equal(te_reorder(sc, 7, (te_iter *[]){koo, io, jo, ii, ji, koi, kk}), TE_OK);
        if (te_tensorize(sc, ii, in))
            fail_msg("%s: %s", names[q], te_ctx_errmsg(p.ctx));
        char *txt = lowered_text(&p);
        char want[96];
        snprintf(want, sizeof want, "%s[overwrite](&C[", names[q]);
        if (!strstr(txt, want) || !strstr(txt, "ko_o == 0") || strstr(txt, "= 0.0"))
            fail_msg("%s: expected the overwrite form in the first k block and no zeroing:\n%s",
                     names[q], txt);
        free(txt);
        mm_build_and_check(&p, in, names[q]);
        te_ctx_free(p.ctx);
    }
}

static void test_amx_int8(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 32, 64, 64, 4, TE_U8, TE_I8, TE_I32);
    te_iter *ii = mm_tile(&p, 32, 16, 16, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_u8s8_32x16")), TE_OK);
    mm_build_and_check(&p, intrin("amx_u8s8_32x16"), "amx_u8s8_32x16");
    te_ctx_free(p.ctx);
    mm_build(&p, 16, 32, 32, 4, TE_I8, TE_I8, TE_I32);
    ii = mm_tile(&p, 16, 32, 0, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_s8s8_16x32")), TE_OK);
    mm_build_and_check(&p, intrin("amx_s8s8_16x32"), "amx_s8s8_16x32");
    te_ctx_free(p.ctx);
}

static void test_avx512(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 24, 64, 40, 2, TE_BF16, TE_BF16, TE_F32);
    te_iter *ii = mm_tile(&p, 6, 64, 8, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("avx512bf16_6x64")), TE_OK);
    mm_build_and_check(&p, intrin("avx512bf16_6x64"), "avx512bf16_6x64");
    te_ctx_free(p.ctx);
    mm_build(&p, 8, 96, 30, 4, TE_U8, TE_I8, TE_I32);
    ii = mm_tile(&p, 4, 32, 0, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("avx512vnni_u8s8_4x32")), TE_OK);
    mm_build_and_check(&p, intrin("avx512vnni_u8s8_4x32"), "avx512vnni_u8s8_4x32");
    te_ctx_free(p.ctx);
}

/* Every AVX-512 micro-kernel size, int8 and bf16, in both forms (the whole reduction in one
 * call: overwrite; the reduction split, so later calls accumulate: update), exact for int8. The
 * int8 kernels go through inline asm under GCC before 13 (schedule/intrin_x86.c). */
static void test_avx512_every_tile(void **state)
{
    (void)state;
    static const int tiles[][2] = {{4, 32}, {4, 64},  {6, 32}, {6, 64}, {8, 32},
                                   {8, 48}, {12, 32}, {2, 64}, {1, 64}};
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
        for (int kind = 0; kind < 2; kind++)
            for (int split = 0; split < 2; split++) {
                int tm = tiles[t][0], tn = tiles[t][1], g = kind ? 2 : 4;
                char name[64], what[96];
                snprintf(name, sizeof name, kind ? "avx512bf16_%dx%d" : "avx512vnni_u8s8_%dx%d", tm,
                         tn);
                snprintf(what, sizeof what, "%s (%s)", name, split ? "update" : "overwrite");
                mm p;
                mm_build(&p, 2 * tm, 2 * tn, 24, g, kind ? TE_BF16 : TE_U8, kind ? TE_BF16 : TE_I8,
                         kind ? TE_F32 : TE_I32);
                te_iter *ii = mm_tile(&p, tm, tn, split ? 8 : 0, NULL);
                assert_int_equal(te_tensorize(p.sc, ii, intrin(name)), TE_OK);
                mm_build_and_check(&p, intrin(name), what);
                te_ctx_free(p.ctx);
            }
}

/* A user intrinsic: y[j] = x[j] * w[j] + y0 over 4 elements, in plain C (runs anywhere). */
static int describe_fma4(te_ctx *ctx, void *user, te_tensor **ins, te_tensor **out)
{
    (void)user;
    te_tensor *x = te_placeholder(ctx, "x", TE_F32, 1, (int64_t[]){4});
    te_tensor *w = te_placeholder(ctx, "w", TE_F32, 1, (int64_t[]){4});
    te_expr *j = te_axis(ctx, "j", 4);
    *out = te_compute(
        ctx, "y", 1, &j,
        te_add(ctx, te_mul(ctx, te_read(ctx, x, 1, &j), te_read(ctx, w, 1, &j)), te_f32(ctx, 0.5)));
    ins[0] = x, ins[1] = w;
    return *out ? 2 : TE_ERR_NOMEM;
}

static void test_user_intrinsic(void **state)
{
    (void)state;
    te_tensor_intrin_desc d = {
        .name = "test_fma4",
        .describe = describe_fma4,
        .var_axis = -1,
        .backend = TE_BACKEND_C,
        .c_update = "    for (int l = 0; l < 4; l++)\n        y[l] = x[l] * w[l] + 0.5f;\n",
        .doc = "test: y = x * w + 0.5 over 4 floats",
    };
    const char *err = NULL;
    const te_tensor_intrin *in = te_tensor_intrin_register(&d, &err);
    if (!in) /* registered by an earlier run of this test in the process */
        in = te_tensor_intrin_find("test_fma4");
    assert_non_null(in);
    assert_null(te_tensor_intrin_register(&d, &err));
    assert_non_null(strstr(err, "already registered"));
    te_tensor_intrin_desc bad = d;
    bad.name = "no spaces";
    assert_null(te_tensor_intrin_register(&bad, &err));
    assert_non_null(strstr(err, "C identifier"));

    te_ctx *c = te_ctx_create();
    te_tensor *X = te_placeholder(c, "X", TE_F32, 2, (int64_t[]){5, 12});
    te_tensor *W = te_placeholder(c, "W", TE_F32, 2, (int64_t[]){5, 12});
    te_expr *i = te_axis(c, "i", 5), *j = te_axis(c, "j", 12);
    te_tensor *Y =
        te_compute(c, "Y", 2, (te_expr *[]){i, j},
                   te_add(c, te_mul(c, TE_AT(c, X, i, j), TE_AT(c, W, i, j)), te_f32(c, 0.5)));
    te_schedule *s = te_schedule_create(c, 1, &Y);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *jo, *ji;
    assert_int_equal(te_split(sy, te_stage_axis(sy, 1), 4, &jo, &ji), TE_OK);
    assert_int_equal(te_tensorize(sy, ji, in), TE_OK);
    te_target t = te_target_host();
    te_module *mod = NULL;
    if (te_build(s, 3, (te_tensor *[]){X, W, Y}, "fma4", &t, &mod))
        fail_msg("%s", te_ctx_errmsg(c));
    if (getenv("TZ_DEBUG"))
        puts(te_module_source(mod));
    assert_non_null(strstr(te_module_source(mod), "test_fma4(&Y["));
    float x[60], w[60], y[60];
    tt_rng r;
    tt_rng_seed(&r, 3);
    tt_fill_f32(&r, x, 60);
    tt_fill_f32(&r, w, 60);
    tt_poison_f32(y, 60);
    assert_int_equal(te_module_run(mod, (void *[]){x, w, y}), TE_OK);
    for (int k = 0; k < 60; k++) /* the kernel may contract to an fma */
        assert_true(fabs(y[k] - ((double)x[k] * w[k] + 0.5)) <= 1e-6 * (fabs(x[k] * w[k]) + 0.5));
    te_module_free(mod);

    /* trace replay and C translation */
    te_schedule *s2 = te_schedule_create(c, 1, &Y);
    assert_int_equal(te_schedule_apply_trace(s2, te_schedule_trace(s)), TE_OK);
    assert_non_null(strstr(te_schedule_trace(s2), "tensorize Y j_i test_fma4"));
    char *code = te_trace_to_c(te_schedule_trace(s), "s");
    assert_non_null(code);
    assert_non_null(strstr(code, "te_tensorize("));
    assert_non_null(strstr(code, "te_tensor_intrin_find(\"test_fma4\")"));
    free(code);
    te_schedule *s3 = te_schedule_create(c, 1, &Y);
    assert_int_not_equal(te_schedule_apply_trace(s3, "tensorize Y j no_such_intrinsic\n"), TE_OK);
    assert_non_null(strstr(te_ctx_errmsg(c), "no tensor intrinsic named"));
    te_ctx_free(c);
}

static void expect_refusal(mm *p, te_iter *at, const char *name, const char *why)
{
    te_ctx_clear_error(p->ctx);
    const char *tr = te_schedule_trace(p->s);
    char *before = strdup(tr ? tr : "");
    assert_int_equal(te_tensorize(p->sc, at, intrin(name)), TE_ERR_SCHEDULE);
    const char *msg = te_ctx_errmsg(p->ctx);
    if (!strstr(msg, why))
        fail_msg("expected '%s' in: %s", why, msg);
    assert_string_equal(te_schedule_trace(p->s), before); /* nothing recorded */
    char buf[512];
    assert_int_equal(te_tensorize_check(p->sc, at, intrin(name), buf, sizeof buf), TE_ERR_SCHEDULE);
    assert_non_null(strstr(buf, why));
    free(before);
}

static void test_refusals(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 64, 64, 64, 2, TE_BF16, TE_BF16, TE_F32);
    te_iter *io;
    te_iter *ii = mm_tile(&p, 32, 32, 32, &io);
    expect_refusal(&p, ii, "amx_bf16_16x16", "needs 16");               /* tile extents */
    expect_refusal(&p, ii, "amx_u8s8_32x32", "is f32, intrinsic");      /* dtypes */
    expect_refusal(&p, io, "amx_bf16_32x32", "outer piece of a split"); /* io, jo in the nest */
    char why[512];
    assert_int_equal(te_tensorize_check(p.sc, ii, intrin("amx_bf16_32x32"), why, sizeof why),
                     TE_OK);
    assert_string_equal(why, "");
    te_ctx_free(p.ctx);

    /* an annotated loop inside the nest */
    mm_build(&p, 32, 32, 32, 2, TE_BF16, TE_BF16, TE_F32);
    ii = mm_tile(&p, 32, 32, 0, NULL);
    te_iter *ji = te_stage_leaf(p.sc, te_stage_nleaves(p.sc) - 3);
    assert_int_equal(te_unroll(p.sc, ji), TE_OK);
    expect_refusal(&p, ii, "amx_bf16_32x32", "is annotated");
    te_ctx_free(p.ctx);

    /* a reduction split with a tail (ko 40 by 16) */
    mm_build(&p, 32, 32, 40, 2, TE_BF16, TE_BF16, TE_F32);
    ii = mm_tile(&p, 32, 32, 16, NULL);
    expect_refusal(&p, ii, "amx_bf16_32x32", "leaves a tail");
    te_ctx_free(p.ctx);

    /* ko of 24 is not a multiple of the AMX tile's 16 rows */
    mm_build(&p, 32, 32, 24, 2, TE_BF16, TE_BF16, TE_F32);
    ii = mm_tile(&p, 32, 32, 0, NULL);
    expect_refusal(&p, ii, "amx_bf16_32x32", "not a multiple of 16");
    te_ctx_free(p.ctx);

    /* B in [ko, g, n] layout: the access moves the wrong way */
    te_ctx *c = te_ctx_create();
    te_tensor *A = te_placeholder(c, "A", TE_BF16, 2, (int64_t[]){16, 32});
    te_tensor *B = te_placeholder(c, "B", TE_BF16, 3, (int64_t[]){16, 2, 16});
    te_expr *i = te_axis(c, "i", 16), *j = te_axis(c, "j", 16);
    te_expr *rk = te_reduce_axis(c, "ko", 16), *rg = te_reduce_axis(c, "kk", 2);
    te_expr *a = te_cast(
        c, TE_F32, te_read(c, A, 2, (te_expr *[]){i, te_add(c, te_mul(c, rk, te_int(c, 2)), rg)}));
    te_expr *b = te_cast(c, TE_F32, te_read(c, B, 3, (te_expr *[]){rk, rg, j}));
    te_tensor *C =
        te_compute(c, "C", 2, (te_expr *[]){i, j},
                   te_reduce(c, TE_RSUM, NULL, te_mul(c, a, b), 2, (te_expr *[]){rk, rg}));
    te_schedule *s = te_schedule_create(c, 1, &C);
    te_stage *sc = te_schedule_stage(s, C);
    assert_int_equal(te_tensorize(sc, te_stage_axis(sc, 0), intrin("amx_bf16_16x16")),
                     TE_ERR_SCHEDULE);
    assert_non_null(strstr(te_ctx_errmsg(c), "moves by"));
    /* a body that is not the intrinsic's (a * a + b) */
    te_ctx_clear_error(c);
    te_tensor *C2 = te_compute(
        c, "C2", 2, (te_expr *[]){i, j},
        te_reduce(c, TE_RSUM, NULL, te_add(c, te_mul(c, a, a), b), 2, (te_expr *[]){rk, rg}));
    te_schedule *s2 = te_schedule_create(c, 1, &C2);
    te_stage *sc2 = te_schedule_stage(s2, C2);
    assert_int_equal(te_tensorize(sc2, te_stage_axis(sc2, 0), intrin("amx_bf16_16x16")),
                     TE_ERR_SCHEDULE);
    if (!strstr(te_ctx_errmsg(c), "differs"))
        fail_msg("%s", te_ctx_errmsg(c));
    te_ctx_free(c);

    /* a split of the tensorized loop afterwards: lowering refuses */
    mm_build(&p, 32, 32, 32, 2, TE_BF16, TE_BF16, TE_F32);
    ii = mm_tile(&p, 32, 32, 0, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_bf16_32x32")), TE_OK);
    te_iter *x1, *x2;
    assert_int_equal(te_split(p.sc, ii, 16, &x1, &x2), TE_OK);
    assert_null(te_lower(p.s, 3, (te_tensor *[]){p.A, p.B, p.C}, "tz", NULL));
    assert_non_null(strstr(te_ctx_errmsg(p.ctx), "tensorize"));
    te_ctx_free(p.ctx);

    assert_int_equal(te_tensorize(NULL, NULL, NULL), TE_ERR_ARG);
}

/* A target without the features: the build is refused with the features named. */
static void test_target_without_features(void **state)
{
    (void)state;
    mm p;
    mm_build(&p, 32, 32, 32, 2, TE_BF16, TE_BF16, TE_F32);
    te_iter *ii = mm_tile(&p, 32, 32, 0, NULL);
    assert_int_equal(te_tensorize(p.sc, ii, intrin("amx_bf16_32x32")), TE_OK);
    te_target t = te_target_host();
    snprintf(t.isa, sizeof t.isa, "avx2,fma");
    assert_false(te_tensor_intrin_supported(intrin("amx_bf16_32x32"), &t));
    te_module *mod = NULL;
    assert_int_equal(te_build(p.s, 3, (te_tensor *[]){p.A, p.B, p.C}, "tz", &t, &mod),
                     TE_ERR_UNSUPPORTED);
    assert_non_null(strstr(te_ctx_errmsg(p.ctx), "amx_tile,amx_bf16"));
    assert_null(mod);
    te_ctx_free(p.ctx);
}

/* Every AMX 32 x 32 tile, with and without prefetch, emits C that the system compiler builds
 * for an AMX target (compiled only: no AMX needed to check the code), and only the plain one
 * prefetches. */
static void test_amx_sources_compile_everywhere(void **state)
{
    (void)state;
    static const char *const names[] = {"amx_bf16_32x32", "amx_bf16_32x32_nopf", "amx_u8s8_32x32",
                                        "amx_u8s8_32x32_nopf"};
    for (int v = 0; v < 4; v++) {
        mm p;
        bool bf = v < 2;
        mm_build(&p, 64, 64, 128, bf ? 2 : 4, bf ? TE_BF16 : TE_U8, bf ? TE_BF16 : TE_I8,
                 bf ? TE_F32 : TE_I32);
        te_iter *ii = mm_tile(&p, 32, 32, 0, NULL);
        assert_int_equal(te_tensorize(p.sc, ii, intrin(names[v])), TE_OK);
        te_target t = te_target_host();
        size_t l = strlen(t.isa);
        snprintf(t.isa + l, sizeof t.isa - l, "%samx_tile,amx_bf16,amx_int8", l ? "," : "");
        te_lowered *f = te_lower(p.s, 3, (te_tensor *[]){p.A, p.B, p.C}, "tz", &t);
        assert_non_null(f);
        const char *src = te_emit_c(p.ctx, f, &t);
        if (!src)
            fail_msg("%s: %s", names[v], te_ctx_errmsg(p.ctx));
        bool nopf = strstr(names[v], "nopf") != NULL;
        assert_true((strstr(src, "_mm_prefetch") == NULL) == nopf);
        char path[] = "/tmp/te_amx_XXXXXX.c";
        int fd = mkstemps(path, 2);
        assert_true(fd >= 0);
        FILE *fp = fdopen(fd, "w");
        fputs(src, fp);
        fclose(fp);
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "cc -std=gnu11 -O1 -Werror -c -o /dev/null -mavx512f -mavx512bw -mavx512vl "
                 "-mamx-tile -mamx-bf16 -mamx-int8 %s 2>&1",
                 path);
        int rc = system(cmd);
        unlink(path);
        if (rc != 0)
            fail_msg("%s: the emitted C does not compile (%s)", names[v], cmd);
        te_ctx_free(p.ctx);
    }
}

static void test_registry(void **state)
{
    (void)state;
    int n = te_tensor_intrin_count();
    assert_true(n >= 30);
    for (int i = 0; i < n; i++) {
        const te_tensor_intrin *in = te_tensor_intrin_at(i);
        assert_non_null(in);
        assert_non_null(te_tensor_intrin_name(in));
        assert_true(te_tensor_intrin_doc(in)[0] != 0);
        assert_true(te_tensor_intrin_find(te_tensor_intrin_name(in)) == in);
        assert_non_null(te_tensor_intrin_output(in));
    }
    assert_null(te_tensor_intrin_at(n));
    assert_null(te_tensor_intrin_find("nope"));
    /* The AMX 32 x 32 tiles have a variant without software prefetch (the tuner chooses). */
    static const char *const tags[] = {"bf16", "u8s8", "s8s8"};
    for (int t = 0; t < 3; t++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "amx_%s_32x32", tags[t]);
        snprintf(b, sizeof b, "amx_%s_32x32_nopf", tags[t]);
        const te_tensor_intrin *pf = intrin(a), *np = intrin(b);
        assert_string_equal(te_tensor_intrin_features(pf), te_tensor_intrin_features(np));
        assert_non_null(strstr(te_tensor_intrin_doc(np), "no software prefetch"));
        assert_null(strstr(te_tensor_intrin_doc(pf), "no software prefetch"));
    }
}

/* The tensorize template (autotune/templates_tz.c) on a bf16 product and on an MLP gate
 * silu(x W1) * (x W3) of two: every configuration of a sample builds, tensorizes, and matches
 * the float64 reference. Skipped where no intrinsic of the host fits. */
static void check_space(te_ctx *c, int n_in, te_tensor *const *ins, te_tensor *Y,
                        const void *const *data, const double *want, const double *tol, size_t ny,
                        const char *what)
{
    te_target t = te_target_host();
    te_space *sp = te_space_create(c, NULL, n_in, ins, 1, &Y, TE_SPACE_AUTO, &t);
    assert_non_null(sp);
    int64_t size = te_space_size(sp);
    const char *first = size > 0 ? te_space_get(sp, 0) : NULL;
    if (!first || !strstr(first, "tensorize ")) {
        printf("SKIP %s: no tensor intrinsic of this CPU (%s) fits\n", what, t.isa);
        return;
    }
    assert_true(size >= 2);
    float *y = malloc(ny * sizeof *y);
    void *args[8];
    for (int i = 0; i < n_in; i++)
        args[i] = (void *)data[i];
    args[n_in] = y;
    tt_rng r;
    tt_rng_seed(&r, 11);
    for (int trial = 0; trial < 6; trial++) {
        int64_t k = trial == 0 ? 0 : tt_rng_int(&r, size);
        const char *tr = te_space_get(sp, k);
        assert_non_null(tr);
        assert_non_null(strstr(tr, "tensorize "));
        te_schedule *s = te_schedule_create(c, 1, &Y);
        if (te_schedule_apply_trace(s, tr))
            fail_msg("%s config %lld: %s\n%s", what, (long long)k, te_ctx_errmsg(c), tr);
        te_tensor *all[8];
        for (int i = 0; i < n_in; i++)
            all[i] = ins[i];
        all[n_in] = Y;
        te_module *mod = NULL;
        if (te_build(s, n_in + 1, all, "tzt", &t, &mod))
            fail_msg("%s config %lld: %s\n%s", what, (long long)k, te_ctx_errmsg(c), tr);
        if (getenv("TZ_DEBUG") && trial == 0)
            puts(te_module_source(mod));
        tt_poison_f32(y, ny);
        assert_int_equal(te_module_run(mod, args), TE_OK);
        for (size_t x = 0; x < ny; x++)
            if (!(fabs(y[x] - want[x]) <= tol[x]))
                fail_msg("%s config %lld: Y[%zu] = %.8g, want %.8g\n%s", what, (long long)k, x,
                         y[x], want[x], tr);
        te_module_free(mod);
    }
    free(y);
}

static void test_template(void **state)
{
    (void)state;
    enum { M = 64, N = 64, KO = 96 };
    te_ctx *c = te_ctx_create();
    te_tensor *X = te_placeholder(c, "X", TE_BF16, 2, (int64_t[]){M, 2 * KO});
    te_tensor *W1 = te_placeholder(c, "W1", TE_BF16, 3, (int64_t[]){KO, N, 2});
    te_tensor *W3 = te_placeholder(c, "W3", TE_BF16, 3, (int64_t[]){KO, N, 2});
    te_tensor *P[2];
    te_tensor *W[2] = {W1, W3};
    for (int q = 0; q < 2; q++) {
        te_expr *i = te_axis(c, "i", M), *j = te_axis(c, "j", N);
        te_expr *rk = te_reduce_axis(c, "ko", KO), *rg = te_reduce_axis(c, "kk", 2);
        te_expr *a =
            te_cast(c, TE_F32,
                    te_read(c, X, 2, (te_expr *[]){i, te_add(c, te_mul(c, rk, te_int(c, 2)), rg)}));
        te_expr *b = te_cast(c, TE_F32, te_read(c, W[q], 3, (te_expr *[]){rk, j, rg}));
        P[q] = te_compute(c, q ? "P3" : "P1", 2, (te_expr *[]){i, j},
                          te_reduce(c, TE_RSUM, NULL, te_mul(c, a, b), 2, (te_expr *[]){rk, rg}));
    }
    te_expr *i = te_axis(c, "i", M), *j = te_axis(c, "j", N);
    te_expr *p1 = TE_AT(c, P[0], i, j), *p3 = TE_AT(c, P[1], i, j);
    te_expr *silu = te_mul(c, p1, te_call(c, TE_SIGMOID, 1, &p1));
    te_tensor *Y = te_compute(c, "Y", 2, (te_expr *[]){i, j}, te_mul(c, silu, p3));
    assert_non_null(Y);

    uint16_t *x = malloc(sizeof(uint16_t) * M * 2 * KO),
             *w1 = malloc(sizeof(uint16_t) * KO * N * 2),
             *w3 = malloc(sizeof(uint16_t) * KO * N * 2);
    tt_rng r;
    tt_rng_seed(&r, 5);
    for (int k = 0; k < M * 2 * KO; k++)
        x[k] = to_bf16((float)tt_rng_uniform(&r, -1, 1));
    for (int k = 0; k < KO * N * 2; k++) {
        w1[k] = to_bf16((float)tt_rng_uniform(&r, -0.2, 0.2));
        w3[k] = to_bf16((float)tt_rng_uniform(&r, -0.2, 0.2));
    }
    double *want = malloc(sizeof(double) * M * N), *tol = malloc(sizeof(double) * M * N);
    double *want1 = malloc(sizeof(double) * M * N), *tol1 = malloc(sizeof(double) * M * N);
    double u = ldexp(1.0, -24);
    for (int a = 0; a < M; a++)
        for (int b = 0; b < N; b++) {
            double s1 = 0, s3 = 0, m1 = 0, m3 = 0;
            for (int k = 0; k < 2 * KO; k++) {
                double xv = te_bf16_to_f32(x[a * 2 * KO + k]);
                double v1 = xv * te_bf16_to_f32(w1[((k / 2) * N + b) * 2 + k % 2]);
                double v3 = xv * te_bf16_to_f32(w3[((k / 2) * N + b) * 2 + k % 2]);
                s1 += v1, s3 += v3, m1 += fabs(v1), m3 += fabs(v3);
            }
            double sg = 1 / (1 + exp(-s1));
            want[a * N + b] = s1 * sg * s3;
            /* errors of p1 and p3 ((2K + 2) u sum|ab| each) through y = silu(p1) p3, whose
             * derivative in p1 is below 1.1 |p3|, plus a few roundings of y and of sigmoid */
            tol[a * N + b] = (2 * KO + 2) * u * (1.1 * fabs(s3) * m1 + fabs(s1 * sg) * m3) +
                             16 * u * fabs(want[a * N + b]) + 1e-30;
            want1[a * N + b] = s1;
            tol1[a * N + b] = (2 * KO + 2) * u * m1;
        }
    check_space(c, 3, (te_tensor *[]){X, W1, W3}, Y, (const void *[]){x, w1, w3}, want, tol,
                (size_t)M * N, "MLP gate bf16");
    check_space(c, 2, (te_tensor *[]){X, W1}, P[0], (const void *[]){x, w1}, want1, tol1,
                (size_t)M * N, "bf16 product");
    free(x), free(w1), free(w3), free(want), free(tol), free(want1), free(tol1);
    te_ctx_free(c);
}

/* te_op_pack_vnni_blocked packs like its index math says, and te_op_matmul_vnni over the
 * blocked operand tunes through the tensorize template to the float64 product. */
static void test_blocked_ops(void **state)
{
    (void)state;
    enum { M = 32, N = 64, K = 129, KP = 130, NB = 32 }; /* k padded to the pair */
    te_ctx *c = te_ctx_create();
    te_tensor *B = te_placeholder(c, "B", TE_BF16, 2, (int64_t[]){K, N});
    te_tensor *Bp = te_op_pack_vnni_blocked(c, B, 2, NB, "Bp");
    assert_non_null(Bp);
    const int64_t *ps = te_tensor_shape(Bp);
    assert_true(ps[0] == N / NB && ps[1] == KP / 2 && ps[2] == NB && ps[3] == 2);
    assert_null(te_op_pack_vnni_blocked(c, B, 2, 48, "bad"));
    assert_non_null(strstr(te_ctx_errmsg(c), "divide n"));
    te_ctx_clear_error(c);
    uint16_t *b = malloc(sizeof(uint16_t) * K * N), *bp = malloc(sizeof(uint16_t) * KP * N);
    tt_rng r;
    tt_rng_seed(&r, 9);
    for (int k = 0; k < K * N; k++)
        b[k] = to_bf16((float)tt_rng_uniform(&r, -1, 1));
    te_schedule *s = te_schedule_create(c, 1, &Bp);
    te_target t = te_target_host();
    te_module *mod = NULL;
    if (te_build(s, 2, (te_tensor *[]){B, Bp}, "pack", &t, &mod))
        fail_msg("%s", te_ctx_errmsg(c));
    memset(bp, 0xff, sizeof(uint16_t) * KP * N);
    assert_int_equal(te_module_run(mod, (void *[]){b, bp}), TE_OK);
    te_module_free(mod);
    for (int jb = 0; jb < N / NB; jb++)
        for (int ko = 0; ko < KP / 2; ko++)
            for (int j = 0; j < NB; j++)
                for (int kk = 0; kk < 2; kk++) {
                    int row = ko * 2 + kk;
                    uint16_t want = row < K ? b[row * N + jb * NB + j] : 0;
                    assert_int_equal(bp[((jb * (KP / 2) + ko) * NB + j) * 2 + kk], want);
                }
    /* The product over a packed placeholder (weights packed once, as above). */
    te_tensor *A = te_placeholder(c, "A", TE_BF16, 2, (int64_t[]){M, K + 1});
    te_tensor *W = te_placeholder(c, "W", TE_BF16, 4, (int64_t[]){N / NB, KP / 2, NB, 2});
    te_tensor *C = te_op_matmul_vnni(c, A, W, TE_F32, "C");
    assert_non_null(C);
    uint16_t *a = malloc(sizeof(uint16_t) * M * KP);
    for (int k = 0; k < M * KP; k++) /* A's padding column is zero, as the header says */
        a[k] = k % KP < K ? to_bf16((float)tt_rng_uniform(&r, -1, 1)) : 0;
    double *want = malloc(sizeof(double) * M * N), *tol = malloc(sizeof(double) * M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0, abs_sum = 0;
            for (int k = 0; k < K; k++) {
                double v = (double)te_bf16_to_f32(a[i * KP + k]) * te_bf16_to_f32(b[k * N + j]);
                sum += v, abs_sum += fabs(v);
            }
            want[i * N + j] = sum;
            tol[i * N + j] = (K + 3) * ldexp(1.0, -24) * abs_sum;
        }
    check_space(c, 2, (te_tensor *[]){A, W}, C, (const void *[]){a, bp}, want, tol, (size_t)M * N,
                "blocked matmul_vnni");
    free(a), free(b), free(bp), free(want), free(tol);
    te_ctx_free(c);
}

/* te_op_conv2d_vnni (NHWC, packed weights) through the tensorize template: the intrinsic's tile
 * over (ow, oc), ry and rx outside the call, stride 1 and 2 (rows of A `stride * c` apart),
 * against the float64 convolution. */
static void conv_case(int H, int W, int stride)
{
    enum { IC = 64, OC = 32, KH = 3, KW = 3 };
    te_ctx *c = te_ctx_create();
    te_tensor *X = te_placeholder(c, "X", TE_BF16, 4, (int64_t[]){1, H, W, IC});
    te_tensor *Wp = te_placeholder(c, "Wp", TE_BF16, 5, (int64_t[]){KH, KW, IC / 2, OC, 2});
    te_tensor *Y = te_op_conv2d_vnni(c, X, Wp, stride, TE_F32, "Y");
    assert_non_null(Y);
    const int64_t *ys = te_tensor_shape(Y);
    int OH = (int)ys[1], OW = (int)ys[2];
    assert_int_equal(OH, (H - KH) / stride + 1);
    size_t nx = (size_t)H * W * IC, nw = (size_t)KH * KW * IC * OC, ny = (size_t)OH * OW * OC;
    uint16_t *x = malloc(nx * 2), *w = malloc(nw * 2);
    tt_rng r;
    tt_rng_seed(&r, 21);
    for (size_t k = 0; k < nx; k++)
        x[k] = to_bf16((float)tt_rng_uniform(&r, -1, 1));
    for (size_t k = 0; k < nw; k++)
        w[k] = to_bf16((float)tt_rng_uniform(&r, -0.5, 0.5));
    double *want = malloc(ny * sizeof *want), *tol = malloc(ny * sizeof *tol);
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++)
            for (int o = 0; o < OC; o++) {
                double sum = 0, abs_sum = 0;
                for (int ry = 0; ry < KH; ry++)
                    for (int rx = 0; rx < KW; rx++)
                        for (int ch = 0; ch < IC; ch++) {
                            double v =
                                (double)te_bf16_to_f32(
                                    x[((size_t)(oh * stride + ry) * W + ow * stride + rx) * IC +
                                      ch]) *
                                te_bf16_to_f32(
                                    w[(((size_t)ry * KW + rx) * (IC / 2) + ch / 2) * OC * 2 +
                                      (size_t)o * 2 + ch % 2]);
                            sum += v, abs_sum += fabs(v);
                        }
                size_t q = ((size_t)oh * OW + ow) * OC + o;
                want[q] = sum;
                tol[q] = (KH * KW * IC + 2) * ldexp(1.0, -24) * abs_sum;
            }
    char what[64];
    snprintf(what, sizeof what, "conv2d_vnni %dx%d stride %d", H, W, stride);
    check_space(c, 2, (te_tensor *[]){X, Wp}, Y, (const void *[]){x, w}, want, tol, ny, what);
    free(x), free(w), free(want), free(tol);
    te_ctx_free(c);
}

static void test_conv(void **state)
{
    (void)state;
    conv_case(10, 18, 1);
    conv_case(9, 33, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_amx_sources_compile_everywhere),
        cmocka_unit_test(test_amx_bf16_update),
        cmocka_unit_test(test_amx_bf16_overwrite),
        cmocka_unit_test(test_k_blocks_outside_tiles),
        cmocka_unit_test(test_amx_int8),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_avx512_every_tile),
        cmocka_unit_test(test_user_intrinsic),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_target_without_features),
        cmocka_unit_test(test_template),
        cmocka_unit_test(test_blocked_ops),
        cmocka_unit_test(test_conv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
