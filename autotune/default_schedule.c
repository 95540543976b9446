/*
 * The default schedule of an untuned workload (te_tune_default_schedule): the tuner's own
 * search space (the operator's template, else sketches) sampled with a fixed seed, every
 * candidate lowered and scored by an analytic cost model on its features (te_features), the
 * cheapest kept. Nothing is compiled or run, so it is cheap enough for every untuned build.
 *
 * The analytic model counts cycles of one core and divides by the parallel speed-up:
 *  - float lane-ops: vector ones cost 1/lanes, scalar ones 1;
 *  - loads and stores: one op per vector (or per scalar), gathers one per lane; loads and
 *    stores of local buffers (accumulators) are free when the register block is vectorized or
 *    unrolled and the largest local allocation fits the vector registers;
 *  - bytes read from buffers larger than L1 cost a little per byte, more above L2 (the
 *    features count them by allocation size: fewer such bytes = more reuse in registers);
 *  - loop iterations cost a cycle each (loop overhead; unrolled loops count too, the compiler
 *    removes most of it); tail guards make the guarded stores twice as dear;
 *  - the parallel fraction is divided by min(threads, extent of the parallel loop), with the
 *    imbalance of the last round.
 * It ranks candidates; its absolute value is only an estimate.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/space_impl.h"
#include "autotune/tune_impl.h"
#include "schedule/sched_impl.h"
#include "te/arith_impl.h"
#include "tessera/tuner.h"

#define DS_SAMPLES 48              /* candidates scored (plus the space's first configuration) */
#define DS_MAX_ENUMERATE 1024      /* enumerable spaces up to this size are scored whole */
#define DS_L2_BYTES (512.0 * 1024) /* a core's private cache (the smallest of our machines) */
#define DS_MAX_UNROLL 64           /* largest unroll pragma of a default (compile time) */
#define DS_MAX_TILE 1024           /* largest register tile of a reduction (compile time, L1) */
#define DS_MAX_UNROLLED 256        /* largest sum of explicitly unrolled loop extents */
/* Most store statements in the lowered code: lowering unrolls small constant loops, and
 * hundreds of unrolled gathers take the C compiler minutes. */
#define DS_MAX_STORES 192

static double ex2(float x) { return exp2((double)x) - 1.0; }

/* te_tune_default_cost; with tiles_modeled, local loads and stores are taken as register
 * accesses whatever the size of the largest local allocation (a packed panel is local too):
 * the reduction model charges the register tiles themselves, spills included. */
static double default_cost(const float *f, const te_target *target, int threads, bool tiles_modeled)
{
    if (!f || !target)
        return INFINITY;
    int lanes = target->vector_bits >= 64 ? target->vector_bits / 32 : 4;
    double flops = ex2(f[7]), vecf = f[50];
    double compute = flops * (1.0 - vecf) + flops * vecf / lanes;
    double bl = ex2(f[8]), bs = ex2(f[9]);
    /* Accumulators in registers: a vector/unrolled register block that fits 16 vector
     * registers. */
    double regbytes = 16.0 * lanes * 4.0;
    int in_regs = ex2(f[59]) > 1.5 && (tiles_modeled || ex2(f[33]) <= regbytes);
    double local_disc = in_regs ? 0.05 : 1.0;
    double ld = bl * (1.0 - f[42]) + bl * f[42] * local_disc;
    double st = bs * (1.0 - f[41]) + bs * f[41] * local_disc;
    double vld = f[16], vst = f[15], gat = f[39];
    double ldops = ld * vld / (4.0 * lanes) +
                   ld * (1.0 - vld - gat > 0 ? 1.0 - vld - gat : 0) / 4.0 + ld * gat / 4.0 * 2.0;
    double stops = st * vst / (4.0 * lanes) + st * (1.0 - vst) / 4.0;
    double mem = 0.5 * ldops + stops + 0.01 * ex2(f[54]) + 0.03 * ex2(f[55]) + 0.3 * f[37] * bs;
    double loops = ex2(f[51]) - ex2(f[52]);
    double guard = 1.0 + f[36];
    double serial = (compute + mem) * guard + 0.5 * (loops > 0 ? loops : 0);
    double parf = f[49];
    double pext = ex2(f[17]);
    double sp = 1.0;
    if (threads > 1 && pext >= 1.0) {
        double rounds = ceil(pext / threads);
        sp = pext / rounds;
        if (sp < 1.0)
            sp = 1.0;
    }
    return serial * (1.0 - parf) + serial * parf / sp;
}

double te_tune_default_cost(const float *f, const te_target *target, int threads)
{
    return default_cost(f, target, threads, false);
}

/* ---- The register tile of reductions ---------------------------------------------------- */

/* The root axis an iterator comes from through splits; NULL through a fuse. */
static te_iter *root_of(const te_stage *st, te_iter *it)
{
    for (int guard = 0; it && guard < 64; guard++) {
        int moved = 0;
        for (int i = 0; i < (int)st->rels.n; i++) {
            const te_rel *r = st->rels.v[i];
            if (r->kind == TE_REL_SPLIT && (r->outer == it || r->inner == it)) {
                it = r->parent;
                moved = 1;
                break;
            }
            if (r->kind == TE_REL_FUSE && r->fused == it)
                return NULL;
        }
        if (!moved)
            return it;
    }
    return it;
}

typedef struct {
    const te_expr *reads[32];
    int n;
} reads_ctx;

static bool collect_reads(const te_expr *e, void *user)
{
    reads_ctx *r = user;
    if (e->kind == TE_E_READ && r->n < 32)
        r->reads[r->n++] = e;
    return true;
}

/* Bytes between the elements that a read touches in consecutive iterations of the reduction
 * variable kv, in the row-major layout of the tensor it reads (0 when kv is not in its index
 * or an index is not linear). */
static double read_stride_bytes(const te_expr *rd, const te_expr *kv)
{
    const te_tensor *t = rd->u.read.t;
    double stride = 0, inner = 1;
    for (int d = rd->u.read.n - 1; d >= 0; d--) {
        te__lform f;
        te__lf_init(&f);
        te__lf_add(&f, rd->u.read.idx[d], 1);
        for (int q = 0; f.ok && q < f.n; q++)
            if (f.v[q].t == kv)
                stride += (double)f.v[q].k * inner;
        bool ok = f.ok;
        te__lf_free(&f);
        if (!ok)
            return 0;
        inner *= d < t->ndim ? (double)t->shape[d] : 1;
    }
    return fabs(stride) * (double)te_dtype_size(t->dtype);
}

/* Cycles of the reduction stages of s on one core, from their register tile: the spatial
 * loops inside the innermost reduction loop are the tile (T outputs, V = T / lanes vector
 * accumulators when the last is vectorized); one reduction step issues V FMAs and loads each
 * input once per distinct index the tile reaches (vector loads along the vectorized loop,
 * broadcasts otherwise), at two FMAs and two loads a cycle; more accumulators than 12 vector
 * registers spill. A reduction without tile loops (a dot product per output) pays a dependent
 * add per step. */
static double reduction_cycles(te_schedule *s, int lanes)
{
    double total = 0;
    for (int si = 0; si < te_schedule_nstages(s); si++) {
        te_stage *st = te_schedule_stage_at(s, si);
        if (!st || st->attach == TE_ATTACH_INLINE)
            continue;
        /* Compile time: the default is built on every untuned run, so no unroll pragma past
         * DS_MAX_UNROLL (the C compiler can take minutes on a fully unrolled tile). */
        if (st->unroll_max > DS_MAX_UNROLL)
            return INFINITY;
        if (st->nred == 0)
            continue;
        int nl = te_stage_nleaves(st), last_red = -1;
        for (int i = 0; i < nl; i++)
            if (te_iter_is_reduce(te_stage_leaf(st, i)))
                last_red = i;
        double red = 1;
        for (int q = 0; q < st->nred; q++)
            red *= (double)te_iter_extent(st->raxes[q]);
        double T = 1;
        te_iter *vec = NULL;
        for (int i = last_red + 1; i < nl; i++) {
            te_iter *it = te_stage_leaf(st, i);
            T *= (double)te_iter_extent(it);
            if (it->ann == TE_ANN_VECTORIZE)
                vec = it;
        }
        int vl = vec && te_iter_extent(vec) >= lanes ? lanes : 1;
        double V = T / vl;
        /* Loads per reduction step. */
        reads_ctx rc = {{0}, 0};
        if (st->body)
            te__expr_visit(st->body, collect_reads, &rc);
        double loads = 0;
        te_iter *vroot = vec ? root_of(st, vec) : NULL;
        for (int k = 0; k < rc.n; k++) {
            const te_expr *rd = rc.reads[k];
            double distinct = 1;
            for (int i = last_red + 1; i < nl; i++) {
                te_iter *it = te_stage_leaf(st, i), *root = root_of(st, it);
                bool uses = !root;
                for (int d = 0; root && !uses && d < rd->u.read.n; d++)
                    uses = te__expr_uses_var(rd->u.read.idx[d], root->var);
                if (!uses)
                    continue;
                double e = (double)te_iter_extent(it);
                bool along = it == vec && vroot && rd->u.read.n > 0 &&
                             te__expr_uses_var(rd->u.read.idx[rd->u.read.n - 1], vroot->var);
                distinct *= along ? e / vl : e;
            }
            loads += distinct;
        }
        /* Reuse in cache: a read is reused across the spatial loops inside the outermost
         * reduction loop that its index does not use; each reuse-free element costs an L2 trip
         * (a vector of them a cycle). */
        int first_red = nl;
        for (int i = 0; i < nl; i++)
            if (te_iter_is_reduce(te_stage_leaf(st, i))) {
                first_red = i;
                break;
            }
        double l2 = 0;
        for (int k = 0; k < rc.n; k++) {
            const te_expr *rd = rc.reads[k];
            double reuse = 1;
            for (int i = first_red + 1; i < nl; i++) {
                te_iter *it = te_stage_leaf(st, i), *root = root_of(st, it);
                if (!root || te_iter_is_reduce(it))
                    continue;
                bool uses = false;
                for (int d = 0; !uses && d < rd->u.read.n; d++)
                    uses = te__expr_uses_var(rd->u.read.idx[d], root->var);
                if (!uses)
                    reuse *= (double)te_iter_extent(it);
            }
            l2 += 1.0 / reuse;
        }
        /* Strided reads along the innermost reduction loop: an operand read a row apart at
         * every step (an unpacked B[k, j] of a matmul) touches a new cache line each step, and
         * a new page each step once the stride is 4 KiB; a copy computed inside the loop nest
         * (a packed panel) is contiguous by construction. */
        double strided = 0;
        te_iter *kleaf = last_red >= 0 ? te_stage_leaf(st, last_red) : NULL;
        te_iter *kroot = kleaf ? root_of(st, kleaf) : NULL;
        for (int k = 0; kroot && k < rc.n; k++) {
            const te_tensor *rt = rc.reads[k]->u.read.t;
            te_stage *rs = rt->kind == TE_T_COMPUTE ? te_schedule_stage(s, (te_tensor *)rt) : NULL;
            if (rs && rs->attach == TE_ATTACH_AT)
                continue;
            double b = read_stride_bytes(rc.reads[k], kroot->var);
            /* The contiguous bytes read per row in one step of the outermost reduction loop
             * (the spatial loops inside it along the read's last index): a block of a
             * kilobyte or more per row streams (a skinny product's rows of B), a narrow
             * column panel does not. */
            const te_expr *rd = rc.reads[k];
            double span = (double)te_dtype_size(rt->dtype);
            for (int i = first_red + 1; i < nl && rd->u.read.n > 0; i++) {
                te_iter *it = te_stage_leaf(st, i), *root = root_of(st, it);
                if (root && !te_iter_is_reduce(it) &&
                    te__expr_uses_var(rd->u.read.idx[rd->u.read.n - 1], root->var))
                    span *= (double)te_iter_extent(it);
            }
            /* Narrow visits a page apart to an operand larger than the last private cache
             * (DS_L2_BYTES) miss the TLB and DRAM's open rows at every step: tens of cycles
             * (measured: a 4096 x 4096 matrix-vector product read in column panels of 32 is
             * 4.6x slower than in row blocks of 512). */
            double tbytes = (double)te_tensor_numel(rt) * (double)te_dtype_size(rt->dtype);
            if (b > 64 && span < 1024)
                strided += b < 4096 ? 3.0 : tbytes > DS_L2_BYTES ? 64.0 : 8.0;
        }
        /* Generated C keeps a large tile's accumulators in L1 rather than registers: one
         * access per vector FMA, twice that past 8 KiB of tile. A tile whose vector
         * accumulators, one broadcast and the loads of a step do not fit the vector registers
         * (16, 32 with AVX-512) spills: every FMA then loads and stores its accumulator. */
        double acc = T * 4.0 <= 8192 ? 1.0 : 2.0;
        int vregs = lanes >= 16 ? 32 : 16;
        if (vl > 1 && V + 3 > vregs)
            acc = fmax(acc, 3.0);
        double step = acc * V + loads + 2.0 * l2 * T / vl + strided + 4.0;
        if (T <= 1)
            step += 3.0; /* the add chain of one accumulator */
        if (T > DS_MAX_TILE)
            return INFINITY;
        double outs = (double)te_tensor_numel(st->tensor);
        total += outs / (T > 0 ? T : 1) * red * step;
    }
    return total;
}

double te__default_score(te_schedule *s, const float *feat, const te_target *tgt, int threads)
{
    int lanes = tgt->vector_bits >= 64 ? tgt->vector_bits / 32 : 4;
    double red = reduction_cycles(s, lanes);
    if (threads > 1 && feat[49] > 0.5)
        red /= threads;
    return default_cost(feat, tgt, threads, red > 0) + red;
}

/* A short summary of a trace: the split factors in order, the vector and parallel loops. */
static void summarize(const char *trace, char *out, size_t size)
{
    char splits[96] = "", vec[64] = "", par[64] = "", tz[80] = "";
    size_t ns = 0, nv = 0, np = 0;
    int nsplit = 0;
    for (const char *l = trace; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), l);
        char a[64], b[64], c[64];
        long long fct;
        if (sscanf(line, "split %63s %63s %lld", a, b, &fct) == 3 && ns < sizeof splits - 24) {
            ns +=
                (size_t)snprintf(splits + ns, sizeof splits - ns, "%s%lld", nsplit ? "x" : "", fct);
            nsplit++;
        } else if (sscanf(line, "vectorize %63s %63s", a, b) == 2 && nv < sizeof vec - 24) {
            nv += (size_t)snprintf(vec + nv, sizeof vec - nv, "%s%s", nv ? "," : "", b);
        } else if (sscanf(line, "tensorize %63s %63s %63s", a, b, c) == 3) {
            snprintf(tz, sizeof tz, ", tensorize %s", c);
        } else if (sscanf(line, "parallel %63s %63s", a, c) == 2 && np < sizeof par - 24) {
            np += (size_t)snprintf(par + np, sizeof par - np, "%s%s", np ? "," : "", c);
        }
        l = e ? e + 1 : NULL;
    }
    int n = snprintf(out, size, "tile %s, vec %s, parallel %s%s", nsplit ? splits : "-",
                     nv ? vec : "-", np ? par : "-", tz);
    if (n >= (int)size && size > 4) /* cut: say so */
        memcpy(out + size - 4, "...", 4);
}

/* Scores one trace; INFINITY when it does not instantiate or lower. */
static double score(te_space *sp, const char *trace, int n_args, te_tensor *const *args,
                    const te_target *tgt, int threads)
{
    te_ctx *c = te_ctx_create_child(sp->ctx);
    if (!c)
        return INFINITY;
    double cost = INFINITY;
    te_schedule *s = te_schedule_create(c, sp->n_out, sp->outs);
    if (s && te_schedule_apply_trace(s, trace) == TE_OK) {
        te_lowered *f = te_lower(s, n_args, args, "default", tgt);
        if (f) {
            float feat[TE_NUM_FEATURES];
            te_features(f, feat, TE_NUM_FEATURES);
            /* The caps are per output: a group of three products (QKV) has three tiles. */
            double per = sp->n_out > 1 ? sp->n_out : 1;
            cost = ex2(feat[21]) > DS_MAX_UNROLLED * per || feat[30] > DS_MAX_STORES * per
                       ? INFINITY
                       : te__default_score(s, feat, tgt, threads);
        }
    }
    te_ctx_free(c);
    return cost;
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int te_tune_default_schedule(te_ctx *ctx, const char *op, int n_in, te_tensor *const *ins,
                             int n_out, te_tensor *const *outs, const te_target *target,
                             te_schedule **out, char *note, size_t note_size)
{
    if (out)
        *out = NULL;
    if (note && note_size)
        note[0] = 0;
    if (!ctx || !out || n_out <= 0 || !outs || n_in < 0 || (n_in && !ins) ||
        n_in + n_out > 2 * 64) {
        if (ctx)
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_tune_default_schedule: needs a context, outputs, inputs "
                             "(at most 128 arguments) and a place for the schedule");
        return TE_ERR_ARG;
    }
    te_target tgt = target ? *target : te_target_host();
    int threads = tgt.num_cores > 0 ? tgt.num_cores : 1;
    te_space *sp = NULL;
    /* A fused group (no operator name) gets the template that recognizes its structure (a
     * matmul + bias + activation group the packed, register-tiled gemm space, a conv + bn +
     * relu group the conv2d space), else sketches. */
    sp = te_space_create(ctx, op, n_in, ins, n_out, outs, TE_SPACE_AUTO, &tgt);
    if (!sp && op) { /* an operator whose template does not apply: sketches */
        te_ctx_clear_error(ctx);
        sp = te_space_create(ctx, NULL, n_in, ins, n_out, outs, TE_SPACE_SKETCH, &tgt);
    }
    if (!sp)
        return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_INTERNAL;
    te_tensor *args[128];
    for (int i = 0; i < n_in; i++)
        args[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        args[n_in + i] = outs[i];
    te_rng rng;
    te_rng_seed(&rng, 0x5eedull ^ te_tuner_expr_hash(n_out, outs));
    const char *best = NULL;
    double best_cost = INFINITY;
    int scored = 0;
    /* A small enumerable space (a template's knobs) is scored whole; others are sampled. */
    int64_t size = te_space_size(sp);
    bool all = size > 0 && size <= DS_MAX_ENUMERATE;
    int64_t n_cand = all ? size - 1 : DS_SAMPLES;
    const char *debug = getenv("TESSERA_DEFAULT_DEBUG");
    for (int64_t i = 0; i <= n_cand; i++) {
        const char *tr = i == 0 || all ? te_space_get(sp, i) : te_space_sample(sp, &rng);
        if (!tr) {
            if (debug && *debug)
                fprintf(stderr, "default: candidate %lld: %s\n", (long long)i, te_ctx_errmsg(ctx));
            te_ctx_clear_error(ctx);
            continue;
        }
        if (best && fnv(tr) == fnv(best))
            continue;
        double c = score(sp, tr, n_in + n_out, args, &tgt, threads);
        if (debug && *debug) {
            char sum[200];
            summarize(tr, sum, sizeof sum);
            fprintf(stderr, "default: candidate %lld: est %.4g Mcycles: %s\n", (long long)i,
                    c * 1e-6, sum);
        }
        if (isfinite(c))
            scored++;
        if (c < best_cost * (1 - 1e-9)) { /* ties: the space's earlier (default) one */
            best_cost = c;
            best = tr;
        }
    }
    te_ctx_clear_error(ctx);
    const char *kind = sp->kind == TE_SPACE_TEMPLATE ? "template" : "sketch";
    bool fallback = false;
    if (!best && sp->kind == TE_SPACE_TEMPLATE) {
        /* The model rates no configuration (their tiles are past its limits, as the attention
         * template's score blocks are): the template's first configuration, which its author
         * chose as the default. */
        best = te_space_get(sp, 0);
        fallback = best != NULL;
        te_ctx_clear_error(ctx);
    }
    if (!best) {
        te_ctx_set_error(ctx, TE_ERR_SCHEDULE,
                         "te_tune_default_schedule: no %s candidate of the workload lowers", kind);
        return TE_ERR_SCHEDULE;
    }
    te_schedule *s = te_space_instantiate(sp, best);
    if (!s)
        return te_ctx_errcode(ctx) ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;
    if (note && note_size) {
        char sum[240];
        summarize(best, sum, sizeof sum);
        if (fallback)
            snprintf(note, note_size,
                     "default: template's first configuration (%s; the cost model rates none "
                     "of its %lld)",
                     sum, (long long)size);
        else
            snprintf(note, note_size, "default: %s heuristic (%s; best of %d, est %.3g Mcycles)",
                     kind, sum, scored, best_cost * 1e-6);
    }
    *out = s;
    return TE_OK;
}
