/* CUDA tensor intrinsics (schedule/intrin_cuda.c, backends/cuda/emit_cuda_intrin.c): the
 * matcher accepts f16 / bf16 matmul_mixed, f32 (tf32) matmul and i8 matmul_integer stages tiled
 * 16 x 16 and refuses wrong ones with their reasons; the warp kernel's launch (blockDim.x = 32)
 * and source; NVRTC compiles it for sm_80 and sm_90 and its PTX has the wmma.mma.sync
 * instructions (skipped with a message without libnvrtc); the C target, a target below sm_80 and
 * a loop bound to threadIdx.x are refused with clear messages; on a device (skipped without
 * one) every intrinsic, in the overwrite and update forms, matches a float64 / exact integer
 * reference; and on the CPU, through the host shim (tests/cuda_shim, one pthread per CUDA
 * thread) with a host reference of the WMMA fragments and of the m16n8k32 s8 mma.sync written
 * here, every intrinsic in both forms matches the reference (skipped without g++). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/cuda_impl.h"
#include "cuda_testutil.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tensorize.h"
#include "testutil.h"

static int g_dev = -1;

static bool have_nvrtc(void) { return tt_have_nvrtc(); }

static bool have_device(void)
{
    if (g_dev < 0) {
        te_target t;
        g_dev = te_cuda_probe() == TE_OK && te_cuda_target_device(0, &t) == TE_OK && t.sm >= 80;
        if (!g_dev)
            printf("[  SKIP    ] device runs: %s\n",
                   te_cuda_probe() == TE_OK ? "device 0 is older than sm_80" : te_cuda_errmsg());
    }
    return g_dev;
}

/* A matmul C[M, N] = A[M, K] B[K, N] of input dtype `in`: f16 / bf16 (matmul_mixed, f32),
 * f32 (matmul_mixed f32: the tf32 intrinsic) or i8 (matmul_integer, i32). */
typedef struct mmc {
    te_ctx *ctx;
    te_tensor *A, *B, *C;
    te_dtype in;
    int64_t M, N, K;
    void *a, *b, *c;
    double *ref;
} mmc;

static void mmc_build(mmc *p, te_dtype in, int64_t M, int64_t N, int64_t K)
{
    memset(p, 0, sizeof *p);
    p->ctx = te_ctx_create();
    p->in = in, p->M = M, p->N = N, p->K = K;
    p->A = te_placeholder(p->ctx, "A", in, 2, (int64_t[]){M, K});
    p->B = te_placeholder(p->ctx, "B", in, 2, (int64_t[]){K, N});
    p->C = in == TE_I8 ? te_op_matmul_integer(p->ctx, p->A, p->B, 0, 0, "C")
                       : te_op_matmul_mixed(p->ctx, p->A, p->B, 0, 0, TE_F32, "C");
    assert_non_null(p->C);
}

static void mmc_free(mmc *p)
{
    free(p->a), free(p->b), free(p->c), free(p->ref);
    te_ctx_free(p->ctx);
}

/* Random inputs (in the input dtype) and the float64 reference of the product of the values
 * they hold. */
static void mmc_data(mmc *p, uint64_t seed)
{
    tt_rng r;
    tt_rng_seed(&r, tt_seed(seed));
    size_t na = (size_t)(p->M * p->K), nb = (size_t)(p->K * p->N), nc = (size_t)(p->M * p->N);
    size_t es = te_dtype_size(p->in);
    p->a = malloc(na * es), p->b = malloc(nb * es), p->c = malloc(nc * 4);
    p->ref = malloc(nc * sizeof(double));
    double *va = malloc(na * sizeof(double)), *vb = malloc(nb * sizeof(double));
    assert_true(p->a && p->b && p->c && p->ref && va && vb);
    for (size_t t = 0; t < na + nb; t++) {
        bool isa = t < na;
        size_t q = isa ? t : t - na;
        void *dst = isa ? p->a : p->b;
        double *v = isa ? va : vb;
        if (p->in == TE_I8) {
            int8_t x = (int8_t)(tt_rng_int(&r, 256) - 128);
            ((int8_t *)dst)[q] = x;
            v[q] = x;
        } else {
            float x = (float)tt_rng_uniform(&r, -1, 1);
            if (p->in == TE_F16) {
                ((uint16_t *)dst)[q] = te_f32_to_f16(x);
                v[q] = te_f16_to_f32(((uint16_t *)dst)[q]);
            } else if (p->in == TE_BF16) {
                ((uint16_t *)dst)[q] = te_f32_to_bf16(x);
                v[q] = te_bf16_to_f32(((uint16_t *)dst)[q]);
            } else {
                ((float *)dst)[q] = x;
                v[q] = x;
            }
        }
    }
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            double s = 0;
            for (int64_t k = 0; k < p->K; k++)
                s += va[i * p->K + k] * vb[k * p->N + j];
            p->ref[i * p->N + j] = s;
        }
    free(va), free(vb);
}

/* The warp schedule: 16 x 16 tiles (ii, ji) of C, the tile rows on blockIdx.y, the tile
 * columns split into `warps` warps (threadIdx.y) of a block (blockIdx.x), no loop on
 * threadIdx.x; with kin > 0 the reduction is split by kin outside the tile (the intrinsic's
 * update form after a zeroing of C), else the whole K is in the call (overwrite form). bind_x:
 * the warp loop on threadIdx.x instead (refused). Returns the tile's first loop (NULL for a
 * schedule error, message on the context). */
static te_iter *warp_schedule(mmc *p, te_schedule *s, int tile_m, int warps, int64_t kin,
                              bool bind_x)
{
    te_stage *sc = te_schedule_stage(s, p->C);
    te_iter *io, *ii, *jo, *ji, *jb, *jw, *ko = NULL, *ki = te_stage_reduce_axis(sc, 0);
    if (te_split(sc, te_stage_axis(sc, 0), tile_m, &io, &ii) ||
        te_split(sc, te_stage_axis(sc, 1), 16, &jo, &ji) || te_split(sc, jo, warps, &jb, &jw))
        return NULL;
    if (kin > 0) {
        if (te_split(sc, te_stage_reduce_axis(sc, 0), kin, &ko, &ki) ||
            te_reorder(sc, 7, (te_iter *[]){io, jb, jw, ko, ii, ji, ki}))
            return NULL;
    } else if (te_reorder(sc, 6, (te_iter *[]){io, jb, jw, ii, ji, ki})) {
        return NULL;
    }
    if (te_bind(sc, io, TE_BLOCK_Y) || te_bind(sc, jb, TE_BLOCK_X) ||
        te_bind(sc, jw, bind_x ? TE_THREAD_X : TE_THREAD_Y))
        return NULL;
    return ii;
}

static const char *intrin_for(te_dtype in)
{
    switch (in) {
    case TE_F16:
        return "cuda_wmma_f16_16x16x16";
    case TE_BF16:
        return "cuda_wmma_bf16_16x16x16";
    case TE_F32:
        return "cuda_wmma_tf32_16x16x8";
    default:
        return "cuda_mma_s8_16x16x32";
    }
}

/* A fresh schedule of p tensorized with in's intrinsic (asserted to be accepted). */
static te_schedule *tensorized(mmc *p, int warps, int64_t kin, bool bind_x)
{
    te_schedule *s = te_schedule_create(p->ctx, 1, &p->C);
    te_iter *ii = warp_schedule(p, s, 16, warps, kin, bind_x);
    if (!ii)
        fail_msg("schedule: %s", te_ctx_errmsg(p->ctx));
    const te_tensor_intrin *in = te_tensor_intrin_find(intrin_for(p->in));
    assert_non_null(in);
    if (te_tensorize(te_schedule_stage(s, p->C), ii, in) != TE_OK)
        fail_msg("te_tensorize %s: %s", intrin_for(p->in), te_ctx_errmsg(p->ctx));
    return s;
}

static void test_builtin_cuda_intrinsics_are_registered_with_sm80(void **state)
{
    (void)state;
    static const te_dtype ins[] = {TE_F16, TE_BF16, TE_F32, TE_I8};
    for (int t = 0; t < 4; t++) {
        const te_tensor_intrin *in = te_tensor_intrin_find(intrin_for(ins[t]));
        assert_non_null(in);
        assert_int_equal(te_tensor_intrin_backend(in), TE_BACKEND_CUDA);
        assert_string_equal(te_tensor_intrin_features(in), "sm_80");
        te_target t80 = te_target_cuda(80), t90 = te_target_cuda(90), t75 = te_target_cuda(75);
        te_target host = te_target_host();
        assert_true(te_tensor_intrin_supported(in, &t80));
        assert_true(te_tensor_intrin_supported(in, &t90));
        assert_false(te_tensor_intrin_supported(in, &t75));
        assert_false(te_tensor_intrin_supported(in, &host));
    }
    assert_non_null(strstr(te_tensor_intrin_doc(te_tensor_intrin_find("cuda_wmma_tf32_16x16x8")),
                           "rounded to TF32"));
}

static void test_matcher_accepts_f16_bf16_tf32_s8_matmuls(void **state)
{
    (void)state;
    static const te_dtype ins[] = {TE_F16, TE_BF16, TE_F32, TE_I8};
    for (int t = 0; t < 4; t++) {
        for (int64_t kin = 0; kin <= 32; kin += 32) {
            mmc p;
            mmc_build(&p, ins[t], 64, 64, 64);
            te_schedule *s = te_schedule_create(p.ctx, 1, &p.C);
            te_iter *ii = warp_schedule(&p, s, 16, 2, kin, false);
            assert_non_null(ii);
            char why[512] = "x";
            int rc = te_tensorize_check(te_schedule_stage(s, p.C), ii,
                                        te_tensor_intrin_find(intrin_for(ins[t])), why, sizeof why);
            if (rc != TE_OK)
                fail_msg("%s (kin %lld): %s", intrin_for(ins[t]), (long long)kin, why);
            assert_string_equal(why, "");
            mmc_free(&p);
        }
    }
}

static void expect_refusal(te_dtype in, int tile_m, const char *intrin, const char *reason)
{
    mmc p;
    mmc_build(&p, in, 64, 64, 64);
    te_schedule *s = te_schedule_create(p.ctx, 1, &p.C);
    te_iter *ii = warp_schedule(&p, s, tile_m, 2, 0, false);
    assert_non_null(ii);
    char why[512] = "";
    te_stage *sc = te_schedule_stage(s, p.C);
    assert_int_equal(te_tensorize_check(sc, ii, te_tensor_intrin_find(intrin), why, sizeof why),
                     TE_ERR_SCHEDULE);
    if (!strstr(why, reason))
        fail_msg("%s on %s: expected '%s' in: %s", intrin, te_dtype_str(in), reason, why);
    assert_int_equal(te_tensorize(sc, ii, te_tensor_intrin_find(intrin)), TE_ERR_SCHEDULE);
    mmc_free(&p);
}

static void test_matcher_refuses_wrong_stages_with_reasons(void **state)
{
    (void)state;
    /* a bf16 stage is not the f16 intrinsic's computation */
    expect_refusal(TE_BF16, 16, "cuda_wmma_f16_16x16x16", "body differs");
    /* a 32-row tile is not a 16-row fragment */
    expect_refusal(TE_F16, 32, "cuda_wmma_f16_16x16x16", "needs 16");
    /* an i32 stage for an f32 intrinsic */
    expect_refusal(TE_I8, 16, "cuda_wmma_f16_16x16x16", "i32");
    /* K = 24 is not a multiple of the fragment's 16 */
    mmc p;
    mmc_build(&p, TE_F16, 32, 32, 24);
    te_schedule *s = te_schedule_create(p.ctx, 1, &p.C);
    te_iter *ii = warp_schedule(&p, s, 16, 1, 0, false);
    char why[512] = "";
    assert_int_equal(te_tensorize_check(te_schedule_stage(s, p.C), ii,
                                        te_tensor_intrin_find("cuda_wmma_f16_16x16x16"), why,
                                        sizeof why),
                     TE_ERR_SCHEDULE);
    assert_non_null(strstr(why, "not a multiple of 16"));
    mmc_free(&p);
}

/* Lowers and emits the tensorized schedule for sm; asserts the warp launch and the call. */
static const char *emit(mmc *p, int sm, int warps, int64_t kin)
{
    te_schedule *s = tensorized(p, warps, kin, false);
    te_target tgt = te_target_cuda(sm);
    te_lowered *f = te_lower(s, 3, (te_tensor *[]){p->A, p->B, p->C}, "mm", &tgt);
    if (!f)
        fail_msg("lowering for sm_%d: %s", sm, te_ctx_errmsg(p->ctx));
    const char *src = te_emit_cuda(p->ctx, f, &tgt);
    if (!src)
        fail_msg("emission for sm_%d: %s", sm, te_ctx_errmsg(p->ctx));
    char want[128];
    snprintf(want, sizeof want, "block (32, %d, 1)", warps);
    if (!strstr(src, want))
        fail_msg("expected '%s' in:\n%s", want, src);
    snprintf(want, sizeof want, "__launch_bounds__(%d)", 32 * warps);
    assert_non_null(strstr(src, want));
    assert_non_null(strstr(src, "#include <mma.h>"));
    assert_non_null(strstr(src, p->in == TE_I8 ? "mma.sync.aligned.m16n8k32" : "wmma::mma_sync"));
    assert_non_null(strstr(src, "__syncwarp()"));
    snprintf(want, sizeof want, "%s%s(", intrin_for(p->in), kin ? "" : "_overwrite");
    if (!strstr(src, want))
        fail_msg("expected a call '%s' in:\n%s", want, src);
    if (kin) { /* the first k block writes C (no zeroing pass), the others update it */
        snprintf(want, sizeof want, "%s_overwrite(", intrin_for(p->in));
        if (!strstr(src, want) || strstr(src, "if (threadIdx.x == 0)"))
            fail_msg("expected '%s' and no zeroing of C in:\n%s", want, src);
    }
    return src;
}

static void test_emitted_cuda_compiles_with_nvrtc_and_uses_mma(void **state)
{
    (void)state;
    static const te_dtype ins[] = {TE_F16, TE_BF16, TE_F32, TE_I8};
    static const int sms[] = {80, 90};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 2; i++)
            for (int64_t kin = 0; kin <= 32; kin += 32) {
                mmc p;
                mmc_build(&p, ins[t], 64, 128, 64);
                const char *src = emit(&p, sms[i], 4, kin);
                if (!have_nvrtc()) {
                    mmc_free(&p);
                    continue;
                }
                /* PTX: the tensor-core instructions */
                char *ptx = NULL, *log = NULL;
                if (te__nvrtc_ptx(src, "mm", sms[i], &ptx, &log) != TE_OK)
                    fail_msg("NVRTC (PTX) for sm_%d: %s\n%s", sms[i], log ? log : "", src);
                if (!strstr(ptx, "wmma.mma.sync") && !strstr(ptx, "mma.sync"))
                    fail_msg("%s sm_%d: no mma.sync in the PTX", intrin_for(ins[t]), sms[i]);
                if (ins[t] != TE_I8)
                    assert_non_null(strstr(ptx, "wmma.load"));
                free(ptx), free(log);
                /* cubin through ptxas, via te_cuda_build */
                te_schedule *s = tensorized(&p, 4, kin, false);
                te_target tgt = te_target_cuda(sms[i]);
                te_cuda_module *cm = NULL;
                if (te_cuda_build(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", &tgt, &cm) != TE_OK)
                    fail_msg("te_cuda_build sm_%d: %s", sms[i], te_ctx_errmsg(p.ctx));
                const te_cuda_kernel_info *ki =
                    te_cuda_module_kernel(cm, te_cuda_module_nkernels(cm) - 1);
                assert_non_null(ki);
                assert_int_equal(ki->block[0], 32);
                assert_int_equal(ki->block[1], 4);
                printf("  %-24s %s sm_%d: grid %d x %d, block %d x %d, %d registers\n",
                       intrin_for(ins[t]), kin ? "update   " : "overwrite", sms[i], ki->grid[0],
                       ki->grid[1], ki->block[0], ki->block[1], ki->registers);
                assert_true(ki->registers > 0);
                te_cuda_module_free(cm);
                mmc_free(&p);
            }
}

static void test_c_target_refuses_a_cuda_intrinsic(void **state)
{
    (void)state;
    mmc p;
    mmc_build(&p, TE_F16, 32, 32, 32);
    te_schedule *s = tensorized(&p, 1, 0, false);
    te_target host = te_target_host();
    te_module *m = NULL;
    assert_int_not_equal(te_build(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", &host, &m), TE_OK);
    assert_null(m);
    const char *msg = te_ctx_errmsg(p.ctx);
    if (!strstr(msg, "cuda_wmma_f16_16x16x16") || !strstr(msg, "not a C intrinsic"))
        fail_msg("unexpected message: %s", msg);
    mmc_free(&p);
}

static void test_target_below_sm80_refuses(void **state)
{
    (void)state;
    mmc p;
    mmc_build(&p, TE_BF16, 32, 32, 32);
    te_schedule *s = tensorized(&p, 1, 0, false);
    te_target t75 = te_target_cuda(75);
    te_lowered *f = te_lower(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", &t75);
    assert_non_null(f);
    assert_null(te_emit_cuda(p.ctx, f, &t75));
    const char *msg = te_ctx_errmsg(p.ctx);
    if (!strstr(msg, "needs sm_80") || !strstr(msg, "sm_75"))
        fail_msg("unexpected message: %s", msg);
    mmc_free(&p);
}

static void test_warp_intrinsic_under_threadidx_x_refuses(void **state)
{
    (void)state;
    mmc p;
    mmc_build(&p, TE_F16, 32, 64, 32);
    te_schedule *s = tensorized(&p, 2, 0, true);
    te_target t = te_target_cuda(90);
    te_lowered *f = te_lower(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", &t);
    assert_non_null(f);
    assert_null(te_emit_cuda(p.ctx, f, &t));
    const char *msg = te_ctx_errmsg(p.ctx);
    if (!strstr(msg, "warp-collective") || !strstr(msg, "threadIdx.x"))
        fail_msg("unexpected message: %s", msg);
    mmc_free(&p);
}

static void test_misaligned_row_stride_refuses(void **state)
{
    (void)state;
    /* C[i, j] = sum_k f32(A[i, k]) f32(B[k, j]) over k < 32 with A [32][pad]: rows of pad
     * halves. WMMA needs row strides of 16 bytes: pad 40 (80 bytes) is emitted, pad 36 (72
     * bytes) refused with the reason. */
    for (int pad = 40; pad >= 36; pad -= 4) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *A = te_placeholder(ctx, "A", TE_F16, 2, (int64_t[]){32, pad});
        te_tensor *B = te_placeholder(ctx, "B", TE_F16, 2, (int64_t[]){32, 32});
        te_expr *i = te_axis(ctx, "i", 32), *j = te_axis(ctx, "j", 32);
        te_expr *k = te_reduce_axis(ctx, "k", 32);
        te_expr *prod = te_mul(ctx, te_cast(ctx, TE_F32, TE_AT(ctx, A, i, k)),
                               te_cast(ctx, TE_F32, TE_AT(ctx, B, k, j)));
        te_tensor *C = te_compute(ctx, "C", 2, (te_expr *[]){i, j}, te_sum(ctx, prod, 1, &k));
        assert_non_null(C);
        te_schedule *s = te_schedule_create(ctx, 1, &C);
        te_stage *sc = te_schedule_stage(s, C);
        te_iter *io, *ii, *jo, *ji;
        assert_int_equal(te_split(sc, te_stage_axis(sc, 0), 16, &io, &ii), TE_OK);
        assert_int_equal(te_split(sc, te_stage_axis(sc, 1), 16, &jo, &ji), TE_OK);
        assert_int_equal(
            te_reorder(sc, 5, (te_iter *[]){io, jo, ii, ji, te_stage_reduce_axis(sc, 0)}), TE_OK);
        assert_int_equal(te_bind(sc, io, TE_BLOCK_Y), TE_OK);
        assert_int_equal(te_bind(sc, jo, TE_BLOCK_X), TE_OK);
        assert_int_equal(te_tensorize(sc, ii, te_tensor_intrin_find("cuda_wmma_f16_16x16x16")),
                         TE_OK);
        te_target t = te_target_cuda(80);
        te_lowered *f = te_lower(s, 3, (te_tensor *[]){A, B, C}, "mm", &t);
        assert_non_null(f);
        const char *src = te_emit_cuda(ctx, f, &t);
        if (pad == 40) {
            if (!src)
                fail_msg("pad 40: %s", te_ctx_errmsg(ctx));
        } else {
            assert_null(src);
            const char *msg = te_ctx_errmsg(ctx);
            if (!strstr(msg, "row stride of 36 elements") || !strstr(msg, "16 bytes"))
                fail_msg("unexpected message: %s", msg);
        }
        te_ctx_free(ctx);
    }
}

/* ---- The warp kernels on the CPU (tests/cuda_shim: one pthread per CUDA thread) ----------- */

/* A host reference of the fragments, written into the test's directory as mma.h (found before
 * the toolkit's): every lane holds whole matrices, so every lane computes and stores the whole
 * tile (identical values, after a __syncwarp so that no lane stores before all have loaded);
 * and the m16n8k32 s8 mma.sync, which gathers the 32 lanes' registers
 * with __shfl_sync and places each element where the PTX ISA's fragment tables say (element i
 * of a lane of group g = lane / 4, t = lane % 4). */
static const char shim_mma_h[] =
    "#pragma once\n#include <type_traits>\n"
    "static inline float tsh_f(float x) { return x; }\n"
    "static inline float tsh_f(__half x) { return __half2float(x); }\n"
    "static inline float tsh_f(__nv_bfloat16 x) { return __bfloat162float(x); }\n"
    "static inline int tsh_f(signed char x) { return x; }\n"
    "static inline int tsh_f(int x) { return x; }\n"
    "namespace nvcuda { namespace wmma {\n"
    "struct matrix_a {}; struct matrix_b {}; struct accumulator {};\n"
    "struct row_major {}; struct col_major {};\n"
    "namespace precision { struct tf32 {}; }\n"
    "enum layout_t { mem_row_major, mem_col_major };\n"
    "template <typename T> struct st { typedef T type; };\n"
    "template <> struct st<precision::tf32> { typedef float type; };\n"
    "template <typename U, int M, int N, int K, typename T, typename L = void> struct fragment {\n"
    "    enum { rows = std::is_same<U, matrix_b>::value ? K : M,\n"
    "           cols = std::is_same<U, matrix_a>::value ? K : N, num_elements = rows * cols };\n"
    "    typename st<T>::type x[num_elements];\n};\n"
    "static inline float __float_to_tf32(float f)\n"
    "{ unsigned u; memcpy(&u, &f, 4); u = (u + 0x1000u) & 0xffffe000u; memcpy(&f, &u, 4); "
    "return f; }\n"
    "template <typename F, typename V> static void fill_fragment(F &f, V v)\n"
    "{ for (int i = 0; i < F::num_elements; i++) f.x[i] = v; }\n"
    "template <typename F, typename P> static void load_matrix_sync(F &f, const P *p, unsigned "
    "ld)\n"
    "{ for (int r = 0; r < F::rows; r++) for (int c = 0; c < F::cols; c++)\n"
    "      f.x[r * F::cols + c] = p[(size_t)r * ld + c]; }\n"
    "template <typename F, typename P>\n"
    "static void load_matrix_sync(F &f, const P *p, unsigned ld, layout_t)\n"
    "{ load_matrix_sync(f, p, ld); }\n"
    "template <typename F, typename P> static void store_matrix_sync(P *p, const F &f, unsigned ld,"
    " layout_t)\n"
    "{ __syncwarp(); /* every lane has loaded C (the update form) before any stores */\n"
    "  for (int r = 0; r < F::rows; r++) for (int c = 0; c < F::cols; c++)\n"
    "      p[(size_t)r * ld + c] = f.x[r * F::cols + c]; }\n"
    "template <typename D, typename A, typename B>\n"
    "static void mma_sync(D &d, const A &a, const B &b, const D &c)\n"
    "{ D t; for (int i = 0; i < D::rows; i++) for (int j = 0; j < D::cols; j++) {\n"
    "      auto s = c.x[i * D::cols + j];\n"
    "      for (int k = 0; k < A::cols; k++) s += tsh_f(a.x[i * A::cols + k]) * "
    "tsh_f(b.x[k * B::cols + j]);\n"
    "      t.x[i * D::cols + j] = s; }\n  d = t; }\n"
    "} }\n"
    "static void tsh_mma_m16n8k32_s8(int *d, const unsigned *a, const unsigned *b)\n{\n"
    "    signed char A[16][32], B[32][8];\n"
    "    for (int l = 0; l < 32; l++) {\n"
    "        int g = l >> 2, t = l & 3;\n"
    "        for (int i = 0; i < 16; i++) {\n"
    "            unsigned r = __shfl_sync(0xffffffffu, a[i / 4], l);\n"
    "            int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;\n"
    "            int col = t * 4 + (i & 3) + (i >= 8 ? 16 : 0);\n"
    "            A[row][col] = (signed char)(r >> 8 * (i & 3));\n"
    "        }\n"
    "        for (int i = 0; i < 8; i++) {\n"
    "            unsigned r = __shfl_sync(0xffffffffu, b[i / 4], l);\n"
    "            B[t * 4 + (i & 3) + (i >= 4 ? 16 : 0)][g] = (signed char)(r >> 8 * (i & 3));\n"
    "        }\n"
    "    }\n"
    "    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
    "    for (int i = 0; i < 4; i++) {\n"
    "        int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1), s = 0;\n"
    "        for (int k = 0; k < 32; k++) s += A[row][k] * B[k][col];\n"
    "        d[i] += s;\n"
    "    }\n}\n";

/* The emitted i8 intrinsic's inline PTX (asm volatile("mma.sync ..." ...);) replaced by the
 * shim's call. Returns how many were replaced. */
static int replace_mma_asm(char *src)
{
    int n = 0;
    for (char *p = strstr(src, "asm volatile(\"mma.sync"); p; p = strstr(p, "asm volatile(\"mma")) {
        char *e = strstr(p, ");");
        assert_non_null(e);
        const char *call = "tsh_mma_m16n8k32_s8(acc[h], a, bq[h]);";
        size_t span = (size_t)(e + 2 - p), cl = strlen(call);
        assert_true(cl <= span);
        memcpy(p, call, cl);
        memset(p + cl, ' ', span - cl);
        n++;
    }
    return n;
}

/* Writes, compiles (host C++ with the shim, AddressSanitizer) and runs the program p (source
 * src) on p's data; fills p->c. Returns false (with a message) when there is no host C++
 * compiler. */
static bool run_on_shim(mmc *p, const te__cuda_program *prog, char *src)
{
    char shim_dir[600];
    snprintf(shim_dir, sizeof shim_dir, "%s", __FILE__);
    char *sl = strrchr(shim_dir, '/');
    if (!sl || system("g++ --version > /dev/null 2>&1") != 0) {
        printf("[  SKIP    ] shim runs: no g++ (or no source directory)\n");
        return false;
    }
    strcpy(sl, "/cuda_shim");
    char dir[512];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "tzcuda"), 0);
    char path[700], exe[700], in[700], out[700], log[700], cmd[4096];
    snprintf(path, sizeof path, "%s/mma.h", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(shim_mma_h, f);
    fclose(f);
    if (p->in == TE_I8)
        assert_true(replace_mma_asm(src) > 0);
    snprintf(path, sizeof path, "%s/k.cpp", dir);
    snprintf(exe, sizeof exe, "%s/k", dir);
    snprintf(in, sizeof in, "%s/k.in", dir);
    snprintf(out, sizeof out, "%s/k.out", dir);
    snprintf(log, sizeof log, "%s/k.log", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    tt_write_shim_program(f, src, prog);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "g++ -std=c++17 -O1 -g -w -pthread -fsanitize=address,undefined "
             "-fno-sanitize-recover=all -I'%s' -I'%s' '%s' -o '%s' > '%s' 2>&1",
             dir, shim_dir, path, exe, log);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s'", log);
        (void)system(cmd);
        fail_msg("the shim program does not compile:\n%s", src);
    }
    /* inputs: A, B, then C poisoned (NaN / -1) */
    assert_int_equal(prog->n_args, 3);
    assert_int_equal(prog->ntemps, 0);
    size_t es = te_dtype_size(p->in);
    size_t bytes[3] = {(size_t)(p->M * p->K) * es, (size_t)(p->K * p->N) * es,
                       (size_t)(p->M * p->N) * 4};
    void *data[3] = {p->a, p->b, p->c};
    memset(p->c, 0xff, bytes[2]);
    f = fopen(in, "wb");
    assert_non_null(f);
    int32_t nb = 3;
    fwrite(&nb, 4, 1, f);
    for (int a = 0; a < 3; a++) {
        uint64_t b = bytes[a];
        fwrite(&b, 8, 1, f);
        fwrite(data[a], 1, bytes[a], f);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 '%s' '%s' '%s' > '%s' 2>&1", exe, in,
             out, log);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s'", log);
        (void)system(cmd);
        fail_msg("the shim run failed");
    }
    f = fopen(out, "rb");
    assert_non_null(f);
    assert_int_equal(fread(&nb, 4, 1, f), 1);
    assert_int_equal(nb, 3);
    for (int a = 0; a < 3; a++) {
        uint64_t b = 0;
        assert_int_equal(fread(&b, 8, 1, f), 1);
        assert_int_equal(b, bytes[a]);
        unsigned char *buf = malloc(b);
        assert_non_null(buf);
        assert_int_equal(fread(buf, 1, b, f), b);
        if (a == 2)
            memcpy(p->c, buf, b);
        free(buf);
    }
    fclose(f);
    tt_tmpdir_remove(dir);
    return true;
}

/* Max error of p->c against p->ref: relative over 1 + |ref| for floats, exact for i32 (a
 * mismatch fails). */
static double check_c(const mmc *p, const char *what)
{
    double worst = 0;
    for (size_t q = 0; q < (size_t)(p->M * p->N); q++) {
        double got = p->in == TE_I8 ? ((int32_t *)p->c)[q] : ((float *)p->c)[q];
        if (p->in == TE_I8) {
            if (got != p->ref[q])
                fail_msg("%s: element %zu is %.0f, want %.0f", what, q, got, p->ref[q]);
            continue;
        }
        double err = fabs(got - p->ref[q]) / (1.0 + fabs(p->ref[q]));
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err;
    }
    return worst;
}

/* Tolerances: f16/bf16 products are exact in f32, only the accumulation rounds; TF32 rounds
 * the inputs to 10-bit mantissas (~2^-11 relative per product, summed over K). */
static double tol_for(te_dtype in) { return in == TE_F32 ? 3e-2 : 1e-4; }

static void test_warp_kernels_match_the_reference_on_the_cpu_shim(void **state)
{
    (void)state;
    static const te_dtype ins[] = {TE_F16, TE_BF16, TE_F32, TE_I8};
    for (int t = 0; t < 4; t++)
        for (int64_t kin = 0; kin <= 32; kin += 32) {
            mmc p;
            mmc_build(&p, ins[t], 32, 64, 64);
            mmc_data(&p, 0x5e11 + (uint64_t)t);
            te_schedule *s = tensorized(&p, 2, kin, false);
            te_target tgt = te_target_cuda(80);
            te_lowered *f = te_lower(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", &tgt);
            assert_non_null(f);
            te__cuda_program prog;
            if (te__cuda_emit_program(p.ctx, f, &tgt, &prog) != TE_OK)
                fail_msg("emission: %s", te_ctx_errmsg(p.ctx));
            char *src = strdup(prog.source);
            assert_non_null(src);
            bool ran = run_on_shim(&p, &prog, src);
            free(src);
            if (!ran) {
                mmc_free(&p);
                return;
            }
            char what[160];
            snprintf(what, sizeof what, "%s %s (shim)", intrin_for(ins[t]),
                     kin ? "update" : "overwrite");
            double err = check_c(&p, what);
            printf("  %-34s max error %.3g (tolerance %.0e)\n", what, err, tol_for(ins[t]));
            assert_true(err <= tol_for(ins[t]));
            mmc_free(&p);
        }
}

static void test_device_matches_reference(void **state)
{
    (void)state;
    if (!have_nvrtc() || !have_device())
        return;
    static const te_dtype ins[] = {TE_F16, TE_BF16, TE_F32, TE_I8};
    for (int t = 0; t < 4; t++)
        for (int64_t kin = 0; kin <= 64; kin += 64) {
            mmc p;
            mmc_build(&p, ins[t], 128, 256, 192);
            mmc_data(&p, 0x7e57c0da + (uint64_t)t);
            te_schedule *s = tensorized(&p, 4, kin, false);
            te_cuda_module *cm = NULL;
            if (te_cuda_build(s, 3, (te_tensor *[]){p.A, p.B, p.C}, "mm", NULL, &cm) != TE_OK)
                fail_msg("te_cuda_build: %s", te_ctx_errmsg(p.ctx));
            size_t nc = (size_t)(p.M * p.N);
            tt_poison_f32(p.c, nc); /* NaN bits; an i32 output gets a pattern no sum has */
            assert_int_equal(te_cuda_module_run(cm, (void *[]){p.a, p.b, p.c}), TE_OK);
            double worst = 0;
            for (size_t q = 0; q < nc; q++) {
                double got = ins[t] == TE_I8 ? ((int32_t *)p.c)[q] : ((float *)p.c)[q];
                if (ins[t] == TE_I8) {
                    if (got != p.ref[q])
                        fail_msg("s8 element %zu: %.0f, want %.0f", q, got, p.ref[q]);
                    continue;
                }
                double err = fabs(got - p.ref[q]) / (1.0 + fabs(p.ref[q]));
                if (!(err <= worst))
                    worst = isnan(err) ? INFINITY : err;
            }
            /* f16/bf16 inputs are exact in f32 products: the f32 accumulation's rounding only.
             * TF32 rounds the inputs to 10-bit mantissas: ~2^-11 relative per product, and
             * sum |a b| over K = 192 products of values in [-1, 1]. */
            double tol = ins[t] == TE_F32 ? 3e-2 : 1e-4;
            printf("  %-24s %s on the device: max error %.3g (tolerance %.0e)\n",
                   intrin_for(ins[t]), kin ? "update   " : "overwrite", worst, tol);
            assert_true(worst <= tol);
            te_cuda_module_free(cm);
            mmc_free(&p);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_cuda_intrinsics_are_registered_with_sm80),
        cmocka_unit_test(test_matcher_accepts_f16_bf16_tf32_s8_matmuls),
        cmocka_unit_test(test_matcher_refuses_wrong_stages_with_reasons),
        cmocka_unit_test(test_emitted_cuda_compiles_with_nvrtc_and_uses_mma),
        cmocka_unit_test(test_c_target_refuses_a_cuda_intrinsic),
        cmocka_unit_test(test_target_below_sm80_refuses),
        cmocka_unit_test(test_warp_intrinsic_under_threadidx_x_refuses),
        cmocka_unit_test(test_misaligned_row_stride_refuses),
        cmocka_unit_test(test_warp_kernels_match_the_reference_on_the_cpu_shim),
        cmocka_unit_test(test_device_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
