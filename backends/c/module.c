/*
 * backends/c/module.c: the C backend's function table (backends/backend_impl.h) and te_build,
 * which reaches the backend through te__backend_get like every other caller: lower, emit C,
 * compile (with the on-disk cache), dlopen.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend_impl.h"
#include "backends/c/c_backend.h"
#include "backends/c/cc.h"

/* A loaded shared object shared by the kernels compiled into it. */
typedef struct shared_lib {
    te__cc_lib *lib;
    int refs;
} shared_lib;

struct te_module {
    shared_lib *sl;
    te_packed_fn entry;
    char *source;
    char *name; /* kernel identifier */
};

static void shared_lib_release(shared_lib *sl)
{
    if (sl && --sl->refs == 0) {
        te__cc_lib_free(sl->lib);
        free(sl);
    }
}

static te__cc_opts cc_opts(const te_target *t)
{
    te__cc_opts o = {NULL, NULL, NULL};
    if (t) {
        o.cc = t->cc;
        o.flags = t->cflags;
    }
    return o;
}

/* Wraps kernel `name` of a loaded library into a module holding a reference to it. */
static int make_module(shared_lib *sl, const char *source, const char *name, te_module **out,
                       char *errbuf, size_t errbuf_size)
{
    te__cc_lib *lib = sl->lib;
    char ident[160], sym[180];
    te__c_kernel_ident(name, ident, sizeof ident - 8);
    snprintf(sym, sizeof sym, "%s_packed", ident);
    void *p = te__cc_lib_sym(lib, sym);
    te_module *m = p ? calloc(1, sizeof *m) : NULL;
    if (m) {
        m->source = strdup(source);
        m->name = strdup(ident);
    }
    if (!p || !m || !m->source || !m->name) {
        if (errbuf && errbuf_size)
            snprintf(errbuf, errbuf_size, p ? "out of memory" : "symbol '%s' not found in %s", sym,
                     te__cc_lib_so_path(lib));
        if (m) {
            free(m->source);
            free(m->name);
            free(m);
        }
        return p ? TE_ERR_NOMEM : TE_ERR_LOAD;
    }
    m->sl = sl;
    sl->refs++;
    memcpy(&m->entry, &p, sizeof p);
    *out = m;
    return TE_OK;
}

/* The target a build uses (the host's, in *host, when target is NULL), or NULL with the error on
 * ctx when it is not a C target: te_module is the C backend's kernel, other backends have their
 * own builders. */
static const te_target *c_target(te_ctx *ctx, const te_target *target, te_target *host,
                                 const char *who)
{
    if (!target) {
        *host = te_target_host();
        target = host;
    }
    const te__backend *be = te__backend_get(target->backend);
    if (!be || be->kind != TE_BACKEND_C) {
        te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                         "%s: the target is not a C target (use the CUDA backend)", who);
        return NULL;
    }
    return target;
}

int te_build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
             const te_target *target, te_module **out)
{
    int rc = te__build_check_args(s, out != NULL, name, "te_build");
    if (out)
        *out = NULL;
    if (rc != TE_OK)
        return rc;
    te_ctx *ctx = te_schedule_ctx(s);
    te_target host;
    if (!(target = c_target(ctx, target, &host, "te_build")))
        return te_ctx_errcode(ctx);
    te_lowered *f = te_lower(s, n_args, args, name, target);
    if (!f)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_LOWER;
    return te_build_lowered(ctx, f, name, target, out);
}

int te_build_lowered(te_ctx *ctx, const te_lowered *f, const char *name, const te_target *target,
                     te_module **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !f || !name || !out)
        return ctx ? te_ctx_set_error(ctx, TE_ERR_ARG, "te_build_lowered: bad arguments")
                   : TE_ERR_ARG;
    te_target host;
    if (!(target = c_target(ctx, target, &host, "te_build_lowered")))
        return te_ctx_errcode(ctx);
    const te__backend *be = te__backend_get(target->backend);
    const char *src = be->emit(ctx, f, target);
    if (!src)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    char *err = malloc(16384);
    te__kernel *k = NULL;
    int st = TE_OK;
    int rc = be->compile_many(1, &src, (const int[]){1}, (const char *const *const[]){&name},
                              target, 1, &k, &st, err ? &err : NULL, err ? 16384 : 0);
    if (rc == TE_OK)
        *out = (te_module *)k;
    else
        te_ctx_set_error(ctx, rc, "te_build '%s': %s", name, err ? err : te_status_str(rc));
    free(err);
    return rc;
}

int te__c_build_units(int n, const char *const *sources, const int *counts,
                      const char *const *const *names, const te_target *target, int jobs,
                      te_module **out, int *status, char **errbufs, size_t errbuf_size)
{
    if (n <= 0)
        return TE_OK;
    if (!sources || !counts || !names || !out || !status)
        return TE_ERR_ARG;
    te__cc_lib **libs = calloc((size_t)n, sizeof *libs);
    if (!libs)
        return TE_ERR_NOMEM;
    te__cc_opts o = cc_opts(target);
    te__cc_build_many(n, sources, &o, jobs, libs, status, errbufs, errbuf_size);
    int first = TE_OK;
    for (int i = 0, at = 0; i < n; at += counts[i], i++) {
        for (int j = 0; j < counts[i]; j++)
            out[at + j] = NULL;
        shared_lib *sl = status[i] == TE_OK ? malloc(sizeof *sl) : NULL;
        if (status[i] == TE_OK && !sl)
            status[i] = TE_ERR_NOMEM;
        if (sl) {
            sl->lib = libs[i];
            sl->refs = 1; /* held while the kernels are wrapped */
            for (int j = 0; j < counts[i] && status[i] == TE_OK; j++)
                status[i] = make_module(sl, sources[i], names[i][j], &out[at + j],
                                        errbufs ? errbufs[i] : NULL, errbufs ? errbuf_size : 0);
            if (status[i] != TE_OK)
                for (int j = 0; j < counts[i]; j++) {
                    te_module_free(out[at + j]);
                    out[at + j] = NULL;
                }
            shared_lib_release(sl);
        } else {
            te__cc_lib_free(libs[i]);
        }
        if (status[i] != TE_OK && first == TE_OK)
            first = status[i];
    }
    free(libs);
    return first;
}

int te__c_build_sources(int n, const char *const *sources, const char *const *names,
                        const te_target *target, int jobs, te_module **out, int *status,
                        char **errbufs, size_t errbuf_size)
{
    if (n <= 0)
        return TE_OK;
    if (!names)
        return TE_ERR_ARG;
    int *counts = malloc(sizeof *counts * (size_t)n);
    const char *const **nm = malloc(sizeof *nm * (size_t)n);
    int rc = counts && nm ? TE_OK : TE_ERR_NOMEM;
    for (int i = 0; rc == TE_OK && i < n; i++) {
        counts[i] = 1;
        nm[i] = &names[i];
    }
    if (rc == TE_OK)
        rc = te__c_build_units(n, sources, counts, nm, target, jobs, out, status, errbufs,
                               errbuf_size);
    free(counts);
    free(nm);
    return rc;
}

/* A generated kernel's return value as a status: 0 ok, -1 a heap allocation failed, -4 the
 * operating system refused an instruction set the kernel needs (AMX: arch_prctl). */
static int kernel_status(int rc)
{
    return rc == 0 ? TE_OK : rc == -4 ? TE_ERR_UNSUPPORTED : TE_ERR_NOMEM;
}

int te_module_run(te_module *m, void *const *args)
{
    if (!m || !args)
        return TE_ERR_ARG;
    return kernel_status(m->entry((void **)args));
}

const char *te_module_source(const te_module *m) { return m ? m->source : NULL; }

const char *te_module_source_path(const te_module *m)
{
    return m ? te__cc_lib_source_path(m->sl->lib) : NULL;
}

te_packed_fn te_module_entry(const te_module *m) { return m ? m->entry : NULL; }

void te_module_free(te_module *m)
{
    if (!m)
        return;
    shared_lib_release(m->sl);
    free(m->source);
    free(m->name);
    free(m);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int te__module_time(te_module *m, void *const *args, int warmup, int repeat, double *median_s)
{
    if (!m || !args || !median_s || repeat <= 0)
        return TE_ERR_ARG;
    for (int i = 0; i < warmup; i++) {
        int rc = kernel_status(m->entry((void **)args));
        if (rc)
            return rc;
    }
    double *t = malloc(sizeof *t * (size_t)repeat);
    if (!t)
        return TE_ERR_NOMEM;
    for (int i = 0; i < repeat; i++) {
        double t0 = now_s();
        int rc = m->entry((void **)args);
        t[i] = now_s() - t0;
        if (rc != 0) {
            free(t);
            return kernel_status(rc);
        }
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    *median_s = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    free(t);
    return TE_OK;
}

/* ---- The table's entries (backends/backend.c)
 * ------------------------------------------------------------------------- */

int te__c_target(te_target *out)
{
    *out = te_target_host();
    return TE_OK;
}

const char *te__c_emit_unit(te_ctx *ctx, int n, const te_lowered *const *fs,
                            const te_target *target)
{
    return te__emit_c_unit(ctx, n, fs, target, NULL, NULL);
}

int te__c_emit_standalone(te_ctx *ctx, int n, const te_lowered *const *fs, const te_target *target,
                          const te__emit_opts *opts, const char **source, te__emitted_fn *fns)
{
    *source = NULL;
    if (opts && opts->no_prelude)
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                "te_emit_c: a C unit always has its own prelude");
    te__c_kernel_info *info = n > 0 ? te__alloc(ctx, sizeof *info * (size_t)n) : NULL;
    if (n > 0 && !info)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_c: out of memory");
    te__c_unit_opts uo = {.comment = opts && opts->comment ? opts->comment : "",
                          .no_packed = 1,
                          .standalone = 1,
                          .arg_names = opts ? opts->arg_names : NULL};
    *source = te__emit_c_unit(ctx, n, fs, target, &uo, info);
    if (!*source)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;
    for (int i = 0; fns && i < n; i++) {
        fns[i].c = &info[i];
        fns[i].cuda = NULL;
    }
    return TE_OK;
}

int te__c_compile_many(int n, const char *const *sources, const int *counts,
                       const char *const *const *names, const te_target *target, int jobs,
                       te__kernel **out, int *status, char **errbufs, size_t errbuf_size)
{
    return te__c_build_units(n, sources, counts, names, target, jobs, (te_module **)out, status,
                             errbufs, errbuf_size);
}

int te__c_run(te__kernel *k, void *const *args) { return te_module_run((te_module *)k, args); }

int te__c_time(te__kernel *k, void *const *args, int warmup, int repeat, double *median_s)
{
    return te__module_time((te_module *)k, args, warmup, repeat, median_s);
}

te_packed_fn te__c_entry(const te__kernel *k) { return te_module_entry((const te_module *)k); }

const char *te__c_source(const te__kernel *k) { return te_module_source((const te_module *)k); }

void te__c_free(te__kernel *k) { te_module_free((te_module *)k); }
