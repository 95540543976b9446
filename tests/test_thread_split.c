/* Tests of thread split (GPU code on the CPU): without barriers thread loops just become serial
 * loops; with barriers the block body is cut at each barrier into loops over all threads, so a
 * two-phase block (write shared, barrier, read another thread's element) computes what the GPU
 * would. Checked against a direct computation with the pt interpreter, on random inputs with
 * poisoned outputs; per-thread buffers living across a barrier get one copy per thread; a
 * barrier under a thread-dependent condition is an error; a real GPU schedule lowered for the C
 * target matches te_reference_eval. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/ops.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

/* Runs s over A (random, n_a elements) and B (poisoned, n_b elements); returns B. */
static double *run(const te_stmt *s, te_buf *A, const double *a, int64_t n_a, te_buf *B,
                   int64_t n_b)
{
    double *b = malloc(sizeof(double) * (size_t)n_b);
    for (int64_t i = 0; i < n_b; i++)
        b[i] = NAN;
    pt_env env = {0};
    pt_add_buf(&env, A, (double *)a, n_a);
    pt_add_buf(&env, B, b, n_b);
    pt_exec(&env, s);
    assert_int_equal(env.err, 0);
    return b;
}

static double *random_input(int64_t n)
{
    tt_rng r;
    tt_rng_seed(&r, tt_seed(77));
    double *a = malloc(sizeof(double) * (size_t)n);
    tt_fill_f64(&r, a, (size_t)n);
    return a;
}

/* No thread loops or parallel loops are left, the outermost block loop is parallel. */
static bool no_thread_loops_fn(const te_stmt *s, void *user)
{
    int *bad = user;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD)
        (*bad)++;
    if (s->kind == TE_S_BARRIER)
        (*bad)++;
    return true;
}

static void assert_cpu_form(const te_stmt *s)
{
    int bad = 0;
    te__stmt_visit(s, no_thread_loops_fn, NULL, &bad);
    assert_int_equal(bad, 0);
}

static void test_thread_split_without_barrier_makes_thread_loops_serial(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){24}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){24}, TE_SCOPE_GLOBAL);
    te_expr *bx = te__loop_var(c, "bx", 3), *tx = te__loop_var(c, "tx", 8);
    te_expr *g = te_add(c, te_mul(c, bx, I(8)), tx);
    te_stmt *k = gt_bound(
        c, bx, 3, TE_BLOCK_X,
        gt_bound(c, tx, 8, TE_THREAD_X,
                 te__store(c, B, 1, &g, te_mul(c, te__load(c, A, 1, &g), te_const(c, TE_F64, 3)))));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_string_equal(txt, "parallel (bx, 0, 3) {\n"
                             "  for (tx, 0, 8) {\n"
                             "    B[((bx * 8) + tx)] = (A[((bx * 8) + tx)] * 3)\n"
                             "  }\n"
                             "}\n");
    free(txt);
    double *a = random_input(24);
    double *b = run(out, A, a, 24, B, 24);
    for (int i = 0; i < 24; i++)
        assert_true(b[i] == a[i] * 3);
    free(a);
    free(b);
    te_ctx_free(c);
}

/* bx(3) { alloc S[32]; tx(32) { S[tx] = A[bx*32 + tx] * 2; barrier; B[bx*32 + tx] = S[31 - tx]
 * + S[(tx + 1) % 32] } } */
static void test_thread_split_runs_two_phase_block_same_as_reference(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){96}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){96}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F64, 1, (int64_t[]){32}, TE_SCOPE_SHARED);
    te_expr *bx = te__loop_var(c, "bx", 3), *tx = te__loop_var(c, "tx", 32);
    te_expr *g = te_add(c, te_mul(c, bx, I(32)), tx);
    te_expr *r1 = te_sub(c, I(31), tx), *r2 = te_floormod(c, te_add(c, tx, I(1)), I(32));
    te_stmt *body = te__seq(
        c, 3,
        (te_stmt *[]){
            te__store(c, S, 1, &tx, te_mul(c, te__load(c, A, 1, &g), te_const(c, TE_F64, 2))),
            gt_barrier(c),
            te__store(c, B, 1, &g, te_add(c, te__load(c, S, 1, &r1), te__load(c, S, 1, &r2))),
        });
    te_stmt *k = gt_bound(c, bx, 3, TE_BLOCK_X,
                          te__alloc_stmt(c, S, gt_bound(c, tx, 32, TE_THREAD_X, body)));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    assert_cpu_form(out);
    /* the block body is two loops over the threads: before and after the barrier */
    assert_int_equal(out->u.loop.fkind, TE_FOR_PARALLEL);
    const te_stmt *blk = out->u.loop.body;
    assert_int_equal(blk->kind, TE_S_ALLOC);
    assert_int_equal(blk->u.alloc.body->kind, TE_S_SEQ);
    assert_int_equal(blk->u.alloc.body->u.seq.n, 2);
    double *a = random_input(96);
    double *b = run(out, A, a, 96, B, 96);
    for (int blkx = 0; blkx < 3; blkx++)
        for (int t = 0; t < 32; t++) {
            double want = 2 * a[blkx * 32 + 31 - t] + 2 * a[blkx * 32 + (t + 1) % 32];
            if (b[blkx * 32 + t] != want)
                fail_msg("B[%d] = %g, want %g", blkx * 32 + t, b[blkx * 32 + t], want);
        }
    /* Running the thread loop serially without the split reads elements of S that no thread
     * has written yet: the split is what makes it right. */
    double *naive = run(k, A, a, 96, B, 96);
    int differ = 0;
    for (int i = 0; i < 96; i++)
        differ += naive[i] != b[i];
    assert_true(differ > 0);
    free(naive);
    free(a);
    free(b);
    te_ctx_free(c);
}

static void test_thread_split_gives_locals_across_a_barrier_one_copy_per_thread(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_SHARED);
    te_buf *L = te__buf_new(c, "L", TE_F64, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    te_expr *tx = te__loop_var(c, "tx", 8);
    te_expr *z = I(0), *r = te_sub(c, I(7), tx);
    /* tx { alloc L[1]; L[0] = A[tx] * 3; S[tx] = L[0]; barrier; B[tx] = S[7 - tx] - L[0] } */
    te_stmt *body = te__alloc_stmt(
        c, L,
        te__seq(
            c, 4,
            (te_stmt *[]){
                te__store(c, L, 1, &z, te_mul(c, te__load(c, A, 1, &tx), te_const(c, TE_F64, 3))),
                te__store(c, S, 1, &tx, te__load(c, L, 1, &z)),
                gt_barrier(c),
                te__store(c, B, 1, &tx, te_sub(c, te__load(c, S, 1, &r), te__load(c, L, 1, &z))),
            }));
    te_stmt *k = te__alloc_stmt(c, S, gt_bound(c, tx, 8, TE_THREAD_X, body));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    assert_cpu_form(out);
    char *txt = pt_print(out);
    assert_non_null(strstr(txt, "allocate L[f64 x 8], local"));
    free(txt);
    double *a = random_input(8);
    double *b = run(out, A, a, 8, B, 8);
    for (int t = 0; t < 8; t++)
        assert_true(b[t] == 3 * a[7 - t] - 3 * a[t]);
    free(a);
    free(b);
    te_ctx_free(c);
}

static void test_thread_split_2d_block_and_narrow_thread_loop_guard(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F64, 1, (int64_t[]){32}, TE_SCOPE_SHARED);
    te_expr *ty = te__loop_var(c, "ty", 4), *tx = te__loop_var(c, "tx", 8);
    te_expr *ty2 = te__loop_var(c, "ty2", 4), *tx2 = te__loop_var(c, "tx2", 4);
    te_expr *bx = te__loop_var(c, "bx", 1);
    te_expr *lin = te_add(c, te_mul(c, ty, I(8)), tx);
    /* phase 1 (4 x 8 threads): S[ty*8 + tx] = A[ty*8 + tx]; phase 2, only tx2 < 4:
     * B[ty2*8 + tx2] = S[(3 - ty2)*8 + 7 - tx2] */
    te_expr *o = te_add(c, te_mul(c, ty2, I(8)), tx2);
    te_expr *src = te_add(c, te_mul(c, te_sub(c, I(3), ty2), I(8)), te_sub(c, I(7), tx2));
    /* one block: the kernel is the block loop (root-level thread loops are kernels each) */
    te_stmt *k = gt_bound(
        c, bx, 1, TE_BLOCK_X,
        te__alloc_stmt(
            c, S,
            te__seq(c, 3,
                    (te_stmt *[]){
                        gt_bound(c, ty, 4, TE_THREAD_Y,
                                 gt_bound(c, tx, 8, TE_THREAD_X,
                                          te__store(c, S, 1, &lin, te__load(c, A, 1, &lin)))),
                        gt_barrier(c),
                        gt_bound(c, ty2, 4, TE_THREAD_Y,
                                 gt_bound(c, tx2, 4, TE_THREAD_X,
                                          te__store(c, B, 1, &o, te__load(c, S, 1, &src)))),
                    })));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_cpu_form(out);
    assert_int_equal(pt_count(txt, "for (tx, 0, 8)"), 2);
    assert_int_equal(pt_count(txt, "for (ty, 0, 4)"), 2);
    assert_non_null(strstr(txt, "if ((tx < 4))")); /* the narrow loop became a guard */
    free(txt);
    double *a = random_input(32);
    double *b = run(out, A, a, 32, B, 32);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 8; x++) {
            if (x < 4)
                assert_true(b[y * 8 + x] == a[(3 - y) * 8 + 7 - x]);
            else
                assert_true(isnan(b[y * 8 + x])); /* not written */
        }
    free(a);
    free(b);
    te_ctx_free(c);
}

static void test_thread_split_serial_loop_with_barriers_stays_around_the_pieces(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_SHARED);
    te_expr *tx = te__loop_var(c, "tx", 8), *ko = te__loop_var(c, "ko", 4);
    te_expr *g = te_add(c, te_mul(c, ko, I(8)), tx), *r = te_sub(c, I(7), tx);
    /* B[tx] = 0; for ko { S[tx] = A[ko*8 + tx]; barrier; B[tx] += S[7 - tx]; barrier } */
    te_stmt *it =
        te__seq(c, 4,
                (te_stmt *[]){te__store(c, S, 1, &tx, te__load(c, A, 1, &g)), gt_barrier(c),
                              te__store(c, B, 1, &tx,
                                        te_add(c, te__load(c, B, 1, &tx), te__load(c, S, 1, &r))),
                              gt_barrier(c)});
    te_stmt *k =
        te__alloc_stmt(c, S,
                       gt_bound(c, tx, 8, TE_THREAD_X,
                                te__seq2(c, te__store(c, B, 1, &tx, te_const(c, TE_F64, 0)),
                                         te__for(c, ko, I(0), I(4), TE_FOR_SERIAL, it))));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    assert_cpu_form(out);
    /* as the pipeline does next: loops over threadIdx.y/z of extent 1 go */
    char *txt = pt_print(te__pass_simplify(TE_PC(c), out));
    assert_string_equal(txt, "allocate S[f64 x 8], shared\n"
                             "for (tx, 0, 8) {\n"
                             "  B[tx] = 0\n"
                             "}\n"
                             "for (ko, 0, 4) {\n"
                             "  for (tx, 0, 8) {\n"
                             "    S[tx] = A[((ko * 8) + tx)]\n"
                             "  }\n"
                             "  for (tx, 0, 8) {\n"
                             "    B[tx] = (B[tx] + S[(7 - tx)])\n"
                             "  }\n"
                             "}\n");
    free(txt);
    double *a = random_input(32);
    double *b = run(out, A, a, 32, B, 8);
    for (int t = 0; t < 8; t++) {
        double want = 0;
        for (int kk = 0; kk < 4; kk++)
            want += a[kk * 8 + 7 - t];
        assert_true(b[t] == want);
    }
    free(a);
    free(b);
    te_ctx_free(c);
}

static void test_thread_split_barrier_under_a_thread_dependent_condition_is_an_error(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    te_expr *tx = te__loop_var(c, "tx", 8), *j = te__loop_var(c, "j", 8);
    te_stmt *st = te__store(c, B, 1, &tx, te_const(c, TE_F64, 1));
    te_stmt *k = gt_bound(
        c, tx, 8, TE_THREAD_X,
        te__if(c, te_lt(c, tx, I(4)), te__seq2(c, st, te__seq2(c, gt_barrier(c), st)), NULL));
    assert_null(te__pass_thread_split(TE_PC(c), k));
    assert_non_null(strstr(te_ctx_errmsg(c), "inside a condition that depends on the thread"));
    te_ctx_clear_error(c);
    /* a loop with a barrier whose trip count depends on the thread */
    te_stmt *k2 = gt_bound(
        c, tx, 8, TE_THREAD_X,
        te__for(c, j, I(0), tx, TE_FOR_SERIAL, te__seq2(c, st, te__seq2(c, gt_barrier(c), st))));
    assert_null(te__pass_thread_split(TE_PC(c), k2));
    assert_non_null(strstr(te_ctx_errmsg(c), "bounds that depend on the thread"));
    te_ctx_free(c);
}

static void test_thread_split_substitutes_thread_dependent_lets(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F64, 1, (int64_t[]){16}, TE_SCOPE_SHARED);
    te_expr *tx = te__loop_var(c, "tx", 16);
    te_expr *v = te_var(c, "v", TE_I64);
    te_expr *r = te_sub(c, I(15), v);
    /* tx { let v = tx; S[v] = A[v]; barrier; B[v] = S[15 - v] }: v is per thread, so each
     * piece recomputes it */
    te_stmt *k = te__alloc_stmt(
        c, S,
        gt_bound(c, tx, 16, TE_THREAD_X,
                 te__let(c, v, tx,
                         te__seq(c, 3,
                                 (te_stmt *[]){te__store(c, S, 1, &v, te__load(c, A, 1, &v)),
                                               gt_barrier(c),
                                               te__store(c, B, 1, &v, te__load(c, S, 1, &r))}))));
    te_stmt *out = te__pass_thread_split(TE_PC(c), k);
    assert_non_null(out);
    assert_cpu_form(out);
    double *a = random_input(16);
    double *b = run(out, A, a, 16, B, 16);
    for (int t = 0; t < 16; t++)
        assert_true(b[t] == a[15 - t]);
    free(a);
    free(b);
    te_ctx_free(c);
}

/* A real GPU schedule: Y[i, j] = X[i, j] * 2 + X[i, 63 - j] with X's rows staged in shared
 * memory at the block loop, the copy and the compute bound to threads. */
static te_schedule *staged_schedule(te_ctx *c, te_tensor **X, te_tensor **Y)
{
    *X = te_placeholder(c, "X", TE_F32, 2, (int64_t[]){6, 64});
    te_expr *i = te_axis(c, "i", 6), *j = te_axis(c, "j", 64);
    te_expr *a = te_read(c, *X, 2, (te_expr *[]){i, j});
    te_expr *b = te_read(c, *X, 2, (te_expr *[]){i, te_sub(c, te_int(c, 63), j)});
    *Y = te_compute(c, "Y", 2, (te_expr *[]){i, j}, te_add(c, te_mul(c, a, te_f32(c, 2)), b));
    assert_non_null(*Y);
    te_schedule *s = te_schedule_create(c, 1, Y);
    te_stage *sy = te_schedule_stage(s, *Y);
    te_tensor *XS = te_cache_read(s, *X, TE_SCOPE_SHARED, 1, &sy);
    assert_non_null(XS);
    te_stage *sx = te_schedule_stage(s, XS);
    assert_int_equal(te_bind(sy, te_stage_axis(sy, 0), TE_BLOCK_X), TE_OK);
    assert_int_equal(te_bind(sy, te_stage_axis(sy, 1), TE_THREAD_X), TE_OK);
    assert_int_equal(te_compute_at(sx, sy, te_stage_axis(sy, 0)), TE_OK);
    assert_int_equal(te_bind(sx, te_stage_axis(sx, 1), TE_THREAD_X), TE_OK);
    return s;
}

static void test_thread_split_of_a_lowered_shared_memory_schedule(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X, *Y;
    te_schedule *s = staged_schedule(c, &X, &Y);
    te_target host = te_target_host();
    gt_lowering L = gt_lower_until(s, 2, (te_tensor *[]){X, Y}, &host, "thread_split");
    assert_int_equal(gt_count_kind(L.s, TE_S_BARRIER), 1);
    te_stmt *out = te__pass_thread_split(&L.pc, L.s);
    assert_non_null(out);
    assert_cpu_form(out);
    te_buf *XB = L.pc.arg_bufs[0], *YB = L.pc.arg_bufs[1];
    double *x = random_input(6 * 64);
    double *y = run(out, XB, x, 6 * 64, YB, 6 * 64);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 64; j++) {
            double want = (double)((float)x[i * 64 + j] * 2.0f + (float)x[i * 64 + 63 - j]);
            double got = y[i * 64 + j];
            if (!(fabs(got - want) <= 1e-6))
                fail_msg("Y[%d, %d] = %g, want %g", i, j, got, want);
        }
    free(x);
    free(y);
    te_ctx_free(c);
}

static void test_thread_split_built_for_the_c_target_matches_the_reference(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X, *Y;
    te_schedule *s = staged_schedule(c, &X, &Y);
    te_target host = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 2, (te_tensor *[]){X, Y}, "staged", &host, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(c));
    float x[6 * 64], y[6 * 64];
    double ref[6 * 64];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(5));
    tt_fill_f32(&r, x, 6 * 64);
    tt_poison_f32(y, 6 * 64);
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    assert_int_equal(
        te_reference_eval(c, 1, &X, (const void *const[]){x}, 1, &Y, (double *[]){ref}), TE_OK);
    assert_true(tt_max_rel_err_f32(y, ref, 6 * 64) <= 1e-6);
    te_module_free(m);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_split_without_barrier_makes_thread_loops_serial),
        cmocka_unit_test(test_thread_split_runs_two_phase_block_same_as_reference),
        cmocka_unit_test(test_thread_split_gives_locals_across_a_barrier_one_copy_per_thread),
        cmocka_unit_test(test_thread_split_2d_block_and_narrow_thread_loop_guard),
        cmocka_unit_test(test_thread_split_serial_loop_with_barriers_stays_around_the_pieces),
        cmocka_unit_test(test_thread_split_barrier_under_a_thread_dependent_condition_is_an_error),
        cmocka_unit_test(test_thread_split_substitutes_thread_dependent_lets),
        cmocka_unit_test(test_thread_split_of_a_lowered_shared_memory_schedule),
        cmocka_unit_test(test_thread_split_built_for_the_c_target_matches_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
