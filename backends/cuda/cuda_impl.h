/*
 * backends/cuda/cuda_impl.h (private): the pieces of the CUDA backend.
 *
 *   emit_cuda_*.c   lowered function -> CUDA C++ source and the kernels' launch descriptions
 *                   (emit_cuda_impl.h; pieces shared with the C emitter: backends/emit_common.h)
 *   nvrtc.c         NVRTC loaded with dlopen: source -> cubin, ptxas figures from its log
 *   driver.c        the driver API loaded with dlopen: devices, context, modules, launches,
 *                   memory, events
 *   module_cuda.c   te_cuda_build and te_cuda_module_* (ties the three together), timing
 *   templates.c     GPU schedule templates and their knob lists
 */
#ifndef TESSERA_BACKENDS_CUDA_IMPL_H
#define TESSERA_BACKENDS_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "te/internal.h"
#include "tessera/cuda.h"

/* One kernel of a program: its symbol, launch dimensions, and parameters. Parameters index the
 * program's buffer table: 0 .. n_args-1 are the lowered function's arguments, then temps. */
#define TE__CUDA_MAX_PARAMS 64
typedef struct te__cuda_kernel {
    const char *name;
    int grid[3], block[3];
    int nparams;
    int params[TE__CUDA_MAX_PARAMS];
} te__cuda_kernel;

/* The emitted program: source text plus what the runtime needs to launch it. Arena memory. */
typedef struct te__cuda_program {
    const char *source;
    int nkernels;
    te__cuda_kernel *kernels;
    int n_args;
    int ntemps;
    size_t *temp_bytes; /* device buffers the module allocates for root intermediates */
} te__cuda_program;

int te__cuda_emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out);
/* The same without the provenance comment and prelude: out->source holds only the kernels
 * (several lowered functions then share one te__cuda_prelude in one file). */
int te__cuda_emit_kernels(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out);
/* The prelude every emitted CUDA file has (floor division helpers). */
extern const char te__cuda_prelude[];

/* ---- nvrtc.c ---- */
/* Loads NVRTC once; TE_OK or TE_ERR_NO_CUDA with a message in errbuf. */
int te__nvrtc_load(char *errbuf, size_t n);
/* Compiles CUDA source with NVRTC for the virtual architecture compute_<sm> and returns the PTX
 * text in *ptx (malloc'd, NUL-terminated; caller frees), the log in *log (malloc'd; may be
 * NULL). TE_OK, TE_ERR_NO_CUDA or TE_ERR_COMPILE as te_nvrtc_compile. For tests and tools that
 * look at the instructions chosen. */
int te__nvrtc_ptx(const char *source, const char *name, int sm, char **ptx, char **log);
/* Reads ptxas' "-v" figures for kernel `name` from an NVRTC log into info. */
void te__ptxas_parse(const char *log, const char *name, te_cuda_kernel_info *info);

/* ---- driver.c ---- */
typedef void *te__cu_module;
typedef void *te__cu_func;
/* Loads libcuda, cuInit, retains device 0's primary context and makes it current. TE_OK or
 * TE_ERR_NO_CUDA with a message (also kept for te_cuda_errmsg). */
int te__cu_init(void);
int te__cu_module_load(const void *image, te__cu_module *mod, char *errbuf, size_t n);
void te__cu_module_unload(te__cu_module mod);
int te__cu_function(te__cu_module mod, const char *name, te__cu_func *fn, char *errbuf, size_t n);
/* Launches fn with params (pointers to the argument values) on the default stream. */
int te__cu_launch(te__cu_func fn, const int grid[3], const int block[3], void **params,
                  char *errbuf, size_t n);
/* Sets the thread-local error message (printf style) and returns code. */
int te__cuda_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Events: create, record on the default stream, elapsed ms between two, destroy. */
int te__cu_event_pair_time(int (*fn)(void *), void *user, double *ms);

#endif
