/*
 * backends/c/cc.c: compile C source into a cached shared object and load it.
 *
 * One build goes through these steps:
 *   1. resolve the compiler, flags and cache directory (options, then environment, then
 *      defaults) and hash them with the source into a 16-hex-digit key;
 *   2. if <cache>/<key>.so exists, dlopen it and stop (a cache hit);
 *   3. otherwise write <cache>/<key>.c (temporary name, then rename), run
 *      `/bin/sh -c "<cc> <flags> -o <cache>/<key>.so.tmp.<unique> <cache>/<key>.c"` in its own
 *      process group (under a supervisor that kills the group when this process dies,
 *      cc_proc.c) with stdout and stderr on a pipe, kill the group if it outlives the
 *      timeout, rename the temporary object to <key>.so and dlopen it. Opening a cache sweeps
 *      the temporaries of processes that died mid-build.
 *
 * Every file appears in the cache under its final name only when complete (rename is atomic), so
 * processes and threads sharing a cache never see half a file; two of them racing on the same
 * key both compile and the last rename wins, which is harmless because the contents are equal.
 *
 * te__cc_build_many runs the compilers as child processes (fork and only async-signal-safe
 * calls before exec, so it is safe in a multithreaded process), up to `jobs` at a time, watching
 * all their pipes with one poll loop, and then loads the results in order on the calling thread.
 */
#define _GNU_SOURCE

#include "backends/c/cc.h"
#include "backends/backend_impl.h"

#include "tessera/status.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TE__CC_DEFAULT_CC "cc"
#define TE__CC_DEFAULT_FLAGS "-O3 -march=native -fPIC -shared -fopenmp -std=gnu11"
#define TE__CC_DEFAULT_TIMEOUT_S 120.0
/* Compiler output kept for the error message; the rest is read and dropped. */
#define TE__CC_MAX_DIAG 65536

struct te__cc_lib {
    void *handle;
    char *src_path;
    char *so_path;
};

/* ---------------------------------------------------------------------------------------------
 * Small helpers: messages, strings, paths.
 */

static void set_err(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *buf, size_t n, const char *fmt, ...)
{
    if (!buf || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* malloc'ed printf; NULL when out of memory. */
static char *str_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *str_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *z = malloc((size_t)n + 1);
    if (!z)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(z, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return z;
}

/* Quotes a path for /bin/sh: 'a'\''b'. Returns malloc'ed text or NULL. */
static char *sh_quote(const char *z)
{
    size_t n = 3;
    for (const char *p = z; *p; p++)
        n += *p == '\'' ? 4 : 1;
    char *out = malloc(n);
    if (!out)
        return NULL;
    char *q = out;
    *q++ = '\'';
    for (const char *p = z; *p; p++) {
        if (*p == '\'') {
            memcpy(q, "'\\''", 4);
            q += 4;
        } else {
            *q++ = *p;
        }
    }
    *q++ = '\'';
    *q = '\0';
    return out;
}

static const char *env_nonempty(const char *name)
{
    const char *z = getenv(name);
    return z && *z ? z : NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds a compiler may run: $TESSERA_CC_TIMEOUT when a positive number, else 120. */
static double compile_timeout_s(void)
{
    const char *z = env_nonempty("TESSERA_CC_TIMEOUT");
    if (z) {
        char *end;
        errno = 0;
        double t = strtod(z, &end);
        if (errno == 0 && end != z && *end == '\0' && t > 0 && t < 1e9)
            return t;
    }
    return TE__CC_DEFAULT_TIMEOUT_S;
}

/* A name no other thread or process uses at the same time: pid plus a process-wide counter. */
static char *unique_tmp(const char *final_path)
{
    static unsigned long counter;
    unsigned long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    return str_fmt("%s.tmp.%ld.%lu", final_path, (long)getpid(), k);
}

/* Writes n bytes to `path` through a temporary file and rename. Returns 0 or -1 with errno. */
static int write_file_atomic(const char *path, const char *data, size_t n)
{
    char *tmp = unique_tmp(path);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return -1;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, data + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        goto fail;
    free(tmp);
    return 0;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    errno = e;
    return -1;
}

/* Narrows z[0..*n) to its text without surrounding blank space. */
static const char *trim(const char *z, size_t *n)
{
    size_t len = *n;
    while (len > 0 && (*z == ' ' || *z == '\n' || *z == '\t' || *z == '\r')) {
        z++;
        len--;
    }
    while (len > 0 &&
           (z[len - 1] == ' ' || z[len - 1] == '\n' || z[len - 1] == '\t' || z[len - 1] == '\r'))
        len--;
    *n = len;
    return z;
}

/* ---------------------------------------------------------------------------------------------
 * One build job: everything known about source i of a batch.
 */

typedef enum {
    JOB_INVALID,  /* bad argument or setup failure: status and message already set */
    JOB_HIT,      /* the shared object is cached */
    JOB_COMPILE,  /* must be compiled */
    JOB_ALIAS,    /* same key as an earlier job in the batch: share its outcome */
    JOB_RUNNING,  /* compiler running */
    JOB_FINISHED, /* compiler done (see exit status / timed_out) */
} job_state;

typedef struct {
    job_state state;
    int status;
    int alias_of;
    char *src_path, *so_path, *tmp_so, *command;
    char *errbuf;
    size_t errbuf_size;
    /* While running. */
    pid_t pid;
    int fd;
    double deadline;
    char *diag;
    size_t n_diag;
    int diag_dropped;
    int wait_status;
    int timed_out;
} job;

typedef struct {
    const char *cc, *flags;
    char *cache_dir; /* malloc'ed */
    double timeout_s;
} resolved_opts;

static int resolve_opts(const te__cc_opts *opts, resolved_opts *r)
{
    r->cc = opts && opts->cc ? opts->cc : env_nonempty("CC");
    if (!r->cc)
        r->cc = TE__CC_DEFAULT_CC;
    r->flags = opts && opts->flags ? opts->flags : env_nonempty("TESSERA_CFLAGS");
    if (!r->flags)
        r->flags = TE__CC_DEFAULT_FLAGS;
    r->cache_dir = opts && opts->cache_dir ? str_fmt("%s", opts->cache_dir) : te__cache_dir();
    r->timeout_s = compile_timeout_s();
    return r->cache_dir ? TE_OK : TE_ERR_NOMEM;
}

static void job_fail(job *j, int status)
{
    j->state = JOB_INVALID;
    j->status = status;
}

/* Hashes, checks the cache and, on a miss, writes the source and prepares the command. */
static void job_prepare(job *j, const char *source, const resolved_opts *o)
{
    unsigned long long h = TE__HASH_INIT;
    h = te__hash_bytes(h, o->cc, strlen(o->cc) + 1);
    h = te__hash_bytes(h, o->flags, strlen(o->flags) + 1);
    size_t n_source = strlen(source);
    h = te__hash_bytes(h, source, n_source);
    j->src_path = str_fmt("%s/%016llx.c", o->cache_dir, h);
    j->so_path = str_fmt("%s/%016llx.so", o->cache_dir, h);
    if (!j->src_path || !j->so_path) {
        set_err(j->errbuf, j->errbuf_size, "out of memory");
        job_fail(j, TE_ERR_NOMEM);
        return;
    }
    if (access(j->so_path, R_OK) == 0) {
        /* Keep the source beside the object for people reading the cache; best effort, since
         * a read-only cache is still usable. */
        if (access(j->src_path, F_OK) != 0)
            (void)write_file_atomic(j->src_path, source, n_source);
        j->state = JOB_HIT;
        return;
    }
    if (write_file_atomic(j->src_path, source, n_source) != 0) {
        set_err(j->errbuf, j->errbuf_size, "cannot write '%s' in the kernel cache: %s", j->src_path,
                strerror(errno));
        job_fail(j, TE_ERR_IO);
        return;
    }
    j->tmp_so = unique_tmp(j->so_path);
    char *q_out = j->tmp_so ? sh_quote(j->tmp_so) : NULL;
    char *q_src = sh_quote(j->src_path);
    if (q_out && q_src)
        j->command = str_fmt("%s %s -o %s %s", o->cc, o->flags, q_out, q_src);
    free(q_out);
    free(q_src);
    if (!j->command) {
        set_err(j->errbuf, j->errbuf_size, "out of memory");
        job_fail(j, TE_ERR_NOMEM);
        return;
    }
    j->state = JOB_COMPILE;
}

/* Starts the compiler for job j. On failure sets the job's status. */
static void job_start(job *j, double timeout_s)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        set_err(j->errbuf, j->errbuf_size, "cannot create a pipe for the compiler: %s",
                strerror(errno));
        job_fail(j, TE_ERR_COMPILE);
        return;
    }
    /* Its own process group under a supervisor (cc_proc.c), so that a timeout kills the
     * driver and everything it started, and so does this process's death. */
    pid_t pid;
    int rc = te__cc_spawn(j->command, fds[1], &pid);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        set_err(j->errbuf, j->errbuf_size, "cannot start the compiler: %s\ncommand: %s\nsource: %s",
                strerror(rc), j->command, j->src_path);
        job_fail(j, TE_ERR_COMPILE);
        return;
    }
    j->pid = pid;
    j->fd = fds[0];
    j->deadline = now_s() + timeout_s;
    j->state = JOB_RUNNING;
}

/* Reads what the compiler wrote. Returns 1 at end of file, 0 otherwise. */
static int job_read(job *j)
{
    char chunk[4096];
    for (;;) {
        ssize_t r = read(j->fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (r <= 0)
            return 1;
        size_t room = TE__CC_MAX_DIAG - j->n_diag;
        size_t take = (size_t)r < room ? (size_t)r : room;
        if (take < (size_t)r)
            j->diag_dropped = 1;
        if (take > 0) {
            char *p = realloc(j->diag, j->n_diag + take + 1);
            if (!p) {
                j->diag_dropped = 1;
                return 0;
            }
            j->diag = p;
            memcpy(j->diag + j->n_diag, chunk, take);
            j->n_diag += take;
            j->diag[j->n_diag] = '\0';
        }
        /* One read per poll wakeup keeps the loop fair between jobs. */
        return 0;
    }
}

static void job_reap(job *j, int kill_it)
{
    if (kill_it) {
        kill(-j->pid, SIGKILL);
        kill(j->pid, SIGKILL);
        j->timed_out = 1;
    }
    close(j->fd);
    j->fd = -1;
    while (waitpid(j->pid, &j->wait_status, 0) < 0) {
        if (errno != EINTR) {
            /* Someone else reaped it (SIGCHLD ignored): only the output tells us anything. */
            j->wait_status = -1;
            break;
        }
    }
    j->state = JOB_FINISHED;
}

/* Runs every JOB_COMPILE job, at most `jobs` (>= 1) at once. */
static void run_compilers(job *js, int n, int jobs, double timeout_s)
{
    struct pollfd *pfd = malloc(sizeof *pfd * (size_t)jobs);
    int *idx = malloc(sizeof *idx * (size_t)jobs);
    if (!pfd || !idx) {
        for (int i = 0; i < n; i++) {
            if (js[i].state == JOB_COMPILE) {
                set_err(js[i].errbuf, js[i].errbuf_size, "out of memory");
                job_fail(&js[i], TE_ERR_NOMEM);
            }
        }
        free(pfd);
        free(idx);
        return;
    }
    int next = 0, running = 0;
    for (;;) {
        while (running < jobs && next < n) {
            job *j = &js[next++];
            if (j->state != JOB_COMPILE)
                continue;
            job_start(j, timeout_s);
            if (j->state == JOB_RUNNING)
                running++;
        }
        if (running == 0)
            break;
        int np = 0;
        double now = now_s(), first_deadline = 1e300;
        for (int i = 0; i < n; i++) {
            if (js[i].state != JOB_RUNNING)
                continue;
            if (js[i].deadline <= now) {
                job_reap(&js[i], 1);
                running--;
                continue;
            }
            if (js[i].deadline < first_deadline)
                first_deadline = js[i].deadline;
            pfd[np].fd = js[i].fd;
            pfd[np].events = POLLIN;
            pfd[np].revents = 0;
            idx[np++] = i;
        }
        if (np == 0)
            continue;
        double wait_ms = (first_deadline - now) * 1000.0 + 1.0;
        int timeout_ms = wait_ms > INT_MAX ? INT_MAX : (int)wait_ms;
        if (poll(pfd, (nfds_t)np, timeout_ms) < 0)
            continue; /* EINTR; nothing else can fail with valid descriptors */
        for (int k = 0; k < np; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)))
                continue;
            job *j = &js[idx[k]];
            if (job_read(j)) {
                job_reap(j, 0);
                running--;
            }
        }
    }
    free(pfd);
    free(idx);
}

/* Turns a finished compiler run into the job's status and message; on success moves the
 * temporary object to its final name. */
static void job_finish(job *j, double timeout_s)
{
    size_t n_diag = j->n_diag;
    const char *diag = trim(j->diag ? j->diag : "", &n_diag);
    const char *more = j->diag_dropped ? "\n[further compiler output dropped]" : "";
    int ok = j->wait_status != -1 ? WIFEXITED(j->wait_status) && WEXITSTATUS(j->wait_status) == 0
                                  : access(j->tmp_so, R_OK) == 0;
    if (j->timed_out) {
        set_err(
            j->errbuf, j->errbuf_size,
            "compiler timed out after %g s (TESSERA_CC_TIMEOUT)\ncommand: %s\nsource: %s\n%.*s%s",
            timeout_s, j->command, j->src_path, (int)n_diag, diag, more);
        j->status = TE_ERR_COMPILE;
    } else if (!ok) {
        char how[64];
        if (j->wait_status != -1 && WIFSIGNALED(j->wait_status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(j->wait_status));
        else if (j->wait_status != -1)
            snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(j->wait_status));
        else
            snprintf(how, sizeof how, "unknown exit status");
        set_err(j->errbuf, j->errbuf_size, "compiler failed (%s)\ncommand: %s\nsource: %s\n%.*s%s",
                how, j->command, j->src_path, (int)n_diag, diag, more);
        j->status = TE_ERR_COMPILE;
    } else if (rename(j->tmp_so, j->so_path) != 0) {
        int e = errno;
        set_err(j->errbuf, j->errbuf_size,
                "compiler reported success but '%s' cannot be moved to '%s': %s\ncommand: %s\n"
                "source: %s\n%.*s",
                j->tmp_so, j->so_path, strerror(e), j->command, j->src_path, (int)n_diag, diag);
        j->status = e == ENOENT ? TE_ERR_COMPILE : TE_ERR_IO;
    } else {
        j->status = TE_OK;
    }
    if (j->status != TE_OK)
        unlink(j->tmp_so);
}

/* An OpenMP runtime keeps its worker threads alive between parallel regions. When a kernel is
 * the first object in the process to need the runtime, the runtime is loaded as the kernel's
 * dependency, and dlclose of the kernel would unmap it under its own sleeping threads (a crash
 * at the next wakeup or at exit). So whichever runtime is loaded gets pinned for the life of the
 * process: promoted to RTLD_NODELETE, with one reference kept. */
static void pin_openmp_runtime(void)
{
    static const char *const names[] = {"libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so"};
    static int pinned[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (__atomic_load_n(&pinned[i], __ATOMIC_ACQUIRE))
            continue;
        if (dlopen(names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
            __atomic_store_n(&pinned[i], 1, __ATOMIC_RELEASE);
    }
}

static int load(const job *j, te__cc_lib **out, char *errbuf, size_t errbuf_size)
{
    te__cc_lib *lib = calloc(1, sizeof *lib);
    char *src = str_fmt("%s", j->src_path);
    char *so = str_fmt("%s", j->so_path);
    if (!lib || !src || !so) {
        free(lib);
        free(src);
        free(so);
        set_err(errbuf, errbuf_size, "out of memory");
        return TE_ERR_NOMEM;
    }
    dlerror();
    void *h = dlopen(j->so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        set_err(errbuf, errbuf_size, "dlopen failed: %s", e ? e : "unknown error");
        free(lib);
        free(src);
        free(so);
        return TE_ERR_LOAD;
    }
    pin_openmp_runtime();
    lib->handle = h;
    lib->src_path = src;
    lib->so_path = so;
    *out = lib;
    return TE_OK;
}

static void job_clear(job *j)
{
    free(j->src_path);
    free(j->so_path);
    free(j->tmp_so);
    free(j->command);
    free(j->diag);
    memset(j, 0, sizeof *j);
}

/* ---------------------------------------------------------------------------------------------
 * Public (private-to-Tessera) entry points.
 */

/* Sets up job j of a batch before its source is looked at. */
static void job_init(job *j, char *errbuf, size_t errbuf_size)
{
    memset(j, 0, sizeof *j);
    j->status = TE_ERR_INTERNAL;
    j->fd = -1;
    j->alias_of = -1;
    j->errbuf = errbuf;
    j->errbuf_size = errbuf ? errbuf_size : 0;
}

/* Compiles (when needed) and loads job j by itself. */
static void job_build_one(job *j, const char *source, const resolved_opts *o, te__cc_lib **out)
{
    job_prepare(j, source, o);
    if (j->state == JOB_COMPILE) {
        run_compilers(j, 1, 1, o->timeout_s);
        if (j->state == JOB_FINISHED)
            job_finish(j, o->timeout_s);
    } else if (j->state == JOB_HIT) {
        j->status = TE_OK;
    }
    if (j->status == TE_OK)
        j->status = load(j, out, j->errbuf, j->errbuf_size);
}

int te__cc_build_many(int n, const char *const *sources, const te__cc_opts *opts, int jobs,
                      te__cc_lib **libs, int *results, char **errbufs, size_t errbuf_size)
{
    if (n < 0 || (n > 0 && (!sources || !libs || !results)))
        return TE_ERR_ARG;
    for (int i = 0; i < n; i++) {
        libs[i] = NULL;
        results[i] = TE_ERR_INTERNAL;
        if (errbufs && errbufs[i] && errbuf_size > 0)
            errbufs[i][0] = '\0';
    }
    if (n == 0)
        return TE_OK;
    resolved_opts o;
    job *js = calloc((size_t)n, sizeof *js);
    int rc = resolve_opts(opts, &o);
    if (!js || rc != TE_OK) {
        for (int i = 0; i < n; i++) {
            results[i] = TE_ERR_NOMEM;
            set_err(errbufs ? errbufs[i] : NULL, errbuf_size, "out of memory");
        }
        free(js);
        free(o.cache_dir);
        return TE_ERR_NOMEM;
    }

    /* Hash, look in the cache, write the sources that must be compiled. */
    int dir_ok = -1, dir_errno = 0;
    for (int i = 0; i < n; i++) {
        job *j = &js[i];
        job_init(j, errbufs ? errbufs[i] : NULL, errbuf_size);
        if (!sources[i]) {
            set_err(j->errbuf, j->errbuf_size, "te__cc_build: source %d is NULL", i);
            job_fail(j, TE_ERR_ARG);
            continue;
        }
        if (dir_ok < 0) {
            dir_ok = te__mkdir_p(o.cache_dir) == 0;
            dir_errno = errno;
            if (dir_ok) /* what killed jobs left */
                te__cc_sweep_once(o.cache_dir);
        }
        if (!dir_ok) {
            set_err(j->errbuf, j->errbuf_size, "cannot create kernel cache directory '%s': %s",
                    o.cache_dir, strerror(dir_errno));
            job_fail(j, TE_ERR_IO);
            continue;
        }
        job_prepare(j, sources[i], &o);
        if (j->state == JOB_HIT)
            j->status = TE_OK;
        if (j->state != JOB_COMPILE)
            continue;
        /* The same source twice in one batch compiles once. */
        for (int k = 0; k < i; k++) {
            if (js[k].state == JOB_COMPILE && strcmp(js[k].so_path, j->so_path) == 0) {
                j->state = JOB_ALIAS;
                j->alias_of = k;
                break;
            }
        }
    }

    /* Compile in parallel. */
    if (jobs <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = nc > 0 ? (int)(nc < 1024 ? nc : 1024) : 1;
    }
    if (jobs > n)
        jobs = n;
    run_compilers(js, n, jobs, o.timeout_s);
    for (int i = 0; i < n; i++) {
        if (js[i].state == JOB_FINISHED)
            job_finish(&js[i], o.timeout_s);
    }

    /* Load in order. */
    for (int i = 0; i < n; i++) {
        job *j = &js[i];
        if (j->state == JOB_ALIAS) {
            const job *a = &js[j->alias_of];
            j->status = a->status;
            if (j->status != TE_OK && a->errbuf)
                set_err(j->errbuf, j->errbuf_size, "%s", a->errbuf);
            else if (j->status != TE_OK)
                set_err(j->errbuf, j->errbuf_size, "%s (same source as source %d)",
                        te_status_str(j->status), j->alias_of);
        }
        if (j->status == TE_OK) {
            j->status = load(j, &libs[i], j->errbuf, j->errbuf_size);
            if (j->status == TE_ERR_LOAD && j->state == JOB_HIT) {
                /* A cached object that does not load (cut short by a crash, copied from another
                 * system) is rebuilt once before giving up. */
                unlink(j->so_path);
                job_clear(j);
                job_init(j, errbufs ? errbufs[i] : NULL, errbuf_size);
                job_build_one(j, sources[i], &o, &libs[i]);
            }
        }
        results[i] = j->status;
        if (rc == TE_OK && j->status != TE_OK)
            rc = j->status;
    }
    for (int i = 0; i < n; i++)
        job_clear(&js[i]);
    free(js);
    free(o.cache_dir);
    return rc;
}

int te__cc_build(const char *source, const te__cc_opts *opts, te__cc_lib **out, char *errbuf,
                 size_t errbuf_size)
{
    if (errbuf && errbuf_size > 0)
        errbuf[0] = '\0';
    if (out)
        *out = NULL;
    if (!out) {
        set_err(errbuf, errbuf_size, "te__cc_build: out is NULL");
        return TE_ERR_ARG;
    }
    if (!source) {
        set_err(errbuf, errbuf_size, "te__cc_build: source is NULL");
        return TE_ERR_ARG;
    }
    int result;
    char *bufs[1] = {errbuf};
    return te__cc_build_many(1, &source, opts, 1, out, &result, errbuf ? bufs : NULL, errbuf_size);
}

void *te__cc_lib_sym(te__cc_lib *lib, const char *name)
{
    if (!lib || !name)
        return NULL;
    return dlsym(lib->handle, name);
}

const char *te__cc_lib_source_path(const te__cc_lib *lib) { return lib ? lib->src_path : NULL; }

const char *te__cc_lib_so_path(const te__cc_lib *lib) { return lib ? lib->so_path : NULL; }

void te__cc_lib_free(te__cc_lib *lib)
{
    if (!lib)
        return;
    if (lib->handle)
        dlclose(lib->handle);
    free(lib->src_path);
    free(lib->so_path);
    free(lib);
}
