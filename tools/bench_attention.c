/*
 * The attention benchmark of `tessera bench`: the fused kernel (te_op_attention, scheduled by
 * the tuning database's best record or the attention template's default configuration)
 * against the unfused path in the same process, alternating, medians.
 *
 * The unfused path is what a framework without a fused kernel runs, on each library: per head,
 * OpenBLAS cblas_sgemm for S = scale Q K^T into a materialized [heads, L, L] score buffer (or
 * one oneDNN batched matmul over the heads for Q K^T, the scale folded into the softmax), a
 * vectorized softmax over every row of S (te_bl_softmax_rows, tools/bl_vec.c: row maximum, exp
 * by a Cody-Waite polynomial, sum, scale, on the CPU's widest vectors), then the same
 * library for O = P V. The row's baseline is the faster library (OpenBLAS only when its kernels
 * fit the CPU). Its extra memory is the score buffer; the fused kernel's is K transposed, and
 * V padded to whole key blocks where lk is not a multiple of them (its score blocks live on
 * the stack, qblk x block floats per thread).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/tuner.h"
#include "tools/baselines.h"
#include "tools/bench_attention.h"
#include "tools/bench_report.h"
#include "tools/bl_vec.h"

typedef struct unfused_run {
    int heads, L, dh;
    const float *Q, *K, *V;
    float *S, *O;
    te_bl_bmm *qk, *pv; /* oneDNN's batched products (NULL: OpenBLAS per head) */
} unfused_run;

static void run_unfused(void *p)
{
    unfused_run *u = p;
    int L = u->L, dh = u->dh;
    float scale = 1.0f / sqrtf((float)dh);
    size_t hs = (size_t)L * dh, ss = (size_t)L * L;
    if (u->qk)
        te_bl_bmm_run(u->qk); /* S = Q K^T; the scale is applied by the softmax */
    else
        for (int h = 0; h < u->heads; h++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dh, scale, u->Q + h * hs, dh,
                        u->K + h * hs, dh, 0.0f, u->S + h * ss, L);
    te_bl_softmax_rows(u->S, u->S, (int64_t)u->heads * L, L, u->qk ? scale : 1.0f);
    if (u->pv)
        te_bl_bmm_run(u->pv);
    else
        for (int h = 0; h < u->heads; h++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, dh, L, 1.0f, u->S + h * ss, L,
                        u->V + h * hs, dh, 0.0f, u->O + h * hs, dh);
}

typedef struct fused_run {
    te_packed_fn fn;
    void **args;
} fused_run;

static void run_fused(void *p)
{
    fused_run *r = p;
    r->fn(r->args);
}

static float *rand_buf(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f;
    }
    return p;
}

int te_bench_attention(te_db *db, int seq, int heads, int dh, int threads, int reps,
                       te_bench_row *out)
{
    te_ctx *ctx = te_ctx_create();
    char params[128];
    snprintf(params, sizeof params, "batch=1,heads=%d,lq=%d,lk=%d,dh=%d", heads, seq, seq, dh);
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    TE_BENCH_CHECK(te_op_build(ctx, "attention", params, in, &n_in, outs, &n_out) == TE_OK);
    te_target tgt = te_target_host();
    tgt.num_cores = threads;
    /* The tuned record when the database has one, else the template's default. */
    te_schedule *s = NULL;
    const char *how = "template default";
    if (db) {
        te_op_params kv;
        char key[256];
        TE_BENCH_CHECK(te_op_params_parse(ctx, params, &kv) == TE_OK);
        TE_BENCH_CHECK(te_op_workload_key(ctx, te_op_lookup("attention"), &kv, key, sizeof key) >
                       0);
        int from_db = 0;
        char why[256];
        te_schedule *d = NULL;
        if (te_tuner_best_schedule(ctx, db, key, n_out, outs, &tgt, &d, &from_db, why,
                                   sizeof why) == TE_OK &&
            from_db) {
            s = d;
            how = "tuned";
        } else {
            fprintf(stderr, "  %s: %s; using the template's default\n", key, why);
        }
    }
    if (!s) {
        te_space *sp =
            te_space_create(ctx, "attention", n_in, in, n_out, outs, TE_SPACE_TEMPLATE, &tgt);
        TE_BENCH_CHECK(sp);
        const char *tr = te_space_get(sp, 0);
        TE_BENCH_CHECK(tr);
        s = te_space_instantiate(sp, tr);
        TE_BENCH_CHECK(s);
    }
    te_tensor *args[2 * TE_OP_MAX_IO];
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    args[n_in] = outs[0];
    te_module *m = NULL;
    TE_BENCH_CHECK(te_build(s, n_in + 1, args, "attention", &tgt, &m) == TE_OK);
    size_t hs = (size_t)heads * seq * dh, ss = (size_t)heads * seq * seq;
    float *Q = rand_buf(hs, 3), *K = rand_buf(hs, 5), *V = rand_buf(hs, 7);
    float *Of = rand_buf(hs, 9), *Ou = rand_buf(hs, 11), *S = rand_buf(ss, 13);
    float *Od = rand_buf(hs, 15), *Sd = rand_buf(ss, 17);
    fused_run fr = {te_module_entry(m), (void *[]){Q, K, V, Of}};
    unfused_run ur = {heads, seq, dh, Q, K, V, S, Ou, NULL, NULL};
    te_bl_set_threads(threads);
    /* oneDNN's unfused path: its own score buffer and output, so both paths are checked. */
    const char *why = NULL;
    unfused_run ud = {heads, seq, dh, Q, K, V, Sd, Od, NULL, NULL};
    ud.qk = te_bl_bmm_create(heads, seq, seq, dh, 1, Q, K, Sd, &why);
    ud.pv = ud.qk ? te_bl_bmm_create(heads, seq, dh, seq, 0, Sd, V, Od, &why) : NULL;
    int have_dn = ud.pv != NULL;
    te_bl_run_fn fn[3] = {run_fused, run_unfused, run_unfused};
    void *arg[3] = {&fr, &ur, &ud};
    double med[3] = {NAN, NAN, NAN};
    te_bl_time_alternating(have_dn ? 3 : 2, fn, arg, reps, med);
    double flop = 4.0 * heads * (double)seq * seq * dh;
    /* Our error against the OpenBLAS path (and, measured alike, oneDNN's against it). */
    double err = 0, err_dn = 0;
    for (size_t q = 0; q < hs; q++) {
        double r = fmax(1.0, fabs((double)Ou[q]));
        err = fmax(err, fabs((double)Of[q] - Ou[q]) / r);
        if (have_dn)
            err_dn = fmax(err_dn, fabs((double)Od[q] - Ou[q]) / r);
    }
    /* Memory beyond inputs and output: the unfused scores; the fused K^T (and padded V). */
    double mib = 1.0 / (1024.0 * 1024.0);
    double mem_unfused = (double)ss * sizeof(float) * mib;
    /* The registry's default form is the one-pass form with key blocks of 128 (64 where that
     * pads less): K^T padded to whole blocks (rows 16 longer), and V copied only where it is
     * padded (the template reads V itself when the keys are whole blocks). */
    int64_t p128 = ((int64_t)seq + 127) / 128 * 128, p64 = ((int64_t)seq + 63) / 64 * 64;
    double lp = (double)(p64 < p128 ? p64 : p128);
    double mem_fused = (double)heads * ((lp + 16) + (lp > seq ? lp : 0)) * dh * sizeof(float) * mib;
    memset(out, 0, sizeof *out);
    snprintf(out->workload, sizeof out->workload, "attention %dx%dx%d", heads, seq, dh);
    out->threads = threads;
    out->unit = "gflops";
    out->ours = flop / med[0] * 1e-9;
    out->seconds = med[0];
    /* OpenBLAS's kernels narrower than the CPU's (te_bl_openblas_trusted) would flatter us:
     * its figure is left out, as the matmul rows leave theirs out. */
    out->openblas = te_bl_openblas_trusted() ? flop / med[1] * 1e-9 : NAN;
    out->onednn = have_dn ? flop / med[2] * 1e-9 : NAN;
    int dn_best = have_dn && !(out->openblas >= out->onednn);
    out->base = dn_best ? out->onednn : out->openblas;
    snprintf(out->base_name, sizeof out->base_name, "unfused matmul+softmax+matmul");
    char ob[64], dn[64];
    snprintf(ob, sizeof ob, "OpenBLAS %s sgemm per head", te_bl_openblas_core());
    snprintf(dn, sizeof dn, "%s batched", have_dn ? te_bl_bmm_impl(ud.qk) : "oneDNN");
    snprintf(out->ob_impl, sizeof out->ob_impl, "%s", ob);
    snprintf(out->dn_impl, sizeof out->dn_impl, "%s", have_dn ? dn : "");
    snprintf(out->base_impl, sizeof out->base_impl, "%s", dn_best ? dn : ob);
    snprintf(out->note, sizeof out->note, "extra memory: fused %.1f MiB (%s), unfused %.1f MiB",
             mem_fused, how, mem_unfused);
    out->other_impl = have_dn ? (dn_best ? out->ob_impl : out->dn_impl) : "";
    out->err = err;
    fprintf(stderr,
            "  attention %dx%dx%d, %d thread(s): fused %.3f ms, unfused OpenBLAS %.3f ms (x%.2f)",
            heads, seq, dh, threads, med[0] * 1e3, med[1] * 1e3, med[1] / med[0]);
    if (have_dn)
        fprintf(stderr, ", unfused oneDNN %.3f ms (x%.2f, max rel err %.2g)", med[2] * 1e3,
                med[2] / med[0], err_dn);
    else
        fprintf(stderr, ", no oneDNN path (%s)", why ? why : "?");
    fprintf(stderr, "; extra memory fused %.2f MiB, unfused %.2f MiB; max rel err %.2g\n",
            mem_fused, mem_unfused, err);
    te_bl_bmm_free(ud.qk), te_bl_bmm_free(ud.pv);
    free(Q), free(K), free(V), free(Of), free(Ou), free(S), free(Od), free(Sd);
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}
