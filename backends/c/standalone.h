/*
 * backends/c/standalone.h (private): what the two generators of standalone files share
 * (backends/c/standalone.c: the API, the C target, provenance; backends/cuda/standalone_cuda.c:
 * the CUDA target).
 */
#ifndef TESSERA_BACKENDS_C_STANDALONE_H
#define TESSERA_BACKENDS_C_STANDALONE_H

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
    const char *entry;          /* the base name as an identifier (dispatcher, file names) */
    const char **knames;        /* kernel identifiers */
    int n_out;                  /* outputs of every kernel (the last n_out arguments) */
    const char *params[TE_GEN_MAX_PARAMS]; /* dispatcher parameter identifiers */
    char target_key[512];
} te__gen_plan;

/* The provenance comment of a generated file ("/" "*" ... "*" "/" and a newline). */
void te__gen_comment(te__gen_plan *p, te__sb *b, const char *file_name, const char *kind);
/* The description of kernel i for the header: what it computes (every stage) and its arguments
 * (names given by cnames) with dtypes, shapes, strides and sizes, as comment lines " * ...". */
void te__gen_describe_kernel(te__gen_plan *p, te__sb *b, int i, const char *const *cnames);
/* The lines of the dispatcher comment listing parameter values and kernels. */
void te__gen_describe_dispatch(te__gen_plan *p, te__sb *b, const char *suffix);
/* "<entry>(int64_t m, int64_t n, ..." without the closing part. */
void te__gen_dispatch_params(te__gen_plan *p, te__sb *b);
/* The condition "m == 64 && n == 64" of kernel i. */
void te__gen_dispatch_cond(te__gen_plan *p, te__sb *b, int i);

/* The CUDA target (backends/cuda/standalone_cuda.c). */
int te__gen_cuda(te__gen_plan *p, te_gen_output *out);
/* The default GPU schedule of the outputs: the template of operator `op` with default knobs,
 * else the elementwise template. TE_ERR_UNSUPPORTED with a message when neither applies. */
int te__gen_cuda_default_schedule(te_ctx *ctx, const char *op, int n_out, te_tensor *const *outs,
                                  te_schedule **out, char *what, size_t what_size);

#endif
