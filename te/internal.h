/*
 * te/internal.h (private): the node structures behind the public handles, shared by te/,
 * schedule/ and backends/. Nothing here is installed.
 *
 * One expression type serves both tensor expressions (te/) and the lowered loop IR
 * (schedule/): tensor expressions use READ (a tensor element) and REDUCE; the lowered IR
 * replaces them by LOAD (a buffer element) and adds RAMP/BROADCAST for vector lanes.
 */
#ifndef TESSERA_TE_INTERNAL_H
#define TESSERA_TE_INTERNAL_H

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/te.h"

/* ---- Arena ------------------------------------------------------------------------------ */

/* Zeroed allocation owned by ctx; NULL (with TE_ERR_NOMEM recorded) when out of memory. */
void *te__alloc(te_ctx *ctx, size_t size);
/* Puts prefix in front of the context's error message, when it has one (the pass pipeline
 * names the failing pass this way). */
void te__ctx_prefix_error(te_ctx *ctx, const char *prefix);
/* The context's id: unique in the process, never reused (so a freed context's objects are never
 * mistaken for a live one's). */
uint64_t te__ctx_id(const te_ctx *ctx);
/* Whether objects built by the context with id `owner` may be used in ctx: it is ctx itself or
 * one of the ancestors ctx was created under (te_ctx_create_child). */
bool te__ctx_may_use(const te_ctx *ctx, uint64_t owner);

/* A pointer slot the context keeps for objects built once per context (the built-in tuple
 * reducers): key in [0, TE__CTX_CACHE_SLOTS). NULL for a bad key or when out of memory. */
#define TE__CTX_CACHE_SLOTS 1024
void **te__ctx_cache_slot(te_ctx *ctx, int key);

char *te__strdup(te_ctx *ctx, const char *s);
/* printf into the arena. */
char *te__sprintf(te_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new unique id for variables, tensors, buffers. */
int te__next_id(te_ctx *ctx);

/* Growable array of pointers in the arena (old blocks stay in the arena). */
typedef struct te__vec {
    void **v;
    int n, cap;
} te__vec;
int te__vec_push(te_ctx *ctx, te__vec *vec, void *p);

/* A growing string (te/strbuf.c). After a failed allocation every call is a no-op and oom
 * stays set; the owner frees p (te__sb_free) or moves it into an arena (te__sb_finish). */
typedef struct te__sb {
    char *p;
    size_t n, cap;
    bool oom;
} te__sb;
void te__sb_putn(te__sb *b, const char *s, size_t n);
/* Appends s; NULL appends nothing. */
void te__sb_puts(te__sb *b, const char *s);
void te__sb_printf(te__sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void te__sb_free(te__sb *b);
/* Copies the text into ctx's arena and frees the buffer; NULL (TE_ERR_NOMEM) after oom. */
const char *te__sb_finish(te_ctx *ctx, te__sb *b);
/* Appends z as the body of a C block comment: " * " before every line, and no "*" "/" pair
 * that would end the comment early. */
void te__sb_comment(te__sb *b, const char *z);
/* Writes a valid C identifier made from z into out (n bytes): other characters become '_',
 * a leading digit gets a '_' in front, an empty or NULL z gives "v". */
void te__c_ident(const char *z, char *out, size_t n);

/* ---- Expressions ------------------------------------------------------------------------ */

typedef enum te_expr_kind {
    TE_E_INT,    /* u.i */
    TE_E_FLOAT,  /* u.f */
    TE_E_VAR,    /* u.var */
    TE_E_BINARY, /* u.bin */
    TE_E_NOT,    /* u.un */
    TE_E_NEG,    /* u.un */
    TE_E_SELECT, /* u.sel: both sides evaluated */
    TE_E_IF,     /* u.sel: if_then_else, only the taken side evaluated */
    TE_E_CAST,   /* u.un */
    TE_E_CALL,   /* u.call */
    TE_E_READ,   /* u.read: element of a te_tensor (tensor expressions only) */
    TE_E_REDUCE, /* u.red (tensor expressions only) */
    TE_E_LOAD,   /* u.load: element of a te_buf (lowered IR only) */
    TE_E_RAMP,   /* u.ramp: base, base + stride, ... (lanes) */
    TE_E_BCAST,  /* u.un: value repeated in every lane */
} te_expr_kind;

typedef enum te_var_kind {
    TE_VAR_FREE,     /* te_var: a scalar variable (reducer operands, lets) */
    TE_VAR_AXIS,     /* te_axis: data-parallel axis of a compute */
    TE_VAR_REDUCE,   /* te_reduce_axis */
    TE_VAR_LOOP,     /* a loop variable made by scheduling or lowering */
    TE_VAR_PREFETCH, /* a let whose value, a scalar load, is only prefetched (te_prefetch): the
                        backends issue a prefetch of its address and never define it */
} te_var_kind;

typedef struct te_buf te_buf;

struct te_expr {
    te_expr_kind kind;
    te_dtype dtype;
    uint64_t owner; /* id of the context that built it (te__ctx_id): operands never cross */
    int lanes;      /* 1 for scalars; vector width after vectorization */
    union {
        int64_t i;
        double f;
        struct {
            const char *name;
            int64_t extent; /* axes: range [0, extent); 0 for free variables */
            te_var_kind vkind;
            int id;
        } var;
        struct {
            te_binop op;
            te_expr *a, *b;
        } bin;
        struct {
            te_expr *a;
        } un;
        struct {
            te_expr *c, *t, *f;
        } sel;
        struct {
            te_intrin fn;
            int n;
            te_expr *args[2];
        } call;
        struct {
            te_tensor *t;
            int n;
            te_expr **idx;
        } read;
        struct {
            te_reduce_kind rkind;
            te_reducer *custom;
            te_expr *src; /* tuple reductions: srcs[comp] (srcs[0] for the whole tuple) */
            int n;
            te_expr **axes;
            /* Tuple reductions (te_reduce_tuple): nsrc = custom->n > 0 sources, and the
             * component this node stands for: -1 for the whole tuple (valid only as the body
             * given to te_compute_tuple), i for output i (the body of that output tensor, of
             * component i's dtype). nsrc is 0 for scalar reductions. */
            int nsrc;
            te_expr **srcs;
            int comp;
        } red;
        struct {
            te_buf *buf;
            int n; /* rank of the index before storage flattening, 1 after */
            te_expr **idx;
        } load;
        struct {
            te_expr *base;
            int64_t stride;
        } ramp;
    } u;
};

/* A reducer. Scalar reducers (te_reducer_create) have n == 1 and the arrays point at x, y,
 * combine and identity; tuple reducers (te_reducer_create_tuple) have n components, and x, y,
 * combine, identity are component 0's. */
struct te_reducer {
    const char *name;
    te_expr *x, *y, *combine, *identity;
    int n;
    te_expr **xs, **ys, **combines, **identities;
    bool tuple; /* made by te_reducer_create_tuple (even with n == 1) */
};

/* Whether e is a tuple reduction (te_reduce_tuple or one component of it). */
static inline bool te__is_tuple_reduce(const te_expr *e)
{
    return e && e->kind == TE_E_REDUCE && e->u.red.nsrc > 0;
}
/* The n combined values of a tuple reducer: combine[i] with x := acc, y := val (arrays of n).
 * out receives n expressions. TE_OK or TE_ERR_NOMEM. */
int te__reduce_combine_tuple(te_ctx *ctx, const te_reducer *r, te_expr *const *acc,
                             te_expr *const *val, te_expr **out);

typedef enum te_tensor_kind { TE_T_PLACEHOLDER, TE_T_COMPUTE } te_tensor_kind;

struct te_tensor {
    te_tensor_kind kind;
    uint64_t owner; /* id of the context that built it */
    te_ctx *home;   /* that context (alive as long as the tensor is: it holds it) */
    const char *name;
    const char *tag;
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    te_expr *axes[TE_MAX_DIMS]; /* compute only */
    te_expr *body;              /* compute only */
    int id;
    /* Outputs of one te_compute_tuple: tuple_n > 0 tensors in `tuple` (shared array), this one
     * at tuple_index. They share axes and one stage in a schedule. 0 / NULL otherwise. */
    int tuple_n, tuple_index;
    te_tensor **tuple;
};

/* Whether a and b are one tensor or outputs of one te_compute_tuple (so one stage computes
 * both). */
static inline bool te__tensor_same_stage(const te_tensor *a, const te_tensor *b)
{
    return a == b || (a && b && a->tuple_n > 0 && a->tuple == b->tuple);
}

/* The tensor a tuple output's stage is named after (the first output), t itself otherwise. */
static inline te_tensor *te__tuple_primary(te_tensor *t)
{
    return t && t->tuple_n > 0 ? t->tuple[0] : t;
}

/* The context that holds tensor t (for making a child context that may use it). */
static inline te_ctx *te__tensor_ctx(const te_tensor *t) { return t->home; }

/* Expression helpers (te/expr.c). */
te_expr *te__new_expr(te_ctx *ctx, te_expr_kind kind, te_dtype dtype);
te_expr *te__loop_var(te_ctx *ctx, const char *name, int64_t extent);
/* A TE_VAR_PREFETCH variable (the variable of a prefetch let) for cache level 1, 2 or 3 (kept in
 * the variable's extent, which nothing else reads for such a variable). */
te_expr *te__prefetch_var(te_ctx *ctx, const char *name, int level);
te_expr *te__load(te_ctx *ctx, te_buf *buf, int n, te_expr *const *idx);
te_expr *te__ramp(te_ctx *ctx, te_expr *base, int64_t stride, int lanes);
te_expr *te__bcast(te_ctx *ctx, te_expr *v, int lanes);
/* Identity element of a built-in or custom reducer for dtype. */
te_expr *te__reduce_identity(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_dtype dtype);
/* combine(acc, v) for a reducer. */
te_expr *te__reduce_combine(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_expr *acc,
                            te_expr *v);
int te__is_const_int(const te_expr *e, int64_t *out);
bool te__expr_equal(const te_expr *a, const te_expr *b);
/* Structural hash (64-bit FNV-1a) of every stage the outputs depend on (te/expr_hash.c); what
 * te_tuner_expr_hash returns. te__tensor_sig_hash continues h with t's name, kind, dtype and
 * shape. */
uint64_t te__expr_hash(int n_out, te_tensor *const *outs);
/* Every computed tensor the outputs depend on, producers first, without duplicates: up to cap
 * of them into st (te/expr_hash.c). Returns how many were stored. */
int te__collect_stages(int n_out, te_tensor *const *outs, te_tensor **st, int cap);
uint64_t te__tensor_sig_hash(uint64_t h, const te_tensor *t);

/* Substitution: a map from variables to expressions. */
typedef struct te__subst {
    int n;
    const te_expr *const *from; /* TE_E_VAR nodes */
    te_expr *const *to;
} te__subst;
/* Returns e with every var in map replaced; shares unchanged subtrees. */
te_expr *te__substitute(te_ctx *ctx, te_expr *e, const te__subst *map);

/* Generic rebuild: calls fn on every child first and rebuilds when a child changed.
 * fn(ctx, e, user) returns the replacement for e (or e itself). Post-order. */
typedef te_expr *(*te__expr_mutator)(te_ctx *ctx, te_expr *e, void *user);
te_expr *te__expr_mutate(te_ctx *ctx, te_expr *e, te__expr_mutator fn, void *user);
/* Visits every node, pre-order. Returning false from fn skips the node's children. */
typedef bool (*te__expr_visitor)(const te_expr *e, void *user);
void te__expr_visit(const te_expr *e, te__expr_visitor fn, void *user);
/* Whether e mentions variable v. */
bool te__expr_uses_var(const te_expr *e, const te_expr *v);
/* Whether e reads memory: a LOAD of any buffer anywhere in it. */
bool te__expr_has_load(const te_expr *e);
/* The distinct tensors e reads, in order of first appearance: up to max of them into out.
 * Returns how many there are (more than max when out was too small: the rest are not stored). */
int te__expr_tensors_read(const te_expr *e, te_tensor **out, int max);

/* ---- Lowered statements ------------------------------------------------------------------ */

struct te_buf {
    const char *name;
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS]; /* extents of the allocation (region for compute_at) */
    te_scope scope;
    int arg_index;     /* position in the kernel's argument list, -1 for allocations */
    te_tensor *tensor; /* the tensor it stores (NULL for scratch) */
    int id;
    /* A double-buffered shared tile whose next half is filled while the current one is read
     * (the double_buffer pass placed its barriers; the barrier pass leaves its accesses alone,
     * and CUDA on sm_80+ fills it with cp.async). */
    bool prefetched;
    /* Dimensions whose index is ignored (extent 1): the buffer holds one element for every
     * position along them. Set for a tuple reduction's component that is the same along the
     * dimension (schedule/lower_tuple.c); storage flattening drops their indices. */
    uint32_t bcast_dims;
};

/* Elements of buffer b (the product of its shape). */
static inline int64_t te__buf_numel(const te_buf *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->shape[d];
    return n;
}

typedef enum te_stmt_kind {
    TE_S_FOR,     /* u.loop */
    TE_S_SEQ,     /* u.seq */
    TE_S_IF,      /* u.cond */
    TE_S_STORE,   /* u.store */
    TE_S_ALLOC,   /* u.alloc: buffer live inside body */
    TE_S_BARRIER, /* GPU: __syncthreads */
    TE_S_LET,     /* u.let: var = value inside body */
    TE_S_COMMENT, /* u.comment: marks producer/consumer regions in the printed IR */
    TE_S_INTRIN,  /* u.intrin: a call of a tensor intrinsic (te_tensorize) */
} te_stmt_kind;

typedef enum te_for_kind {
    TE_FOR_SERIAL,
    TE_FOR_PARALLEL,
    TE_FOR_VECTORIZED,
    TE_FOR_UNROLLED,
    TE_FOR_THREAD,  /* bound to a GPU thread/block index (thread_tag) */
    TE_FOR_VTHREAD, /* a virtual thread (te_bind TE_VTHREAD); inject_vthread replaces it */
} te_for_kind;

/* A reduction loop bound to a GPU thread index (te_bind_reduce), as the loop nests are built:
 * every update in the loop's body is buf[idx] = combine(buf[idx], value). The
 * cross_thread_reduce pass (schedule/passes/allreduce.c) turns such a loop into a reduction
 * across the threads; no loop carries one after it. */
typedef struct te__xreduce {
    te_buf *buf;
    int ndim;
    te_expr **idx;
    te_reduce_kind kind;
    te_reducer *custom;
    te_dtype dtype;
    /* A tuple stage: every update of the body is a tuple update of bufs[0..ntuple) (the
     * accumulators, custom the tuple reducer); buf is bufs[0]. 0 / NULL otherwise. */
    int ntuple;
    te_buf **bufs;
} te__xreduce;

/* Register promotion of a local buffer, decided by the promote_registers pass
 * (schedule/passes/promote_registers.c) and carried by the ALLOC statement: the buffer lives
 * in named variables instead of memory. Element i is, by kind[i]: TE_PROMO_UNUSED (never
 * accessed), TE_PROMO_SCALAR (a scalar variable of its own) or TE_PROMO_LANE (lane i % lanes of
 * vector variable i / lanes). Every access to the buffer inside the allocation has a constant
 * flat index: a scalar element, or a stride-1 ramp of `lanes` lanes starting at a multiple of
 * `lanes`. Arena memory; statement rebuilds (te__alloc_stmt, te__stmt_mutate) drop it, which is
 * why the pass runs last. */
typedef enum te__promo_kind {
    TE_PROMO_UNUSED = 0,
    TE_PROMO_SCALAR = 1,
    TE_PROMO_LANE = 2,
} te__promo_kind;

typedef struct te__promotion {
    int lanes;                 /* lanes of the vector variables; 0 when there are only scalars */
    int64_t size;              /* elements of the buffer */
    const unsigned char *kind; /* size entries, te__promo_kind */
} te__promotion;

typedef struct te_stmt te_stmt;
struct te_stmt {
    te_stmt_kind kind;
    union {
        struct {
            te_expr *var;
            te_expr *min, *extent;
            te_for_kind fkind;
            int thread_tag;
            te__xreduce *xreduce; /* non-NULL: a cross-thread reduction still to lower */
            te_stmt *body;
        } loop;
        struct {
            int n;
            te_stmt **v;
        } seq;
        struct {
            te_expr *cond;
            te_stmt *then_s, *else_s;
        } cond;
        struct {
            te_buf *buf;
            int n;
            te_expr **idx;
            te_expr *value;
            bool nontemporal;
        } store;
        struct {
            te_buf *buf;
            te_stmt *body;
            const te__promotion *promote; /* non-NULL: lives in registers (C backend) */
        } alloc;
        struct {
            te_expr *var, *value;
            te_stmt *body;
        } let;
        struct {
            const char *text;
        } comment;
        /* A tensor intrinsic's function called with, per operand o (its output first), the
         * address of element addr[o] (a LOAD, never emitted as a load) and the strides of
         * buffer dimensions sdim[o * TE_MAX_DIMS + f] for its nfree[o] free dimensions; n is
         * the variable axis's extent (-1: none). `in` is the schedule layer's intrinsic
         * (opaque here). */
        struct {
            const struct te_tensor_intrin *in;
            const char *name;
            bool overwrite; /* the intrinsic's overwrite form (output = ..., no init) */
            int nops;
            te_expr **addr;
            const int *nfree;
            const int *sdim;
            const int64_t *smul; /* the stride of free dimension f is smul[o * TE_MAX_DIMS + f]
                                  * times the buffer's (a strided access: conv stride) */
            int64_t n;
        } intrin;
    } u;
};

te_stmt *te__for(te_ctx *ctx, te_expr *var, te_expr *min, te_expr *extent, te_for_kind kind,
                 te_stmt *body);
te_stmt *te__seq(te_ctx *ctx, int n, te_stmt *const *v);
/* Sequence of two, flattening nested sequences and dropping NULLs. */
te_stmt *te__seq2(te_ctx *ctx, te_stmt *a, te_stmt *b);
te_stmt *te__if(te_ctx *ctx, te_expr *cond, te_stmt *then_s, te_stmt *else_s);
te_stmt *te__store(te_ctx *ctx, te_buf *buf, int n, te_expr *const *idx, te_expr *value);
te_stmt *te__alloc_stmt(te_ctx *ctx, te_buf *buf, te_stmt *body);
te_stmt *te__let(te_ctx *ctx, te_expr *var, te_expr *value, te_stmt *body);
te_stmt *te__comment(te_ctx *ctx, const char *text);
/* The most operands a TE_S_INTRIN statement has. */
#define TE_INTRIN_STMT_MAX_OPS 8
/* A call of tensor intrinsic `in` (named `name`) on nops <= TE_INTRIN_STMT_MAX_OPS operands:
 * addr are LOAD expressions, nfree[o] free dimensions per operand whose buffer dimensions are
 * sdim[o * TE_MAX_DIMS + f], whose buffer strides are multiplied by smul[same]; n the variable
 * axis's extent or -1. Arrays are copied. NULL when out
 * of memory or an address is not a LOAD. */
te_stmt *te__intrin_call(te_ctx *ctx, const struct te_tensor_intrin *in, const char *name,
                         bool overwrite, int nops, te_expr *const *addr, const int *nfree,
                         const int *sdim, const int64_t *smul, int64_t n);
te_buf *te__buf_new(te_ctx *ctx, const char *name, te_dtype dtype, int ndim, const int64_t *shape,
                    te_scope scope);

/* Generic statement rebuild: fs is called on every statement after its children were
 * rebuilt, fe (may be NULL) on every expression. */
typedef te_stmt *(*te__stmt_mutator)(te_ctx *ctx, te_stmt *s, void *user);
te_stmt *te__stmt_mutate(te_ctx *ctx, te_stmt *s, te__stmt_mutator fs, te__expr_mutator fe,
                         void *user);
/* Visits statement s and everything in it, pre-order: fs on every statement (returning false
 * skips what is inside it, expressions included), fe on every expression (te__expr_visit
 * rules). Either callback may be NULL. */
typedef bool (*te__stmt_visitor)(const te_stmt *s, void *user);
void te__stmt_visit(const te_stmt *s, te__stmt_visitor fs, te__expr_visitor fe, void *user);
/* Whether statement s loads buffer b anywhere (in an expression of any of its statements). */
bool te__stmt_loads(const te_stmt *s, const te_buf *b);
/* Rebuilds a SEQ, IF, LET or ALLOC with every child statement replaced by fn(user, child),
 * for passes that recurse themselves (they handle FOR, where they track loop ranges). A child
 * fn returns as NULL is dropped; an IF left with only its else branch is negated; a statement
 * left with nothing returns NULL. Returns s itself when nothing changed and any other kind of
 * statement unchanged. Allocation failure, or fn setting *failed, returns NULL with *failed. */
typedef te_stmt *(*te__stmt_child_fn)(void *user, te_stmt *child);
te_stmt *te__stmt_map_children(te_ctx *ctx, te_stmt *s, te__stmt_child_fn fn, void *user,
                               bool *failed);
/* Substitutes variables in every expression of a statement. */
te_stmt *te__stmt_substitute(te_ctx *ctx, te_stmt *s, const te__subst *map);

/* A lowered function: the loop program one kernel runs. Arguments are the inputs and then the
 * outputs, in the order given to te_lower; each is a global buffer with arg_index set. */
typedef struct te_lowered {
    const char *name;
    int n_args;
    te_buf **args;
    te_stmt *body;
    const char *header; /* provenance: operator, shapes and schedule trace, several lines */
    int n_outputs;      /* the last n_outputs args are written */
} te_lowered;

/* Printing (te/print.c). */
void te__stmt_print(const te_stmt *s, FILE *f, int indent);

#endif /* TESSERA_TE_INTERNAL_H */
