/*
 * backends/cuda/templates.c: GPU schedule templates for the operator library, and their knob
 * lists for the tuner. Every template uses only the public scheduling API, so what it does can
 * be read as a trace (te_schedule_trace) and replayed.
 *
 * The matmul family (matmul, dense, matmul + epilogue, MLP gate, direct conv2d) follows TVM's
 * classic CUDA schedule:
 *
 *   block (blockIdx.y, blockIdx.x) owns a tile_m x tile_n tile of the output;
 *   thread (threadIdx.y, threadIdx.x) owns a thread_m x thread_n register tile of it;
 *   the accumulators (cache_write LOCAL) are computed at the thread loop, reducing over k in
 *   steps of tile_k; at each step the A and B tiles the block needs are copied to shared memory
 *   by all threads together (the copy loops fused, split by the thread count and by `vec` for
 *   float4 copies, bound to the same threadIdx axes), then every thread accumulates from them.
 *
 * Row reductions (softmax, layer norm) give one block per row: the reductions are computed at
 * the row loop and their reduction loop is split by the thread count and bound with
 * te_bind_reduce (cross-thread reduction); the elementwise output loop is split the same way.
 */
#include <stdio.h>
#include <string.h>

#include "te/internal.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

/* The tensors t's definition reads, in order of first appearance; returns their number. */
static int inputs_of(te_tensor *t, te_tensor **out, int max)
{
    return t && t->kind == TE_T_COMPUTE ? te__expr_tensors_read(t->body, out, max) : 0;
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != TE_OK)                                                                          \
            return rc_;                                                                            \
    } while (0)
#define CKP(p)                                                                                     \
    do {                                                                                           \
        if (!(p))                                                                                  \
            return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;           \
    } while (0)

te_cuda_knobs te_cuda_knobs_default(const char *op)
{
    te_cuda_knobs k;
    memset(&k, 0, sizeof k);
    if (!op)
        return k;
    if (!strcmp(op, "matmul") || !strcmp(op, "mlp_gate") || !strcmp(op, "dense") ||
        !strcmp(op, "matmul_bias_act") || !strcmp(op, "batch_matmul") || !strcmp(op, "qkv")) {
        k.tile_m = 64, k.tile_n = 64, k.tile_k = 8, k.thread_m = 4, k.thread_n = 4, k.vec = 4;
        k.pad = 0, k.double_buffer = 0, k.unroll = 1;
    } else if (!strcmp(op, "conv2d") || !strcmp(op, "conv2d_bn_relu")) {
        k.tile_m = 32, k.tile_n = 32, k.tile_k = 4, k.thread_m = 2, k.thread_n = 2, k.vec = 1;
        k.unroll = 1, k.stage_input = 1;
    } else if (!strcmp(op, "softmax") || !strcmp(op, "layer_norm") || !strcmp(op, "rms_norm") ||
               !strcmp(op, "rows")) {
        k.threads = 256, k.vec = 4;
    } else if (!strcmp(op, "window")) {
        k.threads = 128, k.unroll = 1;
    } else if (!strcmp(op, "elementwise")) {
        k.threads = 256, k.vec = 1;
    }
    return k;
}

static const int v_tile_mn[] = {16, 32, 64, 128};
static const int v_tile_k[] = {4, 8, 16, 32};
static const int v_thread[] = {1, 2, 4, 8};
static const int v_vec[] = {1, 2, 4};
static const int v_pad[] = {0, 1, 4};
static const int v_bool[] = {0, 1};
static const int v_threads[] = {32, 64, 128, 256, 512, 1024};
static const int v_vthread[] = {1, 2};

#define KNOB(n, v)                                                                                 \
    {                                                                                              \
        n, (int)(sizeof v / sizeof v[0]), v                                                        \
    }
static const te_cuda_knob_def space_matmul[] = {
    KNOB("tile_m", v_tile_mn),    KNOB("tile_n", v_tile_mn),     KNOB("tile_k", v_tile_k),
    KNOB("thread_m", v_thread),   KNOB("thread_n", v_thread),    KNOB("vec", v_vec),
    KNOB("pad", v_pad),           KNOB("double_buffer", v_bool), KNOB("unroll", v_bool),
    KNOB("vthread_m", v_vthread), KNOB("vthread_n", v_vthread),
};
static const te_cuda_knob_def space_conv[] = {
    KNOB("tile_m", v_tile_mn),   KNOB("tile_n", v_tile_mn),  KNOB("tile_k", v_tile_k),
    KNOB("thread_m", v_thread),  KNOB("thread_n", v_thread), KNOB("unroll", v_bool),
    KNOB("stage_input", v_bool),
};
static const te_cuda_knob_def space_rows[] = {KNOB("threads", v_threads), KNOB("vec", v_vec)};
static const te_cuda_knob_def space_window[] = {KNOB("threads", v_threads), KNOB("unroll", v_bool)};
static const te_cuda_knob_def space_elem[] = {KNOB("threads", v_threads), KNOB("vec", v_vec)};

const te_cuda_knob_def *te_cuda_knob_space(const char *op, int *n)
{
#define RET(a)                                                                                     \
    do {                                                                                           \
        if (n)                                                                                     \
            *n = (int)(sizeof a / sizeof a[0]);                                                    \
        return a;                                                                                  \
    } while (0)
    if (!op)
        return NULL;
    if (!strcmp(op, "matmul") || !strcmp(op, "mlp_gate") || !strcmp(op, "dense") ||
        !strcmp(op, "matmul_bias_act") || !strcmp(op, "batch_matmul") || !strcmp(op, "qkv"))
        RET(space_matmul);
    if (!strcmp(op, "conv2d") || !strcmp(op, "conv2d_bn_relu"))
        RET(space_conv);
    if (!strcmp(op, "softmax") || !strcmp(op, "layer_norm") || !strcmp(op, "rms_norm") ||
        !strcmp(op, "rows"))
        RET(space_rows);
    if (!strcmp(op, "window"))
        RET(space_window);
    if (!strcmp(op, "elementwise"))
        RET(space_elem);
    if (n)
        *n = 0;
    return NULL;
#undef RET
}

int te_cuda_knobs_set(te_cuda_knobs *k, const char *name, int value)
{
    if (!k || !name)
        return TE_ERR_ARG;
    struct {
        const char *n;
        int *p;
    } f[] = {{"tile_m", &k->tile_m},
             {"tile_n", &k->tile_n},
             {"tile_k", &k->tile_k},
             {"thread_m", &k->thread_m},
             {"thread_n", &k->thread_n},
             {"threads", &k->threads},
             {"vec", &k->vec},
             {"pad", &k->pad},
             {"double_buffer", &k->double_buffer},
             {"unroll", &k->unroll},
             {"vthread_m", &k->vthread_m},
             {"vthread_n", &k->vthread_n},
             {"stage_input", &k->stage_input}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!strcmp(f[i].n, name)) {
            *f[i].p = value;
            return TE_OK;
        }
    return TE_ERR_ARG;
}

static int bad_knobs(te_ctx *ctx, const char *op, const char *why)
{
    return te_ctx_set_error(ctx, TE_ERR_ARG, "te_cuda_schedule_%s: %s", op, why);
}

/* ---- Shared helpers ------------------------------------------------------------------------- */

/* Inlines every stage without a reduction except those computing keep[0..n) (NULL entries
 * ignored): the padding and elementwise producers of a template's stages. */
static int inline_elementwise(te_schedule *s, te_tensor *const *keep, int n)
{
    for (int i = 0; i < te_schedule_nstages(s); i++) {
        te_stage *p = te_schedule_stage_at(s, i);
        te_tensor *t = te_stage_tensor(p);
        bool kept = te_stage_nreduce(p) > 0;
        for (int k = 0; k < n && !kept; k++)
            kept = keep[k] == t;
        if (!kept)
            CK(te_compute_inline(p));
    }
    return TE_OK;
}

/* Cooperative copy of a cached stage: every loop fused, split by vec and by the block's
 * threads (ty extent ny, tx extent nx), bound to threadIdx.y/x. */
static int coop_copy(te_schedule *s, te_tensor *t, int ny, int nx, int vec, int pad, int dbuf)
{
    te_ctx *ctx = te_schedule_ctx(s);
    te_stage *st = te_schedule_stage(s, t);
    CKP(st);
    int nd = te_tensor_ndim(t);
    (void)pad;
    /* the innermost axis split by vec first, so each vector is a contiguous piece of a row */
    te_iter *fv = NULL, *last = te_stage_axis(st, nd - 1);
    if (vec > 1 && te_tensor_shape(t)[nd - 1] % vec == 0)
        CK(te_split(st, last, vec, &last, &fv));
    te_iter *f = te_stage_leaf(st, 0);
    for (int d = 1; d < nd; d++)
        CK(te_fuse(st, f, te_stage_leaf(st, 1), &f));
    te_iter *fo = f, *ftx, *fty, *rest;
    CK(te_split(st, fo, nx, &rest, &ftx));
    CK(te_split(st, rest, ny, &rest, &fty));
    CK(te_bind(st, fty, TE_THREAD_Y));
    CK(te_bind(st, ftx, TE_THREAD_X));
    if (fv)
        CK(te_vectorize(st, fv));
    if (dbuf)
        CK(te_double_buffer(st));
    return TE_OK;
}

/* The virtual threads along an output axis of extent n: none when the axis is smaller than the
 * block tile (the tile shrinks to it) or the knob is 0 or 1. */
static int vthreads_along(int64_t n, int tile, int v) { return v > 1 && n >= tile ? v : 1; }

/* One output axis a of O tiled as block / [virtual threads] / threads / register run: the block
 * loop, the vthread loop (NULL without one), the thread loop and the register loop. */
static int tile_axis(te_stage *O, te_iter *a, int tile, int per, int vt, te_iter **b, te_iter **v,
                     te_iter **t, te_iter **r)
{
    te_iter *in;
    CK(te_split(O, a, tile, b, &in));
    *v = NULL;
    if (vt > 1)
        CK(te_split(O, in, tile / vt, v, &in));
    return te_split(O, in, per / vt, t, r);
}

/* The tile shape of a matmul-like output stage O over axes (ai, aj): binds blocks and threads
 * and returns the thread loop tx to compute accumulators at. With virtual threads a thread's
 * register tile is vthread_m x vthread_n runs strided by the block tile's share of each. */
static int tile_output(te_stage *O, te_iter *ai, te_iter *aj, const te_cuda_knobs *k, bool unroll,
                       te_iter **tx_out)
{
    te_iter *bi, *vi, *ty, *ri, *bj, *vj, *tx, *rj;
    int vm = vthreads_along(te_iter_extent(ai), k->tile_m, k->vthread_m),
        vn = vthreads_along(te_iter_extent(aj), k->tile_n, k->vthread_n);
    CK(tile_axis(O, ai, k->tile_m, k->thread_m, vm, &bi, &vi, &ty, &ri));
    CK(tile_axis(O, aj, k->tile_n, k->thread_n, vn, &bj, &vj, &tx, &rj));
    te_iter *order[8];
    int n = 0;
    order[n++] = bi;
    order[n++] = bj;
    if (vi)
        order[n++] = vi;
    if (vj)
        order[n++] = vj;
    order[n++] = ty;
    order[n++] = tx;
    order[n++] = ri;
    order[n++] = rj;
    CK(te_reorder(O, n, order));
    CK(te_bind(O, bi, TE_BLOCK_Y));
    CK(te_bind(O, bj, TE_BLOCK_X));
    if (vi)
        CK(te_bind(O, vi, TE_VTHREAD));
    if (vj)
        CK(te_bind(O, vj, TE_VTHREAD));
    CK(te_bind(O, ty, TE_THREAD_Y));
    CK(te_bind(O, tx, TE_THREAD_X));
    if (unroll) {
        CK(te_unroll(O, ri));
        /* a row of 2 or 4 of a thread's results is stored as one float2 / float4 (where the
         * output's rows keep the alignment; the backend stores lane by lane otherwise) */
        int run = k->thread_n / vn;
        if (run == 2 || run == 4)
            CK(te_vectorize(O, rj));
        else
            CK(te_unroll(O, rj));
    }
    *tx_out = tx;
    return TE_OK;
}

static int check_mm_knobs(te_ctx *ctx, const char *op, const te_cuda_knobs *k)
{
    if (!k || k->tile_m <= 0 || k->tile_n <= 0 || k->tile_k <= 0 || k->thread_m <= 0 ||
        k->thread_n <= 0)
        return bad_knobs(ctx, op, "tile_m, tile_n, tile_k, thread_m and thread_n must be positive");
    if (k->tile_m % k->thread_m || k->tile_n % k->thread_n)
        return bad_knobs(ctx, op, "thread_m must divide tile_m and thread_n must divide tile_n");
    if ((k->tile_m / k->thread_m) * (k->tile_n / k->thread_n) > 1024)
        return bad_knobs(ctx, op, "(tile_m / thread_m) * (tile_n / thread_n) threads exceed 1024");
    if (k->vec != 0 && k->vec != 1 && k->vec != 2 && k->vec != 4)
        return bad_knobs(ctx, op, "vec must be 1, 2 or 4");
    if (k->vthread_m < 0 || k->vthread_n < 0 || (k->vthread_m > 1 && k->thread_m % k->vthread_m) ||
        (k->vthread_n > 1 && k->thread_n % k->vthread_n))
        return bad_knobs(ctx, op,
                         "vthread_m must divide thread_m and vthread_n must divide thread_n");
    return TE_OK;
}

/* Accumulator stage R (a 2-D reduction over one axis, A[i, k] B[k, j] style) computed at O's
 * thread loop, with its two operands staged in shared memory. */
static int schedule_accumulator(te_schedule *s, te_stage *O, te_iter *tx, te_tensor *Rt,
                                const te_cuda_knobs *k)
{
    te_ctx *ctx = te_schedule_ctx(s);
    te_stage *R = te_schedule_stage(s, Rt);
    CKP(R);
    CK(te_compute_at(R, O, tx));
    te_iter *ko, *ki;
    CK(te_split(R, te_stage_reduce_axis(R, 0), k->tile_k, &ko, &ki));
    int nd = te_tensor_ndim(Rt); /* the last two axes: rows and columns (after a batch axis) */
    te_iter *ri = te_stage_axis(R, nd - 2), *rj = te_stage_axis(R, nd - 1);
    CK(te_reorder(R, 4, (te_iter *[]){ko, ki, ri, rj}));
    if (k->unroll) {
        CK(te_unroll(R, ri));
        CK(te_unroll(R, rj));
    }
    return TE_OK;
}

/* Threads along an output axis of extent n tiled by `tile` with `per` elements per thread: the
 * extent of the thread loop tile_output makes (a tile larger than the axis shrinks to it). */
static int threads_along(int64_t n, int tile, int per)
{
    int64_t t = tile < n ? tile : n;
    return (int)((t + per - 1) / per);
}

/* Stages A and B of reduction R (read by R only) in shared memory at R's k_o loop. */
static int stage_operands(te_schedule *s, te_tensor *Rt, te_tensor *const *opsv, int nops,
                          const te_cuda_knobs *k, int64_t M, int64_t N)
{
    te_ctx *ctx = te_schedule_ctx(s);
    te_stage *R = te_schedule_stage(s, Rt);
    CKP(R);
    te_iter *ko = te_stage_leaf(R, 0);
    for (int l = 0; l < te_stage_nleaves(R); l++)
        if (te_iter_is_reduce(te_stage_leaf(R, l))) {
            ko = te_stage_leaf(R, l);
            break;
        }
    int ny = threads_along(M, k->tile_m, k->thread_m),
        nx = threads_along(N, k->tile_n, k->thread_n);
    for (int i = 0; i < nops; i++) {
        te_tensor *sh = te_cache_read(s, opsv[i], TE_SCOPE_SHARED, 1, &R);
        CKP(sh);
        te_stage *ss = te_schedule_stage(s, sh);
        CKP(ss);
        CK(te_compute_at(ss, R, ko));
        int nd = te_tensor_ndim(sh);
        if (k->pad > 0 && nd >= 2) {
            /* bank-conflict padding: rows of (row + pad) elements */
            int64_t row = i == 0 ? k->tile_k : k->tile_n;
            CK(te_storage_align(ss, nd - 2, (int)row, k->pad % (int)row));
        }
        int vec = k->vec > 1 ? k->vec : 1;
        /* a vector copy needs whole vectors per row of the tile */
        int64_t row = i == 0 ? k->tile_k : k->tile_n;
        if (row % vec)
            vec = 1;
        CK(coop_copy(s, sh, ny, nx, vec, 0, k->double_buffer));
    }
    return TE_OK;
}

/* ---- Matmul ------------------------------------------------------------------------------------
 */

static int matmul_like(te_schedule *s, te_tensor *C, te_tensor *out, const te_cuda_knobs *k);

int te_cuda_schedule_matmul(te_schedule *s, te_tensor *C, te_tensor *out, const te_cuda_knobs *k)
{
    if (!s || !C)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_mm_knobs(ctx, "matmul", k));
    te_stage *sc = te_schedule_stage(s, C);
    CKP(sc);
    if (te_tensor_ndim(C) != 2 || te_stage_nreduce(sc) != 1)
        return bad_knobs(ctx, "matmul", "C must be a 2-D reduction over one axis");
    return matmul_like(s, C, out, k);
}

int te_cuda_schedule_batch_matmul(te_schedule *s, te_tensor *C, const te_cuda_knobs *k)
{
    if (!s || !C)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_mm_knobs(ctx, "batch_matmul", k));
    te_stage *sc = te_schedule_stage(s, C);
    CKP(sc);
    if (te_tensor_ndim(C) != 3 || te_stage_nreduce(sc) != 1)
        return bad_knobs(ctx, "batch_matmul", "C must be a 3-D reduction over one axis");
    return matmul_like(s, C, NULL, k);
}

int te_cuda_schedule_qkv(te_schedule *s, te_tensor *const outs[3], const te_cuda_knobs *k)
{
    if (!s || !outs)
        return TE_ERR_ARG;
    for (int i = 0; i < 3; i++)
        CK(te_cuda_schedule_matmul(s, outs[i], NULL, k));
    return TE_OK;
}

/* The matmul family's body: C a reduction with rows and columns as its last two axes (after an
 * optional batch axis, bound to blockIdx.z), out its epilogue or NULL. */
static int matmul_like(te_schedule *s, te_tensor *C, te_tensor *out, const te_cuda_knobs *k)
{
    te_ctx *ctx = te_schedule_ctx(s);
    te_stage *sc = te_schedule_stage(s, C);
    CKP(sc);
    int nd = te_tensor_ndim(C);
    te_tensor *ins[2];
    if (inputs_of(C, ins, 2) != 2)
        return bad_knobs(ctx, "matmul", "C must read exactly two input tensors (A and B)");
    te_tensor *acc;
    te_stage *O;
    if (out && out != C) {
        /* epilogue: the reduction is computed in registers at the epilogue's thread loop */
        O = te_schedule_stage(s, out);
        CKP(O);
        acc = C;
    } else {
        acc = te_cache_write(s, C, TE_SCOPE_LOCAL);
        CKP(acc);
        O = sc;
    }
    /* inline anything else between (bias reads are placeholders) */
    te_iter *tx;
    CK(tile_output(O, te_stage_axis(O, nd - 2), te_stage_axis(O, nd - 1), k, k->unroll != 0, &tx));
    if (nd == 3)
        CK(te_bind(O, te_stage_axis(O, 0), TE_BLOCK_Z));
    CK(schedule_accumulator(s, O, tx, acc, k));
    const int64_t *shp = te_tensor_shape(C);
    return stage_operands(s, acc, ins, 2, k, shp[nd - 2], shp[nd - 1]);
}

int te_cuda_schedule_mlp_gate(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_mm_knobs(ctx, "mlp_gate", k));
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    char name[160];
    snprintf(name, sizeof name, "%s_gate", te_tensor_name(Y));
    te_tensor *gate = te_op_find(Y, name);
    snprintf(name, sizeof name, "%s_up", te_tensor_name(Y));
    te_tensor *up = te_op_find(Y, name);
    if (!gate || !up)
        return bad_knobs(ctx, "mlp_gate",
                         "Y must come from te_op_mlp_gate (stages <Y>_gate and "
                         "<Y>_up)");
    te_iter *tx;
    CK(tile_output(O, te_stage_axis(O, 0), te_stage_axis(O, 1), k, k->unroll != 0, &tx));
    te_tensor *gi[2], *ui[2];
    if (inputs_of(gate, gi, 2) != 2 || inputs_of(up, ui, 2) != 2)
        return bad_knobs(ctx, "mlp_gate", "the gate and up stages must each read two tensors");
    CK(schedule_accumulator(s, O, tx, gate, k));
    CK(schedule_accumulator(s, O, tx, up, k));
    const int64_t *shp = te_tensor_shape(Y);
    CK(stage_operands(s, gate, gi, 2, k, shp[0], shp[1]));
    return stage_operands(s, up, ui, 2, k, shp[0], shp[1]);
}

/* ---- Conv2d ------------------------------------------------------------------------------------
 */

static int conv_like(te_schedule *s, te_tensor *Y, te_tensor *conv, const te_cuda_knobs *k);

int te_cuda_schedule_conv2d(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_mm_knobs(ctx, "conv2d", k));
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    if (te_tensor_ndim(Y) != 4 || te_stage_nreduce(O) != 3)
        return bad_knobs(ctx, "conv2d", "Y must be te_op_conv2d's output (NCHW, 3 reduction axes)");
    return conv_like(s, Y, Y, k);
}

int te_cuda_schedule_conv2d_bn_relu(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_mm_knobs(ctx, "conv2d_bn_relu", k));
    char name[160];
    snprintf(name, sizeof name, "%s_conv", te_tensor_name(Y));
    te_tensor *conv = te_op_find(Y, name);
    te_stage *R = conv ? te_schedule_stage(s, conv) : NULL;
    if (!R || te_tensor_ndim(Y) != 4 || te_stage_nreduce(R) != 3)
        return bad_knobs(ctx, "conv2d_bn_relu",
                         "Y must come from te_op_conv2d_bn_relu (NCHW, stage <Y>_conv)");
    return conv_like(s, Y, conv, k);
}

/* Direct convolution: output stage Y tiled like a matmul (output channels x columns), the
 * reduction `conv` (Y itself, accumulated in a local copy, or the producer of Y's epilogue,
 * computed in registers at Y's thread loop) over channel steps of tile_k with the weights and
 * (stage_input) the input tile in shared memory. */
static int conv_like(te_schedule *s, te_tensor *Y, te_tensor *conv, const te_cuda_knobs *k)
{
    te_ctx *ctx = te_schedule_ctx(s);
    /* what the convolution reads: the input (te_op_conv2d's padding stage, or X itself when
     * there is no padding) and the weights, in that order */
    te_tensor *ins[2];
    if (inputs_of(conv, ins, 2) != 2)
        return bad_knobs(ctx, "conv2d", "the convolution must read an input and a weight");
    te_tensor *Xin = ins[0], *W = ins[1];
    if (W->kind != TE_T_PLACEHOLDER) {
        Xin = ins[1];
        W = ins[0];
    }
    te_tensor *YL = conv;
    if (conv == Y) {
        YL = te_cache_write(s, Y, TE_SCOPE_LOCAL);
        CKP(YL);
    }
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    te_iter *n = te_stage_axis(O, 0), *oc = te_stage_axis(O, 1), *oh = te_stage_axis(O, 2),
            *ow = te_stage_axis(O, 3);
    te_iter *boc, *oci, *toc, *roc, *bow, *owi, *tow, *row, *bz;
    CK(te_split(O, oc, k->tile_m, &boc, &oci));
    CK(te_split(O, oci, k->thread_m, &toc, &roc));
    CK(te_split(O, ow, k->tile_n, &bow, &owi));
    CK(te_split(O, owi, k->thread_n, &tow, &row));
    CK(te_reorder(O, 8, (te_iter *[]){n, boc, oh, bow, toc, tow, roc, row}));
    CK(te_fuse(O, n, boc, &bz));
    CK(te_bind(O, bz, TE_BLOCK_Z));
    CK(te_bind(O, oh, TE_BLOCK_Y));
    CK(te_bind(O, bow, TE_BLOCK_X));
    CK(te_bind(O, toc, TE_THREAD_Y));
    CK(te_bind(O, tow, TE_THREAD_X));
    if (k->unroll) {
        CK(te_unroll(O, roc));
        CK(te_unroll(O, row));
    }
    te_stage *R = te_schedule_stage(s, YL);
    CKP(R);
    CK(te_compute_at(R, O, tow));
    te_iter *ico, *ici;
    CK(te_split(R, te_stage_reduce_axis(R, 0), k->tile_k, &ico, &ici));
    CK(te_reorder(R, 8,
                  (te_iter *[]){ico, ici, te_stage_reduce_axis(R, 1), te_stage_reduce_axis(R, 2),
                                te_stage_axis(R, 0), te_stage_axis(R, 1), te_stage_axis(R, 2),
                                te_stage_axis(R, 3)}));
    if (k->unroll) {
        CK(te_unroll(R, te_stage_axis(R, 1)));
        CK(te_unroll(R, te_stage_axis(R, 3)));
    }
    /* The weights tile in shared memory, and the input tile the block's output row needs: the
     * padded input's tile_k channels x KH rows x (tile_n - 1) * stride + (KW - 1) * dilation + 1
     * columns (the halo), staged from the padding stage, which is then inlined into the copy
     * (zeros outside the image). */
    te_tensor *WS = te_cache_read(s, W, TE_SCOPE_SHARED, 1, &R);
    CKP(WS);
    te_tensor *XS = NULL;
    if (k->stage_input) {
        XS = te_cache_read(s, Xin, TE_SCOPE_SHARED, 1, &R);
        CKP(XS);
    }
    /* the padding (bias / scale / shift reads are inputs) */
    CK(inline_elementwise(s, (te_tensor *[]){Y, WS, XS}, 3));
    const int64_t *shp = te_tensor_shape(Y);
    int ny = threads_along(shp[1], k->tile_m, k->thread_m),
        nx = threads_along(shp[3], k->tile_n, k->thread_n);
    te_stage *ws = te_schedule_stage(s, WS);
    CK(te_compute_at(ws, R, ico));
    CK(coop_copy(s, WS, ny, nx, 1, 0, 0));
    if (XS) {
        te_stage *xs = te_schedule_stage(s, XS);
        CK(te_compute_at(xs, R, ico));
        CK(coop_copy(s, XS, ny, nx, 1, 0, 0));
    }
    return TE_OK;
}

/* ---- Row reductions ----------------------------------------------------------------------------
 */

/* The vector width of a row of n elements: the widest of vec, 2 and 1 that divides n. */
static int row_vec(int64_t n, int vec)
{
    while (vec > 1 && n % vec)
        vec /= 2;
    return vec > 1 ? vec : 1;
}

/* Output stage Y over rows: leading axes fused and bound to blocks, the last axis split by
 * `vec` (vectorized: contiguous, aligned float4/float2 accesses, emit_cuda_vec.c) and then by
 * the thread count, so that a warp's threads touch adjacent vectors. Returns the row loop. */
static int bind_rows(te_stage *O, int threads, int vec, te_iter **row)
{
    int nd = te_stage_nleaves(O);
    te_iter *r = te_stage_leaf(O, 0);
    for (int d = 1; d < nd - 1; d++)
        CK(te_fuse(O, r, te_stage_leaf(O, 1), &r));
    te_iter *last = te_stage_leaf(O, nd == 1 ? 0 : 1), *jo, *jt, *jv = NULL;
    if (nd == 1)
        return TE_ERR_SCHEDULE;
    if (vec > 1)
        CK(te_split(O, last, vec, &last, &jv));
    CK(te_split(O, last, threads, &jo, &jt));
    CK(te_bind(O, r, TE_BLOCK_X));
    CK(te_bind(O, jt, TE_THREAD_X));
    if (jv)
        CK(te_vectorize(O, jv));
    *row = r;
    return TE_OK;
}

/* A row reduction stage computed at the row loop with a cross-thread reduction; each thread
 * reduces `vec` adjacent elements per step (unrolled, so that they are one wide load), the
 * threads' vectors adjacent as in the output's loop. */
static int row_reduction(te_schedule *s, te_stage *O, te_iter *row, te_tensor *t, int threads,
                         int vec)
{
    te_ctx *ctx = te_schedule_ctx(s);
    te_stage *st = te_schedule_stage(s, t);
    CKP(st);
    CK(te_compute_at(st, O, row));
    te_iter *k = te_stage_reduce_axis(st, 0), *ko, *kt, *kv = NULL;
    if (vec > 1)
        CK(te_split(st, k, vec, &k, &kv));
    CK(te_split(st, k, threads, &ko, &kt));
    CK(te_reorder(st, kv ? 3 : 2, (te_iter *[]){kt, ko, kv}));
    if (kv)
        CK(te_unroll(st, kv));
    return te_bind_reduce(st, kt, TE_THREAD_X);
}

static int check_rows(te_ctx *ctx, const char *op, const te_cuda_knobs *k)
{
    if (!k || k->threads <= 0 || k->threads > 1024)
        return bad_knobs(ctx, op, "threads must be in 1..1024");
    if (k->vec != 0 && k->vec != 1 && k->vec != 2 && k->vec != 4)
        return bad_knobs(ctx, op, "vec must be 1, 2 or 4");
    return TE_OK;
}

/* The length of Y's rows (its last axis). */
static int64_t row_len(te_tensor *Y) { return te_tensor_shape(Y)[te_tensor_ndim(Y) - 1]; }

/* Whether Y's expression has the stages <Y>_<suffix> for every suffix (the named row
 * templates' check that Y comes from their operator). */
static bool has_stages(te_tensor *Y, int n, const char *const *suffix)
{
    for (int i = 0; i < n; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s_%s", te_tensor_name(Y), suffix[i]);
        if (!te_op_find(Y, name))
            return false;
    }
    return true;
}

/* A library row operator: its stages checked, then the rows template (below). */
static int named_rows(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k, const char *op, int n,
                      const char *const *suffix, const char *why)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_rows(ctx, op, k));
    if (!has_stages(Y, n, suffix))
        return bad_knobs(ctx, op, why);
    return te_cuda_schedule_rows(s, Y, k);
}

int te_cuda_schedule_softmax(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    /* exp inlined; sum, then max, across the threads */
    return named_rows(s, Y, k, "softmax", 3, (const char *[]){"max", "exp", "sum"},
                      "Y must come from te_op_softmax over the last axis");
}

int te_cuda_schedule_layer_norm(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    /* var, then mean */
    return named_rows(s, Y, k, "layer_norm", 2, (const char *[]){"mean", "var"},
                      "Y must come from te_op_layer_norm over the last axis");
}

int te_cuda_schedule_rms_norm(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    return named_rows(s, Y, k, "rms_norm", 1, (const char *[]){"ms"},
                      "Y must come from te_op_rms_norm (stage <Y>_ms)");
}

/* Any row operation: Y elementwise over rows whose stages reduce over the rows' last axis (one
 * axis each, plain or tuple reducers: the one-pass softmax, Welford's layer norm, ...). Every
 * reduction is a cross-thread reduction at the row loop, consumers first; the rest inlined. */
int te_cuda_schedule_rows(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_rows(ctx, "rows", k));
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    int nd = te_tensor_ndim(Y);
    if (te_stage_nreduce(O) > 0 || nd < 2)
        return bad_knobs(ctx, "rows", "Y must be elementwise over rows (two or more axes)");
    const int64_t *ys = te_tensor_shape(Y);
    te_tensor *reds[16];
    int nred = 0;
    for (int i = te_schedule_nstages(s) - 1; i >= 0; i--) { /* consumers first */
        te_stage *st = te_schedule_stage_at(s, i);
        if (st == O || te_stage_nreduce(st) == 0)
            continue;
        te_tensor *t = te_stage_tensor(st);
        const int64_t *ts = te_tensor_shape(t);
        int tn = te_tensor_ndim(t);
        bool rowwise = te_stage_nreduce(st) == 1 && nred < 16 &&
                       te_iter_extent(te_stage_reduce_axis(st, 0)) == ys[nd - 1] &&
                       (tn == nd - 1 || (tn == nd && ts[nd - 1] == 1));
        for (int d = 0; rowwise && d < nd - 1; d++)
            rowwise = ts[d] == ys[d];
        if (!rowwise)
            return bad_knobs(ctx, "rows", "a reduction that is not over the rows' last axis");
        reds[nred++] = t;
    }
    if (!nred)
        return bad_knobs(ctx, "rows", "Y reads no reduction over its rows");
    CK(inline_elementwise(s, &Y, 1));
    te_iter *row;
    int vec = row_vec(row_len(Y), k->vec);
    CK(bind_rows(O, k->threads, vec, &row));
    for (int q = 0; q < nred; q++)
        CK(row_reduction(s, O, row, reds[q], k->threads, vec));
    return TE_OK;
}

/* ---- Window reductions -------------------------------------------------------------------
 */

int te_cuda_schedule_window(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_rows(ctx, "window", k));
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    /* the reduction: Y itself (accumulated in a register copy) or the one stage Y divides
     * (average pooling's <Y>_sum) */
    te_tensor *R = NULL;
    if (te_stage_nreduce(O) > 0) {
        R = te_cache_write(s, Y, TE_SCOPE_LOCAL);
        CKP(R);
        O = te_schedule_stage(s, Y);
    } else {
        for (int i = 0; i < te_schedule_nstages(s); i++) {
            te_stage *p = te_schedule_stage_at(s, i);
            if (te_stage_nreduce(p) == 0)
                continue;
            if (R)
                return bad_knobs(ctx, "window", "Y depends on more than one reduction");
            R = te_stage_tensor(p);
        }
        if (!R)
            return bad_knobs(ctx, "window", "Y is not a reduction and reads none");
    }
    CK(inline_elementwise(s, &Y, 1)); /* padding */
    te_iter *f = te_stage_axis(O, 0), *bo, *t;
    for (int d = 1; d < te_tensor_ndim(Y); d++)
        CK(te_fuse(O, f, te_stage_leaf(O, 1), &f));
    CK(te_split(O, f, k->threads, &bo, &t));
    CK(te_bind(O, bo, TE_BLOCK_X));
    CK(te_bind(O, t, TE_THREAD_X));
    te_stage *rs = te_schedule_stage(s, R);
    CKP(rs);
    CK(te_compute_at(rs, O, t));
    if (k->unroll)
        for (int r = 0; r < te_stage_nreduce(rs); r++)
            CK(te_unroll(rs, te_stage_reduce_axis(rs, r)));
    return TE_OK;
}

int te_cuda_schedule_elementwise(te_schedule *s, te_tensor *Y, const te_cuda_knobs *k)
{
    if (!s || !Y)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    CK(check_rows(ctx, "elementwise", k));
    te_stage *O = te_schedule_stage(s, Y);
    CKP(O);
    if (te_stage_nreduce(O))
        return bad_knobs(ctx, "elementwise", "Y is a reduction");
    CK(inline_elementwise(s, &Y, 1));
    te_iter *f = te_stage_axis(O, 0);
    for (int d = 1; d < te_tensor_ndim(Y); d++)
        CK(te_fuse(O, f, te_stage_leaf(O, 1), &f));
    te_iter *bo, *t, *v = NULL;
    if (k->vec > 1)
        CK(te_split(O, f, k->vec, &f, &v));
    CK(te_split(O, f, k->threads, &bo, &t));
    CK(te_bind(O, bo, TE_BLOCK_X));
    CK(te_bind(O, t, TE_THREAD_X));
    /* vectorized when the vectors tile the tensor (float4 loads and stores, emit_cuda_vec.c),
     * else unrolled (the last vector's lanes guarded) */
    if (v && te_tensor_numel(Y) % k->vec == 0)
        CK(te_vectorize(O, v));
    else if (v)
        CK(te_unroll(O, v));
    return TE_OK;
}

/* ---- Operators and their templates ---------------------------------------------------------
 */

typedef int (*op_sched_fn)(te_schedule *s, te_tensor *const *outs, const te_cuda_knobs *k);

#define ONE(fn)                                                                                    \
    static int one_##fn(te_schedule *s, te_tensor *const *outs, const te_cuda_knobs *k)            \
    {                                                                                              \
        return te_cuda_schedule_##fn(s, outs[0], k);                                               \
    }
ONE(mlp_gate)
ONE(rows)
ONE(conv2d)
ONE(conv2d_bn_relu)
ONE(batch_matmul)
ONE(softmax)
ONE(layer_norm)
ONE(rms_norm)
ONE(window)
ONE(elementwise)
#undef ONE

/* matmul; dense_bias and matmul_bias_act: the reduction <Y>_mm in registers under the
 * epilogue */
static int sched_matmul(te_schedule *s, te_tensor *const *outs, const te_cuda_knobs *k)
{
    char name[160];
    snprintf(name, sizeof name, "%s_mm", te_tensor_name(outs[0]));
    te_tensor *mm = te_op_find(outs[0], name);
    return mm ? te_cuda_schedule_matmul(s, mm, outs[0], k)
              : te_cuda_schedule_matmul(s, outs[0], NULL, k);
}

static int sched_qkv(te_schedule *s, te_tensor *const *outs, const te_cuda_knobs *k)
{
    return te_cuda_schedule_qkv(s, outs, k);
}

/* Library operators (registry names, and tags where they differ) with a GPU template. */
static const struct {
    const char *op, *tmpl;
    op_sched_fn fn;
    int n_out;
} op_table[] = {
    {"matmul", "matmul", sched_matmul, 1},
    {"batch_matmul", "batch_matmul", one_batch_matmul, 1},
    {"dense_bias", "dense", sched_matmul, 1},
    {"dense", "dense", sched_matmul, 1},
    {"matmul_bias_act", "matmul_bias_act", sched_matmul, 1},
    {"mlp_gate", "mlp_gate", one_mlp_gate, 1},
    {"qkv_projection", "qkv", sched_qkv, 3},
    {"conv2d", "conv2d", one_conv2d, 1},
    {"conv2d_bn_relu", "conv2d_bn_relu", one_conv2d_bn_relu, 1},
    {"depthwise_conv2d", "window", one_window, 1},
    {"max_pool2d", "window", one_window, 1},
    {"avg_pool2d", "window", one_window, 1},
    {"softmax", "softmax", one_softmax, 1},
    {"layer_norm", "layer_norm", one_layer_norm, 1},
    {"rms_norm", "rms_norm", one_rms_norm, 1},
    {"softmax_online", "rows", one_rows, 1},
    {"layer_norm_welford", "rows", one_rows, 1},
    {"relu", "elementwise", one_elementwise, 1},
    {"gelu", "elementwise", one_elementwise, 1},
    {"gelu_tanh", "elementwise", one_elementwise, 1},
    {"silu", "elementwise", one_elementwise, 1},
    {"sigmoid", "elementwise", one_elementwise, 1},
    {"tanh", "elementwise", one_elementwise, 1},
    {"add", "elementwise", one_elementwise, 1},
    {"sub", "elementwise", one_elementwise, 1},
    {"mul", "elementwise", one_elementwise, 1},
    {"div", "elementwise", one_elementwise, 1},
};

static int op_entry(const char *op)
{
    for (size_t i = 0; op && i < sizeof op_table / sizeof op_table[0]; i++)
        if (!strcmp(op_table[i].op, op))
            return (int)i;
    return -1;
}

const char *te_cuda_template_for(const char *op, int *n_out)
{
    int e = op_entry(op);
    if (n_out)
        *n_out = e < 0 ? 0 : op_table[e].n_out;
    return e < 0 ? NULL : op_table[e].tmpl;
}

int te_cuda_schedule_op(te_schedule *s, const char *op, int n_out, te_tensor *const *outs,
                        const te_cuda_knobs *k)
{
    if (!s || !outs || n_out < 1)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    int e = op_entry(op);
    if (e < 0)
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED, "no GPU template for operator '%s'",
                                op ? op : "(null)");
    if (n_out != op_table[e].n_out)
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                "the GPU template of '%s' takes %d output(s), not %d", op,
                                op_table[e].n_out, n_out);
    for (int i = 0; i < n_out; i++)
        if (!outs[i])
            return TE_ERR_ARG;
    return op_table[e].fn(s, outs, k);
}
