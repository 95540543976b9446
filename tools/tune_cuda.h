/*
 * tools/tune_cuda.h: `tessera tune OP --target cuda` (tools/tune_cuda.c).
 */
#ifndef TESSERA_TOOLS_TUNE_CUDA_H
#define TESSERA_TOOLS_TUNE_CUDA_H

#include <stdint.h>

#include "tessera/autotune.h"

/* Tunes operator op (parameters `shape`) for CUDA. With dry_run_only: draws up to `trials`
 * distinct candidates of its GPU search space (seed), compiles each with NVRTC for every SM of
 * `sms` ("80,90"; NULL: those two), and prints (json: as one JSON object) the registers, spills
 * and shared memory ptxas reports and what the resource check would prune; nothing is run.
 * Without it: measures the candidates on device 0 (forked children; tools/tune_cuda.c) and
 * records every trial in the database db_path (NULL: none); a candidate with no result after
 * timeout_s seconds (<= 0: 30) is killed and recorded as a timeout. `space`: the operator's GPU
 * template (TE_SPACE_TEMPLATE), the GPU sketch rules (TE_SPACE_SKETCH, autotune/sketch_gpu.c),
 * or the template where there is one (TE_SPACE_AUTO). Returns the exit status: 0, 1
 * (a candidate failed to compile in a dry run, no NVRTC, no device, no GPU search space for op, no
 * candidate ran correctly, the database failed) or 2 (bad arguments). */
int te__tune_cuda(const char *op, const char *shape, int64_t trials, const char *sms, uint64_t seed,
                  int dry_run_only, int json, const char *db_path, double timeout_s,
                  te_space_kind space);

#endif
