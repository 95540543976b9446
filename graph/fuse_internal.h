/* Private structures of the fusion rules (graph/rules.c) shared with the engine (fuse.c). */
#ifndef TESSERA_GRAPH_FUSE_INTERNAL_H
#define TESSERA_GRAPH_FUSE_INTERNAL_H

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
} te__rule;

struct te_fuse_rules {
    te__rule *r;
    int n, cap;
};

/* True when atom-list element e accepts operator op. */
int te__pelem_accepts(const te__pelem *e, const te__gop *op);

#endif
