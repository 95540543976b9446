/*
 * tessera/cuda.h: the CUDA backend: GPU schedule templates, CUDA source, NVRTC compilation,
 * and running kernels through the driver API.
 *
 *     te_target tgt = te_target_cuda(90);                  // or te_cuda_target_device(0, &tgt)
 *     te_cuda_knobs k = te_cuda_knobs_default("matmul");
 *     te_cuda_schedule_matmul(s, C, &k);                    // blocks, threads, shared tiles
 *     te_cuda_module *m;
 *     if (te_cuda_build(s, 3, (te_tensor *[]){A, B, C}, "matmul", &tgt, &m) != TE_OK)
 *         fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));    // schedule, NVRTC or driver error
 *     puts(te_cuda_module_source(m));                       // readable CUDA C++
 *     if (te_cuda_module_run(m, (void *[]){a, b, c}) == TE_ERR_NO_CUDA)   // host arrays
 *         fprintf(stderr, "%s\n", te_cuda_module_errmsg(m)); // "no libcuda.so.1: ..."
 *     te_cuda_module_free(m);
 *
 * Nothing here links against CUDA. NVRTC (libnvrtc.so) and the driver (libcuda.so.1) are
 * loaded with dlopen on first use: source emission needs neither, compilation needs NVRTC
 * (found in $TESSERA_NVRTC, $CUDA_HOME/lib64, /usr/local/cuda/lib64 or the loader's paths),
 * and running needs the driver and a device. Without them the calls return TE_ERR_NO_CUDA and
 * te_cuda_errmsg() / the module's message says what is missing.
 *
 * The same GPU schedule also builds for the C backend (te_build with a C target): thread loops
 * are split at barriers and run on the CPU, so a GPU schedule's numbers can be checked against
 * te_reference_eval on any machine.
 */
#ifndef TESSERA_CUDA_H
#define TESSERA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/backend.h"
#include "tessera/schedule.h"
#include "tessera/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Availability and devices -------------------------------------------------------------- */

/* Loads and initializes the driver and checks for a device: TE_OK when the driver loads,
 * initializes and has at least one device; TE_ERR_NO_CUDA otherwise (te_cuda_errmsg says
 * why). Cheap after the first call. */
int te_cuda_probe(void);
/* Whether a CUDA device can be used: te_cuda_probe() == TE_OK. */
bool te_cuda_available(void);
/* Loads NVRTC (no device needed): TE_OK, or TE_ERR_NO_CUDA with the reason in
 * te_cuda_errmsg. */
int te_nvrtc_probe(void);
/* Whether NVRTC can compile: te_nvrtc_probe() == TE_OK. */
bool te_nvrtc_available(void);
/* The last CUDA error message of this thread ("" when none). */
const char *te_cuda_errmsg(void);
/* NVRTC's version (major * 1000 + minor * 10, like CUDA_VERSION), or 0 without NVRTC. */
int te_nvrtc_version(void);

typedef struct te_cuda_device_info {
    int ordinal;
    char name[256];
    int sm;       /* compute capability x10: 90 for sm_90 */
    int sm_count; /* streaming multiprocessors */
    int max_threads_per_block;
    int max_threads_per_sm;
    int warp_size;
    size_t shared_per_block;       /* static limit, bytes */
    size_t shared_per_block_optin; /* with the opt-in attribute */
    size_t shared_per_sm;
    int regs_per_block;
    int clock_khz; /* 0 when the driver no longer reports it */
    int mem_clock_khz;
    int mem_bus_bits;
    int l2_bytes;
    size_t total_mem;
    int driver_version; /* e.g. 12040 */
} te_cuda_device_info;

/* Number of devices (0 and TE_ERR_NO_CUDA without a driver). */
int te_cuda_device_count(int *count);
/* Facts about device `ordinal`. TE_OK, TE_ERR_NO_CUDA or TE_ERR_ARG. */
int te_cuda_device_info_get(int ordinal, te_cuda_device_info *out);

/* A CUDA target for compute capability sm (80, 86, 89, 90, ...): backend TE_BACKEND_CUDA,
 * cpu_model "sm_<sm>" (the device name when made from a device). Needs no CUDA. */
te_target te_target_cuda(int sm);
/* The target of device `ordinal` (its SM version and name). TE_ERR_NO_CUDA without one. */
int te_cuda_target_device(int ordinal, te_target *out);

/* ---- Source and compilation ------------------------------------------------------------------ */

/* CUDA C++ for a lowered function (lowered with a CUDA target): one `extern "C" __global__`
 * kernel per root stage nest, each with __launch_bounds__ and a comment giving its launch
 * dimensions, under the same provenance header as the C backend. Arena string; NULL on error.
 * Needs no CUDA. */
const char *te_emit_cuda(te_ctx *ctx, const te_lowered *f, const te_target *target);

/* What ptxas reported for one kernel. -1 where unknown. */
typedef struct te_cuda_kernel_info {
    const char *name;      /* the kernel's symbol */
    int grid[3], block[3]; /* launch dimensions */
    int registers;         /* per thread */
    int shared_bytes;      /* static shared memory per block */
    int stack_bytes;       /* local memory frame per thread */
    int spill_bytes;       /* spill stores */
} te_cuda_kernel_info;

/* A built kernel set: source, cubin, and (when a device is present) the loaded module. */
typedef struct te_cuda_module te_cuda_module;

/* Lowers s for the CUDA target, emits CUDA source and compiles it with NVRTC into a cubin for
 * target->sm (target NULL: device 0). Loads the cubin when a driver and device are present;
 * without one the module is still returned (source, cubin and ptxas figures are usable) and
 * running it returns TE_ERR_NO_CUDA. Errors (message on the context): schedule and GPU check
 * errors, TE_ERR_NO_CUDA when NVRTC cannot be loaded, TE_ERR_COMPILE with NVRTC's log. */
int te_cuda_build(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                  const te_target *target, te_cuda_module **out);
/* As te_cuda_build, but never touches the CUDA driver (a process that forks measuring children
 * must not initialise CUDA itself): lowers, emits and compiles for target (required) and returns
 * the module unloaded; te_cuda_module_load loads it later, in the process that runs it. NVRTC's
 * output is cached on disk (TESSERA_CACHE_DIR or ~/.cache/tessera, subdirectory cuda/), keyed by
 * the source, SM and NVRTC, for te_cuda_build and te_cuda_compile alike. Errors as
 * te_cuda_build's; TE_ERR_ARG without a target. */
int te_cuda_compile(te_schedule *s, int n_args, te_tensor *const *args, const char *name,
                    const te_target *target, te_cuda_module **out);
/* Loads a module (te_cuda_compile's, or te_cuda_build's made without a device) on device 0 in
 * this process. TE_OK (also when already loaded), TE_ERR_NO_CUDA (no driver or device, or the
 * device's SM cannot run the cubin), TE_ERR_LOAD; the message in te_cuda_module_errmsg. */
int te_cuda_module_load(te_cuda_module *m);
/* Compiles CUDA source with NVRTC for sm (e.g. 90). On success *cubin is a malloc'd image
 * (caller frees) and *log (may be NULL) a malloc'd ptxas/NVRTC log. On failure returns
 * TE_ERR_NO_CUDA or TE_ERR_COMPILE, with the log in *log. */
int te_nvrtc_compile(const char *source, const char *name, int sm, void **cubin, size_t *size,
                     char **log);

const char *te_cuda_module_source(const te_cuda_module *m);
/* Message of the module's last failure ("" when none). */
const char *te_cuda_module_errmsg(const te_cuda_module *m);
int te_cuda_module_nkernels(const te_cuda_module *m);
/* Launch dimensions and ptxas figures of kernel i; NULL when out of range. */
const te_cuda_kernel_info *te_cuda_module_kernel(const te_cuda_module *m, int i);
/* The NVRTC/ptxas log of the compilation. */
const char *te_cuda_module_log(const te_cuda_module *m);
/* Whether the module is loaded on a device (and can run). */
int te_cuda_module_loaded(const te_cuda_module *m);

/* Runs on host arrays: copies inputs to the device, launches every kernel in order, copies the
 * outputs back. TE_OK, TE_ERR_NO_CUDA, TE_ERR_RUNTIME (message says which call failed). */
int te_cuda_module_run(te_cuda_module *m, void *const *host_args);
/* Runs on device pointers (te_cuda_malloc), no copies, synchronous. */
int te_cuda_module_run_device(te_cuda_module *m, const uint64_t *dev_args);
/* Unloads and frees. Accepts NULL. */
void te_cuda_module_free(te_cuda_module *m);

/* ---- Memory and timing (for tools and the tuner's measuring child) --------------------------- */

/* Device memory as 64-bit handles (CUdeviceptr). All return TE_OK or TE_ERR_NO_CUDA /
 * TE_ERR_RUNTIME. */
int te_cuda_malloc(uint64_t *ptr, size_t bytes);
int te_cuda_free(uint64_t ptr);
int te_cuda_copy_to_device(uint64_t dst, const void *src, size_t bytes);
int te_cuda_copy_to_host(void *dst, uint64_t src, size_t bytes);
int te_cuda_copy_device(uint64_t dst, uint64_t src, size_t bytes);
int te_cuda_memset(uint64_t dst, unsigned char value, size_t bytes);
int te_cuda_synchronize(void);

typedef struct te_cuda_timing {
    int warmup;        /* runs before timing (default 2) */
    int min_repeat;    /* at least this many timed runs (default 5) */
    int max_repeat;    /* at most (default 1000) */
    double min_time_s; /* keep repeating until this much kernel time (default 0.1) */
    int flush_l2;      /* write a buffer twice the L2 size between runs (default 1) */
} te_cuda_timing;

/* Defaults as documented above. */
te_cuda_timing te_cuda_timing_default(void);
/* Times the module on device arguments with CUDA events: median and minimum milliseconds per
 * run (either may be NULL), n_runs receives the number of timed runs. */
int te_cuda_module_time(te_cuda_module *m, const uint64_t *dev_args, const te_cuda_timing *t,
                        double *median_ms, double *min_ms, int *n_runs);
/* Times any launch sequence: fn(user) is called per run between events. */
int te_cuda_time_fn(int (*fn)(void *user), void *user, const te_cuda_timing *t, double *median_ms,
                    double *min_ms, int *n_runs);

/* ---- GPU schedule templates ------------------------------------------------------------------
 * Each template schedules one library operator (made by te_op_*) on a fresh schedule for the
 * GPU, from a few knobs. They return TE_OK or the failing primitive's status (message on the
 * context). The same scheduled program builds with te_cuda_build and, for checking on a CPU,
 * with te_build. te_cuda_knob_space lists each template's knobs and their candidate values, for
 * the tuner's search spaces. */

typedef struct te_cuda_knobs {
    int tile_m, tile_n, tile_k; /* block tile (matmul-like: rows, columns, reduction step) */
    int thread_m, thread_n;     /* register tile per thread */
    int threads;                /* threads per block (1-D templates: rows and reductions) */
    int vec;                    /* vector width of cooperative copies (1, 2 or 4) */
    int pad;                    /* storage_align padding of shared tiles (0: none) */
    int double_buffer;          /* 1: double-buffer the shared tiles */
    int unroll;                 /* 1: unroll the inner register loops */
    /* Virtual threads over the register tile (matmul family; 0 or 1: none): a thread's
     * thread_m x thread_n results are vthread_m x vthread_n pieces of (thread_m / vthread_m) x
     * (thread_n / vthread_n), strided by the block's threads (TE_VTHREAD), so a warp reads
     * consecutive shared-memory words and stores whole rows (CUTLASS's thread map). */
    int vthread_m, vthread_n;
    /* conv2d: 1 stages the input tile (with its halo) in shared memory beside the weights */
    int stage_input;
} te_cuda_knobs;

/* Sensible defaults for a template ("matmul", "batch_matmul", "dense", "matmul_bias_act",
 * "mlp_gate", "qkv", "conv2d", "conv2d_bn_relu", "softmax", "layer_norm", "rms_norm", "rows",
 * "window", "elementwise"); zeroes for an unknown name. */
te_cuda_knobs te_cuda_knobs_default(const char *op);

/* C[m, n] = A[m, k] B[k, n] (te_op_matmul with no transposes, or te_op_dense_bias /
 * te_op_matmul_bias_act whose reduction stage is given as C and epilogue as out (may be NULL)):
 * block tile tile_m x tile_n, register tile thread_m x thread_n per thread, A and B staged in
 * shared memory tile_k at a time with cooperative (vectorized) copies. */
int te_cuda_schedule_matmul(te_schedule *s, te_tensor *C, te_tensor *out, const te_cuda_knobs *k);
/* Batched matmul (te_op_batch_matmul, any transposes or broadcast batch): the matmul template per
 * batch element, the batch on blockIdx.z. TE_ERR_ARG when C is not a 3-D reduction over one
 * axis or a knob is out of range (message on the context). */
int te_cuda_schedule_batch_matmul(te_schedule *s, te_tensor *C, const te_cuda_knobs *k);
/* The Q, K and V projections of te_op_qkv_projection (outs as it returns them): the matmul
 * template for each, three kernels with the same knobs. Returns the first failing call's
 * status. */
int te_cuda_schedule_qkv(te_schedule *s, te_tensor *const outs[3], const te_cuda_knobs *k);
/* The gated MLP (te_op_mlp_gate): both products accumulate in registers at the same thread loop
 * (each with its own shared-memory tiles of X and its weight), and the gate is applied to the
 * registers before the one store of Y. */
int te_cuda_schedule_mlp_gate(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Direct conv2d (te_op_conv2d, NCHW, groups 1): output channels x pixels tiled like a matmul; the
 * weights tile staged in shared memory and, with stage_input, the input tile too (tile_k channels
 * x KH rows x the columns the block's outputs read, halo included, zeros of the padding filled
 * by the copy); otherwise the padding is inlined into the reads. */
int te_cuda_schedule_conv2d(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Conv + folded batch norm + ReLU (te_op_conv2d_bn_relu, NCHW): the conv2d template with the
 * convolution (<Y>_conv) accumulated in registers at the output's thread loop and the scale,
 * shift and ReLU applied to the registers before the one store of Y. */
int te_cuda_schedule_conv2d_bn_relu(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Softmax over the last axis (te_op_softmax): one block per row, cross-thread max and sum. */
int te_cuda_schedule_softmax(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Layer norm over the last axis (te_op_layer_norm): one block per row, cross-thread mean and
 * variance. */
int te_cuda_schedule_layer_norm(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* RMS norm over the last axis (te_op_rms_norm): one block per row, a cross-thread mean of
 * squares. */
int te_cuda_schedule_rms_norm(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Any row operation (template "rows"; te_op_softmax_online, te_op_layer_norm_welford, or a
 * user's expression): Y elementwise over rows (two or more axes) whose reductions are each over
 * one axis of the rows' length with Y's leading shape (tuple reducers included). One block per
 * row, `threads` threads, rows read and written `vec` elements at a time (the widest of vec, 2,
 * 1 dividing the row); every reduction a cross-thread reduction at the row loop, the other
 * stages inlined. TE_ERR_ARG (message on the context) for knobs out of range or an expression
 * that is not such a row operation. */
int te_cuda_schedule_rows(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Window reductions, where every output element reduces a small window of the input (max and
 * average pooling, depthwise convolution): one thread per output element (`threads` per block),
 * the reduction (Y itself, accumulated in a register, or the one reduction Y reads, as average
 * pooling's sum) computed in the thread, its loops unrolled with `unroll`, padding inlined.
 * TE_ERR_ARG when Y neither is nor reads exactly one reduction. */
int te_cuda_schedule_window(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);
/* Any elementwise/injective stage: flattened, split by threads * vec, bound to blocks/threads;
 * its inlinable producers inlined. */
int te_cuda_schedule_elementwise(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k);

/* The GPU template of library operator `op` (its registry name as `tessera ops` lists it, or its
 * tag): the template's name for te_cuda_knobs_default and te_cuda_knob_space; *n_out (may be
 * NULL) receives how many outputs the operator has. NULL (and 0) for an operator without one. */
const char *te_cuda_template_for(const char *op, int *n_out);
/* Schedules the n_out outputs of operator `op` (as the operator returns them) with its GPU
 * template and knobs k. TE_ERR_UNSUPPORTED (message on the context) for an operator without a
 * template or another number of outputs, TE_ERR_ARG for NULL arguments, else what the template
 * returns. */
int te_cuda_schedule_op(te_schedule *s, const char *op, int n_out, te_tensor *const *outs,
                        const te_cuda_knobs *k);

/* One knob of a template's search space. */
typedef struct te_cuda_knob_def {
    const char *name; /* field of te_cuda_knobs ("tile_m") */
    int n;            /* number of candidate values */
    const int *values;
} te_cuda_knob_def;
/* The knobs of template `op` and their candidate values; *n receives the count. NULL for an
 * unknown template. Static data. */
const te_cuda_knob_def *te_cuda_knob_space(const char *op, int *n);
/* Sets knob `name` of k to value. TE_OK or TE_ERR_ARG. */
int te_cuda_knobs_set(te_cuda_knobs *k, const char *name, int value);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CUDA_H */
