/* Tests of loop partitioning: the tail guard of a non-divisible split leaves the hot loop,
 * 2-D tails, padding guards, and programs keep their meaning (run before and after). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

/* Runs s over one output buffer of n elements; returns a malloc'ed array (NaN = not written). */
static double *run(te_stmt *s, te_buf *b, int64_t n, long *stores)
{
    double *d = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = NAN;
    pt_env env = {0};
    pt_add_buf(&env, b, d, n);
    pt_exec(&env, s);
    assert_int_equal(env.err, 0);
    if (stores)
        *stores = env.stores;
    return d;
}

static void same_result(te_stmt *a, te_stmt *b, te_buf *buf, int64_t n)
{
    long sa, sb;
    double *ra = run(a, buf, n, &sa), *rb = run(b, buf, n, &sb);
    assert_int_equal(sa, sb);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ra[i]))
            assert_true(isnan(rb[i]));
        else
            assert_true(ra[i] == rb[i]);
    }
    free(ra);
    free(rb);
}

static void test_split_tail_is_partitioned(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){100}, TE_SCOPE_GLOBAL);
    te_expr *io = te__loop_var(c, "i_o", 4), *ii = te__loop_var(c, "i_i", 32);
    te_expr *i = te_add(c, te_mul(c, io, I(32)), ii);
    te_stmt *st = te__store(c, B, 1, (te_expr *[]){i}, te_cast(c, TE_F32, te_mul(c, i, I(3))));
    te_stmt *prog = te__for(
        c, io, I(0), I(4), TE_FOR_SERIAL,
        te__for(c, ii, I(0), I(32), TE_FOR_SERIAL, te__if(c, te_lt(c, i, I(100)), st, NULL)));
    te_stmt *out = te__pass_loop_partition(TE_PC(c), prog);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_string_equal(txt, "for (i_o, 0, 3) {\n"
                             "  for (i_i, 0, 32) {\n"
                             "    B[((i_o * 32) + i_i)] = f32(((i_o * 96) + (i_i * 3)))\n"
                             "  }\n"
                             "}\n"
                             "for (i_i, 0, 4) {\n"
                             "  B[(i_i + 96)] = f32(((i_i * 3) + 288))\n"
                             "}\n");
    free(txt);
    long n;
    double *r = run(out, B, 100, &n);
    assert_int_equal(n, 100);
    for (int k = 0; k < 100; k++)
        assert_true(r[k] == 3.0 * k);
    free(r);
    same_result(prog, out, B, 100);
    te_ctx_free(c);
}

static void test_2d_tails_lose_every_guard(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *C = te__buf_new(c, "C", TE_F32, 2, (int64_t[]){30, 20}, TE_SCOPE_GLOBAL);
    te_expr *io = te__loop_var(c, "i_o", 4), *jo = te__loop_var(c, "j_o", 3);
    te_expr *ii = te__loop_var(c, "i_i", 8), *ji = te__loop_var(c, "j_i", 8);
    te_expr *i = te_add(c, te_mul(c, io, I(8)), ii), *j = te_add(c, te_mul(c, jo, I(8)), ji);
    te_stmt *st = te__store(c, C, 2, (te_expr *[]){i, j},
                            te_cast(c, TE_F32, te_add(c, te_mul(c, i, I(100)), j)));
    te_stmt *g = te__if(c, te_and(c, te_lt(c, i, I(30)), te_lt(c, j, I(20))), st, NULL);
    te_stmt *prog = te__for(c, io, I(0), I(4), TE_FOR_SERIAL,
                            te__for(c, jo, I(0), I(3), TE_FOR_SERIAL,
                                    te__for(c, ii, I(0), I(8), TE_FOR_SERIAL,
                                            te__for(c, ji, I(0), I(8), TE_FOR_SERIAL, g))));
    te_stmt *out = te__pass_loop_partition(TE_PC(c), prog);
    assert_non_null(out);
    char *txt = pt_print(out);
    if (getenv("PT_SHOW"))
        fputs(txt, stderr);
    assert_int_equal(pt_count(txt, "if ("), 0);
    /* The hot nest keeps full extents: i_o in [0,3), j_o in [0,2), 8 x 8 inside. */
    assert_non_null(strstr(txt, "for (i_o, 0, 3) {\n  for (j_o, 0, 2) {\n    for (i_i, 0, 8) {\n"
                                "      for (j_i, 0, 8) {\n"));
    free(txt);
    long n;
    double *r = run(out, C, 600, &n);
    assert_int_equal(n, 600);
    free(r);
    same_result(prog, out, C, 600);
    te_ctx_free(c);
}

static void test_padding_guard_both_sides(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 34);
    te_expr *k = te__loop_var(c, "k", 4);
    te_stmt *st =
        te__store(c, B, 1, (te_expr *[]){te_sub(c, i, I(1))}, te_cast(c, TE_F32, te_add(c, i, k)));
    /* The guard is inside an inner loop over k. */
    te_stmt *prog =
        te__for(c, i, I(0), I(34), TE_FOR_SERIAL,
                te__for(c, k, I(0), I(4), TE_FOR_SERIAL,
                        te__if(c, te_and(c, te_ge(c, i, I(1)), te_lt(c, i, I(33))), st, NULL)));
    te_stmt *out = te__pass_loop_partition(TE_PC(c), prog);
    char *txt = pt_print(out);
    assert_string_equal(txt, "for (i, 1, 32) {\n"
                             "  for (k, 0, 4) {\n"
                             "    B[(i - 1)] = f32((i + k))\n"
                             "  }\n"
                             "}\n");
    free(txt);
    same_result(prog, out, B, 32);
    te_ctx_free(c);
}

static void test_guard_on_inner_variable_and_unknown_guard(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *M = te__buf_new(c, "M", TE_I64, 1, (int64_t[]){1}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 8), *j = te__loop_var(c, "j", 8);
    te_expr *ix = te_add(c, te_mul(c, i, I(8)), j);
    te_stmt *st = te__store(c, B, 1, (te_expr *[]){ix}, te_f32(c, 1));
    /* A guard on a loaded value cannot be decided: the loop stays as it was. */
    te_expr *ld = te__load(c, M, 1, (te_expr *[]){I(0)});
    te_stmt *prog =
        te__for(c, i, I(0), I(8), TE_FOR_SERIAL,
                te__for(c, j, I(0), I(8), TE_FOR_SERIAL, te__if(c, te_lt(c, ix, ld), st, NULL)));
    assert_ptr_equal(te__pass_loop_partition(TE_PC(c), prog), prog);

    /* A guard i + j < 10 with i outer: i in [0,2] is clean, i in [3,7] keeps it. */
    te_stmt *p2 = te__for(c, i, I(0), I(8), TE_FOR_SERIAL,
                          te__for(c, j, I(0), I(8), TE_FOR_SERIAL,
                                  te__if(c, te_lt(c, te_add(c, i, j), I(10)), st, NULL)));
    te_stmt *out = te__pass_loop_partition(TE_PC(c), p2);
    char *txt = pt_print(out);
    if (getenv("PT_SHOW"))
        fputs(txt, stderr);
    assert_non_null(strstr(txt, "for (i, 0, 3) {\n  for (j, 0, 8) {\n    B["));
    assert_non_null(strstr(txt, "for (i, 3, 5) {"));
    free(txt);
    same_result(p2, out, B, 64);
    te_ctx_free(c);
}

/* A 1-D stencil with zero borders, B[i] = A[i-1] + A[i] + A[i+1] read through if_then_else
 * guards, i = i_o * 8 + i_i with i_i vectorized: the border iterations of i_o are peeled into
 * a head and a tail, and the interior loses every guard (so it vectorizes to plain loads). */
static void test_if_then_else_borders_are_peeled(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_expr *io = te__loop_var(c, "i_o", 8), *ii = te__loop_var(c, "i_i", 8);
    te_expr *i = te_add(c, te_mul(c, io, I(8)), ii);
    te_expr *im = te_sub(c, i, I(1)), *ip = te_add(c, i, I(1));
    te_expr *lo = te_if_then_else(c, te_ge(c, im, I(0)), te__load(c, A, 1, &im), te_f32(c, 0));
    te_expr *hi = te_if_then_else(c, te_lt(c, ip, I(64)), te__load(c, A, 1, &ip), te_f32(c, 0));
    te_expr *val = te_add(c, te_add(c, lo, te__load(c, A, 1, &i)), hi);
    te_stmt *prog = te__for(
        c, io, I(0), I(8), TE_FOR_SERIAL,
        te__for(c, ii, I(0), I(8), TE_FOR_VECTORIZED, te__store(c, B, 1, (te_expr *[]){i}, val)));
    te_stmt *out = te__pass_simplify(TE_PC(c), te__pass_loop_partition(TE_PC(c), prog));
    assert_non_null(out);
    char *txt = pt_print(out);
    if (getenv("PT_SHOW"))
        fputs(txt, stderr);
    /* head (i_o = 0), interior (i_o in [1, 7)), tail (i_o = 7) */
    assert_int_equal(out->kind, TE_S_SEQ);
    assert_int_equal(out->u.seq.n, 3);
    const te_stmt *mid = out->u.seq.v[1];
    assert_int_equal(mid->kind, TE_S_FOR);
    assert_ptr_equal(mid->u.loop.var, io);
    int64_t m, e;
    assert_true(te__is_const_int(mid->u.loop.min, &m) && m == 1);
    assert_true(te__is_const_int(mid->u.loop.extent, &e) && e == 6);
    char *mtxt = pt_print((te_stmt *)mid);
    assert_int_equal(pt_count(mtxt, "if_then_else"), 0);
    assert_int_equal(pt_count(txt, "if_then_else"), 2); /* one guard left at each border */
    free(mtxt);
    free(txt);
    /* same values, and nothing read outside A */
    float a[64];
    for (int k = 0; k < 64; k++)
        a[k] = (float)(k % 11) - 4.5f;
    double *res[2];
    const te_stmt *progs[2] = {prog, out};
    for (int q = 0; q < 2; q++) {
        double ad[64];
        for (int k = 0; k < 64; k++)
            ad[k] = a[k];
        res[q] = malloc(sizeof(double) * 64);
        for (int k = 0; k < 64; k++)
            res[q][k] = NAN;
        pt_env env = {0};
        pt_add_buf(&env, A, ad, 64);
        pt_add_buf(&env, B, res[q], 64);
        pt_exec(&env, progs[q]);
        assert_int_equal(env.err, 0);
    }
    for (int k = 0; k < 64; k++) {
        double want = (k >= 1 ? a[k - 1] : 0) + a[k] + (k + 1 < 64 ? a[k + 1] : 0);
        assert_true(res[0][k] == want);
        assert_true(res[1][k] == want);
    }
    free(res[0]);
    free(res[1]);
    te_ctx_free(c);
}

/* Random two-level nests with random linear guards: partitioning (then unrolling and
 * simplifying) never changes which elements are written or their values. */
static void test_random_guards_keep_semantics(void **state)
{
    (void)state;
    uint64_t seed = tt_seed(777);
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    te_binop ops[] = {TE_LT, TE_LE, TE_GT, TE_GE, TE_EQ, TE_NE};
    for (int iter = 0; iter < 1500; iter++) {
        te_ctx *c = te_ctx_create();
        int64_t m0 = tt_rng_int(&rng, 5) - 2, e0 = tt_rng_int(&rng, 6) + 1;
        int64_t m1 = tt_rng_int(&rng, 5) - 2, e1 = tt_rng_int(&rng, 6) + 1;
        te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){e0 * e1}, TE_SCOPE_GLOBAL);
        te_expr *v0 = te__loop_var(c, "v0", 0), *v1 = te__loop_var(c, "v1", 0);
        te_expr *cond = NULL;
        int nconj = 1 + (int)tt_rng_int(&rng, 2);
        for (int q = 0; q < nconj; q++) {
            te_expr *lhs = te_add(c, te_mul(c, v0, I(tt_rng_int(&rng, 7) - 3)),
                                  te_mul(c, v1, I(tt_rng_int(&rng, 7) - 3)));
            te_expr *cmp = te_binary(c, ops[tt_rng_int(&rng, 6)], lhs, I(tt_rng_int(&rng, 13) - 6));
            cond = cond ? te_and(c, cond, cmp) : cmp;
        }
        te_expr *ix = te_add(c, te_mul(c, te_sub(c, v0, I(m0)), I(e1)), te_sub(c, v1, I(m1)));
        te_stmt *st = te__store(c, B, 1, (te_expr *[]){ix},
                                te_cast(c, TE_F32, te_add(c, te_mul(c, v0, I(100)), v1)));
        te_for_kind k1 = tt_rng_int(&rng, 3) == 0 ? TE_FOR_UNROLLED : TE_FOR_SERIAL;
        te_stmt *prog = te__for(c, v0, I(m0), I(e0), TE_FOR_SERIAL,
                                te__for(c, v1, I(m1), I(e1), k1, te__if(c, cond, st, NULL)));
        te_stmt *out = te__pass_loop_partition(TE_PC(c), prog);
        assert_non_null(out);
        te_stmt *out2 = te__pass_simplify(TE_PC(c), te__pass_unroll(TE_PC(c), out));
        assert_non_null(out2);
        long sa, sb, sc;
        double *ra = run(prog, B, e0 * e1, &sa), *rb = run(out, B, e0 * e1, &sb),
               *rc = run(out2, B, e0 * e1, &sc);
        bool ok = sa == sb && sa == sc;
        for (int64_t n = 0; n < e0 * e1 && ok; n++)
            ok = (isnan(ra[n]) && isnan(rb[n]) && isnan(rc[n])) ||
                 (ra[n] == rb[n] && ra[n] == rc[n]);
        if (!ok) {
            char *p0 = pt_print(prog), *p1 = pt_print(out), *p2 = pt_print(out2);
            fprintf(stderr,
                    "seed %llu iter %d\nbefore:\n%safter partition:\n%s"
                    "after unroll+simplify:\n%s",
                    (unsigned long long)seed, iter, p0, p1, p2);
            free(p0);
            free(p1);
            free(p2);
        }
        free(ra);
        free(rb);
        free(rc);
        te_ctx_free(c);
        assert_true(ok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_tail_is_partitioned),
        cmocka_unit_test(test_2d_tails_lose_every_guard),
        cmocka_unit_test(test_padding_guard_both_sides),
        cmocka_unit_test(test_guard_on_inner_variable_and_unknown_guard),
        cmocka_unit_test(test_if_then_else_borders_are_peeled),
        cmocka_unit_test(test_random_guards_keep_semantics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
