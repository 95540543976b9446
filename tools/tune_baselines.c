/*
 * The strongest baselines of a tuning task, and the job's best beside them at the end, both
 * measured in a child process (this process must not start OpenMP threads: it forks
 * candidates) with tools/baselines.c, the way `tessera bench` measures them.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tools/tune_extras.h"

/* ---- Baselines (in a child: this process must not start OpenMP threads) ------------------ */

typedef struct {
    te_bl_shape shape;
    int threads;
} baseline_job;

static void baseline_child(void *user, void *out)
{
    baseline_job *j = user;
    te_bl_result *r = out;
    if (te_bl_measure(&j->shape, j->threads, TE_TUNE_BASELINE_REPS, r) != 0)
        r->best_lib = -1;
}

/* Fills *shape from a matmul or mlp_gate task's parameters; 0 for other tasks (no baseline). */
int te__tune_baseline_shape(const char *op, const char *params, te_bl_shape *shape)
{
    int gate = !strcmp(op, "mlp_gate");
    if (strcmp(op, "matmul") && !gate)
        return 0;
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    int ok = 0;
    memset(shape, 0, sizeof *shape);
    shape->gate = gate;
    if (ctx && te_op_params_parse(ctx, params, &kv) == TE_OK && kv.dtype == TE_F32) {
        for (int i = 0; i < kv.n; i++) {
            int v = (int)kv.p[i].ival;
            if (!strcmp(kv.p[i].key, "m"))
                shape->m = v;
            else if (!strcmp(kv.p[i].key, "n"))
                shape->n = v;
            else if (!strcmp(kv.p[i].key, "k"))
                shape->k = v;
            else if (!strcmp(kv.p[i].key, "trans_a"))
                shape->ta = v;
            else if (!strcmp(kv.p[i].key, "trans_b"))
                shape->tb = v;
        }
        ok = shape->m > 0 && shape->n > 0 && shape->k > 0 && !(gate && (shape->ta || shape->tb));
    }
    te_ctx_free(ctx);
    return ok;
}

/* The strongest baseline for a task measured in a child; 0 when there is none. */
int te__tune_measure_baseline(const char *op, const char *params, int threads, te_bl_result *r)
{
    baseline_job j;
    memset(r, 0, sizeof *r);
    r->best = NAN;
    r->best_lib = -1;
    if (!te__tune_baseline_shape(op, params, &j.shape))
        return 0;
    j.threads = threads;
    if (te_tune_run_isolated(baseline_child, &j, r, sizeof *r, 300) != TE_OK) {
        memset(r, 0, sizeof *r);
        r->best = NAN;
        r->best_lib = -1;
        snprintf(r->notes, sizeof r->notes, "the baseline measurement failed; no ratio");
    }
    r->notes[sizeof r->notes - 1] = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        r->impl[l][sizeof r->impl[l] - 1] = 0;
    /* The tuner counts the task's floating-point operations its own way (te_tuner_flops counts
     * the gate's elementwise work too): the baseline's figures in the same units, so that the
     * ratio of two GFLOP/s figures is the ratio of the two times. */
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    double scale = NAN;
    if (ctx && te_op_build(ctx, op, params, in, &n_in, outs, &n_out) == TE_OK)
        scale = te_tuner_flops(n_out, outs) / te_bl_shape_flops(&j.shape);
    te_ctx_free(ctx);
    if (!(scale > 0)) {
        snprintf(r->notes, sizeof r->notes, "the task's flop count is unknown; no ratio");
        r->best = NAN;
        r->best_lib = -1;
    }
    for (int l = 0; l < TE_BL_NLIBS; l++)
        r->gflops[l] *= scale;
    r->openblas *= scale;
    r->onednn *= scale;
    r->best *= scale;
    return r->best_lib >= 0;
}

/* The parameters part of a workload key ("matmul;k=64,m=64,n=64;f32" -> "k=64,m=64,n=64"). */
void te__tune_task_params(const char *key, char *buf, size_t n)
{
    const char *sc = strchr(key, ';');
    snprintf(buf, n, "%s", sc ? sc + 1 : "");
    char *end = strchr(buf, ';');
    if (end)
        *end = 0;
}

/* ---- The best schedule beside the baselines, at the end of the job (in a child) ------------ */

typedef struct {
    const char *op, *params, *trace;
    te_bl_shape shape;
    int threads;
} final_job;

typedef struct {
    te_packed_fn fn;
    void **args;
} kernel_run;

static void run_kernel(void *p)
{
    kernel_run *k = p;
    k->fn(k->args);
}

/* Builds the best schedule (its trace), and times it beside every baseline the way
 * `tessera bench` does: one process, a warm-up, TE_TUNE_BASELINE_REPS alternating rounds, medians.
 */
static void final_child(void *user, void *out)
{
    final_job *j = user;
    te__tune_final *fr = out;
    memset(fr, 0, sizeof *fr);
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO], *args[2 * TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    te_module *m = NULL;
    te_schedule *s = NULL;
    te_target tgt = te_target_host();
    tgt.num_cores = j->threads;
    if (!ctx || te_op_build(ctx, j->op, j->params, in, &n_in, outs, &n_out) != TE_OK ||
        n_in < (j->shape.gate ? 3 : 2) || !(s = te_schedule_create(ctx, n_out, outs)) ||
        te_schedule_apply_trace(s, j->trace) != TE_OK) {
        te_ctx_free(ctx);
        return;
    }
    for (int q = 0; q < n_in; q++)
        args[q] = in[q];
    for (int q = 0; q < n_out; q++)
        args[n_in + q] = outs[q];
    double flop = te_tuner_flops(n_out, outs);
    if (te_build(s, n_in + n_out, args, j->op, &tgt, &m) != TE_OK) {
        te_ctx_free(ctx);
        return;
    }
    void *bufs[2 * TE_OP_MAX_IO] = {0};
    unsigned seed = 777;
    int ok = 1;
    for (int q = 0; q < n_in + n_out; q++) {
        size_t n = (size_t)te_tensor_numel(args[q]);
        float *b = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        ok = ok && b;
        for (size_t i = 0; b && i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            b[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
        }
        bufs[q] = b;
    }
    if (ok) {
        te_bl_set_threads(j->threads);
        te_bl_set set;
        te_bl_set_create(&set, &j->shape, bufs[0], bufs[1], j->shape.gate ? bufs[2] : NULL, &fr->r);
        kernel_run kr = {te_module_entry(m), bufs};
        te_bl_run_fn fn[TE_BL_NLIBS + 1] = {run_kernel};
        void *arg[TE_BL_NLIBS + 1] = {&kr};
        int n = 1 + te_bl_set_fns(&set, fn + 1, arg + 1);
        double med[TE_BL_NLIBS + 1];
        const float *ref = te_bl_set_reference(&set);
        if (n > 1 && te_bl_time_alternating(n, fn, arg, TE_TUNE_BASELINE_REPS, med) == 0) {
            te_bl_set_result(&set, med + 1, flop, &fr->r);
            fr->ours = flop / med[0] * 1e-9;
            fr->err = ref ? te_bl_rel_err(bufs[n_in], ref, (size_t)te_tensor_numel(outs[0])) : 0;
            fr->ok = ref == NULL || fr->err < 1e-2;
        }
        te_bl_set_free(&set);
    }
    for (int q = 0; q < n_in + n_out; q++)
        free(bufs[q]);
    te_module_free(m);
    te_ctx_free(ctx);
}

/* The best schedule of a task re-measured beside the baselines; 0 when not possible. */
int te__tune_measure_final(const char *op, const char *params, const char *trace, int threads,
                           te__tune_final *fr)
{
    final_job j = {op, params, trace, {0}, threads};
    memset(fr, 0, sizeof *fr);
    if (!trace || !te__tune_baseline_shape(op, params, &j.shape) ||
        te_tune_run_isolated(final_child, &j, fr, sizeof *fr, 300) != TE_OK || !fr->ok)
        return 0;
    fr->r.notes[sizeof fr->r.notes - 1] = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        fr->r.impl[l][sizeof fr->r.impl[l] - 1] = 0;
    return fr->r.best_lib >= 0;
}

/* "oneDNN" or "OpenBLAS": how the progress line names the strongest baseline. */
const char *te__tune_best_short(const te_bl_result *r)
{
    return r->best_lib == TE_BL_OPENBLAS ? "OpenBLAS" : "oneDNN";
}
