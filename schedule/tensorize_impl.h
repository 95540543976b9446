/*
 * schedule/tensorize_impl.h (private): tensor intrinsics behind tessera/tensorize.h, the nest
 * matcher shared by te_tensorize (schedule time) and lowering (schedule/lower.c), and the
 * built-in intrinsics (schedule/intrin_x86.c).
 */
#ifndef TESSERA_SCHEDULE_TENSORIZE_IMPL_H
#define TESSERA_SCHEDULE_TENSORIZE_IMPL_H

#include "schedule/sched_impl.h"
#include "tessera/tensorize.h"

#define TZ_MAX_OPS TE_TENSOR_INTRIN_MAX_OPERANDS

struct te_tensor_intrin {
    const char *name, *features, *doc;
    const char *c_update, *c_overwrite, *c_prelude;
    te_backend_kind backend;
    te_tensor *out;                      /* the description (in the registry's context) */
    int n_in;                            /* inputs: ops[1..n_in] */
    te_tensor *ops[TZ_MAX_OPS];          /* operand 0 the output, then the inputs */
    int nfree[TZ_MAX_OPS];               /* resolved: leading dimensions with a passed stride */
    int var_axis;                        /* reduction axis of variable extent, -1 none */
    int nd, nr;                          /* the description's data and reduction axes */
    int64_t ext[2 * TE_MAX_DIMS];        /* their extents: data axes, then reduction axes */
    const te_expr *var[2 * TE_MAX_DIMS]; /* and variables */
};

/* What a nest that matches an intrinsic maps to. Leaves are indexed from the tensorized loop
 * (position kt) on. */
typedef struct te__tz_match {
    int nops;
    te_tensor *ops[TZ_MAX_OPS]; /* the stage's tensor per operand (ops[0] the stage's own) */
    int dim0[TZ_MAX_OPS];       /* the stage tensor's dimension the description's dim 0 maps to */
    int64_t smul[TZ_MAX_OPS][TE_MAX_DIMS]; /* free dimension d moves smul times the
                                            * description's step (1, or a conv's stride) */
    int64_t var_extent;                    /* the variable axis's extent in the nest, -1 none */
    bool whole_reduction;                  /* every reduction loop of the stage is in the nest */
} te__tz_match;

/* Whether the loops st->leaves[kt..] of stage st, with extents ext(iter) (ext == NULL: the
 * schedule-time extents; else ext[te__iter_index]) and the stage body `body` (over the root
 * variables), compute what `in` describes. TE_OK with *m filled, or TE_ERR_SCHEDULE with the
 * reason in why (n bytes). */
int te__tz_match_nest(const te_stage *st, const te_expr *body, int kt, const int64_t *ext,
                      const te_tensor_intrin *in, te__tz_match *m, char *why, size_t n);

/* Registers the built-in intrinsics (schedule/intrin_x86.c); called once, under the registry's
 * lock, through reg (which is te_tensor_intrin_register without the lock). */
typedef const te_tensor_intrin *(*te__tz_reg_fn)(const te_tensor_intrin_desc *d, const char **err);
void te__tz_register_builtins(te__tz_reg_fn reg);

#endif
