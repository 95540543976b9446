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
 * Without --dry-run the candidates are to be measured on the GPU (in a forked child, checked
 * against the reference first); that part needs a device and is not written yet, so the
 * command says so and exits 1 (docs/GPU.md).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/autotune.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
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
                 : te_cuda_build(s, na, args, "cand", &tgt, &m);
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

static int dry_run(const char *op, const char *shape, int64_t trials, const int *sms, int nsm,
                   uint64_t seed, int json)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[16], *outs[4];
    int n_in = 16, n_out = 4;
    if (!ctx || te_op_build(ctx, op, shape, ins, &n_in, outs, &n_out) != TE_OK) {
        fprintf(stderr, "tessera tune: %s\n", ctx ? te_ctx_errmsg(ctx) : "out of memory");
        te_ctx_free(ctx);
        return 2;
    }
    te_target t0 = te_target_cuda(sms[0]);
    te_space *sp = te_space_create(ctx, op, n_in, ins, n_out, outs, TE_SPACE_TEMPLATE, &t0);
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
    /* distinct candidates, as the search would draw them */
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
    if (n == 0) {
        fprintf(stderr, "tessera tune: no valid GPU configuration of '%s': %s\n", op,
                te_ctx_errmsg(ctx));
        free(tr), free(fig), free(v);
        te_ctx_free(ctx);
        return 1;
    }
    if (!json)
        printf("tune --target cuda --dry-run: %s %s, %lld distinct candidates of a space of %lld "
               "(seed %llu), compiled with NVRTC %d.%d, nothing measured or recorded\n",
               op, shape, (long long)n, (long long)size, (unsigned long long)seed,
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

int te__tune_cuda(const char *op, const char *shape, int64_t trials, const char *sms, uint64_t seed,
                  int dry_run_only, int json)
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
        fprintf(stderr,
                "tessera tune: measuring candidates on a GPU is not written yet (%s); "
                "--dry-run compiles the candidates with NVRTC and checks their resources "
                "without one\n",
                te_cuda_available() ? "a device is present"
                                    : "and this machine has no CUDA device either");
        return 1;
    }
    if (!te_nvrtc_available()) {
        fprintf(stderr, "tessera tune: --dry-run needs NVRTC: %s\n", te_cuda_errmsg());
        return 1;
    }
    return dry_run(op, shape, trials, sm, nsm, seed, json);
}
