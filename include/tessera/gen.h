/*
 * tessera/gen.h: standalone kernels for other projects (what `tessera gen` calls).
 *
 * Generation turns scheduled tensor expressions into a self-contained source file and a header
 * that another project compiles with its own compiler, with nothing of Tessera at run time:
 *
 *   C target:    <name>.c + <name>.h, plain C99 (`cc -std=c99 -Wall -Wextra -Werror -pedantic`
 *                clean; OpenMP loops when compiled with -fopenmp, serial otherwise);
 *   CUDA target: <name>.cu + <name>.h, the __global__ kernels (NVRTC compiles the file as is)
 *                plus host launchers on the CUDA runtime API (nvcc), declared in a header that
 *                plain C includes.
 *
 * Both files start with a provenance comment (workload and target keys, the trial the schedule
 * came from with its measured time and GFLOP/s and date, the schedule trace, the Tessera version
 * and the command that regenerates them). The header documents the ABI: function names, argument
 * order, dtypes, shapes, layout and strides, alignment, threads, return codes, and for CUDA the
 * launch configuration of every kernel.
 *
 * Several kernels go into one file with one prelude; with dispatch parameters (opts.n_params >
 * 0) the file also gets one entry `int <name>(int64_t p0, ..., args)` that calls the kernel
 * whose parameter values match and returns -2 for values no kernel was generated for.
 *
 * Any tensor expression works, not only the operator library's:
 *
 *     te_tensor *args[] = {X, W, Y};                       // inputs, then outputs
 *     te_gen_kernel k = {.name = "fused", .schedule = s, .n_args = 3, .args = args};
 *     te_gen_options o = te_gen_options_default("fused");
 *     te_gen_output out;
 *     if (te_gen_files(ctx, 1, &k, &o, "gen", &out) != TE_OK)   // gen/fused.c, gen/fused.h
 *         fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));
 *
 * or with the best database record of the workload (te_gen_kernel_from_db).
 *
 * Errors: calls return TE_OK or a negative status with a message on the context.
 */
#ifndef TESSERA_GEN_H
#define TESSERA_GEN_H

#include <stdint.h>

#include "tessera/backend.h"
#include "tessera/graph.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tuning_db.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dispatch parameters of one generated entry. */
#define TE_GEN_MAX_PARAMS 16

/* Where a kernel's schedule came from; written into the provenance comment. Every field is
 * optional (NULL / 0 / NAN when unknown). te_gen_kernel_from_db fills it. */
typedef struct te_gen_provenance {
    const char *workload_key; /* "matmul;k=64,m=64,n=64;f32" */
    const char *target_key;   /* key of the target the record was measured on; NULL: the key of
                                 the generation target */
    const char *db_path;      /* database the record came from */
    int from_db;              /* 1: the schedule is a database record's trace */
    const char *trial_uid;    /* the record's stable id (UUIDv7) */
    int64_t trial_id;         /* its row id */
    int64_t job_id;
    double median_s;         /* measured median run time */
    double gflops;           /* GFLOP/s at the median */
    int64_t created_us;      /* when it was measured (microseconds since 1970 UTC) */
    const char *measured_by; /* Tessera version that measured it */
    int exact_target;        /* 0: the record is from a compatible but different target */
    const char *note;        /* free text ("no record for this target: default schedule") */
    const char *reason;      /* without a record: why ("no record for this target in x.db") */
    const char *fallback;    /* without a record: the schedule used instead ("the default
                                schedule (the plain loop nest, untuned)"); note is
                                "<reason>: <fallback>" */
} te_gen_provenance;

/* One kernel to generate. */
typedef struct te_gen_kernel {
    const char *name;      /* its C function name (made a valid identifier) */
    te_schedule *schedule; /* the scheduled computation */
    int n_args;            /* arguments as for te_lower: inputs, then the outputs */
    te_tensor *const *args;
    const char *const *arg_names;      /* optional: the arguments' names in the generated code
                                          (n_args entries, NULL entries keep the tensor's name) */
    int64_t params[TE_GEN_MAX_PARAMS]; /* with a dispatcher: this kernel's parameter values */
    te_gen_provenance prov;
} te_gen_kernel;

typedef struct te_gen_options {
    const char *name;        /* base name: files <name>.c/.cu and <name>.h, the dispatcher */
    const te_target *target; /* C target (te_target_host) or CUDA (te_target_cuda); NULL: host */
    int n_params;            /* > 0: emit the dispatcher <name>(int64_t params..., args) */
    const char *params[TE_GEN_MAX_PARAMS]; /* its parameter names ("m", "n", "k") */
    const char *command; /* command line that regenerates the files (provenance) */
    const char *op;      /* operator name for the comments; NULL: the outputs' tag */
} te_gen_options;

/* Defaults: name `name`, host C target, no dispatcher. */
te_gen_options te_gen_options_default(const char *name);

/* Generated text (owned by the context). */
typedef struct te_gen_output {
    const char *source;      /* the .c or .cu file */
    const char *header;      /* the .h file */
    const char *source_name; /* "<name>.c" or "<name>.cu" */
    const char *header_name; /* "<name>.h" */
    const char *source_path; /* te_gen_files: where they were written (else NULL) */
    const char *header_path;
} te_gen_output;

/* Generates the source and header for kernels[0..n-1] into *out. Kernel names must be
 * distinct; with a dispatcher every kernel must take the same argument dtypes and count and
 * have distinct parameter values. TE_ERR_ARG for bad options, lowering and GPU check errors
 * as te_lower reports them. */
int te_gen_sources(te_ctx *ctx, int n, const te_gen_kernel *kernels, const te_gen_options *opts,
                   te_gen_output *out);

/* te_gen_sources, then writes both files into directory `dir` (created when missing, one
 * level). TE_ERR_IO with the path when a file cannot be written. out may be NULL. */
int te_gen_files(te_ctx *ctx, int n, const te_gen_kernel *kernels, const te_gen_options *opts,
                 const char *dir, te_gen_output *out);

/* What te_gen_kernel_from_db looks up and for which kernel. Initialize with designated
 * initializers (`te_gen_from_db_options o = {.name = "mm", ...}`): every field left out is zero,
 * and a field added later is one whose zero keeps today's behaviour. */
typedef struct te_gen_from_db_options {
    te_db *db;                /* the database; NULL: default schedules */
    const char *db_path;      /* recorded in the provenance only (may be NULL) */
    const char *workload_key; /* the workload to look up (NULL: no lookup) */
    const char *op;           /* operator name for the CUDA default template; NULL: outputs' tag */
    const char *name;         /* the kernel's name */
    int n_args;               /* args: inputs, then the n_out outputs */
    te_tensor *const *args;
    int n_out;
    const te_target *target; /* NULL: the host */
    int flags;               /* te_db_best flags, e.g. TE_DB_FALLBACK */
    /* When set: this schedule trace instead of the lookup (a model's whole-run record's
     * schedule of the workload, te_graph_whole_trace_section), with the provenance of
     * trace_record (required with it); a trace that no longer applies falls back to the
     * lookup. */
    const char *trace;
    const te_db_trial *trace_record;
} te_gen_from_db_options;

/* Fills *k (name, schedule, args, prov) with the fastest ok record of o->workload_key on
 * o->target in o->db (te_db_best with `flags`, e.g. TE_DB_FALLBACK, then te_schedule_apply_trace on
 * a fresh schedule of the outputs, which are the last n_out of args; the lookup is
 * te_tuner_best_record). Without a database, a record, or with a trace that no longer applies,
 * it uses the default schedule: prov.from_db is 0 and prov.note says why and what was used
 * (nothing is printed: a caller that warns reads the note). The default schedule of a C target
 * is te_schedule_create's plain loop nest; a CUDA target needs a GPU schedule, so the default
 * is the operator's CUDA template with default knobs (te_cuda_schedule_*, chosen from `op` or
 * the outputs' tag), else the elementwise template; TE_ERR_UNSUPPORTED when neither applies.
 * Strings are copied into ctx. db_path (may be NULL) is only recorded in the provenance. */
int te_gen_kernel_from_db(te_ctx *ctx, const te_gen_from_db_options *o, te_gen_kernel *k);

/* ---- A fused graph as standalone C ------------------------------------------------------- */

/* What te_gen_graph_files wrote. Paths are owned by the context. */
typedef struct te_gen_graph_result {
    int n_groups;              /* fused groups: kernel calls of the runner, in plan order */
    int n_kernels;             /* distinct kernels written (groups doing the same work share one) */
    int n_from_db;             /* kernels whose schedule is a database record */
    int n_weights;             /* constants written under weights/ */
    const char *runner_path;   /* DIR/runner.c */
    const char *makefile_path; /* DIR/Makefile */
    const char *readme_path;   /* DIR/README.md: what the files are, how to build */
} te_gen_graph_result;

/* Writes plan p of graph g (te_graph_fuse) as a standalone C program into dir (created when
 * missing, one level): every fused group's expression (te_graph_group_expr_build, the one
 * `tessera run` compiles and `tessera tune` tunes) as a kernel of DIR/<name>.c/.h with the best
 * record of its workload in db (te_gen_kernel_from_db; db may be NULL: default schedules, the
 * provenance says so); the constants as DIR/weights/<value>.npy; DIR/runner.c, a C99 program
 * that allocates the inputs and outputs and one pool for the intermediates (offsets of
 * te_graph_memplan_create), reads the weights and the inputs from .npy files, calls the kernels
 * in plan order and writes every graph output as .npy; DIR/Makefile and DIR/README.md with the
 * build line. opts gives the base name (made an identifier), the target (the C target only;
 * NULL: host) and the command for the provenance; dispatch parameters are ignored. g must be
 * the graph p was made from. TE_OK, or a status with a message on ctx (TE_ERR_UNSUPPORTED for
 * a CUDA target or a dtype .npy files do not carry, TE_ERR_IO naming the file). */
int te_gen_graph_files(te_ctx *ctx, te_graph *g, const te_fuse_plan *p, te_db *db,
                       const char *db_path, const te_gen_options *opts, const char *dir,
                       te_gen_graph_result *out);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_GEN_H */
