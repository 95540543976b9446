/*
 * autotune/measure_check.c: what a candidate is checked against. The inputs are random and
 * reproducible, outputs are poisoned (NaN for floats) before each check run, and the reference
 * output is computed once per workload: te_reference_eval in float64 when that is cheap, else
 * the default schedule (no primitive applied, which lowers to the plain loop nest of each
 * definition; the test suite checks it against te_reference_eval for every operator), built
 * with te_build and run in a child process. The tolerance is the outputs' dtype's
 * (te_dtype_tolerance): it grows with the reduction length, and integer outputs are exact.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "autotune/measure_impl.h"

void te__meas_fill_random(void *p, te_dtype dt, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        double u = (double)(r >> 7) / 16777216.0 * 2.0 - 1.0; /* [-1, 1) */
        switch (dt) {
        case TE_F32:
            ((float *)p)[i] = (float)u;
            break;
        case TE_F64:
            ((double *)p)[i] = u;
            break;
        case TE_I32:
            ((int32_t *)p)[i] = (int32_t)(r % 7) - 3;
            break;
        case TE_I64:
            ((int64_t *)p)[i] = (int64_t)(r % 7) - 3;
            break;
        case TE_I8:
            ((int8_t *)p)[i] = (int8_t)((int)(r % 7) - 3);
            break;
        case TE_U8:
            ((uint8_t *)p)[i] = (uint8_t)(r % 4);
            break;
        case TE_BOOL:
            ((uint8_t *)p)[i] = (uint8_t)(r & 1);
            break;
        default: /* f16, bf16: the value rounded to them */
            te_dtype_store(dt, p, i, u);
            break;
        }
    }
}

void te__meas_poison(void *p, te_dtype dt, size_t n)
{
    if (dt == TE_F32) {
        float *f = p;
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
    } else if (dt == TE_F64) {
        double *f = p;
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
    } else if (te_dtype_is_float(dt)) { /* f16, bf16 */
        for (size_t i = 0; i < n; i++)
            te_dtype_store(dt, p, i, NAN);
    } else {
        memset(p, 0x5b, n * te_dtype_size(dt));
    }
}

static double load_as_double(const void *p, te_dtype dt, size_t i)
{
    return dt == TE_BOOL ? ((const uint8_t *)p)[i] : te_dtype_load(dt, p, i);
}

static void store_from_double(void *p, te_dtype dt, size_t i, double v)
{
    if (dt == TE_BOOL)
        ((uint8_t *)p)[i] = (uint8_t)v;
    else
        te_dtype_store(dt, p, i, v);
}

/* ---- Reference ---------------------------------------------------------------------------- */

typedef struct {
    te__measurer *m;
    te_module *mod;
} ref_job;

static void run_reference_child(void *user, void *out)
{
    (void)out;
    ref_job *j = user;
    void *args[MAX_ARGS];
    for (int i = 0; i < j->m->n_in + j->m->n_out; i++)
        args[i] = i < j->m->n_in ? j->m->bufs[i] : j->m->ref[i];
    if (j->m->target.num_cores > 0)
        omp_set_num_threads(j->m->target.num_cores);
    _exit(te_module_run(j->mod, args) == TE_OK ? 0 : 3);
}

int te__measurer_reference(te__measurer *m, te_ctx *ctx, double interp_limit, char *err,
                           size_t errsize)
{
    if (!m || !ctx)
        return TE_ERR_ARG;
    if (interp_limit <= 0) {
        const char *e = getenv("TESSERA_TUNE_INTERP_LIMIT");
        interp_limit = e && *e ? atof(e) : 4e7;
    }
    te_tensor *outs[MAX_ARGS];
    for (int o = 0; o < m->n_out; o++)
        outs[o] = m->args[m->n_in + o];
    int64_t red = te__max_reduction(m->n_out, outs);
    double work = te_tuner_flops(m->n_out, outs);
    for (int o = 0; o < m->n_out; o++)
        work += (double)te_tensor_numel(outs[o]);
    int rc;
    if (work <= interp_limit) {
        double *d[MAX_ARGS] = {0};
        const void *in[MAX_ARGS];
        for (int i = 0; i < m->n_in; i++)
            in[i] = m->bufs[i];
        rc = TE_OK;
        for (int o = 0; o < m->n_out && rc == TE_OK; o++) {
            d[o] = malloc(sizeof(double) * (size_t)te_tensor_numel(outs[o]) + 8);
            if (!d[o])
                rc = TE_ERR_NOMEM;
        }
        if (rc == TE_OK)
            rc = te_reference_eval(ctx, m->n_in, m->args, in, m->n_out, outs, d);
        if (rc == TE_OK)
            for (int o = 0; o < m->n_out; o++) {
                te_dtype dt = te_tensor_dtype(outs[o]);
                for (size_t i = 0, n = (size_t)te_tensor_numel(outs[o]); i < n; i++)
                    store_from_double(m->ref[m->n_in + o], dt, i, d[o][i]);
            }
        else
            snprintf(err, errsize, "reference interpreter: %s", te_ctx_errmsg(ctx));
        for (int o = 0; o < m->n_out; o++)
            free(d[o]);
        m->ref_kind = "te_reference_eval";
    } else {
        te_schedule *s = te_schedule_create(ctx, m->n_out, outs);
        te_module *mod = NULL;
        rc = s ? te_build(s, m->n_in + m->n_out, m->args, "reference", &m->target, &mod)
               : TE_ERR_SCHEDULE;
        if (rc != TE_OK) {
            snprintf(err, errsize, "building the default schedule for the reference: %s",
                     te_ctx_errmsg(ctx));
        } else {
            ref_job j = {m, mod};
            double limit = 3600;
            rc = te_tune_run_isolated(run_reference_child, &j, NULL, 0, limit);
            if (rc != TE_OK)
                snprintf(err, errsize, "running the default schedule for the reference: %s",
                         rc == TE_ERR_TIMEOUT ? "timed out" : "failed");
        }
        te_module_free(mod);
        m->ref_kind = "default schedule";
    }
    if (rc != TE_OK)
        return rc;
    if (m->o.tolerance > 0) {
        m->tol = m->o.tolerance;
    } else {
        /* The loosest output's tolerance (te_dtype_tolerance, docs/DTYPES.md): float32
         * rounding grows with the reduction length, f16/bf16 outputs are rounded to their
         * precision and may accumulate in it; a wrong schedule (a missed tail, a wrong index,
         * an unwritten element) is off by O(1). Integer outputs are exact. */
        m->tol = 0;
        bool half = false;
        for (int o = 0; o < m->n_out; o++) {
            m->tol = fmax(m->tol, te_dtype_tolerance(te_tensor_dtype(outs[o]), red));
            half |= te_dtype_is_half(te_tensor_dtype(outs[o]));
        }
        if (strcmp(m->ref_kind, "default schedule") == 0)
            m->tol *= 2;
        if (!half && m->tol > 1e-2)
            m->tol = 1e-2;
    }
    m->ref_ok = 1;
    return TE_OK;
}

double te__meas_check_outputs(const te__measurer *m, char *msg, size_t msgsize)
{
    double worst = 0;
    for (int o = m->n_in; o < m->n_in + m->n_out; o++) {
        te_dtype dt = te_tensor_dtype(m->args[o]);
        size_t n = (size_t)te_tensor_numel(m->args[o]);
        for (size_t i = 0; i < n; i++) {
            double g = load_as_double(m->bufs[o], dt, i), r = load_as_double(m->ref[o], dt, i);
            double e = fabs(g - r) / fmax(1.0, fabs(r));
            if (!(e <= worst)) {
                worst = isnan(e) ? INFINITY : e;
                snprintf(msg, msgsize,
                         "output '%s' element %zu is %.9g, the reference %.9g (relative error "
                         "%.3g > tolerance %.3g)",
                         te_tensor_name(m->args[o]), i, g, r, worst, m->tol);
                if (isinf(worst))
                    return worst;
            }
        }
    }
    return worst;
}
