/* Tests of the store_motion pass: elements a serial loop reads and writes at addresses it does
 * not move are loaded into a local buffer before the loop and stored after it, and what must
 * stay does (an index the loop moves, indices that may overlap, a conditional or streaming
 * store, an element only written, a loop of unknown extent). Each rewrite runs before and after
 * and must store the same values; a matmul accumulating in its output is built end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

static void check(te_stmt *prog, te_stmt *out, te_buf *C, te_buf *A, double *a, te_expr *v,
                  int64_t val)
{
    double init[16];
    for (int i = 0; i < 16; i++)
        init[i] = 0.25 * i;
    assert_true(pt_same_effect(prog, out,
                               &(pt_run){.out = C,
                                         .n = 16,
                                         .init = init,
                                         .in = A,
                                         .in_data = a,
                                         .in_n = 8,
                                         .var = v,
                                         .val = val,
                                         .any_stores = true}));
}

static void expect(te_stmt *s, const char *want) { assert_true(pt_print_is(s, want)); }

/* Two accumulators and a read-only neighbour: all three move to C_acc, loaded before the loop;
 * only the two written are stored after it. */
static void test_accumulators_move_to_a_local_buffer(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    double a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    te_expr *b = te__loop_var(c, "b", 2), *k = te__loop_var(c, "k", 8);
    te_expr *at = te_mul(c, b, I(8));
    te_stmt *prog = te__for(
        c, k, I(0), I(8), TE_FOR_SERIAL,
        te__seq(c, 2,
                (te_stmt *[]){
                    pt_st(c, C, at,
                          te_add(c, pt_ld(c, C, at),
                                 te_mul(c, pt_ld(c, A, k), pt_ld(c, C, te_add(c, at, I(7)))))),
                    pt_st(c, C, te_add(c, at, I(1)),
                          te_sub(c, pt_ld(c, C, te_add(c, at, I(1))), pt_ld(c, A, k))),
                }));
    te_stmt *out = te__pass_store_motion(TE_PC(c), prog);
    assert_non_null(out);
    expect(out, "allocate C_acc[f32 x 3], local\n"
                "C_acc[0] = C[(b * 8)]\n"
                "C_acc[1] = C[((b * 8) + 7)]\n"
                "C_acc[2] = C[((b * 8) + 1)]\n"
                "for (k, 0, 8) {\n"
                "  C_acc[0] = (C_acc[0] + (A[k] * C_acc[1]))\n"
                "  C_acc[2] = (C_acc[2] - A[k])\n"
                "}\n"
                "C[(b * 8)] = C_acc[0]\n"
                "C[((b * 8) + 1)] = C_acc[2]\n");
    for (int v = 0; v < 2; v++)
        check(prog, out, C, A, a, b, v);
    te_ctx_free(c);
}

/* Left alone: the loop moves the index; C[b] may be C[3]; a store behind an if; a streaming
 * store; an element only written; a loop of unknown extent; a read in one branch of an
 * if_then_else (C[15] is never read here, so it must not be read before the loop either). */
static void test_what_stays_in_memory(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    double a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    te_expr *b = te__loop_var(c, "b", 8), *k = te__loop_var(c, "k", 8);
    te_expr *inc3 = te_add(c, pt_ld(c, C, I(3)), te_f32(c, 1));
    te_stmt *nt = pt_st(c, C, I(4), te_add(c, pt_ld(c, C, I(4)), pt_ld(c, A, k)));
    nt->u.store.nontemporal = true;
    te_stmt *cases[] = {
        te__for(c, k, I(0), I(8), TE_FOR_SERIAL,
                pt_st(c, C, k, te_add(c, pt_ld(c, C, k), te_f32(c, 1)))),
        te__for(c, k, I(0), I(8), TE_FOR_SERIAL,
                te__seq(c, 2,
                        (te_stmt *[]){pt_st(c, C, I(3), inc3),
                                      pt_st(c, C, b, te_add(c, pt_ld(c, C, b), pt_ld(c, A, k)))})),
        te__for(c, k, I(0), I(8), TE_FOR_SERIAL,
                te__if(c, te_lt(c, k, I(3)), pt_st(c, C, I(3), inc3), NULL)),
        te__for(c, k, I(0), I(8), TE_FOR_SERIAL, nt),
        te__for(c, k, I(0), I(8), TE_FOR_SERIAL, pt_st(c, C, I(5), pt_ld(c, A, k))),
        te__for(c, k, I(0), b, TE_FOR_SERIAL, pt_st(c, C, I(3), inc3)),
        te__for(
            c, k, I(0), I(8), TE_FOR_SERIAL,
            pt_st(c, C, I(3),
                  te_add(c, pt_ld(c, C, I(3)),
                         te_if_then_else(c, te_lt(c, k, I(0)), pt_ld(c, C, I(15)), te_f32(c, 0))))),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        te_stmt *out = te__pass_store_motion(TE_PC(c), cases[i]);
        if (out != cases[i]) {
            char *txt = pt_print(out);
            fail_msg("case %zu was rewritten:\n%s", i, txt);
        }
        check(cases[i], out, C, A, a, b, 3);
    }
    te_ctx_free(c);
}

/* A matmul tile accumulating in its output over k: the generated C keeps the tile in a local
 * buffer promoted to registers, and the product matches the float64 reference. */
static void test_matmul_accumulates_in_registers(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    enum { M = 8, N = 64, K = 40 };
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *Y = te_op_matmul(ctx, A, B, 0, 0, "Y");
    assert_non_null(Y);
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *jo, *ji, *jio, *jii;
    assert_int_equal(te_split(sy, te_stage_axis(sy, 1), 64, &jo, &ji), TE_OK);
    assert_int_equal(te_split(sy, ji, 16, &jio, &jii), TE_OK);
    assert_int_equal(
        te_reorder(sy, 5,
                   (te_iter *[]){te_stage_axis(sy, 0), jo, te_stage_reduce_axis(sy, 0), jio, jii}),
        TE_OK);
    assert_int_equal(te_unroll(sy, jio), TE_OK);
    assert_int_equal(te_vectorize(sy, jii), TE_OK);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 3, (te_tensor *[]){A, B, Y}, "mm_sm", &tgt, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(ctx));
    const char *src = te_module_source(m);
    if (!strstr(src, "Y_acc: 64 x f32, promoted to registers"))
        fail_msg("no accumulators in registers:\n%s", src);
    static float a[M * K], bm[K * N], y[M * N];
    tt_rng g;
    tt_rng_seed(&g, tt_seed(5));
    tt_fill_f32(&g, a, M * K);
    tt_fill_f32(&g, bm, K * N);
    tt_poison_f32(y, M * N);
    assert_int_equal(te_module_run(m, (void *[]){a, bm, y}), TE_OK);
    double *want = malloc(sizeof(double) * M * N);
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *const[]){a, bm},
                                       1, &Y, &want),
                     TE_OK);
    double err = tt_max_rel_err_f32(y, want, M * N);
    printf("matmul, accumulators in registers: max relative error %.3g\n", err);
    assert_true(err < 1e-5);
    free(want);
    te_module_free(m);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accumulators_move_to_a_local_buffer),
        cmocka_unit_test(test_what_stays_in_memory),
        cmocka_unit_test(test_matmul_accumulates_in_registers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
