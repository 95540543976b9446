/* Tests for the C emitter (backends/c/emit_*.c, and target.c, module.c): hand-built lowered
 * functions go through the C target's last passes and are emitted, compiled with the system
 * compiler for the host, run, and checked; the source emitted for a fixed AVX-512 target is
 * checked for the constructs it should use. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/c_backend.h"
#include "backends/c/cc.h"
#include "backends/emit_common.h"
#include "schedule/passes.h"
#include "te/internal.h"
#include "testutil.h"

/* ---- IR building helpers ------------------------------------------------------------------- */

static te_buf *arg_buf(te_ctx *ctx, const char *name, te_dtype dt, int64_t n, int index)
{
    te_buf *b = te__buf_new(ctx, name, dt, 1, (int64_t[]){n}, TE_SCOPE_GLOBAL);
    assert_non_null(b);
    b->arg_index = index;
    return b;
}

static te_expr *I(te_ctx *ctx, int64_t v) { return te_int(ctx, v); }

static te_expr *ld(te_ctx *ctx, te_buf *b, te_expr *idx) { return te__load(ctx, b, 1, &idx); }

static te_stmt *st(te_ctx *ctx, te_buf *b, te_expr *idx, te_expr *v)
{
    return te__store(ctx, b, 1, &idx, v);
}

static te_lowered *mk_fn(te_ctx *ctx, const char *name, int n_args, te_buf **args, int n_out,
                         te_stmt *body)
{
    te_lowered *f = te__alloc(ctx, sizeof *f);
    assert_non_null(f);
    assert_non_null(body);
    f->name = name;
    f->n_args = n_args;
    f->args = te__alloc(ctx, sizeof(te_buf *) * (size_t)n_args);
    memcpy(f->args, args, sizeof(te_buf *) * (size_t)n_args);
    f->n_outputs = n_out;
    f->body = body;
    f->header = "test kernel\nschedule: by hand";
    return f;
}

/* for (o, 0, n / lanes) vectorized (v, 0, lanes) { body(o * lanes + v) } */
typedef te_stmt *(*body_fn)(te_ctx *ctx, te_expr *i, void *user);

static te_stmt *vec_loop(te_ctx *ctx, int64_t n, int lanes, te_for_kind outer, body_fn fn,
                         void *user)
{
    te_expr *o = te__loop_var(ctx, "i_o", n / lanes);
    te_expr *v = te__loop_var(ctx, "i_i", lanes);
    te_expr *i = te_add(ctx, te_mul(ctx, o, I(ctx, lanes)), v);
    te_stmt *inner = te__for(ctx, v, I(ctx, 0), I(ctx, lanes), TE_FOR_VECTORIZED, fn(ctx, i, user));
    te_stmt *s = te__for(ctx, o, I(ctx, 0), I(ctx, n / lanes), outer, inner);
    te_stmt *r = te__pass_vectorize(TE_PC(ctx), s);
    assert_non_null(r);
    return r;
}

/* ---- Build and run ----------------------------------------------------------------------- */

typedef struct built {
    const char *src;
    te__cc_lib *lib;
    te_packed_fn fn;
} built;

/* The target the text checks are written for: 512-bit vectors and AVX-512, whatever machine
 * runs the test, so that they check the same text everywhere. */
static te_target text_target(void)
{
    te_target t = te_target_host();
    t.vector_bits = 512;
    snprintf(t.isa, sizeof t.isa, "sse4_2,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl");
    return t;
}

/* The source of f for target t after the C target's last lowering passes (vector width
 * legalization, register promotion), as te_lower leaves a program. */
static const char *emit_for(te_ctx *ctx, const te_lowered *f, const te_target *t)
{
    te__pass_ctx pc = {.ctx = ctx, .target = t};
    te_lowered *g = te__alloc(ctx, sizeof *g);
    assert_non_null(g);
    *g = *f;
    g->body = te__pass_legalize_vectors(&pc, f->body);
    if (g->body)
        g->body = te__pass_promote_registers(&pc, g->body);
    if (!g->body)
        fail_msg("late passes: %s", te_ctx_errmsg(ctx));
    const char *src = te_emit_c(ctx, g, t);
    if (!src)
        fail_msg("te_emit_c: %s", te_ctx_errmsg(ctx));
    return src;
}

/* b.src: f's source for text_target() (what the checks read); b.fn: f built for the host. */
static built build(te_ctx *ctx, te_lowered *f)
{
    built b = {0};
    te_target tt = text_target(), host = te_target_host();
    b.src = emit_for(ctx, f, &tt);
    const char *hsrc = emit_for(ctx, f, &host);
    if (getenv("TESSERA_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", hsrc);
    char err[8192];
    te__cc_opts o = {NULL, NULL, NULL};
    int rc = te__cc_build(hsrc, &o, &b.lib, err, sizeof err);
    if (rc != TE_OK) {
        fprintf(stderr, "%s\n---- diagnostics ----\n%s\n", hsrc, err);
        fail_msg("compile failed (%s)", te_status_str(rc));
    }
    char sym[256];
    snprintf(sym, sizeof sym, "%s_packed", f->name);
    void *p = te__cc_lib_sym(b.lib, sym);
    assert_non_null(p);
    memcpy(&b.fn, &p, sizeof p);
    return b;
}

static void has(const char *src, const char *what)
{
    if (!strstr(src, what)) {
        fprintf(stderr, "%s\n", src);
        fail_msg("generated source (above) lacks \"%s\"", what);
    }
}

static void lacks(const char *src, const char *what)
{
    if (strstr(src, what)) {
        fprintf(stderr, "%s\n", src);
        fail_msg("generated source (above) contains \"%s\"", what);
    }
}

/* ---- Elementwise add, vectorized ----------------------------------------------------------- */

typedef struct {
    te_buf *a, *b, *c;
} abc;

static te_stmt *add_body(te_ctx *ctx, te_expr *i, void *user)
{
    abc *x = user;
    return st(ctx, x->c, i, te_add(ctx, ld(ctx, x->a, i), ld(ctx, x->b, i)));
}

static void test_elementwise_add_vectorized(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 1024;
    abc x = {arg_buf(ctx, "A", TE_F32, n, 0), arg_buf(ctx, "B", TE_F32, n, 1),
             arg_buf(ctx, "C", TE_F32, n, 2)};
    te_stmt *body = vec_loop(ctx, n, 16, TE_FOR_SERIAL, add_body, &x);
    te_lowered *f = mk_fn(ctx, "vadd", 3, (te_buf *[]){x.a, x.b, x.c}, 1, body);
    built b = build(ctx, f);
    has(b.src, "te_f32x16");
    has(b.src, "te_load_f32x16(&A[i_o * 16])");
    has(b.src, "int vadd(const float *restrict A, const float *restrict B, float *restrict C)");
    has(b.src, "int vadd_packed(void **args)");
    has(b.src, " * test kernel\n * schedule: by hand\n");
    has(b.src, " * target: c;");
    lacks(b.src, "te_exp"); /* only helpers that are used */
    float *A = malloc(n * 4), *B = malloc(n * 4), *C = malloc(n * 4);
    tt_rng r;
    tt_rng_seed(&r, tt_seed(1));
    tt_fill_f32(&r, A, n);
    tt_fill_f32(&r, B, n);
    tt_poison_f32(C, n);
    assert_int_equal(b.fn((void *[]){A, B, C}), 0);
    for (int64_t i = 0; i < n; i++)
        assert_true(C[i] == A[i] + B[i]);
    free(A), free(B), free(C);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- A narrow-integer scalar beside a vector ----------------------------------------------- */

/* C[i] = A[i] + (B[i_o] != 0 ? 1 : 0) in u8: the scalar operand is an int expression in C,
 * which GNU C refuses to convert to a vector of u8 lanes; the emitter splats it. */
static te_stmt *u8_body(te_ctx *ctx, te_expr *i, void *user)
{
    abc *x = user;
    te_expr *o = i->u.bin.a->u.bin.a; /* i_o of o * lanes + v */
    te_expr *flag = te_select(ctx, te_ne(ctx, ld(ctx, x->b, o), te_const(ctx, TE_U8, 0)),
                              te_const(ctx, TE_U8, 1), te_const(ctx, TE_U8, 0));
    return st(ctx, x->c, i, te_add(ctx, ld(ctx, x->a, i), flag));
}

static void test_narrow_int_scalar_operand_splatted(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 64, lanes = 16;
    abc x = {arg_buf(ctx, "A", TE_U8, n, 0), arg_buf(ctx, "B", TE_U8, n / lanes, 1),
             arg_buf(ctx, "C", TE_U8, n, 2)};
    te_stmt *body = vec_loop(ctx, n, (int)lanes, TE_FOR_SERIAL, u8_body, &x);
    te_lowered *f = mk_fn(ctx, "u8flag", 3, (te_buf *[]){x.a, x.b, x.c}, 1, body);
    built b = build(ctx, f);
    has(b.src, "te_splat_u8x16(");
    uint8_t A[64], B[4] = {0, 3, 0, 250}, C[64];
    for (int i = 0; i < 64; i++)
        A[i] = (uint8_t)(i * 7), C[i] = 0xAA;
    assert_int_equal(b.fn((void *[]){A, B, C}), 0);
    for (int i = 0; i < 64; i++)
        assert_int_equal(C[i], (uint8_t)(A[i] + (B[i / 16] != 0)));
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Parallel loop ----------------------------------------------------------------------- */

static void test_parallel_loop(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 4096;
    abc x = {arg_buf(ctx, "A", TE_F32, n, 0), arg_buf(ctx, "B", TE_F32, n, 1),
             arg_buf(ctx, "C", TE_F32, n, 2)};
    te_stmt *body = vec_loop(ctx, n, 8, TE_FOR_PARALLEL, add_body, &x);
    te_lowered *f = mk_fn(ctx, "padd", 3, (te_buf *[]){x.a, x.b, x.c}, 1, body);
    built b = build(ctx, f);
    has(b.src,
        "TE_OMP(parallel for schedule(static))\n    for (int64_t i_o = 0; i_o < 512; ++i_o) {");
    has(b.src, "te_f32x8");
    float *A = malloc(n * 4), *B = malloc(n * 4), *C = malloc(n * 4);
    tt_rng r;
    tt_rng_seed(&r, tt_seed(2));
    tt_fill_f32(&r, A, n);
    tt_fill_f32(&r, B, n);
    tt_poison_f32(C, n);
    assert_int_equal(b.fn((void *[]){A, B, C}), 0);
    for (int64_t i = 0; i < n; i++)
        assert_true(C[i] == A[i] + B[i]);
    free(A), free(B), free(C);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Register promotion: a 4 x 32 matmul micro-kernel ------------------------------------- */

static void test_local_accumulator_promoted(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    enum { M = 4, N = 32, K = 64 };
    te_buf *A = arg_buf(ctx, "A", TE_F32, M * K, 0);
    te_buf *B = arg_buf(ctx, "B", TE_F32, K * N, 1);
    te_buf *C = arg_buf(ctx, "C", TE_F32, M * N, 2);
    te_buf *acc = te__buf_new(ctx, "C_local", TE_F32, 2, (int64_t[]){M, N}, TE_SCOPE_LOCAL);
    te_expr *k = te__loop_var(ctx, "k", K);
    te_stmt *init = NULL, *upd = NULL, *out = NULL;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j += 16) {
            te_expr *ci = te__ramp(ctx, I(ctx, i * N + j), 1, 16);
            init = te__seq2(ctx, init, st(ctx, acc, ci, te__bcast(ctx, te_f32(ctx, 0), 16)));
            te_expr *a = te__bcast(ctx, ld(ctx, A, te_add(ctx, I(ctx, i * K), k)), 16);
            te_expr *bv =
                ld(ctx, B, te__ramp(ctx, te_add(ctx, te_mul(ctx, k, I(ctx, N)), I(ctx, j)), 1, 16));
            te_expr *sum = te_add(ctx, ld(ctx, acc, ci), te_mul(ctx, a, bv));
            upd = te__seq2(ctx, upd, st(ctx, acc, ci, sum));
            out = te__seq2(ctx, out,
                           st(ctx, C, te__ramp(ctx, I(ctx, i * N + j), 1, 16), ld(ctx, acc, ci)));
        }
    /* one scalar access inside a vector chunk, one outside any: both stay variables */
    te_stmt *body = te__seq(
        ctx, 3,
        (te_stmt *[]){init, te__for(ctx, k, I(ctx, 0), I(ctx, K), TE_FOR_SERIAL, upd), out});
    te_lowered *f =
        mk_fn(ctx, "micro", 3, (te_buf *[]){A, B, C}, 1, te__alloc_stmt(ctx, acc, body));
    built b = build(ctx, f);
    has(b.src, "te_f32x16 C_local_v0, C_local_v1, C_local_v2");
    has(b.src, "C_local_v7 = ");
    lacks(b.src, "C_local[");
    float *a = malloc(M * K * 4), *bb = malloc(K * N * 4), *c = malloc(M * N * 4);
    tt_rng r;
    tt_rng_seed(&r, tt_seed(3));
    tt_fill_f32(&r, a, M * K);
    tt_fill_f32(&r, bb, K * N);
    tt_poison_f32(c, M * N);
    assert_int_equal(b.fn((void *[]){a, bb, c}), 0);
    double want[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int kk = 0; kk < K; kk++)
                s += (double)a[i * K + kk] * bb[kk * N + j];
            want[i * N + j] = s;
        }
    assert_true(tt_max_rel_err_f32(c, want, M * N) < 1e-5);
    free(a), free(bb), free(c);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* Scalar constant accesses (unrolled scalar code) promote to scalar variables; a lane of a
 * vector chunk is addressed as a lane. */
static void test_scalar_promotion_and_lanes(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_buf *A = arg_buf(ctx, "A", TE_F32, 16, 0);
    te_buf *C = arg_buf(ctx, "C", TE_F32, 20, 1);
    te_buf *t = te__buf_new(ctx, "T", TE_F32, 1, (int64_t[]){20}, TE_SCOPE_LOCAL);
    te_stmt *s =
        te__seq(ctx, 6,
                (te_stmt *[]){
                    st(ctx, t, te__ramp(ctx, I(ctx, 0), 1, 16),
                       ld(ctx, A, te__ramp(ctx, I(ctx, 0), 1, 16))),
                    st(ctx, t, I(ctx, 17), te_f32(ctx, 2.5)),
                    st(ctx, t, I(ctx, 3), te_mul(ctx, ld(ctx, t, I(ctx, 3)), te_f32(ctx, 10))),
                    st(ctx, C, te__ramp(ctx, I(ctx, 0), 1, 16),
                       ld(ctx, t, te__ramp(ctx, I(ctx, 0), 1, 16))),
                    st(ctx, C, I(ctx, 16), ld(ctx, t, I(ctx, 17))),
                    st(ctx, C, te_add(ctx, I(ctx, 10), I(ctx, 7)), te_f32(ctx, -1)),
                });
    te_lowered *f = mk_fn(ctx, "lanes", 2, (te_buf *[]){A, C}, 1, te__alloc_stmt(ctx, t, s));
    built b = build(ctx, f);
    has(b.src, "T_v0[3] = T_v0[3] * 10.0f;");
    has(b.src, "float T_s17;");
    has(b.src, "C[17] = -1.0f;");
    float a[16], c[20];
    for (int i = 0; i < 16; i++)
        a[i] = (float)i;
    assert_int_equal(b.fn((void *[]){a, c}), 0);
    for (int i = 0; i < 16; i++)
        assert_true(c[i] == (i == 3 ? 30.0f : (float)i));
    assert_true(c[16] == 2.5f);
    assert_true(c[17] == -1.0f);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* A reduction into a promoted scalar accumulator gets an OpenMP simd reduction clause. */
static void test_scalar_reduction_clause(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 1000;
    te_buf *A = arg_buf(ctx, "A", TE_F32, n, 0), *C = arg_buf(ctx, "C", TE_F32, 2, 1);
    te_buf *acc = te__buf_new(ctx, "acc", TE_F32, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    te_buf *mx = te__buf_new(ctx, "mx", TE_F32, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    te_expr *k = te__loop_var(ctx, "k", n), *k2 = te__loop_var(ctx, "k", n);
    te_stmt *body = te__seq(
        ctx, 6,
        (te_stmt *[]){
            st(ctx, acc, I(ctx, 0), te_f32(ctx, 0)),
            te__for(ctx, k, I(ctx, 0), I(ctx, n), TE_FOR_SERIAL,
                    st(ctx, acc, I(ctx, 0), te_add(ctx, ld(ctx, acc, I(ctx, 0)), ld(ctx, A, k)))),
            st(ctx, mx, I(ctx, 0), te_f32(ctx, -INFINITY)),
            te__for(ctx, k2, I(ctx, 0), I(ctx, n), TE_FOR_SERIAL,
                    st(ctx, mx, I(ctx, 0), te_max(ctx, ld(ctx, mx, I(ctx, 0)), ld(ctx, A, k2)))),
            st(ctx, C, I(ctx, 0), ld(ctx, acc, I(ctx, 0))),
            st(ctx, C, I(ctx, 1), ld(ctx, mx, I(ctx, 0))),
        });
    body = te__alloc_stmt(ctx, acc, te__alloc_stmt(ctx, mx, body));
    built b = build(ctx, mk_fn(ctx, "red", 2, (te_buf *[]){A, C}, 1, body));
    has(b.src, "TE_OMP(simd reduction(+ : acc_s0))\n");
    has(b.src, "TE_OMP(simd reduction(max : mx_s0))\n");
    has(b.src, "mx_s0 = -INFINITY;");
    float a[1000], c[2];
    double want = 0, m = -INFINITY;
    for (int i = 0; i < n; i++) {
        a[i] = (float)((i * 37) % 101) / 7.0f;
        want += a[i];
        m = a[i] > m ? a[i] : m;
    }
    assert_int_equal(b.fn((void *[]){a, c}), 0);
    assert_true(fabs(c[0] - want) <= 1e-5 * want);
    assert_true(c[1] == (float)m);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Vector math against libm ------------------------------------------------------------- */

typedef struct {
    te_buf *x, *y;
    te_intrin fn;
} unary;

static te_stmt *unary_body(te_ctx *ctx, te_expr *i, void *user)
{
    unary *u = user;
    te_expr *x = ld(ctx, u->x, i);
    te_expr *v = u->fn == TE_POW ? te_pow(ctx, te_fabs(ctx, x), te_f32(ctx, 1.5))
                                 : te_call(ctx, u->fn, 1, &x);
    return st(ctx, u->y, i, v);
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double ref_pow(double x) { return pow(fabs(x), 1.5); }

/* |got - want| / max(|want|, FLT_MIN): relative, with subnormal results judged absolutely. */
static double rel_err(float got, double want)
{
    if ((double)got == want || (isinf(want) && got == (float)want) || (float)want == got)
        return 0;
    if (isnan(want) && isnan(got))
        return 0;
    double den = fabs(want) > FLT_MIN ? fabs(want) : FLT_MIN;
    double e = fabs((double)got - want) / den;
    return isnan(e) ? INFINITY : e;
}

static void check_math(te_intrin fn, double (*ref)(double), double tol, bool positive_only,
                       int lanes)
{
    te_ctx *ctx = te_ctx_create();
    /* dense sweep of magnitudes plus edge cases */
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    tt_rng r;
    tt_rng_seed(&r, tt_seed(11 + fn));
    const float edge[] = {0.0f,      -0.0f,      1.0f,    -1.0f,   0.5f,     0.625f,  -0.625f,
                          0.84375f,  1e-30f,     -1e-30f, 1e-45f,  88.7f,    88.8f,   -87.3f,
                          -103.9f,   -110.0f,    200.0f,  -200.0f, 3.9f,     -3.9f,   4.0f,
                          9.0f,      1e30f,      -1e30f,  FLT_MAX, -FLT_MAX, FLT_MIN, INFINITY,
                          -INFINITY, 8388608.5f, -2.5f,   2.5f};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < N; i++) {
        float v;
        if (i < ne)
            v = edge[i];
        else if (i % 3 == 0)
            v = (float)tt_rng_uniform(&r, -10, 10);
        else {
            /* log-uniform magnitudes over the whole range */
            v = (float)exp(tt_rng_uniform(&r, -100, 88.5));
            if (tt_rng_int(&r, 2))
                v = -v;
        }
        x[i] = positive_only ? fabsf(v) : v;
    }
    unary u = {arg_buf(ctx, "X", TE_F32, N, 0), arg_buf(ctx, "Y", TE_F32, N, 1), fn};
    te_stmt *body = vec_loop(ctx, N, lanes, TE_FOR_SERIAL, unary_body, &u);
    char name[32];
    snprintf(name, sizeof name, "math_%s_%d", te_intrin_name(fn), lanes);
    te_lowered *f = mk_fn(ctx, te__strdup(ctx, name), 2, (te_buf *[]){u.x, u.y}, 1, body);
    built b = build(ctx, f);
    char helper[64];
    /* vectors wider than an AVX-512 register are split into 16-lane parts */
    snprintf(helper, sizeof helper, "te_%s_f32x%d(", fn == TE_RSQRT ? "sqrt" : te_intrin_name(fn),
             lanes > 16 ? 16 : lanes);
    has(b.src, helper);
    assert_int_equal(b.fn((void *[]){x, y}), 0);
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < N; i++) {
        double e = rel_err(y[i], ref((double)x[i]));
        if (e > worst)
            worst = e, wi = i;
    }
    if (!(worst <= tol))
        fail_msg("%s: max relative error %.3g at x = %.9g (got %.9g, want %.9g)", name, worst,
                 x[wi], y[wi], ref(x[wi]));
    free(x), free(y);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

static void test_vector_exp(void **s)
{
    (void)s;
    /* 8.2e-8 (1.4 ulp) measured for the polynomial over [-87, 88]; 2e-7 leaves room for the
     * portable body's separate roundings where the compiler does not contract a * b + c */
    check_math(TE_EXP, exp, 2e-7, false, 16);
    /* 8 lanes: the AVX2 + FMA body where the compiler targets it, else the portable one */
    check_math(TE_EXP, exp, 2e-7, false, 8);
    check_math(TE_EXP, exp, 2e-7, false, 4); /* the portable body */
}
static void test_vector_log(void **s)
{
    (void)s;
    check_math(TE_LOG, log, 2e-7, true, 16);
}
static void test_vector_tanh(void **s)
{
    (void)s;
    check_math(TE_TANH, tanh, 2e-7, false, 16);
}
static void test_vector_erf(void **s)
{
    (void)s;
    check_math(TE_ERF, erf, 2e-7, false, 8);
}
static void test_vector_sigmoid(void **s)
{
    (void)s;
    check_math(TE_SIGMOID, ref_sigmoid, 2e-7, false, 16);
}
static void test_vector_sqrt_rsqrt(void **s)
{
    (void)s;
    check_math(TE_SQRT, sqrt, 6e-8, true, 16);
    check_math(TE_RSQRT, ref_rsqrt, 1.2e-7, true, 4);
}
static void test_vector_floor_ceil_fabs_pow(void **s)
{
    (void)s;
    check_math(TE_FLOOR, floor, 0, false, 16);
    check_math(TE_CEIL, ceil, 0, false, 32);
    check_math(TE_FABS, fabs, 0, false, 16);
    check_math(TE_POW, ref_pow, 2e-7, false, 16);
}

/* rint: ties to even (the edge cases hold 0.5, 2.5, -2.5, 8388608.5 and the uniform sweep
 * many x.5 values after rounding to f32), exact, at the widths of AVX-512, AVX and SSE4.1 and
 * a width no instruction has (2 lanes: rint per lane). */
static double ref_rint(double x) { return rint(x); }
static void test_vector_rint_ties_to_even(void **s)
{
    (void)s;
    check_math(TE_RINT, ref_rint, 0, false, 16);
    check_math(TE_RINT, ref_rint, 0, false, 8);
    check_math(TE_RINT, ref_rint, 0, false, 4);
    check_math(TE_RINT, ref_rint, 0, false, 2);
}

/* Scalar code (a loop that is not vectorized) calls libm. */
static void test_scalar_math_uses_libm(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_buf *X = arg_buf(ctx, "X", TE_F32, 100, 0), *Y = arg_buf(ctx, "Y", TE_F32, 100, 1);
    te_expr *i = te__loop_var(ctx, "i", 100);
    te_expr *x = ld(ctx, X, i);
    te_expr *v = te_add(ctx, te_add(ctx, te_exp(ctx, x), te_sigmoid(ctx, x)),
                        te_rsqrt(ctx, te_fabs(ctx, x)));
    te_stmt *s = te__for(ctx, i, I(ctx, 0), I(ctx, 100), TE_FOR_SERIAL, st(ctx, Y, i, v));
    built b = build(ctx, mk_fn(ctx, "scal", 2, (te_buf *[]){X, Y}, 1, s));
    has(b.src, "expf(X[i]) + te_sigmoid_f32(X[i]) + 1.0f / sqrtf(fabsf(X[i]))");
    float xs[100], ys[100];
    for (int k = 0; k < 100; k++)
        xs[k] = (float)(k - 50) / 7.0f + 0.01f;
    assert_int_equal(b.fn((void *[]){xs, ys}), 0);
    for (int k = 0; k < 100; k++) {
        double w = exp(xs[k]) + 1 / (1 + exp(-xs[k])) + 1 / sqrt(fabs(xs[k]));
        assert_true(fabs(ys[k] - w) <= 1e-5 * fabs(w));
    }
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Gathers ------------------------------------------------------------------------------ */

typedef struct {
    te_buf *a, *c;
} ac;

static te_stmt *stride2_body(te_ctx *ctx, te_expr *i, void *user)
{
    ac *x = user;
    return st(ctx, x->c, i, ld(ctx, x->a, te_mul(ctx, i, I(ctx, 2))));
}

static te_stmt *modgather_body(te_ctx *ctx, te_expr *i, void *user)
{
    ac *x = user;
    /* A[(i * 5) floormod 64]: not linear, a general gather */
    return st(ctx, x->c, i, ld(ctx, x->a, te_floormod(ctx, te_mul(ctx, i, I(ctx, 5)), I(ctx, 64))));
}

static void test_gather(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    ac x = {arg_buf(ctx, "A", TE_F32, 512, 0), arg_buf(ctx, "C", TE_F32, 256, 1)};
    built b = build(ctx, mk_fn(ctx, "gath", 2, (te_buf *[]){x.a, x.c}, 1,
                               vec_loop(ctx, 256, 16, TE_FOR_SERIAL, stride2_body, &x)));
    has(b.src, "te_gather_f32x16(&A[i_o * 32], 2)");
    float a[512], c[256];
    for (int i = 0; i < 512; i++)
        a[i] = (float)i * 0.5f;
    assert_int_equal(b.fn((void *[]){a, c}), 0);
    for (int i = 0; i < 256; i++)
        assert_true(c[i] == a[2 * i]);
    te__cc_lib_free(b.lib);

    ac y = {arg_buf(ctx, "A", TE_F32, 64, 0), arg_buf(ctx, "C", TE_F32, 256, 1)};
    b = build(ctx, mk_fn(ctx, "gath2", 2, (te_buf *[]){y.a, y.c}, 1,
                         vec_loop(ctx, 256, 8, TE_FOR_SERIAL, modgather_body, &y)));
    has(b.src, "te_gather_idx_f32x8(A, ");
    assert_int_equal(b.fn((void *[]){a, c}), 0);
    for (int i = 0; i < 256; i++)
        assert_true(c[i] == a[(i * 5) % 64]);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Streaming stores ---------------------------------------------------------------------- */

static te_stmt *scale_nt_body(te_ctx *ctx, te_expr *i, void *user)
{
    ac *x = user;
    te_stmt *s = st(ctx, x->c, i, te_mul(ctx, ld(ctx, x->a, i), te_f32(ctx, 2)));
    s->u.store.nontemporal = true;
    return s;
}

static void test_nontemporal_store(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 4096;
    ac x = {arg_buf(ctx, "A", TE_F32, n, 0), arg_buf(ctx, "C", TE_F32, n, 1)};
    built b = build(ctx, mk_fn(ctx, "ntst", 2, (te_buf *[]){x.a, x.c}, 1,
                               vec_loop(ctx, n, 16, TE_FOR_PARALLEL, scale_nt_body, &x)));
    has(b.src, "_mm512_stream_ps((float *)p, (__m512)v);");
    has(b.src, "const int C_nt = ((uintptr_t)C & 63) == 0;");
    has(b.src, "te_stream_f32x16(C_nt, &C[i_o * 16], ");
    /* a parallel region whose threads each fence once, after their iterations */
    has(b.src, "TE_OMP(parallel)\n    {\n        TE_OMP(for schedule(static) nowait)\n");
    has(b.src, "        }\n        te_sfence(); /* this thread's streaming stores */\n    }\n");
    assert_null(strstr(b.src, "TE_OMP(parallel for"));
    float *a = aligned_alloc(64, (n + 16) * 4), *c = aligned_alloc(64, (n + 16) * 4);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)i;
    for (int off = 0; off < 2; off++) { /* aligned, then 4 bytes off */
        tt_poison_f32(c, n + 16);
        assert_int_equal(b.fn((void *[]){a, c + off}), 0);
        for (int64_t i = 0; i < n; i++)
            assert_true(c[off + i] == 2.0f * a[i]);
    }
    free(a), free(c);
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Integer index math, names, allocations ------------------------------------------------ */

static void test_floordiv_and_names(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    /* buffers and variables named like C keywords, prelude and C library names still compile */
    te_buf *out = arg_buf(ctx, "int", TE_I64, 40, 0);
    te_buf *out2 = arg_buf(ctx, "te_f32x16", TE_I64, 40, 1);
    te_expr *i = te__loop_var(ctx, "for", 40);
    te_expr *i2 = te__loop_var(ctx, "fma", 40); /* a libm function (math.h is included) */
    te_expr *d = te_sub(ctx, i, I(ctx, 20));
    te_stmt *s1 = te__for(ctx, i, I(ctx, 0), I(ctx, 40), TE_FOR_SERIAL,
                          st(ctx, out, i,
                             te_add(ctx, te_mul(ctx, te_floordiv(ctx, d, I(ctx, 3)), I(ctx, 100)),
                                    te_floormod(ctx, d, I(ctx, 3)))));
    /* non-negative dividend by a positive constant: plain / and % */
    te_stmt *s2 =
        te__for(ctx, i2, I(ctx, 0), I(ctx, 40), TE_FOR_SERIAL,
                st(ctx, out2, i2,
                   te_add(ctx, te_floordiv(ctx, i2, I(ctx, 8)), te_floormod(ctx, i2, I(ctx, 8)))));
    built b = build(ctx, mk_fn(ctx, "idx", 2, (te_buf *[]){out, out2}, 2, te__seq2(ctx, s1, s2)));
    has(b.src, "te_floordiv_i64(");
    has(b.src, "for_");
    has(b.src, " / 8 + ");
    has(b.src, " % 8;");
    int64_t o1[40], o2[40];
    assert_int_equal(b.fn((void *[]){o1, o2}), 0);
    for (int k = 0; k < 40; k++) {
        int64_t dd = k - 20, q = dd >= 0 ? dd / 3 : -((-dd + 2) / 3), m = dd - 3 * q;
        assert_int_equal(o1[k], q * 100 + m);
        assert_int_equal(o2[k], k / 8 + k % 8);
    }
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
    /* A kernel named like a libm or libc function would redefine it: renamed. */
    char kb[64];
    assert_string_equal(te__emit_kernel_ident("fma", TE__LANG_C, kb, sizeof kb), "fma_kernel");
    assert_string_equal(te__emit_kernel_ident("free", TE__LANG_C, kb, sizeof kb), "free_kernel");
    assert_string_equal(te__emit_kernel_ident("relu", TE__LANG_C, kb, sizeof kb), "relu");
}

/* A narrowing cast of a non-negative value is non-negative only when the value fits: here
 * (int32_t)(i * 100000000) wraps negative for i >= 22, so floordiv/floormod by 8 need the
 * helpers (the emitter's old non-negativity test accepted any integer cast and printed / and %,
 * which give the wrong quotient there). The same cast of i * 1000 fits: plain / and %. */
static void test_floordiv_of_narrowing_cast(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_buf *out = arg_buf(ctx, "out", TE_I32, 40, 0), *out2 = arg_buf(ctx, "out2", TE_I32, 40, 1);
    te_expr *i = te__loop_var(ctx, "i", 40), *i2 = te__loop_var(ctx, "i2", 40);
    te_expr *x = te_var(ctx, "x", TE_I32), *y = te_var(ctx, "y", TE_I32);
    te_expr *e8 = te_cast(ctx, TE_I32, I(ctx, 8));
    te_stmt *s1 = te__for(
        ctx, i, I(ctx, 0), I(ctx, 40), TE_FOR_SERIAL,
        te__let(ctx, x, te_cast(ctx, TE_I32, te_mul(ctx, i, I(ctx, 100000000))),
                st(ctx, out, i, te_add(ctx, te_floordiv(ctx, x, e8), te_floormod(ctx, x, e8)))));
    te_stmt *s2 = te__for(
        ctx, i2, I(ctx, 0), I(ctx, 40), TE_FOR_SERIAL,
        te__let(ctx, y, te_cast(ctx, TE_I32, te_mul(ctx, i2, I(ctx, 1000))),
                st(ctx, out2, i2, te_add(ctx, te_floordiv(ctx, y, e8), te_floormod(ctx, y, e8)))));
    built b =
        build(ctx, mk_fn(ctx, "narrow", 2, (te_buf *[]){out, out2}, 2, te__seq2(ctx, s1, s2)));
    has(b.src, "te_floordiv_i32(x, 8)");
    has(b.src, "te_floormod_i32(x, 8)");
    has(b.src, "y / 8 + y % 8");
    int32_t o1[40], o2[40];
    assert_int_equal(b.fn((void *[]){o1, o2}), 0);
    for (int k = 0; k < 40; k++) {
        int64_t v = (int32_t)(uint32_t)((uint64_t)k * 100000000u),
                q = v >= 0 ? v / 8 : -((-v + 7) / 8);
        assert_int_equal(o1[k], q + (v - 8 * q));
        assert_int_equal(o2[k], k * 1000 / 8 + k * 1000 % 8);
    }
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

static void test_global_alloc_and_select(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    const int64_t n = 256;
    te_buf *A = arg_buf(ctx, "A", TE_F32, n, 0), *C = arg_buf(ctx, "C", TE_F32, n, 1);
    te_buf *T = te__buf_new(ctx, "T", TE_F32, 1, (int64_t[]){n}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(ctx, "i", n), *j = te__loop_var(ctx, "j", n);
    /* T = relu(A) (a select), C = max(T, 0.25) + 1, second loop vectorized */
    te_expr *a = ld(ctx, A, i);
    te_stmt *p =
        te__for(ctx, i, I(ctx, 0), I(ctx, n), TE_FOR_SERIAL,
                st(ctx, T, i, te_select(ctx, te_gt(ctx, a, te_f32(ctx, 0)), a, te_f32(ctx, 0))));
    te_stmt *c = te__for(
        ctx, j, I(ctx, 0), I(ctx, 16), TE_FOR_VECTORIZED,
        st(ctx, C, j, te_add(ctx, te_max(ctx, ld(ctx, T, j), te_f32(ctx, 0.25)), te_f32(ctx, 1))));
    te_expr *j2 = te__loop_var(ctx, "j", n);
    te_stmt *c2 =
        te__for(ctx, j2, I(ctx, 16), I(ctx, n - 16), TE_FOR_SERIAL,
                st(ctx, C, j2,
                   te_add(ctx, te_max(ctx, ld(ctx, T, j2), te_f32(ctx, 0.25)), te_f32(ctx, 1))));
    te_stmt *body = te__alloc_stmt(ctx, T, te__seq(ctx, 3, (te_stmt *[]){p, c, c2}));
    body = te__pass_vectorize(TE_PC(ctx), body);
    built b = build(ctx, mk_fn(ctx, "galloc", 2, (te_buf *[]){A, C}, 1, body));
    /* A whole-call heap buffer is a scratch site, kept for the next call. */
    has(b.src, "static void *te_scratch[1];");
    has(b.src, "float *T = te_scratch_take(0, 1024);");
    has(b.src, "te_scratch_keep(0, T);");
    has(b.src, "te_max_f32x16(te_load_f32x16(&T[0]), te_splat_f32x16(0.25f)) + 1.0f");
    has(b.src, "T[i] = A[i] > 0.0f ? A[i] : 0.0f;");
    float xa[256], xc[256];
    for (int run = 0; run < 2; run++) { /* the second call reuses the kept block */
        for (int k = 0; k < n; k++) {
            xa[k] = (float)(k - 100 + 7 * run) / 64.0f;
            xc[k] = NAN;
        }
        assert_int_equal(b.fn((void *[]){xa, xc}), 0);
        for (int k = 0; k < n; k++) {
            float t = xa[k] > 0 ? xa[k] : 0;
            assert_true(xc[k] == (t > 0.25f ? t : 0.25f) + 1.0f);
        }
    }
    te__cc_lib_free(b.lib);
    te_ctx_free(ctx);
}

/* ---- Errors ----------------------------------------------------------------------------- */

static void test_compile_error_propagates(void **state)
{
    (void)state;
    te_target t = te_target_host();
    t.cflags = "-O1 -fPIC -shared -fno-such-flag-tessera";
    const char *src = "int k_packed(void **args) { (void)args; return 0; }\n";
    te_module *m = (te_module *)1;
    int st = 0;
    char err[4096] = "", *errs[1] = {err};
    int rc = te__c_build_sources(1, &src, (const char *[]){"k"}, &t, 1, &m, &st, errs, sizeof err);
    assert_int_equal(rc, TE_ERR_COMPILE);
    assert_int_equal(st, TE_ERR_COMPILE);
    assert_null(m);
    assert_non_null(strstr(err, "no-such-flag-tessera"));

    /* a source that builds but lacks the entry point */
    t.cflags = NULL;
    const char *src2 = "int other(void) { return 1; }\n";
    rc = te__c_build_sources(1, &src2, (const char *[]){"k"}, &t, 1, &m, &st, errs, sizeof err);
    assert_int_equal(rc, TE_ERR_LOAD);
    assert_non_null(strstr(err, "k_packed"));
}

static void test_barrier_is_rejected(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_stmt *b = te__alloc(ctx, sizeof *b);
    b->kind = TE_S_BARRIER;
    te_buf *A = arg_buf(ctx, "A", TE_F32, 4, 0);
    assert_null(te_emit_c(ctx, mk_fn(ctx, "bar", 1, &A, 1, b), NULL));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_UNSUPPORTED);
    te_ctx_free(ctx);
}

/* ---- Target -------------------------------------------------------------------------------- */

static void test_target_host_and_key(void **state)
{
    (void)state;
    te_target t = te_target_host();
    assert_int_equal(t.backend, TE_BACKEND_C);
    assert_true(t.num_cores >= 1);
    assert_true(t.vector_bits == 128 || t.vector_bits == 256 || t.vector_bits == 512);
    if (strstr(t.isa, "avx512f"))
        assert_int_equal(t.vector_bits, 512);
    char key[512];
    te_target_key(&t, key, sizeof key);
#if defined(__x86_64__)
    assert_true(strncmp(key, "c;x86_64;", 9) == 0);
#endif
    char cores[32];
    snprintf(cores, sizeof cores, ";%dc;", t.num_cores);
    assert_non_null(strstr(key, cores));
    setenv("OMP_NUM_THREADS", "3", 1);
    assert_int_equal(te_target_host().num_cores, 3);
    setenv("OMP_NUM_THREADS", "2", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_add_vectorized),
        cmocka_unit_test(test_narrow_int_scalar_operand_splatted),
        cmocka_unit_test(test_parallel_loop),
        cmocka_unit_test(test_local_accumulator_promoted),
        cmocka_unit_test(test_scalar_promotion_and_lanes),
        cmocka_unit_test(test_scalar_reduction_clause),
        cmocka_unit_test(test_vector_exp),
        cmocka_unit_test(test_vector_log),
        cmocka_unit_test(test_vector_tanh),
        cmocka_unit_test(test_vector_erf),
        cmocka_unit_test(test_vector_sigmoid),
        cmocka_unit_test(test_vector_sqrt_rsqrt),
        cmocka_unit_test(test_vector_floor_ceil_fabs_pow),
        cmocka_unit_test(test_vector_rint_ties_to_even),
        cmocka_unit_test(test_scalar_math_uses_libm),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_nontemporal_store),
        cmocka_unit_test(test_floordiv_and_names),
        cmocka_unit_test(test_floordiv_of_narrowing_cast),
        cmocka_unit_test(test_global_alloc_and_select),
        cmocka_unit_test(test_compile_error_propagates),
        cmocka_unit_test(test_barrier_is_rejected),
        cmocka_unit_test(test_target_host_and_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
