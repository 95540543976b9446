/*
 * autotune/measure.c: the measurer. Builder: every candidate of a batch is compiled by the C
 * backend's parallel builder (te__c_build_sources: one compiler per core, shared on-disk
 * cache). Runner: the compiled batch runs in a forked child process that reports each
 * candidate through a pipe as soon as it is done; the parent watches the pipe with a per-
 * candidate deadline, so a candidate that crashes (the child dies) or hangs (the parent kills
 * the child) is recorded and the rest of the batch continues in a new child.
 *
 * Why a child per batch and not threads: a generated kernel can do anything (segfault, loop
 * forever, scribble over memory), and OpenMP's runtime is not fork-safe once its thread pool
 * exists. This process therefore never runs a parallel region itself; each child starts with
 * a fresh OpenMP runtime, runs OpenMP kernels, and exits.
 *
 * Checking: before any timing, every candidate runs once on random inputs with its outputs
 * poisoned (NaN for floats), and its outputs are compared with the reference. The reference
 * is computed once per workload: te_reference_eval in float64 when that is cheap, else the
 * default schedule (no primitive applied, which lowers to the plain loop nest of each
 * definition; the test suite checks it against te_reference_eval for every operator).
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

#include "autotune/tune_impl.h"
#include "backends/c/c_backend.h"
#include "backends/c/cc.h"

#define MAX_ARGS 32

struct te__measurer {
    te_target target;
    te_measure_options o;
    int n_in, n_out;
    te_tensor *args[MAX_ARGS];
    void *bufs[MAX_ARGS];
    size_t bytes[MAX_ARGS];
    void *ref[MAX_ARGS]; /* outputs only (index n_in + o); shared mappings */
    double tol;
    int ref_ok;
    const char *ref_kind;
    double best_s;
    char *flush;
    size_t flush_bytes;
    double compile_s, run_s; /* of the last batch */
};

void te__cand_clear(te__cand *c)
{
    free(c->trace);
    memset(c, 0, sizeof *c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill_random(void *p, te_dtype dt, size_t n, uint64_t seed)
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
        default:
            break;
        }
    }
}

static void poison(void *p, te_dtype dt, size_t n)
{
    if (dt == TE_F32) {
        float *f = p;
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
    } else if (dt == TE_F64) {
        double *f = p;
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
    } else {
        memset(p, 0x5b, n * te_dtype_size(dt));
    }
}

static double load_as_double(const void *p, te_dtype dt, size_t i)
{
    switch (dt) {
    case TE_F32:
        return ((const float *)p)[i];
    case TE_F64:
        return ((const double *)p)[i];
    case TE_I32:
        return ((const int32_t *)p)[i];
    case TE_I64:
        return (double)((const int64_t *)p)[i];
    case TE_I8:
        return ((const int8_t *)p)[i];
    case TE_U8:
    case TE_BOOL:
        return ((const uint8_t *)p)[i];
    default:
        return NAN;
    }
}

static void store_from_double(void *p, te_dtype dt, size_t i, double v)
{
    switch (dt) {
    case TE_F32:
        ((float *)p)[i] = (float)v;
        break;
    case TE_F64:
        ((double *)p)[i] = v;
        break;
    case TE_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case TE_I64:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    case TE_I8:
        ((int8_t *)p)[i] = (int8_t)v;
        break;
    case TE_U8:
    case TE_BOOL:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    default:
        break;
    }
}

te__measurer *te__measurer_create(int n_in, te_tensor *const *ins, int n_out,
                                  te_tensor *const *outs, const te_target *target,
                                  const te_measure_options *o, char *err, size_t errsize)
{
    if (n_in < 0 || n_out < 1 || n_in + n_out > MAX_ARGS || (n_in && !ins) || !outs) {
        snprintf(err, errsize, "measurer: between 1 and %d kernel arguments are supported",
                 MAX_ARGS);
        return NULL;
    }
    te__measurer *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    m->target = target ? *target : te_target_host();
    if (o)
        m->o = *o;
    if (m->o.timeout_s <= 0)
        m->o.timeout_s = 10;
    if (m->o.min_time_s <= 0)
        m->o.min_time_s = 0.01;
    if (m->o.min_repeats <= 0)
        m->o.min_repeats = 3;
    if (m->o.max_repeats <= 0)
        m->o.max_repeats = 200;
    if (m->o.max_repeats < m->o.min_repeats)
        m->o.max_repeats = m->o.min_repeats;
    if (m->o.slow_factor == 0)
        m->o.slow_factor = 20;
    m->n_in = n_in;
    m->n_out = n_out;
    for (int i = 0; i < n_in + n_out; i++) {
        te_tensor *t = i < n_in ? ins[i] : outs[i - n_in];
        if (!t) {
            snprintf(err, errsize, "measurer: argument %d is NULL", i);
            te__measurer_free(m);
            return NULL;
        }
        m->args[i] = t;
        size_t n = (size_t)te_tensor_numel(t), es = te_dtype_size(te_tensor_dtype(t));
        m->bytes[i] = n * es;
        m->bufs[i] = aligned_alloc(64, (m->bytes[i] + 63) / 64 * 64 + 64);
        if (!m->bufs[i]) {
            snprintf(err, errsize, "out of memory for argument '%s'", te_tensor_name(t));
            te__measurer_free(m);
            return NULL;
        }
        if (i < n_in)
            fill_random(m->bufs[i], te_tensor_dtype(t), n, 1000 + (uint64_t)i);
        else {
            m->ref[i] = mmap(NULL, m->bytes[i] + 64, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (m->ref[i] == MAP_FAILED) {
                m->ref[i] = NULL;
                snprintf(err, errsize, "out of memory for the reference of '%s'",
                         te_tensor_name(t));
                te__measurer_free(m);
                return NULL;
            }
        }
    }
    if (m->o.flush_cache) {
        m->flush_bytes = 64u << 20;
        m->flush = malloc(m->flush_bytes);
    }
    return m;
}

void te__measurer_free(te__measurer *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_in + m->n_out; i++) {
        free(m->bufs[i]);
        if (m->ref[i])
            munmap(m->ref[i], m->bytes[i] + 64);
    }
    free(m->flush);
    free(m);
}

const char *te__measurer_ref_kind(const te__measurer *m) { return m ? m->ref_kind : NULL; }
double te__measurer_tolerance(const te__measurer *m) { return m ? m->tol : 0; }
void te__measurer_set_best(te__measurer *m, double best_s)
{
    if (m)
        m->best_s = best_s;
}

void te__measurer_times(const te__measurer *m, double *compile_s, double *run_s)
{
    *compile_s = m ? m->compile_s : 0;
    *run_s = m ? m->run_s : 0;
}

double te__measurer_bytes(const te__measurer *m)
{
    double b = 0;
    for (int i = 0; m && i < m->n_in + m->n_out; i++)
        b += (double)m->bytes[i];
    return b;
}

/* ---- Children ----------------------------------------------------------------------------- */

/* Set up a measuring child: it ignores the terminal's SIGINT (the parent decides when to
 * stop), dies with its parent, and runs OpenMP kernels with the target's thread count. */
static void child_setup(const te_target *t)
{
    signal(SIGINT, SIG_IGN);
    /* A crash must kill the child, whatever handlers the host program installed. */
    const int crash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE, SIGTERM};
    for (size_t i = 0; i < sizeof crash / sizeof crash[0]; i++)
        signal(crash[i], SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (t && t->num_cores > 0)
        omp_set_num_threads(t->num_cores);
}

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGILL:
        return "SIGILL";
    case SIGABRT:
        return "SIGABRT";
    case SIGKILL:
        return "SIGKILL";
    default:
        return strsignal(sig);
    }
}

/* Waits up to timeout_s for a child that signals completion by closing the pipe's write end
 * (exiting). Kills it at the deadline. Returns the wait status, or -1 after a kill. */
static int wait_child(pid_t pid, int rfd, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        struct pollfd p = {rfd, POLLIN, 0};
        int r = poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
        if (r > 0) {
            char buf[64];
            ssize_t k = read(rfd, buf, sizeof buf);
            if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

int te__run_in_child(void (*fn)(void *user, void *out), void *user, void *out, size_t size,
                     double timeout_s)
{
    void *shm =
        mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED)
        return TE_ERR_NOMEM;
    int fds[2];
    if (pipe(fds) != 0) {
        munmap(shm, size ? size : 1);
        return TE_ERR_IO;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        munmap(shm, size ? size : 1);
        return TE_ERR_IO;
    }
    if (pid == 0) {
        close(fds[0]);
        child_setup(NULL);
        fn(user, shm);
        _exit(0);
    }
    close(fds[1]);
    int st = wait_child(pid, fds[0], timeout_s);
    close(fds[0]);
    int rc = st == -1 ? TE_ERR_TIMEOUT
                      : (WIFEXITED(st) && WEXITSTATUS(st) == 0 ? TE_OK : TE_ERR_RUNTIME);
    if (rc == TE_OK && out)
        memcpy(out, shm, size);
    munmap(shm, size ? size : 1);
    return rc;
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
            rc = te__run_in_child(run_reference_child, &j, NULL, 0, limit);
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
        /* float32 rounding grows with the reduction length; a wrong schedule (a missed tail,
         * a wrong index, an unwritten element) is off by O(1). */
        m->tol = 1e-5 * fmax(1.0, pow((double)red, 0.75));
        if (strcmp(m->ref_kind, "default schedule") == 0)
            m->tol *= 2;
        if (m->tol > 1e-2)
            m->tol = 1e-2;
    }
    m->ref_ok = 1;
    return TE_OK;
}

/* ---- Running one candidate (in the child) --------------------------------------------------- */

typedef struct {
    int32_t idx;
    int32_t kind; /* 0: begin, 1: result */
    int32_t status;
    int32_t repeats;
    double median_s, spread_s, max_err;
    char msg[400];
} rmsg;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Max |got - ref| / max(1, |ref|) over every output; NaN counts as infinite. */
static double check_outputs(const te__measurer *m, char *msg, size_t msgsize)
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

static void flush_cache(te__measurer *m)
{
    if (!m->flush)
        return;
    for (size_t i = 0; i < m->flush_bytes; i += 64)
        m->flush[i] = (char)(m->flush[i] + 1);
}

static void run_one(te__measurer *m, te_packed_fn fn, rmsg *r)
{
    for (int o = m->n_in; o < m->n_in + m->n_out; o++)
        poison(m->bufs[o], te_tensor_dtype(m->args[o]), (size_t)te_tensor_numel(m->args[o]));
    double t0 = now_s();
    int rc = fn(m->bufs);
    double first = now_s() - t0;
    if (rc != 0) {
        r->status = TE_TRIAL_RUNTIME_ERROR;
        snprintf(r->msg, sizeof r->msg, "the kernel returned %d (allocation failed)", rc);
        return;
    }
    r->msg[0] = 0;
    r->max_err = check_outputs(m, r->msg, sizeof r->msg);
    if (!(r->max_err <= m->tol)) {
        r->status = TE_TRIAL_WRONG_ANSWER;
        return;
    }
    r->msg[0] = 0;
    r->status = TE_TRIAL_OK;
    if (m->o.slow_factor > 0 && m->best_s > 0 && first > m->o.slow_factor * m->best_s) {
        /* Far slower than the best: the check run is timing enough. */
        r->median_s = first;
        r->spread_s = 0;
        r->repeats = 1;
        return;
    }
    if (first < 0.005)
        fn(m->bufs); /* warm-up (a longer check run has warmed caches and pages itself) */
    int cap = m->o.max_repeats;
    double times[1024], sum = 0;
    if (cap > 1024)
        cap = 1024;
    int k = 0;
    while (k < cap && (k < m->o.min_repeats || sum < m->o.min_time_s)) {
        flush_cache(m);
        double a = now_s();
        fn(m->bufs);
        times[k] = now_s() - a;
        sum += times[k++];
    }
    double mean = sum / k, var = 0;
    for (int q = 0; q < k; q++)
        var += (times[q] - mean) * (times[q] - mean);
    qsort(times, (size_t)k, sizeof times[0], cmp_double);
    r->median_s = k % 2 ? times[k / 2] : 0.5 * (times[k / 2 - 1] + times[k / 2]);
    r->spread_s = k > 1 ? sqrt(var / (k - 1)) : 0;
    r->repeats = k;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *z = p;
    while (n) {
        ssize_t k = write(fd, z, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        z += k;
        n -= (size_t)k;
    }
    return 0;
}

static void runner_child(te__measurer *m, te_packed_fn *fns, const int *idx, int n, int start,
                         int wfd)
{
    child_setup(&m->target);
    for (int q = start; q < n; q++) {
        rmsg r;
        memset(&r, 0, sizeof r);
        r.idx = q;
        r.kind = 0;
        if (write_all(wfd, &r, sizeof r))
            _exit(4);
        r.kind = 1;
        run_one(m, fns[idx[q]], &r);
        if (write_all(wfd, &r, sizeof r))
            _exit(4);
    }
    _exit(0);
}

/* Reads one message; 1 read, 0 EOF, -1 error. */
static int read_msg(int fd, rmsg *r)
{
    char *z = (char *)r;
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t k = read(fd, z + got, sizeof *r - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return got ? -1 : 0;
        got += (size_t)k;
    }
    return 1;
}

/* Runs the built candidates (fns[idx[0..n)]) in children; results into c[idx[q]]. */
static void run_batch(te__measurer *m, te__cand *c, te_packed_fn *fns, const int *idx, int n)
{
    int q = 0;
    while (q < n) {
        int fds[2];
        if (pipe(fds) != 0) {
            for (; q < n; q++) {
                c[idx[q]].status = TE_TRIAL_OTHER_ERROR;
                snprintf(c[idx[q]].err, sizeof c[idx[q]].err, "pipe: %s", strerror(errno));
            }
            return;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[0]);
            close(fds[1]);
            for (; q < n; q++) {
                c[idx[q]].status = TE_TRIAL_OTHER_ERROR;
                snprintf(c[idx[q]].err, sizeof c[idx[q]].err, "fork: %s", strerror(errno));
            }
            return;
        }
        if (pid == 0) {
            close(fds[0]);
            runner_child(m, fns, idx, n, q, fds[1]);
        }
        close(fds[1]);
        int cur = -1; /* the candidate the child is running */
        double deadline = now_s() + m->o.timeout_s + 5.0;
        int killed = 0, next = n;
        for (;;) {
            double left = deadline - now_s();
            if (left <= 0) {
                kill(pid, SIGKILL);
                killed = 1;
                break;
            }
            struct pollfd p = {fds[0], POLLIN, 0};
            int pr = poll(&p, 1, (int)(left * 1000) + 1);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr <= 0)
                continue;
            rmsg r;
            int rr = read_msg(fds[0], &r);
            if (rr <= 0)
                break;
            if (r.idx < q || r.idx >= n)
                continue;
            if (r.kind == 0) {
                cur = r.idx;
                deadline = now_s() + m->o.timeout_s;
            } else {
                te__cand *x = &c[idx[r.idx]];
                x->status = (te_trial_status)r.status;
                x->median_s = r.status == TE_TRIAL_OK ? r.median_s : NAN;
                x->spread_s = r.status == TE_TRIAL_OK ? r.spread_s : NAN;
                x->repeats = r.repeats;
                x->max_err = r.max_err;
                snprintf(x->err, sizeof x->err, "%s", r.msg);
                cur = -1;
                deadline = now_s() + m->o.timeout_s + 5.0;
            }
        }
        close(fds[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (cur >= 0) {
            te__cand *x = &c[idx[cur]];
            if (killed) {
                x->status = TE_TRIAL_TIMEOUT;
                snprintf(x->err, sizeof x->err,
                         "no result within %.3g s (check run plus timing); the runner was killed",
                         m->o.timeout_s);
            } else {
                x->status = TE_TRIAL_RUNTIME_ERROR;
                if (WIFSIGNALED(st))
                    snprintf(x->err, sizeof x->err, "the kernel crashed: killed by signal %d (%s)",
                             WTERMSIG(st), sig_name(WTERMSIG(st)));
                else
                    snprintf(x->err, sizeof x->err, "the runner exited with status %d",
                             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            }
            x->median_s = x->spread_s = NAN;
            next = cur + 1;
        } else {
            /* Between candidates: continue after the last one reported. */
            next = n;
            for (int k = q; k < n; k++)
                if (c[idx[k]].status == TE_TRIAL_STATUS_COUNT) {
                    next = k;
                    break;
                }
            if (next < n && (killed || !WIFEXITED(st))) {
                /* The child died outside any candidate: blame the next one, so the loop
                 * always makes progress. */
                te__cand *x = &c[idx[next]];
                x->status = TE_TRIAL_OTHER_ERROR;
                snprintf(x->err, sizeof x->err, "the runner died before running it");
                next++;
            }
        }
        q = next;
    }
}

/* ---- Building: several candidates per compiler run ------------------------------------------ */

/* A generated source is a header comment, a prelude (includes, macros, vector typedefs, inline
 * helpers) that depends only on the target and the helpers used, and the kernel and its packed
 * entry. Candidates with the same prelude are compiled together, several per translation
 * unit, after renaming their kernels apart: the compiler's fixed start-up cost (driver, cc1,
 * assembler, linker) is then paid once per unit instead of once per candidate (about 30% of a
 * typical batch's compile time). Sources that do not have that shape compile alone. */
typedef struct {
    const char *src;
    size_t pre_off, pre_len; /* prelude */
    size_t body_off;         /* "int cand(" line to the end */
} split_src;

static int split_source(const char *src, split_src *out)
{
    out->src = src;
    if (strncmp(src, "/*", 2) != 0)
        return 0;
    const char *e = strstr(src, "*/");
    if (!e)
        return 0;
    const char *pre = e + 2;
    const char *k = strstr(pre, "\nint cand(");
    if (!k)
        return 0;
    out->pre_off = (size_t)(pre - src);
    out->pre_len = (size_t)(k + 1 - pre);
    out->body_off = (size_t)(k + 1 - src);
    return 1;
}

static int is_ident(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* Appends body with the identifier `cand` (and cand_packed) renamed to cand<q>_. */
static void append_renamed(char **buf, size_t *len, size_t *cap, const char *body, int q)
{
    size_t n = strlen(body);
    size_t need = *len + n + n / 4 + 64;
    if (need > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < need)
            nc *= 2;
        char *b = realloc(*buf, nc);
        if (!b)
            return;
        *buf = b;
        *cap = nc;
    }
    for (size_t i = 0; i < n;) {
        if (!strncmp(body + i, "cand", 4) && (i == 0 || !is_ident(body[i - 1])) &&
            (!is_ident(body[i + 4]) || !strncmp(body + i + 4, "_packed", 7))) {
            if (*len + 32 + (n - i) > *cap) {
                size_t nc = *cap * 2 + 64;
                char *b = realloc(*buf, nc);
                if (!b)
                    return;
                *buf = b;
                *cap = nc;
            }
            *len += (size_t)sprintf(*buf + *len, "cand%d_", q);
            i += 4;
            if (!strncmp(body + i, "_packed", 7))
                i += 1; /* cand_packed -> cand<q>_packed */
            continue;
        }
        (*buf)[(*len)++] = body[i++];
    }
    (*buf)[*len] = 0;
}

typedef struct {
    int first, n; /* members: order[first .. first + n) */
} unit;

static te__cc_opts cc_opts(const te_target *t)
{
    te__cc_opts o = {t->cc, t->cflags, NULL};
    return o;
}

/* Compiles sources[i] for members; on success fills fns[] (per candidate index) and libs. */
static void build_units(te__measurer *m, te__cand *c, const int *which, int k, te_packed_fn *fns,
                        te__cc_lib **libs_out, int *nlibs)
{
    split_src *sp = calloc((size_t)k, sizeof *sp);
    int *ok = calloc((size_t)k, sizeof *ok), *order = calloc((size_t)k, sizeof *order);
    unit *units = calloc((size_t)k, sizeof *units);
    char **usrc = calloc((size_t)k, sizeof *usrc);
    if (!sp || !ok || !order || !units || !usrc)
        goto out;
    /* Order: splittable candidates grouped by prelude, then the rest alone. */
    int no = 0, nu = 0;
    for (int q = 0; q < k; q++)
        ok[q] = split_source(c[which[q]].source, &sp[q]);
    int jobs = m->o.build_jobs > 0 ? m->o.build_jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1)
        jobs = 1;
    int *used = calloc((size_t)k, sizeof *used);
    if (!used)
        goto out;
    for (int q = 0; q < k; q++) {
        if (used[q])
            continue;
        used[q] = 1;
        int start = no;
        order[no++] = q;
        if (ok[q])
            for (int r = q + 1; r < k; r++)
                if (!used[r] && ok[r] && sp[r].pre_len == sp[q].pre_len &&
                    !memcmp(sp[r].src + sp[r].pre_off, sp[q].src + sp[q].pre_off, sp[q].pre_len)) {
                    used[r] = 1;
                    order[no++] = r;
                }
        /* Chunks: one unit per compiler, at most 8 candidates each (measured on 2 cores:
         * 10% faster than two units of 4 per compiler, 30% faster than one per candidate). */
        int g = no - start, per = (k + jobs - 1) / jobs;
        if (per > 8)
            per = 8;
        if (per < 1 || !ok[q])
            per = 1;
        for (int f = start; f < no; f += per) {
            units[nu].first = f;
            units[nu].n = no - f < per ? no - f : per;
            nu++;
        }
        (void)g;
    }
    free(used);
    for (int u = 0; u < nu; u++) {
        if (units[u].n == 1) {
            usrc[u] = NULL; /* compiled as is */
            continue;
        }
        size_t len = 0, cap = 0;
        char *buf = NULL;
        const split_src *s0 = &sp[order[units[u].first]];
        cap = s0->pre_len + 256;
        buf = malloc(cap);
        if (!buf)
            continue;
        len = (size_t)snprintf(buf, cap, "/* %d Tessera tuning candidates in one unit */",
                               units[u].n);
        memcpy(buf + len, s0->src + s0->pre_off, s0->pre_len);
        len += s0->pre_len;
        buf[len] = 0;
        for (int f = 0; f < units[u].n; f++) {
            int q = order[units[u].first + f];
            /* Each candidate keeps its header comment (operator, shapes, trace) above it. */
            size_t hl = sp[q].pre_off;
            if (len + hl + 2 >= cap) {
                char *nb = realloc(buf, (len + hl) * 2 + 64);
                if (!nb)
                    break;
                buf = nb;
                cap = (len + hl) * 2 + 64;
            }
            memcpy(buf + len, sp[q].src, hl);
            len += hl;
            buf[len++] = '\n';
            buf[len] = 0;
            append_renamed(&buf, &len, &cap, sp[q].src + sp[q].body_off, f);
        }
        usrc[u] = buf;
    }
    const char **srcs = calloc((size_t)nu, sizeof *srcs);
    int *retry = calloc((size_t)k, sizeof *retry), nretry = 0;
    int *st = calloc((size_t)nu, sizeof *st);
    te__cc_lib **libs = calloc((size_t)nu, sizeof *libs);
    char **errs = calloc((size_t)nu, sizeof *errs);
    char *errmem = malloc((size_t)nu * TE__ERR_LEN);
    if (srcs && retry && st && libs && errs && errmem) {
        for (int u = 0; u < nu; u++) {
            srcs[u] = usrc[u] ? usrc[u] : c[which[order[units[u].first]]].source;
            errs[u] = errmem + (size_t)u * TE__ERR_LEN;
        }
        te__cc_opts o = cc_opts(&m->target);
        te__cc_build_many(nu, srcs, &o, m->o.build_jobs, libs, st, errs, TE__ERR_LEN);
        for (int u = 0; u < nu; u++) {
            if (st[u] == TE_OK && libs[u]) {
                libs_out[(*nlibs)++] = libs[u];
                for (int f = 0; f < units[u].n; f++) {
                    int q = order[units[u].first + f];
                    te__cand *x = &c[which[q]];
                    char sym[64];
                    if (units[u].n == 1)
                        snprintf(sym, sizeof sym, "cand_packed");
                    else
                        snprintf(sym, sizeof sym, "cand%d_packed", f);
                    void *p = te__cc_lib_sym(libs[u], sym);
                    if (p) {
                        memcpy(&fns[which[q]], &p, sizeof p);
                    } else {
                        x->status = TE_TRIAL_LOAD_ERROR;
                        snprintf(x->err, sizeof x->err, "symbol '%s' not found in %s", sym,
                                 te__cc_lib_so_path(libs[u]));
                        x->done = 1;
                    }
                }
                continue;
            }
            if (units[u].n > 1) {
                /* One bad member fails its unit: its members are rebuilt alone (below). */
                for (int f = 0; f < units[u].n; f++)
                    retry[nretry++] = order[units[u].first + f];
                continue;
            }
            te__cand *x = &c[which[order[units[u].first]]];
            x->status = st[u] == TE_ERR_COMPILE ? TE_TRIAL_COMPILE_ERROR
                        : st[u] == TE_ERR_LOAD  ? TE_TRIAL_LOAD_ERROR
                                                : TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, "%s", errs[u]);
            x->done = 1;
        }
        if (nretry) {
            const char **rs = calloc((size_t)nretry, sizeof *rs);
            int *rst = calloc((size_t)nretry, sizeof *rst);
            te__cc_lib **rl = calloc((size_t)nretry, sizeof *rl);
            char **re = calloc((size_t)nretry, sizeof *re);
            if (rs && rst && rl && re) {
                for (int r = 0; r < nretry; r++) {
                    te__cand *x = &c[which[retry[r]]];
                    rs[r] = x->source;
                    re[r] = x->err;
                }
                te__cc_build_many(nretry, rs, &o, m->o.build_jobs, rl, rst, re, TE__ERR_LEN);
                for (int r = 0; r < nretry; r++) {
                    te__cand *x = &c[which[retry[r]]];
                    void *p = rst[r] == TE_OK ? te__cc_lib_sym(rl[r], "cand_packed") : NULL;
                    if (p) {
                        libs_out[(*nlibs)++] = rl[r];
                        memcpy(&fns[which[retry[r]]], &p, sizeof p);
                        continue;
                    }
                    te__cc_lib_free(rl[r]);
                    x->status = rst[r] == TE_ERR_COMPILE                   ? TE_TRIAL_COMPILE_ERROR
                                : rst[r] == TE_ERR_LOAD || rst[r] == TE_OK ? TE_TRIAL_LOAD_ERROR
                                                                           : TE_TRIAL_OTHER_ERROR;
                    if (rst[r] == TE_OK)
                        snprintf(x->err, sizeof x->err, "symbol 'cand_packed' not found");
                    x->done = 1;
                }
            }
            free(rs);
            free(rst);
            free(rl);
            free(re);
        }
    }
    free(retry);
    free(srcs);
    free(st);
    free(libs);
    free(errs);
    free(errmem);
out:
    for (int u = 0; usrc && u < k; u++)
        free(usrc[u]);
    free(usrc);
    free(units);
    free(order);
    free(ok);
    free(sp);
}

void te__measure_batch(te__measurer *m, te__cand *c, int n)
{
    if (!m || n <= 0)
        return;
    int *which = calloc((size_t)n, sizeof *which), *ridx = calloc((size_t)n, sizeof *ridx);
    te_packed_fn *fns = calloc((size_t)n, sizeof *fns);
    te__cc_lib **libs = calloc((size_t)n, sizeof *libs);
    int k = 0, nlibs = 0, nrun = 0;
    if (!which || !ridx || !fns || !libs) {
        for (int i = 0; i < n; i++)
            if (!c[i].done) {
                c[i].status = TE_TRIAL_OTHER_ERROR;
                snprintf(c[i].err, sizeof c[i].err, "out of memory");
                c[i].done = 1;
            }
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (c[i].done)
            continue;
        if (!c[i].source) {
            c[i].status = TE_TRIAL_OTHER_ERROR;
            snprintf(c[i].err, sizeof c[i].err, "no source");
            c[i].done = 1;
            continue;
        }
        c[i].err[0] = 0;
        which[k++] = i;
    }
    if (k == 0)
        goto out;
    /* The compile limit for tuning (cc.c reads $TESSERA_CC_TIMEOUT): a candidate that takes
     * longer than this to compile is not worth the time it would cost every batch. */
    const char *user_limit = getenv("TESSERA_CC_TIMEOUT");
    int set_limit = m->o.compile_timeout_s > 0 || !user_limit || !*user_limit;
    char *saved = user_limit ? strdup(user_limit) : NULL;
    if (set_limit) {
        char v[32];
        snprintf(v, sizeof v, "%g", m->o.compile_timeout_s > 0 ? m->o.compile_timeout_s : 20.0);
        setenv("TESSERA_CC_TIMEOUT", v, 1);
    }
    double t0 = now_s();
    build_units(m, c, which, k, fns, libs, &nlibs);
    m->compile_s = now_s() - t0;
    if (set_limit) {
        if (saved)
            setenv("TESSERA_CC_TIMEOUT", saved, 1);
        else
            unsetenv("TESSERA_CC_TIMEOUT");
    }
    free(saved);
    for (int q = 0; q < k; q++) {
        te__cand *x = &c[which[q]];
        if (x->done)
            continue;
        x->median_s = x->spread_s = NAN;
        if (!fns[which[q]]) {
            x->status = TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, "not built");
            x->done = 1;
            continue;
        }
        x->status = TE_TRIAL_STATUS_COUNT; /* pending */
        ridx[nrun++] = which[q];
    }
    t0 = now_s();
    if (nrun && m->ref_ok)
        run_batch(m, c, fns, ridx, nrun);
    m->run_s = now_s() - t0;
    for (int q = 0; q < nrun; q++) {
        te__cand *x = &c[ridx[q]];
        if (x->status == TE_TRIAL_STATUS_COUNT) {
            x->status = TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, m->ref_ok ? "not run" : "no reference output");
        }
        x->done = 1;
    }
out:
    for (int i = 0; libs && i < nlibs; i++)
        te__cc_lib_free(libs[i]);
    free(which);
    free(ridx);
    free(fns);
    free(libs);
}
