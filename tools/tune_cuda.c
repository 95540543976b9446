/*
 * tools/tune_cuda.c: `tessera tune OP --target cuda`.
 *
 * --dry-run (no GPU needed): draws distinct candidates from the operator's GPU search space
 * (autotune/templates_cuda.c), compiles each through NVRTC for every SM asked for, reads
 * ptxas's figures (registers per thread, spill stores, static shared memory, stack), and says
 * which candidates the resource check would prune before measurement: more registers x
 * threads than an SM's register file (64K), more static shared memory than a block may have
 * (48 KiB), or any spill. It prints the distribution of registers and spills per SM. Nothing
 * is measured or recorded. The compiles run in forked workers, one per core.
 *
 * Without --dry-run the candidates are measured on the GPU (measure() below): this process
 * never initialises CUDA. A probe child reads the device (name, SM, multiprocessors, driver);
 * the candidates are compiled for its SM in forked workers (NVRTC's output lands in the on-disk
 * cache), pruned by the resource check, then measured in order by a measuring child: it loads
 * each module, runs it on random inputs with NaN-poisoned outputs, compares every output with
 * the float64 reference computed here, and times it with CUDA events (warm-up, L2 flushed
 * between runs, median). Figures come back through a shared mapping. A failed launch ends the
 * child (a GPU's sticky error leaves its context unusable); a child that dies or overruns the
 * time limit takes only its current candidate with it (recorded as runtime_error or timeout)
 * and a fresh child goes on with the next. Every candidate is recorded in the database (--db)
 * under the device's full target key (GPU name, SM, multiprocessors, NVRTC and driver).
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera/autotune.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "tools/tune_cuda.h"

#define MAX_SMS 4

/* ptxas's figures of one candidate on one SM. */
typedef struct {
    int ok;             /* compiled */
    int regs, spill;    /* the largest over the candidate's kernels */
    int smem, stack;    /* bytes */
    int threads;        /* of the kernel with the most registers x threads */
    const char *pruned; /* why the resource check drops it, or NULL */
    char err[256];
} cand_fig;

static int parse_sms(const char *s, int *out)
{
    int n = 0;
    while (s && *s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 50 || v > 120 || n == MAX_SMS)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Compiles `trace` for sm; fills f. */
static void build_one(te_ctx *parent, int n_in, te_tensor **ins, int n_out, te_tensor **outs,
                      const char *trace, int sm, cand_fig *f)
{
    memset(f, 0, sizeof *f);
    te_ctx *ctx = te_ctx_create_child(parent);
    te_schedule *s = ctx ? te_schedule_create(ctx, n_out, outs) : NULL;
    te_tensor *args[16];
    int na = 0;
    for (int i = 0; i < n_in && na < 16; i++)
        args[na++] = ins[i];
    for (int i = 0; i < n_out && na < 16; i++)
        args[na++] = outs[i];
    te_target tgt = te_target_cuda(sm);
    te_cuda_module *m = NULL;
    int rc = !s ? TE_ERR_NOMEM
             : te_schedule_apply_trace(s, trace) != TE_OK
                 ? TE_ERR_SCHEDULE
                 : te_cuda_compile(s, na, args, "cand", &tgt, &m);
    if (rc != TE_OK) {
        snprintf(f->err, sizeof f->err, "%s", ctx ? te_ctx_errmsg(ctx) : "out of memory");
        te_cuda_module_free(m);
        te_ctx_free(ctx);
        return;
    }
    f->ok = 1;
    long worst = -1;
    for (int k = 0; k < te_cuda_module_nkernels(m); k++) {
        const te_cuda_kernel_info *ki = te_cuda_module_kernel(m, k);
        int threads = ki->block[0] * ki->block[1] * ki->block[2];
        if (ki->registers > f->regs)
            f->regs = ki->registers;
        if (ki->spill_bytes > f->spill)
            f->spill = ki->spill_bytes;
        if (ki->shared_bytes > f->smem)
            f->smem = ki->shared_bytes;
        if (ki->stack_bytes > f->stack)
            f->stack = ki->stack_bytes;
        if ((long)ki->registers * threads > worst) {
            worst = (long)ki->registers * threads;
            f->threads = threads;
        }
    }
    if (worst > 65536)
        f->pruned = "registers x threads over 64K";
    else if (f->smem > 48 * 1024)
        f->pruned = "static shared memory over 48 KiB";
    else if (f->spill > 0)
        f->pruned = "spills";
    te_cuda_module_free(m);
    te_ctx_free(ctx);
}

/* Compiles every (candidate, SM) pair into fig[i * nsm + j]: in one forked worker per core (at
 * most 8), each taking every nw-th pair and writing its figures into a shared mapping, or here
 * when there is one core or fork fails. */
static void compile_all(te_ctx *ctx, int n_in, te_tensor **ins, int n_out, te_tensor **outs,
                        const char **tr, int64_t n, const int *sms, int nsm, cand_fig *fig)
{
    int64_t pairs = n * nsm;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nw = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    if (nw > pairs)
        nw = (int)pairs;
    size_t bytes = sizeof *fig * (size_t)pairs;
    cand_fig *sh =
        nw > 1 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
               : MAP_FAILED;
    pid_t pid[8];
    int started = 0;
    if (sh != MAP_FAILED) {
        memset(sh, 0, bytes);
        fflush(stdout);
        fflush(stderr);
        for (; started < nw; started++) {
            pid[started] = fork();
            if (pid[started] < 0)
                break;
            if (pid[started] == 0) {
                for (int64_t p = started; p < pairs; p += nw)
                    build_one(ctx, n_in, ins, n_out, outs, tr[p / nsm], sms[p % nsm], &sh[p]);
                _exit(0);
            }
        }
        for (int w = 0; w < started; w++)
            waitpid(pid[w], NULL, 0);
    }
    for (int64_t p = 0; p < pairs; p++) {
        /* a pair no worker finished (none started, or one died) is compiled here */
        int w = (int)(p % (nw > 0 ? nw : 1));
        if (sh != MAP_FAILED && w < started && (sh[p].ok || sh[p].err[0])) {
            fig[p] = sh[p];
            /* the reason is a static string in the worker's image, the same here */
            continue;
        }
        build_one(ctx, n_in, ins, n_out, outs, tr[p / nsm], sms[p % nsm], &fig[p]);
    }
    if (sh != MAP_FAILED)
        munmap(sh, bytes);
}

/* min / median / p90 / max of v[0..n) (sorted in place) */
static void quartiles(int *v, int n, int q[4])
{
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    q[0] = n ? v[0] : 0;
    q[1] = n ? v[n / 2] : 0;
    q[2] = n ? v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1] : 0;
    q[3] = n ? v[n - 1] : 0;
}

/* "a template space of N" or "the GPU sketch space" (te_space_size: -1), for the headers. */
static const char *space_words(int64_t size)
{
    static char buf[64];
    if (size < 0)
        return "the GPU sketch space";
    snprintf(buf, sizeof buf, "a template space of %lld", (long long)size);
    return buf;
}

/* Up to `want` distinct candidates of sp into tr, as the search would draw them; the count. */
static int64_t draw(te_space *sp, int64_t want, uint64_t seed, const char **tr)
{
    te_rng rng;
    te_rng_seed(&rng, seed);
    int64_t n = 0;
    for (int64_t attempt = 0; n < want && attempt < want * 20; attempt++) {
        const char *t = te_space_sample(sp, &rng);
        if (!t)
            break;
        int dup = 0;
        for (int64_t i = 0; i < n && !dup; i++)
            dup = !strcmp(tr[i], t);
        if (!dup)
            tr[n++] = t;
    }
    return n;
}

/* A new context with operator op built in it (inputs and outputs: TE_OP_MAX_IO entries each);
 * NULL after printing why (bad operator or shape, out of memory). */
static te_ctx *build_op(const char *op, const char *shape, te_tensor **ins, int *n_in,
                        te_tensor **outs, int *n_out)
{
    te_ctx *ctx = te_ctx_create();
    if (!ctx || te_op_build(ctx, op, shape, ins, n_in, outs, n_out) != TE_OK) {
        fprintf(stderr, "tessera tune: %s\n", ctx ? te_ctx_errmsg(ctx) : "out of memory");
        te_ctx_free(ctx);
        return NULL;
    }
    if (*n_in + *n_out > 16) {
        fprintf(stderr, "tessera tune: --target cuda takes operators of at most 16 tensors\n");
        te_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static int dry_run(const char *op, const char *shape, int64_t trials, const int *sms, int nsm,
                   uint64_t seed, int json, te_space_kind space)
{
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    te_ctx *ctx = build_op(op, shape, ins, &n_in, outs, &n_out);
    if (!ctx)
        return 2;
    te_target t0 = te_target_cuda(sms[0]);
    te_space *sp = te_space_create(ctx, op, n_in, ins, n_out, outs, space, &t0);
    if (!sp) {
        fprintf(stderr, "tessera tune: no GPU search space for '%s': %s\n", op, te_ctx_errmsg(ctx));
        te_ctx_free(ctx);
        return 1;
    }
    int64_t size = te_space_size(sp);
    int64_t want = size > 0 && size < trials ? size : trials;
    const char **tr = calloc((size_t)want, sizeof *tr);
    cand_fig *fig = calloc((size_t)(want * nsm), sizeof *fig);
    int *v = calloc((size_t)want, sizeof *v);
    if (!tr || !fig || !v) {
        fprintf(stderr, "tessera tune: out of memory\n");
        free(tr), free(fig), free(v);
        te_ctx_free(ctx);
        return 1;
    }
    int64_t n = draw(sp, want, seed, tr);
    if (n == 0) {
        fprintf(stderr, "tessera tune: no valid GPU configuration of '%s': %s\n", op,
                te_ctx_errmsg(ctx));
        free(tr), free(fig), free(v);
        te_ctx_free(ctx);
        return 1;
    }
    if (!json)
        printf("tune --target cuda --dry-run: %s %s, %lld distinct candidates of %s (seed %llu), "
               "compiled with NVRTC %d.%d, nothing measured or recorded\n",
               op, shape, (long long)n, space_words(size), (unsigned long long)seed,
               te_nvrtc_version() / 1000, (te_nvrtc_version() % 1000) / 10);
    compile_all(ctx, n_in, ins, n_out, outs, tr, n, sms, nsm, fig);
    int rc = 0;
    if (json)
        printf("{\"op\": \"%s\", \"shape\": \"%s\", \"candidates\": %lld, \"space\": %lld, "
               "\"sms\": [",
               op, shape, (long long)n, (long long)size);
    for (int j = 0; j < nsm; j++) {
        int nok = 0, nspill = 0, maxspill = 0, npr[3] = {0, 0, 0}, q[4], qs[4];
        const char *first_err = NULL;
        for (int64_t i = 0; i < n; i++) {
            const cand_fig *f = &fig[i * nsm + j];
            if (!f->ok) {
                if (!first_err)
                    first_err = f->err;
                continue;
            }
            v[nok++] = f->regs;
            nspill += f->spill > 0;
            if (f->spill > maxspill)
                maxspill = f->spill;
            if (f->pruned)
                npr[f->pruned[0] == 'r' ? 0 : f->pruned[1] == 't' ? 1 : 2]++;
        }
        quartiles(v, nok, q);
        int ns = 0;
        for (int64_t i = 0; i < n; i++)
            if (fig[i * nsm + j].ok)
                v[ns++] = fig[i * nsm + j].smem;
        quartiles(v, ns, qs);
        int buckets[6] = {0}; /* <=32, <=64, <=96, <=128, <=168, more */
        static const int lim[5] = {32, 64, 96, 128, 168};
        for (int64_t i = 0; i < n; i++) {
            const cand_fig *f = &fig[i * nsm + j];
            int b = 0;
            while (f->ok && b < 5 && f->regs > lim[b])
                b++;
            buckets[b] += f->ok;
        }
        int pruned = npr[0] + npr[1] + npr[2];
        if (json) {
            printf(
                "%s{\"sm\": %d, \"compiled\": %d, \"failed\": %lld, \"registers\": {\"min\": %d, "
                "\"median\": %d, \"p90\": %d, \"max\": %d}, \"spilling\": %d, "
                "\"max_spill_bytes\": %d, \"shared_bytes_max\": %d, \"pruned\": {\"registers\": "
                "%d, \"shared\": %d, \"spills\": %d}}",
                j ? ", " : "", sms[j], nok, (long long)(n - nok), q[0], q[1], q[2], q[3], nspill,
                maxspill, qs[3], npr[0], npr[1], npr[2]);
        } else {
            printf("\nsm_%d: %d of %lld compiled", sms[j], nok, (long long)n);
            if (first_err)
                printf(" (first failure: %s)", first_err);
            printf("\n  registers per thread: min %d, median %d, p90 %d, max %d\n", q[0], q[1],
                   q[2], q[3]);
            printf("  registers histogram: <=32 %d, 33-64 %d, 65-96 %d, 97-128 %d, 129-168 %d, "
                   ">168 %d\n",
                   buckets[0], buckets[1], buckets[2], buckets[3], buckets[4], buckets[5]);
            printf("  spills: %d candidate%s spill (largest %d bytes)\n", nspill,
                   nspill == 1 ? "" : "s", maxspill);
            printf("  static shared memory per block: min %d, median %d, max %d bytes\n", qs[0],
                   qs[1], qs[3]);
            printf("  pruned before measurement: %d (registers x threads over 64K: %d, shared "
                   "memory over 48 KiB: %d, spills: %d); %d left to measure\n",
                   pruned, npr[0], npr[1], npr[2], nok - pruned);
        }
        if (nok < n)
            rc = 1;
    }
    if (json)
        printf("]}\n");
    free(tr), free(fig), free(v);
    te_ctx_free(ctx);
    return rc;
}

/* ---- Measuring on the GPU ------------------------------------------------------------------ */

/* What the probe child tells about device 0. */
typedef struct {
    int ok;
    te_cuda_device_info di;
    te_target target; /* te_cuda_target_device's */
    char err[512];
} dev_probe;

/* One candidate's measurement, written by the measuring child. */
typedef struct {
    int state;  /* 0 not started, 1 started, 2 done */
    int status; /* te_trial_status */
    double median_ms, min_ms, rel_err;
    int runs;
    char msg[300];
} meas_slot;

/* Forks a child that initialises CUDA and reads device 0 (this process never does). */
static int probe_device(dev_probe *out)
{
    dev_probe *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return -1;
    memset(sh, 0, sizeof *sh);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (te_cuda_device_info_get(0, &sh->di) == TE_OK &&
            te_cuda_target_device(0, &sh->target) == TE_OK)
            sh->ok = 1;
        else
            snprintf(sh->err, sizeof sh->err, "%s", te_cuda_errmsg());
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        snprintf(sh->err, sizeof sh->err, "the device probe process failed");
    *out = *sh;
    munmap(sh, sizeof *sh);
    return out->ok ? 0 : -1;
}

typedef struct {
    te_ctx *ctx;
    int n_in, n_out;
    te_tensor **ins, **outs;
    const char **tr;
    const int *skip; /* candidates not to measure (failed to compile, pruned) */
    int64_t n;
    int sm;
    void *host[16];            /* inputs, then outputs (read back) */
    double *ref[TE_OP_MAX_IO]; /* float64 reference of each output */
    size_t bytes[16];
    double tol;
    te_cuda_timing timing;
} meas_job;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The worst relative error of output o against the reference, |y - r| / max(1, |r|); NaN and
 * infinities count as infinitely wrong. *at receives the element. */
static double out_error(const meas_job *j, int o, size_t *at)
{
    const float *y = j->host[j->n_in + o];
    size_t cnt = (size_t)te_tensor_numel(j->outs[o]);
    double worst = 0;
    *at = 0;
    for (size_t i = 0; i < cnt; i++) {
        double e = fabs((double)y[i] - j->ref[o][i]) / fmax(1.0, fabs(j->ref[o][i]));
        if (!(e <= worst)) {
            worst = isfinite(e) ? e : INFINITY;
            *at = i;
        }
    }
    return worst;
}

/* The measuring child: candidates start .. n-1 in order. Exits after a failed launch. */
static void measure_child(const meas_job *j, int64_t start, meas_slot *slot)
{
    int na = j->n_in + j->n_out;
    uint64_t dev[16] = {0};
    for (int a = 0; a < na; a++)
        if (te_cuda_malloc(&dev[a], j->bytes[a]) != TE_OK ||
            (a < j->n_in && te_cuda_copy_to_device(dev[a], j->host[a], j->bytes[a]) != TE_OK)) {
            snprintf(slot[start].msg, sizeof slot[start].msg, "device buffers: %s",
                     te_cuda_errmsg());
            slot[start].status = TE_TRIAL_RUNTIME_ERROR;
            slot[start].state = 2;
            _exit(3);
        }
    te_tensor *args[16];
    for (int a = 0; a < j->n_in; a++)
        args[a] = j->ins[a];
    for (int o = 0; o < j->n_out; o++)
        args[j->n_in + o] = j->outs[o];
    for (int64_t i = start; i < j->n; i++) {
        if (j->skip[i])
            continue;
        meas_slot *sl = &slot[i];
        sl->state = 1;
        sl->median_ms = sl->min_ms = NAN;
        te_ctx *ctx = te_ctx_create_child(j->ctx);
        te_schedule *s = ctx ? te_schedule_create(ctx, j->n_out, j->outs) : NULL;
        te_target tgt = te_target_cuda(j->sm);
        te_cuda_module *m = NULL;
        int rc = !s ? TE_ERR_NOMEM
                 : te_schedule_apply_trace(s, j->tr[i]) != TE_OK
                     ? TE_ERR_SCHEDULE
                     : te_cuda_compile(s, na, args, "cand", &tgt, &m);
        if (rc != TE_OK) {
            sl->status = TE_TRIAL_COMPILE_ERROR;
            snprintf(sl->msg, sizeof sl->msg, "%s", ctx ? te_ctx_errmsg(ctx) : "out of memory");
        } else if ((rc = te_cuda_module_load(m)) != TE_OK) {
            sl->status = TE_TRIAL_LOAD_ERROR;
            snprintf(sl->msg, sizeof sl->msg, "%s", te_cuda_module_errmsg(m));
        } else {
            for (int o = 0; o < j->n_out; o++)
                te_cuda_memset(dev[j->n_in + o], 0xff, j->bytes[j->n_in + o]); /* NaN */
            rc = te_cuda_module_run_device(m, dev);
            for (int o = 0; rc == TE_OK && o < j->n_out; o++)
                rc = te_cuda_copy_to_host(j->host[j->n_in + o], dev[j->n_in + o],
                                          j->bytes[j->n_in + o]);
            if (rc != TE_OK) {
                sl->status = TE_TRIAL_RUNTIME_ERROR;
                snprintf(sl->msg, sizeof sl->msg, "%s", te_cuda_module_errmsg(m));
                sl->state = 2;
                _exit(3); /* the context may be unusable: a fresh child goes on */
            }
            sl->rel_err = 0;
            for (int o = 0; o < j->n_out; o++) {
                size_t at;
                double e = out_error(j, o, &at);
                if (e > j->tol && !(sl->rel_err > j->tol))
                    snprintf(sl->msg, sizeof sl->msg,
                             "output '%s' element %zu is %.9g, the reference %.9g (relative "
                             "error %.3g > tolerance %.3g)",
                             te_tensor_name(j->outs[o]), at,
                             (double)((const float *)j->host[j->n_in + o])[at], j->ref[o][at], e,
                             j->tol);
                sl->rel_err = e > sl->rel_err ? e : sl->rel_err;
            }
            if (sl->rel_err > j->tol) {
                sl->status = TE_TRIAL_WRONG_ANSWER;
            } else if ((rc = te_cuda_module_time(m, dev, &j->timing, &sl->median_ms, &sl->min_ms,
                                                 &sl->runs)) != TE_OK) {
                sl->status = TE_TRIAL_RUNTIME_ERROR;
                snprintf(sl->msg, sizeof sl->msg, "timing: %s", te_cuda_module_errmsg(m));
                sl->state = 2;
                _exit(3);
            } else {
                sl->status = TE_TRIAL_OK;
            }
        }
        te_cuda_module_free(m);
        te_ctx_free(ctx);
        sl->state = 2;
    }
    _exit(0);
}

/* Runs measuring children until every candidate not skipped has a result. */
static void measure_all(const meas_job *j, meas_slot *slot, double limit_s)
{
    int64_t start = 0;
    while (start < j->n) {
        while (start < j->n && (j->skip[start] || slot[start].state == 2))
            start++;
        if (start >= j->n)
            break;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            for (int64_t i = start; i < j->n; i++)
                if (!j->skip[i] && slot[i].state != 2) {
                    slot[i].status = TE_TRIAL_OTHER_ERROR;
                    snprintf(slot[i].msg, sizeof slot[i].msg, "cannot fork a measuring process");
                    slot[i].state = 2;
                }
            return;
        }
        if (pid == 0)
            measure_child(j, start, slot);
        /* Watch: a candidate started more than limit_s ago without finishing is killed. */
        int64_t cur = -1;
        double since = now_s();
        int st = 0, timed_out = 0;
        for (;;) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid)
                break;
            int64_t c = -1;
            for (int64_t i = start; i < j->n; i++)
                if (!j->skip[i] && slot[i].state == 1) {
                    c = i;
                    break;
                }
            if (c != cur) {
                cur = c;
                since = now_s();
            } else if (now_s() - since > limit_s) { /* also a child stuck before its first */
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                timed_out = 1;
                break;
            }
            usleep(20000);
        }
        /* The candidate the child was on when it ended failed with it; so did the one it was
         * about to start when it finished none (every child makes progress). */
        int64_t i = start;
        while (i < j->n && (j->skip[i] || slot[i].state == 2))
            i++;
        if (i == j->n || (slot[i].state == 0 && i > start))
            continue;
        meas_slot *sl = &slot[i];
        sl->status = timed_out ? TE_TRIAL_TIMEOUT : TE_TRIAL_RUNTIME_ERROR;
        if (timed_out)
            snprintf(sl->msg, sizeof sl->msg,
                     "no result after %.0f s: the measuring process was killed", limit_s);
        else if (WIFSIGNALED(st))
            snprintf(sl->msg, sizeof sl->msg, "the measuring process died (signal %d: %s)",
                     WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
            snprintf(sl->msg, sizeof sl->msg, "the measuring process exited with status %d",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        sl->state = 2;
    }
}

/* Uniform floats in [-1, 1) from the tuner's generator. */
static void fill_random(float *p, size_t n, te_rng *rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)(te_rng_next(rng) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static int measure(const char *op, const char *shape, int64_t trials, uint64_t seed,
                   const char *db_path, double timeout_s, te_space_kind space)
{
    if (!te_nvrtc_available()) {
        fprintf(stderr, "tessera tune: --target cuda needs NVRTC: %s\n", te_cuda_errmsg());
        return 1;
    }
    dev_probe dp;
    if (probe_device(&dp) != 0) {
        fprintf(stderr,
                "tessera tune: no CUDA device to measure on: %s\n(--dry-run compiles the "
                "candidates and checks their resources without one)\n",
                dp.err);
        return 1;
    }
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    te_ctx *ctx = build_op(op, shape, ins, &n_in, outs, &n_out);
    if (!ctx)
        return 2;
    for (int a = 0; a < n_in + n_out; a++) {
        te_tensor *t = a < n_in ? ins[a] : outs[a - n_in];
        if (te_tensor_dtype(t) != TE_F32) {
            fprintf(stderr, "tessera tune: --target cuda measures float32 operators; '%s' is %s\n",
                    te_tensor_name(t), te_dtype_str(te_tensor_dtype(t)));
            te_ctx_free(ctx);
            return 1;
        }
    }
    int sm = dp.di.sm;
    te_target tgt = dp.target;
    te_space *sp = te_space_create(ctx, op, n_in, ins, n_out, outs, space, &tgt);
    if (!sp) {
        fprintf(stderr, "tessera tune: no GPU search space for '%s': %s\n", op, te_ctx_errmsg(ctx));
        te_ctx_free(ctx);
        return 1;
    }
    /* The workload key (as the CPU tuner's) and the work of one run. */
    char wkey[512];
    te_op_params kv;
    const te_op_info *info = te_op_lookup(op);
    if (!info || te_op_params_parse(ctx, shape, &kv) != TE_OK ||
        te_op_workload_key(ctx, info, &kv, wkey, sizeof wkey) < 0) {
        fprintf(stderr, "tessera tune: %s\n", te_ctx_errmsg(ctx));
        te_ctx_free(ctx);
        return 2;
    }
    te_tensor *args[16];
    for (int a = 0; a < n_in; a++)
        args[a] = ins[a];
    for (int o = 0; o < n_out; o++)
        args[n_in + o] = outs[o];
    double flops = 0;
    {
        te_target host = te_target_host();
        te_schedule *s0 = te_schedule_create(ctx, n_out, outs);
        te_lowered *f0 = s0 ? te_lower(s0, n_in + n_out, args, "count", &host) : NULL;
        te_kernel_counts kc;
        if (f0 && te_kernel_count(f0, &kc) == TE_OK)
            flops = kc.flops;
        te_ctx_clear_error(ctx);
    }
    /* Inputs, the float64 reference, and the tolerance: float32 rounding grows with the
     * reduction length, which the largest input extent bounds (te_dtype_tolerance). */
    meas_job j = {0};
    j.ctx = ctx;
    j.n_in = n_in;
    j.n_out = n_out;
    j.ins = ins;
    j.outs = outs;
    j.sm = sm;
    int64_t longest = 1;
    te_rng rs;
    te_rng_seed(&rs, seed ^ 0x5eed);
    int rc = 0;
    for (int a = 0; a < n_in + n_out; a++) {
        te_tensor *t = args[a];
        j.bytes[a] = (size_t)te_tensor_numel(t) * sizeof(float);
        j.host[a] = malloc(j.bytes[a] ? j.bytes[a] : 1);
        if (!j.host[a])
            rc = 1;
        else if (a < n_in)
            fill_random(j.host[a], (size_t)te_tensor_numel(t), &rs);
        for (int d = 0; a < n_in && d < te_tensor_ndim(t); d++)
            longest = te_tensor_shape(t)[d] > longest ? te_tensor_shape(t)[d] : longest;
    }
    for (int o = 0; o < n_out && !rc; o++)
        if (!(j.ref[o] = malloc(sizeof(double) * (size_t)te_tensor_numel(outs[o]))))
            rc = 1;
    if (!rc && te_reference_eval(ctx, n_in, ins, (const void *const *)j.host, n_out, outs, j.ref) !=
                   TE_OK) {
        fprintf(stderr, "tessera tune: the reference: %s\n", te_ctx_errmsg(ctx));
        rc = 1;
    }
    j.tol = te_dtype_tolerance(TE_F32, longest);
    j.timing = te_cuda_timing_default();
    j.timing.min_time_s = 0.05;
    int64_t size = te_space_size(sp);
    int64_t want = size > 0 && size < trials ? size : trials;
    const char **tr = calloc((size_t)(want > 0 ? want : 1), sizeof *tr);
    cand_fig *fig = calloc((size_t)(want > 0 ? want : 1), sizeof *fig);
    int *skip = calloc((size_t)(want > 0 ? want : 1), sizeof *skip);
    meas_slot *slot = mmap(NULL, sizeof *slot * (size_t)(want > 0 ? want : 1),
                           PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    te_db *db = NULL;
    if (!tr || !fig || !skip || slot == MAP_FAILED)
        rc = 1;
    if (!rc && db_path && te_db_open(db_path, NULL, &db) != TE_OK) {
        fprintf(stderr, "tessera tune: cannot open the database %s: %s\n", db_path,
                db ? te_db_errmsg(db) : "error");
        rc = 1;
    }
    int64_t n = rc ? 0 : draw(sp, want, seed, tr);
    if (!rc && n == 0) {
        fprintf(stderr, "tessera tune: no valid GPU configuration of '%s': %s\n", op,
                te_ctx_errmsg(ctx));
        rc = 1;
    }
    if (rc)
        goto out;
    memset(slot, 0, sizeof *slot * (size_t)n);
    /* the device's identity, as gen and te_tuner_best_record look it up */
    te_db_target dbt;
    char tstore[1024], tkey[512];
    te_tuner_db_target(&tgt, &dbt, tstore, sizeof tstore);
    te_db_target_key(&dbt, tkey, sizeof tkey);
    printf("tune --target cuda: %s %s on %s (sm_%d, %d SMs, driver %s, %s)\n", op, shape,
           dp.di.name, sm, dp.di.sm_count, dbt.driver, dbt.compiler);
    printf("  %lld distinct candidates of %s (seed %llu); tolerance %.2g; database %s\n",
           (long long)n, space_words(size), (unsigned long long)seed, j.tol,
           db_path ? db_path : "none (give --db FILE to record)");
    printf("  target key: %s\n", tkey);
    double t0 = now_s();
    compile_all(ctx, n_in, ins, n_out, outs, tr, n, &sm, 1, fig);
    int npruned = 0, nfail = 0;
    for (int64_t i = 0; i < n; i++) {
        skip[i] = !fig[i].ok || fig[i].pruned != NULL;
        npruned += fig[i].ok && fig[i].pruned;
        nfail += !fig[i].ok;
    }
    printf("  compiled in %.1f s: %lld ok, %d failed, %d pruned by the resource check\n",
           now_s() - t0, (long long)(n - nfail), nfail, npruned);
    t0 = now_s();
    j.tr = tr;
    j.skip = skip;
    j.n = n;
    measure_all(&j, slot, timeout_s > 0 ? timeout_s : 30.0);
    double meas_s = now_s() - t0;
    /* Report and record, in draw order. */
    int64_t best = -1, nok = 0;
    int64_t job = 0;
    if (db)
        te_db_job_start(db, "tessera tune --target cuda", n, &job);
    te_db_trial *rows = calloc((size_t)n, sizeof *rows);
    for (int64_t i = 0; i < n; i++) {
        te_trial_status stt;
        const char *msg;
        if (!fig[i].ok)
            stt = TE_TRIAL_COMPILE_ERROR, msg = fig[i].err;
        else if (fig[i].pruned)
            stt = TE_TRIAL_INVALID_SCHEDULE, msg = fig[i].pruned;
        else
            stt = (te_trial_status)slot[i].status, msg = slot[i].msg;
        double sec = stt == TE_TRIAL_OK ? slot[i].median_ms * 1e-3 : NAN;
        double gf = stt == TE_TRIAL_OK && flops > 0 && sec > 0 ? flops / sec * 1e-9 : NAN;
        if (stt == TE_TRIAL_OK) {
            nok++;
            if (best < 0 || slot[i].median_ms < slot[best].median_ms)
                best = i;
        }
        printf("  [%3lld/%lld] %-16s", (long long)i + 1, (long long)n, te_trial_status_str(stt));
        if (stt == TE_TRIAL_OK)
            printf(" %9.4f ms %9.1f GFLOP/s  regs %3d smem %6d  (%d runs)\n", slot[i].median_ms, gf,
                   fig[i].regs, fig[i].smem, slot[i].runs);
        else
            printf(" %s\n", msg);
        if (rows) {
            te_db_trial *r = &rows[i];
            r->workload.key = wkey;
            r->workload.flops = flops;
            r->target = dbt;
            r->trace = tr[i];
            r->status = stt;
            r->error = stt == TE_TRIAL_OK ? NULL : msg;
            r->median_s = sec;
            r->spread_s = NAN;
            r->repeats = stt == TE_TRIAL_OK ? slot[i].runs : 0;
            r->gflops = gf;
            r->job_id = job;
            r->bytes = NAN;
            r->transient = stt == TE_TRIAL_TIMEOUT;
        }
    }
    if (db && rows && te_db_record_trials(db, rows, (size_t)n) != TE_OK) {
        fprintf(stderr, "tessera tune: recording the trials: %s\n", te_db_errmsg(db));
        rc = 1;
    }
    if (db && job)
        te_db_job_finish(db, job, rc ? TE_JOB_FAILED : TE_JOB_FINISHED);
    free(rows);
    printf("measured %lld candidates in %.1f s: %lld ok", (long long)(n - nfail - npruned), meas_s,
           (long long)nok);
    if (db && !rc)
        printf(", %lld trials recorded in %s", (long long)n, db_path);
    printf("\n");
    if (best >= 0) {
        double sec = slot[best].median_ms * 1e-3;
        printf("best: %.4f ms", slot[best].median_ms);
        if (flops > 0)
            printf(", %.1f GFLOP/s", flops / sec * 1e-9);
        printf(" (candidate %lld)\n%s\n", (long long)best + 1, tr[best]);
    } else {
        printf("no candidate ran correctly\n");
        rc = 1;
    }
out:
    if (db)
        te_db_close(db);
    for (int a = 0; a < n_in + n_out; a++)
        free(j.host[a]);
    for (int o = 0; o < n_out; o++)
        free(j.ref[o]);
    if (slot != MAP_FAILED)
        munmap(slot, sizeof *slot * (size_t)(want > 0 ? want : 1));
    free(tr);
    free(fig);
    free(skip);
    te_ctx_free(ctx);
    return rc;
}

int te__tune_cuda(const char *op, const char *shape, int64_t trials, const char *sms, uint64_t seed,
                  int dry_run_only, int json, const char *db_path, double timeout_s,
                  te_space_kind space)
{
    int sm[MAX_SMS];
    int nsm = parse_sms(sms ? sms : "80,90", sm);
    if (nsm <= 0) {
        fprintf(stderr,
                "tessera tune: --sm takes up to %d SM versions separated by commas (80,90), not "
                "'%s'\n",
                MAX_SMS, sms);
        return 2;
    }
    if (!dry_run_only) {
        if (sms) {
            fprintf(stderr, "tessera tune: --sm applies to --dry-run; measuring compiles for the "
                            "device's own SM\n");
            return 2;
        }
        if (json) {
            fprintf(stderr, "tessera tune: --json applies to --dry-run with --target cuda\n");
            return 2;
        }
        return measure(op, shape, trials, seed, db_path, timeout_s, space);
    }
    if (!te_nvrtc_available()) {
        fprintf(stderr, "tessera tune: --dry-run needs NVRTC: %s\n", te_cuda_errmsg());
        return 1;
    }
    return dry_run(op, shape, trials, sm, nsm, seed, json, space);
}
