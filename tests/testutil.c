#include "testutil.h"

#include "tessera/graph.h"
#include "tessera/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void tt_rng_seed(tt_rng *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 1; }

uint64_t tt_rng_next(tt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tt_rng_uniform(tt_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(tt_rng_next(r) >> 11) * 0x1.0p-53);
}

int64_t tt_rng_int(tt_rng *r, int64_t n)
{
    return n <= 0 ? 0 : (int64_t)(tt_rng_next(r) % (uint64_t)n);
}

void tt_fill_f32(tt_rng *r, float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = tt_rng_uniform(r, -1.0, 1.0);
        p[i] = (float)(v == 0.0 ? 0.5 : v);
    }
}

void tt_fill_f64(tt_rng *r, double *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = tt_rng_uniform(r, -1.0, 1.0);
        p[i] = v == 0.0 ? 0.5 : v;
    }
}

void tt_poison_f32(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

void tt_output_as_f32(void *p, int dtype, size_t n)
{
    te_dtype d = (te_dtype)dtype;
    size_t es = te_dtype_size(d);
    if (d == TE_F32 || !es)
        return;
    /* narrower elements: from the end (a float never overwrites an unread element); wider:
     * from the start */
    for (size_t k = 0; k < n; k++) {
        size_t i = es < 4 ? n - 1 - k : k;
        double v = d == TE_BOOL ? ((const unsigned char *)p)[i] : te_dtype_load(d, p, i);
        ((float *)p)[i] = (float)v;
    }
}

double tt_max_rel_diff_f32(const float *got, const float *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i]))
            return INFINITY;
        double e = fabs((double)got[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

double tt_max_rel_err_f32(const float *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i]))
            return INFINITY;
        if (isnan(want[i]))
            continue;
        double e = fabs((double)got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

uint64_t tt_seed(uint64_t dflt)
{
    const char *z = getenv("TESSERA_TEST_SEED");
    return z ? strtoull(z, NULL, 0) : dflt;
}

int tt_tmpdir_make(char *dir, size_t n, const char *tag)
{
    snprintf(dir, n, "/tmp/tessera-test-%s-%ld-XXXXXX", tag, (long)getpid());
    return mkdtemp(dir) ? 0 : -1;
}

int tt_tmpdir_remove(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *tt_path_in(const char *dir, const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

double tt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

te_fuse_target tt_fuse_target(size_t l2)
{
    te_fuse_target t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "cpu");
    t.cores = 2;
    t.vector_bits = 256;
    t.l2_bytes = l2;
    t.peak_gflops = 100;
    t.mem_gbps = 20;
    t.launch_us = 2;
    return t;
}

te_stage *tt_rf_lanes(te_schedule *s, te_stage *st, int64_t width)
{
    te_iter *ko, *ki;
    if (te_split(st, te_stage_reduce_axis(st, 0), width, &ko, &ki) != TE_OK)
        return NULL;
    te_tensor *rf = te_rfactor(s, te_stage_tensor(st), ki);
    te_stage *srf = rf ? te_schedule_stage(s, rf) : NULL;
    te_iter *lane = srf ? te_stage_axis(srf, te_tensor_ndim(rf) - 1) : NULL;
    if (!lane || te_reorder(srf, 2, (te_iter *[]){te_stage_reduce_axis(srf, 0), lane}) != TE_OK ||
        te_vectorize(srf, lane) != TE_OK)
        return NULL;
    return srf;
}

bool tt_trace_replays(te_schedule *s, int n_out, te_tensor *const *out, const char *c_needle)
{
    const char *trace = te_schedule_trace(s);
    te_schedule *s2 = trace ? te_schedule_create(te_schedule_ctx(s), n_out, out) : NULL;
    if (!s2 || te_schedule_apply_trace(s2, trace) != TE_OK ||
        strcmp(te_schedule_trace(s2), trace) != 0)
        return false;
    char *c = te_trace_to_c(trace, "s");
    bool ok = c && strstr(c, c_needle);
    free(c);
    return ok;
}
