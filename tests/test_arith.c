/* Tests of the arithmetic library (te/arith.h): the facts the emitters and checks use
 * (non-negative, multiple of, constant value), evaluation, linear forms, and the overflow
 * safety of every rewrite: the i64 `a > b` repro of issue 13 end to end, and a randomized
 * differential test of te__simplify_expr against direct evaluation over i32/i64 variables
 * whose ranges include the extreme values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "te/arith.h"
#include "tessera/backend.h"
#include "tessera/schedule.h"
#include "testutil.h"

#define OK(x) assert_int_equal((x), TE_OK)

/* An integer constant of any integer dtype, exactly (te_const goes through a double). */
static te_expr *ic(te_ctx *c, te_dtype dt, int64_t v)
{
    te_expr *e = te__new_expr(c, TE_E_INT, dt);
    e->u.i = v;
    return e;
}

static char *show(const te_expr *e) { return pt_print_expr(e); }

/* ---- Facts ------------------------------------------------------------------------------- */

static void test_nonneg_multiple_const(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te__range_map rm = {0};
    te_expr *i = te__loop_var(c, "i", 0), *j = te__loop_var(c, "j", 0),
            *k = te__loop_var(c, "k", 0);
    OK(te__ranges_push(c, &rm, i, 0, 7));
    OK(te__ranges_push(c, &rm, j, 0, INT64_MAX)); /* known >= 0, no finite bound */
    te_expr *I4 = te_int(c, 4);
    assert_true(te__arith_nonneg(te_add(c, te_mul(c, i, I4), j), &rm));
    assert_true(te__arith_nonneg(te_mul(c, i, j), &rm));
    assert_true(te__arith_nonneg(te_floordiv(c, j, i), &rm));
    assert_true(te__arith_nonneg(te_mod(c, j, i), &rm));
    assert_true(te__arith_nonneg(te_max(c, k, i), &rm));
    assert_true(te__arith_nonneg(te_floormod(c, k, I4), &rm));
    assert_true(te__arith_nonneg(te__ramp(c, j, 1, 8), &rm));
    assert_false(te__arith_nonneg(te__ramp(c, j, -1, 8), &rm));
    assert_false(te__arith_nonneg(te_sub(c, j, i), &rm));
    assert_false(te__arith_nonneg(k, &rm));
    assert_false(te__arith_nonneg(te_min(c, k, i), &rm));
    assert_false(te__arith_nonneg(te_cast(c, TE_I32, j), &rm)); /* narrowing may wrap */
    assert_true(te__arith_nonneg(te_cast(c, TE_I32, i), &rm));
    assert_false(te__arith_nonneg(i, NULL));
    assert_false(te__arith_nonneg(te_f32(c, 1), &rm));

    assert_true(te__arith_multiple_of(te_add(c, te_mul(c, k, te_int(c, 8)), te_int(c, 16)), 8));
    assert_true(te__arith_multiple_of(te_sub(c, te_mul(c, te_int(c, 4), k), te_int(c, 12)), 4));
    assert_true(te__arith_multiple_of(te_neg(c, te_mul(c, k, te_int(c, 6))), 3));
    assert_false(te__arith_multiple_of(te_add(c, te_mul(c, k, te_int(c, 8)), te_int(c, 4)), 8));
    assert_false(te__arith_multiple_of(k, 2));
    /* remainders of multiples (a broadcast row's index in a fused loop: 4 t % 64) */
    assert_true(
        te__arith_multiple_of(te_floormod(c, te_mul(c, k, te_int(c, 4)), te_int(c, 64)), 4));
    assert_true(te__arith_multiple_of(te_mod(c, te_mul(c, k, te_int(c, 8)), te_int(c, 24)), 8));
    assert_false(
        te__arith_multiple_of(te_floormod(c, te_mul(c, k, te_int(c, 4)), te_int(c, 66)), 4));
    assert_false(te__arith_multiple_of(te_floormod(c, k, te_int(c, 64)), 4));

    int64_t v;
    assert_true(te__arith_const_int(te_mul(c, te_add(c, te_int(c, 3), te_int(c, 4)), I4), &v));
    assert_int_equal(v, 28);
    assert_true(te__arith_const_int(te_floormod(c, te_int(c, -7), te_int(c, 2)), &v));
    assert_int_equal(v, 1);
    te_expr *narrow = te__new_expr(c, TE_E_CAST, TE_I32);
    narrow->u.un.a = te_int(c, 4294967297LL);
    assert_true(te__arith_const_int(narrow, &v));
    assert_int_equal(v, 1); /* conversions wrap like C's */
    assert_false(te__arith_const_int(te_add(c, te_int(c, INT64_MAX), te_int(c, 1)), &v));
    assert_false(te__arith_const_int(te_add(c, ic(c, TE_I32, INT32_MAX), ic(c, TE_I32, 1)), &v));
    assert_false(te__arith_const_int(te_div(c, te_int(c, 1), te_int(c, 0)), &v));
    assert_false(te__arith_const_int(te_div(c, te_int(c, INT64_MIN), te_int(c, -1)), &v));
    assert_false(te__arith_const_int(k, &v));

    const te_expr *vars[] = {i, k};
    int64_t vals[] = {3, -5};
    assert_true(te__arith_eval_int(te_sub(c, te_mul(c, i, k), te_floordiv(c, k, te_int(c, 2))), 2,
                                   vars, vals, &v));
    assert_int_equal(v, -15 + 3);
    assert_false(te__arith_eval_int(te_add(c, i, j), 2, vars, vals, &v));

    int64_t kk, cc;
    assert_true(te__arith_linear_in_var(te_add(c, te_mul(c, i, te_int(c, 3)), te_int(c, 5)),
                                        te_sub(c, i, te_int(c, 1)), i, &kk, &cc));
    assert_int_equal(kk, 2);
    assert_int_equal(cc, 6);
    assert_false(te__arith_linear_in_var(te_add(c, i, j), te_int(c, 0), i, &kk, &cc));

    int64_t lo, hi;
    assert_true(te__expr_const_bounds(te_min(c, k, te_int(c, 8)), &rm, NULL, &hi));
    assert_int_equal(hi, 8);
    assert_false(te__expr_const_bounds(te_min(c, k, te_int(c, 8)), &rm, &lo, &hi));
    te_ctx_free(c);
}

/* te__const_flat_index: row-major over the buffer's shape, a single index already flat; false
 * for a non-constant index or a flat index that overflows. */
static void test_const_flat_index(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *b = te__buf_new(c, "B", TE_F32, 3, (int64_t[]){2, 3, 4}, TE_SCOPE_LOCAL);
    te_buf *huge = te__buf_new(c, "H", TE_F32, 2, (int64_t[]){INT64_MAX / 2, 4}, TE_SCOPE_LOCAL);
    te_expr *k = te__loop_var(c, "k", 4);
    int64_t v = -1;
    assert_int_equal(te__buf_numel(b), 24);
    assert_true(te__const_flat_index(
        b, 3, (te_expr *[]){te_int(c, 1), te_sub(c, te_int(c, 4), te_int(c, 2)), te_int(c, 3)},
        &v));
    assert_int_equal(v, 1 * 12 + 2 * 4 + 3);
    assert_true(te__const_flat_index(b, 1, (te_expr *[]){te_int(c, 17)}, &v));
    assert_int_equal(v, 17);
    assert_false(te__const_flat_index(b, 3, (te_expr *[]){te_int(c, 1), k, te_int(c, 0)}, &v));
    assert_false(
        te__const_flat_index(huge, 2, (te_expr *[]){te_int(c, INT64_MAX / 3), te_int(c, 0)}, &v));
    te_ctx_free(c);
}

/* ---- Overflow safety: specific rules ------------------------------------------------------ */

static void expect(te_ctx *c, te_expr *e, const te__range_map *rm, const char *want)
{
    te_expr *s = te__simplify_expr(c, e, rm);
    assert_non_null(s);
    char *got = show(s);
    if (strcmp(got, want) != 0) {
        char *o = show(e);
        fprintf(stderr, "simplify %s\n  got  %s\n  want %s\n", o, got, want);
        free(o);
    }
    assert_string_equal(got, want);
    free(got);
}

static void test_rewrites_that_would_overflow_stay(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te__range_map rm = {0};
    te_expr *x = te__loop_var(c, "x", 0), *j = te__loop_var(c, "j", 0),
            *i = te__loop_var(c, "i", 0);
    OK(te__ranges_push(c, &rm, j, 0, 1023));
    te_buf *R = te__buf_new(c, "R", TE_I64, 1, (int64_t[]){4}, TE_SCOPE_GLOBAL);
    te_expr *acc = te__load(c, R, 1, (te_expr *[]){te_int(c, 0)});
    /* The issue 13 repro: acc > x*1024 + 1023 - j must not become x*1024 < acc + j - 1023
     * (acc is INT64_MIN at first). */
    te_expr *y = te_add(c, te_mul(c, x, te_int(c, 1024)), te_sub(c, te_int(c, 1023), j));
    expect(c, te_gt(c, acc, y), &rm, "(R[0] > ((x * 1024) + (1023 - j)))");
    /* With bounded operands the canonical form is still used. */
    te__range_map rx = rm;
    OK(te__ranges_push(c, &rx, x, 0, 100));
    expect(c, te_gt(c, te_add(c, x, te_int(c, 5)), te_add(c, j, te_int(c, 2))), &rx,
           "(j < (x + 3))");
    /* (i + 1) * 4 is INT64_MIN at i = INT64_MIN / 4 - 1, where i * 4 overflows. */
    expect(c, te_mul(c, te_add(c, i, te_int(c, 1)), te_int(c, 4)), NULL, "((i + 1) * 4)");
    /* -(i + 5): -i overflows at i = INT64_MIN. */
    expect(c, te_neg(c, te_add(c, i, te_int(c, 5))), NULL, "-(i + 5)");
    /* floordiv(i + 7, 4) must not compute i + 3 ... it can: i + 3 lies between i and i + 7. */
    expect(c, te_floormod(c, te_add(c, i, te_int(c, 7)), te_int(c, 4)), NULL,
           "floormod((i + 3), 4)");
    /* ... but floormod(i - 1, 4) becomes floormod(i + 3, 4) only when i + 3 cannot overflow. */
    expect(c, te_floormod(c, te_sub(c, i, te_int(c, 1)), te_int(c, 4)), NULL,
           "floormod((i - 1), 4)");
    te_ctx_free(c);
}

/* The issue 13 kernel: select(x > y, x, y) with identity INT64_MIN over X*1024 + (1023 - j). */
static void test_custom_max_reducer_i64_end_to_end(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X = te_placeholder(c, "X", TE_I64, 1, (int64_t[]){4});
    te_expr *x = te_var(c, "x", TE_I64), *y = te_var(c, "y", TE_I64);
    te_reducer *r = te_reducer_create(c, "maxi", x, y, te_select(c, te_gt(c, x, y), x, y),
                                      te_int(c, INT64_MIN));
    te_expr *i = te_axis(c, "i", 4), *j = te_reduce_axis(c, "j", 1024);
    te_expr *v =
        te_add(c, te_mul(c, TE_AT(c, X, i), te_int(c, 1024)), te_sub(c, te_int(c, 1023), j));
    te_tensor *Rt = te_compute(c, "R", 1, &i, te_reduce(c, TE_RCUSTOM, r, v, 1, (te_expr *[]){j}));
    assert_non_null(Rt);
    te_schedule *s = te_schedule_create(c, 1, &Rt);
    te_tensor *args[] = {X, Rt};
    te_target t = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 2, args, "k", &t, &m) != TE_OK)
        fail_msg("te_build: %s", te_ctx_errmsg(c));
    int64_t xd[4] = {107, 3, -5, 0}, rd[4] = {0};
    OK(te_module_run(m, (void *[]){xd, rd}));
    double ref[4];
    OK(te_reference_eval(c, 1, &X, (const void *const[]){xd}, 1, &Rt, (double *const[]){ref}));
    for (int k = 0; k < 4; k++) {
        assert_true(ref[k] == (double)(xd[k] * 1024 + 1023));
        if ((double)rd[k] != ref[k])
            fail_msg("R[%d] = %lld, reference %.0f; source %s", k, (long long)rd[k], ref[k],
                     te_module_source_path(m));
    }
    te_module_free(m);
    te_ctx_free(c);
}

/* ---- Randomized differential test -------------------------------------------------------- */

#define NV64 3
#define NV32 2

static const int64_t EXT64[] = {INT64_MIN,
                                INT64_MIN + 1,
                                -(INT64_C(1) << 62),
                                (int64_t)INT32_MIN - 1,
                                INT32_MIN,
                                -1000,
                                -2,
                                -1,
                                0,
                                1,
                                2,
                                7,
                                1000,
                                INT32_MAX,
                                (int64_t)INT32_MAX + 1,
                                INT64_C(1) << 62,
                                INT64_MAX - 1,
                                INT64_MAX};
static const int64_t EXT32[] = {INT32_MIN, INT32_MIN + 1, -65536,   -1000, -2, -1, 0, 1, 2, 7, 1000,
                                65536,     INT32_MAX - 1, INT32_MAX};
#define NEXT64 ((int)(sizeof EXT64 / sizeof EXT64[0]))
#define NEXT32 ((int)(sizeof EXT32 / sizeof EXT32[0]))

typedef struct dg {
    tt_rng rng;
    te_ctx *ctx;
    te_expr *v[NV64 + NV32]; /* i64 variables first */
    int64_t lo[NV64 + NV32], hi[NV64 + NV32], val[NV64 + NV32];
} dg;

static int64_t pick(dg *g, te_dtype dt)
{
    if (tt_rng_int(&g->rng, 3) == 0)
        return tt_rng_int(&g->rng, 17) - 8;
    return dt == TE_I64 ? EXT64[tt_rng_int(&g->rng, NEXT64)] : EXT32[tt_rng_int(&g->rng, NEXT32)];
}

static te_expr *dg_bool(dg *g, int depth);
static te_expr *dg_int(dg *g, te_dtype dt, int depth);

/* A divisor: the constructors refuse a constant zero. */
static te_expr *dg_divisor(dg *g, te_dtype dt, int depth)
{
    te_expr *d = depth < 0 ? ic(g->ctx, dt, pick(g, dt)) : dg_int(g, dt, depth);
    if (d && d->kind == TE_E_INT && d->u.i == 0)
        d->u.i = 1;
    return d;
}

static te_expr *dg_int(dg *g, te_dtype dt, int depth)
{
    te_ctx *c = g->ctx;
    int64_t r = tt_rng_int(&g->rng, depth <= 0 ? 2 : 16);
    te_binop divs[] = {TE_DIV, TE_MOD, TE_FLOORDIV, TE_FLOORMOD};
    switch (r) {
    case 0:
        return dt == TE_I64 ? g->v[tt_rng_int(&g->rng, NV64)]
                            : g->v[NV64 + tt_rng_int(&g->rng, NV32)];
    case 1:
        return ic(c, dt, pick(g, dt));
    case 2:
    case 3:
        return te_add(c, dg_int(g, dt, depth - 1), dg_int(g, dt, depth - 1));
    case 4:
        return te_sub(c, dg_int(g, dt, depth - 1), dg_int(g, dt, depth - 1));
    case 5:
        return te_mul(c, dg_int(g, dt, depth - 1), ic(c, dt, pick(g, dt)));
    case 6:
        return te_mul(c, dg_int(g, dt, depth - 1), dg_int(g, dt, depth - 1));
    case 7:
        return te_binary(c, divs[tt_rng_int(&g->rng, 4)], dg_int(g, dt, depth - 1),
                         dg_divisor(g, dt, -1));
    case 8:
        return te_binary(c, divs[tt_rng_int(&g->rng, 4)], dg_int(g, dt, depth - 1),
                         dg_divisor(g, dt, depth - 1));
    case 9:
        return te_min(c, dg_int(g, dt, depth - 1), dg_int(g, dt, depth - 1));
    case 10:
        return te_max(c, dg_int(g, dt, depth - 1), dg_int(g, dt, depth - 1));
    case 11:
        return te_neg(c, dg_int(g, dt, depth - 1));
    case 12:
        return te_select(c, dg_bool(g, depth - 1), dg_int(g, dt, depth - 1),
                         dg_int(g, dt, depth - 1));
    case 13: {
        te_dtype other = dt == TE_I64 ? TE_I32 : TE_I64;
        te_expr *e = te__new_expr(c, TE_E_CAST, dt);
        e->u.un.a = dg_int(g, other, depth - 1);
        return e->u.un.a ? e : NULL;
    }
    default: /* a linear combination with a variable, the shape indices have */
        return te_add(c, te_mul(c, dg_int(g, dt, 0), ic(c, dt, tt_rng_int(&g->rng, 9) - 4)),
                      dg_int(g, dt, depth - 1));
    }
}

static te_expr *dg_bool(dg *g, int depth)
{
    te_ctx *c = g->ctx;
    int64_t r = tt_rng_int(&g->rng, depth <= 0 ? 1 : 4);
    if (r == 0) {
        te_binop ops[] = {TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE};
        te_dtype dt = tt_rng_int(&g->rng, 3) ? TE_I64 : TE_I32;
        return te_binary(c, ops[tt_rng_int(&g->rng, 6)], dg_int(g, dt, depth - 1),
                         dg_int(g, dt, depth - 1));
    }
    if (r == 1)
        return te_not(c, dg_bool(g, depth - 1));
    return te_binary(c, r == 2 ? TE_AND : TE_OR, dg_bool(g, depth - 1), dg_bool(g, depth - 1));
}

/* Exact evaluation in the expression's dtype: false on overflow or division by zero (both
 * operands of every node are evaluated, so "does not overflow" covers the whole tree). */
static bool ev(const dg *g, const te_expr *e, int64_t *out)
{
    int64_t a, b, lo = e->dtype == TE_I32 ? INT32_MIN : INT64_MIN,
                  hi = e->dtype == TE_I32 ? INT32_MAX : INT64_MAX;
    switch (e->kind) {
    case TE_E_INT:
        *out = e->u.i;
        return true;
    case TE_E_VAR:
        for (int i = 0; i < NV64 + NV32; i++)
            if (g->v[i] == e) {
                *out = g->val[i];
                return true;
            }
        return false;
    case TE_E_NOT:
        if (!ev(g, e->u.un.a, &a))
            return false;
        *out = !a;
        return true;
    case TE_E_NEG:
        if (!ev(g, e->u.un.a, &a) || __builtin_sub_overflow((int64_t)0, a, out))
            return false;
        return *out >= lo && *out <= hi;
    case TE_E_CAST:
        if (!ev(g, e->u.un.a, &a))
            return false;
        *out = e->dtype == TE_I32 ? (int32_t)a : a;
        return true;
    case TE_E_SELECT: {
        int64_t cnd, t, f;
        if (!ev(g, e->u.sel.c, &cnd) || !ev(g, e->u.sel.t, &t) || !ev(g, e->u.sel.f, &f))
            return false;
        *out = cnd ? t : f;
        return true;
    }
    case TE_E_BINARY:
        break;
    default:
        return false;
    }
    if (!ev(g, e->u.bin.a, &a) || !ev(g, e->u.bin.b, &b))
        return false;
    switch (e->u.bin.op) {
    case TE_ADD:
        if (__builtin_add_overflow(a, b, out))
            return false;
        break;
    case TE_SUB:
        if (__builtin_sub_overflow(a, b, out))
            return false;
        break;
    case TE_MUL:
        if (__builtin_mul_overflow(a, b, out))
            return false;
        break;
    case TE_DIV:
    case TE_MOD:
    case TE_FLOORDIV:
    case TE_FLOORMOD:
        if (b == 0 || (a == lo && b == -1))
            return false;
        *out = e->u.bin.op == TE_DIV        ? a / b
               : e->u.bin.op == TE_MOD      ? a % b
               : e->u.bin.op == TE_FLOORDIV ? pt_fdiv(a, b)
                                            : pt_fmod(a, b);
        break;
    case TE_MIN:
        *out = a < b ? a : b;
        break;
    case TE_MAX:
        *out = a > b ? a : b;
        break;
    case TE_EQ:
        *out = a == b;
        return true;
    case TE_NE:
        *out = a != b;
        return true;
    case TE_LT:
        *out = a < b;
        return true;
    case TE_LE:
        *out = a <= b;
        return true;
    case TE_GT:
        *out = a > b;
        return true;
    case TE_GE:
        *out = a >= b;
        return true;
    case TE_AND:
        *out = a && b;
        return true;
    case TE_OR:
        *out = a || b;
        return true;
    }
    return *out >= lo && *out <= hi;
}

/* A value in [lo, hi]: an end, next to an end, zero or one when inside, or uniform. */
static int64_t sample(dg *g, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    switch (tt_rng_int(&g->rng, 6)) {
    case 0:
        return lo;
    case 1:
        return hi;
    case 2:
        return span ? lo + 1 : lo;
    case 3:
        return span ? hi - 1 : hi;
    case 4:
        return lo <= 0 && hi >= 0 ? 0 : lo;
    default:
        return span == UINT64_MAX ? (int64_t)tt_rng_next(&g->rng)
                                  : (int64_t)((uint64_t)lo + tt_rng_next(&g->rng) % (span + 1));
    }
}

static void test_random_simplify_against_direct_evaluation(void **state)
{
    (void)state;
    uint64_t seed = tt_seed(20261201);
    dg g;
    tt_rng_seed(&g.rng, seed);
    long checked = 0, skipped = 0;
    for (int iter = 0; iter < 30000; iter++) {
        g.ctx = te_ctx_create();
        te__range_map rm = {0};
        for (int v = 0; v < NV64 + NV32; v++) {
            bool is64 = v < NV64;
            char name[16];
            snprintf(name, sizeof name, "%c%d", is64 ? 'a' : 'b', v);
            g.v[v] = te__loop_var(g.ctx, name, 0);
            g.v[v]->dtype = is64 ? TE_I64 : TE_I32;
            const int64_t *ext = is64 ? EXT64 : EXT32;
            int n = is64 ? NEXT64 : NEXT32;
            int64_t x = ext[tt_rng_int(&g.rng, n)], y = ext[tt_rng_int(&g.rng, n)];
            if (tt_rng_int(&g.rng, 3) == 0) /* a small range next to an extreme value */
                y = x > 0 ? x - tt_rng_int(&g.rng, 8) : x + tt_rng_int(&g.rng, 8);
            g.lo[v] = x < y ? x : y;
            g.hi[v] = x < y ? y : x;
            OK(te__ranges_push(g.ctx, &rm, g.v[v], g.lo[v], g.hi[v]));
        }
        int kind = (int)tt_rng_int(&g.rng, 5);
        te_expr *e = kind == 0   ? dg_bool(&g, 3)
                     : kind <= 2 ? dg_int(&g, TE_I64, 4)
                                 : dg_int(&g, kind == 3 ? TE_I32 : TE_I64, 3);
        if (!e)
            fail_msg("building the expression failed: %s", te_ctx_errmsg(g.ctx));
        bool use_ranges = iter % 2 == 0;
        te_expr *s = te__simplify_expr(g.ctx, e, use_ranges ? &rm : NULL);
        assert_non_null(s);
        for (int p = 0; p < 24; p++) {
            for (int v = 0; v < NV64 + NV32; v++)
                g.val[v] = sample(&g, g.lo[v], g.hi[v]);
            int64_t want, got;
            if (!ev(&g, e, &want)) {
                skipped++;
                continue; /* the original overflows or divides by zero: anything goes */
            }
            checked++;
            bool ok = ev(&g, s, &got);
            if (!ok || got != want) {
                char *pe = show(e), *ps = show(s);
                fprintf(stderr, "seed %llu iter %d (ranges %s):", (unsigned long long)seed, iter,
                        use_ranges ? "on" : "off");
                for (int v = 0; v < NV64 + NV32; v++)
                    fprintf(stderr, " %s=%lld in [%lld, %lld]", g.v[v]->u.var.name,
                            (long long)g.val[v], (long long)g.lo[v], (long long)g.hi[v]);
                fprintf(stderr, "\n  original   %s = %lld\n  simplified %s = %s%lld\n", pe,
                        (long long)want, ps, ok ? "" : "(overflows) ", (long long)got);
                free(pe);
                free(ps);
                fail();
            }
        }
        te_ctx_free(g.ctx);
    }
    printf("differential simplify: %ld points checked, %ld skipped (original overflows), seed "
           "%llu\n",
           checked, skipped, (unsigned long long)seed);
    assert_true(checked > 100000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonneg_multiple_const),
        cmocka_unit_test(test_const_flat_index),
        cmocka_unit_test(test_rewrites_that_would_overflow_stay),
        cmocka_unit_test(test_custom_max_reducer_i64_end_to_end),
        cmocka_unit_test(test_random_simplify_against_direct_evaluation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
