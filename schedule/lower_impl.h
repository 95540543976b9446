/*
 * schedule/lower_impl.h (private): the state te_lower keeps per stage while it builds loop
 * nests, shared by lower.c (inlining and loop nests), lower_tuple.c (tuple updates), relations.c
 * (split/fuse propagation) and bound_infer.c (regions of compute_at stages).
 */
#ifndef TESSERA_SCHEDULE_LOWER_IMPL_H
#define TESSERA_SCHEDULE_LOWER_IMPL_H

#include "schedule/bound.h"
#include "schedule/passes.h"
#include "schedule/sched_impl.h"

/* One stage while it is lowered. */
typedef struct lstage {
    te_stage *st;
    te_expr *body;              /* after inlining, over the root variables */
    te_buf *buf;                /* NULL for inlined stages; tuple stages: bufs[0] */
    te_buf *bufs[TE_MAX_TUPLE]; /* tuple stages: the buffer of each output (st->ntuple) */
    te_expr *rmin[TE_MAX_DIMS]; /* region: first element along each axis */
    int64_t rext[TE_MAX_DIMS];  /* region extent */
    int64_t *ext;               /* lowered extent of st->iters[i] */
    te_expr **val;              /* value of st->iters[i] in terms of the leaf loop variables */
    /* A tuple reduction with prefetches: its pf_nsrc sources, lowered, where te_prefetch finds
     * the prefetched tensor's loads (0 otherwise). */
    te_expr **pf_srcs;
    int pf_nsrc;
} lstage;

/* te_lower's state: the schedule, its stages, the kernel arguments and their buffers. */
typedef struct lower_ctx {
    te_ctx *ctx;
    te_schedule *s;
    int n;
    lstage *ls;
    int n_args;
    te_tensor *const *args;
    te_buf **arg_bufs;
} lower_ctx;

#define LERR(L, code, ...) te_ctx_set_error((L)->ctx, code, __VA_ARGS__)

/* Position of iterator it in st->iters, -1 when it is not one of st's. */
int te__iter_index(const te_stage *st, const te_iter *it);
/* The lowering state of the stage computing t, NULL when t is not computed by the schedule. */
lstage *te__find_lstage(lower_ctx *L, const te_tensor *t);

/* READ of tensors in e -> LOAD of their buffers (relative to each buffer's region); NULL with
 * an error on L->ctx when a tensor has no buffer, or when e is NULL. */
te_expr *te__to_loads(lower_ctx *L, te_expr *e);

/* ---- lower_tuple.c: the update of a tuple stage ----
 * What it computes outside the stage's innermost loops: lets, in order, wrapped around the
 * loop of leaf q (nl, no lets, when nothing is). */
#define TE__TUPLE_OUTER_MAX 64
typedef struct te__tuple_outer {
    int q;
    int n;
    te_expr *var[TE__TUPLE_OUTER_MAX];
    te_expr *val[TE__TUPLE_OUTER_MAX];
} te__tuple_outer;
/* The first of l's innermost leaves that are spatial, serial, unrolled or vectorized, not
 * pipelined and with no stage computed at them (st->leaves.n when the innermost is not). */
int te__tuple_inner_from(lower_ctx *L, const lstage *l);
/* The update (*update, at the innermost loop) and initialization (*init, one element) of tuple
 * stage l at indices sidx, its sources substituted by map. Components that stay the same along
 * leaves q.. are read and combined once outside them: o's lets, to be wrapped around the loop
 * of leaf o->q (te__tuple_outer_wrap) under the stage's guards at that loop's first point.
 * Returns TE_OK or an error code (the statements are then unset). */
int te__tuple_update(lower_ctx *L, lstage *l, const te__subst *map, te_expr *const *sidx, int q,
                     te__tuple_outer *o, te_stmt **update, te_stmt **init);
/* inner inside o's lets (NULL on allocation failure). */
te_stmt *te__tuple_outer_wrap(lower_ctx *L, const te__tuple_outer *o, te_stmt *inner);

/* ---- lower_tree.c: reductions folded as a balanced tree (te_reduce_tree) ----
 * Checks l's tree fold against the schedule as lowered: *tpos is the folded leaf's position,
 * -1 when the stage folds none. TE_OK, or TE_ERR_SCHEDULE with the reason on L->ctx. */
int te__tree_check(lower_ctx *L, const lstage *l, int *tpos);
/* The update (*update, at the innermost loop, which leaf tpos no longer encloses) and
 * initialization (*init, one element) of reduction stage l at indices sidx, its sources
 * substituted by map and folded over leaf tpos as a tree. TE_OK or an error code. */
int te__tree_update(lower_ctx *L, lstage *l, const te__subst *map, te_expr *const *sidx, int tpos,
                    te_stmt **update, te_stmt **init);

/* ---- lower_with.c: sets of buffers, for the order checks of te_pipeline and te_compute_with */
typedef struct te__bufs {
    const te_buf *v[128];
    int n;
    bool full; /* more than 128 were added: a check on the set cannot be trusted */
} te__bufs;
/* Adds to b every buffer statement s (may be NULL) loads / stores (a tensor intrinsic's
 * output included). */
void te__bufs_reads(const te_stmt *s, te__bufs *b);
void te__bufs_writes(const te_stmt *s, te__bufs *b);
/* Whether x is in b. */
bool te__bufs_has(const te__bufs *b, const te_buf *x);

/* ---- lower_with.c: te_compute_with ----
 * Stage st's statement s (make_stage) fused into the statement w of st->cw_with, which runs
 * before it at the same place; between: the nbetween statements of the stages computed between
 * the two (NULL entries skipped). Returns the fused statement, or NULL with the reason on
 * L->ctx (TE_ERR_SCHEDULE: the fusion would change what a stage reads). */
te_stmt *te__compute_with_fuse(lower_ctx *L, const te_stage *st, te_stmt *s, te_stmt *w,
                               te_stmt *const *between, int nbetween);
/* The siblings prod[0..np) (stages st[]) with every stage computed with another fused into its
 * statement (whose slot it keeps; the fused stage's slot becomes NULL). 0, or -1 with the reason
 * on L->ctx. */
int te__fuse_siblings(lower_ctx *L, te_stmt **prod, const te_stage *const *st, int np);

/* ---- relations.c: split/fuse propagation ----
 * Forward: the stage's root extents (its region, l->rext) through split/fuse to every
 * iterator's extent (l->ext). */
void te__compute_extents(lstage *l);
/* Backward: the value of every iterator in terms of the leaf loop variables (l->val): split
 * gives outer * factor + inner, fuse floordiv/floormod. TE_OK or TE_ERR_NOMEM. */
int te__compute_values(lower_ctx *L, lstage *l);

/* ---- bound_infer.c ----
 * The region of stage p, computed at a loop of another stage: what one iteration of that loop
 * needs, from every consumer's reads as symbolic intervals (loops outside the attach point stay
 * symbols). Sets p->rmin (first element, an expression of the outer loops) and p->rext (a
 * constant extent, proven; the whole tensor when no bound can be proven). Consumers must have
 * been processed. TE_OK or an error with a message on L->ctx. */
int te__infer_region(lower_ctx *L, lstage *p);

#endif
