/*
 * The baselines that `tessera bench` and `tessera tune` compare against: OpenBLAS with the
 * kernels that fit this CPU, and oneDNN's matmul (loaded with dlopen, plain and packed weights),
 * for matmul and the unfused MLP gate (two products and a silu * mul pass). Shared by
 * tools/cmd_bench.c and tools/cmd_tune.c; nothing here is part of the library.
 *
 * Environment:
 *   OPENBLAS_CORETYPE          set by the caller: respected as is (never changed, no re-exec).
 *   TESSERA_BASELINE_REEXEC    set by te_bl_openblas_select() on the re-executed process (the
 *                              loop guard): "PID:CORE", the process id (which execv keeps) and
 *                              the core name the first process saw; other processes ignore it.
 *   TESSERA_ONEDNN_LIB         the library te_bl_onednn_load() opens (default libdnnl.so.2);
 *                              a name that does not exist tests the "oneDNN absent" path.
 *   TESSERA_TEST_OPENBLAS_CORE test hook only: the first process takes this as the core name
 *                              OpenBLAS reports (e.g. Prescott), to exercise the re-exec path
 *                              on a machine whose OpenBLAS already picks fitting kernels.
 */
#ifndef TESSERA_TOOLS_BASELINES_H
#define TESSERA_TOOLS_BASELINES_H

#include <stddef.h>

/* ---- Which OpenBLAS kernels fit this CPU ------------------------------------------------- */

/* The CPU features that decide which OpenBLAS kernels fit (cpuid, with the OS's XSAVE state). */
typedef struct {
    int intel, amd;          /* vendor */
    int avx, avx2, fma;      /* avx2 counts only with fma */
    int avx512, avx512_bf16; /* avx512: F + DQ + BW + VL, what OpenBLAS's SkylakeX kernels use */
    int avx512_vnni;         /* VPDPBUSD (u8 x s8 dot products into s32), with avx512 */
    int amx;                 /* AMX tiles with BF16 and INT8, their state enabled by the OS */
} te_bl_cpu;

/* Vector levels of OpenBLAS kernels and CPUs, in order. */
typedef enum {
    TE_BL_LEVEL_UNKNOWN = -1,
    TE_BL_LEVEL_SSE = 0, /* Prescott, Core2, Nehalem, Opteron, Barcelona, ...: generic */
    TE_BL_LEVEL_AVX,     /* Sandybridge, Bulldozer */
    TE_BL_LEVEL_AVX2,    /* Haswell, Zen, Piledriver/Steamroller/Excavator (FMA) */
    TE_BL_LEVEL_AVX512,  /* SkylakeX, Cooperlake, SapphireRapids */
} te_bl_level;

/* How an OpenBLAS core name fits a CPU. */
typedef enum {
    TE_BL_CORE_FITS,    /* the kernels use the CPU's widest vectors (or the CPU has none wider) */
    TE_BL_CORE_GENERIC, /* narrower kernels than the CPU supports: the baseline would flatter us */
    TE_BL_CORE_UNKNOWN, /* a core name this table does not know: reported, not changed */
} te_bl_core_class;

/* Fills *cpu from cpuid on this machine. */
void te_bl_cpu_detect(te_bl_cpu *cpu);

/* The widest vector level of *cpu. */
te_bl_level te_bl_cpu_level(const te_bl_cpu *cpu);

/* The vector level of OpenBLAS kernels named `core` (case-insensitive, as
 * openblas_get_corename() spells them), TE_BL_LEVEL_UNKNOWN for names it does not know. */
te_bl_level te_bl_core_level(const char *core);

/* Pure: classifies `core` on *cpu. *want (may be NULL) receives the OPENBLAS_CORETYPE that
 * fits *cpu when the result is TE_BL_CORE_GENERIC (Cooperlake for AVX-512 with BF16, SkylakeX
 * for AVX-512, Zen or Haswell for AVX2 on AMD or others, Sandybridge for AVX), else NULL. */
te_bl_core_class te_bl_classify_core(const char *core, const te_bl_cpu *cpu, const char **want);

/* Call at the start of a benchmark command, before any thread starts or any file is opened:
 * when OpenBLAS runs kernels narrower than this CPU supports (on its own choice or on a
 * caller's OPENBLAS_CORETYPE, which the note then names), re-executes this program (/proc/self/exe,
 * the same argv) with OPENBLAS_CORETYPE set to the fitting core and TESSERA_BASELINE_REEXEC as the
 * loop guard. Returns when no re-exec was needed (or it failed: then the note says so). `argv` is
 * main's. */
void te_bl_openblas_select(char **argv);

/* One line on OpenBLAS's kernels, e.g. "OpenBLAS: core Prescott is generic on this CPU; re-ran
 * with OPENBLAS_CORETYPE=Cooperlake -> core Cooperlake". Valid after te_bl_openblas_select(). */
const char *te_bl_openblas_note(void);

/* The core name OpenBLAS reports in this process (e.g. "Zen"). */
const char *te_bl_openblas_core(void);

/* 1 when OpenBLAS's kernels fit this CPU (or are unknown to the table), 0 when they are generic:
 * then ratios to OpenBLAS are left out. Valid after te_bl_openblas_select(). */
int te_bl_openblas_trusted(void);

/* ---- oneDNN ------------------------------------------------------------------------------ */

/* Loads oneDNN (dlopen of $TESSERA_ONEDNN_LIB, default libdnnl.so.2) once per process and
 * returns 1, or 0 when it is absent or unusable. *note (may be NULL) receives a line describing
 * the outcome either way, e.g. "oneDNN 2.6.3 (libdnnl.so.2, OpenMP)" or "oneDNN: not available
 * (...); compared with OpenBLAS only". */
int te_bl_onednn_load(const char **note);

/* ---- Baseline products ----------------------------------------------------------------- */

/* The libraries a baseline product runs on. */
typedef enum {
    TE_BL_OPENBLAS,      /* cblas_sgemm */
    TE_BL_ONEDNN,        /* oneDNN matmul on the plain row-major weights */
    TE_BL_ONEDNN_PACKED, /* oneDNN matmul, weights reordered once into the layout it picks */
    TE_BL_NLIBS
} te_bl_lib;

/* A matmul C = op(A) op(B) (row-major, ta/tb transpose A/B), or with gate set the unfused MLP
 * gate Y = silu(A B1) * (A B3) (no transposes). */
typedef struct {
    int m, n, k, ta, tb, gate;
} te_bl_shape;

/* One baseline product over caller-owned inputs; it owns its output and scratch buffers. */
typedef struct te_bl_product te_bl_product;

/* Prepares `lib` for *shape over A, B1 and (gate) B3, which must outlive the product. For the
 * packed variant the weights are reordered here, outside any timing. Uses the OpenMP thread
 * count in effect (set it first). Returns NULL when the library is not available; *why (may be
 * NULL) then points to a static line saying why. */
te_bl_product *te_bl_product_create(te_bl_lib lib, const te_bl_shape *shape, const float *A,
                                    const float *B1, const float *B3, const char **why);

/* Runs the product once (a run_fn for te_bl_time_alternating). */
void te_bl_product_run(void *product);

/* The product's output (m x n floats, valid after a run). */
const float *te_bl_product_out(const te_bl_product *p);

/* Which kernels ran: "OpenBLAS core Zen", "oneDNN brg:avx512_core", "oneDNN gemm:jit, packed
 * weights". */
const char *te_bl_product_impl(const te_bl_product *p);

/* Frees the product (NULL is ignored). */
void te_bl_product_free(te_bl_product *p);

/* Floating-point operations of *shape (2mnk, twice that for the gate). */
double te_bl_shape_flops(const te_bl_shape *shape);

/* Sets the thread count of every runtime a baseline uses (OpenMP, which oneDNN follows, and
 * OpenBLAS). */
void te_bl_set_threads(int threads);

/* ---- Batched products and convolutions (oneDNN) ------------------------------------------ */

/* A batched f32 matmul C[b] = op(A[b]) op(B[b]) for b < batch on oneDNN's matmul (one
 * primitive; 2-D tensors when batch is 1): A [batch, m, k] or, with ta, stored [batch, k, m];
 * B [batch, k, n] or, with tb, stored [batch, n, k]; C [batch, m, n]; all row-major and dense.
 * What the unfused attention baseline runs for Q K^T and P V, and the node-by-node graph
 * baseline for every matmul node. */
typedef struct te_bl_bmm te_bl_bmm;

/* The shape of a te_bl_bmm. b_shared: one B ([k, n] or [n, k]) for every batch, broadcast (a
 * weight). pack_b: B is constant, so it is reordered once, at creation, into the layout oneDNN
 * picks for it (its packed weights; B need not outlive the product then). */
typedef struct {
    int batch, m, n, k, ta, tb, b_shared, pack_b;
} te_bl_bmm_desc;

/* Prepares the product over caller-owned A, B and C, which must outlive it (C is written by
 * each run). Uses the OpenMP thread count in effect (set it first). Returns NULL when oneDNN is
 * not available, batch, m, n or k is not positive, or the primitive cannot be created; *why
 * (may be NULL) then points to a static line saying why, else it is set to NULL. */
te_bl_bmm *te_bl_bmm_create_desc(const te_bl_bmm_desc *d, const float *A, const float *B, float *C,
                                 const char **why);

/* te_bl_bmm_create_desc for batch products with no transpose of A, nothing shared or packed. */
te_bl_bmm *te_bl_bmm_create(int batch, int m, int n, int k, int tb, const float *A, const float *B,
                            float *C, const char **why);

/* Runs the product once. */
void te_bl_bmm_run(te_bl_bmm *p);

/* Which kernels oneDNN picked: "oneDNN " and its implementation string ("brg:avx512_core"),
 * then ", packed weights" when B was reordered (", packed weights = plain layout" when the
 * layout oneDNN picked is the plain one). */
const char *te_bl_bmm_impl(const te_bl_bmm *p);

/* Frees the product (NULL is ignored); the caller's buffers are untouched. */
void te_bl_bmm_free(te_bl_bmm *p);

/* A 2-D f32 convolution on oneDNN over NCHW tensors, as a graph that keeps NCHW runs it:
 * Y[n, oc, oh, ow] = bias[oc] + sum X[n, c, oh*stride - pad + kh*dil, ow*stride - pad + kw*dil]
 * W[oc, c, kh, kw] (groups 1, zero padding). oneDNN picks the layouts it runs fastest; the
 * weights are reordered into theirs once, at creation, and X and Y are reordered to and from
 * theirs inside every run (counted in its time) when they are not NCHW. */
typedef struct te_bl_conv te_bl_conv;

/* The shape of a te_bl_conv: x [n, c, h, w], weights [oc, c, kh, kw]. */
typedef struct {
    int n, c, h, w, oc, kh, kw, stride, pad, dil;
} te_bl_conv_desc;

/* Prepares the convolution over caller-owned X and Y (which must outlive it) and W and bias
 * (bias may be NULL; both are copied or reordered here). Uses the OpenMP thread count in effect.
 * Returns NULL when oneDNN is not available, the shape is not positive or gives no output, or
 * the primitive cannot be created; *why (may be NULL) then points to a static line saying
 * why, else it is set to NULL. */
te_bl_conv *te_bl_conv_create(const te_bl_conv_desc *d, const float *X, const float *W,
                              const float *bias, float *Y, const char **why);

/* Runs the convolution once (with the reorders of X and Y it needs). */
void te_bl_conv_run(te_bl_conv *p);

/* "oneDNN " and the implementation string, then the layout of X it runs on when that is not
 * NCHW (e.g. "oneDNN brg:avx512_core, x as aBcd16b"). */
const char *te_bl_conv_impl(const te_bl_conv *p);

/* Frees the convolution (NULL is ignored); the caller's buffers are untouched. */
void te_bl_conv_free(te_bl_conv *p);

/* ---- Low-precision products (oneDNN) ----------------------------------------------------- */

/* The low-precision matmuls C[m, n] = A[m, k] B[k, n] (row-major, no transposes) measured
 * beside the f32 ones: what the AMX, AVX-512 BF16 and VNNI instructions compute. */
typedef enum {
    TE_BL_LOWP_BF16, /* A, B bf16 (uint16_t bit patterns), C f32 (f32 accumulation) */
    TE_BL_LOWP_U8S8, /* A u8, B s8, C s32 (exact s32 accumulation) */
    TE_BL_LOWP_NKINDS
} te_bl_lowp_kind;

/* One oneDNN low-precision product over caller-owned inputs; it owns its output. */
typedef struct te_bl_lowp te_bl_lowp;

/* "bf16" or "u8s8" ("?" for other values). */
const char *te_bl_lowp_kind_name(te_bl_lowp_kind kind);

/* 1 when this CPU has the instructions `kind` runs on natively (avx512_bf16 or AMX for bf16,
 * avx512_vnni or AMX for u8s8); oneDNN may still run it without them, emulated and slowly. */
int te_bl_lowp_native(te_bl_lowp_kind kind, const te_bl_cpu *cpu);

/* Prepares oneDNN's matmul for `kind` on m x k A and k x n B, row-major, which must outlive the
 * product. packed = 0: B is used in place (plain layout); packed = 1: oneDNN picks B's layout
 * (format any) and B is reordered into it here, once, outside any timing (as the f32 packed
 * product does; when the layout it picks is the plain one, B is used in place and the
 * implementation string says so). Uses the OpenMP thread count in effect (set it first).
 * Returns NULL when oneDNN is not available, refuses the product on this CPU (no kernel for
 * these dtypes), m, n or k is not positive, or memory runs out; *why (may be NULL) then
 * points to a static line saying why, else it is set to NULL. */
te_bl_lowp *te_bl_lowp_create(te_bl_lowp_kind kind, int m, int n, int k, const void *A,
                              const void *B, int packed, const char **why);

/* Runs the product once (a te_bl_run_fn for te_bl_time_alternating). */
void te_bl_lowp_run(void *product);

/* The product's output, m x n row-major, valid after a run: float for TE_BL_LOWP_BF16,
 * int32_t for TE_BL_LOWP_U8S8. Before the first run it holds 0x7f bytes (not a result).
 * bf16: products exact, sums in f32 (error within (k + 1) 2^-24 sum |a b|). u8s8: exact with
 * VNNI or AMX kernels (implementation strings with "vnni" or "amx"); oneDNN's older kernels
 * (vpmaddubsw, "gemm:jit" on AVX2 or AVX-512 without VNNI) saturate each pair of adjacent
 * products at s16, exact only when such pairs fit (A below 128, say). */
const void *te_bl_lowp_out(const te_bl_lowp *p);

/* Which kernels oneDNN picked: "oneDNN " and the implementation string it reports
 * ("brg:avx512_core_amx", "gemm:jit", ...), then ", packed weights" (or ", packed weights =
 * plain layout") for the packed variant. */
const char *te_bl_lowp_impl(const te_bl_lowp *p);

/* Frees the product (NULL is ignored). */
void te_bl_lowp_free(te_bl_lowp *p);

/* ---- Timing ---------------------------------------------------------------------------- */

/* A function timed by te_bl_time_alternating. */
typedef void (*te_bl_run_fn)(void *arg);

/* Shortest sample of te_bl_time_alternating, in seconds. */
#define TE_BL_MIN_SAMPLE_S 2e-3

/* The warm-up of te_bl_time_alternating: at least this many calls of each function and
 * this many seconds in all. */
#define TE_BL_WARMUP_CALLS 2
#define TE_BL_WARMUP_S 0.05

/* Runs fn[0..n) (n <= 64) in turn as a warm-up (TE_BL_WARMUP_*), then once each timed, which
 * fixes how many
 * back-to-back calls make one of its samples (enough for TE_BL_MIN_SAMPLE_S; one for kernels
 * longer than that), then `reps` rounds taking one sample of each in turn; med_s[i] receives
 * fn[i]'s median time per call in seconds. Returns 0, or -1 when out of memory or n is out of
 * range. */
int te_bl_time_alternating(int n, const te_bl_run_fn *fn, void *const *arg, int reps,
                           double *med_s);

/* Largest |a - b| / max(1, |b|) over n elements (NaN counts as infinite). */
double te_bl_rel_err(const float *a, const float *b, size_t n);

/* ---- A complete baseline measurement (for the tuner) ---------------------------------- */

/* What te_bl_measure found; plain data, so it can come back from a child process. */
typedef struct {
    double gflops[TE_BL_NLIBS]; /* NAN where not measured */
    char impl[TE_BL_NLIBS][96]; /* te_bl_product_impl of each measured one */
    double openblas, onednn;    /* GFLOP/s; onednn is the better variant; NAN when absent or
                                   left out (OpenBLAS kernels that do not fit this CPU) */
    int onednn_lib;             /* TE_BL_ONEDNN or TE_BL_ONEDNN_PACKED: the better variant */
    double best;                /* the strongest trusted baseline, NAN when none */
    int best_lib;               /* its te_bl_lib, -1 when none */
    char notes[512];            /* why something was left out (lines), "" when nothing */
} te_bl_result;

/* Fills r->openblas, r->onednn, r->onednn_lib, r->best and r->best_lib from r->gflops,
 * leaving OpenBLAS out when te_bl_openblas_trusted() says its kernels do not fit. */
void te_bl_result_choose(te_bl_result *r);

/* Every baseline product available for one shape: p[lib] is NULL where that library (or
 * variant) is not available. */
typedef struct {
    te_bl_shape shape;
    te_bl_product *p[TE_BL_NLIBS];
} te_bl_set;

/* Creates every available product for *shape over the caller's inputs (see
 * te_bl_product_create; set the threads first) and initializes *r (nothing measured, notes on
 * what is missing). Returns the number of products created. */
int te_bl_set_create(te_bl_set *set, const te_bl_shape *shape, const float *A, const float *B1,
                     const float *B3, te_bl_result *r);

/* Stores the run function and argument of each created product in fn[], arg[] (at most
 * TE_BL_NLIBS entries, library order); returns how many, for te_bl_time_alternating. */
int te_bl_set_fns(const te_bl_set *set, te_bl_run_fn *fn, void **arg);

/* Fills *r from the medians med_s[] of the set's products (te_bl_set_fns's order) and `flop`
 * floating-point operations per run: figures, implementation strings, outputs checked against
 * OpenBLAS's (one that differs is left out, with a note), then te_bl_result_choose. */
void te_bl_set_result(const te_bl_set *set, const double *med_s, double flop, te_bl_result *r);

/* OpenBLAS's output (the reference for checks), NULL when it has no OpenBLAS product. */
const float *te_bl_set_reference(const te_bl_set *set);

/* Frees the set's products. */
void te_bl_set_free(te_bl_set *set);

/* Measures every available baseline for *shape on `threads` threads the way `tessera bench`
 * does: random inputs, one process, a warm-up, then `reps` alternating rounds, medians; outputs
 * checked against OpenBLAS. Runs OpenMP code in the calling process (call it in a child where
 * that matters). Returns 0, or -1 when nothing could be measured. */
int te_bl_measure(const te_bl_shape *shape, int threads, int reps, te_bl_result *r);

/* 1-minute load average above which te_bl_load_note warns. */
#define TE_BL_BUSY_LOAD 1.0

/* A warning line when the machine is busy (load average above TE_BL_BUSY_LOAD), else "".
 * On a busy machine the baselines, which synchronize their threads many times per call, lose
 * far more than a kernel with one parallel loop: multi-thread ratios measured then flatter
 * Tessera. */
const char *te_bl_load_note(void);

/* A short name for a library ("OpenBLAS", "oneDNN", "oneDNN packed"). */
const char *te_bl_lib_name(te_bl_lib lib);

#endif
