/*
 * schedule/intrin_cuda.c: the built-in tensor intrinsics of NVIDIA GPUs (backend
 * TE_BACKEND_CUDA, feature "sm_80": compute capability 8.0 or newer), registered on the
 * registry's first use (te__tz_register_builtins calls te__tz_register_cuda). Each computes one
 * 16 x 16 tile of a plain row-major matmul, the form te_op_matmul_mixed and
 * te_op_matmul_integer build:
 *     C[i, j] = sum over k of acc(A[i, k]) * acc(B[k, j])
 * with A [16][K] and B [K][16] row-major (their row strides A_s0, B_s0 passed), C [16][16]
 * (row stride C_s0), and k of variable extent n, a multiple of the fragment's k. The
 * implementation is the CUDA WMMA API (nvcuda::wmma of <mma.h>, which compiles to mma.sync /
 * HMMA), or PTX mma.sync for i8: the accumulator fragment stays in registers across the k loop
 * and is stored once.
 *   cuda_wmma_f16_16x16x16    f16 x f16 -> f32, n a multiple of 16
 *   cuda_wmma_bf16_16x16x16   bf16 x bf16 -> f32, n a multiple of 16
 *   cuda_wmma_tf32_16x16x8    f32 x f32 -> f32 with the inputs rounded to TF32 (10-bit
 *                             mantissa) before the product: the description is the f32
 *                             product, the result differs from it by TF32's rounding (a
 *                             relative error of about 2^-11 per product), n a multiple of 8
 *   cuda_mma_s8_16x16x32      i8 x i8 -> i32 (exact), n a multiple of 32: two PTX
 *                             mma.sync.m16n8k32 per k step, fragments gathered by hand
 * These are warp-collective: the CUDA backend runs a kernel that calls one with blockDim.x = 32,
 * every lane of a warp calling it with the same pointers (docs/TENSORIZE.md, "CUDA"). WMMA
 * needs the operands' addresses 32-byte aligned and their row strides a multiple of 16 bytes;
 * the CUDA emitter checks both for the WMMA intrinsics (the i8 one loads bytes and needs
 * neither).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/tensorize_impl.h"

typedef struct wmma_cfg {
    te_dtype in, acc;
    int k;              /* the fragment's k: the described extent of the reduction */
    const char *ctype;  /* the WMMA element type of the input fragments */
    const char *acc_ct; /* of the accumulator */
    bool tf32;          /* round the input fragments' elements to TF32 */
} wmma_cfg;

static int describe_wmma(te_ctx *ctx, void *user, te_tensor **ins, te_tensor **out)
{
    const wmma_cfg *c = user;
    int64_t sa[2] = {16, c->k}, sb[2] = {c->k, 16};
    te_tensor *A = te_placeholder(ctx, "A", c->in, 2, sa);
    te_tensor *B = te_placeholder(ctx, "B", c->in, 2, sb);
    te_expr *i = te_axis(ctx, "i", 16), *j = te_axis(ctx, "j", 16);
    te_expr *k = te_reduce_axis(ctx, "k", c->k);
    if (!A || !B || !i || !j || !k)
        return TE_ERR_NOMEM;
    /* The same expression te_op_matmul_mixed / te_op_matmul_integer build (a cast to the
     * accumulation type of each input). */
    te_expr *a = te_cast(ctx, c->acc, TE_AT(ctx, A, i, k));
    te_expr *b = te_cast(ctx, c->acc, TE_AT(ctx, B, k, j));
    te_expr *body = te_sum(ctx, te_mul(ctx, a, b), 1, &k);
    *out = te_compute(ctx, "C", 2, (te_expr *[]){i, j}, body);
    ins[0] = A, ins[1] = B;
    return *out ? 2 : TE_ERR_NOMEM;
}

/* The body of the function (tessera/tensorize.h's signature, CUDA types: C, C_s0, A, A_s0, B,
 * B_s0, n), in the update form (C += A B) or the overwrite form (C = A B). */
static void wmma_body(const wmma_cfg *c, bool overwrite, char *b, size_t cap)
{
    const char *et = c->tf32 ? "wmma::precision::tf32" : c->ctype;
    int l = snprintf(b, cap,
                     "    using namespace nvcuda;\n"
                     "    wmma::fragment<wmma::accumulator, 16, 16, %d, %s> acc;\n",
                     c->k, c->acc_ct);
    if (overwrite)
        l += snprintf(b + l, cap - (size_t)l, "    wmma::fill_fragment(acc, (%s)0);\n", c->acc_ct);
    else
        l += snprintf(b + l, cap - (size_t)l,
                      "    wmma::load_matrix_sync(acc, C, (unsigned)C_s0, wmma::mem_row_major);\n");
    l += snprintf(b + l, cap - (size_t)l,
                  "    for (long long k = 0; k < n; k += %d) {\n"
                  "        wmma::fragment<wmma::matrix_a, 16, 16, %d, %s, wmma::row_major> fa;\n"
                  "        wmma::fragment<wmma::matrix_b, 16, 16, %d, %s, wmma::row_major> fb;\n"
                  "        wmma::load_matrix_sync(fa, A + k, (unsigned)A_s0);\n"
                  "        wmma::load_matrix_sync(fb, B + k * B_s0, (unsigned)B_s0);\n",
                  c->k, c->k, et, c->k, et);
    if (c->tf32)
        l += snprintf(b + l, cap - (size_t)l,
                      "        for (int t = 0; t < fa.num_elements; t++)\n"
                      "            fa.x[t] = wmma::__float_to_tf32(fa.x[t]);\n"
                      "        for (int t = 0; t < fb.num_elements; t++)\n"
                      "            fb.x[t] = wmma::__float_to_tf32(fb.x[t]);\n");
    snprintf(b + l, cap - (size_t)l,
             "        wmma::mma_sync(acc, fa, fb, acc);\n"
             "    }\n"
             "    wmma::store_matrix_sync(C, acc, (unsigned)C_s0, wmma::mem_row_major);\n");
}

/* i8 x i8 -> i32 as mma.sync.m16n8k32 (two per 16 x 16 tile), from PTX: WMMA's loads need
 * 32-byte aligned tiles, which the 16-byte rows of a 16-column i8 tile at odd tile columns are
 * not. The fragments are gathered with byte loads in the layout the PTX ISA gives for
 * m16n8k32 .s8 (lane = 4 * group + t): A's registers r = 0..3 hold row group + 8 (r & 1),
 * columns 16 (r >> 1) + 4 t .. + 3; B's registers r = 0, 1 of the column group of each 8-column
 * half hold rows 16 r + 4 t .. + 3; the accumulator's c0..c3 are row group + 8 (r >> 1),
 * column 2 t + (r & 1). */
static void mma_s8_body(bool overwrite, char *b, size_t cap)
{
    snprintf(b, cap,
             "    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n"
             "    int acc[2][4];\n"
             "    for (int h = 0; h < 2; h++)\n"
             "        for (int r = 0; r < 4; r++)\n"
             "            acc[h][r] = %s;\n"
             "    for (long long k = 0; k < n; k += 32) {\n"
             "        unsigned a[4], bq[2][2];\n"
             "        for (int r = 0; r < 4; r++) {\n"
             "            const unsigned char *p =\n"
             "                (const unsigned char *)(A + (g + (r & 1) * 8) * A_s0 + k + "
             "(r >> 1) * 16 + t * 4);\n"
             "            a[r] = p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | "
             "(unsigned)p[3] << 24;\n"
             "        }\n"
             "        for (int h = 0; h < 2; h++)\n"
             "            for (int r = 0; r < 2; r++) {\n"
             "                const unsigned char *p =\n"
             "                    (const unsigned char *)(B + (k + r * 16 + t * 4) * B_s0 + "
             "h * 8 + g);\n"
             "                bq[h][r] = p[0] | (unsigned)p[B_s0] << 8 | (unsigned)p[2 * B_s0] "
             "<< 16 |\n"
             "                           (unsigned)p[3 * B_s0] << 24;\n"
             "            }\n"
             "        for (int h = 0; h < 2; h++)\n"
             "            asm volatile(\"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
             "{%%0, %%1, %%2, %%3}, \"\n"
             "                         \"{%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, "
             "%%3};\"\n"
             "                         : \"+r\"(acc[h][0]), \"+r\"(acc[h][1]), "
             "\"+r\"(acc[h][2]), \"+r\"(acc[h][3])\n"
             "                         : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), "
             "\"r\"(a[3]), \"r\"(bq[h][0]),\n"
             "                           \"r\"(bq[h][1]));\n"
             "    }\n"
             "    for (int h = 0; h < 2; h++)\n"
             "        for (int r = 0; r < 4; r++)\n"
             "            C[(g + (r >> 1) * 8) * C_s0 + h * 8 + t * 2 + (r & 1)] = acc[h][r];\n",
             overwrite ? "0" : "C[(g + (r >> 1) * 8) * C_s0 + h * 8 + t * 2 + (r & 1)]");
}

static void reg_wmma(te__tz_reg_fn reg, wmma_cfg cfg, const char *name, const char *doc)
{
    /* describe runs during registration only: the argument itself serves as its user. */
    const wmma_cfg *c = &cfg;
    char *up = malloc(4096), *ow = malloc(4096);
    if (!up || !ow) {
        free(up), free(ow);
        return;
    }
    if (c->in == TE_I8) {
        mma_s8_body(false, up, 4096);
        mma_s8_body(true, ow, 4096);
    } else {
        wmma_body(c, false, up, 4096);
        wmma_body(c, true, ow, 4096);
    }
    te_tensor_intrin_desc d = {
        .name = name,
        .describe = describe_wmma,
        .user = (void *)c,
        .nfree = {1, 1, 1},
        .var_axis = 0,
        .backend = TE_BACKEND_CUDA,
        .features = "sm_80",
        .c_update = up,
        .c_overwrite = ow,
        .c_prelude = "#include <mma.h>",
        .doc = doc,
    };
    reg(&d, NULL);
    free(up), free(ow);
}

/* Called at the end of te__tz_register_builtins (schedule/intrin_x86.c). */
void te__tz_register_cuda(te__tz_reg_fn reg);
void te__tz_register_cuda(te__tz_reg_fn reg)
{
    reg_wmma(reg, (wmma_cfg){TE_F16, TE_F32, 16, "__half", "float", false},
             "cuda_wmma_f16_16x16x16",
             "CUDA WMMA (mma.sync, sm_80): C[16 x 16] f32 = A[16 x K] f16 * B[K x 16] f16 "
             "(row-major), K a multiple of 16; warp-collective");
    reg_wmma(reg, (wmma_cfg){TE_BF16, TE_F32, 16, "__nv_bfloat16", "float", false},
             "cuda_wmma_bf16_16x16x16",
             "CUDA WMMA (mma.sync, sm_80): C[16 x 16] f32 = A[16 x K] bf16 * B[K x 16] bf16 "
             "(row-major), K a multiple of 16; warp-collective");
    reg_wmma(reg, (wmma_cfg){TE_F32, TE_F32, 8, "float", "float", true}, "cuda_wmma_tf32_16x16x8",
             "CUDA WMMA TF32 (mma.sync, sm_80): C[16 x 16] f32 = A[16 x K] * B[K x 16] f32 with "
             "A and B rounded to TF32 (10-bit mantissa; the description is the f32 product), K a "
             "multiple of 8; warp-collective");
    reg_wmma(reg, (wmma_cfg){TE_I8, TE_I32, 32, "signed char", "int", false},
             "cuda_mma_s8_16x16x32",
             "CUDA mma.sync.m16n8k32 (sm_80): C[16 x 16] i32 = A[16 x K] i8 * B[K x 16] i8 "
             "(row-major, exact), K a multiple of 32; warp-collective");
}
