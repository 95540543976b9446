/*
 * gen/gen_impl.h (private): what the generators of standalone files share.
 *
 *   gen_common.c  the API (tessera/gen.h): options, the checked plan, provenance and ABI
 *                 comments, dispatcher pieces, writing files, schedules from the database
 *   gen_c.c       the C target (.c and .h)
 *   gen_cuda.c    the CUDA target (.cu and .h) and its default GPU schedules
 *
 * gen/ sits above backends/ and autotune/: it emits through the backends' private emitters
 * and reads the tuning database through te_tuner_best_record.
 */
#ifndef TESSERA_GEN_GEN_IMPL_H
#define TESSERA_GEN_GEN_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "te/internal.h"
#include "tessera/gen.h"

/* A checked generation request: names made valid and distinct, outputs counted. */
typedef struct te__gen_plan {
    int n;
    const te_gen_kernel *k;
    const te_gen_options *o;
    const te_target *target;
    const char *entry;                     /* the base name as an identifier (dispatcher, files) */
    const char **knames;                   /* kernel identifiers */
    int n_out;                             /* outputs of every kernel (the last n_out arguments) */
    const char *params[TE_GEN_MAX_PARAMS]; /* dispatcher parameter identifiers */
    char target_key[512];
} te__gen_plan;

/* Whether z may not name a generated parameter: a C or C++ keyword, a type or name the
 * generated code uses ("stream", "NULL"), a reserved identifier (te_*, __*, _X*), or one of the
 * NULL-terminated `extra` words (may be NULL). */
bool te__gen_reserved(const char *z, const char *const *extra);

/* Lowers kernel i of the plan for its target into *f; kernel 0 sets p->n_out, the others must
 * write as many outputs. Returns TE_OK, the lowering error (message on ctx), or TE_ERR_ARG
 * when the output counts differ. */
int te__gen_lower(te_ctx *ctx, te__gen_plan *p, int i, te_lowered **f);

/* The file names "<name>.<ext>" and "<name>.h" into src and hdr (n bytes each). */
void te__gen_file_names(const te__gen_plan *p, const char *ext, char *src, char *hdr, size_t n);
/* The opening of header hdr_name for target `kind` ("C", "CUDA"): the provenance comment, the
 * include guard "TESSERA_GEN_<ENTRY>_H" (also written into guard, guard_size bytes), the
 * includes (<stdbool.h> when `with_bool`, <stdint.h>), the `extern "C"` block, and the first
 * words of the ABI comment, "/" "* ABI of the functions below (<src_name> has their
 * definitions", which the caller continues. */
void te__gen_header_begin(te__gen_plan *p, te__sb *h, const char *src_name, const char *hdr_name,
                          const char *kind, bool with_bool, char *guard, size_t guard_size);
/* The ABI lines every header shares: row-major dense arrays, their strides, fixed shapes. */
extern const char te__gen_abi_arrays[];

/* The provenance comment of a generated file ("/" "*" ... "*" "/" and a newline). */
void te__gen_comment(te__gen_plan *p, te__sb *b, const char *file_name, const char *kind);
/* "m=64, n=64": kernel i's dispatch parameter values into buf (n bytes; "" without any). */
void te__gen_kernel_label(const te__gen_plan *p, int i, char *buf, size_t n);
/* The description of kernel i for the header: what it computes (every stage) and its arguments
 * (names given by cnames) with dtypes, shapes, strides and sizes, as comment lines " * ...". */
void te__gen_describe_kernel(te__gen_plan *p, te__sb *b, int i, const char *const *cnames);
/* The lines of the dispatcher comment listing parameter values and kernels. */
void te__gen_describe_dispatch(te__gen_plan *p, te__sb *b, const char *suffix);
/* "int64_t m, int64_t n, ..." (the dispatcher's parameters). */
void te__gen_dispatch_params(te__gen_plan *p, te__sb *b);
/* The condition "m == 64 && n == 64" of kernel i. */
void te__gen_dispatch_cond(te__gen_plan *p, te__sb *b, int i);
/* The statements of a dispatcher, after its opening brace: for every kernel i, "if (<cond>)
 * return <callees[i]><suffix>(<args...><extra>);", then "return -2;" and the closing brace.
 * args are the dispatcher's array arguments (kernel 0's argument count); extra (may be "")
 * follows them. */
void te__gen_dispatch_body(te__gen_plan *p, te__sb *b, const char *const *callees,
                           const char *suffix, const char *const *args, const char *extra);

/* Moves the finished texts into ctx and fills out (source, header and their names). Frees
 * both buffers. TE_OK or TE_ERR_NOMEM (message on ctx). */
int te__gen_finish(te_ctx *ctx, te__sb *src, te__sb *hdr, const char *src_name,
                   const char *hdr_name, te_gen_output *out);

/* The C target (gen_c.c): <name>.c and <name>.h. Errors as te_gen_sources. */
int te__gen_c(te_ctx *ctx, te__gen_plan *p, te_gen_output *out);
/* The CUDA target (gen_cuda.c): <name>.cu and <name>.h. Errors as te_gen_sources. */
int te__gen_cuda(te_ctx *ctx, te__gen_plan *p, te_gen_output *out);
/* The default GPU schedule of the outputs: the template of operator `op` with default knobs,
 * else the elementwise template; what (what_size bytes) describes it. TE_OK with the schedule
 * (in ctx) in *out; TE_ERR_UNSUPPORTED with a message on ctx when neither applies. */
int te__gen_cuda_default_schedule(te_ctx *ctx, const char *op, int n_out, te_tensor *const *outs,
                                  te_schedule **out, char *what, size_t what_size);

#endif
