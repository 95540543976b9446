/* Tests of the GPU check: a kernel within the limits passes unchanged; threads per block (along
 * one axis and in total), grid size, shared memory per block (at and just over 48 KiB), block
 * loops that are not outermost or not constant, two loops on one index, unbound stages and
 * statements outside the bound loops are errors naming the stage, the loop and the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

#define I(v) te_int(c, (v))

typedef struct kctx {
    te_ctx *c;
    te_buf *B;
} kctx;

static kctx kinit(void)
{
    kctx k;
    k.c = te_ctx_create();
    k.B = te__buf_new(k.c, "B", TE_F32, 1, (int64_t[]){1 << 20}, TE_SCOPE_GLOBAL);
    return k;
}

static te_stmt *st(kctx *k, te_expr *i) { return te__store(k->c, k->B, 1, &i, te_f32(k->c, 1)); }

/* "compute C" then the kernel, as the loop nests give it */
static te_stmt *staged(kctx *k, te_stmt *kernel)
{
    return te__seq2(k->c, te__comment(k->c, "compute C"), kernel);
}

/* Runs the check; returns the message, or NULL when it passes (the statement unchanged). */
static const char *check(kctx *k, te_stmt *s)
{
    te_target tgt = te_target_cuda(90);
    te__pass_ctx pc = {.ctx = k->c, .target = &tgt};
    te_ctx_clear_error(k->c);
    te_stmt *r = te__pass_gpu_check(&pc, s);
    if (r) {
        assert_ptr_equal(r, s);
        return NULL;
    }
    assert_int_equal(te_ctx_errcode(k->c), TE_ERR_SCHEDULE);
    return te_ctx_errmsg(k->c);
}

static void expect(const char *msg, const char *part)
{
    if (!msg)
        fail_msg("passed; want an error with \"%s\"", part);
    if (!strstr(msg, part))
        fail_msg("error \"%s\" lacks \"%s\"", msg, part);
}

static void test_gpu_check_accepts_a_kernel_within_the_limits(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 65535), *ty = te__loop_var(c, "ty", 32),
            *tx = te__loop_var(c, "tx", 32);
    te_buf *S = te__buf_new(c, "S", TE_F32, 1, (int64_t[]){12288}, TE_SCOPE_SHARED); /* 48 KiB */
    te_stmt *kern =
        gt_bound(c, bx, 65535, TE_BLOCK_X,
                 te__alloc_stmt(c, S,
                                gt_bound(c, ty, 32, TE_THREAD_Y,
                                         gt_bound(c, tx, 32, TE_THREAD_X,
                                                  st(&k, te_add(c, te_mul(c, ty, I(32)), tx))))));
    assert_null(check(&k, staged(&k, kern)));
    te_ctx_free(c);
}

static void test_gpu_check_rejects_too_many_threads_naming_the_loop_and_limit(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 4), *tx = te__loop_var(c, "j_i", 2048);
    const char *msg = check(
        &k,
        staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X, gt_bound(c, tx, 2048, TE_THREAD_X, st(&k, tx)))));
    expect(msg, "stage 'C'");
    expect(msg, "loop 'j_i'");
    expect(msg, "2048 threads along threadIdx.x; a block allows at most 1024");
    /* threadIdx.z allows 64 */
    te_expr *tz = te__loop_var(c, "tz", 65);
    msg = check(&k, staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X,
                                        gt_bound(c, tz, 65, TE_THREAD_Z, st(&k, tz)))));
    expect(msg, "loop 'tz'");
    expect(msg, "65 threads along threadIdx.z; a block allows at most 64");
    te_expr *tz64 = te__loop_var(c, "tz", 64);
    assert_null(check(&k, staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X,
                                              gt_bound(c, tz64, 64, TE_THREAD_Z, st(&k, tz64))))));
    te_ctx_free(c);
}

static void test_gpu_check_rejects_too_many_threads_per_block_naming_the_loops(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 4), *ty = te__loop_var(c, "ii", 32),
            *tx = te__loop_var(c, "ji", 64);
    /* each axis is within its limit, the product is not */
    const char *msg = check(
        &k, staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X,
                                gt_bound(c, ty, 32, TE_THREAD_Y,
                                         gt_bound(c, tx, 64, TE_THREAD_X,
                                                  st(&k, te_add(c, te_mul(c, ty, I(64)), tx)))))));
    expect(msg, "64 x 32 x 1 = 2048 threads per block");
    expect(msg, "'ji' on threadIdx.x");
    expect(msg, "'ii' on threadIdx.y");
    expect(msg, "at most 1024");
    /* the block is the widest loop along each axis, even when the loops are siblings */
    te_expr *t1 = te__loop_var(c, "a", 1024), *t2 = te__loop_var(c, "b", 1024);
    assert_null(
        check(&k, staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X,
                                      te__seq2(c, gt_bound(c, t1, 1024, TE_THREAD_X, st(&k, t1)),
                                               gt_bound(c, t2, 1024, TE_THREAD_X, st(&k, t2)))))));
    te_ctx_free(c);
}

static void test_gpu_check_rejects_a_grid_too_large_naming_the_loop_and_limit(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *by = te__loop_var(c, "i_o", 65536), *tx = te__loop_var(c, "tx", 16);
    const char *msg = check(&k, staged(&k, gt_bound(c, by, 65536, TE_BLOCK_Y,
                                                    gt_bound(c, tx, 16, TE_THREAD_X, st(&k, tx)))));
    expect(msg,
           "loop 'i_o' bound to blockIdx.y has 65536 iterations; the grid allows at most 65535");
    te_ctx_free(c);
}

static void test_gpu_check_rejects_more_than_48k_of_shared_memory(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 2), *tx = te__loop_var(c, "tx", 32);
    /* two buffers: 12284 floats (49136 bytes) + 3 floats, rounded up to 16 bytes: 49152, the
     * limit; one more float is over it */
    for (int over = 0; over < 2; over++) {
        te_buf *S1 = te__buf_new(c, "S1", TE_F32, 1, (int64_t[]){12284}, TE_SCOPE_SHARED);
        te_buf *S2 = te__buf_new(c, "S2", TE_F32, 1, (int64_t[]){3 + over * 2}, TE_SCOPE_SHARED);
        te_stmt *kern = gt_bound(
            c, bx, 2, TE_BLOCK_X,
            te__alloc_stmt(c, S1,
                           te__alloc_stmt(c, S2, gt_bound(c, tx, 32, TE_THREAD_X, st(&k, tx)))));
        const char *msg = check(&k, staged(&k, kern));
        if (!over) {
            assert_null(msg);
        } else {
            expect(msg, "stage 'C'");
            expect(msg, "49168 bytes of shared memory per block; at most 49152 are allowed");
        }
    }
    te_ctx_free(c);
}

static void test_gpu_check_rejects_misplaced_block_loops_naming_the_loop(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 4), *by = te__loop_var(c, "by", 4),
            *tx = te__loop_var(c, "tx", 32), *i = te__loop_var(c, "i", 4);
    /* blockIdx inside a thread loop */
    const char *msg = check(&k, staged(&k, gt_bound(c, tx, 32, TE_THREAD_X,
                                                    gt_bound(c, by, 4, TE_BLOCK_Y, st(&k, by)))));
    expect(msg, "loop 'by' is bound to blockIdx.y but is nested inside other loops");
    /* two loops on blockIdx.x */
    te_expr *bx2 = te__loop_var(c, "bx2", 4);
    msg = check(&k, staged(&k, gt_bound(c, bx, 4, TE_BLOCK_X,
                                        gt_bound(c, bx2, 4, TE_BLOCK_X,
                                                 gt_bound(c, tx, 32, TE_THREAD_X, st(&k, tx))))));
    expect(msg, "two loops are bound to blockIdx.x ('bx2' is the second)");
    /* a block loop of non-constant extent */
    te_stmt *var = te__for(c, bx, I(0), te_var(c, "n", TE_I64), TE_FOR_THREAD,
                           gt_bound(c, tx, 32, TE_THREAD_X, st(&k, tx)));
    var->u.loop.thread_tag = TE_BLOCK_X;
    msg = check(&k, staged(&k, var));
    expect(msg, "loop 'bx' bound to blockIdx.x must start at 0 and have a constant extent");
    /* a serial loop around the kernel */
    msg = check(&k, staged(&k, te__for(c, i, I(0), I(4), TE_FOR_SERIAL,
                                       gt_bound(c, bx, 4, TE_BLOCK_X,
                                                gt_bound(c, tx, 32, TE_THREAD_X, st(&k, tx))))));
    expect(msg, "loop 'i' runs outside the loops bound to blockIdx/threadIdx");
    te_ctx_free(c);
}

static void test_gpu_check_rejects_a_stage_with_no_bound_loop_naming_the_stage(void **state)
{
    (void)state;
    kctx k = kinit();
    te_ctx *c = k.c;
    te_expr *bx = te__loop_var(c, "bx", 4), *tx = te__loop_var(c, "tx", 32),
            *i = te__loop_var(c, "i", 8);
    te_stmt *prog = te__seq(
        c, 4,
        (te_stmt *[]){te__comment(c, "compute C"),
                      gt_bound(c, bx, 4, TE_BLOCK_X, gt_bound(c, tx, 32, TE_THREAD_X, st(&k, tx))),
                      te__comment(c, "compute D"),
                      te__for(c, i, I(0), I(8), TE_FOR_SERIAL, st(&k, i))});
    const char *msg = check(&k, prog);
    expect(msg, "stage 'D' has no loop bound to a GPU block or thread");
    te_ctx_free(c);
}

static void test_gpu_check_on_lowered_matmul_schedules(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *A = te_placeholder(c, "A", TE_F32, 2, (int64_t[]){64, 32});
    te_tensor *B = te_placeholder(c, "B", TE_F32, 2, (int64_t[]){32, 64});
    te_tensor *C = te_op_matmul(c, A, B, 0, 0, "C");
    te_tensor *args[] = {A, B, C};
    te_target tgt = te_target_cuda(90);
    /* the matmul template passes */
    te_schedule *s = te_schedule_create(c, 1, &C);
    te_cuda_knobs kn = te_cuda_knobs_default("matmul");
    assert_int_equal(te_cuda_schedule_matmul(s, C, NULL, &kn), TE_OK);
    gt_lowering L = gt_lower_until(s, 3, args, &tgt, "gpu_check");
    assert_ptr_equal(te__pass_gpu_check(&L.pc, L.s), L.s);
    /* one thread per element of a 32 x 64 tile: 2048 threads */
    s = te_schedule_create(c, 1, &C);
    te_stage *sc = te_schedule_stage(s, C);
    te_iter *io, *jo, *ii, *ji;
    assert_int_equal(
        te_tile(sc, te_stage_axis(sc, 0), te_stage_axis(sc, 1), 32, 64, &io, &jo, &ii, &ji), TE_OK);
    te_bind(sc, io, TE_BLOCK_Y);
    te_bind(sc, jo, TE_BLOCK_X);
    te_bind(sc, ii, TE_THREAD_Y);
    te_bind(sc, ji, TE_THREAD_X);
    L = gt_lower_until(s, 3, args, &tgt, "gpu_check");
    assert_null(te__pass_gpu_check(&L.pc, L.s));
    const char *msg = te_ctx_errmsg(c);
    expect(msg, "stage 'C'");
    expect(msg, "2048 threads per block");
    expect(msg, "'i_i' on threadIdx.y");
    expect(msg, "'j_i' on threadIdx.x");
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_check_accepts_a_kernel_within_the_limits),
        cmocka_unit_test(test_gpu_check_rejects_too_many_threads_naming_the_loop_and_limit),
        cmocka_unit_test(test_gpu_check_rejects_too_many_threads_per_block_naming_the_loops),
        cmocka_unit_test(test_gpu_check_rejects_a_grid_too_large_naming_the_loop_and_limit),
        cmocka_unit_test(test_gpu_check_rejects_more_than_48k_of_shared_memory),
        cmocka_unit_test(test_gpu_check_rejects_misplaced_block_loops_naming_the_loop),
        cmocka_unit_test(test_gpu_check_rejects_a_stage_with_no_bound_loop_naming_the_stage),
        cmocka_unit_test(test_gpu_check_on_lowered_matmul_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
