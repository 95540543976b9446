/*
 * graph/lower_int8.c: int8 matmuls onto the CPU's int8 dot products (te_graph_lower_int8).
 *
 * A matmul_integer or qlinear_matmul node whose right operand B is a constant becomes
 *
 *     acc = matmul_vnni(A', Bp)                  u8 x s8 -> i32: vpdpbusd / AMX tdpbusd tiles
 *     t   = add(acc, corr)                       corr[j] = -za' sum_k B'[k, j] + k za' zb'
 *     t   = sub(t, mul(sum(i32(A'), axis=-1), zb'))    only when zb' != 0
 *     y   = requantize(t) mult, zero, to         qlinear_matmul only
 *
 * because sum_k (a - za)(b - zb) = sum_k a b - zb sum_k a - za sum_k b + k za zb. The dot
 * products take unsigned bytes on the left and signed ones on the right, so B' = B - 128 with
 * zb' = zb - 128 when B is u8 (done once, on the constant), and A' = A + 128 with za' = za + 128
 * when A is i8 (one elementwise pass). Bp is B' packed once into the blocked VNNI layout
 * [n / nb, k / 4, nb, 4] that the tensorize template's tiles read. The integers are the same as
 * before, bit for bit (i32 wraps exactly as the unlowered sum does for in-range products; the
 * correction is checked to fit in i32), so the rewrite needs no tolerance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "tessera/tensorize.h"

/* The int8 dot-product intrinsics the rewrite is for; one of them must fit the target. */
static const char *const int8_intrins[] = {"amx_u8s8_16x16", "avx512vnni_u8s8_4x32", NULL};

int te_graph_int8_supported(const te_target *tgt)
{
    for (int i = 0; tgt && int8_intrins[i]; i++) {
        const te_tensor_intrin *in = te_tensor_intrin_find(int8_intrins[i]);
        if (in && te_tensor_intrin_supported(in, tgt))
            return 1;
    }
    return 0;
}

/* A new constant (a copy of data) named after base. Returns its id. */
static int add_raw_const(te_graph *g, const char *base, te_dtype dtype, int ndim,
                         const int64_t *shape, const void *data)
{
    char name[TE__G_NAME];
    te__graph_unique_name(g, base, name, sizeof name);
    return te_graph_const(g, name, dtype, ndim, shape, data);
}

/* What one candidate node needs, read before the graph changes. */
typedef struct cand {
    int node, a, b, out;
    int64_t m, k, n, nb;
    int32_t za, zb; /* as shifted: za' for u8 A, zb' for s8 B */
    bool shift_a, qlinear;
    double mult;
    int32_t y_zero;
    char y_dtype[8];
} cand;

/* Checks node nd; returns NULL when it can be rewritten, else why not. */
static const char *check(te_graph *g, int nd, cand *c)
{
    te__gnode *n = &g->n[nd];
    const char *op = n->op->name;
    c->qlinear = !strcmp(op, "qlinear_matmul");
    if (!c->qlinear && strcmp(op, "matmul_integer"))
        return "";
    c->node = nd, c->a = n->in[0], c->b = n->in[1], c->out = n->out[0];
    const te__gvalue *A = &g->v[c->a], *B = &g->v[c->b];
    if (B->kind != TE_GRAPH_CONST || !B->data)
        return "B is not a constant (its packing would cost a pass per run)";
    if (A->ndim != 2 || B->ndim != 2)
        return "not a 2-D product";
    c->m = A->shape[0], c->k = A->shape[1], c->n = B->shape[1];
    if (c->k % 4)
        return "k is not a multiple of 4 (the dot products take 4 bytes per column)";
    /* Blocks as wide as the tiles (32 columns: the VNNI x32 and AMX 16x32 / 32x32 ones), so
     * that a tile's block index is its column loop's (j / 32 with a 32-wide tile). */
    c->nb = c->n % 32 == 0 ? 32 : 0;
    if (!c->nb)
        return "n is not a multiple of 32 (the tiles' width)";
    te_op_params kv;
    if (te_op_params_parse(g->ctx, n->attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return "its attributes do not parse";
    }
    int32_t za = (int32_t)te__gop_attr_int(n->op, &kv, "a_zero");
    int32_t zb = (int32_t)te__gop_attr_int(n->op, &kv, "b_zero");
    c->shift_a = A->dtype == TE_I8;
    c->za = c->shift_a ? za + 128 : za;
    c->zb = B->dtype == TE_U8 ? zb - 128 : zb;
    if (c->qlinear) {
        c->mult = (float)te__gop_attr_f64(n->op, &kv, "a_scale") *
                  (float)te__gop_attr_f64(n->op, &kv, "b_scale") /
                  (float)te__gop_attr_f64(n->op, &kv, "y_scale");
        c->y_zero = (int32_t)te__gop_attr_int(n->op, &kv, "y_zero");
        char buf[16];
        snprintf(c->y_dtype, sizeof c->y_dtype, "%s",
                 te__gop_attr_str(n->op, &kv, "y_dtype", buf, sizeof buf));
    }
    return NULL;
}

/* Packs column j of B (u8 or i8 [k, n]), shifted to s8 (B' = B - 128 when B is u8), into bp,
 * the blocked VNNI layout [n / nb, k / 4, nb, 4]. Returns the column's sum of B'. */
static int64_t pack_column(const te__gvalue *B, int64_t k, int64_t n, int64_t nb, int64_t j,
                           int8_t *bp)
{
    const uint8_t *b = B->data;
    int64_t ko = k / 4, jb = j / nb, jj = j % nb, sum = 0;
    for (int64_t r = 0; r < k; r++) {
        int v = B->dtype == TE_U8 ? b[r * n + j] - 128 : (int8_t)b[r * n + j];
        sum += v;
        bp[((jb * ko + r / 4) * nb + jj) * 4 + r % 4] = (int8_t)v;
    }
    return sum;
}

/* Packs B into Bp (pack_column) and computes the column correction
 * corr[j] = -za' colsum(B')[j] + k za' zb'. False when it leaves i32. */
static bool pack(const te__gvalue *B, const cand *c, int8_t *bp, int32_t *corr)
{
    for (int64_t j = 0; j < c->n; j++) {
        int64_t sum = pack_column(B, c->k, c->n, c->nb, j, bp);
        int64_t cj = -(int64_t)c->za * sum + c->k * (int64_t)c->za * c->zb;
        if (cj < INT32_MIN || cj > INT32_MAX)
            return false;
        corr[j] = (int32_t)cj;
    }
    return true;
}

/* Appends the rewrite of candidate c; returns the new output value or a status. */
static int build(te_graph *g, const cand *c, const char *base)
{
    const te__gvalue *B = &g->v[c->b];
    int8_t *bp = malloc((size_t)(c->k * c->n));
    int32_t *corr = malloc(sizeof *corr * (size_t)c->n);
    int rc = 0;
    if (!bp || !corr) {
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (!pack(B, c, bp, corr)) {
        rc = 0; /* cannot happen for k < 2^16; the caller leaves the node */
        goto out;
    }
    char nm[TE__G_NAME + 8], attrs[96];
    snprintf(nm, sizeof nm, "%.30s_vnni", B->name);
    int64_t ps[4] = {c->n / c->nb, c->k / 4, c->nb, 4};
    int bpid = add_raw_const(g, nm, TE_I8, 4, ps, bp);
    if (bpid < 0) {
        rc = bpid;
        goto out;
    }
    int a = c->a;
    if (c->shift_a) { /* i8 -> u8: a + 128 */
        int ai = te__graph_add_node(g, "cast", "to=i32", 1, &a, base, "a_i32");
        int32_t k128 = 128;
        snprintf(nm, sizeof nm, "%.30s_128", base);
        int cid = ai < 0 ? ai : add_raw_const(g, nm, TE_I32, 1, (int64_t[]){1}, &k128);
        int as = cid < 0 ? cid : te__graph_add_node(g, "add", "", 2, (int[]){ai, cid}, base, "a_s");
        a = as < 0 ? as : te__graph_add_node(g, "cast", "to=u8", 1, &as, base, "a_u8");
        if (a < 0) {
            rc = a;
            goto out;
        }
    }
    int t = te__graph_add_node(g, "matmul_vnni", "", 2, (int[]){a, bpid}, base, "acc");
    bool any = false;
    for (int64_t j = 0; j < c->n && !any; j++)
        any = corr[j] != 0;
    if (t >= 0 && any) {
        snprintf(nm, sizeof nm, "%.30s_corr", base);
        int cid = add_raw_const(g, nm, TE_I32, 1, (int64_t[]){c->n}, corr);
        t = cid < 0 ? cid : te__graph_add_node(g, "add", "", 2, (int[]){t, cid}, base, "acc_c");
    }
    if (t >= 0 && c->zb) { /* - zb' * rowsum(A') */
        int ai = te__graph_add_node(g, "cast", "to=i32", 1, &a, base, "a_rows_i32");
        int rs = ai < 0
                     ? ai
                     : te__graph_add_node(g, "sum", "axis=-1,keepdims=1", 1, &ai, base, "a_rows");
        snprintf(nm, sizeof nm, "%.30s_zb", base);
        int zid = rs < 0 ? rs : add_raw_const(g, nm, TE_I32, 1, (int64_t[]){1}, &c->zb);
        int rz = zid < 0 ? zid : te__graph_add_node(g, "mul", "", 2, (int[]){rs, zid}, base, "rz");
        t = rz < 0 ? rz : te__graph_add_node(g, "sub", "", 2, (int[]){t, rz}, base, "acc_z");
    }
    if (t >= 0 && c->qlinear) {
        snprintf(attrs, sizeof attrs, "mult=%.17g,zero=%d,to=%s", c->mult, (int)c->y_zero,
                 c->y_dtype);
        t = te__graph_add_node(g, "requantize", attrs, 1, &t, base, "q");
    }
    rc = t;
out:
    free(bp), free(corr);
    return rc;
}

/* ---- matmul_integer_zp: zero points as tensors (per column, or computed at run time) ------- */

static int vec_const(te_graph *g, const char *base, const char *suffix, te_dtype dtype, int64_t n,
                     const void *data);

/* What a matmul_integer_zp candidate needs: B and Zb constants, Za a constant or a computed
 * value with one element (DynamicQuantizeLinear's). */
typedef struct zcand {
    int node, a, b, za_v, out;
    int64_t m, k, n, nb;
    bool shift_a, za_const;
    int32_t za;  /* za' (shifted for i8 A) when constant */
    int32_t *zb; /* zb'[j] (shifted for u8 B), n of them */
} zcand;

/* Element i (0 for a one-element tensor) of a u8 / i8 constant as an integer. */
static int32_t byte_at(const te__gvalue *v, int64_t i)
{
    int64_t j = v->shape[0] == 1 ? 0 : i;
    return v->dtype == TE_U8 ? ((const uint8_t *)v->data)[j] : ((const int8_t *)v->data)[j];
}

/* Checks matmul_integer_zp node nd; NULL when it can be rewritten (c->zb then allocated), "" when
 * it is not such a node, else why not. */
static const char *check_zp(te_graph *g, int nd, zcand *c)
{
    te__gnode *n = &g->n[nd];
    if (strcmp(n->op->name, "matmul_integer_zp") || n->n_in != 4)
        return "";
    c->node = nd, c->a = n->in[0], c->b = n->in[1], c->za_v = n->in[2], c->out = n->out[0];
    const te__gvalue *A = &g->v[c->a], *B = &g->v[c->b], *Za = &g->v[n->in[2]],
                     *Zb = &g->v[n->in[3]];
    if (B->kind != TE_GRAPH_CONST || !B->data)
        return "B is not a constant (its packing would cost a pass per run)";
    if (Zb->kind != TE_GRAPH_CONST || !Zb->data)
        return "B's zero point is computed (the column correction is folded from constants)";
    if (A->ndim != 2 || B->ndim != 2 || Za->ndim != 1 || Zb->ndim != 1)
        return "not a 2-D product";
    c->m = A->shape[0], c->k = A->shape[1], c->n = B->shape[1];
    if (Za->shape[0] != 1)
        return "A's zero point is per row";
    if (c->k % 4)
        return "k is not a multiple of 4 (the dot products take 4 bytes per column)";
    c->nb = c->n % 32 == 0 ? 32 : 0;
    if (!c->nb)
        return "n is not a multiple of 32 (the tiles' width)";
    /* |rowsum(A')| <= 255 k and |zb'| <= 256; za' <= 255 times |k zb' - colsum(B')| <= 384 k. */
    if (c->k > 21000)
        return "k is above 21000 (the zero-point terms could leave i32)";
    c->shift_a = A->dtype == TE_I8;
    c->za_const = Za->kind == TE_GRAPH_CONST && Za->data;
    if (c->za_const)
        c->za = byte_at(Za, 0) + (c->shift_a ? 128 : 0);
    c->zb = malloc(sizeof *c->zb * (size_t)c->n);
    if (!c->zb)
        return "out of memory";
    for (int64_t j = 0; j < c->n; j++)
        c->zb[j] = byte_at(Zb, j) - (B->dtype == TE_U8 ? 128 : 0);
    return NULL;
}

/* Appends the rewrite of zp candidate c:
 *
 *     acc = matmul_vnni(A', Bp)
 *     acc = sub(acc, mul(sum(i32(A'), axis=-1), zb'[1, n]))      when some zb'[j] != 0
 *     acc = add(acc, za' v)    v[j] = k zb'[j] - colsum(B')[j]   (a constant when za is one)
 *
 * Returns the new output value or a status. */
static int build_zp(te_graph *g, const zcand *c, const char *base)
{
    const te__gvalue *B = &g->v[c->b];
    int8_t *bp = malloc((size_t)(c->k * c->n));
    int32_t *v = malloc(sizeof *v * (size_t)c->n);
    int rc = 0;
    if (!bp || !v) {
        rc = te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t j = 0; j < c->n; j++)
        v[j] = (int32_t)(c->k * (int64_t)c->zb[j] - pack_column(B, c->k, c->n, c->nb, j, bp));
    char nm[TE__G_NAME + 8];
    snprintf(nm, sizeof nm, "%.30s_vnni", B->name);
    int64_t ps[4] = {c->n / c->nb, c->k / 4, c->nb, 4};
    int bpid = add_raw_const(g, nm, TE_I8, 4, ps, bp);
    if (bpid < 0) {
        rc = bpid;
        goto out;
    }
    int a = c->a;
    if (c->shift_a) { /* i8 -> u8: a + 128 */
        int ai = te__graph_add_node(g, "cast", "to=i32", 1, &a, base, "a_i32");
        int32_t k128 = 128;
        int cid = ai < 0 ? ai : vec_const(g, base, "128", TE_I32, 1, &k128);
        int as = cid < 0 ? cid : te__graph_add_node(g, "add", "", 2, (int[]){ai, cid}, base, "a_s");
        a = as < 0 ? as : te__graph_add_node(g, "cast", "to=u8", 1, &as, base, "a_u8");
        if (a < 0) {
            rc = a;
            goto out;
        }
    }
    int t = te__graph_add_node(g, "matmul_vnni", "", 2, (int[]){a, bpid}, base, "acc");
    bool anyzb = false;
    for (int64_t j = 0; j < c->n; j++)
        anyzb = anyzb || c->zb[j] != 0;
    if (t >= 0 && anyzb) { /* - rowsum(A') zb'[j] */
        int ai = te__graph_add_node(g, "cast", "to=i32", 1, &a, base, "a_rows_i32");
        int rs = ai < 0
                     ? ai
                     : te__graph_add_node(g, "sum", "axis=-1,keepdims=1", 1, &ai, base, "a_rows");
        snprintf(nm, sizeof nm, "%.30s_zb", base);
        int zid = rs < 0 ? rs : add_raw_const(g, nm, TE_I32, 2, (int64_t[]){1, c->n}, c->zb);
        int rz = zid < 0 ? zid : te__graph_add_node(g, "mul", "", 2, (int[]){rs, zid}, base, "rz");
        t = rz < 0 ? rz : te__graph_add_node(g, "sub", "", 2, (int[]){t, rz}, base, "acc_z");
    }
    if (t >= 0 && c->za_const) { /* + za' v[j], folded */
        bool any = false;
        for (int64_t j = 0; j < c->n; j++) {
            v[j] *= c->za;
            any = any || v[j] != 0;
        }
        int cid = !any ? 0 : vec_const(g, base, "corr", TE_I32, c->n, v);
        t = !any || cid < 0 ? (any ? cid : t)
                            : te__graph_add_node(g, "add", "", 2, (int[]){t, cid}, base, "acc_c");
    } else if (t >= 0) { /* + za' v[j] with za computed: [1] x [n] */
        int zi = te__graph_add_node(g, "cast", "to=i32", 1, &c->za_v, base, "za_i32");
        if (zi >= 0 && c->shift_a) {
            int32_t k128 = 128;
            int cid = vec_const(g, base, "za128", TE_I32, 1, &k128);
            zi =
                cid < 0 ? cid : te__graph_add_node(g, "add", "", 2, (int[]){zi, cid}, base, "za_s");
        }
        int vid = zi < 0 ? zi : vec_const(g, base, "colv", TE_I32, c->n, v);
        int cz =
            vid < 0 ? vid : te__graph_add_node(g, "mul", "", 2, (int[]){zi, vid}, base, "corr");
        t = cz < 0 ? cz : te__graph_add_node(g, "add", "", 2, (int[]){t, cz}, base, "acc_c");
    }
    rc = t;
out:
    free(bp), free(v);
    return rc;
}

/* Rewrites matmul_integer_zp node nd when it can; 1 when rewritten, 0 when not, <0 on error. */
static int lower_zp_one(te_graph *g, int nd, bool ok, FILE *log)
{
    zcand c = {0};
    const char *why = check_zp(g, nd, &c);
    if (why && !*why)
        return 0;
    char base[TE__G_NAME];
    snprintf(base, sizeof base, "%s", g->v[c.out].name);
    if (!why && !ok)
        why = "the target has no int8 dot product (AVX-512 VNNI or AMX)";
    if (why) {
        if (log)
            fprintf(log, "lower_int8: %s (matmul_integer_zp) left as it is: %s\n", base, why);
        free(c.zb);
        return 0;
    }
    int first_new = g->nn;
    int out = build_zp(g, &c, base);
    int rc = out < 0 ? out : te__graph_take_place(g, c.out, out, first_new, nd, "int");
    if (!rc && log)
        fprintf(log,
                "lower_int8: %s (matmul_integer_zp %lldx%lldx%lld) -> matmul_vnni on B packed "
                "once [%lld, %lld, %lld, 4] s8%s, per-column zero points folded, A's zero point "
                "%s\n",
                base, (long long)c.m, (long long)c.k, (long long)c.n, (long long)(c.n / c.nb),
                (long long)(c.k / 4), (long long)c.nb, c.shift_a ? ", A shifted to u8" : "",
                c.za_const ? "folded" : "computed: times the column sums at run time");
    free(c.zb);
    return rc ? rc : 1;
}

int te_graph_lower_int8(te_graph *g, const te_target *tgt, FILE *log, int *rewritten)
{
    if (!g || !tgt)
        return TE_ERR_ARG;
    if (rewritten)
        *rewritten = 0;
    bool ok = te_graph_int8_supported(tgt);
    int count = 0, rc = TE_OK;
    for (int nd = 0; nd < g->nn && !rc; nd++) {
        int before = g->nn, z = lower_zp_one(g, nd, ok, log);
        if (z < 0) {
            rc = z;
            break;
        }
        if (z > 0) {
            nd += g->nn - before; /* past the new nodes */
            count++;
            continue;
        }
        cand c = {0};
        const char *why = check(g, nd, &c);
        if (why && !*why)
            continue; /* not an int8 matmul */
        char base[TE__G_NAME];
        snprintf(base, sizeof base, "%s", g->v[c.out].name);
        if (!why && !ok)
            why = "the target has no int8 dot product (AVX-512 VNNI or AMX)";
        if (why) {
            if (log)
                fprintf(log, "lower_int8: %s (%s) left as it is: %s\n", base, g->n[nd].op->name,
                        why);
            continue;
        }
        const char *opn = g->n[nd].op->name;
        int first_new = g->nn;
        int out = build(g, &c, base);
        if (out < 0) {
            rc = out;
            break;
        }
        if (out == 0) {
            if (log)
                fprintf(log, "lower_int8: %s left as it is: its zero-point correction leaves i32\n",
                        base);
            continue;
        }
        rc = te__graph_take_place(g, c.out, out, first_new, nd, "int");
        nd += g->nn - first_new; /* past the new nodes */
        count++;
        if (log)
            fprintf(log,
                    "lower_int8: %s (%s %lldx%lldx%lld) -> matmul_vnni on B packed once "
                    "[%lld, %lld, %lld, 4] s8%s%s%s\n",
                    base, opn, (long long)c.m, (long long)c.k, (long long)c.n,
                    (long long)(c.n / c.nb), (long long)(c.k / 4), (long long)c.nb,
                    c.shift_a ? ", A shifted to u8" : "",
                    c.zb ? ", row sums for B's zero point" : "",
                    c.qlinear ? ", requantize epilogue" : "");
    }
    if (!rc && count)
        rc = te__graph_compact(g, NULL);
    if (rewritten)
        *rewritten = count;
    return rc;
}

/* ---- QDQ: dequantize -> matmul (-> quantize) onto integer arithmetic ----------------------- */

/* The producer node of v when it applies op `name`, else -1. */
static int producer_is(const te_graph *g, int v, const char *name)
{
    int p = g->v[v].node;
    return p >= 0 && !strcmp(g->n[p].op->name, name) ? p : -1;
}

/* Scale and zero point of a dequantize_linear / quantize_linear node. */
static void qparams(te_graph *g, int nd, double *scale, int32_t *zero, char *to, size_t to_n)
{
    te_op_params kv;
    *scale = 1, *zero = 0;
    if (te_op_params_parse(g->ctx, g->n[nd].attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return;
    }
    *scale = te__gop_attr_f64(g->n[nd].op, &kv, "scale");
    *zero = (int32_t)te__gop_attr_int(g->n[nd].op, &kv, "zero");
    if (to) {
        char buf[16];
        snprintf(to, to_n, "%s", te__gop_attr_str(g->n[nd].op, &kv, "to", buf, sizeof buf));
    }
}

static bool is_byte(const te_graph *g, int v)
{
    return g->v[v].dtype == TE_U8 || g->v[v].dtype == TE_I8;
}

/* The per-column parameters of a dequantize_axis node db on B (its scale, and zero point when
 * it has one, constants along B's column axis: 1 for B [k, n], 0 for B [n, k] under trans_b):
 * ncol f32 scales into sc and zero points into zp (zeros when absent). False when db is not
 * such a node. */
static bool column_params(const te_graph *g, int db, bool tb, int64_t ncol, float *sc, int32_t *zp)
{
    const te__gnode *d = &g->n[db];
    te_op_params kv;
    if (te_op_params_parse(g->ctx, d->attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return false;
    }
    const te__gvalue *B = &g->v[d->in[0]];
    int axis = (int)te__gop_attr_int(d->op, &kv, "axis");
    if (axis < 0)
        axis += B->ndim;
    if (B->ndim != 2 || axis != (tb ? 0 : 1))
        return false;
    for (int i = 1; i < d->n_in; i++) {
        const te__gvalue *p = &g->v[d->in[i]];
        if (p->kind != TE_GRAPH_CONST || !p->data || p->ndim != 1 ||
            (p->shape[0] != 1 && p->shape[0] != ncol))
            return false;
    }
    const te__gvalue *S = &g->v[d->in[1]];
    const te__gvalue *Z = d->n_in > 2 ? &g->v[d->in[2]] : NULL;
    for (int64_t j = 0; j < ncol; j++) {
        int64_t sj = S->shape[0] == 1 ? 0 : j, zj = Z && Z->shape[0] == 1 ? 0 : j;
        sc[j] = ((const float *)S->data)[sj];
        zp[j] = !Z                  ? 0
                : Z->dtype == TE_U8 ? ((const uint8_t *)Z->data)[zj]
                                    : ((const int8_t *)Z->data)[zj];
    }
    return true;
}

/* A new 1-D constant [n] of dtype dtype named after base and suffix; its id or a status. */
static int vec_const(te_graph *g, const char *base, const char *suffix, te_dtype dtype, int64_t n,
                     const void *data)
{
    char nm[TE__G_NAME + 8];
    snprintf(nm, sizeof nm, "%.30s_%s", base, suffix);
    return add_raw_const(g, nm, dtype, 1, (int64_t[]){n}, data);
}

/* The per-column rewrite: acc = matmul_integer(a, b) (matmul_integer_zp when B's zero points
 * differ by column), then requantize_axis by f32(sa) f32(sb[j]) / f32(sy) when the product is
 * requantized (q), else dequantize_axis by f32(sa) f32(sb[j]): onnxruntime's per-column
 * QLinearMatMul and MatMulIntegerToFloat arithmetic. The output value or a status. */
static int per_column(te_graph *g, const char *base, int a, int b, double sa, int32_t za,
                      const float *sc, const int32_t *zp, bool zcol, int64_t ncol, bool q,
                      double sy, int32_t zy, const char *to)
{
    char attrs[96];
    int acc;
    if (zcol) {
        te_dtype bd = g->v[b].dtype, ad = g->v[a].dtype;
        unsigned char za1 = (unsigned char)za, *zb = malloc((size_t)ncol);
        if (!zb)
            return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        for (int64_t j = 0; j < ncol; j++)
            zb[j] = (unsigned char)zp[j];
        int zai = vec_const(g, base, "a_zero", ad, 1, &za1);
        int zbi = zai < 0 ? zai : vec_const(g, base, "b_zero", bd, ncol, zb);
        free(zb);
        acc = zbi < 0 ? zbi
                      : te__graph_add_node(g, "matmul_integer_zp", "", 4, (int[]){a, b, zai, zbi},
                                           base, "acc");
    } else {
        snprintf(attrs, sizeof attrs, "a_zero=%d,b_zero=%d", (int)za, (int)zp[0]);
        acc = te__graph_add_node(g, "matmul_integer", attrs, 2, (int[]){a, b}, base, "acc");
    }
    float *m = acc < 0 ? NULL : malloc(sizeof *m * (size_t)ncol);
    if (acc < 0 || !m)
        return acc < 0 ? acc : te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < ncol; j++)
        m[j] = q ? (float)sa * sc[j] / (float)sy : (float)sa * sc[j];
    int mi = vec_const(g, base, q ? "mult" : "scale", TE_F32, ncol, m);
    free(m);
    if (mi < 0)
        return mi;
    if (q) {
        snprintf(attrs, sizeof attrs, "axis=-1,zero=%d,to=%s", (int)zy, to);
        return te__graph_add_node(g, "requantize_axis", attrs, 2, (int[]){acc, mi}, base, "q");
    }
    return te__graph_add_node(g, "dequantize_axis", "axis=-1", 2, (int[]){acc, mi}, base, "y");
}

/* Rewrites matmul node nd when both operands are dequantized bytes (A possibly reshaped after
 * its dequantize). Returns 1 when rewritten, 0 when not applicable, <0 on error. */
static int fuse_qdq_one(te_graph *g, int nd, FILE *log)
{
    te__gnode *n = &g->n[nd];
    if (strcmp(n->op->name, "matmul") || n->n_in != 2)
        return 0;
    te_op_params kv;
    if (te_op_params_parse(g->ctx, n->attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return 0;
    }
    if (te__gop_attr_int(n->op, &kv, "trans_a"))
        return 0;
    bool tb = te__gop_attr_int(n->op, &kv, "trans_b") != 0;
    int va = n->in[0], vb = n->in[1], out = n->out[0];
    int rs = producer_is(g, va, "reshape");
    int da = producer_is(g, rs >= 0 ? g->n[rs].in[0] : va, "dequantize_linear");
    int db = producer_is(g, vb, "dequantize_linear");
    int dba = db < 0 ? producer_is(g, vb, "dequantize_axis") : -1;
    if (da < 0 || (db < 0 && dba < 0) || !is_byte(g, g->n[da].in[0]) ||
        !is_byte(g, g->n[db >= 0 ? db : dba].in[0]))
        return 0;
    double sa, sb = 1, sy = 1;
    int32_t za, zb = 0, zy = 0;
    qparams(g, da, &sa, &za, NULL, 0);
    /* Per-column weights (quantize_static's per_channel): scales and zero points per column of
     * the product, read by a per-column epilogue. */
    int64_t ncol = g->v[out].shape[g->v[out].ndim - 1];
    float *csc = NULL;
    int32_t *czp = NULL;
    bool zcol = false;
    if (dba >= 0) {
        if (ncol < 1)
            return 0;
        csc = malloc(sizeof *csc * (size_t)ncol);
        czp = malloc(sizeof *czp * (size_t)ncol);
        if (!csc || !czp || !column_params(g, dba, tb, ncol, csc, czp)) {
            free(csc), free(czp);
            return csc && czp ? 0 : te__graph_error(g, TE_ERR_NOMEM, "out of memory");
        }
        for (int64_t j = 0; j < ncol; j++)
            zcol = zcol || czp[j] != czp[0];
        zb = czp[0];
        db = dba;
    } else
        qparams(g, db, &sb, &zb, NULL, 0);
    /* A quantize_linear as the product's only reader: the whole chain is a QLinearMatMul. */
    int q = -1;
    char to[16] = "";
    if (!g->v[out].is_output && te_graph_value_use_count(g, out) == 1)
        for (int r = nd + 1; r < g->nn && q < 0; r++)
            if (g->n[r].n_in >= 1 && g->n[r].in[0] == out &&
                !strcmp(g->n[r].op->name, "quantize_linear"))
                q = r;
    if (q >= 0)
        qparams(g, q, &sy, &zy, to, sizeof to);
    char base[TE__G_NAME], attrs[320];
    snprintf(base, sizeof base, "%s", g->v[q >= 0 ? g->n[q].out[0] : out].name);
    int first_new = g->nn, a = g->n[da].in[0], b = g->n[db].in[0];
    if (rs >= 0) {
        char ra[TE__G_ATTRS];
        snprintf(ra, sizeof ra, "%s", g->n[rs].attrs);
        a = te__graph_add_node(g, "reshape", ra, 1, &a, base, "a_rows");
    }
    int y;
    if (a >= 0 && tb) /* B [n, k]: transposed bytes (folded when B is a constant) */
        b = te__graph_add_node(g, "transpose", "perm=1:0", 1, &b, base, "b_t");
    if (a < 0 || b < 0) {
        free(csc), free(czp);
        return a < 0 ? a : b;
    }
    if (csc) {
        y = per_column(g, base, a, b, sa, za, csc, czp, zcol, ncol, q >= 0, sy, zy, to);
        free(csc), free(czp);
    } else if (q >= 0) {
        snprintf(attrs, sizeof attrs,
                 "a_scale=%.17g,a_zero=%d,b_scale=%.17g,b_zero=%d,y_scale=%.17g,y_zero=%d,"
                 "y_dtype=%s",
                 sa, (int)za, sb, (int)zb, sy, (int)zy, to);
        y = te__graph_add_node(g, "qlinear_matmul", attrs, 2, (int[]){a, b}, base, "q");
    } else {
        snprintf(attrs, sizeof attrs, "a_zero=%d,b_zero=%d", (int)za, (int)zb);
        int acc = te__graph_add_node(g, "matmul_integer", attrs, 2, (int[]){a, b}, base, "acc");
        /* sa sb in f32, as onnxruntime's MatMulIntegerToFloat scales its accumulator */
        snprintf(attrs, sizeof attrs, "scale=%.17g,zero=0", (double)((float)sa * (float)sb));
        y = acc < 0 ? acc : te__graph_add_node(g, "dequantize_linear", attrs, 1, &acc, base, "y");
    }
    if (y < 0)
        return y;
    int rc = te__graph_take_place(g, q >= 0 ? g->n[q].out[0] : out, y, first_new, nd, "f32");
    if (rc)
        return rc;
    if (log)
        fprintf(log, "fuse_qdq: %s: dequantize x dequantize%s -> matmul%s onto %s%s\n", base,
                dba >= 0 ? " (per column)" : "", q >= 0 ? " -> quantize" : "",
                q >= 0 && dba < 0 ? "qlinear_matmul" : "matmul_integer",
                dba >= 0 ? (q >= 0 ? " + requantize_axis" : " + dequantize_axis") : "");
    return 1;
}

int te_graph_fuse_qdq(te_graph *g, FILE *log, int *fused)
{
    if (!g)
        return TE_ERR_ARG;
    int count = 0, rc = TE_OK;
    for (int nd = 0; nd < g->nn && !rc; nd++) {
        int before = g->nn, r = fuse_qdq_one(g, nd, log);
        if (r < 0)
            rc = r;
        else if (r > 0) {
            count++;
            nd += g->nn - before; /* past the new nodes, which follow nd */
        }
    }
    if (!rc && count)
        rc = te__graph_compact(g, NULL);
    if (fused)
        *fused = count;
    return rc;
}
