/*
 * backends/backend_impl.h (private): the backend function table (ggml's habit). te_build, the
 * tuner's measurer and the generators reach a backend through te__backend_get(kind) and the
 * entries below, the same way for C and CUDA; an entry a backend does not have yet is NULL.
 *
 *     const te__backend *be = te__backend_get(target->backend);
 *     const char *src = be->emit(ctx, f, target);
 *     te__kernel *k;  int st;
 *     be->compile_many(1, &src, (const int[]){1}, (const char *const *[]){&name}, target, 1,
 *                      &k, &st, NULL, 0);
 *     be->run(k, args);
 *     be->free(k);
 */
#ifndef TESSERA_BACKENDS_BACKEND_IMPL_H
#define TESSERA_BACKENDS_BACKEND_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "te/internal.h"
#include "tessera/backend.h"

/* Options of emit_standalone. */
typedef struct te__emit_opts {
    const char *comment; /* text placed first (a complete comment); "" or NULL: none */
    bool no_prelude;     /* only the kernels (a backend with a fixed `prelude` text) */
    const char *const *const *arg_names; /* C backend: per function, per argument, the C name
                                            to use (made valid and unique); NULL: the buffers' */
} te__emit_opts;

/* What emit_standalone tells about each function, in the backend's own terms (arena memory). */
struct te__c_kernel_info;
struct te__cuda_program;
typedef struct te__emitted_fn {
    const struct te__c_kernel_info *c;   /* C: the kernel's name, parameters, OpenMP, ... */
    const struct te__cuda_program *cuda; /* CUDA: its kernels' text, launches, temporaries */
} te__emitted_fn;

/* A loaded kernel of some backend (a te_module for C, a te_cuda_module for CUDA), freed with
 * its backend's `free`. */
typedef struct te__kernel te__kernel;

typedef struct te__backend {
    te_backend_kind kind;
    const char *name; /* "c", "cuda" */
    /* Target facts: the default target of the backend (C: te_target_host()). Returns TE_OK, or
     * TE_ERR_NO_CUDA when it needs a device that is missing. */
    int (*target)(te_target *out);
    /* Source text of one lowered function, owned by ctx; NULL on error (message on ctx). */
    const char *(*emit)(te_ctx *ctx, const te_lowered *f, const te_target *target);
    /* Source text of several lowered functions (distinct names) in one unit with one prelude,
     * owned by ctx; NULL on error (message on ctx). */
    const char *(*emit_unit)(te_ctx *ctx, int n, const te_lowered *const *fs,
                             const te_target *target);
    /* The text every unit of the backend starts with after its comment, when it is fixed (CUDA);
     * NULL when it depends on the kernels (C: the union of the helpers they use). */
    const char *prelude;
    /* Source for another project's build (gen/): fs[0 .. n) (distinct names) in one unit with
     * opts->comment first, then the prelude (unless opts->no_prelude), then the kernels, with
     * no Tessera entry points. *source (owned by ctx) receives the text, fns[i] (may be NULL)
     * what the backend knows about function i. TE_OK, or an error with the message on ctx
     * (TE_ERR_UNSUPPORTED for no_prelude without a fixed prelude). */
    int (*emit_standalone)(te_ctx *ctx, int n, const te_lowered *const *fs, const te_target *target,
                           const te__emit_opts *opts, const char **source, te__emitted_fn *fns);
    /* Compiles and loads n sources, up to `jobs` compilers at once (<= 0: one per core).
     * Source i holds counts[i] kernels named names[i][0 .. counts[i]); out receives one kernel
     * per name, in order (sum of counts entries; NULL where it failed), status[i] the status
     * of source i (TE_OK, TE_ERR_COMPILE, TE_ERR_LOAD, ...), errbufs[i] (may be NULL) its
     * diagnostics. Returns TE_OK when all built, else the first failing status. */
    int (*compile_many)(int n, const char *const *sources, const int *counts,
                        const char *const *const *names, const te_target *target, int jobs,
                        te__kernel **out, int *status, char **errbufs, size_t errbuf_size);
    /* Runs a kernel on the data of its arguments (host arrays). TE_OK or the kernel's
     * failure status. */
    int (*run)(te__kernel *k, void *const *args);
    /* Median wall time in seconds of `repeat` runs after `warmup` runs. TE_OK or the kernel's
     * failure status. */
    int (*time)(te__kernel *k, void *const *args, int warmup, int repeat, double *median_s);
    /* The packed entry `int f(void **args)` a measuring child calls directly (no other call in
     * between); NULL when the backend has none. */
    te_packed_fn (*entry)(const te__kernel *k);
    /* The kernel's source (owned by the kernel). */
    const char *(*source)(const te__kernel *k);
    /* Unloads and frees; accepts NULL. */
    void (*free)(te__kernel *k);
} te__backend;

/* The table of backend `kind` (backends/backend.c); NULL for an unknown kind. Static data. */
const te__backend *te__backend_get(te_backend_kind kind);

/* The kernel caches' keys: 64-bit FNV-1a hash of n bytes continuing from h (start with
 * TE__HASH_INIT). */
#define TE__HASH_INIT 0xcbf29ce484222325ull
unsigned long long te__hash_bytes(unsigned long long h, const void *p, size_t n);

/* The kernel cache directory every backend shares: $TESSERA_CACHE_DIR, else
 * $XDG_CACHE_HOME/tessera, else ~/.cache/tessera, else /tmp/tessera-cache-<uid>. malloc'ed
 * (caller frees); NULL when out of memory. */
char *te__cache_dir(void);
/* Creates `dir` and its missing parents (mkdir -p). Returns 0 or -1 with errno set. */
int te__mkdir_p(const char *dir);

/* The argument checks te_build and te_cuda_build (`fn`) share: s, an out pointer (have_out) and
 * a name are required. Returns TE_OK, or TE_ERR_ARG with the message on s's context. */
int te__build_check_args(te_schedule *s, bool have_out, const char *name, const char *fn);

/* ---- The entries, for backends/backend.c. Each behaves as its field above documents. */

/* C (backends/c/module.c) */
int te__c_target(te_target *out);
const char *te__c_emit_unit(te_ctx *ctx, int n, const te_lowered *const *fs,
                            const te_target *target);
int te__c_emit_standalone(te_ctx *ctx, int n, const te_lowered *const *fs, const te_target *target,
                          const te__emit_opts *opts, const char **source, te__emitted_fn *fns);
int te__c_compile_many(int n, const char *const *sources, const int *counts,
                       const char *const *const *names, const te_target *target, int jobs,
                       te__kernel **out, int *status, char **errbufs, size_t errbuf_size);
int te__c_run(te__kernel *k, void *const *args);
int te__c_time(te__kernel *k, void *const *args, int warmup, int repeat, double *median_s);
te_packed_fn te__c_entry(const te__kernel *k);
const char *te__c_source(const te__kernel *k);
void te__c_free(te__kernel *k);

/* CUDA (backends/cuda/module_cuda.c). Its kernels are built from lowered programs
 * (te_cuda_build: the launch dimensions come from emission), so it has no compile_many,
 * emit_unit, host timer or packed entry yet; emit_standalone with no_prelude and one function
 * gives that function's kernels alone. */
int te__cuda_target(te_target *out);
int te__cuda_emit_standalone(te_ctx *ctx, int n, const te_lowered *const *fs,
                             const te_target *target, const te__emit_opts *opts,
                             const char **source, te__emitted_fn *fns);
int te__cuda_run(te__kernel *k, void *const *args);
const char *te__cuda_source(const te__kernel *k);
void te__cuda_free(te__kernel *k);

#endif
