/* Private structures of the fusion rules (graph/rules.c) and of the engine (graph/fuse*.c). */
#ifndef TESSERA_GRAPH_FUSE_INTERNAL_H
#define TESSERA_GRAPH_FUSE_INTERNAL_H

#include <stdlib.h>

#include "graph/graph_internal.h"

#define TE__R_ATOMS 8
#define TE__R_PATH 6
#define TE__R_ITEMS 8
#define TE__R_INF 1000000

typedef enum te__atom_type { TE__ATOM_NAME, TE__ATOM_KIND, TE__ATOM_ANY } te__atom_type;

typedef struct te__patom {
    te__atom_type type;
    char name[40]; /* operator name or glob */
    te_op_kind kind;
} te__patom;

typedef struct te__pelem {
    int natoms;
    te__patom atoms[TE__R_ATOMS];
    int min, max;
    int has_quant;
} te__pelem;

typedef enum te__item_type { TE__ITEM_ELEM, TE__ITEM_BRANCH, TE__ITEM_SIBLINGS } te__item_type;

typedef struct te__pitem {
    te__item_type type;
    te__pelem elem; /* the element, the join of a branch, or the siblings */
    int n1, n2;     /* branch paths */
    te__pelem p1[TE__R_PATH], p2[TE__R_PATH];
} te__pitem;

typedef struct te__rule {
    char name[48];
    char cls[16];
    char pattern[256];
    char produces[40];
    char produces_attrs[96];
    int priority;
    int specificity;
    int order;
    int line;
    int nitems;
    te__pitem items[TE__R_ITEMS];
    /* where */
    unsigned dtype_mask; /* bit per te_dtype; 0: any */
    int rank, min_rank;  /* -1: any */
    char target[8];      /* "" any */
    char isa[32];
    int kernel_h, kernel_w; /* 0: any */
    int same_shape, escape;
    int64_t max_numel; /* 0: any */
    int min_sm;        /* 0: any; else a CUDA target of this compute capability x10 or newer */
} te__rule;

struct te_fuse_rules {
    te__rule *r;
    int n, cap;
};

/* True when atom-list element e accepts operator op. */
int te__pelem_accepts(const te__pelem *e, const te__gop *op);

/* ---- The engine's state, shared by graph/fuse*.c ----------------------------------------- */

typedef struct fgroup {
    char rule[64];
    char cls[16];
    char fused[96];
    int n, *nodes;
    int nout, *outs;
    int view; /* a lone reshape whose output shares its input's storage: no kernel */
} fgroup;

typedef struct fdec {
    int accepted;
    char rule[64];
    char check[12];
    char reason[512];
    int n, *nodes;
} fdec;

struct te_fuse_plan {
    const te_graph *g;
    te_fuse_target t;
    fgroup *gr;
    int ng;
    fdec *d;
    int nd, capd;
    int *group_of;
};

#define MAXM 64

/* A match in progress. */
typedef struct mstate {
    int nodes[MAXM];
    int n;
    int count[TE__R_ITEMS]; /* nodes matched per item (elements) */
    int multi;              /* some element matched other than once */
    int anchor_value;       /* siblings as the first item */
} mstate;

typedef struct fctx {
    te_graph *g;
    te_fuse_plan *p;
    const te_fuse_target *t;
    int **cons; /* consumers of each value (node ids) */
    int *ncons;
    int *assigned; /* group of each node, -1 */
    fgroup *tmp;   /* groups in creation order */
    int ntmp, captmp;
} fctx;

static inline const te__gnode *NODE(const fctx *f, int n) { return &f->g->n[n]; }
static inline const te__gvalue *VAL(const fctx *f, int v) { return &f->g->v[v]; }
static inline const char *vname(const fctx *f, int v) { return VAL(f, v)->name; }
static inline const char *nname(const fctx *f, int n) { return VAL(f, NODE(f, n)->out[0])->name; }

static inline int in_state(const mstate *st, int n)
{
    for (int i = 0; i < st->n; i++)
        if (st->nodes[i] == n)
            return 1;
    return 0;
}

/* Node n may join the match: not in a group yet, not matched already, room left. */
static inline int free_node(const fctx *f, const mstate *st, int n)
{
    return n >= 0 && f->assigned[n] < 0 && !in_state(st, n) && st->n < MAXM;
}

/* qsort comparator of ints; sorts a match's nodes. */
int te__fuse_cmp_int(const void *a, const void *b);
static inline void te__fuse_sort_state(mstate *st)
{
    qsort(st->nodes, (size_t)st->n, sizeof(int), te__fuse_cmp_int);
}

/* fuse_match.c: matches rule r's items from `item` on; prev is the node matched last (-1 at
 * the start), anchor the node (or join) the match starts from. 1 when the whole pattern
 * matched (st holds the nodes). */
int te__fuse_match_items(fctx *f, const te__rule *r, int item, int prev, int anchor, mstate *st);

/* fuse_check.c: records a decision on the plan (once per rule and node set). */
int te__fuse_add_decision(fctx *f, int accepted, const char *rule, const char *check,
                          const mstate *st, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Checks a candidate (st->nodes sorted): cycle, escape, registers, l2, roofline; records the
 * decision. Returns 1 when accepted. */
int te__fuse_check_candidate(fctx *f, const char *rule, int allow_escape, mstate *st);
/* "1.50 MiB", "12.0 KiB", "96 B". */
void te__fuse_human_bytes(double b, char *buf, size_t n);

/* fuse.c: records a group of st's nodes (in f->tmp) and marks them assigned. */
int te__fuse_add_group(fctx *f, const char *rule, const char *cls, const char *fused,
                       const mstate *st);

/* fuse_generic.c: epilogue absorption, TVM's kind-based fusion, singletons; then the groups
 * ordered so each comes after those it reads (into f->p). */
void te__fuse_generic(fctx *f);
int te__fuse_order_groups(fctx *f);

/* fuse.c: the value whose storage v shares: v itself unless v is the output of a view group,
 * else the root of that view's input (chains of views followed). */
int te__fuse_view_root(const te_fuse_plan *p, int v);
/* The number of groups that run a kernel (groups that are not views). */
int te__fuse_kernel_count(const te_fuse_plan *p);

#endif
