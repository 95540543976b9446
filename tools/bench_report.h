/*
 * tools/bench_report.h: the rows `tessera bench` measures, and the Markdown report
 * (`tessera bench --report FILE`, docs/PERFORMANCE.md) written from them.
 */
#ifndef TESSERA_TOOLS_BENCH_REPORT_H
#define TESSERA_TOOLS_BENCH_REPORT_H

#include <stdbool.h>

typedef struct te_bench_row {
    char workload[64];
    int threads;
    const char *unit;                /* "gflops" or "gbps" */
    double ours, base;               /* base: the strongest trusted baseline, NAN when none */
    double openblas, onednn;         /* NAN when not measured or left out */
    char base_name[48];              /* "openblas sgemm", "onednn matmul", "memcpy", ... */
    char base_impl[112];             /* which kernels the strongest baseline ran */
    char ob_impl[112], dn_impl[112]; /* each library's kernels, "" when not measured */
    const char *other_impl;          /* the one of them that is not the strongest, or "" */
    double err;
    /* For `tessera bench --roofline`: our kernel's median time and the library operator it
     * computes (te_op_build's name and parameters; op "" when it is none). */
    double seconds;
    char op[24], params[96];
    char note[256]; /* what else the row says ("tessera: amx_bf16_32x32"), "" when nothing */
    bool lowp;      /* bf16/int8 on matrix instructions: the f32 FMA peak is no roof for it */
} te_bench_row;

/* Writes the report to path: the machine (CPU, ISA, cores), its measured FMA peak and copy
 * bandwidth for each thread count, and every row with its ratios and the fraction of peak
 * (GFLOP/s rows) or of copy bandwidth (GB/s rows) it reaches, plus the notes the benchmark
 * printed (which OpenBLAS and oneDNN kernels ran, the machine's load). Returns 0, or -1 with a
 * message on stderr when the file cannot be written. */
/* The report's "Roofline" section (Markdown), which explains `tessera bench --roofline`'s plot
 * (docs/roofline.svg beside the report). Static text. */
extern const char *const te_bench_roofline_section;

int te_bench_write_report(const char *path, const te_bench_row *rows, int n, const int *threads,
                          int nthreads, int reps, const char *openblas_note, const char *dn_note,
                          const char *load_note, const char *db_path);

/* A kernel built from a tuning database's best record (`tessera bench --db`). */
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/tuning_db.h"
typedef struct te_bench_db_kernel {
    te_tensor *args[2 * TE_OP_MAX_IO]; /* the module's arguments: the inputs, then the outputs */
    int n_in, n_out;
    te_op_params kv; /* the parsed parameters */
    te_module *m;    /* te_module_free it */
    char key[512];   /* the workload key */
    char intrin[64]; /* the tensor intrinsic its schedule calls, "" when none */
} te_bench_db_kernel;

/* Builds operator op with params (te_op_build) in ctx and compiles it for `threads` threads
 * with the best schedule the database holds for it (one tuned on that many cores, else on
 * the host's). Returns 0 (k filled; the tensors belong to ctx, the module to the caller), or
 * 1 with a line on stderr when the database has no record. Exits on a build failure, as the
 * benchmarks do (tools/cmd_bench.c). */
int te_bench_db_module(te_db *db, te_ctx *ctx, const char *op, const char *params, int threads,
                       te_bench_db_kernel *k);

/* In a benchmark: exits with the file, line and the context's message when cond is false (a
 * kernel that cannot be built is a bug of the benchmark, not a measurement). Needs a te_ctx
 * named ctx, <stdio.h> and <stdlib.h>. */
#define TE_BENCH_CHECK(cond)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "tessera bench: %s:%d: %s\n", __FILE__, __LINE__, te_ctx_errmsg(ctx)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
