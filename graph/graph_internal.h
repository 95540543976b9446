/* Private structures of graph/: the graph's values and nodes, the operator table. */
#ifndef TESSERA_GRAPH_INTERNAL_H
#define TESSERA_GRAPH_INTERNAL_H

#include <stdbool.h>

#include "tessera/graph.h"
#include "tessera/ops.h"

#define TE__G_NAME 41
#define TE__G_ATTRS 256
#define TE__G_MAXIO TE_OP_MAX_IO

/* How a constant got its data, so te_graph_print can write it back. */
typedef enum te__ginit { TE__INIT_DATA, TE__INIT_RANDOM, TE__INIT_FILL } te__ginit;

typedef struct te__gvalue {
    char name[TE__G_NAME];
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    te_graph_value_kind kind;
    int node, slot; /* producer and output index (node outputs) */
    void *data;     /* constants: owned */
    te__ginit init; /* constants */
    uint64_t seed;
    double lo, hi; /* random range, or fill value in lo */
    int is_output;
    te_tensor *t; /* in g->ctx */
} te__gvalue;

struct te__gop;

typedef struct te__gnode {
    const struct te__gop *op;
    char attrs[TE__G_ATTRS];
    int n_in, in[TE__G_MAXIO];
    int n_out, out[TE__G_MAXIO];
} te__gnode;

struct te_graph {
    te_ctx *ctx; /* tensors of the values; rebuilt after passes */
    te__gvalue *v;
    int nv, capv;
    te__gnode *n;
    int nn, capn;
    int code;
    char msg[768];
    int autoname;
};

/* One operator a node may apply. */
typedef int (*te__gop_apply)(te_ctx *ctx, const struct te__gop *op, const te_op_params *kv,
                             int n_in, te_tensor *const *in, const char *const *names,
                             te_tensor **out);

typedef struct te__gop {
    const char *name;
    te_op_kind kind;
    int min_in, max_in, n_out; /* n_out 0: as many as the node names (1 .. TE__G_MAXIO) */
    const char *inputs;        /* "X,W[,bias]" */
    const char *attrs;         /* defaults "stride=1,pad=0" ("" none) */
    double flop_per_elem;      /* elementwise cost per output element (pattern kinds 0..3) */
    te__gop_apply apply;
} te__gop;

const te__gop *te__gop_find(const char *name);
/* The graph library's operator named `name` (graph/ops.c's table only), or NULL. */
const te__gop *te__gop_find_library(const char *name);
/* The user operator named `name` (te_graph_op_register, graph/userop.c), or NULL. */
const te__gop *te__guser_find(const char *name);
/* True when op is a user operator (its attributes are read by the user's callback). */
int te__gop_is_user(const te__gop *op);
/* Attribute lookups, the node's value or the operator's default (already validated). */
int64_t te__gop_attr_int(const te__gop *op, const te_op_params *kv, const char *key);
double te__gop_attr_f64(const te__gop *op, const te_op_params *kv, const char *key);
const char *te__gop_attr_str(const te__gop *op, const te_op_params *kv, const char *key, char *buf,
                             size_t n);
/* 1 when input i of op may have a dtype of its own (gather's indices, where's condition); the
 * other inputs of a node share one dtype. */
int te__gop_input_any_dtype(const te__gop *op, int i);
/* Checks that every key of kv is an attribute of op; message on ctx. */
int te__gop_check_attrs(te_ctx *ctx, const te__gop *op, const te_op_params *kv);

/* Records an error on g unless one is recorded; returns code. */
int te__graph_error(te_graph *g, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rebuilds every value's tensor in a fresh context (after a pass changed the graph). */
int te__graph_rebuild(te_graph *g);
/* Adds a value slot (internal: passes); returns its id or a status. */
int te__graph_add_value(te_graph *g, const char *name, te_dtype dtype, int ndim,
                        const int64_t *shape, te_graph_value_kind kind);
/* Replaces every read of value `from` by `to` (and moves the output mark). */
void te__graph_replace_uses(te_graph *g, int from, int to);
/* Drops dead nodes and unused constants, renumbering ids; keep_node[n]/keep_val[v] say what
 * stays (NULL: liveness from the outputs). Rebuilds tensors. */
int te__graph_compact(te_graph *g, const bool *keep_node);
/* Appends node (op, attrs, inputs) named "<base>_<suffix>" (made unique); its output id or a
 * status (graph/passes.c). */
int te__graph_add_node(te_graph *g, const char *op, const char *attrs, int n_in, const int *in,
                       const char *base, const char *suffix);
/* Moves nodes [from, nn) to just after node `after` (they must only read values defined before
 * it) and renumbers the producers: a rewrite appends its nodes, then puts them in place. */
int te__graph_move_tail(te_graph *g, int from, int after);
/* A rewrite's result `out` (made by nodes [first_new, nn)) takes the place of value `old`:
 * its readers read out, out takes old's name (an output's name is what users ask for; old
 * becomes "<name>_<suffix>"), and the new nodes move to just after node `after`. Returns the
 * status of te__graph_move_tail. */
int te__graph_take_place(te_graph *g, int old, int out, int first_new, int after,
                         const char *suffix);
/* A name not used in g, "<base>" or "<base>_<k>". */
void te__graph_unique_name(const te_graph *g, const char *base, char *out, size_t n);
/* The trace of a whole-run record of e (graph/exec.c): for every distinct workload of its
 * kernels, in plan order, a line "@workload KEY" followed by the lines of that kernel's schedule
 * trace. malloc'ed (the caller frees it); NULL when e is NULL or memory ran out. */
char *te__graph_whole_trace(const te_graph_exec *e);
/* Fills data with uniform elements in [lo, hi), never zero. */
int te__fill_random(void *data, te_dtype dtype, int64_t n, uint64_t seed, double lo, double hi);
/* Converts n elements of dtype to double / from double. */
void te__to_f64(const void *src, te_dtype dtype, int64_t n, double *dst);
void te__from_f64(const double *src, te_dtype dtype, int64_t n, void *dst);

#endif
