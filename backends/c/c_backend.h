/*
 * backends/c/c_backend.h (private): the C backend's pieces for the tuner and the other
 * backends: the backend function table (DESIGN point 5), kernel naming, and building several
 * generated sources in one parallel compiler run.
 */
#ifndef TESSERA_BACKENDS_C_C_BACKEND_H
#define TESSERA_BACKENDS_C_C_BACKEND_H

#include <stddef.h>

#include "tessera/backend.h"
#include "te/internal.h"

/* The C identifier used for a kernel called `name` (invalid characters become '_', C keywords
 * and names in the prelude's te_ namespace get a suffix). The packed entry is
 * "<ident>_packed". Writes at most n bytes into buf and returns buf. */
char *te__c_kernel_ident(const char *name, char *buf, size_t n);

/* Compiles n emitted sources (te_emit_c output) for kernels named names[i] with the target's
 * compiler and flags, up to `jobs` compilers at once (<= 0: one per core), and loads each into
 * a module: out[i] receives the module or NULL, status[i] its status (TE_OK, TE_ERR_COMPILE,
 * TE_ERR_LOAD, ...). errbufs (may be NULL) receive each failure's diagnostics. Returns TE_OK
 * when all built, else the first failing status. */
int te__c_build_sources(int n, const char *const *sources, const char *const *names,
                        const te_target *target, int jobs, te_module **out, int *status,
                        char **errbufs, size_t errbuf_size);

/* Median wall time in seconds of `repeat` runs after `warmup` runs. Returns TE_OK or the
 * kernel's failure status. */
int te__module_time(te_module *m, void *const *args, int warmup, int repeat, double *median_s);

/* The backend table (ggml's habit): what the tuner needs to drive any backend the same way. */
typedef struct te__backend {
    const char *name;
    /* Source text of a lowered function, owned by ctx; NULL on error (message on ctx). */
    const char *(*emit)(te_ctx *ctx, const te_lowered *f, const te_target *target);
    /* Compiles and loads several sources at once (see te__c_build_sources). */
    int (*compile)(int n, const char *const *sources, const char *const *names,
                   const te_target *target, int jobs, te_module **out, int *status,
                   char **errbufs, size_t errbuf_size);
    int (*run)(te_module *m, void *const *args);
    int (*time)(te_module *m, void *const *args, int warmup, int repeat, double *median_s);
} te__backend;

extern const te__backend te__c_backend;

#endif
