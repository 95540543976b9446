/* Tests of the simplifier: canonical linear forms, folding, range-based rules, the statement
 * pass, and a randomized check that simplification never changes an integer value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "testutil.h"

typedef struct fx {
    te_ctx *ctx;
    te__range_map rm;
    te_expr *i, *j, *k;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->ctx = te_ctx_create();
    f->i = te__loop_var(f->ctx, "i", 8);
    f->j = te__loop_var(f->ctx, "j", 32);
    f->k = te__loop_var(f->ctx, "k", 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    te_ctx_free(f->ctx);
    free(f);
    return 0;
}

/* Simplifies e under f->rm and compares its printed form. */
static void check(fx *f, te_expr *e, const char *want)
{
    if (!e)
        fprintf(stderr, "building the expression for '%s' failed: %s\n", want,
                te_ctx_errmsg(f->ctx));
    assert_non_null(e);
    te_expr *s = te__simplify_expr(f->ctx, e, &f->rm);
    assert_non_null(s);
    char *got = pt_print_expr(s);
    if (strcmp(got, want) != 0) {
        char *orig = pt_print_expr(e);
        fprintf(stderr, "simplify %s\n  got  %s\n  want %s\n", orig, got, want);
        free(orig);
    }
    assert_string_equal(got, want);
    free(got);
}

static void push_ij(fx *f)
{
    te__ranges_push(f->ctx, &f->rm, f->i, 0, 7);
    te__ranges_push(f->ctx, &f->rm, f->j, 0, 31);
}

#define I(v) te_int(c, (v))

static void test_canonical_order_and_constants(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    te_expr *i = f->i, *j = f->j, *k = f->k;
    check(f, te_add(c, te_add(c, j, te_mul(c, I(32), i)), I(0)), "((i * 32) + j)");
    check(f, te_add(c, te_add(c, j, i), I(0)), "(i + j)");
    check(f, te_sub(c, te_add(c, i, I(3)), te_add(c, i, I(1))), "2");
    check(f, te_sub(c, j, j), "0");
    /* Distributing needs i's range: with i unbounded, i * 4 overflows at i = INT64_MIN / 4 - 1
     * where (i + 1) * 4 is exactly INT64_MIN (test_arith checks that it then stays). */
    te__ranges_push(c, &f->rm, i, 0, 7);
    check(f, te_mul(c, te_add(c, i, I(1)), I(4)), "((i * 4) + 4)");
    te__ranges_pop(&f->rm);
    check(f, te_sub(c, I(8), i), "(8 - i)");
    check(f, te_sub(c, te_neg(c, i), I(1)), "(-i - 1)");
    check(f, te_sub(c, te_add(c, i, j), te_mul(c, k, I(2))), "((i + j) - (k * 2))");
    check(f, te_mul(c, i, I(1)), "i");
    check(f, te_mul(c, i, I(0)), "0");
    check(f, te_mul(c, te_mul(c, j, I(2)), te_mul(c, i, I(3))), "((i * j) * 6)");
    check(f, te_mul(c, te_add(c, I(3), I(4)), I(2)), "14");
    /* Terms merge across nesting: (i*32 + j) - i*32 = j. */
    check(f, te_sub(c, te_add(c, te_mul(c, i, I(32)), j), te_mul(c, i, I(32))), "j");
}

static void test_constant_folding_all_types(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    /* f32 folds in float: 0.1f + 0.2f rounds differently from double. */
    te_expr *s = te__simplify_expr(c, te_add(c, te_f32(c, 0.1), te_f32(c, 0.2)), NULL);
    assert_int_equal(s->kind, TE_E_FLOAT);
    assert_true(s->u.f == (double)(0.1f + 0.2f));
    s = te__simplify_expr(c, te_mul(c, te_const(c, TE_F64, 0.1), te_const(c, TE_F64, 3)), NULL);
    assert_true(s->u.f == 0.1 * 3.0);
    check(f, te_sqrt(c, te_f32(c, 4.0)), "2f");
    check(f, te_cast(c, TE_I64, te_cast(c, TE_F32, te_var(c, "x", TE_I64))), "i64(f32(x))");
    check(f, te_binary(c, TE_DIV, I(-7), I(2)), "-3");
    check(f, te_binary(c, TE_MOD, I(-7), I(2)), "-1");
    check(f, te_floordiv(c, I(-7), I(2)), "-4");
    check(f, te_floormod(c, I(-7), I(2)), "1");
    check(f, te_and(c, te_lt(c, I(1), I(2)), te_not(c, te_eq(c, I(3), I(3)))), "0");
    check(f, te_or(c, te_gt(c, I(1), I(2)), te_ge(c, I(3), I(3))), "1");
    check(f, te_select(c, te_lt(c, I(1), I(2)), f->i, f->j), "i");
    check(f, te_max(c, I(3), I(-2)), "3");
    /* A CAST node of a constant (te_cast itself folds only exact conversions). */
    te_expr *cast = te__new_expr(c, TE_E_CAST, TE_I32);
    cast->u.un.a = te_const(c, TE_F64, -2.75);
    check(f, cast, "-2");
    /* i32 arithmetic wraps to its width. */
    te_expr *big = te_const(c, TE_I32, 2147483647);
    s = te__simplify_expr(c, te_add(c, big, te_const(c, TE_I32, 1)), NULL);
    assert_int_equal(s->u.i, INT32_MIN);
    /* Float identities are only the exact ones; x + 0.0 stays (it changes -0.0). */
    te_expr *x = te_var(c, "x", TE_F32);
    check(f, te_mul(c, x, te_f32(c, 1)), "x");
    check(f, te_add(c, x, te_f32(c, 0)), "(x + 0f)");
    check(f, te_add(c, te_add(c, x, te_f32(c, 1)), te_f32(c, 2)), "((x + 1f) + 2f)");
}

static void test_division_rules(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    te_expr *i = f->i, *j = f->j, *k = f->k;
    push_ij(f);
    te_expr *lin = te_add(c, te_mul(c, i, I(32)), j);
    check(f, te_floordiv(c, lin, I(32)), "i");
    check(f, te_floormod(c, lin, I(32)), "j");
    check(f, te_floordiv(c, te_add(c, te_mul(c, k, I(32)), j), I(32)), "k");
    check(f, te_floordiv(c, te_add(c, te_mul(c, k, I(32)), I(5)), I(4)), "((k * 8) + 1)");
    check(f, te_floormod(c, te_add(c, k, I(5)), I(4)), "floormod((k + 1), 4)");
    check(f, te_floordiv(c, te_add(c, te_mul(c, k, I(8)), te_mul(c, i, I(3))), I(4)),
          "(floordiv((i * 3), 4) + (k * 2))");
    check(f, te_floordiv(c, j, I(64)), "0");
    check(f, te_floormod(c, j, I(64)), "j");
    check(f, te_floordiv(c, te_floordiv(c, k, I(4)), I(8)), "floordiv(k, 32)");
    /* Truncating division of a non-negative value is floor division. */
    check(f, te_div(c, lin, I(32)), "i");
    check(f, te_mod(c, lin, I(32)), "j");
    check(f, te_div(c, k, I(4)), "(k / 4)");
    /* floordiv(x, c)*c + floormod(x, c) = x */
    check(f, te_add(c, te_mul(c, te_floordiv(c, k, I(6)), I(6)), te_floormod(c, k, I(6))), "k");
    check(f, te_sub(c, k, te_mul(c, te_floordiv(c, k, I(6)), I(6))), "floormod(k, 6)");
}

static void test_min_max_compare_by_ranges(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    te_expr *i = f->i, *j = f->j, *k = f->k;
    push_ij(f);
    check(f, te_min(c, i, I(8)), "i");
    check(f, te_max(c, i, I(8)), "8");
    check(f, te_min(c, k, te_add(c, k, I(1))), "k");
    check(f, te_min(c, I(4), k), "min(k, 4)");
    check(f, te_min(c, te_min(c, k, I(4)), I(2)), "min(k, 2)");
    check(f, te_lt(c, te_add(c, te_mul(c, i, I(32)), j), I(256)), "1");
    check(f, te_lt(c, te_add(c, te_mul(c, i, I(32)), j), I(100)), "(((i * 32) + j) < 100)");
    check(f, te_lt(c, te_add(c, j, I(96)), I(100)), "(j < 4)");
    check(f, te_le(c, k, I(3)), "(k < 4)");
    check(f, te_ge(c, k, I(1)), "(k >= 1)");
    check(f, te_lt(c, te_mul(c, k, I(4)), I(9)), "(k < 3)");
    check(f, te_eq(c, te_mul(c, k, I(4)), I(9)), "0");
    check(f, te_not(c, te_lt(c, k, I(3))), "(k >= 3)");
    check(f, te_and(c, te_lt(c, j, I(40)), te_lt(c, k, I(3))), "(k < 3)");

    int64_t lo, hi;
    assert_true(te__expr_const_bounds(te_add(c, te_mul(c, i, I(32)), j), &f->rm, &lo, &hi));
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 255);
    assert_true(te__expr_const_bounds(te_floormod(c, k, I(6)), &f->rm, &lo, &hi));
    assert_int_equal(hi, 5);
    assert_false(te__expr_const_bounds(te_add(c, k, I(1)), &f->rm, &lo, &hi));
    assert_true(
        te__prove(c, te_and(c, te_ge(c, j, I(0)), te_lt(c, te_sub(c, j, i), I(32))), &f->rm));
    assert_false(te__prove(c, te_lt(c, j, I(31)), &f->rm));
    assert_false(te__prove(c, te_lt(c, k, I(3)), &f->rm));
}

static void test_vectors(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    te_expr *k = f->k;
    te_expr *r = te__ramp(c, te_mul(c, k, I(8)), 1, 8);
    check(f, te_add(c, r, te__bcast(c, te_int(c, 3), 8)), "ramp(((k * 8) + 3), 1, 8)");
    check(f, te_mul(c, r, te__bcast(c, te_int(c, 2), 8)), "ramp((k * 16), 2, 8)");
    check(f, te_add(c, te__bcast(c, I(1), 4), te__bcast(c, I(2), 4)), "x4(3)");
    check(f, te_floordiv(c, r, te__bcast(c, I(8), 8)), "x8(k)");
    check(f, te_floormod(c, r, te__bcast(c, I(8), 8)), "ramp(0, 1, 8)");
    check(f, te_floordiv(c, te__ramp(c, k, 1, 8), te__bcast(c, I(8), 8)),
          "floordiv(ramp(k, 1, 8), x8(8))");
}

/* ---- Statement pass ----------------------------------------------------------------------- */

static void test_stmt_pass(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 4), *j = te__loop_var(c, "j", 1),
            *t = te__loop_var(c, "t", 0), *z = te__loop_var(c, "z", 0);
    /* for i in [0,4): for j in [0,1): if (i < 4) B[i*1 + j] = 1; for z in [0,0): ... */
    te_stmt *st = te__store(c, B, 1, (te_expr *[]){te_add(c, te_mul(c, i, I(1)), j)}, te_f32(c, 1));
    te_stmt *g = te__if(c, te_lt(c, i, I(4)), st, NULL);
    te_stmt *lj = te__for(c, j, I(0), I(1), TE_FOR_SERIAL, g);
    te_stmt *dead = te__for(c, z, I(0), I(0), TE_FOR_SERIAL, st);
    te_stmt *let =
        te__let(c, t, I(5), te__store(c, B, 1, (te_expr *[]){te_add(c, t, i)}, te_f32(c, 2)));
    te_stmt *never = te__if(c, te_gt(c, i, I(10)), st, let);
    te_stmt *body = te__seq(c, 3, (te_stmt *[]){lj, dead, never});
    te_stmt *li = te__for(c, i, I(0), I(4), TE_FOR_SERIAL, body);
    te_stmt *out = te__pass_simplify(TE_PC(c), li);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_string_equal(txt, "for (i, 0, 4) {\n"
                             "  B[i] = 1f\n"
                             "  B[(i + 5)] = 2f\n"
                             "}\n");
    free(txt);

    /* A loop whose body vanishes vanishes; the pass result is then an empty sequence. */
    te_stmt *gone = te__pass_simplify(
        TE_PC(c), te__for(c, i, I(0), I(4), TE_FOR_SERIAL, te__if(c, te_ge(c, i, I(4)), st, NULL)));
    assert_non_null(gone);
    assert_int_equal(gone->kind, TE_S_SEQ);
    assert_int_equal(gone->u.seq.n, 0);

    /* Tightening: for v in [0,32): if (v < 4) body  ->  for v in [0,4): body */
    te_expr *v = te__loop_var(c, "v", 32);
    te_stmt *tl = te__for(c, v, I(0), I(32), TE_FOR_SERIAL,
                          te__if(c, te_lt(c, te_add(c, v, I(96)), I(100)),
                                 te__store(c, B, 1, (te_expr *[]){v}, te_f32(c, 3)), NULL));
    txt = pt_print(te__pass_simplify(TE_PC(c), tl));
    assert_string_equal(txt, "for (v, 0, 4) {\n  B[v] = 3f\n}\n");
    free(txt);

    /* An if's condition narrows ranges inside its then-branch. */
    te_stmt *nar = te__for(
        c, v, I(0), I(32), TE_FOR_SERIAL,
        te__seq(c, 2,
                (te_stmt *[]){
                    te__if(c, te_lt(c, v, I(4)),
                           te__store(c, B, 1, (te_expr *[]){te_floormod(c, v, I(8))}, te_f32(c, 3)),
                           NULL),
                    te__store(c, B, 1, (te_expr *[]){v}, te_f32(c, 4))}));
    txt = pt_print(te__pass_simplify(TE_PC(c), nar));
    assert_string_equal(txt, "for (v, 0, 32) {\n  if ((v < 4)) {\n    B[v] = 3f\n  }\n"
                             "  B[v] = 4f\n}\n");
    free(txt);
}

/* ---- Randomized property test ------------------------------------------------------------- */

#define NV 3

typedef struct gen {
    tt_rng rng;
    te_ctx *ctx;
    te_expr *vars[NV];
} gen;

static te_expr *gen_bool(gen *g, int depth);

static te_expr *gen_int(gen *g, int depth)
{
    te_ctx *c = g->ctx;
    int64_t r = tt_rng_int(&g->rng, depth <= 0 ? 2 : 14);
    switch (r) {
    case 0:
        return g->vars[tt_rng_int(&g->rng, NV)];
    case 1:
        return te_int(c, tt_rng_int(&g->rng, 17) - 8);
    case 2:
    case 3:
        return te_add(c, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 4:
        return te_sub(c, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 5:
        return te_mul(c, gen_int(g, depth - 1), te_int(c, tt_rng_int(&g->rng, 9) - 4));
    case 6:
        return te_mul(c, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 7:
    case 8: {
        int64_t d = tt_rng_int(&g->rng, 8) + 1;
        if (tt_rng_int(&g->rng, 6) == 0)
            d = -d;
        te_binop ops[] = {TE_FLOORDIV, TE_FLOORMOD, TE_DIV, TE_MOD};
        return te_binary(c, ops[tt_rng_int(&g->rng, 4)], gen_int(g, depth - 1), te_int(c, d));
    }
    case 9:
        return te_min(c, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 10:
        return te_max(c, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 11:
        return te_neg(c, gen_int(g, depth - 1));
    case 12:
        return te_select(c, gen_bool(g, depth - 1), gen_int(g, depth - 1), gen_int(g, depth - 1));
    default:
        return te_add(
            c, te_mul(c, g->vars[tt_rng_int(&g->rng, NV)], te_int(c, tt_rng_int(&g->rng, 9) - 4)),
            gen_int(g, depth - 1));
    }
}

static te_expr *gen_bool(gen *g, int depth)
{
    te_ctx *c = g->ctx;
    int64_t r = tt_rng_int(&g->rng, depth <= 0 ? 1 : 4);
    if (r == 0) {
        te_binop ops[] = {TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE};
        return te_binary(c, ops[tt_rng_int(&g->rng, 6)], gen_int(g, depth - 1),
                         gen_int(g, depth - 1));
    }
    if (r == 1)
        return te_not(c, gen_bool(g, depth - 1));
    return te_binary(c, r == 2 ? TE_AND : TE_OR, gen_bool(g, depth - 1), gen_bool(g, depth - 1));
}

static void test_random_integer_expressions_keep_their_value(void **state)
{
    (void)state;
    uint64_t seed = tt_seed(20240611);
    gen g;
    tt_rng_seed(&g.rng, seed);
    clock_t t0 = clock();
    long points = 0;
    for (int iter = 0; iter < 20000; iter++) {
        g.ctx = te_ctx_create();
        te__range_map rm = {0};
        int64_t lo[NV], hi[NV];
        for (int v = 0; v < NV; v++) {
            char name[16];
            snprintf(name, sizeof name, "v%d", v);
            g.vars[v] = te__loop_var(g.ctx, name, 0);
            lo[v] = tt_rng_int(&g.rng, 9) - 4;
            hi[v] = lo[v] + tt_rng_int(&g.rng, 8);
            te__ranges_push(g.ctx, &rm, g.vars[v], lo[v], hi[v]);
        }
        te_expr *e = tt_rng_int(&g.rng, 4) == 0 ? gen_bool(&g, 3) : gen_int(&g, 4);
        assert_non_null(e);
        bool use_ranges = iter % 2 == 0;
        te_expr *s = te__simplify_expr(g.ctx, e, use_ranges ? &rm : NULL);
        assert_non_null(s);
        pt_env env = {0};
        for (int64_t a = lo[0]; a <= hi[0]; a++)
            for (int64_t b = lo[1]; b <= hi[1]; b++)
                for (int64_t d = lo[2]; d <= hi[2]; d++) {
                    env.nvars = 0;
                    env.err = 0;
                    pt_bind(&env, g.vars[0], a);
                    pt_bind(&env, g.vars[1], b);
                    pt_bind(&env, g.vars[2], d);
                    int64_t want = pt_eval_i(&env, e);
                    int werr = env.err;
                    env.err = 0;
                    int64_t got = pt_eval_i(&env, s);
                    points++;
                    if (werr)
                        continue; /* the original divides by zero: anything goes */
                    if (env.err || got != want) {
                        char *pe = pt_print_expr(e), *ps = pt_print_expr(s);
                        fprintf(stderr,
                                "seed %llu iter %d (ranges %s): v0=%lld v1=%lld v2=%lld\n"
                                "  original   %s = %lld\n  simplified %s = %lld%s\n",
                                (unsigned long long)seed, iter, use_ranges ? "on" : "off",
                                (long long)a, (long long)b, (long long)d, pe, (long long)want, ps,
                                (long long)got, env.err ? " (error)" : "");
                        free(pe);
                        free(ps);
                        fail();
                    }
                }
        te_ctx_free(g.ctx);
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("random simplify: 20000 expressions, %ld points, %.2fs, seed %llu\n", points, secs,
           (unsigned long long)seed);
    assert_true(secs < 5.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_canonical_order_and_constants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constant_folding_all_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_division_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_min_max_compare_by_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vectors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stmt_pass, setup, teardown),
        cmocka_unit_test(test_random_integer_expressions_keep_their_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
