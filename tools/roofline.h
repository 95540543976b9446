/*
 * tools/roofline.h: roofline reports (`tessera db roofline`, `tessera bench --roofline`): every
 * kernel's flops and compulsory bytes counted from its lowered IR (te_kernel_count), its
 * arithmetic intensity, and the fraction it reaches of the roof min(peak, intensity x
 * bandwidth) of the machine's peaks recorded by `tessera target --measure`; printed as a table
 * and drawn as an SVG roofline plot. docs/PERFORMANCE.md "Roofline" explains the figures.
 */
#ifndef TESSERA_TOOLS_ROOFLINE_H
#define TESSERA_TOOLS_ROOFLINE_H

#include <stdio.h>

#include "tessera/autotune.h"
#include "tessera/te.h"
#include "tessera/tuning_db.h"
#include "tools/bench_report.h"

/* One kernel on the plot. */
typedef struct te_roof_point {
    char label[160];   /* the workload key, or the benchmark row's name */
    char dtype[8];     /* its dtype ("f32", "f64", ...) */
    double flops;      /* per run, from the lowered IR */
    double bytes;      /* compulsory bytes per run */
    double seconds;    /* measured time of one run */
    double gflops;     /* flops / seconds / 1e9 */
    double intensity;  /* flops / bytes */
    double roof;       /* min(peak, intensity x bandwidth), GFLOP/s */
    double fraction;   /* gflops / roof */
    const char *bound; /* "memory" (left of the ridge) or "compute"; NULL without a roof */
} te_roof_point;

/* The two roofs of one machine. */
typedef struct te_roof_machine {
    double peak_gflops; /* FMA peak of the dtype, widest ISA */
    double bw_gbps;     /* copy bandwidth */
    char peak_what[96]; /* "f32 avx512, 2 threads" */
    char bw_what[96];   /* "copy, 2 threads" */
} te_roof_machine;

/* Counts the flops and bytes of the library operator behind a canonical workload key
 * ("matmul;k=64,m=64,n=64;f32") with `trace` applied (NULL or a trace that does not apply: the
 * default schedule, and *note says so), lowered for the host CPU. Returns TE_OK, or an error
 * with a message on ctx (a key that names no library operator: TE_ERR_NOT_FOUND). *note, when
 * not NULL, receives a static string or NULL. dtype (8 bytes, may be NULL) receives the key's
 * dtype. */
int te_roofline_count(te_ctx *ctx, const char *workload_key, const char *trace,
                      te_kernel_counts *out, char *dtype, const char **note);

/* Fills p's gflops, intensity, roof and fraction from its flops, bytes and seconds. */
void te_roofline_point_finish(te_roof_point *p, const te_roof_machine *m);

/* The roofs of target_key from the peaks in db for dtype ("f64" uses the f64 FMA peak, any
 * other dtype the f32 one): the widest ISA, at `threads` threads when measured, else the most
 * threads measured. Returns TE_OK, TE_ERR_NOT_FOUND when no peaks are recorded (message in
 * why), or a database error (message on db). */
int te_roofline_machine(te_db *db, const char *target_key, int threads, const char *dtype,
                        te_roof_machine *m, char *why, size_t why_size);

/* Prints the table: kernel, GFLOP/s, AI, roof, fraction and what bounds it. */
void te_roofline_print_table(FILE *f, const te_roof_point *p, int n);

/* Writes an SVG roofline plot of the n points under the roofs of m (log-log axes with decade
 * ticks and labels, the bandwidth roof and the compute roof as lines, every kernel a labelled
 * point) to path. Returns 0, or -1 with a message on stderr. */
int te_roofline_write_svg(const char *path, const te_roof_point *p, int n, const te_roof_machine *m,
                          const char *title);

/* `tessera db roofline`: the best ok trial of every (workload, target) of db_path (workload
 * and target: substrings to keep, may be NULL), counted and placed under its target's roofs;
 * the table on stdout (JSON lines with json), the plot to svg when not NULL. A library
 * operator is recounted (te_roofline_count; the trial's stored bytes win when present); any
 * other workload (a user expression, a fused graph group: a key with a fourth field
 * expr=HASH) takes the workload's stored flops and the bytes stored with its trials (schema
 * 5), and is left out with a message on stderr when no trial of it stores them (recorded
 * before schema 5), as are CUDA targets. Returns the exit status (0 ok, 1 failed or nothing
 * to report). */
int te_roofline_db_command(const char *db_path, const char *workload, const char *target,
                           const char *svg, int json);

/* `tessera bench --roofline FILE`: every row with an operator (te_bench_row.op) counted and
 * placed under the roofs of the host target at the row's thread count: the peaks recorded in
 * db_path (NULL: $TESSERA_DB, else ./tessera.db) when there are any, else measured now (FMA
 * of f32 with the widest vectors, copy bandwidth). Prints the table on out and writes the
 * plot of the rows at the largest thread count to svg. Returns 0, or 1 with a message. */
int te_roofline_bench(const te_bench_row *rows, int n, const char *db_path, const char *svg,
                      FILE *out);

#endif
