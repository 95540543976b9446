/*
 * backends/c/emit_stmt.c: statements as C: loops with their OpenMP/unroll pragmas (and a simd
 * reduction clause for a loop that only folds into a promoted scalar), ifs, stores (streaming
 * stores where the index and buffer allow), allocations on the stack, on the heap (freed on
 * every exit) or, where the promote_registers pass marked them, as variables, and lets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/emit_impl.h"

/* LOCAL buffers above this many bytes go on the heap instead of the stack. */
#define STACK_MAX_BYTES 65536

/* ---- Statements --------------------------------------------------------------------------- */

void te__c_line_start(emitter *em) { te__emit_indent(&em->out, em->indent); }

void te__c_line(emitter *em, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vline(&em->out, em->indent, fmt, ap);
    va_end(ap);
}

void te__c_block_open(emitter *em)
{
    if (em->nblocks < (int)(sizeof em->block_start / sizeof em->block_start[0]))
        em->block_start[em->nblocks] = em->ndecl;
    em->nblocks++;
    em->indent++;
}

void te__c_block_close(emitter *em)
{
    em->nblocks--;
    if (em->nblocks < (int)(sizeof em->block_start / sizeof em->block_start[0]))
        em->ndecl = em->block_start[em->nblocks];
    em->indent--;
}

static bool declared_here(const emitter *em, int id)
{
    int from = em->nblocks > 0 ? em->block_start[em->nblocks - 1] : 0;
    for (int i = from; i < em->ndecl; i++)
        if (em->decl[i] == id)
            return true;
    return false;
}

static void declare(emitter *em, int id)
{
    if (em->ndecl < (int)(sizeof em->decl / sizeof em->decl[0]))
        em->decl[em->ndecl++] = id;
}

typedef struct reads_buf {
    const te_buf *buf;
    bool *found;
} reads_buf;

static bool reads_buf_visit(const te_expr *e, void *user)
{
    reads_buf *r = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == r->buf)
        *r->found = true;
    return !*r->found;
}

/* A reduction loop: the innermost loop body is one update `acc = acc op e` of a scalar
 * accumulator promoted to a variable, op one of + * min max, e not reading acc. Returns the
 * OpenMP reduction operator and stores the variable's name, else NULL. `#pragma omp simd
 * reduction(...)` then lets the compiler vectorize it (reassociating, as every vectorized
 * reduction does); without it gcc keeps a float reduction serial. */
static const char *reduction_of(emitter *em, const te_stmt *s, char *var, size_t n)
{
    const te_stmt *b = s->u.loop.body;
    if (b->kind != TE_S_STORE || b->u.store.value->lanes != 1)
        return NULL;
    const te_buf *buf = b->u.store.buf;
    const promo *p = te__c_find_promo(em, buf);
    int64_t at, c2;
    if (!p || !te__const_flat_index(buf, b->u.store.n, b->u.store.idx, &at) ||
        p->pr->kind[at] != TE_PROMO_SCALAR)
        return NULL;
    const te_expr *v = b->u.store.value;
    if (v->kind != TE_E_BINARY)
        return NULL;
    const char *op;
    switch (v->u.bin.op) {
    case TE_ADD:
        op = "+";
        break;
    case TE_MUL:
        op = "*";
        break;
    case TE_MIN:
        op = "min";
        break;
    case TE_MAX:
        op = "max";
        break;
    default:
        return NULL;
    }
    const te_expr *a = v->u.bin.a, *e = v->u.bin.b;
    bool a_acc = a->kind == TE_E_LOAD && a->u.load.buf == buf &&
                 te__const_flat_index(buf, a->u.load.n, a->u.load.idx, &c2) && c2 == at;
    if (!a_acc) {
        const te_expr *t = a;
        a = e;
        e = t;
        a_acc = a->kind == TE_E_LOAD && a->u.load.buf == buf &&
                te__const_flat_index(buf, a->u.load.n, a->u.load.idx, &c2) && c2 == at;
    }
    if (!a_acc)
        return NULL;
    bool reads_acc = false;
    te__expr_visit(e, reads_buf_visit, &(reads_buf){buf, &reads_acc});
    if (reads_acc)
        return NULL;
    snprintf(var, n, "%s%lld", p->sname, (long long)at);
    return op;
}

/* Fails the emission when a range push ran out of memory. */
static void push_range(emitter *em, int rc)
{
    if (rc != TE_OK)
        te__c_fail(em, rc, "out of memory");
}

static bool nt_store_visit(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_STORE && s->u.store.nontemporal && s->u.store.buf->arg_index >= 0)
        *(bool *)user = true;
    return true;
}

/* Whether s holds a streaming store into an argument buffer (one gen_store may emit as one). */
static bool has_nt_store(const te_stmt *s)
{
    bool found = false;
    te__stmt_visit(s, nt_store_visit, NULL, &found);
    return found;
}

static void gen_for(emitter *em, const te_stmt *s)
{
    const te_expr *var = s->u.loop.var;
    const char *v = te__c_var_name(em, var);
    const char *vt = te__c_ctype(var->dtype);
    int64_t mn, ex;
    bool kmin = te__arith_const_int(s->u.loop.min, &mn),
         kext = te__arith_const_int(s->u.loop.extent, &ex);
    const char *lo = te__c_expr_text(em, s->u.loop.min, 0);
    const char *hi;
    if (kmin && kext)
        hi = te__sprintf(em->ctx, "%lld", (long long)(mn + ex));
    else if (kmin && mn == 0)
        hi = te__c_expr_text(em, s->u.loop.extent, P_REL + 1);
    else
        hi = te__sprintf(em->ctx, "%s + %s", te__c_expr_text(em, s->u.loop.min, P_ADD),
                         te__c_expr_text(em, s->u.loop.extent, P_ADD + 1));
    /* A parallel loop with streaming stores runs as a parallel region whose threads each fence
     * their stores once, after their iterations (an sfence per iteration waits for the write
     * combining buffers every row: 5-10% of softmax 4096 x 4096 on a Xeon). */
    bool fenced = s->u.loop.fkind == TE_FOR_PARALLEL && has_nt_store(s->u.loop.body);
    switch (s->u.loop.fkind) {
    case TE_FOR_PARALLEL:
        if (fenced) {
            te__c_line(em, "TE_OMP(parallel)");
            te__c_line(em, "{");
            te__c_block_open(em);
            te__c_line(em, "TE_OMP(for schedule(static) nowait)");
        } else {
            te__c_line(em, "TE_OMP(parallel for schedule(static))");
        }
        em->uses_omp = true;
        em->par_depth++;
        break;
    case TE_FOR_UNROLLED:
        te__c_line(em, "TE_UNROLL(%lld)", kext && ex <= 1024 ? (long long)ex : 8LL);
        em->uses_unroll = true;
        break;
    case TE_FOR_VECTORIZED:
        te__c_line(em, "TE_OMP(simd)");
        em->uses_omp = true;
        break;
    case TE_FOR_THREAD:
        te__c_line(em, "// GPU thread loop (tag %d), run serially on the CPU",
                   s->u.loop.thread_tag);
        break;
    case TE_FOR_SERIAL:
    case TE_FOR_VTHREAD: /* inject_vthread leaves none; serial is its meaning */
        break;
    }
    char acc[200];
    const char *rop =
        s->u.loop.fkind == TE_FOR_SERIAL ? reduction_of(em, s, acc, sizeof acc) : NULL;
    if (rop) {
        te__c_line(em, "TE_OMP(simd reduction(%s : %s))", rop, acc);
        em->uses_omp = true;
    }
    te__c_line(em, "for (%s %s = %s; %s < %s; ++%s) {", vt, v, lo, v, hi, v);
    int saved_ranges = em->ranges.n;
    push_range(
        em, te__emit_push_loop_range(em->ctx, &em->ranges, var, s->u.loop.min, s->u.loop.extent));
    te__c_block_open(em);
    te__c_gen_stmt(em, s->u.loop.body);
    te__c_block_close(em);
    te__c_line(em, "}");
    te__emit_ranges_restore(&em->ranges, saved_ranges);
    if (fenced) {
        te__c_use_helper(em, H_SFENCE, TE_F32, 1);
        te__c_line(em, "%s(); /* this thread's streaming stores */",
                   te__c_helper_name(em, H_SFENCE, TE_F32, 1));
        te__c_block_close(em);
        te__c_line(em, "}");
    }
    if (s->u.loop.fkind == TE_FOR_PARALLEL)
        em->par_depth--;
}

static void gen_if(emitter *em, const te_stmt *s, bool else_if)
{
    const char *c = te__c_expr_text(em, s->u.cond.cond, 0);
    if (else_if) {
        /* continue the line "} else " */
        te__sb_printf(&em->out, "if (%s) {\n", c);
    } else {
        te__c_line(em, "if (%s) {", c);
    }
    te__c_block_open(em);
    te__c_gen_stmt(em, s->u.cond.then_s);
    te__c_block_close(em);
    const te_stmt *e = s->u.cond.else_s;
    if (!e) {
        te__c_line(em, "}");
        return;
    }
    if (e->kind == TE_S_IF) {
        te__c_line_start(em);
        te__sb_puts(&em->out, "} else ");
        gen_if(em, e, true);
        return;
    }
    te__c_line(em, "} else {");
    te__c_block_open(em);
    te__c_gen_stmt(em, e);
    te__c_block_close(em);
    te__c_line(em, "}");
}

static const te_buf *nt_flag_buf(emitter *em, const te_buf *b, const char **flag)
{
    for (int i = 0; i < em->n_nt; i++)
        if (em->nt_bufs[i] == b) {
            *flag = em->nt_flag[i];
            return b;
        }
    if (em->n_nt == (int)(sizeof em->nt_bufs / sizeof em->nt_bufs[0]))
        return NULL;
    em->nt_bufs[em->n_nt] = b;
    em->nt_flag[em->n_nt] =
        te__c_unique_name(em, te__sprintf(em->ctx, "%s_nt", te__c_buf_name(em, b)), b->id);
    *flag = em->nt_flag[em->n_nt++];
    return b;
}

static void gen_store(emitter *em, const te_stmt *s)
{
    const te_buf *b = s->u.store.buf;
    const char *bn = te__c_buf_name(em, b);
    const promo *p = te__c_find_promo(em, b);
    const te_expr *val = s->u.store.value;
    te_expr *ix = s->u.store.idx[0];
    int lanes = val->lanes > ix->lanes ? val->lanes : ix->lanes;
    te__sb v = {0};
    if (lanes > 1)
        te__c_put_vec(em, &v, val, lanes);
    else
        te__c_put(em, &v, val, 0);
    const char *vz = v.p ? v.p : "";
    int64_t c;
    if (lanes == 1) {
        te__c_line_start(em);
        if (p && te__const_flat_index(b, s->u.store.n, s->u.store.idx, &c)) {
            te__c_put_promo_scalar(&em->out, p, c);
        } else {
            te__sb_printf(&em->out, "%s[", bn);
            te__c_put_index(em, &em->out, b, s->u.store.n, s->u.store.idx);
            te__sb_puts(&em->out, "]");
        }
        if (te_dtype_is_half(b->dtype) && !p) /* rounds to nearest even */
            te__sb_printf(&em->out, " = %s(%s);\n", te__c_half_conv(em, b->dtype, 1), vz);
        else
            te__sb_printf(&em->out, " = %s;\n", vz);
    } else if (s->u.store.n != 1) {
        te__c_fail(em, TE_ERR_INTERNAL, "vector store to '%s' with an index that is not flat",
                   b->name);
    } else if (ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1) {
        const char *base = te__c_expr_text(em, ix->u.ramp.base, 0);
        int bytes = lanes * (int)te_dtype_size(b->dtype);
        const char *flag = NULL;
        if (p && te__arith_const_int(ix->u.ramp.base, &c)) {
            te__c_line(em, "%s%lld = %s;", p->vname, (long long)(c / lanes), vz);
        } else if (s->u.store.nontemporal && b->arg_index >= 0 &&
                   (bytes == 16 || bytes == 32 || bytes == 64) &&
                   te__arith_multiple_of(ix->u.ramp.base, lanes) && nt_flag_buf(em, b, &flag)) {
            em->nt_stores++;
            te__c_line(em, "%s(%s, &%s[%s], %s);", te__c_helper_name(em, H_STREAM, b->dtype, lanes),
                       flag, bn, base, vz);
        } else {
            te__c_line(em, "%s(&%s[%s], %s);", te__c_helper_name(em, H_STORE, b->dtype, lanes), bn,
                       base, vz);
        }
    } else if (ix->kind == TE_E_RAMP) {
        te__c_line(em, "%s(&%s[%s], %lld, %s);", te__c_helper_name(em, H_SCATTER, b->dtype, lanes),
                   bn, te__c_expr_text(em, ix->u.ramp.base, 0), (long long)ix->u.ramp.stride, vz);
    } else {
        te__sb t = {0};
        te__c_put_vec(em, &t, ix, lanes);
        te__c_line(em, "%s(%s, %s, %s);", te__c_helper_name(em, H_SCATTER_IDX, b->dtype, lanes), bn,
                   t.p ? t.p : "", vz);
        free(t.p);
    }
    if (v.oom)
        te__c_fail(em, TE_ERR_NOMEM, "out of memory");
    free(v.p);
}

/* A buffer too large for the stack. Outside parallel regions it is a scratch site of the file
 * (te_scratch_take / te_scratch_keep: the block is kept for the next call instead of going back
 * to the OS); inside one, each iteration mallocs and frees its own. */
static void gen_heap_alloc(emitter *em, const te_stmt *s, const char *bn, int64_t bytes)
{
    const te_buf *b = s->u.alloc.buf;
    int64_t rounded = (bytes + 63) / 64 * 64;
    em->uses_heap = true;
    if (em->par_depth > 0) {
        /* no return out of a parallel region: flag the failure, skip the work */
        te__c_line(em, "%s *%s = te_alloc64(%lld);", te__c_ctype(b->dtype), bn, (long long)rounded);
        em->uses_oom = true;
        te__c_line(em, "if (!%s) {", bn);
        em->indent++;
        te__c_line(em, "__atomic_store_n(&te_oom, 1, __ATOMIC_RELAXED);");
        em->indent--;
        te__c_line(em, "} else {");
        te__c_block_open(em);
        te__c_gen_stmt(em, s->u.alloc.body);
        te__c_line(em, "te_free64(%s);", bn);
        te__c_block_close(em);
        te__c_line(em, "}");
        return;
    }
    int site = em->nscratch++;
    te__c_line(em, "%s *%s = te_scratch_take(%d, %lld);", te__c_ctype(b->dtype), bn, site,
               (long long)rounded);
    if (em->nheap == 0) {
        te__c_line(em, "if (!%s)", bn);
        em->indent++;
        te__c_line(em, "return -1;");
        em->indent--;
    } else {
        te__c_line(em, "if (!%s) {", bn);
        em->indent++;
        for (int i = em->nheap - 1; i >= 0; i--)
            te__c_line(em, "te_scratch_keep(%d, %s);", em->heap_site[i], em->heap[i]);
        te__c_line(em, "return -1;");
        em->indent--;
        te__c_line(em, "}");
    }
    bool pushed = em->nheap < (int)(sizeof em->heap / sizeof em->heap[0]);
    if (pushed) {
        em->heap_site[em->nheap] = site;
        em->heap[em->nheap++] = bn;
    }
    te__c_gen_stmt(em, s->u.alloc.body);
    if (pushed)
        em->nheap--;
    te__c_line(em, "te_scratch_keep(%d, %s);", site, bn);
}

static void gen_alloc(emitter *em, const te_stmt *s)
{
    const te_buf *b = s->u.alloc.buf;
    const char *bn = te__c_buf_name(em, b);
    int64_t n = te__buf_numel(b);
    int64_t bytes = n * (int64_t)te_dtype_size(b->dtype);
    bool wrap = declared_here(em, b->id); /* the same buffer twice in one block */
    if (wrap) {
        te__c_line(em, "{");
        te__c_block_open(em);
    }
    declare(em, b->id);
    const te__promotion *pm = s->u.alloc.promote;
    if (pm && te_dtype_is_half(b->dtype))
        pm = NULL; /* f16/bf16 scratch stays in memory, so that every store rounds */
    if (pm) {
        promo pr = {b, pm, NULL, NULL};
        /* The same buffer allocated again (loop partition copies) reuses its names: the
         * earlier declarations are in another C block. */
        pr.vname = te__c_lookup_name(em, 2, b->id, b, te__sprintf(em->ctx, "%s_v", bn));
        pr.sname = te__c_lookup_name(em, 3, b->id, b, te__sprintf(em->ctx, "%s_s", bn));
        te__c_line(em, "// %s: %lld x %s, promoted to registers", b->name, (long long)n,
                   te_dtype_str(b->dtype));
        /* Declarations, wrapped before 100 columns: the vector chunks, then the scalars. */
        for (int kind = TE_PROMO_LANE; kind >= TE_PROMO_SCALAR; kind--) {
            bool vec = kind == TE_PROMO_LANE;
            int64_t step = vec ? (pm->lanes ? pm->lanes : n) : 1;
            const char *type = vec ? (pm->lanes ? te__c_vtype(em, b->dtype, pm->lanes) : "")
                                   : te__c_ctype(b->dtype);
            const char *stem = vec ? pr.vname : pr.sname;
            size_t start = 0;
            bool open = false;
            for (int64_t i = 0; (!vec || pm->lanes) && i < n; i += step) {
                if (pm->kind[i] != kind)
                    continue;
                char name[160];
                snprintf(name, sizeof name, "%s%lld", stem, (long long)(vec ? i / step : i));
                if (open && em->out.n - start + strlen(name) + 3 > 96) {
                    te__sb_puts(&em->out, ";\n");
                    open = false;
                }
                if (!open) {
                    te__c_line_start(em);
                    start = em->out.n - (size_t)(em->indent * 4);
                    te__sb_printf(&em->out, "%s %s", type, name);
                    open = true;
                } else {
                    te__sb_printf(&em->out, ", %s", name);
                }
            }
            if (open)
                te__sb_puts(&em->out, ";\n");
        }
        if (em->npromos == em->cappromos) {
            int cap = em->cappromos ? em->cappromos * 2 : 8;
            promo *v = te__alloc(em->ctx, sizeof *v * (size_t)cap);
            if (!v) {
                te__c_fail(em, TE_ERR_NOMEM, "out of memory");
                return;
            }
            if (em->npromos)
                memcpy(v, em->promos, sizeof *v * (size_t)em->npromos);
            em->promos = v;
            em->cappromos = cap;
        }
        em->promos[em->npromos++] = pr;
        te__c_gen_stmt(em, s->u.alloc.body);
        em->npromos--;
    } else if (b->scope != TE_SCOPE_GLOBAL && bytes <= STACK_MAX_BYTES) {
        te__c_line(em, "%s %s[%lld] __attribute__((aligned(64)));", te__c_ctype(b->dtype), bn,
                   (long long)n);
        te__c_gen_stmt(em, s->u.alloc.body);
    } else {
        gen_heap_alloc(em, s, bn, bytes);
    }
    if (wrap) {
        te__c_block_close(em);
        te__c_line(em, "}");
    }
}

static void gen_let(emitter *em, const te_stmt *s)
{
    const te_expr *var = s->u.let.var, *val = s->u.let.value;
    if (var->u.var.vkind == TE_VAR_PREFETCH) {
        /* te_prefetch: the address of a scalar load, for reading, into cache level 1, 2 or 3
         * (the variable's extent): locality 3, 2 or 1. */
        int64_t lv = var->u.var.extent >= 1 && var->u.var.extent <= 3 ? var->u.var.extent : 1;
        if (val->kind == TE_E_LOAD && val->lanes == 1)
            te__c_line(em, "__builtin_prefetch(&%s, 0, %d);", te__c_expr_text(em, val, 0),
                       (int)(4 - lv));
        te__c_gen_stmt(em, s->u.let.body);
        return;
    }
    bool wrap = declared_here(em, var->u.var.id);
    if (wrap) {
        te__c_line(em, "{");
        te__c_block_open(em);
    }
    declare(em, var->u.var.id);
    const char *t = te__c_type_of(em, val->dtype, val->lanes);
    te__c_line(em, "const %s %s = %s;", t, te__c_var_name(em, var), te__c_expr_text(em, val, 0));
    int saved_ranges = em->ranges.n;
    push_range(em, te__emit_push_let_range(em->ctx, &em->ranges, var, val));
    te__c_gen_stmt(em, s->u.let.body);
    te__emit_ranges_restore(&em->ranges, saved_ranges);
    if (wrap) {
        te__c_block_close(em);
        te__c_line(em, "}");
    }
}

void te__c_gen_stmt(emitter *em, const te_stmt *s)
{
    if (!s || em->err)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        gen_for(em, s);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            te__c_gen_stmt(em, s->u.seq.v[i]);
        break;
    case TE_S_IF:
        gen_if(em, s, false);
        break;
    case TE_S_STORE:
        gen_store(em, s);
        break;
    case TE_S_ALLOC:
        gen_alloc(em, s);
        break;
    case TE_S_LET:
        gen_let(em, s);
        break;
    case TE_S_COMMENT:
        te__emit_comment_line(&em->out, em->indent, s->u.comment.text);
        break;
    case TE_S_INTRIN:
        te__c_gen_intrin(em, s);
        break;
    case TE_S_BARRIER:
        te__c_fail(em, TE_ERR_UNSUPPORTED,
                   "a barrier (GPU schedule) reached the C backend; thread loops must be split at "
                   "barriers first");
        break;
    }
}
