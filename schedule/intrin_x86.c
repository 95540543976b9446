/*
 * schedule/intrin_x86.c: the built-in tensor intrinsics of x86 CPUs, registered on the
 * registry's first use (schedule/tensorize.c). All of them compute a VNNI-packed matmul tile,
 * the form te_op_matmul_vnni builds:
 *     C[i, j] += sum over (ko, kk) of acc(A[i, ko*g + kk]) * acc(B[ko, j, kk])
 * with B in VNNI layout [K/g, N, g] (g = 2 for bf16, 4 for int8) and the reduction over ko of
 * variable extent n (the implementations loop over it with the accumulators in registers):
 *   amx_bf16_MxN      AMX tdpbf16ps, M, N in {16, 32}: bf16 x bf16 -> f32, n a multiple of 16
 *   amx_u8s8_MxN      AMX tdpbusd: u8 x i8 -> i32, n a multiple of 16
 *   amx_s8s8_MxN      AMX tdpbssd: i8 x i8 -> i32
 *   amx_*_32x32_nopf  the 32 x 32 tiles without the next k step's software prefetches
 *   avx512bf16_MxN    AVX-512 BF16 vdpbf16ps micro-kernel, M rows x N (16, 32, 48, 64) columns
 *   avx512vnni_u8s8_MxN AVX-512 VNNI vpdpbusd micro-kernel
 * AMX code calls te_amx_ready() (the C backend's AMX prelude: tile configuration, once per
 * thread) before its first tile instruction.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/tensorize_impl.h"
#include "te/internal.h"

typedef enum { K_AMX, K_AVX512 } impl_kind;

typedef struct mm_cfg {
    impl_kind impl;
    int m, n, g, ko; /* tile rows, columns, VNNI group, described ko extent */
    te_dtype ta, tb, acc;
    const char *insn; /* _tile_dpbf16ps, _mm512_dpbf16_ps, ... */
    int no_prefetch;  /* AMX: no software prefetch of the next k step (the _nopf variants) */
} mm_cfg;

static int describe_mm(te_ctx *ctx, void *user, te_tensor **ins, te_tensor **out)
{
    const mm_cfg *c = user;
    int64_t sa[2] = {c->m, (int64_t)c->ko * c->g}, sb[3] = {c->ko, c->n, c->g};
    te_tensor *A = te_placeholder(ctx, "A", c->ta, 2, sa);
    te_tensor *B = te_placeholder(ctx, "B", c->tb, 3, sb);
    te_expr *ko = te_reduce_axis(ctx, "ko", c->ko), *kk = te_reduce_axis(ctx, "kk", c->g);
    te_expr *i = te_axis(ctx, "i", c->m), *j = te_axis(ctx, "j", c->n);
    if (!A || !B || !ko || !kk || !i || !j)
        return TE_ERR_NOMEM;
    te_expr *ia[2] = {i, te_add(ctx, te_mul(ctx, ko, te_int(ctx, c->g)), kk)};
    te_expr *ib[3] = {ko, j, kk};
    te_expr *a = te_read(ctx, A, 2, ia), *b = te_read(ctx, B, 3, ib);
    if (c->ta != c->acc)
        a = te_cast(ctx, c->acc, a);
    if (c->tb != c->acc)
        b = te_cast(ctx, c->acc, b);
    te_expr *axes[2] = {ko, kk};
    te_expr *body = te_reduce(ctx, TE_RSUM, NULL, te_mul(ctx, a, b), 2, axes);
    te_expr *vars[2] = {i, j};
    *out = te_compute(ctx, "C", 2, vars, body);
    ins[0] = A, ins[1] = B;
    return *out ? 2 : TE_ERR_NOMEM;
}

/* Appends printf-formatted text to a growing buffer (aborting the registration on failure is
 * not needed: the buffer is large enough for every built-in). */
static void put(char *b, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *b, size_t cap, const char *fmt, ...)
{
    size_t l = strlen(b);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + l, cap - l, fmt, ap);
    va_end(ap);
}

/* AMX: C tiles 0..3 (row block r, column block q: tile 2r + q), A tiles 4, 5, B tiles 6, 7. */
static void amx_body(const mm_cfg *c, bool overwrite, char *b, size_t cap)
{
    int mr = c->m / 16, nq = c->n / 16;
    int esz = (int)te_dtype_size(c->acc), ea = (int)te_dtype_size(c->ta),
        eb = (int)te_dtype_size(c->tb);
    b[0] = 0;
    put(b, cap, "    te_amx_ready();\n");
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < nq; q++) {
            if (overwrite)
                put(b, cap, "    _tile_zero(%d);\n", 2 * r + q);
            else
                put(b, cap, "    _tile_loadd(%d, C + %d * C_s0 + %d, C_s0 * %d);\n", 2 * r + q,
                    16 * r, 16 * q, esz);
        }
    /* Each k step: the next step's rows of A and B prefetched into L1 (the tile loads miss
     * L1 otherwise: 1.25x on 512x3072x768 on one AMX Xeon; on another the prefetches cost
     * 1.16-1.36x instead, so the _nopf variants leave them out and the tuner's intrin knob
     * chooses), then loads and products interleaved so that a product starts as soon as its
     * tiles are in (1.1x). */
    put(b, cap, "    for (int64_t k = 0; k < n; k += 16) {\n");
    for (int r = 0; r < mr && !c->no_prefetch; r++)
        put(b, cap,
            "        for (int p = 0; p < 16; p++)\n"
            "            _mm_prefetch((const char *)(A + (%d + p) * A_s0 + (k + 16) * %d), "
            "_MM_HINT_T0);\n",
            16 * r, c->g);
    for (int q = 0; q < nq && !c->no_prefetch; q++)
        put(b, cap,
            "        for (int p = 0; p < 16; p++)\n"
            "            _mm_prefetch((const char *)(B + (k + 16 + p) * B_s0 + %d), "
            "_MM_HINT_T0);\n",
            16 * q * c->g);
    for (int r = 0; r < mr; r++) {
        put(b, cap, "        _tile_loadd(%d, A + %d * A_s0 + k * %d, A_s0 * %d);\n", 4 + r, 16 * r,
            c->g, ea);
        for (int q = 0; q < nq; q++) {
            if (r == 0)
                put(b, cap, "        _tile_loadd(%d, B + k * B_s0 + %d, B_s0 * %d);\n", 6 + q,
                    16 * q * c->g, eb);
            put(b, cap, "        %s(%d, %d, %d);\n", c->insn, 2 * r + q, 4 + r, 6 + q);
        }
    }
    put(b, cap, "    }\n");
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < nq; q++)
            put(b, cap, "    _tile_stored(%d, C + %d * C_s0 + %d, C_s0 * %d);\n", 2 * r + q, 16 * r,
                16 * q, esz);
}

/* AVX-512: M x N/16 accumulators; per ko step one B row of N x g values and a broadcast of
 * A's g values per row. */
static void avx512_body(const mm_cfg *c, bool overwrite, char *b, size_t cap)
{
    int nq = c->n / 16;
    bool f = c->acc == TE_F32;
    const char *vt = f ? "__m512" : "__m512i";
    b[0] = 0;
    /* GCC before 13 does not tie vpdpbusd's accumulator to its result: it copies every
     * accumulator around each product and keeps two on the stack, a store and a load in their
     * dependence chains (half the instruction's throughput on Zen 5). The instruction through
     * inline asm keeps each accumulator in its register. */
    if (!f)
        put(b, cap,
            "#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13\n"
            "#define TE_DPBUSD(c, a, b) __asm__(\"vpdpbusd %%2, %%1, %%0\" : \"+v\"(c) : "
            "\"v\"(a), \"v\"(b))\n"
            "#else\n"
            "#define TE_DPBUSD(c, a, b) ((c) = %s((c), (a), (b)))\n"
            "#endif\n",
            c->insn);
    for (int r = 0; r < c->m; r++)
        for (int q = 0; q < nq; q++) {
            if (overwrite)
                put(b, cap, "    %s c%d_%d = %s;\n", vt, r, q,
                    f ? "_mm512_setzero_ps()" : "_mm512_setzero_si512()");
            else
                put(b, cap, "    %s c%d_%d = %s(C + %d * C_s0 + %d);\n", vt, r, q,
                    f ? "_mm512_loadu_ps" : "_mm512_loadu_si512", r, 16 * q);
        }
    put(b, cap, "    for (int64_t k = 0; k < n; k++) {\n");
    for (int q = 0; q < nq; q++)
        put(b, cap, "        const __m512i b%d = _mm512_loadu_si512(B + k * B_s0 + %d);\n", q,
            16 * q * c->g);
    for (int r = 0; r < c->m; r++) {
        put(b, cap,
            "        int32_t a%d_bits;\n        memcpy(&a%d_bits, A + %d * A_s0 + k * %d, 4);\n"
            "        const __m512i a%d = _mm512_set1_epi32(a%d_bits);\n",
            r, r, r, c->g, r, r);
        for (int q = 0; q < nq; q++) {
            if (f)
                put(b, cap, "        c%d_%d = %s(c%d_%d, (__m512bh)a%d, (__m512bh)b%d);\n", r, q,
                    c->insn, r, q, r, q);
            else
                put(b, cap, "        TE_DPBUSD(c%d_%d, a%d, b%d);\n", r, q, r, q);
        }
    }
    put(b, cap, "    }\n");
    for (int r = 0; r < c->m; r++)
        for (int q = 0; q < nq; q++)
            put(b, cap, "    %s(C + %d * C_s0 + %d, c%d_%d);\n",
                f ? "_mm512_storeu_ps" : "_mm512_storeu_si512", r, 16 * q, r, q);
    if (!f)
        put(b, cap, "#undef TE_DPBUSD\n");
}

/* Room for an implementation's body: the largest (AVX-512 12x32, 24 accumulators) is about
 * 6 KiB. */
#define BODY_CAP 16384

static void reg_mm(te__tz_reg_fn reg, mm_cfg cfg, const char *name, const char *features,
                   const char *doc)
{
    /* describe runs during registration only: the argument itself serves as its user. */
    const mm_cfg *c = &cfg;
    char *up = malloc(BODY_CAP), *ow = malloc(BODY_CAP);
    if (!up || !ow) {
        free(up), free(ow);
        return;
    }
    if (c->impl == K_AMX) {
        amx_body(c, false, up, BODY_CAP);
        amx_body(c, true, ow, BODY_CAP);
    } else {
        avx512_body(c, false, up, BODY_CAP);
        avx512_body(c, true, ow, BODY_CAP);
    }
    te_tensor_intrin_desc d = {
        .name = name,
        .describe = describe_mm,
        .user = (void *)c,
        .nfree = {1, 1, 1},
        .var_axis = 0,
        .backend = TE_BACKEND_C,
        .features = features,
        .c_update = up,
        .c_overwrite = ow,
        .doc = doc,
    };
    reg(&d, NULL);
    free(up), free(ow);
}

void te__tz_register_builtins(te__tz_reg_fn reg)
{
    char name[64], doc[160];
    static const struct {
        const char *tag, *insn, *mnem, *feat;
        te_dtype ta, tb, acc;
        int g;
    } amx[] = {
        {"bf16", "_tile_dpbf16ps", "tdpbf16ps", "amx_tile,amx_bf16", TE_BF16, TE_BF16, TE_F32, 2},
        {"u8s8", "_tile_dpbusd", "tdpbusd", "amx_tile,amx_int8", TE_U8, TE_I8, TE_I32, 4},
        {"s8s8", "_tile_dpbssd", "tdpbssd", "amx_tile,amx_int8", TE_I8, TE_I8, TE_I32, 4},
    };
    for (size_t t = 0; t < sizeof amx / sizeof amx[0]; t++)
        for (int m = 16; m <= 32; m += 16)
            for (int n = 16; n <= 32; n += 16) {
                snprintf(name, sizeof name, "amx_%s_%dx%d", amx[t].tag, m, n);
                snprintf(doc, sizeof doc,
                         "AMX %s: C[%d x %d] %s += A[%d x K] %s * B[K/%d x %d x %d] %s, K/%d a "
                         "multiple of 16",
                         amx[t].mnem, m, n, te_dtype_str(amx[t].acc), m, te_dtype_str(amx[t].ta),
                         amx[t].g, n, amx[t].g, te_dtype_str(amx[t].tb), amx[t].g);
                mm_cfg c = {K_AMX,     m,         n,          amx[t].g,    16,
                            amx[t].ta, amx[t].tb, amx[t].acc, amx[t].insn, 0};
                reg_mm(reg, c, name, amx[t].feat, doc);
                if (m == 32 && n == 32) {
                    /* the largest tile again without the next-step prefetches */
                    snprintf(name, sizeof name, "amx_%s_%dx%d_nopf", amx[t].tag, m, n);
                    size_t dl = strlen(doc);
                    snprintf(doc + dl, sizeof doc - dl, "; no software prefetch");
                    c.no_prefetch = 1;
                    reg_mm(reg, c, name, amx[t].feat, doc);
                }
            }
    static const struct {
        int m, n;
    } tiles[] = {{4, 32}, {4, 64}, {6, 32}, {6, 64}, {8, 32}, {8, 48}, {12, 32}, {2, 64}, {1, 64}};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        int m = tiles[i].m, n = tiles[i].n;
        snprintf(name, sizeof name, "avx512bf16_%dx%d", m, n);
        snprintf(doc, sizeof doc,
                 "AVX-512 BF16 vdpbf16ps: C[%d x %d] f32 += A[%d x K] bf16 * B[K/2 x %d x 2] bf16",
                 m, n, m, n);
        mm_cfg c = {K_AVX512, m, n, 2, 1, TE_BF16, TE_BF16, TE_F32, "_mm512_dpbf16_ps", 0};
        reg_mm(reg, c, name, "avx512f,avx512_bf16", doc);
        snprintf(name, sizeof name, "avx512vnni_u8s8_%dx%d", m, n);
        snprintf(doc, sizeof doc,
                 "AVX-512 VNNI vpdpbusd: C[%d x %d] i32 += A[%d x K] u8 * B[K/4 x %d x 4] i8", m, n,
                 m, n);
        mm_cfg v = {K_AVX512, m, n, 4, 1, TE_U8, TE_I8, TE_I32, "_mm512_dpbusd_epi32", 0};
        reg_mm(reg, v, name, "avx512f,avx512_vnni", doc);
    }
    extern void te__tz_register_cuda(te__tz_reg_fn); /* schedule/intrin_cuda.c */
    te__tz_register_cuda(reg);
}
