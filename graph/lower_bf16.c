/*
 * graph/lower_bf16.c: f32 matmuls onto the CPU's bf16 dot products (te_graph_lower_bf16).
 *
 * A matmul (or dense_bias, matmul_bias_act, mlp_gate) node whose right operand B is an f32
 * constant becomes
 *
 *     a' = cast(A) to=bf16                       one elementwise pass, round to nearest even
 *     p  = matmul_vnni(a', Bp)                   bf16 x bf16 -> f32: vdpbf16ps / AMX tdpbf16ps
 *     y  = act(add(p, bias))                     dense_bias, matmul_bias_act: separate nodes
 *     y  = mul(silu(p1), p3)                     mlp_gate: two products of one a'
 *
 * with Bp = B rounded to bf16 (te_f32_to_bf16) and packed once into the blocked VNNI layout
 * [n / 32, k / 2, 32, 2] that the tensorize template's tiles read (B [n, k] of trans_b is
 * transposed while it is packed). The epilogue is left as ordinary elementwise nodes so that
 * fusion puts it back into the product's group, where the tensorize template finds it. The
 * products accumulate in f32, so the only new error is the rounding of A and B to bf16: a
 * relative 2^-8 per element at most (te_graph_bf16_tolerance says what the check allows). That
 * changes results, so the pass is opt-in (`--precision bf16`), never part of te_graph_optimize.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "tessera/tensorize.h"

/* The bf16 intrinsics the rewrite is for, by name prefix; one of them must fit the target. */
static const char *const bf16_intrins[] = {"amx_bf16_", "avx512bf16_", NULL};

int te_graph_bf16_supported(const te_target *tgt)
{
    for (int i = 0; tgt && i < te_tensor_intrin_count(); i++) {
        const te_tensor_intrin *in = te_tensor_intrin_at(i);
        const char *nm = te_tensor_intrin_name(in);
        for (int p = 0; nm && bf16_intrins[p]; p++)
            if (!strncmp(nm, bf16_intrins[p], strlen(bf16_intrins[p])) &&
                te_tensor_intrin_backend(in) == TE_BACKEND_C && te_tensor_intrin_supported(in, tgt))
                return 1;
    }
    return 0;
}

/* What one candidate node needs, read before the graph changes. */
typedef struct cand {
    int node, a, out;
    int nb;       /* products: 1, or 2 for mlp_gate */
    int b[2];     /* the weights */
    int bias;     /* -1: none */
    int trans_b;  /* B is [n, k] */
    char act[16]; /* activation node after the bias ("" none) */
    bool gate;
    int64_t m, k, n;
} cand;

/* Checks node nd; returns NULL when it can be rewritten, "" for a node that is no f32 matmul
 * of the kinds above, else why not. */
static const char *check(te_graph *g, int nd, cand *c)
{
    te__gnode *n = &g->n[nd];
    const char *op = n->op->name;
    bool mm = !strcmp(op, "matmul"), dense = !strcmp(op, "dense_bias");
    bool mba = !strcmp(op, "matmul_bias_act");
    c->gate = !strcmp(op, "mlp_gate");
    if (!mm && !dense && !mba && !c->gate)
        return "";
    c->node = nd, c->a = n->in[0], c->out = n->out[0], c->bias = -1, c->nb = c->gate ? 2 : 1;
    c->b[0] = n->in[1];
    c->b[1] = c->gate ? n->in[2] : -1;
    if (dense || (mba && n->n_in > 2))
        c->bias = n->in[2];
    const te__gvalue *A = &g->v[c->a];
    if (A->dtype != TE_F32)
        return A->dtype == TE_BF16 ? "already bf16" : "its inputs are not f32";
    te_op_params kv;
    if (te_op_params_parse(g->ctx, n->attrs, &kv)) {
        te_ctx_clear_error(g->ctx);
        return "its attributes do not parse";
    }
    if (mm && te__gop_attr_int(n->op, &kv, "trans_a"))
        return "trans_a=1 (A would need a transposing pass)";
    if (mm || c->gate)
        c->trans_b = te__gop_attr_int(n->op, &kv, "trans_b") != 0;
    if (mba) {
        char buf[16];
        const char *a = te__gop_attr_str(n->op, &kv, "act", buf, sizeof buf);
        te_op_act act;
        if (te_op_act_parse(a, &act))
            return "its activation is not known";
        if (act != TE_ACT_NONE)
            snprintf(c->act, sizeof c->act, "%s", te_op_act_name(act));
        if (*c->act && !te__gop_find_library(c->act))
            return "its activation has no graph operator";
    }
    for (int q = 0; q < c->nb; q++) {
        const te__gvalue *B = &g->v[c->b[q]];
        if (B->kind != TE_GRAPH_CONST || !B->data)
            return c->gate ? "a weight is not a constant (its packing would cost a pass per run)"
                           : "B is not a constant (its packing would cost a pass per run)";
    }
    const te__gvalue *B = &g->v[c->b[0]];
    if (A->ndim != 2 || B->ndim != 2)
        return "not a 2-D product";
    c->m = A->shape[0], c->k = A->shape[1], c->n = B->shape[c->trans_b ? 0 : 1];
    if (c->k % 2)
        return "k is not a multiple of 2 (the dot products take 2 bf16 per column)";
    if (c->n % 32)
        return "n is not a multiple of 32 (the tiles' width)";
    return NULL;
}

/* Rounds B (f32 [k, n], or [n, k] with trans_b) to bf16 and packs it into Bp [n / 32, k / 2,
 * 32, 2]. */
static void pack(const te__gvalue *B, const cand *c, uint16_t *bp)
{
    const float *b = B->data;
    int64_t ko = c->k / 2;
    for (int64_t r = 0; r < c->k; r++)
        for (int64_t j = 0; j < c->n; j++) {
            float v = c->trans_b ? b[j * c->k + r] : b[r * c->n + j];
            int64_t jb = j / 32, jj = j % 32;
            bp[((jb * ko + r / 2) * 32 + jj) * 2 + r % 2] = te_f32_to_bf16(v);
        }
}

/* Appends the rewrite of candidate c, reading the cast *a of A when it is >= 0 (made by an
 * earlier rewrite: matmuls of one input share one cast, so that fusion sees the gate's two
 * products on one input) or making it; returns the new output value or a status. */
static int build(te_graph *g, const cand *c, const char *base, int *cast)
{
    uint16_t *bp = malloc(sizeof *bp * (size_t)(c->k * c->n));
    if (!bp)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    int a = *cast >= 0 ? *cast : te__graph_add_node(g, "cast", "to=bf16", 1, &c->a, base, "a_bf16");
    *cast = a;
    int p[2] = {a, a};
    for (int q = 0; q < c->nb && p[q] >= 0; q++) {
        const te__gvalue *B = &g->v[c->b[q]];
        pack(B, c, bp);
        char want[TE__G_NAME + 8], nm[TE__G_NAME], suf[8];
        snprintf(want, sizeof want, "%.30s_bf16", B->name);
        te__graph_unique_name(g, want, nm, sizeof nm);
        int64_t ps[4] = {c->n / 32, c->k / 2, 32, 2};
        int bpid = te_graph_const(g, nm, TE_BF16, 4, ps, bp);
        snprintf(suf, sizeof suf, q ? "up" : c->gate ? "gate" : "mm");
        p[q] = bpid < 0 ? bpid
                        : te__graph_add_node(g, "matmul_vnni", "", 2, (int[]){a, bpid}, base, suf);
    }
    free(bp);
    int t = p[0];
    if (t >= 0 && c->gate) {
        int s = te__graph_add_node(g, "silu", "", 1, &t, base, "silu");
        t = s < 0 || p[1] < 0 ? (s < 0 ? s : p[1])
                              : te__graph_add_node(g, "mul", "", 2, (int[]){s, p[1]}, base, "y");
    }
    if (t >= 0 && c->bias >= 0)
        t = te__graph_add_node(g, "add", "", 2, (int[]){t, c->bias}, base, "bias");
    if (t >= 0 && *c->act)
        t = te__graph_add_node(g, c->act, "", 1, &t, base, c->act);
    return t;
}

int te_graph_lower_bf16(te_graph *g, const te_target *tgt, FILE *log, int *rewritten)
{
    if (!g || !tgt)
        return TE_ERR_ARG;
    if (rewritten)
        *rewritten = 0;
    bool ok = te_graph_bf16_supported(tgt);
    int count = 0, rc = TE_OK;
    /* cast_of[v]: the bf16 cast of value v made so far, -1 none (value ids stay until the
     * compaction at the end; values added on the way are never an A that was cast). */
    int nv0 = g->nv;
    int *cast_of = malloc(sizeof *cast_of * (size_t)(nv0 + 1));
    if (!cast_of)
        return te__graph_error(g, TE_ERR_NOMEM, "out of memory");
    for (int v = 0; v < nv0; v++)
        cast_of[v] = -1;
    for (int nd = 0; nd < g->nn && !rc; nd++) {
        cand c = {0};
        const char *why = check(g, nd, &c);
        if (why && !*why)
            continue; /* not a matmul */
        char base[TE__G_NAME];
        snprintf(base, sizeof base, "%s", g->v[c.out].name);
        const char *opn = g->n[nd].op->name;
        if (!why && !ok)
            why = "the target has no bf16 dot product (AVX-512 BF16 or AMX-BF16)";
        if (why) {
            if (log)
                fprintf(log, "lower_bf16: %s (%s) left as it is: %s\n", base, opn, why);
            continue;
        }
        int first_new = g->nn;
        int cast = c.a < nv0 ? cast_of[c.a] : -1;
        bool shared = cast >= 0;
        int out = build(g, &c, base, &cast);
        if (out >= 0 && c.a < nv0)
            cast_of[c.a] = cast;
        if (out < 0) {
            rc = out;
            break;
        }
        rc = te__graph_take_place(g, c.out, out, first_new, nd, "f32");
        nd += g->nn - first_new; /* past the new nodes */
        count++;
        if (log) {
            char epi[64] = "";
            if (c.gate)
                snprintf(epi, sizeof epi, ", silu(gate) * up epilogue");
            else if (c.bias >= 0 || *c.act)
                snprintf(epi, sizeof epi, ", %s%s%s epilogue", c.bias >= 0 ? "bias" : "",
                         c.bias >= 0 && *c.act ? " + " : "", c.act);
            fprintf(log,
                    "lower_bf16: %s (%s %lldx%lldx%lld%s) -> %s, matmul_vnni on B "
                    "rounded to bf16 and packed once [%lld, %lld, 32, 2]%s%s\n",
                    base, opn, (long long)c.m, (long long)c.k, (long long)c.n,
                    c.trans_b ? ", trans_b" : "",
                    shared ? "the earlier cast of its input" : "cast to bf16",
                    (long long)(c.n / 32), (long long)(c.k / 2), c.gate ? " x 2" : "", epi);
        }
    }
    free(cast_of);
    if (!rc && count)
        rc = te__graph_compact(g, NULL);
    if (rewritten)
        *rewritten = count;
    return rc;
}

double te_graph_bf16_tolerance(int64_t k)
{
    /* Each operand's rounding is a relative error of at most u (uniform in [-u, u] at worst:
     * variance u^2 / 3), independent across elements, so the error of a dot product of
     * operands in [-1, 1) has a standard deviation of at most sqrt(2 / 3) u sqrt(k); three of
     * them, plus the f32 checker's allowance for the f32 accumulation (docs/DTYPES.md). */
    double kk = k > 1 ? (double)k : 1.0;
    return 3.0 * sqrt(2.0 / 3.0) * te_dtype_unit_roundoff(TE_BF16) * sqrt(kk) +
           te_dtype_tolerance(TE_F32, k);
}

double te_graph_value_bf16_tolerance(const te_graph *g, int v, double ref_rms)
{
    if (!g || v < 0 || v >= g->nv)
        return 0;
    /* Per value: the longest bf16 product reduction it descends from (0: none), how many bf16
     * products lie in series on the way (depth) and whether two such values were multiplied. */
    int64_t *k = calloc((size_t)g->nv, sizeof *k);
    int *depth = calloc((size_t)g->nv, sizeof *depth);
    bool *gated = calloc((size_t)g->nv, sizeof *gated);
    if (!k || !gated || !depth) {
        free(k), free(gated), free(depth);
        return 0;
    }
    for (int i = 0; i < g->nv; i++)
        k[i] = g->v[i].dtype == TE_BF16 ? 1 : 0; /* a bf16 cast or constant */
    int last = g->v[v].kind == TE_GRAPH_NODE_OUTPUT ? g->v[v].node : -1;
    for (int nd = 0; nd <= last; nd++) {
        const te__gnode *n = &g->n[nd];
        int64_t kin = 0, nb = 0;
        int din = 0;
        bool gin = false;
        for (int i = 0; i < n->n_in; i++) {
            kin = k[n->in[i]] > kin ? k[n->in[i]] : kin;
            din = depth[n->in[i]] > din ? depth[n->in[i]] : din;
            nb += k[n->in[i]] > 0;
            gin |= gated[n->in[i]];
        }
        const te__gvalue *a = n->n_in ? &g->v[n->in[0]] : NULL;
        if (!strcmp(n->op->name, "matmul_vnni") && a && a->dtype == TE_BF16) {
            kin = a->shape[a->ndim - 1] > kin ? a->shape[a->ndim - 1] : kin;
            din++;
        }
        if ((!strcmp(n->op->name, "mul") || !strcmp(n->op->name, "div")) && nb == 2)
            gin = true;
        for (int o = 0; o < n->n_out; o++) {
            int w = n->out[o];
            k[w] = kin > k[w] ? kin : k[w]; /* a bf16 output (a cast) is marked already */
            depth[w] = din;
            gated[w] = gin;
        }
    }
    double t = 0;
    if (k[v] > 0) {
        /* te_graph_bf16_tolerance bounds ||a o b||_2 by sqrt(k) (operands in [-1, 1)); larger
         * operands (a layer fed by another) have ||a o b||_2 about rms of the product (its
         * terms have random signs): the larger of the two. The gate's products have an rms of
         * about sqrt(rms(z)). Each bf16 product in series adds its rounding once more. */
        double rms = fmax(0.0, ref_rms), prod_rms = gated[v] ? sqrt(rms) : rms;
        double kk = (double)k[v], scale = fmax(1.0, prod_rms / sqrt(kk));
        double f32 = te_dtype_tolerance(TE_F32, k[v]);
        t = (te_graph_bf16_tolerance(k[v]) - f32) * scale * (depth[v] > 1 ? depth[v] : 1) + f32;
        /* A product z = x y of two such values: dz = y dx + x dy, where the check divides by
         * max(1, |z|): an element with |z| <= 1 and |x| large gets x dy. Both are products of
         * one input, so |x| and |y| are about sqrt(rms(z)) (docs/DTYPES.md). */
        if (gated[v])
            t *= 1.0 + 2.0 * sqrt(rms);
    }
    free(k), free(gated), free(depth);
    return t;
}
