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

static void gen_store(cem *e, const te_stmt *s)
{
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
        te__cem_line(e, "*(%s *)&%s[%s] = *(const %s *)&%s[%s];", vt, te__cem_buf_name(e, b),
                     te__cem_text(e, ix->u.ramp.base), vt, te__cem_buf_name(e, val->u.load.buf),
                     te__cem_text(e, val->u.load.idx[0]->u.ramp.base));
        return;
    }
    for (int l = 0; l < lanes; l++) {
        te_expr *il = te__cem_lane(e, ix, l), *vl = te__cem_lane(e, val, l);
        if (!il || !vl) {
            te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
            return;
        }
        te__cem_line(e, "%s[%s] = %s%s%s%s;", te__cem_buf_name(e, b), te__cem_text(e, il),
                     cv ? cv : "", cv ? "(" : "", te__cem_text(e, vl), cv ? ")" : "");
    }
}

const char *const te__cem_dim_name[3] = {"x", "y", "z"};

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
    te__cem_gen_stmt(e, s->u.loop.body);
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

void te__cem_gen_stmt(cem *e, const te_stmt *s)
{
    if (!s || e->err)
        return;
    switch (s->kind) {
    case TE_S_BARRIER:
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
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n;) {
            int j = gen_warp_steps(e, s, i); /* runs of tree steps as warp shuffles */
            if (j > i) {
                i = j;
                continue;
            }
            te__cem_gen_stmt(e, s->u.seq.v[i]);
            i++;
        }
        return;
    case TE_S_IF:
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
        return;
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
