/*
 * autotune/space_impl.h (private): search spaces as programs with decisions.
 *
 * A template or a sketch is a generator: a function that schedules a fresh schedule by calling
 * the public primitives and, wherever it has a choice to make (a split factor, a knob, an
 * on/off rule), asks te__decide for an index into its list of candidates. Sampling draws the
 * decisions at random; replaying a recorded decision vector regenerates the same schedule, so
 * mutating one decision and regenerating gives a neighbour whose trace is still produced by
 * the primitives themselves. The trace is what leaves the space; the decisions of every trace
 * the space produced are remembered (te_space_mutate uses them, and falls back to editing the
 * numbers of the trace text for traces it did not produce).
 *
 * Templates declare their knobs up front (fixed candidate lists, so the space is a grid of
 * size = product of cardinalities); the k-th decision of a template is knob k. Sketches decide
 * as they go.
 */
#ifndef TESSERA_AUTOTUNE_SPACE_IMPL_H
#define TESSERA_AUTOTUNE_SPACE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "schedule/sched_impl.h"
#include "te/internal.h"
#include "tessera/autotune.h"
#include "tessera/backend.h"

#define TE__MAX_DEC 256  /* decisions in one configuration */
#define TE__MAX_KNOBS 16 /* knobs of one template */
#define TE__MAX_KVALS 16 /* values of one knob */

typedef struct te__knob {
    const char *name;
    int n;
    int64_t v[TE__MAX_KVALS];
} te__knob;

/* Generation state: one configuration being built on schedule s. */
typedef struct te__gen {
    te_space *sp;
    te_schedule *s;
    te_ctx *ctx; /* s's context */
    te_rng *rng; /* NULL: decisions past the recorded ones take 0 */
    int n;       /* decisions taken so far */
    int nrec;    /* recorded decisions available for replay */
    int32_t dec[TE__MAX_DEC];
    int32_t card[TE__MAX_DEC];
    int err; /* first failing primitive's status */
} te__gen;

/* Index in [0, ncand) for the next decision: the recorded one (clamped) when replaying, else
 * drawn from the generator's stream. ncand <= 1 returns 0 without recording anything. */
int te__decide(te__gen *g, int ncand);
/* The resource check of a generated schedule: g->s lowered for the space's target (for CUDA,
 * lowering's GPU check: threads and shared memory within the limits). TE_OK, or the lowering
 * error recorded as the generation's failure (an invalid draw). */
int te__gen_lowers(te__gen *g);
/* Records a failing status (keeps the first). Returns rc. */
int te__gen_fail(te__gen *g, int rc);
/* Checks a primitive's status: false (and g->err set) on failure. */
#define TE__OK(g, call) (te__gen_fail((g), (call)) == TE_OK)
/* Splits st's first reduction axis by `factor` and rfactors st over one part: the inner one
 * (outer false: a stage of `factor` partial results, its last axis; the lane rfactor of
 * vectorized reductions) or the outer one (outer true: one partial result per part, the parts
 * the threads share). Returns the partial stage, NULL with g's error. */
te_stage *te__split_rfactor(te__gen *g, te_stage *st, int64_t factor, bool outer);

typedef struct te__template {
    const char *name;
    /* Recognizes the workload and declares the knobs (sp->knobs). TE_ERR_UNSUPPORTED when the
     * template does not fit the workload's expression. */
    int (*init)(te_space *sp);
    /* Schedules g->s; the value of knob k is te__knob_val(g, k). */
    int (*apply)(te__gen *g);
    /* It schedules CUDA targets too (the GPU templates, attention); the others are for C
     * targets only, and a CUDA space without a template that does takes the GPU sketches. */
    bool cuda;
} te__template;

int64_t te__knob_val(te__gen *g, int k);
/* Declares knob `name` with n values (templates, in init). */
void te__knob_add(te_space *sp, const char *name, int n, const int64_t *v);
/* Copies the candidates <= limit into out; when none is, out holds only `fallback`. */
int te__filter_le(const int64_t *cand, int n, int64_t limit, int64_t fallback, int64_t *out);

/* Templates (autotune/templates.c). */
const te__template *te__template_for(const char *op);
/* The templates that recognize an expression by its structure alone (an expression without an
 * operator name: a fused graph group), in the order they are tried: attention (te_op_attention's
 * stages, by their tags, with an optional layout epilogue), tensorize (products a tensor
 * intrinsic of the target computes, autotune/templates_tz.c), gemm (products over one
 * reduction axis with an elementwise epilogue, or gemv), conv2d (a 4-D convolution with its
 * padding and an elementwise epilogue). Fills up to cap entries; returns how many. */
int te__templates_by_structure(const te__template **out, int cap);
/* te_parallel on x when its extent is above 1; a loop of extent 1 stays serial (a parallel
 * loop of one iteration is a serial kernel that pays for the thread team). Returns the status. */
int te__parallel(te_stage *st, te_iter *x);
/* Matrix-vector and skinny products (autotune/templates_gemv.c): whether out is a product of
 * rank 2 with at most 16 rows whose B operand is stored [n, k] (k contiguous), or an
 * elementwise epilogue of such products; the gemm template hands such an output to te__t_gemv. */
bool te__gemv_fits(te_tensor *out);
extern const te__template te__t_gemv;
/* The GPU template of operator op for a CUDA target (autotune/templates_cuda.c: the knobs of
 * te_cuda_knob_space, schedules by te_cuda_schedule_*), or NULL when op has none. */
const te__template *te__cuda_template_for(const char *op);

/* Sketches (autotune/sketch.c). */
int te__sketch_init(te_space *sp);
int te__sketch_apply(te__gen *g);

/* Candidate split factors of an extent: divisors, powers of two, multiples of `lanes` (not
 * necessarily dividing), at most cap of them, ascending, each in [1, extent]. */
int te__split_candidates(int64_t extent, int lanes, int64_t *out, int cap);

/* One remembered configuration. */
typedef struct te__memo_ent {
    uint64_t h;
    const char *trace;
    int n;
    int32_t *dec;
} te__memo_ent;

struct te_space {
    te_ctx *ctx;
    const char *op;
    int n_in, n_out;
    te_tensor **ins, **outs;
    te_space_kind kind;
    te_target target;
    int lanes; /* f32 lanes of the widest vector (16 with AVX-512) */
    /* Templates. */
    const te__template *tmpl;
    int nknobs;
    te__knob knobs[TE__MAX_KNOBS];
    void *tdata; /* the template's analysis */
    /* Sketches. */
    void *sdata;
    /* trace -> decisions */
    te__memo_ent *memo;
    int memo_n, memo_cap;
};

/* Number of vector lanes of dtype on the target (at least 1). */
int te__lanes(const te_space *sp, te_dtype dt);

#endif
