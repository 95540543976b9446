/*
 * tessera/backend.h: building a schedule into runnable code (te_build lowers it with te_lower,
 * declared in schedule.h, then emits, compiles and loads it).
 *
 *     te_target tgt = te_target_host();
 *     te_module *m = NULL;
 *     if (te_build(s, 3, (te_tensor *[]){A, B, C}, "matmul", &tgt, &m) != TE_OK)
 *         fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));
 *     te_module_run(m, (void *[]){a, b, c});   // a, b, c: row-major contiguous data
 *     puts(te_module_source(m));
 *     te_module_free(m);
 *
 * Arguments are the placeholders a kernel reads and the tensors it writes, in the order the
 * caller lists them; generated code reads and writes contiguous row-major arrays.
 */
#ifndef TESSERA_BACKEND_H
#define TESSERA_BACKEND_H

#include <stdio.h>

#include "tessera/schedule.h"
#include "tessera/target.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled, loaded kernel. */
typedef struct te_module te_module;

/* Lowers, emits source, compiles (with the on-disk cache) and loads. On success stores a new
 * module in *out (free with te_module_free). On failure returns a negative status with the
 * message on the schedule's context: TE_ERR_COMPILE carries the compiler's diagnostics and
 * the path of the source file. */
int te_build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
             const te_target *target, te_module **out);
/* The second half of te_build, for a caller that has lowered s itself (te_lower with the same
 * target and name, to inspect the IR first): emits, compiles and loads f. ctx is the
 * schedule's context (errors go there). Stores a new module in *out (te_module_free) and
 * returns TE_OK, or TE_ERR_ARG (a NULL argument), TE_ERR_UNSUPPORTED (not a C target) or
 * te_build's compile errors, with *out NULL. */
int te_build_lowered(te_ctx *ctx, const te_lowered *f, const char *name, const te_target *target,
                     te_module **out);
/* Emits C source for a lowered function without compiling it. The string is owned by the
 * context's arena. Returns NULL on error. */
const char *te_emit_c(te_ctx *ctx, const te_lowered *f, const te_target *target);
/* Runs the kernel: args[i] is the data of the i-th tensor given to te_build. Returns TE_OK. */
int te_module_run(te_module *m, void *const *args);
/* The generated source (owned by the module). */
const char *te_module_source(const te_module *m);
/* Path of the cached source file (owned by the module). */
const char *te_module_source_path(const te_module *m);
/* The packed entry `int <name>_packed(void **args)`, for callers that time kernels. */
typedef int (*te_packed_fn)(void **args);
te_packed_fn te_module_entry(const te_module *m);
/* Unloads and frees. Accepts NULL. */
void te_module_free(te_module *m);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_BACKEND_H */
