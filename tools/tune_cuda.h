/*
 * tools/tune_cuda.h: `tessera tune OP --target cuda` (tools/tune_cuda.c).
 */
#ifndef TESSERA_TOOLS_TUNE_CUDA_H
#define TESSERA_TOOLS_TUNE_CUDA_H

#include <stdint.h>

/* Tunes operator op (parameters `shape`) for CUDA. With dry_run_only: draws up to `trials`
 * distinct candidates of its GPU search space (seed), compiles each with NVRTC for every SM of
 * `sms` ("80,90"; NULL: those two), and prints (json: as one JSON object) the registers, spills
 * and shared memory ptxas reports and what the resource check would prune. Measuring on a GPU
 * is not written yet: without dry_run_only it says so. Returns the exit status: 0, 1 (a
 * candidate failed to compile, no NVRTC, no GPU search space for op) or 2 (bad arguments). */
int te__tune_cuda(const char *op, const char *shape, int64_t trials, const char *sms, uint64_t seed,
                  int dry_run_only, int json);

#endif
