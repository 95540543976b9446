/*
 * backends/c/module.c: build a schedule into a loaded kernel (lower, emit C, compile, dlopen),
 * and the C backend's function table.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/c/c_backend.h"
#include "backends/c/cc.h"

struct te_module {
    te__cc_lib *lib;
    te_packed_fn entry;
    char *source;
    char *name; /* kernel identifier */
};

static te__cc_opts cc_opts(const te_target *t)
{
    te__cc_opts o = {NULL, NULL, NULL};
    if (t) {
        o.cc = t->cc;
        o.flags = t->cflags;
    }
    return o;
}

/* Wraps a loaded library into a module; takes ownership of lib. */
static int make_module(te__cc_lib *lib, const char *source, const char *name, te_module **out,
                       char *errbuf, size_t errbuf_size)
{
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
            snprintf(errbuf, errbuf_size, p ? "out of memory" : "symbol '%s' not found in %s",
                     sym, te__cc_lib_so_path(lib));
        if (m) {
            free(m->source);
            free(m->name);
            free(m);
        }
        te__cc_lib_free(lib);
        return p ? TE_ERR_NOMEM : TE_ERR_LOAD;
    }
    m->lib = lib;
    memcpy(&m->entry, &p, sizeof p);
    *out = m;
    return TE_OK;
}

int te_build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
             const te_target *target, te_module **out)
{
    if (out)
        *out = NULL;
    if (!s)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    if (!out || !name)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_build: name and out are required");
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    if (target->backend != TE_BACKEND_C)
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                "te_build: the target is not a C target (use the CUDA backend)");
    te_lowered *f = te_lower(s, n_args, args, name, target);
    if (!f)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_LOWER;
    const char *src = te_emit_c(ctx, f, target);
    if (!src)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    te__cc_opts o = cc_opts(target);
    te__cc_lib *lib = NULL;
    char *err = malloc(16384);
    int rc = te__cc_build(src, &o, &lib, err, err ? 16384 : 0);
    if (rc == TE_OK)
        rc = make_module(lib, src, name, out, err, err ? 16384 : 0);
    if (rc != TE_OK)
        te_ctx_set_error(ctx, rc, "te_build '%s': %s", name, err ? err : te_status_str(rc));
    free(err);
    return rc;
}

int te__c_build_sources(int n, const char *const *sources, const char *const *names,
                        const te_target *target, int jobs, te_module **out, int *status,
                        char **errbufs, size_t errbuf_size)
{
    if (n <= 0)
        return TE_OK;
    if (!sources || !names || !out || !status)
        return TE_ERR_ARG;
    te__cc_lib **libs = calloc((size_t)n, sizeof *libs);
    if (!libs)
        return TE_ERR_NOMEM;
    te__cc_opts o = cc_opts(target);
    te__cc_build_many(n, sources, &o, jobs, libs, status, errbufs, errbuf_size);
    int first = TE_OK;
    for (int i = 0; i < n; i++) {
        out[i] = NULL;
        if (status[i] == TE_OK)
            status[i] = make_module(libs[i], sources[i], names[i], &out[i],
                                    errbufs ? errbufs[i] : NULL, errbufs ? errbuf_size : 0);
        else
            te__cc_lib_free(libs[i]);
        if (status[i] != TE_OK && first == TE_OK)
            first = status[i];
    }
    free(libs);
    return first;
}

int te_module_run(te_module *m, void *const *args)
{
    if (!m || !args)
        return TE_ERR_ARG;
    return m->entry((void **)args) == 0 ? TE_OK : TE_ERR_NOMEM;
}

const char *te_module_source(const te_module *m) { return m ? m->source : NULL; }

const char *te_module_source_path(const te_module *m)
{
    return m ? te__cc_lib_source_path(m->lib) : NULL;
}

te_packed_fn te_module_entry(const te_module *m) { return m ? m->entry : NULL; }

void te_module_free(te_module *m)
{
    if (!m)
        return;
    te__cc_lib_free(m->lib);
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
    for (int i = 0; i < warmup; i++)
        if (m->entry((void **)args) != 0)
            return TE_ERR_NOMEM;
    double *t = malloc(sizeof *t * (size_t)repeat);
    if (!t)
        return TE_ERR_NOMEM;
    for (int i = 0; i < repeat; i++) {
        double t0 = now_s();
        int rc = m->entry((void **)args);
        t[i] = now_s() - t0;
        if (rc != 0) {
            free(t);
            return TE_ERR_NOMEM;
        }
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    *median_s = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    free(t);
    return TE_OK;
}

const te__backend te__c_backend = {
    "c", te_emit_c, te__c_build_sources, te_module_run, te__module_time,
};
