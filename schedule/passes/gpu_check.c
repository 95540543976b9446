/*
 * GPU check: a schedule that would fail to launch (or launch wrong) is an error when it is
 * built, naming the stage, the loop and the limit.
 *
 * Limits come from the target: te_target carries the compute capability (sm); the limits below
 * hold for every architecture Tessera emits code for (sm_70 and later). Static shared memory
 * is 48 KiB per block (more needs dynamic shared memory, which the backend does not use).
 */
#include <stdio.h>
#include <string.h>

#include "schedule/passes.h"

#define MAX_THREADS 1024
#define MAX_SHARED_STATIC (48 * 1024)
static const int64_t max_block[3] = {1024, 1024, 64};
static const int64_t max_grid[3] = {2147483647LL, 65535, 65535};
static const char *const tag_names[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                        "threadIdx.x", "threadIdx.y", "threadIdx.z"};

typedef struct chk {
    te_ctx *ctx;
    const char *stage; /* from the "compute X" comment before a nest */
    bool failed;
} chk;

#define CERR(c, ...)                                                                               \
    do {                                                                                           \
        if (!(c)->failed)                                                                          \
            te_ctx_set_error((c)->ctx, TE_ERR_SCHEDULE, __VA_ARGS__);                              \
        (c)->failed = true;                                                                        \
    } while (0)

static bool is_block(const te_stmt *s)
{
    return s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
           s->u.loop.thread_tag <= TE_BLOCK_Z;
}

static const char *loop_name(const te_stmt *s)
{
    return s->u.loop.var->u.var.name ? s->u.loop.var->u.var.name : "?";
}

/* Block loops anywhere inside a block body are misplaced. */
static void no_blocks_inside(chk *c, const te_stmt *s)
{
    if (!s || c->failed)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        if (is_block(s))
            CERR(c,
                 "GPU check: stage '%s': loop '%s' is bound to %s but is nested inside other "
                 "loops; loops bound to blockIdx must be the outermost loops of a stage computed "
                 "at the root",
                 c->stage, loop_name(s), tag_names[s->u.loop.thread_tag]);
        no_blocks_inside(c, s->u.loop.body);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            no_blocks_inside(c, s->u.seq.v[i]);
        break;
    case TE_S_IF:
        no_blocks_inside(c, s->u.cond.then_s);
        no_blocks_inside(c, s->u.cond.else_s);
        break;
    case TE_S_ALLOC:
        no_blocks_inside(c, s->u.alloc.body);
        break;
    case TE_S_LET:
        no_blocks_inside(c, s->u.let.body);
        break;
    default:
        break;
    }
}

static int64_t shared_bytes(const te_stmt *s)
{
    int64_t n = 0;
    if (!s)
        return 0;
    switch (s->kind) {
    case TE_S_ALLOC: {
        const te_buf *b = s->u.alloc.buf;
        if (b->scope == TE_SCOPE_SHARED) {
            int64_t e = (int64_t)te_dtype_size(b->dtype);
            for (int d = 0; d < b->ndim; d++)
                e *= b->shape[d];
            n += (e + 15) / 16 * 16;
        }
        return n + shared_bytes(s->u.alloc.body);
    }
    case TE_S_FOR:
        return shared_bytes(s->u.loop.body);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            n += shared_bytes(s->u.seq.v[i]);
        return n;
    case TE_S_IF:
        return shared_bytes(s->u.cond.then_s) + shared_bytes(s->u.cond.else_s);
    case TE_S_LET:
        return shared_bytes(s->u.let.body);
    default:
        return 0;
    }
}

/* The name of a loop bound to threadIdx along `dim` that reaches `ext` threads ("?" if none). */
typedef struct {
    int tag;
    int64_t ext;
    const char *name;
} widest_ctx;

static bool widest_fn(const te_stmt *s, void *user)
{
    widest_ctx *w = user;
    int64_t e, m;
    if (!w->name && s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
        s->u.loop.thread_tag == w->tag && te__is_const_int(s->u.loop.extent, &e) &&
        te__is_const_int(s->u.loop.min, &m) && m + e == w->ext)
        w->name = loop_name(s);
    return !w->name;
}

static const char *widest_loop(const te_stmt *body, int dim, int64_t ext)
{
    widest_ctx w = {TE_THREAD_X + dim, ext, NULL};
    te__stmt_visit(body, widest_fn, NULL, &w);
    return w.name ? w.name : "?";
}

static void check_kernel(chk *c, const te_stmt *s)
{
    int64_t grid[3] = {1, 1, 1};
    bool seen[3] = {false, false, false};
    const te_stmt *b = s;
    while (is_block(b)) {
        int t = b->u.loop.thread_tag;
        int64_t e, m;
        if (!te__is_const_int(b->u.loop.extent, &e) || !te__is_const_int(b->u.loop.min, &m) || m)
            CERR(c,
                 "GPU check: stage '%s': loop '%s' bound to %s must start at 0 and have a "
                 "constant extent",
                 c->stage, loop_name(b), tag_names[t]);
        else if (seen[t])
            CERR(c,
                 "GPU check: stage '%s': two loops are bound to %s ('%s' is the second); "
                 "fuse them first",
                 c->stage, tag_names[t], loop_name(b));
        else if (e > max_grid[t])
            CERR(c,
                 "GPU check: stage '%s': loop '%s' bound to %s has %lld iterations; the grid "
                 "allows at most %lld",
                 c->stage, loop_name(b), tag_names[t], (long long)e, (long long)max_grid[t]);
        if (c->failed)
            return;
        seen[t] = true;
        grid[t] = e;
        b = b->u.loop.body;
    }
    no_blocks_inside(c, b);
    if (c->failed)
        return;
    int64_t dims[3];
    if (!te__block_dims(b, dims)) {
        CERR(c, "GPU check: stage '%s': a loop bound to threadIdx has a non-constant extent",
             c->stage);
        return;
    }
    for (int d = 0; d < 3; d++)
        if (dims[d] > max_block[d]) {
            CERR(c,
                 "GPU check: stage '%s': loop '%s' makes %lld threads along %s; a block allows at "
                 "most %lld",
                 c->stage, widest_loop(b, d, dims[d]), (long long)dims[d],
                 tag_names[TE_THREAD_X + d], (long long)max_block[d]);
            return;
        }
    int64_t nt = dims[0] * dims[1] * dims[2];
    if (nt > MAX_THREADS) {
        char loops[256] = "";
        size_t used = 0;
        for (int d = 0; d < 3 && used < sizeof loops; d++)
            if (dims[d] > 1)
                used += (size_t)snprintf(loops + used, sizeof loops - used, "%s'%s' on %s",
                                         used ? ", " : "", widest_loop(b, d, dims[d]),
                                         tag_names[TE_THREAD_X + d]);
        CERR(c,
             "GPU check: stage '%s': %lld x %lld x %lld = %lld threads per block (loops %s); at "
             "most %d are allowed",
             c->stage, (long long)dims[0], (long long)dims[1], (long long)dims[2], (long long)nt,
             loops, MAX_THREADS);
        return;
    }
    int64_t sh = shared_bytes(b);
    if (sh > MAX_SHARED_STATIC)
        CERR(c,
             "GPU check: stage '%s': %lld bytes of shared memory per block; at most %d are "
             "allowed (smaller tiles, or fewer stages in shared memory)",
             c->stage, (long long)sh, MAX_SHARED_STATIC);
    (void)grid;
}

static void check_root(chk *c, const te_stmt *s)
{
    if (!s || c->failed)
        return;
    switch (s->kind) {
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n && !c->failed; i++)
            check_root(c, s->u.seq.v[i]);
        return;
    case TE_S_ALLOC:
        check_root(c, s->u.alloc.body);
        return;
    case TE_S_COMMENT:
        if (s->u.comment.text && strncmp(s->u.comment.text, "compute ", 8) == 0)
            c->stage = s->u.comment.text + 8;
        return;
    case TE_S_BARRIER:
        return;
    default:
        break;
    }
    if (!te__has_thread_loops(s)) {
        CERR(c,
             "GPU check: stage '%s' has no loop bound to a GPU block or thread; bind its outer "
             "loops with te_bind (blockIdx, then threadIdx), inline it, or compute it inside a "
             "stage that is bound",
             c->stage);
        return;
    }
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD) {
        check_kernel(c, s);
        return;
    }
    /* Something runs outside the block loops. */
    const char *what = s->kind == TE_S_FOR ? loop_name(s) : "a statement";
    CERR(c,
         "GPU check: stage '%s': %s%s%s runs outside the loops bound to blockIdx/threadIdx; "
         "the bound loops must be the outermost loops of the stage (reorder them outward)",
         c->stage, s->kind == TE_S_FOR ? "loop '" : "", what, s->kind == TE_S_FOR ? "'" : "");
}

te_stmt *te__pass_gpu_check(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    const te_target *target = pc->target;
    (void)target;
    chk c = {ctx, "?", false};
    check_root(&c, s);
    return c.failed ? NULL : s;
}
