/*
 * schedule/sched_impl.h (private): the structures behind te_schedule, te_stage and te_iter.
 */
#ifndef TESSERA_SCHEDULE_IMPL_H
#define TESSERA_SCHEDULE_IMPL_H

#include "tessera/schedule.h"
#include "te/internal.h"

typedef enum te_iter_ann {
    TE_ANN_NONE,
    TE_ANN_VECTORIZE,
    TE_ANN_UNROLL,
    TE_ANN_PARALLEL,
    TE_ANN_BIND,
} te_iter_ann;

struct te_iter {
    const char *name;
    te_expr *var; /* the loop variable (a TE_VAR_LOOP node owned by this iterator) */
    int64_t extent;
    bool reduce;
    bool is_leaf;
    te_iter_ann ann;
    te_thread_tag tag;
    te_stage *stage;
};

typedef enum te_rel_kind { TE_REL_SPLIT, TE_REL_FUSE } te_rel_kind;

/* split: parent -> (outer, inner) with inner extent `factor`;
 * fuse: (outer, inner) -> fused. */
typedef struct te_rel {
    te_rel_kind kind;
    te_iter *parent, *outer, *inner, *fused;
    int64_t factor;
} te_rel;

typedef enum te_attach_kind { TE_ATTACH_ROOT, TE_ATTACH_INLINE, TE_ATTACH_AT } te_attach_kind;

struct te_stage {
    te_schedule *sched;
    te_tensor *tensor; /* what the stage computes; its buffer and argument identity */
    int ndim, nred;
    te_iter *axes[TE_MAX_DIMS];  /* root data-parallel iterators */
    te_iter *raxes[TE_MAX_DIMS]; /* root reduction iterators */
    te_expr *body;               /* in terms of the root iterators' variables */
    te__vec leaves;              /* te_iter*, loop order outermost first */
    te__vec rels;                /* te_rel*, in the order applied */
    te__vec iters;               /* every te_iter of the stage */
    te_attach_kind attach;
    te_stage *attach_stage;
    te_iter *attach_iter;
    te_scope scope;
    bool is_output;
    bool touched; /* a loop primitive was applied (cache_write must come first) */
    bool nontemporal;
    int unroll_max;
};

struct te_schedule {
    te_ctx *ctx;
    int n_out;
    te_tensor **outs;
    te__vec stages; /* te_stage*, producers before consumers */
    te__vec trace;  /* char* lines */
    char *trace_text;
};

/* Stages whose bodies read `t` (directly). */
int te__stage_readers(te_schedule *s, const te_tensor *t, te_stage **out, int max);
/* Whether expression e reads tensor t. */
bool te__expr_reads(const te_expr *e, const te_tensor *t);

#endif
