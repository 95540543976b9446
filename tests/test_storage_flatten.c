/* Tests of storage flattening: row-major flat indices for 2-D and 3-D buffers, vector
 * indices, allocations keep their shape, rank mismatches are errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"

#define I(v) te_int(c, (v))

static void test_3d_index_is_row_major(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 3, (int64_t[]){2, 3, 4}, TE_SCOPE_GLOBAL);
    te_buf *O = te__buf_new(c, "O", TE_F32, 3, (int64_t[]){2, 3, 4}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 2), *j = te__loop_var(c, "j", 3),
            *k = te__loop_var(c, "k", 4);
    /* O[i, j, k] = A[1 - i, j, 3 - k] * 2 */
    te_expr *ld = te__load(c, A, 3, (te_expr *[]){te_sub(c, I(1), i), j, te_sub(c, I(3), k)});
    te_stmt *st = te__store(c, O, 3, (te_expr *[]){i, j, k}, te_mul(c, ld, te_f32(c, 2)));
    te_stmt *prog = te__for(
        c, i, I(0), I(2), TE_FOR_SERIAL,
        te__for(c, j, I(0), I(3), TE_FOR_SERIAL, te__for(c, k, I(0), I(4), TE_FOR_SERIAL, st)));
    te_stmt *out = te__pass_storage_flatten(TE_PC(c), prog);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_non_null(strstr(txt, "O[(((i * 12) + (j * 4)) + k)] = "
                                "(A[((((j * 4) - (i * 12)) - k) + 15)] * 2f)\n"));
    free(txt);
    const te_stmt *inner = out->u.loop.body->u.loop.body->u.loop.body;
    assert_int_equal(inner->kind, TE_S_STORE);
    assert_int_equal(inner->u.store.n, 1);
    assert_int_equal(inner->u.store.value->u.bin.a->u.load.n, 1);

    /* Same values before and after. */
    double a[24], o1[24], o2[24];
    for (int n = 0; n < 24; n++)
        a[n] = n * 1.5;
    pt_env e1 = {0}, e2 = {0};
    pt_add_buf(&e1, A, a, 24);
    pt_add_buf(&e1, O, o1, 24);
    pt_add_buf(&e2, A, a, 24);
    pt_add_buf(&e2, O, o2, 24);
    pt_exec(&e1, prog);
    pt_exec(&e2, out);
    assert_int_equal(e1.err, 0);
    assert_int_equal(e2.err, 0);
    for (int n = 0; n < 24; n++)
        assert_true(o1[n] == o2[n]);
    assert_true(o2[0] == 2 * a[1 * 12 + 0 * 4 + 3]);
    te_ctx_free(c);
}

static void test_vector_index_and_alloc(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 2, (int64_t[]){4, 16}, TE_SCOPE_GLOBAL);
    te_buf *T = te__buf_new(c, "T", TE_F32, 2, (int64_t[]){8, 4}, TE_SCOPE_LOCAL);
    te_expr *i = te__loop_var(c, "i", 4), *j = te__loop_var(c, "j", 2);
    te_expr *ld = te__load(c, A, 2, (te_expr *[]){i, te__ramp(c, te_mul(c, j, I(8)), 1, 8)});
    te_stmt *st =
        te__store(c, T, 2, (te_expr *[]){te__ramp(c, I(0), 1, 8), te__bcast(c, i, 8)}, ld);
    te_stmt *prog = te__alloc_stmt(c, T, st);
    te_stmt *out = te__pass_storage_flatten(TE_PC(c), prog);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_string_equal(txt, "allocate T[f32 x 8 x 4], local\n"
                             "T[ramp(i, 4, 8)] = A[ramp(((i * 16) + (j * 8)), 1, 8)]\n");
    free(txt);
    assert_int_equal(out->u.alloc.buf->ndim, 2);
    te_ctx_free(c);
}

static void test_rank_mismatch_is_an_error(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 3, (int64_t[]){2, 3, 4}, TE_SCOPE_GLOBAL);
    te_stmt *st = te__store(c, A, 2, (te_expr *[]){I(0), I(1)}, te_f32(c, 0));
    assert_null(te__pass_storage_flatten(TE_PC(c), st));
    assert_non_null(strstr(te_ctx_errmsg(c), "'A'"));
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3d_index_is_row_major),
        cmocka_unit_test(test_vector_index_and_alloc),
        cmocka_unit_test(test_rank_mismatch_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
