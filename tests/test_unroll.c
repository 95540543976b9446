/* Tests of unrolling: extents 1 and 4, nested unrolled loops, per-copy simplification, and
 * loops that cannot be unrolled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"

#define I(v) te_int(c, (v))

static void check_same(te_stmt *a, te_stmt *b, te_buf *buf, int64_t n)
{
    assert_true(pt_same_effect(a, b, &(pt_run){.out = buf, .n = n}));
}

static void test_unroll_extent_4_inside_serial_loop(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){12}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 3), *k = te__loop_var(c, "k", 4);
    te_expr *ix = te_add(c, te_mul(c, i, I(4)), k);
    te_stmt *prog = te__for(
        c, i, I(0), I(3), TE_FOR_SERIAL,
        te__for(c, k, I(0), I(4), TE_FOR_UNROLLED,
                te__store(c, B, 1, (te_expr *[]){ix}, te_cast(c, TE_F32, te_mul(c, ix, I(2))))));
    te_stmt *out = te__pass_unroll(TE_PC(c), prog);
    char *txt = pt_print(out);
    assert_string_equal(txt, "for (i, 0, 3) {\n"
                             "  B[(i * 4)] = f32((i * 8))\n"
                             "  B[((i * 4) + 1)] = f32(((i * 8) + 2))\n"
                             "  B[((i * 4) + 2)] = f32(((i * 8) + 4))\n"
                             "  B[((i * 4) + 3)] = f32(((i * 8) + 6))\n"
                             "}\n");
    free(txt);
    check_same(prog, out, B, 12);
    te_ctx_free(c);
}

static void test_unroll_extent_1_and_0(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    te_expr *k = te__loop_var(c, "k", 1);
    te_stmt *st = te__store(c, B, 1, (te_expr *[]){te_add(c, k, I(5))}, te_f32(c, 1));
    te_stmt *one = te__for(c, k, I(5) /* min */, I(1), TE_FOR_UNROLLED, st);
    char *txt = pt_print(te__pass_unroll(TE_PC(c), one));
    assert_string_equal(txt, "B[10] = 1f\n");
    free(txt);
    te_stmt *zero = te__for(c, k, I(0), I(0), TE_FOR_UNROLLED, st);
    te_stmt *out = te__pass_unroll(TE_PC(c), zero);
    assert_non_null(out);
    assert_int_equal(out->kind, TE_S_SEQ);
    assert_int_equal(out->u.seq.n, 0);
    te_ctx_free(c);
}

static void test_nested_unroll(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){6}, TE_SCOPE_GLOBAL);
    te_expr *a = te__loop_var(c, "a", 2), *b = te__loop_var(c, "b", 3);
    te_expr *ix = te_add(c, te_mul(c, a, I(3)), b);
    te_stmt *prog = te__for(c, a, I(0), I(2), TE_FOR_UNROLLED,
                            te__for(c, b, I(0), I(3), TE_FOR_UNROLLED,
                                    te__store(c, B, 1, (te_expr *[]){ix}, te_cast(c, TE_F32, ix))));
    te_stmt *out = te__pass_unroll(TE_PC(c), prog);
    char *txt = pt_print(out);
    assert_string_equal(txt, "B[0] = 0f\nB[1] = 1f\nB[2] = 2f\nB[3] = 3f\nB[4] = 4f\n"
                             "B[5] = 5f\n");
    free(txt);
    check_same(prog, out, B, 6);
    te_ctx_free(c);
}

static void test_copies_are_simplified_and_limits(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){4096}, TE_SCOPE_GLOBAL);
    te_expr *k = te__loop_var(c, "k", 4);
    te_stmt *st = te__store(c, B, 1, (te_expr *[]){k}, te_f32(c, 1));
    /* A guard decided per copy: only the copies where it holds remain. */
    te_stmt *g = te__for(c, k, I(0), I(4), TE_FOR_UNROLLED, te__if(c, te_lt(c, k, I(3)), st, NULL));
    char *txt = pt_print(te__pass_unroll(TE_PC(c), g));
    assert_string_equal(txt, "B[0] = 1f\nB[1] = 1f\nB[2] = 1f\n");
    free(txt);
    /* Too large to unroll, or a non-constant extent: a serial loop. */
    te_stmt *big = te__pass_unroll(TE_PC(c), te__for(c, k, I(0), I(2000), TE_FOR_UNROLLED, st));
    assert_int_equal(big->kind, TE_S_FOR);
    assert_int_equal(big->u.loop.fkind, TE_FOR_SERIAL);
    te_expr *n = te_var(c, "n", TE_I64);
    te_stmt *var = te__pass_unroll(TE_PC(c), te__for(c, k, I(0), n, TE_FOR_UNROLLED, st));
    assert_int_equal(var->kind, TE_S_FOR);
    assert_int_equal(var->u.loop.fkind, TE_FOR_SERIAL);
    /* Other loops are left alone (the very same statement comes back). */
    te_stmt *ser = te__for(c, k, I(0), I(4), TE_FOR_SERIAL, st);
    assert_ptr_equal(te__pass_unroll(TE_PC(c), ser), ser);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unroll_extent_4_inside_serial_loop),
        cmocka_unit_test(test_unroll_extent_1_and_0),
        cmocka_unit_test(test_nested_unroll),
        cmocka_unit_test(test_copies_are_simplified_and_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
