/* Tests of the merge_guards pass: adjacent ifs of one condition merged, invariant guards moved
 * out of serial loops, and everything it must leave alone (other conditions, else branches,
 * conditions that read a buffer, parallel loops, guards the loop moves). Each rewrite is run
 * before and after over every value of the outer variable and must store the same values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"

#define I(v) te_int(c, (v))

/* Runs a and b for every value 0..nv-1 of v (NULL: once) over buf's n elements (init, or NaN
 * where init is NULL): both must store the same values. */
static void check_same(te_stmt *a, te_stmt *b, te_expr *v, int nv, te_buf *buf, int64_t n,
                       const double *init)
{
    for (int x = 0; x < (v ? nv : 1); x++)
        assert_true(
            pt_same_effect(a, b, &(pt_run){.out = buf, .n = n, .init = init, .var = v, .val = x}));
}

static te_stmt *put(te_ctx *c, te_buf *B, te_expr *at, double val)
{
    return te__store(c, B, 1, (te_expr *[]){at}, te_f32(c, (float)val));
}

static void expect(te_stmt *s, const char *want) { assert_true(pt_print_is(s, want)); }

/* What unrolling leaves of a guarded tail: the same test on every statement, then a loop over
 * the rest behind it too. One if comes out, holding all of it. */
static void test_adjacent_guards_and_an_invariant_loop_merge(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_expr *b = te__loop_var(c, "b", 4), *k = te__loop_var(c, "k", 4);
    te_expr *cond = te_lt(c, te_floormod(c, b, I(3)), I(2));
    te_stmt *prog = te__seq(
        c, 4,
        (te_stmt *[]){put(c, B, I(0), 1), te__if(c, cond, put(c, B, I(1), 2), NULL),
                      te__if(c, te_lt(c, te_floormod(c, b, I(3)), I(2)), put(c, B, I(2), 3), NULL),
                      te__for(c, k, I(0), I(4), TE_FOR_SERIAL,
                              te__if(c, cond, put(c, B, te_add(c, k, I(4)), 4), NULL))});
    te_stmt *out = te__pass_merge_guards(TE_PC(c), prog);
    assert_non_null(out);
    expect(out, "B[0] = 1f\n"
                "if ((floormod(b, 3) < 2)) {\n"
                "  B[1] = 2f\n"
                "  B[2] = 3f\n"
                "  for (k, 0, 4) {\n"
                "    B[(k + 4)] = 4f\n"
                "  }\n"
                "}\n");
    check_same(prog, out, b, 4, B, 16, NULL);
    te_ctx_free(c);
}

/* Left alone: different conditions, an else branch, a guard the loop moves, a parallel loop,
 * and a statement between two equal guards. */
static void test_what_stays_apart(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_expr *b = te__loop_var(c, "b", 4), *k = te__loop_var(c, "k", 4);
    te_expr *c1 = te_lt(c, b, I(2)), *c2 = te_lt(c, b, I(3));
    te_stmt *prog = te__seq(
        c, 7,
        (te_stmt *[]){te__if(c, c1, put(c, B, I(0), 1), NULL),
                      te__if(c, c2, put(c, B, I(1), 2), NULL),
                      te__if(c, c2, put(c, B, I(2), 3), put(c, B, I(2), 4)),
                      te__for(c, k, I(0), I(4), TE_FOR_SERIAL,
                              te__if(c, te_lt(c, k, b), put(c, B, te_add(c, k, I(4)), 5), NULL)),
                      te__for(c, k, I(0), I(4), TE_FOR_PARALLEL,
                              te__if(c, c1, put(c, B, te_add(c, k, I(8)), 6), NULL)),
                      put(c, B, I(12), 7), te__if(c, c1, put(c, B, I(13), 8), NULL)});
    te_stmt *out = te__pass_merge_guards(TE_PC(c), prog);
    assert_ptr_equal(out, prog); /* nothing to do: the input comes back as it was */
    check_same(prog, out, b, 4, B, 16, NULL);
    te_ctx_free(c);
}

/* A condition that reads a buffer may change between the tests: the first then-branch writes
 * the element the second test reads. Merging would run the second store on the old value. */
static void test_guards_reading_memory_stay_apart(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){4}, TE_SCOPE_GLOBAL);
    te_expr *flag = te_eq(c, te__load(c, B, 1, (te_expr *[]){I(0)}), te_f32(c, 0));
    te_stmt *prog = te__seq(
        c, 2,
        (te_stmt *[]){te__if(c, flag, put(c, B, I(0), 1), NULL),
                      te__if(c, te_eq(c, te__load(c, B, 1, (te_expr *[]){I(0)}), te_f32(c, 0)),
                             put(c, B, I(1), 2), NULL)});
    te_stmt *out = te__pass_merge_guards(TE_PC(c), prog);
    assert_ptr_equal(out, prog);
    double init[4] = {0, 0, 0, 0};
    check_same(prog, out, NULL, 1, B, 4, init);
    /* Merged by hand, the second store runs: what the pass must not do. */
    te_stmt *merged =
        te__if(c, flag, te__seq(c, 2, (te_stmt *[]){put(c, B, I(0), 1), put(c, B, I(1), 2)}), NULL);
    assert_false(pt_same_effect(prog, merged, &(pt_run){.out = B, .n = 4, .init = init}));
    te_ctx_free(c);
}

/* Nested: the inner loop's guard leaves it, then joins the guard beside it; the outer loop's
 * variable is in the condition, so the result stays inside the outer loop. */
static void test_nested_tail_rows(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_expr *b = te__loop_var(c, "b", 3), *i = te__loop_var(c, "i", 2),
            *j = te__loop_var(c, "j", 8);
    te_expr *row = te_add(c, te_mul(c, b, I(2)), i); /* rows 52.. of a block, say */
    te_expr *cond = te_lt(c, row, I(5));
    te_stmt *prog = te__for(
        c, i, I(0), I(2), TE_FOR_SERIAL,
        te__seq(
            c, 2,
            (te_stmt *[]){
                te__if(c, cond, put(c, B, te_mul(c, row, I(9)), -1), NULL),
                te__for(c, j, I(0), I(8), TE_FOR_SERIAL,
                        te__if(c, cond,
                               put(c, B, te_add(c, te_add(c, te_mul(c, row, I(9)), j), I(1)), 2),
                               NULL))}));
    te_stmt *out = te__pass_merge_guards(TE_PC(c), prog);
    assert_non_null(out);
    expect(out, "for (i, 0, 2) {\n"
                "  if ((((b * 2) + i) < 5)) {\n"
                "    B[(((b * 2) + i) * 9)] = -1f\n"
                "    for (j, 0, 8) {\n"
                "      B[(((((b * 2) + i) * 9) + j) + 1)] = 2f\n"
                "    }\n"
                "  }\n"
                "}\n");
    check_same(prog, out, b, 3, B, 64, NULL);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adjacent_guards_and_an_invariant_loop_merge),
        cmocka_unit_test(test_what_stays_apart),
        cmocka_unit_test(test_guards_reading_memory_stay_apart),
        cmocka_unit_test(test_nested_tail_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
