/*
 * autotune/sketch_impl.h (private): what the CPU sketch rules (sketch.c) and the GPU ones
 * (sketch_gpu.c) share: the per-stage analysis made once per space, the state of one
 * generation, and the helpers both use.
 */
#ifndef TESSERA_AUTOTUNE_SKETCH_IMPL_H
#define TESSERA_AUTOTUNE_SKETCH_IMPL_H

#include "autotune/space_impl.h"

#define SK_MAX 64

typedef struct sk_stage {
    const char *name;
    te_tensor *t;
    bool out, red, mlt, expensive;
    int ncons;
    int cons[SK_MAX];
    int nd, nr;
    int64_t ext[TE_MAX_DIMS], rext[TE_MAX_DIMS];
    int npack;
    te_tensor *pack[2]; /* inputs worth packing in panels (read without some spatial axis, last
                         * index exactly the last axis) */
} sk_stage;

typedef struct sk_data {
    int n;
    sk_stage st[SK_MAX];
} sk_data;

typedef struct sk_run {
    te__gen *g;
    sk_data *sd;
    bool done[SK_MAX];
    te_iter *row[SK_MAX]; /* the row loop of a stage under rule 5 */
    int lanes, cores;
    int threads[SK_MAX]; /* GPU: the threads of a stage's block (its row loop's threads) */
} sk_run;

/* The stage of analysed stage i in the schedule being generated. */
te_stage *te__sk_stage_of(sk_run *r, int i);
/* An optional primitive: a refusal (rc != TE_OK) is forgotten; returns whether it applied. */
bool te__sk_try_ok(sk_run *r, int rc);
/* Stages that use st's values, looking through inlined stages: up to max into out[n..];
 * returns the new count. */
int te__sk_eff_consumers(te_schedule *s, te_stage *st, te_stage **out, int max, int n);
/* The analysed stage whose row loop (r->row) every effective consumer of st is, or is computed
 * at; -1 when there is none. */
int te__sk_row_host(sk_run *r, te_stage *st);
/* Reductions with data reuse that only stage i reads, with its shape and its own axes as
 * indices, and the same reduction extents as the first: up to 8 into prods / pinfo (marked
 * done). Returns how many. */
int te__sk_epilogue_producers(sk_run *r, int i, te_stage **prods, const sk_stage **pinfo);

/* The GPU rules (sketch_gpu.c): te__sketch_apply's body for a CUDA target. */
int te__sketch_apply_gpu(sk_run *r);

#endif
