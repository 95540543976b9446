/*
 * backends/cuda/module_cuda.c: te_cuda_build (lower for CUDA, emit, NVRTC, load when a device
 * is there), running modules on host or device buffers, and event timing with L2 flushes.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend_impl.h"
#include "backends/cuda/cuda_impl.h"

struct te_cuda_module {
    char *source;
    char *log;
    void *cubin;
    size_t cubin_size;
    int sm;
    int n_args, n_outputs;
    size_t *arg_bytes;
    int nkernels;
    te__cuda_kernel *k;
    te_cuda_kernel_info *info;
    int ntemps;
    size_t *temp_bytes;
    uint64_t *temps; /* device buffers, allocated on first run */
    te__cu_module mod;
    te__cu_func *fn;
    int loaded;
    char err[4096];
};

te_target te_target_cuda(int sm)
{
    te_target t;
    memset(&t, 0, sizeof t);
    t.backend = TE_BACKEND_CUDA;
    t.sm = sm;
    t.vector_bits = 128; /* float4 */
    t.num_cores = 1;
    snprintf(t.cpu_model, sizeof t.cpu_model, "sm_%d", sm);
    return t;
}

int te_cuda_target_device(int ordinal, te_target *out)
{
    if (!out)
        return TE_ERR_ARG;
    te_cuda_device_info di;
    int rc = te_cuda_device_info_get(ordinal, &di);
    if (rc != TE_OK)
        return rc;
    *out = te_target_cuda(di.sm);
    size_t n =
        strlen(di.name) < sizeof out->cpu_model - 1 ? strlen(di.name) : sizeof out->cpu_model - 1;
    memcpy(out->cpu_model, di.name, n);
    out->cpu_model[n] = 0;
    for (char *p = out->cpu_model; *p; p++)
        if (*p == ';')
            *p = ',';
    out->num_cores = di.sm_count;
    out->cuda_driver = di.driver_version;
    return TE_OK;
}

static char *dupz(const char *z) { return strdup(z ? z : ""); }

void te_cuda_module_free(te_cuda_module *m)
{
    if (!m)
        return;
    if (m->temps)
        for (int i = 0; i < m->ntemps; i++)
            te_cuda_free(m->temps[i]);
    if (m->loaded)
        te__cu_module_unload(m->mod);
    if (m->info)
        for (int i = 0; i < m->nkernels; i++)
            free((char *)m->info[i].name);
    if (m->k)
        for (int i = 0; i < m->nkernels; i++)
            free((char *)m->k[i].name);
    free(m->source);
    free(m->log);
    free(m->cubin);
    free(m->arg_bytes);
    free(m->k);
    free(m->info);
    free(m->temp_bytes);
    free(m->temps);
    free(m->fn);
    free(m);
}

/* te_cuda_build without a target: device 0's. */
static int device_target(te_ctx *ctx, const char *name, te_target *dev)
{
    if (te_cuda_target_device(0, dev) == TE_OK)
        return TE_OK;
    return te_ctx_set_error(ctx, TE_ERR_NO_CUDA,
                            "te_cuda_build '%s': no target given and no device to take one "
                            "from: %s",
                            name, te_cuda_errmsg());
}

/* The on-disk cache of NVRTC's output (te__cache_dir(), the C backend's, subdirectory "cuda"):
 * <hash>.cubin and <hash>.log, keyed by the source, the SM, the NVRTC version and the library
 * Tessera loaded (TESSERA_NVRTC), so that candidates compiled by the tuner's workers are not
 * compiled again by the process that measures them. Best effort: any failure only means a compile.
 */
static int cache_path(const char *source, int sm, const char *ext, char *buf, size_t n)
{
    char *dir = te__cache_dir();
    if (!dir)
        return -1;
    char extra[600];
    const char *lib = getenv("TESSERA_NVRTC");
    snprintf(extra, sizeof extra, "\nsm_%d nvrtc %d %s", sm, te_nvrtc_version(), lib ? lib : "");
    unsigned long long h = te__hash_bytes(TE__HASH_INIT, source, strlen(source));
    h = te__hash_bytes(h, extra, strlen(extra));
    int k = snprintf(buf, n, "%s/cuda/%016llx.%s", dir, (unsigned long long)h, ext);
    free(dir);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

static void *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *size = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static void write_atomic(const char *path, const void *data, size_t size)
{
    char dir[800], tmp[840];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    *slash = 0;
    if (te__mkdir_p(dir) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    int ok = fwrite(data, 1, size, f) == size;
    if (fclose(f) == 0 && ok)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* NVRTC through the cache: *cubin and *log as te_nvrtc_compile's. */
static int nvrtc_cached(const char *source, const char *name, int sm, void **cubin, size_t *size,
                        char **log)
{
    char pc[900], pl[900];
    size_t ln = 0;
    if (cache_path(source, sm, "cubin", pc, sizeof pc) == 0 &&
        cache_path(source, sm, "log", pl, sizeof pl) == 0 && (*cubin = read_all(pc, size))) {
        *log = read_all(pl, &ln);
        if (!*log)
            *log = dupz("");
        return TE_OK;
    }
    int rc = te_nvrtc_compile(source, name, sm, cubin, size, log);
    if (rc == TE_OK && cache_path(source, sm, "cubin", pc, sizeof pc) == 0 &&
        cache_path(source, sm, "log", pl, sizeof pl) == 0) {
        write_atomic(pl, *log ? *log : "", *log ? strlen(*log) : 0);
        write_atomic(pc, *cubin, *size);
    }
    return rc;
}

/* Loads m's cubin on device 0 and looks up its kernels; TE_OK or the failure (message in
 * m->err). */
static int load_module(te_cuda_module *m)
{
    char err[1024];
    te_cuda_device_info di;
    int rc = te__cu_init();
    if (rc == TE_OK)
        rc = te_cuda_device_info_get(0, &di);
    if (rc != TE_OK) {
        snprintf(m->err, sizeof m->err, "%s", te_cuda_errmsg());
        return rc;
    }
    if (di.sm / 10 != m->sm / 10 || di.sm % 10 < m->sm % 10) {
        /* SASS for sm_XY runs only on sm_XZ with Z >= Y */
        snprintf(m->err, sizeof m->err, "built for sm_%d; the device is sm_%d", m->sm, di.sm);
        return TE_ERR_NO_CUDA;
    }
    rc = te__cu_module_load(m->cubin, &m->mod, err, sizeof err);
    if (rc != TE_OK) {
        snprintf(m->err, sizeof m->err, "%s", err);
        return rc;
    }
    for (int i = 0; rc == TE_OK && i < m->nkernels; i++)
        rc = te__cu_function(m->mod, m->k[i].name, &m->fn[i], err, sizeof err);
    if (rc != TE_OK) {
        snprintf(m->err, sizeof m->err, "%s", err);
        te__cu_module_unload(m->mod);
        return rc;
    }
    m->loaded = 1;
    return TE_OK;
}

int te_cuda_module_load(te_cuda_module *m)
{
    if (!m)
        return TE_ERR_ARG;
    return m->loaded ? TE_OK : load_module(m);
}

static int build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                 const te_target *target, bool load, te_cuda_module **out)
{
    if (out)
        *out = NULL;
    int rc = te__build_check_args(s, out != NULL, name, load ? "te_cuda_build" : "te_cuda_compile");
    if (rc != TE_OK)
        return rc;
    te_ctx *ctx = te_schedule_ctx(s);
    te_target dev;
    if (!target && (rc = device_target(ctx, name, &dev)) != TE_OK)
        return rc;
    target = target ? target : &dev;
    if (target->backend != TE_BACKEND_CUDA || target->sm <= 0)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_cuda_build '%s': the target is not a CUDA "
                                "target (use te_target_cuda(sm))",
                                name);
    te_lowered *f = te_lower(s, n_args, args, name, target);
    if (!f)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_LOWER;
    te__cuda_program p;
    rc = te__cuda_emit_program(ctx, f, target, &p);
    if (rc != TE_OK)
        return rc;
    te_cuda_module *m = calloc(1, sizeof *m);
    if (!m)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_cuda_build: out of memory");
    m->source = dupz(p.source);
    m->sm = target->sm;
    m->n_args = n_args;
    m->n_outputs = f->n_outputs;
    m->nkernels = p.nkernels;
    m->ntemps = p.ntemps;
    m->arg_bytes = calloc((size_t)n_args, sizeof *m->arg_bytes);
    m->k = calloc((size_t)(p.nkernels ? p.nkernels : 1), sizeof *m->k);
    m->info = calloc((size_t)(p.nkernels ? p.nkernels : 1), sizeof *m->info);
    m->temp_bytes = calloc((size_t)(p.ntemps ? p.ntemps : 1), sizeof *m->temp_bytes);
    m->fn = calloc((size_t)(p.nkernels ? p.nkernels : 1), sizeof *m->fn);
    if (!m->source || !m->arg_bytes || !m->k || !m->info || !m->temp_bytes || !m->fn) {
        te_cuda_module_free(m);
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_cuda_build: out of memory");
    }
    for (int a = 0; a < n_args; a++)
        m->arg_bytes[a] =
            (size_t)te_tensor_numel(args[a]) * te_dtype_size(te_tensor_dtype(args[a]));
    for (int i = 0; i < p.ntemps; i++)
        m->temp_bytes[i] = p.temp_bytes[i];
    for (int i = 0; i < p.nkernels; i++) {
        m->k[i] = p.kernels[i];
        m->k[i].name = dupz(p.kernels[i].name);
        m->info[i].name = dupz(p.kernels[i].name);
        memcpy(m->info[i].grid, p.kernels[i].grid, sizeof m->info[i].grid);
        memcpy(m->info[i].block, p.kernels[i].block, sizeof m->info[i].block);
    }
    rc = nvrtc_cached(m->source, name, m->sm, &m->cubin, &m->cubin_size, &m->log);
    if (rc != TE_OK) {
        te_ctx_set_error(ctx, rc, "te_cuda_build '%s': %s", name, te_cuda_errmsg());
        te_cuda_module_free(m);
        return rc;
    }
    for (int i = 0; i < m->nkernels; i++)
        te__ptxas_parse(m->log, m->info[i].name, &m->info[i]);
    if (!load) {
        snprintf(m->err, sizeof m->err, "compiled only (te_cuda_compile): not loaded");
        *out = m;
        return TE_OK;
    }
    /* Load when a device is present; otherwise the module is still useful without one. A
     * device that is there but refuses the module is an error. */
    rc = load_module(m);
    if (rc != TE_OK && rc != TE_ERR_NO_CUDA) {
        te_ctx_set_error(ctx, rc, "te_cuda_build '%s': %s", name, m->err);
        te_cuda_module_free(m);
        return rc;
    }
    *out = m;
    return TE_OK;
}

int te_cuda_build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                  const te_target *target, te_cuda_module **out)
{
    return build(s, n_args, args, name, target, true, out);
}

int te_cuda_compile(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                    const te_target *target, te_cuda_module **out)
{
    if (!target)
        return s ? te_ctx_set_error(te_schedule_ctx(s), TE_ERR_ARG,
                                    "te_cuda_compile '%s': a target is required (it never asks "
                                    "a device)",
                                    name ? name : "?")
                 : TE_ERR_ARG;
    return build(s, n_args, args, name, target, false, out);
}

const char *te_cuda_module_source(const te_cuda_module *m) { return m ? m->source : NULL; }
const char *te_cuda_module_errmsg(const te_cuda_module *m) { return m ? m->err : ""; }
int te_cuda_module_nkernels(const te_cuda_module *m) { return m ? m->nkernels : 0; }
const te_cuda_kernel_info *te_cuda_module_kernel(const te_cuda_module *m, int i)
{
    return m && i >= 0 && i < m->nkernels ? &m->info[i] : NULL;
}
const char *te_cuda_module_log(const te_cuda_module *m) { return m && m->log ? m->log : ""; }
int te_cuda_module_loaded(const te_cuda_module *m) { return m ? m->loaded : 0; }

static int not_loaded(te_cuda_module *m)
{
    char why[sizeof m->err];
    snprintf(why, sizeof why, "%s", *m->err ? m->err : "no CUDA driver or device");
    snprintf(m->err, sizeof m->err, "module not loaded on a device: %.4000s", why);
    return TE_ERR_NO_CUDA;
}

static int ensure_temps(te_cuda_module *m)
{
    if (m->temps || !m->ntemps)
        return TE_OK;
    m->temps = calloc((size_t)m->ntemps, sizeof *m->temps);
    if (!m->temps)
        return TE_ERR_NOMEM;
    for (int i = 0; i < m->ntemps; i++) {
        int rc = te_cuda_malloc(&m->temps[i], m->temp_bytes[i]);
        if (rc != TE_OK) {
            snprintf(m->err, sizeof m->err, "%s", te_cuda_errmsg());
            return rc;
        }
    }
    return TE_OK;
}

static int launch_all(te_cuda_module *m, const uint64_t *dev_args)
{
    int rc = ensure_temps(m);
    if (rc != TE_OK)
        return rc;
    for (int i = 0; i < m->nkernels; i++) {
        te__cuda_kernel *k = &m->k[i];
        uint64_t vals[TE__CUDA_MAX_PARAMS];
        void *params[TE__CUDA_MAX_PARAMS];
        for (int p = 0; p < k->nparams; p++) {
            int slot = k->params[p];
            vals[p] = slot < m->n_args ? dev_args[slot] : m->temps[slot - m->n_args];
            params[p] = &vals[p];
        }
        rc = te__cu_launch(m->fn[i], k->grid, k->block, params, m->err, sizeof m->err);
        if (rc != TE_OK)
            return rc;
    }
    return TE_OK;
}

int te_cuda_module_run_device(te_cuda_module *m, const uint64_t *dev_args)
{
    if (!m || !dev_args)
        return TE_ERR_ARG;
    if (!m->loaded)
        return not_loaded(m);
    int rc = launch_all(m, dev_args);
    if (rc == TE_OK && (rc = te_cuda_synchronize()) != TE_OK)
        snprintf(m->err, sizeof m->err, "%s", te_cuda_errmsg());
    return rc;
}

int te_cuda_module_run(te_cuda_module *m, void *const *host_args)
{
    if (!m || !host_args)
        return TE_ERR_ARG;
    if (!m->loaded)
        return not_loaded(m);
    uint64_t *d = calloc((size_t)m->n_args, sizeof *d);
    if (!d)
        return TE_ERR_NOMEM;
    int rc = TE_OK;
    for (int a = 0; a < m->n_args && rc == TE_OK; a++) {
        rc = te_cuda_malloc(&d[a], m->arg_bytes[a]);
        if (rc == TE_OK && a < m->n_args - m->n_outputs)
            rc = te_cuda_copy_to_device(d[a], host_args[a], m->arg_bytes[a]);
    }
    if (rc == TE_OK)
        rc = te_cuda_module_run_device(m, d);
    for (int a = m->n_args - m->n_outputs; rc == TE_OK && a < m->n_args; a++)
        rc = te_cuda_copy_to_host(host_args[a], d[a], m->arg_bytes[a]);
    if (rc != TE_OK && !*m->err)
        snprintf(m->err, sizeof m->err, "%s", te_cuda_errmsg());
    for (int a = 0; a < m->n_args; a++)
        te_cuda_free(d[a]);
    free(d);
    return rc;
}

/* ---- Timing -----------------------------------------------------------------------------------
 */

te_cuda_timing te_cuda_timing_default(void)
{
    te_cuda_timing t = {2, 5, 1000, 0.1, 1};
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int te_cuda_time_fn(int (*fn)(void *user), void *user, const te_cuda_timing *t, double *median_ms,
                    double *min_ms, int *n_runs)
{
    te_cuda_timing d = te_cuda_timing_default();
    if (!t)
        t = &d;
    if (!fn)
        return TE_ERR_ARG;
    int rc = te__cu_init();
    if (rc != TE_OK)
        return rc;
    uint64_t flush = 0;
    size_t flush_bytes = 0;
    if (t->flush_l2) {
        te_cuda_device_info di;
        if (te_cuda_device_info_get(0, &di) == TE_OK && di.l2_bytes > 0) {
            flush_bytes = 2 * (size_t)di.l2_bytes;
            if (te_cuda_malloc(&flush, flush_bytes) != TE_OK)
                flush = 0;
        }
    }
    for (int i = 0; i < t->warmup && rc == TE_OK; i++)
        rc = fn(user);
    if (rc == TE_OK)
        rc = te_cuda_synchronize();
    int cap = t->max_repeat > 0 ? t->max_repeat : 1000;
    double *ms = malloc(sizeof *ms * (size_t)cap), total = 0;
    int n = 0;
    if (!ms)
        rc = TE_ERR_NOMEM;
    while (rc == TE_OK && n < cap && (n < t->min_repeat || total < t->min_time_s * 1e3)) {
        if (flush)
            te_cuda_memset(flush, (unsigned char)n, flush_bytes);
        rc = te__cu_event_pair_time(fn, user, &ms[n]);
        if (rc == TE_OK)
            total += ms[n++];
    }
    if (flush)
        te_cuda_free(flush);
    if (rc == TE_OK && n > 0) {
        qsort(ms, (size_t)n, sizeof *ms, cmp_double);
        if (median_ms)
            *median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
        if (min_ms)
            *min_ms = ms[0];
    }
    if (n_runs)
        *n_runs = n;
    free(ms);
    return rc;
}

typedef struct {
    te_cuda_module *m;
    const uint64_t *args;
} run_ctx;

static int run_once(void *user)
{
    run_ctx *r = user;
    return launch_all(r->m, r->args);
}

int te_cuda_module_time(te_cuda_module *m, const uint64_t *dev_args, const te_cuda_timing *t,
                        double *median_ms, double *min_ms, int *n_runs)
{
    if (!m || !dev_args)
        return TE_ERR_ARG;
    if (!m->loaded)
        return not_loaded(m);
    run_ctx r = {m, dev_args};
    int rc = te_cuda_time_fn(run_once, &r, t, median_ms, min_ms, n_runs);
    if (rc != TE_OK && !*m->err)
        snprintf(m->err, sizeof m->err, "%s", te_cuda_errmsg());
    return rc;
}

/* ---- The table's entries (backends/backend.c, declared in backends/backend_impl.h) ---- */

int te__cuda_target(te_target *out)
{
    int rc = te_cuda_target_device(0, out);
    if (rc != TE_OK)
        *out = te_target_cuda(80);
    return rc;
}

int te__cuda_emit_standalone(te_ctx *ctx, int n, const te_lowered *const *fs,
                             const te_target *target, const te__emit_opts *opts,
                             const char **source, te__emitted_fn *fns)
{
    *source = NULL;
    te__cuda_program *progs = n > 0 ? te__alloc(ctx, sizeof *progs * (size_t)n) : NULL;
    if (n > 0 && !progs)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
    te__sb b = {0};
    if (opts && opts->comment)
        te__sb_puts(&b, opts->comment);
    if (!opts || !opts->no_prelude)
        te__sb_puts(&b, te__cuda_prelude);
    for (int i = 0; i < n; i++) {
        int rc = te__cuda_emit_kernels(ctx, fs[i], target, &progs[i]);
        if (rc != TE_OK) {
            te__sb_free(&b);
            return rc;
        }
        te__sb_puts(&b, progs[i].source);
        if (fns) {
            fns[i].c = NULL;
            fns[i].cuda = &progs[i];
        }
    }
    *source = te__sb_finish(ctx, &b);
    return *source ? TE_OK : te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
}

int te__cuda_run(te__kernel *k, void *const *args)
{
    return te_cuda_module_run((te_cuda_module *)k, args);
}

const char *te__cuda_source(const te__kernel *k)
{
    return te_cuda_module_source((const te_cuda_module *)k);
}

void te__cuda_free(te__kernel *k) { te_cuda_module_free((te_cuda_module *)k); }
