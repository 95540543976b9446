/*
 * schedule/sched_impl.h (private): the structures behind te_schedule, te_stage and te_iter.
 */
#ifndef TESSERA_SCHEDULE_IMPL_H
#define TESSERA_SCHEDULE_IMPL_H

#include "te/internal.h"
#include "tessera/schedule.h"

typedef enum te_iter_ann {
    TE_ANN_NONE,
    TE_ANN_VECTORIZE,
    TE_ANN_UNROLL,
    TE_ANN_PARALLEL,
    TE_ANN_BIND,
    TE_ANN_VTHREAD, /* te_bind(.., TE_VTHREAD); tag is TE_VTHREAD */
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
    int ntuple;        /* a te_compute_tuple stage: its ntuple outputs (tensor is tuple[0]) */
    te_tensor **tuple; /* NULL for other stages */
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
    te__vec prefetches; /* te__prefetch*, te_prefetch in the order applied */
    /* te_pipeline: loop pipe_at runs st's loops under it one iteration behind, fused into
     * producer pipe_with's outermost loop (NULL: not pipelined). */
    te_iter *pipe_at;
    te_stage *pipe_with;
    /* te_reduce_tree: reduction loop tree_at is folded as a balanced tree (NULL: none). */
    te_iter *tree_at;
    /* te_compute_with: st's loops down to the depth of cw_at fused with cw_with's (NULL: none). */
    te_stage *cw_with;
    te_iter *cw_at;
    /* te_tensorize: the loop nest at and under tz_at is one call of tz (NULL: none). */
    te_iter *tz_at;
    const struct te_tensor_intrin *tz;
};

/* te_prefetch: at the start of every iteration of the stage's leaf `at`, the elements of `t`
 * the stage reads there, `dist` iterations of `ahead` later, are prefetched into cache `level`. */
/* The most prefetches (cache lines) a te_prefetch issues per iteration of its loop. */
#define TE__PREFETCH_MAX_LINES 8

typedef struct te__prefetch {
    te_iter *at, *ahead;
    te_tensor *t;
    int64_t dist;
    int level; /* te_prefetch_level: 1 L1, 2 L2, 3 last level */
    int lines; /* te_prefetch_lines: at most this many prefetches per iteration of `at` */
} te__prefetch;

struct te_schedule {
    te_ctx *ctx;
    int n_out;
    te_tensor **outs;
    te__vec stages; /* te_stage*, producers before consumers */
    te__vec trace;  /* char* lines */
    char *trace_text;
};

/* ---- Shared core (schedule/schedule.c) ------------------------------------------------------
 * Used by the primitives in loops.c, placement.c, dataflow.c and gpu.c, and by lowering. */

/* Sets the error on the schedule's context and returns `code` (a negative te_status). */
#define TE__SERR(s, code, ...) te_ctx_set_error((s)->ctx, code, __VA_ARGS__)

/* Stages whose bodies read `t` (directly): stores up to `max` of them in out (may be NULL when
 * max is 0) and returns how many there are. */
int te__stage_readers(te_schedule *s, const te_tensor *t, te_stage **out, int max);
/* Whether expression e reads tensor t. */
bool te__expr_reads(const te_expr *e, const te_tensor *t);

/* Appends one printf-formatted line to the schedule's trace (at most 511 characters; the line
 * is copied into the context's arena) and invalidates the cached trace text. Returns TE_OK or
 * TE_ERR_NOMEM. */
int te__trace_add(te_schedule *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A new leaf iterator of stage st with its own loop variable, registered in st->iters (not in
 * st->leaves: the caller places it). Arena-allocated; NULL when out of memory. */
te_iter *te__new_iter(te_stage *st, const char *name, int64_t extent, bool reduce);
/* A new stage of schedule s (not yet in s->stages) computing tensor t, whose body is `body`
 * over the axis variables `axes` (t->ndim of them) and the reduction axes of a TE_E_REDUCE
 * body. Fresh loop variables replace them, so no two stages share a variable; the leaves are
 * the axes, then the reduction axes. Arena-allocated; NULL on error (out of memory). */
te_stage *te__new_stage(te_schedule *s, te_tensor *t, te_expr *const *axes, te_expr *body);

/* Position of `it` in st's current loop order, or -1 when it is not a current loop. */
int te__leaf_pos(const te_stage *st, const te_iter *it);
/* Checks that x is a current loop (leaf) of stage st. Returns TE_OK, or TE_ERR_ARG /
 * TE_ERR_SCHEDULE with a message naming `fn`, the stage and the iterator. */
int te__check_leaf(te_stage *st, const te_iter *x, const char *fn);
/* Checks that no stage is computed at loop x of st (a loop that compute_at uses cannot be
 * split or fused any more). Returns TE_OK or TE_ERR_SCHEDULE with a message naming `fn`. */
int te__check_not_attached(te_stage *st, const te_iter *x, const char *fn);
/* `base`, or `base` followed by the smallest number >= 1 that makes it unique among st's
 * iterator names. Arena string; NULL when out of memory. */
const char *te__unique_iter_name(te_stage *st, const char *base);

#endif
