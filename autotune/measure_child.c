/*
 * autotune/measure_child.c: the runner. The compiled batch runs in a forked child process that
 * reports each candidate through a pipe as soon as it is done; the parent watches the pipe with
 * a per-candidate deadline, so a candidate that crashes (the child dies) or hangs (the parent
 * kills the child) is recorded and the rest of the batch continues in a new child.
 *
 * Why a child per batch and not threads: a generated kernel can do anything (segfault, loop
 * forever, scribble over memory), and OpenMP's runtime is not fork-safe once its thread pool
 * exists. This process therefore never runs a parallel region itself; each child starts with
 * a fresh OpenMP runtime, runs OpenMP kernels, and exits.
 *
 * In the child, each candidate first runs once on the poisoned outputs and is checked
 * (measure_check.c); only a correct one is timed.
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
    double deadline = te__meas_now() + timeout_s;
    for (;;) {
        double left = deadline - te__meas_now();
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

int te_tune_run_isolated(void (*fn)(void *user, void *out), void *user, void *out, size_t size,
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

static void flush_cache(te__measurer *m)
{
    if (!m->flush)
        return;
    for (size_t i = 0; i < m->flush_bytes; i += 64)
        m->flush[i] = (char)(m->flush[i] + 1);
}

/* Evicts the cold inputs (te__measurer_set_cold) from every cache level, or the whole cache
 * where lines cannot be flushed one by one (flush_cache's buffer then). */
static void evict_cold(te__measurer *m)
{
    if (!m->cold || m->o.flush_cache)
        return;
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < m->n_in; i++)
        if (m->cold & (1u << i))
            for (size_t b = 0; b < m->bytes[i]; b += 64)
                __builtin_ia32_clflush((const char *)m->bufs[i] + b);
    __builtin_ia32_mfence();
#endif /* elsewhere te__measurer_set_cold gave flush_cache a buffer: it ran just before */
}

static void run_one(te__measurer *m, te_packed_fn fn, rmsg *r)
{
    for (int o = m->n_in; o < m->n_in + m->n_out; o++)
        te__meas_poison(m->bufs[o], te_tensor_dtype(m->args[o]),
                        (size_t)te_tensor_numel(m->args[o]));
    double t0 = te__meas_now();
    int rc = fn(m->bufs);
    double first = te__meas_now() - t0;
    if (rc != 0) {
        r->status = TE_TRIAL_RUNTIME_ERROR;
        snprintf(r->msg, sizeof r->msg, "the kernel returned %d (allocation failed)", rc);
        return;
    }
    r->msg[0] = 0;
    r->max_err = te__meas_check_outputs(m, r->msg, sizeof r->msg);
    if (!(r->max_err <= m->tol)) {
        r->status = TE_TRIAL_WRONG_ANSWER;
        return;
    }
    r->msg[0] = 0;
    r->status = TE_TRIAL_OK;
    /* The probe: the check run, or after a short one (which may have paid for first touches
     * of pages, an idle thread pool, cold instruction caches) the warm-up run. */
    double probe = first;
    if (first < 0.005) {
        t0 = te__meas_now();
        fn(m->bufs); /* warm-up (a longer check run has warmed caches and pages itself) */
        probe = te__meas_now() - t0;
    }
    if (m->o.slow_factor > 0 && m->best_s > 0 && probe > m->o.slow_factor * m->best_s) {
        /* Far slower than the best: the probe is timing enough. */
        r->median_s = probe;
        r->spread_s = 0;
        r->repeats = 1;
        return;
    }
    int cap = m->o.max_repeats;
    double times[1024], sum = 0;
    if (cap > 1024)
        cap = 1024;
    int k = 0;
    while (k < cap && (k < m->o.min_repeats || sum < m->o.min_time_s)) {
        flush_cache(m);
        evict_cold(m);
        double a = te__meas_now();
        fn(m->bufs);
        times[k] = te__meas_now() - a;
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
        /* The batch's later candidates compare with the best of its earlier ones too (this
         * is the child's copy of the measurer). */
        if (r.status == TE_TRIAL_OK && r.repeats > 1 && (m->best_s <= 0 || r.median_s < m->best_s))
            m->best_s = r.median_s;
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

void te__meas_run_batch(te__measurer *m, te__cand *c, te_packed_fn *fns, const int *idx, int n)
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
        double deadline = te__meas_now() + m->o.timeout_s + 5.0;
        int killed = 0, next = n;
        for (;;) {
            double left = deadline - te__meas_now();
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
                double sc = c[idx[cur]].limit_scale > 1 ? c[idx[cur]].limit_scale : 1;
                deadline = te__meas_now() + m->o.timeout_s * sc;
            } else {
                te__cand *x = &c[idx[r.idx]];
                x->status = (te_trial_status)r.status;
                x->median_s = r.status == TE_TRIAL_OK ? r.median_s : NAN;
                x->spread_s = r.status == TE_TRIAL_OK ? r.spread_s : NAN;
                x->repeats = r.repeats;
                x->max_err = r.max_err;
                snprintf(x->err, sizeof x->err, "%s", r.msg);
                cur = -1;
                deadline = te__meas_now() + m->o.timeout_s + 5.0;
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
                         m->o.timeout_s * (x->limit_scale > 1 ? x->limit_scale : 1));
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
