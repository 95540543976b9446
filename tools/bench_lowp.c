/*
 * tools/bench_lowp.c: the low-precision rows of `tessera bench` (tools/bench_lowp.h).
 *
 * Our kernels are te_op_matmul_vnni over weights packed once in column blocks of the tile's
 * width (te_op_pack_vnni_blocked's layout, packed here by its index math, outside timing),
 * scheduled by hand as the tensorize template would (autotune/templates_tz.c): tiles of the
 * intrinsic's size, the whole reduction in one call (accumulators in AMX tiles or zmm
 * registers, written once), rows of tiles in parallel, the gate's epilogue on each tile.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tensorize.h"
#include "tools/baselines.h"
#include "tools/bench_lowp.h"
#include "tools/bench_report.h"
#include "tools/bl_vec.h"

/* Intrinsics in order of preference: AMX, then AVX-512 micro-kernels. */
static const char *const pref_bf16[] = {"amx_bf16_32x32",  "amx_bf16_16x32",  "avx512bf16_8x32",
                                        "avx512bf16_4x64", "avx512bf16_4x32", NULL};
static const char *const pref_u8s8[] = {"amx_u8s8_32x32",       "amx_u8s8_16x32",
                                        "avx512vnni_u8s8_8x32", "avx512vnni_u8s8_4x64",
                                        "avx512vnni_u8s8_4x32", NULL};

typedef struct lowp_kernel {
    te_ctx *ctx;
    te_module *m;
    te_packed_fn fn;
    void *args[4];
    const char *intrin;
    char what[160]; /* intrin's text for a kernel from the database */
} lowp_kernel;

static void run_kernel(void *p)
{
    lowp_kernel *k = p;
    k->fn(k->args);
}

/* 64-byte aligned memory (free() releases it): malloc's large blocks start 16 bytes into a
 * page, so every 64-byte vector load of a tile would straddle two cache lines. */
static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

/* Packs B [K, N] (elements of `esz` bytes) into [N / nb, K / g, nb, g]. */
static void *pack_blocked(const void *B, int K, int N, int g, int nb, size_t esz)
{
    unsigned char *p = alloc64((size_t)K * N * esz);
    const unsigned char *b = B;
    if (!p)
        return NULL;
    int ko = K / g;
    for (int jb = 0; jb < N / nb; jb++)
        for (int o = 0; o < ko; o++)
            for (int j = 0; j < nb; j++)
                for (int q = 0; q < g; q++)
                    memcpy(p + ((((size_t)jb * ko + o) * nb + j) * g + q) * esz,
                           b + ((size_t)(o * g + q) * N + jb * nb + j) * esz, esz);
    return p;
}

/* The tile of an intrinsic (its output's extents). */
static void tile_of(const te_tensor_intrin *in, int64_t *tm, int64_t *tn)
{
    const int64_t *sh = te_tensor_shape(te_tensor_intrin_output(in));
    *tm = sh[0], *tn = sh[1];
}

/* Tensorizes product stage P (loops i, j, ko, kk at its leaves) at its first loop. */
static int tensorize_product(te_stage *P, const te_tensor_intrin *in)
{
    return te_tensorize(P, te_stage_leaf(P, 0), in);
}

/* Builds our kernel for `kind` with the first intrinsic of `pref` (NULL: this kind's list)
 * the host has that fits, or returns -1 (message on stderr, unless `quiet`). Weights:
 * placeholders packed with the tile's width. */
static int build(te_bench_lowp_kind kind, int M, int N, int K, int threads, const char *const *pref,
                 bool quiet, lowp_kernel *k, int64_t *nb_out)
{
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    if (!pref)
        pref = kind == TE_BENCH_LOWP_U8S8 ? pref_u8s8 : pref_bf16;
    te_dtype ta = kind == TE_BENCH_LOWP_U8S8 ? TE_U8 : TE_BF16;
    te_dtype tb = kind == TE_BENCH_LOWP_U8S8 ? TE_I8 : TE_BF16;
    te_dtype acc = kind == TE_BENCH_LOWP_U8S8 ? TE_I32 : TE_F32;
    int g = kind == TE_BENCH_LOWP_U8S8 ? 4 : 2;
    for (int p = 0; pref[p]; p++) {
        const te_tensor_intrin *in = te_tensor_intrin_find(pref[p]);
        int64_t tm, tn;
        if (!in || !te_tensor_intrin_supported(in, &tgt))
            continue;
        tile_of(in, &tm, &tn);
        if (M % tm || N % tn || K % g)
            continue;
        te_ctx *ctx = te_ctx_create();
        TE_BENCH_CHECK(ctx);
        te_tensor *X = te_placeholder(ctx, "X", ta, 2, (int64_t[]){M, K});
        int64_t ws[4] = {N / tn, K / g, tn, g};
        te_tensor *W1 = te_placeholder(ctx, "W1", tb, 4, ws);
        te_tensor *W3 = te_placeholder(ctx, "W3", tb, 4, ws);
        te_tensor *P1 = te_op_matmul_vnni(ctx, X, W1, acc, "P1");
        TE_BENCH_CHECK(P1);
        te_tensor *out = P1, *P3 = NULL;
        if (kind == TE_BENCH_LOWP_GATE_BF16) {
            P3 = te_op_matmul_vnni(ctx, X, W3, acc, "P3");
            te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
            te_expr *a = TE_AT(ctx, P1, i, j);
            out = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                             te_mul(ctx, te_mul(ctx, a, te_sigmoid(ctx, a)), TE_AT(ctx, P3, i, j)));
            TE_BENCH_CHECK(P3 && out);
        }
        te_schedule *s = te_schedule_create(ctx, 1, &out);
        te_stage *so = te_schedule_stage(s, out);
        te_iter *io, *jo, *ii, *ji, *jb = NULL, *jm = NULL;
        TE_BENCH_CHECK(te_tile(so, te_stage_axis(so, 0), te_stage_axis(so, 1), tm, tn, &io, &jo,
                               &ii, &ji) == TE_OK);
        /* Column blocks of 256: a block of the weights stays in L2 while the row tiles go
         * by (loops block, rows, columns); the blocks in parallel, each thread its own. */
        int64_t nc = N % 256 == 0 && N > 256 ? 256 : 0;
        if (nc) {
            TE_BENCH_CHECK(te_split(so, jo, nc / tn, &jb, &jm) == TE_OK);
            TE_BENCH_CHECK(te_reorder(so, 3, (te_iter *[]){jb, io, jm}) == TE_OK);
        }
        if (threads > 1)
            TE_BENCH_CHECK(te_parallel(so, nc && N / nc >= threads ? jb : io) == TE_OK);
        te_iter *at = nc ? jm : jo;
        int rc;
        if (kind == TE_BENCH_LOWP_GATE_BF16) {
            te_iter *jv, *jl;
            TE_BENCH_CHECK(te_split(so, ji, 16, &jv, &jl) == TE_OK &&
                           te_vectorize(so, jl) == TE_OK);
            te_stage *s1 = te_schedule_stage(s, P1), *s3 = te_schedule_stage(s, P3);
            TE_BENCH_CHECK(te_compute_at(s1, so, at) == TE_OK &&
                           te_compute_at(s3, so, at) == TE_OK);
            rc = tensorize_product(s1, in);
            if (!rc)
                rc = tensorize_product(s3, in);
        } else {
            TE_BENCH_CHECK(te_reorder(so, 4,
                                      (te_iter *[]){ii, ji, te_stage_reduce_axis(so, 0),
                                                    te_stage_reduce_axis(so, 1)}) == TE_OK);
            rc = te_tensorize(so, ii, in);
        }
        te_tensor *args[4] = {X, W1, kind == TE_BENCH_LOWP_GATE_BF16 ? W3 : out, out};
        int nargs = kind == TE_BENCH_LOWP_GATE_BF16 ? 4 : 3;
        if (rc || te_build(s, nargs, args, "lowp", &tgt, &k->m)) {
            te_ctx_free(ctx); /* this intrinsic does not fit (k's extent): the next one */
            continue;
        }
        k->ctx = ctx;
        k->fn = te_module_entry(k->m);
        k->intrin = pref[p];
        *nb_out = tn;
        return 0;
    }
    if (quiet)
        return -1;
    fprintf(stderr,
            "tessera bench: no %s matrix instruction of this CPU fits %dx%dx%d (%s); row left "
            "out\n",
            kind == TE_BENCH_LOWP_U8S8 ? "int8" : "bf16", M, N, K, tgt.isa);
    return -1;
}

/* An AMX tile's two variants, with and without software prefetches of the next k step
 * (schedule/intrin_x86.c): which one is faster depends on the CPU (1.25x either way on two
 * AMX Xeons), so both are built and a short alternating measurement before the timed runs
 * keeps the faster. The timed runs then measure only the kept one, so the choice does not
 * select a lucky sample. Describes the choice in `chose` (empty when there is none). */
static void choose_prefetch(te_bench_lowp_kind kind, int M, int N, int K, int threads, int64_t nb,
                            lowp_kernel *k, double flop, char *chose, size_t cap)
{
    char twin[64];
    snprintf(twin, sizeof twin, "%s_nopf", k->intrin);
    const char *const one[2] = {twin, NULL};
    lowp_kernel alt = {0};
    int64_t nb2 = 0;
    if (!te_tensor_intrin_find(twin) || build(kind, M, N, K, threads, one, true, &alt, &nb2) ||
        nb2 != nb) {
        if (alt.m)
            te_module_free(alt.m), te_ctx_free(alt.ctx);
        return;
    }
    memcpy(alt.args, k->args, sizeof alt.args);
    alt.intrin = te_tensor_intrin_name(te_tensor_intrin_find(twin)); /* not the local name */
    te_bl_run_fn fn[2] = {run_kernel, run_kernel};
    void *arg[2] = {k, &alt};
    double t[2];
    if (te_bl_time_alternating(2, fn, arg, 3, t) != 0) {
        te_module_free(alt.m), te_ctx_free(alt.ctx);
        return;
    }
    int win = t[1] < t[0];
    snprintf(chose, cap, " (over %s: %.0f vs %.0f GFLOP/s in a 3-run selection before timing)",
             win ? k->intrin : alt.intrin, flop / t[win] * 1e-9, flop / t[!win] * 1e-9);
    if (win) {
        lowp_kernel tmp = *k;
        *k = alt, alt = tmp;
    }
    te_module_free(alt.m);
    te_ctx_free(alt.ctx);
}

/* The unfused oneDNN gate: two bf16 matmuls and an f32 pass y = silu(g) * u. */
typedef struct dn_gate {
    te_bl_lowp *g, *u;
    float *y;
    size_t n;
} dn_gate;

static void run_dn_gate(void *p)
{
    dn_gate *d = p;
    te_bl_lowp_run(d->g);
    te_bl_lowp_run(d->u);
    const float *g = te_bl_lowp_out(d->g), *u = te_bl_lowp_out(d->u);
    te_bl_silu_mul(d->y, g, u, d->n);
}

static uint16_t bf16_of(double x)
{
    float f = (float)x;
    return te_f32_to_bf16(f);
}

/* Our kernel from the database's best record of matmul_vnni (nb = 32), or -1. */
static int build_db(te_db *db, te_bench_lowp_kind kind, int M, int N, int K, int threads,
                    lowp_kernel *k, int64_t *nb_out)
{
    bool i8 = kind == TE_BENCH_LOWP_U8S8;
    char params[160];
    snprintf(params, sizeof params, "m=%d,n=%d,k=%d,a_dtype=%s,group=%d,nb=32", M, N, K,
             i8 ? "u8" : "bf16", i8 ? 4 : 2);
    te_ctx *ctx = te_ctx_create();
    te_bench_db_kernel dk;
    if (!ctx || te_bench_db_module(db, ctx, "matmul_vnni", params, threads, &dk)) {
        te_ctx_free(ctx);
        return -1;
    }
    k->ctx = ctx, k->m = dk.m;
    k->fn = te_module_entry(k->m);
    snprintf(k->what, sizeof k->what, "%s (tuned: the database's best record)",
             *dk.intrin ? dk.intrin : "no intrinsic");
    k->intrin = k->what;
    *nb_out = 32;
    return 0;
}

int te_bench_lowp(te_bench_lowp_kind kind, int M, int N, int K, int threads, int reps, te_db *db,
                  te_bench_row *out)
{
    memset(out, 0, sizeof *out);
    te_bl_set_threads(threads);
    lowp_kernel k = {0};
    int64_t nb;
    if (db && kind != TE_BENCH_LOWP_GATE_BF16 ? build_db(db, kind, M, N, K, threads, &k, &nb)
                                              : build(kind, M, N, K, threads, NULL, false, &k, &nb))
        return -1;
    bool i8 = kind == TE_BENCH_LOWP_U8S8, gate = kind == TE_BENCH_LOWP_GATE_BF16;
    size_t esz = i8 ? 1 : 2, mk = (size_t)M * K, kn = (size_t)K * N, mn = (size_t)M * N;
    void *x = alloc64(mk * esz), *w1 = alloc64(kn * esz), *w3 = alloc64(kn * esz);
    float *xf = alloc64(mk * sizeof(float)), *w1f = alloc64(kn * sizeof(float)),
          *w3f = alloc64(kn * sizeof(float));
    void *y = alloc64(mn * 4);
    if (!x || !w1 || !w3 || !xf || !w1f || !w3f || !y) {
        fprintf(stderr, "tessera bench: out of memory\n");
        exit(1);
    }
    unsigned seed = 12345;
    for (size_t q = 0; q < mk; q++) {
        seed = seed * 1664525u + 1013904223u;
        if (i8)
            ((uint8_t *)x)[q] = (uint8_t)(seed >> 24);
        else
            xf[q] = te_bf16_to_f32(((uint16_t *)x)[q] = bf16_of(((seed >> 8) / 16777216.0 - 0.5)));
    }
    for (size_t q = 0; q < kn; q++) {
        seed = seed * 1664525u + 1013904223u;
        unsigned s2 = seed * 1664525u + 1013904223u;
        if (i8) {
            ((int8_t *)w1)[q] = (int8_t)(seed >> 24);
        } else {
            w1f[q] = te_bf16_to_f32(((uint16_t *)w1)[q] =
                                        bf16_of(((seed >> 8) / 16777216.0 - 0.5) * 0.1));
            w3f[q] =
                te_bf16_to_f32(((uint16_t *)w3)[q] = bf16_of(((s2 >> 8) / 16777216.0 - 0.5) * 0.1));
        }
    }
    int g = i8 ? 4 : 2;
    void *p1 = pack_blocked(w1, K, N, g, (int)nb, esz),
         *p3 = gate ? pack_blocked(w3, K, N, g, (int)nb, esz) : NULL;
    k.args[0] = x, k.args[1] = p1;
    k.args[2] = gate ? p3 : y;
    k.args[3] = y;
    char chose[200] = "";
    if (!db)
        choose_prefetch(kind, M, N, K, threads, nb, &k, gate ? 4.0 * M * N * K : 2.0 * M * N * K,
                        chose, sizeof chose);
    te_bl_lowp_kind lk = i8 ? TE_BL_LOWP_U8S8 : TE_BL_LOWP_BF16;
    te_bl_run_fn fn[4] = {run_kernel};
    void *arg[4] = {&k};
    int n = 1;
    te_bl_lowp *dn[2] = {NULL, NULL};
    dn_gate dg = {0};
    te_bench_gate32 *g32 = NULL;
    const char *why = NULL;
    if (gate) {
        dg.g = te_bl_lowp_create(lk, M, N, K, x, w1, 1, &why);
        dg.u = dg.g ? te_bl_lowp_create(lk, M, N, K, x, w3, 1, &why) : NULL;
        dg.y = malloc(mn * sizeof(float));
        dg.n = mn;
        if (dg.u && dg.y)
            fn[n] = run_dn_gate, arg[n++] = &dg;
        g32 = te_bench_gate32_create(M, N, K, xf, w1f, w3f);
        fn[n] = te_bench_gate32_run, arg[n++] = g32;
    } else {
        for (int packed = 0; packed < 2; packed++)
            if ((dn[packed] = te_bl_lowp_create(lk, M, N, K, x, w1, packed, &why)))
                fn[n] = te_bl_lowp_run, arg[n++] = dn[packed];
    }
    if (n == 1 || (gate && !dg.u))
        fprintf(stderr, "tessera bench: oneDNN %s left out: %s\n", te_bl_lowp_kind_name(lk),
                why ? why : "not available");
    double med[4] = {NAN, NAN, NAN, NAN};
    if (te_bl_time_alternating(n, fn, arg, reps, med) != 0) {
        fprintf(stderr, "tessera bench: out of memory\n");
        exit(1);
    }
    double flop = (gate ? 4.0 : 2.0) * M * N * K;
    out->threads = threads;
    out->unit = "gflops";
    out->lowp = true;
    out->ours = flop / med[0] * 1e-9;
    out->seconds = med[0];
    out->base = out->onednn = out->openblas = NAN;
    const char *bname = gate ? "2x onednn bf16 matmul + silu pass"
                        : i8 ? "onednn u8s8 matmul"
                             : "onednn bf16 matmul";
    snprintf(out->base_name, sizeof out->base_name, "%s", bname);
    snprintf(out->base_impl, sizeof out->base_impl, "none");
    out->other_impl = "";
    out->err = NAN;
    if (gate) {
        if (dg.u) {
            out->base = out->onednn = flop / med[1] * 1e-9;
            snprintf(out->base_impl, sizeof out->base_impl, "%s", te_bl_lowp_impl(dg.g));
            snprintf(out->dn_impl, sizeof out->dn_impl, "%s", out->base_impl);
            out->err = te_bl_rel_err(y, dg.y, mn);
        }
        double f32 = flop / med[n - 1] * 1e-9;
        snprintf(out->note, sizeof out->note,
                 "tessera f32 gate (hand-fused, packed) %.1f GFLOP/s: bf16 is %.2fx it", f32,
                 out->ours / f32);
    } else {
        int best = -1;
        for (int q = 1, d = 0; q < n; q++, d++) {
            while (!dn[d])
                d++;
            double gf = flop / med[q] * 1e-9;
            if (best < 0 || gf > out->base) {
                out->base = out->onednn = gf;
                best = d;
            }
        }
        if (best >= 0) {
            snprintf(out->base_impl, sizeof out->base_impl, "%s", te_bl_lowp_impl(dn[best]));
            snprintf(out->dn_impl, sizeof out->dn_impl, "%s", out->base_impl);
            const void *ref = te_bl_lowp_out(dn[best]);
            if (i8) {
                size_t bad = 0;
                for (size_t q = 0; q < mn; q++)
                    bad += ((const int32_t *)y)[q] != ((const int32_t *)ref)[q];
                out->err = (double)bad / (double)mn; /* exact: the fraction that differs */
            } else {
                out->err = te_bl_rel_err(y, ref, mn);
            }
        }
    }
    snprintf(out->workload, sizeof out->workload, "%s %dx%dx%d",
             gate ? "mlp_gate bf16"
             : i8 ? "matmul u8s8"
                  : "matmul bf16",
             M, gate ? K : N, gate ? N : K);
    if (!*out->note)
        snprintf(out->note, sizeof out->note, "tessera: %s%s", k.intrin, chose);
    else {
        size_t l = strlen(out->note);
        snprintf(out->note + l, sizeof out->note - l, "; tessera: %s%s", k.intrin, chose);
    }
    te_bl_lowp_free(dn[0]);
    te_bl_lowp_free(dn[1]);
    te_bl_lowp_free(dg.g);
    te_bl_lowp_free(dg.u);
    free(dg.y);
    te_bench_gate32_free(g32);
    te_module_free(k.m);
    te_ctx_free(k.ctx);
    free(x), free(w1), free(w3), free(xf), free(w1f), free(w3f), free(y), free(p1), free(p3);
    return 0;
}
