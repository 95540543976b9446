/*
 * tools/tune_extras.h: what `tessera tune` measures and writes beside the job: the strongest
 * baselines, measured in a child the way `tessera bench` measures them (tune_baselines.c), and
 * the tuning curve as SVG (tune_curve.c).
 */
#ifndef TESSERA_TOOLS_TUNE_EXTRAS_H
#define TESSERA_TOOLS_TUNE_EXTRAS_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "tools/baselines.h"

/* Repetitions of each baseline: `tessera bench`'s default. */
#define TE_TUNE_BASELINE_REPS 9

/* The job's best schedule re-measured beside the baselines. */
typedef struct {
    int ok;
    double ours, err; /* GFLOP/s (the tuner's flop count), error against OpenBLAS */
    te_bl_result r;
} te__tune_final;

/* The baseline shape of a task (matmul and the MLP gate have baselines); 0 when it has none. */
int te__tune_baseline_shape(const char *op, const char *params, te_bl_shape *shape);
/* Measures the strongest baselines of a task on `threads` threads, in a child process; 0 when
 * the task has no baseline or the measurement failed. */
int te__tune_measure_baseline(const char *op, const char *params, int threads, te_bl_result *r);
/* The KEY=VAL parameters of a workload key ("matmul;k=8,m=8,n=8;f32" -> "k=8,m=8,n=8"). */
void te__tune_task_params(const char *key, char *buf, size_t n);
/* The best schedule of a task (its trace) re-measured beside the baselines in a child; 0 when
 * not possible. */
int te__tune_measure_final(const char *op, const char *params, const char *trace, int threads,
                           te__tune_final *fr);
/* "oneDNN" or "OpenBLAS": how the progress line names the strongest baseline. */
const char *te__tune_best_short(const te_bl_result *r);
/* Writes the tuning curve of one task of job_id (best GFLOP/s against trials, the baseline as
 * a line when finite) as SVG to path. 0 on success, -1 with a message on stderr otherwise. */
int te__tune_write_curve(const char *path, te_db *db, const te_tune_task_info *info,
                         const te_db_target *tgt, int64_t job_id, double baseline,
                         const char *baseline_name);

#endif
