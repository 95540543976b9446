/*
 * backends/cuda/emit_cuda_vec.c: wide memory accesses (float4 / float2, int4 / int2) for code
 * that is not a plain copy.
 *
 * A load of four (two) consecutive 4-byte elements from global or shared memory whose first
 * index is provably a multiple of four (two) is one 16-byte (8-byte) transaction instead of
 * four: one instruction, and for a warp whose threads read adjacent vectors, fully used
 * sectors. The emitter finds such groups in two places:
 *
 *   - a vector store (a vectorized loop kept by the CUDA vector filter) whose value reads
 *     contiguous, aligned vectors: each is loaded once as a float4 temporary and the lanes
 *     read its components; when the store itself is contiguous and aligned in global or
 *     shared memory, the lanes are computed into a float4 temporary stored at once;
 *   - a run of straight-line scalar statements (lets and stores: the copies of an unrolled
 *     loop, e.g. a thread's partial reduction over the vector lanes of its elements, a tuple
 *     reduction's update included) that reads all the lanes of such a vector between them:
 *     the vector is loaded once before the run.
 *
 * A buffer that the run (or the store) writes is never read ahead, nor a load under a lazy
 * conditional (te_if_then_else); local arrays are left alone (a reinterpreted local array would
 * move to local memory). Alignment: a buffer's first element is 16-byte aligned (device allocations
 * are 256-byte aligned; shared arrays are declared __align__(16)), so a multiple-of-four index is
 * 16-byte aligned; the host harness (tests/cuda_shim) checks every wide access under
 * -fsanitize=alignment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/emit_cuda_impl.h"
#include "te/arith.h"

/* The vector type of `lanes` elements of dtype d, or NULL when d has no 4-byte vector type. */
static const char *vec_type(te_dtype d, int lanes)
{
    if (lanes != 2 && lanes != 4)
        return NULL;
    if (d == TE_F32)
        return lanes == 4 ? "float4" : "float2";
    if (d == TE_I32)
        return lanes == 4 ? "int4" : "int2";
    return NULL;
}

static bool wide_scope(const te_buf *b)
{
    return b->scope == TE_SCOPE_GLOBAL || b->scope == TE_SCOPE_SHARED;
}

/* The constant d with idx = base + d, when there is one. */
static bool offset_of(cem *e, const te_expr *idx, te_expr *base, int64_t *d)
{
    te_expr *diff = te_sub(e->ctx, (te_expr *)idx, base);
    te_expr *s = diff ? te__simplify_expr(e->ctx, diff, &e->ranges) : NULL;
    return s && te__arith_const_int(s, d);
}

const char *te__cem_vload_lane(cem *e, const te_expr *load)
{
    static const char comp[4] = {'x', 'y', 'z', 'w'};
    if (!e->nvld || load->kind != TE_E_LOAD || load->lanes != 1 || load->u.load.n != 1)
        return NULL;
    for (int q = 0; q < e->nvld; q++) {
        int64_t d;
        if (e->vld[q].buf != load->u.load.buf ||
            !offset_of(e, load->u.load.idx[0], e->vld[q].base, &d) || d < 0 || d >= e->vld[q].lanes)
            continue;
        char t[200];
        snprintf(t, sizeof t, "%s.%c", e->vld[q].name, comp[d]);
        return te__strdup(e->ctx, t);
    }
    return NULL;
}

/* Emits the wide load of `lanes` elements of b from base and records it; false when full. */
static bool add_vload(cem *e, const te_buf *b, te_expr *base, int lanes)
{
    if (e->nvld >= (int)(sizeof e->vld / sizeof e->vld[0]))
        return false;
    const char *vt = vec_type(b->dtype, lanes);
    char nm[160];
    snprintf(nm, sizeof nm, "%s_v%d", b->name, lanes);
    te_expr *tmp = te_var(e->ctx, nm, b->dtype); /* a name made unique by the name table */
    if (!vt || !tmp)
        return false;
    const char *name = te__cem_var_name(e, tmp);
    te__cem_line(e, "const %s %s = *(const %s *)&%s[%s];", vt, name, vt, te__cem_buf_name(e, b),
                 te__cem_text(e, base));
    e->vld[e->nvld].buf = b;
    e->vld[e->nvld].base = base;
    e->vld[e->nvld].lanes = lanes;
    e->vld[e->nvld++].name = name;
    return true;
}

/* Loads under a lazy conditional (te_if_then_else, whose untaken branch may index outside its
 * buffer) are never read ahead: only its condition is visited. A select's operands and both
 * sides of && and || are valid loads by the IR's rule (both are evaluated), so they count even
 * though C++ evaluates them lazily. True when the visitor should descend into x's children
 * itself. */
static bool always_evaluated(const te_expr *x, te__expr_visitor fn, void *user)
{
    if (x->kind == TE_E_IF) {
        te__expr_visit(x->u.sel.c, fn, user);
        return false;
    }
    return true;
}

/* ---- Vector stores -------------------------------------------------------------------------- */

typedef struct {
    cem *e;
    const te_buf *dst; /* written by the store: never read ahead */
    int lanes;
    const te_expr *cand[16]; /* the contiguous, aligned vector loads, each once */
    int n;
} vs_walk;

static bool vs_load_fn(const te_expr *x, void *user)
{
    vs_walk *w = user;
    if (!always_evaluated(x, vs_load_fn, user))
        return false;
    if (x->kind != TE_E_LOAD || x->lanes != w->lanes || x->u.load.n != 1)
        return true;
    const te_buf *b = x->u.load.buf;
    const te_expr *ix = x->u.load.idx[0];
    if (b == w->dst || !wide_scope(b) || !vec_type(b->dtype, w->lanes) || ix->kind != TE_E_RAMP ||
        ix->u.ramp.stride != 1 || !te__arith_multiple_of(ix->u.ramp.base, w->lanes))
        return true;
    for (int q = 0; q < w->n; q++) {
        int64_t d;
        if (w->cand[q]->u.load.buf == b &&
            offset_of(w->e, ix->u.ramp.base, w->cand[q]->u.load.idx[0]->u.ramp.base, &d) && d == 0)
            return true; /* the same vector again */
    }
    if (w->n < 16)
        w->cand[w->n++] = x;
    return true;
}

bool te__cem_gen_vector_store(cem *e, const te_stmt *s)
{
    const te_buf *b = s->u.store.buf;
    te_expr *ix = s->u.store.idx[0], *val = s->u.store.value;
    int lanes = val->lanes > ix->lanes ? val->lanes : ix->lanes;
    /* cp.async fills and f16/bf16 conversions stay with the caller's lane-by-lane path */
    if (b->prefetched || te_dtype_conv_fn(b->dtype, 1, 1) || e->nvld)
        return false;
    const char *vt = vec_type(b->dtype, lanes);
    bool wide_store = vt && wide_scope(b) && val->dtype == b->dtype && ix->kind == TE_E_RAMP &&
                      ix->u.ramp.stride == 1 && te__arith_multiple_of(ix->u.ramp.base, lanes);
    vs_walk w = {e, b, lanes, {0}, 0};
    te__expr_visit(val, vs_load_fn, &w);
    if (!wide_store && !w.n)
        return false; /* nothing to widen */
    te__cem_line(e, "{");
    e->indent++;
    for (int q = 0; q < w.n; q++)
        if (!add_vload(e, w.cand[q]->u.load.buf, w.cand[q]->u.load.idx[0]->u.ramp.base, lanes))
            break;    /* the rest lane by lane */
    if (wide_store) { /* the lanes into a vector, stored at once */
        te_expr *tmp = te_var(e->ctx, b->name, b->dtype);
        const char *name = tmp ? te__cem_var_name(e, tmp) : "?";
        static const char comp[4] = {'x', 'y', 'z', 'w'};
        te__cem_line(e, "%s %s;", vt, name);
        for (int l = 0; l < lanes; l++)
            te__cem_line(e, "%s.%c = %s;", name, comp[l], te__cem_text(e, te__cem_lane(e, val, l)));
        te__cem_line(e, "*(%s *)&%s[%s] = %s;", vt, te__cem_buf_name(e, b),
                     te__cem_text(e, ix->u.ramp.base), name);
    } else {
        for (int l = 0; l < lanes; l++)
            te__cem_line(e, "%s[%s] = %s;", te__cem_buf_name(e, b),
                         te__cem_text(e, te__cem_lane(e, ix, l)),
                         te__cem_text(e, te__cem_lane(e, val, l)));
    }
    e->nvld = 0;
    e->indent--;
    te__cem_line(e, "}");
    return true;
}

/* ---- Runs of straight-line statements ---------------------------------------------------------
 */

typedef struct {
    cem *e;
    const te_expr *loads[64];
    int nloads;
    const te_buf *written[32];
    int nwritten;
    bool ok; /* straight-line scalar code only */
} run_walk;

static bool run_load_fn(const te_expr *x, void *user)
{
    run_walk *w = user;
    if (!always_evaluated(x, run_load_fn, user))
        return false;
    if (x->kind == TE_E_LOAD && x->lanes == 1 && x->u.load.n == 1 && wide_scope(x->u.load.buf) &&
        vec_type(x->u.load.buf->dtype, 4) && w->nloads < 64)
        w->loads[w->nloads++] = x;
    return true;
}

static bool run_stmt_fn(const te_stmt *s, void *user)
{
    run_walk *w = user;
    switch (s->kind) {
    case TE_S_SEQ:
        return w->ok;
    case TE_S_LET:
        w->ok &= s->u.let.value->lanes == 1 && s->u.let.var->u.var.vkind != TE_VAR_PREFETCH;
        return w->ok;
    case TE_S_STORE:
        w->ok &= s != w->e->wf_pub && s->u.store.n == 1 && s->u.store.value->lanes == 1 &&
                 s->u.store.idx[0]->lanes == 1 && w->nwritten < 32;
        if (w->ok)
            w->written[w->nwritten++] = s->u.store.buf;
        return w->ok;
    default: /* loops, conditions, barriers, allocations, intrinsics end the run */
        w->ok = false;
        return false;
    }
}

static bool run_writes(const run_walk *w, const te_buf *b)
{
    for (int q = 0; q < w->nwritten; q++)
        if (w->written[q] == b)
            return true;
    return false;
}

/* Whether the run reads b at base + d for every d in [0, lanes). */
static bool run_has_lanes(cem *e, const run_walk *w, const te_buf *b, te_expr *base, int lanes)
{
    for (int d = 1; d < lanes; d++) {
        bool found = false;
        for (int q = 0; q < w->nloads && !found; q++) {
            int64_t off;
            found = w->loads[q]->u.load.buf == b &&
                    offset_of(e, w->loads[q]->u.load.idx[0], base, &off) && off == d;
        }
        if (!found)
            return false;
    }
    return true;
}

int te__cem_widen_run(cem *e, const te_stmt *seq, int i)
{
    if (e->warp || e->nvld)
        return i;
    int n = seq->u.seq.n, j = i;
    run_walk w = {e, {0}, 0, {0}, 0, true};
    for (; j < n; j++) { /* the run: straight-line scalar statements */
        run_walk t = w;
        te__stmt_visit(seq->u.seq.v[j], run_stmt_fn, run_load_fn, &t);
        if (!t.ok)
            break;
        w = t;
    }
    if (j - i < 2)
        return i;
    for (int q = 0; q < w.nloads; q++) {
        const te_expr *x = w.loads[q];
        const te_buf *b = x->u.load.buf;
        te_expr *ix = x->u.load.idx[0];
        if (run_writes(&w, b) || te__cem_vload_lane(e, x))
            continue;
        for (int lanes = 4; lanes >= 2; lanes /= 2)
            if (te__arith_multiple_of(ix, lanes) && run_has_lanes(e, &w, b, ix, lanes)) {
                add_vload(e, b, ix, lanes);
                break;
            }
    }
    if (!e->nvld)
        return i;
    for (int q = i; q < j; q++)
        te__cem_gen_seq_item(e, seq, q);
    e->nvld = 0;
    return j;
}
