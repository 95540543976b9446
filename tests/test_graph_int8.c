/* te_graph_lower_int8 (graph/lower_int8.c): int8 matmuls with constant weights rewritten onto
 * the VNNI matmul. For u8 and i8 activations, u8 and i8 weights, zero points on both sides (and
 * none), matmul_integer and qlinear_matmul followed by a dequantize: the lowered graph, fused,
 * compiled and run, gives exactly the integers of the unlowered graph and of the float64
 * reference interpreter. The rewrite is checked on every machine (lowered for a target that
 * claims VNNI, run with the host's: without the instructions the VNNI matmul is a plain loop
 * nest); on a host with AVX-512 VNNI or AMX it also runs on the dot products. Refusals (B not a
 * constant, n not a multiple of 32, a target without the instructions) leave the node and say
 * why. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "testutil.h"

static tt_rng g_rng;

typedef struct qcase {
    te_dtype da, db;
    int32_t za, zb;
    int qlinear;
    int64_t m, k, n;
} qcase;

/* x (input) -> op(x, W) -> [dequantize_linear] -> output; W constant random bytes. */
static te_graph *build(const qcase *c, const uint8_t *w)
{
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", c->da, 2, (int64_t[]){c->m, c->k});
    int wv = te_graph_const(g, "w", c->db, 2, (int64_t[]){c->k, c->n}, w);
    char at[256];
    int y;
    if (c->qlinear) {
        snprintf(at, sizeof at,
                 "a_scale=0.02,a_zero=%d,b_scale=0.003,b_zero=%d,y_scale=0.05,y_zero=7,y_dtype=u8",
                 (int)c->za, (int)c->zb);
        int q = te_graph_node(g, "qlinear_matmul", at, 2, (int[]){x, wv}, "q");
        y = te_graph_node(g, "dequantize_linear", "scale=0.05,zero=7", 1, &q, "y");
    } else {
        snprintf(at, sizeof at, "a_zero=%d,b_zero=%d", (int)c->za, (int)c->zb);
        y = te_graph_node(g, "matmul_integer", at, 2, (int[]){x, wv}, "y");
    }
    te_graph_output(g, y);
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

/* Fuses, compiles for the host and runs g on x; the output's bytes into out. */
static void run(te_graph *g, const void *x, void *out, int print)
{
    te_fuse_target t;
    te_fuse_target_host(&t);
    te_fuse_plan *p = te_graph_fuse(g, NULL, &t);
    if (!p)
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    for (int i = 0; print && i < te_fuse_plan_group_count(p); i++) {
        const char *note = NULL;
        te_graph_exec_group_from_db(e, i, &note);
        print_message("  group %d: %s\n", i, note ? note : "");
    }
    if (te_graph_run(e, (const void *[]){x}, (void *[]){out}))
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
}

static void check_case(const qcase *c, const te_target *lower_for, int print)
{
    size_t nx = (size_t)(c->m * c->k), nw = (size_t)(c->k * c->n), ny = (size_t)(c->m * c->n);
    uint8_t *x = malloc(nx), *w = malloc(nw);
    for (size_t i = 0; i < nx; i++)
        x[i] = (uint8_t)tt_rng_int(&g_rng, 256);
    for (size_t i = 0; i < nw; i++)
        w[i] = (uint8_t)tt_rng_int(&g_rng, 256);
    te_graph *g0 = build(c, w), *g1 = build(c, w);
    int nrw = -1;
    char log[2048] = "";
    FILE *lf = fmemopen(log, sizeof log - 1, "w");
    if (te_graph_lower_int8(g1, lower_for, lf, &nrw))
        fail_msg("%s", te_graph_errmsg(g1));
    fclose(lf);
    if (nrw != 1)
        fail_msg("not rewritten: %s", log);
    if (print)
        print_message("%s", log);
    /* the node's output keeps its name; the original B is gone, its packed copy there */
    assert_true(te_graph_find(g1, c->qlinear ? "q" : "y") >= 0);
    assert_true(te_graph_find(g1, "w") < 0);
    size_t esz = c->qlinear ? sizeof(float) : sizeof(int32_t);
    unsigned char *y0 = malloc(ny * esz), *y1 = malloc(ny * esz);
    memset(y0, 0xa5, ny * esz);
    memset(y1, 0x5a, ny * esz);
    run(g0, x, y0, 0);
    run(g1, x, y1, print);
    double *ref = malloc(sizeof(double) * ny);
    int out0 = te_graph_output_value(g0, 0);
    assert_int_equal(te_graph_eval_reference(g0, (const void *[]){x}, 1, &out0, &ref), TE_OK);
    for (size_t i = 0; i < ny; i++) {
        double v0, v1;
        if (c->qlinear)
            v0 = ((float *)y0)[i], v1 = ((float *)y1)[i];
        else
            v0 = ((int32_t *)y0)[i], v1 = ((int32_t *)y1)[i];
        if (v0 != v1 || v0 != (c->qlinear ? (double)(float)ref[i] : ref[i]))
            fail_msg("%s %s x %s (zero points %d, %d) %lldx%lldx%lld element %zu: lowered %.9g, "
                     "unlowered %.9g, reference %.9g",
                     c->qlinear ? "qlinear_matmul" : "matmul_integer", te_dtype_str(c->da),
                     te_dtype_str(c->db), (int)c->za, (int)c->zb, (long long)c->m, (long long)c->k,
                     (long long)c->n, i, v1, v0, ref[i]);
    }
    free(ref), free(y0), free(y1), free(x), free(w);
    te_graph_free(g0);
    te_graph_free(g1);
}

/* A target with VNNI: the host's when it has the instructions, else the host's plus the
 * feature names (the graph is only lowered for it; kernels are built for the host). */
static te_target vnni_target(void)
{
    te_target t = te_target_host();
    if (!te_graph_int8_supported(&t)) {
        size_t l = strlen(t.isa);
        snprintf(t.isa + l, sizeof t.isa - l, "%savx512f,avx512_vnni", l ? "," : "");
    }
    return t;
}

static void test_lowered_int8_matmuls_give_the_same_integers(void **state)
{
    (void)state;
    te_target host = te_target_host(), t = vnni_target();
    if (!te_graph_int8_supported(&host))
        print_message("note: this CPU has no AVX-512 VNNI or AMX int8: the lowered graphs run "
                      "as plain loop nests here (the rewrite is still checked)\n");
    const qcase cases[] = {
        {TE_U8, TE_I8, 0, 0, 0, 24, 64, 64},     {TE_U8, TE_I8, 131, 0, 0, 16, 96, 96},
        {TE_U8, TE_U8, 17, 140, 0, 8, 32, 128},  {TE_I8, TE_I8, -5, 3, 0, 12, 48, 32},
        {TE_I8, TE_U8, 9, 255, 0, 10, 64, 64},   {TE_U8, TE_I8, 128, 0, 1, 32, 256, 128},
        {TE_U8, TE_U8, 120, 128, 1, 16, 64, 96}, {TE_I8, TE_I8, -128, -3, 1, 8, 128, 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], &t, i == 5 || i == 7);
}

static void test_lowering_refusals_say_why(void **state)
{
    (void)state;
    te_target t = vnni_target();
    char log[1024] = "";
    int nrw = -1;
    /* n = 40: not a multiple of 32 */
    uint8_t w[64 * 64]; /* big enough for both weights below */
    memset(w, 3, sizeof w);
    qcase c = {TE_U8, TE_I8, 0, 0, 0, 4, 64, 40};
    te_graph *g = build(&c, w);
    FILE *lf = fmemopen(log, sizeof log - 1, "w");
    assert_int_equal(te_graph_lower_int8(g, &t, lf, &nrw), TE_OK);
    fclose(lf);
    assert_int_equal(nrw, 0);
    assert_non_null(strstr(log, "n is not a multiple of 32"));
    te_graph_free(g);
    /* B an input, not a constant */
    g = te_graph_create();
    int x = te_graph_input(g, "x", TE_U8, 2, (int64_t[]){4, 64});
    int b = te_graph_input(g, "b", TE_I8, 2, (int64_t[]){64, 64});
    te_graph_output(g, te_graph_node(g, "matmul_integer", "", 2, (int[]){x, b}, "y"));
    memset(log, 0, sizeof log);
    lf = fmemopen(log, sizeof log - 1, "w");
    assert_int_equal(te_graph_lower_int8(g, &t, lf, &nrw), TE_OK);
    fclose(lf);
    assert_int_equal(nrw, 0);
    assert_non_null(strstr(log, "B is not a constant"));
    te_graph_free(g);
    /* a target without the instructions */
    te_target bare = te_target_host();
    snprintf(bare.isa, sizeof bare.isa, "sse4_2,avx,avx2,fma");
    qcase ok = {TE_U8, TE_I8, 0, 0, 0, 4, 64, 64};
    g = build(&ok, w);
    memset(log, 0, sizeof log);
    lf = fmemopen(log, sizeof log - 1, "w");
    assert_int_equal(te_graph_lower_int8(g, &bare, lf, &nrw), TE_OK);
    fclose(lf);
    assert_int_equal(nrw, 0);
    assert_non_null(strstr(log, "no int8 dot product"));
    assert_int_equal(te_graph_lower_int8(NULL, &bare, NULL, NULL), TE_ERR_ARG);
    assert_int_equal(te_graph_lower_int8(g, NULL, NULL, NULL), TE_ERR_ARG);
    te_graph_free(g);
}

/* The QDQ form of a per-channel quantized matmul, as quantize_static(per_channel=True) writes
 * it: x -> quantize_linear -> dequantize_linear, W (i8 [k, n], or [n, k] read with trans_b)
 * -> dequantize_axis by per-column scales (and zero points when zp), matmul, then
 * quantize_linear when q. */
static te_graph *build_qdq_per_column(int64_t m, int64_t k, int64_t n, const int8_t *w,
                                      const float *sw, const int8_t *zw, int tb, int q)
{
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){m, k});
    int xq = te_graph_node(g, "quantize_linear", "scale=0.03125,zero=120,to=u8", 1, &x, "xq");
    int xd = te_graph_node(g, "dequantize_linear", "scale=0.03125,zero=120", 1, &xq, "xd");
    int64_t ws[2] = {tb ? n : k, tb ? k : n};
    int wv = te_graph_const(g, "w", TE_I8, 2, ws, w);
    int sv = te_graph_const(g, "sw", TE_F32, 1, (int64_t[]){n}, sw);
    int zv = zw ? te_graph_const(g, "zw", TE_I8, 1, (int64_t[]){n}, zw) : -1;
    int wd = te_graph_node(g, "dequantize_axis", tb ? "axis=0" : "axis=1", zw ? 3 : 2,
                           (int[]){wv, sv, zv}, "wd");
    int h = te_graph_node(g, "matmul", tb ? "trans_b=1" : "", 2, (int[]){xd, wd}, "h");
    int y = q ? te_graph_node(g, "quantize_linear", "scale=0.25,zero=100,to=u8", 1, &h, "y") : h;
    te_graph_output(g, y);
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

/* onnxruntime's arithmetic of the fused form: acc = sum (xq - 120)(w - zw[j]) in i32, then
 * f32(acc) * (sa sb[j] / sy) requantized (ties to even, saturated), or f32(acc) * (sa sb[j]). */
static double per_column_want(int64_t m, int64_t k, int64_t n, const uint8_t *xq, const int8_t *w,
                              const float *sw, const int8_t *zw, int tb, int q, int64_t i,
                              int64_t j)
{
    int32_t acc = 0;
    for (int64_t r = 0; r < k; r++) {
        int32_t wv = tb ? w[j * k + r] : w[r * n + j];
        acc += ((int32_t)xq[i * k + r] - 120) * (wv - (zw ? zw[j] : 0));
    }
    (void)m;
    if (!q)
        return (float)acc * (0.03125f * sw[j]);
    float v = (float)acc * (0.03125f * sw[j] / 0.25f);
    float r = nearbyintf(v) + 100;
    return r < 0 ? 0 : r > 255 ? 255 : r;
}

static void test_qdq_per_column_weights_fuse_onto_integer_matmuls(void **state)
{
    (void)state;
    const struct {
        int64_t m, k, n;
        int tb, q, zp;
    } cases[] = {{6, 32, 64, 0, 1, 0},
                 {5, 24, 32, 1, 1, 0},
                 {4, 16, 40, 0, 0, 0},
                 {3, 20, 12, 0, 1, 1},
                 {7, 32, 32, 1, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t m = cases[c].m, k = cases[c].k, n = cases[c].n;
        int tb = cases[c].tb, q = cases[c].q;
        float *x = malloc(sizeof(float) * (size_t)(m * k)), *sw = malloc(sizeof(float) * (size_t)n);
        int8_t *w = malloc((size_t)(k * n)), *zw = cases[c].zp ? malloc((size_t)n) : NULL;
        uint8_t *xq = malloc((size_t)(m * k));
        for (int64_t i = 0; i < m * k; i++) {
            /* multiples of the input scale: quantize_linear gives them exactly */
            int v = (int)tt_rng_int(&g_rng, 256);
            xq[i] = (uint8_t)v;
            x[i] = (float)(v - 120) * 0.03125f;
        }
        for (int64_t i = 0; i < k * n; i++)
            w[i] = (int8_t)((int)tt_rng_int(&g_rng, 256) - 128);
        for (int64_t j = 0; j < n; j++) {
            sw[j] = 0.001f * (float)(1 + tt_rng_int(&g_rng, 20));
            if (zw)
                zw[j] = (int8_t)((int)tt_rng_int(&g_rng, 21) - 10);
        }
        te_graph *g = build_qdq_per_column(m, k, n, w, sw, zw, tb, q);
        char log[1024] = "";
        FILE *lf = fmemopen(log, sizeof log - 1, "w");
        int fused = -1;
        assert_int_equal(te_graph_fuse_qdq(g, lf, &fused), TE_OK);
        fclose(lf);
        if (fused != 1)
            fail_msg("case %zu not fused: %s", c, log);
        assert_non_null(strstr(log, "(per column)"));
        assert_non_null(strstr(log, q ? "requantize_axis" : "dequantize_axis"));
        int has_mm = 0, has_zp = 0;
        for (int i = 0; i < te_graph_node_count(g); i++) {
            has_mm += !strcmp(te_graph_node_op(g, i), "matmul");
            has_zp += !strcmp(te_graph_node_op(g, i), "matmul_integer_zp");
        }
        assert_int_equal(has_mm, 0);
        assert_int_equal(has_zp, zw ? 1 : 0);
        size_t ny = (size_t)(m * n);
        unsigned char *y = malloc(ny * sizeof(float));
        run(g, x, y, 0);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = per_column_want(m, k, n, xq, w, sw, zw, tb, q, i, j);
                double got = q ? (double)y[i * n + j] : (double)((float *)y)[i * n + j];
                if (got != want)
                    fail_msg("case %zu (%lldx%lldx%lld%s%s) element [%lld, %lld]: %.9g, want %.9g",
                             c, (long long)m, (long long)k, (long long)n, tb ? ", trans_b" : "",
                             zw ? ", zero points" : "", (long long)i, (long long)j, got, want);
            }
        te_graph_free(g);
        free(x), free(sw), free(w), free(zw), free(xq), free(y);
    }
}

/* Counts nodes of g applying op. */
static int count_op(te_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < te_graph_node_count(g); i++)
        n += !strcmp(te_graph_node_op(g, i), op);
    return n;
}

/* x -> matmul_integer_zp(x, W, Za, Zb) with W and the per-column Zb constants, Za a constant or
 * (za_in) a graph input [1]. */
static te_graph *build_zp(te_dtype da, te_dtype db, int64_t m, int64_t k, int64_t n,
                          const uint8_t *w, const uint8_t *zb, uint8_t za, int za_in)
{
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", da, 2, (int64_t[]){m, k});
    int zav = za_in ? te_graph_input(g, "za", da, 1, (int64_t[]){1})
                    : te_graph_const(g, "za", da, 1, (int64_t[]){1}, &za);
    int wv = te_graph_const(g, "w", db, 2, (int64_t[]){k, n}, w);
    int zbv = te_graph_const(g, "zb", db, 1, (int64_t[]){n}, zb);
    te_graph_output(g, te_graph_node(g, "matmul_integer_zp", "", 4, (int[]){x, wv, zav, zbv}, "y"));
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
    return g;
}

/* Fuses, compiles for the host and runs g on its inputs; the output's bytes into out. */
static void run_inputs(te_graph *g, const void *const *in, void *out)
{
    te_fuse_target t;
    te_fuse_target_host(&t);
    te_fuse_plan *p = te_graph_fuse(g, NULL, &t);
    te_graph_exec *e = NULL;
    if (!p || te_graph_compile(g, p, NULL, &e) || te_graph_run(e, in, (void *[]){out}))
        fail_msg("%s", te_graph_errmsg(g));
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
}

static void test_matmul_integer_zp_lowered_onto_vnni_gives_the_same_integers(void **state)
{
    (void)state;
    te_target t = vnni_target();
    const struct {
        te_dtype da, db;
        int za_in;
        int64_t m, k, n;
    } cases[] = {{TE_U8, TE_I8, 0, 9, 64, 64},
                 {TE_U8, TE_U8, 1, 6, 32, 96},
                 {TE_I8, TE_I8, 1, 5, 48, 32},
                 {TE_I8, TE_U8, 0, 7, 128, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t m = cases[c].m, k = cases[c].k, n = cases[c].n;
        uint8_t *x = malloc((size_t)(m * k)), *w = malloc((size_t)(k * n)), *zb = malloc((size_t)n);
        for (int64_t i = 0; i < m * k; i++)
            x[i] = (uint8_t)tt_rng_int(&g_rng, 256);
        for (int64_t i = 0; i < k * n; i++)
            w[i] = (uint8_t)tt_rng_int(&g_rng, 256);
        for (int64_t j = 0; j < n; j++)
            zb[j] = (uint8_t)tt_rng_int(&g_rng, 256);
        uint8_t za = (uint8_t)tt_rng_int(&g_rng, 256);
        te_graph *g0 = build_zp(cases[c].da, cases[c].db, m, k, n, w, zb, za, cases[c].za_in);
        te_graph *g1 = build_zp(cases[c].da, cases[c].db, m, k, n, w, zb, za, cases[c].za_in);
        char log[1024] = "";
        FILE *lf = fmemopen(log, sizeof log - 1, "w");
        int nrw = -1;
        assert_int_equal(te_graph_lower_int8(g1, &t, lf, &nrw), TE_OK);
        fclose(lf);
        if (nrw != 1)
            fail_msg("case %zu not rewritten: %s", c, log);
        if (c == 1)
            print_message("%s", log);
        assert_non_null(strstr(log, "per-column zero points folded"));
        assert_int_equal(count_op(g1, "matmul_integer_zp"), 0);
        assert_int_equal(count_op(g1, "matmul_vnni"), 1);
        assert_true(te_graph_find(g1, "y") >= 0);
        size_t ny = (size_t)(m * n);
        int32_t *y0 = malloc(ny * 4), *y1 = malloc(ny * 4);
        memset(y0, 0xa5, ny * 4), memset(y1, 0x5a, ny * 4);
        const void *in[2] = {x, &za};
        run_inputs(g0, in, y0);
        run_inputs(g1, in, y1);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int32_t want = 0;
                for (int64_t r = 0; r < k; r++) {
                    int32_t a = cases[c].da == TE_I8 ? (int8_t)x[i * k + r] : x[i * k + r];
                    int32_t b = cases[c].db == TE_I8 ? (int8_t)w[r * n + j] : w[r * n + j];
                    int32_t a0 = cases[c].da == TE_I8 ? (int8_t)za : za;
                    int32_t b0 = cases[c].db == TE_I8 ? (int8_t)zb[j] : zb[j];
                    want += (a - a0) * (b - b0);
                }
                int64_t e = i * n + j;
                if (y0[e] != want || y1[e] != want)
                    fail_msg("case %zu element [%lld, %lld]: lowered %d, unlowered %d, want %d", c,
                             (long long)i, (long long)j, y1[e], y0[e], want);
            }
        te_graph_free(g0), te_graph_free(g1);
        free(x), free(w), free(zb), free(y0), free(y1);
    }
}

/* quantize_static(per_channel=True) with weight zero points: fuse_qdq makes a matmul_integer_zp
 * (+ requantize_axis), the int8 lowering puts it on matmul_vnni; the bytes stay onnxruntime's. */
static void test_qdq_per_column_zero_points_lowered_after_fuse_qdq(void **state)
{
    (void)state;
    te_target t = vnni_target();
    int64_t m = 6, k = 32, n = 64;
    float *x = malloc(sizeof(float) * (size_t)(m * k)), *sw = malloc(sizeof(float) * (size_t)n);
    int8_t *w = malloc((size_t)(k * n)), *zw = malloc((size_t)n);
    uint8_t *xq = malloc((size_t)(m * k)), *y = malloc((size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) {
        int v = (int)tt_rng_int(&g_rng, 256);
        xq[i] = (uint8_t)v;
        x[i] = (float)(v - 120) * 0.03125f;
    }
    for (int64_t i = 0; i < k * n; i++)
        w[i] = (int8_t)((int)tt_rng_int(&g_rng, 256) - 128);
    for (int64_t j = 0; j < n; j++) {
        sw[j] = 0.001f * (float)(1 + tt_rng_int(&g_rng, 20));
        zw[j] = (int8_t)((int)tt_rng_int(&g_rng, 21) - 10);
    }
    te_graph *g = build_qdq_per_column(m, k, n, w, sw, zw, 0, 1);
    int fused = -1, nrw = -1;
    assert_int_equal(te_graph_fuse_qdq(g, NULL, &fused), TE_OK);
    assert_int_equal(fused, 1);
    assert_int_equal(count_op(g, "matmul_integer_zp"), 1);
    assert_int_equal(te_graph_lower_int8(g, &t, NULL, &nrw), TE_OK);
    assert_int_equal(nrw, 1);
    assert_int_equal(count_op(g, "matmul_integer_zp"), 0);
    assert_int_equal(count_op(g, "matmul"), 0);
    assert_int_equal(count_op(g, "matmul_vnni"), 1);
    assert_int_equal(count_op(g, "requantize_axis"), 1);
    run(g, x, y, 0);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = per_column_want(m, k, n, xq, w, sw, zw, 0, 1, i, j);
            if ((double)y[i * n + j] != want)
                fail_msg("element [%lld, %lld]: %d, want %.9g", (long long)i, (long long)j,
                         y[i * n + j], want);
        }
    te_graph_free(g);
    free(x), free(sw), free(w), free(zw), free(xq), free(y);
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(8));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lowered_int8_matmuls_give_the_same_integers),
        cmocka_unit_test(test_lowering_refusals_say_why),
        cmocka_unit_test(test_qdq_per_column_weights_fuse_onto_integer_matmuls),
        cmocka_unit_test(test_matmul_integer_zp_lowered_onto_vnni_gives_the_same_integers),
        cmocka_unit_test(test_qdq_per_column_zero_points_lowered_after_fuse_qdq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
