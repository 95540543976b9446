/*
 * backends/c/c_backend.h (private): the C backend's pieces behind its function table
 * (backends/backend_impl.h, defined in module.c) and for the generator: kernel naming, several
 * kernels in one translation unit, and building several sources in one parallel compiler run.
 */
#ifndef TESSERA_BACKENDS_C_C_BACKEND_H
#define TESSERA_BACKENDS_C_C_BACKEND_H

#include <stddef.h>

#include "te/internal.h"
#include "tessera/backend.h"

/* The C identifier used for a kernel called `name` (invalid characters become '_', C keywords
 * and names in the prelude's te_ namespace get a suffix). The packed entry is
 * "<ident>_packed". Writes at most n bytes into buf and returns buf. */
char *te__c_kernel_ident(const char *name, char *buf, size_t n);

/* Several lowered functions in one C translation unit: one comment, one prelude (includes,
 * macros, vector typedefs, inline helpers: the union of what the kernels use, each once), then
 * the kernels in order. te_emit_c is this with n = 1 and no options. */
typedef struct te__c_unit_opts {
    const char *comment; /* text placed first (a complete C comment); NULL: the provenance
                            header te_emit_c writes */
    int no_packed;       /* omit the packed entries <name>_packed */
    int standalone;      /* for other projects' builds: also silence GCC's -Wmaybe-uninitialized,
                            which -O2 -fopenmp reports for register tiles assigned and read
                            under the same tail guards */
    const char *const *const *arg_names; /* per kernel, per argument: the C name to use (made
                                            valid and unique); NULL: the buffers' names */
} te__c_unit_opts;

/* What a caller writing declarations for an emitted kernel needs to know. Arena strings. */
typedef struct te__c_kernel_info {
    const char *ident; /* the kernel's C name */
    int n_params;
    const char **params; /* C names of its parameters (the lowered function's arguments) */
    int n_nt;
    const char **nt_params; /* parameters written with streaming stores when 64-byte aligned */
    bool may_fail;          /* allocates heap scratch: may return -1 */
    bool uses_omp;          /* has OpenMP loop pragmas */
    bool uses_amx;          /* calls AMX intrinsics: returns -4 when the OS refuses AMX */
    const char *features;   /* the CPU features its tensor intrinsics need ("" when none) */
} te__c_kernel_info;

/* Emits fs[0..n-1] (distinct kernel names) into one source owned by ctx; info (may be NULL)
 * receives n entries. NULL on error with a message on ctx. */
const char *te__emit_c_unit(te_ctx *ctx, int n, const te_lowered *const *fs,
                            const te_target *target, const te__c_unit_opts *opts,
                            te__c_kernel_info *info);

/* Compiles n emitted sources (te_emit_c output) for kernels named names[i] with the target's
 * compiler and flags, up to `jobs` compilers at once (<= 0: one per core), and loads each into
 * a module: out[i] receives the module or NULL, status[i] its status (TE_OK, TE_ERR_COMPILE,
 * TE_ERR_LOAD, ...). errbufs (may be NULL) receive each failure's diagnostics. Returns TE_OK
 * when all built, else the first failing status. */
int te__c_build_sources(int n, const char *const *sources, const char *const *names,
                        const te_target *target, int jobs, te_module **out, int *status,
                        char **errbufs, size_t errbuf_size);

/* The same for units of several kernels: source i holds counts[i] kernels named
 * names[i][0 .. counts[i]), and out receives one module per name, in order (the modules of one
 * source share its loaded library). status[i] and errbufs[i] are per source. Returns TE_OK
 * when all built, else the first failing status. */
int te__c_build_units(int n, const char *const *sources, const int *counts,
                      const char *const *const *names, const te_target *target, int jobs,
                      te_module **out, int *status, char **errbufs, size_t errbuf_size);

/* Median wall time in seconds of `repeat` runs after `warmup` runs. Returns TE_OK or the
 * kernel's failure status. */
int te__module_time(te_module *m, void *const *args, int warmup, int repeat, double *median_s);

#endif
