/*
 * backends/cuda/emit_cuda_stmt.c: statements as CUDA C++: serial and unrolled loops, thread
 * loops as threadIdx (guarded when narrower than the block), vector stores as float4/float2
 * copies or lane by lane, __shared__ and local arrays, lets, barriers, and the steps of a
 * cross-thread reduction tree as warp shuffles.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/emit_cuda_impl.h"

/* ---- Statements --------------------------------------------------------------------------- */

static void gen_warp_publish(cem *e, const te_stmt *s);

static bool cp_async_store_fn(const te_stmt *s, void *user)
{
    bool *any = user;
    if (s->kind == TE_S_STORE && s->u.store.buf->prefetched &&
        s->u.store.buf->scope == TE_SCOPE_SHARED)
        *any = true;
    return !*any;
}

bool te__cem_uses_cp_async(const cem *e, const te_stmt *s)
{
    bool any = false;
    if (e->target && e->target->sm >= 80)
        te__stmt_visit(s, cp_async_store_fn, NULL, &any);
    return any;
}

/* A prefetched shared tile filled from global memory with cp.async: a copy of one f32, or of
 * an aligned float2 / float4 (vt non-NULL, then ix and iv are the vectors' first elements). */
static bool gen_cp_async(cem *e, const te_buf *b, const te_expr *val, const char *vt,
                         const te_expr *ix, const te_expr *iv)
{
    if (!e->cp_async || !b->prefetched || b->scope != TE_SCOPE_SHARED || b->dtype != TE_F32 ||
        val->kind != TE_E_LOAD || val->u.load.buf->scope != TE_SCOPE_GLOBAL || val->dtype != TE_F32)
        return false;
    const char *d = te__cem_buf_name(e, b), *g = te__cem_buf_name(e, val->u.load.buf);
    if (!vt)
        te__cem_line(e, "te_cp_async4(&%s[%s], &%s[%s]);", d, te__cem_text(e, ix), g,
                     te__cem_text(e, iv));
    else
        te__cem_line(e, "te_cp_async%d((%s *)&%s[%s], (const %s *)&%s[%s]);",
                     strcmp(vt, "float4") == 0 ? 16 : 8, vt, d, te__cem_text(e, ix), vt, g,
                     te__cem_text(e, iv));
    return true;
}

static void gen_store(cem *e, const te_stmt *s)
{
    if (s == e->wf_pub) {
        gen_warp_publish(e, s);
        return;
    }
    const te_buf *b = s->u.store.buf;
    te_expr *ix = s->u.store.idx[0], *val = s->u.store.value;
    if (s->u.store.n != 1) {
        te__cem_fail(e, TE_ERR_INTERNAL, "store to '%s' with an index that is not flat", b->name);
        return;
    }
    int lanes = val->lanes > ix->lanes ? val->lanes : ix->lanes;
    /* f16/bf16: the float value rounded to nearest even (__float2half_rn, ...) */
    const char *cv = te_dtype_conv_fn(b->dtype, 1, 1);
    if (cv)
        e->uses_half = true;
    if (lanes == 1) {
        if (val->kind == TE_E_LOAD && gen_cp_async(e, b, val, NULL, ix, val->u.load.idx[0]))
            return;
        te__cem_line(e, "%s[%s] = %s%s%s%s;", te__cem_buf_name(e, b), te__cem_text(e, ix),
                     cv ? cv : "", cv ? "(" : "", te__cem_text(e, val), cv ? ")" : "");
        return;
    }
    /* a contiguous, aligned copy: one vector load and store */
    size_t es = te_dtype_size(b->dtype);
    if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1 && val->kind == TE_E_LOAD &&
        val->u.load.idx[0]->kind == TE_E_RAMP && val->u.load.idx[0]->u.ramp.stride == 1 &&
        val->dtype == b->dtype && es == 4 && (lanes == 2 || lanes == 4) &&
        te__arith_multiple_of(ix->u.ramp.base, lanes) &&
        te__arith_multiple_of(val->u.load.idx[0]->u.ramp.base, lanes)) {
        const char *vt = b->dtype == TE_F32 ? (lanes == 4 ? "float4" : "float2")
                                            : (lanes == 4 ? "int4" : "int2");
        if (gen_cp_async(e, b, val, vt, ix->u.ramp.base, val->u.load.idx[0]->u.ramp.base))
            return;
        te__cem_line(e, "*(%s *)&%s[%s] = *(const %s *)&%s[%s];", vt, te__cem_buf_name(e, b),
                     te__cem_text(e, ix->u.ramp.base), vt, te__cem_buf_name(e, val->u.load.buf),
                     te__cem_text(e, val->u.load.idx[0]->u.ramp.base));
        return;
    }
    if (te__cem_gen_vector_store(e, s))
        return;
    for (int l = 0; l < lanes; l++) {
        te_expr *il = te__cem_lane(e, ix, l), *vl = te__cem_lane(e, val, l);
        if (!il || !vl) {
            te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
            return;
        }
        if (vl->kind == TE_E_LOAD && vl->lanes == 1 &&
            gen_cp_async(e, b, vl, NULL, il, vl->u.load.idx[0]))
            continue;
        te__cem_line(e, "%s[%s] = %s%s%s%s;", te__cem_buf_name(e, b), te__cem_text(e, il),
                     cv ? cv : "", cv ? "(" : "", te__cem_text(e, vl), cv ? ")" : "");
    }
}

const char *const te__cem_dim_name[3] = {"x", "y", "z"};

/* Enters statement s at position i of the path (a sequence's item, -1 a serial loop, -2 an if);
 * false (nothing entered) when the path is full, which only makes the analyses that read it
 * more careful. */
static bool path_push(cem *e, const te_stmt *s, int i)
{
    if (e->npath >= 64)
        return false;
    e->path_s[e->npath] = s;
    e->path_i[e->npath++] = i;
    return true;
}

static void gen_for(cem *e, const te_stmt *s)
{
    const te_expr *var = s->u.loop.var;
    const char *v = te__cem_var_name(e, var);
    int64_t mn = 0, ex = 0;
    bool kmin = te__is_const_int(s->u.loop.min, &mn),
         kext = te__is_const_int(s->u.loop.extent, &ex);
    if (s->u.loop.fkind == TE_FOR_THREAD) {
        int tag = s->u.loop.thread_tag;
        if (tag <= TE_BLOCK_Z) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "loop '%s' bound to blockIdx.%s is nested inside the kernel",
                         var->u.var.name, te__cem_dim_name[tag]);
            return;
        }
        int d = tag - TE_THREAD_X;
        if (!kmin || !kext) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "loop '%s' bound to threadIdx.%s has a non-constant range",
                         var->u.var.name, te__cem_dim_name[d]);
            return;
        }
        bool guard = mn > 0 || mn + ex < e->dims[d];
        if (guard) {
            if (mn > 0)
                te__cem_line(e, "if (threadIdx.%s >= %lld && threadIdx.%s < %lld) {",
                             te__cem_dim_name[d], (long long)mn, te__cem_dim_name[d],
                             (long long)(mn + ex));
            else
                te__cem_line(e, "if (threadIdx.%s < %lld) {", te__cem_dim_name[d], (long long)ex);
        } else {
            te__cem_line(e, "{");
        }
        e->indent++;
        te__cem_line(e, "const int %s = threadIdx.%s;", v, te__cem_dim_name[d]);
        int saved_ranges = e->ranges.n;
        /* threadIdx < dims[d], narrowed by the guard printed above */
        int64_t tlo = mn > 0 ? mn : 0, tend = mn > 0 ? mn + ex : ex;
        int64_t thi = (tend < e->dims[d] ? tend : e->dims[d]) - 1;
        te__cem_check_push(e, te__ranges_push(e->ctx, &e->ranges, var, tlo, thi < tlo ? tlo : thi));
        te__cem_gen_stmt(e, s->u.loop.body);
        te__emit_ranges_restore(&e->ranges, saved_ranges);
        e->indent--;
        te__cem_line(e, "}");
        return;
    }
    const char *it = e->small ? "int" : "long long";
    const char *lo = te__cem_text(e, s->u.loop.min);
    const char *hi = kmin && kext ? te__sprintf(e->ctx, "%lld", (long long)(mn + ex))
                     : kmin && mn == 0
                         ? te__cem_text(e, s->u.loop.extent)
                         : te__sprintf(e->ctx, "%s + %s", lo, te__cem_text(e, s->u.loop.extent));
    if (s->u.loop.fkind == TE_FOR_UNROLLED)
        te__cem_line(e, "#pragma unroll");
    te__cem_line(e, "for (%s %s = %s; %s < %s; ++%s) {", it, v, lo, v, hi, v);
    int saved_ranges = e->ranges.n;
    te__cem_check_push(
        e, te__emit_push_loop_range(e->ctx, &e->ranges, var, s->u.loop.min, s->u.loop.extent));
    e->indent++;
    bool pushed = path_push(e, s, -1);
    te__cem_gen_stmt(e, s->u.loop.body);
    e->npath -= pushed;
    e->indent--;
    te__emit_ranges_restore(&e->ranges, saved_ranges);
    te__cem_line(e, "}");
}

/* ---- Warp-shuffle reduction steps ------------------------------------------------------------ */

/* A tree step of allreduce.c: for k (threadIdx.x, extent h): R[k] = comb(R[k], R[k + m]).
 * Returns R and stores h and m. */
static const te_buf *tree_step(const te_stmt *s, int64_t *h, int64_t *m)
{
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_THREAD ||
        s->u.loop.thread_tag != TE_THREAD_X || !te__is_const_int(s->u.loop.extent, h))
        return NULL;
    const te_stmt *st = s->u.loop.body;
    if (st->kind != TE_S_STORE || st->u.store.n != 1 || st->u.store.buf->scope != TE_SCOPE_SHARED ||
        st->u.store.idx[0] != s->u.loop.var)
        return NULL;
    const te_buf *R = st->u.store.buf;
    /* find the load R[k + m] */
    const te_expr *v = st->u.store.value;
    const te_expr *stack[64];
    int n = 0;
    stack[n++] = v;
    *m = -1;
    while (n) {
        const te_expr *x = stack[--n];
        if (x->kind == TE_E_LOAD && x->u.load.buf == R) {
            const te_expr *i = x->u.load.idx[0];
            int64_t c;
            if (i != s->u.loop.var) {
                if (i->kind == TE_E_BINARY && i->u.bin.op == TE_ADD &&
                    i->u.bin.a == s->u.loop.var && te__is_const_int(i->u.bin.b, &c))
                    *m = c;
                else
                    return NULL;
            }
            continue;
        }
        if (x->kind == TE_E_BINARY && n + 2 <= 64) {
            stack[n++] = x->u.bin.a;
            stack[n++] = x->u.bin.b;
        } else if ((x->kind == TE_E_SELECT || x->kind == TE_E_IF) && n + 3 <= 64) {
            stack[n++] = x->u.sel.c;
            stack[n++] = x->u.sel.t;
            stack[n++] = x->u.sel.f;
        } else if ((x->kind == TE_E_NOT || x->kind == TE_E_NEG || x->kind == TE_E_CAST) && n < 64) {
            stack[n++] = x->u.un.a;
        }
    }
    return *m > 0 ? R : NULL;
}

typedef struct {
    const te_buf *R;
    const te_expr *k;
    te_expr *a, *b;
} comb_ctx;

static te_expr *comb_fn(te_ctx *ctx, te_expr *x, void *user)
{
    comb_ctx *c = user;
    (void)ctx;
    if (x->kind == TE_E_LOAD && x->u.load.buf == c->R)
        return x->u.load.idx[0] == c->k ? c->a : c->b;
    return x;
}

/* Emits the steps from seq item i on as warp shuffles when they reduce 32 values or fewer.
 * Returns the index of the first item not consumed, or i when the pattern does not apply. */
static int gen_warp_steps(cem *e, const te_stmt *seq, int i)
{
    if (e->dims[1] != 1 || e->dims[2] != 1)
        return i;
    int64_t h, m;
    const te_buf *R = tree_step(seq->u.seq.v[i], &h, &m);
    int64_t n = h + m;
    if (!R || n > 32)
        return i;
    const te_stmt *first = seq->u.seq.v[i];
    int j = i + 1;
    for (;;) {
        int64_t h2, m2;
        if (j + 1 < seq->u.seq.n && seq->u.seq.v[j]->kind == TE_S_BARRIER &&
            tree_step(seq->u.seq.v[j + 1], &h2, &m2) == R)
            j += 2;
        else if (j < seq->u.seq.n && tree_step(seq->u.seq.v[j], &h2, &m2) == R)
            j += 1;
        else
            break;
    }
    te_ctx *ctx = e->ctx;
    const te_stmt *st = first->u.loop.body;
    te_dtype dt = R->dtype;
    te_expr *va = te_var(ctx, "v", dt), *vb = te_var(ctx, "o", dt);
    comb_ctx cc = {R, first->u.loop.var, va, vb};
    te_expr *comb = te__expr_mutate(ctx, st->u.store.value, comb_fn, &cc);
    if (!comb) {
        te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        return j;
    }
    int64_t off = 1;
    while (off * 2 < n)
        off *= 2;
    const char *rn = te__cem_buf_name(e, R);
    const char *va_n = te__cem_var_name(e, va), *vb_n = te__cem_var_name(e, vb);
    te__cem_line(e, "if (threadIdx.x < 32) { // warp-shuffle reduction of %s[0..%lld)", rn,
                 (long long)n);
    e->indent++;
    te__cem_line(e, "%s %s = %s[threadIdx.x < %lld ? threadIdx.x : 0];", te__cem_value_ctype(e, dt),
                 va_n, rn, (long long)n);
    te__cem_line(e, "#pragma unroll");
    te__cem_line(e, "for (int off = %lld; off > 0; off >>= 1) {", (long long)off);
    e->indent++;
    /* The mask names the lanes that exist: a block of fewer than 32 threads has only that
     * many (a full mask would name lanes that never arrive, which is undefined behaviour).
     * Every thread of a block narrower than a warp takes part (threadIdx.x < 32), the rows of
     * a 2-D block included, so the count is the whole block's. */
    int64_t nthreads =
        e->dims[0] * (e->dims[1] > 0 ? e->dims[1] : 1) * (e->dims[2] > 0 ? e->dims[2] : 1);
    unsigned mask = e->dims[0] >= 32 || nthreads >= 32 ? 0xffffffffu : (1u << nthreads) - 1u;
    te__cem_line(e, "const %s %s = __shfl_down_sync(0x%08xu, %s, off);", te__cem_value_ctype(e, dt),
                 vb_n, mask, va_n);
    te__cem_line(e, "if (threadIdx.x + off < %lld)", (long long)n);
    e->indent++;
    te__cem_line(e, "%s = %s;", va_n, te__cem_text(e, comb));
    e->indent -= 2;
    te__cem_line(e, "}");
    te__cem_line(e, "if (threadIdx.x == 0)");
    e->indent++;
    te__cem_line(e, "%s[0] = %s;", rn, va_n);
    e->indent -= 2;
    te__cem_line(e, "}");
    return j;
}

/* ---- Warp-first cross-thread reductions ----------------------------------------------------
 *
 * allreduce.c reduces E partial results through a shared array R as a tree, one barrier per
 * halving:
 *
 *     for k (threadIdx.x, E): { part = identity; ...; R[k] = part }     (the publishing loop)
 *     barrier; for k (threadIdx.x, E/2): R[k] = comb(R[k], R[k + E/2]); barrier; ...; barrier
 *     fin                                                                (reads R[0])
 *
 * That IR is what the C backend runs on the CPU. On the GPU, when E is a multiple of 32 above
 * 32 and the block is one-dimensional, the same statements are written warp first: each warp
 * combines its 32 partial results with shuffles and its lane 0 writes R[warp]; one barrier;
 * every thread folds R[0 .. E/32) into a register, and fin reads that register instead of R[0].
 * A second barrier follows the fold only where R is written again later in the kernel (the
 * reduction sits in a loop, or a copy of it follows), so that no warp overwrites R[w] while
 * another still reads it. Everything else (rows along threadIdx.y, other counts, tuples) keeps
 * the tree, its last 32 steps as shuffles (gen_warp_steps above). */

/* The store R[var] = ... that publishes the partial results: an unconditional statement of
 * the publishing loop's body (through allocations and sequences), or NULL. */
static const te_stmt *publish_store(const te_stmt *s, const te_buf *R, const te_expr *var)
{
    while (s && s->kind == TE_S_ALLOC)
        s = s->u.alloc.body;
    if (!s)
        return NULL;
    if (s->kind == TE_S_STORE)
        return s->u.store.buf == R && s->u.store.n == 1 && s->u.store.idx[0] == var &&
                       s->u.store.value->lanes == 1
                   ? s
                   : NULL;
    if (s->kind != TE_S_SEQ)
        return NULL;
    for (int i = 0; i < s->u.seq.n; i++) {
        const te_stmt *x = publish_store(s->u.seq.v[i], R, var);
        if (x)
            return x;
    }
    return NULL;
}

typedef struct {
    const te_buf *R;
    int stores, other_reads;
} r_uses;

static bool r_uses_stmt(const te_stmt *s, void *user)
{
    r_uses *u = user;
    if (s->kind == TE_S_STORE && s->u.store.buf == u->R)
        u->stores++;
    return true;
}

static bool r_reads_expr(const te_expr *x, void *user)
{
    r_uses *u = user;
    if (x->kind == TE_E_LOAD && x->u.load.buf == u->R) {
        int64_t c;
        if (x->u.load.n != 1 || !te__is_const_int(x->u.load.idx[0], &c) || c != 0)
            u->other_reads++;
    }
    return true;
}

typedef struct {
    const te_buf *R;
    te_expr *v;
} r0_ctx;

static te_expr *r0_to_v(te_ctx *ctx, te_expr *x, void *user)
{
    r0_ctx *c = user;
    (void)ctx;
    return x->kind == TE_E_LOAD && x->u.load.buf == c->R ? c->v : x;
}

/* 1 when item s writes R, 2 when it is a barrier (every thread passes it), else 0. */
static int write_or_barrier(const te_stmt *s, const te_buf *R)
{
    if (s->kind == TE_S_BARRIER)
        return 2;
    r_uses u = {R, 0, 0};
    te__stmt_visit(s, r_uses_stmt, NULL, &u);
    return u.stores ? 1 : 0;
}

/* Whether every thread passes a barrier after the current statement of the innermost sequence
 * of the path (its items from `from` on) before R is written again: the rest of each enclosing
 * sequence, outward, up to the innermost serial loop; then that loop's next iteration, from the
 * start of its body down to the current statement. Only barriers that are items of those
 * sequences count (one inside an if or a loop may be skipped); an if between the loop and the
 * statement makes the next iteration's path unknown (false). With no serial loop around, R is
 * not written again once the rest of the kernel has none of its stores. */
static bool barrier_before_write(const cem *e, const te_buf *R, int from)
{
    int d = e->npath - 1;
    for (; d >= 0; d--) {
        const te_stmt *s = e->path_s[d];
        int pos = e->path_i[d];
        if (pos == -1)
            break; /* the innermost serial loop: its next iteration below */
        if (pos < 0)
            continue; /* the rest of an if: nothing after the taken branch */
        for (int k = d == e->npath - 1 ? from : pos + 1; k < s->u.seq.n; k++) {
            int w = write_or_barrier(s->u.seq.v[k], R);
            if (w)
                return w == 2;
        }
    }
    if (d < 0)
        return true;
    for (int l = d + 1; l < e->npath; l++) {
        const te_stmt *s = e->path_s[l];
        int pos = e->path_i[l];
        if (pos < 0)
            return false;
        for (int k = 0; k < pos; k++) {
            int w = write_or_barrier(s->u.seq.v[k], R);
            if (w)
                return w == 2;
        }
    }
    return false; /* back at this reduction's own publishing store */
}

static void gen_warp_publish(cem *e, const te_stmt *s)
{
    te_dtype dt = e->wf_R->dtype;
    const char *ct = te__cem_value_ctype(e, dt);
    const char *a = te__cem_var_name(e, e->wf_a), *b = te__cem_var_name(e, e->wf_b);
    te__cem_line(e, "{ // warp first: the warp's 32 partial results by shuffles, lane 0 writes");
    e->indent++;
    te__cem_line(e, "%s %s = %s;", ct, a, te__cem_text(e, s->u.store.value));
    te__cem_line(e, "#pragma unroll");
    te__cem_line(e, "for (int off = 16; off > 0; off >>= 1) {");
    e->indent++;
    te__cem_line(e, "const %s %s = __shfl_down_sync(0xffffffffu, %s, off);", ct, b, a);
    te__cem_line(e, "%s = %s;", a, te__cem_text(e, e->wf_comb));
    e->indent--;
    te__cem_line(e, "}");
    te__cem_line(e, "if ((threadIdx.x & 31) == 0)");
    e->indent++;
    te__cem_line(e, "%s[threadIdx.x >> 5] = %s;", te__cem_buf_name(e, e->wf_R), a);
    e->indent -= 2;
    te__cem_line(e, "}");
}

/* Emits seq items i.. as a warp-first reduction when they are one (see above). Returns the
 * index of the first item not consumed, or i when the pattern does not apply. */
static int gen_warp_first(cem *e, const te_stmt *seq, int i)
{
    if (e->warp || e->dims[1] != 1 || e->dims[2] != 1 || i + 3 >= seq->u.seq.n || !e->npath ||
        e->path_s[e->npath - 1] != seq) /* (a path too deep to follow) */
        return i;
    const te_stmt *P = seq->u.seq.v[i];
    int64_t mn, E;
    if (P->kind != TE_S_FOR || P->u.loop.fkind != TE_FOR_THREAD ||
        P->u.loop.thread_tag != TE_THREAD_X || !te__is_const_int(P->u.loop.min, &mn) || mn != 0 ||
        !te__is_const_int(P->u.loop.extent, &E) || E <= 32 || E % 32 || E > e->dims[0] ||
        seq->u.seq.v[i + 1]->kind != TE_S_BARRIER)
        return i;
    int64_t h, m;
    const te_buf *R = tree_step(seq->u.seq.v[i + 2], &h, &m);
    if (!R || h + m != E || te__buf_numel(R) < E / 32)
        return i;
    te_dtype dt = R->dtype;
    if (dt != TE_F32 && dt != TE_F64 && dt != TE_I32 && dt != TE_I64)
        return i;
    const te_stmt *pub = publish_store(P->u.loop.body, R, P->u.loop.var);
    if (!pub)
        return i;
    /* the rest of the tree, down to one element, then fin */
    int j = i + 2, steps = 0;
    int64_t n = E;
    while (j < seq->u.seq.n) {
        const te_stmt *x = seq->u.seq.v[j];
        int64_t h2, m2;
        if (x->kind == TE_S_BARRIER) {
            j++;
            continue;
        }
        if (tree_step(x, &h2, &m2) != R || h2 + m2 != n)
            break;
        n = m2;
        steps++;
        j++;
    }
    if (n != 1 || j >= seq->u.seq.n || seq->u.seq.v[j - 1]->kind != TE_S_BARRIER)
        return i;
    const te_stmt *fin = seq->u.seq.v[j];
    r_uses fu = {R, 0, 0};
    te__stmt_visit(fin, r_uses_stmt, r_reads_expr, &fu);
    if (fu.stores || fu.other_reads)
        return i;
    bool again = !barrier_before_write(e, R, j + 1);

    /* the combine of the first tree step, R[k] -> a and R[k + m] -> b */
    te_ctx *ctx = e->ctx;
    const te_stmt *first = seq->u.seq.v[i + 2];
    te_expr *va = te_var(ctx, "v", dt), *vb = te_var(ctx, "o", dt);
    comb_ctx cc = {R, first->u.loop.var, va, vb};
    te_expr *comb =
        va && vb ? te__expr_mutate(ctx, first->u.loop.body->u.store.value, comb_fn, &cc) : NULL;
    te_expr *w = te_var(ctx, "w", TE_I32), *tot = te_var(ctx, "r", dt);
    te_expr *rw = w ? te__load(ctx, (te_buf *)R, 1, &w) : NULL;
    comb_ctx fc = {R, first->u.loop.var, tot, rw};
    te_expr *fold = comb && tot && rw
                        ? te__expr_mutate(ctx, first->u.loop.body->u.store.value, comb_fn, &fc)
                        : NULL;
    r0_ctx rc = {R, tot};
    te_stmt *fin2 = fold ? te__stmt_mutate(ctx, (te_stmt *)fin, NULL, r0_to_v, &rc) : NULL;
    if (!fin2) {
        te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        return j + 1;
    }
    e->wf_pub = pub, e->wf_R = R, e->wf_comb = comb, e->wf_a = va, e->wf_b = vb;
    te__cem_gen_stmt(e, P);
    e->wf_pub = NULL;
    te__cem_line(e, "__syncthreads();");
    const char *rn = te__cem_buf_name(e, R), *tn = te__cem_var_name(e, tot),
               *wn = te__cem_var_name(e, w);
    te__cem_line(e, "%s %s = %s[0]; // the %lld warps' results, folded in every thread",
                 te__cem_value_ctype(e, dt), tn, rn, (long long)(E / 32));
    te__cem_line(e, "for (int %s = 1; %s < %lld; ++%s)", wn, wn, (long long)(E / 32), wn);
    e->indent++;
    te__cem_line(e, "%s = %s;", tn, te__cem_text(e, fold));
    e->indent--;
    if (again)
        te__cem_line(e, "__syncthreads(); // %s is written again before every thread has read it",
                     rn);
    te__cem_gen_stmt(e, fin2);
    return j + 1;
}

/* Whether the chain of lets that starts at s declares var. */
static bool chain_declares(const te_stmt *s, const te_expr *var)
{
    for (; s && s->kind == TE_S_LET; s = s->u.let.body)
        if (s->u.let.var == var)
            return true;
    return false;
}

void te__cem_gen_seq_item(cem *e, const te_stmt *seq, int i)
{
    const te_stmt *s = seq->u.seq.v[i];
    /* The copies of an unrolled body declare the same lets: a later copy gets a block */
    bool wrap = false;
    for (const te_stmt *l = s; l && l->kind == TE_S_LET && !wrap; l = l->u.let.body)
        for (int j = 0; j < i && !wrap; j++)
            wrap = chain_declares(seq->u.seq.v[j], l->u.let.var);
    if (wrap) {
        te__cem_line(e, "{");
        e->indent++;
    }
    te__cem_gen_stmt(e, s);
    if (wrap) {
        e->indent--;
        te__cem_line(e, "}");
    }
}

void te__cem_gen_stmt(cem *e, const te_stmt *s)
{
    if (!s || e->err)
        return;
    switch (s->kind) {
    case TE_S_BARRIER:
        if (e->cp_async)
            te__cem_line(e, "te_cp_async_wait();");
        te__cem_line(e, "__syncthreads();");
        return;
    case TE_S_COMMENT:
        te__emit_comment_line(e->o, e->indent, s->u.comment.text);
        return;
    case TE_S_INTRIN:
        te__cem_gen_intrin(e, s);
        return;
    case TE_S_FOR:
        gen_for(e, s);
        return;
    case TE_S_SEQ: {
        bool pushed = path_push(e, s, 0);
        for (int i = 0; i < s->u.seq.n;) {
            if (pushed)
                e->path_i[e->npath - 1] = i;
            int j = gen_warp_first(e, s, i); /* a whole reduction, warp first */
            if (j == i)
                j = gen_warp_steps(e, s, i); /* runs of tree steps as warp shuffles */
            if (j == i)
                j = te__cem_widen_run(e, s, i); /* scalar stores reading whole vectors */
            if (j > i) {
                i = j;
                continue;
            }
            te__cem_gen_seq_item(e, s, i);
            i++;
        }
        e->npath -= pushed;
        return;
    }
    case TE_S_IF: {
        bool pushed = path_push(e, s, -2);
        te__cem_line(e, "if (%s) {", te__cem_text(e, s->u.cond.cond));
        e->indent++;
        te__cem_gen_stmt(e, s->u.cond.then_s);
        e->indent--;
        if (s->u.cond.else_s) {
            te__cem_line(e, "} else {");
            e->indent++;
            te__cem_gen_stmt(e, s->u.cond.else_s);
            e->indent--;
        }
        te__cem_line(e, "}");
        e->npath -= pushed;
        return;
    }
    case TE_S_STORE:
        if (e->warp) { /* a warp-intrinsic kernel: 32 lanes per thread of the schedule */
            te__cem_line(e, "if (threadIdx.x == 0) {");
            e->indent++;
            gen_store(e, s);
            e->indent--;
            te__cem_line(e, "}");
            return;
        }
        gen_store(e, s);
        return;
    case TE_S_ALLOC: {
        const te_buf *b = s->u.alloc.buf;
        int64_t n = te__buf_numel(b);
        if (b->scope == TE_SCOPE_GLOBAL) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "buffer '%s' is allocated in global memory inside a kernel; "
                         "compute it inside a bound loop (local or shared) or at the root",
                         b->name);
            return;
        }
        /* A local buffer gets a block of its own: loop partitioning copies a loop body with its
         * allocations, and the copies must not declare one name twice in one scope. */
        bool local = b->scope != TE_SCOPE_SHARED;
        if (local) {
            te__cem_line(e, "{");
            e->indent++;
        }
        te__cem_line(e, "%s%s __align__(16) %s[%lld];",
                     b->scope == TE_SCOPE_SHARED ? "__shared__ " : "", te__cem_ctype(e, b->dtype),
                     te__cem_buf_name(e, b), (long long)n);
        te__cem_gen_stmt(e, s->u.alloc.body);
        if (local) {
            e->indent--;
            te__cem_line(e, "}");
        }
        return;
    }
    case TE_S_LET: {
        const te_expr *v = s->u.let.var;
        if (v->u.var.vkind == TE_VAR_PREFETCH) {
            /* te_prefetch: a CPU schedule's hint; the GPU kernel does without. */
            te__cem_gen_stmt(e, s->u.let.body);
            return;
        }
        if (s->u.let.value->lanes > 1) {
            te__cem_fail(e, TE_ERR_UNSUPPORTED, "vector let '%s'", v->u.var.name);
            return;
        }
        te__cem_line(e, "const %s %s = %s;", te__cem_value_ctype(e, s->u.let.value->dtype),
                     te__cem_var_name(e, v), te__cem_text(e, s->u.let.value));
        int saved_ranges = e->ranges.n;
        te__cem_check_push(e, te__emit_push_let_range(e->ctx, &e->ranges, v, s->u.let.value));
        te__cem_gen_stmt(e, s->u.let.body);
        te__emit_ranges_restore(&e->ranges, saved_ranges);
        return;
    }
    }
}
