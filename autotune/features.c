/*
 * Features of a lowered loop program for the cost model: TE_NUM_FEATURES floats, the same
 * meaning at every index for a build. Counts are weighted by the number of times a statement
 * runs (the product of the constant extents of its enclosing loops; a loop whose extent is not
 * a constant counts once), vector operations count their lanes, and large quantities are given
 * as log2(1 + x) so that a model sees ratios.
 *
 * Index  meaning
 *   0    log2(1 + float add/sub lane-ops)
 *   1    log2(1 + float mul lane-ops)
 *   2    log2(1 + float div lane-ops)
 *   3    log2(1 + float min/max/compare lane-ops)
 *   4    log2(1 + math intrinsic calls (exp, erf, sqrt, ...), lanes counted)
 *   5    log2(1 + integer arithmetic ops (index math))
 *   6    log2(1 + select / if_then_else evaluations)
 *   7    log2(1 + total float lane-ops: 0..4 summed, intrinsics counted as 1)
 *   8    log2(1 + bytes loaded)
 *   9    log2(1 + bytes stored)
 *  10    log2(1 + arithmetic intensity: float ops / (bytes loaded + stored))
 *  11    number of distinct buffers loaded
 *  12    log2(1 + bytes of the kernel's arguments (inputs and outputs))
 *  13    log2(1 + reuse: bytes loaded / bytes of the argument buffers loaded)
 *  14    widest vector (lanes) of any store
 *  15    fraction of stored bytes written by vector stores
 *  16    fraction of loaded bytes read by vector loads
 *  17    log2(1 + extent of the outermost parallel loop)
 *  18    number of parallel loops
 *  19    log2(1 + iterations inside one parallel iteration, of the hottest store)
 *  20    number of unrolled loops
 *  21    log2(1 + unrolled steps: sum over unrolled loops of their extents)
 *  22    maximum loop depth
 *  23    number of loops
 *  24    log2(1 + extent of the innermost loop around the hottest store)
 *  25    kind of that loop (0 serial, 1 parallel, 2 vectorized, 3 unrolled, 4 thread)
 *  26    log2(1 + extent of the second innermost loop around it)
 *  27    kind of that loop
 *  28    log2(1 + extent of the third innermost loop around it)
 *  29    log2(1 + extent of the outermost loop around it)
 *  30    number of store statements
 *  31    number of allocations
 *  32    log2(1 + bytes of local (stack/register) allocations, all together)
 *  33    log2(1 + bytes of the largest local allocation)
 *  34    log2(1 + bytes of global (heap) allocations)
 *  35    number of if statements (tail guards)
 *  36    fraction of stores (weighted) under an if
 *  37    fraction of stores (weighted) that are non-temporal
 *  38    fraction of loaded bytes read contiguously (scalar or stride-1 ramp)
 *  39    fraction of loaded bytes read by gathers (vector loads of non-ramp indices)
 *  40    fraction of loaded bytes read as broadcasts
 *  41    fraction of stored bytes going to local buffers (accumulators)
 *  42    fraction of loaded bytes coming from local buffers
 *  43    log2(1 + runs of the hottest store)
 *  44    log2(1 + float lane-ops per store run of the hottest store)
 *  45    log2(1 + number of distinct loads in the hottest store's value)
 *  46    log2(1 + bytes of the largest argument buffer)
 *  47    number of kernel outputs
 *  48    log2(1 + float lane-ops inside parallel loops)
 *  49    fraction of float lane-ops inside parallel loops
 *  50    fraction of float lane-ops that are vector lane-ops
 *  51    log2(1 + loop iterations executed (all loops, trip counts summed))
 *  52    log2(1 + iterations of loops whose extent is not a constant)
 *  53    log2(1 + bytes loaded from buffers whose allocation fits L1 (32 KiB))
 *  54    log2(1 + bytes loaded from buffers that fit L2 (1 MiB) but not L1)
 *  55    log2(1 + bytes loaded from buffers larger than L2)
 *  56    number of let statements
 *  57    number of barriers (GPU)
 *  58    log2(1 + float lane-ops in unrolled loops)
 *  59    log2(1 + product of the extents of vectorized/unrolled loops around the hottest
 *         store: the size of the innermost register block)
 *  60-63 reserved (0)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/space_impl.h"
#include "schedule/tensorize_impl.h"

#define MAXD 64
#define MAXB 64

typedef struct {
    const te_buf *b;
    double loaded;
} bufuse;

typedef struct fstate {
    /* Loop stack. */
    int depth;
    double ext[MAXD];
    int kind[MAXD];
    double trips;     /* product of extents of the enclosing loops */
    double par_trips; /* product inside the outermost parallel loop (1 outside) */
    bool in_par, in_unroll;
    int in_if;
    /* Totals. */
    double fadd, fmul, fdiv, fcmp, fcall, iops, sel;
    double bld, bst, bld_vec, bst_vec, bld_contig, bld_gather, bld_bcast, bst_local, bld_local;
    double bld_l1, bld_l2, bld_big;
    double flops_par, flops_vec, flops_unroll;
    double stores_w, stores_if_w, stores_nt_w;
    double par_outer_ext, par_width; /* the first / the largest outermost parallel extent */
    int npar, nunroll, nloops, maxdepth, nstores, nallocs, nifs, nlets, nbarriers;
    double unroll_steps, loop_iters, loop_iters_dyn;
    double local_bytes, local_max, global_bytes;
    int max_store_lanes;
    /* Hottest store. */
    double hot_trips, hot_par_trips, hot_flops, hot_loads, hot_block;
    double hot_ext[4], hot_outer;
    int hot_kind[2];
    bufuse bufs[MAXB];
    int nbufs;
    const te_lowered *f;
} fstate;

static double lg(double x) { return log2(1.0 + (x > 0 ? x : 0)); }

static double buf_bytes(const te_buf *b)
{
    double n = (double)te_dtype_size(b->dtype);
    for (int d = 0; d < b->ndim; d++)
        n *= (double)b->shape[d];
    return n;
}

/* Per-expression counters for one store. */
typedef struct {
    double fops, loads;
} ecount;

static void expr_walk(fstate *F, const te_expr *e, double w, ecount *ec);

static void load_account(fstate *F, const te_expr *e, double w, ecount *ec)
{
    const te_buf *b = e->u.load.buf;
    int lanes = e->lanes > 0 ? e->lanes : 1;
    double bytes = w * (double)te_dtype_size(e->dtype) * lanes;
    F->bld += bytes;
    ec->loads += 1;
    if (lanes > 1)
        F->bld_vec += bytes;
    const te_expr *ix = e->u.load.n > 0 ? e->u.load.idx[e->u.load.n - 1] : NULL;
    if (lanes == 1 || (ix && ix->kind == TE_E_RAMP && ix->u.ramp.stride == 1))
        F->bld_contig += bytes;
    else if (ix && ix->kind == TE_E_BCAST)
        F->bld_bcast += bytes;
    else
        F->bld_gather += bytes;
    if (b->scope != TE_SCOPE_GLOBAL || b->arg_index < 0)
        F->bld_local += b->scope != TE_SCOPE_GLOBAL ? bytes : 0;
    double sz = buf_bytes(b);
    if (sz <= 32768)
        F->bld_l1 += bytes;
    else if (sz <= 1048576)
        F->bld_l2 += bytes;
    else
        F->bld_big += bytes;
    int i;
    for (i = 0; i < F->nbufs; i++)
        if (F->bufs[i].b == b)
            break;
    if (i == F->nbufs && F->nbufs < MAXB)
        F->bufs[F->nbufs++] = (bufuse){b, 0};
    if (i < F->nbufs)
        F->bufs[i].loaded += bytes;
    for (int d = 0; d < e->u.load.n; d++)
        expr_walk(F, e->u.load.idx[d], w, ec);
}

static void expr_walk(fstate *F, const te_expr *e, double w, ecount *ec)
{
    if (!e)
        return;
    int lanes = e->lanes > 0 ? e->lanes : 1;
    bool fl = te_dtype_is_float(e->dtype);
    double lw = w * lanes;
    switch (e->kind) {
    case TE_E_BINARY: {
        bool fop = te_dtype_is_float(e->u.bin.a->dtype);
        if (fop) {
            switch (e->u.bin.op) {
            case TE_ADD:
            case TE_SUB:
                F->fadd += lw;
                break;
            case TE_MUL:
                F->fmul += lw;
                break;
            case TE_DIV:
            case TE_MOD:
            case TE_FLOORDIV:
            case TE_FLOORMOD:
                F->fdiv += lw;
                break;
            default:
                F->fcmp += lw;
            }
            ec->fops += lanes;
            if (F->in_par)
                F->flops_par += lw;
            if (lanes > 1)
                F->flops_vec += lw;
            if (F->in_unroll)
                F->flops_unroll += lw;
        } else {
            F->iops += lw;
        }
        expr_walk(F, e->u.bin.a, w, ec);
        expr_walk(F, e->u.bin.b, w, ec);
        return;
    }
    case TE_E_CALL:
        F->fcall += lw;
        ec->fops += lanes;
        if (F->in_par)
            F->flops_par += lw;
        if (lanes > 1)
            F->flops_vec += lw;
        for (int i = 0; i < e->u.call.n; i++)
            expr_walk(F, e->u.call.args[i], w, ec);
        return;
    case TE_E_SELECT:
    case TE_E_IF:
        F->sel += lw;
        expr_walk(F, e->u.sel.c, w, ec);
        expr_walk(F, e->u.sel.t, w, ec);
        expr_walk(F, e->u.sel.f, w, ec);
        return;
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        if (e->kind == TE_E_NEG && fl)
            F->fadd += lw;
        expr_walk(F, e->u.un.a, w, ec);
        return;
    case TE_E_RAMP:
        expr_walk(F, e->u.ramp.base, w, ec);
        return;
    case TE_E_LOAD:
        load_account(F, e, w, ec);
        return;
    case TE_E_READ:
        for (int d = 0; d < e->u.read.n; d++)
            expr_walk(F, e->u.read.idx[d], w, ec);
        return;
    case TE_E_REDUCE:
        expr_walk(F, e->u.red.src, w, ec);
        return;
    default:
        return;
    }
}

static void stmt_walk(fstate *F, const te_stmt *s)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_FOR: {
        int64_t c;
        double ext = te__is_const_int(s->u.loop.extent, &c) ? (double)c : 1.0;
        if (!te__is_const_int(s->u.loop.extent, &c))
            F->loop_iters_dyn += F->trips;
        F->nloops++;
        F->loop_iters += F->trips * ext;
        int k = s->u.loop.fkind;
        int kind = k == TE_FOR_PARALLEL     ? 1
                   : k == TE_FOR_VECTORIZED ? 2
                   : k == TE_FOR_UNROLLED   ? 3
                   : k == TE_FOR_THREAD     ? 4
                                            : 0;
        bool was_par = F->in_par, was_unroll = F->in_unroll;
        double old_trips = F->trips, old_par = F->par_trips;
        if (kind == 1) {
            F->npar++;
            if (!F->in_par && F->par_outer_ext == 0)
                F->par_outer_ext = ext;
            double width = te__is_const_int(s->u.loop.extent, &c) ? ext : INFINITY; /* unknown */
            if (!F->in_par && width > F->par_width)
                F->par_width = width;
            if (!F->in_par)
                F->par_trips = 1;
            F->in_par = true;
        } else if (F->in_par) {
            F->par_trips *= ext;
        }
        if (kind == 3) {
            F->nunroll++;
            F->unroll_steps += ext;
            F->in_unroll = true;
        }
        if (F->depth < MAXD) {
            F->ext[F->depth] = ext;
            F->kind[F->depth] = kind;
        }
        F->depth++;
        if (F->depth > F->maxdepth)
            F->maxdepth = F->depth;
        F->trips *= ext;
        stmt_walk(F, s->u.loop.body);
        F->trips = old_trips;
        F->par_trips = old_par;
        F->depth--;
        F->in_par = was_par;
        F->in_unroll = was_unroll;
        return;
    }
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            stmt_walk(F, s->u.seq.v[i]);
        return;
    case TE_S_IF:
        F->nifs++;
        F->in_if++;
        expr_walk(F, s->u.cond.cond, F->trips, &(ecount){0, 0});
        stmt_walk(F, s->u.cond.then_s);
        stmt_walk(F, s->u.cond.else_s);
        F->in_if--;
        return;
    case TE_S_STORE: {
        const te_buf *b = s->u.store.buf;
        ecount ec = {0, 0};
        expr_walk(F, s->u.store.value, F->trips, &ec);
        for (int d = 0; d < s->u.store.n; d++)
            expr_walk(F, s->u.store.idx[d], F->trips, &ec);
        int lanes = s->u.store.value && s->u.store.value->lanes > 0 ? s->u.store.value->lanes : 1;
        double bytes = F->trips * (double)te_dtype_size(b->dtype) * lanes;
        F->bst += bytes;
        if (lanes > 1)
            F->bst_vec += bytes;
        if (lanes > F->max_store_lanes)
            F->max_store_lanes = lanes;
        if (b->scope != TE_SCOPE_GLOBAL)
            F->bst_local += bytes;
        F->nstores++;
        F->stores_w += F->trips;
        if (F->in_if)
            F->stores_if_w += F->trips;
        if (s->u.store.nontemporal)
            F->stores_nt_w += F->trips;
        if (F->trips * (ec.fops + 1) > F->hot_trips * (F->hot_flops + 1)) {
            F->hot_trips = F->trips;
            F->hot_par_trips = F->in_par ? F->par_trips : F->trips;
            F->hot_flops = ec.fops;
            F->hot_loads = ec.loads;
            int d = F->depth < MAXD ? F->depth : MAXD;
            for (int q = 0; q < 4; q++)
                F->hot_ext[q] = d - 1 - q >= 0 ? F->ext[d - 1 - q] : 0;
            F->hot_kind[0] = d >= 1 ? F->kind[d - 1] : 0;
            F->hot_kind[1] = d >= 2 ? F->kind[d - 2] : 0;
            F->hot_outer = d >= 1 ? F->ext[0] : 0;
            double blk = (double)lanes;
            for (int q = d - 1; q >= 0 && (F->kind[q] == 2 || F->kind[q] == 3); q--)
                blk *= F->ext[q];
            F->hot_block = blk;
        }
        return;
    }
    case TE_S_ALLOC: {
        const te_buf *b = s->u.alloc.buf;
        double by = buf_bytes(b);
        F->nallocs++;
        if (b->scope == TE_SCOPE_GLOBAL) {
            F->global_bytes += by;
        } else {
            F->local_bytes += by;
            if (by > F->local_max)
                F->local_max = by;
        }
        stmt_walk(F, s->u.alloc.body);
        return;
    }
    case TE_S_LET:
        /* A prefetch (te_prefetch) moves no data the kernel would not move anyway. */
        if (s->u.let.var->u.var.vkind != TE_VAR_PREFETCH) {
            F->nlets++;
            expr_walk(F, s->u.let.value, F->trips, &(ecount){0, 0});
        }
        stmt_walk(F, s->u.let.body);
        return;
    case TE_S_BARRIER:
        F->nbarriers++;
        return;
    case TE_S_INTRIN: {
        /* A tensor intrinsic call: the multiply-adds its description does, times the variable
         * axis's share (n over its described extent); half multiplies, half adds. */
        const te_tensor_intrin *in = s->u.intrin.in;
        double ops = 1;
        for (int a = 0; a < in->nd + in->nr; a++)
            ops *= (double)in->ext[a];
        if (in->var_axis >= 0 && s->u.intrin.n > 0)
            ops *= (double)s->u.intrin.n / (double)in->ext[in->nd + in->var_axis];
        F->fmul += ops * F->trips;
        F->fadd += ops * F->trips;
        return;
    }
    default:
        return;
    }
}

int te_features(const te_lowered *f, float *out, int n)
{
    if (!out || n <= 0)
        return TE_NUM_FEATURES;
    for (int i = 0; i < n; i++)
        out[i] = 0;
    if (!f)
        return TE_NUM_FEATURES;
    fstate *F = calloc(1, sizeof *F);
    if (!F)
        return TE_NUM_FEATURES;
    F->trips = 1;
    F->par_trips = 1;
    F->f = f;
    stmt_walk(F, f->body);
    float v[TE_NUM_FEATURES] = {0};
    double flops = F->fadd + F->fmul + F->fdiv + F->fcmp + F->fcall;
    double args_bytes = 0, args_max = 0, loaded_arg_bytes = 0;
    for (int i = 0; i < f->n_args; i++) {
        double by = buf_bytes(f->args[i]);
        args_bytes += by;
        if (by > args_max)
            args_max = by;
    }
    for (int i = 0; i < F->nbufs; i++)
        loaded_arg_bytes += buf_bytes(F->bufs[i].b);
    double bl = F->bld > 0 ? F->bld : 1, bs = F->bst > 0 ? F->bst : 1;
    v[0] = (float)lg(F->fadd);
    v[1] = (float)lg(F->fmul);
    v[2] = (float)lg(F->fdiv);
    v[3] = (float)lg(F->fcmp);
    v[4] = (float)lg(F->fcall);
    v[5] = (float)lg(F->iops);
    v[6] = (float)lg(F->sel);
    v[7] = (float)lg(flops);
    v[8] = (float)lg(F->bld);
    v[9] = (float)lg(F->bst);
    v[10] = (float)lg(flops / (F->bld + F->bst + 1));
    v[11] = (float)F->nbufs;
    v[12] = (float)lg(args_bytes);
    v[13] = (float)lg(F->bld / (loaded_arg_bytes + 1));
    v[14] = (float)F->max_store_lanes;
    v[15] = (float)(F->bst_vec / bs);
    v[16] = (float)(F->bld_vec / bl);
    v[17] = (float)lg(F->par_outer_ext);
    v[18] = (float)F->npar;
    v[19] = (float)lg(F->hot_par_trips);
    v[20] = (float)F->nunroll;
    v[21] = (float)lg(F->unroll_steps);
    v[22] = (float)F->maxdepth;
    v[23] = (float)F->nloops;
    v[24] = (float)lg(F->hot_ext[0]);
    v[25] = (float)F->hot_kind[0];
    v[26] = (float)lg(F->hot_ext[1]);
    v[27] = (float)F->hot_kind[1];
    v[28] = (float)lg(F->hot_ext[2]);
    v[29] = (float)lg(F->hot_outer);
    v[30] = (float)F->nstores;
    v[31] = (float)F->nallocs;
    v[32] = (float)lg(F->local_bytes);
    v[33] = (float)lg(F->local_max);
    v[34] = (float)lg(F->global_bytes);
    v[35] = (float)F->nifs;
    v[36] = (float)(F->stores_w > 0 ? F->stores_if_w / F->stores_w : 0);
    v[37] = (float)(F->stores_w > 0 ? F->stores_nt_w / F->stores_w : 0);
    v[38] = (float)(F->bld_contig / bl);
    v[39] = (float)(F->bld_gather / bl);
    v[40] = (float)(F->bld_bcast / bl);
    v[41] = (float)(F->bst_local / bs);
    v[42] = (float)(F->bld_local / bl);
    v[43] = (float)lg(F->hot_trips);
    v[44] = (float)lg(F->hot_flops);
    v[45] = (float)lg(F->hot_loads);
    v[46] = (float)lg(args_max);
    v[47] = (float)f->n_outputs;
    v[48] = (float)lg(F->flops_par);
    v[49] = (float)(flops > 0 ? F->flops_par / flops : 0);
    v[50] = (float)(flops > 0 ? F->flops_vec / flops : 0);
    v[51] = (float)lg(F->loop_iters);
    v[52] = (float)lg(F->loop_iters_dyn);
    v[53] = (float)lg(F->bld_l1);
    v[54] = (float)lg(F->bld_l2);
    v[55] = (float)lg(F->bld_big);
    v[56] = (float)F->nlets;
    v[57] = (float)F->nbarriers;
    v[58] = (float)lg(F->flops_unroll);
    v[59] = (float)lg(F->hot_block);
    free(F);
    for (int i = 0; i < n && i < TE_NUM_FEATURES; i++)
        out[i] = isfinite(v[i]) ? v[i] : 0.0f;
    return TE_NUM_FEATURES;
}

int te_kernel_count(const te_lowered *f, te_kernel_counts *out)
{
    if (!out)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (!f)
        return TE_ERR_ARG;
    fstate *F = calloc(1, sizeof *F);
    if (!F)
        return TE_ERR_NOMEM;
    F->trips = 1;
    F->par_trips = 1;
    F->f = f;
    stmt_walk(F, f->body);
    /* The same float lane-ops as feature 7: add/sub/neg, mul, div, min/max/compare, and one
     * per math intrinsic call. */
    out->flops = F->fadd + F->fmul + F->fdiv + F->fcmp + F->fcall;
    for (int i = 0; i < f->n_args; i++)
        out->bytes += buf_bytes(f->args[i]);
    out->intensity = out->bytes > 0 ? out->flops / out->bytes : 0;
    out->parallel_width = F->npar ? F->par_width : 1;
    free(F);
    return TE_OK;
}
